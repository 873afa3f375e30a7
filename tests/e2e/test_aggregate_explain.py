"""Explain of aggregate (`explain: true` and the explain command) in MongoDB 7's shapes, and the
aggregate `hint` choosing the index of the pushed-down read, through pymongo."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

Client = MongoClient[dict[str, Any]]


@pytest.fixture
def coll(client: Client) -> Any:
    c = client.plans.items
    c.insert_many([{"_id": i, "x": i, "y": i % 3} for i in range(10)])
    c.create_index("x")
    c.create_index("y")
    return c


def _scan(plan: dict[str, Any]) -> dict[str, Any]:
    while "inputStage" in plan:
        plan = plan["inputStage"]
    return plan


def test_whole_pipeline_pushed_down_answers_like_find(coll: Any) -> None:
    pipeline = [{"$match": {"x": {"$gte": 5}}}, {"$sort": {"x": 1}}]
    reply = coll.database.command("aggregate", "items", pipeline=pipeline, explain=True)
    assert "stages" not in reply
    assert reply["explainVersion"] == "1"
    planner = reply["queryPlanner"]
    assert planner["namespace"] == "plans.items"
    assert planner["parsedQuery"] == {"x": {"$gte": 5}}
    assert planner["winningPlan"]["stage"] == "FETCH"
    scan = planner["winningPlan"]["inputStage"]
    assert (scan["stage"], scan["indexName"], scan["keyPattern"]) == ("IXSCAN", "x_1", {"x": 1})
    assert reply["command"]["pipeline"] == pipeline
    assert reply["ok"] == 1.0


def test_stages_left_follow_the_cursor(coll: Any) -> None:
    group = {"$group": {"_id": "$y", "n": {"$sum": 1}}}
    pipeline = [{"$match": {"x": {"$lt": 4}}}, group, {"$sort": {"_id": 1}}]
    reply = coll.database.command("aggregate", "items", pipeline=pipeline, explain=True)
    assert "queryPlanner" not in reply
    cursor, *rest = reply["stages"]
    assert rest == [group, {"$sort": {"_id": 1}}]
    assert _scan(cursor["$cursor"]["queryPlanner"]["winningPlan"])["indexName"] == "x_1"


def test_explain_command_with_execution_stats(coll: Any) -> None:
    body = {"aggregate": "items", "pipeline": [{"$match": {"y": 1}}, {"$count": "n"}], "cursor": {}}
    reply = coll.database.command("explain", body, verbosity="executionStats")
    cursor = reply["stages"][0]["$cursor"]
    assert _scan(cursor["queryPlanner"]["winningPlan"])["indexName"] == "y_1"
    stats = cursor["executionStats"]
    assert (stats["nReturned"], stats["totalDocsExamined"], stats["totalKeysExamined"]) == (3, 3, 3)
    assert reply["stages"][1] == {"$count": "n"}


def test_collection_scan_without_an_index(coll: Any) -> None:
    reply = coll.database.command(
        "aggregate", "items", pipeline=[{"$match": {"z": 1}}], explain=True
    )
    assert reply["queryPlanner"]["winningPlan"] == {"stage": "COLLSCAN", "direction": "forward"}


def test_hint_picks_the_index(coll: Any) -> None:
    pipeline = [{"$match": {"x": {"$gte": 3}, "y": 0}}]
    for hint in ("y_1", {"y": 1}, "x_1"):
        reply = coll.database.command(
            "aggregate", "items", pipeline=pipeline, explain=True, hint=hint
        )
        wanted = hint if isinstance(hint, str) else "y_1"
        assert _scan(reply["queryPlanner"]["winningPlan"])["indexName"] == wanted
        out = list(coll.aggregate(pipeline + [{"$sort": {"_id": 1}}], hint=hint))
        assert [d["_id"] for d in out] == [3, 6, 9]
    natural = coll.database.command(
        "aggregate", "items", pipeline=pipeline, explain=True, hint={"$natural": 1}
    )
    assert natural["queryPlanner"]["winningPlan"]["stage"] == "COLLSCAN"


def test_bad_hint_is_bad_value(coll: Any) -> None:
    with pytest.raises(OperationFailure) as info:
        list(coll.aggregate([{"$match": {"x": 1}}], hint="nope_1"))
    assert (info.value.code, info.value.details["codeName"]) == (2, "BadValue")
    assert "hint provided does not correspond to an existing index" in str(info.value)
    with pytest.raises(OperationFailure) as info:
        coll.database.command("aggregate", "items", pipeline=[], explain=True, hint={"nope": 1})
    assert info.value.code == 2
