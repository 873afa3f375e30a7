"""The commands tools call, through real drivers (pymongo, AsyncMongoClient, motor): dbStats,
collStats, the $collStats and $indexStats stages (in the exact shapes mongosh's db.stats(),
coll.stats(), totalSize(), dataSize() and latencyStats() send), renameCollection and shutdown, with
MongoDB 7.0's reply shapes, field types, error codes and messages."""

from __future__ import annotations

import contextlib
import datetime
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bson
import pytest
from bson import Int64
from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import AutoReconnect, OperationFailure

from ebbdb.server.embedded import ServerThread
from tests.e2e import rawwire
from tests.e2e.test_cli import ServerProcess
from tests.e2e.ttl_helpers import TEST_COMMANDS, advance, ttl_pass
from tests.helpers import STORAGE_STATS_FIELDS
from tests.waiting import wait_until

Client = MongoClient[dict[str, Any]]


def refused(fn: Callable[[], Any]) -> tuple[int, str, str]:
    """(code, codeName, errmsg) of a command that must fail."""
    with pytest.raises(OperationFailure) as info:
        fn()
    details = info.value.details or {}
    return int(info.value.code or 0), details.get("codeName", ""), details.get("errmsg", "")


def bson_size(docs: list[dict[str, Any]]) -> int:
    return sum(len(bson.encode(d)) for d in docs)


DOCS = [{"_id": i, "x": i, "tags": [i, i + 10], "name": "n" * (i % 7)} for i in range(40)]


def _load(client: Client, db: str = "shop", coll: str = "orders") -> list[dict[str, Any]]:
    client[db][coll].insert_many([dict(d) for d in DOCS])
    client[db][coll].create_index("x")
    client[db][coll].create_index("tags")
    return DOCS


# -- dbStats ---------------------------------------------------------------------------------------

DB_STATS_FIELDS = [
    "db",
    "collections",
    "views",
    "objects",
    "avgObjSize",
    "dataSize",
    "storageSize",
    "indexes",
    "indexSize",
    "totalSize",
    "scaleFactor",
    "fsUsedSize",
    "fsTotalSize",
    "ok",
]
_INT64_FIELDS = ("collections", "views", "objects", "indexes", "scaleFactor")


def test_db_stats_shape_types_and_figures(client: Client) -> None:
    docs = _load(client)
    client.shop.extra.insert_many([{"_id": i} for i in range(5)])
    reply = client.shop.command("dbStats")
    assert list(reply) == DB_STATS_FIELDS
    for name in _INT64_FIELDS:
        assert type(reply[name]) is Int64, name
    for name in set(DB_STATS_FIELDS) - {*_INT64_FIELDS, "db"}:
        assert type(reply[name]) is float, name
    data = bson_size(docs) + bson_size([{"_id": i} for i in range(5)])
    assert (reply["db"], reply["collections"], reply["views"]) == ("shop", 2, 0)
    assert (reply["objects"], reply["indexes"], reply["scaleFactor"]) == (45, 4, 1)
    assert reply["dataSize"] == data
    assert reply["avgObjSize"] == data / 45
    assert reply["storageSize"] >= data  # the records' BSON, keys and headers, in whole pages
    assert reply["indexSize"] > 0
    assert reply["totalSize"] == reply["storageSize"] + reply["indexSize"]
    assert 0 < reply["fsUsedSize"] <= reply["fsTotalSize"]
    # db.stats() in mongosh sends {dbStats: 1, scale: 1}; the lower-case alias works too.
    assert client.shop.command({"dbStats": 1, "scale": 1})["dataSize"] == data
    assert client.shop.command("dbstats")["objects"] == 45


def test_db_stats_scale_divides_sizes_not_averages(client: Client) -> None:
    _load(client)
    whole = client.shop.command("dbStats")
    scaled = client.shop.command("dbStats", scale=1024)
    assert scaled["scaleFactor"] == 1024
    for name in ("dataSize", "storageSize", "indexSize", "totalSize"):
        assert scaled[name] == whole[name] / 1024, name
    assert scaled["avgObjSize"] == whole["avgObjSize"]
    # A fraction is dropped, as the IDL's safeInt64 does.
    assert client.shop.command("dbStats", scale=1023.9)["scaleFactor"] == 1023


def test_db_stats_of_a_missing_database_is_zeros(client: Client) -> None:
    reply = client.nothing_here.command("dbStats", scale=4)
    assert reply == {
        "db": "nothing_here",
        "collections": 0,
        "views": 0,
        "objects": 0,
        "avgObjSize": 0.0,
        "dataSize": 0.0,
        "storageSize": 0.0,
        "indexes": 0,
        "indexSize": 0.0,
        "totalSize": 0.0,
        "scaleFactor": 4,
        "fsUsedSize": 0.0,
        "fsTotalSize": 0.0,
        "ok": 1.0,
    }
    assert list(reply) == DB_STATS_FIELDS
    assert type(reply["collections"]) is Int64 and type(reply["dataSize"]) is float


def test_db_stats_free_storage(client: Client) -> None:
    _load(client)
    reply = client.shop.command("dbStats", freeStorage=1)
    at = DB_STATS_FIELDS.index("scaleFactor")
    free = ["freeStorageSize", "indexFreeStorageSize", "totalFreeStorageSize"]
    assert list(reply) == [*DB_STATS_FIELDS[:at], *free, *DB_STATS_FIELDS[at:]]
    assert [reply[f] for f in free] == [0.0, 0.0, 0.0]


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"scale": 0}, (2, "BadValue", "Scale factor must be greater than zero")),
        ({"scale": -5}, (2, "BadValue", "Scale factor must be greater than zero")),
        ({"scale": 0.5}, (2, "BadValue", "Scale factor must be greater than zero")),
        (
            {"scale": "1"},
            (
                14,
                "TypeMismatch",
                "BSON field 'dbStats.scale' is the wrong type 'string', "
                "expected types '[long, int, decimal, double]'",
            ),
        ),
        (
            {"foo": 1},
            (40415, "Location40415", "BSON field 'dbStats.foo' is an unknown field."),
        ),
    ],
    ids=["zero", "negative", "fraction", "string", "unknown"],
)
def test_db_stats_refuses(client: Client, extra: dict[str, Any], error: tuple[Any, ...]) -> None:
    assert refused(lambda: client.shop.command({"dbStats": 1, **extra})) == error


# -- collStats -------------------------------------------------------------------------------------


def test_coll_stats_shape_types_and_figures(client: Client) -> None:
    docs = _load(client)
    reply = client.shop.command("collStats", "orders")
    assert list(reply) == ["ns", *STORAGE_STATS_FIELDS, "ok"]
    data = bson_size(docs)
    assert reply["ns"] == "shop.orders"
    assert (reply["size"], reply["count"], reply["avgObjSize"]) == (data, 40, data // 40)
    for name in ("size", "count", "avgObjSize", "storageSize", "totalIndexSize", "totalSize"):
        assert type(reply[name]) is int, name  # appendNumber: int32 below 2^30
    assert (reply["numOrphanDocs"], reply["freeStorageSize"], reply["capped"]) == (0, 0, False)
    assert (reply["nindexes"], reply["indexDetails"], reply["indexBuilds"]) == (3, {}, [])
    assert list(reply["indexSizes"]) == ["_id_", "x_1", "tags_1"]
    assert all(type(v) is int and v > 0 for v in reply["indexSizes"].values())
    assert reply["totalIndexSize"] == sum(reply["indexSizes"].values())
    assert reply["totalSize"] == reply["storageSize"] + reply["totalIndexSize"]
    assert reply["scaleFactor"] == 1
    assert client.shop.command("collstats", "orders")["count"] == 40


def test_coll_stats_scale(client: Client) -> None:
    _load(client)
    whole = client.shop.command("collStats", "orders")
    scaled = client.shop.command("collStats", "orders", scale=1000)
    for name in ("size", "storageSize", "totalIndexSize"):
        assert scaled[name] == whole[name] // 1000, name
    assert scaled["totalSize"] == (whole["storageSize"] + whole["totalIndexSize"]) // 1000
    assert scaled["indexSizes"] == {k: v // 1000 for k, v in whole["indexSizes"].items()}
    assert (scaled["avgObjSize"], scaled["scaleFactor"]) == (whole["avgObjSize"], 1000)
    assert client.shop.command("collStats", "orders", scale=42.42)["scaleFactor"] == 42


def test_coll_stats_of_a_missing_collection_is_zeros(client: Client) -> None:
    reply = client.shop.command("collStats", "nope", scale=8)
    zeros = "size count numOrphanDocs storageSize totalSize nindexes totalIndexSize".split()
    assert list(reply) == ["ns", *zeros, "indexDetails", "indexSizes", "scaleFactor", "ok"]
    assert [reply[k] for k in zeros] == [0] * len(zeros)
    assert all(type(reply[k]) is int for k in zeros)
    assert (reply["ns"], reply["indexDetails"], reply["indexSizes"]) == ("shop.nope", {}, {})
    assert (reply["scaleFactor"], reply["ok"]) == (8, 1.0)


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        (
            {"scale": 0},
            (51024, "Location51024", "BSON field 'scale' value must be >= 1, actual value '0'"),
        ),
        (
            {"scale": "x"},
            (
                14,
                "TypeMismatch",
                "BSON field 'collStats.scale' is the wrong type 'string', "
                "expected types '[long, int, decimal, double]'",
            ),
        ),
        (
            {"verbose": 1},
            (14, "TypeMismatch", "Field 'verbose' should be a boolean value, but found: int"),
        ),
        (
            {"foo": 1},
            (40415, "Location40415", "BSON field 'collStats.foo' is an unknown field."),
        ),
    ],
    ids=["zero-scale", "string-scale", "int-verbose", "unknown"],
)
def test_coll_stats_refuses(client: Client, extra: dict[str, Any], error: tuple[Any, ...]) -> None:
    _load(client)
    assert refused(lambda: client.shop.command({"collStats": "orders", **extra})) == error


def test_storage_statistics_count_expired_documents_until_they_are_deleted(
    start_server: Callable[..., ServerThread],
) -> None:
    """Reads hide an expired document at once; storage statistics, like MongoDB's, count what is
    stored until the TTL monitor deletes it (docs/ttl.md)."""
    client: Client = MongoClient(start_server(parameters=TEST_COMMANDS).uri)
    try:
        coll = client.shop.sessions
        coll.create_index("at", expireAfterSeconds=60)
        now = datetime.datetime.now(datetime.UTC)
        coll.insert_many([{"_id": i, "at": now} for i in range(3)] + [{"_id": 9}])
        advance(client, 3600)
        assert coll.count_documents({}) == 1
        assert client.shop.command("collStats", "sessions")["count"] == 4
        assert client.shop.command("dbStats")["objects"] == 4
        [stats] = coll.aggregate([{"$collStats": {"count": {}, "storageStats": {}}}])
        assert (stats["count"], stats["storageStats"]["count"]) == (4, 4)
        assert ttl_pass(client)["deleted"] == 3
        assert client.shop.command("collStats", "sessions")["count"] == 1
    finally:
        client.close()


# -- $collStats ------------------------------------------------------------------------------------


def test_coll_stats_stage_count_host_and_time(client: Client, server: ServerThread) -> None:
    _load(client)
    before = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    [doc] = client.shop.orders.aggregate([{"$collStats": {"count": {}}}])
    assert list(doc) == ["ns", "host", "localTime", "count"]
    assert doc["ns"] == "shop.orders"
    assert doc["host"] == f"{socket.gethostname()}:{server.port}"
    assert isinstance(doc["localTime"], datetime.datetime)
    assert doc["localTime"] >= before - datetime.timedelta(milliseconds=1)
    assert type(doc["count"]) is int and doc["count"] == 40


def test_coll_stats_stage_storage_stats_match_coll_stats(client: Client) -> None:
    _load(client)
    for scale in (1, 1000):
        [doc] = client.shop.orders.aggregate([{"$collStats": {"storageStats": {"scale": scale}}}])
        command = client.shop.command("collStats", "orders", scale=scale)
        assert list(doc["storageStats"]) == STORAGE_STATS_FIELDS
        assert doc["storageStats"] == {k: v for k, v in command.items() if k not in ("ns", "ok")}
    [doc] = client.shop.orders.aggregate([{"$collStats": {"storageStats": {"scale": 42.42}}}])
    assert doc["storageStats"]["scaleFactor"] == 42


def test_coll_stats_stage_fields_come_in_mongodb_order(client: Client) -> None:
    _load(client)
    spec = {
        "queryExecStats": {},
        "count": {},
        "storageStats": {},
        "latencyStats": {"histograms": True},
    }
    [doc] = client.shop.orders.aggregate([{"$collStats": spec}])
    assert list(doc) == [
        "ns",
        "host",
        "localTime",
        "latencyStats",
        "storageStats",
        "count",
        "queryExecStats",
    ]


@pytest.mark.parametrize("histograms", [False, True])
def test_latency_stats_count_reads_writes_and_commands(client: Client, histograms: bool) -> None:
    coll = client.shop.timed
    coll.insert_one({"_id": 1, "x": 1})
    coll.insert_one({"_id": 2, "x": 2})
    for _ in range(3):
        coll.find_one({"x": 2})
    coll.create_index("x")
    client.shop.other.find_one({})  # another namespace
    [doc] = coll.aggregate([{"$collStats": {"latencyStats": {"histograms": histograms}}}])
    latency = doc["latencyStats"]
    assert list(latency) == ["reads", "writes", "commands", "transactions"]
    assert [latency[k]["ops"] for k in latency] == [3, 2, 1, 0]
    for kind, figures in latency.items():
        assert list(figures) == (["histogram"] if histograms else []) + ["latency", "ops"]
        assert type(figures["latency"]) is Int64 and type(figures["ops"]) is Int64, kind
        assert figures["latency"] >= 0
        if histograms:
            bars = figures["histogram"]
            assert sum(bar["count"] for bar in bars) == figures["ops"]
            assert [bar["micros"] for bar in bars] == sorted({bar["micros"] for bar in bars})
            assert all(type(bar["micros"]) is Int64 and bar["count"] > 0 for bar in bars)
    # The aggregate that read them is a read too; a dropped collection starts again.
    [doc] = coll.aggregate([{"$collStats": {"latencyStats": {}}}])
    assert doc["latencyStats"]["reads"]["ops"] == 4
    coll.drop()
    [doc] = coll.aggregate([{"$collStats": {"latencyStats": {}}}])
    assert doc["latencyStats"]["reads"]["ops"] == 0
    coll.drop()  # that read made no database to clean up: forget it before the next test


def test_query_exec_stats_count_collection_scans(client: Client) -> None:
    _load(client)

    def scans() -> Any:
        [doc] = client.shop.orders.aggregate([{"$collStats": {"queryExecStats": {}}}])
        return doc["queryExecStats"]["collectionScans"]

    start = scans()
    assert list(start) == ["total", "nonTailable"] and type(start["total"]) is Int64
    list(client.shop.orders.find({"name": "n"}))  # no index on name: a collection scan
    client.shop.orders.find_one({"x": 3})  # the x index: no scan
    assert scans() == {"total": start["total"] + 1, "nonTailable": start["total"] + 1}


def test_mongosh_stats_shapes(client: Client) -> None:
    """What mongosh 2.x sends for coll.stats() and for totalSize(), dataSize(), storageSize() and
    totalIndexSize() (a $group over $collStats)."""
    _load(client)
    command = client.shop.command("collStats", "orders")
    [doc] = client.shop.orders.aggregate([{"$collStats": {"storageStats": {"scale": 1}}}])
    assert doc["storageStats"]["count"] == 40
    for field in ("totalSize", "size", "storageSize", "totalIndexSize"):
        pipeline = [
            {"$collStats": {"storageStats": {}}},
            {"$group": {"_id": None, "value": {"$sum": f"$storageStats.{field}"}}},
        ]
        assert list(client.shop.orders.aggregate(pipeline)) == [
            {"_id": None, "value": command[field]}
        ]
    # ... and the stats() helper's look-up for a sharded collection finds nothing.
    assert client.config.collections.find_one({"_id": "shop.orders"}) is None
    pipeline = [{"$collStats": {"count": {}, "storageStats": {}}}, {"$count": "after"}]
    assert list(client.shop.orders.aggregate(pipeline)) == [{"after": 1}]


def test_coll_stats_stage_on_a_missing_collection(client: Client) -> None:
    [doc] = client.shop.nope.aggregate([{"$collStats": {}}])
    assert list(doc) == ["ns", "host", "localTime"]
    [doc] = client.shop.nope.aggregate([{"$collStats": {"latencyStats": {}}}])
    assert doc["latencyStats"]["reads"]["ops"] == 1  # the aggregate before this one
    for what in ("storageStats", "count", "queryExecStats"):
        error = refused(
            lambda what=what: list(client.shop.nope.aggregate([{"$collStats": {what: {}}}]))
        )
        assert error == (
            26,
            "NamespaceNotFound",
            "PlanExecutor error during aggregation :: caused by :: Unable to retrieve "
            f"{what} in $collStats stage :: caused by :: Collection [shop.nope] not found.",
        )


@pytest.mark.parametrize(
    ("pipeline", "error"),
    [
        (
            [{"$collStats": None}],
            (5447000, "$collStats must take a nested object but found: $collStats: null"),
        ),
        (
            [{"$collStats": 1}],
            (5447000, "$collStats must take a nested object but found: $collStats: 1"),
        ),
        (
            [{"$match": {}}, {"$collStats": {}}],
            (40602, "$collStats is only valid as the first stage in a pipeline"),
        ),
        (
            [{"$facet": {"a": [{"$collStats": {}}]}}],
            (40600, "$collStats is not allowed to be used within a $facet stage"),
        ),
        (
            [{"$collStats": {"foo": {}}}],
            (40415, "BSON field '$collStats.foo' is an unknown field."),
        ),
        (
            [{"$collStats": {"count": 1}}],
            (14, "BSON field '$collStats.count' is the wrong type 'int', expected type 'object'"),
        ),
        (
            [{"$collStats": {"storageStats": {"scale": -1000}}}],
            (51024, "BSON field 'scale' value must be >= 1, actual value '-1000'"),
        ),
        (
            [{"$collStats": {"storageStats": {"scale": "invalid"}}}],
            (
                14,
                "BSON field '$collStats.storageStats.scale' is the wrong type 'string', "
                "expected types '[long, int, decimal, double]'",
            ),
        ),
        (
            [{"$collStats": {"latencyStats": {"histograms": 1}}}],
            (14, "Field 'histograms' should be a boolean value, but found: int"),
        ),
        (
            [{"$collStats": {"latencyStats": {"x": True}}}],
            (40415, "BSON field '$collStats.latencyStats.x' is an unknown field."),
        ),
        (
            [{"$indexStats": {"a": 1}}],
            (28803, "The $indexStats stage specification must be an empty object"),
        ),
        (
            [{"$indexStats": []}],
            (28803, "The $indexStats stage specification must be an empty object"),
        ),
        (
            [{"$match": {}}, {"$indexStats": {}}],
            (40602, "$indexStats is only valid as the first stage in a pipeline"),
        ),
    ],
)
def test_stats_stages_refuse(
    client: Client, pipeline: list[dict[str, Any]], error: tuple[int, str]
) -> None:
    _load(client)
    code, _name, message = refused(lambda: list(client.shop.orders.aggregate(pipeline)))
    assert (code, message) == error


# -- $indexStats -----------------------------------------------------------------------------------


def test_index_stats_shape_and_accesses(client: Client, server: ServerThread) -> None:
    created = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    _load(client)
    client.shop.orders.create_index("name", expireAfterSeconds=3600, name="by_name")
    coll = client.shop.orders
    coll.find_one({"x": 5})
    list(coll.find({"x": {"$gt": 30}}).batch_size(2))  # batches of one query count once
    coll.update_one({"_id": 3}, {"$set": {"y": 1}})  # by _id
    list(coll.find({"name": "nnn"}))  # by_name
    list(coll.find({"y": 1}))  # a collection scan: no index
    stats = list(coll.aggregate([{"$indexStats": {}}]))
    specs = {spec["name"]: spec for spec in coll.list_indexes()}
    assert [s["name"] for s in stats] == ["_id_", "x_1", "tags_1", "by_name"]
    for s in stats:
        assert list(s) == ["name", "key", "host", "accesses", "spec"]
        assert s["key"] == specs[s["name"]]["key"]
        assert s["spec"] == specs[s["name"]]
        assert s["host"] == f"{socket.gethostname()}:{server.port}"
        assert list(s["accesses"]) == ["ops", "since"]
        assert type(s["accesses"]["ops"]) is Int64
        assert s["accesses"]["since"] >= created - datetime.timedelta(milliseconds=1)
    ops = {s["name"]: s["accesses"]["ops"] for s in stats}
    assert ops == {"_id_": 1, "x_1": 2, "tags_1": 0, "by_name": 1}
    assert list(client.shop.nope.aggregate([{"$indexStats": {}}])) == []


# -- renameCollection ------------------------------------------------------------------------------


def _indexes(coll: Any) -> list[dict[str, Any]]:
    return [{k: v for k, v in spec.items() if k != "ns"} for spec in coll.list_indexes()]


@pytest.mark.parametrize("target", ["shop.renamed", "archive.renamed"], ids=["same-db", "other-db"])
def test_rename_keeps_documents_indexes_and_ttl(
    start_server: Callable[..., ServerThread], target: str
) -> None:
    client: Client = MongoClient(start_server(parameters=TEST_COMMANDS).uri)
    try:
        source = client.shop.sessions
        source.create_index("at", expireAfterSeconds=60)
        now = datetime.datetime.now(datetime.UTC)
        source.insert_many([{"_id": i, "at": now, "x": i} for i in range(4)] + [{"_id": 9}])
        source.create_index("x", unique=True)
        indexes = _indexes(source)
        reply = client.admin.command("renameCollection", "shop.sessions", to=target)
        assert reply == {"ok": 1.0}
        to_db, to_name = target.split(".")
        moved = client[to_db][to_name]
        assert "sessions" not in client.shop.list_collection_names()
        assert sorted(d["_id"] for d in moved.find()) == [0, 1, 2, 3, 9]
        assert _indexes(moved) == indexes
        assert moved.find_one({"x": 2}, {"_id": 1}) == {"_id": 2}
        if to_db != "shop":
            assert "shop" not in client.list_database_names()
        advance(client, 3600)
        assert [d["_id"] for d in moved.find()] == [9]
        assert ttl_pass(client)["collections"] == [{"ns": target, "deleted": 4}]
        assert moved.count_documents({}) == 1
    finally:
        client.close()


def test_rename_with_drop_target(client: Client) -> None:
    client.shop.a.insert_many([{"_id": 1}, {"_id": 2}])
    client.shop.b.insert_one({"_id": "old"})
    client.shop.b.create_index("z")
    error = refused(lambda: client.shop.a.rename("b"))
    assert error == (48, "NamespaceExists", "target namespace exists")
    client.shop.a.rename("b", dropTarget=True)  # pymongo sends it on admin
    assert sorted(d["_id"] for d in client.shop.b.find()) == [1, 2]
    assert [ix["name"] for ix in client.shop.b.list_indexes()] == ["_id_"]
    assert client.shop.list_collection_names() == ["b"]


@pytest.mark.parametrize(
    ("command", "error"),
    [
        (
            {"renameCollection": "shop.missing", "to": "shop.b"},
            (26, "NamespaceNotFound", "source namespace does not exist"),
        ),
        (
            {"renameCollection": "nodb.a", "to": "nodb.b"},
            (26, "NamespaceNotFound", "Database nodb does not exist or is drop pending"),
        ),
        (
            {"renameCollection": "shop.a", "to": "shop.a"},
            (20, "IllegalOperation", "Can't rename a collection to itself"),
        ),
        (
            {"renameCollection": "shop.system.views2", "to": "shop.b"},
            (
                20,
                "IllegalOperation",
                "error with source namespace: Invalid system namespace: shop.system.views2",
            ),
        ),
        (
            {"renameCollection": "shop.a", "to": "shop.system.profile"},
            (
                20,
                "IllegalOperation",
                "error with target namespace: cannot write to shop.system.profile",
            ),
        ),
        (
            {"renameCollection": "shop", "to": "shop.b"},
            (73, "InvalidNamespace", "Invalid source namespace: shop"),
        ),
        (
            {"renameCollection": "shop.a", "to": "shop.a$b"},
            (73, "InvalidNamespace", "Invalid target namespace: shop.a$b"),
        ),
        (
            {"renameCollection": "shop.a", "to": "shop.b", "dropTarget": 1},
            (
                14,
                "TypeMismatch",
                "BSON field 'renameCollection.dropTarget' is the wrong type 'int', "
                "expected type 'bool'",
            ),
        ),
        (
            {"renameCollection": "shop.a"},
            (
                40414,
                "Location40414",
                "BSON field 'renameCollection.to' is missing but a required field",
            ),
        ),
    ],
    ids=[
        "no-source",
        "no-database",
        "itself",
        "system-source",
        "system-target",
        "invalid-source",
        "invalid-target",
        "int-drop-target",
        "no-to",
    ],
)
def test_rename_refuses(client: Client, command: dict[str, Any], error: tuple[Any, ...]) -> None:
    client.shop.a.insert_one({"_id": 1})
    assert refused(lambda: client.admin.command(command)) == error
    assert client.shop.a.count_documents({}) == 1


def test_rename_runs_on_admin_only(client: Client) -> None:
    client.shop.a.insert_one({"_id": 1})
    error = refused(lambda: client.shop.command("renameCollection", "shop.a", to="shop.b"))
    assert error == (
        13,
        "Unauthorized",
        "renameCollection may only be run against the admin database.",
    )


@pytest.mark.asyncio
async def test_async_drivers_rename_and_read_stats(
    async_client: AsyncMongoClient[dict[str, Any]], motor_client: Any
) -> None:
    await async_client.shop.a.insert_many([{"_id": i} for i in range(3)])
    await async_client.shop.a.rename("b")
    assert await async_client.shop.b.count_documents({}) == 3
    await motor_client.shop.b.rename("c", dropTarget=True)
    assert await motor_client.shop.list_collection_names() == ["c"]
    stats = await motor_client.shop.command("collStats", "c")
    assert (stats["ns"], stats["count"]) == ("shop.c", 3)
    db_stats = await async_client.shop.command("dbStats")
    assert (db_stats["collections"], db_stats["objects"]) == (1, 3)
    cursor = await async_client.shop.c.aggregate([{"$collStats": {"count": {}}}])
    assert [d["count"] async for d in cursor] == [3]
    cursor = motor_client.shop.c.aggregate([{"$indexStats": {}}])
    assert [d["name"] async for d in cursor] == ["_id_"]


# -- shutdown --------------------------------------------------------------------------------------


def _wait_stopped(srv: ServerThread) -> None:
    """Wait until the server has stopped by itself (a bounded wait)."""
    assert srv.app is not None
    wait_until(srv.app.stopped.is_set, "the server stopped")


def _refuses(port: int) -> bool:
    """Whether the port refuses a connection (the server has begun to stop)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:
        pass  # taken into the backlog of a listener that was closing, then reset: again
    return False


@pytest.mark.parametrize(
    ("db", "extra", "error"),
    [
        (
            "shop",
            {},
            (13, "Unauthorized", "shutdown may only be run against the admin database."),
        ),
        (
            "admin",
            {"force": 1},
            (
                14,
                "TypeMismatch",
                "BSON field 'shutdown.force' is the wrong type 'int', expected type 'bool'",
            ),
        ),
        (
            "admin",
            {"timeoutSecs": "soon"},
            (
                14,
                "TypeMismatch",
                "BSON field 'shutdown.timeoutSecs' is the wrong type 'string', "
                "expected types '[long, int, decimal, double]'",
            ),
        ),
        (
            "admin",
            {"foo": 1},
            (40415, "Location40415", "BSON field 'shutdown.foo' is an unknown field."),
        ),
    ],
    ids=["not-admin", "int-force", "string-timeout", "unknown"],
)
def test_shutdown_refuses(
    client: Client, server: ServerThread, db: str, extra: dict[str, Any], error: tuple[Any, ...]
) -> None:
    assert refused(lambda: client[db].command({"shutdown": 1, **extra})) == error
    assert client.admin.command("ping") == {"ok": 1.0}


def test_shutdown_closes_the_connection_and_keeps_the_data(
    start_server: Callable[..., ServerThread], dbpath: str
) -> None:
    srv = start_server()
    client: Client = MongoClient(srv.uri, serverSelectionTimeoutMS=2000)
    try:
        client.shop.a.insert_many([{"_id": i} for i in range(100)])
        with pytest.raises(AutoReconnect):
            client.admin.command("shutdown")
        _wait_stopped(srv)
        with pytest.raises(AutoReconnect):
            client.admin.command("ping")
    finally:
        client.close()
    srv = start_server(path=dbpath)  # the same data directory: unlocked and intact
    with MongoClient(srv.uri) as again:
        assert again.shop.a.count_documents({}) == 100


@pytest.mark.parametrize("force", [False, True])
def test_shutdown_waits_for_requests_in_flight_unless_forced(
    start_server: Callable[..., ServerThread], dbpath: str, force: bool
) -> None:
    """A write held by an fsync lock is in flight when shutdown comes, with a minute of
    timeoutSecs. Without force the server waits for it: the lock, released meanwhile by a
    connection opened before, lets the write finish, be answered and be kept. With force it does
    not wait: it stops with the write still held, long before the minute is out."""
    srv = start_server()
    admin: Client = MongoClient(srv.uri, serverSelectionTimeoutMS=2000)
    writer: Client = MongoClient(srv.uri, serverSelectionTimeoutMS=2000)
    unlocker = rawwire.connect(srv)
    outcome: list[Any] = []

    def blocked_write() -> None:
        try:
            outcome.append(writer.shop.a.insert_one({"_id": 1}).acknowledged)
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            outcome.append(exc)

    def shut_down() -> None:
        with contextlib.suppress(AutoReconnect):  # no reply: the connection is closed
            admin.admin.command({"shutdown": 1, "force": force, "timeoutSecs": 60})

    write = threading.Thread(target=blocked_write)
    shutdown = threading.Thread(target=shut_down)
    try:
        admin.shop.a.insert_one({"_id": 0})
        assert rawwire.op_msg(unlocker, {"ping": 1, "$db": "admin"})["ok"] == 1.0
        admin.admin.command("fsync", lock=True)
        write.start()
        wait_until(  # waiting behind the lock
            lambda: admin.admin.command({"currentOp": 1, "op": "insert", "ns": "shop.a"})["inprog"],
            "the insert in currentOp",
        )
        shutdown.start()
        wait_until(lambda: _refuses(srv.port), "the port refusing connections")  # shutdown begun
        if force:
            _wait_stopped(srv)
        else:
            assert srv.app is not None and not srv.app.stopped.is_set()
            assert rawwire.op_msg(unlocker, {"fsyncUnlock": 1, "$db": "admin"})["ok"] == 1.0
            _wait_stopped(srv)
        write.join(10)
        shutdown.join(10)
        assert not write.is_alive() and not shutdown.is_alive()
        if force:
            assert len(outcome) == 1 and isinstance(outcome[0], AutoReconnect), outcome
        else:
            assert outcome == [True]
    finally:
        unlocker.close()
        admin.close()
        writer.close()
    if not force:
        with MongoClient(start_server(path=dbpath).uri) as again:
            assert sorted(d["_id"] for d in again.shop.a.find()) == [0, 1]


def test_shutdown_ends_the_ebbdb_process_with_status_0(tmp_path: Path) -> None:
    proc = ServerProcess(["--port", "0", "--dbpath", str(tmp_path / "data")], tmp_path)
    try:
        proc.startup_line()
        with proc.client() as client:
            client.shop.a.insert_one({"_id": 1})
            with pytest.raises(AutoReconnect):
                client.admin.command("shutdown")
        assert proc.stop(timeout=10) == 0
        assert "shutdown complete" in proc.stderr
    finally:
        proc.kill()


@pytest.mark.asyncio
async def test_async_client_sees_shutdown_close_the_connection(
    start_server: Callable[..., ServerThread],
) -> None:
    srv = start_server()
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(srv.uri)
    try:
        await client.shop.a.insert_one({"_id": 1})
        with pytest.raises(AutoReconnect):
            await client.admin.command("shutdown", force=True)
    finally:
        await client.close()
    _wait_stopped(srv)
