"""Server-side JavaScript's gate: $where, $function, $accumulator and mapReduce run in the
embedded engine (storage/query/javascript_engine.py, V8 from the optional extra `ebbdb[js]`),
imported at the first use so that start-up never loads it.

Refusals, in mongod's words: with scripting off (--noscripting, security.javascriptEnabled:
false; the operation's token says so) each feature's own code; without the extra installed, 238
NotImplemented naming the extra and what to use instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from ebbdb.storage.core import interrupt
from ebbdb.storage.core.errors import QueryError

if TYPE_CHECKING:
    from ebbdb.storage.query.javascript_engine import Runtime

#: How to install the engine.
EXTRA = "pip install 'ebbdb[js]'"

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

#: mongod's refusal of each feature with scripting off: (code, message).
_DISABLED = {
    "$where": ("Location6108304", "no globalScriptEngine in $where parsing"),
    "$function": (
        "Location31264",
        "Cannot run server-side javascript without the javascript engine enabled",
    ),
    "$accumulator": (
        "Location31264",
        "Cannot run server-side javascript without the javascript engine enabled",
    ),
    "mapReduce": (
        "Location31246",
        "Cannot run server-side javascript without the javascript engine enabled",
    ),
}


def refuse_javascript(feature: str) -> NoReturn:
    """The refusal of a JavaScript feature when the engine is not installed: 238, naming the
    extra and the feature's alternative."""
    raise QueryError(
        "NotImplemented",
        f"{feature} needs server-side JavaScript, which ebbdb runs with an optional engine that "
        f"is not installed: {EXTRA} (MongoDB deprecates server-side JavaScript; "
        f"{ALTERNATIVES[feature]})",
    )


def check_scripting(feature: str) -> None:
    """Raise mongod's refusal of `feature` if the running operation may not run JavaScript."""
    if not getattr(interrupt.current.get(), "scripting", True):
        code, message = _DISABLED[feature]
        raise QueryError(code, message)


def refuse_in_validator(spec: Any) -> None:
    """A validator's `$expr` may not hold `$function` (mongod's 4660800), wherever it sits."""
    stack = [spec]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            if "$function" in item:
                raise QueryError("Location4660800", "$function cannot be used inside a validator.")
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def require_engine(feature: str) -> type[Runtime]:
    """The engine's context class (imported now, at the first JavaScript); 238 naming the extra
    when it is not installed."""
    try:
        from ebbdb.storage.query.javascript_engine import Runtime
    except ImportError:
        refuse_javascript(feature)
    return Runtime


def runtime(feature: str, scope: Mapping[str, Any] | None = None) -> Runtime:
    """A new JavaScript context for `feature` (one operation's), with `scope`'s variables; the
    refusals above when scripting is off or the engine is missing."""
    check_scripting(feature)
    return require_engine(feature)(scope)


__all__ = [
    "ALTERNATIVES",
    "EXTRA",
    "check_scripting",
    "refuse_in_validator",
    "refuse_javascript",
    "require_engine",
    "runtime",
]
