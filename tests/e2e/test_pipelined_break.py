"""Requests pipelined ahead of a broken frame, over raw sockets against the real server: every
message that came whole before the break gets its reply, in order, and only then does the server
close the connection (mongod reads a message, answers it, then reads the next). Also the client
that shuts its side of the stream after its requests: it still reads their replies."""

from __future__ import annotations

import socket
import struct
from typing import Any

import bson
import pytest
from pymongo import MongoClient

from ebbdb.protocol import MAX_MESSAGE_SIZE, MsgFlags, decode_message, encode_msg
from ebbdb.server.embedded import ServerThread
from tests.e2e.rawwire import TIMEOUT, connect, next_request_id, read_frame

TRIES = 20
_INT32 = struct.Struct("<i")


def _msg(body: dict[str, Any], flags: MsgFlags = MsgFlags.NONE) -> tuple[int, bytes]:
    rid = next_request_id()
    return rid, encode_msg(rid, 0, bson.encode(body), flags)


def _replies_then_close(sock: socket.socket) -> list[tuple[int, dict[str, Any]]]:
    """Every reply the server sends, (response_to, body), until it closes the connection."""
    replies = []
    sock.settimeout(TIMEOUT)
    while True:
        try:
            frame = read_frame(sock)
        except AssertionError as exc:  # closed between frames: the end
            assert "after 0 of" in str(exc), exc
            return replies
        except ConnectionResetError:
            return replies
        message = decode_message(frame)
        replies.append((message.response_to, bson.decode(message.body)))


_BROKEN_HEADERS = {
    "length below the header": _INT32.pack(1) + bytes(12),
    "negative length": _INT32.pack(-1) + bytes(12),
    "length past 48 MB": _INT32.pack(MAX_MESSAGE_SIZE + 1) + bytes(12),
}


@pytest.mark.parametrize("broken", _BROKEN_HEADERS.values(), ids=_BROKEN_HEADERS.keys())
def test_a_ping_before_a_broken_header_is_answered(server: ServerThread, broken: bytes) -> None:
    for _ in range(TRIES):
        rid, ping = _msg({"ping": 1, "$db": "admin"})
        with connect(server) as sock:
            sock.sendall(ping + broken)  # one write: both arrive in one read
            assert _replies_then_close(sock) == [(rid, {"ok": 1.0})]


def test_every_request_before_the_break_is_answered_in_order(
    server: ServerThread, client: MongoClient[dict[str, Any]]
) -> None:
    # An insert (it waits for the writer) between pings (answered at once), and one with
    # moreToCome (no reply, but it runs).
    sent = [
        _msg({"ping": 1, "$db": "admin"}),
        _msg({"insert": "c", "documents": [{"_id": 1}], "$db": "pipelined"}),
        _msg({"insert": "c", "documents": [{"_id": 2}], "$db": "pipelined"}, MsgFlags.MORE_TO_COME),
        _msg({"find": "c", "filter": {}, "$db": "pipelined"}),
        _msg({"ping": 1, "$db": "admin"}),
    ]
    with connect(server) as sock:
        sock.sendall(b"".join(frame for _, frame in sent) + _BROKEN_HEADERS["negative length"])
        replies = _replies_then_close(sock)
    assert [rid for rid, _ in replies] == [sent[i][0] for i in (0, 1, 3, 4)]
    assert [reply["ok"] for _, reply in replies] == [1.0] * 4
    assert replies[1][1]["n"] == 1
    assert replies[2][1]["cursor"]["firstBatch"] == [{"_id": 1}, {"_id": 2}]
    assert list(client.pipelined.c.find()) == [{"_id": 1}, {"_id": 2}]


def test_a_message_that_does_not_parse_ends_the_requests_after_it(
    server: ServerThread, client: MongoClient[dict[str, Any]]
) -> None:
    # Framed right (its length adds up) but an opcode nobody speaks: those before it are
    # answered, the connection closes there, and what came after it does not run.
    first = _msg({"insert": "c", "documents": [{"_id": 1}], "$db": "unparsed"})
    rid = next_request_id()
    unknown = struct.pack("<iiii", 20, rid, 0, 2099) + bytes(4)
    after = _msg({"insert": "c", "documents": [{"_id": 2}], "$db": "unparsed"})
    with connect(server) as sock:
        sock.sendall(first[1] + unknown + after[1])
        replies = _replies_then_close(sock)
    assert [(r, reply["n"]) for r, reply in replies] == [(first[0], 1)]
    assert list(client.unparsed.c.find()) == [{"_id": 1}]


def test_a_client_that_shuts_its_side_still_gets_its_replies(server: ServerThread) -> None:
    for _ in range(TRIES):
        sent = [
            _msg({"insert": "c", "documents": [{"x": 1}], "$db": "halfclosed"}),
            _msg({"ping": 1, "$db": "admin"}),
        ]
        with connect(server) as sock:
            # The requests, then the start of a message that never ends, then the end of stream.
            sock.sendall(b"".join(frame for _, frame in sent) + _INT32.pack(100) + b"abc")
            sock.shutdown(socket.SHUT_WR)
            replies = _replies_then_close(sock)
        assert [rid for rid, _ in replies] == [rid for rid, _ in sent]
        assert [reply["ok"] for _, reply in replies] == [1.0, 1.0]
