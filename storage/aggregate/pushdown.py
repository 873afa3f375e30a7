"""Push-down: what of a pipeline's leading $match, $sort, $skip and $limit the first read of the
collection can do (so the planner picks an index for them), and which stages are left to run.
"""

from __future__ import annotations

from typing import Any

from ebbdb.storage.aggregate.filtering import Match
from ebbdb.storage.aggregate.ordering import Limit, Skip, Sort
from ebbdb.storage.aggregate.stage import Read, Stage, Variables
from ebbdb.storage.query.match import implied_filters


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
            if stage.dynamic:
                # $expr depends on the variables and is checked here; what the filter implies
                # without it (its other conditions, and the equalities its $expr states with
                # values the variables fix: {$eq: ["$f", "$$v"]}, the usual $lookup join) still
                # narrows the read. Sorting first is still right: filtering keeps the order.
                implied = implied_filters(stage.parsed, variables)
                rest = stages[i:]
                if stage.has_text:
                    # The read did the $text (only the text index can) and the rest of what the
                    # $match states without $expr: the $expr is left.
                    rest = (stage.expr_part(frozenset(variables)), *stages[i + 1 :])
                return Read(_conjunction(clauses + implied), sort), rest
            if stage.filter:
                clauses.append(dict(stage.filter))
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
