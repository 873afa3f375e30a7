"""Stages that run pipelines of their own: $lookup (a join, by fields or by a pipeline), $unionWith
(another collection's documents after these) and $facet (several pipelines over the same input).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from bson import Regex

from ebbdb.storage.aggregate.arguments import Arguments, Kind, arg, extract
from ebbdb.storage.aggregate.fields import field_path, with_path
from ebbdb.storage.aggregate.filtering import Match
from ebbdb.storage.aggregate.pipeline import Pipeline, parse_stages, pipeline_array, run_stages
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Placement, Stage, error
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.footprint import LIST_SLOT, footprint
from ebbdb.storage.core.interrupt import current
from ebbdb.storage.core.limits import approximate_size, lookup_exceeded
from ebbdb.storage.core.memory import Tracker
from ebbdb.storage.core.values import type_name
from ebbdb.storage.execution.spill import Replay
from ebbdb.storage.query.expressions import Expression, compile_expression
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.projection import render_value as render

# -- $lookup -----------------------------------------------------------------------------------------


def _check_variable_name(name: str) -> None:
    """MongoDB's rules for a user variable name ($lookup's `let`); CURRENT may be rebound."""
    if name == "CURRENT":
        return
    if not name:
        raise error(16866, "empty variable names are not allowed")
    first = name[0]
    if not (first.islower() and first.isascii()) and first.isascii():
        raise error(16867, f"'{name}' starts with an invalid character for a user variable name")
    for c in name:
        if c.isascii() and not (c.isalnum() or c == "_"):
            raise error(16868, f"'{name}' contains an invalid character for a variable name: '{c}'")


def _local_values(doc: Any, parts: tuple[str, ...], i: int = 0) -> list[Any]:
    """The values $lookup joins on: arrays along the path are searched element by element (their
    documents only), and an array at the end contributes its elements."""
    if not isinstance(doc, dict):
        return []
    value = doc.get(parts[i], MISSING)
    if value is MISSING:
        return []
    if i == len(parts) - 1:
        return list(value) if isinstance(value, list) else [value]
    if isinstance(value, dict):
        return _local_values(value, parts, i + 1)
    if isinstance(value, list):
        return [v for e in value if isinstance(e, dict) for v in _local_values(e, parts, i + 1)]
    return []


def _join_filter(values: list[Any], foreign: str) -> dict[str, Any]:
    """The foreign filter for one local document: missing joins as null; several values join as
    $in, except that $in would match a regex as a pattern, so then an $or of equalities."""
    if not values:
        values = [None]
    if len(values) == 1:
        return {foreign: {"$eq": values[0]}}
    if any(isinstance(v, (Regex, re.Pattern)) for v in values):
        return {"$or": [{foreign: {"$eq": v}} for v in values]}
    return {foreign: {"$in": values}}


class _Lookup(Stage, name="$lookup"):
    collection: str | None
    as_path: tuple[str, ...]
    local: tuple[str, ...] | None
    foreign: str | None
    let: tuple[tuple[str, Expression], ...]
    pipeline: Pipeline | None

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        # What one document's results hold is charged while they are gathered and until the
        # document has gone on to the next stage (which counts it, if it keeps it).
        tracker = current.get().memory.child("$lookup")
        try:
            for doc in docs:
                variables = ctx.variables
                if self.let:
                    variables = {**variables, **{n: e(doc, ctx.variables) for n, e in self.let}}
                stages = self.pipeline.stages if self.pipeline is not None else ()
                if self.local is not None and self.foreign is not None:
                    match = Match.of(_join_filter(_local_values(doc, self.local), self.foreign))
                    # The join's $match goes first, or right after a stage that makes the input.
                    at = 1 if stages and stages[0].makes_input else 0
                    stages = (*stages[:at], match, *stages[at:])
                found = run_stages(stages, ctx.source, self.collection, variables, ctx.collation)
                joined = self._gathered(found, ctx, tracker)
                yield with_path(doc, self.as_path, joined)
                tracker.set(0)
        finally:
            tracker.close()

    def _gathered(self, found: Iterator[Doc], ctx: Context, tracker: Tracker) -> list[Doc]:
        """The results for one document, charged to `tracker`; 4568 once they take more than
        the operation's limit, as mongod measures them."""
        limit = ctx.limits.lookup_bytes
        joined: list[Doc] = []
        measured = 0
        for result in found:
            measured += approximate_size(result, limit)
            if measured > limit:
                raise lookup_exceeded(self.collection, limit)
            tracker.charge(footprint(result) + LIST_SLOT)
            joined.append(result)
        return joined


@STAGES.stage("$lookup")
def _parse_lookup(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping):
        raise QueryError(
            "FailedToParse",
            f"the $lookup stage specification must be an object, but found {type_name(spec)}",
        )
    collection: str | None = None
    as_field = local = foreign = ""
    let: Mapping[str, Any] | None = None
    raw_pipeline: list[Mapping[str, Any]] | None = None
    for name, value in spec.items():
        if name == "pipeline":
            raw_pipeline = pipeline_array(value)
            continue
        if name == "let":
            if not isinstance(value, Mapping):
                raise QueryError(
                    "FailedToParse",
                    f"$lookup argument 'let: {render(value)}' must be an object, is type"
                    f" {type_name(value)}",
                )
            let = value
            continue
        if name == "from":
            if type(value) is not str:  # (nor is Code, though pymongo's is a str subclass)
                raise QueryError(
                    "FailedToParse",
                    f"$lookup 'from' field must be a string, but found {type_name(value)}",
                )
            collection = value
            continue
        if type(value) is not str:
            raise QueryError(
                "FailedToParse",
                f"$lookup argument '{name}: {render(value)}' must be a string, found"
                f" {name}: {render(value)}: {type_name(value)}",
            )
        if name == "as":
            as_field = value
        elif name == "localField":
            local = value
        elif name == "foreignField":
            foreign = value
        else:
            raise QueryError("FailedToParse", f"unknown argument to $lookup: {name}")
    if collection is None:
        if raw_pipeline is None:
            raise QueryError("FailedToParse", "must specify 'pipeline' when 'from' is empty")
        if not raw_pipeline or "$documents" not in raw_pipeline[0]:
            raise QueryError(
                "FailedToParse",
                "$lookup stage without explicit collection must have a pipeline with $documents as"
                " first stage",
            )
    elif not collection:
        raise QueryError("InvalidNamespace", "invalid $lookup namespace: empty collection name")
    if not as_field:
        raise QueryError("FailedToParse", "must specify 'as' field for a $lookup")
    if raw_pipeline is not None:
        if bool(local) != bool(foreign):
            raise QueryError(
                "FailedToParse",
                "$lookup requires both or neither of 'localField' and 'foreignField' to be"
                " specified",
            )
    else:
        if not local or not foreign:
            raise QueryError(
                "FailedToParse",
                "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be"
                " specified",
            )
        if let is not None:
            raise QueryError(
                "FailedToParse", "$lookup with a 'let' argument must also specify 'pipeline'"
            )
    lets: list[tuple[str, Expression]] = []
    for name, expr in (let or {}).items():
        _check_variable_name(name)
        lets.append((name, compile_expression(expr, defined)))
    pipeline = None
    if raw_pipeline is not None:
        pipeline = parse_stages(raw_pipeline, defined | {n for n, _ in lets}, "$lookup")
    return _Lookup(
        collection,
        field_path(as_field),
        field_path(local) if local else None,
        ".".join(field_path(foreign)) if foreign else None,
        tuple(lets),
        pipeline,
    )


# -- $unionWith --------------------------------------------------------------------------------------


class _UnionWith(Stage, name="$unionWith"):
    collection: str | None
    pipeline: Pipeline

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        yield from docs
        yield from run_stages(
            self.pipeline.stages, ctx.source, self.collection, ctx.variables, ctx.collation
        )


class _UnionWithArgs(Arguments):
    coll: str | None = arg("coll", Kind.STRING)
    pipeline: list[Mapping[str, Any]] | None = arg(
        "pipeline", Kind.ARRAY, parse=lambda value, _: pipeline_array(value)
    )


@STAGES.stage("$unionWith")
def _parse_union_with(spec: Any, defined: frozenset[str]) -> Stage:
    if type(spec) is str:  # (not Code, a str subclass)
        return _UnionWith(spec, Pipeline(()))
    if not isinstance(spec, Mapping):
        raise QueryError(
            "FailedToParse",
            "the $unionWith stage specification must be an object or string, but found"
            f" {type_name(spec)}",
        )
    a = extract(_UnionWithArgs, "$unionWith", spec)
    collection, raw = a.coll, a.pipeline or []
    if collection is None and not (raw and "$documents" in raw[0]):
        raise QueryError(
            "FailedToParse",
            "$unionWith stage without explicit collection must have a pipeline with $documents as"
            " first stage",
        )
    return _UnionWith(collection, parse_stages(raw, defined, "$unionWith"))


# -- $facet ------------------------------------------------------------------------------------------


class _Facet(Stage, name="$facet"):
    facets: tuple[tuple[str, Pipeline], ...]

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        # Each pipeline reads the whole input: it is held (counted; past the limit, spilled or
        # refused) unless there is only one to read it. mongod streams it through all of them
        # at once instead; here they run one after the other.
        limits = ctx.limits
        rows: Iterable[Doc] = docs
        if len(self.facets) > 1:
            rows = Replay(docs, limits, limits.facet_bytes, "$facet")
        tracker = current.get().memory.child("$facet")
        try:
            out: Doc = {}
            for name, pipeline in self.facets:
                results: Iterator[Doc] = iter(rows)
                for stage in pipeline.stages:
                    results = stage.run(results, ctx)
                kept: list[Doc] = []
                for result in results:
                    tracker.charge(footprint(result) + LIST_SLOT)
                    kept.append(result)
                out[name] = kept
            if isinstance(rows, Replay):
                rows.close()
            yield out
        finally:
            tracker.close()
            if isinstance(rows, Replay):
                rows.close()


@STAGES.stage("$facet", Placement(in_facet=False))
def _parse_facet(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping) or not spec:
        raise error(
            40169,
            f"the $facet specification must be a non-empty object, but found: $facet: {render(spec)}",
        )
    facets = []
    for name, raw in spec.items():
        field_path(name)
        if not isinstance(raw, list):
            raise error(
                40170, f"arguments to $facet must be arrays, {name} is type {type_name(raw)}"
            )
        for element in raw:
            if not isinstance(element, Mapping) or not element:
                raise error(
                    40171,
                    "elements of arrays in $facet spec must be non-empty objects, "
                    f"{name} argument contained an element of type {type_name(element)}:"
                    f" {render(element)}",
                )
        facets.append((name, parse_stages(raw, defined, "$facet")))
    return _Facet(tuple(facets))
