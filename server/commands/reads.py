"""Reading documents: find, getMore and killCursors (cursors), and the whole-result queries count,
distinct, and explain for find, count and distinct."""

from __future__ import annotations

import functools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import bson
from bson import Int64

from ebbdb.server import change_streams, tailable, views
from ebbdb.server.arguments import (
    COMMAND_VALUE,
    TERSE_MISMATCH,
    Kind,
    NonNegative,
    arg,
    extract,
)
from ebbdb.server.commands.aggregate import AggregateParams, aggregate, explain_aggregate
from ebbdb.server.commands.plans import execution_stats, finish_explain, winning_plan
from ebbdb.server.commands.replies import cursor_reply, time_left
from ebbdb.server.context import CommandContext
from ebbdb.server.cursors import DEFAULT_FIRST_BATCH, Cursor, each_chunk, fill_batch
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.large_messages import PASS_ITEMS, LargeReply, mapped
from ebbdb.server.memory import memory_limits
from ebbdb.server.registry import REGISTRY
from ebbdb.server.sessions import check_get_more, check_transaction_get_more
from ebbdb.storage.catalog.info import CollectionInfo, validate_collection_name
from ebbdb.storage.core.collation import Collation, resolve
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.limits import MemoryLimits
from ebbdb.storage.execution import views as storage_views
from ebbdb.storage.execution.execute import QueryRun, QuerySpec, count_documents
from ebbdb.storage.indexes import keys
from ebbdb.storage.indexes.text_plan import check_no_collection
from ebbdb.storage.query.compare import compare
from ebbdb.storage.query.expressions import command_variables
from ebbdb.storage.query.paths import MISSING, leaves, split

_BATCH_SIZE = NonNegative("BatchSize value must be non-negative, but received: {value}")


@dataclass(frozen=True)
class FindParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION, required=True)
    filter: dict[str, Any] | None = arg("filter", Kind.DOC)
    projection: dict[str, Any] | None = arg("projection", Kind.DOC)
    sort: dict[str, Any] | None = arg("sort", Kind.DOC)
    limit: int = arg("limit", Kind.INT, 0)
    single_batch: bool = arg("singleBatch", Kind.BOOL, False)
    no_cursor_timeout: bool = arg("noCursorTimeout", Kind.BOOL, False)
    #: Taken and ignored, as mongod 4.4+ does (oplog tailers still send it).
    oplog_replay: bool = arg("oplogReplay", Kind.BOOL, False)
    hint: Any = arg("hint", Kind.STRING_OR_DOC)
    allow_disk_use: bool | None = arg("allowDiskUse", Kind.BOOL)  # None: allowDiskUseByDefault
    let: dict[str, Any] | None = arg("let", Kind.DOC)
    allow_partial_results: bool = arg("allowPartialResults", Kind.BOOL, False)
    # Checked in this order, the one a find with several of these faults is answered by.
    collation: dict[str, Any] | None = arg("collation", Kind.COLLATION)
    tailable: bool = arg("tailable", Kind.BOOL, False)
    await_data: bool = arg("awaitData", Kind.BOOL, False)
    return_key: bool = arg("returnKey", Kind.BOOL, False)
    show_record_id: bool = arg("showRecordId", Kind.BOOL, False)
    min: dict[str, Any] | None = arg("min", Kind.DOC)
    max: dict[str, Any] | None = arg("max", Kind.DOC)
    batch_size: int | None = arg("batchSize", Kind.INT, check=_BATCH_SIZE)
    skip: int = arg(
        "skip",
        Kind.INT,
        0,
        check=NonNegative("Skip value must be non-negative, but received: {value}"),
    )


@dataclass(frozen=True)
class PreparedFind:
    ns: str
    coll: CollectionInfo | None
    spec: QuerySpec
    single_batch: bool
    limit: int
    now_ms: int  # the command's time: $$NOW, and what the first batch hides as expired


def prepare_find(ctx: CommandContext, p: FindParams) -> PreparedFind:
    """Validate a find and parse its filter, projection, sort and hint (shared with explain)."""
    validate_collection_name(ctx.db, p.collection)
    limit = abs(p.limit)
    now = ctx.now()
    variables = command_variables(p.let, now)
    coll = ctx.collection(p.collection)
    collation = resolve(p.collation, coll)
    spec = QuerySpec.parse(
        p.filter,
        p.projection,
        p.sort,
        p.skip,
        limit,
        p.hint,
        variables,
        collation,
        min_key=p.min,
        max_key=p.max,
        return_key=p.return_key,
        show_record_id=p.show_record_id,
    )
    if coll is None and storage_views.lookup(ctx.gateway.engine, ctx.db, p.collection) is None:
        check_no_collection(spec.query, ctx.ns(p.collection))
    return PreparedFind(ctx.ns(p.collection), coll, spec, p.single_batch or p.limit < 0, limit, now)


@REGISTRY.command("find", params=FindParams)
async def find(ctx: CommandContext, p: FindParams) -> dict[str, Any]:
    """Query a collection; returns the first batch and a cursor id for the rest."""
    await ctx.profiler.settle(p.collection)
    q = prepare_find(ctx, p)
    ns, coll, spec, single_batch, limit = q.ns, q.coll, q.spec, q.single_batch, q.limit
    tail = tailable.check_find(p.tailable, p.await_data, p.sort, p.single_batch)
    if coll is None:
        if storage_views.lookup(ctx.gateway.engine, ctx.db, p.collection) is not None:
            return await _find_on_view(ctx, p, limit)
        return cursor_reply(ns, 0, "firstBatch", [])
    run = (
        QueryRun(coll, spec, limits=_limits(ctx, p.allow_disk_use))
        if tail is None
        else tailable.tail_run(coll, spec, ns, p.sort, p.projection)
    )
    ctx.client.op_run = run  # the profiler reads its plan and counts
    first = p.batch_size if p.batch_size is not None else DEFAULT_FIRST_BATCH
    if single_batch and p.batch_size is None:
        first = limit or DEFAULT_FIRST_BATCH
    docs = await fill_batch(ctx.gateway, run, first, q.now_ms) if first else []
    cid = 0
    if tail is not None:
        if tailable.keeps_cursor(ctx, coll) and not (limit and run.returned >= limit):
            cid = ctx.cursors.open(ns, run, p.no_cursor_timeout, tail).id
    elif not run.exhausted and not single_batch:
        cursor = ctx.cursors.open(ns, run, p.no_cursor_timeout)
        cursor.time_left = time_left(ctx)
        cid = cursor.id
    return cursor_reply(ns, cid, "firstBatch", docs)


async def _find_on_view(ctx: CommandContext, p: FindParams, limit: int) -> dict[str, Any]:
    """A find on a view is an aggregation on it (MongoDB's conversion; the dispatcher has refused
    the options an aggregation cannot express)."""
    stages = views.find_stages(p.filter, p.sort, p.skip, limit, p.projection)
    cursor = {} if p.batch_size is None else {"batchSize": p.batch_size}
    params = AggregateParams(
        p.collection,
        stages,
        cursor,
        collation=p.collation,
        hint=p.hint,
        let=p.let,
        allow_disk_use=p.allow_disk_use,
    )
    return await aggregate(ctx, params)


def _limits(ctx: CommandContext, allow_disk_use: bool | None) -> MemoryLimits:
    return memory_limits(ctx.parameters, ctx.gateway.engine.path, allow_disk_use)


@dataclass(frozen=True)
class GetMoreParams:
    cursor_id: Int64 = arg(COMMAND_VALUE, Kind.CURSOR_ID, required=True, mismatch=TERSE_MISMATCH)
    collection: str = arg("collection", Kind.STRING, required=True)
    batch_size: int | None = arg("batchSize", Kind.INT, check=_BATCH_SIZE)
    max_time_ms: int | None = arg("maxTimeMS", Kind.INT)


@REGISTRY.command("getMore", params=GetMoreParams)
async def get_more(ctx: CommandContext, p: GetMoreParams) -> dict[str, Any]:
    """The next batch of an open cursor."""
    ns = ctx.ns(p.collection)
    cursor = ctx.cursors.get(int(p.cursor_id))
    if cursor is None:
        raise CommandError(ErrorCode.CursorNotFound, f"cursor id {int(p.cursor_id)} not found")
    if cursor.ns != ns:
        raise CommandError(
            ErrorCode.Unauthorized,
            f"Requested getMore on namespace '{ns}', but cursor belongs to a different namespace "
            f"{cursor.ns}",
        )
    tailable.check_get_more(cursor, p.max_time_ms)
    if cursor.in_use:
        raise CommandError(
            ErrorCode.CursorInUse, f"Cursor already in use (namespace: '{ns}', id: {cursor.id})."
        )
    check_get_more(cursor.id, cursor.session, ctx.client.session)  # as mongod, once pinned
    if ctx.client.op is not None:
        check_transaction_get_more(cursor.id, cursor.txn_number, ctx.client.op.body)
    op = ctx.client.op
    if op is not None:
        if cursor.tail is not None:
            op.deadline = None  # an awaitData getMore's maxTimeMS is how long it waits
        elif cursor.time_left is not None:
            op.deadline = time.monotonic() + cursor.time_left
    if isinstance(cursor.run, change_streams.ChangeStreamRun):
        return await change_streams.get_more(ctx, cursor, p.batch_size or None, p.max_time_ms)
    return await next_batch(ctx, cursor, p.batch_size or None, p.max_time_ms)


async def next_batch(
    ctx: CommandContext, cursor: Cursor, batch_size: int | None, max_time_ms: int | None
) -> dict[str, Any]:
    """A getMore's reply once its checks are passed: the next batch of `cursor` (a query's or a
    pipeline's), the cursor closed when it is done or the batch failed (as MongoDB: a failed
    getMore ends its cursor). The general path's getMore and the express path's."""
    cursor.in_use = True
    ctx.client.op_run = cursor.run
    try:
        if cursor.tail is not None:
            docs = await tailable.tail_batch(ctx, cursor, batch_size, max_time_ms)
        else:
            docs = await fill_batch(ctx.gateway, cursor.run, batch_size, ctx.now())
    except BaseException:
        ctx.cursors.close(cursor.id)  # as MongoDB: a failed getMore ends its cursor
        raise
    finally:
        cursor.in_use = False
    if cursor.time_left is not None:
        cursor.time_left = time_left(ctx)
    if cursor.killed:
        raise CommandError(ErrorCode.CursorKilled, f"cursor id {cursor.id} was killed")
    cid = cursor.id
    if cursor.run.exhausted:
        ctx.cursors.close(cid)
        cid = 0
    return cursor_reply(cursor.ns, cid, "nextBatch", docs)


@dataclass(frozen=True)
class KillCursorsParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION, required=True)
    cursors: list[Int64] = arg("cursors", Kind.CURSOR_IDS, required=True)


@REGISTRY.command("killCursors", params=KillCursorsParams)
async def kill_cursors(ctx: CommandContext, p: KillCursorsParams) -> dict[str, Any]:
    """Close cursors by id."""
    killed: list[Int64] = []
    not_found: list[Int64] = []
    close = ctx.cursors.close

    def kill(cid: Int64) -> None:
        (killed if close(int(cid)) else not_found).append(cid)

    # A pass at a time (a killCursors may name 500,000 ids), the loop given back between.
    await mapped(p.cursors, kill)
    reply = LargeReply() if len(p.cursors) > PASS_ITEMS else {}
    reply.update(
        cursorsKilled=killed, cursorsNotFound=not_found, cursorsAlive=[], cursorsUnknown=[], ok=1.0
    )
    return reply


# -- count, distinct ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CountParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION_BY_HAND, required=True)
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
    coll = ctx.collection(p.collection)
    collation = resolve(p.collation, coll)
    spec = QuerySpec.parse(p.query, None, None, p.skip, abs(p.limit), p.hint, collation=collation)
    return coll, spec


async def _count(ctx: CommandContext, run: QueryRun) -> int:
    n = 0
    async for chunk in each_chunk(ctx.gateway, run, ctx.now()):
        n += len(chunk)
    return n


@REGISTRY.command("count", params=CountParams)
async def count(ctx: CommandContext, p: CountParams) -> dict[str, Any]:
    """Count the documents matching a query (with skip and limit)."""
    await ctx.profiler.settle(p.collection)
    coll, spec = _count_spec(ctx, p)
    if coll is None:
        if storage_views.lookup(ctx.gateway.engine, ctx.db, p.collection) is not None:
            return {"n": await _count_on_view(ctx, p), "ok": 1.0}
        return {"n": 0, "ok": 1.0}
    if not spec.filter and not spec.skip and not spec.limit and p.hint is None:
        return {"n": count_documents(ctx.gateway.engine, coll, ctx.now()), "ok": 1.0}
    return {"n": await _count(ctx, QueryRun(coll, spec)), "ok": 1.0}


async def _count_on_view(ctx: CommandContext, p: CountParams) -> int:
    """A count on a view: its matching documents after skip, up to the limit, counted by a
    $count after the view's pipeline (MongoDB's conversion)."""
    stages = views.find_stages(p.query, None, p.skip, abs(p.limit), None)
    stages.append({"$count": "count"})
    async for chunk in views.aggregate_chunks(ctx, p.collection, stages):
        for raw in chunk:
            return int(bson.decode(raw, CODEC)["count"])
    return 0


@dataclass(frozen=True)
class DistinctParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION_BY_HAND, required=True)
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
    coll = ctx.collection(p.collection)
    spec = QuerySpec.parse(p.query, None, None, 0, 0, p.hint, collation=resolve(p.collation, coll))
    return coll, spec


async def _distinct_values(
    ctx: CommandContext, coll: CollectionInfo, run: QueryRun, key: str
) -> list[Any]:
    chunks = each_chunk(ctx.gateway, run, ctx.now())
    return await _distinct_of(chunks, key, run.spec.collation)


async def _distinct_of(
    chunks: AsyncIterator[list[bytes]], key: str, collation: Collation | None = None
) -> list[Any]:
    parts = split(key)
    seen: dict[bytes, Any] = {}
    # Under a collation, values it finds equal are one value (the first met), ordered by it.
    collate = collation.collate if collation is not None else None
    async for chunk in chunks:
        for raw in chunk:
            doc = bson.decode(raw, CODEC)
            for v in leaves(doc, parts):
                if v is MISSING:
                    continue
                # Arrays are unwound one level: their elements are the values.
                for item in v if isinstance(v, list) else (v,):
                    seen.setdefault(keys.encode(collate(item) if collate else item), item)
    if collate is not None:
        return [seen[k] for k in sorted(seen)]  # the encoded keys sort as the values do
    return sorted(seen.values(), key=functools.cmp_to_key(compare))


@REGISTRY.command("distinct", params=DistinctParams)
async def distinct(ctx: CommandContext, p: DistinctParams) -> dict[str, Any]:
    """The distinct values of a field (array values unwound) among matching documents."""
    coll, spec = _distinct_spec(ctx, p)
    if coll is None:
        if storage_views.lookup(ctx.gateway.engine, ctx.db, p.collection) is not None:
            # A view: the values among its documents that match (mongod answers `ok` as an int).
            stages = views.find_stages(p.query, None, 0, 0, None)
            chunks = views.aggregate_chunks(ctx, p.collection, stages)
            collation = views.read_collation(ctx, p.collection)
            return {"values": await _distinct_of(chunks, p.key, collation), "ok": 1}
        return {"values": [], "ok": 1.0}
    values = await _distinct_values(ctx, coll, QueryRun(coll, spec), p.key)
    return {"values": values, "ok": 1.0}


# -- explain ---------------------------------------------------------------------------------------


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
    elif name == "aggregate":
        ap = extract(AggregateParams, "aggregate", inner)
        return await explain_aggregate(ctx, ap, p.verbosity, inner)
    else:
        raise CommandError(
            ErrorCode.CommandNotFound, f"Explain failed: command '{name}' cannot be explained"
        )
    target = inner.get(name)
    if coll is None and storage_views.lookup(ctx.gateway.engine, ctx.db, str(target)):
        raise CommandError(ErrorCode.NotImplemented, "explain of a read on a view is not supported")
    run = QueryRun(coll, spec) if coll is not None else None
    planner: dict[str, Any] = {
        "namespace": ns,
        "parsedQuery": spec.filter,
        "winningPlan": winning_plan(spec, run.plan) if run else {"stage": "EOF"},
        "rejectedPlans": [],
    }
    reply: dict[str, Any] = {"explainVersion": "1", "queryPlanner": planner}
    if p.verbosity != "queryPlanner":
        n = 0
        if run is not None and coll is not None:
            if name == "distinct":
                n = len(await _distinct_values(ctx, coll, run, dp.key))
            else:
                async for chunk in each_chunk(ctx.gateway, run, ctx.now()):
                    n += len(chunk)
        reply["executionStats"] = execution_stats(n, started, run, planner["winningPlan"])
    return finish_explain(ctx, reply, inner)
