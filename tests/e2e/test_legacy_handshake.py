"""The legacy OP_QUERY handshake over raw sockets: old drivers and tools open with isMaster/hello on
`admin.$cmd` and expect an OP_REPLY; every other OP_QUERY is refused with an error reply, and the
connection goes on to speak OP_MSG."""

from __future__ import annotations

from typing import Any

import bson
import pytest

from ebbdb.protocol import Reply
from ebbdb.server.embedded import ServerThread
from tests.e2e.rawwire import connect, op_msg, op_query

QUERY_FAILURE = 2  # OP_REPLY responseFlags bit


def _only_doc(reply: Reply) -> dict[str, Any]:
    assert len(reply.documents) == 1
    return bson.decode(reply.documents[0])


@pytest.mark.parametrize(
    ("query", "primary_field"),
    [
        ({"isMaster": 1}, "ismaster"),
        ({"ismaster": 1}, "ismaster"),
        ({"hello": 1}, "isWritablePrimary"),
        (
            {
                "isMaster": 1,
                "helloOk": True,
                "client": {"driver": {"name": "legacy", "version": "1"}},
            },
            "ismaster",
        ),
        (
            {"$query": {"isMaster": 1}, "$readPreference": {"mode": "primaryPreferred"}},
            "ismaster",
        ),
    ],
    ids=["isMaster", "ismaster", "hello", "isMaster_with_metadata", "wrapped_with_readPreference"],
)
def test_op_query_handshake_gets_op_reply(
    server: ServerThread, query: dict[str, Any], primary_field: str
) -> None:
    with connect(server) as sock:
        rid, reply = op_query(sock, query)
        assert reply.response_to == rid
        assert reply.response_flags & QUERY_FAILURE == 0
        assert reply.cursor_id == 0
        doc = _only_doc(reply)
        assert doc[primary_field] is True
        assert doc["maxWireVersion"] == 21
        assert doc["minWireVersion"] == 0
        assert doc["ok"] == 1.0


def test_op_msg_works_after_op_query_handshake(server: ServerThread) -> None:
    with connect(server) as sock:
        _, reply = op_query(sock, {"isMaster": 1})
        assert _only_doc(reply)["ok"] == 1.0
        assert op_msg(sock, {"ping": 1, "$db": "admin"})["ok"] == 1.0
        inserted = op_msg(sock, {"insert": "legacy", "documents": [{"_id": 1}], "$db": "legacy"})
        assert inserted["ok"] == 1.0 and inserted["n"] == 1
        found = op_msg(sock, {"find": "legacy", "filter": {}, "$db": "legacy"})
        assert found["cursor"]["firstBatch"] == [{"_id": 1}]


def test_op_query_non_handshake_command_is_refused_and_connection_survives(
    server: ServerThread,
) -> None:
    with connect(server) as sock:
        rid, reply = op_query(sock, {"find": "legacy", "filter": {}}, namespace="legacy.$cmd")
        assert reply.response_to == rid
        doc = _only_doc(reply)
        assert doc["ok"] == 0
        assert doc["code"] == 352
        assert doc["codeName"] == "UnsupportedOpQueryCommand"
        # The connection is still usable, for OP_QUERY handshakes and OP_MSG alike.
        _, again = op_query(sock, {"hello": 1})
        assert _only_doc(again)["isWritablePrimary"] is True
        assert op_msg(sock, {"ping": 1, "$db": "admin"})["ok"] == 1.0


def test_op_query_on_a_collection_is_refused_and_connection_survives(server: ServerThread) -> None:
    with connect(server) as sock:
        rid, reply = op_query(sock, {"x": 1}, namespace="legacy.items", number_to_return=0)
        assert reply.response_to == rid
        assert reply.response_flags & QUERY_FAILURE
        doc = _only_doc(reply)
        assert doc["ok"] == 0
        assert doc["code"] == 352
        assert "$err" in doc
        assert op_msg(sock, {"ping": 1, "$db": "admin"})["ok"] == 1.0
