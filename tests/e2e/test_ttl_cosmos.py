"""The Cosmos DB TTL model through real drivers (spec/ttl.md section 2): a TTL index on `_ts` sets
the collection's default time to live over the server-kept last-modified time, and a valid root-level
`ttl` overrides it per document. The last-modified time is never returned to clients. Time is moved
with ttlClock (enableTestCommands=1)."""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from typing import Any

import bson
import pytest
from bson import Int64, Timestamp
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo import MongoClient

from ebbdb.server.embedded import ServerThread
from tests.e2e.ttl_helpers import TEST_COMMANDS, advance, error_code, ids_after, ids_of, ttl_pass

Client = MongoClient[dict[str, Any]]
StartServer = Callable[..., ServerThread]

RAW = CodecOptions(document_class=RawBSONDocument)
YEAR = 365 * 86_400


@pytest.fixture
def server(start_server: StartServer) -> ServerThread:
    return start_server(parameters=TEST_COMMANDS)


def count(coll: Any, query: dict[str, Any] | None = None) -> int:
    return int(coll.database.command("count", coll.name, query=query or {})["n"])


def ts_index(coll: Any, default: Any) -> dict[str, Any]:
    """createIndex({_ts: 1}, {expireAfterSeconds: default}) as a raw command reply."""
    reply: dict[str, Any] = coll.database.command(
        "createIndexes",
        coll.name,
        indexes=[{"key": {"_ts": 1}, "name": "_ts_1", "expireAfterSeconds": default}],
    )
    return reply


def listed_expire(coll: Any, name: str = "_ts_1") -> Any:
    (entry,) = [ix for ix in coll.list_indexes() if ix["name"] == name]
    return entry.get("expireAfterSeconds")


# -- the documentation's example -------------------------------------------------------------------


def test_documentation_example(client: Client) -> None:
    """createIndex({_ts: 1}, {expireAfterSeconds: 10}); ttl 20.0, NumberInt(20) and NumberLong(20)
    live 20 seconds; 20.5 and NumberLong(2147483649) are ignored and live the default 10."""
    coll = client.cosmos.c
    reply = ts_index(coll, 10)
    assert reply["ok"] == 1.0 and reply["numIndexesAfter"] == 2
    assert listed_expire(coll) == 10
    docs = [
        {"_id": "double", "ttl": 20.0},
        {"_id": "int", "ttl": 20},
        {"_id": "long", "ttl": Int64(20)},
        {"_id": "fraction", "ttl": 20.5},
        {"_id": "big long", "ttl": Int64(2147483649)},
        {"_id": "forever", "ttl": -1},
        {"_id": "default"},
    ]
    coll.insert_many(docs)
    everyone = sorted(d["_id"] for d in docs)

    assert ids_after(client, coll, 9) == everyone
    # The ttl fields are ordinary data, returned as written (types too).
    raw = {d["_id"]: d.raw for d in coll.with_options(codec_options=RAW).find()}
    for doc in docs:
        assert raw[doc["_id"]] == bson.encode(doc)

    assert ids_after(client, coll, 2) == ["double", "forever", "int", "long"]  # +11 s
    assert count(coll) == 4
    assert ids_after(client, coll, 10) == ["forever"]  # +21 s
    assert ids_after(client, coll, 10 * YEAR) == ["forever"]
    done = ttl_pass(client)
    assert done["collections"] == [{"ns": "cosmos.c", "deleted": 6}]


# -- the table of section 2 ------------------------------------------------------------------------


@pytest.mark.parametrize("setup", ["no index", "plain _ts index", "native ttl index only"])
def test_without_a_ts_ttl_index_nothing_expires_by_ttl(client: Client, setup: str) -> None:
    coll = client.cosmos.c
    if setup == "plain _ts index":
        coll.create_index("_ts")
    elif setup == "native ttl index only":
        coll.create_index("t", expireAfterSeconds=3600)
    coll.insert_many([{"_id": 1}, {"_id": 2, "ttl": -1}, {"_id": 3, "ttl": 1}])
    assert ids_after(client, coll, 10 * YEAR) == [1, 2, 3]
    assert ttl_pass(client)["deleted"] == 0


def test_default_minus_one_expires_only_documents_with_their_own_ttl(client: Client) -> None:
    coll = client.cosmos.c
    ts_index(coll, -1)
    assert listed_expire(coll) == -1
    coll.insert_many([{"_id": 1}, {"_id": 2, "ttl": -1}, {"_id": 3, "ttl": 5}])
    assert ids_after(client, coll, 4) == [1, 2, 3]
    assert ids_after(client, coll, 2) == [1, 2]
    assert ids_after(client, coll, 10 * YEAR) == [1, 2]
    assert ttl_pass(client)["deleted"] == 1


def test_default_m_with_document_ttls_shorter_and_longer(client: Client) -> None:
    coll = client.cosmos.c
    ts_index(coll, 30)
    coll.insert_many(
        [{"_id": 1}, {"_id": 2, "ttl": -1}, {"_id": 3, "ttl": 5}, {"_id": 4, "ttl": 60}]
    )
    assert ids_after(client, coll, 4) == [1, 2, 3, 4]
    assert ids_after(client, coll, 2) == [1, 2, 4]  # +6
    assert ids_after(client, coll, 25) == [2, 4]  # +31
    assert ids_after(client, coll, 30) == [2]  # +61
    assert ids_after(client, coll, 10 * YEAR) == [2]


def test_only_a_valid_root_level_ttl_counts(client: Client) -> None:
    coll = client.cosmos.c
    ts_index(coll, 10)
    ignored = [
        {"_id": "string", "ttl": "20"},
        {"_id": "bool", "ttl": True},
        {"_id": "zero", "ttl": 0},
        {"_id": "minus five", "ttl": -5},
        {"_id": "nested", "meta": {"ttl": 100}},
        {"_id": "upper", "TTL": 100},
        {"_id": "nan", "ttl": math.nan},
        {"_id": "double too big", "ttl": 2147483648.0},
        {"_id": "null", "ttl": None},
        {"_id": "array", "ttl": [100]},
        {"_id": "minus zero point five", "ttl": -0.5},
    ]
    honoured = [
        {"_id": "long minus one", "ttl": Int64(-1)},
        {"_id": "double minus one", "ttl": -1.0},
        {"_id": "hundred", "ttl": 100},
        {"_id": "int32 max", "ttl": 2147483647},
    ]
    coll.insert_many(ignored + honoured)
    advance(client, 9)
    assert count(coll) == len(ignored) + len(honoured)
    assert ids_after(client, coll, 2) == sorted(d["_id"] for d in honoured)
    assert ids_after(client, coll, 90) == ["double minus one", "int32 max", "long minus one"]
    assert ttl_pass(client)["deleted"] == len(ignored) + 1


# -- the server-kept last-modified time ------------------------------------------------------------


def test_a_later_insert_has_a_later_last_modified_time(client: Client) -> None:
    coll = client.cosmos.c
    ts_index(coll, 10)
    coll.insert_many([{"_id": "a"}, {"_id": "a ttl", "ttl": 20}])
    advance(client, 5)
    coll.insert_many([{"_id": "b"}, {"_id": "b ttl", "ttl": 20}])
    assert ids_after(client, coll, 6) == ["a ttl", "b", "b ttl"]  # a at +11, b at +6
    assert ids_after(client, coll, 5) == ["a ttl", "b ttl"]  # a at +16, b at +11
    assert ids_after(client, coll, 5) == ["b ttl"]  # a at +21, b at +16
    assert ids_after(client, coll, 5) == []  # b at +21


def test_a_ts_index_created_later_uses_the_insert_times(client: Client) -> None:
    coll = client.cosmos.c
    coll.insert_many(
        [{"_id": 1}, {"_id": 2, "ttl": 5}, {"_id": 3, "ttl": 100}, {"_id": 4, "ttl": -1}]
    )
    assert ids_after(client, coll, 20) == [1, 2, 3, 4]  # no _ts index: nothing expires
    ts_index(coll, 10)
    assert ids_of(coll) == [3, 4]
    assert ids_after(client, coll, 81) == [4]
    assert ttl_pass(client)["deleted"] == 3


def test_dropping_the_ts_index_stops_cosmos_expiry(client: Client) -> None:
    coll = client.cosmos.c
    ts_index(coll, 10)
    coll.insert_many([{"_id": 1}, {"_id": 2, "ttl": 5}])
    assert ids_after(client, coll, 11) == []
    coll.drop_index("_ts_1")
    assert ids_of(coll) == [1, 2]
    assert ttl_pass(client)["deleted"] == 0
    coll.create_index("_ts")  # a plain _ts index is no default TTL
    assert ids_after(client, coll, YEAR) == [1, 2]
    assert ttl_pass(client)["deleted"] == 0


def test_last_modified_time_is_never_returned(client: Client) -> None:
    coll = client.cosmos.c
    ts_index(coll, 3600)
    doc = {"_id": 1, "x": 1, "sub": {"y": 2}}
    coll.insert_one(doc)
    raw = coll.with_options(codec_options=RAW)
    assert [d.raw for d in raw.find()] == [bson.encode(doc)]
    assert raw.find_one({"_id": 1}).raw == bson.encode(doc)  # type: ignore[union-attr]
    assert list(coll.find({}, {"_ts": 1})) == [{"_id": 1}]
    assert list(coll.find({}, {"x": 0})) == [{"_id": 1, "sub": {"y": 2}}]
    assert list(coll.find({"_ts": {"$exists": True}})) == []
    assert list(coll.find({"_ts": {"$gt": 0}})) == []
    assert list(coll.find({"_ts": {"$gt": datetime.datetime(1970, 1, 1)}})) == []
    assert count(coll, {"_ts": {"$exists": True}}) == 0
    assert coll.distinct("_ts") == []
    reply = coll.database.command("find", "c", filter={"_id": 1})
    assert "_ts" not in reply["cursor"]["firstBatch"][0]


def test_a_client_written_ts_is_data_and_does_not_drive_expiry(client: Client) -> None:
    coll = client.cosmos.c
    ts_index(coll, 10)
    old = datetime.datetime(2000, 1, 1)
    future = datetime.datetime(2200, 1, 1)
    docs = [
        {"_id": 1, "_ts": 0},
        {"_id": 2, "_ts": old},
        {"_id": 3, "_ts": Timestamp(1, 1)},
        {"_id": 4, "_ts": future},
        {"_id": 5, "_ts": "yesterday"},
    ]
    coll.insert_many(docs)
    # Not expired by an old _ts: the server's own time counts.
    assert list(coll.find().sort("_id", 1)) == docs
    raw = coll.with_options(codec_options=RAW)
    assert [d.raw for d in raw.find().sort("_id", 1)] == [bson.encode(d) for d in docs]
    # Queryable as ordinary data.
    assert ids_of(coll, {"_ts": 0}) == [1]
    assert ids_of(coll, {"_ts": {"$lt": future}}) == [2]
    assert ids_of(coll, {"_ts": {"$exists": True}}) == [1, 2, 3, 4, 5]
    assert sorted(map(str, coll.distinct("_ts"))) == sorted(str(d["_ts"]) for d in docs)
    assert ids_after(client, coll, 9) == [1, 2, 3, 4, 5]
    assert ids_after(client, coll, 2) == []  # not kept alive by a future _ts either
    assert ttl_pass(client)["deleted"] == 5


# -- D validation and collMod ----------------------------------------------------------------------


@pytest.mark.parametrize("default", [-1, 1, 2_147_483_647])
def test_default_ttl_accepted(client: Client, default: int) -> None:
    coll = client.cosmos.c
    ts_index(coll, default)
    assert listed_expire(coll) == default


@pytest.mark.parametrize("default", [0, -2, 2_147_483_648, "10", None])
def test_default_ttl_rejected(client: Client, default: Any) -> None:
    coll = client.cosmos.c
    assert error_code(lambda: ts_index(coll, default)) == 67
    assert "c" not in client.cosmos.list_collection_names() or [
        ix["name"] for ix in coll.list_indexes()
    ] == ["_id_"]


def test_coll_mod_changes_the_default(client: Client) -> None:
    coll = client.cosmos.c
    ts_index(coll, 10)
    coll.insert_many([{"_id": 1}, {"_id": 2, "ttl": 5}])
    reply = client.cosmos.command(
        "collMod", "c", index={"keyPattern": {"_ts": 1}, "expireAfterSeconds": 100}
    )
    assert reply == {"expireAfterSeconds_old": 10, "expireAfterSeconds_new": 100, "ok": 1.0}
    assert isinstance(reply["expireAfterSeconds_old"], Int64)
    assert isinstance(reply["expireAfterSeconds_new"], Int64)
    assert listed_expire(coll) == 100
    assert ids_after(client, coll, 11) == [1]
    reply = client.cosmos.command("collMod", "c", index={"name": "_ts_1", "expireAfterSeconds": -1})
    assert reply == {"expireAfterSeconds_old": 100, "expireAfterSeconds_new": -1, "ok": 1.0}
    assert listed_expire(coll) == -1
    assert ids_after(client, coll, 10 * YEAR) == [1]
    # And back to a default that has long passed: expired at once.
    client.cosmos.command("collMod", "c", index={"name": "_ts_1", "expireAfterSeconds": 50})
    assert ids_of(coll) == []
    assert ttl_pass(client)["deleted"] == 2


@pytest.mark.parametrize("default", [0, -2, 2_147_483_648])
def test_coll_mod_rejects_a_bad_default(client: Client, default: int) -> None:
    coll = client.cosmos.c
    ts_index(coll, 10)
    index = {"name": "_ts_1", "expireAfterSeconds": default}
    assert error_code(lambda: client.cosmos.command("collMod", "c", index=index)) == 72
    assert listed_expire(coll) == 10


def test_coll_mod_makes_a_plain_ts_index_the_default(client: Client) -> None:
    coll = client.cosmos.c
    coll.create_index("_ts")
    coll.insert_many([{"_id": 1}, {"_id": 2, "_ts": 0}, {"_id": 3, "ttl": 5}])
    assert ids_of(coll, {"_ts": 0}) == [2]
    reply = client.cosmos.command(
        "collMod", "c", index={"keyPattern": {"_ts": 1}, "expireAfterSeconds": 10}
    )
    assert reply == {"expireAfterSeconds_new": 10, "ok": 1.0}
    assert ids_of(coll) == [1, 2, 3]
    assert ids_of(coll, {"_ts": 0}) == [2]  # still data
    assert ids_after(client, coll, 6) == [1, 2]
    assert ids_after(client, coll, 5) == []


def test_cosmos_and_native_ttl_on_one_collection(client: Client) -> None:
    coll = client.cosmos.c
    ts_index(coll, 100)
    coll.create_index("t", expireAfterSeconds=0)
    now = client.admin.command("ttlClock")["now"]
    coll.insert_many(
        [
            {"_id": 1, "t": now + datetime.timedelta(seconds=10)},  # native first
            {"_id": 2, "ttl": 20, "t": now + datetime.timedelta(seconds=50)},  # ttl first
            {"_id": 3, "ttl": -1, "t": now + datetime.timedelta(seconds=30)},  # native only
            {"_id": 4},  # the default
        ]
    )
    assert ids_after(client, coll, 11) == [2, 3, 4]
    assert ids_after(client, coll, 10) == [3, 4]
    assert ids_after(client, coll, 10) == [4]
    assert ids_after(client, coll, 70) == []


# -- restarts and other drivers --------------------------------------------------------------------


def test_last_modified_and_ttl_survive_a_restart(start_server: StartServer, dbpath: str) -> None:
    first = start_server(parameters=TEST_COMMANDS, path=dbpath)
    with MongoClient(first.uri) as c:
        coll = c.cosmos.c
        ts_index(coll, 1800)
        c.admin.command("ttlClock", advanceSeconds=-3600)  # written an hour before real time
        coll.insert_many(
            [
                {"_id": "default"},  # expired 30 min ago by real time
                {"_id": "short", "ttl": 60},  # expired 59 min ago
                {"_id": "long", "ttl": 7200},  # expires an hour from real now
                {"_id": "forever", "ttl": -1},
            ]
        )
        assert count(coll) == 4
    first.stop()

    second = start_server(parameters=TEST_COMMANDS, path=dbpath)
    with MongoClient(second.uri) as c:
        coll = c.cosmos.c
        assert listed_expire(coll) == 1800
        assert ids_of(coll) == ["forever", "long"]
        assert list(coll.find({"_id": "long"})) == [{"_id": "long", "ttl": 7200}]
        assert ttl_pass(c)["collections"] == [{"ns": "cosmos.c", "deleted": 2}]
        assert ids_after(c, coll, 3600 - 60) == ["forever", "long"]
        assert ids_after(c, coll, 120) == ["forever"]


@pytest.mark.asyncio
async def test_motor_sees_the_documentation_example(motor_client: Any) -> None:
    coll = motor_client.cosmos.c
    await coll.create_index("_ts", expireAfterSeconds=10)
    await coll.insert_many(
        [{"_id": 1, "ttl": 20}, {"_id": 2, "ttl": 20.5}, {"_id": 3, "ttl": Int64(20)}]
    )
    await motor_client.admin.command("ttlClock", advanceSeconds=11)
    assert [d["_id"] async for d in coll.find().sort("_id", 1)] == [1, 3]
    assert all("_ts" not in d for d in [d async for d in coll.find()])
    await motor_client.admin.command("ttlClock", advanceSeconds=10)
    assert await coll.find_one() is None
    reply = await motor_client.admin.command("ttlMonitorPass")
    assert reply["deleted"] == 3
