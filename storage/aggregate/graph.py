"""$graphLookup: a breadth-first search of another collection, read through the Source (so
expired documents are never found), with maxDepth, depthField and restrictSearchWithMatch.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from bson import Int64, Regex

from ebbdb.storage.aggregate.filtering import Match
from ebbdb.storage.aggregate.pipeline import run_stages
from ebbdb.storage.aggregate.stage import (
    STAGES,
    Context,
    Doc,
    Stage,
    error,
    field_path,
    group_key,
    with_path,
)
from ebbdb.storage.core.values import is_number, render, type_name
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
        for doc in docs:
            yield with_path(doc, self.as_path, self._search(doc, ctx))

    def _search(self, doc: Doc, ctx: Context) -> list[Doc]:
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
                frontier.extend(_values_at(hit, self.connect_from))
            depth += 1
            if self.max_depth is not None and depth > self.max_depth:
                break
        return list(found.values())


def _max_depth(value: Any) -> int:
    if not is_number(value):
        raise error(40100, f"maxDepth must be numeric, found type: {type_name(value)}")
    number = number_value(value)
    if is_nan(value) or number != int(number):
        raise error(40102, f"maxDepth could not be represented as a long long: {render(value)}")
    if number < 0:
        raise error(40101, f"maxDepth requires a nonnegative argument, found: {render(value)}")
    return int(number)


@STAGES.stage(
    "$graphLookup",
    document=(
        "FailedToParse",
        "the $graphLookup stage specification must be an object, but found {type}",
    ),
)
def _parse_graph_lookup(spec: Any, defined: frozenset[str]) -> Stage:
    strings: dict[str, str] = {}
    start: Expression | None = None
    restrict: dict[str, Any] | None = None
    max_depth: int | None = None
    for name, value in spec.items():
        if name == "startWith":
            start = compile_expression(value, defined)
        elif name == "maxDepth":
            max_depth = _max_depth(value)
        elif name == "restrictSearchWithMatch":
            if not isinstance(value, Mapping):
                raise error(
                    40185, f"restrictSearchWithMatch must be an object, found {type_name(value)}"
                )
            restrict = dict(value)
            parse_filter(restrict)  # a malformed filter is an error now, as MongoDB's
        elif name in ("from", "as", "connectFromField", "connectToField", "depthField"):
            if not isinstance(value, str):
                raise error(
                    40103, f"expected string as argument for {name}, found: {type_name(value)}"
                )
            strings[name] = value
        else:
            raise error(40104, f"Unknown argument to $graphLookup: {name}")
    required = ("from", "as", "connectFromField", "connectToField")
    if start is None or any(not strings.get(k) for k in required):
        raise error(
            40105,
            "$graphLookup requires 'from', 'as', 'startWith', 'connectFromField', and"
            " 'connectToField' to be specified.",
        )
    depth = strings.get("depthField")
    return GraphLookup(
        strings["from"],
        field_path(strings["as"]),
        field_path(strings["connectFromField"]),
        ".".join(field_path(strings["connectToField"])),
        start,
        restrict,
        field_path(depth) if depth is not None else None,
        max_depth,
    )
