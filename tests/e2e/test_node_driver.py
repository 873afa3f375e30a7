"""The Node.js driver (npm `mongodb`, pinned in .ci/node) against the real server: each test runs one
scenario of tests/e2e/js/node_driver.js and compares what it printed exactly."""

from __future__ import annotations

from collections.abc import Callable

from ebbdb.server.embedded import ServerThread
from tests.e2e.node_tools import assert_db_stats, run_node

ACK = {"acknowledged": True}


def updated(matched: int, modified: int, upserted: int | None = None) -> dict[str, object]:
    """The driver's UpdateResult."""
    counts = {"matchedCount": matched, "modifiedCount": modified}
    return {**ACK, **counts, "upsertedId": upserted, "upsertedCount": int(upserted is not None)}


def test_crud(uri: str) -> None:
    assert run_node(uri, "crud") == {
        "insertOne": {**ACK, "insertedId": 1},
        "insertMany": {**ACK, "insertedCount": 2, "insertedIds": {"0": 2, "1": 3}},
        "findSorted": [
            {"_id": 2, "name": "ink", "qty": 10},
            {"_id": 1, "name": "pen", "qty": 5},
            {"_id": 3, "name": "pad", "qty": 0},
        ],
        "findOne": {"_id": 1, "name": "pen", "qty": 5, "tags": ["blue"]},
        "updateOne": updated(1, 1),
        "updateMany": updated(2, 2),
        "upsert": updated(0, 0, upserted=4),
        "replaceOne": updated(1, 1),
        "findOneAndUpdate": {"_id": 2, "name": "ink", "qty": 9, "stocked": True},
        "countDocuments": 2,
        "distinct": ["ink", "pad", "pen"],
        "deleteOne": {**ACK, "deletedCount": 1},
        "deleteMany": {**ACK, "deletedCount": 2},
        "left": [{"_id": 2, "name": "ink", "qty": 9, "stocked": True}],
        "aggregate": [{"total": 9, "n": 1}],
    }


def test_cursors_over_several_batches(uri: str) -> None:
    out = run_node(uri, "batches")
    assert out["ids"] == list(range(25))
    assert out["evens"] == list(range(24, -1, -2))
    # 25 documents in batches of 4: the find's and six getMores (the last one brings the 25th);
    # 13 in batches of 5: the aggregate's and two getMores.
    assert out["commands"] == ["find"] + ["getMore"] * 6 + ["aggregate"] + ["getMore"] * 2


def test_ttl_index(start_server: Callable[..., ServerThread]) -> None:
    # The test commands move the expiry clock and run a pass; the monitor's own passes stay off.
    srv = start_server({"enableTestCommands": True, "ttlMonitorEnabled": False})
    assert run_node(srv.uri, "ttl") == {
        "createIndex": "t_1",
        "indexes": [
            {"v": 2, "key": {"_id": 1}, "name": "_id_"},
            {"v": 2, "key": {"t": 1}, "name": "t_1", "expireAfterSeconds": 60},
        ],
        "visible": ["new", "none"],
        "visibleLater": ["none"],
        "pass": {"deleted": 2, "collections": [{"ns": "shelf.sessions", "deleted": 2}]},
        "afterPass": ["none"],
    }


def test_duplicate_key_errors(uri: str) -> None:
    def dup(index: str, key: dict[str, object], shown: str) -> dict[str, object]:
        return {
            "name": "MongoServerError",
            "code": 11000,
            "message": f"E11000 duplicate key error collection: shelf.users index: {index} dup key: {shown}",
            "keyPattern": {next(iter(key)): 1},
            "keyValue": key,
        }

    assert run_node(uri, "duplicate") == {
        "sameId": dup("_id_", {"_id": 1}, "{ _id: 1 }"),
        "sameEmail": dup("email_1", {"email": "a@example.com"}, '{ email: "a@example.com" }'),
        "many": {
            "name": "MongoBulkWriteError",
            "code": 11000,
            "insertedCount": 1,
            "writeErrors": [
                {
                    "index": 1,
                    "code": 11000,
                    "errmsg": "E11000 duplicate key error collection: shelf.users index: _id_ dup key: { _id: 1 }",
                }
            ],
        },
        "left": [1, 3],
    }


def test_db_stats(uri: str) -> None:
    """Issue 10, item 7: the driver's db.stats() runs dbStats."""
    out = run_node(uri, "dbstats")
    assert_db_stats(out["stats"], out["dataSize"])
