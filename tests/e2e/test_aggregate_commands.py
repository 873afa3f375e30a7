"""aggregate through real drivers: results, cursors and getMore, `let`, $lookup, $expr in find,
count_documents, and the command's own errors with MongoDB's codes."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from bson import Int64
from pymongo import AsyncMongoClient, MongoClient, monitoring
from pymongo.client_session import ClientSession
from pymongo.errors import OperationFailure

from tests.e2e.ttl_helpers import error_code

Client = MongoClient[dict[str, Any]]


@pytest.fixture
def orders(client: Client) -> Any:
    coll = client.shop.orders
    coll.insert_many(
        [
            {"_id": i, "item": ["tea", "coffee", "juice"][i % 3], "qty": i, "price": 1.5 * i}
            for i in range(1, 13)
        ]
    )
    client.shop.items.insert_many(
        [{"_id": "tea", "origin": "india"}, {"_id": "coffee", "origin": "brazil"}]
    )
    return coll


def test_group_sort_project(orders: Any) -> None:
    out = list(
        orders.aggregate(
            [
                {"$match": {"qty": {"$gte": 3}}},
                {"$group": {"_id": "$item", "n": {"$sum": 1}, "qty": {"$sum": "$qty"}}},
                {"$sort": {"qty": -1}},
                {
                    "$project": {
                        "_id": 0,
                        "item": "$_id",
                        "n": 1,
                        "avg": {"$divide": ["$qty", "$n"]},
                    }
                },
            ]
        )
    )
    assert out == [
        {"n": 4, "item": "tea", "avg": 7.5},
        {"n": 3, "item": "juice", "avg": 8.0},
        {"n": 3, "item": "coffee", "avg": 7.0},
    ]


def test_cursor_batches_through_get_more(orders: Any) -> None:
    cursor = orders.aggregate([{"$sort": {"_id": -1}}], batchSize=5)
    assert [d["_id"] for d in cursor] == list(range(12, 0, -1))


def test_raw_reply_shape_and_batch_size_zero(client: Client, orders: Any) -> None:
    reply = client.shop.command(
        "aggregate",
        "orders",
        pipeline=[{"$match": {"_id": 1}}, {"$project": {"qty": 1}}],
        cursor={},
    )
    assert reply == {
        "cursor": {"firstBatch": [{"_id": 1, "qty": 1}], "id": 0, "ns": "shop.orders"},
        "ok": 1.0,
    }
    reply = client.shop.command("aggregate", "orders", pipeline=[], cursor={"batchSize": 0})
    assert reply["cursor"]["firstBatch"] == [] and reply["cursor"]["id"] != 0
    more = client.shop.command("getMore", reply["cursor"]["id"], collection="orders")
    assert len(more["cursor"]["nextBatch"]) == 12 and more["cursor"]["id"] == 0


def test_lookup_and_let(orders: Any) -> None:
    out = list(
        orders.aggregate(
            [
                {"$match": {"_id": {"$in": [1, 2, 3]}}},
                {
                    "$lookup": {
                        "from": "items",
                        "localField": "item",
                        "foreignField": "_id",
                        "as": "info",
                    }
                },
                {
                    "$project": {
                        "origin": {"$first": "$info.origin"},
                        "big": {"$gt": ["$qty", "$$min"]},
                    }
                },
            ],
            let={"min": 1},
        )
    )
    # $first of an empty array is missing, so the field is left out.
    assert out == [
        {"_id": 1, "origin": "brazil", "big": False},
        {"_id": 2, "big": True},
        {"_id": 3, "origin": "india", "big": True},
    ]


def test_expr_in_find_and_count_documents(orders: Any) -> None:
    flt = {"$expr": {"$gt": [{"$multiply": ["$qty", 2]}, "$price"]}, "item": "tea"}
    assert [d["_id"] for d in orders.find(flt)] == [3, 6, 9, 12]
    assert orders.count_documents({"item": "tea"}) == 4
    assert orders.count_documents({"item": "tea"}, skip=1, limit=2) == 2


def test_collectionless_documents(client: Client) -> None:
    out = list(client.admin.aggregate([{"$documents": [{"x": 1}, {"x": 2}]}, {"$match": {"x": 2}}]))
    assert out == [{"x": 2}]


def test_aggregate_errors(client: Client, orders: Any) -> None:
    db = client.shop
    assert (
        error_code(lambda: db.command("aggregate", "orders", pipeline=[{"$bogus": 1}], cursor={}))
        == 40324
    )
    assert error_code(lambda: db.command("aggregate", "orders", pipeline=[])) == 9
    assert (
        error_code(lambda: db.command("aggregate", "orders", pipeline=[{"$limit": -1}], cursor={}))
        > 0
    )
    with pytest.raises(OperationFailure) as info:
        list(orders.aggregate([{"$project": {"x": {"$divide": [1, 0]}}}]))
    assert info.value.code == 2
    # The server still serves after pipeline errors.
    assert orders.count_documents({}) == 12


@pytest.mark.asyncio
async def test_async_client_aggregate(async_client: AsyncMongoClient[dict[str, Any]]) -> None:
    coll = async_client.shop.async_orders
    await coll.insert_many([{"_id": i, "g": i % 2} for i in range(10)])
    cursor = await coll.aggregate(
        [{"$group": {"_id": "$g", "n": {"$sum": 1}}}, {"$sort": {"_id": 1}}]
    )
    assert await cursor.to_list() == [{"_id": 0, "n": 5}, {"_id": 1, "n": 5}]
    assert await coll.count_documents({"g": 1}) == 5


@pytest.mark.asyncio
async def test_motor_aggregate(motor_client: Any) -> None:
    coll = motor_client.shop.motor_orders
    await coll.insert_many([{"_id": i} for i in range(7)])
    docs = await coll.aggregate([{"$match": {"_id": {"$gt": 2}}}, {"$count": "n"}]).to_list(None)
    assert docs == [{"n": 4}]


# -- cursor life: failures, concurrent getMores, kills ---------------------------------------------

# Each document costs the server tens of milliseconds: long enough for another request to arrive
# while a batch is being produced.
SLOW = [
    {
        "$project": {
            "s": {
                "$reduce": {
                    "input": {"$range": [0, 100_000]},
                    "initialValue": 0,
                    "in": {"$add": ["$$value", 1]},
                }
            }
        }
    }
]


def test_failed_get_more_ends_the_cursor(client: Client) -> None:
    client.shop.nums.insert_many([{"_id": i, "a": i} for i in range(100)])
    first = client.shop.command(
        "aggregate",
        "nums",
        pipeline=[{"$project": {"x": {"$divide": [1, {"$subtract": ["$a", 50]}]}}}],
        cursor={"batchSize": 10},
    )
    cid = first["cursor"]["id"]
    codes = []
    for _ in range(6):
        try:
            client.shop.command("getMore", cid, collection="nums", batchSize=10)
        except OperationFailure as exc:
            codes.append(exc.code)
            if exc.code == 43:
                break
    assert codes == [2, 43]


class _Sent(monitoring.CommandListener):
    """Sets `sent` once the client has sent its getMore."""

    def __init__(self) -> None:
        self.sent = threading.Event()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name == "getMore":
            self.sent.set()

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def _get_more_in_thread(
    client: Client, uri: str
) -> tuple[Any, dict[str, Any], threading.Thread, Client, ClientSession]:
    """Open a cursor over 100 slow documents in a session of a client of its own, then start a
    getMore of 30 of them (seconds of work) in that session on another thread; return once it
    has been sent and the server has had a moment to start on it. Returns the cursor id, the
    getMore's outcome ("reply" or "code", filled in when it ends), its thread, and the client
    and session (a getMore must be in its cursor's session, as mongod checks)."""
    client.shop.slow.insert_many([{"_id": i} for i in range(100)])
    listener = _Sent()
    owner: Client = MongoClient(uri, event_listeners=[listener])
    session = owner.start_session()
    first = owner.shop.command(
        "aggregate", "slow", pipeline=SLOW, cursor={"batchSize": 1}, session=session
    )
    cid = first["cursor"]["id"]
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["reply"] = owner.shop.command(
                "getMore", cid, collection="slow", batchSize=30, session=session
            )
        except OperationFailure as exc:
            out["code"] = exc.code

    t = threading.Thread(target=run)
    t.start()
    assert listener.sent.wait(10)
    time.sleep(0.3)
    return cid, out, t, owner, session


def test_concurrent_get_more_is_refused(client: Client, uri: str) -> None:
    cid, out, t, owner, session = _get_more_in_thread(client, uri)
    with owner, session:
        with pytest.raises(OperationFailure) as info:
            owner.shop.command("getMore", cid, collection="slow", batchSize=1, session=session)
        assert info.value.code == 143
        t.join(60)
        assert len(out["reply"]["cursor"]["nextBatch"]) == 30


def test_kill_during_get_more(client: Client, uri: str) -> None:
    cid, out, t, owner, session = _get_more_in_thread(client, uri)
    with owner, session:
        killed = client.shop.command("killCursors", "slow", cursors=[cid])
        assert killed["cursorsKilled"] == [cid]
        t.join(60)
        assert out.get("code") == 237
        with pytest.raises(OperationFailure) as info:
            owner.shop.command("getMore", cid, collection="slow", session=session)
        assert info.value.code == 43


def test_result_past_64_bits_is_an_overflow_error(client: Client) -> None:
    far = {"$toDate": Int64(2**63 - 1)}
    near = {"$toDate": Int64(-(2**63))}
    pipeline = [{"$documents": [{}]}, {"$project": {"r": {"$subtract": [far, near]}}}]
    with pytest.raises(OperationFailure) as info:
        list(client.admin.aggregate(pipeline))
    assert info.value.code == 15
    assert client.admin.command("ping")["ok"] == 1.0
