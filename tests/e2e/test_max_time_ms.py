"""maxTimeMS through pymongo: every command it applies to ends with 50 MaxTimeMSExpired when its
work outlasts the limit, whether it runs on the event loop (find, count, distinct), on a reader
thread (aggregate) or as a writer job (update, delete, findAndModify, createIndexes); a find's
limit goes on counting over its getMores; what an interrupted write statement did is undone. The
slow work takes minutes per document: a limit that did not interrupt it inside the document would
leave the client waiting, and its socket timeout fails the test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from bson import Decimal128
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import ExecutionTimeout, OperationFailure

from tests.helpers import slow_filter

#: A filter that takes minutes per document holding n: BIG, and matches nothing.
SLOW = slow_filter("$n")
BIG = 100_000
#: The clients' socket timeout: a command the limit did not interrupt inside its first document
#: fails the test with a network timeout (its work takes minutes), not with 50. A bound on the
#: test, far more than a 50 ms limit needs.
SOCKET_TIMEOUT_MS = 30_000


@pytest.fixture
def mongo_client(ebbdb_uri: str, ebbdb_cleanup: None) -> Iterator[MongoClient[dict[str, Any]]]:
    """The plugin's client (and so `mongo_db`'s), with SOCKET_TIMEOUT_MS."""
    client: MongoClient[dict[str, Any]] = MongoClient(ebbdb_uri, socketTimeoutMS=SOCKET_TIMEOUT_MS)
    yield client
    client.close()


def _expired(exc: OperationFailure) -> None:
    assert exc.code == 50
    assert exc.details is not None
    assert exc.details["codeName"] == "MaxTimeMSExpired"
    assert exc.details["errmsg"] == "operation exceeded time limit"


@pytest.fixture
def slow_db(mongo_db: Database[dict[str, Any]]) -> Database[dict[str, Any]]:
    mongo_db.c.insert_many([{"_id": i, "n": BIG, "s": "x" * 10} for i in range(3)])
    return mongo_db


_COMMANDS: dict[str, Any] = {
    "find": lambda db: db.command("find", "c", filter=SLOW, maxTimeMS=50),
    "count": lambda db: db.command("count", "c", query=SLOW, maxTimeMS=50),
    "distinct": lambda db: db.command("distinct", "c", key="s", query=SLOW, maxTimeMS=50),
    "aggregate": lambda db: db.command(
        "aggregate", "c", pipeline=[{"$match": SLOW}], cursor={}, maxTimeMS=50
    ),
    "update": lambda db: db.command(
        "update", "c", updates=[{"q": SLOW, "u": {"$set": {"b": 1}}, "multi": True}], maxTimeMS=50
    ),
    "delete": lambda db: db.command("delete", "c", deletes=[{"q": SLOW, "limit": 0}], maxTimeMS=50),
    "findAndModify": lambda db: db.command(
        "findAndModify", "c", query=SLOW, update={"$set": {"b": 1}}, maxTimeMS=50
    ),
}


@pytest.mark.parametrize("command", list(_COMMANDS))
def test_max_time_ms_expires(
    mongo_client: MongoClient[dict[str, Any]], slow_db: Database[dict[str, Any]], command: str
) -> None:
    with pytest.raises(ExecutionTimeout) as info:
        _COMMANDS[command](slow_db)
    _expired(info.value)
    # The operation is over, not left running; nothing was changed, and the server answers.
    assert mongo_client.admin.command({"currentOp": 1, "ns": slow_db.c.full_name})["inprog"] == []
    assert sorted(d["_id"] for d in slow_db.c.find({"b": {"$exists": True}})) == []
    assert slow_db.c.count_documents({}) == 3


def test_driver_max_time_ms_on_find_and_aggregate(slow_db: Database[dict[str, Any]]) -> None:
    with pytest.raises(ExecutionTimeout) as info:
        list(slow_db.c.find(SLOW).max_time_ms(50))
    _expired(info.value)
    with pytest.raises(ExecutionTimeout) as info:
        list(slow_db.c.aggregate([{"$match": SLOW}], maxTimeMS=50))
    _expired(info.value)


def test_max_time_ms_on_an_unindexed_sort(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.c.insert_many([{"k": (i * 7919) % 30011, "s": "y" * 50} for i in range(30000)])
    with pytest.raises(ExecutionTimeout) as info:
        list(mongo_db.c.find({}, sort=[("s", 1), ("k", -1)], max_time_ms=1))
    _expired(info.value)
    with pytest.raises(ExecutionTimeout) as info:
        list(mongo_db.c.aggregate([{"$sort": {"s": 1, "k": -1}}], maxTimeMS=1))
    _expired(info.value)


def test_a_finds_time_limit_counts_over_its_get_mores(
    mongo_db: Database[dict[str, Any]],
) -> None:
    # The first document is quick to match; the next takes seconds.
    mongo_db.c.insert_many([{"_id": 0, "n": 0}, {"_id": 1, "n": BIG}, {"_id": 2, "n": BIG}])
    quick = {**SLOW, "$expr": {"$gte": SLOW["$expr"]["$lt"]}}
    first = mongo_db.command("find", "c", filter=quick, batchSize=1, maxTimeMS=500)
    assert first["cursor"]["firstBatch"] == [{"_id": 0, "n": 0}]
    cid = first["cursor"]["id"]
    assert cid
    # With no limit of its own, the getMore would take minutes over the next document.
    with pytest.raises(ExecutionTimeout) as info:
        mongo_db.command("getMore", cid, collection="c")
    _expired(info.value)
    # A failed getMore ends its cursor.
    with pytest.raises(OperationFailure) as gone:
        mongo_db.command("getMore", cid, collection="c")
    assert gone.value.code == 43


def test_get_more_refuses_its_own_max_time_ms(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.c.insert_many([{"_id": i} for i in range(3)])
    cid = mongo_db.command("find", "c", batchSize=1)["cursor"]["id"]
    with pytest.raises(OperationFailure) as info:
        mongo_db.command("getMore", cid, collection="c", maxTimeMS=10)
    assert info.value.code == 2
    assert info.value.details is not None
    assert info.value.details["codeName"] == "BadValue"
    assert info.value.details["errmsg"] == (
        "cannot set maxTimeMS on getMore command for a non-awaitData cursor"
    )


def test_create_indexes_max_time_ms(mongo_db: Database[dict[str, Any]]) -> None:
    # 300 documents of 2,000 array elements: 600,000 index entries to build.
    mongo_db.c.insert_many([{"a": list(range(i, i + 2000))} for i in range(300)])
    with pytest.raises(ExecutionTimeout) as info:
        mongo_db.command(
            "createIndexes", "c", indexes=[{"key": {"a": 1}, "name": "a_1"}], maxTimeMS=50
        )
    _expired(info.value)
    assert [ix["name"] for ix in mongo_db.c.list_indexes()] == ["_id_"]
    assert mongo_db.c.count_documents({}) == 300


def test_a_write_job_keeps_the_statements_before_the_interrupted_one(
    slow_db: Database[dict[str, Any]],
) -> None:
    """MongoDB: an interruption fails the whole command; the statements already done stay, the
    interrupted one changes nothing."""
    with pytest.raises(ExecutionTimeout) as info:
        slow_db.command(
            "update",
            "c",
            updates=[
                {"q": {"_id": 0}, "u": {"$set": {"first": True}}},
                {"q": SLOW, "u": {"$set": {"b": 1}}, "multi": True},
                {"q": {"_id": 2}, "u": {"$set": {"third": True}}},
            ],
            maxTimeMS=50,
        )
    _expired(info.value)
    assert list(slow_db.c.find({}, {"n": 0, "s": 0}).sort("_id", 1)) == [
        {"_id": 0, "first": True},
        {"_id": 1},
        {"_id": 2},
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (-1, "-1 value for maxTimeMS is out of range [0, 2147483647]"),
        (2**31, "2147483648 value for maxTimeMS is out of range [0, 2147483647]"),
        ("10", "maxTimeMS must be a number"),
        (1.5, "maxTimeMS has non-integral value"),
        # A decimal is a number: truncated, and saturated at a long as mongod's safeNumberLong.
        (
            Decimal128("1e300"),
            "9223372036854775807 value for maxTimeMS is out of range [0, 2147483647]",
        ),
        (Decimal128("-2.5"), "-2 value for maxTimeMS is out of range [0, 2147483647]"),
        (1e300, "9223372036854775807 value for maxTimeMS is out of range [0, 2147483647]"),
    ],
)
def test_max_time_ms_values(mongo_db: Database[dict[str, Any]], value: Any, message: str) -> None:
    with pytest.raises(OperationFailure) as info:
        mongo_db.command("find", "c", maxTimeMS=value)
    assert info.value.code == 2
    assert info.value.details is not None
    assert info.value.details["errmsg"] == message


def test_zero_and_generous_limits_do_not_interrupt(
    mongo_client: MongoClient[dict[str, Any]], mongo_db: Database[dict[str, Any]]
) -> None:
    mongo_db.c.insert_many([{"_id": i} for i in range(200)])
    assert len(list(mongo_db.c.find().max_time_ms(0))) == 200
    assert len(list(mongo_db.c.find().batch_size(10).max_time_ms(60_000))) == 200
    assert mongo_db.command("count", "c", maxTimeMS=60_000)["n"] == 200
    assert mongo_client.admin.command("ping", maxTimeMS=1)["ok"] == 1.0


#: Costly for each document (building a long array) with no loop of ebbdb's own inside.
_PER_DOC = {"$gt": [{"$size": {"$range": [0, "$n"]}}, -1]}


@pytest.mark.parametrize("command", ["find", "aggregate"])
def test_a_few_costly_documents_still_end_at_the_limit(
    mongo_db: Database[dict[str, Any]], command: str
) -> None:
    """Forty documents that each take a while, and all match: the limit is looked at for every
    document (not only every so many, as the loops inside one do), so the command ends with 50,
    where a look every so many documents would have let all forty through."""
    mongo_db.few.insert_many([{"_id": i, "n": 1_000_000} for i in range(40)])
    run = {
        "find": lambda: mongo_db.command("find", "few", filter={"$expr": _PER_DOC}, maxTimeMS=50),
        "aggregate": lambda: mongo_db.command(
            "aggregate", "few", pipeline=[{"$project": {"x": _PER_DOC}}], cursor={}, maxTimeMS=50
        ),
    }[command]
    with pytest.raises(OperationFailure) as exc:
        run()
    _expired(exc.value)
