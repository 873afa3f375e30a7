"""What one client (or many) can make the server hold, run as operators run it (`python -m ebbdb`
in a subprocess, on uvloop, and on the standard asyncio loop that an install without the uvloop
extra uses): running out of file descriptors is logged (at most once a second: the rate is
tests/server/test_listener.py's, with the clock injected) and the server serves again once
descriptors are free; a message that does not arrive whole in incomingMessageTimeoutSecs closes
its connection; many clients sending 47 MB messages at once make the server wait for its input
budget, never holding more than that; a well-behaved client keeps its answers."""

from __future__ import annotations

import json
import resource
import select
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
from tests.waiting import wait_until

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
def test_out_of_file_descriptors_is_logged_and_the_server_recovers(launch: Any, loop: str) -> None:
    proc = launch(loop, files=128)
    assert proc.port is not None
    socks = [socket.create_connection(("127.0.0.1", proc.port), timeout=5) for _ in range(300)]
    # The server meets EMFILE on every accept past ~120, and says so (tests/server/test_listener.py
    # holds the once-a-second rate with its clock injected).
    errors = wait_until(
        lambda: [line for line in _log(proc) if line["id"] == 23023],
        "a log line 23023",
        detail=lambda: f"stderr:\n{proc.stderr[-3000:]}",
    )
    assert errors[0]["msg"] == "Error accepting new connection"
    assert errors[0]["attr"] == {"error": "EMFILE: Too many open files"}
    # The connections it did take are served meanwhile.
    socks[0].sendall(_hello())
    assert socks[0].recv(65536)
    for sock in socks:
        sock.close()
    with _client(proc.port) as client:  # descriptors are free again: served
        assert client.admin.command("ping") == {"ok": 1.0}
        client.limits.items.insert_one({"_id": 1})
        assert client.limits.items.find_one() == {"_id": 1}
    assert "Traceback" not in proc.stderr


def _send_incomplete(port: int, length: int, sent: int) -> socket.socket:
    """A connection that announces a `length`-byte message and sends `sent` bytes of it."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=120)
    head = struct.pack("<iiii", length, 7, 0, 2013)
    sock.sendall(head + b"\x00" * (sent - len(head)))
    return sock


def _wait_closed(sock: socket.socket, seconds: float) -> None:
    """Wait until the server closes `sock` (a bounded wait: fails past `seconds`); the server
    sends nothing on it before."""
    sock.settimeout(seconds)
    try:
        data = sock.recv(1)
    except ConnectionResetError:
        data = b""
    except TimeoutError:
        pytest.fail(f"the server did not close the connection within {seconds} s")
    assert data == b""


def _peer(sock: socket.socket) -> str:
    """How the server names this client connection in its log."""
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def _closed(sock: socket.socket) -> bool:
    """The server has closed `sock` (it sends nothing else on it): it reads as ended."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_a_truncated_message_times_out(launch: Any, loop: str) -> None:
    proc = launch(loop, "--setParameter", "incomingMessageTimeoutSecs=1.5")
    assert proc.port is not None
    small = _send_incomplete(proc.port, 1000, 100)
    large = _send_incomplete(proc.port, 40_000_000, 1_000_000)
    expected = {
        f"closing connection from {_peer(small)}: 100 bytes of a 1000-byte message arrived in "
        "1.5 s (incomingMessageTimeoutSecs), not all of it",
        f"closing connection from {_peer(large)}: 1000000 bytes of a 40000000-byte message "
        "arrived in 1.5 s (incomingMessageTimeoutSecs), not all of it",
    }
    with _client(proc.port) as client:
        for sock in (small, large):
            _wait_closed(sock, 10)
            sock.close()
        assert client.admin.command("ping") == {"ok": 1.0}
        assert client.admin.command("getParameter", 1, incomingMessageTimeoutSecs=1)[
            "incomingMessageTimeoutSecs"
        ] == pytest.approx(1.5)
    # Each was closed by the timeout, with what had come of its message.
    warnings = {line["msg"] for line in _log(proc) if "arrived in" in line.get("msg", "")}
    assert {w.split("] ", 1)[1] for w in warnings} == expected  # without the [connN]


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


#: Clients sending a 47 MB message each: the server's input budget (256 MiB, server/listener.py)
#: holds five such messages at most (6 x 47 MB is more).
FLOODERS = 12
MESSAGE = 47_000_000
HELD_AT_MOST = 5


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_many_clients_sending_47_mb_messages_cannot_exhaust_memory(launch: Any, loop: str) -> None:
    """Each client sends all but 4 KB of its 47 MB message, then nothing: the server reads a
    message only once the input budget has room for it, so at no moment does it hold more than
    five. A client's whole message, all but the last 4 KB, can only have been taken in (the
    kernel's buffers hold a few MB) by a server that reserved its length; a server holds that
    until it closes the connection (here: once the message is 3 s incomplete). So whenever a client
    has sent everything, the clients that have and whose connection is still open are at most
    five. The others wait, unread, and get their turn. A client pinging all the while gets every
    answer. (bench/fairness.py's "flood" row prints the server's memory and the pings' times.)"""
    proc = launch(loop, "--setParameter", "incomingMessageTimeoutSecs=3")
    assert proc.port is not None
    port = proc.port
    body = b"\x00" * (MESSAGE - 16 - 4096)
    socks = [_send_incomplete(port, MESSAGE, 16) for _ in range(FLOODERS)]
    sent: list[int] = []  # the clients whose message is in, all but its 4 KB
    held: list[list[int]] = []  # at each, those of them whose connection was still open
    failed: list[BaseException] = []
    lock = threading.Lock()

    def flood(i: int) -> None:
        try:
            socks[i].sendall(body)
            with lock:
                sent.append(i)
                done = list(sent)
            # Read the list first, then the sockets: one open now was open then, and held.
            held.append([j for j in done if not _closed(socks[j])])
            _wait_closed(socks[i], 60)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            failed.append(exc)

    threads = [threading.Thread(target=flood, args=(i,), daemon=True) for i in range(FLOODERS)]
    pings = 0
    try:
        with _client(port) as client:
            for thread in threads:
                thread.start()
            while any(t.is_alive() for t in threads):
                assert client.admin.command("ping") == {"ok": 1.0}
                pings += 1
                time.sleep(0.05)
            assert client.admin.command("ping") == {"ok": 1.0}
    finally:
        for thread in threads:
            thread.join(120)
        for sock in socks:
            sock.close()
    assert not failed, failed
    assert sorted(sent) == list(range(FLOODERS)), "every client's message was read in turn"
    assert max(len(h) for h in held) <= HELD_AT_MOST, held
    assert pings > 0
    timed_out = [line for line in _log(proc) if f"of a {MESSAGE}-byte message" in line["msg"]]
    assert len(timed_out) == FLOODERS
