"""The log as an operator meets it, on real `python -m ebbdb` subprocesses: a stderr pipe nobody
reads must not stop the server (once it is full, 2,000 connections are still opened, served and
closed, and pings answered), --logpath/--logappend write, append and rename aside as mongod does,
--logFormat json writes mongod's structured lines (the ones getLog serves), connection lines name
the driver and the application, -v shows failed commands, and net.maxIncomingConnections closes
the extra connections. Every wait has a timeout so that no test can hang."""

from __future__ import annotations

import fcntl
import json
import os
import queue
import re
import signal
import subprocess
import sys
import termios
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from tests.e2e import rawwire
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
SERVER_CMD = [sys.executable, "-m", "ebbdb"]
START_TIMEOUT = 15.0
EXIT_TIMEOUT = 5.0
CHURN_CONNECTIONS = 2000
#: Every this many churned connections does a handshake (hello) before closing, and the client
#: pings once.
HANDSHAKE_EVERY = 20
_STARTUP_RE = re.compile(r"\b127\.0\.0\.1:(\d+)\b")
_F_GETPIPE_SZ = 1032  # Linux's fcntl for a pipe's capacity


class Server:
    """One server subprocess; stdout is read by a thread for the startup line, stderr goes wherever
    the test says (a pipe it never reads, or a file)."""

    def __init__(self, args: list[str], stderr: int | IO[Any]) -> None:
        self.proc = subprocess.Popen(
            [*SERVER_CMD, *args],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        self.port = 0

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def startup(self) -> str:
        try:
            line = self._lines.get(timeout=START_TIMEOUT)
        except queue.Empty:
            pytest.fail(f"no startup line within {START_TIMEOUT} s")
        assert line is not None, (
            f"server exited with {self.proc.wait(EXIT_TIMEOUT)} before starting"
        )
        match = _STARTUP_RE.search(line)
        assert match, f"startup line does not name 127.0.0.1:<port>: {line!r}"
        self.port = int(match.group(1))
        return line

    def client(self) -> MongoClient[dict[str, Any]]:
        return MongoClient(
            f"mongodb://127.0.0.1:{self.port}/?directConnection=true",
            serverSelectionTimeoutMS=5000,
            socketTimeoutMS=5000,
            connectTimeoutMS=5000,
        )

    def stop(self) -> int:
        """SIGTERM and the exit code; fails if the server does not exit within EXIT_TIMEOUT."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(EXIT_TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"server did not exit within {EXIT_TIMEOUT} s of SIGTERM")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(EXIT_TIMEOUT)
        self._reader.join(EXIT_TIMEOUT)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def launch() -> Iterator[Any]:
    """launch(args, stderr) starts a server; leftovers are killed at the end of the test."""
    started: list[Server] = []

    def start(args: list[str], stderr: int | IO[Any]) -> Server:
        srv = Server(args, stderr)
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.kill()


def _pipe_fill(fd: int) -> tuple[int, int]:
    """(bytes waiting in the pipe, the pipe's capacity)."""
    waiting = bytearray(4)
    fcntl.ioctl(fd, termios.FIONREAD, waiting)
    return int.from_bytes(waiting, sys.byteorder), fcntl.fcntl(fd, _F_GETPIPE_SZ)


def _churn(port: int, connections: int) -> None:
    """Open and close `connections` connections; every HANDSHAKE_EVERY-th says hello first."""
    for i in range(connections):
        with rawwire.connect(port) as sock:
            if i % HANDSHAKE_EVERY == 0:
                reply = rawwire.op_msg(sock, {"hello": 1, "$db": "admin"})
                assert reply["ok"] == 1.0


def _connections(client: MongoClient[dict[str, Any]]) -> tuple[int, int]:
    """serverStatus' (current, totalCreated) connections."""
    counts = client.admin.command("serverStatus")["connections"]
    return counts["current"], counts["totalCreated"]


@pytest.mark.skipif(sys.platform != "linux", reason="reads a pipe's fill level with Linux ioctls")
@pytest.mark.timeout(60)
def test_an_unread_stderr_pipe_does_not_stop_the_server(launch: Any, tmp_path: Path) -> None:
    """The server logs every connection to a stderr pipe nobody reads. Once the pipe is full its
    log writer is stuck for good; a server that waited on its log would answer nothing from then
    on (the client's 5 s socket timeout fails the test). Instead, CHURN_CONNECTIONS more are
    opened, served and closed, the client's pings between them answered, every connection counted
    in and out again. (bench/fairness.py's "churn" row prints the pings' times.)"""
    srv = launch(["--port", "0", "--dbpath", str(tmp_path / "data")], subprocess.PIPE)
    srv.startup()
    assert srv.proc.stderr is not None
    stderr = srv.proc.stderr.fileno()

    with srv.client() as client:
        client.admin.command("ping")  # its connections open before counting
        current, created = _connections(client)
        # Connections until the pipe is full. (A full pipe need not hold `capacity` bytes: Linux
        # gives a write that does not fit the last page a page of its own.)
        filled = 0
        while (fill := _pipe_fill(stderr))[0] <= fill[1] // 2:
            assert filled < CHURN_CONNECTIONS, f"stderr pipe holds only {fill[0]} of {fill[1]}"
            _churn(srv.port, HANDSHAKE_EVERY)
            filled += HANDSHAKE_EVERY

        for _ in range(CHURN_CONNECTIONS // HANDSHAKE_EVERY):
            _churn(srv.port, HANDSHAKE_EVERY)
            assert client.admin.command("ping")["ok"] == 1.0

        # Each counted in, and out once the server has seen it closed (a bounded wait).
        wait_until(
            lambda: _connections(client)[0] == current,
            f"{current} connections open",
            detail=lambda: f"(current, totalCreated): {_connections(client)}",
        )
        assert _connections(client) == (current, created + filled + CHURN_CONNECTIONS)
        # Still serving, with the log still blocked: nobody read the pipe.
        waiting, capacity = _pipe_fill(stderr)
        assert waiting > capacity // 2, f"stderr pipe holds only {waiting} of {capacity} bytes"
        client.logs.after.insert_one({"_id": 1})
        assert client.logs.after.find_one() == {"_id": 1}

    assert srv.stop() == 0, "shutdown with a blocked log must still exit cleanly"


def _log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_logpath_and_logappend(launch: Any, tmp_path: Path) -> None:
    logfile = tmp_path / "logs" / "ebbdb.log"
    logfile.parent.mkdir()
    dbpath = str(tmp_path / "data")

    def run(*extra: str) -> None:
        with open(tmp_path / "stderr.txt", "w") as stderr:
            srv = launch(
                ["--port", "0", "--dbpath", dbpath, "--logpath", str(logfile), *extra], stderr
            )
            srv.startup()
            with srv.client() as client:
                assert client.admin.command("ping")["ok"] == 1.0
                parsed = client.admin.command("getCmdLineOpts")["parsed"]
            assert parsed["systemLog"] == {
                "destination": "file",
                "path": str(logfile),
                **({"logAppend": True} if "--logappend" in extra else {}),
            }
            assert srv.stop() == 0
        assert (tmp_path / "stderr.txt").read_text() == "", "the log goes to the file, not stderr"

    run()
    first = _log_lines(logfile)
    assert any("listening on 127.0.0.1:" in line for line in first), first
    assert any("connection accepted" in line for line in first), first
    assert any("shutdown complete" in line for line in first), first
    assert sorted(p.name for p in logfile.parent.iterdir()) == ["ebbdb.log"]

    run("--logappend")
    appended = _log_lines(logfile)
    assert appended[: len(first)] == first
    assert sum("listening on" in line for line in appended) == 2
    assert sorted(p.name for p in logfile.parent.iterdir()) == ["ebbdb.log"]

    run()
    names = sorted(p.name for p in logfile.parent.iterdir())
    assert len(names) == 2 and names[0] == "ebbdb.log", names
    assert re.fullmatch(r"ebbdb\.log\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d(-\d+)?", names[1]), names
    assert _log_lines(logfile.parent / names[1]) == appended
    fresh = _log_lines(logfile)
    assert sum("listening on" in line for line in fresh) == 1
    assert not set(fresh) & set(appended)


@pytest.mark.parametrize("where", ["missing_dir", "a_directory"])
def test_unwritable_logpath_exits_with_a_clear_message(tmp_path: Path, where: str) -> None:
    (tmp_path / "dir").mkdir()
    logpath = tmp_path / "no" / "such" / "ebbdb.log" if where == "missing_dir" else tmp_path / "dir"
    dbpath = tmp_path / "data"
    result = subprocess.run(
        [*SERVER_CMD, "--port", "0", "--dbpath", str(dbpath), "--logpath", str(logpath)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout == "", "no startup line"
    assert f"cannot open log file {logpath}" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not dbpath.exists(), "nothing is started before the log is open"
    assert os.listdir(tmp_path / "dir") == []


# -- mongod's lines: --logFormat json, -v, connection lines, the connection limit ------------------


def _json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _log_lines(path)]


def _launch_json(launch: Any, logfile: Path, *extra: str) -> Any:
    """An ephemeral server writing JSON lines to `logfile`, started and ready."""
    args = ["--port", "0", "--ephemeral", "--logFormat", "json", "--logpath", str(logfile)]
    srv = launch([*args, *extra], subprocess.DEVNULL)
    srv.startup()
    return srv


def test_json_log_lines_getlog_and_connection_metadata(launch: Any, tmp_path: Path) -> None:
    logfile = tmp_path / "ebbdb.log"
    srv = _launch_json(launch, logfile, "-v")
    client = MongoClient(
        f"mongodb://127.0.0.1:{srv.port}/?directConnection=true&appName=orders-service",
        serverSelectionTimeoutMS=5000,
    )
    with client:
        client.shop.orders.insert_many([{"_id": i, "total": i * 10} for i in range(20)])
        assert len(list(client.shop.orders.find({"total": {"$gte": 150}}))) == 5
        with pytest.raises(OperationFailure):
            client.shop.command("noSuchCommand")
        served = client.admin.command("getLog", "global")["log"]
    assert srv.stop() == 0
    written = _log_lines(logfile)
    entries = [json.loads(line) for line in written]
    for e in entries:
        assert list(e)[:6] == ["t", "s", "c", "id", "ctx", "msg"], e
        assert isinstance(e["id"], int)
    # getLog serves the very lines the file holds.
    assert served and set(served) <= set(written)

    by_id: dict[int, list[dict[str, Any]]] = {}
    for e in entries:
        by_id.setdefault(e["id"], []).append(e)
    ready = by_id[23016][0]
    assert (ready["c"], ready["ctx"], ready["msg"]) == (
        "NETWORK",
        "listener",
        "Waiting for connections",
    )
    assert ready["attr"]["port"] == srv.port
    accepted = by_id[22943][0]
    assert (accepted["c"], accepted["ctx"], accepted["msg"]) == (
        "NETWORK",
        "listener",
        "Connection accepted",
    )
    assert accepted["attr"]["remote"].startswith("127.0.0.1:")
    # The driver's handshake: driver name and version, and the application name.
    metadata = [e for e in by_id[51800] if e["attr"]["doc"].get("application")]
    assert metadata, by_id[51800]
    doc = metadata[0]["attr"]["doc"]
    assert doc["driver"]["name"].startswith("PyMongo")
    assert doc["driver"]["version"]
    assert doc["application"] == {"name": "orders-service"}
    assert metadata[0]["msg"] == "client metadata"
    assert metadata[0]["ctx"] == metadata[0]["attr"]["client"]
    ended = by_id[22944]
    assert {e["ctx"] for e in ended} >= {metadata[0]["ctx"]}
    # -v: every operation is logged as mongod's "Slow query", and failed commands at D1.
    find = [e for e in by_id[51803] if "find" in e["attr"]["command"]]
    assert find, by_id[51803]
    attr = find[0]["attr"]
    assert attr["ns"] == "shop.orders"
    assert attr["appName"] == "orders-service"
    assert (attr["planSummary"], attr["docsExamined"], attr["nreturned"]) == ("COLLSCAN", 20, 5)
    failed = by_id[24069][0]
    assert (failed["s"], failed["c"], failed["msg"]) == (
        "D1",
        "COMMAND",
        "Assertion while executing command",
    )
    assert failed["attr"]["command"] == "noSuchCommand"
    assert failed["attr"]["db"] == "shop"
    assert failed["attr"]["error"] == "CommandNotFound: no such command: 'noSuchCommand'"


def test_text_log_names_the_driver_and_hides_failures_without_v(
    launch: Any, tmp_path: Path
) -> None:
    logfile = tmp_path / "ebbdb.log"
    srv = launch(["--port", "0", "--ephemeral", "--logpath", str(logfile)], subprocess.DEVNULL)
    srv.startup()
    with MongoClient(
        f"mongodb://127.0.0.1:{srv.port}/?directConnection=true",
        appname="billing",
        serverSelectionTimeoutMS=5000,
    ) as client:
        with pytest.raises(OperationFailure):
            client.shop.command("noSuchCommand")
        client.shop.items.find_one()
    assert srv.stop() == 0
    lines = _log_lines(logfile)
    assert not any(line.startswith("{") for line in lines), "the default is readable text"
    metadata = [line for line in lines if "client metadata" in line]
    assert metadata and all(" I NETWORK  [conn" in line for line in metadata)
    assert any("driver PyMongo" in line and "appName 'billing'" in line for line in metadata)
    ended = [line for line in lines if "end connection" in line and "'billing'" in line]
    assert ended, lines
    assert not any("noSuchCommand" in line for line in lines), "failures are D1: -v shows them"
    assert not any("Slow query" in line for line in lines), "nothing took 100 ms"


def test_slow_queries_from_the_config_file(launch: Any, tmp_path: Path) -> None:
    logfile = tmp_path / "ebbdb.log"
    conf = tmp_path / "mongod.conf"
    conf.write_text(
        "net:\n  port: 0\n"
        f"systemLog:\n  destination: file\n  path: {logfile}\n"
        "operationProfiling:\n  slowOpThresholdMs: -1\n"
    )
    srv = launch(["--config", str(conf), "--ephemeral", "--logFormat", "json"], subprocess.DEVNULL)
    srv.startup()
    with srv.client() as client:
        client.shop.items.insert_one({"_id": 1})
        client.shop.items.find_one({"_id": 1})
        assert client.shop.command("profile", -1)["slowms"] == -1
    assert srv.stop() == 0
    slow = [e for e in _json_lines(logfile) if e["id"] == 51803]
    finds = [e["attr"] for e in slow if e["attr"]["command"].get("find") == "items"]
    assert finds and finds[0]["planSummary"] == "IDHACK"
    assert finds[0]["nreturned"] == 1


def test_max_incoming_connections_closes_the_extra_ones(launch: Any, tmp_path: Path) -> None:
    logfile = tmp_path / "ebbdb.log"
    srv = _launch_json(launch, logfile, "--maxConns", "2")
    first, second = rawwire.connect(srv.port), rawwire.connect(srv.port)
    try:
        for sock in (first, second):
            assert rawwire.op_msg(sock, {"ping": 1, "$db": "admin"})["ok"] == 1.0
        with rawwire.connect(srv.port) as third:
            try:
                data = third.recv(1024)
            except ConnectionResetError:
                data = b""
            assert data == b"", "the server closes a connection past maxIncomingConnections"
        status = rawwire.op_msg(first, {"serverStatus": 1, "$db": "admin"})
        assert status["connections"]["current"] == 2
        assert status["connections"]["available"] == 0
        second.close()
        # Once one closes, there is room again.
        wait_until(
            lambda: (
                rawwire.op_msg(first, {"serverStatus": 1, "$db": "admin"})["connections"]["current"]
                == 1
            ),
            "one connection open",
        )
        with rawwire.connect(srv.port) as fourth:
            assert rawwire.op_msg(fourth, {"ping": 1, "$db": "admin"})["ok"] == 1.0
    finally:
        first.close()
        second.close()
    assert srv.stop() == 0
    refused = [e for e in _json_lines(logfile) if e["id"] == 22942]
    assert len(refused) == 1, refused
    assert refused[0]["msg"] == "Connection refused because there are too many open connections"
    assert refused[0]["attr"]["connectionCount"] == 2


# -- what a client not logged in can put in the log ------------------------------------------------

#: What one request of a client not logged in may add to the log, at most (issue 24: "about 1 KB").
PER_REQUEST_BYTES = 1024
_LINE_START = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z [IWEFD]\d? ")
_FORGED = (
    "\n2026-11-27T16:00:00.000Z I ACCESS   [conn1] Successfully authenticated as principal admin"
    " on admin from client 10.0.0.1:5000\r\x1b[2K"
)


def _sasl_start(user: str) -> dict[str, Any]:
    payload = f"n,,n={user},r=fyko+d2lbbFgONRv9qkxdawL".encode()
    return {"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": payload, "$db": "admin"}


def _auth_server(launch: Any, tmp_path: Path, *args: str) -> tuple[Server, Path]:
    """A server started with --auth, logging to a file (and `args`), and that file."""
    logfile = tmp_path / "ebbdb.log"
    args = ("--port", "0", "--ephemeral", "--auth", "--logpath", str(logfile), *args)
    srv = launch(list(args), subprocess.DEVNULL)
    srv.startup()
    return srv, logfile


def _logged(srv: Server, logfile: Path, marker: str) -> int:
    """The log's size once a failed login of user `marker` is in it (the log is written by a
    thread of its own: this waits for it)."""
    with rawwire.connect(srv.port) as sock:
        assert rawwire.op_msg(sock, _sasl_start(marker))["code"] == 18
    wait_until(lambda: marker in logfile.read_text(), f"{marker}'s failed login in the log")
    return logfile.stat().st_size


@pytest.mark.timeout(90)
def test_a_client_not_logged_in_adds_about_1_kb_a_request(launch: Any, tmp_path: Path) -> None:
    srv, logfile = _auth_server(launch, tmp_path)
    huge = "u" * (1 << 20)
    requests: list[tuple[dict[str, Any], int]] = [(_sasl_start(huge), 18)] * 50
    requests += [
        ({"hello": 1, "client": {"application": {"name": huge}}, "$db": "admin"}, 185),
        ({"hello": 1, "saslSupportedMechs": f"admin.{huge}", "$db": "admin"}, 0),
        ({"find": huge, "filter": {huge: 1}, "$db": "admin"}, 13),
        ({"insert": "c", "documents": [{"x": huge}], "comment": huge, "$db": huge[:60]}, 13),
        ({"ping": 1, "comment": huge, "$db": "admin"}, 0),
        ({"saslStart": 1, "mechanism": huge, "payload": b"", "$db": "admin"}, 334),
        ({"saslContinue": 1, "conversationId": 1, "payload": huge.encode(), "$db": "admin"}, 17),
        ({huge: 1, "$db": "admin"}, 59),
    ]
    before = _logged(srv, logfile, "before-the-flood")
    with rawwire.connect(srv.port) as sock:
        for body, code in requests:
            reply = rawwire.op_msg(sock, body)
            assert reply.get("code", 0) == code, (reply, str(body)[:200])
    after = _logged(srv, logfile, "after-the-flood")
    # The marker's own failed login counts as one more request.
    assert after - before <= (len(requests) + 1) * PER_REQUEST_BYTES, after - before
    text = logfile.read_text()
    assert "u" * 300 not in text
    assert text.count("authentication of uuu") == 50
    assert srv.stop() == 0


@pytest.mark.timeout(60)
def test_a_user_name_cannot_forge_a_log_line(launch: Any, tmp_path: Path) -> None:
    srv, logfile = _auth_server(launch, tmp_path)
    with rawwire.connect(srv.port) as sock:
        assert rawwire.op_msg(sock, _sasl_start(_FORGED))["code"] == 18
        metadata = {"driver": {"name": _FORGED, "version": "1"}, "os": {"type": "x"}}
        assert rawwire.op_msg(sock, {"hello": 1, "client": metadata, "$db": "admin"})["ok"] == 1
        # A raised error's message carries the client's text into a traceback-free warning.
        assert rawwire.op_msg(sock, {_FORGED: 1, "$db": "admin"})["code"] == 59
    _logged(srv, logfile, "the-end")
    assert srv.stop() == 0
    lines = _log_lines(logfile)
    assert all(_LINE_START.match(line) for line in lines), [
        line for line in lines if not _LINE_START.match(line)
    ]
    escaped = _FORGED.replace("\n", "\\n").replace("\r", "\\r").replace("\x1b", "\\u001b")
    failed = [line for line in lines if "authentication of" in line and escaped in line]
    assert len(failed) == 1, lines
    assert any("client metadata" in line and escaped in line for line in lines), lines


@pytest.mark.timeout(60)
def test_a_failed_login_is_logged_once(launch: Any, tmp_path: Path) -> None:
    srv, logfile = _auth_server(launch, tmp_path, "--logFormat", "json")
    # A driver's login: hello with speculativeAuthenticate, then its own saslStart.
    with MongoClient(
        f"mongodb://nobody-here:secret@127.0.0.1:{srv.port}/?directConnection=true",
        serverSelectionTimeoutMS=5000,
    ) as client:
        with pytest.raises(OperationFailure) as failed:
            client.admin.command("ping")
        assert failed.value.code == 18
    _logged(srv, logfile, "the-end")
    assert srv.stop() == 0
    entries = [json.loads(line) for line in _log_lines(logfile)]
    logins = [e for e in entries if e["msg"] == "Authentication failed"]
    ours = [e for e in logins if e["attr"]["principalName"] == "nobody-here"]
    assert len(ours) == 1, ours
    assert json.dumps(ours[0]).count("nobody-here") == 1
    assert ours[0]["attr"]["error"] == "UserNotFound: Could not find the user"


@pytest.mark.timeout(60)
def test_client_metadata_is_checked_as_mongod_checks_it(launch: Any, tmp_path: Path) -> None:
    srv = launch(["--port", "0", "--ephemeral"], subprocess.DEVNULL)
    srv.startup()
    driver = {"name": "raw", "version": "1"}

    def hello(client: dict[str, Any]) -> dict[str, Any]:
        with rawwire.connect(srv.port) as sock:
            return rawwire.op_msg(sock, {"hello": 1, "client": client, "$db": "admin"})

    ok = {"application": {"name": "a" * 128}, "driver": driver, "os": {"type": "Linux"}}
    assert hello(ok)["ok"] == 1.0
    too_long = {**ok, "application": {"name": "é" * 65}}  # 130 bytes
    reply = hello(too_long)
    assert (reply["code"], reply["codeName"], reply["errmsg"]) == (
        184,
        "ClientMetadataAppNameTooLarge",
        "The 'application.name' field must be less then or equal to 128 bytes in the client "
        "metadata document",
    )
    reply = hello({**ok, "application": {"name": "a" * 2000}})
    assert (reply["code"], reply["codeName"], reply["errmsg"]) == (
        185,
        "ClientMetadataDocumentTooLarge",
        "The client metadata document must be less then or equal to 1024bytes",
    )
    reply = hello({**ok, "application": "billing"})
    assert (reply["code"], reply["errmsg"]) == (
        14,
        "The 'application' field is required to be a BSON document in the client metadata document",
    )
    reply = hello({**ok, "driver": {"name": 5, "version": "1"}})
    assert (reply["code"], reply["errmsg"]) == (
        14,
        "The 'driver.name' field must be a string in the client metadata document",
    )
    assert srv.stop() == 0
