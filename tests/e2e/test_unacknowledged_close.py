"""A client that sends unacknowledged writes (OP_MSG moreToCome, w:0) and closes its socket at
once: every request received whole before the end is applied, in order, as mongod does; a
connection reset by its client (SO_LINGER 0) is counted out and the server goes on."""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from typing import Any

import bson
from pymongo import MongoClient

from ebbdb.protocol import MsgFlags, encode_msg
from ebbdb.server.app import App
from ebbdb.server.embedded import ServerThread
from tests.e2e import rawwire
from tests.waiting import wait_until

CONNECTIONS = 8
INSERTS = 6


def unacknowledged(body: dict[str, Any]) -> bytes:
    body = {**body, "writeConcern": {"w": 0}, "$db": "unack"}
    return encode_msg(rawwire.next_request_id(), 0, bson.encode(body), MsgFlags.MORE_TO_COME)


def test_writes_sent_before_a_close_are_all_applied(
    server: ServerThread, client: MongoClient[dict[str, Any]]
) -> None:
    coll = client.unack.docs
    for c in range(CONNECTIONS):
        frames = [
            unacknowledged({"insert": "docs", "documents": [{"_id": f"{c}-{i}", "c": c, "i": i}]})
            for i in range(INSERTS)
        ]
        # An update and a delete that only work if the inserts before them ran, in order.
        frames.append(
            unacknowledged(
                {"update": "docs", "updates": [{"q": {"_id": f"{c}-0"}, "u": {"$set": {"u": 1}}}]}
            )
        )
        frames.append(
            unacknowledged({"delete": "docs", "deletes": [{"q": {"_id": f"{c}-1"}, "limit": 1}]})
        )
        sock = rawwire.connect(server)
        sock.sendall(b"".join(frames))
        sock.close()

    # Final once every connection's delete (its last request) ran: its update ran before, after
    # all its inserts.
    wait_until(
        lambda: (
            coll.count_documents({"u": 1}) == CONNECTIONS
            and coll.count_documents({"i": 1}) == 0
            and coll.count_documents({}) == CONNECTIONS * (INSERTS - 1)
        ),
        "every connection's writes applied",
    )
    docs = {d["_id"]: d for d in coll.find()}
    assert sorted(docs) == sorted(
        f"{c}-{i}" for c in range(CONNECTIONS) for i in range(INSERTS) if i != 1
    )
    for c in range(CONNECTIONS):
        assert docs[f"{c}-0"] == {"_id": f"{c}-0", "c": c, "i": 0, "u": 1}
        assert "u" not in docs[f"{c}-2"]


def _peers(app: App) -> tuple[int, list[str]]:
    return app.open_connections, [c.peer for c in app.connections.values()]


def test_a_reset_connection_is_counted_out_and_the_server_goes_on(
    start_server: Callable[..., ServerThread],
) -> None:
    srv = start_server()
    assert srv.app is not None
    before, _ = srv.call(_peers, srv.app)
    sock = rawwire.connect(srv)
    host, port = sock.getsockname()[:2]
    peer = f"{host}:{port}"
    wait_until(lambda: peer in srv.call(_peers, srv.app)[1], f"{peer} among the connections")
    sock.sendall(
        unacknowledged({"insert": "docs", "documents": [{"_id": i} for i in range(1000)]})
        + encode_msg(rawwire.next_request_id(), 0, bson.encode({"ping": 1, "$db": "admin"}))
    )
    # SO_LINGER with a zero timeout: close() sends a reset instead of a FIN.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
    wait_until(
        lambda: peer not in srv.call(_peers, srv.app)[1], f"{peer} gone from the connections"
    )
    assert srv.call(_peers, srv.app)[0] == before
    with rawwire.connect(srv) as again:
        assert rawwire.op_msg(again, {"ping": 1, "$db": "admin"})["ok"] == 1.0
