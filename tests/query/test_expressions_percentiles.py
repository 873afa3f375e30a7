"""$percentile and $median (storage/query/expressions/percentiles.py) without a server: the
accumulators over documents, the expressions over a value, the window form's empty window, and
the parse errors with mongod 7.0's codes and messages. Results are compared with their BSON
types (every percentile is a double)."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Decimal128, Int64

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.expressions import compile_accumulator
from ebbdb.storage.query.expressions.percentiles import WINDOW_FUNCTIONS, percentiles_of
from tests.helpers import cases, errors_test
from tests.query.expr_support import Doc, run, typed

#: MongoDB's documented testScores collection (the $percentile and $median pages).
SCORES: list[Doc] = [
    {"studentId": "2345", "test01": 62, "test02": 81, "test03": 80},
    {"studentId": "2356", "test01": 60, "test02": 83, "test03": 79},
    {"studentId": "2358", "test01": 67, "test02": 82, "test03": 78},
    {"studentId": "2367", "test01": 64, "test02": 72, "test03": 77},
    {"studentId": "2369", "test01": 60, "test02": 53, "test03": 72},
]
PS = [0.5, 0.75, 0.9, 0.95]


def pct(input_: Any, p: Any = PS) -> dict[str, Any]:
    return {"input": input_, "p": p, "method": "approximate"}


def med(input_: Any) -> dict[str, Any]:
    return {"input": input_, "method": "approximate"}


ACCUMULATED: list[tuple[str, str, Any, list[Doc], Any]] = [
    ("documented: one p", "$percentile", pct("$test01", [0.95]), SCORES, [67.0]),
    ("documented: test01", "$percentile", pct("$test01"), SCORES, [62.0, 64.0, 67.0, 67.0]),
    ("documented: test02", "$percentile", pct("$test02"), SCORES, [81.0, 82.0, 83.0, 83.0]),
    ("documented: test03", "$percentile", pct("$test03"), SCORES, [78.0, 79.0, 80.0, 80.0]),
    (
        "documented: p in its own order",
        "$percentile",
        pct("$test03", [0.9, 0.5, 0.75, 0.95]),
        SCORES,
        [80.0, 78.0, 79.0, 80.0],
    ),
    ("documented: median", "$median", med("$test01"), SCORES, 62.0),
    (
        "p 0 and 1 are the least and the greatest",
        "$percentile",
        pct("$test02", [0, 1]),
        SCORES,
        [53.0, 83.0],
    ),
    (
        "non-numbers are ignored",
        "$percentile",
        pct("$v", [0.5]),
        [{"v": "9"}, {"v": 3}, {}, {"v": None}, {"v": True}, {"v": [100]}, {"v": 1}],
        [1.0],
    ),
    (
        "every numeric type, as doubles",
        "$median",
        med("$v"),
        [{"v": Int64(5)}, {"v": Decimal128("2.5")}, {"v": 7}],
        5.0,
    ),
    ("no numbers: a null per p", "$percentile", pct("$v", [0.1, 0.2]), [{"v": "x"}], [None, None]),
    ("no numbers: median null", "$median", med("$v"), [{}], None),
    ("even count: the lower middle", "$median", med("$v"), [{"v": x} for x in (4, 1, 3, 2)], 2.0),
    (
        "p as a constant expression",
        "$percentile",
        pct("$v", {"$literal": [0.5]}),
        [{"v": 1}, {"v": 2}],
        [1.0],
    ),
    (
        "p computed from constants",
        "$percentile",
        pct("$v", [{"$divide": [1, 4]}]),
        [{"v": x} for x in range(1, 9)],
        [2.0],
    ),
]


@cases(("op", "spec", "docs", "expected"), ACCUMULATED)
def test_accumulator(op: str, spec: Any, docs: list[Doc], expected: Any) -> None:
    acc = compile_accumulator(op, spec)()
    for doc in docs:
        acc.add(doc, {})
    assert typed(acc.result()) == typed(expected)


def test_p_from_a_variable_is_read_when_the_group_starts() -> None:
    acc = compile_accumulator("$percentile", pct("$v", "$$ps"), frozenset({"ps"}))()
    for x in (10, 20, 30):
        acc.add({"v": x}, {"ps": [0.5, 1]})
    assert typed(acc.result()) == typed([20.0, 30.0])


def test_a_variable_p_is_still_checked() -> None:
    acc = compile_accumulator("$percentile", pct("$v", "$$ps"), frozenset({"ps"}))()
    with pytest.raises(QueryError) as info:
        acc.add({"v": 1}, {"ps": [2]})
    assert info.value.code_name == "Location7750303"


EXPRESSIONS: list[tuple[str, Any, Doc, Any]] = [
    (
        "documented: percentiles of three fields",
        {"$percentile": pct(["$test01", "$test02", "$test03"], [0.5, 0.95])},
        SCORES[0],
        [80.0, 81.0],
    ),
    (
        "documented: median of three fields",
        {"$median": med(["$test01", "$test02", "$test03"])},
        SCORES[3],
        72.0,
    ),
    ("an array field", {"$median": med("$a")}, {"a": [9, "x", 1, 5]}, 5.0),
    ("a number is every percentile", {"$percentile": pct("$a", [0, 1])}, {"a": 7}, [7.0, 7.0]),
    ("an empty array", {"$percentile": pct("$a", [0.5])}, {"a": []}, [None]),
    ("a string", {"$median": med("$a")}, {"a": "12"}, None),
    ("missing", {"$percentile": pct("$a", [0.5, 0.6])}, {}, [None, None]),
    ("nested arrays are not numbers", {"$median": med("$a")}, {"a": [[1], [2]]}, None),
]


@cases(("spec", "doc", "expected"), EXPRESSIONS)
def test_expression(spec: Any, doc: Doc, expected: Any) -> None:
    assert typed(run(spec, doc)) == typed(expected)


def test_window_form_over_an_empty_window_is_null() -> None:
    # mongod 7.0's window function answers a single null, not an array of nulls.
    for op, spec in (("$percentile", pct("$v", [0.5])), ("$median", med("$v"))):
        make = WINDOW_FUNCTIONS[op](spec, frozenset())
        assert make().result() is None
        acc = make()
        acc.add({"v": "x"}, {})
        assert acc.result() is None


def test_ranks() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert percentiles_of(values, (0.0, 0.2, 0.21, 0.4, 0.6, 0.99, 1.0)) == [
        1.0,
        1.0,
        2.0,
        2.0,
        3.0,
        5.0,
        5.0,
    ]
    assert percentiles_of([float("nan"), 1.0], (0.5,))[0] != 1.0  # NaN sorts first


def accumulator(op: str, spec: Any) -> Any:
    return compile_accumulator(op, spec)


def expression(op: str, spec: Any) -> Any:
    return run({op: spec})


_RANGE = "The $percentile 'p' field must be an array of numbers from [0.0, 1.0], but found: "
_METHOD = "Currently only 'approximate' can be used as percentile 'method'."

ERRORS: list[tuple[str, Any, str, Any, str, str]] = [
    (
        "accumulator spec not an object",
        accumulator,
        "$percentile",
        1,
        "Location7429703",
        "specification must be an object; found $percentile: 1",
    ),
    (
        "median accumulator spec not an object",
        accumulator,
        "$median",
        "x",
        "Location7436100",
        'specification must be an object; found $median: "x"',
    ),
    (
        "accumulator spec an array",
        accumulator,
        "$median",
        [1],
        "Location40237",
        "The $median accumulator is a unary operator",
    ),
    (
        "expression spec not an object",
        expression,
        "$percentile",
        [1, 2],
        "Location7436200",
        "specification must be an object; found $percentile: [ 1, 2 ]",
    ),
    (
        "median expression spec not an object",
        expression,
        "$median",
        None,
        "Location7436201",
        "specification must be an object; found $median: null",
    ),
    (
        "unknown field",
        accumulator,
        "$percentile",
        {**pct("$v"), "algorithm": "t-digest"},
        "Location40415",
        "BSON field '$percentile.algorithm' is an unknown field.",
    ),
    (
        "median takes no p",
        expression,
        "$median",
        {**med("$v"), "p": [0.5]},
        "Location40415",
        "BSON field '$median.p' is an unknown field.",
    ),
    (
        "missing input",
        accumulator,
        "$percentile",
        {"p": [0.5], "method": "approximate"},
        "Location40414",
        "BSON field '$percentile.input' is missing but a required field",
    ),
    (
        "missing p",
        accumulator,
        "$percentile",
        {"input": "$v", "method": "approximate"},
        "Location40414",
        "BSON field '$percentile.p' is missing but a required field",
    ),
    (
        "missing method",
        expression,
        "$median",
        {"input": "$v"},
        "Location40414",
        "BSON field '$median.method' is missing but a required field",
    ),
    (
        "input is reported missing before method",
        accumulator,
        "$percentile",
        {"p": [0.5]},
        "Location40414",
        "BSON field '$percentile.input' is missing but a required field",
    ),
    (
        "method not a string",
        accumulator,
        "$percentile",
        {**pct("$v"), "method": 1},
        "TypeMismatch",
        "BSON field '$percentile.method' is the wrong type 'int', expected type 'string'",
    ),
    (
        "method not approximate",
        expression,
        "$percentile",
        {**pct("$v"), "method": "continuous"},
        "BadValue",
        _METHOD,
    ),
    (
        "a wrong method is found before a missing input",
        accumulator,
        "$median",
        {"method": "discrete"},
        "BadValue",
        _METHOD,
    ),
    (
        "p not an array",
        accumulator,
        "$percentile",
        pct("$v", 0.5),
        "Location7750301",
        _RANGE + "0.5",
    ),
    ("p empty", accumulator, "$percentile", pct("$v", []), "Location7750301", _RANGE + "[]"),
    (
        "p holds a string",
        expression,
        "$percentile",
        pct("$v", [0.5, "0.9"]),
        "Location7750302",
        _RANGE + '"0.9"',
    ),
    (
        "p holds null",
        accumulator,
        "$percentile",
        pct("$v", [None]),
        "Location7750302",
        _RANGE + "null",
    ),
    (
        "p above 1",
        accumulator,
        "$percentile",
        pct("$v", [0.5, 1.5]),
        "Location7750303",
        _RANGE + "1.5",
    ),
    (
        "p below 0",
        expression,
        "$percentile",
        pct("$v", [Int64(-1)]),
        "Location7750303",
        _RANGE + "-1",
    ),
    (
        "p reads a field",
        accumulator,
        "$percentile",
        pct("$v", "$ps"),
        "Location7750300",
        "The $percentile 'p' field must be an array of constant values, but found value: \"$ps\".",
    ),
    (
        "p holds a field path",
        expression,
        "$percentile",
        pct("$v", [0.5, "$p"]),
        "Location7750300",
        "The $percentile 'p' field must be an array of constant values, but found value: "
        '[ 0.5, "$p" ].',
    ),
]

test_errors = errors_test(lambda make, op, spec: make(op, spec), ERRORS)
