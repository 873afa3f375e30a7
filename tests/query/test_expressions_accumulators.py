"""$group accumulators from compile_accumulator, and the expression forms of $sum, $avg, $min,
$max and $stdDev*, table-driven: each runs over a list of documents and is checked with its BSON
type."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Decimal128, Int64

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.expressions import compile_accumulator
from tests.case_tables import load_cases
from tests.helpers import cases, errors_test
from tests.query.expr_support import Doc, run, typed

NUMS: list[Doc] = [{"v": 1}, {"v": 2}, {"v": 3}]
MIXED: list[Doc] = [{"v": 1}, {"v": "x"}, {}, {"v": None}, {"v": 2.5}, {"v": [10]}]
OBJS: list[Doc] = [{"v": {"a": 1, "b": 1}}, {"v": None}, {"v": {"b": 2}}, {}]

CASES: list[tuple[str, str, Any, list[Doc], Any]] = [
    ("sum ints", "$sum", "$v", NUMS, 6),
    ("sum ignores non-numbers", "$sum", "$v", MIXED, 3.5),
    ("sum of nothing", "$sum", "$v", [], 0),
    ("sum of no numbers", "$sum", "$v", [{"v": "a"}], 0),
    ("sum constant counts", "$sum", 1, NUMS, 3),
    ("sum int overflow is a long", "$sum", "$v", [{"v": 2**31 - 1}, {"v": 1}], Int64(2**31)),
    ("sum longs", "$sum", "$v", [{"v": Int64(1)}, {"v": 2}], Int64(3)),
    (
        "sum long overflow is a double",
        "$sum",
        "$v",
        [{"v": Int64(2**63 - 1)}, {"v": 1}],
        9.223372036854776e18,
    ),
    ("sum is exact over doubles", "$sum", "$v", [{"v": 0.1}] * 10, 1.0),
    ("sum decimals", "$sum", "$v", [{"v": Decimal128("0.1")}, {"v": 1}], Decimal128("1.1")),
    ("avg", "$avg", "$v", NUMS, 2.0),
    ("avg ignores non-numbers", "$avg", "$v", MIXED, 1.75),
    ("avg of nothing is null", "$avg", "$v", [{"v": "x"}], None),
    ("avg decimal", "$avg", "$v", [{"v": Decimal128("1")}, {"v": 2}], Decimal128("1.5")),
    ("min", "$min", "$v", NUMS, 1),
    ("min ignores null and missing", "$min", "$v", MIXED, 1),
    ("max", "$max", "$v", NUMS, 3),
    ("max in BSON order", "$max", "$v", MIXED, [10]),
    ("max of nothing is null", "$max", "$v", [{}, {"v": None}], None),
    ("first", "$first", "$v", NUMS, 1),
    ("first keeps null for missing", "$first", "$v", [{}, {"v": 1}], None),
    ("last", "$last", "$v", NUMS, 3),
    ("last keeps null for missing", "$last", "$v", [{"v": 1}, {}], None),
    ("push", "$push", "$v", MIXED, [1, "x", None, 2.5, [10]]),
    ("push an object expression", "$push", {"w": "$v"}, NUMS[:2], [{"w": 1}, {"w": 2}]),
    (
        "addToSet",
        "$addToSet",
        "$v",
        [{"v": 1}, {"v": 1.0}, {"v": "1"}, {}, {"v": Int64(1)}],
        [1, "1"],
    ),
    ("addToSet documents", "$addToSet", "$v", [{"v": {"a": 1}}, {"v": {"a": 1}}], [{"a": 1}]),
    ("mergeObjects", "$mergeObjects", "$v", OBJS, {"a": 1, "b": 2}),
    ("stdDevPop", "$stdDevPop", "$v", [{"v": 1}, {"v": 3}], 1.0),
    ("stdDevSamp", "$stdDevSamp", "$v", [{"v": 1}, {"v": 3}], 1.4142135623730951),
    ("stdDevSamp of one", "$stdDevSamp", "$v", [{"v": 1}], None),
    ("stdDevPop of nothing", "$stdDevPop", "$v", [{"v": "x"}], None),
    ("count", "$count", {}, MIXED, 6),
]


@cases(("op", "arg", "docs", "expected"), CASES)
def test_accumulator(op: str, arg: Any, docs: list[Doc], expected: Any) -> None:
    acc = compile_accumulator(op, arg)()
    for doc in docs:
        acc.add(doc, {})
    assert typed(acc.result()) == typed(expected)


def test_factory_gives_fresh_state() -> None:
    make = compile_accumulator("$push", "$v")
    first, second = make(), make()
    first.add({"v": 1}, {})
    assert second.result() == []


def test_accumulator_sees_variables() -> None:
    acc = compile_accumulator("$sum", "$$k", frozenset({"k"}))()
    acc.add({}, {"k": 5})
    assert acc.result() == 5


ACC_ERRORS: list[tuple[str, str, Any, str, str]] = load_cases("accumulator_errors")


test_accumulator_errors = errors_test(compile_accumulator, ACC_ERRORS)


def test_merge_objects_rejects_scalars() -> None:
    acc = compile_accumulator("$mergeObjects", "$v")()
    with pytest.raises(QueryError) as info:
        acc.add({"v": 1}, {})
    assert info.value.code_name == "Location40400"


EXPRESSION_FORMS: list[tuple[str, Any, Any]] = load_cases("accumulator_expressions")


@cases(("spec", "expected"), EXPRESSION_FORMS)
def test_expression_form(spec: Any, expected: Any) -> None:
    assert typed(run(spec, {"a": [1, 2, 3]})) == typed(expected)


RANKED: list[Doc] = [
    {"s": 3, "v": "c"},
    {"s": 1, "v": "a"},
    {"s": 2, "v": "b"},
    {"v": "none"},
    {"s": 1, "v": "a2"},
]

N_CASES: list[tuple[str, str, Any, Any]] = load_cases("n_accumulators")


@cases(("op", "arg", "expected"), N_CASES)
def test_n_accumulator(op: str, arg: Any, expected: Any) -> None:
    acc = compile_accumulator(op, arg)()
    for doc in RANKED:
        acc.add(doc, {})
    assert typed(acc.result()) == typed(expected)


def test_n_must_be_positive() -> None:
    acc = compile_accumulator("$firstN", {"input": "$v", "n": 0})()
    with pytest.raises(QueryError) as info:
        acc.add({"v": 1}, {})
    assert info.value.code_name == "Location5787908"


N_EXPRESSIONS: list[tuple[str, Any, Any]] = [
    ("firstN", {"$firstN": {"input": [1, 2, 3], "n": 2}}, [1, 2]),
    ("lastN", {"$lastN": {"input": "$a", "n": 5}}, [1, 2, 3]),
    ("maxN", {"$maxN": {"input": [1, None, 3, 2], "n": 2}}, [3, 2]),
    ("minN", {"$minN": {"input": [3, 1, 2], "n": Int64(1)}}, [1]),
]


@cases(("spec", "expected"), N_EXPRESSIONS)
def test_n_expression(spec: Any, expected: Any) -> None:
    assert typed(run(spec, {"a": [1, 2, 3]})) == typed(expected)


def test_n_expression_needs_an_array() -> None:
    with pytest.raises(QueryError) as info:
        run({"$firstN": {"input": 1, "n": 1}})
    assert (info.value.code_name, info.value.message) == (
        "Location5788200",
        "Input must be an array",
    )
