"""What each query operator tests on one value: the tests the matcher's leaves hold, built from
arguments checked the way MongoDB's parser checks them (its codes and messages), under the query's
collation where one compares strings."""

from __future__ import annotations

import math
import operator
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from bson import Binary, DBRef, Decimal128, Int64, ObjectId, Regex

from ebbdb.storage.core.collation import Collation, has_string
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import (
    INT64_MAX,
    INT64_MIN,
    IntegerError,
    is_number,
    parse_integer,
    regex_flags,
    render_element,
    to_float,
    type_name,
)
from ebbdb.storage.query.compare import (
    BSON_TYPE_CODES,
    RANK_MAXKEY,
    RANK_MINKEY,
    RANK_NUMBER,
    UNDEFINED,
    compare,
    equal,
    is_nan,
    rank,
)
from ebbdb.storage.query.match_tree import Test
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.regex import (
    BadRegex,
    BadRegexFlag,
    check_options,
    compile_regex,
    finds_in,
)


def is_operator_doc(value: Any) -> bool:
    """MongoDB's isExpressionDocument: an object whose first key starts with '$', unless it is a
    DBRef ({$ref, $id, ...}), which is a value to compare."""
    if not isinstance(value, Mapping) or not value:
        return False
    if not next(iter(value)).startswith("$"):
        return False
    return not ("$ref" in value and "$id" in value)


def is_regex(value: Any) -> bool:
    return isinstance(value, (Regex, re.Pattern))


def shown_element(name: str, value: Any) -> str:
    """An argument as the matcher's messages quote it, `name: value`; a NaN double prints as `nan`
    here (the tests pin it; values.render prints `nan.0`)."""
    if type(value) is float and value != value:
        return f"{name}: nan"
    return render_element(name, value)


def integer_argument(
    value: Any, name: str, *, non_negative: bool = False, int32: bool = False
) -> int:
    """parse_integer with the matcher's rendering of the argument."""
    return parse_integer(value, shown_element(name, value), non_negative=non_negative, int32=int32)


RANGE_OPS: dict[str, tuple[Callable[[Any, Any], bool], Callable[[int], bool]]] = {
    "$gt": (operator.gt, lambda c: c > 0),
    "$gte": (operator.ge, lambda c: c >= 0),
    "$lt": (operator.lt, lambda c: c < 0),
    "$lte": (operator.le, lambda c: c <= 0),
}


# -- equality, ranges, $in --------------------------------------------------------------------------


def eq_test(q: Any) -> Test:
    """MongoDB equality for one value: numbers compare across types, null also matches missing."""
    if q is None:
        return lambda v: v is None or v is MISSING
    t = type(q)
    if t is str:
        return lambda v: type(v) is str and v == q
    if t is bool:
        return lambda v: v is q
    if (t is int or t is Int64 or t is float) and q == q:

        def number(v: Any) -> bool:
            tv = type(v)
            if tv is int or tv is float or tv is Int64:
                return bool(v == q)
            return tv is Decimal128 and equal(v, q)

        return number
    if t is ObjectId:
        return lambda v: type(v) is ObjectId and v == q
    return lambda v: v is not MISSING and equal(v, q)


def range_test(q: Any, op: str) -> Test:
    py_op, ok = RANGE_OPS[op]
    inclusive = op in ("$gte", "$lte")
    qrank = rank(q)
    if qrank in (RANK_MINKEY, RANK_MAXKEY):
        # Every value, and a missing field too, sorts between MinKey and MaxKey.
        missing = (qrank == RANK_MAXKEY and op in ("$lt", "$lte")) or (
            qrank == RANK_MINKEY and op in ("$gt", "$gte")
        )
        return lambda v: missing if v is MISSING else ok(compare(v, q))
    if q is None:
        if inclusive:
            return lambda v: v is None or v is MISSING
        return lambda v: False
    if is_nan(q):
        # NaN equals only NaN and lies outside every range: {$gte: NaN} matches NaN, {$gt: NaN} nothing.
        if inclusive:
            return is_nan
        return lambda v: False
    t = type(q)
    if t is int or t is Int64 or t is float:

        def number(v: Any) -> bool:
            tv = type(v)
            if tv is int or tv is Int64:
                return bool(py_op(v, q))
            if tv is float:
                return bool(py_op(v, q))  # false for NaN, which lies outside every range
            return tv is Decimal128 and not is_nan(v) and ok(compare(v, q))

        return number
    if t is str:
        # Code point order is UTF-8 byte order, which is how MongoDB compares strings.
        return lambda v: type(v) is str and bool(py_op(v, q))

    if qrank == RANK_NUMBER:  # a Decimal128 bound
        return lambda v: is_number(v) and not is_nan(v) and ok(compare(v, q))

    # Comparisons stay within a type bracket: {$gt: 5} never matches a string.
    def bracketed(v: Any) -> bool:
        return v is not MISSING and rank(v) == qrank and ok(compare(v, q))

    return bracketed


def in_test(values: list[Any]) -> Test:
    """$in: hashed lookups for the common scalar types, equality for the rest, regexes match."""
    strings: set[str] = set()
    numbers: set[Any] = set()
    bools: set[bool] = set()
    oids: set[ObjectId] = set()
    others: list[Any] = []
    regexes: list[Test] = []
    has_null = has_nan = False
    for q in values:
        if is_operator_doc(q):
            raise QueryError("BadValue", "cannot nest $ under $in")
        t = type(q)
        if is_regex(q):
            regexes.append(regex_test(*regex_source(q)))
        elif q is None:
            has_null = True
        elif t is str:
            strings.add(q)
        elif t is bool:
            bools.add(q)
        elif t is int or t is Int64 or t is float:
            if q != q:
                has_nan = True
            else:
                numbers.add(int(q) if t is Int64 else q)
        elif t is Decimal128:
            d = q.to_decimal()
            if d.is_nan():
                has_nan = True
            else:
                numbers.add(d)
        elif t is ObjectId:
            oids.add(q)
        else:
            others.append(q)

    def test(v: Any) -> bool:
        t = type(v)
        if t is str:
            if v in strings:
                return True
        elif t is int or t is Int64 or t is float:
            if v in numbers or (has_nan and v != v):
                return True
        elif t is bool:
            if v in bools:
                return True
        elif v is None:
            if has_null:
                return True
        elif v is MISSING:
            return has_null
        elif t is Decimal128:
            d = v.to_decimal()
            if (has_nan and d.is_nan()) or (not d.is_nan() and d in numbers):
                return True
        elif t is ObjectId:
            if v in oids:
                return True
        for q in others:
            if equal(v, q):
                return True
        for r in regexes:
            if r(v):
                return True
        return False

    return test


def compare_test(q: Any, op: str, collation: Collation | None) -> Test:
    """`op` ($eq, $gt, $gte, $lt, $lte) against `q` under a collation (None: the simple one): a
    value holding strings compares as its collated form, strings as their sort keys. A `q`
    without strings compares the same under any collation, so it keeps the plain test."""
    if collation is None or not has_string(q):
        return eq_test(q) if op == "$eq" else range_test(q, op)
    collate = collation.collate
    cq = collate(q)
    base = eq_test(cq) if op == "$eq" else range_test(cq, op)
    return lambda v: base(collate(v))


def collated_in_test(values: list[Any], collation: Collation | None) -> Test:
    """$in under a collation (None: the simple one): its values compared as collated forms; its
    regular expressions match the strings as they are (a collation does not apply to them)."""
    if collation is None or not any(has_string(v) for v in values):
        return in_test(values)
    collate = collation.collate
    plain = in_test([collate(v) for v in values if not is_regex(v)])
    regexes = [regex_test(*regex_source(v)) for v in values if is_regex(v)]

    def in_values(v: Any) -> bool:
        return plain(collate(v)) or any(r(v) for r in regexes)

    return in_values


def exists_test(v: Any) -> bool:
    return v is not MISSING


def true_value(v: Any) -> bool:
    """BSON truthiness, as $exists reads its argument: only false, 0, null and undefined are false
    (an empty string or array is true)."""
    if v is None or v is UNDEFINED:
        return False
    t = type(v)
    if t is bool:
        return bool(v)
    if t is int or t is Int64 or t is float:
        return bool(v != 0)
    if t is Decimal128:
        return bool(v.to_decimal() != 0)
    return True


# -- $regex ---------------------------------------------------------------------------------------


def regex_source(value: Any) -> tuple[str, str]:
    """(pattern, option letters) of a bson.Regex or a compiled Python pattern."""
    pattern = value.pattern
    if isinstance(pattern, bytes):
        pattern = pattern.decode("utf-8", "replace")
    return pattern, regex_flags(value.flags)


def regex_document(context: Mapping[str, Any]) -> tuple[str, str]:
    """{$regex, $options} read together, in MongoDB's order of checks."""
    pattern = ""
    options = ""
    for op, v in context.items():
        if op == "$regex":
            if type(v) is str:  # (not Code, a str subclass)
                pattern = v
            elif is_regex(v):
                pattern, flags = regex_source(v)
                if flags:
                    if options:
                        raise QueryError("Location51074", "options set in both $regex and $options")
                    options = flags
            else:
                raise QueryError("BadValue", "$regex has to be a string")
        elif op == "$options":
            if type(v) is not str:
                raise QueryError("BadValue", "$options has to be a string")
            if options:
                raise QueryError("Location51075", "options set in both $regex and $options")
            options = v
    return pattern, options


def regex_test(pattern: str, options: str) -> Test:
    """Matches strings the pattern finds a match in, and regex values with the same pattern and
    options (MongoDB's RegexMatchExpression), checked in MongoDB's order: the option letters, an
    embedded null, then the pattern itself."""
    try:
        check_options(options)
    except BadRegexFlag as exc:
        # MongoDB's message starts with the (here empty) operator name and a space.
        raise QueryError("Location51108", f" invalid flag in regex options: {exc.letter}") from None
    if "\0" in pattern:
        raise QueryError("BadValue", "Regular expression cannot contain an embedded null byte")
    try:
        finds = finds_in(compile_regex(pattern, options))
    except BadRegex as exc:
        raise QueryError("Location51091", f"Regular expression is invalid: {exc}") from None
    letters = "".join(sorted(options))

    def test(v: Any) -> bool:
        t = type(v)
        if t is str:
            return finds(v)
        if t is Regex or isinstance(v, re.Pattern):
            return bool(v.pattern == pattern) and regex_flags(v.flags) == letters
        return False

    return test


# -- $type ----------------------------------------------------------------------------------------

_TYPE_CODES = frozenset(BSON_TYPE_CODES.values())
_NUMBER_CODES = frozenset({1, 16, 18, 19})


def type_code(v: Any) -> int:
    """The BSON type code of a decoded value; 0 (EOO) for a missing one. pymongo decodes symbols as
    str, DBPointer as DBRef (so it reads as an object here), and binary subtype 4 may come as a
    UUID."""
    code = BSON_TYPE_CODES.get(type_name(v))
    if code is not None:
        return code
    if v is UNDEFINED:
        return 6
    if isinstance(v, uuid.UUID):
        return 5
    return 0


def type_codes(path: str, arg: Any) -> frozenset[int]:
    """$type's argument (a type name or code, or a list of them) as the codes it accepts."""
    specs = arg if isinstance(arg, list) else [arg]
    codes: set[int] = set()
    for spec in specs:
        if type(spec) is str:  # (not Code, a str subclass: a type name is a plain string)
            if spec == "number":
                codes |= _NUMBER_CODES
            elif spec in BSON_TYPE_CODES:
                codes.add(BSON_TYPE_CODES[spec])
            elif spec == "missing":
                raise QueryError(
                    "BadValue",
                    "'missing' is not a legal type name. To query for non-existence of a field, "
                    "use {$exists:false}.",
                )
            else:
                raise QueryError("BadValue", f"Unknown type name alias: {spec}")
        elif is_number(spec):
            # BSONElement::number() through a C++ stream: six significant digits.
            shown = f"{to_float(spec):g}"
            try:
                code = parse_integer(spec, "")
            except IntegerError:
                raise QueryError("BadValue", f"Invalid numerical type code: {shown}") from None
            if code == 0:
                raise QueryError(
                    "BadValue",
                    f"Invalid numerical type code: {shown}. Instead use {{$exists:false}}.",
                )
            if code not in _TYPE_CODES:
                raise QueryError("BadValue", f"Invalid numerical type code: {shown}")
            codes.add(code)
        else:
            raise QueryError("TypeMismatch", "type must be represented as a number or a string")
    if not codes:
        raise QueryError("FailedToParse", f"{path} must match at least one type")
    return frozenset(codes)


def type_test(codes: frozenset[int]) -> Test:
    return lambda v: type_code(v) in codes


# -- arrays: $size, $elemMatch ----------------------------------------------------------------------


def size_argument(arg: Any) -> int:
    try:
        return integer_argument(arg, "$size", non_negative=True, int32=True)
    except IntegerError as exc:
        raise QueryError("BadValue", f"Failed to parse $size. {exc.reason}") from None


def size_test(n: int) -> Test:
    return lambda v: type(v) is list and len(v) == n


def element_document(e: Any) -> dict[str, Any] | None:
    """An array element as $elemMatch's document form sees it: documents, and arrays as documents
    keyed "0", "1", ...; other elements never match."""
    if isinstance(e, dict):
        return e
    if type(e) is list:
        return {str(i): x for i, x in enumerate(e)}
    if type(e) is DBRef:
        return dict(e.as_doc())
    if isinstance(e, Mapping):
        return dict(e)
    return None


# -- $mod and the bit operators --------------------------------------------------------------------


def mod_arguments(arg: Any) -> tuple[int, int]:
    """$mod's [divisor, remainder], each truncated toward zero to a 64-bit integer."""
    if not isinstance(arg, list):
        raise QueryError("BadValue", "malformed mod, needs to be an array")
    if not arg:
        raise QueryError("BadValue", "malformed mod, not enough elements")
    if not is_number(arg[0]):
        raise QueryError("BadValue", "malformed mod, divisor not a number")
    if len(arg) < 2:
        raise QueryError("BadValue", "malformed mod, not enough elements")
    if not is_number(arg[1]):
        raise QueryError("BadValue", "malformed mod, remainder not a number")
    if len(arg) > 2:
        raise QueryError("BadValue", "malformed mod, too many elements")
    divisor = _coerce_long(arg[0], "divisor")
    remainder = _coerce_long(arg[1], "remainder")
    if divisor == 0:
        raise QueryError("BadValue", "divisor cannot be 0")
    return divisor, remainder


def mod_test(divisor: int, remainder: int) -> Test:
    def test(v: Any) -> bool:
        dividend = _dividend(v)
        if dividend is None:
            return False
        if divisor == -1:
            return remainder == 0  # MongoDB's overflow-safe mod: x % -1 is 0
        r = abs(dividend) % abs(divisor)
        # C's remainder takes the dividend's sign.
        return (-r if dividend < 0 else r) == remainder

    return test


def _coerce_long(value: Any, what: str) -> int:
    """A $mod argument truncated toward zero to a 64-bit integer, or MongoDB's error."""
    n = _truncate(value)
    reason = None
    if n is None:
        reason = "Unable to coerce NaN/Inf to integral type"
    elif not INT64_MIN <= n <= INT64_MAX:
        reason = "Out of bounds coercing to integral value"
    if n is None or reason is not None:
        raise QueryError(
            "BadValue", f"malformed mod, {what} value is invalid :: caused by :: {reason}"
        )
    return n


def _dividend(v: Any) -> int | None:
    """A document value as $mod's dividend: numbers truncated toward zero; NaN, infinities and
    values beyond 64 bits never match."""
    if not is_number(v):
        return None
    n = _truncate(v)
    return n if n is not None and INT64_MIN <= n <= INT64_MAX else None


def _truncate(v: Any) -> int | None:
    """A number truncated toward zero; None for NaN and infinities."""
    t = type(v)
    if t is float:
        return int(v) if math.isfinite(v) else None
    if t is Decimal128:
        d = v.to_decimal()
        return int(d) if d.is_finite() else None
    return int(v)


def bit_positions(path: str, op: str, arg: Any) -> tuple[int, ...]:
    """A bit operator's argument (positions, a mask, or BinData) as the bit positions it tests."""
    if isinstance(arg, list):
        positions: list[int] = []
        for i, p in enumerate(arg):
            try:
                positions.append(integer_argument(p, str(i), non_negative=True, int32=True))
            except IntegerError as exc:
                raise QueryError(
                    "BadValue", f"Failed to parse bit position. {exc.reason}"
                ) from None
        return tuple(positions)
    if is_number(arg):
        try:
            mask = integer_argument(arg, op, non_negative=True)
        except IntegerError as exc:
            raise QueryError("FailedToParse", exc.reason) from None
        return tuple(b for b in range(64) if mask >> b & 1)
    if isinstance(arg, bytes):
        return tuple(8 * i + b for i, byte in enumerate(arg) for b in range(8) if byte >> b & 1)
    raise QueryError(
        "BadValue",
        f"{path} takes an Array, a number, or a BinData but received: {shown_element(op, arg)}",
    )


def bits_test(op: str, positions: tuple[int, ...]) -> Test:
    # Numbers are sign-extended 64-bit integers: a position past 63 tests the sign bit.
    number_mask = 0
    for p in positions:
        number_mask |= 1 << min(p, 63)
    want_set = op in ("$bitsAllSet", "$bitsAnySet")
    want_all = op in ("$bitsAllSet", "$bitsAllClear")

    def test(v: Any) -> bool:
        t = type(v)
        if t is bytes or t is Binary:
            data = bytes(v)
            bits = (p < 8 * len(data) and bool(data[p >> 3] >> (p & 7) & 1) for p in positions)
            hits = (bit == want_set for bit in bits)
            return all(hits) if want_all else any(hits)
        n = _bits_number(v)
        if n is None:
            return False
        selected = (n if want_set else ~n) & number_mask
        return selected == number_mask if want_all else selected != 0

    return test


def _bits_number(v: Any) -> int | None:
    t = type(v)
    if t is int or t is Int64:
        return int(v)
    if t is float:
        # Only integral doubles within 64 bits take part.
        if v != v or not INT64_MIN <= v <= INT64_MAX or v != int(v):
            return None
        return int(v)
    if t is Decimal128:
        d = v.to_decimal()
        if not d.is_finite():
            return None
        n = int(d.to_integral_value())
        return max(INT64_MIN, min(n, INT64_MAX))
    return None
