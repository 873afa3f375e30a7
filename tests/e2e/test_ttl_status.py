"""ttlStatus through pymongo, with the server's TTL clock (the ebbdb_clock fixture): for each TTL
rule of a collection, what will expire and when, what is expired but not yet deleted, what never
expires and why; the monitor's last pass; and the monitor's one warning per collection and TTL
index about date-like strings in its field (read back with getLog)."""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Iterator
from typing import Any

import pytest
from bson import Int64, ObjectId
from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import OperationFailure

from ebbdb.server.pytest_plugin import TtlClock

Client = MongoClient[dict[str, Any]]
HOUR = 3600
S = datetime.timedelta(seconds=1)
DATE_STRINGS_ID = 9_100_001


@pytest.fixture
def quiet(client: Client) -> Iterator[Client]:
    """The client, with the server's own TTL monitor off: only the test's passes delete (the
    `server` fixture puts the parameter back)."""
    client.admin.command("setParameter", 1, ttlMonitorEnabled=False)
    yield client


def status(db: Any, name: str) -> dict[str, Any]:
    reply: dict[str, Any] = db.command("ttlStatus", name)
    return reply


def code_of(db: Any, body: dict[str, Any]) -> tuple[int, str]:
    with pytest.raises(OperationFailure) as info:
        db.command(body)
    details = info.value.details or {}
    return int(info.value.code or 0), str(details.get("codeName"))


def long(n: int) -> Int64:
    return Int64(n)


# -- a native TTL index -----------------------------------------------------------------------------


def test_native_index_counts_each_reason_and_the_next_expiry(
    quiet: Client, ebbdb_clock: TtlClock
) -> None:
    db = quiet.ttlstatus_native
    db.sessions.create_index("createdAt", expireAfterSeconds=HOUR)
    t = ebbdb_clock.now()
    db.sessions.insert_many(
        [
            {"_id": "soon", "createdAt": t - 100 * S},  # expires at t + 3500 s
            {"_id": "gone", "createdAt": t - 2 * HOUR * S},  # expired, not deleted
            {"_id": "array", "createdAt": ["x", t - 50 * S, t]},  # earliest date: t + 3550 s
            {"_id": "missing"},
            {"_id": "iso", "createdAt": "2024-01-01T00:00:00Z"},
            {"_id": "js", "createdAt": "Mon Jan 01 2024 00:00:00 GMT+0000 (UTC)"},
            {"_id": "noDates", "createdAt": ["a", 5]},
            {"_id": "number", "createdAt": 1_704_067_200},
            {"_id": "null", "createdAt": None},
            {"_id": "word", "createdAt": "yesterday"},
        ]
    )
    reply = status(db, "sessions")
    assert reply["ok"] == 1.0
    assert reply["ns"] == "ttlstatus_native.sessions"
    assert reply["now"] >= t
    assert reply["lastPass"] is None
    summary = {k: reply[k] for k in ("documents", "willExpire", "expiredNotDeleted", "neverExpire")}
    assert summary == {"documents": 10, "willExpire": 2, "expiredNotDeleted": 1, "neverExpire": 7}
    assert all(type(v) is Int64 for v in summary.values())
    assert reply["nextExpiry"] == t + 3500 * S
    (rule,) = reply["rules"]
    assert rule == {
        "kind": "ttlIndex",
        "index": "createdAt_1",
        "field": "createdAt",
        "expireAfterSeconds": HOUR,
        "willExpire": long(2),
        "nextExpiry": t + 3500 * S,
        "expiredNotDeleted": long(1),
        "neverExpire": long(7),
        "reasons": {
            "fieldMissing": {"count": long(1), "example": {"_id": "missing"}},
            "dateString": {
                "count": long(2),
                "example": {"_id": "iso", "value": "2024-01-01T00:00:00Z"},
            },
            "arrayWithoutDates": {
                "count": long(1),
                "example": {"_id": "noDates", "value": ["a", 5]},
            },
            "notADate": {
                "count": long(3),
                "types": {"int": long(1), "null": long(1), "string": long(1)},
                "example": {"_id": "number", "value": 1_704_067_200},
            },
        },
    }
    assert list(rule["reasons"]) == ["fieldMissing", "dateString", "arrayWithoutDates", "notADate"]


def test_expired_not_deleted_until_a_pass_then_the_last_pass(
    quiet: Client, ebbdb_clock: TtlClock
) -> None:
    db = quiet.ttlstatus_pass
    db.c.create_index("at", expireAfterSeconds=60)
    t = ebbdb_clock.now()
    db.c.insert_many([{"_id": i, "at": t + i * 10 * S} for i in range(5)])  # expire t+60..t+100
    assert status(db, "c")["nextExpiry"] == t + 60 * S
    ebbdb_clock.advance(85)  # t+60, t+70 and t+80 are due; t+90 and t+100 are not
    before = status(db, "c")
    assert (before["expiredNotDeleted"], before["willExpire"], before["neverExpire"]) == (3, 2, 0)
    assert before["nextExpiry"] == t + 90 * S
    assert before["rules"][0]["expiredNotDeleted"] == 3
    assert before["documents"] == 5
    assert before["lastPass"] is None
    assert db.c.count_documents({}) == 2  # hidden already

    done = ebbdb_clock.run_ttl_pass()
    assert done.by_namespace.get("ttlstatus_pass.c") == 3
    after = status(db, "c")
    assert (after["documents"], after["expiredNotDeleted"], after["willExpire"]) == (2, 0, 2)
    assert after["lastPass"] == {"time": done.now, "deleted": long(3)}

    ebbdb_clock.run_ttl_pass()  # visits the collection again, deleting nothing
    again = status(db, "c")
    assert again["lastPass"]["deleted"] == 0
    assert again["lastPass"]["time"] >= done.now


def test_partial_filter_and_two_indexes(quiet: Client, ebbdb_clock: TtlClock) -> None:
    db = quiet.ttlstatus_two
    db.c.create_index("a", expireAfterSeconds=100)
    db.c.create_index(
        "b", expireAfterSeconds=0, partialFilterExpression={"kind": "temp"}, name="b_temp"
    )
    t = ebbdb_clock.now()
    db.c.insert_many(
        [
            {"_id": 1, "a": t, "b": t + 10 * S, "kind": "temp"},  # b first: t+10
            {"_id": 2, "a": t, "b": t + 10 * S},  # b's filter rejects it: a at t+100
            {"_id": 3, "b": t + 500 * S, "kind": "temp"},  # a missing: b at t+500
            {"_id": 4, "kind": "temp"},  # neither
        ]
    )
    reply = status(db, "c")
    assert (reply["willExpire"], reply["neverExpire"], reply["nextExpiry"]) == (3, 1, t + 10 * S)
    a, b = reply["rules"]
    assert (a["index"], a["willExpire"], a["nextExpiry"]) == ("a_1", 2, t + 100 * S)
    assert a["reasons"] == {"fieldMissing": {"count": long(2), "example": {"_id": 3}}}
    assert b["partialFilterExpression"] == {"kind": "temp"}
    assert (b["index"], b["field"], b["expireAfterSeconds"]) == ("b_temp", "b", 0)
    assert (b["willExpire"], b["nextExpiry"]) == (2, t + 10 * S)
    assert b["reasons"] == {
        "partialFilterMismatch": {"count": long(1), "example": {"_id": 2}},
        "fieldMissing": {"count": long(1), "example": {"_id": 4}},
    }
    ebbdb_clock.advance(150)
    later = status(db, "c")
    assert (later["expiredNotDeleted"], later["willExpire"]) == (2, 1)
    assert [r["expiredNotDeleted"] for r in later["rules"]] == [2, 1]


def test_a_collection_without_ttl_rules(quiet: Client) -> None:
    db = quiet.ttlstatus_plain
    db.c.insert_many([{"_id": 1}, {"_id": 2}])
    reply = status(db, "c")
    assert reply["rules"] == []
    assert (reply["documents"], reply["willExpire"], reply["neverExpire"]) == (2, 0, 2)
    assert reply["nextExpiry"] is None
    assert reply["lastPass"] is None


# -- the Cosmos model -------------------------------------------------------------------------------


def test_cosmos_default_minus_one_and_the_document_ttl(
    quiet: Client, ebbdb_clock: TtlClock
) -> None:
    db = quiet.ttlstatus_cosmos
    db.command(
        "createIndexes",
        "c",
        indexes=[{"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": -1}],
    )
    before = ebbdb_clock.now()
    db.c.insert_many(
        [
            {"_id": "ten", "ttl": 10},
            {"_id": "forever", "ttl": -1},
            {"_id": "text", "ttl": "20"},
            {"_id": "half", "ttl": 0.5},
            {"_id": "none"},
        ]
    )
    after = ebbdb_clock.now()
    reply = status(db, "c")
    (rule,) = reply["rules"]
    assert {k: rule[k] for k in ("kind", "index", "field", "expireAfterSeconds")} == {
        "kind": "cosmos",
        "index": "_ts_1",
        "field": "_ts",
        "expireAfterSeconds": -1,
    }
    assert (rule["willExpire"], rule["expiredNotDeleted"], rule["neverExpire"]) == (1, 0, 4)
    assert before + 10 * S <= rule["nextExpiry"] <= after + 10 * S
    assert rule["reasons"] == {
        "ttlMinusOne": {"count": long(1), "example": {"_id": "forever", "value": -1}},
        "invalidTtl": {"count": long(2), "example": {"_id": "text", "value": "20"}},
        "noDefaultTtl": {"count": long(1), "example": {"_id": "none"}},
    }
    assert rule["ignored"] == {"field": "ttl", "count": long(0)}

    # A default of 100 s: the invalid ttl values are ignored (the default applies), -1 stays.
    db.command("collMod", "c", index={"keyPattern": {"_ts": 1}, "expireAfterSeconds": 100})
    reply = status(db, "c")
    (rule,) = reply["rules"]
    assert rule["expireAfterSeconds"] == 100
    assert (rule["willExpire"], rule["neverExpire"]) == (4, 1)
    assert rule["reasons"] == {
        "ttlMinusOne": {"count": long(1), "example": {"_id": "forever", "value": -1}}
    }
    assert rule["ignored"] == {
        "field": "ttl",
        "count": long(2),
        "example": {"_id": "text", "value": "20"},
    }
    ebbdb_clock.advance(50)
    mid = status(db, "c")
    assert (mid["expiredNotDeleted"], mid["willExpire"], mid["neverExpire"]) == (1, 3, 1)
    assert before + 100 * S <= mid["nextExpiry"] <= after + 100 * S


def test_cosmos_and_a_native_index_together(quiet: Client, ebbdb_clock: TtlClock) -> None:
    db = quiet.ttlstatus_both
    db.c.create_index("at", expireAfterSeconds=0)
    db.command(
        "createIndexes",
        "c",
        indexes=[{"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": 1000}],
    )
    t = ebbdb_clock.now()
    db.c.insert_many([{"_id": 1, "at": t + 5 * S, "ttl": -1}, {"_id": 2, "ttl": -1}])
    reply = status(db, "c")
    assert [r["kind"] for r in reply["rules"]] == ["ttlIndex", "cosmos"]
    assert (reply["willExpire"], reply["neverExpire"], reply["nextExpiry"]) == (1, 1, t + 5 * S)
    native, cosmos = reply["rules"]
    assert native["reasons"] == {"fieldMissing": {"count": long(1), "example": {"_id": 2}}}
    assert cosmos["reasons"]["ttlMinusOne"]["count"] == 2


# -- errors ------------------------------------------------------------------------------------------


def test_errors(quiet: Client) -> None:
    db = quiet.ttlstatus_errors
    assert code_of(db, {"ttlStatus": "nope"}) == (26, "NamespaceNotFound")
    assert code_of(db, {"ttlStatus": 1}) == (2, "BadValue")
    assert code_of(db, {"ttlStatus": ""}) == (73, "InvalidNamespace")
    db.c.insert_one({})
    assert code_of(db, {"ttlStatus": "c", "verbose": True}) == (40415, "Location40415")
    with pytest.raises(OperationFailure) as info:
        db.command("ttlStatus", "missing")
    assert str(info.value.details and info.value.details["errmsg"]) == (
        "Collection 'ttlstatus_errors.missing' does not exist"
    )


def test_listed_in_list_commands(quiet: Client) -> None:
    commands = quiet.admin.command("listCommands")["commands"]
    assert "ttlStatus" in commands
    assert commands["ttlStatus"]["adminOnly"] is False


# -- the monitor's warning about date-like strings ---------------------------------------------------


def warnings_for(client: Client, ns: str) -> list[dict[str, Any]]:
    lines = client.admin.command("getLog", "global")["log"]
    found = []
    for line in lines:
        entry = json.loads(line)
        if entry.get("id") == DATE_STRINGS_ID and entry["attr"]["namespace"] == ns:
            found.append(entry)
    return found


def test_one_warning_per_collection_and_index(quiet: Client, ebbdb_clock: TtlClock) -> None:
    db = quiet.ttlstatus_warn
    db.a.insert_one({"_id": "old", "t": "2023-05-01"})  # met when the index is built
    db.a.create_index("t", expireAfterSeconds=60)
    db.a.create_index("u", expireAfterSeconds=60)
    db.a.insert_many([{"_id": i, "t": f"2024-01-0{i}T00:00:00Z"} for i in range(1, 4)])
    db.b.create_index("t", expireAfterSeconds=60)
    db.b.insert_one({"_id": 1, "t": "a word"})  # not date-like: no warning
    assert warnings_for(quiet, "ttlstatus_warn.a") == []  # the monitor logs, at its pass

    ebbdb_clock.run_ttl_pass()
    (first,) = warnings_for(quiet, "ttlstatus_warn.a")
    assert first["s"] == "W"
    assert first["c"] == "INDEX"
    assert first["ctx"] == "TTLMonitor"
    assert first["attr"] == {
        "namespace": "ttlstatus_warn.a",
        "index": "t_1",
        "field": "t",
        "_id": "old",
        "value": "2023-05-01",
    }

    db.a.insert_one({"_id": 9, "t": "2024-02-02", "u": "Mon, 01 Jan 2024 00:00:00 GMT"})
    db.b.insert_one({"_id": 2, "t": ["x", "2024-03-03T10:00:00+01:00"]})
    ebbdb_clock.run_ttl_pass()
    ebbdb_clock.run_ttl_pass()
    found = warnings_for(quiet, "ttlstatus_warn.a")
    assert [(w["attr"]["index"], w["attr"]["_id"]) for w in found] == [("t_1", "old"), ("u_1", 9)]
    (b,) = warnings_for(quiet, "ttlstatus_warn.b")
    assert (b["attr"]["index"], b["attr"]["value"]) == ("t_1", "2024-03-03T10:00:00+01:00")
    reasons = status(db, "a")["rules"][0]["reasons"]
    assert reasons["dateString"]["count"] == 5


# -- off the event loop ------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_other_clients_are_served_while_a_status_counts(
    async_client: AsyncMongoClient[dict[str, Any]], quiet: Client
) -> None:
    db = async_client.ttlstatus_async
    await db.c.create_index("t", expireAfterSeconds=60)
    await db.c.insert_many([{"t": "2024-01-01", "pad": "x" * 200} for _ in range(20_000)])
    counting = asyncio.ensure_future(db.command("ttlStatus", "c"))
    pings = 0
    while not counting.done():
        await async_client.admin.command("ping")
        pings += 1
    reply = await counting
    assert reply["neverExpire"] == 20_000
    assert reply["rules"][0]["reasons"]["dateString"]["count"] == 20_000
    assert pings > 1


# -- clustered and time series collections -------------------------------------------------------


def test_clustered_collection_by_the_id_date(quiet: Client, ebbdb_clock: TtlClock) -> None:
    db = quiet.ttlstatus_clustered
    db.create_collection(
        "events", clusteredIndex={"key": {"_id": 1}, "unique": True}, expireAfterSeconds=60
    )
    t = ebbdb_clock.now().replace(microsecond=0)
    oid = ObjectId.from_datetime(t)
    db.events.insert_many([{"_id": oid}, {"_id": t + 10 * S}, {"_id": "order-7"}, {"_id": 5}])
    reply = status(db, "events")
    (rule,) = reply["rules"]
    assert rule == {
        "kind": "clustered",
        "index": "_id_",
        "field": "_id",
        "expireAfterSeconds": 60,
        "willExpire": long(2),
        "nextExpiry": t + 60 * S,
        "expiredNotDeleted": long(0),
        "neverExpire": long(2),
        "reasons": {
            "notADate": {
                "count": long(2),
                "types": {"int": long(1), "string": long(1)},
                "example": {"_id": "order-7", "value": "order-7"},
            }
        },
    }
    assert (reply["willExpire"], reply["neverExpire"]) == (2, 2)
    ebbdb_clock.advance(65)  # the ObjectId's document is due; the Date's (t+70) is not
    due = status(db, "events")
    assert (due["expiredNotDeleted"], due["willExpire"], due["nextExpiry"]) == (1, 1, t + 70 * S)
    assert db.events.count_documents({}) == 3  # hidden already
    ebbdb_clock.run_ttl_pass()
    after = status(db, "events")
    assert (after["documents"], after["expiredNotDeleted"]) == (3, 0)
    assert after["lastPass"]["deleted"] == 1
    db.command("collMod", "events", expireAfterSeconds="off")
    assert status(db, "events")["rules"] == []  # no rule while it is off


def test_time_series_collection_by_the_time_field(quiet: Client, ebbdb_clock: TtlClock) -> None:
    db = quiet.ttlstatus_timeseries
    db.create_collection(
        "weather", timeseries={"timeField": "t", "metaField": "m"}, expireAfterSeconds=30
    )
    t = ebbdb_clock.now().replace(microsecond=0)
    db.weather.insert_many([{"t": t + i * 10 * S, "m": "x", "v": i} for i in range(3)])
    (rule,) = status(db, "weather")["rules"]
    assert (rule["kind"], rule["index"], rule["field"], rule["expireAfterSeconds"]) == (
        "timeseries",
        None,
        "t",
        30,
    )
    assert (rule["willExpire"], rule["nextExpiry"], rule["neverExpire"]) == (3, t + 30 * S, 0)
    assert rule["reasons"] == {}
    ebbdb_clock.advance(45)  # t+30 and t+40 are due
    due = status(db, "weather")
    assert (due["expiredNotDeleted"], due["willExpire"], due["nextExpiry"]) == (2, 1, t + 50 * S)
    assert due["rules"][0]["expiredNotDeleted"] == 2
