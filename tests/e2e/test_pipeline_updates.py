"""Pipeline-style updates through pymongo: update_one/update_many/find_one_and_update/bulk_write
whose update is an array of $set/$addFields, $project, $unset, $replaceRoot/$replaceWith stages,
with `let`, a statement's `c`, $$NOW and upserts; MongoDB 7.0's errors for stages an update may not
hold, arrayFilters, $$CLUSTER_TIME on a standalone server; and the rules every update obeys
(immutable `_id`, unique indexes, schema validation, Cosmos TTL last-modified times)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from bson import ObjectId
from pymongo import MongoClient, ReturnDocument, UpdateMany, UpdateOne
from pymongo.database import Database
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure, WriteError

from tests.e2e.ttl_helpers import advance, ids_after

Client = MongoClient[dict[str, Any]]
Db = Database[dict[str, Any]]


@pytest.fixture
def coll(mongo_db: Db) -> Any:
    c = mongo_db.scores
    c.insert_many(
        [
            {"_id": 1, "name": "ann", "tests": [90, 80], "bonus": 5},
            {"_id": 2, "name": "bob", "tests": [70, 60], "bonus": 0},
        ]
    )
    return c


def failure(exc: pytest.ExceptionInfo[Any]) -> tuple[int, str]:
    return int(exc.value.code), str(exc.value.details["errmsg"])


def test_update_one_with_set_and_unset(coll: Any) -> None:
    r = coll.update_one(
        {"_id": 1},
        [{"$set": {"total": {"$add": [{"$sum": "$tests"}, "$bonus"]}}}, {"$unset": "bonus"}],
    )
    assert (r.matched_count, r.modified_count, r.upserted_id) == (1, 1, None)
    assert coll.find_one({"_id": 1}) == {"_id": 1, "name": "ann", "tests": [90, 80], "total": 175}


def test_update_many_sees_each_document(coll: Any) -> None:
    r = coll.update_many({}, [{"$addFields": {"avg": {"$avg": "$tests"}}}])
    assert (r.matched_count, r.modified_count) == (2, 2)
    assert [d["avg"] for d in coll.find().sort("_id", 1)] == [85.0, 65.0]


def test_project_and_replace_stages(coll: Any) -> None:
    coll.update_one({"_id": 1}, [{"$project": {"name": 1}}])
    assert coll.find_one({"_id": 1}) == {"_id": 1, "name": "ann"}
    coll.update_one({"_id": 2}, [{"$replaceRoot": {"newRoot": {"who": "$name"}}}])
    assert coll.find_one({"_id": 2}) == {"_id": 2, "who": "bob"}  # the _id stays
    coll.update_one({"_id": 2}, [{"$replaceWith": {"$mergeObjects": ["$$ROOT", {"x": 1}]}}])
    assert coll.find_one({"_id": 2}) == {"_id": 2, "who": "bob", "x": 1}


def test_no_change_is_no_modification(coll: Any) -> None:
    r = coll.update_one({"_id": 1}, [{"$set": {"bonus": 5}}])
    assert (r.matched_count, r.modified_count) == (1, 0)
    reply = coll.database.command("update", coll.name, updates=[{"q": {"_id": 1}, "u": []}])
    assert reply == {"n": 1, "nModified": 0, "ok": 1.0}  # an empty pipeline changes nothing


def test_let_and_statement_constants(coll: Any) -> None:
    coll.update_one({"_id": 1}, [{"$set": {"grade": "$$g"}}], let={"g": {"$concat": ["A", "+"]}})
    assert coll.find_one({"_id": 1})["grade"] == "A+"
    # A statement's `c` holds constants: a string starting with "$" is a string there.
    reply = coll.database.command(
        "update",
        coll.name,
        updates=[
            {"q": {"_id": 2}, "u": [{"$set": {"note": "$$n", "by": "$$who"}}], "c": {"n": "$x"}}
        ],
        let={"who": "ci"},
    )
    assert reply == {"n": 1, "nModified": 1, "ok": 1.0}
    assert coll.find_one({"_id": 2}, {"note": 1, "by": 1}) == {"_id": 2, "note": "$x", "by": "ci"}


def test_constants_need_a_pipeline(coll: Any) -> None:
    reply = coll.database.command(
        "update", coll.name, updates=[{"q": {"_id": 2}, "u": {"$set": {"a": 1}}, "c": {"n": 1}}]
    )
    assert reply["writeErrors"] == [
        {
            "index": 0,
            "code": 51198,
            "errmsg": "Constant values may only be specified for pipeline updates",
        }
    ]


def _utc_now_ms() -> datetime.datetime:
    """Real time as a BSON date holds it: UTC, naive, whole milliseconds."""
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def test_now_is_one_instant_for_the_command(client: Client, coll: Any) -> None:
    before = _utc_now_ms()
    coll.update_many({}, [{"$set": {"at": "$$NOW"}}])
    after = _utc_now_ms()
    first, second = (d["at"] for d in coll.find().sort("_id", 1))
    assert first == second
    assert before <= first <= after  # the server's time while the command ran


def test_cluster_time_is_not_available_on_a_standalone_server(coll: Any) -> None:
    with pytest.raises(WriteError) as exc:
        coll.update_one({"_id": 1}, [{"$set": {"t": "$$CLUSTER_TIME"}}])
    assert failure(exc) == (51144, "Builtin variable '$$CLUSTER_TIME' is not available")
    # Nothing matched, nothing evaluated: no error.
    r = coll.update_one({"_id": 99}, [{"$set": {"t": "$$CLUSTER_TIME"}}])
    assert (r.matched_count, r.modified_count) == (0, 0)


def test_upsert_seeds_from_the_query_then_runs_the_pipeline(coll: Any) -> None:
    r = coll.update_one(
        {"name": "cy", "tests": {"$size": 0}, "level": {"$in": [3]}},
        [{"$set": {"double": {"$multiply": ["$level", 2]}, "tests": []}}],
        upsert=True,
    )
    assert isinstance(r.upserted_id, ObjectId)
    assert (r.matched_count, r.modified_count) == (0, 0)
    doc = coll.find_one({"_id": r.upserted_id}, {"_id": 0})
    assert doc == {"level": 3, "name": "cy", "double": 6, "tests": []}
    r = coll.update_one({"_id": 7}, [{"$set": {"seen": True}}], upsert=True)
    assert r.upserted_id == 7
    assert coll.find_one({"_id": 7}) == {"_id": 7, "seen": True}


def test_find_one_and_update_with_a_pipeline(coll: Any) -> None:
    before = coll.find_one_and_update({"_id": 2}, [{"$set": {"bonus": {"$add": ["$bonus", 3]}}}])
    assert before["bonus"] == 0
    after = coll.find_one_and_update(
        {"_id": 2},
        [{"$set": {"bonus": {"$multiply": ["$bonus", "$$k"]}}}, {"$project": {"bonus": 1}}],
        let={"k": 10},
        return_document=ReturnDocument.AFTER,
    )
    assert after == {"_id": 2, "bonus": 30}
    upserted = coll.find_one_and_update(
        {"_id": 3},
        [{"$set": {"name": "dee"}}],
        upsert=True,
        return_document=ReturnDocument.AFTER,
    )
    assert upserted == {"_id": 3, "name": "dee"}


def test_bulk_write_with_pipelines(coll: Any) -> None:
    result = coll.bulk_write(
        [
            UpdateOne({"_id": 1}, [{"$set": {"rank": 1}}]),
            UpdateMany({}, [{"$set": {"checked": True}}]),
            UpdateOne({"_id": 5}, [{"$set": {"rank": 5}}], upsert=True),
        ]
    )
    assert (result.matched_count, result.modified_count, result.upserted_ids) == (3, 3, {2: 5})
    assert coll.find_one({"_id": 5}) == {"_id": 5, "rank": 5}


@pytest.mark.parametrize(
    ("stage", "name"),
    [
        ({"$match": {"a": 1}}, "$match"),
        ({"$limit": 1}, "$limit"),
        ({"$sort": {"a": 1}}, "$sort"),
        ({"$group": {"_id": "$a"}}, "$group"),
        ({"$lookup": {"from": "x", "localField": "a", "foreignField": "b", "as": "c"}}, "$lookup"),
        ({"$unwind": "$tests"}, "$unwind"),
    ],
)
def test_stages_an_update_may_not_hold(coll: Any, stage: dict[str, Any], name: str) -> None:
    with pytest.raises(WriteError) as exc:
        coll.update_one({"_id": 1}, [{"$set": {"a": 1}}, stage])
    assert failure(exc) == (72, f"{name} is not allowed to be used within an update")
    with pytest.raises(OperationFailure) as info:
        coll.find_one_and_update({"_id": 1}, [stage])
    assert (info.value.code, info.value.details["codeName"]) == (72, "InvalidOptions")
    assert coll.find_one({"_id": 1}) == {"_id": 1, "name": "ann", "tests": [90, 80], "bonus": 5}


def test_malformed_pipelines(coll: Any) -> None:
    with pytest.raises(WriteError) as exc:
        coll.update_one({"_id": 1}, [{"$bogus": {}}])
    assert failure(exc) == (40324, "Unrecognized pipeline stage name: '$bogus'")
    with pytest.raises(WriteError) as exc:
        coll.update_one({"_id": 1}, [{"$set": {"a": 1}, "$unset": "b"}])
    assert failure(exc)[0] == 40323
    with pytest.raises(OperationFailure) as info:
        coll.database.command("update", coll.name, updates=[{"q": {}, "u": [{"$set": {}}, 1]}])
    assert info.value.code == 14
    assert info.value.details["errmsg"] == "Each element of the 'pipeline' array must be an object"


def test_array_filters_are_refused_with_a_pipeline(coll: Any) -> None:
    with pytest.raises(WriteError) as exc:
        coll.update_one({"_id": 1}, [{"$set": {"a": 1}}], array_filters=[{"x": 1}])
    assert failure(exc) == (9, "arrayFilters may not be specified for pipeline-style updates")
    with pytest.raises(OperationFailure) as info:
        coll.find_one_and_update({"_id": 1}, [{"$set": {"a": 1}}], array_filters=[{"x": 1}])
    assert info.value.code == 9


def test_the_id_cannot_change(coll: Any) -> None:
    with pytest.raises(WriteError) as exc:
        coll.update_one({"_id": 1}, [{"$set": {"_id": 10}}])
    assert failure(exc) == (
        66,
        "After applying the update, the (immutable) field '_id' was found to have been altered "
        "to _id: 10",
    )
    # Dropping `_id` keeps it, as a replacement without `_id` does.
    coll.update_one({"_id": 1}, [{"$project": {"_id": 0, "name": 1}}])
    assert coll.find_one({"_id": 1}) == {"_id": 1, "name": "ann"}


def test_unique_indexes_hold(coll: Any) -> None:
    coll.create_index("name", unique=True)
    with pytest.raises(DuplicateKeyError):
        coll.update_one({"_id": 2}, [{"$set": {"name": "ann"}}])
    with pytest.raises(BulkWriteError) as exc:
        coll.bulk_write([UpdateOne({"_id": 2}, [{"$set": {"name": "ann"}}])])
    assert exc.value.details["writeErrors"][0]["code"] == 11000
    assert coll.find_one({"_id": 2})["name"] == "bob"


def test_schema_validation_holds(mongo_db: Db) -> None:
    mongo_db.create_collection("v", validator={"$jsonSchema": {"required": ["name"]}})
    mongo_db.v.insert_one({"_id": 1, "name": "x"})
    with pytest.raises(WriteError) as exc:
        mongo_db.v.update_one({"_id": 1}, [{"$unset": "name"}])
    assert exc.value.code == 121
    r = mongo_db.v.update_one({"_id": 1}, [{"$unset": "name"}], bypass_document_validation=True)
    assert r.modified_count == 1


def test_cosmos_last_modified_time_is_refreshed(client: Client) -> None:
    coll = client.cosmos_pipe.c
    coll.database.command(
        "createIndexes",
        "c",
        indexes=[{"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": 10}],
    )
    coll.insert_many([{"_id": "a"}, {"_id": "b"}])
    advance(client, 6)
    coll.update_one({"_id": "a"}, [{"$set": {"touched": True}}])
    assert ids_after(client, coll, 6) == ["a"]  # b at +12, a at +6 since its update
    assert ids_after(client, coll, 5) == []
