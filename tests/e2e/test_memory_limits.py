"""Memory and nesting limits with MongoDB's answers, through pymongo: blocking sorts and groups past
their parameters fail with 292 without disk use and spill to `<dbpath>/_tmp` with it; values
expressions build past MongoDB's limits fail fast (146, 16493); nesting past 200 levels is refused
at the wire and past 180 at insert and update (15 Overflow)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from bson import Int64
from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import OperationFailure, WriteError

from ebbdb.server.embedded import ServerThread
from tests.waiting import wait_until

Doc = dict[str, Any]

SORT_LIMIT = 100_000
SORT_MESSAGE = (
    f"Sort exceeded memory limit of {SORT_LIMIT} bytes, but did not opt in to external sorting."
)
GROUP_MESSAGE = (
    "Exceeded memory limit for $group, but didn't allow external sort. "
    "Pass allowDiskUse:true to opt in."
)


@pytest.fixture
def db(client: MongoClient[Doc]) -> Iterator[Database[Doc]]:
    yield client.memory_limits


def _set(client: MongoClient[Doc], **values: Any) -> Doc:
    """setParameter, one parameter a command (as mongod takes them); the last reply."""
    reply: Doc = {}
    for name, value in values.items():
        reply = client.admin.command({"setParameter": 1, name: value})
    return reply


def _spill_files(server: ServerThread) -> list[str]:
    assert server.app is not None
    path = os.path.join(server.app.config.dbpath, "_tmp")
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def _fill(coll: Collection[Doc], n: int = 300) -> None:
    # ~1 KB each, with ties on `k` so stability shows, in an order no index gives.
    coll.insert_many(
        [{"_id": i, "k": (i * 7919) % 97, "pad": "x" * 1000, "i": i} for i in range(n)]
    )


def _code(exc: OperationFailure) -> tuple[int, str | None, str]:
    details = exc.details or {}
    return exc.code or 0, details.get("codeName"), str(details.get("errmsg"))


def _refused_then_spilled(coll: Collection[Doc], pipeline: list[Doc], message: str) -> list[Doc]:
    """The pipeline fails with 292 and `message` without disk use; its results with disk use."""
    with pytest.raises(OperationFailure) as exc:
        list(coll.aggregate(pipeline, allowDiskUse=False))
    assert _code(exc.value) == (292, "QueryExceededMemoryLimitNoDiskUseAllowed", message)
    return list(coll.aggregate(pipeline, allowDiskUse=True))


# -- parameters ----------------------------------------------------------------------------------------


def test_parameters_have_mongodb_defaults_and_are_settable(client: MongoClient[Doc]) -> None:
    got = client.admin.command(
        {
            "getParameter": 1,
            "internalQueryMaxBlockingSortMemoryUsageBytes": 1,
            "internalDocumentSourceGroupMaxMemoryBytes": 1,
            "allowDiskUseByDefault": 1,
        }
    )
    assert got["internalQueryMaxBlockingSortMemoryUsageBytes"] == 104857600
    assert got["internalDocumentSourceGroupMaxMemoryBytes"] == Int64(104857600)
    assert isinstance(got["internalDocumentSourceGroupMaxMemoryBytes"], Int64)
    assert got["allowDiskUseByDefault"] is True
    was = _set(client, internalQueryMaxBlockingSortMemoryUsageBytes=SORT_LIMIT)
    assert was["was"] == 104857600
    again = client.admin.command(
        {"getParameter": 1, "internalQueryMaxBlockingSortMemoryUsageBytes": 1}
    )
    assert again["internalQueryMaxBlockingSortMemoryUsageBytes"] == SORT_LIMIT
    with pytest.raises(OperationFailure) as bad:
        _set(client, internalDocumentSourceGroupMaxMemoryBytes=0)
    assert bad.value.code == 2


def test_parameters_at_startup(start_server: Any) -> None:
    srv = start_server({"internalQueryMaxBlockingSortMemoryUsageBytes": 5000})
    with MongoClient(srv.uri) as c:
        got = c.admin.command(
            {"getParameter": 1, "internalQueryMaxBlockingSortMemoryUsageBytes": 1}
        )
        assert got["internalQueryMaxBlockingSortMemoryUsageBytes"] == 5000
        c.t.c.insert_many([{"_id": i, "pad": "y" * 100} for i in range(100)])
        with pytest.raises(OperationFailure) as exc:
            list(c.t.c.find().sort("pad", -1).allow_disk_use(False))
        assert exc.value.code == 292


# -- blocking sorts ------------------------------------------------------------------------------------


def test_find_sort_past_the_limit_without_disk_use_is_292(
    client: MongoClient[Doc], db: Database[Doc]
) -> None:
    _fill(db.c)
    _set(client, internalQueryMaxBlockingSortMemoryUsageBytes=SORT_LIMIT)
    with pytest.raises(OperationFailure) as exc:
        list(db.c.find().sort("k", 1).allow_disk_use(False))
    assert _code(exc.value) == (292, "QueryExceededMemoryLimitNoDiskUseAllowed", SORT_MESSAGE)
    # Under the limit, the same sort works without disk use.
    assert len(list(db.c.find({"i": {"$lt": 50}}).sort("k", 1).allow_disk_use(False))) == 50
    # A sort with a limit keeps only the top documents, as MongoDB's top-k sort does.
    top = list(db.c.find().sort([("k", 1), ("i", 1)]).limit(5).allow_disk_use(False))
    assert [d["k"] for d in top] == [0, 0, 0, 0, 1]


def test_allow_disk_use_by_default_decides_when_find_does_not_say(
    client: MongoClient[Doc], db: Database[Doc]
) -> None:
    _fill(db.c)
    _set(
        client, internalQueryMaxBlockingSortMemoryUsageBytes=SORT_LIMIT, allowDiskUseByDefault=False
    )
    with pytest.raises(OperationFailure) as exc:
        list(db.c.find().sort("k", 1))
    assert exc.value.code == 292
    with pytest.raises(OperationFailure) as agg:
        list(db.c.aggregate([{"$sort": {"k": 1}}]))
    assert agg.value.code == 292
    assert len(list(db.c.find().sort("k", 1).allow_disk_use(True))) == 300
    _set(client, allowDiskUseByDefault=True)
    assert len(list(db.c.find().sort("k", 1))) == 300


def test_find_sort_with_disk_use_spills_keeps_the_order_and_removes_its_files(
    client: MongoClient[Doc], db: Database[Doc], server: ServerThread
) -> None:
    _fill(db.c)
    in_memory = list(db.c.find({}, {"pad": 0}).sort([("k", -1)]))
    skipped = list(db.c.find({}, {"pad": 0}).sort([("k", -1)]).skip(10).limit(200))
    _set(client, internalQueryMaxBlockingSortMemoryUsageBytes=SORT_LIMIT)
    cursor = db.c.find({}, {"pad": 0}).sort([("k", -1)]).allow_disk_use(True).batch_size(10)
    first = [next(cursor) for _ in range(10)]
    assert _spill_files(server), "the sort spilled sorted runs to <dbpath>/_tmp"
    got = first + list(cursor)
    assert got == in_memory  # same documents, same order, ties in their stored order
    assert _spill_files(server) == []
    spilled = list(
        db.c.find({}, {"pad": 0}).sort([("k", -1)]).skip(10).limit(200).allow_disk_use(True)
    )
    assert spilled == skipped
    assert _spill_files(server) == []


def test_killed_cursor_of_a_spilled_sort_leaves_no_files(
    client: MongoClient[Doc], db: Database[Doc], server: ServerThread
) -> None:
    _fill(db.c)
    _set(client, internalQueryMaxBlockingSortMemoryUsageBytes=SORT_LIMIT)
    cursor = db.c.find().sort("k", 1).allow_disk_use(True).batch_size(5)
    next(cursor)
    assert _spill_files(server)
    cursor.close()
    wait_until(
        lambda: _spill_files(server) == [],
        "the spill files removed",
        detail=lambda: f"left: {_spill_files(server)}",
    )


def test_aggregate_sort_stage_past_the_limit(
    client: MongoClient[Doc], db: Database[Doc], server: ServerThread
) -> None:
    _fill(db.c)
    # A computed key keeps the $sort a stage of its own (not pushed down to the read).
    pipeline: list[Doc] = [
        {"$addFields": {"key": {"$mod": ["$i", 13]}}},
        {"$sort": {"key": 1}},
        {"$project": {"pad": 0}},
    ]
    in_memory = list(db.c.aggregate(pipeline))
    _set(client, internalQueryMaxBlockingSortMemoryUsageBytes=SORT_LIMIT)
    assert _refused_then_spilled(db.c, pipeline, SORT_MESSAGE) == in_memory
    assert _spill_files(server) == []


# -- $group and the stages built on it -----------------------------------------------------------------


#: One group per document, with accumulators whose results show every document was seen.
GROUP_BY_I: list[Doc] = [
    {"$group": {"_id": "$i", "n": {"$sum": 1}, "first": {"$first": "$k"}, "ks": {"$push": "$k"}}}
]


def test_group_past_the_limit(
    client: MongoClient[Doc], db: Database[Doc], server: ServerThread
) -> None:
    _fill(db.c)
    pipeline = GROUP_BY_I
    in_memory = sorted(db.c.aggregate(pipeline), key=lambda d: d["_id"])
    _set(client, internalDocumentSourceGroupMaxMemoryBytes=5000)
    spilled = _refused_then_spilled(db.c, pipeline, GROUP_MESSAGE)
    assert sorted(spilled, key=lambda d: d["_id"]) == in_memory
    # Few groups fit whatever the documents: no spill, no error.
    few = list(db.c.aggregate([{"$group": {"_id": None, "n": {"$sum": 1}}}], allowDiskUse=False))
    assert few == [{"_id": None, "n": 300}]
    assert _spill_files(server) == []


def test_group_spill_keeps_first_and_last_in_input_order(
    client: MongoClient[Doc], db: Database[Doc]
) -> None:
    db.c.insert_many([{"_id": i, "g": i % 150, "i": i} for i in range(600)])
    pipeline: list[Doc] = [
        {"$sort": {"i": 1}},
        {"$group": {"_id": "$g", "first": {"$first": "$i"}, "last": {"$last": "$i"}}},
    ]
    _set(client, internalDocumentSourceGroupMaxMemoryBytes=3000)
    got = sorted(db.c.aggregate(pipeline, allowDiskUse=True), key=lambda d: d["_id"])
    assert got == [{"_id": g, "first": g, "last": g + 450} for g in range(150)]


def test_sort_by_count_and_bucket_past_the_group_limit(
    client: MongoClient[Doc], db: Database[Doc]
) -> None:
    _fill(db.c)
    by_count: list[Doc] = [{"$sortByCount": "$i"}]
    bucket: list[Doc] = [{"$bucket": {"groupBy": "$i", "boundaries": list(range(0, 301, 2))}}]
    counts = list(db.c.aggregate(by_count))
    buckets = list(db.c.aggregate(bucket))
    assert buckets[0] == {"_id": 0, "count": 2} and len(buckets) == 150
    _set(client, internalDocumentSourceGroupMaxMemoryBytes=2000)
    counted = _refused_then_spilled(db.c, by_count, GROUP_MESSAGE)
    # Ties (every count is 1 here) come in no particular order, in MongoDB as here.
    assert sorted(counted, key=lambda d: (-d["count"], d["_id"])) == sorted(
        counts, key=lambda d: (-d["count"], d["_id"])
    )
    assert _refused_then_spilled(db.c, bucket, GROUP_MESSAGE) == buckets


def _doubled_string(times: int) -> Doc:
    """An expression for a string of 2**times bytes, made on the server by doubling "a"."""
    doubling = {"$concat": ["$$value", "$$value"]}
    return {"$reduce": {"input": {"$range": [0, times]}, "initialValue": "a", "in": doubling}}


def test_push_past_its_limit_is_146(db: Database[Doc]) -> None:
    big = _doubled_string(23)  # 8 MB
    pipeline: list[Doc] = [
        {"$documents": {"$map": {"input": {"$range": [0, 14]}, "in": {"i": "$$this"}}}},
        {"$group": {"_id": None, "all": {"$push": big}}},
        {"$project": {"n": {"$size": "$all"}}},
    ]
    with pytest.raises(OperationFailure) as exc:
        list(db.aggregate(pipeline))
    assert _code(exc.value) == (
        146,
        "ExceededMemoryLimit",
        "$push used too much memory and cannot spill to disk. Memory limit: 104857600 bytes",
    )


# -- values expressions build --------------------------------------------------------------------------


def _doubled_array(times: int) -> Doc:
    """An expression for an array of 2**times ones, made on the server by doubling [1]."""
    doubling = {"$concatArrays": ["$$value", "$$value"]}
    return {"$reduce": {"input": {"$range": [0, times]}, "initialValue": [1], "in": doubling}}


def test_reduce_doubling_an_array_fails_fast_without_growing(db: Database[Doc]) -> None:
    """Each array's size is estimated before it is built, so the step that would pass 100 MB is
    refused and never made: the error names that step's size, 2^23 values at 16 bytes each (the
    issue measured 6 GB and 16 s before this limit; bench/fairness.py's "reduce" row prints the
    time it takes and the server's memory now). The step before it fits, and is built."""
    db.c.insert_one({"_id": 1})
    with pytest.raises(OperationFailure) as exc:
        list(db.c.aggregate([{"$project": {"r": _doubled_array(29)}}]))
    assert _code(exc.value) == (
        146,
        "ExceededMemoryLimit",
        f"$concatArrays would use too much memory ({2**23 * 16 + 40} bytes) and cannot spill to "
        "disk. Memory limit: 104857600 bytes",
    )
    fits = [{"$project": {"n": {"$size": _doubled_array(22)}}}]
    assert list(db.c.aggregate(fits)) == [{"_id": 1, "n": 2**22}]


def test_reduce_doubling_a_shared_document_is_measured_whole(db: Database[Doc]) -> None:
    # Each step refers to the last twice: little memory, but 2^40 values once written out.
    bomb = {
        "$reduce": {
            "input": {"$range": [0, 40]},
            "initialValue": [1],
            "in": {"a": "$$value", "b": "$$value"},
        }
    }
    with pytest.raises(OperationFailure) as exc:
        list(db.aggregate([{"$documents": [{}]}, {"$project": {"r": bomb}}]))
    assert exc.value.code == 146
    assert str((exc.value.details or {})["errmsg"]).startswith("$reduce would use too much memory")


def test_string_past_16mb_is_16493(db: Database[Doc]) -> None:
    bomb = _doubled_string(30)
    with pytest.raises(OperationFailure) as exc:
        list(db.aggregate([{"$documents": [{}]}, {"$project": {"r": bomb}}]))
    assert _code(exc.value) == (16493, "Location16493", "Tried to create string longer than 16MB")


def test_range_past_its_limit_is_146(db: Database[Doc]) -> None:
    with pytest.raises(OperationFailure) as exc:
        list(db.aggregate([{"$documents": [{}]}, {"$project": {"r": {"$range": [0, 7_000_000]}}}]))
    assert _code(exc.value) == (
        146,
        "ExceededMemoryLimit",
        "$range would use too much memory (112000024 bytes) and cannot spill to disk. "
        "Memory limit: 104857600 bytes",
    )


# -- nesting -------------------------------------------------------------------------------------------


def _nested(levels: int, leaf: Any = 1) -> Doc:
    """A document `levels` levels deep ({a: {a: ... {a: leaf}}})."""
    doc: Any = leaf
    for _ in range(levels):
        doc = {"a": doc}
    return dict(doc)


def test_insert_nested_past_180_levels_is_refused(db: Database[Doc]) -> None:
    db.c.insert_one({"_id": "deepest", **_nested(180)})
    assert db.c.count_documents({}) == 1
    for levels in (181, 900):
        with pytest.raises(WriteError) as exc:
            db.c.insert_one({"_id": levels, **_nested(levels)})
        assert exc.value.code == 15
        assert (exc.value.details or {})["errmsg"] == (
            "cannot insert document because it exceeds 180 levels of nesting"
        )
    # Empty documents and arrays do not count.
    db.c.insert_one({"_id": "empty", **_nested(180, {})})
    assert db.c.count_documents({}) == 2


def test_update_past_180_levels_is_refused(db: Database[Doc]) -> None:
    db.c.insert_one({"_id": 1, **_nested(178)})
    path = ".".join(["a"] * 178)
    with pytest.raises(WriteError) as exc:
        db.c.update_one({"_id": 1}, {"$set": {path: {"b": {"c": {"d": 1}}}}})
    assert exc.value.code == 15
    assert (exc.value.details or {})["errmsg"] == "Document exceeds maximum nesting depth of 180"
    db.c.update_one({"_id": 1}, {"$set": {path: {"b": {"c": 1}}}})  # 180 levels: fine
    assert db.c.count_documents({path + ".b.c": 1}) == 1


def test_command_nested_past_200_levels_is_overflow(db: Database[Doc]) -> None:
    db.c.insert_one({"_id": 1})
    for command in (
        lambda: list(db.c.find(_nested(300))),
        lambda: list(db.c.aggregate([{"$match": _nested(250)}])),
        lambda: db.c.update_many({}, {"$set": _nested(400)}),
    ):
        with pytest.raises(OperationFailure) as exc:
            command()
        assert _code(exc.value) == (
            15,
            "Overflow",
            "BSONObj exceeded maximum nested object depth: 200",
        )


def test_deeply_nested_stored_documents_work_everywhere(db: Database[Doc]) -> None:
    deep = _nested(179)
    db.c.insert_many([{"_id": i, "v": deep["a"], "n": i} for i in range(3)])
    result = db.c.update_many({}, {"$inc": {"n": 1}, "$set": {"w": deep["a"]["a"]}})
    assert result.modified_count == 3
    grouped = list(
        db.c.aggregate(
            [{"$group": {"_id": "$v", "n": {"$sum": 1}, "all": {"$addToSet": "$$ROOT.w"}}}]
        )
    )
    assert len(grouped) == 1 and grouped[0]["n"] == 3 and len(grouped[0]["all"]) == 1
    assert [d["_id"] for d in db.c.find({"v": deep["a"]}).sort("v", -1)] == [0, 1, 2]
    assert db.c.replace_one({"_id": 0}, {"v": deep["a"]}).modified_count == 1
    bucketed = list(db.c.aggregate([{"$sortByCount": "$v"}, {"$project": {"count": 1}}]))
    assert bucketed[0]["count"] == 3
    deep_and: Any = {"n": {"$gte": 0}}
    for _ in range(60):
        deep_and = {"$and": [deep_and]}
    assert db.c.count_documents(deep_and) == 2
