"""Push-down: what of a pipeline's leading $match, $sort, $skip and $limit the first read of the
collection can do (so the planner picks an index for them), and which stages are left to run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from storage.aggregate.filtering import Match, contains_expr
from storage.aggregate.ordering import Limit, Skip, Sort
from storage.aggregate.stage import Read, Stage, Variables
from storage.errors import QueryError
from storage.query.compare import (
    RANK_BINDATA,
    RANK_BOOL,
    RANK_DATE,
    RANK_NUMBER,
    RANK_OBJECTID,
    RANK_STRING,
    RANK_TIMESTAMP,
    is_nan,
    rank,
)
from storage.query.expressions import compile_expression
from storage.query.paths import MISSING


def plan_read(stages: tuple[Stage, ...], variables: Variables) -> tuple[Read, tuple[Stage, ...]]:
    """What of the leading stages the first read can do, and the stages left to run here: leading
    $match filters and one $sort among them (filtering commutes with sorting), then the $skip and
    $limit right after. The read's filter and sort go to the planner, so an index serves them."""
    clauses: list[dict[str, Any]] = []
    sort: dict[str, Any] | None = None
    i = 0
    while i < len(stages):
        stage = stages[i]
        if isinstance(stage, Match):
            if stage.predicate is None:
                # $expr depends on the variables and is checked here; its equalities with values
                # the variables fix ({$eq: ["$f", "$$v"]}, the usual $lookup join) still narrow the
                # read. Sorting first is still right: filtering keeps the order.
                narrowing = _narrowing(stage.filter, variables)
                return Read(_conjunction(clauses + narrowing), sort), stages[i:]
            if stage.filter:
                clauses.append(stage.filter)
        elif isinstance(stage, Sort) and sort is None:
            sort = stage.keys
        else:
            break
        i += 1
    skip = 0
    limit: int | None = None
    while i < len(stages):
        stage = stages[i]
        if isinstance(stage, Skip):
            skip += stage.count
            if limit is not None:
                limit = max(limit - stage.count, 0)
        elif isinstance(stage, Limit):
            limit = stage.count if limit is None else min(limit, stage.count)
        else:
            break
        i += 1
    read = Read(_conjunction(clauses), sort, skip, limit or 0, empty=limit == 0)
    return read, stages[i:]


def _conjunction(clauses: list[dict[str, Any]]) -> dict[str, Any] | None:
    if not clauses:
        return None
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def _narrowing(flt: Mapping[str, Any], variables: Variables) -> list[dict[str, Any]]:
    """Filters every document matching `flt` also matches (a superset, so the $match stays): its
    plain top-level conditions and the equalities its $expr states with fixed values."""
    out: list[dict[str, Any]] = []
    for key, value in flt.items():
        if key == "$expr":
            out += _expr_equalities(value, variables)
        elif not contains_expr({key: value}):
            out.append({key: value})
    return out


def _expr_equalities(spec: Any, variables: Variables) -> list[dict[str, Any]]:
    if not isinstance(spec, Mapping) or len(spec) != 1:
        return []
    op, arg = next(iter(spec.items()))
    if op == "$and" and isinstance(arg, list):
        return [c for a in arg for c in _expr_equalities(a, variables)]
    if op != "$eq" or not isinstance(arg, list) or len(arg) != 2:
        return []
    for path, other in (arg, arg[::-1]):
        if not (isinstance(path, str) and path.startswith("$") and not path.startswith("$$")):
            continue
        value = _fixed_value(other, variables)
        # Only scalars: for them {$expr: {$eq: ["$f", v]}} implies the matcher's {f: v} (an array or
        # a path through arrays gives an array in $expr, never equal to a scalar), while null,
        # arrays, documents and regexes mean other things to the matcher.
        if value is not MISSING and rank(value) in _NARROWING_RANKS and not is_nan(value):
            return [{path[1:]: {"$eq": value}}]
    return []


_NARROWING_RANKS = frozenset(
    (RANK_NUMBER, RANK_STRING, RANK_OBJECTID, RANK_BOOL, RANK_DATE, RANK_BINDATA, RANK_TIMESTAMP)
)


def _fixed_value(spec: Any, variables: Variables) -> Any:
    """The value of an expression that does not depend on the document, or MISSING."""
    if isinstance(spec, str) and spec.startswith("$$"):
        name = spec[2:].partition(".")[0]
        if name in ("ROOT", "CURRENT") or name not in variables:
            return MISSING
        try:
            return compile_expression(spec, frozenset(variables))({}, variables)
        except QueryError:
            return MISSING
    if isinstance(spec, str):
        return MISSING if spec.startswith("$") else spec
    if isinstance(spec, (Mapping, list)) or spec is None:
        return MISSING
    return spec
