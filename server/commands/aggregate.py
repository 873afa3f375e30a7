"""The aggregate command: parse the pipeline, then pull its results batch by batch on a reader
thread (storage/aggregate/ runs the stages; its reads go through the query engine, so expired
documents never enter a pipeline, whether read first or by $lookup or $unionWith)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ebbdb.server import change_streams, views
from ebbdb.server.arguments import COMMAND_VALUE, Kind, arg
from ebbdb.server.commands.aggregate_explain import Explained, explain_pipeline
from ebbdb.server.commands.current_op import current_op_pipeline
from ebbdb.server.commands.replies import cursor_reply, time_left
from ebbdb.server.context import CommandContext
from ebbdb.server.cursors import DEFAULT_FIRST_BATCH, PipelineRun
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.latency import Facts
from ebbdb.server.memory import memory_limits
from ebbdb.server.outputs import output_run, writes_output
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.aggregate import EngineSource, parse_pipeline, run_pipeline
from ebbdb.storage.aggregate.output import writer_of
from ebbdb.storage.catalog.info import validate_collection_name
from ebbdb.storage.core.collation import resolve
from ebbdb.storage.core.values import is_number, to_float, type_name
from ebbdb.storage.query.expressions import command_variables


@dataclass(frozen=True)
class AggregateParams:
    target: Any = arg(COMMAND_VALUE, Kind.ANY, required=True)
    pipeline: list[Any] = arg("pipeline", Kind.ARRAY, required=True)
    cursor: dict[str, Any] | None = arg("cursor", Kind.DOC)
    explain: bool = arg("explain", Kind.BOOL, False)
    allow_disk_use: bool | None = arg("allowDiskUse", Kind.BOOL)  # None: allowDiskUseByDefault
    collation: dict[str, Any] | None = arg("collation", Kind.COLLATION)
    hint: Any = arg("hint", Kind.STRING_OR_DOC)
    let: dict[str, Any] | None = arg("let", Kind.DOC)
    bypass_document_validation: bool = arg("bypassDocumentValidation", Kind.BOOL, False)


def collection_of(target: Any) -> str | None:
    """The collection named by `aggregate` (None for a collection-less `aggregate: 1`): another
    number is 9 FailedToParse, another type 14 TypeMismatch, as mongod's parseNs says."""
    if type(target) is str:
        return target
    if is_number(target):
        if to_float(target) == 1:
            return None
        raise CommandError(
            ErrorCode.FailedToParse,
            "Invalid command format: the 'aggregate' field must specify a collection name or 1",
        )
    raise CommandError(
        ErrorCode.TypeMismatch, f"collection name has invalid type: {type_name(target)}"
    )


def _batch_size(cursor: dict[str, Any]) -> int:
    size = cursor.get("batchSize", DEFAULT_FIRST_BATCH)
    if isinstance(size, bool) or not isinstance(size, int | float):
        raise CommandError(
            ErrorCode.TypeMismatch,
            "BSON field 'aggregate.cursor.batchSize' is the wrong type, expected type 'int'",
        )
    if size < 0:
        raise CommandError(
            ErrorCode.BadValue, f"BatchSize value must be non-negative, but received: {size}"
        )
    return int(size)


@REGISTRY.command("aggregate", params=AggregateParams, writes=writes_output)
async def aggregate(ctx: CommandContext, p: AggregateParams) -> dict[str, Any]:
    """Run an aggregation pipeline; returns the first batch and a cursor id for the rest."""
    if p.explain:
        return await explain_aggregate(ctx, p, "queryPlanner", _command(p))
    collection = collection_of(p.target)
    if collection is not None:
        validate_collection_name(ctx.db, collection)
        await ctx.profiler.settle(collection)
    if p.cursor is None:
        raise CommandError(
            ErrorCode.FailedToParse,
            "The 'cursor' option is required, except for aggregate with the explain argument",
        )
    first = _batch_size(p.cursor)
    if change_streams.opens_stream(p.pipeline):
        return await change_streams.open_stream(ctx, collection, p.pipeline, first)
    now = ctx.now()
    variables = command_variables(p.let, now)
    stages = p.pipeline
    first_stage = next(iter(stages[0]), "") if stages and isinstance(stages[0], Mapping) else ""
    if first_stage == "$currentOp":
        stages = current_op_pipeline(ctx, collection, stages)
    elif first_stage in ("$listLocalSessions", "$listSessions"):
        from ebbdb.server.commands.sessions import list_sessions_pipeline

        stages = list_sessions_pipeline(ctx, collection, stages)
    # On a reader thread: parsing 200,000 $bucket boundaries or 2,000 fields of 50 paths each
    # held the event loop 150 to 250 ms.
    pipeline = await ctx.gateway.read(parse_pipeline, stages, frozenset(p.let or {}))
    coll = ctx.collection(collection) if collection is not None else None
    if coll is None and not p.collation:
        collation = views.read_collation(ctx, collection)  # a view's, if it is one
    else:
        collation = resolve(p.collation, coll)
    facts = Facts(ctx.listener, ctx.stats.latency)
    limits = memory_limits(ctx.parameters, ctx.gateway.engine.path, p.allow_disk_use)
    source = EngineSource(ctx.gateway.engine, ctx.db, now, facts, collation, limits)

    def set_now(now_ms: int) -> None:
        source.now_ms = now_ms

    results = run_pipeline(pipeline, source, collection, variables, collation, p.hint)
    writer = writer_of(pipeline)
    run: PipelineRun
    if writer is not None:  # $out or $merge: the results are written, the cursor is empty
        bypass = p.bypass_document_validation
        run = output_run(ctx, writer, iter(results), set_now, variables, collation, bypass)
    else:
        run = PipelineRun(iter(results), set_now, ctx.gateway.read)
    docs = await run.fill(first, now) if first else []
    ns = ctx.ns(collection if collection is not None else "$cmd.aggregate")
    cid = 0
    if not run.exhausted:
        cursor = ctx.cursors.open(ns, run)
        cursor.time_left = time_left(ctx)
        cid = cursor.id
    return cursor_reply(ns, cid, "firstBatch", docs)


async def explain_aggregate(
    ctx: CommandContext, p: AggregateParams, verbosity: str, command: dict[str, Any]
) -> dict[str, Any]:
    """Explain of an aggregate (its `explain` flag, or the explain command around it)."""
    read = Explained(collection_of(p.target), p.pipeline, p.let, p.collation, p.hint)
    return await explain_pipeline(ctx, read, verbosity, command)


def _command(p: AggregateParams) -> dict[str, Any]:
    """The aggregate command as explain echoes it back."""
    command: dict[str, Any] = {"aggregate": p.target, "pipeline": p.pipeline}
    for name, value in (("collation", p.collation), ("hint", p.hint), ("let", p.let)):
        if value is not None:
            command[name] = value
    return command
