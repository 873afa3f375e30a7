"""Arithmetic: $add, $subtract, $multiply, $divide, $mod, the one-argument math operators, $log,
$pow, $round/$trunc and the bitwise operators, with MongoDB's type widening (int, long, double,
decimal), long overflow into double, and Decimal128 through the Intel library's IEEE 754 rules."""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable
from typing import Any

from bson import Decimal128, Int64
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core.values import INT32_MAX, INT64_MAX, INT64_MIN, to_float
from ebbdb.storage.query.compare import date_ms
from ebbdb.storage.query.expressions.coerce import (
    DEC,
    DECIMAL,
    DOUBLE,
    INT,
    LONG,
    c_remainder,
    coerce_int,
    coerce_long,
    double_to_dec,
    float_pow,
    fmod,
    int_or_long,
    integral,
    kind,
    long,
    mkdec,
    narrowest,
    to_dec,
)
from ebbdb.storage.query.expressions.core import (
    NULL,
    NUMBER_TYPES,
    Check,
    Expression,
    Operand,
    Variables,
    arguments,
    checked,
    fail,
    fmt_double,
    function,
    is_date,
    nullish,
    operator,
    ranged,
    type_name,
)

NUMBER = Check.typed(NUMBER_TYPES, "TypeMismatch", "{op} only supports numeric types, not {type}")
_ADD_OPERAND = Check(
    lambda x: type(x) in NUMBER_TYPES or is_date(x),
    "TypeMismatch",
    "$add only supports numeric or date types, not {type}",
)


class _Adder:
    """$add's running total: MongoDB's AddState, which keeps the narrowest type that holds the
    sum (int, then long, then double; decimal once a decimal is seen) and one optional date."""

    __slots__ = ("widest", "long_total", "double_total", "dec_total", "date")

    def __init__(self) -> None:
        self.widest = INT
        self.long_total = 0
        self.double_total = 0.0
        self.dec_total = decimal.Decimal(0)
        self.date: int | None = None

    def add(self, x: Any) -> None:
        if is_date(x):
            if self.date is not None:
                fail(16612, "only one date allowed in an $add expression")
            self.date = date_ms(x)
            return
        old = self.widest
        self.widest = max(old, kind(x))
        if self.widest != old:
            if self.widest == DOUBLE:
                self.double_total = float(self.long_total)
            elif self.widest == DECIMAL:
                self.dec_total = (
                    double_to_dec(self.double_total, 34)
                    if old == DOUBLE
                    else decimal.Decimal(self.long_total)
                )
        if self.widest <= LONG:
            total = self.long_total + int(x)
            if INT64_MIN <= total <= INT64_MAX:
                self.long_total = total
            else:  # long overflow continues in double
                self.widest = DOUBLE
                self.double_total = float(self.long_total) + float(x)
        elif self.widest == DOUBLE:
            self.double_total += to_float(x)
        else:
            self.dec_total = DEC.add(self.dec_total, to_dec(x))

    def number(self) -> Any:
        return narrowest(
            self.widest, self.long_total, lambda: self.double_total, lambda: self.dec_total
        )

    def value(self) -> Any:
        if self.date is None:
            return self.number()
        total = self.number()
        if type(total) is float:
            if not (math.isfinite(total) and INT64_MIN <= total < 2.0**63):
                fail("Overflow", "date overflow in $add")
            # llround: halves away from zero.
            offset = int(math.floor(abs(total) + 0.5)) * (1 if total >= 0 else -1)
        elif type(total) is Decimal128:
            d = total.to_decimal()
            offset = int(d.to_integral_value(decimal.ROUND_HALF_EVEN)) if d.is_finite() else 0
        else:
            offset = int(total)
        result = self.date + offset
        if not INT64_MIN <= result <= INT64_MAX:
            fail("Overflow", "date overflow in $add")
        return DatetimeMS(result)


@operator("$add")
def _add(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = arguments(spec, defined)
    accepts = _ADD_OPERAND.test

    def add(doc: dict[str, Any], v: Variables) -> Any:
        # Each operand is checked and added as it comes: a second date fails before a later
        # operand of the wrong type.
        state = _Adder()
        for f in args:
            x = f(doc, v)
            if nullish(x):
                return None
            if not accepts(x):
                _ADD_OPERAND.reject(op, x)
            state.add(x)
        return state.value()

    return add


@function("$subtract", arity=2)
def _subtract(op: str, a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka and kb:
        widest = max(ka, kb)
        if widest == DECIMAL:
            return mkdec(DEC.subtract(to_dec(a), to_dec(b)))
        if widest == DOUBLE:
            return to_float(a) - to_float(b)
        diff = int(a) - int(b)
        if widest == INT:
            return int_or_long(diff)
        if INT64_MIN <= diff <= INT64_MAX:
            return Int64(diff)
        return float(a) - float(b)
    if is_date(a):
        if is_date(b):
            return Int64(date_ms(a) - date_ms(b))
        if kb:
            return DatetimeMS(date_ms(a) - coerce_long(b))
        fail("TypeMismatch", f"can't $subtract {type_name(b)} from Date")
    fail("TypeMismatch", f"can't $subtract {type_name(b)} from {type_name(a)}")


@function("$multiply", arity=None, operands=[(NUMBER,)])
def _multiply(op: str, factors: list[Any]) -> Any:
    widest = INT
    long_product = 1
    double_product = 1.0
    dec_product = decimal.Decimal(1)
    for x in factors:
        old, widest = widest, max(widest, kind(x))
        if widest == DECIMAL:
            if old != DECIMAL:
                dec_product = (
                    double_to_dec(double_product)
                    if old == DOUBLE
                    else decimal.Decimal(long_product)
                )
            dec_product = DEC.multiply(dec_product, to_dec(x))
            continue
        xf = to_float(x)
        double_product *= xf
        if widest != DOUBLE:
            if not math.isfinite(xf):
                widest = DOUBLE
            else:
                product = long_product * coerce_long(x)
                if INT64_MIN <= product <= INT64_MAX:
                    long_product = product
                else:
                    widest = DOUBLE
    return narrowest(widest, long_product, lambda: double_product, lambda: dec_product)


_DIVIDE_OPERAND = (
    Check.typed(
        NUMBER_TYPES, "TypeMismatch", "$divide only supports numeric types, not {0} and {1}"
    ),
)


@function("$divide", arity=2, operands=[_DIVIDE_OPERAND, _DIVIDE_OPERAND])
def _divide(op: str, a: Any, b: Any) -> Any:
    if type(a) is Decimal128 or type(b) is Decimal128:
        denominator = to_dec(b)
        if denominator.is_zero():
            fail("BadValue", "can't $divide by zero")
        return mkdec(DEC.divide(to_dec(a), denominator))
    bf = to_float(b)
    if bf == 0:
        fail("BadValue", "can't $divide by zero")
    return to_float(a) / bf


_MOD_OPERAND = (
    Check.typed(NUMBER_TYPES, 16611, "$mod only supports numeric types, not {0} and {1}"),
)


@function("$mod", arity=2, operands=[_MOD_OPERAND, _MOD_OPERAND])
def _mod(op: str, a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka == DECIMAL or kb == DECIMAL:
        divisor = to_dec(b)
        if divisor.is_zero():
            fail(5733415, "can't $mod by zero")
        return mkdec(DEC.remainder(to_dec(a), divisor))
    bf = to_float(b)
    if bf == 0:
        fail(16610, "can't $mod by zero")
    if ka == DOUBLE or (kb == DOUBLE and not integral(b)):
        return fmod(to_float(a), bf)
    if ka == LONG or kb == LONG:
        return Int64(c_remainder(coerce_long(a), coerce_long(b)))
    return c_remainder(coerce_int(a), coerce_int(b))


# -- one-argument math (ExpressionSingleNumericArg: null stays null, anything else but a number is
# error 28765) -------------------------------------------------------------------------------------


def _numbers(*errors: tuple[int, str]) -> list[Operand]:
    """Operands that must each be a number, with their own code and message."""
    return [(Check.typed(NUMBER_TYPES, code, message),) for code, message in errors]


_SINGLE_NUMBER = (Check.typed(NUMBER_TYPES, 28765, "{op} only supports numeric types, not {type}"),)


def _single_numeric(name: str) -> Callable[[Callable[[Any], Any]], Callable[..., Any]]:
    def register(fn: Callable[[Any], Any]) -> Callable[..., Any]:
        return function(name, arity=1, operands=[_SINGLE_NUMBER])(lambda op, x: fn(x))

    return register


@_single_numeric("$abs")
def _abs(x: Any) -> Any:
    t = type(x)
    if t is float:
        return abs(x)
    if t is Decimal128:
        return Decimal128(x.to_decimal().copy_abs())
    n = int(x)
    if n == INT64_MIN:
        fail(28680, "can't take $abs of long long min")
    return Int64(abs(n)) if kind(x) == LONG else int_or_long(abs(n))


def _rounder(rounding: str, fn: Callable[[float], float]) -> Callable[[Any], Any]:
    """$ceil/$floor: doubles by C's ceil/floor; decimals quantized to exponent 0 (an infinity,
    which IEEE 754's quantize refuses, is NaN); integers as they are."""

    def apply(x: Any) -> Any:
        t = type(x)
        if t is float:
            if not math.isfinite(x):
                return x
            r = float(fn(x))
            return math.copysign(r, x) if r == 0 else r  # C keeps the sign of a zero
        if t is Decimal128:
            d = x.to_decimal()
            if d.is_infinite():
                return Decimal128("NaN")
            if d.is_nan() or d.as_tuple().exponent >= 0:  # already integral
                return x
            return mkdec(d.quantize(decimal.Decimal(1), rounding=rounding, context=DEC))
        return x

    return apply


_single_numeric("$ceil")(_rounder(decimal.ROUND_CEILING, math.ceil))
_single_numeric("$floor")(_rounder(decimal.ROUND_FLOOR, math.floor))


@_single_numeric("$exp")
def _exp(x: Any) -> Any:
    if type(x) is Decimal128:
        return mkdec(DEC.exp(x.to_decimal()))
    try:
        return math.exp(to_float(x))
    except OverflowError:
        return math.inf


def _positive(d: decimal.Decimal) -> bool:
    """Decimal128::isGreater(0): false for NaN (where Python's ordered comparison raises)."""
    return not d.is_nan() and d > 0


def _log_of(name: str, code: int, fn: Callable[[float], float], dec: Callable[[Any], Any]) -> None:
    """$ln/$log10: a positive decimal in decimal; anything else as a double, where NaN (a
    decimal NaN too) gives a double NaN and a number that is not positive is error `code`."""

    def apply(x: Any) -> Any:
        if type(x) is Decimal128 and _positive(x.to_decimal()):
            return mkdec(dec(x.to_decimal()))
        f = to_float(x)
        if not (f > 0 or math.isnan(f)):
            fail(code, f"{name}'s argument must be a positive number, but is {fmt_double(f)}")
        return fn(f)

    _single_numeric(name)(apply)


_log_of("$ln", 28766, math.log, DEC.ln)
_log_of("$log10", 28761, math.log10, DEC.log10)


@_single_numeric("$sqrt")
def _sqrt(x: Any) -> Any:
    if type(x) is Decimal128:
        d = x.to_decimal()
        if not d.is_nan() and d < 0:
            fail(28714, "$sqrt's argument must be greater than or equal to 0")
        return mkdec(DEC.sqrt(d))
    f = to_float(x)
    if f < 0:
        fail(28714, "$sqrt's argument must be greater than or equal to 0")
    return math.sqrt(f)


_LOG_OPERANDS = _numbers(
    (28756, "$log's argument must be numeric, not {type}"),
    (28757, "$log's base must be numeric, not {type}"),
)


@function("$log", arity=2, operands=_LOG_OPERANDS)
def _log(op: str, x: Any, base: Any) -> Any:
    if type(x) is Decimal128 or type(base) is Decimal128:
        dx, db = to_dec(x), to_dec(base)
        if _positive(dx) and _positive(db) and db != 1:
            return mkdec(DEC.divide(DEC.ln(dx), DEC.ln(db)))
        # Anything else, NaN included, is worked out in doubles, as MongoDB does.
    fx, fb = to_float(x), to_float(base)
    if not (fx > 0 or math.isnan(fx)):
        fail(28758, f"$log's argument must be a positive number, but is {fmt_double(fx)}")
    if not ((fb > 0 and fb != 1) or math.isnan(fb)):
        fail(
            28759, f"$log's base must be a positive number not equal to 1, but is {fmt_double(fb)}"
        )
    return math.log(fx) / math.log(fb)


# MongoDB widens every decimal power to 34 digits by adding this zero (kLargestNegativeExponentZero):
# 2 ** 3 is 8.000000000000000000000000000000000.
_WIDEST_ZERO = decimal.Decimal("0E-6176")
_ONE = decimal.Decimal(1)
_NAN = decimal.Decimal("NaN")
_INFINITY = decimal.Decimal("Infinity")


def _decimal_power(x: decimal.Decimal, y: decimal.Decimal) -> decimal.Decimal:
    """bid128_pow: IEEE 754's special cases (x**0 and 1**y are 1 even for a NaN; an infinite
    exponent compares |x| with 1; an infinite or zero base takes the exponent's sign; a negative
    base to a non-integer is NaN), and Python's decimal power for the rest."""
    if y.is_zero() or (not x.is_nan() and x == _ONE):
        return _ONE
    if x.is_nan() or y.is_nan():
        return _NAN
    if y.is_infinite():
        magnitude = x.copy_abs()
        if magnitude == _ONE:
            return _ONE
        return _INFINITY if (magnitude < _ONE) == y.is_signed() else decimal.Decimal(0)
    whole = y == y.to_integral_value()
    odd = whole and int(y) % 2 == 1
    if x.is_infinite() or x.is_zero():
        # inf**-y and 0**y are zero, inf**y and 0**-y infinite; an odd y keeps x's sign.
        r = _INFINITY if x.is_infinite() != y.is_signed() else decimal.Decimal(0)
        return r.copy_negate() if odd and x.is_signed() else r
    if x.is_signed() and not whole:
        return _NAN
    return DEC.power(x, y)


_POW_OPERANDS = _numbers(
    (28762, "$pow's base must be numeric, not {type}"),
    (28763, "$pow's exponent must be numeric, not {type}"),
)


@function("$pow", arity=2, operands=_POW_OPERANDS)
def _pow(op: str, base: Any, exp: Any) -> Any:
    kb, ke = kind(base), kind(exp)
    if kb == DECIMAL or ke == DECIMAL:
        db, de = to_dec(base), to_dec(exp)
        if db.is_zero() and de.is_signed():
            fail(28764, "$pow cannot take a base of 0 and a negative exponent")
        return mkdec(DEC.add(_decimal_power(db, de), _WIDEST_ZERO))
    fb, fe = to_float(base), to_float(exp)
    if fb == 0 and fe < 0:
        fail(28764, "$pow cannot take a base of 0 and a negative exponent")
    if kb == DOUBLE or ke == DOUBLE:
        return float_pow(fb, fe)
    as_long = kb == LONG or ke == LONG
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
        if INT64_MIN <= exact <= INT64_MAX:
            result = exact
    if result is None:
        return float_pow(float(b), float(e))
    return Int64(result) if as_long else int_or_long(result)


_ROUNDED = (Check.typed(NUMBER_TYPES, 51081, "{op} only supports numeric types, not {type}"),)


def _round_or_trunc(name: str, rounding: str) -> None:
    @operator(name)
    def compile_rounding(spec: Any, defined: frozenset[str], op: str) -> Expression:
        args = ranged(spec, defined, op, 1, 2)

        def evaluate(doc: dict[str, Any], v: Variables) -> Any:
            x = checked(op, args[0](doc, v), _ROUNDED)
            # The precision is read only once the number is good.
            place = _place(op, args[1](doc, v)) if x is not NULL and len(args) > 1 else 0
            return None if x is NULL or place is NULL else _round(x, place, rounding)

        return evaluate


def _place(op: str, p: Any) -> Any:
    """$round's and $trunc's precision: an integer in [-20, 100] (NULL for a nullish one)."""
    if nullish(p):
        return NULL
    place = coerce_long(p)
    if not integral(p):
        fail(51082, f"precision argument to  {op} must be a integral value")
    if not -20 <= place <= 100:
        fail(51083, f"cannot apply {op} with precision value {place} value must be in [-20, 100]")
    return place


def _round(x: Any, place: int, rounding: str) -> Any:
    quantum = decimal.Decimal((0, (1,), -place))
    t = type(x)
    if t is Decimal128:
        d = x.to_decimal()
        if d.is_infinite():
            return x
        return mkdec(d.quantize(quantum, rounding=rounding, context=DEC))
    if t is float:
        if math.isinf(x):
            return x
        d = double_to_dec(x, 34).quantize(quantum, rounding=rounding, context=DEC)
        return float(d)
    if place >= 0:
        return x
    n = int(decimal.Decimal(int(x)).quantize(quantum, rounding=rounding, context=DEC))
    if t is Int64 or kind(x) == LONG or n > INT32_MAX:
        return long(n)
    return n


_round_or_trunc("$round", decimal.ROUND_HALF_EVEN)
_round_or_trunc("$trunc", decimal.ROUND_DOWN)


# -- bitwise ---------------------------------------------------------------------------------------


_INTEGER_TYPES = (int, Int64)


def _bitwise(name: str, fold: Callable[[int, int], int], start: int) -> None:
    operand = (
        Check.typed(_INTEGER_TYPES, "TypeMismatch", "{op} only supports int and long operands."),
    )

    @function(name, arity=None, operands=[operand])
    def evaluate(op: str, xs: list[Any]) -> Any:
        result = start
        for x in xs:
            result = fold(result, int(x))
        return Int64(result) if any(kind(x) == LONG for x in xs) else result


_bitwise("$bitAnd", lambda a, b: a & b, -1)
_bitwise("$bitOr", lambda a, b: a | b, 0)
_bitwise("$bitXor", lambda a, b: a ^ b, 0)


@function(
    "$bitNot",
    arity=1,
    operands=[
        (
            Check.typed(
                _INTEGER_TYPES, "TypeMismatch", "$bitNot only supports int and long, not: {type}."
            ),
        )
    ],
)
def _bit_not(op: str, x: Any) -> Any:
    return Int64(~int(x)) if kind(x) == LONG else ~int(x)
