"""$percentile and $median (MongoDB 7.0, method "approximate"): the specification both take, read
once, and the three forms built from it: the $group accumulators, the expressions over an array,
and the $setWindowFields window functions (which windows.py runs over each document's window).

mongod 7.0 computes the accumulators with a t-digest, the expressions and window functions
exactly. A t-digest keeps every value while it holds few, so on the inputs people check by hand
it answers what the exact discrete percentile answers: the value of rank ceil(p * n) - 1 among the
n numeric inputs sorted. ebbdb always computes that exact value (on millions of values mongod's
answer may differ by the t-digest's error; ebbdb's is the true percentile)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ebbdb.storage.core.limits import Tracked
from ebbdb.storage.core.values import is_number, render, to_float
from ebbdb.storage.query.expressions.core import (
    Accumulator,
    Expression,
    Variables,
    compile_expression,
    fail,
    fmt_double,
    operator,
    show,
    type_name,
)

APPROXIMATE = "approximate"
_P_RANGE = "The $percentile 'p' field must be an array of numbers from [0.0, 1.0], but found: "

#: The code for a specification that is not an object: (accumulator, expression), per operator.
_NOT_OBJECT = {"$percentile": (7429703, 7436200), "$median": (7436100, 7436201)}


# -- the specification -------------------------------------------------------------------------------

#: p, as MongoDB fixes it: the percentiles themselves, or (when p names a variable) how to get them.
Ps = tuple[float, ...] | Expression


@dataclass(frozen=True)
class Quantiles:
    """One parsed {$percentile: {input, p, method}} or {$median: {input, method}}."""

    op: str
    input: Expression
    ps: Ps

    @property
    def median(self) -> bool:
        return self.op == "$median"

    def percentiles(self, variables: Variables) -> tuple[float, ...]:
        return self.ps if isinstance(self.ps, tuple) else _check_p(self.ps({}, variables))


def parse(op: str, spec: Any, defined: frozenset[str], as_expression: bool) -> Quantiles:
    """Read a specification as mongod's IDL reads it (field by field: 40415 for an unknown one,
    14 for a method that is not a string, BadValue for one that is not "approximate"; then 40414
    for each missing field in the order input, p, method), then `p`. Raises QueryError."""
    if not isinstance(spec, Mapping):
        code = _NOT_OBJECT[op][1 if as_expression else 0]
        fail(code, f"specification must be an object; found {op}: {render(spec)}")
    fields = ("input", "method") if op == "$median" else ("input", "p", "method")
    for name, value in spec.items():
        if name not in fields:
            fail(40415, f"BSON field '{op}.{name}' is an unknown field.")
        if name == "method":
            if not isinstance(value, str):
                fail(
                    "TypeMismatch",
                    f"BSON field '{op}.method' is the wrong type '{type_name(value)}', expected"
                    " type 'string'",
                )
            if value != APPROXIMATE:
                fail("BadValue", "Currently only 'approximate' can be used as percentile 'method'.")
    for name in fields:
        if name not in spec:
            fail(40414, f"BSON field '{op}.{name}' is missing but a required field")
    input_f = compile_expression(spec["input"], defined)
    ps: Ps = (0.5,) if op == "$median" else _parse_p(spec["p"], defined)
    return Quantiles(op, input_f, ps)


def _parse_p(spec: Any, defined: frozenset[str]) -> Ps:
    """`p` must be constant once mongod has folded it: no field path anywhere (7750300). A
    constant is checked now; one that reads a variable is checked when first used."""
    if _reads(spec, field_paths=True):
        fail(
            7750300,
            "The $percentile 'p' field must be an array of constant values, but found value: "
            f"{render(spec)}.",
        )
    compiled = compile_expression(spec, defined)
    if _reads(spec, field_paths=False):
        return compiled
    return _check_p(compiled({}, {}))


def _reads(spec: Any, field_paths: bool) -> bool:
    """Whether an expression reads the document (`field_paths`: a field path, $$ROOT, $$CURRENT
    or $rand) or else any other variable."""
    if isinstance(spec, str):
        if not spec.startswith("$"):
            return False
        if not spec.startswith("$$"):
            return field_paths
        name = spec[2:].split(".", 1)[0]
        return (name in ("ROOT", "CURRENT")) == field_paths
    if isinstance(spec, list):
        return any(_reads(x, field_paths) for x in spec)
    if isinstance(spec, Mapping):
        if "$literal" in spec:
            return False
        if field_paths and "$rand" in spec:
            return True
        return any(_reads(x, field_paths) for x in spec.values())
    return False


def _check_p(value: Any) -> tuple[float, ...]:
    if type(value) is not list or not value:
        fail(7750301, _P_RANGE + show(value))
    ps = []
    for x in value:
        if not is_number(x):
            fail(7750302, _P_RANGE + show(x))
        p = to_float(x)
        if p < 0 or p > 1:
            fail(7750303, _P_RANGE + fmt_double(p))
        ps.append(p)
    return tuple(ps)


# -- the computation --------------------------------------------------------------------------------


def _as_double(x: Any) -> float | None:
    """What an input contributes: a number as a double; anything else is ignored."""
    return to_float(x) if is_number(x) else None


def _rank(n: int, p: float) -> int:
    # The discrete percentile's 0-based rank; NaN (which passes mongod's range check) reads as 0.
    if not p > 0:
        return 0
    return min(n - 1, max(0, math.ceil(p * n) - 1))


def percentiles_of(values: list[float], ps: tuple[float, ...]) -> list[float]:
    """The discrete percentiles of `values` (not empty), NaN sorting first as in BSON order."""
    ordered = sorted(values, key=lambda f: (f == f, f))
    return [ordered[_rank(len(ordered), p)] for p in ps]


def _final(q: Quantiles, values: list[float], ps: tuple[float, ...], window: bool) -> Any:
    """The result: $median a double, $percentile an array of doubles in p's order. Without a
    numeric input: null for $median, and for $percentile an array of nulls (one per p), except
    as a window function, where mongod 7.0 answers a single null."""
    if not values:
        return None if q.median or window else [None] * len(ps)
    found = percentiles_of(values, ps)
    return found[0] if q.median else found


class _State:
    """An accumulator over documents: holds each numeric input (as $push holds its values)."""

    __slots__ = ("q", "window", "ps", "values", "held")

    def __init__(self, q: Quantiles, window: bool) -> None:
        self.q = q
        self.window = window
        self.ps: tuple[float, ...] | None = None
        self.values: list[float] = []
        self.held = Tracked(
            q.op, limit=0
        )  # mongod has no limit of its own for these: the stage's counts

    def add(self, doc: dict[str, Any], variables: Variables) -> None:
        if self.ps is None:
            self.ps = self.q.percentiles(variables)
        x = _as_double(self.q.input(doc, variables))
        if x is not None:
            self.held.add(x)
            self.values.append(x)

    def result(self) -> Any:
        if self.ps is None:  # an empty window
            return None
        return _final(self.q, self.values, self.ps, self.window)


def _compiler(op: str, window: bool) -> Callable[[Any, frozenset[str]], Callable[[], Accumulator]]:
    def compile_form(spec: Any, defined: frozenset[str]) -> Callable[[], Accumulator]:
        q = parse(op, spec, defined, as_expression=False)
        return lambda: _State(q, window)

    return compile_form


#: The $group accumulators: op -> (spec, defined) -> a factory of fresh accumulators.
ACCUMULATORS = {op: _compiler(op, False) for op in _NOT_OBJECT}
#: The window functions, run by $setWindowFields over each document's window as accumulators.
WINDOW_FUNCTIONS = {op: _compiler(op, True) for op in _NOT_OBJECT}


@operator(*_NOT_OBJECT)
def _expression(spec: Any, defined: frozenset[str], op: str) -> Expression:
    """The expression: a number is its own every percentile; an array gives its numbers; anything
    else has none."""
    q = parse(op, spec, defined, as_expression=True)

    def evaluate(doc: dict[str, Any], v: Variables) -> Any:
        ps = q.percentiles(v)
        x = q.input(doc, v)
        if type(x) is list:
            found = [f for f in map(_as_double, x) if f is not None]
        else:
            single = _as_double(x)
            found = [] if single is None else [single]
        return _final(q, found, ps, window=False)

    return evaluate
