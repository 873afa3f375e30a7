"""Types and conversions: $type, $isNumber, and $convert with its shorthands ($toString, $toInt,
...), including onError/onNull and the ConversionFailure messages."""

from __future__ import annotations

import decimal
import math
import re
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from bson import Decimal128, Int64, ObjectId
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, is_number
from ebbdb.storage.query import dates
from ebbdb.storage.query.compare import BSON_TYPE_CODES, date_ms
from ebbdb.storage.query.expressions.coerce import (
    coerce_date,
    coerce_int,
    double_to_dec,
    integral,
    iso,
    mkdec,
)
from ebbdb.storage.query.expressions.core import (
    Expression,
    Variables,
    arguments,
    compile_expression,
    const,
    fail,
    fmt_double,
    function,
    nullish,
    operator,
    truthy,
    type_name,
)


@function("$type", arity=1, nulls=False)
def _type(op: str, x: Any) -> str:
    return type_name(x)


@function("$isNumber", arity=1, nulls=False)
def _is_number(op: str, x: Any) -> bool:
    return is_number(x)


_TYPE_CODES = {**BSON_TYPE_CODES, "missing": 0}
_CODE_TYPES = {code: name for name, code in _TYPE_CODES.items()}
_NO_ON_ERROR = "in $convert with no onError value"


def _target_type(to: Any) -> str:
    """$convert's 'to': a type name or a BSON type code."""
    if type(to) is str:
        if to not in _TYPE_CODES:
            fail("BadValue", f"Unknown type name: {to}")
        return to
    if is_number(to):
        if not integral(to):
            fail("FailedToParse", "In $convert, numeric 'to' argument is not an integer")
        code = coerce_int(to)
        if code not in _CODE_TYPES:
            fail(
                "FailedToParse",
                f"In $convert, numeric value for 'to' does not correspond to a BSON type: {code}",
            )
        return _CODE_TYPES[code]
    fail(
        "FailedToParse",
        f"$convert's 'to' argument must be a string or number, but is {type_name(to)}",
    )


def conversion_failure(message: str) -> NoReturn:
    fail("ConversionFailure", message)


def _finite_double(x: float) -> None:
    if math.isnan(x):
        conversion_failure(f"Attempt to convert NaN value to integer type {_NO_ON_ERROR}")
    if math.isinf(x):
        conversion_failure(f"Attempt to convert infinity value to integer type {_NO_ON_ERROR}")


def _double_to_integer(x: float, lo: int, hi: int) -> int:
    _finite_double(x)
    if not lo <= x < hi + 1:
        conversion_failure(f"Conversion would overflow target type {_NO_ON_ERROR}: {fmt_double(x)}")
    return int(x)


def _decimal_to_integer(x: Decimal128, lo: int, hi: int) -> int:
    d = x.to_decimal()
    if d.is_nan():
        conversion_failure(f"Attempt to convert NaN value to integer type {_NO_ON_ERROR}")
    if d.is_infinite():
        conversion_failure(f"Attempt to convert infinity value to integer type {_NO_ON_ERROR}")
    n = int(d)  # toward zero
    if not lo <= n <= hi:
        conversion_failure(f"Conversion would overflow target type {_NO_ON_ERROR}: {x}")
    return n


_INTEGER_TEXT = re.compile(r"[+-]?\d+")
_FLOAT_TEXT = re.compile(
    r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE
)


def _parse_number(text: str, target: str) -> Any:
    """NumberParser as $convert uses it: base 10 for integers, strtod's syntax for doubles and
    decimals, and never hexadecimal."""

    def failed(reason: str) -> NoReturn:
        conversion_failure(f"Failed to parse number '{text}' {_NO_ON_ERROR}: {reason}")

    if text.startswith("0x"):
        conversion_failure(f"Illegal hexadecimal input {_NO_ON_ERROR}: {text}")
    if target in ("int", "long"):
        if not text:
            failed("No digits")
        if not _INTEGER_TEXT.fullmatch(text):
            body = text[1:] if text[0] in "+-" else text
            bad = next((c for c in body if not c.isdigit()), body[:1])
            failed(f'Bad digit "{bad}" while parsing {text}')
        n = int(text)
        lo, hi = (INT32_MIN, INT32_MAX) if target == "int" else (INT64_MIN, INT64_MAX)
        if not lo <= n <= hi:
            failed("Out of range")
        return n if target == "int" else Int64(n)
    if not text:
        failed("No digits")
    if not _FLOAT_TEXT.fullmatch(text):
        failed("Did not consume whole string.")
    if target == "double":
        return float(text)
    return mkdec(decimal.Decimal(text))


def _parse_object_id(text: str) -> ObjectId:
    if len(text) != 24:
        reason = f"Invalid string length for parsing to OID, expected 24 but found {len(text)}"
    elif not all(c in "0123456789abcdefABCDEF" for c in text):
        reason = f"Invalid character found in hex string: {text}"
    else:
        return ObjectId(text)
    conversion_failure(f"Failed to parse objectId '{text}' {_NO_ON_ERROR}: {reason}")


def parse_date_text(text: str, tz: dates.TimeZone, fmt: str | None = None) -> DatetimeMS:
    try:
        return DatetimeMS(dates.parse_date(text, tz, fmt))
    except dates.DateParseError as exc:
        conversion_failure(str(exc))


_ALWAYS_TRUE = frozenset(
    {
        "string",
        "objectId",
        "date",
        "object",
        "array",
        "binData",
        "regex",
        "dbPointer",
        "javascript",
        "symbol",
        "javascriptWithScope",
        "timestamp",
        "minKey",
        "maxKey",
    }
)


def _to_bool(x: Any, source: str) -> Any:
    if source in ("int", "long", "double", "decimal"):
        return truthy(x)
    if source == "bool":
        return x
    if source in _ALWAYS_TRUE:
        return True
    return _unsupported(source, "bool")


def _to_double(x: Any, source: str) -> Any:
    if source == "double":
        return x
    if source == "string":
        return _parse_number(x, "double")
    if source == "bool":
        return 1.0 if x else 0.0
    if source == "date":
        return float(date_ms(x))
    if source in ("int", "long"):
        return float(x)
    if source == "decimal":
        d = x.to_decimal()
        f = float(d)
        if d.is_finite() and math.isinf(f):
            conversion_failure(f"Conversion would overflow target type {_NO_ON_ERROR}: {x}")
        return f
    return _unsupported(source, "double")


def _to_string(x: Any, source: str) -> Any:
    if source == "double":
        if math.isinf(x):
            return "-Infinity" if x < 0 else "Infinity"
        if math.isnan(x):
            return "NaN"
        if x == 0 and math.copysign(1.0, x) < 0:
            return "-0"
        return fmt_double(x)
    if source == "string":
        return x
    if source == "objectId":
        return str(x)
    if source == "bool":
        return "true" if x else "false"
    if source == "date":
        return iso(date_ms(x))
    if source in ("int", "long"):
        return str(int(x))
    if source == "decimal":
        return str(x)
    return _unsupported(source, "string")


def _to_object_id(x: Any, source: str) -> Any:
    if source == "string":
        return _parse_object_id(x)
    if source == "objectId":
        return x
    return _unsupported(source, "objectId")


def _to_date(x: Any, source: str) -> Any:
    if source == "double":
        return DatetimeMS(_double_to_integer(x, INT64_MIN, INT64_MAX))
    if source == "string":
        return parse_date_text(x, dates.UTC)
    if source in ("objectId", "timestamp", "date"):
        return DatetimeMS(coerce_date(x))
    if source == "long":
        return DatetimeMS(int(x))
    if source == "decimal":
        return DatetimeMS(_decimal_to_integer(x, INT64_MIN, INT64_MAX))
    return _unsupported(source, "date")


def _to_integer(target: str) -> Callable[[Any, str], Any]:
    lo, hi = (INT32_MIN, INT32_MAX) if target == "int" else (INT64_MIN, INT64_MAX)
    wrap: Callable[[int], Any] = int if target == "int" else Int64

    def convert(x: Any, source: str) -> Any:
        if source == "double":
            return wrap(_double_to_integer(x, lo, hi))
        if source == "string":
            return _parse_number(x, target)
        if source == "bool":
            return wrap(1 if x else 0)
        if source == "int":
            return wrap(x)
        if source == "long":
            if not lo <= x <= hi:
                conversion_failure(f"Conversion would overflow target type {_NO_ON_ERROR}: ")
            return wrap(int(x))
        if source == "decimal":
            return wrap(_decimal_to_integer(x, lo, hi))
        if source == "date" and target == "long":
            return Int64(date_ms(x))
        return _unsupported(source, target)

    return convert


def _to_decimal(x: Any, source: str) -> Any:
    if source == "double":
        return mkdec(double_to_dec(x))
    if source == "string":
        return _parse_number(x, "decimal")
    if source == "bool":
        return Decimal128("1" if x else "0")
    if source == "date":
        return Decimal128(decimal.Decimal(date_ms(x)))
    if source in ("int", "long"):
        return Decimal128(decimal.Decimal(int(x)))
    if source == "decimal":
        return x
    return _unsupported(source, "decimal")


def _unsupported(source: str, target: str) -> NoReturn:
    conversion_failure(
        f"Unsupported conversion from {source} to {target} in $convert with no onError value"
    )


#: $convert's table: target type -> conversion of (value, its type name).
_CONVERSIONS: dict[str, Callable[[Any, str], Any]] = {
    "bool": _to_bool,
    "double": _to_double,
    "string": _to_string,
    "objectId": _to_object_id,
    "date": _to_date,
    "int": _to_integer("int"),
    "long": _to_integer("long"),
    "decimal": _to_decimal,
}


def _convert(x: Any, target: str) -> Any:
    """$convert's conversion table; ConversionFailure for what it lacks."""
    source = type_name(x)
    convert = _CONVERSIONS.get(target)
    if convert is None:
        _unsupported(source, target)
    return convert(x, source)


def _converter(
    input_f: Expression,
    to_f: Expression,
    on_error: Expression | None,
    on_null: Expression | None,
) -> Expression:
    def convert(doc: dict[str, Any], v: Variables) -> Any:
        to = to_f(doc, v)
        x = input_f(doc, v)
        target = None if nullish(to) else _target_type(to)
        if nullish(x):
            return on_null(doc, v) if on_null is not None else None
        if target is None:
            return None
        try:
            return _convert(x, target)
        except QueryError as exc:
            if exc.code_name == "ConversionFailure" and on_error is not None:
                return on_error(doc, v)
            raise

    return convert


@operator("$convert")
def _convert_op(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        fail(
            "FailedToParse",
            f"$convert expects an object of named arguments but found: {type_name(spec)}",
        )
    parts: dict[str, Expression] = {}
    for key, sub in spec.items():
        if key not in ("input", "to", "onError", "onNull"):
            fail("FailedToParse", f"$convert found an unknown argument: {key}")
        parts[key] = compile_expression(sub, defined)
    if "input" not in parts:
        fail("FailedToParse", "Missing 'input' parameter to $convert")
    if "to" not in parts:
        fail("FailedToParse", "Missing 'to' parameter to $convert")
    return _converter(parts["input"], parts["to"], parts.get("onError"), parts.get("onNull"))


_SHORTHANDS = {
    "$toString": "string",
    "$toObjectId": "objectId",
    "$toDate": "date",
    "$toDouble": "double",
    "$toInt": "int",
    "$toLong": "long",
    "$toDecimal": "decimal",
    "$toBool": "bool",
}


@operator(*_SHORTHANDS)
def _convert_shorthand(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = arguments(spec, defined)
    if len(args) != 1:
        fail(50723, f"{op} requires a single argument, got {len(args)}")
    return _converter(args[0], const(_SHORTHANDS[op]), None, None)
