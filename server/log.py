"""Logging: readable lines on stderr, and a ring of recent lines as MongoDB-style JSON for getLog."""

from __future__ import annotations

import collections
import datetime
import json
import logging
import sys

RING_SIZE = 1024
_COMPONENTS = {
    "ebbdb.network": "NETWORK",
    "ebbdb.command": "COMMAND",
    "ebbdb.storage": "STORAGE",
    "ebbdb.control": "CONTROL",
    "ebbdb.ttl": "INDEX",
}
_SEVERITY = {
    logging.DEBUG: "D1",
    logging.INFO: "I",
    logging.WARNING: "W",
    logging.ERROR: "E",
    logging.CRITICAL: "F",
}


def _timestamp(record: logging.LogRecord) -> str:
    t = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def as_json(record: logging.LogRecord) -> str:
    entry = {
        "t": {"$date": _timestamp(record)},
        "s": _SEVERITY.get(record.levelno, "I"),
        "c": _COMPONENTS.get(record.name, "-"),
        "id": 0,
        "ctx": record.threadName or "main",
        "msg": record.getMessage(),
    }
    return json.dumps(entry, separators=(",", ":"))


class RingHandler(logging.Handler):
    """Keeps the last RING_SIZE records; `startup_warnings` keeps warnings logged during startup."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: collections.deque[str] = collections.deque(maxlen=RING_SIZE)
        self.startup_warnings: list[str] = []
        self.starting = True

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = as_json(record)
        except Exception:  # a bad log call must never break the server
            return
        self.lines.append(line)
        if self.starting and record.levelno >= logging.WARNING:
            self.startup_warnings.append(line)


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = (
            f"{_timestamp(record)} {_SEVERITY.get(record.levelno, 'I')} "
            f"{_COMPONENTS.get(record.name, '-'):<8} {record.getMessage()}"
        )
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def setup(quiet: bool, ring: RingHandler, stream: object = None) -> list[logging.Handler]:
    """Attach the ring and a stderr handler to the `ebbdb` logger; returns the handlers attached."""
    logger = logging.getLogger("ebbdb")
    logger.setLevel(logging.INFO)
    console = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    console.setFormatter(_TextFormatter())
    if quiet:
        console.addFilter(lambda r: r.levelno >= logging.WARNING or r.name != "ebbdb.network")
    logger.addHandler(console)
    logger.addHandler(ring)
    return [console, ring]
