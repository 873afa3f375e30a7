"""$mod and the bit operators, table-driven: truncation toward zero, C's remainder sign, NaN and
infinities, 64-bit bounds, sign extension and BinData, with $mod's argument errors."""

from __future__ import annotations

from typing import Any

from bson import Binary, Decimal128, Int64

from ebbdb.storage.query.match import compile_filter
from tests.helpers import cases, errors_test

NOPE = object()  # stands for a missing field a
INF = float("inf")
NAN = float("nan")

CASES: list[tuple[str, dict[str, Any], Any, bool]] = [
    # -- $mod --------------------------------------------------------------------------------------
    ("mod", {"$mod": [4, 0]}, 8, True),
    ("mod other remainder", {"$mod": [4, 0]}, 9, False),
    ("mod remainder", {"$mod": [4, 1]}, 9, True),
    ("mod truncates the dividend", {"$mod": [4, 0]}, 8.9, True),
    ("mod negative dividend", {"$mod": [4, 0]}, -8, True),
    ("mod remainder keeps the dividend's sign", {"$mod": [4, -1]}, -5, True),
    ("mod is not Python's floor mod", {"$mod": [4, 3]}, -5, False),
    ("mod negative divisor", {"$mod": [-4, 1]}, 5, True),
    ("mod divisor -1", {"$mod": [-1, 0]}, 7, True),
    ("mod divisor truncated", {"$mod": [4.9, 0]}, 8, True),
    ("mod remainder truncated", {"$mod": [4, 0.9]}, 8, True),
    ("mod long", {"$mod": [4, 0]}, Int64(12), True),
    ("mod long divisor", {"$mod": [Int64(4), Int64(0)]}, 12, True),
    ("mod decimal dividend", {"$mod": [4, 0]}, Decimal128("8.5"), True),
    ("mod decimal divisor", {"$mod": [Decimal128("4"), 0]}, 8, True),
    ("mod NaN", {"$mod": [4, 0]}, NAN, False),
    ("mod infinity", {"$mod": [4, 0]}, INF, False),
    ("mod decimal NaN", {"$mod": [4, 0]}, Decimal128("NaN"), False),
    ("mod beyond 64 bits", {"$mod": [2, 0]}, 9.3e18, False),
    ("mod string", {"$mod": [4, 0]}, "8", False),
    ("mod bool", {"$mod": [1, 0]}, True, False),
    ("mod null", {"$mod": [1, 0]}, None, False),
    ("mod missing", {"$mod": [1, 0]}, NOPE, False),
    ("mod array element", {"$mod": [4, 0]}, [1, 8], True),
    ("mod array, no element", {"$mod": [4, 0]}, [1, 7], False),
    ("not mod", {"$not": {"$mod": [4, 0]}}, NOPE, True),
    # -- bits ----------------------------------------------------------------------------------------
    ("allSet positions", {"$bitsAllSet": [1, 5]}, 34, True),
    ("allSet positions, one clear", {"$bitsAllSet": [1, 5]}, 2, False),
    ("allSet mask", {"$bitsAllSet": 34}, 35, True),
    ("allSet mask, one clear", {"$bitsAllSet": 34}, 2, False),
    ("anySet", {"$bitsAnySet": [0, 1]}, 2, True),
    ("anySet none", {"$bitsAnySet": [0, 1]}, 4, False),
    ("allClear", {"$bitsAllClear": [0, 1]}, 4, True),
    ("allClear, one set", {"$bitsAllClear": [0, 1]}, 5, False),
    ("anyClear", {"$bitsAnyClear": [0, 1]}, 1, True),
    ("anyClear none", {"$bitsAnyClear": [0, 1]}, 3, False),
    ("sign bit of -1", {"$bitsAllSet": [63]}, -1, True),
    ("past 63 is the sign bit", {"$bitsAllSet": [100]}, -1, True),
    ("past 63 on a positive", {"$bitsAllClear": [100]}, 1, True),
    ("long", {"$bitsAllSet": [40]}, Int64(2**40), True),
    ("integral double", {"$bitsAllSet": [1]}, 34.0, True),
    ("fractional double", {"$bitsAllSet": [1]}, 34.5, False),
    ("NaN", {"$bitsAnyClear": [1]}, NAN, False),
    ("double beyond 64 bits", {"$bitsAnyClear": [1]}, 1e19, False),
    ("binData", {"$bitsAllSet": [0, 9]}, b"\x01\x02", True),
    ("binData beyond its length is clear", {"$bitsAllSet": [0, 16]}, b"\x01\x02", False),
    ("binData allClear beyond its length", {"$bitsAllClear": [16]}, b"\x01", True),
    ("binData subtype", {"$bitsAnySet": [3]}, Binary(b"\x08", 0), True),
    ("binData mask", {"$bitsAnySet": Binary(b"\x02", 0)}, 2, True),
    ("binData mask on binData", {"$bitsAllSet": b"\x03"}, b"\x07", True),
    ("string never", {"$bitsAllClear": [0]}, "x", False),
    ("bool never", {"$bitsAllClear": [0]}, False, False),
    ("missing never", {"$bitsAllClear": [0]}, NOPE, False),
    ("array element", {"$bitsAllSet": [0]}, [2, 3], True),
]


@cases(("ops", "value", "expected"), CASES)
def test_numeric_operators(ops: dict[str, Any], value: Any, expected: bool) -> None:
    doc = {} if value is NOPE else {"a": value}
    assert compile_filter({"a": ops})(doc) is expected


ERRORS: list[tuple[str, dict[str, Any], str, str]] = [
    ("mod number", {"$mod": 5}, "BadValue", "malformed mod, needs to be an array"),
    ("mod empty", {"$mod": []}, "BadValue", "malformed mod, not enough elements"),
    ("mod one", {"$mod": [1]}, "BadValue", "malformed mod, not enough elements"),
    ("mod three", {"$mod": [1, 2, 3]}, "BadValue", "malformed mod, too many elements"),
    ("mod divisor string", {"$mod": ["a", 1]}, "BadValue", "malformed mod, divisor not a number"),
    ("mod divisor bool", {"$mod": [True, 1]}, "BadValue", "malformed mod, divisor not a number"),
    (
        "mod remainder string",
        {"$mod": [1, "a"]},
        "BadValue",
        "malformed mod, remainder not a number",
    ),
    (
        "mod remainder null",
        {"$mod": [1, None]},
        "BadValue",
        "malformed mod, remainder not a number",
    ),
    ("mod zero", {"$mod": [0, 1]}, "BadValue", "divisor cannot be 0"),
    ("mod zero after truncation", {"$mod": [0.5, 0]}, "BadValue", "divisor cannot be 0"),
    (
        "mod NaN divisor",
        {"$mod": [NAN, 0]},
        "BadValue",
        "malformed mod, divisor value is invalid :: caused by :: Unable to coerce NaN/Inf to integral type",
    ),
    (
        "mod infinite remainder",
        {"$mod": [1, INF]},
        "BadValue",
        "malformed mod, remainder value is invalid :: caused by :: Unable to coerce NaN/Inf to integral type",
    ),
    (
        "mod divisor out of bounds",
        {"$mod": [1e19, 0]},
        "BadValue",
        "malformed mod, divisor value is invalid :: caused by :: Out of bounds coercing to integral value",
    ),
    (
        "mod decimal NaN divisor",
        {"$mod": [Decimal128("NaN"), 0]},
        "BadValue",
        "malformed mod, divisor value is invalid :: caused by :: Unable to coerce NaN/Inf to integral type",
    ),
    (
        "bits of a string",
        {"$bitsAllSet": "x"},
        "BadValue",
        'a takes an Array, a number, or a BinData but received: $bitsAllSet: "x"',
    ),
    (
        "bit position negative",
        {"$bitsAnySet": [-1]},
        "BadValue",
        "Failed to parse bit position. Expected a positive number in: 0: -1",
    ),
    (
        "bit position fractional",
        {"$bitsAnySet": [1, 1.5]},
        "BadValue",
        "Failed to parse bit position. Expected an integer: 1: 1.5",
    ),
    (
        "bit mask negative",
        {"$bitsAnySet": -1},
        "FailedToParse",
        "Expected a positive number in: $bitsAnySet: -1",
    ),
]


test_numeric_operator_errors = errors_test(lambda ops: compile_filter({"a": ops}), ERRORS)
