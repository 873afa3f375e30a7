"""Explain's plan documents, shared by the explain of find, count and distinct and the explain of
aggregate: the winning plan in MongoDB's stage shapes (COLLSCAN, FETCH over IXSCAN, SORT,
PROJECTION_DEFAULT), executionStats, and the reply's closing fields."""

from __future__ import annotations

import time
from typing import Any

from ebbdb.server.context import CommandContext
from ebbdb.server.version import MONGODB_VERSION
from ebbdb.storage.execution.execute import QueryRun, QuerySpec
from ebbdb.storage.indexes.planner import CollScan, IndexScan, Plan
from ebbdb.storage.indexes.text_plan import TextScan
from ebbdb.storage.query.sort import TEXT_SCORE_KEY
from ebbdb.storage.query.text_search import TextQuery


def _plan_doc(plan: Plan, run: QueryRun | None = None) -> dict[str, Any]:
    if isinstance(plan, CollScan):
        return {"stage": "COLLSCAN", "direction": "backward" if plan.reverse else "forward"}
    if isinstance(plan, TextScan) and plan.query is not None:
        return _text_plan_doc(plan, plan.query)
    ix = plan.index
    scan: dict[str, Any] = {
        "stage": "IXSCAN",
        "keyPattern": dict(ix.key),
        "indexName": ix.name,
        "isMultiKey": ix.multikey,
        "isUnique": ix.unique,
        "isSparse": ix.sparse,
        "isPartial": ix.partial_filter is not None,
        "direction": "backward" if plan.reverse else "forward",
        "indexBounds": plan.bounds,
    }
    fetch = {"stage": "FETCH", "inputStage": scan}
    if plan.near is not None:
        # A proximity plan: MongoDB's GEO_NEAR stage reads the index and orders by distance.
        return {
            "stage": plan.near.stage,
            "keyPattern": dict(ix.key),
            "indexName": ix.name,
            "indexVersion": 2,
            "inputStages": [fetch],
        }
    return fetch


def _text_plan_doc(plan: TextScan, query: TextQuery) -> dict[str, Any]:
    """MongoDB's shape for a $text: TEXT_MATCH over TEXT_OR over one IXSCAN per term (FETCH
    of each candidate is folded into TEXT_OR here)."""
    ix = plan.index
    scans = [
        {
            "stage": "IXSCAN",
            "keyPattern": dict(ix.key),
            "indexName": ix.name,
            "isMultiKey": ix.multikey,
            "isUnique": False,
            "isSparse": False,
            "isPartial": ix.partial_filter is not None,
            "direction": "backward",
            "indexBounds": {},
        }
        for _ in query.index_terms
    ]
    return {
        "stage": "TEXT_MATCH",
        "indexPrefix": {f: b[0] for f, b in plan.bounds.items() if f != "_fts"},
        "indexName": ix.name,
        "parsedTextQuery": query.spec(),
        "textIndexVersion": 3,
        "inputStage": {"stage": "TEXT_OR", "inputStages": scans},
    }


def winning_plan(spec: QuerySpec, plan: Plan) -> dict[str, Any]:
    doc = _plan_doc(plan)
    if (
        spec.sort is not None
        and spec.sort.keys
        and not (isinstance(plan, IndexScan) and plan.provides_sort)
    ):
        doc = {
            "stage": "SORT",
            "sortPattern": {
                ("$textScore" if k == TEXT_SCORE_KEY else ".".join(k)): (
                    {"$meta": "textScore"} if k == TEXT_SCORE_KEY else d
                )
                for k, d in spec.sort.keys
            },
            "inputStage": doc,
        }
    if spec.projection is not None:
        doc = {"stage": "PROJECTION_DEFAULT", "inputStage": doc}
    return doc


def execution_stats(
    n: int, started: float, run: QueryRun | None, winning: dict[str, Any]
) -> dict[str, Any]:
    """explain's `executionStats`: `n` returned by `run` (None: nothing read), timed from
    `started` (a perf_counter reading)."""
    return {
        "executionSuccess": True,
        "nReturned": n,
        "executionTimeMillis": int((time.perf_counter() - started) * 1000),
        "totalKeysExamined": run.keys_examined if run else 0,
        "totalDocsExamined": run.docs_examined if run else 0,
        "executionStages": winning,
    }


def finish_explain(
    ctx: CommandContext, reply: dict[str, Any], command: dict[str, Any]
) -> dict[str, Any]:
    """An explain reply's closing fields: the command explained, the server, ok."""
    reply["command"] = {**command, "$db": ctx.db}
    reply["serverInfo"] = {
        "host": ctx.listener.host,
        "port": ctx.listener.port,
        "version": MONGODB_VERSION,
        "gitVersion": "ebbdb",
    }
    reply["ok"] = 1.0
    return reply
