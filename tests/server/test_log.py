"""server/log.py without sockets: the queued handler never waits on a stuck sink, counts and reports
what it drops, stops within its bound, and the --logpath file is appended to or renamed aside as
mongod does; lines have mongod's structured shape and severities, -v lets debug lines through,
--logFormat json writes what getLog serves, and --quiet leaves out only connection events."""

from __future__ import annotations

import datetime
import json
import logging
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ebbdb.server import log as logsetup

WAIT = 5.0


class BlockingSink:
    """Collects what is written; each write waits until `release` is set (a pipe nobody reads)."""

    def __init__(self, blocked: bool = True) -> None:
        self.release = threading.Event()
        if not blocked:
            self.release.set()
        self.entered = threading.Event()
        self.texts: list[str] = []
        self.closed = False
        self._changed = threading.Condition()

    def write(self, text: str) -> None:
        self.entered.set()
        self.release.wait()
        with self._changed:
            self.texts.append(text)
            self._changed.notify_all()

    def close(self) -> None:
        self.closed = True

    @property
    def lines(self) -> list[str]:
        return "".join(self.texts).splitlines()

    def wait_for(self, n: int) -> list[str]:
        """The lines written once there are at least `n` of them."""
        with self._changed:
            assert self._changed.wait_for(lambda: len(self.lines) >= n, WAIT), self.lines
        return self.lines


def _record(msg: str, name: str = "ebbdb.network", level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 0, msg, (), None)


@pytest.fixture
def handlers() -> Iterator[list[logsetup.QueuedHandler]]:
    """Queued handlers made by a test; closed (and released) at the end whatever happens."""
    made: list[logsetup.QueuedHandler] = []
    yield made
    for h in made:
        sink = h.sink
        if isinstance(sink, BlockingSink):
            sink.release.set()
        h.close()


def _handler(
    made: list[logsetup.QueuedHandler], sink: logsetup.Sink, capacity: int = 10
) -> logsetup.QueuedHandler:
    h = logsetup.QueuedHandler(sink, capacity=capacity, stop_timeout=0.2)
    h.setFormatter(logging.Formatter("%(message)s"))
    made.append(h)
    h.start()
    return h


def _stuck_on_first(
    made: list[logsetup.QueuedHandler], capacity: int
) -> tuple[BlockingSink, logsetup.QueuedHandler]:
    """A handler whose writer is stuck writing the line "first" to a blocked sink."""
    sink = BlockingSink()
    h = _handler(made, sink, capacity=capacity)
    h.handle(_record("first"))
    assert sink.entered.wait(WAIT), "the writer never called the sink"
    return sink, h


def test_lines_reach_the_sink_in_order(handlers: list[logsetup.QueuedHandler]) -> None:
    sink = BlockingSink(blocked=False)
    h = _handler(handlers, sink, capacity=100)
    for i in range(50):
        h.handle(_record(f"line {i}"))
    assert sink.wait_for(50) == [f"line {i}" for i in range(50)]
    assert h.dropped == 0


def test_emit_does_not_block_when_the_sink_blocks(handlers: list[logsetup.QueuedHandler]) -> None:
    sink, h = _stuck_on_first(handlers, capacity=10)
    # The writer is stuck in write("first"): 10 lines fill the queue, the other 990 are dropped.
    # Were emit to wait for room, the thread below would wait for as long as the sink is blocked.
    emitter = threading.Thread(target=lambda: [h.handle(_record(f"line {i}")) for i in range(1000)])
    emitter.start()
    emitter.join(WAIT)
    assert not emitter.is_alive(), "emit waited on the blocked sink"
    assert h.dropped == 990
    assert sink.texts == []


def test_drops_are_reported_once_where_the_gap_is(
    handlers: list[logsetup.QueuedHandler],
) -> None:
    sink, h = _stuck_on_first(handlers, capacity=3)
    for i in range(10):  # 0, 1, 2 are queued; 3..9 are dropped
        h.handle(_record(f"line {i}"))
    assert h.dropped == 7
    sink.release.set()
    sink.wait_for(4)
    h.handle(_record("after"))  # the queue has room again: this line carries the gap
    lines = sink.wait_for(6)
    assert lines[:4] == ["first", "line 0", "line 1", "line 2"]
    assert lines[4] == "7 log lines dropped: the log output was not keeping up"
    assert lines[5:] == ["after"]
    h.handle(_record("later"))
    assert sink.wait_for(7)[6:] == ["later"], "the drops are reported once"


def test_drops_still_pending_are_reported_on_close(
    handlers: list[logsetup.QueuedHandler],
) -> None:
    sink, h = _stuck_on_first(handlers, capacity=2)
    for i in range(5):
        h.handle(_record(f"line {i}"))
    sink.release.set()
    h.close()
    assert not h.writer_alive
    assert sink.lines == [
        "first",
        "line 0",
        "line 1",
        "3 log lines dropped: the log output was not keeping up",
    ]
    assert sink.closed


def test_close_is_bounded_when_the_sink_never_returns(
    handlers: list[logsetup.QueuedHandler],
) -> None:
    sink = BlockingSink()
    h = _handler(handlers, sink, capacity=2)
    for i in range(10):
        h.handle(_record(f"line {i}"))
    assert sink.entered.wait(WAIT)
    # The sink is released only after close has returned: a close that waited for the writer
    # would never return (WAIT is a bound on the test, not a figure; stop_timeout is 0.2 s).
    closer = threading.Thread(target=h.close)
    closer.start()
    closer.join(WAIT)
    assert not closer.is_alive(), "close waited on the blocked sink"
    assert not sink.release.is_set()
    assert h.writer_alive, "the writer is still stuck in write()"
    assert not sink.closed, "a sink is never closed under a writer still using it"
    sink.release.set()


def test_setup_attaches_and_detach_stops(handlers: list[logsetup.QueuedHandler]) -> None:
    sink = BlockingSink(blocked=False)
    ring = logsetup.RingHandler()
    attached = logsetup.setup(quiet=True, ring=ring, sink=sink)
    logger = logging.getLogger("ebbdb")
    try:
        assert ring in attached and all(h in logger.handlers for h in attached)
        logging.getLogger("ebbdb.network").info("connection accepted")  # quiet: ring only
        logging.getLogger("ebbdb.control").info("hello %s", "there")
        logging.getLogger("asyncio").error("Exception in callback")  # the loop's own warnings
    finally:
        logsetup.detach(attached)
    assert not any(h in logger.handlers for h in attached)
    assert not any(h in logging.getLogger("asyncio").handlers for h in attached)
    assert len(sink.lines) == 2, sink.lines
    assert sink.lines[0].endswith(" I CONTROL  hello there")
    assert sink.lines[1].endswith(" E -        Exception in callback")
    assert len(ring.lines) == 2
    assert sink.closed


# -- the --logpath file ----------------------------------------------------------------------------


def _write(sink: logsetup.FdSink, text: str) -> None:
    sink.write(text)
    sink.close()


@pytest.mark.parametrize(
    ("old", "append", "text", "expected"),
    [(None, False, "one\n", "one\n"), ("old\n", True, "new\n", "old\nnew\n")],
    ids=["is_created", "logappend_appends"],
)
def test_log_file_written_in_place(
    tmp_path: Path, old: str | None, append: bool, text: str, expected: str
) -> None:
    """A new log file is created; with --logappend an existing one is appended to. Either way no
    other file appears."""
    path = tmp_path / "ebbdb.log"
    if old is not None:
        path.write_text(old)
    _write(logsetup.open_log_file(str(path), append=append), text)
    assert path.read_text() == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ebbdb.log"]


def test_without_logappend_the_old_file_is_renamed_aside(tmp_path: Path) -> None:
    path = tmp_path / "ebbdb.log"
    path.write_text("old\n")
    now = datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    _write(logsetup.open_log_file(str(path), append=False, now=now), "new\n")
    assert path.read_text() == "new\n"
    assert (tmp_path / "ebbdb.log.2024-01-02T03-04-05").read_text() == "old\n"

    # A second start within the same second keeps both old files.
    _write(logsetup.open_log_file(str(path), append=False, now=now), "newer\n")
    assert path.read_text() == "newer\n"
    assert (tmp_path / "ebbdb.log.2024-01-02T03-04-05").read_text() == "old\n"
    assert (tmp_path / "ebbdb.log.2024-01-02T03-04-05-1").read_text() == "new\n"


def test_rotated_name_is_in_utc(tmp_path: Path) -> None:
    east = datetime.timezone(datetime.timedelta(hours=5))
    now = datetime.datetime(2024, 1, 2, 8, 4, 5, tzinfo=east)
    path = str(tmp_path / "x.log")
    assert logsetup.rotated_name(path, now) == f"{path}.2024-01-02T03-04-05"


@pytest.mark.parametrize("where", ["missing_dir", "under_a_file", "a_directory"])
def test_unopenable_log_file_raises_log_file_error(tmp_path: Path, where: str) -> None:
    (tmp_path / "file").write_text("")
    (tmp_path / "dir").mkdir()
    path = {
        "missing_dir": tmp_path / "no" / "such" / "ebbdb.log",
        "under_a_file": tmp_path / "file" / "ebbdb.log",
        "a_directory": tmp_path / "dir",
    }[where]
    for append in (False, True):
        with pytest.raises(logsetup.LogFileError, match="cannot open log file") as info:
            logsetup.open_log_file(str(path), append=append)
        assert str(path) in str(info.value)
    assert (tmp_path / "dir").is_dir(), "a directory is never renamed aside"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "file"]


def test_setup_with_an_unopenable_logpath_attaches_nothing(tmp_path: Path) -> None:
    logger = logging.getLogger("ebbdb")
    before = list(logger.handlers)
    with pytest.raises(logsetup.LogFileError):
        logsetup.setup(False, logsetup.RingHandler(), logpath=str(tmp_path / "no" / "x.log"))
    assert logger.handlers == before


def test_fd_sink_writes_everything_through_a_pipe() -> None:
    r, w = os.pipe()
    sink = logsetup.FdSink(w, owned=True)
    text = "é" * 200_000  # bigger than a pipe's buffer: written in several pieces
    got = bytearray()

    def read() -> None:
        while chunk := os.read(r, 65536):
            got.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    _write(sink, text)
    reader.join(WAIT)
    os.close(r)
    assert got.decode() == text


# -- mongod's structured lines ---------------------------------------------------------------------


def _event_record(level: int = logging.INFO) -> logging.LogRecord:
    record = logging.LogRecord(
        "ebbdb.network", level, __file__, 0, "[conn7] readable text", (), None
    )
    record.event = logsetup.Event(  # type: ignore[attr-defined]
        22943, "Connection accepted", {"remote": "127.0.0.1:5000", "connectionCount": 1}, "listener"
    )
    return record


def test_json_line_has_mongods_fields() -> None:
    entry = json.loads(logsetup.as_json(_event_record()))
    assert list(entry) == ["t", "s", "c", "id", "ctx", "msg", "attr"]
    assert entry["t"]["$date"].endswith("Z")
    assert (entry["s"], entry["c"], entry["id"], entry["ctx"], entry["msg"]) == (
        "I",
        "NETWORK",
        22943,
        "listener",
        "Connection accepted",
    )
    assert entry["attr"] == {"remote": "127.0.0.1:5000", "connectionCount": 1}


def test_a_plain_line_keeps_its_message_and_takes_its_connection_as_context() -> None:
    entry = json.loads(logsetup.as_json(_record("[conn3] closing connection: bad frame")))
    assert entry["msg"] == "[conn3] closing connection: bad frame"
    assert entry["ctx"] == "conn3"
    assert entry["id"] == 0
    assert "attr" not in entry


@pytest.mark.parametrize(
    ("level", "severity"),
    [
        (logging.CRITICAL, "F"),
        (logging.ERROR, "E"),
        (logging.WARNING, "W"),
        (logging.INFO, "I"),
        (logsetup.debug_level(1), "D1"),
        (logsetup.debug_level(2), "D2"),
        (logsetup.debug_level(5), "D5"),
    ],
)
def test_severities(level: int, severity: str) -> None:
    assert json.loads(logsetup.as_json(_record("x", level=level)))["s"] == severity


def test_text_line_names_the_context() -> None:
    record = _event_record()
    record.msg = "Connection accepted from 127.0.0.1:5000"
    text = logsetup._TextFormatter().format(record)
    assert text.endswith(" I NETWORK  [listener] Connection accepted from 127.0.0.1:5000")


def _setup(sink: BlockingSink, **kwargs: Any) -> tuple[list[logging.Handler], logsetup.RingHandler]:
    ring = logsetup.RingHandler()
    return logsetup.setup(ring=ring, sink=sink, **kwargs), ring


def test_verbosity_lets_debug_lines_through() -> None:
    for verbosity, expected in [(0, 1), (1, 2), (2, 3)]:
        sink = BlockingSink(blocked=False)
        attached, ring = _setup(sink, quiet=False, verbosity=verbosity)
        try:
            log = logging.getLogger("ebbdb.command")
            log.info("info line")
            log.log(logsetup.debug_level(1), "debug 1 line")
            log.log(logsetup.debug_level(2), "debug 2 line")
        finally:
            logsetup.detach(attached)
        assert len(sink.lines) == expected, (verbosity, sink.lines)
        assert len(ring.lines) == expected
    assert logging.getLogger("ebbdb").level == logging.INFO, "detach restores the logger's level"


def test_json_format_writes_the_lines_getlog_serves() -> None:
    sink = BlockingSink(blocked=False)
    attached, ring = _setup(sink, quiet=False, log_format="json")
    try:
        logsetup.log_event(
            logging.getLogger("ebbdb.command"),
            logging.INFO,
            51803,
            "Slow query",
            {"ns": "d.c", "durationMillis": 150},
            ctx="conn1",
            text="readable",
        )
        logging.getLogger("ebbdb.control").warning("plain %s", "warning")
    finally:
        logsetup.detach(attached)
    assert sink.lines == list(ring.lines)
    first = json.loads(sink.lines[0])
    assert (first["msg"], first["attr"]["durationMillis"]) == ("Slow query", 150)
    assert ring.total == 2


def test_quiet_leaves_out_connection_events_only() -> None:
    sink = BlockingSink(blocked=False)
    attached, ring = _setup(sink, quiet=True)
    network = logging.getLogger("ebbdb.network")
    try:
        for ident in (22942, 22943, 22944, 51800):
            logsetup.log_event(network, logging.INFO, ident, f"event {ident}")
        logsetup.log_event(network, logging.INFO, 23016, "Waiting for connections")
        network.warning("[conn1] closing connection: bad frame")
    finally:
        logsetup.detach(attached)
    assert [line.split("NETWORK  ")[1] for line in sink.lines] == [
        "Waiting for connections",
        "[conn1] closing connection: bad frame",
    ]
    assert len(ring.lines) == 6, "getLog has them all"


# -- what a client's text can do to a line ---------------------------------------------------------

_FORGED = "x\n2026-11-27T16:00:00.000Z I ACCESS   [conn1] Successfully authenticated\r\x1b[2K"


def _client_record(msg: str, *args: Any, attr: dict[str, Any] | None = None) -> logging.LogRecord:
    record = logging.LogRecord("ebbdb.access", logging.INFO, __file__, 0, msg, args, None)
    if attr is not None:
        record.__dict__["event"] = logsetup.Event(20249, "Authentication failed", attr, "conn1")
    return record


def test_escape_controls_writes_them_as_json_does() -> None:
    assert logsetup.escape_controls("a\nb\r\t\x00\x1b\x7f\u2028") == (
        "a\\nb\\r\\t\\u0000\\u001b\\u007f\\u2028"
    )
    assert logsetup.escape_controls("plain é 文") == "plain é 文"


def test_clip_cuts_to_bytes_and_says_how_long() -> None:
    assert logsetup.clip("abc", 10) == "abc"
    assert logsetup.clip("é" * 10, 5) == "éé...(20 bytes)"  # never half a character
    assert logsetup.clip("u" * (1 << 20)) == "u" * 256 + "...(1048576 bytes)"


def test_the_text_log_cannot_be_forged_by_a_value() -> None:
    text = logsetup._TextFormatter().format(_client_record("user %s failed", _FORGED))
    assert "\n" not in text and "\r" not in text and "\x1b" not in text
    assert "x\\n2026-11-27T16:00:00.000Z I ACCESS" in text


def test_an_exception_message_cannot_forge_a_line_either() -> None:
    try:
        raise ValueError(_FORGED)
    except ValueError:
        record = _client_record("failed")
        record.exc_info = sys.exc_info()
    lines = logsetup._TextFormatter().format(record).split("\n")
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1].startswith("ValueError: x\\n2026-11-27T16:00:00.000Z I ACCESS")
    assert all(not line.startswith("2026-11-27") for line in lines[1:])


def test_json_lines_truncate_long_attributes_as_mongod() -> None:
    long = "p" * (logsetup.MAX_ATTRIBUTE_BYTES + 5)
    line = json.loads(logsetup.as_json(_client_record("x", attr={"principalName": long, "n": 1})))
    assert line["attr"] == {"principalName": "p" * logsetup.MAX_ATTRIBUTE_BYTES, "n": 1}
    size = logsetup.MAX_ATTRIBUTE_BYTES + 5
    assert line["truncated"] == {"principalName": {"type": "string", "size": size}}
    assert line["size"] == {"principalName": size}
