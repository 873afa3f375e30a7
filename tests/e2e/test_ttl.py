"""TTL through real drivers (spec/ttl.md sections 1 and 3): TTL indexes on date fields, their
createIndexes/listIndexes/collMod shapes and error codes, hiding expired documents from every read,
the TTL monitor and its server parameters and metrics, and what survives a restart. Time is moved
with the test commands ttlClock and ttlMonitorPass (enableTestCommands=1), not with sleeps."""

from __future__ import annotations

import datetime
import json
import math
import time
from collections.abc import Callable
from typing import Any

import pytest
from bson import Int64, ObjectId, Timestamp
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import DuplicateKeyError, OperationFailure

from ebbdb.server.embedded import ServerThread
from tests.e2e.ttl_helpers import TEST_COMMANDS, advance, error_code, ids_after, ids_of, ttl_pass
from tests.waiting import wait_until

Client = MongoClient[dict[str, Any]]
StartServer = Callable[..., ServerThread]

RAW = CodecOptions(document_class=RawBSONDocument)
DAY = 86_400
HOUR = datetime.timedelta(hours=1)
MINUTE = datetime.timedelta(minutes=1)


@pytest.fixture
def server(start_server: StartServer) -> ServerThread:
    """Every test here (and the uri/client/async_client/motor_client fixtures) gets the clock
    commands."""
    return start_server(parameters=TEST_COMMANDS)


# -- helpers ---------------------------------------------------------------------------------------


def failure(fn: Callable[[], Any]) -> OperationFailure:
    with pytest.raises(OperationFailure) as info:
        fn()
    return info.value


def clock(client: Client, **kw: Any) -> dict[str, Any]:
    return client.admin.command("ttlClock", **kw)


def server_now(client: Client) -> datetime.datetime:
    """The expiry clock's time (naive UTC, millisecond precision, as pymongo decodes dates)."""
    now: datetime.datetime = clock(client)["now"]
    return now


def ttl_metrics(client: Client) -> dict[str, Any]:
    metrics: dict[str, Any] = client.admin.command("serverStatus")["metrics"]["ttl"]
    return metrics


def count(coll: Any, query: dict[str, Any] | None = None) -> int:
    reply = coll.database.command("count", coll.name, query=query or {})
    return int(reply["n"])


def ttl_index(coll: Any, key: str, expire: Any, **options: Any) -> str:
    name: str = coll.create_index([(key, 1)], expireAfterSeconds=expire, **options)
    return name


# -- createIndexes and listIndexes -----------------------------------------------------------------


def test_create_ttl_index_reply_shape_and_list_indexes(client: Client) -> None:
    db = client.ttl
    reply = db.command(
        "createIndexes",
        "c",
        indexes=[{"key": {"t": 1}, "name": "t_1", "expireAfterSeconds": 3600}],
        codec_options=RAW,
    )
    assert set(reply.keys()) == {
        "numIndexesBefore",
        "numIndexesAfter",
        "createdCollectionAutomatically",
        "ok",
    }
    assert type(reply["numIndexesBefore"]) is int and reply["numIndexesBefore"] == 1
    assert type(reply["numIndexesAfter"]) is int and reply["numIndexesAfter"] == 2
    assert reply["createdCollectionAutomatically"] is True
    assert reply["ok"] == 1.0

    # On an existing collection: not created automatically.
    again = db.command(
        "createIndexes", "c", indexes=[{"key": {"u": 1}, "name": "u_1", "expireAfterSeconds": 0}]
    )
    assert again["createdCollectionAutomatically"] is False
    assert (again["numIndexesBefore"], again["numIndexesAfter"]) == (2, 3)

    listed = {ix["name"]: dict(ix) for ix in db.c.list_indexes()}
    assert listed["t_1"] == {"v": 2, "key": {"t": 1}, "name": "t_1", "expireAfterSeconds": 3600}
    assert type(listed["t_1"]["expireAfterSeconds"]) is int
    assert listed["u_1"]["expireAfterSeconds"] == 0


def test_fractional_expire_after_seconds_is_truncated_to_int32(client: Client) -> None:
    coll = client.ttl.frac
    assert ttl_index(coll, "t", 10000.7) == "t_1"
    (entry,) = [ix for ix in coll.list_indexes() if ix["name"] == "t_1"]
    assert entry["expireAfterSeconds"] == 10000
    assert type(entry["expireAfterSeconds"]) is int  # int32 on the wire, not a double or int64


@pytest.mark.parametrize("expire", [0, 1, 2_147_483_647, Int64(60), 60.0])
def test_expire_after_seconds_accepted_range(client: Client, expire: Any) -> None:
    coll = client.ttl.ok
    ttl_index(coll, "t", expire)
    (entry,) = [ix for ix in coll.list_indexes() if ix["name"] == "t_1"]
    assert entry["expireAfterSeconds"] == int(expire)


@pytest.mark.parametrize(
    "expire", [-1, -0.5, math.nan, 2_147_483_648, Int64(2**40), "10", True, None]
)
def test_invalid_expire_after_seconds_is_cannot_create_index(client: Client, expire: Any) -> None:
    db = client.ttl
    spec = {"key": {"t": 1}, "name": "t_1", "expireAfterSeconds": expire}
    assert error_code(lambda: db.command("createIndexes", "bad", indexes=[spec])) == 67


def test_compound_and_id_ttl_indexes_are_rejected(client: Client) -> None:
    db = client.ttl
    compound = {"key": {"a": 1, "b": 1}, "name": "a_1_b_1", "expireAfterSeconds": 10}
    err = failure(lambda: db.command("createIndexes", "c", indexes=[compound]))
    assert err.code == 67
    assert "compound" in str(err.details.get("errmsg", "")).lower()  # type: ignore[union-attr]
    on_id = {"key": {"_id": 1}, "name": "_id_ttl", "expireAfterSeconds": 10}
    assert error_code(lambda: db.command("createIndexes", "c", indexes=[on_id])) == 197


def test_the_whole_command_fails_before_anything_is_built(client: Client) -> None:
    db = client.ttl
    db.c.insert_one({"_id": 1})
    good = {"key": {"a": 1}, "name": "a_1", "expireAfterSeconds": 10}
    bad = {"key": {"b": 1}, "name": "b_1", "expireAfterSeconds": -5}
    assert error_code(lambda: db.command("createIndexes", "c", indexes=[good, bad])) == 67
    assert [ix["name"] for ix in db.c.list_indexes()] == ["_id_"]


def test_a_key_field_named_expire_after_seconds_is_an_ordinary_index(client: Client) -> None:
    coll = client.ttl.c
    name = coll.create_index([("expireAfterSeconds", 1), ("b", 1)])
    (entry,) = [ix for ix in coll.list_indexes() if ix["name"] == name]
    assert "expireAfterSeconds" not in entry
    assert dict(entry["key"]) == {"expireAfterSeconds": 1, "b": 1}
    # Its date values do not expire anything.
    coll.insert_one({"_id": 1, "expireAfterSeconds": datetime.datetime(2000, 1, 1), "b": 1})
    assert ids_of(coll) == [1]


def test_conflicting_ttl_index_options(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 10)
    # Same key, only E differs / only the name differs: IndexOptionsConflict.
    assert error_code(lambda: ttl_index(coll, "t", 20)) == 85
    assert error_code(lambda: ttl_index(coll, "t", 10, name="other")) == 85
    # Same name, a different key or identifying option: IndexKeySpecsConflict.
    assert error_code(lambda: coll.create_index([("u", 1)], name="t_1")) == 86
    assert error_code(lambda: ttl_index(coll, "t", 10, unique=True)) == 86
    assert error_code(lambda: ttl_index(coll, "t", 10, sparse=True)) == 86
    assert (
        error_code(lambda: ttl_index(coll, "t", 10, partialFilterExpression={"k": {"$gt": 1}}))
        == 86
    )
    assert [ix.get("expireAfterSeconds") for ix in coll.list_indexes()] == [None, 10]


def test_identical_repeat_is_a_no_op_with_a_note(client: Client) -> None:
    db = client.ttl
    spec = {"key": {"t": 1}, "name": "t_1", "expireAfterSeconds": 60}
    db.command("createIndexes", "c", indexes=[spec])
    reply = db.command("createIndexes", "c", indexes=[spec])
    assert reply["numIndexesBefore"] == reply["numIndexesAfter"] == 2
    assert reply["note"] == "all indexes already exist"
    assert "createdCollectionAutomatically" not in reply
    assert reply["ok"] == 1.0


# -- hiding expired documents ----------------------------------------------------------------------


def test_expired_documents_vanish_from_find_count_and_distinct(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 3600)
    now = server_now(client)
    coll.insert_many(
        [
            {"_id": 1, "t": now - 2 * HOUR, "k": "old"},
            {"_id": 2, "t": now, "k": "new"},
            {"_id": 3, "t": datetime.datetime(1960, 5, 1), "k": "before-epoch"},
            {"_id": 4, "k": "no date"},
        ]
    )
    assert ids_of(coll) == [2, 4]
    assert coll.find_one({"_id": 1}) is None  # point lookup by _id
    assert coll.find_one({"_id": 3}) is None
    assert ids_of(coll, {"t": {"$lt": now}}) == []  # a range scan of the TTL index itself
    assert ids_of(coll, {"k": {"$in": ["old", "new"]}}) == [2]
    assert count(coll) == 2
    assert count(coll, {"k": "old"}) == 0
    assert coll.estimated_document_count() == 2
    assert sorted(coll.distinct("k")) == ["new", "no date"]
    assert coll.distinct("t") == [now]

    # One hour (and a bit) later _id 2 is gone too.
    assert ids_after(client, coll, 3601) == [4]
    assert count(coll) == 1


def test_skip_limit_and_sort_count_only_live_documents(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 0)
    now = server_now(client)
    coll.insert_many(
        [
            {"_id": i, "t": now + (-HOUR if i % 2 else HOUR) + i * MINUTE, "n": 10 - i}
            for i in range(10)
        ]
    )
    assert [d["_id"] for d in coll.find().sort("_id", 1).skip(1).limit(2)] == [2, 4]
    assert [d["_id"] for d in coll.find().sort("t", -1).limit(3)] == [8, 6, 4]
    assert [d["_id"] for d in coll.find().sort("n", 1).limit(2)] == [8, 6]
    assert coll.database.command("count", "c", skip=1, limit=3)["n"] == 3
    assert coll.database.command("count", "c", skip=3)["n"] == 2
    assert coll.find_one({"t": {"$lt": now}}) is None


def test_values_that_are_not_dates_never_expire(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 0)
    docs = [
        {"_id": 1},
        {"_id": 2, "t": None},
        {"_id": 3, "t": "2000-01-01T00:00:00Z"},
        {"_id": 4, "t": 0},
        {"_id": 5, "t": 946684800000},
        {"_id": 6, "t": True},
        {"_id": 7, "t": ObjectId("000000000000000000000000")},
        {"_id": 8, "t": Timestamp(1, 1)},
        {"_id": 9, "t": ["x", 5, None]},
        {"_id": 10, "t": {"nested": datetime.datetime(2000, 1, 1)}},
    ]
    coll.insert_many(docs)
    assert ids_after(client, coll, 100 * 365 * DAY) == list(range(1, 11))
    assert ttl_pass(client)["deleted"] == 0


def test_arrays_expire_by_their_earliest_date(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 60)
    now = server_now(client)
    coll.insert_many(
        [
            {"_id": 1, "t": [now + HOUR, "text", 7, now - 2 * MINUTE]},
            {"_id": 2, "t": [now + HOUR, now + 2 * HOUR]},
            {"_id": 3, "t": ["not", "dates"]},
            {"_id": 4, "t": []},
        ]
    )
    assert ids_of(coll) == [2, 3, 4]
    assert ids_after(client, coll, 3600 + 61) == [3, 4]


def test_nested_paths_and_arrays_of_subdocuments(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "a.b", 0)
    now = server_now(client)
    coll.insert_many(
        [
            {"_id": 1, "a": {"b": now - MINUTE}},
            {"_id": 2, "a": {"b": now + HOUR}},
            {"_id": 3, "a": [{"b": now + HOUR}, {"b": now - MINUTE}, {"c": 1}]},
            {"_id": 4, "a": [{"b": now + 2 * HOUR}, {"b": "text"}]},
            {"_id": 5, "a": {"c": now - HOUR}},
            {"_id": 6, "a.b": now - HOUR},  # a dotted field name is not the path a.b
        ]
    )
    assert ids_of(coll) == [2, 4, 5, 6]
    assert ids_after(client, coll, 3600 + 1) == [4, 5, 6]


def test_zero_expire_after_seconds_expires_at_a_specific_time(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "expireAt", 0)
    at = server_now(client) + datetime.timedelta(seconds=100)
    coll.insert_one({"_id": 1, "expireAt": at})
    assert ids_after(client, coll, 95) == [1]
    assert ids_after(client, coll, 6) == []
    assert count(coll) == 0


def test_partial_ttl_index_expires_only_matching_documents(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 0, partialFilterExpression={"kind": "temp"})
    past = server_now(client) - HOUR
    coll.insert_many(
        [
            {"_id": 1, "t": past, "kind": "temp"},
            {"_id": 2, "t": past, "kind": "keep"},
            {"_id": 3, "t": past},
        ]
    )
    assert ids_of(coll) == [2, 3]
    (entry,) = [ix for ix in coll.list_indexes() if ix["name"] == "t_1"]
    assert entry["partialFilterExpression"] == {"kind": "temp"}
    assert entry["expireAfterSeconds"] == 0


def test_hidden_ttl_index_still_expires(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 0, hidden=True)
    (entry,) = [ix for ix in coll.list_indexes() if ix["name"] == "t_1"]
    assert entry["hidden"] is True
    now = server_now(client)
    coll.insert_many([{"_id": 1, "t": now - MINUTE}, {"_id": 2, "t": now + MINUTE}])
    assert ids_of(coll) == [2]
    assert ids_after(client, coll, 61) == []
    assert ttl_pass(client)["deleted"] == 2


def test_several_ttl_indexes_any_one_expires_the_document(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "a", 3600)
    ttl_index(coll, "b", 60)
    now = server_now(client)
    coll.insert_many(
        [
            {"_id": 1, "a": now - 2 * HOUR, "b": now},  # by a
            {"_id": 2, "a": now, "b": now - 2 * MINUTE},  # by b
            {"_id": 3, "a": now, "b": now},  # by b, in a minute
            {"_id": 4, "a": now},  # by a, in an hour
        ]
    )
    assert ids_of(coll) == [3, 4]
    assert ids_after(client, coll, 61) == [4]
    assert ids_after(client, coll, 3600) == []
    assert ttl_pass(client)["deleted"] == 4


def test_a_ttl_index_built_over_existing_documents(client: Client) -> None:
    coll = client.ttl.c
    now = server_now(client)
    coll.insert_many(
        [
            {"_id": 1, "t": now - HOUR, "kind": "temp"},
            {"_id": 2, "t": now + HOUR, "kind": "temp"},
            {"_id": 3, "t": now - HOUR, "kind": "keep"},
        ]
    )
    ttl_index(coll, "t", 0, partialFilterExpression={"kind": "temp"})
    assert ids_of(coll) == [2, 3]
    assert ids_after(client, coll, 3601) == [3]
    assert ttl_pass(client)["deleted"] == 2


def test_dropping_the_ttl_index_stops_expiry(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 60)
    now = server_now(client)
    coll.insert_many([{"_id": 1, "t": now - HOUR}, {"_id": 2, "t": now}])
    assert ids_of(coll) == [2]
    coll.drop_index("t_1")
    # Expiry is decided by the current TTL indexes: the unexpired-by-rule document is back.
    assert ids_of(coll) == [1, 2]
    assert ids_after(client, coll, 10 * 365 * DAY) == [1, 2]
    assert ttl_pass(client)["deleted"] == 0
    # A new TTL index on another field does not revive the old one's entries.
    ttl_index(coll, "u", 60)
    assert ids_of(coll) == [1, 2]
    assert ttl_pass(client)["deleted"] == 0


def test_a_dropped_and_recreated_collection_starts_afresh(client: Client) -> None:
    db = client.ttl
    ttl_index(db.c, "t", 0)
    past = server_now(client) - HOUR
    db.c.insert_many([{"_id": i, "t": past} for i in range(3)])
    db.c.drop()
    db.c.create_index("t", expireAfterSeconds=10 * 365 * DAY)
    db.c.insert_many([{"_id": i, "t": past} for i in range(3)])
    assert ids_of(db.c) == [0, 1, 2]
    assert ttl_pass(client)["deleted"] == 0
    assert ids_of(db.c) == [0, 1, 2]


def _spread(client: Client, coll: Any, n: int) -> datetime.datetime:
    """n documents, _id i expiring (E = 0) at base + i minutes, base an hour from now."""
    base = server_now(client) + HOUR
    coll.insert_many([{"_id": i, "t": base + i * MINUTE} for i in range(n)])
    return base


def test_get_more_checks_expiry_per_batch(client: Client) -> None:
    """Move the clock between batches: each getMore leaves out what expired since the last one."""
    db = client.ttl
    ttl_index(db.c, "t", 0)
    base = _spread(client, db.c, 300)
    start = server_now(client)
    reply = db.command("find", "c", sort={"_id": 1}, batchSize=50)
    first = [d["_id"] for d in reply["cursor"]["firstBatch"]]
    assert first == list(range(50))
    cursor_id = reply["cursor"]["id"]
    seen = list(first)
    # Before each getMore, expire everything up to `dead` (inclusive).
    for dead in (99, 149, 199, 249, 299):
        target = base + dead * MINUTE + datetime.timedelta(seconds=30)
        advance(client, (target - start).total_seconds())
        start = target
        if cursor_id == 0:
            break
        more = db.command("getMore", cursor_id, collection="c", batchSize=50)
        batch = [d["_id"] for d in more["cursor"]["nextBatch"]]
        assert all(i > dead for i in batch), (dead, batch)
        seen += batch
        cursor_id = more["cursor"]["id"]
    # Expired documents are skipped, not counted: every batch is a full one of live documents.
    assert seen == list(range(50)) + list(range(100, 300))
    assert cursor_id == 0


def test_pymongo_cursor_leaves_out_documents_that_expire_mid_iteration(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 0)
    base = _spread(client, coll, 300)
    cursor = coll.find({}, batch_size=50).sort("_id", 1)
    head = [next(cursor)["_id"] for _ in range(50)]  # exactly the first batch
    assert head == list(range(50))
    target = base + 99 * MINUTE + datetime.timedelta(seconds=30)
    advance(client, (target - server_now(client)).total_seconds())
    rest = [d["_id"] for d in cursor]
    assert rest == list(range(100, 300))
    assert count(coll) == 200


# -- expires after 30 days, the clock and the pass -------------------------------------------------


def test_expires_after_thirty_days_to_the_second(client: Client) -> None:
    coll = client.ttl.month
    ttl_index(coll, "createdAt", 30 * DAY)
    created = server_now(client)
    coll.insert_one({"_id": "order", "createdAt": created})
    reply = clock(client, advanceMillis=30 * DAY * 1000 - 1000)
    assert reply["offsetMillis"] == 30 * DAY * 1000 - 1000
    assert isinstance(reply["offsetMillis"], Int64)
    assert ids_of(coll) == ["order"]
    assert ttl_pass(client)["deleted"] == 0
    clock(client, advanceSeconds=1)
    assert ids_of(coll) == []
    assert count(coll) == 0

    done = ttl_pass(client)
    assert done["ok"] == 1.0
    assert done["deleted"] == 1 and isinstance(done["deleted"], Int64)
    assert done["collections"] == [{"ns": "ttl.month", "deleted": 1}]
    assert isinstance(done["collections"][0]["deleted"], Int64)
    assert isinstance(done["now"], datetime.datetime)
    assert ttl_pass(client)["deleted"] == 0  # nothing left

    back = clock(client, reset=True)
    assert back["offsetMillis"] == 0
    assert abs(back["now"] - datetime.datetime.now(datetime.UTC).replace(tzinfo=None)) < (
        datetime.timedelta(seconds=5)
    )


def test_ttl_clock_rejects_reset_with_an_advance(client: Client) -> None:
    assert error_code(lambda: clock(client, reset=True, advanceSeconds=1)) == 2


def test_ttl_monitor_pass_reports_each_collection(client: Client) -> None:
    db = client.ttl
    past = server_now(client) - HOUR
    for name, n in (("a", 3), ("b", 250), ("c", 0)):
        ttl_index(db[name], "t", 0)
        if n:
            db[name].insert_many([{"_id": i, "t": past} for i in range(n)])
    db.c.insert_one({"_id": 1, "t": past + 2 * HOUR})
    before = ttl_metrics(client)
    reply = ttl_pass(client)
    assert reply["deleted"] == 253
    assert reply["collections"] == [
        {"ns": "ttl.a", "deleted": 3},
        {"ns": "ttl.b", "deleted": 250},
    ]
    after = ttl_metrics(client)
    assert after["passes"] == before["passes"] + 1
    assert after["deletedDocuments"] == before["deletedDocuments"] + 253
    assert after["subPasses"] > before["subPasses"]
    assert ids_of(db.c) == [1]


# -- test commands exist only with enableTestCommands ----------------------------------------------


def test_test_commands_are_absent_without_enable_test_commands(start_server: StartServer) -> None:
    srv = start_server()
    with MongoClient(srv.uri) as c:
        for name in ("ttlMonitorPass", "ttlClock"):
            err = failure(lambda name=name: c.admin.command(name))  # type: ignore[misc]
            assert err.code == 59
            assert err.details is not None
            assert err.details["codeName"] == "CommandNotFound"
            assert err.details["errmsg"] == f"no such command: '{name}'"
        names = c.admin.command("listCommands")["commands"]
        assert "ttlMonitorPass" not in names and "ttlClock" not in names


def test_test_commands_are_admin_only(client: Client) -> None:
    assert error_code(lambda: client.test.command("ttlMonitorPass")) == 13
    assert error_code(lambda: client.test.command("ttlClock", advanceSeconds=1)) == 13
    assert clock(client)["offsetMillis"] == 0  # the refused advance did nothing
    names = client.admin.command("listCommands")["commands"]
    assert "ttlMonitorPass" in names and "ttlClock" in names


# -- server parameters, metrics and the monitor ----------------------------------------------------


def test_parameters_are_admin_only(client: Client) -> None:
    assert error_code(lambda: client.test.command("setParameter", 1, ttlMonitorSleepSecs=5)) == 13
    assert error_code(lambda: client.test.command("getParameter", 1, ttlMonitorSleepSecs=1)) == 13
    assert (
        client.admin.command("getParameter", 1, ttlMonitorSleepSecs=1)["ttlMonitorSleepSecs"] == 60
    )


def test_set_and_get_ttl_monitor_sleep_secs(client: Client) -> None:
    admin = client.admin
    reply = admin.command("setParameter", 1, ttlMonitorSleepSecs=5)
    assert reply == {"was": 60, "ok": 1.0}
    assert admin.command("getParameter", 1, ttlMonitorSleepSecs=1) == {
        "ttlMonitorSleepSecs": 5,
        "ok": 1.0,
    }
    assert admin.command("setParameter", 1, ttlMonitorSleepSecs=7)["was"] == 5
    for bad in (0, -1, "x"):
        assert (
            error_code(lambda bad=bad: admin.command("setParameter", 1, ttlMonitorSleepSecs=bad))
            == 2
        )  # type: ignore[misc]
    assert admin.command("getParameter", 1, ttlMonitorSleepSecs=1)["ttlMonitorSleepSecs"] == 7
    assert admin.command("getParameter", 1, ttlMonitorEnabled=1)["ttlMonitorEnabled"] is True
    assert error_code(lambda: admin.command("setParameter", 1, ttlNoSuchThing=1)) == 72


def test_command_line_parameter_shows_in_get_parameter(start_server: StartServer) -> None:
    srv = start_server(parameters={"ttlMonitorSleepSecs": 1})
    with MongoClient(srv.uri) as c:
        reply = c.admin.command("getParameter", 1, ttlMonitorSleepSecs=1, ttlMonitorEnabled=1)
        assert reply["ttlMonitorSleepSecs"] == 1
        assert reply["ttlMonitorEnabled"] is True


def test_server_status_ttl_metrics_are_int64(client: Client) -> None:
    raw = client.admin.command("serverStatus", codec_options=RAW)
    ttl = raw["metrics"]["ttl"]
    assert set(ttl.keys()) == {"passes", "subPasses", "deletedDocuments"}
    for key in ("passes", "subPasses", "deletedDocuments"):
        assert type(ttl[key]).__name__ == "Int64", key
    ttl_pass(client)
    assert ttl_metrics(client)["passes"] >= 1


def test_disabled_monitor_runs_no_pass(start_server: StartServer) -> None:
    srv = start_server(parameters={"ttlMonitorSleepSecs": 1})
    with MongoClient(srv.uri) as c:
        wait_until(lambda: ttl_metrics(c)["passes"] >= 1, "a TTL pass")  # the monitor is running
        assert c.admin.command("setParameter", 1, ttlMonitorEnabled=False) == {
            "was": True,
            "ok": 1.0,
        }
        assert c.admin.command("getParameter", 1, ttlMonitorEnabled=1)["ttlMonitorEnabled"] is False
        ttl_index(c.off.c, "t", 0)
        c.off.c.insert_one({"_id": 1, "t": datetime.datetime(2000, 1, 1)})
        still = ttl_metrics(c)
        time.sleep(2.5)
        assert ttl_metrics(c) == still
        assert ids_of(c.off.c) == []  # hidden all the same
        c.admin.command("setParameter", 1, ttlMonitorEnabled=True)
        wait_until(lambda: ttl_metrics(c)["passes"] > still["passes"], "a TTL pass once enabled")
        wait_until(
            lambda: ttl_metrics(c)["deletedDocuments"] == still["deletedDocuments"] + 1,
            "the expired document deleted",
        )
        assert error_code(lambda: c.admin.command("setParameter", 1, ttlMonitorEnabled="x")) == 2


def test_changing_sleep_secs_wakes_the_monitor(start_server: StartServer) -> None:
    srv = start_server(parameters={"ttlMonitorSleepSecs": 3600})
    assert srv.app is not None
    with MongoClient(srv.uri) as c:
        coll = c.wake.c
        ttl_index(coll, "t", 0)
        coll.insert_one({"_id": 1, "t": datetime.datetime(2000, 1, 1)})
        assert ids_of(coll) == []  # hidden at once, deleted by the monitor
        assert ttl_metrics(c)["passes"] == 0
        assert c.admin.command("setParameter", 1, ttlMonitorSleepSecs=1)["was"] == 3600
        # Left asleep, the monitor would pass again in an hour: a bounded wait, far shorter.
        wait_until(lambda: ttl_metrics(c)["deletedDocuments"] >= 1, "the woken monitor's deletion")
        assert ttl_metrics(c)["passes"] > 0
        lines = [json.loads(line) for line in list(srv.app.log_ring.lines)]
        about = [e for e in lines if "wake.c" in e["msg"]]
        assert len(about) == 1, about
        msg = about[0]["msg"]
        assert " 1 " in f" {msg} " and "ms" in msg
        # getLog serves the same line.
        log = c.admin.command("getLog", "global")["log"]
        assert sum("wake.c" in json.loads(line)["msg"] for line in log) == 1


# -- collMod ---------------------------------------------------------------------------------------


def coll_mod(coll: Any, **index: Any) -> dict[str, Any]:
    reply: dict[str, Any] = coll.database.command("collMod", coll.name, index=index)
    return reply


def test_coll_mod_changes_expire_after_seconds(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 3600)
    by_key = coll.database.command(
        "collMod", "c", index={"keyPattern": {"t": 1}, "expireAfterSeconds": 60}, codec_options=RAW
    )
    assert dict(by_key) == {"expireAfterSeconds_old": 3600, "expireAfterSeconds_new": 60, "ok": 1.0}
    assert type(by_key["expireAfterSeconds_old"]).__name__ == "Int64"
    assert type(by_key["expireAfterSeconds_new"]).__name__ == "Int64"
    by_name = coll_mod(coll, name="t_1", expireAfterSeconds=60)
    assert by_name == {"expireAfterSeconds_old": 60, "expireAfterSeconds_new": 60, "ok": 1.0}
    (entry,) = [ix for ix in coll.list_indexes() if ix["name"] == "t_1"]
    assert entry["expireAfterSeconds"] == 60


def test_a_new_expire_after_seconds_hides_at_once(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 3600)
    now = server_now(client)
    coll.insert_many([{"_id": 1, "t": now - 10 * MINUTE}, {"_id": 2, "t": now}])
    assert ids_of(coll) == [1, 2]
    coll_mod(coll, keyPattern={"t": 1}, expireAfterSeconds=60)
    assert ids_of(coll) == [2]
    assert count(coll) == 1
    # And longer again: the document is back until a pass deletes it (it was only hidden).
    coll_mod(coll, name="t_1", expireAfterSeconds=3600)
    assert ids_of(coll) == [1, 2]
    coll_mod(coll, name="t_1", expireAfterSeconds=0)
    assert ttl_pass(client)["deleted"] == 2


def test_coll_mod_converts_a_single_field_index_to_ttl(client: Client) -> None:
    coll = client.ttl.c
    coll.create_index("u")
    now = server_now(client)
    coll.insert_many([{"_id": 1, "u": now - HOUR}, {"_id": 2, "u": now}, {"_id": 3, "u": "x"}])
    reply = coll_mod(coll, keyPattern={"u": 1}, expireAfterSeconds=60)
    assert reply == {"expireAfterSeconds_new": 60, "ok": 1.0}
    assert isinstance(reply["expireAfterSeconds_new"], Int64)
    (entry,) = [ix for ix in coll.list_indexes() if ix["name"] == "u_1"]
    assert entry["expireAfterSeconds"] == 60
    assert ids_of(coll) == [2, 3]
    coll.insert_one({"_id": 4, "u": now - HOUR})  # later writes follow the new TTL index
    assert ids_of(coll) == [2, 3]
    assert ttl_pass(client)["deleted"] == 2


def test_coll_mod_errors(client: Client) -> None:
    db = client.ttl
    coll = db.c
    ttl_index(coll, "t", 60)
    coll.create_index([("a", 1), ("b", 1)])
    coll.create_index("k")
    coll.create_index("k", name="k_partial", partialFilterExpression={"k": {"$gt": 0}})

    def code(**index: Any) -> int:
        return error_code(lambda: coll_mod(coll, **index))

    assert code(keyPattern={"a": 1, "b": 1}, expireAfterSeconds=10) == 72
    assert code(keyPattern={"_id": 1}, expireAfterSeconds=10) == 72
    assert code(name="_id_", expireAfterSeconds=10) == 72
    assert code(name="t_1", expireAfterSeconds=-1) == 72
    assert code(name="t_1", expireAfterSeconds="10") == 14
    assert code(name="t_1", expireAfterSeconds=True) == 14
    assert code(name="t_1", expireAfterSeconds=None) == 14
    # NaN is refused before the index is looked up; an infinity is out of range (it was an
    # InternalError: int() of an infinite Decimal).
    assert code(name="nope", expireAfterSeconds=math.nan) == 72
    assert code(name="t_1", expireAfterSeconds=math.inf) == 72
    assert code(name="t_1", expireAfterSeconds=-math.inf) == 72
    assert code(name="t_1", keyPattern={"t": 1}, expireAfterSeconds=10) == 72
    assert code(expireAfterSeconds=10) == 72
    assert code(name="nope", expireAfterSeconds=10) == 27
    assert code(keyPattern={"nope": 1}, expireAfterSeconds=10) == 27
    assert code(keyPattern={"k": 1}, expireAfterSeconds=10) == 181
    err = error_code(
        lambda: db.command("collMod", "missing", index={"name": "t_1", "expireAfterSeconds": 1})
    )
    assert err == 26
    # Nothing changed.
    listed = {ix["name"]: ix.get("expireAfterSeconds") for ix in coll.list_indexes()}
    assert listed == {"_id_": None, "t_1": 60, "a_1_b_1": None, "k_1": None, "k_partial": None}


def test_coll_mod_hidden_reports_only_a_change(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 60)
    assert coll_mod(coll, name="t_1", hidden=True) == {
        "hidden_old": False,
        "hidden_new": True,
        "ok": 1.0,
    }
    assert coll_mod(coll, name="t_1", hidden=True) == {"ok": 1.0}
    both = coll_mod(coll, keyPattern={"t": 1}, hidden=False, expireAfterSeconds=30)
    assert both == {
        "expireAfterSeconds_old": 60,
        "expireAfterSeconds_new": 30,
        "hidden_old": True,
        "hidden_new": False,
        "ok": 1.0,
    }
    (entry,) = [ix for ix in coll.list_indexes() if ix["name"] == "t_1"]
    assert entry.get("hidden", False) is False
    assert entry["expireAfterSeconds"] == 30


# -- writes that collide with expired documents ----------------------------------------------------


def test_insert_over_an_expired_id_succeeds(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 60)
    now = server_now(client)
    coll.insert_many([{"_id": 1, "t": now}, {"_id": 2, "t": now}])
    assert ids_after(client, coll, 61) == []
    coll.insert_one({"_id": 1, "fresh": True})
    assert list(coll.find({"_id": 1})) == [{"_id": 1, "fresh": True}]
    # An ordered batch: one expired collision, then a new id.
    coll.insert_many([{"_id": 2, "fresh": True}, {"_id": 3}])
    assert ids_of(coll) == [1, 2, 3]
    with pytest.raises(DuplicateKeyError) as info:
        coll.insert_one({"_id": 1})
    assert info.value.code == 11000
    # The expired documents went with the inserts that replaced them: nothing left to delete.
    assert ttl_pass(client)["deleted"] == 0
    assert count(coll) == 3


def test_insert_over_an_expired_unique_key_succeeds(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 0)
    coll.create_index("k", unique=True)
    now = server_now(client)
    coll.insert_many(
        [{"_id": 1, "k": "a", "t": now + MINUTE}, {"_id": 2, "k": "b", "t": now + HOUR}]
    )
    advance(client, 61)
    coll.insert_one({"_id": 10, "k": "a"})
    with pytest.raises(DuplicateKeyError) as info:
        coll.insert_one({"_id": 11, "k": "b"})
    assert info.value.code == 11000
    assert [(d["_id"], d["k"]) for d in coll.find().sort("_id", 1)] == [(2, "b"), (10, "a")]
    assert list(coll.find({"k": "a"})) == [{"_id": 10, "k": "a"}]
    assert ttl_pass(client)["deleted"] == 0


def test_insert_of_an_already_expired_document_is_hidden_at_once(client: Client) -> None:
    coll = client.ttl.c
    ttl_index(coll, "t", 0)
    result = coll.insert_one({"_id": 1, "t": datetime.datetime(2001, 1, 1)})
    assert result.inserted_id == 1
    assert ids_of(coll) == []
    coll.insert_one({"_id": 1})  # the hidden one does not block the _id
    assert ids_of(coll) == [1]


# -- restarts --------------------------------------------------------------------------------------


def test_ttl_state_survives_a_restart(start_server: StartServer, dbpath: str) -> None:
    first = start_server(parameters=TEST_COMMANDS, path=dbpath)
    with MongoClient(first.uri) as c:
        coll = c.keep.c
        ttl_index(coll, "t", 3600)
        coll.create_index("u")
        coll_mod(coll, keyPattern={"u": 1}, expireAfterSeconds=120)
        # The clock one hour back: what lives until "now + 30 min" there has expired by real time.
        clock(c, advanceSeconds=-3600)
        now = server_now(c)
        coll.insert_many(
            [
                {"_id": 1, "t": now - 30 * MINUTE},  # expires at real - 30 min
                {"_id": 2, "t": now + 90 * MINUTE},  # expires at real + 90 min
                {"_id": 3, "u": now},  # expires at real - 58 min
                {"_id": 4},
            ]
        )
        assert ids_of(coll) == [1, 2, 3, 4]
    first.stop()

    second = start_server(parameters=TEST_COMMANDS, path=dbpath)
    with MongoClient(second.uri) as c:
        coll = c.keep.c
        assert clock(c)["offsetMillis"] == 0
        listed = {ix["name"]: ix.get("expireAfterSeconds") for ix in coll.list_indexes()}
        assert listed == {"_id_": None, "t_1": 3600, "u_1": 120}
        assert ids_of(coll) == [2, 4]  # hidden at once
        assert count(coll) == 2
        reply = ttl_pass(c)
        assert reply["deleted"] == 2
        assert reply["collections"] == [{"ns": "keep.c", "deleted": 2}]
        # _id 2 keeps its date: it expires 90 minutes from (real) now.
        assert ids_after(c, coll, 90 * 60 - 60) == [2, 4]
        assert ids_after(c, coll, 120) == [4]


def test_monitor_deletes_after_a_restart(start_server: StartServer, dbpath: str) -> None:
    first = start_server(parameters=TEST_COMMANDS, path=dbpath)
    with MongoClient(first.uri) as c:
        ttl_index(c.keep.c, "t", 0)
        clock(c, advanceSeconds=-3600)
        c.keep.c.insert_many([{"_id": i, "t": server_now(c) + MINUTE} for i in range(5)])
        assert count(c.keep.c) == 5
    first.stop()

    second = start_server(parameters={"ttlMonitorSleepSecs": 1}, path=dbpath)
    with MongoClient(second.uri) as c:
        assert count(c.keep.c) == 0
        wait_until(lambda: ttl_metrics(c)["deletedDocuments"] == 5, "the 5 documents deleted")


# -- other drivers ---------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_async_client_sees_expiry(async_client: AsyncMongoClient[dict[str, Any]]) -> None:
    coll = async_client.ttl.c
    await coll.create_index("t", expireAfterSeconds=60)
    now = (await async_client.admin.command("ttlClock"))["now"]
    await coll.insert_many([{"_id": i, "t": now + i * MINUTE} for i in range(5)])
    assert [d["_id"] async for d in coll.find().sort("_id", 1)] == [0, 1, 2, 3, 4]
    await async_client.admin.command("ttlClock", advanceSeconds=60 + 2 * 60 + 1)
    assert [d["_id"] async for d in coll.find().sort("_id", 1)] == [3, 4]
    assert await coll.estimated_document_count() == 2
    assert sorted(await coll.distinct("_id")) == [3, 4]
    reply = await async_client.admin.command("ttlMonitorPass")
    assert reply["collections"] == [{"ns": "ttl.c", "deleted": 3}]


@pytest.mark.asyncio
async def test_motor_coll_mod_and_clock(motor_client: Any) -> None:
    db = motor_client.ttl
    await db.c.create_index("t", expireAfterSeconds=3600)
    now = (await motor_client.admin.command("ttlClock"))["now"]
    await db.c.insert_one({"_id": 1, "t": now - 10 * MINUTE})
    assert await db.c.find_one({"_id": 1}) is not None
    reply = await db.command("collMod", "c", index={"name": "t_1", "expireAfterSeconds": 300})
    assert reply["expireAfterSeconds_old"] == 3600 and reply["expireAfterSeconds_new"] == 300
    assert await db.c.find_one({"_id": 1}) is None
    with pytest.raises(OperationFailure) as info:
        await db.command("collMod", "c", index={"name": "t_1", "expireAfterSeconds": "x"})
    assert info.value.code == 14
    reset = await motor_client.admin.command("ttlClock", reset=True)
    assert reset["offsetMillis"] == 0


@pytest.mark.parametrize(
    ("args", "code"),
    [
        ({"advanceSeconds": 1e20}, 2),
        ({"advanceMillis": -(10**15)}, 2),
        ({"advanceSeconds": "x"}, 14),
        ({"reset": True, "advanceSeconds": 1}, 2),
    ],
)
def test_ttl_clock_refuses_bad_moves_and_keeps_serving(
    client: Client, args: dict[str, Any], code: int
) -> None:
    with pytest.raises(OperationFailure) as err:
        client.admin.command("ttlClock", **args)
    assert err.value.code == code
    reply = client.admin.command("ttlClock")
    assert reply["offsetMillis"] == 0 and type(reply["ok"]) is float


def test_capped_collection_allows_a_ttl_index(client: Client) -> None:
    """spec/ttl.md: TTL indexes are allowed on capped collections (current MongoDB behaviour)."""
    db = client.ttl_capped
    db.create_collection("c", capped=True, size=1 << 20)
    assert db.c.create_index("t", expireAfterSeconds=10) == "t_1"
    now = server_now(client)
    db.c.insert_many([{"_id": 1, "t": now - 20 * MINUTE}, {"_id": 2, "t": now}])
    assert ids_of(db.c) == [2]
