"""update, delete and findAndModify through real drivers: reply shapes, counts, upserts, index
maintenance, per-statement writeErrors and command-level errors with MongoDB's codes."""

from __future__ import annotations

from typing import Any

import pytest
from bson import ObjectId
from pymongo import AsyncMongoClient, MongoClient, ReturnDocument, UpdateOne
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure, WriteError

from ebbdb.server.embedded import ServerThread
from tests.e2e.ttl_helpers import error_code

Client = MongoClient[dict[str, Any]]


@pytest.fixture
def items(client: Client) -> Any:
    coll = client.shop.items
    coll.insert_many(
        [
            {"_id": 1, "name": "tea", "qty": 5, "tags": ["hot"]},
            {"_id": 2, "name": "coffee", "qty": 0, "tags": []},
            {"_id": 3, "name": "juice", "qty": 9, "tags": ["cold", "sweet"]},
        ]
    )
    return coll


# -- update ----------------------------------------------------------------------------------------


def test_update_one_and_many_counts(items: Any) -> None:
    r = items.update_one({"qty": {"$gt": 1}}, {"$inc": {"qty": 1}})
    assert (r.matched_count, r.modified_count, r.upserted_id) == (1, 1, None)
    r = items.update_many({}, {"$set": {"seen": True}})
    assert (r.matched_count, r.modified_count) == (3, 3)
    assert items.find_one({"_id": 1}) == {
        "_id": 1,
        "name": "tea",
        "qty": 6,
        "tags": ["hot"],
        "seen": True,
    }


def test_noop_update_counts_matched_not_modified(items: Any) -> None:
    r = items.update_one({"_id": 2}, {"$set": {"qty": 0}})
    assert (r.matched_count, r.modified_count) == (1, 0)


def test_raw_update_reply_shape(client: Client, items: Any) -> None:
    reply = client.shop.command(
        "update",
        "items",
        updates=[
            {"q": {"_id": 1}, "u": {"$set": {"a": 1}}},
            {"q": {"_id": 42}, "u": {"$set": {"a": 1}}, "upsert": True},
        ],
    )
    assert reply == {"n": 2, "nModified": 1, "upserted": [{"index": 1, "_id": 42}], "ok": 1.0}


def test_upsert_builds_from_query_equalities(items: Any) -> None:
    r = items.update_one({"name": "milk", "qty": {"$gt": 3}}, {"$set": {"cold": True}}, upsert=True)
    assert isinstance(r.upserted_id, ObjectId)
    doc = items.find_one({"_id": r.upserted_id})
    assert doc == {"_id": r.upserted_id, "name": "milk", "cold": True}


def test_set_on_insert_only_on_insert(items: Any) -> None:
    items.update_one({"_id": 1}, {"$setOnInsert": {"new": True}}, upsert=True)
    items.update_one({"_id": 7}, {"$setOnInsert": {"new": True}}, upsert=True)
    assert "new" not in items.find_one({"_id": 1})
    assert items.find_one({"_id": 7}) == {"_id": 7, "new": True}


def test_replace_one_keeps_id_and_refuses_another(items: Any) -> None:
    assert items.replace_one({"_id": 1}, {"name": "green tea"}).modified_count == 1
    assert items.find_one({"_id": 1}) == {"_id": 1, "name": "green tea"}
    assert error_code(lambda: items.replace_one({"_id": 1}, {"_id": 5, "x": 1})) == 66
    assert error_code(lambda: items.update_one({"_id": 1}, {"$set": {"_id": 5}})) == 66


def test_update_maintains_indexes(items: Any) -> None:
    items.create_index("qty")
    items.update_one({"_id": 3}, {"$set": {"qty": 100}})
    assert [d["_id"] for d in items.find({"qty": 9}).hint("qty_1")] == []
    assert [d["_id"] for d in items.find({"qty": 100}).hint("qty_1")] == [3]
    items.create_index("tags")
    items.update_one({"_id": 2}, {"$push": {"tags": {"$each": ["x", "y"]}}})
    assert [d["_id"] for d in items.find({"tags": "y"}).hint("tags_1")] == [2]
    items.update_one({"_id": 2}, {"$pull": {"tags": "y"}})
    assert [d["_id"] for d in items.find({"tags": "y"}).hint("tags_1")] == []


def test_update_into_duplicate_key_is_a_write_error(items: Any) -> None:
    items.create_index("name", unique=True)
    with pytest.raises(DuplicateKeyError):
        items.update_one({"_id": 1}, {"$set": {"name": "juice"}})
    assert items.find_one({"_id": 1})["name"] == "tea"


def test_ordered_bulk_stops_at_first_error(items: Any) -> None:
    with pytest.raises(BulkWriteError) as info:
        items.bulk_write(
            [
                UpdateOne({"_id": 1}, {"$set": {"a": 1}}),
                UpdateOne({"_id": 2}, {"$inc": {"name": 1}}),
                UpdateOne({"_id": 3}, {"$set": {"a": 1}}),
            ]
        )
    details = info.value.details
    assert details["nModified"] == 1
    assert details["nMatched"] == 1
    (err,) = details["writeErrors"]
    assert (err["index"], err["code"]) == (1, 14)
    assert items.find_one({"_id": 3}).get("a") is None


@pytest.mark.parametrize(
    ("update", "code"),
    [
        ({"$foo": {"a": 1}}, 9),
        ({"$set": {"a": 1}, "$inc": {"a": 1}}, 40),
        ({"$inc": {"qty": "x"}}, 14),
        ({"$push": {"name": 1}}, 2),
        ({"$set": {"name.first": 1}}, 28),
    ],
)
def test_bad_updates_are_write_errors(items: Any, update: dict[str, Any], code: int) -> None:
    with pytest.raises(WriteError) as info:
        items.update_one({"_id": 1}, update)
    assert info.value.code == code


def test_update_command_errors(client: Client, items: Any) -> None:
    db = client.shop
    assert (
        error_code(lambda: db.command("update", "items", updates=[{"u": {"$set": {"a": 1}}}]))
        == 40414
    )
    assert (
        error_code(lambda: db.command("update", "items", updates=[{"q": {}, "u": {}, "bogus": 1}]))
        == 40415
    )
    multi_replace = [{"q": {}, "u": {"a": 1}, "multi": True}]
    reply = db.command("update", "items", updates=multi_replace)
    assert reply["writeErrors"][0]["code"] == 9
    assert error_code(lambda: db.command("update", "items", updates=[])) == 16


# -- delete ----------------------------------------------------------------------------------------


def test_delete_one_and_many(items: Any) -> None:
    assert items.delete_one({"qty": {"$gte": 0}}).deleted_count == 1
    assert items.delete_many({}).deleted_count == 2
    assert items.count_documents({}) == 0


def test_delete_maintains_indexes_and_unique_keys(items: Any) -> None:
    items.create_index("name", unique=True)
    items.delete_one({"name": "tea"})
    items.insert_one({"_id": 10, "name": "tea"})
    assert items.find_one({"name": "tea"}) == {"_id": 10, "name": "tea"}


def test_delete_command_errors(client: Client, items: Any) -> None:
    db = client.shop
    assert error_code(lambda: db.command("delete", "items", deletes=[{"q": {}, "limit": 2}])) == 9
    assert error_code(lambda: db.command("delete", "items", deletes=[{"q": {}}])) == 40414
    reply = db.command("delete", "items", deletes=[{"q": {"$bogus": 1}, "limit": 0}])
    assert reply["n"] == 0 and reply["writeErrors"][0]["code"] == 2


# -- findAndModify ---------------------------------------------------------------------------------


def test_find_one_and_update_before_and_after(items: Any) -> None:
    before = items.find_one_and_update({"_id": 1}, {"$inc": {"qty": 1}})
    assert before["qty"] == 5
    after = items.find_one_and_update(
        {"_id": 1},
        {"$inc": {"qty": 1}},
        return_document=ReturnDocument.AFTER,
        projection={"qty": 1},
    )
    assert after == {"_id": 1, "qty": 7}


def test_find_one_and_modify_follows_sort(items: Any) -> None:
    doc = items.find_one_and_delete({}, sort=[("qty", -1)])
    assert doc["_id"] == 3
    doc = items.find_one_and_replace({}, {"name": "x"}, sort=[("qty", 1)])
    assert doc["_id"] == 2
    assert items.find_one({"_id": 2}) == {"_id": 2, "name": "x"}


def test_find_and_modify_raw_reply(client: Client, items: Any) -> None:
    reply = client.shop.command(
        "findAndModify", "items", query={"_id": 9}, update={"$set": {"a": 1}}, upsert=True, new=True
    )
    assert reply == {
        "lastErrorObject": {"n": 1, "updatedExisting": False, "upserted": 9},
        "value": {"_id": 9, "a": 1},
        "ok": 1.0,
    }
    reply = client.shop.command("findAndModify", "items", query={"_id": 9}, remove=True)
    assert reply == {"lastErrorObject": {"n": 1}, "value": {"_id": 9, "a": 1}, "ok": 1.0}
    reply = client.shop.command("findAndModify", "items", query={"_id": 9}, remove=True)
    assert reply == {"lastErrorObject": {"n": 0}, "value": None, "ok": 1.0}


@pytest.mark.parametrize(
    "args",
    [
        {"remove": True, "update": {"$set": {"a": 1}}},
        {},
        {"remove": True, "upsert": True},
        {"remove": True, "new": True},
    ],
)
def test_find_and_modify_argument_errors(client: Client, items: Any, args: dict[str, Any]) -> None:
    with pytest.raises(OperationFailure) as info:
        client.shop.command("findAndModify", "items", query={}, **args)
    assert info.value.code == 9


def test_find_and_modify_duplicate_key_is_a_command_error(items: Any) -> None:
    items.create_index("name", unique=True)
    with pytest.raises(DuplicateKeyError):
        items.find_one_and_update({"_id": 1}, {"$set": {"name": "juice"}})


# -- other clients and restarts --------------------------------------------------------------------


@pytest.mark.asyncio
async def test_async_client_writes(async_client: AsyncMongoClient[dict[str, Any]]) -> None:
    coll = async_client.shop.async_items
    await coll.insert_many([{"_id": i, "v": i} for i in range(5)])
    assert (await coll.update_many({"v": {"$gte": 2}}, {"$mul": {"v": 10}})).modified_count == 3
    assert (await coll.delete_many({"v": {"$lt": 2}})).deleted_count == 2
    doc = await coll.find_one_and_update({"_id": 4}, {"$set": {"w": 1}}, return_document=True)
    assert doc == {"_id": 4, "v": 40, "w": 1}


@pytest.mark.asyncio
async def test_motor_writes(motor_client: Any) -> None:
    coll = motor_client.shop.motor_items
    await coll.insert_one({"_id": 1, "v": 1})
    assert (await coll.update_one({"_id": 1}, {"$inc": {"v": 1}})).modified_count == 1
    assert await coll.find_one({"_id": 1}) == {"_id": 1, "v": 2}
    assert (await coll.delete_one({"_id": 1})).deleted_count == 1


def test_updates_survive_restart(start_server: Any, dbpath: str) -> None:
    srv: ServerThread = start_server(path=dbpath)
    with MongoClient(srv.uri) as c:
        c.db.t.insert_many([{"_id": 1, "v": 1}, {"_id": 2, "v": 2}])
        c.db.t.update_one({"_id": 1}, {"$set": {"v": "changed"}})
        c.db.t.delete_one({"_id": 2})
    srv.stop()
    again: ServerThread = start_server(path=dbpath)
    with MongoClient(again.uri) as c:
        assert list(c.db.t.find()) == [{"_id": 1, "v": "changed"}]
        assert c.db.t.count_documents({}) == 1


def test_failed_multi_update_counts_nothing_but_keeps_its_changes(client: Client) -> None:
    coll = client.shop.mixed
    coll.insert_many([{"_id": i, "s": "x" if i == 2 else 1} for i in range(5)])
    reply = client.shop.command(
        "update", "mixed", updates=[{"q": {}, "u": {"$inc": {"s": 1}}, "multi": True}]
    )
    assert (reply["n"], reply["nModified"], reply["writeErrors"][0]["code"]) == (0, 0, 14)
    assert [d["s"] for d in coll.find(sort=[("_id", 1)])] == [2, 2, "x", 1, 1]


# -- let -------------------------------------------------------------------------------------------


def test_let_variables_in_find_update_delete_and_find_and_modify(
    client: Client, items: Any
) -> None:
    over = {"$expr": {"$gt": ["$qty", "$$min"]}}
    assert [d["_id"] for d in items.find(over, let={"min": 4})] == [1, 3]
    r = items.update_many(over, {"$set": {"big": True}}, let={"min": 6})
    assert (r.matched_count, r.modified_count) == (1, 1)
    doc = items.find_one_and_update(
        over, {"$inc": {"qty": 1}}, let={"min": 8}, return_document=True
    )
    assert doc is not None and (doc["_id"], doc["qty"]) == (3, 10)
    assert items.delete_many(over, let={"min": 4}).deleted_count == 2
    # Without the variable, MongoDB's undefined-variable error.
    with pytest.raises(OperationFailure) as info:
        list(items.find(over))
    assert info.value.code == 17276
    assert error_code(lambda: list(items.find({}, let={"Bad": 1}))) == 16867


def test_duplicate_empty_array_key_reports_null(items: Any) -> None:
    items.create_index("tags", unique=True)  # document 2 holds tags: []
    with pytest.raises(DuplicateKeyError) as info:
        items.insert_one({"_id": 50, "tags": []})
    assert info.value.details is not None
    assert info.value.details["keyValue"] == {"tags": None}
    with pytest.raises(DuplicateKeyError):
        items.update_one({"_id": 1}, {"$set": {"tags": []}})


def test_mod_of_infinity_is_nan(client: Client, items: Any) -> None:
    (doc,) = items.aggregate([{"$limit": 1}, {"$project": {"m": {"$mod": [float("inf"), 3]}}}])
    assert doc["m"] != doc["m"]
