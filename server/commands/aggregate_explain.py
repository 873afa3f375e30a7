"""Explain of an aggregate (`aggregate` with `explain: true`, or `explain: {aggregate: ...}`): the
plan of the pushed-down first read in find's shapes. A pipeline the read does whole answers as
find's explain does; otherwise MongoDB's `stages`: `$cursor` with the read's queryPlanner, then the
stages left, as given.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from ebbdb.server.commands.plans import execution_stats, finish_explain, winning_plan
from ebbdb.server.context import CommandContext
from ebbdb.server.cursors import each_chunk
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.storage.aggregate import parse_pipeline
from ebbdb.storage.aggregate.pushdown import plan_read
from ebbdb.storage.catalog.info import validate_collection_name
from ebbdb.storage.core.collation import resolve
from ebbdb.storage.execution import views as storage_views
from ebbdb.storage.execution.execute import QueryRun, QuerySpec
from ebbdb.storage.query.expressions import command_variables


@dataclass(frozen=True)
class Explained:
    """What explain reads of an aggregate: the collection (None for `aggregate: 1`), the stages
    as given, and the options that shape the read."""

    collection: str | None
    pipeline: list[Any]
    let: dict[str, Any] | None
    collation: dict[str, Any] | None
    hint: Any


async def explain_pipeline(
    ctx: CommandContext, p: Explained, verbosity: str, command: dict[str, Any]
) -> dict[str, Any]:
    """The explain reply for an aggregate; `command` is the command explained (echoed back).
    Raises CommandError for a pipeline or hint the aggregate itself would refuse."""
    started = time.perf_counter()
    collection = p.collection
    pipeline = parse_pipeline(p.pipeline, defined=frozenset(p.let or {}))
    reply: dict[str, Any] = {"explainVersion": "1"}
    if collection is None or pipeline.collectionless:
        # Nothing is read: the stages make their own documents.
        reply["stages"] = list(p.pipeline)
        return finish_explain(ctx, reply, command)
    validate_collection_name(ctx.db, collection)
    coll = ctx.collection(collection)
    if coll is None and storage_views.lookup(ctx.gateway.engine, ctx.db, collection) is not None:
        raise CommandError(
            ErrorCode.NotImplemented, "explain of an aggregate on a view is not supported"
        )
    variables = command_variables(p.let, ctx.now())
    read, rest = plan_read(pipeline.stages, variables)
    pushed = len(pipeline.stages) - len(rest)
    collation = resolve(p.collation, coll) if coll is not None else None
    spec = QuerySpec.parse(
        read.filter, None, read.sort, read.skip, read.limit, p.hint, collation=collation
    )
    run = QueryRun(coll, spec) if coll is not None and not read.empty else None
    planner: dict[str, Any] = {
        "namespace": ctx.ns(collection),
        "parsedQuery": spec.filter,
        "winningPlan": winning_plan(spec, run.plan) if run else {"stage": "EOF"},
        "rejectedPlans": [],
    }
    section: dict[str, Any] = {"queryPlanner": planner}
    if verbosity != "queryPlanner":
        n = 0
        if run is not None:
            async for chunk in each_chunk(ctx.gateway, run, ctx.now()):
                n += len(chunk)
        section["executionStats"] = execution_stats(n, started, run, planner["winningPlan"])
    if rest:
        reply["stages"] = [{"$cursor": section}, *p.pipeline[pushed:]]
    else:
        reply.update(section)  # the whole pipeline is the read: find's shape
    return finish_explain(ctx, reply, command)
