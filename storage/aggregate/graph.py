"""$graphLookup: a breadth-first search of another collection, read through the Source (so
expired documents are never found), with maxDepth, depthField and restrictSearchWithMatch.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from bson import Int64, Regex

from ebbdb.storage.aggregate.arguments import Arguments, Kind, Refusal, arg
from ebbdb.storage.aggregate.fields import field_path, group_key, with_path
from ebbdb.storage.aggregate.filtering import Match
from ebbdb.storage.aggregate.pipeline import run_stages
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Stage, error
from ebbdb.storage.core.footprint import DICT_ENTRY, footprint
from ebbdb.storage.core.interrupt import current
from ebbdb.storage.core.limits import DEFAULT_MEMORY_BYTES
from ebbdb.storage.core.memory import Tracker
from ebbdb.storage.core.values import render
from ebbdb.storage.query.compare import is_nan, number_value
from ebbdb.storage.query.expressions import Expression, compile_expression
from ebbdb.storage.query.match import parse_filter
from ebbdb.storage.query.paths import MISSING, leaves


def _values_at(doc: Doc, parts: tuple[str, ...]) -> list[Any]:
    """The values a path reaches (arrays on the way searched, an array at the end unwound)."""
    out: list[Any] = []
    for value in leaves(doc, parts):
        if value is MISSING:
            continue
        out.extend(value) if isinstance(value, list) else out.append(value)
    return out


def _connect_filter(field: str, values: list[Any]) -> dict[str, Any]:
    """Documents whose `field` equals one of `values`: $in, except that $in would take a regular
    expression as a pattern, so then an $or of equalities."""
    if any(isinstance(v, (Regex, re.Pattern)) for v in values):
        return {"$or": [{field: {"$eq": v}} for v in values]}
    return {field: {"$in": values}}


class GraphLookup(Stage, name="$graphLookup"):
    collection: str
    as_path: tuple[str, ...]
    connect_from: tuple[str, ...]
    connect_to: str
    start_with: Expression
    restrict: dict[str, Any] | None
    depth_field: tuple[str, ...] | None
    max_depth: int | None

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        # What one document's search found is charged until the document has gone on.
        tracker = current.get().memory.child("$graphLookup", DEFAULT_MEMORY_BYTES)
        try:
            for doc in docs:
                yield with_path(doc, self.as_path, self._search(doc, ctx, tracker))
                tracker.set(0)
        finally:
            tracker.close()

    def _search(self, doc: Doc, ctx: Context, tracker: Tracker) -> list[Doc]:
        start = self.start_with(doc, ctx.variables)
        if start is MISSING:
            start = None
        frontier = list(start) if isinstance(start, list) else [start]
        queried: set[Any] = set()
        found: dict[Any, Doc] = {}
        depth = 0
        while frontier:
            values = []
            for v in frontier:
                key = group_key(v)
                if key not in queried:
                    queried.add(key)
                    values.append(v)
            if not values:
                break
            flt = _connect_filter(self.connect_to, values)
            if self.restrict:
                flt = {"$and": [flt, self.restrict]}
            stages = (Match.of(flt),)
            reached = run_stages(stages, ctx.source, self.collection, ctx.variables, ctx.collation)
            frontier = []
            for hit in reached:
                key = group_key(hit.get("_id"))
                if key in found:
                    continue
                if self.depth_field is not None:
                    hit = with_path(hit, self.depth_field, Int64(depth))
                found[key] = hit
                tracker.charge(footprint(hit) + DICT_ENTRY)
                if tracker.over_limit:
                    # internalDocumentSourceGraphLookupMaxMemoryBytes: mongod cannot spill it.
                    raise error(40099, "$graphLookup reached maximum memory consumption")
                frontier.extend(_values_at(hit, self.connect_from))
            depth += 1
            if self.max_depth is not None and depth > self.max_depth:
                break
        return list(found.values())


def _max_depth(value: Any, defined: frozenset[str]) -> int:
    number = number_value(value)
    if is_nan(value) or number != int(number):
        raise error(40102, f"maxDepth could not be represented as a long long: {render(value)}")
    if number < 0:
        raise error(40101, f"maxDepth requires a nonnegative argument, found: {render(value)}")
    return int(number)


def _restriction(value: Any, defined: frozenset[str]) -> dict[str, Any]:
    restrict = dict(value)
    parse_filter(restrict)  # a malformed filter is an error now, as MongoDB's
    return restrict


_REQUIRES = Refusal(
    40105,
    "$graphLookup requires 'from', 'as', 'startWith', 'connectFromField', and 'connectToField' to"
    " be specified.",
)
_STRING = Refusal(40103, "expected string as argument for {name}, found: {type}")


class _GraphLookupArgs(
    Arguments,
    not_document=Refusal(
        "FailedToParse", "the $graphLookup stage specification must be an object, but found {type}"
    ),
    unknown=Refusal(40104, "Unknown argument to $graphLookup: {name}"),
    missing=_REQUIRES,
):
    from_: str = arg("from", Kind.STRING, required=True, mismatch=_STRING)
    as_: str = arg("as", Kind.STRING, required=True, mismatch=_STRING)
    connect_from: str = arg("connectFromField", Kind.STRING, required=True, mismatch=_STRING)
    connect_to: str = arg("connectToField", Kind.STRING, required=True, mismatch=_STRING)
    depth_field: str | None = arg("depthField", Kind.STRING, mismatch=_STRING)
    start: Expression = arg("startWith", required=True, parse=compile_expression)
    max_depth: int | None = arg(
        "maxDepth",
        Kind.NUMBER,
        mismatch=Refusal(40100, "maxDepth must be numeric, found type: {type}"),
        parse=_max_depth,
    )
    restrict: dict[str, Any] | None = arg(
        "restrictSearchWithMatch",
        Kind.OBJECT,
        mismatch=Refusal(40185, "restrictSearchWithMatch must be an object, found {type}"),
        parse=_restriction,
    )


@STAGES.stage("$graphLookup", arguments=_GraphLookupArgs)
def _parse_graph_lookup(a: _GraphLookupArgs, defined: frozenset[str]) -> Stage:
    if not (a.from_ and a.as_ and a.connect_from and a.connect_to):  # an empty one is missing
        raise _REQUIRES.error()
    return GraphLookup(
        a.from_,
        field_path(a.as_),
        field_path(a.connect_from),
        ".".join(field_path(a.connect_to)),
        a.start,
        a.restrict,
        field_path(a.depth_field) if a.depth_field is not None else None,
        a.max_depth,
    )
