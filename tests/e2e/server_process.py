"""A server process's memory, read from Linux's /proc, for tests that measure what the server
holds apart from what the test holds (the process itself: tests/e2e/test_cli.py's ServerProcess):
its resident set now and at its peak, and the peak reset by writing 5 to /proc/<pid>/clear_refs."""

from __future__ import annotations

import re
from pathlib import Path


def _status(pid: int, field: str) -> int:
    """A figure of /proc/<pid>/status, in bytes."""
    text = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    assert match is not None, f"no {field} in /proc/{pid}/status"
    return int(match.group(1)) * 1024


def rss(pid: int) -> int:
    """The process's resident set now."""
    return _status(pid, "VmRSS")


def peak_rss(pid: int) -> int:
    """The most the process's resident set has been since its start, or since `reset_peak`."""
    return _status(pid, "VmHWM")


def reset_peak(pid: int) -> None:
    """Make the process's peak resident set its resident set now."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")
