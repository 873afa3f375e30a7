"""currentOp, $currentOp and killOp through pymongo: a long aggregation is found by its comment and
appName with MongoDB 7.0's fields, and killed from another client (11601 Interrupted); a write job
is killed the same way; the filters currentOp takes."""

from __future__ import annotations

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
