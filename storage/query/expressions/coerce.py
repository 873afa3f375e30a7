"""Value's numeric kinds and coercions as the operators use them: the widening order of int, long,
double and decimal, Decimal128 rounding, integral tests, and coercion to long, int, date and
string."""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable
from typing import Any

from bson import Code, Decimal128, Int64, ObjectId, Timestamp
from bson.decimal128 import create_decimal128_context

from ebbdb.storage.core.values import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN
from ebbdb.storage.query import dates
from ebbdb.storage.query.compare import date_ms
from ebbdb.storage.query.expressions.core import fail, fmt_double, is_date, nullish, type_name

DEC = create_decimal128_context()

# Numeric kinds in widening order, as Value::getWidestNumeric ranks them.
INT, LONG, DOUBLE, DECIMAL = 1, 2, 3, 4


def kind(v: Any) -> int:
    """The number's kind (INT, LONG, DOUBLE, DECIMAL), 0 for anything else."""
    t = type(v)
    if t is int:
        return INT if INT32_MIN <= v <= INT32_MAX else LONG
    if t is float:
        return DOUBLE
    if t is Int64:
        return LONG
    if t is Decimal128:
        return DECIMAL
    return 0


def double_to_dec(x: float, digits: int = 15) -> decimal.Decimal:
    """A double as Decimal128(double) makes it: rounded to `digits` significant digits, which are
    kept even when they are zeros ($toDecimal of 2.5 is 2.50000000000000)."""
    if math.isnan(x):
        return decimal.Decimal("NaN")
    if math.isinf(x):
        return decimal.Decimal("Infinity" if x > 0 else "-Infinity")
    if x == 0:  # MongoDB converts a zero as it is, its sign kept, without rounding it
        return decimal.Decimal(x)
    return decimal.Decimal(f"{x:.{digits - 1}e}")


def to_dec(v: Any) -> decimal.Decimal:
    """Value::coerceToDecimal (a double through its 15 significant digits)."""
    t = type(v)
    if t is Decimal128:
        return v.to_decimal()  # type: ignore[no-any-return]
    if t is float:
        return double_to_dec(v)
    return decimal.Decimal(int(v))


def mkdec(d: decimal.Decimal) -> Decimal128:
    """A Decimal128 of `d` rounded to 34 digits (a negative zero keeps its sign, as IEEE 754
    arithmetic gives it: -1 * 0 is -0)."""
    return Decimal128(DEC.create_decimal(d))


def int_or_long(n: int) -> Any:
    """Value::createIntOrLong, and a double past int64 (where MongoDB's long math overflows)."""
    if INT32_MIN <= n <= INT32_MAX:
        return n
    if INT64_MIN <= n <= INT64_MAX:
        return Int64(n)
    return float(n)


def long(n: int) -> Any:
    return Int64(n) if INT64_MIN <= n <= INT64_MAX else float(n)


def narrowest(
    k: int, integer: int, double: Callable[[], float], dec: Callable[[], decimal.Decimal]
) -> Any:
    """A total in the numeric kind `k` it has widened to: an int or a long from `integer` (a
    double past int64), else `double()` or `dec()` as a Decimal128."""
    if k == INT:
        return int_or_long(integer)
    if k == LONG:
        return long(integer)
    if k == DOUBLE:
        return double()
    return mkdec(dec())


def exact_int(v: Any) -> int | None:
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


def integral(v: Any) -> bool:
    """Value::integral: a number that is exactly a 32-bit integer."""
    n = exact_int(v)
    return n is not None and INT32_MIN <= n <= INT32_MAX


def integral64(v: Any) -> bool:
    n = exact_int(v)
    return n is not None and INT64_MIN <= n <= INT64_MAX


def coerce_long(v: Any) -> int:
    """Value::coerceToLong: numbers truncated toward zero (clamped where C++ would be undefined)."""
    t = type(v)
    if t is float:
        if math.isnan(v):
            return 0
        if math.isinf(v):
            return INT64_MAX if v > 0 else INT64_MIN
        return max(INT64_MIN, min(INT64_MAX, int(v)))
    if t is Decimal128:
        d = v.to_decimal()
        if not d.is_finite():
            return 0 if d.is_nan() else (INT64_MAX if d > 0 else INT64_MIN)
        return max(INT64_MIN, min(INT64_MAX, int(d)))
    if t is int or t is Int64:
        return int(v)
    fail(16004, f"can't convert from BSON type {type_name(v)} to long")


def coerce_int(v: Any) -> int:
    n = coerce_long(v)
    # C++'s narrowing keeps the low 32 bits.
    n &= 0xFFFFFFFF
    return n - 2**32 if n > INT32_MAX else n


def c_remainder(a: int, b: int) -> int:
    """C's % (sign of the dividend); overflow::safeMod makes x % -1 zero."""
    if b == -1:
        return 0
    r = abs(a) % abs(b)
    return -r if a < 0 else r


def float_pow(base: float, exp: float) -> float:
    """C's pow: overflow is an infinity and a domain error NaN (Python's raise)."""
    try:
        return math.pow(base, exp)
    except OverflowError:
        negative = base < 0 and float(exp).is_integer() and int(exp) % 2 == 1
        return -math.inf if negative else math.inf
    except ValueError:
        return math.nan


def fmod(a: float, b: float) -> float:
    """C's fmod, which MongoDB uses: an infinite dividend gives NaN (Python's raises)."""
    try:
        return math.fmod(a, b)
    except ValueError:
        return math.nan


# -- dates and strings -----------------------------------------------------------------------------


def coercible_to_date(v: Any) -> bool:
    t = type(v)
    return is_date(v) or t is Timestamp or t is ObjectId


def coerce_date(v: Any) -> int:
    """Value::coerceToDate: dates, timestamps and ObjectIds as milliseconds since the epoch."""
    t = type(v)
    if is_date(v):
        return date_ms(v)
    if t is Timestamp:
        return int(v.time) * 1000
    if t is ObjectId:
        return int.from_bytes(v.binary[:4], "big") * 1000
    fail(16006, f"can't convert from BSON type {type_name(v)} to Date")


def iso(ms: int) -> str:
    return dates.format_date(dates.ISO_FORMAT, ms, dates.UTC)


def _timestamp_pretty(ts: Timestamp) -> str:
    p = dates.parts_of(int(ts.time) * 1000, dates.UTC)
    month = dates.MONTH_NAMES[p.month - 1][:3]
    return f"{month} {p.day:2d} {p.hour:02d}:{p.minute:02d}:{p.second:02d}:{ts.inc}"


def coerce_string(v: Any) -> str:
    """Value::coerceToString, as $toLower, $substr and $strcasecmp read their input."""
    t = type(v)
    if t is str:
        return v  # type: ignore[no-any-return]
    if nullish(v):
        return ""
    if t is float:
        return fmt_double(v)
    if t is int or t is Int64:
        return str(int(v))
    if t is Decimal128:
        return str(v)
    if is_date(v):
        return iso(date_ms(v))
    if t is Timestamp:
        return _timestamp_pretty(v)
    if t is Code:
        return str(v)
    fail(16007, f"can't convert from BSON type {type_name(v)} to String")
