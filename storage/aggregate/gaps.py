"""Stages that fill gaps: $densify (new documents for the missing steps of a numeric or date
sequence) and $fill (null and missing values set from an expression, the last value seen, or a
linear interpolation), with MongoDB 7.0's checks and codes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bson.datetime_ms import DatetimeMS

from ebbdb.storage.aggregate.arguments import Arguments, Kind, Refusal, arg, extract
from ebbdb.storage.aggregate.fields import field_path, get_path, group_key, with_path
from ebbdb.storage.aggregate.ordering import Sort
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Stage, Variables, error
from ebbdb.storage.aggregate.windows import (
    Partition,
    SetWindowFields,
    WindowFunction,
    add_numbers,
    parse_partition,
    parse_sort_by,
)
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, to_float, type_name
from ebbdb.storage.query import dates
from ebbdb.storage.query.compare import RANK_DATE, compare, date_ms, number_value, rank
from ebbdb.storage.query.expressions import Expression, compile_expression
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.sort import SortSpec, sort_documents

# -- $densify ----------------------------------------------------------------------------------------

_FULL, _PARTITION = "full", "partition"


class Densify(Stage, name="$densify"):
    field: tuple[str, ...]
    partition_fields: tuple[tuple[str, ...], ...]
    step: Any
    unit: str | None
    bounds: Any  # "full", "partition" or (lower, upper) as numbers or milliseconds

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        rows = list(docs)
        valued: list[Doc] = []
        for doc in rows:
            value = get_path(doc, self.field)
            if value is MISSING or value is None:
                yield doc  # nothing to densify: MongoDB passes it through (it sorts first)
            else:
                self._value(value)
                valued.append(doc)
        groups: dict[Any, list[Doc]] = {}
        for doc in valued:
            key = tuple(group_key(get_path(doc, p)) for p in self.partition_fields)
            groups.setdefault(key, []).append(doc)
        out: list[Doc] = []
        everything = [self._value(get_path(d, self.field)) for d in valued]
        for members in groups.values():
            values = [self._value(get_path(d, self.field)) for d in members]
            if self.bounds == _FULL:
                lo, hi = min(everything, key=_Num), max(everything, key=_Num)
            elif self.bounds == _PARTITION:
                lo, hi = min(values, key=_Num), max(values, key=_Num)
            else:
                lo, hi = self.bounds
            out.extend(self._densify(members, lo, hi))
        keys = [(p, 1) for p in self.partition_fields] if self.bounds != _FULL else []
        spec = SortSpec((*keys, (self.field, 1)))
        yield from sort_documents([(d, d) for d in out], spec, ctx.collation)

    def _value(self, value: Any) -> Any:
        """The densified field's value as a number or milliseconds, with MongoDB's checks."""
        if rank(value) == RANK_DATE:
            if self.unit is None:
                raise error(
                    6053600,
                    "Encountered date densify value in collection when step does not have a date"
                    " unit.",
                )
            return date_ms(value)
        if not is_number(value):
            raise error(5733201, "Densify field type must be numeric or a date")
        if self.unit is not None:
            raise error(
                6053600,
                "Encountered non-date densify value in collection when step has a date unit.",
            )
        return number_value(value)

    def _next(self, value: Any) -> Any:
        if self.unit is not None:
            return dates.date_add(value, self.unit, int(to_float(self.step)), dates.UTC)
        return add_numbers(value, number_value(self.step))

    def _densify(self, members: list[Doc], lo: Any, hi: Any) -> list[Doc]:
        """The partition's documents with a new one for each step from `lo` below `hi` that no
        document holds (values off the steps do not move them)."""
        template: Doc = {}
        for p in self.partition_fields:
            value = get_path(members[0], p)
            if value is not MISSING:
                template = with_path(template, p, value)
        ordered = sorted(members, key=lambda d: _Num(self._value(get_path(d, self.field))))
        out: list[Doc] = []
        current = lo
        for doc in ordered:
            value = self._value(get_path(doc, self.field))
            while current < value and current < hi:
                out.append(with_path(template, self.field, self._render(current)))
                current = self._next(current)
            if current == value:
                current = self._next(current)
            out.append(doc)
        while current < hi:
            out.append(with_path(template, self.field, self._render(current)))
            current = self._next(current)
        return out

    def _render(self, value: Any) -> Any:
        return DatetimeMS(value) if self.unit is not None else value


@dataclass(frozen=True)
class _Num:
    """A sort key over numbers and milliseconds of mixed Python types."""

    value: Any

    def __lt__(self, other: _Num) -> bool:
        return bool(compare(self.value, other.value) < 0)


def _densify_bounds(bounds: Any, unit: str | None) -> Any:
    if isinstance(bounds, str):
        if bounds in (_FULL, _PARTITION):
            return bounds
        raise error(5946802, "Bounds string must either be 'full' or 'partition'")
    if not isinstance(bounds, list):
        raise error(
            5733404,
            "The bounds in a range statement must be the string 'full', 'partition', or an"
            " ascending array of two numbers or two dates",
        )
    if len(bounds) != 2:
        raise error(5733403, "A bounding array in a range statement must have exactly two elements")
    lower, upper = bounds
    if compare(lower, upper) > 0:
        raise error(
            5733402,
            "A bounding array must be an ascending array of either two dates or two numbers",
        )
    if is_number(lower):
        if not is_number(upper):
            raise error(
                5733406, "A bounding array must contain either both dates or both numeric types"
            )
        if unit is not None:
            raise error(5733409, "Numeric bounds may not have unit parameter.")
        return (number_value(lower), number_value(upper))
    if rank(lower) == RANK_DATE:
        if rank(upper) != RANK_DATE:
            raise error(
                5733405, "A bounding array must contain either both dates or both numeric types"
            )
        if unit is None:
            raise error(5733410, "A bounding array of dates must specify a unit")
        return (date_ms(lower), date_ms(upper))
    raise error(5946800, "Explicit bounds must be numeric or dates")


class _DensifyArgs(
    Arguments,
    not_document=Refusal(
        "FailedToParse", "The $densify stage specification must be an object, found {type}"
    ),
):
    field: str = arg("field", Kind.STRING, required=True)
    partition_fields: Sequence[str] = arg("partitionByFields", Kind.ARRAY, (), items=Kind.STRING)
    range: Mapping[str, Any] = arg("range", Kind.OBJECT, required=True)


class _RangeArgs(Arguments):
    # A null step or bounds is reported missing, as if not given.
    step: Any = arg("step", required=True, null_is_missing=True)
    unit: str | None = arg("unit", Kind.STRING)
    bounds: Any = arg("bounds", required=True, null_is_missing=True)


@STAGES.stage("$densify", arguments=_DensifyArgs)
def _parse_densify(a: _DensifyArgs, defined: frozenset[str]) -> Stage:
    step, unit, bounds = _densify_range(extract(_RangeArgs, "$densify.range", a.range))
    field, path = a.field, field_path(a.field)
    partitions = tuple(field_path(p) for p in a.partition_fields)
    for p in a.partition_fields:
        if p.startswith(field):
            raise error(
                8993000,
                f"partitionByFields '{p}' cannot include field '{field}' that is being densified.",
            )
        if field.startswith(p):
            raise error(
                9554500,
                f"field '{field}' that is being densified cannot include partitionByFields '{p}'.",
            )
    if bounds == _PARTITION and not partitions:
        raise error(
            5733408,
            "One cannot specify the bounds as 'partition' without specifying a non-empty array of"
            " partitionByFields. You may have meant to specify 'full' bounds.",
        )
    return Densify(path, partitions, step, unit, bounds)


def _densify_range(r: _RangeArgs) -> tuple[Any, str | None, Any]:
    """The range's step, unit and bounds, checked."""
    step, unit = r.step, r.unit
    if not is_number(step) or not number_value(step) > 0:
        raise error(
            5733401,
            "The step parameter in a range statement must be a strictly positive numeric value",
        )
    if unit is not None:
        if to_float(step) != int(to_float(step)):
            raise error(
                6586400,
                "The step parameter in a range statement must be a whole number when densifying a"
                " date range",
            )
        if not dates.is_time_unit(unit):
            raise QueryError("FailedToParse", f"unknown time unit value: {unit}")
    return step, unit, _densify_bounds(r.bounds, unit)


# -- $fill -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Locf(WindowFunction):
    """The last non-null value of the field up to each document (null before the first)."""

    field: tuple[str, ...]

    def values(self, part: Partition, variables: Variables) -> list[Any]:
        out: list[Any] = []
        last: Any = None
        for doc in part.docs:
            value = get_path(doc, self.field)
            if value is not MISSING and value is not None:
                last = value
            out.append(last)
        return out


@dataclass(frozen=True)
class _LinearFill(WindowFunction):
    """Null and missing values interpolated along the sortBy field between the nearest non-null
    values around them (null where there is none on one side)."""

    field: tuple[str, ...]

    def values(self, part: Partition, variables: Variables) -> list[Any]:
        ys = [get_path(d, self.field) for d in part.docs]
        known = [i for i, y in enumerate(ys) if y is not MISSING and y is not None]
        out: list[Any] = []
        for i, y in enumerate(ys):
            if y is not MISSING and y is not None:
                out.append(y)
                continue
            before = [k for k in known if k < i]
            after = [k for k in known if k > i]
            if not before or not after:
                out.append(None)
                continue
            a, b = before[-1], after[0]
            xa, xb, x = (_axis(part.sort_value(k)) for k in (a, b, i))
            ya, yb = ys[a], ys[b]
            if not (is_number(ya) and is_number(yb)):
                raise error(
                    6050106, "There can be no repeated values in the sort field with $linearFill"
                )
            out.append(to_float(ya) + (to_float(yb) - to_float(ya)) * (x - xa) / (xb - xa))
        return out


def _axis(value: Any) -> float:
    if rank(value) == RANK_DATE:
        return float(date_ms(value))
    if not is_number(value):
        raise error(
            6050106, f"Expected the sortBy field to be a number or a date, got {type_name(value)}"
        )
    return to_float(value)


class _FillValues(Stage, name="$fill"):
    """The `value` outputs: each set where the field is null or missing."""

    fields: tuple[tuple[tuple[str, ...], Expression], ...]

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        for doc in docs:
            for path, expr in self.fields:
                current = get_path(doc, path)
                if current is MISSING or current is None:
                    value = expr(doc, ctx.variables)
                    doc = with_path(doc, path, None if value is MISSING else value)
            yield doc


class Fill(Stage, name="$fill"):
    """$fill as MongoDB runs it: a $setWindowFields for the methods, then the values."""

    methods: SetWindowFields | None
    values: _FillValues

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        if self.methods is not None:
            docs = self.methods.run(docs, ctx)
        return self.values.run(docs, ctx)


class _FillArgs(
    Arguments,
    not_document=Refusal(
        "FailedToParse", "The $fill stage specification must be an object, found {type}"
    ),
):
    partition: Expression | None = arg("partitionBy", Kind.STRING_OR_OBJECT, parse=parse_partition)
    partition_fields: list[str] | None = arg("partitionByFields", Kind.STRINGS)
    sort_by: Sort | None = arg("sortBy", Kind.OBJECT, parse=parse_sort_by)
    output: Mapping[str, Any] = arg("output", Kind.OBJECT, required=True)


class _FillOutputArgs(Arguments):
    value: Any = arg("value", default=MISSING)
    method: Any = arg("method", default=MISSING)


@STAGES.stage("$fill", arguments=_FillArgs)
def _parse_fill(a: _FillArgs, defined: frozenset[str]) -> Stage:
    partition = a.partition
    if partition is not None and a.partition_fields is not None:
        raise error(
            6050204,
            "Maximum one of 'partitionBy' and 'partitionByFields can be specified in '$fill'",
        )
    if a.partition_fields is not None:
        partition = compile_expression({f: f"${f}" for f in a.partition_fields}, defined)
    sort = a.sort_by
    methods: list[tuple[tuple[str, ...], WindowFunction]] = []
    values: list[tuple[tuple[str, ...], Expression]] = []
    for field, entry in a.output.items():
        path = field_path(field)
        fill = extract(_FillOutputArgs, f"$fill.output.{field}", entry)
        if (fill.value is MISSING) == (fill.method is MISSING):
            raise error(6050202, "Exactly one of 'value' and 'method' must be specified")
        if fill.value is not MISSING:
            values.append((path, compile_expression(fill.value, defined)))
        elif fill.method == "locf":
            methods.append((path, _Locf(path)))
        elif fill.method == "linear":
            if sort is None or len(sort.keys) != 1:
                raise error(
                    605001,
                    "$linearFill must be specified with a top level sortBy expression with exactly"
                    " one element",
                )
            methods.append((path, _LinearFill(path)))
        else:
            raise error(6050201, "Method must be either locf or linear")
    windows = SetWindowFields(partition, sort, tuple(methods)) if methods else None
    return Fill(windows, _FillValues(tuple(values)))
