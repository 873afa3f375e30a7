"""Aggregation expressions, table-driven: field paths and variables, literals, object and array
expressions, arithmetic with MongoDB's type promotion, comparison, boolean and conditional
operators, and the codes and messages of their misuse."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Decimal128, Int64, ObjectId
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.expressions import compile_expression, truthy
from ebbdb.storage.query.paths import MISSING
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

CASES: list[tuple[str, Any, Any]] = [
    # -- field paths -------------------------------------------------------------------------------
    ("top field", "$a", 1),
    ("nested", "$o.p.q", 5),
    ("missing", "$zz", MISSING),
    ("missing below a scalar", "$a.b", MISSING),
    ("array maps over documents", "$arr.b", [1, [2, 3]]),
    ("array path with nothing", "$nums.x", []),
    ("null field", "$n", None),
    ("$$ROOT", "$$ROOT.o.p", {"q": 5}),
    ("$$CURRENT", "$$CURRENT.a", 1),
    ("$$REMOVE is missing", "$$REMOVE", MISSING),
    ("$$NOW from the caller", "$$NOW", DATE),
    # -- literals ----------------------------------------------------------------------------------
    ("number", 5, 5),
    ("string", "abc", "abc"),
    ("$literal keeps a dollar string", {"$literal": "$a"}, "$a"),
    ("$literal keeps an operator object", {"$literal": {"$add": [1]}}, {"$add": [1]}),
    ("$const", {"$const": [1, "$a"]}, [1, "$a"]),
    ("object expression", {"x": "$a", "y": {"z": "$s"}}, {"x": 1, "y": {"z": "Hello"}}),
    ("object drops missing fields", {"x": "$zz", "y": "$$REMOVE", "z": 1}, {"z": 1}),
    ("empty object", {}, {}),
    ("array expression", ["$a", "$s"], [1, "Hello"]),
    ("array turns missing into null", ["$zz", "$$REMOVE"], [None, None]),
    # -- $add --------------------------------------------------------------------------------------
    ("add ints", {"$add": [1, 2]}, 3),
    ("add no arguments", {"$add": []}, 0),
    ("add int overflow is a long", {"$add": [2**31 - 1, 1]}, Int64(2**31)),
    ("add long stays long", {"$add": [Int64(1), 1]}, Int64(2)),
    ("add long overflow is a double", {"$add": [Int64(2**63 - 1), 1]}, 9.223372036854776e18),
    ("add int and double", {"$add": [1, 1.5]}, 2.5),
    ("add decimal", {"$add": [Decimal128("1.1"), 1]}, Decimal128("2.1")),
    ("add decimal and double", {"$add": [Decimal128("1"), 0.5]}, Decimal128("1.500000000000000")),
    ("add date and number", {"$add": ["$d", 1000]}, DatetimeMS(1_700_000_001_123)),
    ("add number and date", {"$add": [-123, "$d"]}, DatetimeMS(1_700_000_000_000)),
    ("add date and a double rounds", {"$add": ["$d", 1.5]}, DatetimeMS(1_700_000_000_125)),
    ("add null", {"$add": [1, None]}, None),
    ("add missing", {"$add": [1, "$zz"]}, None),
    ("add null before a bad type", {"$add": [None, "x"]}, None),
    # -- $subtract ---------------------------------------------------------------------------------
    ("subtract ints", {"$subtract": [5, 7]}, -2),
    ("subtract double", {"$subtract": [5, 0.5]}, 4.5),
    ("subtract long overflow", {"$subtract": [Int64(-(2**63)), 1]}, -9.223372036854776e18),
    ("subtract dates is a long", {"$subtract": ["$d", DatetimeMS(0)]}, Int64(1_700_000_000_123)),
    ("subtract number from date", {"$subtract": ["$d", 123]}, DatetimeMS(1_700_000_000_000)),
    (
        "subtract truncates a double from a date",
        {"$subtract": ["$d", 1.9]},
        DatetimeMS(1_700_000_000_122),
    ),
    ("subtract null", {"$subtract": ["$zz", 1]}, None),
    ("subtract date minus null", {"$subtract": ["$d", None]}, None),
    # -- $multiply / $divide / $mod ------------------------------------------------------------------
    ("multiply", {"$multiply": [2, 3, 4]}, 24),
    ("multiply empty", {"$multiply": []}, 1),
    ("multiply int overflow", {"$multiply": [2**16, 2**16]}, Int64(2**32)),
    ("multiply long overflow", {"$multiply": [Int64(2**62), 4]}, 1.8446744073709552e19),
    ("multiply double", {"$multiply": [2, 0.5]}, 1.0),
    ("multiply decimal", {"$multiply": [Decimal128("1.5"), 2]}, Decimal128("3.0")),
    ("multiply null", {"$multiply": [2, None]}, None),
    ("divide ints is a double", {"$divide": [6, 3]}, 2.0),
    ("divide decimal", {"$divide": [Decimal128("1"), 4]}, Decimal128("0.25")),
    ("divide null", {"$divide": [None, "x"]}, None),
    ("mod ints", {"$mod": [7, 3]}, 1),
    ("mod keeps the dividend's sign", {"$mod": [-7, 3]}, -1),
    ("mod long", {"$mod": [Int64(7), 3]}, Int64(1)),
    ("mod double", {"$mod": [7.5, 2]}, 1.5),
    ("mod by an integral double is integral", {"$mod": [7, 2.0]}, 1),
    ("mod decimal", {"$mod": [Decimal128("7.5"), 2]}, Decimal128("1.5")),
    ("mod null", {"$mod": [None, 0]}, None),
    # -- one-argument math -------------------------------------------------------------------------
    ("abs int", {"$abs": -5}, 5),
    ("abs int min is a long", {"$abs": -(2**31)}, Int64(2**31)),
    ("abs long", {"$abs": Int64(-3)}, Int64(3)),
    ("abs double", {"$abs": -2.5}, 2.5),
    ("abs decimal", {"$abs": Decimal128("-2.5")}, Decimal128("2.5")),
    ("abs null", {"$abs": None}, None),
    ("abs missing", {"$abs": "$zz"}, None),
    ("ceil double", {"$ceil": 1.2}, 2.0),
    ("ceil keeps negative zero", {"$ceil": -0.5}, -0.0),
    ("ceil int unchanged", {"$ceil": 3}, 3),
    ("floor double", {"$floor": -1.2}, -2.0),
    ("floor decimal", {"$floor": Decimal128("2.7")}, Decimal128("2")),
    ("sqrt", {"$sqrt": 16}, 4.0),
    ("sqrt decimal", {"$sqrt": Decimal128("2.25")}, Decimal128("1.5")),
    ("exp", {"$exp": 0}, 1.0),
    ("ln", {"$ln": 1}, 0.0),
    ("log10", {"$log10": 1000}, 3.0),
    ("log", {"$log": [8, 2]}, 3.0),
    ("log null base", {"$log": [8, None]}, None),
    # -- $pow --------------------------------------------------------------------------------------
    ("pow ints", {"$pow": [2, 10]}, 1024),
    ("pow int past int32 is a long", {"$pow": [2, 40]}, Int64(2**40)),
    ("pow past int64 is a double", {"$pow": [2, 63]}, 9.223372036854776e18),
    ("pow negative exponent is a double", {"$pow": [2, -1]}, 0.5),
    ("pow long", {"$pow": [Int64(3), 2]}, Int64(9)),
    ("pow minus one", {"$pow": [-1, 3]}, -1),
    ("pow zero to zero", {"$pow": [0, 0]}, 1),
    ("pow double", {"$pow": [4, 0.5]}, 2.0),
    # MongoDB widens a decimal power to 34 digits (Decimal128::power adds 0E-6176).
    (
        "pow decimal",
        {"$pow": [Decimal128("2"), 3]},
        Decimal128("8.000000000000000000000000000000000"),
    ),
    ("pow null", {"$pow": [None, 2]}, None),
    # -- $round / $trunc ---------------------------------------------------------------------------
    ("round half to even", {"$round": [2.5, 0]}, 2.0),
    ("round half to even, odd", {"$round": [3.5]}, 4.0),
    ("round to places", {"$round": [1.2345, 2]}, 1.23),
    ("round negative places", {"$round": [1234.5, -2]}, 1200.0),
    ("round int to tens", {"$round": [1250, -2]}, 1200),
    ("round int positive places unchanged", {"$round": [7, 2]}, 7),
    ("round long", {"$round": [Int64(1234), -1]}, Int64(1230)),
    ("round decimal", {"$round": [Decimal128("2.345"), 2]}, Decimal128("2.34")),
    ("round null place", {"$round": [2.5, None]}, None),
    ("trunc", {"$trunc": [-2.7]}, -2.0),
    ("trunc places", {"$trunc": [2.789, 1]}, 2.7),
    ("trunc int", {"$trunc": [1299, -2]}, 1200),
    # -- comparison --------------------------------------------------------------------------------
    ("eq numbers across types", {"$eq": [1, 1.0]}, True),
    ("eq long and decimal", {"$eq": [Int64(2), Decimal128("2")]}, True),
    ("eq string", {"$eq": ["$s", "Hello"]}, True),
    ("eq missing and null differ", {"$eq": ["$zz", None]}, False),
    ("eq two missing", {"$eq": ["$zz", "$yy"]}, True),
    ("eq arrays", {"$eq": ["$nums", [1, 2, 3]]}, True),
    ("ne", {"$ne": [1, "1"]}, True),
    ("gt across types: string above number", {"$gt": ["a", 5]}, True),
    ("lt missing below null", {"$lt": ["$zz", None]}, True),
    ("gte", {"$gte": [2, 2]}, True),
    ("lte dates", {"$lte": ["$d", DatetimeMS(0)]}, False),
    ("cmp less", {"$cmp": [1, 2]}, -1),
    ("cmp equal", {"$cmp": ["b", "b"]}, 0),
    ("cmp greater", {"$cmp": [{"a": 2}, {"a": 1}]}, 1),
    # -- boolean -----------------------------------------------------------------------------------
    ("and", {"$and": [1, "x", True]}, True),
    ("and with zero", {"$and": [1, 0]}, False),
    ("and empty", {"$and": []}, True),
    ("and missing", {"$and": ["$zz"]}, False),
    ("or", {"$or": [0, None, "$a"]}, True),
    ("or empty", {"$or": []}, False),
    ("not", {"$not": [0]}, True),
    ("not of an empty array is false", {"$not": [[]]}, False),
    ("not decimal zero", {"$not": Decimal128("0")}, True),
    # -- $cond / $ifNull / $switch -----------------------------------------------------------------
    ("cond array form", {"$cond": [{"$gt": ["$a", 0]}, "pos", "neg"]}, "pos"),
    ("cond object form", {"$cond": {"if": "$zz", "then": 1, "else": 2}}, 2),
    ("cond can remove", {"$cond": [True, "$$REMOVE", 1]}, MISSING),
    ("ifNull", {"$ifNull": ["$zz", "dflt"]}, "dflt"),
    ("ifNull keeps a value", {"$ifNull": ["$a", "dflt"]}, 1),
    ("ifNull several", {"$ifNull": ["$zz", None, "$s", "x"]}, "Hello"),
    ("ifNull all null gives the last", {"$ifNull": ["$zz", "$n"]}, None),
    ("ifNull last missing", {"$ifNull": [None, "$zz"]}, MISSING),
    (
        "switch first true branch",
        {"$switch": {"branches": [{"case": 0, "then": "a"}, {"case": 1, "then": "b"}]}},
        "b",
    ),
    (
        "switch default",
        {"$switch": {"branches": [{"case": False, "then": 1}], "default": "d"}},
        "d",
    ),
    # -- $let --------------------------------------------------------------------------------------
    ("let", {"$let": {"vars": {"x": 2, "y": "$a"}, "in": {"$add": ["$$x", "$$y"]}}}, 3),
    (
        "let vars see the outer scope",
        {"$let": {"vars": {"x": 1}, "in": {"$let": {"vars": {"x": 2, "y": "$$x"}, "in": "$$y"}}}},
        1,
    ),
    ("let path into a variable", {"$let": {"vars": {"v": "$o"}, "in": "$$v.p.q"}}, 5),
    ("let rebinding CURRENT", {"$let": {"vars": {"CURRENT": "$o"}, "in": "$p.q"}}, 5),
]


@cases(("spec", "expected"), CASES)
def test_expression(spec: Any, expected: Any) -> None:
    assert typed(run(spec, DOC, {"NOW": DATE})) == typed(expected)


ERRORS: list[tuple[str, Any, str, str]] = [
    # -- paths, variables and parsing ---------------------------------------------------------------
    ("lone dollar", "$", "Location16872", "'$' by itself is not a valid FieldPath"),
    ("trailing dot", "$a.", "Location40353", "FieldPath must not end with a '.'."),
    (
        "empty component",
        "$a..b",
        "Location15998",
        "FieldPath field names may not be empty strings.",
    ),
    (
        "dollar component",
        "$a.$b",
        "Location16410",
        "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
    ),
    ("undefined variable", "$$x", "Location17276", "Use of undefined variable: x"),
    ("empty variable name", "$$", "Location16866", "empty variable names are not allowed"),
    (
        "variable name character",
        "$$_x",
        "Location16867",
        "'_x' starts with an invalid character for a user variable name",
    ),
    ("unknown uppercase variable", "$$FOO", "Location17276", "Use of undefined variable: FOO"),
    ("unknown operator", {"$foo": 1}, "InvalidPipelineOperator", "Unrecognized expression '$foo'"),
    (
        "operator with a second field",
        {"$add": [1], "b": 2},
        "Location15983",
        "An object representing an expression must have exactly one field: { $add: [ 1 ], b: 2 }",
    ),
    (
        "dollar field after a plain one",
        {"a": 1, "$b": 2},
        "Location16410",
        "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
    ),
    (
        "dotted field in an object expression",
        {"a.b": 1},
        "Location16412",
        "FieldPath field names may not contain '.'. Consider using $getField or $setField.",
    ),
    (
        "nested unknown operator",
        {"x": [{"$bar": 1}]},
        "InvalidPipelineOperator",
        "Unrecognized expression '$bar'",
    ),
    # -- arity -------------------------------------------------------------------------------------
    (
        "subtract arity",
        {"$subtract": [1]},
        "Location16020",
        "Expression $subtract takes exactly 2 arguments. 1 were passed in.",
    ),
    (
        "not arity",
        {"$not": [1, 2]},
        "Location16020",
        "Expression $not takes exactly 1 arguments. 2 were passed in.",
    ),
    (
        "round arity",
        {"$round": [1, 2, 3]},
        "Location28667",
        "Expression $round takes at least 1 arguments, and at most 2, but 3 were passed in.",
    ),
    # -- arithmetic --------------------------------------------------------------------------------
    (
        "add a string",
        {"$add": [1, "x"]},
        "TypeMismatch",
        "$add only supports numeric or date types, not string",
    ),
    (
        "add two dates",
        {"$add": ["$d", "$d"]},
        "Location16612",
        "only one date allowed in an $add expression",
    ),
    (
        "subtract date from number",
        {"$subtract": [1, "$d"]},
        "TypeMismatch",
        "can't $subtract date from int",
    ),
    (
        "subtract string from date",
        {"$subtract": ["$d", "x"]},
        "TypeMismatch",
        "can't $subtract string from Date",
    ),
    (
        "multiply a string",
        {"$multiply": [2, "x"]},
        "TypeMismatch",
        "$multiply only supports numeric types, not string",
    ),
    ("divide by zero", {"$divide": [1, 0]}, "BadValue", "can't $divide by zero"),
    (
        "divide by decimal zero",
        {"$divide": [1, Decimal128("0")]},
        "BadValue",
        "can't $divide by zero",
    ),
    (
        "divide a string",
        {"$divide": ["x", 1]},
        "TypeMismatch",
        "$divide only supports numeric types, not string and int",
    ),
    ("mod by zero", {"$mod": [1, 0]}, "Location16610", "can't $mod by zero"),
    (
        "mod a string",
        {"$mod": [1, "x"]},
        "Location16611",
        "$mod only supports numeric types, not int and string",
    ),
    (
        "abs a string",
        {"$abs": "x"},
        "Location28765",
        "$abs only supports numeric types, not string",
    ),
    (
        "abs long min",
        {"$abs": Int64(-(2**63))},
        "Location28680",
        "can't take $abs of long long min",
    ),
    (
        "ceil a bool",
        {"$ceil": True},
        "Location28765",
        "$ceil only supports numeric types, not bool",
    ),
    (
        "sqrt negative",
        {"$sqrt": -1},
        "Location28714",
        "$sqrt's argument must be greater than or equal to 0",
    ),
    ("ln zero", {"$ln": 0}, "Location28766", "$ln's argument must be a positive number, but is 0"),
    (
        "log10 negative",
        {"$log10": -2.5},
        "Location28761",
        "$log10's argument must be a positive number, but is -2.5",
    ),
    (
        "log base one",
        {"$log": [2, 1]},
        "Location28759",
        "$log's base must be a positive number not equal to 1, but is 1",
    ),
    (
        "pow a string",
        {"$pow": ["x", 2]},
        "Location28762",
        "$pow's base must be numeric, not string",
    ),
    (
        "pow zero to a negative",
        {"$pow": [0, -1]},
        "Location28764",
        "$pow cannot take a base of 0 and a negative exponent",
    ),
    (
        "round a string",
        {"$round": ["x"]},
        "Location51081",
        "$round only supports numeric types, not string",
    ),
    (
        "round a fractional place",
        {"$round": [1, 1.5]},
        "Location51082",
        "precision argument to  $round must be a integral value",
    ),
    (
        "round place out of range",
        {"$round": [1, 101]},
        "Location51083",
        "cannot apply $round with precision value 101 value must be in [-20, 100]",
    ),
    # -- conditionals ------------------------------------------------------------------------------
    (
        "cond missing else",
        {"$cond": {"if": 1, "then": 2}},
        "Location17082",
        "Missing 'else' parameter to $cond",
    ),
    (
        "cond unknown field",
        {"$cond": {"if": 1, "x": 2}},
        "Location17083",
        "Unrecognized parameter to $cond: x",
    ),
    (
        "cond array arity",
        {"$cond": [1, 2]},
        "Location16020",
        "Expression $cond takes exactly 3 arguments. 2 were passed in.",
    ),
    (
        "ifNull one argument",
        {"$ifNull": ["$a"]},
        "Location1257300",
        "$ifNull needs at least two arguments, had: 1",
    ),
    (
        "switch not an object",
        {"$switch": 1},
        "Location40060",
        "$switch requires an object as an argument, found: int",
    ),
    (
        "switch no branches",
        {"$switch": {"branches": []}},
        "Location40068",
        "$switch requires at least one branch.",
    ),
    (
        "switch branch without then",
        {"$switch": {"branches": [{"case": 1}]}},
        "Location40065",
        "$switch requires each branch have a 'then' expression.",
    ),
    (
        "switch unknown argument",
        {"$switch": {"branches": [{"case": 1, "then": 1}], "other": 1}},
        "Location40067",
        "$switch found an unknown argument: other",
    ),
    (
        "switch without a match",
        {"$switch": {"branches": [{"case": False, "then": 1}]}},
        "Location40066",
        "$switch could not find a matching branch for an input, and no default was specified.",
    ),
    # -- $let --------------------------------------------------------------------------------------
    (
        "let not an object",
        {"$let": 1},
        "Location16874",
        "$let only supports an object as its argument",
    ),
    ("let missing in", {"$let": {"vars": {}}}, "Location16877", "Missing 'in' parameter to $let"),
    (
        "let unknown field",
        {"$let": {"vars": {}, "in": 1, "x": 1}},
        "Location16875",
        "Unrecognized parameter to $let: x",
    ),
    (
        "let uppercase name",
        {"$let": {"vars": {"Xy": 1}, "in": 1}},
        "Location16867",
        "'Xy' starts with an invalid character for a user variable name",
    ),
    (
        "let name with a dash",
        {"$let": {"vars": {"a-b": 1}, "in": 1}},
        "Location16868",
        "'a-b' contains an invalid character for a variable name: '-'",
    ),
    (
        "let variable out of scope",
        {"$add": [{"$let": {"vars": {"x": 1}, "in": "$$x"}}, "$$x"]},
        "Location17276",
        "Use of undefined variable: x",
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


def test_now_defaults_to_one_instant() -> None:
    expr = compile_expression(["$$NOW", "$$NOW"])
    first, second = expr({}, {})
    assert isinstance(first, DatetimeMS) and first == second


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
