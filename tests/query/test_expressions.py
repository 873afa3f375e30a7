"""Aggregation expressions, table-driven: field paths and variables, literals, object and array
expressions, arithmetic with MongoDB's type promotion, comparison, boolean and conditional
operators, and the codes and messages of their misuse."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Decimal128, Int64, ObjectId
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.expressions import compile_expression, core, truthy
from ebbdb.storage.query.paths import MISSING
from tests.case_tables import load_cases
from tests.helpers import cases
from tests.query.expr_support import Doc, errors_test, run, typed

DATE = DatetimeMS(1_700_000_000_123)  # 2023-11-14T22:13:20.123Z
DOC: Doc = {
    "_id": 1,
    "a": 1,
    "n": None,
    "s": "Hello",
    "d": DATE,
    "o": {"p": {"q": 5}},
    "arr": [{"b": 1}, {"b": [2, 3]}, {"c": 4}, 7, [{"b": 9}]],
    "nums": [1, 2, 3],
}

CASES: list[tuple[str, Any, Any]] = load_cases("expressions") + [
    # Rows holding BSON values (not plain YAML), after those of cases/expressions.yaml:
    ("missing", "$zz", MISSING),
    ("missing below a scalar", "$a.b", MISSING),
    ("$$REMOVE is missing", "$$REMOVE", MISSING),
    ("$$NOW from the caller", "$$NOW", DATE),
    ("add int overflow is a long", {"$add": [2**31 - 1, 1]}, Int64(2**31)),
    ("add long stays long", {"$add": [Int64(1), 1]}, Int64(2)),
    ("add long overflow is a double", {"$add": [Int64(2**63 - 1), 1]}, 9.223372036854776e18),
    ("add decimal", {"$add": [Decimal128("1.1"), 1]}, Decimal128("2.1")),
    ("add decimal and double", {"$add": [Decimal128("1"), 0.5]}, Decimal128("1.500000000000000")),
    ("add date and number", {"$add": ["$d", 1000]}, DatetimeMS(1_700_000_001_123)),
    ("add number and date", {"$add": [-123, "$d"]}, DatetimeMS(1_700_000_000_000)),
    ("add date and a double rounds", {"$add": ["$d", 1.5]}, DatetimeMS(1_700_000_000_125)),
    ("subtract long overflow", {"$subtract": [Int64(-(2**63)), 1]}, -9.223372036854776e18),
    ("subtract dates is a long", {"$subtract": ["$d", DatetimeMS(0)]}, Int64(1_700_000_000_123)),
    ("subtract number from date", {"$subtract": ["$d", 123]}, DatetimeMS(1_700_000_000_000)),
    (
        "subtract truncates a double from a date",
        {"$subtract": ["$d", 1.9]},
        DatetimeMS(1_700_000_000_122),
    ),
    ("multiply int overflow", {"$multiply": [2**16, 2**16]}, Int64(2**32)),
    ("multiply long overflow", {"$multiply": [Int64(2**62), 4]}, 1.8446744073709552e19),
    ("multiply decimal", {"$multiply": [Decimal128("1.5"), 2]}, Decimal128("3.0")),
    ("divide decimal", {"$divide": [Decimal128("1"), 4]}, Decimal128("0.25")),
    ("mod long", {"$mod": [Int64(7), 3]}, Int64(1)),
    ("mod decimal", {"$mod": [Decimal128("7.5"), 2]}, Decimal128("1.5")),
    ("abs int min is a long", {"$abs": -(2**31)}, Int64(2**31)),
    ("abs long", {"$abs": Int64(-3)}, Int64(3)),
    ("abs decimal", {"$abs": Decimal128("-2.5")}, Decimal128("2.5")),
    ("floor decimal", {"$floor": Decimal128("2.7")}, Decimal128("2")),
    ("sqrt decimal", {"$sqrt": Decimal128("2.25")}, Decimal128("1.5")),
    ("pow int past int32 is a long", {"$pow": [2, 40]}, Int64(2**40)),
    ("pow long", {"$pow": [Int64(3), 2]}, Int64(9)),
    # MongoDB widens a decimal power to 34 digits (Decimal128::power adds 0E-6176).
    (
        "pow decimal",
        {"$pow": [Decimal128("2"), 3]},
        Decimal128("8.000000000000000000000000000000000"),
    ),
    ("round long", {"$round": [Int64(1234), -1]}, Int64(1230)),
    ("round decimal", {"$round": [Decimal128("2.345"), 2]}, Decimal128("2.34")),
    ("eq long and decimal", {"$eq": [Int64(2), Decimal128("2")]}, True),
    ("lte dates", {"$lte": ["$d", DatetimeMS(0)]}, False),
    ("not decimal zero", {"$not": Decimal128("0")}, True),
    ("cond can remove", {"$cond": [True, "$$REMOVE", 1]}, MISSING),
    ("ifNull last missing", {"$ifNull": [None, "$zz"]}, MISSING),
]


@cases(("spec", "expected"), CASES)
def test_expression(spec: Any, expected: Any) -> None:
    assert typed(run(spec, DOC, {"NOW": DATE})) == typed(expected)


ERRORS: list[tuple[str, Any, str, str]] = load_cases("expressions_errors") + [
    # Rows holding BSON values (not plain YAML), after those of cases/expressions_errors.yaml:
    (
        "divide by decimal zero",
        {"$divide": [1, Decimal128("0")]},
        "BadValue",
        "can't $divide by zero",
    ),
    (
        "abs long min",
        {"$abs": Int64(-(2**63))},
        "Location28680",
        "can't take $abs of long long min",
    ),
]


test_errors = errors_test(ERRORS, DOC)


def test_parse_errors_come_before_evaluation() -> None:
    # A bad operator deep in an unused branch still fails at compile time, as MongoDB parses
    # the whole expression up front.
    with pytest.raises(QueryError):
        compile_expression({"$cond": [True, 1, {"$nope": 1}]})


def test_runtime_errors_only_when_evaluated() -> None:
    expr = compile_expression({"$cond": ["$a", 1, {"$divide": [1, 0]}]})
    assert expr({"a": True}, {}) == 1
    with pytest.raises(QueryError):
        expr({"a": False}, {})


TRUTHY: list[tuple[Any, bool]] = [
    (MISSING, False),
    (None, False),
    (False, False),
    (0, False),
    (0.0, False),
    (-0.0, False),
    (Int64(0), False),
    (Decimal128("0"), False),
    (Decimal128("-0.00"), False),
    (float("nan"), True),
    (1, True),
    ("", True),
    ([], True),
    ({}, True),
    (ObjectId("65a1b2c3d4e5f6a7b8c9d0e1"), True),
    (DatetimeMS(0), True),
]


@pytest.mark.parametrize(("value", "expected"), TRUTHY, ids=[repr(v) for v, _ in TRUTHY])
def test_truthy(value: Any, expected: bool) -> None:
    assert truthy(value) is expected


def test_now_defaults_to_one_instant(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without NOW from the caller every $$NOW of a statement is one instant, however the clock
    moves while it compiles (here it moves a millisecond at every reading; CI once saw two
    references a millisecond apart)."""
    readings = iter(range(1_700_000_000_000, 1_700_000_001_000))
    monkeypatch.setattr(core, "_now", lambda: DatetimeMS(next(readings)))
    expr = compile_expression(["$$NOW", {"$ifNull": ["$$NOW", 0]}, ["$$NOW"]])
    first, second, (third,) = expr({}, {})
    assert first == second == third == DatetimeMS(1_700_000_000_000)


def test_literal_results_are_not_shared() -> None:
    expr = compile_expression({"$literal": {"a": [1]}})
    first = expr({}, {})
    first["a"].append(2)
    assert expr({}, {}) == {"a": [1]}


# MongoDB's own cases (jstests/aggregation/expressions/log_pow_exp.js): with a decimal operand
# $log works in decimal only for positive operands, so NaN gives a double NaN; a decimal $pow is
# decimal, NaN included, and is widened to 34 digits.
NAN_AND_DECIMAL_POWERS: list[tuple[str, Any, Any]] = [
    ("sqrt keeps a decimal NaN", {"$sqrt": {"$literal": Decimal128("NaN")}}, Decimal128("NaN")),
    ("log of NaN to a decimal base", {"$log": [float("nan"), Decimal128("10")]}, float("nan")),
    ("log of a decimal to a NaN base", {"$log": [Decimal128("10"), float("nan")]}, float("nan")),
    ("log of a decimal NaN", {"$log": [{"$literal": Decimal128("NaN")}, 10]}, float("nan")),
    ("pow of NaN to a decimal", {"$pow": [float("nan"), Decimal128("2")]}, Decimal128("NaN")),
    ("pow of a decimal to NaN", {"$pow": [Decimal128("0.5"), float("nan")]}, Decimal128("NaN")),
    (
        "pow of a decimal is 34 digits",
        {"$pow": [Decimal128("10.0"), 2]},
        Decimal128("100.0000000000000000000000000000000"),
    ),
    (
        "pow to a decimal exponent",
        {"$pow": [-2, Decimal128("2")]},
        Decimal128("4.000000000000000000000000000000000"),
    ),
    (
        "pow of a double to a decimal",
        {"$pow": [0.5, Decimal128("-1")]},
        Decimal128("2.000000000000000000000000000000000"),
    ),
    (
        "pow exact in 34 digits",
        {"$pow": [5, Decimal128("-112")]},
        Decimal128("5192296858534827628530496329220096E-112"),
    ),
]


@cases(("spec", "expected"), NAN_AND_DECIMAL_POWERS)
def test_nan_and_decimal_powers(spec: Any, expected: Any) -> None:
    assert typed(run(spec)) == typed(expected)
