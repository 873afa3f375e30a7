"""Server-side JavaScript stays refused: ebbdb runs no JavaScript engine, and MongoDB deprecates
$where, $function, $accumulator and mapReduce in favour of the aggregation language. Each refusal
(238 NotImplemented) names what to use instead."""

from __future__ import annotations

from typing import NoReturn

from ebbdb.storage.core.errors import QueryError

#: What to use instead of each JavaScript feature.
ALTERNATIVES = {
    "$where": "use $expr with aggregation expressions instead, e.g. "
    "{$expr: {$gt: ['$spent', '$budget']}}",
    "$function": "use aggregation expressions instead ($let, $cond, $switch, $map, $filter, "
    "$reduce, $regexMatch, ...)",
    "$accumulator": "use $group's accumulators instead ($sum, $push, $addToSet, $top, ...), "
    "or $push then $reduce in a later stage",
    "mapReduce": "use an aggregation pipeline instead: $match, $group (the reduce), "
    "$project (the finalize) and $merge or $out for the output collection",
}


def refuse_javascript(feature: str) -> NoReturn:
    """Raise the refusal of a JavaScript feature, naming its alternative."""
    raise QueryError(
        "NotImplemented",
        f"{feature} is not supported: ebbdb does not run server-side JavaScript, which MongoDB "
        f"deprecates; {ALTERNATIVES[feature]}",
    )
