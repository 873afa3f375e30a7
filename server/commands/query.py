"""Whole-result queries: count, distinct, and explain for find, count and distinct."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

import bson

from server.commands.crud import FindParams, prepare_find
from server.context import CommandContext
from server.cursors import each_chunk
from server.errors import CommandError, ErrorCode
from server.params import COMMAND_VALUE, Kind, NonNegative, arg, extract
from server.registry import REGISTRY
from server.version import MONGODB_VERSION
from storage import keys
from storage.catalog import CollectionInfo, validate_collection_name
from storage.documents import CODEC
from storage.execute import QueryRun, QuerySpec, count_documents
from storage.planner import CollScan, IndexScan, Plan
from storage.query.compare import compare
from storage.query.paths import MISSING, leaves, split


@dataclass(frozen=True)
class CountParams:
    collection: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    query: dict[str, Any] | None = arg("query", Kind.DOC)
    limit: int = arg("limit", Kind.INT, 0)
    hint: Any = arg("hint", Kind.STRING_OR_DOC)
    fields: dict[str, Any] | None = arg("fields", Kind.DOC)
    # Checked in this order: the collation, then the skip (in count's own words, not find's).
    collation: dict[str, Any] | None = arg("collation", Kind.COLLATION)
    skip: int = arg(
        "skip", Kind.INT, 0, check=NonNegative("skip value is negative in count query: {value}")
    )


def _count_spec(ctx: CommandContext, p: CountParams) -> tuple[CollectionInfo | None, QuerySpec]:
    validate_collection_name(ctx.db, p.collection)
    # A negative limit counts like its absolute value (MongoDB's legacy rule).
    spec = QuerySpec.parse(p.query, None, None, p.skip, abs(p.limit), p.hint)
    return ctx.app.engine.collection(ctx.db, p.collection), spec


async def _count(ctx: CommandContext, run: QueryRun) -> int:
    n = 0
    async for chunk in each_chunk(ctx.app.engine, run, ctx.app.clock.now_ms()):
        n += len(chunk)
    return n


@REGISTRY.command("count", params=CountParams)
async def count(ctx: CommandContext, p: CountParams) -> dict[str, Any]:
    """Count the documents matching a query (with skip and limit)."""
    coll, spec = _count_spec(ctx, p)
    if coll is None:
        return {"n": 0, "ok": 1.0}
    if not spec.filter and not spec.skip and not spec.limit and p.hint is None:
        return {"n": count_documents(ctx.app.engine, coll, ctx.app.clock.now_ms()), "ok": 1.0}
    return {"n": await _count(ctx, QueryRun(coll, spec)), "ok": 1.0}


@dataclass(frozen=True)
class DistinctParams:
    collection: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    key: str = arg("key", Kind.STRING, required=True)
    query: dict[str, Any] | None = arg("query", Kind.DOC)
    collation: dict[str, Any] | None = arg("collation", Kind.COLLATION)
    hint: Any = arg("hint", Kind.STRING_OR_DOC)


def _distinct_spec(
    ctx: CommandContext, p: DistinctParams
) -> tuple[CollectionInfo | None, QuerySpec]:
    validate_collection_name(ctx.db, p.collection)
    if not p.key or p.key.startswith("$") or "" in p.key.split("."):
        raise CommandError(ErrorCode.BadValue, f"FieldPath '{p.key}' is not valid for distinct")
    spec = QuerySpec.parse(p.query, None, None, 0, 0, p.hint)
    return ctx.app.engine.collection(ctx.db, p.collection), spec


async def _distinct_values(
    ctx: CommandContext, coll: CollectionInfo, run: QueryRun, key: str
) -> list[Any]:
    parts = split(key)
    seen: dict[bytes, Any] = {}
    async for chunk in each_chunk(ctx.app.engine, run, ctx.app.clock.now_ms()):
        for raw in chunk:
            doc = bson.decode(raw, CODEC)
            for v in leaves(doc, parts):
                if v is MISSING:
                    continue
                # Arrays are unwound one level: their elements are the values.
                for item in v if isinstance(v, list) else (v,):
                    seen.setdefault(keys.encode(item), item)
    return sorted(seen.values(), key=functools.cmp_to_key(compare))


@REGISTRY.command("distinct", params=DistinctParams)
async def distinct(ctx: CommandContext, p: DistinctParams) -> dict[str, Any]:
    """The distinct values of a field (array values unwound) among matching documents."""
    coll, spec = _distinct_spec(ctx, p)
    if coll is None:
        return {"values": [], "ok": 1.0}
    values = await _distinct_values(ctx, coll, QueryRun(coll, spec), p.key)
    return {"values": values, "ok": 1.0}


# -- explain ---------------------------------------------------------------------------------------


def _plan_doc(plan: Plan, run: QueryRun | None = None) -> dict[str, Any]:
    if isinstance(plan, CollScan):
        return {"stage": "COLLSCAN", "direction": "backward" if plan.reverse else "forward"}
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
    return {"stage": "FETCH", "inputStage": scan}


def _winning_plan(spec: QuerySpec, plan: Plan) -> dict[str, Any]:
    doc = _plan_doc(plan)
    if (
        spec.sort is not None
        and spec.sort.keys
        and not (isinstance(plan, IndexScan) and plan.provides_sort)
    ):
        doc = {
            "stage": "SORT",
            "sortPattern": {".".join(k): d for k, d in spec.sort.keys},
            "inputStage": doc,
        }
    if spec.projection is not None:
        doc = {"stage": "PROJECTION_DEFAULT", "inputStage": doc}
    return doc


@dataclass(frozen=True)
class ExplainParams:
    command: dict[str, Any] = arg(COMMAND_VALUE, Kind.DOC, required=True)
    verbosity: str = arg("verbosity", Kind.STRING, "allPlansExecution")


_VERBOSITIES = ("queryPlanner", "executionStats", "allPlansExecution")


@REGISTRY.command("explain", params=ExplainParams)
async def explain(ctx: CommandContext, p: ExplainParams) -> dict[str, Any]:
    """How find, count or distinct would run: the winning plan and, with executionStats, what
    running it examined and returned."""
    if p.verbosity not in _VERBOSITIES:
        raise CommandError(
            ErrorCode.BadValue, f"verbosity string must be one of {list(_VERBOSITIES)}"
        )
    inner = dict(p.command)
    name = next(iter(inner), "")
    inner.pop("$db", None)
    started = time.perf_counter()
    if name == "find":
        fp = extract(FindParams, "find", inner)
        q = prepare_find(ctx, fp)
        coll, spec, ns = q.coll, q.spec, q.ns
    elif name == "count":
        cp = extract(CountParams, "count", inner)
        coll, spec = _count_spec(ctx, cp)
        ns = ctx.ns(cp.collection)
    elif name == "distinct":
        dp = extract(DistinctParams, "distinct", inner)
        coll, spec = _distinct_spec(ctx, dp)
        ns = ctx.ns(dp.collection)
    else:
        raise CommandError(
            ErrorCode.CommandNotFound, f"Explain failed: command '{name}' cannot be explained"
        )
    run = QueryRun(coll, spec) if coll is not None else None
    planner: dict[str, Any] = {
        "namespace": ns,
        "parsedQuery": spec.filter,
        "winningPlan": _winning_plan(spec, run.plan) if run else {"stage": "EOF"},
        "rejectedPlans": [],
    }
    reply: dict[str, Any] = {"explainVersion": "1", "queryPlanner": planner}
    if p.verbosity != "queryPlanner":
        n = 0
        if run is not None and coll is not None:
            if name == "distinct":
                n = len(await _distinct_values(ctx, coll, run, dp.key))
            else:
                async for chunk in each_chunk(ctx.app.engine, run, ctx.app.clock.now_ms()):
                    n += len(chunk)
        reply["executionStats"] = {
            "executionSuccess": True,
            "nReturned": n,
            "executionTimeMillis": int((time.perf_counter() - started) * 1000),
            "totalKeysExamined": run.keys_examined if run else 0,
            "totalDocsExamined": run.docs_examined if run else 0,
            "executionStages": planner["winningPlan"],
        }
    reply["command"] = {**inner, "$db": ctx.db}
    reply["serverInfo"] = {
        "host": ctx.app.host,
        "port": ctx.app.address[1] if ctx.app.address else 0,
        "version": MONGODB_VERSION,
        "gitVersion": "ebbdb",
    }
    reply["ok"] = 1.0
    return reply
