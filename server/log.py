"""Logging: a ring of recent lines as MongoDB-style JSON for getLog, and readable lines that a writer
thread puts on stderr or the --logpath file, fed by a bounded queue so that no thread that logs (the
event loop above all) ever waits on a slow or stuck reader of the log."""

from __future__ import annotations

import collections
import contextlib
import datetime
import json
import logging
import os
import queue
import sys
import threading
import time
from typing import Protocol, TextIO

RING_SIZE = 1024
#: Lines waiting for the writer thread; past this, lines are dropped (and counted), never waited for.
QUEUE_SIZE = 10_000
#: How long stopping waits for the writer to drain before leaving it (a daemon thread) behind.
STOP_TIMEOUT = 1.0
#: Lines the writer joins into one write.
_BATCH = 256
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


# -- where the lines go ----------------------------------------------------------------------------


class LogFileError(Exception):
    """--logpath cannot be opened, or the file already there cannot be renamed aside."""


class Sink(Protocol):
    """Where the writer thread puts text. Only that thread calls `write`, which may block."""

    def write(self, text: str) -> None: ...

    def close(self) -> None: ...


class FdSink:
    """Writes to a file descriptor with os.write. No Python lock is held while a write blocks, so a
    writer stuck on a full pipe wedges neither sys.stderr nor interpreter exit (a daemon thread
    blocked inside a buffered file object would)."""

    def __init__(self, fd: int, owned: bool) -> None:
        self.fd = fd
        self.owned = owned

    def write(self, text: str) -> None:
        data = memoryview(text.encode("utf-8", "backslashreplace"))
        while data:
            data = data[os.write(self.fd, data) :]

    def close(self) -> None:
        if self.owned:
            self.owned = False
            os.close(self.fd)


class StreamSink:
    """Writes to a text stream that has no descriptor (a test harness's capture of stderr)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def close(self) -> None:
        pass


def stderr_sink() -> Sink:
    try:
        return FdSink(sys.stderr.fileno(), owned=False)
    except (AttributeError, OSError, ValueError):
        return StreamSink(sys.stderr)


def rotated_name(path: str, now: datetime.datetime) -> str:
    """Where mongod moves an old log aside: `<path>.<YYYY-MM-DDTHH-MM-SS>` (here in UTC, as the log
    lines are), with `-1`, `-2`, ... added when that name is taken (two starts in one second)."""
    base = f"{path}.{now.astimezone(datetime.UTC).strftime('%Y-%m-%dT%H-%M-%S')}"
    target, n = base, 0
    while os.path.lexists(target):
        n += 1
        target = f"{base}-{n}"
    return target


def open_log_file(path: str, append: bool, now: datetime.datetime | None = None) -> FdSink:
    """Open --logpath for appending, creating it if missing. Without --logappend an existing file is
    first renamed aside (see rotated_name), as mongod does. Raises LogFileError with the reason."""
    if not append and os.path.isfile(path):
        target = rotated_name(path, now or datetime.datetime.now(datetime.UTC))
        try:
            os.rename(path, target)
        except OSError as exc:
            raise LogFileError(
                f"cannot rename the existing log file {path} to {target}: {exc.strerror or exc}"
            ) from exc
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
    except OSError as exc:
        raise LogFileError(f"cannot open log file {path}: {exc.strerror or exc}") from exc
    return FdSink(fd, owned=True)


# -- the queue and its writer thread ---------------------------------------------------------------


class QueuedHandler(logging.Handler):
    """Formats a record on the logging thread and hands the line to a writer thread through a
    bounded queue. `emit` never waits: with the queue full (the sink is stuck) the line is dropped
    and counted in `dropped`, and the writer says how many were lost, in one line, where the gap is.
    `start()` starts the writer; `close()` stops it, waiting at most `stop_timeout`."""

    def __init__(
        self, sink: Sink, capacity: int = QUEUE_SIZE, stop_timeout: float = STOP_TIMEOUT
    ) -> None:
        super().__init__()
        self.sink = sink
        self.stop_timeout = stop_timeout
        #: Lines dropped so far. Only emit (under the handler's lock) changes it.
        self.dropped = 0
        # Each entry carries the drop count when it was queued, so the writer sees the gaps;
        # a line of None tells the writer to stop.
        self._queue: queue.Queue[tuple[int, str | None]] = queue.Queue(capacity)
        self._thread = threading.Thread(target=self._run, name="ebbdb-log", daemon=True)
        self._closed = False

    def start(self) -> None:
        self._thread.start()

    @property
    def writer_alive(self) -> bool:
        return self._thread.is_alive()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # a bad log call must never break the server
            return
        try:
            self._queue.put_nowait((self.dropped, line))
        except queue.Full:
            self.dropped += 1

    def close(self) -> None:
        """Let the writer write what is queued and exit. A writer stuck on its sink is left behind
        after `stop_timeout` (it is a daemon thread) and its sink is not closed under it."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            deadline = time.monotonic() + self.stop_timeout
            with contextlib.suppress(queue.Full):
                self._queue.put((self.dropped, None), timeout=self.stop_timeout)
            self._thread.join(max(0.0, deadline - time.monotonic()))
        if not self._thread.is_alive():
            self.sink.close()
        super().close()

    def _run(self) -> None:
        reported = 0
        while True:
            batch = [self._queue.get()]
            while len(batch) < _BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            lines: list[str] = []
            stop = False
            for dropped, line in batch:
                if dropped > reported:
                    lines.append(self._dropped_line(dropped - reported))
                    reported = dropped
                if line is None:
                    stop = True
                    break
                lines.append(line)
            if lines:
                try:
                    self.sink.write("".join(f"{line}\n" for line in lines))
                except Exception:  # a closed or broken output loses lines, not the server
                    pass
            if stop:
                return

    def _dropped_line(self, n: int) -> str:
        record = logging.LogRecord(
            "ebbdb.control",
            logging.WARNING,
            __file__,
            0,
            "%d log lines dropped: the log output was not keeping up",
            (n,),
            None,
        )
        return self.format(record)


def _not_a_connection_event(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING or record.name != "ebbdb.network"


#: The event loop's own logger: its warnings (an exception in a callback) would otherwise go to
#: logging's last-resort handler, which writes to sys.stderr on the loop's thread.
_LOOP_LOGGER = "asyncio"


def setup(
    quiet: bool,
    ring: RingHandler,
    logpath: str | None = None,
    logappend: bool = False,
    sink: Sink | None = None,
) -> list[logging.Handler]:
    """Attach the ring and a QueuedHandler writing to `sink` (default: the --logpath file, else
    stderr) to the `ebbdb` logger, and the QueuedHandler to the `asyncio` logger too. Returns the
    handlers attached, for `detach`. Raises LogFileError when `logpath` cannot be opened; nothing
    is attached then."""
    if sink is None:
        sink = open_log_file(logpath, logappend) if logpath else stderr_sink()
    text = QueuedHandler(sink)
    text.setFormatter(_TextFormatter())
    if quiet:
        text.addFilter(_not_a_connection_event)
    text.start()
    logger = logging.getLogger("ebbdb")
    logger.setLevel(logging.INFO)
    logger.addHandler(text)
    logger.addHandler(ring)
    logging.getLogger(_LOOP_LOGGER).addHandler(text)
    return [text, ring]


def detach(handlers: list[logging.Handler]) -> None:
    """Undo `setup`: remove the handlers from the `ebbdb` and `asyncio` loggers, then stop the
    writer threads (each waits at most its stop_timeout). The ring is left open for getLog."""
    for name in ("ebbdb", _LOOP_LOGGER):
        logger = logging.getLogger(name)
        for h in handlers:
            logger.removeHandler(h)
    for h in handlers:
        if isinstance(h, QueuedHandler):
            h.close()
