"""Raw-socket wire helpers shared by the end-to-end tests, for requests a driver would refuse to build
or replies it would hide. This module owns the plain socket to a test server, reading whole frames
off it, and the OP_MSG and OP_QUERY request/reply round trips; frames are built and parsed only with
`protocol` (encode_msg, decode_message, encode_query, decode_reply) and documents with pymongo's
`bson`, never by hand. Every request gets a fresh id from one process-wide counter."""

from __future__ import annotations

import itertools
import socket
from typing import Any

import bson

from ebbdb.protocol import (
    HEADER_SIZE,
    Msg,
    MsgFlags,
    OpCode,
    Query,
    Reply,
    decode_header,
    decode_message,
    decode_reply,
    encode_msg,
    encode_query,
)
from ebbdb.server.embedded import ServerThread

TIMEOUT = 5.0
_request_ids = itertools.count(1000)


def next_request_id() -> int:
    return next(_request_ids)


def connect(server_or_port: ServerThread | int, timeout: float = TIMEOUT) -> socket.socket:
    """A plain TCP connection to the server (or to a port on 127.0.0.1) with `timeout` on every
    operation."""
    port = server_or_port if isinstance(server_or_port, int) else server_or_port.port
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    sock.settimeout(timeout)
    return sock


def recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise AssertionError(f"server closed the connection after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def read_frame(sock: socket.socket) -> bytes:
    """One whole message, header included, as the header's length says."""
    head = recv_exact(sock, HEADER_SIZE)
    return head + recv_exact(sock, decode_header(head).message_length - HEADER_SIZE)


def read_msg(sock: socket.socket) -> Msg:
    message = decode_message(read_frame(sock))
    assert isinstance(message, Msg), f"expected an OP_MSG reply, got {message!r}"
    return message


def op_msg(
    sock: socket.socket, body: dict[str, Any], flags: MsgFlags = MsgFlags.NONE
) -> dict[str, Any]:
    """Send `body` as one OP_MSG command and return the decoded body of the reply to it."""
    rid = next_request_id()
    sock.sendall(encode_msg(rid, 0, bson.encode(body), flags))
    reply = read_msg(sock)
    assert reply.response_to == rid
    assert not reply.sequences, "reply must be one kind-0 section"
    return bson.decode(reply.body)


def op_query(
    sock: socket.socket,
    query: dict[str, Any],
    namespace: str = "admin.$cmd",
    number_to_return: int = -1,
) -> tuple[int, Reply]:
    """Send one legacy OP_QUERY; return its request id and the OP_REPLY that answers it."""
    rid = next_request_id()
    sock.sendall(encode_query(Query(rid, 0, 0, namespace, 0, number_to_return, bson.encode(query))))
    frame = read_frame(sock)
    assert decode_header(frame).op_code == OpCode.REPLY, (
        "an OP_QUERY must be answered with OP_REPLY"
    )
    return rid, decode_reply(frame)
