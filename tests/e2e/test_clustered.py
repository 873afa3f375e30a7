"""Clustered collections through pymongo (MongoDB 7): create's clusteredIndex and its errors,
documents in `_id` order, listIndexes/listCollections as MongoDB shows them, and TTL by the `_id`
date (an ObjectId's timestamp or a Date) with the test clock: hidden once expired, deleted by a
monitor pass, switched off and on again with collMod."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from bson import Int64, ObjectId
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import DuplicateKeyError

from ebbdb.server.embedded import ServerThread
from ebbdb.server.pytest_plugin import TtlClock
from tests.e2e.collection_helpers import assert_create_refused, entry, failure

Db = Database[dict[str, Any]]
CLUSTERED = {"key": {"_id": 1}, "unique": True}
DAY = 86_400


def oid_at(when: datetime.datetime) -> ObjectId:
    return ObjectId.from_datetime(when)


# -- create, listIndexes, listCollections ------------------------------------------------------


def test_create_lists_the_cluster_key_as_mongodb_does(mongo_db: Db) -> None:
    mongo_db.create_collection("c", clusteredIndex=CLUSTERED)
    assert list(mongo_db.c.list_indexes()) == [
        {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": True, "clustered": True}
    ]
    e = entry(mongo_db, "c")
    assert list(e) == ["name", "type", "options", "info"]  # no idIndex
    assert e["type"] == "collection"
    assert e["options"] == {
        "clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "_id_", "unique": True}
    }
    assert list(e["options"]["clusteredIndex"]) == ["v", "key", "name", "unique"]
    assert list(e["info"]) == ["readOnly", "uuid"]


def test_create_with_name_v_and_expire(mongo_db: Db) -> None:
    mongo_db.command(
        "create",
        "c",
        clusteredIndex={"key": {"_id": 1}, "unique": True, "name": "by_id", "v": 2},
        expireAfterSeconds=3600,
    )
    options = entry(mongo_db, "c")["options"]
    assert options == {
        "clusteredIndex": {"v": 2, "key": {"_id": 1}, "name": "by_id", "unique": True},
        "expireAfterSeconds": 3600,
    }
    assert type(options["expireAfterSeconds"]) is Int64
    assert list(mongo_db.c.list_indexes()) == [
        {"v": 2, "key": {"_id": 1}, "name": "by_id", "unique": True, "clustered": True}
    ]


def test_secondary_indexes_are_listed_after_the_cluster_key(mongo_db: Db) -> None:
    mongo_db.create_collection("c", clusteredIndex=CLUSTERED)
    mongo_db.c.create_index("a")
    assert [ix["name"] for ix in mongo_db.c.list_indexes()] == ["_id_", "a_1"]


@pytest.mark.parametrize(
    ("options", "code_name", "message"),
    [
        (
            {"clusteredIndex": {"key": {"a": 1}, "unique": True}},
            "InvalidIndexSpecificationOption",
            "The clusteredIndex option is only supported for key: {_id: 1}",
        ),
        (
            {"clusteredIndex": {"key": {"_id": -1}, "unique": True}},
            "InvalidIndexSpecificationOption",
            "The clusteredIndex option is only supported for key: {_id: 1}",
        ),
        (
            {"clusteredIndex": {"key": {"_id": 1}, "unique": False}},
            "Location5979700",
            "The clusteredIndex option requires unique: true to be specified",
        ),
        (
            {"clusteredIndex": {"key": {"_id": 1}}},
            "Location40414",
            "BSON field 'create.clusteredIndex.unique' is missing but a required field",
        ),
        (
            {"clusteredIndex": {"unique": True}},
            "Location40414",
            "BSON field 'create.clusteredIndex.key' is missing but a required field",
        ),
        (
            {"clusteredIndex": {**CLUSTERED, "sparse": True}},
            "Location40415",
            "BSON field 'create.clusteredIndex.sparse' is an unknown field.",
        ),
        (
            {"clusteredIndex": True},
            "Location5979703",
            "The 'clusteredIndex' legacy format {clusteredIndex: <bool>} is only supported for "
            "specific internal collections and vice versa",
        ),
        (
            {"expireAfterSeconds": 10},
            "InvalidOptions",
            "'expireAfterSeconds' is only supported on time-series collections or when the "
            "'clusteredIndex' option is specified",
        ),
        (
            {"clusteredIndex": False, "expireAfterSeconds": 10},
            "InvalidOptions",
            "'expireAfterSeconds' requires clustering to be enabled",
        ),
        (
            {"clusteredIndex": CLUSTERED, "expireAfterSeconds": -1},
            "InvalidOptions",
            "TTL index 'expireAfterSeconds' option cannot be less than 0",
        ),
        (
            {"clusteredIndex": CLUSTERED, "expireAfterSeconds": 10**13},
            "InvalidOptions",
            "TTL index 'expireAfterSeconds' option must be within an acceptable range, try a "
            "lower number",
        ),
        (
            {"clusteredIndex": CLUSTERED, "expireAfterSeconds": "1"},
            "TypeMismatch",
            "BSON field 'create.expireAfterSeconds' is the wrong type 'string', expected types "
            "'[long, int, decimal, double]'",
        ),
    ],
)
def test_bad_clustered_specs_are_refused(
    mongo_db: Db, options: dict[str, Any], code_name: str, message: str
) -> None:
    assert_create_refused(mongo_db, "c", options, code_name, message)


def test_clustered_index_false_is_an_ordinary_collection(mongo_db: Db) -> None:
    mongo_db.command("create", "c", clusteredIndex=False)
    assert entry(mongo_db, "c")["options"] == {}
    assert [ix["name"] for ix in mongo_db.c.list_indexes()] == ["_id_"]


# -- order -----------------------------------------------------------------------------------------


def test_documents_come_back_in_id_order(mongo_db: Db) -> None:
    mongo_db.create_collection("c", clusteredIndex=CLUSTERED)
    ids: list[Any] = [5, "b", 1, 3.5, "a", -2, ObjectId(), datetime.datetime(2020, 1, 1)]
    mongo_db.c.insert_many([{"_id": i, "n": n} for n, i in enumerate(ids)])
    expected = [-2, 1, 3.5, 5, "a", "b", ids[6], datetime.datetime(2020, 1, 1)]
    assert [d["_id"] for d in mongo_db.c.find()] == expected
    assert [d["_id"] for d in mongo_db.c.find(batch_size=2)] == expected
    assert [d["_id"] for d in mongo_db.c.find().sort("$natural", -1)] == expected[::-1]
    assert [d["_id"] for d in mongo_db.c.find({"n": {"$gte": 3}})] == [-2, 3.5, "a", *expected[-2:]]
    assert [d["_id"] for d in mongo_db.c.aggregate([{"$match": {}}])] == expected


def test_plain_collection_keeps_insertion_order(mongo_db: Db) -> None:
    mongo_db.c.insert_many([{"_id": i} for i in (3, 1, 2)])
    assert [d["_id"] for d in mongo_db.c.find()] == [3, 1, 2]


def test_duplicate_id_is_refused(mongo_db: Db) -> None:
    mongo_db.create_collection("c", clusteredIndex=CLUSTERED)
    mongo_db.c.insert_one({"_id": 1})
    with pytest.raises(DuplicateKeyError):
        mongo_db.c.insert_one({"_id": 1})


# -- TTL by the _id date -----------------------------------------------------------------------


def test_ttl_by_objectid_and_date_ids(mongo_db: Db, ebbdb_clock: TtlClock) -> None:
    mongo_db.create_collection("c", clusteredIndex=CLUSTERED, expireAfterSeconds=3600)
    now = ebbdb_clock.now()
    old, recent = now - datetime.timedelta(seconds=3000), now - datetime.timedelta(seconds=60)
    mongo_db.c.insert_many(
        [
            {"_id": oid_at(old), "k": "oid-old"},
            {"_id": oid_at(recent), "k": "oid-recent"},
            {"_id": old, "k": "date-old"},
            {"_id": recent, "k": "date-recent"},
            {"_id": "never", "k": "string"},
            {"_id": 7, "k": "number"},
        ]
    )
    assert mongo_db.c.count_documents({}) == 6
    ebbdb_clock.advance(700)  # the old ones are now 3700 s old: expired, hidden, not deleted
    assert sorted(d["k"] for d in mongo_db.c.find()) == [
        "date-recent",
        "number",
        "oid-recent",
        "string",
    ]
    assert mongo_db.c.count_documents({}) == 4
    assert mongo_db.c.find_one({"_id": old}) is None
    assert mongo_db.command("collStats", "c")["count"] == 6  # stored until the monitor runs
    assert ebbdb_clock.run_ttl_pass().by_namespace == {f"{mongo_db.name}.c": 2}
    assert mongo_db.command("collStats", "c")["count"] == 4
    ebbdb_clock.advance(100 * DAY)
    assert sorted(d["k"] for d in mongo_db.c.find()) == ["number", "string"]
    assert ebbdb_clock.run_ttl_pass().by_namespace == {f"{mongo_db.name}.c": 2}
    assert sorted(d["k"] for d in mongo_db.c.find()) == ["number", "string"]


def test_insert_over_an_expired_id_succeeds(mongo_db: Db, ebbdb_clock: TtlClock) -> None:
    mongo_db.create_collection("c", clusteredIndex=CLUSTERED, expireAfterSeconds=10)
    when = ebbdb_clock.now()
    mongo_db.c.insert_one({"_id": when, "v": 1})
    ebbdb_clock.advance(11)
    # The expired holder of the key is removed in the same write (no DuplicateKey); the new
    # document carries the same `_id` date, so it is itself born expired.
    mongo_db.c.insert_one({"_id": when, "v": 2})
    assert mongo_db.command("collStats", "c")["count"] == 1
    assert list(mongo_db.c.find()) == []


def test_no_expiry_without_expire_after_seconds(mongo_db: Db, ebbdb_clock: TtlClock) -> None:
    mongo_db.create_collection("c", clusteredIndex=CLUSTERED)
    mongo_db.c.insert_one({"_id": ebbdb_clock.now()})
    ebbdb_clock.advance(1000 * DAY)
    assert mongo_db.c.count_documents({}) == 1
    assert ebbdb_clock.run_ttl_pass().by_namespace == {}


def test_coll_mod_turns_ttl_on_changes_it_and_off(mongo_db: Db, ebbdb_clock: TtlClock) -> None:
    mongo_db.create_collection("c", clusteredIndex=CLUSTERED)
    now = ebbdb_clock.now()
    mongo_db.c.insert_many([{"_id": now - datetime.timedelta(seconds=s)} for s in (10, 100, 1000)])
    assert mongo_db.command("collMod", "c", expireAfterSeconds=500) == {"ok": 1.0}
    assert entry(mongo_db, "c")["options"]["expireAfterSeconds"] == 500
    assert mongo_db.c.count_documents({}) == 2  # hidden at once
    mongo_db.command("collMod", "c", expireAfterSeconds=50)
    assert mongo_db.c.count_documents({}) == 1
    mongo_db.command("collMod", "c", expireAfterSeconds="off")
    assert "expireAfterSeconds" not in entry(mongo_db, "c")["options"]
    assert mongo_db.c.count_documents({}) == 3
    assert ebbdb_clock.run_ttl_pass().by_namespace == {}
    mongo_db.command("collMod", "c", expireAfterSeconds=50)
    assert ebbdb_clock.run_ttl_pass().by_namespace == {f"{mongo_db.name}.c": 2}
    assert mongo_db.command("collStats", "c")["count"] == 1


@pytest.mark.parametrize(
    ("value", "code", "code_name", "message"),
    [
        (
            "on",
            72,
            "InvalidOptions",
            "Invalid string value for the 'clusteredIndex::expireAfterSeconds' option. Got: "
            "'on'. Accepted value is 'off'",
        ),
        (-5, 72, "InvalidOptions", "TTL index 'expireAfterSeconds' option cannot be less than 0"),
        (
            True,
            14,
            "TypeMismatch",
            "BSON field 'collMod.expireAfterSeconds' is the wrong type 'bool', expected types "
            "'[string, long, int, decimal, double]'",
        ),
    ],
)
def test_coll_mod_bad_expire(
    mongo_db: Db, value: Any, code: int, code_name: str, message: str
) -> None:
    mongo_db.create_collection("c", clusteredIndex=CLUSTERED, expireAfterSeconds=5)
    assert failure(lambda: mongo_db.command("collMod", "c", expireAfterSeconds=value)) == (
        code,
        code_name,
        message,
    )
    assert entry(mongo_db, "c")["options"]["expireAfterSeconds"] == 5


def test_coll_mod_expire_on_an_unclustered_collection(mongo_db: Db) -> None:
    mongo_db.create_collection("c")
    assert failure(lambda: mongo_db.command("collMod", "c", expireAfterSeconds=5)) == (
        72,
        "InvalidOptions",
        "'expireAfterSeconds' option is only supported on collections clustered by _id",
    )


# -- validate and restart ------------------------------------------------------------------------


def test_validate_finds_the_expiry_entries(mongo_db: Db, ebbdb_clock: TtlClock) -> None:
    mongo_db.create_collection("c", clusteredIndex=CLUSTERED)
    now = ebbdb_clock.now()
    mongo_db.c.insert_many([{"_id": now}, {"_id": ObjectId()}, {"_id": "x"}])
    mongo_db.command("collMod", "c", expireAfterSeconds=60)
    for full in (False, True):
        reply = mongo_db.command("validate", "c", full=full)
        assert (reply["valid"], reply["errors"], reply["nrecords"]) == (True, [], 3)


def test_clustered_ttl_and_order_survive_a_restart(
    start_server: Callable[..., ServerThread], tmp_path: Any
) -> None:
    path = str(tmp_path / "data")
    server = start_server({"enableTestCommands": True}, path)
    with MongoClient(server.uri) as client:
        client.db.create_collection("c", clusteredIndex=CLUSTERED, expireAfterSeconds=3600)
        now: datetime.datetime = client.admin.command("ttlClock")["now"]
        client.db.c.insert_many([{"_id": 2}, {"_id": now}, {"_id": 1}])
    server.stop()
    server = start_server({"enableTestCommands": True}, path)
    with MongoClient(server.uri) as client:
        assert [d["_id"] for d in client.db.c.find()] == [1, 2, now]
        assert entry(client.db, "c")["options"]["expireAfterSeconds"] == 3600
        client.admin.command("ttlClock", advanceSeconds=3601)
        assert [d["_id"] for d in client.db.c.find()] == [1, 2]
        assert client.admin.command("ttlMonitorPass")["deleted"] == 1


def test_a_ttl_index_beside_the_clustered_ttl(mongo_db: Db, ebbdb_clock: TtlClock) -> None:
    mongo_db.create_collection("c", clusteredIndex=CLUSTERED, expireAfterSeconds=3600)
    now = ebbdb_clock.now()
    mongo_db.c.insert_many([{"_id": now, "at": now}, {"_id": 1, "at": now}, {"_id": 2}])
    mongo_db.c.create_index("at", expireAfterSeconds=60)
    mongo_db.command("collMod", "c", index={"keyPattern": {"at": 1}, "expireAfterSeconds": 120})
    assert mongo_db.command("validate", "c", full=True)["valid"] is True
    ebbdb_clock.advance(121)  # both documents with `at` expire by the index
    assert [d["_id"] for d in mongo_db.c.find()] == [2]
    assert ebbdb_clock.run_ttl_pass().deleted == 2
