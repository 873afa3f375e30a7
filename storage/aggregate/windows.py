"""$setWindowFields: documents sorted by partition and `sortBy`, each output field a window
function computed over its partition (a whole-partition, documents or range window), with MongoDB
7.0's parse checks and codes.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from bson import Decimal128

from ebbdb.storage.aggregate.arguments import Arguments, Kind, Refusal, arg
from ebbdb.storage.aggregate.fields import field_path, get_path, group_key, with_path
from ebbdb.storage.aggregate.ordering import Sort, sort_docs
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Stage, Variables, error
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.footprint import LIST_SLOT, footprint
from ebbdb.storage.core.interrupt import current
from ebbdb.storage.core.limits import window_exceeded
from ebbdb.storage.core.values import is_constant, is_number, render, to_float, type_name
from ebbdb.storage.query import dates
from ebbdb.storage.query.compare import RANK_DATE, compare, date_ms, number_value, rank
from ebbdb.storage.query.expressions import Accumulator, Expression, compile_accumulator
from ebbdb.storage.query.expressions import compile_expression as _compile
from ebbdb.storage.query.expressions.percentiles import WINDOW_FUNCTIONS as _QUANTILES
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.sort import SortSpec

UNBOUNDED = "unbounded"
CURRENT = "current"

#: Milliseconds in each unit $derivative and $integral accept (week or smaller).
_UNIT_MS = {
    "week": 7 * 86_400_000,
    "day": 86_400_000,
    "hour": 3_600_000,
    "minute": 60_000,
    "second": 1000,
    "millisecond": 1,
}


def _parse_error(message: str) -> QueryError:
    return QueryError("FailedToParse", message)


# -- partitions and windows --------------------------------------------------------------------------


@dataclass(frozen=True)
class Partition:
    """One partition's documents in sortBy order; `key` is the single sortBy field (None when
    sortBy is absent or compound)."""

    docs: list[Doc]
    key: tuple[str, ...] | None

    def sort_value(self, i: int) -> Any:
        assert self.key is not None
        value = get_path(self.docs[i], self.key)
        return None if value is MISSING else value


@dataclass(frozen=True)
class Bounds:
    """A window: `documents` (positions relative to the current one) or `range` (sortBy values
    relative to the current one's, in `unit` for dates). Each bound is "unbounded", "current" or
    a number."""

    documents: bool
    lower: Any
    upper: Any
    unit: str | None = None

    @property
    def whole(self) -> bool:
        return bool(self.lower == UNBOUNDED and self.upper == UNBOUNDED)

    def span(self, part: Partition, i: int) -> range:
        """The positions of the window around position `i`."""
        n = len(part.docs)
        if self.whole:
            return range(n)
        if self.documents:
            lo = 0 if self.lower == UNBOUNDED else i + (0 if self.lower == CURRENT else self.lower)
            hi = (
                n
                if self.upper == UNBOUNDED
                else i + 1 + (0 if self.upper == CURRENT else self.upper)
            )
            return range(max(lo, 0), min(hi, n))
        base = self._range_value(part.sort_value(i))
        low = None if self.lower == UNBOUNDED else self._shift(base, self.lower)
        high = None if self.upper == UNBOUNDED else self._shift(base, self.upper)
        inside = []
        for j in range(n):
            v = self._value_or_none(part.sort_value(j))
            if v is None:
                continue
            if (low is None or v >= low) and (high is None or v <= high):
                inside.append(j)
        # Documents within a range are contiguous in sortBy order.
        return range(inside[0], inside[-1] + 1) if inside else range(0)

    def _value_or_none(self, value: Any) -> Any:
        if self.unit is not None:
            return date_ms(value) if rank(value) == RANK_DATE else None
        return number_value(value) if is_number(value) else None

    def _range_value(self, value: Any) -> Any:
        if self.unit is not None:
            if rank(value) != RANK_DATE:
                raise error(
                    5429513,
                    "Invalid range: Expected the sortBy field to be a Date, but it was"
                    f" {type_name(value)}",
                )
            return date_ms(value)
        if rank(value) == RANK_DATE:
            raise error(
                5429413,
                "Invalid range: For windows that involve date or time ranges, a unit must be"
                " provided.",
            )
        if not is_number(value):
            raise error(
                5429414,
                "Invalid range: Expected the sortBy field to be a number, but it was"
                f" {type_name(value)}",
            )
        return number_value(value)

    def _shift(self, base: Any, offset: Any) -> Any:
        if offset == CURRENT:
            return base
        if self.unit is not None:
            return dates.date_add(base, self.unit, int(offset), dates.UTC)
        return add_numbers(base, number_value(offset))


def add_numbers(a: Any, b: Any) -> Any:
    """a + b for Python numbers, in Decimal when either is one."""
    if isinstance(a, decimal.Decimal) or isinstance(b, decimal.Decimal):
        return decimal.Decimal(a) + decimal.Decimal(b)
    return a + b


WHOLE = Bounds(True, UNBOUNDED, UNBOUNDED)


def _bound(value: Any, documents: bool, unit: bool) -> Any:
    if isinstance(value, str):
        if value in (UNBOUNDED, CURRENT):
            return value
        raise _parse_error("Window bounds must be 'unbounded', 'current', or a number.")
    if not is_constant(value):
        raise _parse_error("Window bounds expression must be a constant.")
    if documents or unit:
        if not is_number(value) or number_value(value) != int(to_float(value)):
            raise _parse_error(
                "Numeric document-based bounds must be an integer"
                if documents
                else "With 'unit', range-based bounds must be an integer"
            )
        return int(to_float(value))
    if not is_number(value):
        raise _parse_error("Range-based bounds expression must be a number")
    return number_value(value)


def _parse_bounds(spec: Any, sort: Sort | None) -> Bounds:
    if not isinstance(spec, Mapping):
        raise _parse_error("'window' field must be an object")
    documents, ranged, unit = spec.get("documents"), spec.get("range"), spec.get("unit")
    if documents is not None and ranged is not None:
        raise _parse_error("Window bounds can specify either 'documents' or 'unit', not both.")
    if ranged is None and unit is not None:
        raise _parse_error("Window bounds can only specify 'unit' with range-based bounds.")
    if documents is None and ranged is None:
        if spec:
            raise _parse_error(
                "'window' field can only contain 'documents' as the only argument or 'range'"
                " with an optional 'unit' field"
            )
        return WHOLE
    pair = documents if documents is not None else ranged
    if not (isinstance(pair, list) and len(pair) == 2):
        raise _parse_error(f"Window bounds must be a 2-element array: {render(pair)}")
    if documents is not None and len(spec) != 1:
        raise _parse_error("'window' field that specifies documents cannot have other fields")
    if unit is not None:
        if len(spec) != 2:
            raise _parse_error(
                "'window' field that specifies unit cannot have other fields besides 'range'"
            )
        if not isinstance(unit, str):
            raise _parse_error("'unit' must be a string")
        if not dates.is_time_unit(unit):
            raise _parse_error(f"unknown time unit value: {unit}")
    elif ranged is not None and len(spec) != 1:
        raise _parse_error(
            "'window' field that specifies range cannot have other fields besides 'unit'"
        )
    lower = _bound(pair[0], documents is not None, unit is not None)
    upper = _bound(pair[1], documents is not None, unit is not None)
    lo = 0 if lower == CURRENT else lower
    hi = 0 if upper == CURRENT else upper
    if lo != UNBOUNDED and hi != UNBOUNDED and lo > hi:
        raise error(
            5339900, f"Lower bound must not exceed upper bound: [{render(lo)}, {render(hi)}]"
        )
    bounds = Bounds(documents is not None, lower, upper, unit)
    if documents is not None:
        if not bounds.whole and sort is None:
            raise error(5339901, "Document-based bounds require a sortBy")
    elif sort is None or len(sort.keys) != 1:
        raise error(5339902, "Range-based bounds require sortBy a single field")
    return bounds


# -- window functions --------------------------------------------------------------------------------


class WindowFunction:
    """One output field's function: `values` gives its value for each document of a partition."""

    def values(self, part: Partition, variables: Variables) -> list[Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class _Accumulating(WindowFunction):
    """A $group accumulator ($sum, $avg, $push, ...) over each document's window."""

    make: Callable[[], Accumulator]
    bounds: Bounds

    def values(self, part: Partition, variables: Variables) -> list[Any]:
        out: list[Any] = []
        whole: Any = MISSING
        for i in range(len(part.docs)):
            if self.bounds.whole and whole is not MISSING:
                out.append(whole)
                continue
            acc = self.make()
            for j in self.bounds.span(part, i):
                acc.add(part.docs[j], variables)
            value = acc.result()
            value = None if value is MISSING else value
            if self.bounds.whole:
                whole = value
            out.append(value)
        return out


@dataclass(frozen=True)
class _Covariance(WindowFunction):
    x: Expression
    y: Expression
    sample: bool
    bounds: Bounds

    def values(self, part: Partition, variables: Variables) -> list[Any]:
        out: list[Any] = []
        for i in range(len(part.docs)):
            pairs = []
            for j in self.bounds.span(part, i):
                a, b = self.x(part.docs[j], variables), self.y(part.docs[j], variables)
                if is_number(a) and is_number(b):
                    pairs.append((to_float(a), to_float(b)))
            n = len(pairs) - 1 if self.sample else len(pairs)
            if n <= 0:
                out.append(None)
                continue
            mx = sum(a for a, _ in pairs) / len(pairs)
            my = sum(b for _, b in pairs) / len(pairs)
            out.append(sum((a - mx) * (b - my) for a, b in pairs) / n)
        return out


@dataclass(frozen=True)
class _Calculus(WindowFunction):
    """$derivative: (y2 - y1) / (x2 - x1) between the window's first and last documents;
    $integral: the trapezoidal integral over the window. x is the sortBy value (in `unit`s for
    dates), y the input."""

    op: str
    input: Expression
    unit: str | None
    bounds: Bounds

    def values(self, part: Partition, variables: Variables) -> list[Any]:
        out: list[Any] = []
        for i in range(len(part.docs)):
            points = [self._point(part, j, variables) for j in self.bounds.span(part, i)]
            if self.op == "$derivative":
                out.append(_slope(points))
                continue
            numeric = [(x, to_float(y)) for x, y in points if is_number(y)]
            total = 0.0
            for (xa, ya), (xb, yb) in zip(numeric, numeric[1:]):
                total += (xb - xa) * (ya + yb) / 2
            out.append(total if numeric else None)
        return out

    def _point(self, part: Partition, j: int, variables: Variables) -> tuple[float, Any]:
        codes = (5624900, 5624901) if self.op == "$derivative" else (5423901, 5423902)
        x = part.sort_value(j)
        if self.unit is not None:
            if rank(x) != RANK_DATE:
                raise error(codes[0], f"{self.op} with unit expects the sortBy field to be a Date")
            xv = date_ms(x) / _UNIT_MS[self.unit]
        elif rank(x) == RANK_DATE:
            raise error(codes[1], f"{self.op} where the sortBy is a Date requires an 'unit'")
        else:
            xv = to_float(x) if is_number(x) else math.nan
        return xv, self.input(part.docs[j], variables)


def _slope(points: list[tuple[float, Any]]) -> Any:
    if len(points) < 2:
        return None
    (x1, y1), (x2, y2) = points[0], points[-1]
    if not (is_number(y1) and is_number(y2)) or x2 == x1:
        return None
    return (to_float(y2) - to_float(y1)) / (x2 - x1)


@dataclass(frozen=True)
class _Shift(WindowFunction):
    output: Expression
    by: int
    default: Any

    def values(self, part: Partition, variables: Variables) -> list[Any]:
        out: list[Any] = []
        n = len(part.docs)
        for i in range(n):
            j = i + self.by
            if 0 <= j < n:
                value = self.output(part.docs[j], variables)
                out.append(None if value is MISSING else value)
            else:
                out.append(self.default)
        return out


@dataclass(frozen=True)
class _Rank(WindowFunction):
    """$rank (ties share a rank, the next rank skips), $denseRank (no gaps), $documentNumber."""

    op: str

    def values(self, part: Partition, variables: Variables) -> list[Any]:
        out: list[Any] = []
        previous: Any = MISSING
        current = 0
        for i in range(len(part.docs)):
            value = part.sort_value(i)
            if self.op == "$documentNumber":
                out.append(i + 1)
                continue
            if previous is MISSING or compare(previous, value) != 0:
                current = i + 1 if self.op == "$rank" else current + 1
            previous = value
            out.append(current)
        return out


@dataclass(frozen=True)
class _ExpMovingAvg(WindowFunction):
    input: Expression
    alpha: decimal.Decimal

    def values(self, part: Partition, variables: Variables) -> list[Any]:
        out: list[Any] = []
        state: Any = None
        is_decimal = False
        for doc in part.docs:
            x = self.input(doc, variables)
            if not is_number(x):
                out.append(None)
                continue
            if isinstance(x, Decimal128):
                is_decimal = True
            xd = x.to_decimal() if isinstance(x, Decimal128) else decimal.Decimal(to_float(x))
            state = xd if state is None else xd * self.alpha + state * (1 - self.alpha)
            out.append(Decimal128(state) if is_decimal else float(state))
        return out


# -- parsing an output field -------------------------------------------------------------------------

_ACCUMULATORS = frozenset(
    "$sum $avg $min $max $count $push $addToSet $first $last $stdDevPop $stdDevSamp".split()
)
_RANKS = frozenset(("$rank", "$denseRank", "$documentNumber"))
_OTHERS = frozenset(
    "$shift $derivative $integral $expMovingAvg $covariancePop $covarianceSamp".split()
)
#: Window functions MongoDB 7.0 has and ebbdb does not compute.
_UNSUPPORTED = frozenset(
    "$minN $maxN $firstN $lastN $topN $bottomN $top $bottom $locf $linearFill".split()
)


def _single_key(sort: Sort | None, op: str, message: str) -> None:
    if sort is None:
        raise _parse_error(f"{op} requires a sortBy")
    if len(sort.keys) != 1:
        raise _parse_error(f"{op} requires a non-compound sortBy" if message == "" else message)


def parse_window_function(
    spec: Any, sort: Sort | None, defined: frozenset[str], field: str
) -> WindowFunction:
    """One `output` field of $setWindowFields. Raises QueryError with MongoDB's codes."""
    if not isinstance(spec, Mapping):
        raise _parse_error(f"The field '{field}' must be an object")
    op = next((k for k in spec if str(k).startswith("$")), None)
    if op is None:
        first = next(iter(spec), "")
        raise _parse_error(
            "Expected a $-prefixed window function" + (f", {first}" if first else "")
        )
    if op in _UNSUPPORTED:
        raise QueryError("NotImplemented", f"the window function {op} is not supported")
    if op not in _ACCUMULATORS | _RANKS | _OTHERS | _QUANTILES.keys():
        raise _parse_error(f"Unrecognized window function, {op}")
    window: Any = None
    has_window = False
    for name in spec:
        if name == "window":
            has_window = True
            window = spec[name]
        elif name != op:
            raise _parse_error(f"{op} got unexpected argument: {name}")
    arg = spec[op]
    if op in _RANKS:
        if has_window:
            raise error(5371601, "Rank style window functions take no other arguments")
        if not (isinstance(arg, Mapping) and not arg):
            raise error(5371603, f"{op} must be specified with '{{}}' as the value")
        if sort is None or len(sort.keys) != 1:
            raise error(
                5371602,
                f"{op} must be specified with a top level sortBy expression with exactly one"
                " element",
            )
        return _Rank(op)
    if op == "$expMovingAvg":
        return _parse_exp_moving_avg(arg, has_window, sort, defined)
    if op == "$shift":
        return _parse_shift(arg, has_window, sort, defined)
    bounds = _parse_bounds(window, sort) if has_window else WHOLE
    if op in ("$derivative", "$integral"):
        return _parse_calculus(op, arg, has_window, bounds, sort, defined)
    if op in ("$covariancePop", "$covarianceSamp"):
        if not (isinstance(arg, list) and len(arg) == 2):
            raise _parse_error(f"{op} requires an array of two expressions")
        x, y = (_compile(a, defined) for a in arg)
        return _Covariance(x, y, op == "$covarianceSamp", bounds)
    if op in _QUANTILES:
        return _Accumulating(_QUANTILES[op](arg, defined), bounds)
    return _Accumulating(compile_accumulator(op, arg, defined), bounds)


def _parse_exp_moving_avg(
    arg: Any, has_window: bool, sort: Sort | None, defined: frozenset[str]
) -> WindowFunction:
    if has_window or not isinstance(arg, Mapping):
        raise _parse_error("$expMovingAvg must have exactly one argument that is an object")
    two = (
        "$expMovingAvg sub object must have exactly two fields: An 'input' field, and either an"
        " 'N' field or an 'alpha' field"
    )
    if len(arg) != 2 or "input" not in arg:
        raise _parse_error(two)
    if sort is None:
        raise _parse_error("$expMovingAvg requires an explicit 'sortBy'")
    expr = _compile(arg["input"], defined)
    if "N" in arg:
        n = arg["N"]
        if not is_number(n):
            raise _parse_error(f"'N' field must be an integer, but found type {type_name(n)}")
        if to_float(n) != math.floor(to_float(n)):
            raise _parse_error(
                f"'N' field must be an integer, but found  {render(n)}. To use a non-integer, use"
                " the 'alpha' argument instead"
            )
        if int(to_float(n)) <= 0:
            raise _parse_error(f"'N' must be greater than zero. Got {int(to_float(n))}")
        alpha = decimal.Decimal(2) / decimal.Decimal(int(to_float(n)) + 1)
        return _ExpMovingAvg(expr, alpha)
    if "alpha" in arg:
        a = arg["alpha"]
        if not is_number(a):
            raise _parse_error("'alpha' must be a number")
        value = a.to_decimal() if isinstance(a, Decimal128) else decimal.Decimal(to_float(a))
        if not 0 < value < 1:
            raise _parse_error(f"'alpha' must be between 0 and 1 (exclusive), found alpha: {a}")
        return _ExpMovingAvg(expr, value)
    raise _parse_error("Got unrecognized field in $expMovingAvg" + two)


def _parse_shift(
    arg: Any, has_window: bool, sort: Sort | None, defined: frozenset[str]
) -> WindowFunction:
    if sort is None:
        raise _parse_error("'$shift' requires a sortBy")
    if has_window:
        raise _parse_error("'$shift' does not accept a 'window' field")
    if not isinstance(arg, Mapping):
        raise _parse_error(f"Argument to $shift must be an object, but found {type_name(arg)}")
    output = by = None
    default: Any = None
    for name, value in arg.items():
        if name == "output":
            output = _compile(value, defined)
        elif name == "by":
            if not is_number(value) or to_float(value) != int(to_float(value)):
                raise _parse_error(
                    f"'$shift:by' field must be an integer, but found {render(value)}"
                )
            by = int(to_float(value))
        elif name == "default":
            if not is_constant(value):
                raise _parse_error("'$shift:default' expression must yield a constant value.")
            default = value
        else:
            raise _parse_error(f"Unknown argument in $shift: {name}")
    if output is None:
        raise _parse_error("$shift requires an 'output' expression.")
    if by is None:
        raise _parse_error("$shift requires 'by' as an integer value.")
    return _Shift(output, by, default)


def _parse_calculus(
    op: str,
    arg: Any,
    has_window: bool,
    bounds: Bounds,
    sort: Sort | None,
    defined: frozenset[str],
) -> WindowFunction:
    if not isinstance(arg, Mapping):
        raise _parse_error(f"{op} expects an object, but got a {type_name(arg)}: {render(arg)}")
    _single_key(sort, op, "")
    if op == "$derivative" and not has_window:
        raise _parse_error("$derivative requires explicit window bounds")
    expr: Expression | None = None
    unit: str | None = None
    for name, value in arg.items():
        if name == "input":
            expr = _compile(value, defined)
        elif name == "unit":
            if not isinstance(value, str):
                raise _parse_error(f"{op} 'unit' must be a string, but got {type_name(value)}")
            if not dates.is_time_unit(value):
                raise _parse_error(f"unknown time unit value: {value}")
            if value not in _UNIT_MS:
                raise error(5490710, "unit must be 'week' or smaller")
            unit = value
        else:
            raise _parse_error(f"{op} got unexpected argument: {name}")
    if expr is None:
        raise _parse_error(f"{op} requires an 'input' expression")
    return _Calculus(op, expr, unit, bounds)


# -- the stage ---------------------------------------------------------------------------------------


class SetWindowFields(Stage, name="$setWindowFields"):
    partition: Expression | None
    sort: Sort | None
    outputs: tuple[tuple[tuple[str, ...], WindowFunction], ...]

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        for part in partitions(docs, self.partition, self.sort, ctx):
            columns = [fn.values(part, ctx.variables) for _, fn in self.outputs]
            for i, doc in enumerate(part.docs):
                for (path, _), column in zip(self.outputs, columns):
                    doc = with_path(doc, path, column[i])
                yield doc


#: A sorted row's own dict ({p, d, s}) and its size's int.
_ROW_BYTES = 184 + 28


def _row_size(row: Doc) -> int:
    size: int = row["s"]
    return size


def partitions(
    docs: Iterator[Doc], by: Expression | None, sort: Sort | None, ctx: Context
) -> Iterator[Partition]:
    """The documents grouped by the partition expression's value, each group in sortBy order
    (MongoDB sorts on the partition key first, then sortBy: a blocking sort, spilled past its
    limit or 292 without disk use), one partition at a time. A partition is held while it is
    read, counted; past `limits.window_bytes` without disk use, 5414201 (ebbdb does not spill a
    partition: with disk use it goes on, counted against the server's cap)."""
    keys: list[tuple[tuple[str, ...], int]] = []
    if by is not None:
        keys.append((("p",), 1))
    if sort is not None:
        keys.extend((("d", *parts), d) for parts, d in sort.spec.keys)
    single = sort.spec.keys[0][0] if sort is not None and len(sort.spec.keys) == 1 else None
    variables = ctx.variables

    def keyed() -> Iterator[Doc]:
        for doc in docs:
            key: Any = None
            if by is not None:
                key = by(doc, variables)
                if isinstance(key, list):
                    raise QueryError(
                        "TypeMismatch",
                        "An expression used to partition cannot evaluate to value of type array",
                    )
            key = None if key is MISSING else key
            # What the row holds: the document, its key and the row itself (its "s").
            size = footprint(doc) + footprint(key) + _ROW_BYTES
            yield {"p": key, "d": doc, "s": size}

    rows = (
        sort_docs(keyed(), SortSpec(tuple(keys)), ctx, "$setWindowFields", _row_size)
        if keys
        else keyed()
    )
    limits = ctx.limits
    tracker = current.get().memory.child("$setWindowFields", limits.window_bytes)
    try:
        part: Partition | None = None
        last: Any = MISSING
        for row in rows:
            marker = group_key(row["p"]) if by is not None else None
            if part is None or marker != last:
                if part is not None:
                    yield part
                tracker.set(0)
                part, last = Partition([], single), marker
            part.docs.append(row["d"])
            tracker.charge(row["s"] + LIST_SLOT - _ROW_BYTES)
            if tracker.over_limit and not limits.allow_disk:
                raise window_exceeded(tracker.used, limits.window_bytes)
        if part is not None:
            yield part
    finally:
        tracker.close()
        close = getattr(rows, "close", None)
        if close is not None:
            close()


def parse_partition(value: Any, defined: frozenset[str]) -> Expression:
    """A partitionBy expression; a constant array is refused as MongoDB does."""
    if (
        isinstance(value, list)
        and is_constant(value)
        or (
            isinstance(value, Mapping)
            and list(value) == ["$const"]
            and isinstance(value["$const"], list)
        )
    ):
        raise QueryError(
            "TypeMismatch", "An expression used to partition cannot evaluate to value of type array"
        )
    return _compile(value, defined)


def parse_sort_by(value: Any, defined: frozenset[str]) -> Sort:
    """A `sortBy` document (its type checked by the extractor), parsed as $sort's argument."""
    kind = STAGES.lookup("$sort")
    assert kind is not None and kind.parser is not None
    parsed = kind.parser(value, defined)
    assert isinstance(parsed, Sort)
    return parsed


class _SetWindowFieldsArgs(
    Arguments,
    not_document=Refusal(
        "FailedToParse", "the $setWindowFields stage specification must be an object, found {type}"
    ),
):
    partition: Expression | None = arg("partitionBy", parse=parse_partition)
    sort_by: Sort | None = arg("sortBy", Kind.OBJECT, parse=parse_sort_by)
    output: Mapping[str, Any] = arg("output", Kind.OBJECT, required=True)


@STAGES.stage("$setWindowFields", arguments=_SetWindowFieldsArgs)
def _parse_set_window_fields(a: _SetWindowFieldsArgs, defined: frozenset[str]) -> Stage:
    outputs = []
    for field, fn_spec in a.output.items():
        path = field_path(field)
        outputs.append((path, parse_window_function(fn_spec, a.sort_by, defined, field)))
    return SetWindowFields(a.partition, a.sort_by, tuple(outputs))
