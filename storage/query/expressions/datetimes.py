"""Date operators: the date parts ($year ... $isoDayOfWeek), $dateToString, $dateFromString,
$dateToParts, $dateFromParts, $dateAdd/$dateSubtract, $dateDiff, $dateTrunc, and the timestamp
parts $tsSecond/$tsIncrement. The calendar arithmetic lives in storage.query.dates."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bson import Int64, Timestamp
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import INT64_MAX, INT64_MIN, render
from ebbdb.storage.query import dates
from ebbdb.storage.query.expressions.coerce import (
    coerce_date,
    coerce_long,
    coercible_to_date,
    integral64,
)
from ebbdb.storage.query.expressions.conversion import conversion_failure, parse_date_text
from ebbdb.storage.query.expressions.core import (
    NULL,
    Check,
    Expression,
    Variables,
    check,
    checked,
    compile_args,
    compile_expression,
    const,
    fail,
    function,
    named_args,
    nullish,
    operator,
    optional,
    present,
    show,
    type_name,
)
from ebbdb.storage.query.paths import MISSING

_time_zone = functools.lru_cache(maxsize=256)(dates.time_zone)

_DATE_PARTS: dict[str, Callable[[dates.Parts], int]] = {
    "$year": lambda p: p.year,
    "$month": lambda p: p.month,
    "$dayOfMonth": lambda p: p.day,
    "$hour": lambda p: p.hour,
    "$minute": lambda p: p.minute,
    "$second": lambda p: p.second,
    "$millisecond": lambda p: p.millisecond,
    "$dayOfWeek": lambda p: p.day_of_week,
    "$dayOfYear": lambda p: p.day_of_year,
    "$week": lambda p: p.week,
    "$isoWeek": lambda p: p.iso_week,
    "$isoWeekYear": lambda p: p.iso_year,
    "$isoDayOfWeek": lambda p: p.iso_day_of_week,
}

_ZONE = (Check.typed((str,), 40517, "timezone must evaluate to a string, found {type}"),)


def _zone(tz_f: Expression | None, doc: dict[str, Any], v: Variables) -> dates.TimeZone | None:
    """makeTimeZone: UTC without an argument, None (a null result) for a nullish one."""
    if tz_f is None:
        return dates.UTC
    name = tz_f(doc, v)
    if nullish(name):
        return None
    check("", name, _ZONE)
    return _time_zone(name)


_PART_ZONE = (
    Check.typed(
        (str,),
        40533,
        "{op} requires a string for the timezone argument, but was given a {type} ({value})",
    ),
)


@operator(*_DATE_PARTS)
def _date_part(spec: Any, defined: frozenset[str], op: str) -> Expression:
    tz_f: Expression | None = None
    if isinstance(spec, Mapping) and spec and next(iter(spec)).startswith("$"):
        date_f = compile_expression(spec, defined)
    elif isinstance(spec, Mapping):
        date_spec: Any = spec.get("date", MISSING)
        for key, sub in spec.items():
            # The time zone compiles as it comes, before a later unknown option fails.
            if key == "timezone":
                tz_f = compile_expression(sub, defined)
            elif key != "date":
                fail(40535, f'unrecognized option to {op}: "{key}"')
        if date_spec is MISSING:
            fail(40539, f"missing 'date' argument to {op}, provided: {op}: {render(spec)}")
        date_f = compile_expression(date_spec, defined)
    elif type(spec) is list:
        if len(spec) != 1:
            fail(
                40536,
                f"{op} accepts exactly one argument if given an array, but was given {len(spec)}",
            )
        date_f = compile_expression(spec[0], defined)
    else:
        date_f = compile_expression(spec, defined)
    part = _DATE_PARTS[op]

    def date_part(doc: dict[str, Any], v: Variables) -> Any:
        x = date_f(doc, v)
        if nullish(x):
            return None
        ms = coerce_date(x)
        if tz_f is None:
            return part(dates.parts_of(ms, dates.UTC))
        name = tz_f(doc, v)
        if nullish(name):
            return None
        check(op, name, _PART_ZONE)
        return part(dates.parts_of(ms, _time_zone(name)))

    return date_part


def _format(
    op: str,
    format_f: Expression,
    doc: dict[str, Any],
    v: Variables,
    operand: tuple[Check, ...],
    validate: Callable[[str], None],
) -> Any:
    """The 'format' argument, checked (a string, then a valid format) unless it is nullish."""
    fmt = format_f(doc, v)
    if not nullish(fmt):
        check(op, fmt, operand)
        validate(fmt)
    return fmt


def _format_operand(code: int) -> tuple[Check, ...]:
    message = "{op} requires that 'format' be a string, found: {type} with value {value}"
    return (Check.typed((str,), code, message),)


_TO_STRING_FORMAT = _format_operand(18533)


@operator("$dateToString")
def _date_to_string(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (date_f,), (format_f, tz_f, on_null) = compile_args(
        spec,
        defined,
        op,
        {"date": 18628},
        ("format", "timezone", "onNull"),
        (18629, "$dateToString only supports an object as its argument"),
        (18534, "Unrecognized argument to $dateToString: {key}"),
    )

    def to_string(doc: dict[str, Any], v: Variables) -> Any:
        x = date_f(doc, v)
        fmt: Any = dates.ISO_FORMAT
        if format_f is not None:
            fmt = _format(op, format_f, doc, v, _TO_STRING_FORMAT, dates.validate_format)
        tz = _zone(tz_f, doc, v)
        if nullish(x):
            return on_null(doc, v) if on_null is not None else None
        if tz is None or nullish(fmt):
            return None
        return dates.format_date(fmt, coerce_date(x), tz)

    return to_string


_FROM_STRING_FORMAT = _format_operand(40684)


@operator("$dateFromString")
def _date_from_string(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (text_f,), (tz_f, format_f, on_null, on_error) = compile_args(
        spec,
        defined,
        op,
        {"dateString": 40542},
        ("timezone", "format", "onNull", "onError"),
        (
            40540,
            f"$dateFromString only supports an object as an argument, found: {type_name(spec)}",
        ),
        (40541, "Unrecognized argument to $dateFromString: {key}"),
    )

    def from_string(doc: dict[str, Any], v: Variables) -> Any:
        text = text_f(doc, v)
        fmt: Any = None
        if format_f is not None:
            fmt = _format(op, format_f, doc, v, _FROM_STRING_FORMAT, dates.validate_parse_format)
        tz = _zone(tz_f, doc, v)
        if nullish(text):
            return on_null(doc, v) if on_null is not None else None
        try:
            if type(text) is not str:
                conversion_failure(
                    "$dateFromString requires that 'dateString' be a string, found: "
                    f"{type_name(text)} with value {show(text)}"
                )
            if tz is None or (format_f is not None and nullish(fmt)):
                return None
            return parse_date_text(text, tz, fmt)
        except QueryError as exc:
            if exc.code_name == "ConversionFailure" and on_error is not None:
                return on_error(doc, v)
            raise

    return from_string


_ISO_FLAG = (Check.typed((bool,), 40521, "iso8601 must evaluate to a bool, found {type}"),)


@operator("$dateToParts")
def _date_to_parts(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (date_f,), (tz_f, iso_f) = compile_args(
        spec,
        defined,
        op,
        {"date": 40522},
        ("timezone", "iso8601"),
        (40524, "$dateToParts only supports an object as its argument"),
        (40520, "Unrecognized argument to $dateToParts: {key}"),
    )

    def to_parts(doc: dict[str, Any], v: Variables) -> Any:
        x = date_f(doc, v)
        tz = _zone(tz_f, doc, v)
        if tz is None:
            return None
        iso = False if iso_f is None else checked(op, iso_f(doc, v), _ISO_FLAG)
        if iso is NULL or nullish(x):
            return None
        p = dates.parts_of(coerce_date(x), tz)
        head = (
            {"isoWeekYear": p.iso_year, "isoWeek": p.iso_week, "isoDayOfWeek": p.iso_day_of_week}
            if iso
            else {"year": p.year, "month": p.month, "day": p.day}
        )
        return {
            **head,
            "hour": p.hour,
            "minute": p.minute,
            "second": p.second,
            "millisecond": p.millisecond,
        }

    return to_parts


_DATE_PART_RANGE = (-32768, 32767)
_FROM_PARTS = (
    "year",
    "month",
    "day",
    "hour",
    "minute",
    "second",
    "millisecond",
    "isoWeekYear",
    "isoWeek",
    "isoDayOfWeek",
    "timezone",
)


# $dateFromParts' time fields (default 0) and whether each is bounded to [-32768, 32767].
_TIME_PARTS = (("hour", True), ("minute", True), ("second", False), ("millisecond", False))
# Its calendars, natural and ISO: each date field with its default and bound, the code for a year
# out of [1, 9999], and the wall-clock milliseconds of the fields.
_CALENDARS: dict[bool, tuple[tuple[tuple[str, int, bool], ...], int, Callable[..., int]]] = {
    False: ((("year", 1970, False), ("month", 1, True), ("day", 1, True)), 40523, dates.local_ms),
    True: (
        (("isoWeekYear", 1970, False), ("isoWeek", 1, True), ("isoDayOfWeek", 1, True)),
        31095,
        dates.iso_local_ms,
    ),
}


@operator("$dateFromParts")
def _date_from_parts(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = named_args(
        spec,
        _FROM_PARTS,
        (40519, "$dateFromParts only supports an object as its argument"),
        (40518, "Unrecognized argument to $dateFromParts: {key}"),
    )
    if "year" not in args and "isoWeekYear" not in args:
        fail(40516, "$dateFromParts requires either 'year' or 'isoWeekYear' to be present")
    if "year" in args and any(k in args for k in ("isoWeekYear", "isoWeek", "isoDayOfWeek")):
        fail(40489, "$dateFromParts does not allow mixing natural dates with ISO dates")
    if "isoWeekYear" in args and any(k in args for k in ("year", "month", "day")):
        fail(40525, "$dateFromParts does not allow mixing ISO dates with natural dates")
    fields = {k: compile_expression(args[k], defined) for k in _FROM_PARTS[:-1] if k in args}
    tz_f = optional(args, "timezone", defined)
    calendar, year_code, to_wall_ms = _CALENDARS["isoWeekYear" in args]
    integers = {
        name: (
            Check(
                integral64,
                40515,
                f"'{name}' must evaluate to an integer, found {{type}} with value {{value}}",
            ),
        )
        for name in fields
    }

    def number(doc: dict[str, Any], v: Variables, name: str, default: int, bounded: bool) -> Any:
        f = fields.get(name)
        if f is None:
            return default
        x = checked(op, f(doc, v), integers[name])
        if x is NULL:
            return None
        n = coerce_long(x)
        if bounded and not _DATE_PART_RANGE[0] <= n <= _DATE_PART_RANGE[1]:
            fail(
                31034,
                f"'{name}' must evaluate to a value in the range [-32768, 32767]; value {n} is "
                "not in range",
            )
        return n

    def from_parts(doc: dict[str, Any], v: Variables) -> Any:
        times = [number(doc, v, name, 0, bounded) for name, bounded in _TIME_PARTS]
        if None in times:
            return None
        tz = _zone(tz_f, doc, v)
        if tz is None:
            return None
        date_parts = [number(doc, v, name, default, bounded) for name, default, bounded in calendar]
        if None in date_parts:
            return None
        year = date_parts[0]
        if not 1 <= year <= 9999:
            fail(
                year_code,
                f"'{calendar[0][0]}' must evaluate to an integer in the range 1 to 9999, found "
                f"{year}",
            )
        wall = to_wall_ms(*date_parts, *times)
        return DatetimeMS(tz.to_utc(wall))

    return from_parts


_UNIT = (
    Check.typed((str,), 5439013, "{op} requires 'unit' to be a string, but got {type}"),
    Check(
        dates.is_time_unit,
        5439014,
        "{op} parameter 'unit' value cannot be recognized as a time unit: {raw}",
    ),
)
_START_OF_WEEK = (
    Check.typed((str,), 5439015, "{op} requires 'startOfWeek' to be a string, but got {type}"),
    Check(
        lambda day: dates.day_of_week(day) is not None,
        5439016,
        "{op} parameter 'startOfWeek' value cannot be recognized as a day of a week: {raw}",
    ),
)


def _time_unit(op: str, unit: Any) -> str:
    check(op, unit, _UNIT)
    return str(unit)


def _start_of_week(op: str, value: Any) -> int:
    check(op, value, _START_OF_WEEK)
    return dates.day_of_week(value) or 0


def _zone_in_context(
    op: str, tz_f: Expression | None, doc: dict[str, Any], v: Variables
) -> dates.TimeZone | None:
    try:
        return _zone(tz_f, doc, v)
    except QueryError as exc:
        raise QueryError(
            exc.code_name,
            f"{op} parameter 'timezone' value parsing failed :: caused by :: {exc.message}",
        ) from None


@operator("$dateAdd", "$dateSubtract")
def _date_add(spec: Any, defined: frozenset[str], op: str) -> Expression:
    parts, (tz_f,) = compile_args(
        spec,
        defined,
        op,
        dict.fromkeys(("startDate", "unit", "amount"), 5166402),
        ("timezone",),
        (5166400, f"{op} expects an object as its argument"),
        (
            5166401,
            f"Unrecognized argument to {op}: {{key}}. Expected arguments are startDate, unit, "
            "amount, and optionally timezone.",
        ),
        f"{op} requires startDate, unit, and amount to be present",
    )
    sign = 1 if op == "$dateAdd" else -1

    def date_add(doc: dict[str, Any], v: Variables) -> Any:
        got = present(parts, doc, v)
        if got is None:
            return None
        start, unit, amount = got
        tz = _zone(tz_f, doc, v)
        if tz is None:
            return None
        if not coercible_to_date(start):
            fail(5166403, f"{op} requires startDate to be convertible to a date")
        if type(unit) is not str:
            fail(5166404, f"{op} expects string defining the time unit")
        if not dates.is_time_unit(unit):
            fail("FailedToParse", f"unknown time unit value: {unit}")
        if not integral64(amount):
            fail(5166405, f"{op} expects integer amount of time units")
        n = coerce_long(amount)
        if sign < 0 and n == INT64_MIN:
            fail(6045000, f"invalid $dateSubtract 'amount' parameter value: {n}")
        result = dates.date_add(coerce_date(start), unit, sign * n, tz)
        if not INT64_MIN <= result <= INT64_MAX:
            fail("Overflow", f"{op} overflowed")
        return DatetimeMS(result)

    return date_add


def _operands_week_and_zone(
    op: str,
    operands: Sequence[Expression],
    unit_at: int,
    week_f: Expression | None,
    tz_f: Expression | None,
    doc: dict[str, Any],
    v: Variables,
) -> tuple[list[Any], Any, dates.TimeZone] | None:
    """$dateDiff's and $dateTrunc's operands (the unit is operands[unit_at]), startOfWeek (read
    only for the 'week' unit, "sunday" otherwise) and the time zone, or None as soon as one of
    them is nullish."""
    got = present(operands, doc, v)
    if got is None:
        return None
    week = week_f(doc, v) if week_f is not None and got[unit_at] == "week" else "sunday"
    if nullish(week):
        return None
    tz = _zone_in_context(op, tz_f, doc, v)
    return None if tz is None else (got, week, tz)


_DIFF_DATES = {
    name: (
        Check(
            coercible_to_date,
            5166307,
            f"$dateDiff requires '{name}' to be a date, but got {{type}}",
        ),
    )
    for name in ("startDate", "endDate")
}


@operator("$dateDiff")
def _date_diff(spec: Any, defined: frozenset[str], op: str) -> Expression:
    parts, (tz_f, week_f) = compile_args(
        spec,
        defined,
        op,
        {"startDate": 5166303, "endDate": 5166304, "unit": 5166305},
        ("timezone", "startOfWeek"),
        (5166301, "$dateDiff only supports an object as its argument"),
        (5166302, "Unrecognized argument to $dateDiff: {key}"),
    )

    def date_diff(doc: dict[str, Any], v: Variables) -> Any:
        found = _operands_week_and_zone(op, parts, 2, week_f, tz_f, doc, v)
        if found is None:
            return None
        (start, end, unit), week, tz = found
        check(op, start, _DIFF_DATES["startDate"])
        check(op, end, _DIFF_DATES["endDate"])
        unit = _time_unit(op, unit)
        first_day = _start_of_week(op, week)
        start_ms, end_ms = coerce_date(start), coerce_date(end)
        return Int64(dates.date_diff(start_ms, end_ms, unit, tz, first_day))

    return date_diff


_TRUNC_DATE = (
    Check(coercible_to_date, 5439012, "$dateTrunc requires 'date' to be a date, but got {type}"),
)
_BIN_SIZE = (
    Check(
        integral64,
        5439017,
        "$dateTrunc requires 'binSize' to be a 64-bit integer, but got value '{value}' of type "
        "{type}",
    ),
)


@operator("$dateTrunc")
def _date_trunc(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (date_f, unit_f), (bin_f, tz_f, week_f) = compile_args(
        spec,
        defined,
        op,
        {"date": 5439009, "unit": 5439010},
        ("binSize", "timezone", "startOfWeek"),
        (5439007, "$dateTrunc only supports an object as its argument"),
        (
            5439008,
            "Unrecognized argument to $dateTrunc: {key}. Expected arguments are date, unit, and "
            "optionally, binSize, timezone, startOfWeek",
        ),
    )
    operands = (date_f, unit_f, bin_f or const(1))

    def date_trunc(doc: dict[str, Any], v: Variables) -> Any:
        found = _operands_week_and_zone(op, operands, 1, week_f, tz_f, doc, v)
        if found is None:
            return None
        (x, unit, bin_size), week, tz = found
        check(op, x, _TRUNC_DATE)
        unit = _time_unit(op, unit)
        check(op, bin_size, _BIN_SIZE)
        size = coerce_long(bin_size)
        if size <= 0:
            fail(
                5439018, f"$dateTrunc requires 'binSize' to be greater than 0, but got value {size}"
            )
        first_day = _start_of_week(op, week)
        return DatetimeMS(dates.date_trunc(coerce_date(x), unit, size, tz, first_day))

    return date_trunc


def _timestamp_part(name: str, code: int, part: Callable[[Timestamp], int]) -> None:
    must = Check.typed((Timestamp,), code, " Argument to {op} must be a timestamp, but is {type}")
    function(name, arity=1, operands=[(must,)])(lambda op, ts: Int64(part(ts)))


_timestamp_part("$tsSecond", 5687301, lambda ts: ts.time)
_timestamp_part("$tsIncrement", 5687302, lambda ts: ts.inc)
