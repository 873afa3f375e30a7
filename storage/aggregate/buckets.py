"""$bucketAuto: documents sorted by a value and cut into about equal buckets, with boundaries
rounded to a preferred-number series when a granularity is given (MongoDB's series and rounding).
"""

from __future__ import annotations

import bisect
import decimal
import functools
import math
from collections.abc import Iterator
from typing import Any

from bson import Decimal128, Int64

from ebbdb.storage.aggregate.arguments import Arguments, Kind, Refusal, arg
from ebbdb.storage.aggregate.grouping import (
    Accumulators,
    _group_output,
    is_operator_object,
    output_accumulators,
)
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Stage, error
from ebbdb.storage.core.footprint import footprint
from ebbdb.storage.core.interrupt import current
from ebbdb.storage.core.memory import bound
from ebbdb.storage.core.values import INT32_MAX, INT32_MIN, is_number, render, to_float, type_name
from ebbdb.storage.execution.spill import Sorter, dump_document, load_document
from ebbdb.storage.query.compare import compare, is_nan, number_value
from ebbdb.storage.query.expressions import (
    Accumulator,
    Expression,
    compile_accumulator,
    compile_expression,
)
from ebbdb.storage.query.paths import MISSING

# -- granularity -------------------------------------------------------------------------------------

# The preferred-number series MongoDB rounds to (Renard, 1-2-5 and E series), one decade each.
_SERIES_TEXT = {
    "R5": "10 16 25 40 63",
    "R10": "100 125 160 200 250 315 400 500 630 800",
    "R20": "100 112 125 140 160 180 200 224 250 280 315 355 400 450 500 560 630 710 800 900",
    "R40": (
        "100 106 112 118 125 132 140 150 160 170 180 190 200 212 224 236 250 265 280 300 315 335 "
        "355 375 400 425 450 475 500 530 560 600 630 670 710 750 800 850 900 950"
    ),
    "R80": (
        "103 109 115 122 128 136 145 155 165 175 185 195 206 218 230 243 258 272 290 307 325 345 "
        "365 387 412 437 462 487 515 545 575 615 650 690 730 775 825 875 925 975"
    ),
    "1-2-5": "10 20 50",
    "E6": "10 15 22 33 47 68",
    "E12": "10 12 15 18 22 27 33 39 47 56 68 82",
    "E24": "10 11 12 13 15 16 18 20 22 24 27 30 33 36 39 43 47 51 56 62 68 75 82 91",
    "E48": (
        "100 105 110 115 121 127 133 140 147 154 162 169 178 187 196 205 215 226 237 249 261 274 "
        "287 301 316 332 348 365 383 402 422 442 464 487 511 536 562 590 619 649 681 715 750 787 "
        "825 866 909 953"
    ),
    "E96": (
        "100 102 105 107 110 113 115 118 121 124 127 130 133 137 140 143 147 150 154 158 162 165 "
        "169 174 178 182 187 191 196 200 205 210 215 221 226 232 237 243 249 255 261 267 274 280 "
        "287 294 301 309 316 324 332 340 348 357 365 374 383 392 402 412 422 432 442 453 464 475 "
        "487 499 511 523 536 549 562 576 590 604 619 634 649 665 681 698 715 732 750 768 787 806 "
        "825 845 866 887 909 931 953 976"
    ),
    "E192": (
        "100 101 102 104 105 106 107 109 110 111 113 114 115 117 118 120 121 123 124 126 127 129 "
        "130 132 133 135 137 138 140 142 143 145 147 149 150 152 154 156 158 160 162 164 165 167 "
        "169 172 174 176 178 180 182 184 187 189 191 193 196 198 200 203 205 208 210 213 215 218 "
        "221 223 226 229 232 234 237 240 243 246 249 252 255 258 261 264 267 271 274 277 280 284 "
        "287 291 294 298 301 305 309 312 316 320 324 328 332 336 340 344 348 352 357 361 365 370 "
        "374 379 383 388 392 397 402 407 412 417 422 427 432 437 442 448 453 459 464 470 475 481 "
        "487 493 499 505 511 517 523 530 536 542 549 556 562 569 576 583 590 597 604 612 619 626 "
        "634 642 649 657 665 673 681 690 698 706 715 723 732 741 750 759 768 777 787 796 806 816 "
        "825 835 845 856 866 876 887 898 909 920 931 942 953 965 976 988"
    ),
}
_SERIES = {name: tuple(float(n) for n in text.split()) for name, text in _SERIES_TEXT.items()}
GRANULARITIES = (*_SERIES, "POWERSOF2")


def _roundable(value: Any) -> float:
    if not is_number(value):
        raise error(
            40262,
            f"A granularity rounder can only round numeric values, but found type: {type_name(value)}",
        )
    number = to_float(value)
    if math.isnan(number):
        raise error(40263, "A granularity rounder cannot round NaN")
    if number < 0:
        raise error(40268, "A granularity rounder can only round non-negative numbers")
    return number


def _series_up(series: tuple[float, ...], number: float) -> float:
    """The smallest number of the series (scaled by a power of ten) greater than `number`."""
    multiplier = 1.0
    while number >= series[-1] * multiplier:
        multiplier *= 10.0
    while number < series[0] * multiplier:
        previous_min = series[0] * multiplier
        multiplier /= 10.0
        if number >= series[-1] * multiplier:
            return previous_min
    i = bisect.bisect_right([s * multiplier for s in series], number)
    return series[i] * multiplier


def _series_down(series: tuple[float, ...], number: float) -> float:
    """The largest number of the series (scaled by a power of ten) less than `number`."""
    multiplier = 1.0
    while number <= series[0] * multiplier:
        multiplier /= 10.0
    while number > series[-1] * multiplier:
        previous_max = series[-1] * multiplier
        multiplier *= 10.0
        if number <= series[0] * multiplier:
            return previous_max
    i = bisect.bisect_left([s * multiplier for s in series], number)
    return series[i - 1] * multiplier


def _power_of_two(value: Any, up: bool) -> Any:
    """POWERSOF2: 2 to the power just above (or below) the value's base-2 logarithm, computed as
    MongoDB's $pow(2, exp) does: an integer for a non-negative exponent, else a double; a decimal
    for a decimal value."""
    if isinstance(value, (float, Decimal128)):
        log = math.log2(to_float(value))
        exp = int(math.floor(log) + 1) if up else int(math.ceil(log) - 1)
    else:
        n = int(value)
        if up:
            exp = n.bit_length()
        else:
            exp = n.bit_length() - (2 if n & (n - 1) == 0 else 1)
    if isinstance(value, Decimal128):
        return Decimal128(decimal.Decimal(2) ** exp)
    if exp < 0:
        return 2.0**exp
    result = 1 << exp
    return result if result <= INT32_MAX else Int64(result)


def round_granularity(name: str, value: Any, up: bool) -> Any:
    """`value` rounded up or down to the granularity `name`; 0 stays itself."""
    number = _roundable(value)
    if number == 0.0:
        return value
    if name == "POWERSOF2":
        return _power_of_two(value, up)
    series = _SERIES[name]
    rounded = _series_up(series, number) if up else _series_down(series, number)
    return Decimal128(decimal.Decimal(rounded)) if isinstance(value, Decimal128) else rounded


#: A sorted row's own dict ({k, d}).
_ROW_BYTES = 184

# -- the stage ---------------------------------------------------------------------------------------


class BucketAuto(Stage, name="$bucketAuto"):
    group_by: Expression
    buckets: int
    fields: Accumulators
    granularity: str | None

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        # mongod's $bucketAuto sorts its input by the groupBy value (a blocking sort: past its
        # limit spilled, or 292 without disk use), then cuts the sorted stream into buckets.
        collation = ctx.collation

        def order(a: Any, b: Any) -> int:
            if collation is None:
                return compare(a, b)
            return compare(collation.collate(a), collation.collate(b))

        by_key = functools.cmp_to_key(order)
        sorter: Sorter[Doc] = Sorter(
            lambda row: by_key(row["k"]),
            ctx.limits,
            dump_document,
            load_document,
            what="$bucketAuto",
        )
        n = 0
        try:
            for doc in docs:
                key = self._key(doc, ctx)
                row = {"k": key, "d": doc}
                sorter.add(row, row, footprint(doc) + _ROW_BYTES)  # the sorter counts the key
                n += 1
        except BaseException:
            sorter.close()
            raise
        rows = sorter.result()
        try:
            yield from self._buckets(rows, n, ctx)
        finally:
            close = getattr(rows, "close", None)
            if close is not None:
                close()

    def _buckets(self, rows: Iterator[Doc], n: int, ctx: Context) -> Iterator[Doc]:
        """The buckets of the `n` rows ({k: groupBy value, d: document}) in `rows`' order."""
        if not n:
            return
        # MongoDB's std::round (halves away from zero), and at least one document a bucket.
        size = max(math.floor(n / self.buckets + 0.5), 1)
        ahead: list[Doc] = []  # the next row, once looked at

        def peek() -> Doc | None:
            if not ahead:
                row = next(rows, None)
                if row is None:
                    return None
                ahead.append(row)
            return ahead[0]

        tracker = current.get().memory.child("$bucketAuto")
        variables = ctx.variables
        try:
            previous_max: Any = MISSING
            for number in range(1, self.buckets + 1):
                if peek() is None:
                    return
                last = number == self.buckets
                accs = bound(tracker, lambda: [factory() for _, factory in self.fields])

                def take(accs: list[Accumulator] = accs) -> Any:
                    row = ahead.pop()
                    for acc in accs:
                        acc.add(row["d"], variables)
                    return row["k"]

                low = high = take()
                taken = 1
                while (taken < size or last) and peek() is not None:
                    high = take()
                    taken += 1
                if self.granularity is not None:
                    low = (
                        round_granularity(self.granularity, low, False)
                        if previous_max is MISSING
                        else previous_max
                    )
                    boundary = round_granularity(self.granularity, high, True)
                    nxt = peek()
                    while nxt is not None and (
                        compare(boundary, nxt["k"]) > 0 or compare(high, nxt["k"]) == 0
                    ):
                        high = take()
                        nxt = peek()
                    if to_float(boundary) == 0.0 and nxt is not None:
                        high = round_granularity(self.granularity, nxt["k"], False)
                    else:
                        high = boundary
                else:
                    nxt = peek()
                    while nxt is not None and compare(high, nxt["k"]) == 0:
                        take()
                        nxt = peek()
                    if nxt is not None:
                        high = nxt["k"]
                previous_max = high
                yield _group_output({"min": low, "max": high}, accs, self.fields)
                tracker.set(0)
        finally:
            tracker.close()

    def _key(self, doc: Doc, ctx: Context) -> Any:
        key = self.group_by(doc, ctx.variables)
        if self.granularity is not None:
            if not is_number(key):
                raise error(
                    40258,
                    "$bucketAuto can specify a 'granularity' with numeric boundaries only, but"
                    f" found a value with type: {type_name(key)}",
                )
            if is_nan(key):
                raise error(
                    40259,
                    "$bucketAuto can specify a 'granularity' with numeric boundaries only, but"
                    " found a NaN",
                )
            if number_value(key) < 0:
                raise error(
                    40260,
                    "$bucketAuto can specify a 'granularity' with non-negative numbers only, but"
                    " found a negative number",
                )
        return None if key is MISSING else key


def _group_by(value: Any, defined: frozenset[str]) -> Expression:
    if not (
        is_operator_object(value) or (isinstance(value, str) and len(value) > 1 and value[0] == "$")
    ):
        raise error(
            40239,
            "The $bucketAuto 'groupBy' field must be defined as a $-prefixed path or an"
            f" expression object, but found: {render(value)}",
        )
    return compile_expression(value, defined)


def _buckets(value: Any, defined: frozenset[str]) -> int:
    number = to_float(value)
    if not INT32_MIN <= number <= INT32_MAX or number != math.floor(number):  # NaN fails both
        raise error(
            40242,
            "The $bucketAuto 'buckets' field must be representable as a 32-bit integer, but found"
            # mongod streams the double: NaN and the infinities print as nan, inf, -inf
            f" {render(number) if math.isfinite(number) else str(number)}",
        )
    return int(number)


def _granularity(value: str, defined: frozenset[str]) -> str:
    if value not in GRANULARITIES:
        raise error(40257, f"Unknown rounding granularity '{value}'")
    return value


def _must_be(what: str, code: int) -> Refusal:
    """MongoDB's error for a $bucketAuto field of the wrong type."""
    return Refusal(
        code, f"The $bucketAuto '{{name}}' field must be {what}, but found type: {{type}}"
    )


class _BucketAutoArgs(
    Arguments,
    not_document=Refusal(
        40240, "The argument to $bucketAuto must be an object, but found type: {type}"
    ),
    unknown=Refusal(40245, "Unrecognized option to $bucketAuto: {name}"),
    missing=Refusal(40246, "$bucketAuto requires 'groupBy' and 'buckets' to be specified"),
):
    group_by: Expression = arg("groupBy", required=True, parse=_group_by)
    buckets: int = arg(
        "buckets",
        Kind.NUMBER,
        required=True,
        mismatch=_must_be("a numeric value", 40241),
        parse=_buckets,
    )
    output: Accumulators = arg(
        "output",
        Kind.OBJECT,
        (),
        mismatch=_must_be("an object", 40244),
        parse=output_accumulators,
    )
    granularity: str | None = arg(
        "granularity", Kind.STRING, mismatch=_must_be("a string", 40261), parse=_granularity
    )


@STAGES.stage("$bucketAuto", arguments=_BucketAutoArgs)
def _parse_bucket_auto(a: _BucketAutoArgs, defined: frozenset[str]) -> Stage:
    buckets, fields = a.buckets, a.output
    if buckets <= 0:
        raise error(
            40243, f"The $bucketAuto 'buckets' field must be greater than 0, but found: {buckets}"
        )
    if not fields:
        fields = (("count", compile_accumulator("$sum", 1)),)
    return BucketAuto(a.group_by, buckets, fields, a.granularity)
