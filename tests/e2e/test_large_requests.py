"""Requests too large to handle on the event loop in one go (issue 23, item 4): an insert_many of
100,000 documents with duplicates, a killCursors naming 500,000 ids, listCollections over many
collections. Each answers exactly as the small requests do, and another client is served while
one runs (shown by order, not timing: its reply arrives while the large request's has not)."""

from __future__ import annotations

import select
import socket
from typing import Any

import bson
import pytest
from bson import Int64
from pymongo import MongoClient
from pymongo.errors import BulkWriteError, OperationFailure

from ebbdb.protocol import encode_msg
from ebbdb.server.embedded import ServerThread
from ebbdb.server.large_messages import LARGE_BODY, LARGE_FRAME, PASS_ITEMS
from tests.e2e import rawwire

Client = MongoClient[dict[str, Any]]

DOCS = 100_000
IDS = 500_000


def _send(sock: socket.socket, body: dict[str, Any], docs: list[bytes] | None = None) -> int:
    """Send one OP_MSG (with `documents` as a document sequence when given); its request id."""
    rid = rawwire.next_request_id()
    payload = bson.encode(body)
    frame = encode_msg(rid, 0, payload)
    if docs is not None:
        seq = b"documents\x00" + b"".join(docs)
        section = b"\x01" + (len(seq) + 4).to_bytes(4, "little") + seq
        frame = (len(frame) + len(section)).to_bytes(4, "little") + frame[4:] + section
    sock.sendall(frame)
    return rid


def _served_meanwhile(server: ServerThread, big: socket.socket, ns: str) -> None:
    """Another client is answered while the large request on `big` is in progress: its
    currentOp sees that request running (which it could not while the request held the event
    loop), and `big` has no reply yet."""
    with rawwire.connect(server, timeout=60) as other:
        for _ in range(10_000):
            reply = rawwire.op_msg(other, {"currentOp": 1, "ns": ns, "$db": "admin"})
            if reply["inprog"]:
                break
        else:
            raise AssertionError("the large request was never seen in progress")
        readable, _, _ = select.select([big], [], [], 0)
        assert not readable, "the large request was answered already"


def test_insert_many_with_duplicates_unordered(server: ServerThread, client: Client) -> None:
    coll = client.large.dups
    half = DOCS // 2
    # The general path's answer, from batches small enough for it.
    small = client.large.small
    with pytest.raises(BulkWriteError) as small_err:
        small.insert_many([{"_id": i % 3, "v": i} for i in range(6)], ordered=False)
    expected_first = small_err.value.details["writeErrors"][0]
    docs = [bson.encode({"_id": i % half, "v": i}) for i in range(DOCS)]
    assert DOCS - half > PASS_ITEMS and len(b"".join(docs)) > LARGE_FRAME

    with rawwire.connect(server, timeout=120) as sock:
        rid = _send(sock, {"insert": "dups", "ordered": False, "$db": "large"}, docs)
        _served_meanwhile(server, sock, "large.dups")
        reply_msg = rawwire.read_msg(sock)
    assert reply_msg.response_to == rid
    reply = bson.decode(reply_msg.body)
    assert list(reply) == ["n", "writeErrors", "ok"]
    assert reply["n"] == half and reply["ok"] == 1.0
    errors = reply["writeErrors"]
    assert len(errors) == DOCS - half
    for n, error in enumerate(errors):
        i = half + n
        assert error == {
            "index": i,
            "code": 11000,
            "errmsg": expected_first["errmsg"]
            .replace("large.small", "large.dups")
            .replace("_id: 0 }", f"_id: {i % half} }}"),
            "keyPattern": {"_id": 1},
            "keyValue": {"_id": i % half},
        }
    assert coll.count_documents({}) == half


def test_insert_many_with_duplicates_through_pymongo(client: Client) -> None:
    coll = client.large.driver
    with pytest.raises(BulkWriteError) as err:
        coll.insert_many([{"_id": i % 5000, "v": i} for i in range(20_000)], ordered=False)
    details = err.value.details
    assert details["nInserted"] == 5000
    assert [e["index"] for e in details["writeErrors"]] == list(range(5000, 20_000))
    assert {e["code"] for e in details["writeErrors"]} == {11000}


def test_kill_cursors_of_many_ids(server: ServerThread, client: Client) -> None:
    coll = client.large.cursors
    coll.insert_many([{"_id": i} for i in range(10)])
    open_ids = []
    for _ in range(3):
        reply = client.large.command("find", "cursors", batchSize=1)
        open_ids.append(reply["cursor"]["id"])
    ids = [Int64(i) for i in range(1, IDS + 1)]
    ids[1000:1000] = open_ids  # among the others
    body = {"killCursors": "cursors", "cursors": ids, "$db": "large"}
    assert len(bson.encode(body)) > LARGE_FRAME > LARGE_BODY

    with rawwire.connect(server, timeout=120) as sock:
        rid = _send(sock, body)
        _served_meanwhile(server, sock, "large.cursors")
        reply_msg = rawwire.read_msg(sock)
    assert reply_msg.response_to == rid
    reply = bson.decode(reply_msg.body)
    assert list(reply) == [
        "cursorsKilled",
        "cursorsNotFound",
        "cursorsAlive",
        "cursorsUnknown",
        "ok",
    ]
    assert reply["cursorsKilled"] == open_ids
    assert reply["cursorsNotFound"] == [i for i in ids if i not in set(open_ids)]
    assert all(type(i) is Int64 for i in reply["cursorsNotFound"][:10])
    assert reply["cursorsAlive"] == [] and reply["cursorsUnknown"] == [] and reply["ok"] == 1.0
    with pytest.raises(OperationFailure) as err:
        client.large.command("getMore", open_ids[0], collection="cursors")
    assert err.value.code == 43  # CursorNotFound


def test_kill_cursors_of_many_ids_refuses_a_wrong_item_as_before(client: Client) -> None:
    ids: list[Any] = [Int64(i) for i in range(1, 300_000)]
    few: list[Any] = [Int64(1), 2]
    ids[200_000] = 2
    messages = []
    for cursors in (few, ids):
        with pytest.raises(OperationFailure) as err:
            client.large.command("killCursors", "c", cursors=cursors)
        messages.append((err.value.code, str((err.value.details or {}).get("errmsg"))))
    assert messages[0] == messages[1]
    assert messages[0][0] == 14


def test_large_body_with_nested_arrays_decodes_as_a_small_one(client: Client) -> None:
    coll = client.large.nested
    coll.insert_many([{"_id": i, "k": i % 100} for i in range(1000)])
    wanted = list(range(0, 200_000, 3))
    query = {"$and": [{"_id": {"$in": wanted}}, {"k": {"$nin": [1, 2, 3]}}]}
    assert len(bson.encode({"filter": query})) > LARGE_BODY
    got = [d["_id"] for d in coll.find(query).sort("_id", 1)]
    assert got == [i for i in range(0, 1000, 3) if i % 100 not in (1, 2, 3)]


def test_list_collections_of_many_collections(server: ServerThread, client: Client) -> None:
    db = client.manycolls
    names = [f"c{i:04d}" for i in range(300)]
    for name in reversed(names):
        db.create_collection(name)
    db.create_collection("v", viewOn="c0001", pipeline=[])
    entries = db.command("listCollections")["cursor"]["firstBatch"]
    assert [e["name"] for e in entries] == sorted([*names, "system.views", "v"])
    first = entries[0]
    assert list(first) == ["name", "type", "options", "info", "idIndex"]
    assert first["type"] == "collection" and first["info"]["readOnly"] is False
    assert first["idIndex"] == {"v": 2, "key": {"_id": 1}, "name": "_id_"}
    view = next(e for e in entries if e["name"] == "v")
    assert view == {
        "name": "v",
        "type": "view",
        "options": {"viewOn": "c0001", "pipeline": []},
        "info": {"readOnly": True},
    }
    only = db.command("listCollections", filter={"name": {"$in": ["c0002", "v"]}}, nameOnly=True)
    assert only["cursor"]["firstBatch"] == [
        {"name": "c0002", "type": "collection"},
        {"name": "v", "type": "view"},
    ]
    # The reply's layout, as mongod gives it: cursor {id, ns, firstBatch}, then ok.
    with rawwire.connect(server) as sock:
        raw = rawwire.op_msg(sock, {"listCollections": 1, "nameOnly": True, "$db": "manycolls"})
    assert list(raw) == ["cursor", "ok"]
    assert list(raw["cursor"]) == ["id", "ns", "firstBatch"]
    assert raw["cursor"]["id"] == 0 and type(raw["cursor"]["id"]) is Int64
    assert raw["cursor"]["ns"] == "manycolls.$cmd.listCollections"
    assert len(raw["cursor"]["firstBatch"]) == 302
