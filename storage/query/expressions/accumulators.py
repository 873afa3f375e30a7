"""The $group accumulators ($sum, $avg, $min, $max, $first, $last, $push, $addToSet,
$mergeObjects, $stdDevPop/$stdDevSamp, the n-accumulators and $top/$bottom), and the same
operators used as expressions over an array or a list of arguments."""

from __future__ import annotations

import decimal
import functools
import math
import sys
from collections.abc import Callable, Mapping
from typing import Any

import bson
from bson import DBRef, Decimal128, Int64, ObjectId

from ebbdb.storage.core.footprint import DICT_ENTRY, footprint
from ebbdb.storage.core.limits import Tracked
from ebbdb.storage.core.values import is_number, render, to_float
from ebbdb.storage.query.compare import UNDEFINED, compare, date_ms
from ebbdb.storage.query.expressions import percentiles
from ebbdb.storage.query.expressions.arrays import SORT_CLAUSE_MESSAGE, sort_direction
from ebbdb.storage.query.expressions.coerce import (
    DEC,
    DECIMAL,
    DOUBLE,
    INT,
    exact_int,
    kind,
    mkdec,
    narrowest,
)
from ebbdb.storage.query.expressions.core import (
    Accumulator,
    Check,
    Compiler,
    Expression,
    Variables,
    arguments,
    as_doc,
    check,
    compile_expression,
    compile_path,
    compile_top,
    const,
    fail,
    is_date,
    is_object,
    nullish,
    operator,
    show,
    type_name,
)
from ebbdb.storage.query.javascript_operators import compile_js_accumulator
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.sort import parse_sort, sort_documents


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
    if is_date(v):
        return ("date", date_ms(v))
    if t is ObjectId:
        return ("oid", v.binary)
    if isinstance(v, Mapping) or t is DBRef:
        doc = as_doc(v) or {}
        return ("obj", tuple((k, _hash_key(x)) for k, x in doc.items()))
    if t is list:
        return ("arr", tuple(_hash_key(x) for x in v))
    return ("other", type_name(v), bson.encode({"v": v}))


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
    """One accumulator's state: `feed` takes a value; `value` is the result so far, by default
    `acc`, which starts as `initial()`. As an Accumulator it feeds its expression's value for each
    document."""

    __slots__ = ("expr", "acc")

    def __init__(self, expr: Expression) -> None:
        self.expr = expr
        self.acc: Any = self.initial()

    def initial(self) -> Any:
        return None

    def add(self, doc: dict[str, Any], variables: Variables) -> None:
        self.feed(self.expr(doc, variables))

    def result(self) -> Any:
        return self.value()

    def feed(self, x: Any) -> None:
        raise NotImplementedError

    def value(self) -> Any:
        return self.acc


class _Sum(_State):
    """$sum: numbers only, in the narrowest type that holds the total."""

    __slots__ = ("kind", "ints", "floats", "dec", "count")

    def __init__(self, expr: Expression) -> None:
        super().__init__(expr)
        self.kind = INT
        self.ints = 0
        self.floats = _FloatSum()
        self.dec = decimal.Decimal(0)
        self.count = 0

    def feed(self, x: Any) -> None:
        k = kind(x)
        if not k:
            return
        self.count += 1
        self.kind = max(self.kind, k)
        if k == DECIMAL:
            self.dec = DEC.add(self.dec, x.to_decimal())
        elif k == DOUBLE:
            self.floats.add(x)
        else:
            self.ints += int(x)

    def _decimal_total(self) -> decimal.Decimal:
        exact = (
            self.floats.exact() + self.ints if self.floats.partials else decimal.Decimal(self.ints)
        )
        if self.floats.special != 0 or math.isnan(self.floats.special):
            exact = decimal.Decimal(repr(self.floats.special).replace("inf", "Infinity"))
        return DEC.add(self.dec, exact)

    def value(self) -> Any:
        return narrowest(
            self.kind, self.ints, lambda: self.floats.total(self.ints), self._decimal_total
        )


class _Avg(_Sum):
    """$avg: the mean of the numbers (a double, or a decimal once one is seen); null if none."""

    __slots__ = ()

    def value(self) -> Any:
        if not self.count:
            return None
        if self.kind == DECIMAL:
            return mkdec(DEC.divide(self._decimal_total(), decimal.Decimal(self.count)))
        return self.floats.total(self.ints) / self.count


class _MinMax(_State):
    """$min/$max: BSON order; null, undefined and missing values take no part."""

    __slots__ = ("held", "sign")

    def __init__(self, expr: Expression, sign: int) -> None:
        self.sign = sign
        super().__init__(expr)

    def initial(self) -> Any:
        self.held = Tracked("$min" if self.sign < 0 else "$max", 0)
        return MISSING

    def feed(self, x: Any) -> None:
        if not nullish(x) and (self.acc is MISSING or compare(x, self.acc) * self.sign > 0):
            self.held.swap(None if self.acc is MISSING else self.acc, x)
            self.acc = x

    def value(self) -> Any:
        return None if self.acc is MISSING else self.acc


_UNSEEN: Any = object()


class _First(_State):
    """$first: the first document's value, null where it had none."""

    __slots__ = ("held",)

    def initial(self) -> Any:
        self.held = Tracked("$first", 0)
        return _UNSEEN

    def feed(self, x: Any) -> None:
        if self.acc is _UNSEEN:
            self.acc = None if x is MISSING else x
            self.held.add(self.acc, 0)

    def value(self) -> Any:
        return None if self.acc is _UNSEEN else self.acc


class _Last(_State):
    """$last: the last document's value, null where it had none."""

    __slots__ = ("held",)

    def initial(self) -> Any:
        self.held = Tracked("$last", 0)
        return None

    def feed(self, x: Any) -> None:
        x = None if x is MISSING else x
        self.held.swap(self.acc, x)
        self.acc = x


class _Push(_State):
    """$push: every value, missing ones left out (146 past 100 MB of them)."""

    __slots__ = ("held",)

    def initial(self) -> Any:
        self.held = Tracked("$push")
        return []

    def feed(self, x: Any) -> None:
        if x is not MISSING:
            self.held.add(x)
            self.acc.append(x)


class _AddToSet(_State):
    """$addToSet: distinct values by BSON equality, in first-seen order."""

    __slots__ = ("held",)

    def initial(self) -> Any:
        self.held = Tracked("$addToSet")
        return {}

    def feed(self, x: Any) -> None:
        if x is not MISSING:
            key = _hash_key(x)
            if key not in self.acc:
                # The value, its hashable stand-in (a tuple around it) and the table's entry.
                self.held.add(x, _SET_ENTRY)
                self.acc[key] = x

    def value(self) -> Any:
        return list(self.acc.values())


#: What $addToSet holds for a value besides the value: its key (a 2-tuple sharing the value, for
#: a scalar) and its dict entry.
_SET_ENTRY = 64 + DICT_ENTRY

_MERGE_OPERAND = (
    Check(
        is_object,
        40400,
        "{op} requires object inputs, but input {value} is of type {type}",
    ),
)


class _MergeObjects(_State):
    """$mergeObjects: later fields win; null and missing inputs are skipped."""

    __slots__ = ("held",)

    def initial(self) -> Any:
        self.held = Tracked("$mergeObjects", 0)
        return {}

    def feed(self, x: Any) -> None:
        if not nullish(x):
            check("$mergeObjects", x, _MERGE_OPERAND)
            doc = as_doc(x) or {}
            acc, grown = self.acc, 0
            for name, value in doc.items():  # later fields replace earlier ones
                old = acc.get(name, MISSING)
                if old is MISSING:  # a new field: its name and entry too
                    grown += footprint(value) + sys.getsizeof(name) + DICT_ENTRY
                else:
                    grown += footprint(value) - footprint(old)
            acc.update(doc)
            self.held.grow(grown)


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
        if not is_number(x):
            return
        f = to_float(x)
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


def _accumulator_expression(make: Callable[[Expression], _State]) -> Compiler:
    """ExpressionFromAccumulator: one array argument feeds its elements; otherwise every
    argument is fed as it is."""

    def compiler(spec: Any, defined: frozenset[str], op: str) -> Expression:
        args = arguments(spec, defined)

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
    operator(_name)(_accumulator_expression(_ACCUMULATORS[_name]))
del _name


# -- the n-accumulators: $firstN, $lastN, $maxN, $minN, $top, $bottom, $topN, $bottomN -----------------


def _valid_n(x: Any) -> int:
    """AccumulatorN::validateN: a positive integral number."""
    if not is_number(x):
        fail(5787902, f"Value for 'n' must be of integral type, but found {show(x)}")
    n = exact_int(x)
    if n is None:
        fail(5787903, f"Value for 'n' must be of integral type, but found {show(x)}")
    if n <= 0:
        fail(5787908, f"'n' must be greater than 0, found {n}")
    return n


class _StateN(_State):
    """An accumulator that keeps n values; `n` is evaluated with the group's first document."""

    __slots__ = ("held", "items", "n", "n_expr")

    def __init__(self, expr: Expression, n_expr: Expression) -> None:
        super().__init__(expr)
        self.n_expr = n_expr
        self.n = 0
        self.items: list[Any] = []
        self.held = Tracked(type(self).__name__, 0)

    def keep(self, item: Any) -> None:
        """Hold `item` (counted)."""
        self.items.append(item)
        self.held.add(item)

    def trimmed(self, items: list[Any]) -> None:
        """Hold only `items` now."""
        self.items = items
        self.held.recount(items)

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
            self.keep(None if x is MISSING else x)

    def value(self) -> Any:
        return self.items


class _LastN(_StateN):
    __slots__ = ()

    def feed(self, x: Any) -> None:
        self.keep(None if x is MISSING else x)
        if len(self.items) > 2 * self.n:
            self.trimmed(self.items[-self.n :])

    def value(self) -> Any:
        return self.items[-self.n :] if self.n else []


class _MinMaxN(_StateN):
    """$minN/$maxN: the n smallest (ascending) or largest (descending); nulls take no part."""

    __slots__ = ("sign",)

    def __init__(self, expr: Expression, n_expr: Expression, sign: int) -> None:
        super().__init__(expr, n_expr)
        self.sign = sign

    def feed(self, x: Any) -> None:
        if nullish(x):
            return
        self.keep(x)
        if len(self.items) > 2 * self.n:
            self.trimmed(self._best())

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
        self.keep(({k: x for k, x in key.items() if x is not MISSING}, output))
        if len(self.items) > 2 * self.n:
            self.trimmed(self._kept())

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
        fail(not_object_code, f"specification must be an object; found {op}: {render(arg)}")
    parts: dict[str, Expression] = {}
    for key, sub in arg.items():
        if key not in ("input", "n"):
            fail(5787901, f"Unknown argument for 'n' operator: {key}")
        parts[key] = compile_expression(sub, defined)
    if "n" not in parts:
        fail(5787906, "Missing value for 'n'")
    if "input" not in parts:
        fail(5787907, "Missing value for 'input'")
    return parts["input"], parts["n"]


_N_ACCUMULATORS: dict[str, tuple[int, Callable[[Expression, Expression], _StateN]]] = {
    "$firstN": (5787801, _FirstN),
    "$lastN": (5787801, _LastN),
    "$minN": (5787900, lambda e, n: _MinMaxN(e, n, -1)),
    "$maxN": (5787900, lambda e, n: _MinMaxN(e, n, 1)),
}


@operator(*_N_ACCUMULATORS)
def _n_expression(spec: Any, defined: frozenset[str], op: str) -> Expression:
    code, make = _N_ACCUMULATORS[op]
    input_f, n_f = _n_args(op, spec, code, defined)

    def evaluate(doc: dict[str, Any], v: Variables) -> Any:
        state = make(_no_expression, n_f)
        state.start(n_f(doc, v))
        x = input_f(doc, v)
        if type(x) is not list:
            fail(5788200, "Input must be an array")
        for element in x:
            state.feed(element)
        return state.value()

    return evaluate


def _top_bottom(op: str, arg: Any, defined: frozenset[str]) -> Callable[[], Accumulator]:
    single = op in ("$top", "$bottom")
    if not isinstance(arg, Mapping):
        fail(5788001, f"specification must be an object; found {op}: {render(arg)}")
    parts: dict[str, Any] = {}
    for key, sub in arg.items():
        if key == "output" or key == "sortBy" or (key == "n" and not single):
            parts[key] = sub
        else:
            fail(5788002, f"Unknown argument to {op} '{key}'")
    n_f = const(1) if single else compile_expression(parts["n"], defined) if "n" in parts else None
    if n_f is None:
        fail(5788003, "Missing value for 'n'")
    if "output" not in parts:
        fail(5788004, "Missing value for 'output'")
    if "sortBy" not in parts:
        fail(5788005, "Missing value for 'sortBy'")
    sort_by = parts["sortBy"]
    if not isinstance(sort_by, Mapping) or not sort_by:
        fail(15976, "$sort stage must have at least one sort key")
    keys: list[tuple[Expression, int]] = []
    for field, direction in sort_by.items():
        d = sort_direction(direction)
        if d is None:
            fail(15975, SORT_CLAUSE_MESSAGE)
        keys.append((compile_path("$" + field, defined), d))
    output_f = compile_expression(parts["output"], defined)
    bottom = op in ("$bottom", "$bottomN")
    return lambda: _TopBottomN(output_f, n_f, keys, bottom, single)


_TOP_BOTTOM = ("$top", "$bottom", "$topN", "$bottomN")
#: Every $group accumulator compile_accumulator knows (the README's compatibility table).
ACCUMULATORS = frozenset(
    (*_ACCUMULATORS, *_N_ACCUMULATORS, *_TOP_BOTTOM, *percentiles.ACCUMULATORS, "$count")
) | {"$accumulator"}


def compile_accumulator(
    op: str, arg: Any, defined: frozenset[str] = frozenset()
) -> Callable[[], Accumulator]:
    """A factory of fresh accumulators for one $group output field `{op: arg}`. Raises
    QueryError: 15952 for an unknown operator, 40237 for an array argument, TypeMismatch for a
    $count with arguments, and whatever compiling `arg` raises."""
    if op == "$count":
        if not (isinstance(arg, Mapping) and not arg):
            fail("TypeMismatch", "$count takes no arguments, i.e. $count:{}")
        one = const(1)
        return lambda: _Sum(one)
    if type(arg) is list:
        fail(40237, f"The {op} accumulator is a unary operator")
    if op in _N_ACCUMULATORS:
        code, make_n = _N_ACCUMULATORS[op]
        input_f, n_f = _n_args(op, arg, code, defined)
        return lambda: make_n(input_f, n_f)
    if op in _TOP_BOTTOM:
        return _top_bottom(op, arg, defined)
    if op in percentiles.ACCUMULATORS:
        return percentiles.ACCUMULATORS[op](arg, defined)
    make = _ACCUMULATORS.get(op)
    if op == "$accumulator":
        return compile_js_accumulator(arg, defined)
    if make is None:
        fail(15952, f"unknown group operator '{op}'")
    expr = compile_top(arg, defined)  # evaluated once per document: a scope of its own
    return lambda: make(expr)
