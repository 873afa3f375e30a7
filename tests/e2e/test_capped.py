"""Capped collections through pymongo: create's options and their checks, eviction of the oldest
documents by `max` and by `size`, natural and reverse natural order, collStats and options(),
collMod's cappedSize/cappedMax, convertToCapped, cloneCollectionAsCapped, deletes and updates as
MongoDB 7 takes them, TTL indexes, and tailable / awaitData cursors that wait without holding the
event loop."""

from __future__ import annotations

import asyncio
import datetime
import threading
from typing import Any

import bson
import pytest
from bson import Int64
from pymongo import AsyncMongoClient, CursorType, MongoClient
from pymongo.asynchronous.database import AsyncDatabase
from pymongo.database import Database
from pymongo.errors import OperationFailure

from ebbdb.server.pytest_plugin import TtlClock
from tests.waiting import wait_until, wait_until_async

Doc = dict[str, Any]

#: How long an awaitData getMore is let wait for data in the tests that end its wait themselves
#: (an insert, killCursors): ten minutes, so that only what the test does can end it in time.
AWAIT_MS = 600_000
#: The bound on each wait of the tests' own: far shorter than AWAIT_MS.
WAIT_SECONDS = 10.0


def ids(coll: Any, **find: Any) -> list[Any]:
    return [d["_id"] for d in coll.find({}, **find)]


def failure(fn: Any, *args: Any, **kwargs: Any) -> tuple[int, str, str]:
    with pytest.raises(OperationFailure) as err:
        fn(*args, **kwargs)
    details = err.value.details or {}
    return err.value.code or 0, details.get("codeName", ""), details.get("errmsg", "")


# -- create ----------------------------------------------------------------------------------------


def test_create_stores_rounded_size_and_max(mongo_db: Database[Doc]) -> None:
    mongo_db.create_collection("c", capped=True, size=1000, max=5)
    mongo_db.create_collection("d", capped=True, size=4096.9)
    mongo_db.create_collection("e", capped=True, size=1, max=0)
    infos = {i["name"]: i["options"] for i in mongo_db.list_collections()}
    assert infos["c"] == {"capped": True, "size": 1024, "max": 5}
    assert infos["d"] == {"capped": True, "size": 4096}
    # No document limit: stored as 2^31 - 1 (an int64, as appendNumber writes it).
    assert infos["e"] == {"capped": True, "size": 256, "max": 2147483647}
    assert type(infos["e"]["max"]) is Int64
    assert mongo_db.c.options() == {"capped": True, "size": 1024, "max": 5}
    assert mongo_db.c.options()["capped"] is True


@pytest.mark.parametrize(
    ("options", "code", "message"),
    [
        ({"capped": True}, 72, "the 'size' field is required when 'capped' is true"),
        ({"capped": True, "max": 5}, 72, "the 'size' field is required when 'capped' is true"),
        (
            {"size": 4096},
            72,
            "the 'capped' field needs to be true when either the 'size' or 'max' fields are "
            "present",
        ),
        (
            {"capped": False, "max": 3},
            72,
            "the 'capped' field needs to be true when either the 'size' or 'max' fields are "
            "present",
        ),
        (
            {"capped": True, "size": 0},
            51024,
            "BSON field 'size' value must be >= 1, actual value '0'",
        ),
        (
            {"capped": True, "size": 1 << 62},
            51024,
            "BSON field 'size' value must be <= 1125899906842624, actual value "
            "'4611686018427387904'",
        ),
        (
            {"capped": True, "size": 4096, "max": 1 << 31},
            51024,
            "BSON field 'max' value must be < 2147483648, actual value '2147483648'",
        ),
        (
            {"capped": True, "size": "x"},
            14,
            "BSON field 'create.size' is the wrong type 'string', expected types "
            "'[long, int, decimal, double]'",
        ),
    ],
)
def test_create_refuses_bad_capped_options(
    mongo_db: Database[Doc], options: Doc, code: int, message: str
) -> None:
    got = failure(mongo_db.command, {"create": "c", **options})
    assert (got[0], got[2]) == (code, message)
    assert "c" not in mongo_db.list_collection_names()


# -- eviction and order ----------------------------------------------------------------------------


def test_max_evicts_the_oldest_documents_in_insertion_order(mongo_db: Database[Doc]) -> None:
    mongo_db.create_collection("c", capped=True, size=1 << 20, max=3)
    for i in [5, 1, 4, 2, 3]:
        mongo_db.c.insert_one({"_id": i})
    assert ids(mongo_db.c) == [4, 2, 3]
    result = mongo_db.c.insert_many([{"_id": 10}, {"_id": 11}, {"_id": 12}, {"_id": 13}])
    assert result.inserted_ids == [10, 11, 12, 13]
    assert ids(mongo_db.c) == [11, 12, 13]
    assert ids(mongo_db.c, sort=[("$natural", -1)]) == [13, 12, 11]
    assert [d["_id"] for d in mongo_db.c.find().hint([("$natural", -1)])] == [13, 12, 11]
    assert mongo_db.c.count_documents({}) == 3
    # Natural order is insertion order even where _id order differs.
    mongo_db.c.insert_one({"_id": 0})
    assert ids(mongo_db.c) == [12, 13, 0]
    assert ids(mongo_db.c, sort=[("_id", 1)]) == [0, 12, 13]


def test_size_evicts_by_data_size(mongo_db: Database[Doc]) -> None:
    mongo_db.create_collection("c", capped=True, size=300)  # rounded up to 512
    pad = "x" * 78
    docs = [{"_id": i, "p": pad} for i in range(10)]
    one = len(bson.encode(docs[0]))
    assert one == 100
    for d in docs:
        mongo_db.c.insert_one(d)
    assert ids(mongo_db.c) == [5, 6, 7, 8, 9]  # 5 * 100 bytes <= 512 < 6 * 100
    stats = mongo_db.command("collStats", "c")
    assert (stats["count"], stats["size"]) == (5, 500)
    # A document larger than the whole cap stays alone (everything older goes).
    mongo_db.c.insert_one({"_id": "big", "p": "y" * 1000})
    assert ids(mongo_db.c) == ["big"]
    mongo_db.c.insert_one({"_id": "next"})
    assert ids(mongo_db.c) == ["next"]


def test_deletes_and_updates_are_allowed_as_in_mongodb_7(mongo_db: Database[Doc]) -> None:
    """Since 5.0 (FCV 5.3 for updates) mongod takes deletes on capped collections, and updates
    that change a document's size; a growing update removes nothing (only inserts do)."""
    mongo_db.create_collection("c", capped=True, size=512, max=4)
    mongo_db.c.insert_many([{"_id": i, "v": "a"} for i in range(4)])
    assert mongo_db.c.delete_one({"_id": 1}).deleted_count == 1
    res = mongo_db.c.update_one({"_id": 2}, {"$set": {"v": "b" * 440}})  # 23 -> 462 bytes
    assert (res.matched_count, res.modified_count) == (1, 1)
    assert mongo_db.c.update_one({"_id": 3}, {"$set": {"v": ""}}).modified_count == 1
    assert ids(mongo_db.c) == [0, 2, 3]
    assert mongo_db.c.find_one({"_id": 2}) == {"_id": 2, "v": "b" * 440}
    # The next insert (530 bytes) brings it back within 512, oldest first.
    mongo_db.c.insert_one({"_id": 4, "v": "c"})
    assert ids(mongo_db.c) == [2, 3, 4]
    assert mongo_db.c.delete_many({}).deleted_count == 3
    mongo_db.c.insert_one({"_id": 5})
    assert ids(mongo_db.c) == [5]


def test_upsert_into_a_capped_collection_evicts(mongo_db: Database[Doc]) -> None:
    mongo_db.create_collection("c", capped=True, size=4096, max=2)
    mongo_db.c.insert_many([{"_id": 1}, {"_id": 2}])
    mongo_db.c.update_one({"_id": 3}, {"$set": {"a": 1}}, upsert=True)
    assert ids(mongo_db.c) == [2, 3]
    assert mongo_db.command("collStats", "c")["count"] == 2


# -- statistics, collMod ---------------------------------------------------------------------------


def test_coll_stats_reports_capped_bounds(mongo_db: Database[Doc]) -> None:
    mongo_db.create_collection("c", capped=True, size=5000, max=7)
    mongo_db.create_collection("nomax", capped=True, size=5000)
    mongo_db.create_collection("plain")
    stats = mongo_db.command("collStats", "c")
    assert (stats["capped"], stats["max"], stats["maxSize"]) == (True, 7, 5120)
    keys = list(stats)
    assert keys.index("capped") + 1 == keys.index("max") == keys.index("maxSize") - 1
    assert mongo_db.command("collStats", "c", scale=1024)["maxSize"] == 5
    assert mongo_db.command("collStats", "nomax")["max"] == 0
    plain = mongo_db.command("collStats", "plain")
    assert plain["capped"] is False and "max" not in plain and "maxSize" not in plain
    agg = list(mongo_db.c.aggregate([{"$collStats": {"storageStats": {}}}]))
    assert agg[0]["storageStats"]["maxSize"] == 5120


def test_coll_mod_changes_the_bounds_from_the_next_insert(mongo_db: Database[Doc]) -> None:
    mongo_db.create_collection("c", capped=True, size=4096, max=10)
    mongo_db.create_collection("plain")
    mongo_db.c.insert_many([{"_id": i} for i in range(6)])
    assert mongo_db.command("collMod", "c", cappedMax=3, cappedSize=9000) == {"ok": 1.0}
    assert mongo_db.c.options() == {"capped": True, "size": 9216, "max": 3}
    assert ids(mongo_db.c) == [0, 1, 2, 3, 4, 5]  # nothing removed until an insert
    mongo_db.c.insert_one({"_id": 6})
    assert ids(mongo_db.c) == [4, 5, 6]
    got = failure(mongo_db.command, "collMod", "plain", cappedSize=5000)
    assert got == (72, "InvalidOptions", "Collection must be capped.")
    got = failure(mongo_db.command, "collMod", "c", cappedSize=0)
    assert got[0] == 51024
    assert got[2] == "BSON field 'cappedSize' value must be >= 1, actual value '0'"


# -- convertToCapped, cloneCollectionAsCapped ------------------------------------------------------


def test_convert_to_capped_keeps_natural_order_and_only_the_id_index(
    mongo_db: Database[Doc],
) -> None:
    mongo_db.c.insert_many([{"_id": i, "p": "x" * 78} for i in [3, 1, 2, 5, 4]])  # 100 bytes
    mongo_db.c.create_index("p")
    uuid = next(mongo_db.list_collections())["info"]["uuid"]
    assert mongo_db.command("convertToCapped", "c", size=250) == {"ok": 1.0}
    assert ids(mongo_db.c) == [5, 4]  # 256 bytes hold the 2 newest 100-byte documents
    assert mongo_db.c.options() == {"capped": True, "size": 256}
    assert [ix["name"] for ix in mongo_db.c.list_indexes()] == ["_id_"]
    assert next(mongo_db.list_collections())["info"]["uuid"] != uuid
    mongo_db.c.insert_one({"_id": 9, "p": "x" * 78})
    assert ids(mongo_db.c) == [4, 9]
    got = failure(mongo_db.command, "convertToCapped", "missing", size=4096)
    assert got == (
        26,
        "NamespaceNotFound",
        f"source collection {mongo_db.name}.missing does not exist",
    )


def test_clone_collection_as_capped(mongo_db: Database[Doc]) -> None:
    mongo_db.src.insert_many([{"_id": i} for i in [2, 9, 4]])
    reply = mongo_db.command("cloneCollectionAsCapped", "src", toCollection="dst", size=4096)
    assert reply == {"ok": 1.0}
    assert ids(mongo_db.dst) == [2, 9, 4]
    assert ids(mongo_db.src) == [2, 9, 4]
    assert mongo_db.dst.options() == {"capped": True, "size": 4096}
    assert mongo_db.src.options() == {}
    got = failure(mongo_db.command, "cloneCollectionAsCapped", "src", toCollection="dst", size=1)
    assert got == (48, "NamespaceExists", "to collection already exists")
    got = failure(mongo_db.command, "cloneCollectionAsCapped", "nope", toCollection="x", size=1)
    assert got == (
        26,
        "NamespaceNotFound",
        f"source collection {mongo_db.name}.nope does not exist",
    )


# -- TTL -------------------------------------------------------------------------------------------


def test_ttl_index_on_a_capped_collection(mongo_db: Database[Doc], ebbdb_clock: TtlClock) -> None:
    mongo_db.create_collection("c", capped=True, size=1 << 20, max=3)
    assert mongo_db.c.create_index("t", expireAfterSeconds=60) == "t_1"
    now = ebbdb_clock.now()
    mongo_db.c.insert_many(
        [{"_id": i, "t": now + datetime.timedelta(seconds=30 * i)} for i in range(4)]
    )
    assert ids(mongo_db.c) == [1, 2, 3]  # max 3
    ebbdb_clock.advance(100)  # _id 1 (t + 30 s) is past its 60 s
    assert ids(mongo_db.c) == [2, 3]
    assert ebbdb_clock.run_ttl_pass().by_namespace == {f"{mongo_db.name}.c": 1}
    assert mongo_db.command("collStats", "c")["count"] == 2


# -- tailable cursors ------------------------------------------------------------------------------


def test_tailable_on_a_collection_that_is_not_capped(mongo_db: Database[Doc]) -> None:
    mongo_db.plain.insert_one({"_id": 1})
    for kind in (CursorType.TAILABLE, CursorType.TAILABLE_AWAIT):
        got = failure(list, mongo_db.plain.find(cursor_type=kind))
        assert got == (
            2,
            "BadValue",
            f"error processing query: ns={mongo_db.name}.plainTree: $and\nSort: {{}}\nProj: {{}}\n"
            " tailable cursor requested on non capped collection",
        )


def test_tailable_option_checks(mongo_db: Database[Doc]) -> None:
    mongo_db.create_collection("c", capped=True, size=4096)
    got = failure(mongo_db.command, "find", "c", awaitData=True)
    assert got == (9, "FailedToParse", "Cannot set 'awaitData' without also setting 'tailable'")
    got = failure(mongo_db.command, "find", "c", tailable=True, sort={"_id": 1})
    assert got == (2, "BadValue", "cannot use tailable option with a sort other than {$natural: 1}")
    got = failure(mongo_db.command, "find", "c", tailable=True, singleBatch=True)
    assert got == (2, "BadValue", "cannot use tailable option with the 'singleBatch' option")


def test_tailable_cursor_stays_open_and_returns_new_documents(mongo_db: Database[Doc]) -> None:
    mongo_db.create_collection("c", capped=True, size=4096, max=100)
    # On an empty collection the cursor is not kept (SERVER-13955).
    assert mongo_db.command("find", "c", tailable=True)["cursor"]["id"] == 0
    mongo_db.c.insert_many([{"_id": 1}, {"_id": 2}])
    reply = mongo_db.command("find", "c", tailable=True)
    cid = reply["cursor"]["id"]
    assert reply["cursor"]["firstBatch"] == [{"_id": 1}, {"_id": 2}] and cid != 0
    more = mongo_db.command("getMore", cid, collection="c")
    assert more["cursor"]["nextBatch"] == [] and more["cursor"]["id"] == cid
    mongo_db.c.insert_one({"_id": 3})
    more = mongo_db.command("getMore", cid, collection="c")
    assert more["cursor"]["nextBatch"] == [{"_id": 3}] and more["cursor"]["id"] == cid
    got = failure(mongo_db.command, "getMore", cid, collection="c", maxTimeMS=10)
    assert got == (
        2,
        "BadValue",
        "cannot set maxTimeMS on getMore command for a non-awaitData cursor",
    )
    mongo_db.command("killCursors", "c", cursors=[cid])


def _wait_for_get_more(admin: Database[Doc], cursor_id: int) -> None:
    """Wait (bounded) until currentOp lists a getMore of the cursor: it waits for data, on the
    server."""
    wait_until(
        lambda: admin.command({"currentOp": 1, "command.getMore": cursor_id})["inprog"],
        f"a getMore of cursor {cursor_id} running",
    )


async def _wait_for_get_more_async(admin: AsyncDatabase[Doc], cursor_id: int) -> None:
    async def running() -> list[Doc]:
        reply = await admin.command({"currentOp": 1, "command.getMore": cursor_id})
        return list(reply["inprog"])

    await wait_until_async(running, f"a getMore of cursor {cursor_id} running")


def test_tailable_await_cursor_receives_a_later_insert(
    mongo_db: Database[Doc], mongo_client: MongoClient[Doc]
) -> None:
    mongo_db.create_collection("c", capped=True, size=1 << 16)
    mongo_db.c.insert_one({"_id": 0})
    cursor = mongo_db.c.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(AWAIT_MS)
    assert next(cursor) == {"_id": 0}
    assert cursor.cursor_id
    got: list[Doc] = []
    reader = threading.Thread(target=lambda: got.append(next(cursor)), daemon=True)
    reader.start()
    _wait_for_get_more(mongo_client.admin, cursor.cursor_id)
    mongo_db.c.insert_one({"_id": 1})
    reader.join(WAIT_SECONDS)  # far less than the getMore would wait for nothing
    assert got == [{"_id": 1}], "the waiting getMore was not answered with the insert"
    assert cursor.alive and cursor.cursor_id not in (None, 0)
    # Nothing new: once maxTimeMS is out the getMore answers an empty batch (not 50
    # MaxTimeMSExpired), the cursor open; its next getMore has what came since.
    reply = mongo_db.command("find", "c", filter={"_id": {"$gt": 0}}, tailable=True, awaitData=True)
    cid = reply["cursor"]["id"]
    assert reply["cursor"]["firstBatch"] == [{"_id": 1}] and cid != 0
    more = mongo_db.command("getMore", cid, collection="c", maxTimeMS=200)
    assert more["cursor"]["nextBatch"] == [] and more["cursor"]["id"] == cid
    mongo_db.c.insert_one({"_id": 2})
    more = mongo_db.command("getMore", cid, collection="c", maxTimeMS=200)
    assert more["cursor"]["nextBatch"] == [{"_id": 2}] and more["cursor"]["id"] == cid
    mongo_db.command("killCursors", "c", cursors=[cid])
    cursor.close()


@pytest.mark.asyncio
async def test_await_data_does_not_hold_the_event_loop(
    async_mongo_client: AsyncMongoClient[Doc], ebbdb_uri: str, request: pytest.FixtureRequest
) -> None:
    """While one client's getMore awaits data, another client's pings are answered: their replies
    come while the getMore still waits."""
    db = async_mongo_client[f"capped_await_{abs(hash(request.node.name)) % 10**8}"]
    await db.create_collection("c", capped=True, size=1 << 16)
    await db.c.insert_one({"_id": 0})
    other: AsyncMongoClient[Doc] = AsyncMongoClient(ebbdb_uri)
    try:
        cursor = db.c.find(cursor_type=CursorType.TAILABLE_AWAIT).max_await_time_ms(AWAIT_MS)
        assert await cursor.next() == {"_id": 0}
        waiting = asyncio.create_task(cursor.next())
        await _wait_for_get_more_async(other.admin, cursor.cursor_id)
        for _ in range(5):
            assert (await other.admin.command("ping"))["ok"] == 1.0
        assert not waiting.done()
        await db.c.insert_one({"_id": 1})
        assert await asyncio.wait_for(waiting, WAIT_SECONDS) == {"_id": 1}
        await cursor.close()
    finally:
        await other.close()
        await async_mongo_client.drop_database(db.name)


@pytest.mark.asyncio
async def test_kill_cursors_ends_an_awaiting_get_more_at_once(
    async_mongo_client: AsyncMongoClient[Doc], ebbdb_uri: str, request: pytest.FixtureRequest
) -> None:
    """The killed cursor's waiting getMore ends with 237, within a bounded wait far shorter than
    its own maxTimeMS: the kill woke it."""
    db = async_mongo_client[f"capped_kill_{abs(hash(request.node.name)) % 10**8}"]
    await db.create_collection("c", capped=True, size=4096)
    await db.c.insert_one({"_id": 0})
    other: AsyncMongoClient[Doc] = AsyncMongoClient(ebbdb_uri)
    try:
        reply = await db.command("find", "c", tailable=True, awaitData=True)
        cid = reply["cursor"]["id"]
        waiting = asyncio.create_task(
            db.command("getMore", cid, collection="c", maxTimeMS=AWAIT_MS)
        )
        await _wait_for_get_more_async(other.admin, cid)
        killed = await other[db.name].command("killCursors", "c", cursors=[cid])
        assert killed["cursorsKilled"] == [cid]
        with pytest.raises(OperationFailure) as err:
            await asyncio.wait_for(waiting, WAIT_SECONDS)
        assert (err.value.code, err.value.details["errmsg"]) == (237, f"cursor id {cid} was killed")
    finally:
        await other.close()
        await async_mongo_client.drop_database(db.name)
