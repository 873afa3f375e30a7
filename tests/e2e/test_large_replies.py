"""Large replies (server/raw_reply.py): a batch of a megabyte or more goes out in slices as the
socket drains, never copied whole on the event loop. The client must still get every document, in
order, and the replies on one connection in the order of its requests."""

from __future__ import annotations

from typing import Any

import bson
from pymongo import MongoClient

from ebbdb.protocol import encode_msg
from ebbdb.server.embedded import ServerThread
from tests.e2e.rawwire import connect, next_request_id, read_msg

DOCS = 3000
PAD = "x" * 1000  # 3000 documents of about 1 KB: a batch of about 3 MB


def _load(client: MongoClient[dict[str, Any]]) -> None:
    client.big.c.insert_many([{"_id": i, "pad": PAD, "i": i} for i in range(DOCS)])


def test_a_multi_megabyte_get_more_brings_every_document_in_order(
    client: MongoClient[dict[str, Any]],
) -> None:
    _load(client)
    docs = list(client.big.c.find().sort("i", -1))  # a first batch of 101, then one getMore
    assert [d["_id"] for d in docs] == list(range(DOCS - 1, -1, -1))
    assert all(d["pad"] == PAD for d in docs)
    batch = client.big.command("find", "c", batchSize=DOCS)["cursor"]["firstBatch"]
    assert [d["_id"] for d in batch] == list(range(DOCS))


def test_replies_on_one_connection_keep_the_order_of_the_requests(
    server: ServerThread, client: MongoClient[dict[str, Any]]
) -> None:
    _load(client)
    find_id, ping_id = next_request_id(), next_request_id()
    find = {"find": "c", "batchSize": DOCS, "$db": "big"}
    with connect(server) as sock:
        # Both requests in one write: the ping waits for the large reply to be all written.
        sock.sendall(
            encode_msg(find_id, 0, bson.encode(find))
            + encode_msg(ping_id, 0, bson.encode({"ping": 1, "$db": "admin"}))
        )
        first, second = read_msg(sock), read_msg(sock)
    assert first.response_to == find_id
    batch = bson.decode(first.body)["cursor"]["firstBatch"]
    assert [d["_id"] for d in batch] == list(range(DOCS))
    assert second.response_to == ping_id
    assert bson.decode(second.body) == {"ok": 1.0}


def test_a_client_that_does_not_read_its_large_reply_holds_up_no_one(
    server: ServerThread, client: MongoClient[dict[str, Any]]
) -> None:
    _load(client)
    find_id = next_request_id()
    with connect(server) as slow:
        slow.sendall(
            encode_msg(find_id, 0, bson.encode({"find": "c", "batchSize": DOCS, "$db": "big"}))
        )
        # The slow client reads nothing yet: its reply waits in slices; others are answered.
        for _ in range(20):
            assert client.admin.command("ping") == {"ok": 1.0}
        assert client.big.c.count_documents({}) == DOCS
        reply = read_msg(slow)
    assert reply.response_to == find_id
    assert len(bson.decode(reply.body)["cursor"]["firstBatch"]) == DOCS
