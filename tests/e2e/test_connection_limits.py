"""What one client (or many) can make the server hold, run as operators run it (`python -m ebbdb`
in a subprocess, on uvloop, and on the standard asyncio loop that an install without the uvloop
extra uses): running out of file descriptors is logged at most once a second and the server
serves again once descriptors are free; a message that does not arrive whole in
incomingMessageTimeoutSecs closes its connection; many clients sending 47 MB messages at once
make the server wait for memory, not take more of it; a well-behaved client keeps its answers."""

from __future__ import annotations

import json
import resource
import socket
import struct
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bson
import pytest
from pymongo import MongoClient

from tests.e2e.test_cli import SERVER_CMD, ServerProcess

#: The server on the standard library's asyncio loop instead of uvloop.
ASYNCIO_CMD = [
    sys.executable,
    "-c",
    "import asyncio, sys\n"
    "from ebbdb.server.cli import serve\n"
    "from ebbdb.server.config import parse_args\n"
    "sys.exit(asyncio.run(serve(parse_args(sys.argv[1:]))))",
]
LOOPS = {"uvloop": SERVER_CMD, "asyncio": ASYNCIO_CMD}


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Any]:
    procs: list[ServerProcess] = []

    def start(loop: str, *args: str, files: int | None = None) -> ServerProcess:
        def limit() -> None:
            if files is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

        proc = ServerProcess(
            ["--ephemeral", "--port", "0", "--logFormat", "json", *args],
            tmp_path,
            cmd=LOOPS[loop],
            preexec_fn=limit,
        )
        procs.append(proc)
        proc.startup_line()
        return proc

    yield start
    for proc in procs:
        assert proc.stop() == 0, proc.stderr[-3000:]
        proc.kill()


def _log(proc: ServerProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in proc.stderr.splitlines() if line.startswith("{")]


def _hello() -> bytes:
    body = bson.encode({"hello": 1, "$db": "admin"})
    return struct.pack("<iiiiI", 21 + len(body), 1, 0, 2013, 0) + b"\x00" + body


def _client(port: int) -> MongoClient[dict[str, Any]]:
    return MongoClient(
        f"mongodb://127.0.0.1:{port}/?directConnection=true",
        serverSelectionTimeoutMS=10_000,
        socketTimeoutMS=10_000,
    )


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_out_of_file_descriptors_is_logged_once_a_second_and_the_server_recovers(
    launch: Any, loop: str
) -> None:
    proc = launch(loop, files=128)
    assert proc.port is not None
    started = time.monotonic()
    socks = [socket.create_connection(("127.0.0.1", proc.port), timeout=5) for _ in range(300)]
    time.sleep(2.5)  # the server meets EMFILE on every accept past ~120
    # The connections it did take are served meanwhile.
    socks[0].sendall(_hello())
    assert socks[0].recv(65536)
    for sock in socks:
        sock.close()
    with _client(proc.port) as client:  # descriptors are free again: served
        assert client.admin.command("ping") == {"ok": 1.0}
        client.limits.items.insert_one({"_id": 1})
        assert client.limits.items.find_one() == {"_id": 1}
    elapsed = time.monotonic() - started
    lines = _log(proc)
    errors = [line for line in lines if line["id"] == 23023]
    assert 1 <= len(errors) <= elapsed + 1, [e["t"] for e in errors]
    assert errors[0]["msg"] == "Error accepting new connection"
    assert errors[0]["attr"]["error"] == "EMFILE: Too many open files"
    assert "Traceback" not in proc.stderr


def _send_incomplete(port: int, length: int, sent: int) -> socket.socket:
    """A connection that announces a `length`-byte message and sends `sent` bytes of it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    head = struct.pack("<iiii", length, 7, 0, 2013)
    sock.sendall(head + b"\x00" * (sent - len(head)))
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> float:
    """Seconds until the server closes `sock` (fails past `seconds`)."""
    sock.settimeout(seconds)
    start = time.monotonic()
    try:
        data = sock.recv(1)
    except ConnectionResetError:
        data = b""
    assert data == b""
    return time.monotonic() - start


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_truncated_message_times_out(launch: Any, loop: str) -> None:
    proc = launch(loop, "--setParameter", "incomingMessageTimeoutSecs=1.5")
    assert proc.port is not None
    small = _send_incomplete(proc.port, 1000, 100)
    large = _send_incomplete(proc.port, 40_000_000, 1_000_000)
    with _client(proc.port) as client:
        started = time.monotonic()
        for sock in (small, large):
            assert _closed_within(sock, 10) < 5
            sock.close()
        assert time.monotonic() - started >= 1.0
        assert client.admin.command("ping") == {"ok": 1.0}
        assert client.admin.command("getParameter", 1, incomingMessageTimeoutSecs=1)[
            "incomingMessageTimeoutSecs"
        ] == pytest.approx(1.5)
    warnings = [line for line in _log(proc) if "arrived in 1.5 s" in line.get("msg", "")]
    assert len(warnings) == 2


def test_a_slow_stream_of_whole_messages_is_not_a_slow_message(launch: Any) -> None:
    """The timeout is per message: a client that keeps sending whole ones, each split over
    packets, stays connected for longer than the timeout."""
    proc = launch("uvloop", "--setParameter", "incomingMessageTimeoutSecs=2")
    assert proc.port is not None
    sock = socket.create_connection(("127.0.0.1", proc.port), timeout=5)
    hello = _hello()
    for _ in range(6):
        sock.sendall(hello[:10])
        time.sleep(0.3)
        sock.sendall(hello[10:] + hello[:10])  # the next message begins at once
        time.sleep(0.3)
        sock.sendall(hello[10:])
        assert [reply["ok"] for reply in _read_replies(sock, 2)] == [1.0, 1.0]
    sock.close()


def _read_replies(sock: socket.socket, n: int) -> list[dict[str, Any]]:
    """`n` whole replies (OP_MSG, one body section each) from `sock`, however they arrive."""
    data = b""
    replies: list[dict[str, Any]] = []
    while len(replies) < n:
        while len(data) < 4 or len(data) < struct.unpack_from("<i", data)[0]:
            chunk = sock.recv(65536)
            assert chunk, "the server closed the connection"
            data += chunk
        length = struct.unpack_from("<i", data)[0]
        replies.append(bson.decode(data[21:length]))
        data = data[length:]
    assert data == b""  # nothing more than the replies asked for
    return replies


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_many_clients_sending_47_mb_messages_cannot_exhaust_memory(launch: Any, loop: str) -> None:
    proc = launch(loop, "--setParameter", "incomingMessageTimeoutSecs=3")
    assert proc.port is not None
    with _client(proc.port) as client:
        client.admin.command("ping")
        before = _peak_rss_mb(proc.proc.pid)
        length = 47_000_000
        body = b"\x00" * (length - 16 - 4096)
        done: list[float] = []
        pings: list[float] = []

        def flood() -> None:
            # All but 4 KB of a 47 MB message, then silence: the server holds what it read.
            try:
                sock = _send_incomplete(proc.port, length, 16)
                sock.sendall(body)
                done.append(_closed_within(sock, 60))
                sock.close()
            except OSError:
                done.append(-1.0)

        threads = [threading.Thread(target=flood) for _ in range(12)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 90
        while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
            start = time.monotonic()
            assert client.admin.command("ping") == {"ok": 1.0}
            pings.append(time.monotonic() - start)
            time.sleep(0.05)
        for thread in threads:
            thread.join(5)
        grew = _peak_rss_mb(proc.proc.pid) - before
    # 12 x 47 MB is 564 MB; the input budget (256 MB) lets at most five such messages in.
    assert len(done) == 12 and all(d >= 0 for d in done), done
    assert grew < 330, f"peak RSS grew by {grew:.0f} MB"
    assert max(pings) < 2.0, max(pings)
