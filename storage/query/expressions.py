"""Aggregation expressions: compiles an expression spec once into a function of (document,
variables), with MongoDB 7.0's semantics, and the $group accumulators. Used by aggregation stages
and by `$expr` in the matcher.

Interface (stable; the implementation grows behind it):
- `compile_expression(spec, defined)` -> Expression, a callable `(doc, variables) -> value`.
  `doc` is $$CURRENT and $$ROOT; `variables` maps user variable names (no `$$`) to values and may
  hold "NOW". A field path that reaches nothing yields `MISSING` (storage.query.paths).
- `truthy(value)`: MongoDB's boolean coercion.
- `compile_accumulator(op, arg, defined)` -> a factory of Accumulator objects for $group.
- `type_name(value)`: the name $type gives a value ("missing" for MISSING).
Errors are QueryError with MongoDB's codeName (or `Location<code>`). Date arithmetic lives in
storage.query.dates.

Values an expression returns may share structure with the document and the spec; a caller that
mutates a result in place must copy it first.
"""

from __future__ import annotations

import bisect
import copy
import datetime
import decimal
import functools
import math
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NoReturn, Protocol

import bson
from bson import Binary, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS
from bson.decimal128 import create_decimal128_context
from bson.raw_bson import RawBSONDocument

from storage.errors import QueryError
from storage.query import dates
from storage.query.compare import (
    BSON_TYPE_CODES,
    UNDEFINED,
    SortKey,
    compare,
    date_ms,
    regex_flags,
)
from storage.query.paths import MISSING, split
from storage.query.regex import pcre_to_python
from storage.query.sort import parse_sort, sort_documents

Variables = Mapping[str, Any]
Expression = Callable[[dict[str, Any], Variables], Any]


class Accumulator(Protocol):
    def add(self, doc: dict[str, Any], variables: Variables) -> None: ...

    def result(self) -> Any: ...


_Compiler = Callable[[Any, frozenset[str], str], Expression]
_OPERATORS: dict[str, _Compiler] = {}

_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_DEC = create_decimal128_context()


def _operator(*names: str) -> Callable[[_Compiler], _Compiler]:
    def register(fn: _Compiler) -> _Compiler:
        for name in names:
            _OPERATORS[name] = fn
        return fn

    return register


def _fail(code: int | str, message: str) -> NoReturn:
    raise QueryError(code if isinstance(code, str) else f"Location{code}", message)


# -- values --------------------------------------------------------------------------------------------


def truthy(value: Any) -> bool:
    """MongoDB's coercion to boolean: false, null, missing, undefined and numeric zero are false
    (NaN, empty strings and empty arrays are true)."""
    if value is MISSING or value is None or value is False or value is UNDEFINED:
        return False
    t = type(value)
    if t is int or t is float or t is Int64:
        return bool(value != 0)
    if t is Decimal128:
        return not value.to_decimal().is_zero()
    return True


def _nullish(v: Any) -> bool:
    return v is None or v is MISSING or v is UNDEFINED


_TYPE_NAMES: dict[type, str] = {
    float: "double",
    str: "string",
    dict: "object",
    RawBSONDocument: "object",
    DBRef: "object",
    list: "array",
    bytes: "binData",
    Binary: "binData",
    uuid.UUID: "binData",
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


def type_name(v: Any) -> str:
    """The name $type gives a value ("missing" for a field that is not there)."""
    if v is MISSING:
        return "missing"
    if v is UNDEFINED:
        return "undefined"
    t = type(v)
    name = _TYPE_NAMES.get(t)
    if name is not None:
        return name
    if t is int:
        return "int" if _I32_MIN <= v <= _I32_MAX else "long"
    if t is Code:
        return "javascript" if v.scope is None else "javascriptWithScope"
    if isinstance(v, re.Pattern):
        return "regex"
    if isinstance(v, Mapping):
        return "object"
    if isinstance(v, (list, tuple)):
        return "array"
    return "object"


def _fmt_double(x: float) -> str:
    """A double as MongoDB streams one into a string (C's %g: six significant digits)."""
    return f"{x:g}"


def _show(v: Any) -> str:
    """A value roughly as MongoDB's Value::toString prints it in error messages."""
    if v is MISSING:
        return "MISSING"
    if v is None:
        return "null"
    if v is UNDEFINED:
        return "undefined"
    t = type(v)
    if t is bool:
        return "true" if v else "false"
    if t is str:
        return f'"{v}"'
    if t is int or t is Int64:
        return str(int(v))
    if t is float:
        return _fmt_double(v)
    if t is Decimal128:
        return str(v)
    if _is_date(v):
        return dates.format_date(dates.ISO_FORMAT, date_ms(v), dates.UTC)
    if isinstance(v, Mapping):
        return "{" + ", ".join(f"{k}: {_show(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return str(v)


def _show_bson(v: Any) -> str:
    """A value as BSONObj::toString prints it (spaces inside brackets), for the messages that
    quote the client's spec."""
    if isinstance(v, Mapping):
        if not v:
            return "{}"
        return "{ " + ", ".join(f"{k}: {_show_bson(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[ " + ", ".join(_show_bson(x) for x in v) + " ]" if v else "[]"
    if type(v) is float and math.isfinite(v) and v.is_integer() and abs(v) < 1e16:
        return f"{v:.1f}"
    return _show(v)


def _as_doc(v: Any) -> dict[str, Any] | None:
    if type(v) is dict:
        return v
    if type(v) is DBRef:
        return dict(v.as_doc())
    if isinstance(v, Mapping):
        return dict(v)
    return None


def _is_object(v: Any) -> bool:
    return type(v) is dict or isinstance(v, (Mapping, DBRef))


# -- numbers ---------------------------------------------------------------------------------------------

# Numeric kinds in widening order, as Value::getWidestNumeric ranks them.
_INT, _LONG, _DOUBLE, _DECIMAL = 1, 2, 3, 4


def _kind(v: Any) -> int:
    t = type(v)
    if t is int:
        return _INT if _I32_MIN <= v <= _I32_MAX else _LONG
    if t is float:
        return _DOUBLE
    if t is Int64:
        return _LONG
    if t is Decimal128:
        return _DECIMAL
    return 0


def _is_number(v: Any) -> bool:
    t = type(v)
    return t is int or t is float or t is Int64 or t is Decimal128


def _to_float(v: Any) -> float:
    if type(v) is Decimal128:
        return float(v.to_decimal())
    return float(v)


def _double_to_dec(x: float, digits: int = 15) -> decimal.Decimal:
    """A double as Decimal128(double) makes it: rounded to `digits` significant digits, which are
    kept even when they are zeros ($toDecimal of 2.5 is 2.50000000000000)."""
    if math.isnan(x):
        return decimal.Decimal("NaN")
    if math.isinf(x):
        return decimal.Decimal("Infinity" if x > 0 else "-Infinity")
    return decimal.Decimal(f"{x:.{digits - 1}e}")


def _to_dec(v: Any) -> decimal.Decimal:
    t = type(v)
    if t is Decimal128:
        return v.to_decimal()  # type: ignore[no-any-return]
    if t is float:
        return _double_to_dec(v)
    return decimal.Decimal(int(v))


def _mkdec(d: decimal.Decimal) -> Decimal128:
    return Decimal128(_DEC.plus(d))


def _int_or_long(n: int) -> Any:
    """Value::createIntOrLong, and a double past int64 (where MongoDB's long math overflows)."""
    if _I32_MIN <= n <= _I32_MAX:
        return n
    if _I64_MIN <= n <= _I64_MAX:
        return Int64(n)
    return float(n)


def _long(n: int) -> Any:
    return Int64(n) if _I64_MIN <= n <= _I64_MAX else float(n)


def _exact_int(v: Any) -> int | None:
    """The number as an integer if it is one exactly (NaN, infinities and fractions are not)."""
    t = type(v)
    if t is int or t is Int64:
        return int(v)
    if t is float:
        return int(v) if math.isfinite(v) and v == int(v) else None
    if t is Decimal128:
        d = v.to_decimal()
        return int(d) if d.is_finite() and d == d.to_integral_value() else None
    return None


def _integral(v: Any) -> bool:
    """Value::integral: a number that is exactly a 32-bit integer."""
    n = _exact_int(v)
    return n is not None and _I32_MIN <= n <= _I32_MAX


def _integral64(v: Any) -> bool:
    n = _exact_int(v)
    return n is not None and _I64_MIN <= n <= _I64_MAX


def _coerce_long(v: Any) -> int:
    """Value::coerceToLong: numbers truncated toward zero (clamped where C++ would be undefined)."""
    t = type(v)
    if t is float:
        if math.isnan(v):
            return 0
        if math.isinf(v):
            return _I64_MAX if v > 0 else _I64_MIN
        return max(_I64_MIN, min(_I64_MAX, int(v)))
    if t is Decimal128:
        d = v.to_decimal()
        if not d.is_finite():
            return 0 if d.is_nan() else (_I64_MAX if d > 0 else _I64_MIN)
        return max(_I64_MIN, min(_I64_MAX, int(d)))
    if t is int or t is Int64:
        return int(v)
    _fail(16004, f"can't convert from BSON type {type_name(v)} to long")


def _coerce_int(v: Any) -> int:
    n = _coerce_long(v)
    # C++'s narrowing keeps the low 32 bits.
    n &= 0xFFFFFFFF
    return n - 2**32 if n > _I32_MAX else n


def _c_remainder(a: int, b: int) -> int:
    """C's % (sign of the dividend); overflow::safeMod makes x % -1 zero."""
    if b == -1:
        return 0
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def _float_pow(base: float, exp: float) -> float:
    try:
        return math.pow(base, exp)
    except OverflowError:
        negative = base < 0 and float(exp).is_integer() and int(exp) % 2 == 1
        return -math.inf if negative else math.inf
    except ValueError:
        return math.nan


# -- dates and strings -----------------------------------------------------------------------------------


def _is_date(v: Any) -> bool:
    return type(v) is DatetimeMS or isinstance(v, datetime.datetime)


def _coercible_to_date(v: Any) -> bool:
    t = type(v)
    return _is_date(v) or t is Timestamp or t is ObjectId


def _coerce_date(v: Any) -> int:
    """Value::coerceToDate: dates, timestamps and ObjectIds as milliseconds since the epoch."""
    t = type(v)
    if t is DatetimeMS or isinstance(v, datetime.datetime):
        return date_ms(v)
    if t is Timestamp:
        return int(v.time) * 1000
    if t is ObjectId:
        return int.from_bytes(v.binary[:4], "big") * 1000
    _fail(16006, f"can't convert from BSON type {type_name(v)} to Date")


def _date(ms: int) -> DatetimeMS:
    return DatetimeMS(ms)


def _iso(ms: int) -> str:
    return dates.format_date(dates.ISO_FORMAT, ms, dates.UTC)


def _timestamp_pretty(ts: Timestamp) -> str:
    p = dates.parts_of(int(ts.time) * 1000, dates.UTC)
    month = dates.MONTH_NAMES[p.month - 1][:3]
    return f"{month} {p.day:2d} {p.hour:02d}:{p.minute:02d}:{p.second:02d}:{ts.inc}"


def _coerce_string(v: Any) -> str:
    """Value::coerceToString, as $toLower, $substr and $strcasecmp read their input."""
    t = type(v)
    if t is str:
        return v  # type: ignore[no-any-return]
    if _nullish(v):
        return ""
    if t is float:
        return _fmt_double(v)
    if t is int or t is Int64:
        return str(int(v))
    if t is Decimal128:
        return str(v)
    if _is_date(v):
        return _iso(date_ms(v))
    if t is Timestamp:
        return _timestamp_pretty(v)
    if t is Code:
        return str(v)
    _fail(16007, f"can't convert from BSON type {type_name(v)} to String")


_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _sign(c: int) -> int:
    return (c > 0) - (c < 0)


def _cmp(a: Any, b: Any) -> int:
    """BSON order for expressions, where a missing value sorts with undefined, below null."""
    return compare(UNDEFINED if a is MISSING else a, UNDEFINED if b is MISSING else b)


def _unique_sorted(values: Iterable[Any]) -> list[Any]:
    """MongoDB's ordered ValueSet: the distinct values (by BSON equality) in BSON order."""
    ordered = sorted(values, key=functools.cmp_to_key(compare))
    out: list[Any] = []
    for x in ordered:
        if not out or compare(out[-1], x) != 0:
            out.append(x)
    return out


def _member(sorted_keys: list[SortKey], value: Any) -> bool:
    key = SortKey(value)
    i = bisect.bisect_left(sorted_keys, key)
    return i < len(sorted_keys) and compare(sorted_keys[i].value, value) == 0


def _hash_key(v: Any) -> Any:
    """A hashable stand-in that is equal for BSON-equal values (1, 1.0, NumberLong(1) and
    NumberDecimal("1") alike), for $addToSet."""
    t = type(v)
    if v is None or v is UNDEFINED:
        return ("null",)
    if t is bool:
        return ("bool", v)
    if t is int or t is Int64 or t is float or t is Decimal128:
        # Python's numbers already compare and hash exactly across int, float and Decimal.
        x: Any = v.to_decimal() if t is Decimal128 else v
        if x != x:
            return ("nan",)
        return ("num", x)
    if t is str:
        return ("str", v)
    if _is_date(v):
        return ("date", date_ms(v))
    if t is ObjectId:
        return ("oid", v.binary)
    if isinstance(v, Mapping) or t is DBRef:
        doc = _as_doc(v) or {}
        return ("obj", tuple((k, _hash_key(x)) for k, x in doc.items()))
    if t is list:
        return ("arr", tuple(_hash_key(x) for x in v))
    return ("other", type_name(v), bson.encode({"v": v}))


# -- paths and variables ---------------------------------------------------------------------------------

_DOLLAR_FIELDS = frozenset({"$id", "$ref", "$db"})
_SYSTEM_VARIABLES = frozenset(
    {"ROOT", "CURRENT", "REMOVE", "NOW", "CLUSTER_TIME", "USER_ROLES", "SEARCH_META"}
)


def _check_field_name(name: str) -> None:
    """FieldPath::uassertValidFieldName, for path components and object literal keys."""
    if not name:
        _fail(15998, "FieldPath field names may not be empty strings.")
    if name[0] == "$" and name not in _DOLLAR_FIELDS:
        _fail(
            16410,
            "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
        )
    if "\0" in name:
        _fail(16411, "FieldPath field names may not contain '\0'.")


def _field_path(path: str) -> tuple[str, ...]:
    if not path:
        _fail(40352, "FieldPath cannot be constructed with empty string")
    if path.endswith("."):
        _fail(40353, "FieldPath must not end with a '.'.")
    parts = split(path)
    for part in parts:
        _check_field_name(part)
    return parts


def _check_variable_name(name: str, write: bool) -> None:
    """Variables' name rules: users define names that start with a lowercase letter (or a
    non-ASCII character); reads also accept the uppercase system names."""
    if write and name == "CURRENT":
        return
    if not name:
        _fail(16866, "empty variable names are not allowed")
    first = name[0]
    if not ("a" <= first <= "z" or (not write and "A" <= first <= "Z") or ord(first) > 127):
        _fail(16867, f"'{name}' starts with an invalid character for a user variable name")
    for ch in name[1:]:
        if not (ch.isascii() and (ch.isalnum() or ch == "_")) and ord(ch) <= 127:
            _fail(16868, f"'{name}' contains an invalid character for a variable name: '{ch}'")


def _walk(value: Any, parts: tuple[str, ...], i: int) -> Any:
    """ExpressionFieldPath's evaluation from `parts[i]` on: documents are descended, an array maps
    the rest of the path over its document elements (dropping the ones that lack it), and
    anything else yields MISSING."""
    n = len(parts)
    while True:
        doc = value if type(value) is dict else _as_doc(value)
        if doc is None:
            if type(value) is list:
                out = []
                for element in value:
                    if _is_object(element):
                        x = _walk(element, parts, i)
                        if x is not MISSING:
                            out.append(x)
                return out
            return MISSING
        value = doc.get(parts[i], MISSING)
        i += 1
        if i == n or value is MISSING:
            return value


def _compile_path(spec: str, defined: frozenset[str]) -> Expression:
    if len(spec) < 2:
        _fail(16872, "'$' by itself is not a valid FieldPath")
    if spec[1] != "$":
        parts = _field_path(spec[1:])
        return _var_path("CURRENT", parts, defined)
    body = spec[2:]
    name = body.partition(".")[0]
    _check_variable_name(name, write=False)
    parts = _field_path(body)[1:]
    return _var_path(name, parts, defined)


def _var_path(name: str, parts: tuple[str, ...], defined: frozenset[str]) -> Expression:
    if name in defined:
        if not parts:
            return lambda doc, v: v.get(name, MISSING)
        return lambda doc, v: _walk(v.get(name, MISSING), parts, 0)
    if name in ("CURRENT", "ROOT"):
        if not parts:
            return lambda doc, v: doc
        if len(parts) == 1:
            key = parts[0]
            return lambda doc, v: doc.get(key, MISSING)
        return lambda doc, v: _walk(doc, parts, 0)
    if name == "REMOVE":
        return lambda doc, v: MISSING
    if name in ("NOW", "CLUSTER_TIME"):
        # Without a value from the caller, one instant for the whole statement.
        now_ms = int(time.time() * 1000)
        fallback = _date(now_ms) if name == "NOW" else Timestamp(now_ms // 1000, 1)
        return lambda doc, v: (
            _walk(v.get(name, fallback), parts, 0) if parts else v.get(name, fallback)
        )
    if name == "USER_ROLES":
        return lambda doc, v: _walk(v.get(name, []), parts, 0) if parts else v.get(name, [])
    if name == "SEARCH_META":
        return lambda doc, v: MISSING
    _fail(17276, f"Use of undefined variable: {name}")


# -- the compiler ----------------------------------------------------------------------------------------


def compile_expression(spec: Any, defined: frozenset[str] = frozenset()) -> Expression:
    """Compile an expression: literals, "$field.path", "$$VAR.path", {field: expr} objects,
    [expr, ...] arrays and {$operator: args}. Raises QueryError for a malformed expression;
    evaluating one raises QueryError where MongoDB fails at run time."""
    return _compile(spec, defined)


def _const(value: Any) -> Expression:
    return lambda doc, v: value


def _compile(spec: Any, defined: frozenset[str]) -> Expression:
    t = type(spec)
    if t is str:
        if spec.startswith("$"):
            return _compile_path(spec, defined)
        return _const(spec)
    if t is list:
        return _compile_array(spec, defined)
    if t is dict or isinstance(spec, Mapping):
        if not spec:
            return lambda doc, v: {}
        first = next(iter(spec))
        if first.startswith("$"):
            if len(spec) != 1:
                _fail(
                    15983,
                    "An object representing an expression must have exactly one field: "
                    + _show_bson(spec),
                )
            compiler = _OPERATORS.get(first)
            if compiler is None:
                _fail("InvalidPipelineOperator", f"Unrecognized expression '{first}'")
            return compiler(spec[first], defined, first)
        return _compile_object(spec, defined)
    return _const(spec)


def _compile_array(spec: list[Any], defined: frozenset[str]) -> Expression:
    items = [_compile(s, defined) for s in spec]

    def array(doc: dict[str, Any], v: Variables) -> Any:
        out = []
        for f in items:
            x = f(doc, v)
            out.append(None if x is MISSING else x)  # an array cannot hold a missing value
        return out

    return array


def _compile_object(spec: Mapping[str, Any], defined: frozenset[str]) -> Expression:
    fields = []
    for key, sub in spec.items():
        _check_field_name(key)
        if "." in key:
            _fail(
                16412,
                "FieldPath field names may not contain '.'. Consider using $getField or $setField.",
            )
        fields.append((key, _compile(sub, defined)))

    def obj(doc: dict[str, Any], v: Variables) -> Any:
        out = {}
        for k, f in fields:
            x = f(doc, v)
            if x is not MISSING:
                out[k] = x
        return out

    return obj


def _operands(spec: Any, defined: frozenset[str]) -> list[Expression]:
    """ExpressionNary::parseArguments: an array is the argument list; anything else is one
    argument."""
    items = spec if type(spec) is list else [spec]
    return [_compile(s, defined) for s in items]


def _fixed(spec: Any, defined: frozenset[str], op: str, n: int) -> list[Expression]:
    args = _operands(spec, defined)
    if len(args) != n:
        _fail(16020, f"Expression {op} takes exactly {n} arguments. {len(args)} were passed in.")
    return args


def _ranged(spec: Any, defined: frozenset[str], op: str, lo: int, hi: int) -> list[Expression]:
    args = _operands(spec, defined)
    if not lo <= len(args) <= hi:
        _fail(
            28667,
            f"Expression {op} takes at least {lo} arguments, and at most {hi}, but "
            f"{len(args)} were passed in.",
        )
    return args


def _named_args(
    spec: Any,
    allowed: Iterable[str],
    not_object: tuple[int | str, str],
    unknown: tuple[int | str, str],
) -> dict[str, Any]:
    """The {name: expr} argument object of $filter, $map, $trim and the like, with the operator's
    own codes for a non-object and for an unknown name (the message gets the name appended)."""
    if not isinstance(spec, Mapping):
        _fail(not_object[0], not_object[1])
    names = frozenset(allowed)
    for key in spec:
        if key not in names:
            _fail(unknown[0], unknown[1] + key)
    return dict(spec)


# -- literals, variables, conditionals ----------------------------------------------------------------


@_operator("$literal", "$const")
def _literal(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if isinstance(spec, (dict, list)):
        return lambda doc, v: copy.deepcopy(spec)
    return _const(spec)


@_operator("$let")
def _let(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        _fail(16874, "$let only supports an object as its argument")
    for key in spec:
        if key not in ("vars", "in"):
            _fail(16875, f"Unrecognized parameter to $let: {key}")
    if "vars" not in spec:
        _fail(16876, "Missing 'vars' parameter to $let")
    if "in" not in spec:
        _fail(16877, "Missing 'in' parameter to $let")
    vars_spec = spec["vars"]
    if not isinstance(vars_spec, Mapping):
        _fail(10065, "invalid parameter: expected an object (vars)")
    bound = [(name, _compile(sub, defined)) for name, sub in vars_spec.items()]
    for name, _ in bound:
        _check_variable_name(name, write=True)
    inner = _compile(spec["in"], defined | {name for name, _ in bound})

    def let(doc: dict[str, Any], v: Variables) -> Any:
        scope = dict(v)
        for name, f in bound:
            scope[name] = f(doc, v)  # each sees only the outer scope
        return inner(doc, scope)

    return let


@_operator("$cond")
def _cond(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if isinstance(spec, Mapping):
        parts: dict[str, Expression] = {}
        for key, sub in spec.items():
            if key not in ("if", "then", "else"):
                _fail(17083, f"Unrecognized parameter to $cond: {key}")
            parts[key] = _compile(sub, defined)
        for key, code in (("if", 17080), ("then", 17081), ("else", 17082)):
            if key not in parts:
                _fail(code, f"Missing '{key}' parameter to $cond")
        test, then, other = parts["if"], parts["then"], parts["else"]
    else:
        test, then, other = _fixed(spec, defined, op, 3)
    return lambda doc, v: then(doc, v) if truthy(test(doc, v)) else other(doc, v)


@_operator("$ifNull")
def _if_null(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _operands(spec, defined)
    if len(args) < 2:
        _fail(1257300, f"$ifNull needs at least two arguments, had: {len(args)}")
    last = len(args) - 1

    def if_null(doc: dict[str, Any], v: Variables) -> Any:
        x: Any = MISSING
        for i, f in enumerate(args):
            x = f(doc, v)
            if not _nullish(x) or i == last:
                return x
        return x

    return if_null


@_operator("$switch")
def _switch(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        _fail(40060, f"$switch requires an object as an argument, found: {type_name(spec)}")
    branches: list[tuple[Expression, Expression]] = []
    default: Expression | None = None
    for key, sub in spec.items():
        if key == "branches":
            if type(sub) is not list:
                _fail(40061, f"$switch expected an array for 'branches', found: {type_name(sub)}")
            for branch in sub:
                if not isinstance(branch, Mapping):
                    _fail(
                        40062,
                        f"$switch expected each branch to be an object, found: {type_name(branch)}",
                    )
                case = then = None
                for bkey, bsub in branch.items():
                    if bkey == "case":
                        case = _compile(bsub, defined)
                    elif bkey == "then":
                        then = _compile(bsub, defined)
                    else:
                        _fail(40063, f"$switch found an unknown argument to a branch: {bkey}")
                if case is None:
                    _fail(40064, "$switch requires each branch have a 'case' expression")
                if then is None:
                    _fail(40065, "$switch requires each branch have a 'then' expression.")
                branches.append((case, then))
        elif key == "default":
            default = _compile(sub, defined)
        else:
            _fail(40067, f"$switch found an unknown argument: {key}")
    if not branches:
        _fail(40068, "$switch requires at least one branch.")

    def switch(doc: dict[str, Any], v: Variables) -> Any:
        for case, then in branches:
            if truthy(case(doc, v)):
                return then(doc, v)
        if default is None:
            _fail(
                40066,
                "$switch could not find a matching branch for an input, and no default was "
                "specified.",
            )
        return default(doc, v)

    return switch


# -- boolean and comparison ------------------------------------------------------------------------------


@_operator("$and")
def _and(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _operands(spec, defined)
    return lambda doc, v: all(truthy(f(doc, v)) for f in args)


@_operator("$or")
def _or(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _operands(spec, defined)
    return lambda doc, v: any(truthy(f(doc, v)) for f in args)


@_operator("$not")
def _not(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)
    return lambda doc, v: not truthy(arg(doc, v))


_COMPARISONS: dict[str, Callable[[int], Any]] = {
    "$eq": lambda c: c == 0,
    "$ne": lambda c: c != 0,
    "$gt": lambda c: c > 0,
    "$gte": lambda c: c >= 0,
    "$lt": lambda c: c < 0,
    "$lte": lambda c: c <= 0,
    "$cmp": lambda c: _sign(c),
}


@_operator(*_COMPARISONS)
def _comparison(spec: Any, defined: frozenset[str], op: str) -> Expression:
    left, right = _fixed(spec, defined, op, 2)
    outcome = _COMPARISONS[op]
    return lambda doc, v: outcome(_cmp(left(doc, v), right(doc, v)))


# -- arithmetic ------------------------------------------------------------------------------------------


class _Adder:
    """$add's running total: MongoDB's AddState, which keeps the narrowest type that holds the
    sum (int, then long, then double; decimal once a decimal is seen) and one optional date."""

    __slots__ = ("widest", "long_total", "double_total", "dec_total", "date")

    def __init__(self) -> None:
        self.widest = _INT
        self.long_total = 0
        self.double_total = 0.0
        self.dec_total = decimal.Decimal(0)
        self.date: int | None = None

    def add(self, x: Any) -> None:
        if _is_date(x):
            if self.date is not None:
                _fail(16612, "only one date allowed in an $add expression")
            self.date = date_ms(x)
            return
        kind = _kind(x)
        if kind == 0:
            _fail("TypeMismatch", f"$add only supports numeric or date types, not {type_name(x)}")
        old = self.widest
        self.widest = max(old, kind)
        if self.widest != old:
            if self.widest == _DOUBLE:
                self.double_total = float(self.long_total)
            elif self.widest == _DECIMAL:
                self.dec_total = (
                    _double_to_dec(self.double_total, 34)
                    if old == _DOUBLE
                    else decimal.Decimal(self.long_total)
                )
        if self.widest <= _LONG:
            total = self.long_total + int(x)
            if _I64_MIN <= total <= _I64_MAX:
                self.long_total = total
            else:  # long overflow continues in double
                self.widest = _DOUBLE
                self.double_total = float(self.long_total) + float(x)
        elif self.widest == _DOUBLE:
            self.double_total += _to_float(x)
        else:
            self.dec_total = _DEC.add(self.dec_total, _to_dec(x))

    def number(self) -> Any:
        if self.widest == _INT:
            return _int_or_long(self.long_total)
        if self.widest == _LONG:
            return Int64(self.long_total)
        if self.widest == _DOUBLE:
            return self.double_total
        return _mkdec(self.dec_total)

    def value(self) -> Any:
        if self.date is None:
            return self.number()
        total = self.number()
        if type(total) is float:
            if not (math.isfinite(total) and _I64_MIN <= total < 2.0**63):
                _fail("Overflow", "date overflow in $add")
            # llround: halves away from zero.
            offset = int(math.floor(abs(total) + 0.5)) * (1 if total >= 0 else -1)
        elif type(total) is Decimal128:
            d = total.to_decimal()
            offset = int(d.to_integral_value(decimal.ROUND_HALF_EVEN)) if d.is_finite() else 0
        else:
            offset = int(total)
        result = self.date + offset
        if not _I64_MIN <= result <= _I64_MAX:
            _fail("Overflow", "date overflow in $add")
        return _date(result)


@_operator("$add")
def _add(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _operands(spec, defined)

    def add(doc: dict[str, Any], v: Variables) -> Any:
        state = _Adder()
        for f in args:
            x = f(doc, v)
            if _nullish(x):
                return None
            state.add(x)
        return state.value()

    return add


@_operator("$subtract")
def _subtract(spec: Any, defined: frozenset[str], op: str) -> Expression:
    left, right = _fixed(spec, defined, op, 2)

    def subtract(doc: dict[str, Any], v: Variables) -> Any:
        a, b = left(doc, v), right(doc, v)
        ka, kb = _kind(a), _kind(b)
        if ka and kb:
            kind = max(ka, kb)
            if kind == _DECIMAL:
                return _mkdec(_DEC.subtract(_to_dec(a), _to_dec(b)))
            if kind == _DOUBLE:
                return _to_float(a) - _to_float(b)
            diff = int(a) - int(b)
            if kind == _INT:
                return _int_or_long(diff)
            if _I64_MIN <= diff <= _I64_MAX:
                return Int64(diff)
            return float(a) - float(b)
        if _nullish(a) or _nullish(b):
            return None
        if _is_date(a):
            if _is_date(b):
                return Int64(date_ms(a) - date_ms(b))
            if kb:
                return _date(date_ms(a) - _coerce_long(b))
            _fail("TypeMismatch", f"can't $subtract {type_name(b)} from Date")
        _fail("TypeMismatch", f"can't $subtract {type_name(b)} from {type_name(a)}")

    return subtract


@_operator("$multiply")
def _multiply(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _operands(spec, defined)

    def multiply(doc: dict[str, Any], v: Variables) -> Any:
        kind = _INT
        long_product = 1
        double_product = 1.0
        dec_product = decimal.Decimal(1)
        for f in args:
            x = f(doc, v)
            if _nullish(x):
                return None
            k = _kind(x)
            if not k:
                _fail("TypeMismatch", f"$multiply only supports numeric types, not {type_name(x)}")
            old, kind = kind, max(kind, k)
            if kind == _DECIMAL:
                if old != _DECIMAL:
                    dec_product = (
                        _double_to_dec(double_product)
                        if old == _DOUBLE
                        else decimal.Decimal(long_product)
                    )
                dec_product = _DEC.multiply(dec_product, _to_dec(x))
                continue
            xf = _to_float(x)
            double_product *= xf
            if kind != _DOUBLE:
                if not math.isfinite(xf):
                    kind = _DOUBLE
                else:
                    product = long_product * _coerce_long(x)
                    if _I64_MIN <= product <= _I64_MAX:
                        long_product = product
                    else:
                        kind = _DOUBLE
        if kind == _DECIMAL:
            return _mkdec(dec_product)
        if kind == _DOUBLE:
            return double_product
        return Int64(long_product) if kind == _LONG else _int_or_long(long_product)

    return multiply


@_operator("$divide")
def _divide(spec: Any, defined: frozenset[str], op: str) -> Expression:
    left, right = _fixed(spec, defined, op, 2)

    def divide(doc: dict[str, Any], v: Variables) -> Any:
        a, b = left(doc, v), right(doc, v)
        ka, kb = _kind(a), _kind(b)
        if ka and kb:
            if ka == _DECIMAL or kb == _DECIMAL:
                denominator = _to_dec(b)
                if denominator.is_zero():
                    _fail("BadValue", "can't $divide by zero")
                return _mkdec(_DEC.divide(_to_dec(a), denominator))
            bf = _to_float(b)
            if bf == 0:
                _fail("BadValue", "can't $divide by zero")
            return _to_float(a) / bf
        if _nullish(a) or _nullish(b):
            return None
        _fail(
            "TypeMismatch",
            f"$divide only supports numeric types, not {type_name(a)} and {type_name(b)}",
        )

    return divide


def _fmod(a: float, b: float) -> float:
    """C's fmod, which MongoDB uses: an infinite dividend gives NaN (Python's raises)."""
    try:
        return math.fmod(a, b)
    except ValueError:
        return math.nan


@_operator("$mod")
def _mod(spec: Any, defined: frozenset[str], op: str) -> Expression:
    left, right = _fixed(spec, defined, op, 2)

    def mod(doc: dict[str, Any], v: Variables) -> Any:
        a, b = left(doc, v), right(doc, v)
        ka, kb = _kind(a), _kind(b)
        if ka and kb:
            if ka == _DECIMAL or kb == _DECIMAL:
                divisor = _to_dec(b)
                if divisor.is_zero():
                    _fail(5733415, "can't $mod by zero")
                return _mkdec(_DEC.remainder(_to_dec(a), divisor))
            bf = _to_float(b)
            if bf == 0:
                _fail(16610, "can't $mod by zero")
            if ka == _DOUBLE or (kb == _DOUBLE and not _integral(b)):
                return _fmod(_to_float(a), bf)
            if ka == _LONG or kb == _LONG:
                return Int64(_c_remainder(_coerce_long(a), _coerce_long(b)))
            return _c_remainder(_coerce_int(a), _coerce_int(b))
        if _nullish(a) or _nullish(b):
            return None
        _fail(16611, f"$mod only supports numeric types, not {type_name(a)} and {type_name(b)}")

    return mod


def _single_numeric(
    fn: Callable[[Any], Any],
) -> _Compiler:
    """ExpressionSingleNumericArg: one argument; null stays null; anything but a number is
    error 28765."""

    def compiler(spec: Any, defined: frozenset[str], op: str) -> Expression:
        (arg,) = _fixed(spec, defined, op, 1)

        def evaluate(doc: dict[str, Any], v: Variables) -> Any:
            x = arg(doc, v)
            if _nullish(x):
                return None
            if not _is_number(x):
                _fail(28765, f"{op} only supports numeric types, not {type_name(x)}")
            return fn(x)

        return evaluate

    return compiler


def _abs(x: Any) -> Any:
    t = type(x)
    if t is float:
        return abs(x)
    if t is Decimal128:
        return Decimal128(x.to_decimal().copy_abs())
    n = int(x)
    if n == _I64_MIN:
        _fail(28680, "can't take $abs of long long min")
    return Int64(abs(n)) if _kind(x) == _LONG else _int_or_long(abs(n))


def _rounder(rounding: str, fn: Callable[[float], float]) -> Callable[[Any], Any]:
    def apply(x: Any) -> Any:
        t = type(x)
        if t is float:
            if not math.isfinite(x):
                return x
            r = float(fn(x))
            return math.copysign(r, x) if r == 0 else r  # C keeps the sign of a zero
        if t is Decimal128:
            d = x.to_decimal()
            if not d.is_finite() or d.as_tuple().exponent >= 0:  # already integral
                return x
            return _mkdec(d.quantize(decimal.Decimal(1), rounding=rounding, context=_DEC))
        return x

    return apply


def _exp(x: Any) -> Any:
    if type(x) is Decimal128:
        return _mkdec(_DEC.exp(x.to_decimal()))
    try:
        return math.exp(_to_float(x))
    except OverflowError:
        return math.inf


def _log_of(name: str, code: int, fn: Callable[[float], float], dec: Callable[[Any], Any]) -> Any:
    def apply(x: Any) -> Any:
        if type(x) is Decimal128:
            d = x.to_decimal()
            if d.is_nan():
                return x  # NaN in, NaN out (an ordered comparison with NaN would raise)
            if d > 0:
                return _mkdec(dec(d))
        f = _to_float(x)
        if not (f > 0 or math.isnan(f)):
            _fail(code, f"{name}'s argument must be a positive number, but is {_fmt_double(f)}")
        return fn(f)

    return apply


def _sqrt(x: Any) -> Any:
    if type(x) is Decimal128:
        d = x.to_decimal()
        if d.is_nan():
            return x
        if d < 0:
            _fail(28714, "$sqrt's argument must be greater than or equal to 0")
        return _mkdec(_DEC.sqrt(d))
    f = _to_float(x)
    if f < 0:
        _fail(28714, "$sqrt's argument must be greater than or equal to 0")
    return math.sqrt(f)


_operator("$abs")(_single_numeric(_abs))
_operator("$ceil")(_single_numeric(_rounder(decimal.ROUND_CEILING, math.ceil)))
_operator("$floor")(_single_numeric(_rounder(decimal.ROUND_FLOOR, math.floor)))
_operator("$exp")(_single_numeric(_exp))
_operator("$sqrt")(_single_numeric(_sqrt))
_operator("$ln")(_single_numeric(_log_of("$ln", 28766, math.log, _DEC.ln)))
_operator("$log10")(_single_numeric(_log_of("$log10", 28761, math.log10, _DEC.log10)))


@_operator("$log")
def _log(spec: Any, defined: frozenset[str], op: str) -> Expression:
    arg_f, base_f = _fixed(spec, defined, op, 2)

    def log(doc: dict[str, Any], v: Variables) -> Any:
        x, base = arg_f(doc, v), base_f(doc, v)
        if _nullish(x) or _nullish(base):
            return None
        if not _is_number(x):
            _fail(28756, f"$log's argument must be numeric, not {type_name(x)}")
        if not _is_number(base):
            _fail(28757, f"$log's base must be numeric, not {type_name(base)}")
        if type(x) is Decimal128 or type(base) is Decimal128:
            dx, db = _to_dec(x), _to_dec(base)
            if dx.is_nan() or db.is_nan():
                return _mkdec(decimal.Decimal("NaN"))
            if dx > 0 and db > 0 and db != 1:
                return _mkdec(_DEC.divide(_DEC.ln(dx), _DEC.ln(db)))
        fx, fb = _to_float(x), _to_float(base)
        if not (fx > 0 or math.isnan(fx)):
            _fail(28758, f"$log's argument must be a positive number, but is {_fmt_double(fx)}")
        if not ((fb > 0 and fb != 1) or math.isnan(fb)):
            _fail(
                28759,
                f"$log's base must be a positive number not equal to 1, but is {_fmt_double(fb)}",
            )
        return math.log(fx) / math.log(fb)

    return log


@_operator("$pow")
def _pow(spec: Any, defined: frozenset[str], op: str) -> Expression:
    base_f, exp_f = _fixed(spec, defined, op, 2)

    def power(doc: dict[str, Any], v: Variables) -> Any:
        base, exp = base_f(doc, v), exp_f(doc, v)
        if _nullish(base) or _nullish(exp):
            return None
        if not _is_number(base):
            _fail(28762, f"$pow's base must be numeric, not {type_name(base)}")
        if not _is_number(exp):
            _fail(28763, f"$pow's exponent must be numeric, not {type_name(exp)}")
        kb, ke = _kind(base), _kind(exp)
        if kb == _DECIMAL or ke == _DECIMAL:
            db, de = _to_dec(base), _to_dec(exp)
            if db.is_zero() and not de.is_nan() and de < 0:
                _fail(28764, "$pow cannot take a base of 0 and a negative exponent")
            return _mkdec(_DEC.power(db, de))
        fb, fe = _to_float(base), _to_float(exp)
        if fb == 0 and fe < 0:
            _fail(28764, "$pow cannot take a base of 0 and a negative exponent")
        if kb == _DOUBLE or ke == _DOUBLE:
            return _float_pow(fb, fe)
        as_long = kb == _LONG or ke == _LONG
        b, e = int(base), int(exp)
        result: int | None = None
        if b == 0:
            result = 1 if e == 0 else 0
        elif b == 1:
            result = 1
        elif b == -1:
            result = 1 if e % 2 == 0 else -1
        elif 0 <= e <= 63:
            exact = b**e
            if _I64_MIN <= exact <= _I64_MAX:
                result = exact
        if result is None:
            return _float_pow(float(b), float(e))
        return Int64(result) if as_long else _int_or_long(result)

    return power


def _round_or_trunc(rounding: str) -> _Compiler:
    def compiler(spec: Any, defined: frozenset[str], op: str) -> Expression:
        args = _ranged(spec, defined, op, 1, 2)

        def evaluate(doc: dict[str, Any], v: Variables) -> Any:
            x = args[0](doc, v)
            if _nullish(x):
                return None
            if not _is_number(x):
                _fail(51081, f"{op} only supports numeric types, not {type_name(x)}")
            place = 0
            if len(args) > 1:
                p = args[1](doc, v)
                if _nullish(p):
                    return None
                place = _coerce_long(p)
                if not _integral(p):
                    _fail(51082, f"precision argument to  {op} must be a integral value")
                if not -20 <= place <= 100:
                    _fail(
                        51083,
                        f"cannot apply {op} with precision value {place} value must be in "
                        "[-20, 100]",
                    )
            quantum = decimal.Decimal((0, (1,), -place))
            t = type(x)
            if t is Decimal128:
                d = x.to_decimal()
                if d.is_infinite():
                    return x
                return _mkdec(d.quantize(quantum, rounding=rounding, context=_DEC))
            if t is float:
                if math.isinf(x):
                    return x
                d = _double_to_dec(x, 34).quantize(quantum, rounding=rounding, context=_DEC)
                return float(d)
            if place >= 0:
                return x
            n = int(decimal.Decimal(int(x)).quantize(quantum, rounding=rounding, context=_DEC))
            if t is Int64 or _kind(x) == _LONG or n > _I32_MAX:
                return _long(n)
            return n

        return evaluate

    return compiler


_operator("$round")(_round_or_trunc(decimal.ROUND_HALF_EVEN))
_operator("$trunc")(_round_or_trunc(decimal.ROUND_DOWN))


def _bitwise(name: str, fold: Callable[[int, int], int], start: int) -> _Compiler:
    def compiler(spec: Any, defined: frozenset[str], op: str) -> Expression:
        args = _operands(spec, defined)

        def evaluate(doc: dict[str, Any], v: Variables) -> Any:
            result = start
            is_long = False
            for f in args:
                x = f(doc, v)
                if _nullish(x):
                    return None
                k = _kind(x)
                if k not in (_INT, _LONG):
                    _fail("TypeMismatch", f"{name} only supports int and long operands.")
                is_long = is_long or k == _LONG
                result = fold(result, int(x))
            return Int64(result) if is_long else result

        return evaluate

    return compiler


_operator("$bitAnd")(_bitwise("$bitAnd", lambda a, b: a & b, -1))
_operator("$bitOr")(_bitwise("$bitOr", lambda a, b: a | b, 0))
_operator("$bitXor")(_bitwise("$bitXor", lambda a, b: a ^ b, 0))


@_operator("$bitNot")
def _bit_not(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)

    def bit_not(doc: dict[str, Any], v: Variables) -> Any:
        x = arg(doc, v)
        if _nullish(x):
            return None
        k = _kind(x)
        if k not in (_INT, _LONG):
            _fail("TypeMismatch", f"$bitNot only supports int and long, not: {type_name(x)}.")
        return Int64(~int(x)) if k == _LONG else ~int(x)

    return bit_not


# -- strings ---------------------------------------------------------------------------------------------


@_operator("$concat")
def _concat(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _operands(spec, defined)

    def concat(doc: dict[str, Any], v: Variables) -> Any:
        out = []
        for f in args:
            x = f(doc, v)
            if _nullish(x):
                return None
            if type(x) is not str:
                _fail(16702, f"$concat only supports strings, not {type_name(x)}")
            out.append(x)
        return "".join(out)

    return concat


@_operator("$toLower", "$toUpper")
def _change_case(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)
    # MongoDB changes the case of ASCII letters only.
    table = _LOWER if op == "$toLower" else _UPPER
    return lambda doc, v: _coerce_string(arg(doc, v)).translate(table)


@_operator("$strcasecmp")
def _strcasecmp(spec: Any, defined: frozenset[str], op: str) -> Expression:
    left, right = _fixed(spec, defined, op, 2)

    def strcasecmp(doc: dict[str, Any], v: Variables) -> Any:
        a = _coerce_string(left(doc, v)).translate(_UPPER)
        b = _coerce_string(right(doc, v)).translate(_UPPER)
        return (a > b) - (a < b)

    return strcasecmp


def _is_continuation(byte: int) -> bool:
    return 0x80 <= byte < 0xC0


@_operator("$substrBytes", "$substr")
def _substr_bytes(spec: Any, defined: frozenset[str], op: str) -> Expression:
    name = "$substrBytes"  # $substr is an alias and reports itself under this name
    text_f, start_f, length_f = _fixed(spec, defined, name, 3)

    def substr(doc: dict[str, Any], v: Variables) -> Any:
        text = text_f(doc, v)
        start, length = start_f(doc, v), length_f(doc, v)
        data = _coerce_string(text).encode()
        if not _is_number(start):
            _fail(
                16034,
                f"{name}:  starting index must be a numeric type (is BSON type {type_name(start)})",
            )
        if not _is_number(length):
            _fail(
                16035,
                f"{name}:  length must be a numeric type (is BSON type {type_name(length)})",
            )
        lower = _coerce_long(start)
        if lower < 0:
            _fail(50752, f"{name}:  starting index must be non-negative (got: {lower})")
        count = _coerce_long(length)
        size = len(data) if count < 0 else count
        if lower < len(data) and _is_continuation(data[lower]):
            _fail(28656, f"{name}:  Invalid range, starting index is a UTF-8 continuation byte.")
        if lower + size < len(data) and _is_continuation(data[lower + size]):
            _fail(
                28657,
                f"{name}:  Invalid range, ending index is in the middle of a UTF-8 character.",
            )
        if lower >= len(data):
            return ""
        return data[lower : lower + size].decode()

    return substr


@_operator("$substrCP")
def _substr_cp(spec: Any, defined: frozenset[str], op: str) -> Expression:
    text_f, start_f, length_f = _fixed(spec, defined, op, 3)

    def substr(doc: dict[str, Any], v: Variables) -> Any:
        text = text_f(doc, v)
        start, length = start_f(doc, v), length_f(doc, v)
        s = _coerce_string(text)
        if not _is_number(start):
            _fail(
                34450,
                f"{op}: starting index must be a numeric type (is BSON type {type_name(start)})",
            )
        if not _integral(start):
            _fail(
                34451,
                f"{op}: starting index cannot be represented as a 32-bit integral value: "
                f"{_show(start)}",
            )
        if not _is_number(length):
            _fail(34452, f"{op}: length must be a numeric type (is BSON type {type_name(length)})")
        if not _integral(length):
            _fail(
                34453,
                f"{op}: length cannot be represented as a 32-bit integral value: {_show(length)}",
            )
        first, count = _coerce_int(start), _coerce_int(length)
        if count < 0:
            _fail(34454, f"{op}: length must be a nonnegative integer.")
        if first < 0:
            _fail(34455, f"{op}: the starting index must be nonnegative integer.")
        return s[first : first + count]

    return substr


@_operator("$strLenBytes", "$strLenCP")
def _str_len(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)
    code = 34473 if op == "$strLenBytes" else 34471

    def str_len(doc: dict[str, Any], v: Variables) -> Any:
        x = arg(doc, v)
        if type(x) is not str:
            _fail(code, f"{op} requires a string argument, found: {type_name(x)}")
        return len(x.encode()) if op == "$strLenBytes" else len(x)

    return str_len


@_operator("$split")
def _split(spec: Any, defined: frozenset[str], op: str) -> Expression:
    text_f, sep_f = _fixed(spec, defined, op, 2)

    def split_(doc: dict[str, Any], v: Variables) -> Any:
        text, sep = text_f(doc, v), sep_f(doc, v)
        if _nullish(text) or _nullish(sep):
            return None
        if type(text) is not str:
            _fail(
                40085,
                "$split requires an expression that evaluates to a string as a first argument, "
                f"found: {type_name(text)}",
            )
        if type(sep) is not str:
            _fail(
                40086,
                "$split requires an expression that evaluates to a string as a second argument, "
                f"found: {type_name(sep)}",
            )
        if not sep:
            _fail(40087, "$split requires a non-empty separator")
        return text.split(sep)

    return split_


_TRIM_WHITESPACE = "\0 \t\n\v\f\r\u00a0\u1680" + "".join(chr(c) for c in range(0x2000, 0x200B))


@_operator("$trim", "$ltrim", "$rtrim")
def _trim(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _named_args(
        spec,
        ("input", "chars"),
        (50696, f"{op} only supports an object as an argument, found {type_name(spec)}"),
        (50694, f"{op} found an unknown argument: "),
    )
    if "input" not in args:
        _fail(50695, f"{op} requires an 'input' field")
    input_f = _compile(args["input"], defined)
    chars_f = _compile(args["chars"], defined) if "chars" in args else None
    left, right = op != "$rtrim", op != "$ltrim"

    def trim(doc: dict[str, Any], v: Variables) -> Any:
        x = input_f(doc, v)
        if _nullish(x):
            return None
        if type(x) is not str:
            _fail(
                50699,
                f"{op} requires its input to be a string, got {_show(x)} (of type "
                f"{type_name(x)}) instead.",
            )
        chars = _TRIM_WHITESPACE
        if chars_f is not None:
            c = chars_f(doc, v)
            if _nullish(c):
                return None
            if type(c) is not str:
                _fail(
                    50700,
                    f"{op} requires 'chars' to be a string, got {_show(c)} (of type "
                    f"{type_name(c)}) instead.",
                )
            chars = c
        if left and right:
            return x.strip(chars)
        return x.lstrip(chars) if left else x.rstrip(chars)

    return trim


def _index_bound(op: str, x: Any, what: str) -> int:
    """uassertIfNotIntegralAndNonNegative (MongoDB's message lacks a space after the name)."""
    if not _integral(x):
        _fail(
            40096,
            f"{op}requires an integral {what}, found a value of type: {type_name(x)}, with "
            f"value: {_show(x)}",
        )
    n = _coerce_int(x)
    if n < 0:
        _fail(40097, f"{op} requires a nonnegative {what}, found: {_show(x)}")
    return n


@_operator("$indexOfBytes", "$indexOfCP")
def _index_of_string(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _ranged(spec, defined, op, 2, 4)
    by_bytes = op == "$indexOfBytes"
    codes = (40091, 40092) if by_bytes else (40093, 40094)

    def index_of(doc: dict[str, Any], v: Variables) -> Any:
        text = args[0](doc, v)
        if _nullish(text):
            return None
        if type(text) is not str:
            _fail(
                codes[0], f"{op} requires a string as the first argument, found: {type_name(text)}"
            )
        token = args[1](doc, v)
        if type(token) is not str:
            _fail(
                codes[1],
                f"{op} requires a string as the second argument, found: {type_name(token)}",
            )
        hay: Any = text.encode() if by_bytes else text
        needle: Any = token.encode() if by_bytes else token
        start = _index_bound(op, args[2](doc, v), "starting index") if len(args) > 2 else 0
        end = len(hay)
        if len(args) > 3:
            end = min(end, _index_bound(op, args[3](doc, v), "ending index"))
        if by_bytes:
            if start > len(hay) or end < start:
                return -1
            return hay[:end].find(needle, start)
        if end < start:
            return -1
        if start == 0 and not hay and not needle:
            return 0
        # A match must start before the end index but may run past it.
        for i in range(start, end):
            if hay.startswith(needle, i):
                return i
        return -1

    return index_of


def _replace_compiler(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _named_args(
        spec,
        ("input", "find", "replacement"),
        (51751, f"{op} requires an object as an argument, found: {type_name(spec)}"),
        (51750, f"{op} found an unknown argument: "),
    )
    for key, code in (("input", 51749), ("find", 51748), ("replacement", 51747)):
        if key not in args:
            _fail(code, f"{op} requires '{key}' to be specified")
    input_f = _compile(args["input"], defined)
    find_f = _compile(args["find"], defined)
    repl_f = _compile(args["replacement"], defined)
    count = 1 if op == "$replaceOne" else -1

    def replace(doc: dict[str, Any], v: Variables) -> Any:
        x, find, repl = input_f(doc, v), find_f(doc, v), repl_f(doc, v)
        for value, key, code in (
            (x, "input", 51746),
            (find, "find", 51745),
            (repl, "replacement", 51744),
        ):
            if not (type(value) is str or _nullish(value)):
                _fail(code, f"{op} requires that '{key}' be a string, found: {_show(value)}")
        if _nullish(x) or _nullish(find) or _nullish(repl):
            return None
        return x.replace(find, repl, count)

    return replace


_operator("$replaceOne", "$replaceAll")(_replace_compiler)


# -- regular expressions ---------------------------------------------------------------------------------

_REGEX_FLAGS = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL, "x": re.VERBOSE, "u": 0}


@functools.lru_cache(maxsize=256)
def _compile_regex(op: str, pattern: str, options: str) -> re.Pattern[str]:
    flags = 0
    for ch in options:
        if ch not in _REGEX_FLAGS:
            _fail(51108, f"{op} invalid flag in regex options: {ch}")
        flags |= _REGEX_FLAGS[ch]
    try:
        return re.compile(pcre_to_python(pattern), flags)
    except (re.error, OverflowError, RecursionError, ValueError) as exc:
        _fail(51111, f"Invalid Regex in {op}: {exc}")


def _regex_compiler(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        _fail(51103, f"{op} expects an object of named arguments but found: {type_name(spec)}")
    parts: dict[str, Expression] = {}
    for key, sub in spec.items():
        if key not in ("input", "regex", "options"):
            _fail(31024, f"{op} found an unknown argument: {key}")
        parts[key] = _compile(sub, defined)
    if "input" not in parts:
        _fail(31022, f"{op} requires 'input' parameter")
    if "regex" not in parts:
        _fail(31023, f"{op} requires 'regex' parameter")
    input_f, regex_f = parts["input"], parts["regex"]
    options_f = parts.get("options")

    def state(doc: dict[str, Any], v: Variables) -> tuple[str, re.Pattern[str]] | None:
        text = input_f(doc, v)
        pattern_v = regex_f(doc, v)
        options_v = options_f(doc, v) if options_f is not None else None
        if not (_nullish(text) or type(text) is str):
            _fail(51104, f"{op} needs 'input' to be of type string")
        is_regex = type(pattern_v) is Regex or isinstance(pattern_v, re.Pattern)
        if not (_nullish(pattern_v) or type(pattern_v) is str or is_regex):
            _fail(51105, f"{op} needs 'regex' to be of type string or regex")
        if not (_nullish(options_v) or type(options_v) is str):
            _fail(51106, f"{op} needs 'options' to be of type string")
        pattern: str | None = None
        options = ""
        if is_regex:
            pattern = str(pattern_v.pattern)
            flags = regex_flags(pattern_v.flags)
            if flags and not _nullish(options_v):
                _fail(
                    51107,
                    f"{op}: found regex option(s) specified in both 'regex' and 'option' fields",
                )
            options = flags
        elif type(pattern_v) is str:
            pattern = pattern_v
        if not _nullish(options_v):
            options = str(options_v)
        if pattern is not None and "\0" in pattern:
            _fail(51109, f"{op}: regular expression cannot contain an embedded null byte")
        if "\0" in options:
            _fail(51110, f"{op}: regular expression options cannot contain an embedded null byte")
        if pattern is None:
            return None
        compiled = _compile_regex(op, pattern, options)
        if _nullish(text):
            return None
        return text, compiled

    def found(m: re.Match[str]) -> dict[str, Any]:
        return {"match": m.group(0), "idx": m.start(), "captures": list(m.groups())}

    if op == "$regexMatch":

        def regex_match(doc: dict[str, Any], v: Variables) -> Any:
            s = state(doc, v)
            return s is not None and s[1].search(s[0]) is not None

        return regex_match
    if op == "$regexFind":

        def regex_find(doc: dict[str, Any], v: Variables) -> Any:
            s = state(doc, v)
            if s is None:
                return None
            m = s[1].search(s[0])
            return None if m is None else found(m)

        return regex_find

    def regex_find_all(doc: dict[str, Any], v: Variables) -> Any:
        s = state(doc, v)
        if s is None:
            return []
        text, rx = s
        out = []
        pos = 0
        while True:
            m = rx.search(text, pos)
            if m is None:
                break
            out.append(found(m))
            # An empty match moves on one code point; matches never overlap.
            pos = m.end() if m.end() > m.start() else m.start() + 1
            if pos >= len(text):
                break
        return out

    return regex_find_all


_operator("$regexMatch", "$regexFind", "$regexFindAll")(_regex_compiler)


# -- arrays ----------------------------------------------------------------------------------------------


@_operator("$size")
def _size(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)

    def size(doc: dict[str, Any], v: Variables) -> Any:
        x = arg(doc, v)
        if type(x) is not list:
            _fail(
                17124,
                f"The argument to $size must be an array, but was of type: {type_name(x)}",
            )
        return len(x)

    return size


def _element_at(op: str, arity: int, array: Any, index: Any) -> Any:
    if _nullish(array) or _nullish(index):
        return None
    if type(array) is not list:
        which = "argument" if arity == 1 else "first argument"
        _fail(28689, f"{op}'s {which} must be an array, but is {type_name(array)}")
    if not _is_number(index):
        _fail(28690, f"{op}'s second argument must be a numeric value, but is {type_name(index)}")
    if not _integral(index):
        _fail(
            28691,
            f"{op}'s second argument must be representable as a 32-bit integer: "
            f"{_fmt_double(_to_float(index))}",
        )
    i = _coerce_int(index)
    if i < 0:
        i += len(array)
    return array[i] if 0 <= i < len(array) else MISSING


@_operator("$arrayElemAt")
def _array_elem_at(spec: Any, defined: frozenset[str], op: str) -> Expression:
    array_f, index_f = _fixed(spec, defined, op, 2)
    return lambda doc, v: _element_at(op, 2, array_f(doc, v), index_f(doc, v))


@_operator("$first", "$last")
def _first_last(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (array_f,) = _fixed(spec, defined, op, 1)
    index = 0 if op == "$first" else -1
    return lambda doc, v: _element_at(op, 1, array_f(doc, v), index)


@_operator("$in")
def _in(spec: Any, defined: frozenset[str], op: str) -> Expression:
    value_f, array_f = _fixed(spec, defined, op, 2)

    def in_(doc: dict[str, Any], v: Variables) -> Any:
        x, array = value_f(doc, v), array_f(doc, v)
        if type(array) is not list:
            _fail(40081, f"$in requires an array as a second argument, found: {type_name(array)}")
        return any(_cmp(x, e) == 0 for e in array)

    return in_


@_operator("$indexOfArray")
def _index_of_array(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _ranged(spec, defined, op, 2, 4)

    def index_of(doc: dict[str, Any], v: Variables) -> Any:
        array = args[0](doc, v)
        if _nullish(array):
            return None
        if type(array) is not list:
            _fail(
                40090,
                f"$indexOfArray requires an array as a first argument, found: {type_name(array)}",
            )
        start = _index_bound(op, args[2](doc, v), "starting index") if len(args) > 2 else 0
        end = len(array)
        if len(args) > 3:
            end = min(end, _index_bound(op, args[3](doc, v), "ending index"))
        target = args[1](doc, v)
        for i in range(start, end):
            if _cmp(array[i], target) == 0:
                return i
        return -1

    return index_of


@_operator("$concatArrays")
def _concat_arrays(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _operands(spec, defined)

    def concat(doc: dict[str, Any], v: Variables) -> Any:
        out: list[Any] = []
        for f in args:
            x = f(doc, v)
            if _nullish(x):
                return None
            if type(x) is not list:
                _fail(28664, f"$concatArrays only supports arrays, not {type_name(x)}")
            out.extend(x)
        return out

    return concat


@_operator("$isArray")
def _is_array(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)
    return lambda doc, v: type(arg(doc, v)) is list


@_operator("$reverseArray")
def _reverse_array(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)

    def reverse(doc: dict[str, Any], v: Variables) -> Any:
        x = arg(doc, v)
        if _nullish(x):
            return None
        if type(x) is not list:
            _fail(
                34435,
                f"The argument to $reverseArray must be an array, but was of type: {type_name(x)}",
            )
        return x[::-1]

    return reverse


@_operator("$slice")
def _slice(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _ranged(spec, defined, op, 2, 3)

    def slice_(doc: dict[str, Any], v: Variables) -> Any:
        array, second = args[0](doc, v), args[1](doc, v)
        if _nullish(array) or _nullish(second):
            return None
        if type(array) is not list:
            _fail(
                28724,
                f"First argument to $slice must be an array, but is of type: {type_name(array)}",
            )
        if not _is_number(second):
            _fail(
                28725,
                f"Second argument to $slice must be a numeric value, but is of type: "
                f"{type_name(second)}",
            )
        if not _integral(second):
            _fail(
                28726,
                "Second argument to $slice can't be represented as a 32-bit integer: "
                f"{_fmt_double(_to_float(second))}",
            )
        n = len(array)
        if len(args) == 2:
            count = _coerce_int(second)
            return array[:count] if count >= 0 else array[max(0, n + count) :]
        position = _coerce_int(second)
        start = max(0, n + position) if position < 0 else min(n, position)
        third = args[2](doc, v)
        if _nullish(third):
            return None
        if not _is_number(third):
            _fail(
                28727,
                f"Third argument to $slice must be numeric, but is of type: {type_name(third)}",
            )
        if not _integral(third):
            _fail(
                28728,
                "Third argument to $slice can't be represented as a 32-bit integer: "
                f"{_fmt_double(_to_float(third))}",
            )
        count = _coerce_int(third)
        if count <= 0:
            _fail(28729, f"Third argument to $slice must be positive: {count}")
        return array[start : start + count]

    return slice_


# internalQueryMaxRangeBytes, and an estimate of MongoDB's per-element size.
_RANGE_MEMORY_LIMIT = 104857600
_RANGE_ELEMENT_BYTES = 16


@_operator("$range")
def _range(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _ranged(spec, defined, op, 2, 3)

    def range_(doc: dict[str, Any], v: Variables) -> Any:
        start, end = args[0](doc, v), args[1](doc, v)
        if not _is_number(start):
            _fail(
                34443,
                f"$range requires a numeric starting value, found value of type: "
                f"{type_name(start)}",
            )
        if not _integral(start):
            _fail(
                34444,
                "$range requires a starting value that can be represented as a 32-bit integer, "
                f"found value: {_show(start)}",
            )
        if not _is_number(end):
            _fail(
                34445,
                f"$range requires a numeric ending value, found value of type: {type_name(end)}",
            )
        if not _integral(end):
            _fail(
                34446,
                "$range requires an ending value that can be represented as a 32-bit integer, "
                f"found value: {_show(end)}",
            )
        step = 1
        if len(args) == 3:
            step_v = args[2](doc, v)
            if not _is_number(step_v):
                _fail(
                    34447,
                    f"$range requires a numeric step value, found value of type:"
                    f"{type_name(step_v)}",
                )
            if not _integral(step_v):
                _fail(
                    34448,
                    "$range requires a step value that can be represented as a 32-bit integer, "
                    f"found value: {_show(step_v)}",
                )
            step = _coerce_int(step_v)
            if step == 0:
                _fail(34449, "$range requires a non-zero step value")
        first, last = _coerce_int(start), _coerce_int(end)
        length = len(range(first, last, step))
        memory = 24 + length * _RANGE_ELEMENT_BYTES
        if memory >= _RANGE_MEMORY_LIMIT:
            _fail(
                "ExceededMemoryLimit",
                f"$range would use too much memory ({memory} bytes) and cannot spill to disk. "
                f"Memory limit: {_RANGE_MEMORY_LIMIT} bytes",
            )
        return list(range(first, last, step))

    return range_


@_operator("$arrayToObject")
def _array_to_object(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)

    def to_object(doc: dict[str, Any], v: Variables) -> Any:
        x = arg(doc, v)
        if _nullish(x):
            return None
        if type(x) is not list:
            _fail(40386, f"$arrayToObject requires an array input, found: {type_name(x)}")
        out: dict[str, Any] = {}
        if not x:
            return out
        if type(x[0]) is list:
            pairs = True
        elif _is_object(x[0]):
            pairs = False
        else:
            _fail(40398, f"Unrecognised input type format for $arrayToObject: {type_name(x[0])}")
        for element in x:
            if pairs:
                if type(element) is not list:
                    _fail(
                        40396,
                        "$arrayToObject requires a consistent input format. Elements mustall be "
                        "arrays or all be objects. Array was detected, now found: "
                        f"{type_name(element)}",
                    )
                if len(element) != 2:
                    _fail(
                        40397,
                        "$arrayToObject requires an array of size 2 arrays,found array of size: "
                        f"{len(element)}",
                    )
                key, value = element
                if type(key) is not str:
                    _fail(
                        40395,
                        "$arrayToObject requires an array of key-value pairs, where the key must "
                        f"be of type string. Found key type: {type_name(key)}",
                    )
                if "\0" in key:
                    _fail(4940400, "Key field cannot contain an embedded null byte")
            else:
                if not _is_object(element):
                    _fail(
                        40391,
                        "$arrayToObject requires a consistent input format. Elements mustall be "
                        "arrays or all be objects. Object was detected, now found: "
                        f"{type_name(element)}",
                    )
                pair = _as_doc(element) or {}
                if len(pair) != 2:
                    _fail(
                        40392,
                        "$arrayToObject requires an object keys of 'k' and 'v'. Found incorrect "
                        f"number of keys:{len(pair)}",
                    )
                if "k" not in pair or "v" not in pair:
                    _fail(
                        40393,
                        "$arrayToObject requires an object with keys 'k' and 'v'. Missing either "
                        f"or both keys from: {_show(pair)}",
                    )
                key, value = pair["k"], pair["v"]
                if type(key) is not str:
                    _fail(
                        40394,
                        "$arrayToObject requires an object with keys 'k' and 'v', where the value "
                        f"of 'k' must be of type string. Found type: {type_name(key)}",
                    )
                if "\0" in key:
                    _fail(4940401, "Key field cannot contain an embedded null byte")
            out[key] = value  # a repeated key keeps its first place and its last value
        return out

    return to_object


@_operator("$objectToArray")
def _object_to_array(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)

    def to_array(doc: dict[str, Any], v: Variables) -> Any:
        x = arg(doc, v)
        if _nullish(x):
            return None
        d = _as_doc(x)
        if d is None:
            _fail(40390, f"$objectToArray requires a document input, found: {type_name(x)}")
        return [{"k": k, "v": value} for k, value in d.items()]

    return to_array


@_operator("$setUnion", "$setIntersection")
def _set_union_intersection(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _operands(spec, defined)
    code = 17043 if op == "$setUnion" else 17047

    def combine(doc: dict[str, Any], v: Variables) -> Any:
        result: list[Any] | None = None
        for f in args:
            x = f(doc, v)
            if _nullish(x):
                return None
            if type(x) is not list:
                _fail(
                    code,
                    f"All operands of {op} must be arrays. One argument is of type: {type_name(x)}",
                )
            if result is None:
                result = _unique_sorted(x)
            elif op == "$setUnion":
                result = _unique_sorted([*result, *x])
            else:
                keys = [SortKey(e) for e in _unique_sorted(x)]
                result = [e for e in result if _member(keys, e)]
        return result if result is not None else []

    return combine


@_operator("$setDifference")
def _set_difference(spec: Any, defined: frozenset[str], op: str) -> Expression:
    left_f, right_f = _fixed(spec, defined, op, 2)

    def difference(doc: dict[str, Any], v: Variables) -> Any:
        a, b = left_f(doc, v), right_f(doc, v)
        if _nullish(a) or _nullish(b):
            return None
        if type(a) is not list:
            _fail(
                17048,
                "both operands of $setDifference must be arrays. First argument is of type: "
                f"{type_name(a)}",
            )
        if type(b) is not list:
            _fail(
                17049,
                "both operands of $setDifference must be arrays. Second argument is of type: "
                f"{type_name(b)}",
            )
        seen = [SortKey(e) for e in _unique_sorted(b)]
        out = []
        for e in a:
            if not _member(seen, e):
                out.append(e)
                bisect.insort(seen, SortKey(e))
        return out

    return difference


@_operator("$setEquals")
def _set_equals(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _operands(spec, defined)
    if len(args) < 2:
        _fail(17045, f"$setEquals needs at least two arguments had: {len(args)}")

    def equals(doc: dict[str, Any], v: Variables) -> Any:
        sets = []
        for i, f in enumerate(args):
            x = f(doc, v)
            if type(x) is not list:
                _fail(
                    17044,
                    f"All operands of $setEquals must be arrays. {i + 1}-th argument is of type: "
                    f"{type_name(x)}",
                )
            sets.append(_unique_sorted(x))
        first = sets[0]
        return all(
            len(s) == len(first) and all(compare(a, b) == 0 for a, b in zip(s, first))
            for s in sets[1:]
        )

    return equals


@_operator("$setIsSubset")
def _set_is_subset(spec: Any, defined: frozenset[str], op: str) -> Expression:
    left_f, right_f = _fixed(spec, defined, op, 2)

    def is_subset(doc: dict[str, Any], v: Variables) -> Any:
        a, b = left_f(doc, v), right_f(doc, v)
        if type(a) is not list:
            _fail(
                17046,
                "both operands of $setIsSubset must be arrays. First argument is of type: "
                f"{type_name(a)}",
            )
        if type(b) is not list:
            _fail(
                17042,
                "both operands of $setIsSubset must be arrays. Second argument is of type: "
                f"{type_name(b)}",
            )
        keys = [SortKey(e) for e in _unique_sorted(b)]
        return all(_member(keys, e) for e in a)

    return is_subset


@_operator("$anyElementTrue", "$allElementsTrue")
def _element_truth(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)
    code = 17041 if op == "$anyElementTrue" else 17040
    test = any if op == "$anyElementTrue" else all

    def truth(doc: dict[str, Any], v: Variables) -> Any:
        x = arg(doc, v)
        if type(x) is not list:
            _fail(code, f"{op}'s argument must be an array, but is {type_name(x)}")
        return test(truthy(e) for e in x)

    return truth


def _bind(spec: Mapping[str, Any]) -> str:
    """The variable an `as` field names ("this" when absent), checked as a user variable."""
    name = spec.get("as", "this")
    name = name if type(name) is str else ""
    _check_variable_name(name, write=True)
    return name


@_operator("$map")
def _map(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        _fail(16878, "$map only supports an object as its argument")
    for key in spec:
        if key not in ("input", "as", "in"):
            _fail(16879, f"Unrecognized parameter to $map: {key}")
    if "input" not in spec:
        _fail(16880, "Missing 'input' parameter to $map")
    if "in" not in spec:
        _fail(16882, "Missing 'in' parameter to $map")
    input_f = _compile(spec["input"], defined)
    name = _bind(spec)
    each = _compile(spec["in"], defined | {name})

    def map_(doc: dict[str, Any], v: Variables) -> Any:
        x = input_f(doc, v)
        if _nullish(x):
            return None
        if type(x) is not list:
            _fail(16883, f"input to $map must be an array not {type_name(x)}")
        scope = dict(v)
        out = []
        for element in x:
            scope[name] = element
            y = each(doc, scope)
            out.append(None if y is MISSING else y)
        return out

    return map_


@_operator("$filter")
def _filter(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        _fail(28646, "$filter only supports an object as its argument")
    for key in spec:
        if key not in ("input", "as", "cond", "limit"):
            _fail(28647, f"Unrecognized parameter to $filter: {key}")
    if "input" not in spec:
        _fail(28648, "Missing 'input' parameter to $filter")
    if "cond" not in spec:
        _fail(28650, "Missing 'cond' parameter to $filter")
    input_f = _compile(spec["input"], defined)
    name = _bind(spec)
    cond = _compile(spec["cond"], defined | {name})
    limit_f = _compile(spec["limit"], defined) if "limit" in spec else None

    def filter_(doc: dict[str, Any], v: Variables) -> Any:
        x = input_f(doc, v)
        if _nullish(x):
            return None
        if type(x) is not list:
            _fail(28651, f"input to $filter must be an array not {type_name(x)}")
        if not x:
            return x
        remaining = -1
        if limit_f is not None:
            limit = limit_f(doc, v)
            if not _nullish(limit):  # limit: null means no limit
                if not _integral(limit):
                    _fail(
                        327391,
                        "$filter: limit must be represented as a 32-bit integral value: "
                        f"{_show(limit)}",
                    )
                remaining = _coerce_int(limit)
                if remaining <= 0:
                    _fail(327392, f"$filter: limit must be greater than 0: {_show(limit)}")
        scope = dict(v)
        out = []
        for element in x:
            scope[name] = element
            if truthy(cond(doc, scope)):
                out.append(element)
                remaining -= 1
                if remaining == 0:
                    break
        return out

    return filter_


@_operator("$reduce")
def _reduce(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        _fail(40075, f"$reduce requires an object as an argument, found: {type_name(spec)}")
    parts: dict[str, Expression] = {}
    for key, sub in spec.items():
        if key in ("input", "initialValue"):
            parts[key] = _compile(sub, defined)
        elif key == "in":
            parts[key] = _compile(sub, defined | {"this", "value"})
        else:
            _fail(40076, f"$reduce found an unknown argument: {key}")
    for key, code in (("input", 40077), ("initialValue", 40078), ("in", 40079)):
        if key not in parts:
            _fail(code, f"$reduce requires '{key}' to be specified")
    input_f, initial_f, in_f = parts["input"], parts["initialValue"], parts["in"]

    def reduce_(doc: dict[str, Any], v: Variables) -> Any:
        x = input_f(doc, v)
        if _nullish(x):
            return None
        if type(x) is not list:
            _fail(40080, f"$reduce requires that 'input' be an array, found: {_show(x)}")
        acc = initial_f(doc, v)
        scope = dict(v)
        for element in x:
            scope["this"] = element
            scope["value"] = acc
            acc = in_f(doc, scope)
        return acc

    return reduce_


_SORT_CLAUSE_MESSAGE = "$sort key ordering must be 1 (for ascending) or -1 (for descending)"


@_operator("$sortArray")
def _sort_array(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        _fail(2942500, f"$sortArray requires an object as an argument, found: {type_name(spec)}")
    input_f: Expression | None = None
    sort_by: Any = MISSING
    for key, sub in spec.items():
        if key == "input":
            input_f = _compile(sub, defined)
        elif key == "sortBy":
            sort_by = sub
        else:
            _fail(2942501, f"$sortArray found an unknown argument: {key}")
    if input_f is None:
        _fail(2942502, "$sortArray requires 'input' to be specified")
    if sort_by is MISSING:
        _fail(2942503, "$sortArray requires 'sortBy' to be specified")
    direction = 0
    pattern = None
    if isinstance(sort_by, Mapping):
        if not sort_by or any(
            not _is_number(d) or _to_float(d) not in (1.0, -1.0) for d in sort_by.values()
        ):
            _fail(2942505, _SORT_CLAUSE_MESSAGE)
        pattern = parse_sort({k: int(_to_float(d)) for k, d in sort_by.items()})
    elif _is_number(sort_by):
        if _to_float(sort_by) not in (1.0, -1.0):
            _fail(2942506, "The $sort element value must be either 1 or -1")
        direction = int(_to_float(sort_by))
    else:
        _fail(
            2942507,
            "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort "
            "embedded fields",
        )
    array_f = input_f

    def sort_array(doc: dict[str, Any], v: Variables) -> Any:
        x = array_f(doc, v)
        if _nullish(x):
            return None
        if type(x) is not list:
            _fail(
                2942504,
                "The input argument to $sortArray must be an array, but was of type: "
                f"{type_name(x)}",
            )
        if len(x) < 2:
            return x
        if pattern is None:
            return sorted(x, key=functools.cmp_to_key(compare), reverse=direction < 0)
        return sort_documents([(_as_doc(e) or {}, e) for e in x], pattern)

    return sort_array


@_operator("$zip")
def _zip(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        _fail(34460, f"$zip only supports an object as an argument, found {type_name(spec)}")
    inputs: list[Expression] = []
    defaults: list[Expression] = []
    longest = False
    for key, sub in spec.items():
        if key == "inputs":
            if type(sub) is not list:
                _fail(34461, f"inputs must be an array of expressions, found {type_name(sub)}")
            inputs = [_compile(s, defined) for s in sub]
        elif key == "defaults":
            if type(sub) is not list:
                _fail(34462, f"defaults must be an array of expressions, found {type_name(sub)}")
            defaults = [_compile(s, defined) for s in sub]
        elif key == "useLongestLength":
            if type(sub) is not bool:
                _fail(34463, "useLongestLength must be a bool, found object")
            longest = sub
        else:
            _fail(34464, f"$zip found an unknown argument: {key}")
    if not inputs:
        _fail(34465, "$zip requires at least one input array")
    if defaults and not longest:
        _fail(34466, "cannot specify defaults unless useLongestLength is true")
    if defaults and len(defaults) != len(inputs):
        _fail(34467, "defaults and inputs must have the same length")

    def zip_(doc: dict[str, Any], v: Variables) -> Any:
        arrays = []
        for f in inputs:
            x = f(doc, v)
            if _nullish(x):
                return None
            if type(x) is not list:
                _fail(34468, f"$zip found a non-array expression in input: {_show(x)}")
            arrays.append(x)
        sizes = [len(a) for a in arrays]
        fill: list[Any] = [None] * len(arrays)
        if min(sizes) != max(sizes) and defaults:
            fill = [f(doc, v) for f in defaults]
        length = max(sizes) if longest else min(sizes)
        return [
            [a[row] if row < len(a) else fill[col] for col, a in enumerate(arrays)]
            for row in range(length)
        ]

    return zip_


# -- types and conversions -------------------------------------------------------------------------------


@_operator("$type")
def _type(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)
    return lambda doc, v: type_name(arg(doc, v))


@_operator("$isNumber")
def _is_number_op(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)
    return lambda doc, v: _is_number(arg(doc, v))


_TYPE_CODES = {**BSON_TYPE_CODES, "missing": 0}
_CODE_TYPES = {code: name for name, code in _TYPE_CODES.items()}
_NO_ON_ERROR = "in $convert with no onError value"


def _target_type(to: Any) -> str:
    """$convert's 'to': a type name or a BSON type code."""
    if type(to) is str:
        if to not in _TYPE_CODES:
            _fail("BadValue", f"Unknown type name: {to}")
        return to
    if _is_number(to):
        if not _integral(to):
            _fail("FailedToParse", "In $convert, numeric 'to' argument is not an integer")
        code = _coerce_int(to)
        if code not in _CODE_TYPES:
            _fail(
                "FailedToParse",
                f"In $convert, numeric value for 'to' does not correspond to a BSON type: {code}",
            )
        return _CODE_TYPES[code]
    _fail(
        "FailedToParse",
        f"$convert's 'to' argument must be a string or number, but is {type_name(to)}",
    )


def _conversion_failure(message: str) -> NoReturn:
    _fail("ConversionFailure", message)


def _finite_double(x: float) -> None:
    if math.isnan(x):
        _conversion_failure(f"Attempt to convert NaN value to integer type {_NO_ON_ERROR}")
    if math.isinf(x):
        _conversion_failure(f"Attempt to convert infinity value to integer type {_NO_ON_ERROR}")


def _double_to_integer(x: float, lo: int, hi: int) -> int:
    _finite_double(x)
    if not lo <= x < hi + 1:
        _conversion_failure(
            f"Conversion would overflow target type {_NO_ON_ERROR}: {_fmt_double(x)}"
        )
    return int(x)


def _decimal_to_integer(x: Decimal128, lo: int, hi: int) -> int:
    d = x.to_decimal()
    if d.is_nan():
        _conversion_failure(f"Attempt to convert NaN value to integer type {_NO_ON_ERROR}")
    if d.is_infinite():
        _conversion_failure(f"Attempt to convert infinity value to integer type {_NO_ON_ERROR}")
    n = int(d)  # toward zero
    if not lo <= n <= hi:
        _conversion_failure(f"Conversion would overflow target type {_NO_ON_ERROR}: {x}")
    return n


_INTEGER_TEXT = re.compile(r"[+-]?\d+")
_FLOAT_TEXT = re.compile(
    r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf(?:inity)?|nan)", re.IGNORECASE
)


def _parse_number(text: str, target: str) -> Any:
    """NumberParser as $convert uses it: base 10 for integers, strtod's syntax for doubles and
    decimals, and never hexadecimal."""

    def failed(reason: str) -> NoReturn:
        _conversion_failure(f"Failed to parse number '{text}' {_NO_ON_ERROR}: {reason}")

    if text.startswith("0x"):
        _conversion_failure(f"Illegal hexadecimal input {_NO_ON_ERROR}: {text}")
    if target in ("int", "long"):
        if not text:
            failed("No digits")
        if not _INTEGER_TEXT.fullmatch(text):
            body = text[1:] if text[0] in "+-" else text
            bad = next((c for c in body if not c.isdigit()), body[:1])
            failed(f'Bad digit "{bad}" while parsing {text}')
        n = int(text)
        lo, hi = (_I32_MIN, _I32_MAX) if target == "int" else (_I64_MIN, _I64_MAX)
        if not lo <= n <= hi:
            failed("Out of range")
        return n if target == "int" else Int64(n)
    if not text:
        failed("No digits")
    if not _FLOAT_TEXT.fullmatch(text):
        failed("Did not consume whole string.")
    if target == "double":
        return float(text)
    return _mkdec(decimal.Decimal(text))


def _parse_object_id(text: str) -> ObjectId:
    if len(text) != 24:
        reason = f"Invalid string length for parsing to OID, expected 24 but found {len(text)}"
    elif not all(c in "0123456789abcdefABCDEF" for c in text):
        reason = f"Invalid character found in hex string: {text}"
    else:
        return ObjectId(text)
    _conversion_failure(f"Failed to parse objectId '{text}' {_NO_ON_ERROR}: {reason}")


def _parse_date_text(text: str, tz: dates.TimeZone, fmt: str | None = None) -> DatetimeMS:
    try:
        return _date(dates.parse_date(text, tz, fmt))
    except dates.DateParseError as exc:
        _conversion_failure(str(exc))


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


def _convert(x: Any, target: str) -> Any:
    """$convert's conversion table; ConversionFailure for what it lacks."""
    source = type_name(x)
    if target == "bool":
        if source in ("int", "long", "double", "decimal"):
            return truthy(x)
        if source == "bool":
            return x
        if source in _ALWAYS_TRUE:
            return True
    elif target == "double":
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
                _conversion_failure(f"Conversion would overflow target type {_NO_ON_ERROR}: {x}")
            return f
    elif target == "string":
        if source == "double":
            if math.isinf(x):
                return "-Infinity" if x < 0 else "Infinity"
            if math.isnan(x):
                return "NaN"
            if x == 0 and math.copysign(1.0, x) < 0:
                return "-0"
            return _fmt_double(x)
        if source == "string":
            return x
        if source == "objectId":
            return str(x)
        if source == "bool":
            return "true" if x else "false"
        if source == "date":
            return _iso(date_ms(x))
        if source in ("int", "long"):
            return str(int(x))
        if source == "decimal":
            return str(x)
    elif target == "objectId":
        if source == "string":
            return _parse_object_id(x)
        if source == "objectId":
            return x
    elif target == "date":
        if source == "double":
            return _date(_double_to_integer(x, _I64_MIN, _I64_MAX))
        if source == "string":
            return _parse_date_text(x, dates.UTC)
        if source in ("objectId", "timestamp", "date"):
            return _date(_coerce_date(x))
        if source == "long":
            return _date(int(x))
        if source == "decimal":
            return _date(_decimal_to_integer(x, _I64_MIN, _I64_MAX))
    elif target in ("int", "long"):
        lo, hi = (_I32_MIN, _I32_MAX) if target == "int" else (_I64_MIN, _I64_MAX)
        wrap: Callable[[int], Any] = int if target == "int" else Int64
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
                _conversion_failure(f"Conversion would overflow target type {_NO_ON_ERROR}: ")
            return wrap(int(x))
        if source == "decimal":
            return wrap(_decimal_to_integer(x, lo, hi))
        if source == "date" and target == "long":
            return Int64(date_ms(x))
    elif target == "decimal":
        if source == "double":
            return _mkdec(_double_to_dec(x))
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
    _conversion_failure(
        f"Unsupported conversion from {source} to {target} in $convert with no onError value"
    )


def _converter(
    input_f: Expression,
    to_f: Expression,
    on_error: Expression | None,
    on_null: Expression | None,
) -> Expression:
    def convert(doc: dict[str, Any], v: Variables) -> Any:
        to = to_f(doc, v)
        x = input_f(doc, v)
        target = None if _nullish(to) else _target_type(to)
        if _nullish(x):
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


@_operator("$convert")
def _convert_op(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        _fail(
            "FailedToParse",
            f"$convert expects an object of named arguments but found: {type_name(spec)}",
        )
    parts: dict[str, Expression] = {}
    for key, sub in spec.items():
        if key not in ("input", "to", "onError", "onNull"):
            _fail("FailedToParse", f"$convert found an unknown argument: {key}")
        parts[key] = _compile(sub, defined)
    if "input" not in parts:
        _fail("FailedToParse", "Missing 'input' parameter to $convert")
    if "to" not in parts:
        _fail("FailedToParse", "Missing 'to' parameter to $convert")
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


@_operator(*_SHORTHANDS)
def _convert_shorthand(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _operands(spec, defined)
    if len(args) != 1:
        _fail(50723, f"{op} requires a single argument, got {len(args)}")
    return _converter(args[0], _const(_SHORTHANDS[op]), None, None)


# -- dates -----------------------------------------------------------------------------------------------

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


def _zone(tz_f: Expression | None, doc: dict[str, Any], v: Variables) -> dates.TimeZone | None:
    """makeTimeZone: UTC without an argument, None (a null result) for a nullish one."""
    if tz_f is None:
        return dates.UTC
    name = tz_f(doc, v)
    if _nullish(name):
        return None
    if type(name) is not str:
        _fail(40517, f"timezone must evaluate to a string, found {type_name(name)}")
    return _time_zone(name)


@_operator(*_DATE_PARTS)
def _date_part(spec: Any, defined: frozenset[str], op: str) -> Expression:
    tz_f: Expression | None = None
    if isinstance(spec, Mapping) and spec and next(iter(spec)).startswith("$"):
        date_f = _compile(spec, defined)
    elif isinstance(spec, Mapping):
        date_spec: Any = MISSING
        for key, sub in spec.items():
            if key == "date":
                date_spec = sub
            elif key == "timezone":
                tz_f = _compile(sub, defined)
            else:
                _fail(40535, f'unrecognized option to {op}: "{key}"')
        if date_spec is MISSING:
            _fail(40539, f"missing 'date' argument to {op}, provided: {op}: {_show_bson(spec)}")
        date_f = _compile(date_spec, defined)
    elif type(spec) is list:
        if len(spec) != 1:
            _fail(
                40536,
                f"{op} accepts exactly one argument if given an array, but was given {len(spec)}",
            )
        date_f = _compile(spec[0], defined)
    else:
        date_f = _compile(spec, defined)
    part = _DATE_PARTS[op]

    def date_part(doc: dict[str, Any], v: Variables) -> Any:
        x = date_f(doc, v)
        if _nullish(x):
            return None
        ms = _coerce_date(x)
        if tz_f is None:
            return part(dates.parts_of(ms, dates.UTC))
        name = tz_f(doc, v)
        if _nullish(name):
            return None
        if type(name) is not str:
            _fail(
                40533,
                f"{op} requires a string for the timezone argument, but was given a "
                f"{type_name(name)} ({_show(name)})",
            )
        return part(dates.parts_of(ms, _time_zone(name)))

    return date_part


def _object_args(
    spec: Any, allowed: tuple[str, ...], not_object: tuple[int, str], unknown: tuple[int, str]
) -> dict[str, Any]:
    if not isinstance(spec, Mapping):
        _fail(not_object[0], not_object[1])
    for key in spec:
        if key not in allowed:
            _fail(unknown[0], unknown[1].format(key=key))
    return dict(spec)


def _maybe(args: dict[str, Any], key: str, defined: frozenset[str]) -> Expression | None:
    return _compile(args[key], defined) if key in args else None


@_operator("$dateToString")
def _date_to_string(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _object_args(
        spec,
        ("format", "date", "timezone", "onNull"),
        (18629, "$dateToString only supports an object as its argument"),
        (18534, "Unrecognized argument to $dateToString: {key}"),
    )
    if "date" not in args:
        _fail(18628, "Missing 'date' parameter to $dateToString")
    date_f = _compile(args["date"], defined)
    format_f = _maybe(args, "format", defined)
    tz_f = _maybe(args, "timezone", defined)
    on_null = _maybe(args, "onNull", defined)

    def to_string(doc: dict[str, Any], v: Variables) -> Any:
        x = date_f(doc, v)
        fmt: Any = dates.ISO_FORMAT
        if format_f is not None:
            fmt = format_f(doc, v)
            if not _nullish(fmt):
                if type(fmt) is not str:
                    _fail(
                        18533,
                        "$dateToString requires that 'format' be a string, found: "
                        f"{type_name(fmt)} with value {_show(fmt)}",
                    )
                dates.validate_format(fmt)
        tz = _zone(tz_f, doc, v)
        if _nullish(x):
            return on_null(doc, v) if on_null is not None else None
        if tz is None or _nullish(fmt):
            return None
        return dates.format_date(fmt, _coerce_date(x), tz)

    return to_string


@_operator("$dateFromString")
def _date_from_string(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _object_args(
        spec,
        ("dateString", "timezone", "format", "onNull", "onError"),
        (
            40540,
            f"$dateFromString only supports an object as an argument, found: {type_name(spec)}",
        ),
        (40541, "Unrecognized argument to $dateFromString: {key}"),
    )
    if "dateString" not in args:
        _fail(40542, "Missing 'dateString' parameter to $dateFromString")
    text_f = _compile(args["dateString"], defined)
    tz_f = _maybe(args, "timezone", defined)
    format_f = _maybe(args, "format", defined)
    on_null = _maybe(args, "onNull", defined)
    on_error = _maybe(args, "onError", defined)

    def from_string(doc: dict[str, Any], v: Variables) -> Any:
        text = text_f(doc, v)
        fmt: Any = None
        if format_f is not None:
            fmt = format_f(doc, v)
            if not _nullish(fmt):
                if type(fmt) is not str:
                    _fail(
                        40684,
                        "$dateFromString requires that 'format' be a string, found: "
                        f"{type_name(fmt)} with value {_show(fmt)}",
                    )
                dates.validate_parse_format(fmt)
        tz = _zone(tz_f, doc, v)
        if _nullish(text):
            return on_null(doc, v) if on_null is not None else None
        try:
            if type(text) is not str:
                _conversion_failure(
                    "$dateFromString requires that 'dateString' be a string, found: "
                    f"{type_name(text)} with value {_show(text)}"
                )
            if tz is None or (format_f is not None and _nullish(fmt)):
                return None
            return _parse_date_text(text, tz, fmt)
        except QueryError as exc:
            if exc.code_name == "ConversionFailure" and on_error is not None:
                return on_error(doc, v)
            raise

    return from_string


@_operator("$dateToParts")
def _date_to_parts(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _object_args(
        spec,
        ("date", "timezone", "iso8601"),
        (40524, "$dateToParts only supports an object as its argument"),
        (40520, "Unrecognized argument to $dateToParts: {key}"),
    )
    if "date" not in args:
        _fail(40522, "Missing 'date' parameter to $dateToParts")
    date_f = _compile(args["date"], defined)
    tz_f = _maybe(args, "timezone", defined)
    iso_f = _maybe(args, "iso8601", defined)

    def to_parts(doc: dict[str, Any], v: Variables) -> Any:
        x = date_f(doc, v)
        tz = _zone(tz_f, doc, v)
        if tz is None:
            return None
        iso = False
        if iso_f is not None:
            flag = iso_f(doc, v)
            if _nullish(flag):
                return None
            if type(flag) is not bool:
                _fail(40521, f"iso8601 must evaluate to a bool, found {type_name(flag)}")
            iso = flag
        if _nullish(x):
            return None
        p = dates.parts_of(_coerce_date(x), tz)
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


@_operator("$dateFromParts")
def _date_from_parts(spec: Any, defined: frozenset[str], op: str) -> Expression:
    names = (
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
    args = _object_args(
        spec,
        names,
        (40519, "$dateFromParts only supports an object as its argument"),
        (40518, "Unrecognized argument to $dateFromParts: {key}"),
    )
    if "year" not in args and "isoWeekYear" not in args:
        _fail(40516, "$dateFromParts requires either 'year' or 'isoWeekYear' to be present")
    if "year" in args and any(k in args for k in ("isoWeekYear", "isoWeek", "isoDayOfWeek")):
        _fail(40489, "$dateFromParts does not allow mixing natural dates with ISO dates")
    if "isoWeekYear" in args and any(k in args for k in ("year", "month", "day")):
        _fail(40525, "$dateFromParts does not allow mixing ISO dates with natural dates")
    fields = {k: _compile(args[k], defined) for k in names if k in args and k != "timezone"}
    tz_f = _maybe(args, "timezone", defined)
    iso = "isoWeekYear" in args

    def number(doc: dict[str, Any], v: Variables, name: str, default: int, bounded: bool) -> Any:
        f = fields.get(name)
        if f is None:
            return default
        x = f(doc, v)
        if _nullish(x):
            return None
        if not _integral64(x):
            _fail(
                40515,
                f"'{name}' must evaluate to an integer, found {type_name(x)} with value {_show(x)}",
            )
        n = _coerce_long(x)
        if bounded and not _DATE_PART_RANGE[0] <= n <= _DATE_PART_RANGE[1]:
            _fail(
                31034,
                f"'{name}' must evaluate to a value in the range [-32768, 32767]; value {n} is "
                "not in range",
            )
        return n

    def from_parts(doc: dict[str, Any], v: Variables) -> Any:
        hour = number(doc, v, "hour", 0, True)
        minute = number(doc, v, "minute", 0, True)
        second = number(doc, v, "second", 0, False)
        millisecond = number(doc, v, "millisecond", 0, False)
        if hour is None or minute is None or second is None or millisecond is None:
            return None
        tz = _zone(tz_f, doc, v)
        if tz is None:
            return None
        if not iso:
            year = number(doc, v, "year", 1970, False)
            month = number(doc, v, "month", 1, True)
            day = number(doc, v, "day", 1, True)
            if year is None or month is None or day is None:
                return None
            if not 1 <= year <= 9999:
                _fail(
                    40523,
                    f"'year' must evaluate to an integer in the range 1 to 9999, found {year}",
                )
            wall = dates.local_ms(year, month, day, hour, minute, second, millisecond)
        else:
            iso_year = number(doc, v, "isoWeekYear", 1970, False)
            week = number(doc, v, "isoWeek", 1, True)
            weekday = number(doc, v, "isoDayOfWeek", 1, True)
            if iso_year is None or week is None or weekday is None:
                return None
            if not 1 <= iso_year <= 9999:
                _fail(
                    31095,
                    "'isoWeekYear' must evaluate to an integer in the range 1 to 9999, found "
                    f"{iso_year}",
                )
            wall = dates.iso_local_ms(iso_year, week, weekday, hour, minute, second, millisecond)
        return _date(tz.to_utc(wall))

    return from_parts


def _time_unit(op: str, unit: Any) -> str:
    if type(unit) is not str:
        _fail(5439013, f"{op} requires 'unit' to be a string, but got {type_name(unit)}")
    if not dates.is_time_unit(unit):
        _fail(5439014, f"{op} parameter 'unit' value cannot be recognized as a time unit: {unit}")
    return unit


def _start_of_week(op: str, value: Any) -> int:
    if type(value) is not str:
        _fail(5439015, f"{op} requires 'startOfWeek' to be a string, but got {type_name(value)}")
    day = dates.day_of_week(value)
    if day is None:
        _fail(
            5439016,
            f"{op} parameter 'startOfWeek' value cannot be recognized as a day of a week: {value}",
        )
    return day


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


@_operator("$dateAdd", "$dateSubtract")
def _date_add(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        _fail(5166400, f"{op} expects an object as its argument")
    for key in spec:
        if key not in ("startDate", "unit", "amount", "timezone"):
            _fail(
                5166401,
                f"Unrecognized argument to {op}: {key}. Expected arguments are startDate, unit, "
                "amount, and optionally timezone.",
            )
    if not all(k in spec for k in ("startDate", "unit", "amount")):
        _fail(5166402, f"{op} requires startDate, unit, and amount to be present")
    start_f = _compile(spec["startDate"], defined)
    unit_f = _compile(spec["unit"], defined)
    amount_f = _compile(spec["amount"], defined)
    tz_f = _compile(spec["timezone"], defined) if "timezone" in spec else None
    sign = 1 if op == "$dateAdd" else -1

    def date_add(doc: dict[str, Any], v: Variables) -> Any:
        start = start_f(doc, v)
        if _nullish(start):
            return None
        unit = unit_f(doc, v)
        if _nullish(unit):
            return None
        amount = amount_f(doc, v)
        if _nullish(amount):
            return None
        tz = _zone(tz_f, doc, v)
        if tz is None:
            return None
        if not _coercible_to_date(start):
            _fail(5166403, f"{op} requires startDate to be convertible to a date")
        if type(unit) is not str:
            _fail(5166404, f"{op} expects string defining the time unit")
        if not dates.is_time_unit(unit):
            _fail("FailedToParse", f"unknown time unit value: {unit}")
        if not _integral64(amount):
            _fail(5166405, f"{op} expects integer amount of time units")
        n = _coerce_long(amount)
        if sign < 0 and n == _I64_MIN:
            _fail(6045000, f"invalid $dateSubtract 'amount' parameter value: {n}")
        result = dates.date_add(_coerce_date(start), unit, sign * n, tz)
        if not _I64_MIN <= result <= _I64_MAX:
            _fail("Overflow", f"{op} overflowed")
        return _date(result)

    return date_add


@_operator("$dateDiff")
def _date_diff(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _object_args(
        spec,
        ("startDate", "endDate", "unit", "timezone", "startOfWeek"),
        (5166301, "$dateDiff only supports an object as its argument"),
        (5166302, "Unrecognized argument to $dateDiff: {key}"),
    )
    for key, code in (("startDate", 5166303), ("endDate", 5166304), ("unit", 5166305)):
        if key not in args:
            _fail(code, f"Missing '{key}' parameter to $dateDiff")
    start_f = _compile(args["startDate"], defined)
    end_f = _compile(args["endDate"], defined)
    unit_f = _compile(args["unit"], defined)
    tz_f = _maybe(args, "timezone", defined)
    week_f = _maybe(args, "startOfWeek", defined)

    def as_date(value: Any, name: str) -> int:
        if not _coercible_to_date(value):
            _fail(5166307, f"$dateDiff requires '{name}' to be a date, but got {type_name(value)}")
        return _coerce_date(value)

    def date_diff(doc: dict[str, Any], v: Variables) -> Any:
        start = start_f(doc, v)
        if _nullish(start):
            return None
        end = end_f(doc, v)
        if _nullish(end):
            return None
        unit = unit_f(doc, v)
        if _nullish(unit):
            return None
        week_value: Any = "sunday"
        if week_f is not None and unit == "week":
            week_value = week_f(doc, v)
            if _nullish(week_value):
                return None
        tz = _zone_in_context(op, tz_f, doc, v)
        if tz is None:
            return None
        start_ms, end_ms = as_date(start, "startDate"), as_date(end, "endDate")
        unit = _time_unit(op, unit)
        first_day = _start_of_week(op, week_value)
        return Int64(dates.date_diff(start_ms, end_ms, unit, tz, first_day))

    return date_diff


@_operator("$dateTrunc")
def _date_trunc(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = _object_args(
        spec,
        ("date", "unit", "binSize", "timezone", "startOfWeek"),
        (5439007, "$dateTrunc only supports an object as its argument"),
        (
            5439008,
            "Unrecognized argument to $dateTrunc: {key}. Expected arguments are date, unit, and "
            "optionally, binSize, timezone, startOfWeek",
        ),
    )
    if "date" not in args:
        _fail(5439009, "Missing 'date' parameter to $dateTrunc")
    if "unit" not in args:
        _fail(5439010, "Missing 'unit' parameter to $dateTrunc")
    date_f = _compile(args["date"], defined)
    unit_f = _compile(args["unit"], defined)
    bin_f = _maybe(args, "binSize", defined)
    tz_f = _maybe(args, "timezone", defined)
    week_f = _maybe(args, "startOfWeek", defined)

    def date_trunc(doc: dict[str, Any], v: Variables) -> Any:
        x = date_f(doc, v)
        if _nullish(x):
            return None
        unit = unit_f(doc, v)
        if _nullish(unit):
            return None
        bin_size: Any = 1
        if bin_f is not None:
            bin_size = bin_f(doc, v)
            if _nullish(bin_size):
                return None
        week_value: Any = "sunday"
        if week_f is not None and unit == "week":
            week_value = week_f(doc, v)
            if _nullish(week_value):
                return None
        tz = _zone_in_context(op, tz_f, doc, v)
        if tz is None:
            return None
        if not _coercible_to_date(x):
            _fail(5439012, f"$dateTrunc requires 'date' to be a date, but got {type_name(x)}")
        unit = _time_unit(op, unit)
        if not _integral64(bin_size):
            _fail(
                5439017,
                "$dateTrunc requires 'binSize' to be a 64-bit integer, but got value "
                f"'{_show(bin_size)}' of type {type_name(bin_size)}",
            )
        size = _coerce_long(bin_size)
        if size <= 0:
            _fail(
                5439018, f"$dateTrunc requires 'binSize' to be greater than 0, but got value {size}"
            )
        first_day = _start_of_week(op, week_value)
        return _date(dates.date_trunc(_coerce_date(x), unit, size, tz, first_day))

    return date_trunc


@_operator("$tsSecond", "$tsIncrement")
def _ts_part(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)
    code = 5687301 if op == "$tsSecond" else 5687302

    def ts_part(doc: dict[str, Any], v: Variables) -> Any:
        x = arg(doc, v)
        if _nullish(x):
            return None
        if type(x) is not Timestamp:
            _fail(code, f" Argument to {op} must be a timestamp, but is {type_name(x)}")
        return Int64(x.time if op == "$tsSecond" else x.inc)

    return ts_part


# -- objects and the rest --------------------------------------------------------------------------------


def _constant(spec: Any) -> tuple[bool, Any]:
    """Whether an argument parses to a constant (a literal or $literal), and its value."""
    if type(spec) is str:
        return not spec.startswith("$"), spec
    if isinstance(spec, Mapping) and len(spec) == 1:
        key = next(iter(spec))
        if key in ("$literal", "$const"):
            return True, spec[key]
    if isinstance(spec, (Mapping, list)):
        return False, None
    return True, spec


def _field_argument(op: str, spec: Any, codes: tuple[int, int, int]) -> str:
    if type(spec) is str and spec.startswith("$"):
        _fail(
            codes[0],
            f"'{spec}' is a field path reference which is not allowed in this context. Did you "
            f"mean {{$literal: '{spec}'}}?",
        )
    is_constant, value = _constant(spec)
    if not is_constant:
        _fail(
            codes[1],
            f"{op} requires 'field' to evaluate to a constant, but got a non-constant argument",
        )
    if type(value) is not str:
        _fail(
            codes[2],
            f"{op} requires 'field' to evaluate to type String, but got {type_name(value)}",
        )
    return value


@_operator("$getField")
def _get_field(spec: Any, defined: frozenset[str], op: str) -> Expression:
    field_spec: Any = MISSING
    input_f: Expression | None = None
    if isinstance(spec, Mapping) and not (spec and next(iter(spec)).startswith("$")):
        # Named arguments, unless the object is itself an expression like {$literal: "a"}.
        for key, sub in spec.items():
            if key == "field":
                field_spec = sub
            elif key == "input":
                input_f = _compile(sub, defined)
            else:
                _fail(3041701, f"$getField found an unknown argument: {key}")
    else:
        field_spec = spec
    if field_spec is MISSING:
        _fail(3041702, "$getField requires 'field' to be specified")
    _compile(field_spec, defined)
    field = _field_argument(op, field_spec, (5654600, 5654601, 5654602))
    source = input_f if input_f is not None else _var_path("CURRENT", (), defined)

    def get_field(doc: dict[str, Any], v: Variables) -> Any:
        x = source(doc, v)
        if x is MISSING:
            return MISSING
        if _nullish(x):
            return None
        d = _as_doc(x)
        return MISSING if d is None else d.get(field, MISSING)

    return get_field


@_operator("$setField", "$unsetField")
def _set_field(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        _fail(4161100, f"{op} only supports an object as its argument")
    unset = op == "$unsetField"
    parts: dict[str, Any] = {}
    for key, sub in spec.items():
        if key in ("field", "input") or (key == "value" and not unset):
            parts[key] = sub
        else:
            _fail(4161101, f"{op} found an unknown argument: {key}")
    if unset:
        parts["value"] = "$$REMOVE"
    if "field" not in parts:
        _fail(4161102, f"{op} requires 'field' to be specified")
    if "value" not in parts:
        _fail(4161103, f"{op} requires 'value' to be specified")
    if "input" not in parts:
        _fail(4161109, f"{op} requires 'input' to be specified")
    _compile(parts["field"], defined)
    field = _field_argument(op, parts["field"], (4161108, 4161106, 4161107))
    input_f = _compile(parts["input"], defined)
    value_f = _compile(parts["value"], defined)

    def set_field(doc: dict[str, Any], v: Variables) -> Any:
        x = input_f(doc, v)
        if _nullish(x):
            return None
        d = _as_doc(x)
        if d is None:
            _fail(4161105, "$setField requires 'input' to evaluate to type Object")
        value = value_f(doc, v)
        out = dict(d)
        if value is MISSING:
            out.pop(field, None)
        else:
            out[field] = value
        return out

    return set_field


@_operator("$bsonSize")
def _bson_size(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)

    def bson_size(doc: dict[str, Any], v: Variables) -> Any:
        x = arg(doc, v)
        if _nullish(x):
            return None
        d = _as_doc(x)
        if d is None:
            _fail(31393, f"$bsonSize requires a document input, found: {type_name(x)}")
        return len(bson.encode(d))

    return bson_size


@_operator("$binarySize")
def _binary_size(spec: Any, defined: frozenset[str], op: str) -> Expression:
    (arg,) = _fixed(spec, defined, op, 1)

    def binary_size(doc: dict[str, Any], v: Variables) -> Any:
        x = arg(doc, v)
        if _nullish(x):
            return None
        if type(x) is str:
            return len(x.encode())
        if isinstance(x, (bytes, uuid.UUID)):
            return len(x.bytes if isinstance(x, uuid.UUID) else x)
        _fail(51276, f"$binarySize requires a string or BinData argument, found: {type_name(x)}")

    return binary_size


@_operator("$rand")
def _rand(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        _fail(10065, "invalid parameter: expected an object ($rand)")
    if spec:
        _fail(3040501, "$rand does not currently accept arguments")
    return lambda doc, v: random.random()


@_operator("$function", "$accumulator", "$meta", "$toHashedIndexKey", "$median", "$percentile")
def _unsupported(spec: Any, defined: frozenset[str], op: str) -> Expression:
    _fail("NotImplemented", f"{op} is not supported")


# -- accumulators ----------------------------------------------------------------------------------------


class _FloatSum:
    """An exact running sum of doubles (Shewchuk's partials, as math.fsum keeps them), standing in
    for MongoDB's double-double summation; infinities and NaN are kept aside."""

    __slots__ = ("partials", "special")

    def __init__(self) -> None:
        self.partials: list[float] = []
        self.special = 0.0

    def add(self, x: float) -> None:
        if not math.isfinite(x):
            self.special += x
            return
        partials = self.partials
        i = 0
        for y in partials:
            if abs(x) < abs(y):
                x, y = y, x
            hi = x + y
            lo = y - (hi - x)
            if lo:
                partials[i] = lo
                i += 1
            x = hi
        partials[i:] = [x]

    def total(self, ints: int = 0) -> float:
        if self.special != 0 or math.isnan(self.special):
            return self.special
        pieces = list(self.partials)
        while ints:
            f = float(ints)
            pieces.append(f)
            ints -= int(f)
        try:
            return math.fsum(pieces)
        except OverflowError:
            return sum(pieces)

    def exact(self) -> decimal.Decimal:
        with decimal.localcontext(decimal.Context(prec=1200, Emax=10**6, Emin=-(10**6))):
            return sum((decimal.Decimal(p) for p in self.partials), decimal.Decimal(0))


class _State:
    """One accumulator's state: `feed` takes a value; `value` is the result so far. As an
    Accumulator it feeds its expression's value for each document."""

    __slots__ = ("expr",)

    def __init__(self, expr: Expression) -> None:
        self.expr = expr

    def add(self, doc: dict[str, Any], variables: Variables) -> None:
        self.feed(self.expr(doc, variables))

    def result(self) -> Any:
        return self.value()

    def feed(self, x: Any) -> None:
        raise NotImplementedError

    def value(self) -> Any:
        raise NotImplementedError


class _Sum(_State):
    """$sum: numbers only, in the narrowest type that holds the total."""

    __slots__ = ("kind", "ints", "floats", "dec", "count")

    def __init__(self, expr: Expression) -> None:
        super().__init__(expr)
        self.kind = _INT
        self.ints = 0
        self.floats = _FloatSum()
        self.dec = decimal.Decimal(0)
        self.count = 0

    def feed(self, x: Any) -> None:
        k = _kind(x)
        if not k:
            return
        self.count += 1
        self.kind = max(self.kind, k)
        if k == _DECIMAL:
            self.dec = _DEC.add(self.dec, x.to_decimal())
        elif k == _DOUBLE:
            self.floats.add(x)
        else:
            self.ints += int(x)

    def _decimal_total(self) -> decimal.Decimal:
        exact = (
            self.floats.exact() + self.ints if self.floats.partials else decimal.Decimal(self.ints)
        )
        if self.floats.special != 0 or math.isnan(self.floats.special):
            exact = decimal.Decimal(repr(self.floats.special).replace("inf", "Infinity"))
        return _DEC.add(self.dec, exact)

    def value(self) -> Any:
        if self.kind == _INT:
            return _int_or_long(self.ints)
        if self.kind == _LONG:
            return _long(self.ints)
        if self.kind == _DOUBLE:
            return self.floats.total(self.ints)
        return _mkdec(self._decimal_total())


class _Avg(_Sum):
    """$avg: the mean of the numbers (a double, or a decimal once one is seen); null if none."""

    __slots__ = ()

    def value(self) -> Any:
        if not self.count:
            return None
        if self.kind == _DECIMAL:
            return _mkdec(_DEC.divide(self._decimal_total(), decimal.Decimal(self.count)))
        return self.floats.total(self.ints) / self.count


class _MinMax(_State):
    """$min/$max: BSON order; null, undefined and missing values take no part."""

    __slots__ = ("sign", "best")

    def __init__(self, expr: Expression, sign: int) -> None:
        super().__init__(expr)
        self.sign = sign
        self.best: Any = MISSING

    def feed(self, x: Any) -> None:
        if _nullish(x):
            return
        if self.best is MISSING or compare(x, self.best) * self.sign > 0:
            self.best = x

    def value(self) -> Any:
        return None if self.best is MISSING else self.best


class _First(_State):
    """$first: the first document's value, null where it had none."""

    __slots__ = ("seen", "first")

    def __init__(self, expr: Expression) -> None:
        super().__init__(expr)
        self.seen = False
        self.first: Any = None

    def feed(self, x: Any) -> None:
        if not self.seen:
            self.seen = True
            self.first = None if x is MISSING else x

    def value(self) -> Any:
        return self.first


class _Last(_State):
    __slots__ = ("last",)

    def __init__(self, expr: Expression) -> None:
        super().__init__(expr)
        self.last: Any = None

    def feed(self, x: Any) -> None:
        self.last = None if x is MISSING else x

    def value(self) -> Any:
        return self.last


class _Push(_State):
    """$push: every value, missing ones left out."""

    __slots__ = ("items",)

    def __init__(self, expr: Expression) -> None:
        super().__init__(expr)
        self.items: list[Any] = []

    def feed(self, x: Any) -> None:
        if x is not MISSING:
            self.items.append(x)

    def value(self) -> Any:
        return self.items


class _AddToSet(_State):
    """$addToSet: distinct values by BSON equality, in first-seen order."""

    __slots__ = ("items",)

    def __init__(self, expr: Expression) -> None:
        super().__init__(expr)
        self.items: dict[Any, Any] = {}

    def feed(self, x: Any) -> None:
        if x is not MISSING:
            self.items.setdefault(_hash_key(x), x)

    def value(self) -> Any:
        return list(self.items.values())


class _MergeObjects(_State):
    """$mergeObjects: later fields win; null and missing inputs are skipped."""

    __slots__ = ("merged",)

    def __init__(self, expr: Expression) -> None:
        super().__init__(expr)
        self.merged: dict[str, Any] = {}

    def feed(self, x: Any) -> None:
        if _nullish(x):
            return
        d = _as_doc(x)
        if d is None:
            _fail(
                40400,
                f"$mergeObjects requires object inputs, but input {_show(x)} is of type "
                f"{type_name(x)}",
            )
        self.merged.update(d)

    def value(self) -> Any:
        return self.merged


class _StdDev(_State):
    """$stdDevPop/$stdDevSamp over the numbers (Welford's method, in doubles)."""

    __slots__ = ("sample", "count", "mean", "m2")

    def __init__(self, expr: Expression, sample: bool) -> None:
        super().__init__(expr)
        self.sample = sample
        self.count = 0
        self.mean = 0.0
        self.m2 = 0.0

    def feed(self, x: Any) -> None:
        if not _is_number(x):
            return
        f = _to_float(x)
        self.count += 1
        delta = f - self.mean
        self.mean += delta / self.count
        self.m2 += delta * (f - self.mean)

    def value(self) -> Any:
        n = self.count - 1 if self.sample else self.count
        if n <= 0:
            return None
        return math.sqrt(self.m2 / n)


_ACCUMULATORS: dict[str, Callable[[Expression], _State]] = {
    "$sum": _Sum,
    "$avg": _Avg,
    "$min": lambda e: _MinMax(e, -1),
    "$max": lambda e: _MinMax(e, 1),
    "$first": _First,
    "$last": _Last,
    "$push": _Push,
    "$addToSet": _AddToSet,
    "$mergeObjects": _MergeObjects,
    "$stdDevPop": lambda e: _StdDev(e, False),
    "$stdDevSamp": lambda e: _StdDev(e, True),
}


def _no_expression(doc: dict[str, Any], v: Variables) -> Any:
    return MISSING


def _accumulator_expression(make: Callable[[Expression], _State]) -> _Compiler:
    """ExpressionFromAccumulator: one array argument feeds its elements; otherwise every
    argument is fed as it is."""

    def compiler(spec: Any, defined: frozenset[str], op: str) -> Expression:
        args = _operands(spec, defined)

        def evaluate(doc: dict[str, Any], v: Variables) -> Any:
            state = make(_no_expression)
            if len(args) == 1:
                x = args[0](doc, v)
                if type(x) is list:
                    for element in x:
                        state.feed(element)
                else:
                    state.feed(x)
            else:
                for f in args:
                    state.feed(f(doc, v))
            return state.value()

        return evaluate

    return compiler


for _name in ("$sum", "$avg", "$min", "$max", "$mergeObjects", "$stdDevPop", "$stdDevSamp"):
    _operator(_name)(_accumulator_expression(_ACCUMULATORS[_name]))


# -- the n-accumulators: $firstN, $lastN, $maxN, $minN, $top, $bottom, $topN, $bottomN -----------------


def _valid_n(x: Any) -> int:
    """AccumulatorN::validateN: a positive integral number."""
    if not _is_number(x):
        _fail(5787902, f"Value for 'n' must be of integral type, but found {_show(x)}")
    n = _exact_int(x)
    if n is None:
        _fail(5787903, f"Value for 'n' must be of integral type, but found {_show(x)}")
    if n <= 0:
        _fail(5787908, f"'n' must be greater than 0, found {n}")
    return n


class _StateN(_State):
    """An accumulator that keeps n values; `n` is evaluated with the group's first document."""

    __slots__ = ("n_expr", "n", "items")

    def __init__(self, expr: Expression, n_expr: Expression) -> None:
        super().__init__(expr)
        self.n_expr = n_expr
        self.n = 0
        self.items: list[Any] = []

    def add(self, doc: dict[str, Any], variables: Variables) -> None:
        if not self.n:
            self.n = _valid_n(self.n_expr(doc, variables))
        self.feed(self.expr(doc, variables))

    def start(self, n: Any) -> None:
        self.n = _valid_n(n)


class _FirstN(_StateN):
    __slots__ = ()

    def feed(self, x: Any) -> None:
        if len(self.items) < self.n:
            self.items.append(None if x is MISSING else x)

    def value(self) -> Any:
        return self.items


class _LastN(_StateN):
    __slots__ = ()

    def feed(self, x: Any) -> None:
        self.items.append(None if x is MISSING else x)
        if len(self.items) > 2 * self.n:
            del self.items[: -self.n]

    def value(self) -> Any:
        return self.items[-self.n :] if self.n else []


class _MinMaxN(_StateN):
    """$minN/$maxN: the n smallest (ascending) or largest (descending); nulls take no part."""

    __slots__ = ("sign",)

    def __init__(self, expr: Expression, n_expr: Expression, sign: int) -> None:
        super().__init__(expr, n_expr)
        self.sign = sign

    def feed(self, x: Any) -> None:
        if _nullish(x):
            return
        self.items.append(x)
        if len(self.items) > 2 * self.n:
            self.items = self._best()

    def _best(self) -> list[Any]:
        ordered = sorted(self.items, key=functools.cmp_to_key(compare), reverse=self.sign > 0)
        return ordered[: self.n]

    def value(self) -> Any:
        return self._best()


class _TopBottomN(_StateN):
    """$top/$bottom(N): the outputs of the first or last n documents in `sortBy` order (sort
    keys as $sort makes them, from the document's fields); ties keep the first seen."""

    __slots__ = ("keys", "spec", "bottom", "single")

    def __init__(
        self,
        expr: Expression,
        n_expr: Expression,
        keys: list[tuple[Expression, int]],
        bottom: bool,
        single: bool,
    ) -> None:
        super().__init__(expr, n_expr)
        self.keys = keys
        self.spec = parse_sort({f"k{i}": d for i, (_, d) in enumerate(keys)})
        self.bottom = bottom
        self.single = single

    def add(self, doc: dict[str, Any], variables: Variables) -> None:
        if not self.n:
            self.n = _valid_n(self.n_expr(doc, variables))
        output = self.expr(doc, variables)
        key = {f"k{i}": f(doc, variables) for i, (f, _) in enumerate(self.keys)}
        self.items.append(({k: x for k, x in key.items() if x is not MISSING}, output))
        if len(self.items) > 2 * self.n:
            self.items = self._kept()

    def _kept(self) -> list[Any]:
        assert self.spec is not None
        ordered = sort_documents([(key, (key, out)) for key, out in self.items], self.spec)
        return ordered[-self.n :] if self.bottom else ordered[: self.n]

    def value(self) -> Any:
        outputs = [None if out is MISSING else out for _, out in self._kept()]
        if self.single:
            return outputs[0] if outputs else None
        return outputs


def _n_args(
    op: str, arg: Any, not_object_code: int, defined: frozenset[str]
) -> tuple[Expression, Expression]:
    if not isinstance(arg, Mapping):
        _fail(not_object_code, f"specification must be an object; found {op}: {_show_bson(arg)}")
    parts: dict[str, Expression] = {}
    for key, sub in arg.items():
        if key not in ("input", "n"):
            _fail(5787901, f"Unknown argument for 'n' operator: {key}")
        parts[key] = _compile(sub, defined)
    if "n" not in parts:
        _fail(5787906, "Missing value for 'n'")
    if "input" not in parts:
        _fail(5787907, "Missing value for 'input'")
    return parts["input"], parts["n"]


_N_ACCUMULATORS: dict[str, tuple[int, Callable[[Expression, Expression], _StateN]]] = {
    "$firstN": (5787801, _FirstN),
    "$lastN": (5787801, _LastN),
    "$minN": (5787900, lambda e, n: _MinMaxN(e, n, -1)),
    "$maxN": (5787900, lambda e, n: _MinMaxN(e, n, 1)),
}


@_operator(*_N_ACCUMULATORS)
def _n_expression(spec: Any, defined: frozenset[str], op: str) -> Expression:
    code, make = _N_ACCUMULATORS[op]
    input_f, n_f = _n_args(op, spec, code, defined)

    def evaluate(doc: dict[str, Any], v: Variables) -> Any:
        state = make(_no_expression, n_f)
        state.start(n_f(doc, v))
        x = input_f(doc, v)
        if type(x) is not list:
            _fail(5788200, "Input must be an array")
        for element in x:
            state.feed(element)
        return state.value()

    return evaluate


def _top_bottom(op: str, arg: Any, defined: frozenset[str]) -> Callable[[], Accumulator]:
    single = op in ("$top", "$bottom")
    if not isinstance(arg, Mapping):
        _fail(5788001, f"specification must be an object; found {op}: {_show_bson(arg)}")
    parts: dict[str, Any] = {}
    for key, sub in arg.items():
        if key == "output" or key == "sortBy" or (key == "n" and not single):
            parts[key] = sub
        else:
            _fail(5788002, f"Unknown argument to {op} '{key}'")
    n_f = _const(1) if single else _compile(parts["n"], defined) if "n" in parts else None
    if n_f is None:
        _fail(5788003, "Missing value for 'n'")
    if "output" not in parts:
        _fail(5788004, "Missing value for 'output'")
    if "sortBy" not in parts:
        _fail(5788005, "Missing value for 'sortBy'")
    sort_by = parts["sortBy"]
    if not isinstance(sort_by, Mapping) or not sort_by:
        _fail(15976, "$sort stage must have at least one sort key")
    keys: list[tuple[Expression, int]] = []
    for field, direction in sort_by.items():
        if not _is_number(direction) or _to_float(direction) not in (1.0, -1.0):
            _fail(15975, _SORT_CLAUSE_MESSAGE)
        keys.append((_compile_path("$" + field, defined), int(_to_float(direction))))
    output_f = _compile(parts["output"], defined)
    bottom = op in ("$bottom", "$bottomN")
    return lambda: _TopBottomN(output_f, n_f, keys, bottom, single)


def compile_accumulator(
    op: str, arg: Any, defined: frozenset[str] = frozenset()
) -> Callable[[], Accumulator]:
    """A factory of fresh accumulators for one $group output field `{op: arg}`. Raises
    QueryError: 15952 for an unknown operator, 40237 for an array argument, TypeMismatch for a
    $count with arguments, and whatever compiling `arg` raises."""
    if op == "$count":
        if not (isinstance(arg, Mapping) and not arg):
            _fail("TypeMismatch", "$count takes no arguments, i.e. $count:{}")
        one = _const(1)
        return lambda: _Sum(one)
    if type(arg) is list:
        _fail(40237, f"The {op} accumulator is a unary operator")
    if op in _N_ACCUMULATORS:
        code, make_n = _N_ACCUMULATORS[op]
        input_f, n_f = _n_args(op, arg, code, defined)
        return lambda: make_n(input_f, n_f)
    if op in ("$top", "$bottom", "$topN", "$bottomN"):
        return _top_bottom(op, arg, defined)
    make = _ACCUMULATORS.get(op)
    if make is None:
        _fail(15952, f"unknown group operator '{op}'")
    expr = _compile(arg, defined)
    return lambda: make(expr)


def command_variables(let: Mapping[str, Any] | None, now_ms: int) -> dict[str, Any]:
    """The variables a command's `let` defines, each a constant expression evaluated once (it may
    use $$NOW and the variables before it), with NOW, the command's time."""
    variables: dict[str, Any] = {"NOW": DatetimeMS(now_ms)}
    for name, spec in (let or {}).items():
        _check_variable_name(name, write=True)
        value = compile_expression(spec, frozenset(variables))({}, variables)
        variables[name] = None if value is MISSING else value
    return variables


__all__ = [
    "Accumulator",
    "Expression",
    "Variables",
    "command_variables",
    "compile_accumulator",
    "compile_expression",
    "truthy",
    "type_name",
]
