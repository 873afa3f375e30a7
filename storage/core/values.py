"""BSON values as MongoDB names, tests and prints them: the one home for type names, number tests,
numeric conversion and the renderings that error messages quote.

MongoDB has two printers, and its messages use both, so this module has both:
- `render` is BSONElement/BSONObj::toString (`{ a: "x", b: [ 1, 2.5 ] }`, doubles as `1.0`), the form
  of `dup key: { _id: 1 }`, of a client's spec quoted back, and of most query and update messages;
- `render_value` is the aggregation Value's printer (`{a: "x"}`, doubles with six significant
  digits), the form of expression errors.
Everything here is pure and total: any value gets a name and a rendering.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from bson import Binary, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS
from bson.raw_bson import RawBSONDocument

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# -- type names ------------------------------------------------------------------------------------

# Exact Python type -> MongoDB's name for the BSON type ($type's alias, and what messages print).
_TYPE_NAMES: dict[type, str] = {
    float: "double",
    str: "string",
    dict: "object",
    RawBSONDocument: "object",
    DBRef: "object",
    list: "array",
    bytes: "binData",
    Binary: "binData",
    ObjectId: "objectId",
    bool: "bool",
    DatetimeMS: "date",
    datetime.datetime: "date",
    type(None): "null",
    Regex: "regex",
    Timestamp: "timestamp",
    Int64: "long",
    Decimal128: "decimal",
    MinKey: "minKey",
    MaxKey: "maxKey",
}


def type_name(value: Any) -> str:
    """MongoDB's name for a value's BSON type (`int`, `long`, `double`, `string`, `object`, ...)."""
    t = type(value)
    name = _TYPE_NAMES.get(t)
    if name is not None:
        return name
    if t is int:
        return "int" if INT32_MIN <= value <= INT32_MAX else "long"
    if t is Code:
        return "javascript" if value.scope is None else "javascriptWithScope"
    if isinstance(value, re.Pattern):
        return "regex"
    if isinstance(value, Binary):
        return "binData"
    if isinstance(value, Mapping):
        return "object"
    if isinstance(value, (list, tuple)):
        return "array"
    return type(value).__name__


# -- numbers ---------------------------------------------------------------------------------------


def is_number(value: Any) -> bool:
    """int, long, double or decimal; a bool is not a number."""
    t = type(value)
    return t is int or t is float or t is Int64 or t is Decimal128


def to_float(value: Any) -> float:
    """A number as a double (a decimal rounded to the nearest one)."""
    if type(value) is Decimal128:
        return float(value.to_decimal())
    return float(value)


def to_decimal(value: Any) -> Decimal:
    """A number as an exact Python Decimal (a double keeps its binary value)."""
    if type(value) is Decimal128:
        return value.to_decimal()
    if type(value) is float:
        return Decimal(value)
    return Decimal(int(value))


# -- renderings ------------------------------------------------------------------------------------


def render_double(x: float) -> str:
    """A double as BSONElement::toString prints one: %.16g, with `.0` when it would read as an
    integer."""
    if math.isnan(x):
        return "nan.0"
    text = f"{x:.16g}"
    return text if any(c in text for c in ".eni") else text + ".0"


def render(value: Any) -> str:
    """A value as BSONObj::toString prints it: `{ a: "x", b: [ 1, 2.5 ] }`."""
    if value is None:
        return "null"
    t = type(value)
    if t is bool:
        return "true" if value else "false"
    if t is int or t is Int64:
        return str(int(value))
    if t is float:
        return render_double(value)
    if t is str:
        return f'"{value}"'
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k}: {render(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[ " + ", ".join(render(v) for v in value) + " ]" if value else "[]"
    if t is Decimal128:
        return f'NumberDecimal("{value}")'
    if t is ObjectId:
        return f"ObjectId('{value}')"
    if t is DatetimeMS:
        return f"new Date({int(value)})"
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return f"new Date({int(value.timestamp() * 1000)})"
    if t is Timestamp:
        return f"Timestamp({value.time}, {value.inc})"
    if t is Regex:
        return f"/{value.pattern}/{regex_flags(value.flags)}"
    if isinstance(value, (Binary, bytes)):
        subtype = value.subtype if isinstance(value, Binary) else 0
        return f"BinData({subtype}, {bytes(value).hex().upper()})"
    if t is MinKey:
        return "MinKey"
    if t is MaxKey:
        return "MaxKey"
    if t is DBRef:
        return render(dict(value.as_doc()))
    return str(value)


def render_element(name: str, value: Any) -> str:
    """An element as BSONElement::toString prints it: `a: 1`."""
    return f"{name}: {render(value)}"


_FLAG_CHARS = (
    ("i", re.IGNORECASE),
    ("l", re.LOCALE),
    ("m", re.MULTILINE),
    ("s", re.DOTALL),
    ("u", re.UNICODE),
    ("x", re.VERBOSE),
)


def regex_flags(flags: int | str) -> str:
    """A regex's options as BSON stores them: sorted letters (from bson's integer flags or a
    string)."""
    if isinstance(flags, str):
        return "".join(sorted(flags))
    return "".join(ch for ch, bit in _FLAG_CHARS if flags & bit)


# -- integral arguments ----------------------------------------------------------------------------


class IntegerError(ValueError):
    """Why a value is not the integer an argument must be; the caller adds the code and context."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse_integer(
    value: Any, shown: str, *, non_negative: bool = False, int32: bool = False
) -> int:
    """MongoDB's parseIntegerElementTo{Long,NonNegativeLong,NonNegativeInt}: an integral number
    (a double or decimal must be whole and within 64 bits), else IntegerError with MongoDB's reason,
    which quotes `shown` (the argument as the caller prints it, `name: value`)."""
    t = type(value)
    if not is_number(value):
        raise IntegerError(f"Expected a number in: {shown}")
    if t is float:
        if math.isnan(value):
            raise IntegerError(f"Expected an integer, but found NaN in: {shown}")
        if not INT64_MIN <= value < -INT64_MIN:
            raise IntegerError(f"Cannot represent as a 64-bit integer: {shown}")
        if value != int(value):
            raise IntegerError(f"Expected an integer: {shown}")
        n = int(value)
    elif t is Decimal128:
        d = value.to_decimal()
        if not d.is_finite() or d != d.to_integral_value() or not INT64_MIN <= d <= INT64_MAX:
            raise IntegerError(f"Cannot represent as a 64-bit integer: {shown}")
        n = int(d)
    else:
        n = int(value)
    if non_negative and n < 0:
        raise IntegerError(f"Expected a positive number in: {shown}")
    if int32 and not INT32_MIN <= n <= INT32_MAX:
        raise IntegerError(f"Cannot represent {shown} in an int")
    return n


# A Gregorian calendar repeats every 400 years (146,097 days), so any date's day and time are those
# of a date in datetime's range shifted by whole cycles.
_CYCLE_MS = 146_097 * 86_400_000
_EPOCH = datetime.datetime(1970, 1, 1)


def _iso_date(d: datetime.datetime, year: int) -> str:
    y = f"-{-year:04d}" if year < 0 else f"{year:04d}"
    return (
        f"{y}-{d.month:02d}-{d.day:02d}T{d.hour:02d}:{d.minute:02d}:{d.second:02d}"
        f".{d.microsecond // 1000:03d}Z"
    )


def render_value(value: Any) -> str:
    """A value as the aggregation Value's printer (Value::toString) shows it in expression errors:
    `{a: "x", b: [1, 2.5]}`, doubles with six significant digits (C's %g), decimals bare, dates in
    ISO form."""
    match value:
        case None:
            return "null"
        case bool():
            return "true" if value else "false"
        case Code():  # a str underneath, but printed bare
            return str(value)
        case str():
            return f'"{value}"'
        case int():  # Int64 too
            return str(int(value))
        case float():
            return f"{value:g}"
        case Decimal128():
            return str(value)
        case DatetimeMS():
            cycles, rest = divmod(int(value), _CYCLE_MS)
            d = _EPOCH + datetime.timedelta(milliseconds=rest)
            return _iso_date(d, d.year + 400 * cycles)
        case datetime.datetime():
            utc = value if value.tzinfo is None else value.astimezone(datetime.UTC)
            return _iso_date(utc, utc.year)
        case Mapping():
            return "{" + ", ".join(f"{k}: {render_value(v)}" for k, v in value.items()) + "}"
        case list():
            return "[" + ", ".join(render_value(v) for v in value) + "]"
    return str(value)


# -- field names and constants ---------------------------------------------------------------------

#: The `$` field names a FieldPath accepts: a DBRef's parts. Any other `$` name is invalid.
DBREF_FIELDS = frozenset(("$id", "$ref", "$db"))


def is_constant(value: Any, dotted_names: bool = True) -> bool:
    """Whether a literal in an expression's place is a constant: no field path (`"$a"`) and no
    operator object inside. `dotted_names` False also refuses a document whose field names hold a
    dot (a projection's literal)."""
    if isinstance(value, str):
        return not value.startswith("$")
    if isinstance(value, list):
        return all(is_constant(v, dotted_names) for v in value)
    if isinstance(value, Mapping):
        return all(
            not k.startswith("$")
            and (dotted_names or "." not in k)
            and is_constant(v, dotted_names)
            for k, v in value.items()
        )
    return True


__all__ = [
    "DBREF_FIELDS",
    "INT32_MAX",
    "INT32_MIN",
    "INT64_MAX",
    "INT64_MIN",
    "IntegerError",
    "is_constant",
    "is_number",
    "parse_integer",
    "regex_flags",
    "render",
    "render_double",
    "render_element",
    "render_value",
    "to_decimal",
    "to_float",
    "type_name",
]
