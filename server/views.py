"""Views as the server sees them: how find, count and distinct read one, as an aggregation over
the view, MongoDB's own conversion, so the view's pipeline runs in front of the command's filter,
sort, skip, limit and projection; and defining one. What a command naming a view is refused is
server/view_guard.py's; definitions, checks and resolution are storage/execution/views.py's."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from bson import Int64

from ebbdb.server.context import CommandContext
from ebbdb.server.cursors import PipelineRun
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.latency import Facts
from ebbdb.storage.aggregate import EngineSource, parse_pipeline, run_pipeline
from ebbdb.storage.core.collation import Collation, normalise, parse_collation
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import type_name
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.execution import views
from ebbdb.storage.query.expressions import command_variables

# -- reading a view ------------------------------------------------------------------------------


def find_stages(
    filter: Mapping[str, Any] | None,
    sort: Mapping[str, Any] | None,
    skip: int,
    limit: int,
    projection: Mapping[str, Any] | None,
) -> list[dict[str, Any]]:
    """A find's filter, sort, skip, limit and projection as the stages after a view's pipeline,
    in MongoDB's order."""
    stages: list[dict[str, Any]] = []
    if filter:
        stages.append({"$match": dict(filter)})
    if sort:
        stages.append({"$sort": dict(sort)})
    if skip:
        stages.append({"$skip": Int64(skip)})
    if limit:
        stages.append({"$limit": Int64(limit)})
    if projection:
        stages.append({"$project": dict(projection)})
    return stages


async def aggregate_chunks(
    ctx: CommandContext, collection: str, stages: list[Any], let: dict[str, Any] | None = None
) -> AsyncIterator[list[bytes]]:
    """Every result of an aggregation on `collection` (a view, for count and distinct), batch by
    batch, pulled on a reader thread; documents expired at each batch's time are left out."""
    now = ctx.now()
    collation = read_collation(ctx, collection)
    facts = Facts(ctx.listener, ctx.stats.latency)
    source = EngineSource(ctx.gateway.engine, ctx.db, now, facts, collation)

    def set_now(now_ms: int) -> None:
        source.now_ms = now_ms

    pipeline = parse_pipeline(stages, defined=frozenset(let or {}))
    variables = command_variables(let, now)
    results = run_pipeline(pipeline, source, collection, variables, collation)
    run = PipelineRun(iter(results), set_now, ctx.gateway.read)
    while not run.exhausted:
        yield await run.fill(None, ctx.now())


# -- defining views ------------------------------------------------------------------------------


def _check_pipeline(ns: str, pipeline: list[Any]) -> None:
    views.check_pipeline(ns, pipeline)
    try:
        parse_pipeline(pipeline)
    except QueryError as exc:
        if exc.code_name in ("NotImplemented", "Location40324", "TypeMismatch"):
            raise
        # As MongoDB: a stage that is known but malformed is reported in the view's name.
        raise QueryError(
            exc.code_name, f"Invalid pipeline for view {ns} :: caused by :: {exc.message}"
        ) from None


def _check_view_on(view_on: str) -> None:
    if not view_on:
        raise CommandError(ErrorCode.BadValue, "'viewOn' cannot be empty")


def check_collation(collation: Any) -> Mapping[str, Any] | None:
    """The collation a view is stored with: MongoDB's normalised document, or None for the
    simple one (a bad collation document gets MongoDB's error)."""
    if collation is None:
        return None
    if not isinstance(collation, Mapping):
        raise CommandError(
            ErrorCode.TypeMismatch,
            f"BSON field 'create.collation' is the wrong type '{type_name(collation)}', "
            "expected type 'object'",
        )
    return normalise(collation) if collation else None


def read_collation(ctx: CommandContext, collection: str | None) -> Collation | None:
    """The collation a read through view `collection` runs under: the view's own (the
    dispatcher refused a read that names another); None for the simple one or no view."""
    if collection is None:
        return None
    view = views.lookup(ctx.gateway.engine, ctx.db, collection)
    if view is None or view.collation is None:
        return None
    return parse_collation(view.collation)


async def create_view(
    ctx: CommandContext,
    name: str,
    view_on: str | None,
    pipeline: list[Any] | None,
    options: Mapping[str, Any],
) -> dict[str, Any]:
    """create with `viewOn`: check the definition and store it in `system.views`."""
    if view_on is None:
        raise CommandError(
            ErrorCode.InvalidOptions, "'pipeline' requires 'viewOn' to also be specified"
        )
    if "idIndex" in options:
        raise CommandError(
            ErrorCode.InvalidOptions, "'viewOn' and 'idIndex' cannot both be specified"
        )
    _check_view_on(view_on)
    stages = list(pipeline or [])
    ns = ctx.ns(name)
    _check_pipeline(ns, stages)
    collation = check_collation(options.get("collation"))
    under = views.lookup(ctx.gateway.engine, ctx.db, view_on)
    if under is not None and under.collation != collation:
        raise CommandError(
            ErrorCode.OptionNotSupportedOnView,
            f"View {ns} has conflicting collation with view {under.ns}",
        )
    view = views.View(ctx.db, name, view_on, tuple(stages), collation)
    await ctx.gateway.write_stamped(views.create_view, ctx.gateway.engine, view)
    return {"ok": 1.0}


async def modify_view(
    ctx: CommandContext, name: str, view_on: str | None, pipeline: list[Any] | None, index: Any
) -> dict[str, Any]:
    """collMod of a view: a new `viewOn` and/or `pipeline` (nothing else may be changed)."""
    if index is not None:
        raise CommandError(ErrorCode.InvalidOptions, "option not supported on a view: index")
    if view_on is not None:
        _check_view_on(view_on)
    if pipeline is not None:
        _check_pipeline(ctx.ns(name), pipeline)
    if view_on is not None or pipeline is not None:
        await ctx.gateway.write_stamped(
            views.modify_view, ctx.gateway.engine, ctx.db, name, view_on, pipeline
        )
    return {"ok": 1.0}


def refuse_view_options(view_on: str | None, pipeline: list[Any] | None) -> None:
    """collMod of a collection: the options only a view has are refused."""
    for option, value in (("pipeline", pipeline), ("viewOn", view_on)):
        if value is not None:
            raise CommandError(
                ErrorCode.InvalidOptions, f"option only supported on a view: {option}"
            )


def list_entries(engine: Engine, db: str, name_only: bool) -> list[dict[str, Any]]:
    """The listCollections entries of the database's views."""
    if name_only:
        return [{"name": v.name, "type": "view"} for v in views.views(engine, db)]
    return [
        {"name": v.name, "type": "view", "options": v.options(), "info": {"readOnly": True}}
        for v in views.views(engine, db)
    ]
