"""$percentile and $median through pymongo: MongoDB's documented examples for each form ($group
accumulator, $project expression, $setWindowFields window function, on the documented testScores
collection), result types (doubles), the empty and non-numeric cases, and mongod 7.0's errors with
their codes and messages."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Decimal128, Int64
from pymongo import MongoClient
from pymongo.errors import OperationFailure

Client = MongoClient[dict[str, Any]]

SCORES = [
    {"studentId": "2345", "test01": 62, "test02": 81, "test03": 80},
    {"studentId": "2356", "test01": 60, "test02": 83, "test03": 79},
    {"studentId": "2358", "test01": 67, "test02": 82, "test03": 78},
    {"studentId": "2367", "test01": 64, "test02": 72, "test03": 77},
    {"studentId": "2369", "test01": 60, "test02": 53, "test03": 72},
]


@pytest.fixture
def scores(client: Client) -> Any:
    coll = client.percentiles.testScores
    coll.insert_many([dict(d) for d in SCORES])
    return coll


def pct(input_: Any, p: Any) -> dict[str, Any]:
    return {"$percentile": {"input": input_, "p": p, "method": "approximate"}}


def med(input_: Any) -> dict[str, Any]:
    return {"$median": {"input": input_, "method": "approximate"}}


def doubles(value: Any) -> bool:
    items = value if isinstance(value, list) else [value]
    return all(type(x) is float for x in items)


# -- MongoDB's documented examples ---------------------------------------------------------------


def test_documented_accumulator_single_value(scores: Any) -> None:
    out = list(
        scores.aggregate([{"$group": {"_id": None, "test01_percentiles": pct("$test01", [0.95])}}])
    )
    assert out == [{"_id": None, "test01_percentiles": [67.0]}]
    assert doubles(out[0]["test01_percentiles"])


def test_documented_accumulator_multiple_values(scores: Any) -> None:
    ps = [0.5, 0.75, 0.9, 0.95]
    out = list(
        scores.aggregate(
            [
                {
                    "$group": {
                        "_id": None,
                        "test01_percentiles": pct("$test01", ps),
                        "test02_percentiles": pct("$test02", ps),
                        "test03_percentiles": pct("$test03", ps),
                        "test03_percent_alt": pct("$test03", [0.9, 0.5, 0.75, 0.95]),
                    }
                }
            ]
        )
    )
    assert out == [
        {
            "_id": None,
            "test01_percentiles": [62.0, 64.0, 67.0, 67.0],
            "test02_percentiles": [81.0, 82.0, 83.0, 83.0],
            "test03_percentiles": [78.0, 79.0, 80.0, 80.0],
            "test03_percent_alt": [80.0, 78.0, 79.0, 80.0],
        }
    ]


def test_documented_median_accumulator(scores: Any) -> None:
    out = list(scores.aggregate([{"$group": {"_id": None, "test01_median": med("$test01")}}]))
    assert out == [{"_id": None, "test01_median": 62.0}]
    assert type(out[0]["test01_median"]) is float


THREE_TESTS = ["$test01", "$test02", "$test03"]


@pytest.mark.parametrize(
    ("field", "expression", "expected"),
    [
        (
            "testPercentiles",
            pct(THREE_TESTS, [0.5, 0.95]),
            [[80.0, 81.0], [79.0, 83.0], [78.0, 82.0], [72.0, 77.0], [60.0, 72.0]],
        ),
        ("testMedians", med(THREE_TESTS), [80.0, 79.0, 78.0, 72.0, 60.0]),
    ],
    ids=["percentile", "median"],
)
def test_documented_expressions(scores: Any, field: str, expression: Any, expected: Any) -> None:
    out = list(scores.aggregate([{"$project": {"_id": 0, "studentId": 1, field: expression}}]))
    assert sorted(out, key=lambda d: d["studentId"]) == [
        {"studentId": d["studentId"], field: value} for d, value in zip(SCORES, expected)
    ]


def _windowed(scores: Any, field: str, fn: dict[str, Any], window: dict[str, Any]) -> list[Any]:
    pipeline = [
        {
            "$setWindowFields": {
                "sortBy": {"test01": 1},
                "output": {field: {**fn, "window": window}},
            }
        },
        {"$project": {"_id": 0, "studentId": 1, field: 1}},
    ]
    return list(scores.aggregate(pipeline))


def test_documented_percentile_window(scores: Any) -> None:
    out = _windowed(scores, "test01_95percentile", pct("$test01", [0.95]), {"range": [-3, 3]})
    # The two 60s tie on the sort key; either order is MongoDB's.
    assert sorted(out[:2], key=lambda d: d["studentId"]) + out[2:] == [
        {"studentId": "2356", "test01_95percentile": [62.0]},
        {"studentId": "2369", "test01_95percentile": [62.0]},
        {"studentId": "2345", "test01_95percentile": [64.0]},
        {"studentId": "2367", "test01_95percentile": [67.0]},
        {"studentId": "2358", "test01_95percentile": [67.0]},
    ]


def test_documented_median_window(scores: Any) -> None:
    out = _windowed(scores, "test01_median", med("$test01"), {"range": [-3, 3]})
    assert sorted(out[:2], key=lambda d: d["studentId"]) + out[2:] == [
        {"studentId": "2356", "test01_median": 60.0},
        {"studentId": "2369", "test01_median": 60.0},
        {"studentId": "2345", "test01_median": 60.0},
        {"studentId": "2367", "test01_median": 64.0},
        {"studentId": "2358", "test01_median": 64.0},
    ]


# -- the other shapes ------------------------------------------------------------------------------


def test_documents_window_and_partitions(client: Client) -> None:
    coll = client.percentiles.series
    coll.insert_many(
        [
            {"_id": i, "g": "a" if i < 5 else "b", "v": v}
            for i, v in enumerate([5, 1, 4, 2, 3, 9, 7])
        ]
    )
    out = list(
        coll.aggregate(
            [
                {
                    "$setWindowFields": {
                        "partitionBy": "$g",
                        "sortBy": {"_id": 1},
                        "output": {
                            "m": {**med("$v"), "window": {"documents": [-1, 1]}},
                            "p": {
                                **pct("$v", [0, 1]),
                                "window": {"documents": ["unbounded", "current"]},
                            },
                            "all": med("$v"),
                        },
                    }
                }
            ]
        )
    )
    assert [(d["_id"], d["m"], d["p"], d["all"]) for d in out] == [
        (0, 1.0, [5.0, 5.0], 3.0),
        (1, 4.0, [1.0, 5.0], 3.0),
        (2, 2.0, [1.0, 5.0], 3.0),
        (3, 3.0, [1.0, 5.0], 3.0),
        (4, 2.0, [1.0, 5.0], 3.0),
        (5, 7.0, [9.0, 9.0], 7.0),
        (6, 7.0, [7.0, 9.0], 7.0),
    ]


def test_numbers_of_every_type_and_the_rest_ignored(client: Client) -> None:
    coll = client.percentiles.mixed
    coll.insert_many(
        [
            {"g": 1, "v": Int64(4)},
            {"g": 1, "v": Decimal128("1.5")},
            {"g": 1, "v": 3},
            {"g": 1, "v": "100"},
            {"g": 1, "v": None},
            {"g": 1},
            {"g": 1, "v": [1000]},
            {"g": 2, "v": "only a string"},
        ]
    )
    out = list(
        coll.aggregate(
            [
                {"$group": {"_id": "$g", "p": pct("$v", [0, 0.5, 1]), "m": med("$v")}},
                {"$sort": {"_id": 1}},
            ]
        )
    )
    assert out == [
        {"_id": 1, "p": [1.5, 3.0, 4.0], "m": 3.0},
        {"_id": 2, "p": [None, None, None], "m": None},
    ]
    assert doubles(out[0]["p"]) and type(out[0]["m"]) is float


def test_empty_window_is_null(client: Client) -> None:
    coll = client.percentiles.sparse
    coll.insert_many([{"_id": 1, "t": 1, "v": 1}, {"_id": 2, "t": 10, "v": "x"}])
    out = list(
        coll.aggregate(
            [
                {
                    "$setWindowFields": {
                        "sortBy": {"t": 1},
                        "output": {
                            "p": {**pct("$v", [0.5]), "window": {"range": [0, 0]}},
                            "m": {**med("$v"), "window": {"range": [0, 0]}},
                        },
                    }
                }
            ]
        )
    )
    assert [(d["p"], d["m"]) for d in out] == [([1.0], 1.0), (None, None)]


def test_p_from_the_commands_let(scores: Any) -> None:
    out = list(
        scores.aggregate(
            [{"$group": {"_id": None, "p": pct("$test02", "$$ps")}}], let={"ps": [0.2, 0.8]}
        )
    )
    assert out == [{"_id": None, "p": [53.0, 82.0]}]


# -- mongod's errors -------------------------------------------------------------------------------

_RANGE = "The $percentile 'p' field must be an array of numbers from [0.0, 1.0], but found: "

ERRORS: list[tuple[str, dict[str, Any], int, str]] = [
    (
        "accumulator spec not an object",
        {"$group": {"_id": None, "x": {"$percentile": 0.5}}},
        7429703,
        "specification must be an object; found $percentile: 0.5",
    ),
    (
        "median accumulator spec not an object",
        {"$group": {"_id": None, "x": {"$median": "$v"}}},
        7436100,
        'specification must be an object; found $median: "$v"',
    ),
    (
        "expression spec not an object",
        {"$project": {"x": {"$percentile": "$v"}}},
        7436200,
        'specification must be an object; found $percentile: "$v"',
    ),
    (
        "median expression spec not an object",
        {"$project": {"x": {"$median": 1}}},
        7436201,
        "specification must be an object; found $median: 1",
    ),
    (
        "unknown field",
        {
            "$group": {
                "_id": None,
                "x": {"$median": {"input": "$v", "method": "approximate", "q": 1}},
            }
        },
        40415,
        "BSON field '$median.q' is an unknown field.",
    ),
    (
        "missing p",
        {"$group": {"_id": None, "x": {"$percentile": {"input": "$v", "method": "approximate"}}}},
        40414,
        "BSON field '$percentile.p' is missing but a required field",
    ),
    (
        "missing method",
        {"$project": {"x": {"$median": {"input": "$v"}}}},
        40414,
        "BSON field '$median.method' is missing but a required field",
    ),
    (
        "method not a string",
        {"$project": {"x": {"$median": {"input": "$v", "method": True}}}},
        14,
        "BSON field '$median.method' is the wrong type 'bool', expected type 'string'",
    ),
    (
        "method not approximate",
        {
            "$group": {
                "_id": None,
                "x": {"$percentile": {"input": "$v", "p": [0.5], "method": "discrete"}},
            }
        },
        2,
        "Currently only 'approximate' can be used as percentile 'method'.",
    ),
    (
        "p not an array",
        {"$group": {"_id": None, "x": pct("$v", "0.5")}},
        7750301,
        _RANGE + '"0.5"',
    ),
    ("p empty", {"$project": {"x": pct("$v", [])}}, 7750301, _RANGE + "[]"),
    ("p not numbers", {"$project": {"x": pct("$v", [0.5, True])}}, 7750302, _RANGE + "true"),
    ("p out of range", {"$group": {"_id": None, "x": pct("$v", [0.25, 2])}}, 7750303, _RANGE + "2"),
    (
        "p reads the document",
        {"$group": {"_id": None, "x": pct("$v", ["$p"])}},
        7750300,
        "The $percentile 'p' field must be an array of constant values, but found value: "
        '[ "$p" ].',
    ),
    (
        "window spec not an object",
        {"$setWindowFields": {"sortBy": {"v": 1}, "output": {"x": {"$median": 5}}}},
        7436100,
        "specification must be an object; found $median: 5",
    ),
    (
        "window p out of range",
        {"$setWindowFields": {"sortBy": {"v": 1}, "output": {"x": pct("$v", [-0.5])}}},
        7750303,
        _RANGE + "-0.5",
    ),
]


@pytest.mark.parametrize(
    ("stage", "code", "message"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_errors(client: Client, stage: dict[str, Any], code: int, message: str) -> None:
    coll = client.percentiles.errors
    coll.insert_one({"v": 1})
    with pytest.raises(OperationFailure) as info:
        list(coll.aggregate([stage]))
    assert (info.value.code, info.value.details["errmsg"]) == (code, message)  # type: ignore[index]
