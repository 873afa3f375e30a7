"""Logging: a ring of recent lines as mongod's structured JSON for getLog, and lines that a writer
thread puts on stderr or the --logpath file (readable text, or with --logFormat json the same JSON
lines), fed by a bounded queue so that no thread that logs (the event loop above all) ever waits on
a slow or stuck reader of the log."""

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
import traceback
from typing import Any, Literal, Protocol, TextIO

from bson import json_util

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
    "ebbdb.index": "INDEX",
    "ebbdb.access": "ACCESS",
}
#: mongod's debug severities D1 to D5, as logging levels just under DEBUG (D1 is DEBUG itself).
MAX_VERBOSITY = 5
_SEVERITY = {
    logging.INFO: "I",
    logging.WARNING: "W",
    logging.ERROR: "E",
    logging.CRITICAL: "F",
    **{logging.DEBUG + 1 - n: f"D{n}" for n in range(1, MAX_VERBOSITY + 1)},
}
LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
#: Attribute values mongod writes as relaxed extended JSON ({"$oid": ...}, {"$date": ...}).
_JSON_OPTIONS = json_util.RELAXED_JSON_OPTIONS
#: mongod's maxLogSizeKB (10 KB): a longer string attribute is truncated in the line, which then
#: says so in `truncated` and `size`.
MAX_ATTRIBUTE_BYTES = 10 * 1024
#: The most of a string a client chose (a user name, a driver's name) a line shows: so that a
#: request of a client not logged in adds about 1 KB to the log at most.
CLIENT_STRING_BYTES = 256
#: Control characters in the text log as the JSON log writes them (`\n`, `\u001b`, ...): no
#: value can start a line of its own.
_CONTROLS = {
    **{c: f"\\u{c:04x}" for c in (*range(0x20), 0x7F)},
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
    ord("\b"): "\\b",
    ord("\f"): "\\f",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def escape_controls(text: str) -> str:
    """`text` with its control characters (and the Unicode line and paragraph separators)
    written as JSON escapes them."""
    return text.translate(_CONTROLS) if not text.isprintable() else text


def clip(text: str, limit: int = CLIENT_STRING_BYTES) -> str:
    """`text` cut to about `limit` UTF-8 bytes, saying how long it was: `abc...(1048576 bytes)`."""
    if len(text) <= limit // 4:  # (no character takes more than 4 bytes)
        return text
    size = len(text.encode("utf-8", "surrogatepass"))
    if size <= limit:
        return text
    cut = text.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore")
    return f"{cut}...({size} bytes)"


def _truncated(attr: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The attributes with every string past MAX_ATTRIBUTE_BYTES cut there, and what mongod's
    line adds when it truncates ({"truncated": {name: {"type": "string", "size": n}}, "size":
    {name: n}}; empty when nothing was cut)."""
    cut: dict[str, Any] = {}
    sizes: dict[str, int] = {}
    for name, value in attr.items():
        if type(value) is str and len(value) > MAX_ATTRIBUTE_BYTES // 4:
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > MAX_ATTRIBUTE_BYTES:
                raw = value.encode("utf-8", "surrogatepass")[:MAX_ATTRIBUTE_BYTES]
                attr[name] = raw.decode("utf-8", "ignore")
                cut[name] = {"type": "string", "size": size}
                sizes[name] = size
    return attr, ({"truncated": cut, "size": sizes} if cut else {})


def debug_level(n: int) -> int:
    """The logging level of mongod's debug severity D<n> (1 to 5)."""
    return logging.DEBUG + 1 - max(1, min(n, MAX_VERBOSITY))


def verbosity_level(verbosity: int) -> int:
    """The lowest level logged at a verbosity (-v is 1, -vv 2, ...): INFO at 0, else D<verbosity>."""
    return logging.INFO if verbosity <= 0 else debug_level(verbosity)


class Event:
    """What mongod's structured line says beyond the readable text: the message id, mongod's
    constant message, the attributes and the context (`conn12`, `listener`). Passed to a logging
    call as `extra={"event": Event(...)}`; the readable text is the call's own message."""

    __slots__ = ("attr", "ctx", "id", "msg")

    def __init__(
        self, id: int, msg: str, attr: dict[str, Any] | None = None, ctx: str | None = None
    ) -> None:
        self.id = id
        self.msg = msg
        self.attr = attr
        self.ctx = ctx


def log_event(
    logger: logging.Logger,
    level: int,
    id: int,
    msg: str,
    attr: dict[str, Any] | None = None,
    *,
    ctx: str | None = None,
    text: str | None = None,
) -> None:
    """Log one of mongod's structured lines; `text` is the readable form (default: `msg`)."""
    if logger.isEnabledFor(level):
        logger.log(level, text or msg, extra={"event": Event(id, msg, attr, ctx)})


def _timestamp(record: logging.LogRecord) -> str:
    t = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _severity(levelno: int) -> str:
    found = _SEVERITY.get(levelno)
    if found is not None:
        return found
    return "I" if levelno > logging.DEBUG else f"D{MAX_VERBOSITY}"


def _ctx(record: logging.LogRecord, event: Event | None) -> str | None:
    """The line's context: the event's, else the `[conn12]` a message starts with, else None."""
    if event is not None and event.ctx:
        return event.ctx
    msg = record.msg
    if isinstance(msg, str) and msg.startswith("[conn"):
        end = msg.find("]")
        if end > 0:
            return msg[1:end]
    return None


def as_json(record: logging.LogRecord) -> str:
    """The record as mongod's structured line: t, s, c, id, ctx, msg and attr (when it has any).
    Computed once per record (the ring and a JSON log share it)."""
    cached: str | None = record.__dict__.get("_ebbdb_json")
    if cached is not None:
        return cached
    event: Event | None = record.__dict__.get("event")
    entry: dict[str, Any] = {
        "t": {"$date": _timestamp(record)},
        "s": _severity(record.levelno),
        "c": _COMPONENTS.get(record.name, "-"),
        "id": event.id if event is not None else 0,
        "ctx": _ctx(record, event) or (record.threadName or "main"),
        "msg": event.msg if event is not None else record.getMessage(),
    }
    attr = dict(event.attr) if event is not None and event.attr else {}
    if record.exc_info:
        attr["error"] = logging.Formatter().formatException(record.exc_info)
    if attr:
        entry["attr"], truncated = _truncated(attr)
        entry.update(truncated)
        line = json_util.dumps(entry, json_options=_JSON_OPTIONS, separators=(",", ":"))
    else:
        line = json.dumps(entry, separators=(",", ":"))
    record.__dict__["_ebbdb_json"] = line
    return line


class RingHandler(logging.Handler):
    """Keeps the last RING_SIZE records as JSON lines (what getLog serves); `startup_warnings`
    keeps warnings logged during startup, `total` counts every line ever kept."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: collections.deque[str] = collections.deque(maxlen=RING_SIZE)
        self.startup_warnings: list[str] = []
        self.starting = True
        self.total = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = as_json(record)
        except Exception:  # a bad log call must never break the server
            return
        self.lines.append(line)
        self.total += 1
        if self.starting and record.levelno >= logging.WARNING:
            self.startup_warnings.append(line)


class _TextFormatter(logging.Formatter):
    """Readable lines: time, severity, component, `[context]` where known, and the message, with
    its control characters escaped (a value with a newline cannot forge a line), cut at
    MAX_ATTRIBUTE_BYTES."""

    def format(self, record: logging.LogRecord) -> str:
        event: Event | None = record.__dict__.get("event")
        message = clip(escape_controls(record.getMessage()), MAX_ATTRIBUTE_BYTES)
        ctx = event.ctx if event is not None else None
        if ctx and not message.startswith("["):
            message = f"[{ctx}] {message}"
        text = (
            f"{_timestamp(record)} {_severity(record.levelno)} "
            f"{_COMPONENTS.get(record.name, '-'):<8} {message}"
        )
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text

    def formatException(self, ei: Any) -> str:
        """The traceback on lines of its own, as Python writes it, but for the exceptions' own
        messages: their control characters are escaped (a message may carry a client's text)."""
        parts = []
        for part in traceback.TracebackException(*ei).format():
            # Python's own lines: headers, frames (indented), chaining separators.
            if part[:1].isspace() or part.startswith("Traceback (most recent call last)"):
                parts.append(part)
            else:
                parts.append(escape_controls(clip(part.rstrip("\n"), MAX_ATTRIBUTE_BYTES)) + "\n")
        return "".join(parts).rstrip("\n")


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return as_json(record)


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


#: What --quiet leaves out, as mongod does: connections accepted, refused and ended, and the
#: client metadata line.
QUIET_IDS = frozenset({22942, 22943, 22944, 51800})


def _not_a_connection_event(record: logging.LogRecord) -> bool:
    if record.levelno >= logging.WARNING or record.name != "ebbdb.network":
        return True
    event: Event | None = record.__dict__.get("event")
    return event is not None and event.id not in QUIET_IDS


#: The event loop's own logger: its warnings (an exception in a callback) would otherwise go to
#: logging's last-resort handler, which writes to sys.stderr on the loop's thread.
_LOOP_LOGGER = "asyncio"


#: The level each attached set of handlers logs at (one entry per `setup` not yet detached): the
#: `ebbdb` logger lets through what the most verbose of them wants, each handler filters for itself.
_ATTACHED_LEVELS: list[int] = []


def _set_logger_level() -> None:
    level = min(_ATTACHED_LEVELS, default=logging.INFO)
    logging.getLogger("ebbdb").setLevel(min(level, logging.INFO))


def setup(
    quiet: bool,
    ring: RingHandler,
    logpath: str | None = None,
    logappend: bool = False,
    sink: Sink | None = None,
    verbosity: int = 0,
    log_format: LogFormat = "text",
) -> list[logging.Handler]:
    """Attach the ring and a QueuedHandler writing to `sink` (default: the --logpath file, else
    stderr) to the `ebbdb` logger, and the QueuedHandler to the `asyncio` logger too. Both log at
    `verbosity` (0: INFO and up; 1 to 5: down to D1..D5); the writer writes readable text, or the
    ring's JSON lines with `log_format="json"`. Returns the handlers attached, for `detach`.
    Raises LogFileError when `logpath` cannot be opened; nothing is attached then."""
    if sink is None:
        sink = open_log_file(logpath, logappend) if logpath else stderr_sink()
    level = verbosity_level(verbosity)
    text = QueuedHandler(sink)
    text.setFormatter(_JsonFormatter() if log_format == "json" else _TextFormatter())
    text.setLevel(level)
    ring.setLevel(level)
    if quiet:
        text.addFilter(_not_a_connection_event)
    text.start()
    logger = logging.getLogger("ebbdb")
    _ATTACHED_LEVELS.append(level)
    _set_logger_level()
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
            if h.level in _ATTACHED_LEVELS:
                _ATTACHED_LEVELS.remove(h.level)
                _set_logger_level()
            h.close()
