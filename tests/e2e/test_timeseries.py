"""Time series collections through pymongo, as a user sees them in MongoDB 7: create's
timeseries options (filled in as MongoDB fills them, and its errors), listCollections and
listIndexes, inserts (the timeField must be a Date), queries and aggregation, the updates and
deletes 7.0 allows, collMod of expireAfterSeconds and granularity, and TTL by the timeField through
the test clock: hidden once expired, deleted by a monitor pass."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from bson import Int64, ObjectId
from pymongo import DeleteMany, InsertOne
from pymongo.database import Database
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

from ebbdb.server.pytest_plugin import TtlClock
from tests.e2e.collection_helpers import assert_create_refused, entry, failure

Db = Database[dict[str, Any]]
TS = {"timeField": "t", "metaField": "m"}
T0 = datetime.datetime(2024, 5, 1, 12, 0, 0)


def write_failure(fn: Callable[[], Any]) -> tuple[int, str]:
    with pytest.raises(WriteError) as info:
        fn()
    details = info.value.details or {}
    return int(info.value.code or 0), str(details.get("errmsg"))


def ts(**fields: Any) -> dict[str, Any]:
    """create's options for a time series collection with these timeseries fields."""
    return {"timeseries": fields}


#: The codeName of most refusals here.
IO = "InvalidOptions"


def at(minutes: float) -> datetime.datetime:
    return T0 + datetime.timedelta(minutes=minutes)


@pytest.fixture
def weather(mongo_db: Db) -> Any:
    mongo_db.create_collection("weather", timeseries=TS)
    mongo_db.weather.insert_many(
        [
            {"m": {"sensor": 1}, "t": at(0), "temp": 12},
            {"temp": 14, "t": at(1), "m": {"sensor": 1}},
            {"m": {"sensor": 2}, "t": at(2), "temp": 20, "wind": 3},
            {"t": at(3), "temp": 21},
        ]
    )
    return mongo_db.weather


# -- create and the catalog ----------------------------------------------------------------------


def test_list_collections_shows_the_collection_as_mongodb_7(mongo_db: Db) -> None:
    mongo_db.create_collection("weather", timeseries=TS)
    assert entry(mongo_db, "weather") == {
        "name": "weather",
        "type": "timeseries",
        "options": {
            "timeseries": {
                "timeField": "t",
                "metaField": "m",
                "granularity": "seconds",
                "bucketMaxSpanSeconds": 3600,
            }
        },
        "info": {"readOnly": False},
    }
    ts = entry(mongo_db, "weather")["options"]["timeseries"]
    assert list(ts) == ["timeField", "metaField", "granularity", "bucketMaxSpanSeconds"]
    assert mongo_db.list_collection_names() == ["weather"]
    assert list(mongo_db.list_collections(filter={"type": "timeseries"}, nameOnly=True)) == [
        {"name": "weather", "type": "timeseries"}
    ]


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        (
            {"timeField": "t", "granularity": "minutes"},
            {"granularity": "minutes", "bucketMaxSpanSeconds": 86400},
        ),
        (
            {"timeField": "t", "granularity": "hours"},
            {"granularity": "hours", "bucketMaxSpanSeconds": 2592000},
        ),
        (
            {"timeField": "t", "granularity": "hours", "bucketMaxSpanSeconds": 2592000},
            {"granularity": "hours", "bucketMaxSpanSeconds": 2592000},
        ),
        (
            {"timeField": "t", "bucketMaxSpanSeconds": 600, "bucketRoundingSeconds": 600},
            {"bucketRoundingSeconds": 600, "bucketMaxSpanSeconds": 600},
        ),
    ],
)
def test_bucketing_options_are_filled_in(
    mongo_db: Db, given: dict[str, Any], stored: dict[str, Any]
) -> None:
    mongo_db.create_collection("w", timeseries=given)
    assert entry(mongo_db, "w")["options"] == {"timeseries": {"timeField": "t", **stored}}


def test_capped_false_is_allowed(mongo_db: Db) -> None:
    mongo_db.command("create", "w", timeseries={"timeField": "t"}, capped=False)
    assert entry(mongo_db, "w")["type"] == "timeseries"


def test_expire_after_seconds_is_listed_as_a_long(mongo_db: Db) -> None:
    mongo_db.create_collection("w", timeseries={"timeField": "t"}, expireAfterSeconds=86400)
    options = entry(mongo_db, "w")["options"]
    assert options == {
        "expireAfterSeconds": 86400,
        "timeseries": {"timeField": "t", "granularity": "seconds", "bucketMaxSpanSeconds": 3600},
    }
    assert list(options) == ["expireAfterSeconds", "timeseries"]
    assert type(options["expireAfterSeconds"]) is Int64


def test_list_indexes_shows_the_meta_time_index_only(mongo_db: Db) -> None:
    mongo_db.create_collection("w", timeseries=TS)
    mongo_db.create_collection("plain_ts", timeseries={"timeField": "t"})
    assert list(mongo_db.w.list_indexes()) == [{"v": 2, "key": {"m": 1, "t": 1}, "name": "m_1_t_1"}]
    assert list(mongo_db.plain_ts.list_indexes()) == []


@pytest.mark.parametrize(
    ("options", "code_name", "message"),
    [
        (
            ts(metaField="m"),
            "Location40414",
            "BSON field 'create.timeseries.timeField' is missing but a required field",
        ),
        (
            ts(timeField=1),
            "TypeMismatch",
            "BSON field 'create.timeseries.timeField' is the wrong type 'int', expected type "
            "'string'",
        ),
        (
            ts(timeField="t", extra=1),
            "Location40415",
            "BSON field 'create.timeseries.extra' is an unknown field.",
        ),
        (ts(timeField="t", metaField="t"), IO, "'metaField' cannot be the same as 'timeField'"),
        (
            ts(timeField="a.b"),
            IO,
            "{db}.w: 'timeField' must be a top-level field and not contain a '.'",
        ),
        (
            ts(timeField="t", metaField="m.x"),
            IO,
            "{db}.w: 'metaField' must be a top-level field and not contain a '.'",
        ),
        (
            ts(timeField="t", granularity="days"),
            "BadValue",
            "Enumeration value 'days' for field 'create.timeseries.granularity' is not a valid "
            "value.",
        ),
        (
            ts(timeField="t", granularity="seconds", bucketMaxSpanSeconds=60),
            IO,
            "Timeseries 'bucketMaxSpanSeconds' is not configurable to a value other than the "
            "default of 3600 for the provided granularity",
        ),
        (
            ts(timeField="t", bucketMaxSpanSeconds=600),
            IO,
            "Timeseries 'bucketMaxSpanSeconds' and 'bucketRoundingSeconds' need to be set "
            "alongside each other",
        ),
        (
            ts(timeField="t", bucketMaxSpanSeconds=600, bucketRoundingSeconds=60),
            IO,
            "Timeseries 'bucketRoundingSeconds' needs to be equal to 'bucketMaxSpanSeconds'",
        ),
        (
            {"timeseries": {"timeField": "t"}, "idIndex": {"key": {"_id": 1}, "name": "_id_"}},
            IO,
            "{db}.w: 'timeseries' is not allowed with 'idIndex'",
        ),
        (
            {
                "timeseries": {"timeField": "t"},
                "clusteredIndex": {"key": {"_id": 1}, "unique": True},
            },
            IO,
            "{db}.w: 'timeseries' is not allowed with 'clusteredIndex'",
        ),
        (
            {"timeseries": {"timeField": "t"}, "expireAfterSeconds": -1},
            IO,
            "TTL index 'expireAfterSeconds' option cannot be less than 0",
        ),
        (ts(timeField="t", metaField="_id"), IO, "'metaField' cannot be \"_id\""),
    ],
)
def test_bad_timeseries_options_are_refused(
    mongo_db: Db, options: dict[str, Any], code_name: str, message: str
) -> None:
    assert_create_refused(mongo_db, "w", options, code_name, message)


# -- inserts, queries, aggregation ---------------------------------------------------------------


def test_measurements_come_back_time_and_meta_first(weather: Any) -> None:
    docs = list(weather.find({}, {"_id": 0}))
    assert docs == [
        {"t": at(0), "m": {"sensor": 1}, "temp": 12},
        {"t": at(1), "m": {"sensor": 1}, "temp": 14},
        {"t": at(2), "m": {"sensor": 2}, "temp": 20, "wind": 3},
        {"t": at(3), "temp": 21},
    ]
    assert [list(d) for d in docs] == [
        ["t", "m", "temp"],
        ["t", "m", "temp"],
        ["t", "m", "temp", "wind"],
        ["t", "temp"],
    ]
    assert all(isinstance(d["_id"], ObjectId) for d in weather.find())


def test_the_time_field_must_be_a_date(weather: Any) -> None:
    message = "'t' must be present and contain a valid BSON UTC datetime value"
    assert write_failure(lambda: weather.insert_one({"m": 1, "temp": 3})) == (2, message)
    assert write_failure(lambda: weather.insert_one({"t": "2024-05-01", "temp": 3})) == (
        2,
        message,
    )
    with pytest.raises(BulkWriteError) as info:
        weather.insert_many([{"t": at(9)}, {"t": 5}, {"t": at(10)}], ordered=False)
    result = info.value.details
    assert result["nInserted"] == 2
    assert [(e["index"], e["code"], e["errmsg"]) for e in result["writeErrors"]] == [
        (1, 2, message)
    ]


def test_queries_sorts_and_aggregation(weather: Any) -> None:
    assert [d["temp"] for d in weather.find({"t": {"$gte": at(1)}}).sort("t", -1)] == [21, 20, 14]
    assert [d["temp"] for d in weather.find({"m.sensor": 1})] == [12, 14]
    assert weather.count_documents({"temp": {"$gt": 13}}) == 3
    groups = list(
        weather.aggregate(
            [
                {"$group": {"_id": "$m.sensor", "avg": {"$avg": "$temp"}, "n": {"$sum": 1}}},
                {"$sort": {"_id": 1}},
            ]
        )
    )
    assert groups == [
        {"_id": None, "avg": 21.0, "n": 1},
        {"_id": 1, "avg": 13.0, "n": 2},
        {"_id": 2, "avg": 20.0, "n": 1},
    ]


# -- updates and deletes as MongoDB 7.0 allows them ----------------------------------------------


def test_deletes_with_any_filter(weather: Any) -> None:
    assert weather.delete_many({"temp": {"$lt": 13}}).deleted_count == 1
    assert weather.delete_one({"m.sensor": 1}).deleted_count == 1
    assert weather.delete_many({"m": {"sensor": 2}}).deleted_count == 1
    assert weather.bulk_write([DeleteMany({"t": {"$lt": at(100)}})]).deleted_count == 1
    assert weather.count_documents({}) == 0


def test_update_many_on_the_meta_field(weather: Any) -> None:
    result = weather.update_many({"m.sensor": 1}, {"$set": {"m.site": "north"}})
    assert (result.matched_count, result.modified_count) == (2, 2)
    assert [d["m"] for d in weather.find({"m.site": "north"})] == [
        {"sensor": 1, "site": "north"},
        {"sensor": 1, "site": "north"},
    ]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda c: c.update_one({"m.sensor": 1}, {"$set": {"m.x": 1}}),
            "Cannot perform a non-multi update on a time-series collection",
        ),
        (
            lambda c: c.update_many({"m.sensor": 1}, {"$set": {"m.x": 1}}, upsert=True),
            "Cannot perform an upsert on a time-series collection",
        ),
        (
            lambda c: c.update_many({"temp": 12}, {"$set": {"m.x": 1}}),
            "Cannot perform an update or delete on a time-series collection when querying on a "
            "field that is not the metaField 'm'",
        ),
        (
            lambda c: c.update_many({"m.sensor": 1}, {"$set": {"temp": 0}}),
            "Cannot perform an update on a time-series collection which updates a field that is "
            "not the metaField 'm'",
        ),
        (
            lambda c: c.update_many({"m.sensor": 1}, [{"$set": {"m.x": 1}}]),
            "Cannot perform an update on a time-series collection using a pipeline update",
        ),
        (
            lambda c: c.find_one_and_update({"m.sensor": 1}, {"$set": {"m.x": 1}}),
            "Cannot perform a non-multi update on a time-series collection",
        ),
    ],
)
def test_updates_mongodb_7_refuses(weather: Any, call: Callable[[Any], Any], message: str) -> None:
    with pytest.raises(OperationFailure) as info:
        call(weather)
    assert (info.value.code, (info.value.details or {}).get("errmsg")) == (72, message)
    assert weather.count_documents({"m.x": {"$exists": True}}) == 0
    assert weather.count_documents({"temp": 0}) == 0


def test_update_without_meta_field(mongo_db: Db) -> None:
    mongo_db.create_collection("w", timeseries={"timeField": "t"})
    mongo_db.w.insert_one({"t": T0, "v": 1})
    with pytest.raises(OperationFailure) as info:
        mongo_db.w.update_many({}, {"$set": {"v": 2}})
    assert (info.value.code, (info.value.details or {}).get("errmsg")) == (
        72,
        "Cannot perform an update on a time-series collection that does not have a metaField",
    )


def test_inserts_after_a_failing_write_go_on(weather: Any) -> None:
    weather.bulk_write([InsertOne({"t": at(50), "m": {"sensor": 9}})])
    assert weather.count_documents({"m.sensor": 9}) == 1


# -- collMod -------------------------------------------------------------------------------------


def test_coll_mod_granularity_only_coarser(mongo_db: Db) -> None:
    mongo_db.create_collection("w", timeseries=TS)
    assert mongo_db.command("collMod", "w", timeseries={"granularity": "minutes"}) == {"ok": 1.0}
    ts = entry(mongo_db, "w")["options"]["timeseries"]
    assert ts == {
        "timeField": "t",
        "metaField": "m",
        "granularity": "minutes",
        "bucketMaxSpanSeconds": 86400,
    }
    assert failure(
        lambda: mongo_db.command("collMod", "w", timeseries={"granularity": "seconds"})
    ) == (
        72,
        IO,
        "Invalid transition for timeseries.granularity. Can only transition from 'seconds' to "
        "'minutes' or 'minutes' to 'hours'.",
    )
    mongo_db.command("collMod", "w", timeseries={"granularity": "hours"})
    assert entry(mongo_db, "w")["options"]["timeseries"]["bucketMaxSpanSeconds"] == 2592000


def test_coll_mod_timeseries_on_a_plain_collection(mongo_db: Db) -> None:
    mongo_db.create_collection("c")
    assert failure(
        lambda: mongo_db.command("collMod", "c", timeseries={"granularity": "hours"})
    ) == (72, "InvalidOptions", "option only supported on a time-series collection: timeseries")


# -- TTL by the timeField ------------------------------------------------------------------------


def test_ttl_by_time_field(mongo_db: Db, ebbdb_clock: TtlClock) -> None:
    mongo_db.create_collection("w", timeseries=TS, expireAfterSeconds=3600)
    now = ebbdb_clock.now()
    mongo_db.w.insert_many(
        [{"t": now - datetime.timedelta(seconds=s), "m": s, "s": s} for s in (3500, 3000, 10)]
    )
    assert mongo_db.w.count_documents({}) == 3
    ebbdb_clock.advance(300)  # 3800 s and 3300 s old: the first is expired, hidden
    assert [d["s"] for d in mongo_db.w.find()] == [3000, 10]
    assert mongo_db.w.count_documents({}) == 2
    assert [g["n"] for g in mongo_db.w.aggregate([{"$count": "n"}])] == [2]
    assert mongo_db.command("collStats", "w")["count"] == 3
    assert ebbdb_clock.run_ttl_pass().by_namespace == {f"{mongo_db.name}.w": 1}
    assert mongo_db.command("collStats", "w")["count"] == 2
    ebbdb_clock.advance(600)
    assert [d["s"] for d in mongo_db.w.find()] == [10]
    assert ebbdb_clock.run_ttl_pass().deleted == 1


def test_coll_mod_expire_after_seconds(mongo_db: Db, ebbdb_clock: TtlClock) -> None:
    mongo_db.create_collection("w", timeseries=TS)
    now = ebbdb_clock.now()
    mongo_db.w.insert_many([{"t": now - datetime.timedelta(days=d), "d": d} for d in (1, 10, 100)])
    assert ebbdb_clock.run_ttl_pass().by_namespace == {}
    assert mongo_db.command("collMod", "w", expireAfterSeconds=5 * 86400) == {"ok": 1.0}
    assert list(entry(mongo_db, "w")["options"]) == ["expireAfterSeconds", "timeseries"]
    assert [d["d"] for d in mongo_db.w.find()] == [1]
    mongo_db.command("collMod", "w", expireAfterSeconds="off")
    assert [d["d"] for d in mongo_db.w.find()] == [1, 10, 100]
    mongo_db.command("collMod", "w", expireAfterSeconds=50 * 86400)
    assert ebbdb_clock.run_ttl_pass().by_namespace == {f"{mongo_db.name}.w": 1}
    assert [d["d"] for d in mongo_db.w.find()] == [1, 10]


def test_validate_finds_the_expiry_entries(weather: Any, mongo_db: Db) -> None:
    mongo_db.command("collMod", "weather", expireAfterSeconds=60)
    reply = mongo_db.command("validate", "weather", full=True)
    assert (reply["valid"], reply["errors"], reply["nrecords"]) == (True, [], 4)


def test_drop_and_create_again(weather: Any, mongo_db: Db) -> None:
    weather.drop()
    assert mongo_db.list_collection_names() == []
    mongo_db.create_collection("weather", timeseries={"timeField": "when"})
    assert weather.count_documents({}) == 0
    assert entry(mongo_db, "weather")["options"]["timeseries"]["timeField"] == "when"
