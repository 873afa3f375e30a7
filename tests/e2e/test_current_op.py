"""currentOp, $currentOp and killOp through pymongo: a long aggregation is found by its comment and
appName with MongoDB 7.0's fields, and killed from another client (11601 Interrupted); a write job
is killed the same way; the filters currentOp takes."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from bson import Int64
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import OperationFailure

from ebbdb.server.embedded import ServerThread
from tests.helpers import slow_filter
from tests.waiting import wait_until

#: A filter that takes minutes per document and matches nothing.
LONG = slow_filter()
WAIT_SECONDS = 10.0


@pytest.fixture
def app_client(server: ServerThread) -> Iterator[MongoClient[dict[str, Any]]]:
    client: MongoClient[dict[str, Any]] = MongoClient(server.uri, appName="long-runner")
    yield client
    client.close()


class Background:
    """A call run on a thread; `outcome()` is what it returned or raised."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._result: list[Any] = []
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self._result.append(fn())
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self._result.append(exc)

    def outcome(self) -> Any:
        self._thread.join(WAIT_SECONDS)
        assert not self._thread.is_alive(), "the operation was not interrupted"
        return self._result[0]


def _find_op(admin: Database[dict[str, Any]], query: dict[str, Any]) -> dict[str, Any]:
    ops = wait_until(
        lambda: admin.command({"currentOp": 1, **query})["inprog"], f"an operation matching {query}"
    )
    assert len(ops) == 1
    return dict(ops[0])


def _interrupted(outcome: Any) -> None:
    assert isinstance(outcome, OperationFailure), outcome
    assert outcome.code == 11601
    assert outcome.details is not None
    assert outcome.details["codeName"] == "Interrupted"
    assert outcome.details["errmsg"] == "operation was interrupted"


def test_a_long_aggregation_shows_and_is_killed(
    mongo_client: MongoClient[dict[str, Any]],
    app_client: MongoClient[dict[str, Any]],
    mongo_db: Database[dict[str, Any]],
) -> None:
    mongo_db.c.insert_one({"_id": 1})
    coll = app_client[mongo_db.name].c
    job = Background(lambda: list(coll.aggregate([{"$match": LONG}], comment="find-me")))
    admin = mongo_client.admin
    op = _find_op(admin, {"command.comment": "find-me"})
    assert op["type"] == "op"
    assert op["active"] is True
    assert op["op"] == "command"
    assert op["ns"] == f"{mongo_db.name}.c"
    assert op["command"]["aggregate"] == "c"
    assert op["command"]["pipeline"] == [{"$match": LONG}]
    assert op["command"]["$db"] == mongo_db.name
    assert op["appName"] == "long-runner"
    assert re.fullmatch(r"127\.0\.0\.1:\d+", op["client"])
    assert isinstance(op["connectionId"], int)
    assert op["desc"] == f"conn{op['connectionId']}"
    assert isinstance(op["opid"], int)
    assert isinstance(op["secs_running"], Int64)
    assert isinstance(op["microsecs_running"], Int64)
    assert op["microsecs_running"] >= 0
    assert "killPending" not in op
    # The $currentOp stage, as drivers and mongosh's db.currentOp() send it, shows the same.
    staged = list(
        admin.aggregate(
            [
                {"$currentOp": {"allUsers": True, "idleConnections": False}},
                {"$match": {"command.comment": "find-me"}},
            ]
        )
    )
    assert [s["opid"] for s in staged] == [op["opid"]]
    assert staged[0]["appName"] == "long-runner"
    reply = admin.command("killOp", 1, op=op["opid"])
    assert reply == {"info": "attempting to kill op", "ok": 1.0}
    _interrupted(job.outcome())
    assert admin.command({"currentOp": 1, "command.comment": "find-me"})["inprog"] == []
    # The connection goes on serving.
    assert coll.count_documents({}) == 1


def test_kill_a_write_job_and_a_find(
    mongo_client: MongoClient[dict[str, Any]],
    app_client: MongoClient[dict[str, Any]],
    mongo_db: Database[dict[str, Any]],
) -> None:
    mongo_db.c.insert_many([{"_id": 1}, {"_id": 2}])
    coll = app_client[mongo_db.name].c
    admin = mongo_client.admin
    ns = f"{mongo_db.name}.c"

    update = Background(lambda: coll.update_many(LONG, {"$set": {"x": 1}}))
    op = _find_op(admin, {"active": True, "ns": ns, "op": "update"})
    assert op["command"]["update"] == "c"
    admin.command("killOp", 1, op=op["opid"])
    _interrupted(update.outcome())
    assert coll.count_documents({"x": 1}) == 0

    find = Background(lambda: list(coll.find(LONG)))
    op = _find_op(admin, {"ns": ns, "op": "query"})
    assert op["command"]["find"] == "c"
    assert admin.command("killOp", 1, op=Int64(op["opid"]))["ok"] == 1.0
    _interrupted(find.outcome())


def test_current_op_filters(
    mongo_client: MongoClient[dict[str, Any]], mongo_db: Database[dict[str, Any]]
) -> None:
    admin = mongo_client.admin
    # currentOp itself runs: it sees itself, as MongoDB's does.
    mine = admin.command("currentOp")["inprog"]
    assert [o["command"].get("currentOp") for o in mine] == [1]
    assert mine[0]["ns"] == "admin.$cmd"
    assert admin.command({"currentOp": 1, "$all": True, "$ownOps": True})["inprog"] != []
    assert admin.command({"currentOp": 1, "ns": "nowhere.c"})["inprog"] == []
    assert admin.command({"currentOp": 1, "active": True, "op": "command"})["inprog"] != []


def test_errors(
    mongo_client: MongoClient[dict[str, Any]], mongo_db: Database[dict[str, Any]]
) -> None:
    with pytest.raises(OperationFailure) as info:
        mongo_db.command("currentOp")
    assert info.value.code == 13
    with pytest.raises(OperationFailure) as info:
        list(mongo_db.aggregate([{"$currentOp": {}}]))
    assert info.value.code == 73
    assert info.value.details is not None
    assert info.value.details["errmsg"] == (
        "$currentOp must be run against the 'admin' database with {aggregate: 1}"
    )
    with pytest.raises(OperationFailure) as info:
        mongo_client.admin.command("killOp", 1)
    assert info.value.code == 4
    with pytest.raises(OperationFailure) as info:
        mongo_client.admin.command("killOp", 1, op="x")
    assert info.value.code == 14
    # An opid that runs nothing: the same answer.
    reply = mongo_client.admin.command("killOp", 1, op=123456789)
    assert reply == {"info": "attempting to kill op", "ok": 1.0}
    # Numbers no opid can be (the fuzzer found Infinity answered with an InternalError).
    for odd in (float("inf"), float("-inf"), float("nan"), 1e300):
        reply = mongo_client.admin.command("killOp", 1, op=odd)
        assert reply == {"info": "attempting to kill op", "ok": 1.0}


def test_an_index_build_shows_its_progress_and_logs_it(
    client: MongoClient[dict[str, Any]], app_client: MongoClient[dict[str, Any]]
) -> None:
    """A bulk build held by the hangIndexBuildBeforeCommit fail point, its keys in: currentOp
    shows mongod's msg and progress {done, total}; the log has mongod's index build lines."""
    admin = client.admin
    coll = client.db.build
    coll.insert_many([{"_id": i, "k": [i, -i]} for i in range(1, 301)])
    admin.command("configureFailPoint", "hangIndexBuildBeforeCommit", mode="alwaysOn")
    try:
        build = Background(lambda: app_client.db.build.create_index("k"))
        # Held before its commit, with every key in.
        op = _find_op(admin, {"command.createIndexes": "build", "progress.done": 600})
        assert op["progress"] == {"done": 600, "total": 600}
        assert op["msg"] == (
            "Index Build: inserting keys from external sorter into index Index Build: inserting "
            "keys from external sorter into index: 600/600 100%"
        )
        assert list(op).index("msg") == list(op).index("command") + 1
    finally:
        admin.command("configureFailPoint", "hangIndexBuildBeforeCommit", mode="off")
    assert build.outcome() == "k_1"
    assert [ix["name"] for ix in coll.list_indexes()] == ["_id_", "k_1"]
    assert coll.find_one({"k": -299}) == {"_id": 299, "k": [299, -299]}
    # Over, it shows no more.
    assert admin.command({"currentOp": 1, "command.createIndexes": "build"})["inprog"] == []

    lines = [json.loads(line) for line in admin.command("getLog", "global")["log"]]
    mine = [e for e in lines if e.get("attr", {}).get("namespace") == "db.build"]
    assert [e["msg"] for e in mine] == [
        "Index build: starting",
        "Index build: collection scan done",
        "Index build: inserted keys from external sorter into index",
        "Index build: completed successfully",
    ]
    assert mine[1]["attr"]["totalRecords"] == 300
    assert mine[2]["attr"]["keysInserted"] == 600
    assert {e["c"] for e in mine} == {"INDEX"}
    meters = [
        e["attr"]
        for e in lines
        if e["id"] == 51773
        and e["attr"]["total"] in (300, 600)
        and e["attr"]["done"] == e["attr"]["total"]
    ]
    assert {
        "name": "Index Build: scanning collection",
        "done": 300,
        "total": 300,
        "percent": 100,
    } in meters
    assert {
        "name": "Index Build: inserting keys from external sorter into index",
        "done": 600,
        "total": 600,
        "percent": 100,
    } in meters


def test_a_killed_index_build_leaves_nothing(
    client: MongoClient[dict[str, Any]], app_client: MongoClient[dict[str, Any]]
) -> None:
    admin = client.admin
    coll = client.db.killed_build
    coll.insert_many([{"_id": i, "k": i} for i in range(100)])
    admin.command("configureFailPoint", "hangIndexBuildBeforeCommit", mode="alwaysOn")
    try:
        build = Background(lambda: app_client.db.killed_build.create_index("k"))
        op = _find_op(
            admin, {"command.createIndexes": "killed_build", "progress": {"$exists": True}}
        )
        admin.command("killOp", op=op["opid"])
        _interrupted(build.outcome())
    finally:
        admin.command("configureFailPoint", "hangIndexBuildBeforeCommit", mode="off")
    assert [ix["name"] for ix in coll.list_indexes()] == ["_id_"]
    assert client.db.command("validate", "killed_build")["valid"] is True
    coll.create_index("k")
    assert coll.find_one({"k": 42}) == {"_id": 42, "k": 42}
