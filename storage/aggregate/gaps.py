"""Stages that fill gaps: $densify (new documents for the missing steps of a numeric or date
sequence, generated as they are asked for, at most internalQueryMaxAllowedDensifyDocs) and $fill
(null and missing values set from an expression, the last value seen, or a linear interpolation),
with MongoDB 7.0's checks and codes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bson.datetime_ms import DatetimeMS

from ebbdb.storage.aggregate.arguments import Arguments, Kind, Refusal, arg, extract
from ebbdb.storage.aggregate.fields import field_path, get_path, group_key, with_path
from ebbdb.storage.aggregate.ordering import Sort, sort_docs
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Stage, Variables, error
from ebbdb.storage.aggregate.windows import (
    Partition,
    SetWindowFields,
    WindowFunction,
    add_numbers,
    parse_partition,
    parse_sort_by,
    partitions,
)
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.footprint import DICT_ENTRY, LIST_SLOT, footprint
from ebbdb.storage.core.interrupt import checkpoint, current
from ebbdb.storage.core.values import is_number, to_float, type_name
from ebbdb.storage.query import dates
from ebbdb.storage.query.compare import RANK_DATE, compare, date_ms, number_value, rank
from ebbdb.storage.query.expressions import Expression, compile_expression
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.sort import SortSpec

# -- $densify ----------------------------------------------------------------------------------------

_FULL, _PARTITION = "full", "partition"

#: A partition's state (_Line, its slots) and its entry in the table of "full" bounds.
_LINE_BYTES = 72 + DICT_ENTRY


def too_many_generated(generated: int, limit: int) -> QueryError:
    """5897900, mongod's words for a $densify past internalQueryMaxAllowedDensifyDocs."""
    return error(
        5897900,
        f"Generated {generated} documents in $densify, which is over the limit of {limit}."
        " Increase the 'internalQueryMaxAllowedDensifyDocs' parameter to allow more generated"
        " documents",
    )


class Densify(Stage, name="$densify"):
    """$densify as mongod runs it: a sort on the partition fields (left out for "full" bounds)
    and the field, then a stage that streams, holding one partition's place in its sequence (or,
    for "full" bounds with partitions, one per partition) and generating each missing step as it
    is asked for. Past the operation's `densify_docs` generated documents, 5897900; past its
    `densify_bytes` of partition state, 6007200."""

    field: tuple[str, ...]
    partition_fields: tuple[tuple[str, ...], ...]
    step: Any
    unit: str | None
    bounds: Any  # "full", "partition" or (lower, upper) as numbers or milliseconds

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        keys = [] if self.bounds == _FULL else [(p, 1) for p in self.partition_fields]
        ordered = sort_docs(_ticking(docs), SortSpec((*keys, (self.field, 1))), ctx, "$densify")
        run = _Run(self, ctx)
        limit = ctx.limits.densify_docs  # read once, as mongod reads it when the stage is made
        try:
            for doc in run.stream(ordered):
                yield doc
                # mongod checks the count when the next document is asked for: the documents
                # up to the limit are output, and a $limit after the stage may stop before it.
                if run.generated > limit:
                    raise too_many_generated(run.generated, limit)
        finally:
            run.close()
            _close(ordered)

    def value(self, value: Any) -> Any:
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


def _close(it: Iterator[Any]) -> None:
    """Close a generator the stage stopped reading (what it holds is given back now)."""
    close = getattr(it, "close", None)
    if close is not None:
        close()


def _ticking(docs: Iterator[Doc]) -> Iterator[Doc]:
    for doc in docs:
        checkpoint()
        yield doc


class _Line:
    """One partition's place in its sequence: `next`, the next value on the step that is neither
    output nor generated (None before the sequence starts); `last`, the last value on the step
    that was (None before); `template`, the partition's fields, which generated documents
    start from."""

    __slots__ = ("last", "next", "template")

    def __init__(self, template: Doc, start: Any) -> None:
        self.template = template
        self.next = start
        self.last: Any = None


class _Run:
    """One run of a Densify: its partitions' state, charged to a tracker, and the count of what
    it generated."""

    def __init__(self, stage: Densify, ctx: Context) -> None:
        self.stage = stage
        self.collation = ctx.collation
        self.generated = 0
        self.max_bytes = ctx.limits.densify_bytes
        self.tracker = current.get().memory.child("$densify", self.max_bytes)
        unit = stage.unit
        if unit is not None:
            amount = int(to_float(stage.step))
            self.advance: Callable[[Any], Any] = lambda ms: dates.date_add(
                ms, unit, amount, dates.UTC
            )
            self.render: Callable[[Any], Any] = DatetimeMS
        else:
            step = number_value(stage.step)
            self.advance = lambda value: add_numbers(value, step)
            self.render = _same

    def close(self) -> None:
        self.tracker.close()

    def stream(self, rows: Iterator[Doc]) -> Iterator[Doc]:
        """The sorted documents with the generated ones among them, in mongod's order (for
        "full" bounds with partitions, the partitions' tails at the end, in the order the
        partitions were first seen; for explicit bounds with partitions, each partition's tail
        after it, as the sort left them)."""
        stage = self.stage
        bounds = stage.bounds
        explicit = isinstance(bounds, tuple)
        hi = bounds[1] if explicit else None
        full = bounds == _FULL
        partitioned = bool(stage.partition_fields)
        field = stage.field
        line: _Line | None = _Line({}, bounds[0]) if explicit and not partitioned else None
        marker: Any = None
        table: dict[Any, _Line] = {}  # "full" bounds with partitions: every partition's place
        lowest: Any = None  # "full": the least value, where every partition starts
        top: Any = None  # "full": the greatest value so far, and the line it was in
        top_line: _Line | None = None
        for doc in rows:
            checkpoint()
            raw = get_path(doc, field)
            if raw is MISSING or raw is None:
                yield doc  # nothing to densify: passed through where the sort put it
                continue
            value = stage.value(raw)
            if partitioned:
                key = self._partition_key(doc)
                if full:
                    if lowest is None:
                        lowest = value
                    line = table.get(key)
                    if line is None:
                        line = table[key] = _Line(self._template(doc), lowest)
                        self._charge(key, line)
                elif line is None or key != marker:
                    if line is not None and explicit:
                        yield from self._generate(line, hi)  # the tail of the one before
                    marker = key
                    line = _Line(self._template(doc), bounds[0] if explicit else None)
                    self.tracker.set(0)
                    self._charge(key, line)
            elif line is None:
                line = _Line({}, None)
            if full:
                top, top_line = value, line
            if line.next is None:  # a sequence starts at its first value
                line.last, line.next = value, self.advance(value)
                yield doc
                continue
            stop = value if hi is None or value < hi else hi
            if line.next < stop:
                yield from self._generate(line, stop)
            if line.next == value:
                line.last, line.next = value, self.advance(value)
            yield doc
        if explicit:
            if line is not None:
                yield from self._generate(line, hi)
            elif partitioned:
                # No document had a value: mongod, whose partition state starts with the first
                # one, densifies the range without partition fields.
                yield from self._generate(_Line({}, bounds[0]), hi)
        elif full and table:
            # Each partition goes on to the greatest value, and takes it too when it is on the
            # step of the partition it was in (mongod's isOnStepRelativeTo).
            assert top_line is not None
            inclusive = top_line.last is not None and compare(top_line.last, top) == 0
            for line in table.values():
                yield from self._generate(line, top, inclusive)

    def _generate(self, line: _Line, stop: Any, inclusive: bool = False) -> Iterator[Doc]:
        """New documents for the line's steps below `stop` (and at it, if `inclusive`)."""
        field, template, advance, render = (
            self.stage.field,
            line.template,
            self.advance,
            self.render,
        )
        value = line.next
        while value < stop or (inclusive and value == stop):
            checkpoint()
            self.generated += 1
            line.last, line.next = value, advance(value)
            yield with_path(template, field, render(value))
            value = line.next

    def _partition_key(self, doc: Doc) -> Any:
        """What tells the document's partition from others: its partition values as grouping
        compares them, under the collation (mongod's partition table uses it)."""
        values = [get_path(doc, p) for p in self.stage.partition_fields]
        if self.collation is not None:
            values = [self.collation.collate(v) for v in values]
        return tuple(group_key(v) for v in values)

    def _template(self, doc: Doc) -> Doc:
        """The document's partition fields, which the documents generated for it carry."""
        template: Doc = {}
        for p in self.stage.partition_fields:
            value = get_path(doc, p)
            if value is not MISSING:
                template = with_path(template, p, value)
        return template

    def _charge(self, key: Any, line: _Line) -> None:
        tracker = self.tracker
        tracker.charge(footprint(key) + footprint(line.template) + _LINE_BYTES)
        if tracker.over_limit:
            raise error(6007200, f"$densify exceeded memory limit of {self.max_bytes}")


def _same(value: Any) -> Any:
    return value


def _densify_bounds(bounds: Any, unit: str | None, step: Any) -> Any:
    """The bounds checked in mongod's order (RangeStatement::parse): as numbers or milliseconds,
    or the string."""
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
        if unit is not None:
            raise error(5733409, "Numeric bounds may not have unit parameter")
        if not is_number(upper):
            raise error(
                5733406, "A bounding array must contain either both dates or both numeric types"
            )
        # mongod's reason: with numbers of different types, the type of what is generated
        # would not be what one expects. The BSON types, not the values: [0, 10] with step 1.0
        # is refused.
        if not type_name(lower) == type_name(upper) == type_name(step):
            raise error(5876900, "Upper bound, lower bound, and step must all have the same type")
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
    return step, unit, _densify_bounds(r.bounds, unit, step)


# -- $fill -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Locf(WindowFunction):
    """The last non-null value of the field up to each document (null before the first)."""

    field: tuple[str, ...]

    def values(self, part: Partition, variables: Variables) -> list[Any]:
        out: list[Any] = []
        last: Any = None
        for doc in part.docs:
            checkpoint()
            value = get_path(doc, self.field)
            if value is not MISSING and value is not None:
                last = value
            out.append(last)
        return out


@dataclass(frozen=True)
class _LinearFill(WindowFunction):
    """Null and missing values interpolated along the sortBy field between the nearest non-null
    values around them (null where there is none on one side): one pass, each gap filled when
    the value after it is found."""

    field: tuple[str, ...]

    def values(self, part: Partition, variables: Variables) -> list[Any]:
        out: list[Any] = [None] * len(part.docs)
        before = -1  # the last position with a value
        for i, doc in enumerate(part.docs):
            checkpoint()
            y = get_path(doc, self.field)
            if y is MISSING or y is None:
                continue
            out[i] = y
            if 0 <= before < i - 1:
                self._gap(part, out, before, i)
            before = i
        return out

    @staticmethod
    def _gap(part: Partition, out: list[Any], a: int, b: int) -> None:
        """Fill the positions between `a` and `b`, which hold values, on the line through them."""
        ya, yb = out[a], out[b]
        if not (is_number(ya) and is_number(yb)):
            raise error(
                6050106, "There can be no repeated values in the sort field with $linearFill"
            )
        xa, xb = _axis(part.sort_value(a)), _axis(part.sort_value(b))
        if xa == xb:  # the line is not defined: mongod refuses repeated sortBy values
            raise error(
                6050106, "There can be no repeated values in the sort field with $linearFill"
            )
        fa, fb = to_float(ya), to_float(yb)
        for i in range(a + 1, b):
            checkpoint()
            x = _axis(part.sort_value(i))
            out[i] = fa + (fb - fa) * (x - xa) / (xb - xa)


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
            checkpoint()
            for path, expr in self.fields:
                present = get_path(doc, path)
                if present is MISSING or present is None:
                    value = expr(doc, ctx.variables)
                    doc = with_path(doc, path, None if value is MISSING else value)
            yield doc


#: What a method's column holds per document: its slot, and a new float where it interpolated.
_COLUMN_BYTES = LIST_SLOT + 24


class Fill(Stage, name="$fill"):
    """$fill as MongoDB runs it: a $setWindowFields for the methods, then the values. The
    partitions are held (and counted) by $setWindowFields' `partitions`; the methods' columns
    over the partition being output are counted here."""

    methods: SetWindowFields | None
    values: _FillValues

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        if self.methods is not None:
            docs = self._methods(self.methods, docs, ctx)
        return self.values.run(docs, ctx)

    @staticmethod
    def _methods(methods: SetWindowFields, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        outputs = methods.outputs
        tracker = current.get().memory.child("$fill")
        parts = partitions(docs, methods.partition, methods.sort, ctx)
        try:
            for part in parts:
                tracker.set(len(outputs) * _COLUMN_BYTES * len(part.docs))
                columns = [fn.values(part, ctx.variables) for _, fn in outputs]
                for i, doc in enumerate(part.docs):
                    checkpoint()
                    for (path, _), column in zip(outputs, columns):
                        doc = with_path(doc, path, column[i])
                    yield doc
        finally:
            tracker.close()
            _close(parts)


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
