"""Clients that send broken bytes, over raw sockets against the real server: broken framing closes only
that connection, a frame that parses but carries bad BSON gets an error reply, and a second, well-behaved
client keeps working throughout. Also the OP_MSG features drivers rarely exercise: moreToCome, checksums,
document sequences, pipelining."""

from __future__ import annotations

import itertools
import json
import re
import socket
import struct
from collections.abc import Callable, Iterator
from typing import Any

import bson
import pytest
from pymongo import MongoClient

from ebbdb.protocol import MsgFlags, OpCode, encode_msg
from ebbdb.server.embedded import ServerThread
from tests.e2e.rawwire import TIMEOUT, connect, next_request_id, op_msg, read_msg
from tests.waiting import wait_until

# -- log and connection helpers (the raw wire round trips live in tests/e2e/rawwire.py) ------------


def _assert_closed_by_server(sock: socket.socket, timeout: float = TIMEOUT) -> None:
    """The server must drop the connection without sending anything: recv gives b'' or a reset."""
    sock.settimeout(timeout)
    try:
        data = sock.recv(65536)
    except ConnectionResetError:
        return
    except TimeoutError:
        pytest.fail(f"server did not close the connection within {timeout} s")
    assert data == b"", f"server answered broken input with {data!r} instead of closing"


def _log_msgs(srv: ServerThread) -> list[str]:
    assert srv.app is not None
    return [json.loads(line)["msg"] for line in list(srv.app.log_ring.lines)]


def _wait_for_log(srv: ServerThread, *needles: str) -> str:
    """The first log message containing every needle (case-insensitive), once there is one (a
    bounded wait)."""
    lowered = [n.lower() for n in needles]
    return wait_until(
        lambda: next((m for m in _log_msgs(srv) if all(n in m.lower() for n in lowered)), None),
        f"a log line mentioning {needles!r}",
        detail=lambda: "recent lines:\n" + "\n".join(_log_msgs(srv)[-20:]),
    )


def _peer_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"{host}:{port}"


def _connection_id(sock: socket.socket) -> int:
    reply = op_msg(sock, {"hello": 1, "$db": "admin"})
    return int(reply["connectionId"])


# -- the well-behaved second client ----------------------------------------------------------------


@pytest.fixture
def observer(server: ServerThread) -> Iterator[Callable[[str], None]]:
    """A pymongo client on its own connection; calling it inserts a document and reads it back.
    Retries are off so that a dropped connection would surface as an error instead of being hidden."""
    client: MongoClient[dict[str, Any]] = MongoClient(
        server.uri,
        serverSelectionTimeoutMS=5000,
        socketTimeoutMS=5000,
        connectTimeoutMS=5000,
        retryWrites=False,
        retryReads=False,
        maxPoolSize=1,
    )
    coll = client.badinput.observer
    counter = itertools.count()

    def check(step: str) -> None:
        n = next(counter)
        coll.insert_one({"_id": n, "step": step})
        assert coll.find_one({"_id": n}) == {"_id": n, "step": step}

    yield check
    client.close()


# -- broken framing closes only that connection ----------------------------------------------------


def _header(length: int, op_code: int, request_id: int = 1) -> bytes:
    return struct.pack("<iiii", length, request_id, 0, op_code)


def _ping_frame(flags: MsgFlags = MsgFlags.NONE) -> bytes:
    return encode_msg(next_request_id(), 0, bson.encode({"ping": 1, "$db": "admin"}), flags)


def _bad_checksum_frame() -> bytes:
    frame = bytearray(_ping_frame(MsgFlags.CHECKSUM_PRESENT))
    frame[-1] ^= 0xFF
    return bytes(frame)


def _unknown_opcode_frame() -> bytes:
    # 2010 is the removed OP_COMMAND; the payload is a plausible body so only the opcode is wrong.
    payload = struct.pack("<I", 0) + b"\x00" + bson.encode({"ping": 1, "$db": "admin"})
    return _header(16 + len(payload), 2010) + payload


BROKEN_FRAMES: list[tuple[str, Callable[[], bytes], str]] = [
    # "GET " read as a little-endian int32 is 542393671, far over the limit.
    ("garbage", lambda: b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n", "exceeds the maximum"),
    # Only the header is sent: the server must refuse without waiting for 48 MB that never come.
    ("length_over_max", lambda: _header(48_000_001, OpCode.MSG), "exceeds the maximum"),
    ("length_below_header", lambda: _header(8, OpCode.MSG) + b"\x00" * 8, "below"),
    ("negative_length", lambda: _header(-1, OpCode.MSG), "below"),
    ("unknown_opcode", _unknown_opcode_frame, "unsupported opcode"),
    ("wrong_checksum", _bad_checksum_frame, "checksum"),
]


@pytest.mark.parametrize(
    ("make", "reason"), [(m, r) for _, m, r in BROKEN_FRAMES], ids=[i for i, _, _ in BROKEN_FRAMES]
)
def test_broken_framing_closes_only_that_connection(
    server: ServerThread, observer: Callable[[str], None], make: Callable[[], bytes], reason: str
) -> None:
    observer("before")
    bystander = connect(server)  # a raw client that stays well-behaved on its own connection
    with connect(server) as sock:
        peer = _peer_of(sock)
        sock.sendall(make())
        observer("during")
        _assert_closed_by_server(sock)
    line = _wait_for_log(server, peer, reason)
    assert "closing connection" in line
    observer("after")
    with bystander:
        assert op_msg(bystander, {"ping": 1, "$db": "admin"})["ok"] == 1.0


def test_truncated_frame_then_client_closes(
    server: ServerThread, observer: Callable[[str], None]
) -> None:
    observer("before")
    with connect(server) as sock:
        conn_id = _connection_id(sock)
        frame = _ping_frame()
        sock.sendall(frame[: len(frame) // 2])
        observer("during")  # the half frame sits in the server's buffer meanwhile
        sock.shutdown(socket.SHUT_WR)
        _assert_closed_by_server(sock)
    line = _wait_for_log(server, f"conn{conn_id}]", "incomplete message")
    assert re.search(rf"\b{len(frame) // 2} bytes\b", line), line
    observer("after")


def test_valid_frame_with_invalid_bson_gets_error_and_connection_survives(
    server: ServerThread, observer: Callable[[str], None]
) -> None:
    observer("before")
    body = bytearray(bson.encode({"ping": 1, "$db": "admin"}))
    assert body[4] == 0x10  # the int32 element type of "ping"
    body[4] = 0x20  # no BSON type has this number; the length prefix still fits exactly
    with connect(server) as sock:
        conn_id = _connection_id(sock)
        rid = next_request_id()
        sock.sendall(encode_msg(rid, 0, bytes(body)))
        reply_msg = read_msg(sock)
        assert reply_msg.response_to == rid
        reply = bson.decode(reply_msg.body)
        assert reply["ok"] == 0
        assert reply["code"] == 22
        assert reply["codeName"] == "InvalidBSON"
        observer("during")
        assert op_msg(sock, {"ping": 1, "$db": "admin"})["ok"] == 1.0
    _wait_for_log(server, f"conn{conn_id}]", f"request {rid}", "not valid BSON")
    observer("after")


# -- OP_MSG features -------------------------------------------------------------------------------


def test_more_to_come_insert_sends_no_reply_but_inserts(
    server: ServerThread, client: MongoClient[dict[str, Any]]
) -> None:
    with connect(server) as sock:
        body = {"insert": "mtc", "documents": [{"_id": 1, "x": "quiet"}], "$db": "badinput"}
        sock.sendall(encode_msg(next_request_id(), 0, bson.encode(body), MsgFlags.MORE_TO_COME))
        # Requests are answered in order, so the next reply on the wire must be the ping's: the
        # insert produced none.
        ping_rid = next_request_id()
        sock.sendall(encode_msg(ping_rid, 0, bson.encode({"ping": 1, "$db": "admin"})))
        reply = read_msg(sock)
        assert reply.response_to == ping_rid
        assert bson.decode(reply.body)["ok"] == 1.0
        sock.settimeout(0.2)
        with pytest.raises(TimeoutError):
            sock.recv(1)
    assert client.badinput.mtc.find_one({"_id": 1}) == {"_id": 1, "x": "quiet"}


def test_valid_checksum_is_answered(server: ServerThread) -> None:
    with connect(server) as sock:
        rid = next_request_id()
        body = bson.encode({"ping": 1, "$db": "admin"})
        sock.sendall(encode_msg(rid, 0, body, MsgFlags.CHECKSUM_PRESENT))
        reply = read_msg(sock)  # decode_message verifies the reply's checksum if it sets the flag
        assert reply.response_to == rid
        assert bson.decode(reply.body)["ok"] == 1.0
        assert op_msg(sock, {"ping": 1, "$db": "admin"})["ok"] == 1.0


def test_insert_with_document_sequence(
    server: ServerThread, client: MongoClient[dict[str, Any]]
) -> None:
    docs = (bson.encode({"_id": 1, "v": "a"}), bson.encode({"_id": 2, "v": "b"}))
    with connect(server) as sock:
        rid = next_request_id()
        body = bson.encode({"insert": "seq", "$db": "badinput"})
        sock.sendall(encode_msg(rid, 0, body, sequences=(("documents", docs),)))
        reply_msg = read_msg(sock)
        assert reply_msg.response_to == rid
        reply = bson.decode(reply_msg.body)
        assert reply["ok"] == 1.0, reply
        assert reply["n"] == 2
    found = list(client.badinput.seq.find({}).sort("_id", 1))
    assert found == [{"_id": 1, "v": "a"}, {"_id": 2, "v": "b"}]


def test_op_msg_without_db_is_an_error(server: ServerThread) -> None:
    with connect(server) as sock:
        reply = op_msg(sock, {"ping": 1})
        assert reply["ok"] == 0
        assert reply["code"] == 40571
        assert op_msg(sock, {"ping": 1, "$db": "admin"})["ok"] == 1.0


def test_pipelined_requests_are_answered_in_order(
    server: ServerThread, client: MongoClient[dict[str, Any]]
) -> None:
    # The insert waits on storage while the find and ping could be answered at once; order must hold.
    rids = [next_request_id() for _ in range(3)]
    bodies = [
        {"insert": "pipe", "documents": [{"_id": 7}], "$db": "badinput"},
        {"find": "pipe", "filter": {"_id": 7}, "$db": "badinput"},
        {"ping": 1, "$db": "admin"},
    ]
    with connect(server) as sock:
        sock.sendall(b"".join(encode_msg(r, 0, bson.encode(b)) for r, b in zip(rids, bodies)))
        replies = [read_msg(sock) for _ in rids]
    assert [r.response_to for r in replies] == rids
    docs = [bson.decode(r.body) for r in replies]
    assert docs[0]["ok"] == 1.0 and docs[0]["n"] == 1
    assert docs[1]["cursor"]["firstBatch"] == [{"_id": 7}]
    assert docs[2]["ok"] == 1.0
