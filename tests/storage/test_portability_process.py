"""storage/core/portability.py's process and processor readings (serverStatus' `mem`, hostInfo):
Linux's /proc first, then the portable fallbacks a system without /proc (macOS) or without the
resource module (Windows' Python, played by hiding it) takes."""

from __future__ import annotations

import builtins
import os
import platform
import sys
from typing import Any

import pytest

from ebbdb.storage.core import portability


@pytest.fixture
def no_proc(monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc cannot be opened, as on macOS and Windows."""
    real_open = builtins.open

    def refuse_proc(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).startswith("/proc/"):
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", refuse_proc)


def test_process_memory_from_proc() -> None:
    memory = portability.process_memory()
    assert memory is not None
    resident, virtual = memory
    assert 0 < resident <= virtual
    assert resident % os.sysconf("SC_PAGE_SIZE") == 0


@pytest.mark.usefixtures("no_proc")
def test_without_proc_the_peak_resident_size_stands_for_both() -> None:
    import resource

    memory = portability.process_memory()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = peak if sys.platform == "darwin" else peak * 1024
    # The peak read afterwards: it can only have grown meanwhile.
    assert memory is not None and memory[0] == memory[1] and 0 < memory[0] <= peak


@pytest.mark.usefixtures("no_proc")
def test_without_proc_or_resource_nothing_is_known(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "resource", None)  # import resource raises ImportError
    assert portability.process_memory() is None
    assert portability.max_open_files() is None
    assert portability.cpu_details() is None
    assert portability.kernel_version().startswith(platform.system())


def test_kernel_version_from_proc() -> None:
    assert portability.kernel_version().startswith(f"Linux version {platform.release()}")


def test_cpu_details_from_proc() -> None:
    details = portability.cpu_details()
    assert details is not None
    assert set(details) == {"physicalCores", "sockets", "frequencyMHz", "features"}
    assert 1 <= int(details["physicalCores"]) <= (os.cpu_count() or 1)
    assert int(details["sockets"]) >= 1
