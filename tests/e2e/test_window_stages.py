"""$setWindowFields through pymongo: each window function over whole-partition, documents and
range windows (numbers and dates with a unit), hand-computed, and MongoDB's errors for bad specs."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

Client = MongoClient[dict[str, Any]]

ROWS = [
    {"_id": 1, "g": "a", "t": 1, "v": 2},
    {"_id": 2, "g": "a", "t": 2, "v": 4},
    {"_id": 3, "g": "a", "t": 3, "v": 4},
    {"_id": 4, "g": "a", "t": 5, "v": 10},
    {"_id": 5, "g": "b", "t": 1, "v": 1},
    {"_id": 6, "g": "b", "t": 2, "v": 3},
]


@pytest.fixture
def coll(client: Client) -> Any:
    c = client.windows.series
    c.insert_many(list(reversed(ROWS)))  # out of order: the stage sorts
    return c


def _window(coll: Any, output: dict[str, Any], sort: Any = None, by: Any = "$g") -> list[Any]:
    spec: dict[str, Any] = {"output": output}
    if by is not None:
        spec["partitionBy"] = by
    spec["sortBy"] = {"t": 1} if sort is None else sort
    rows = list(coll.aggregate([{"$setWindowFields": spec}]))
    return [{k: v for k, v in r.items() if k in output or k == "_id"} for r in rows]


def _column(rows: list[Any], name: str) -> list[Any]:
    return [r[name] for r in rows]


def test_output_is_sorted_by_partition_then_sort_key(coll: Any) -> None:
    rows = _window(coll, {"n": {"$count": {}}})
    assert _column(rows, "_id") == [1, 2, 3, 4, 5, 6]
    assert _column(rows, "n") == [4, 4, 4, 4, 2, 2]


def test_whole_partition_accumulators(coll: Any) -> None:
    rows = _window(
        coll,
        {
            "sum": {"$sum": "$v"},
            "avg": {"$avg": "$v"},
            "min": {"$min": "$v"},
            "max": {"$max": "$v"},
            "first": {"$first": "$v"},
            "last": {"$last": "$v"},
            "pop": {"$stdDevPop": "$v"},
        },
    )
    a, b = rows[0], rows[4]
    assert (a["sum"], a["avg"], a["min"], a["max"], a["first"], a["last"]) == (
        20,
        5.0,
        2,
        10,
        2,
        10,
    )
    assert a["pop"] == pytest.approx(3.0)
    assert (b["sum"], b["avg"], b["min"], b["max"], b["first"], b["last"]) == (4, 2.0, 1, 3, 1, 3)
    assert b["pop"] == 1.0


def test_documents_windows(coll: Any) -> None:
    rows = _window(
        coll,
        {
            "running": {"$sum": "$v", "window": {"documents": ["unbounded", "current"]}},
            "around": {"$avg": "$v", "window": {"documents": [-1, 1]}},
            "lo": {"$min": "$v", "window": {"documents": [-1, 0]}},
            "hi": {"$max": "$v", "window": {"documents": [-1, "current"]}},
            "rest": {"$push": "$v", "window": {"documents": ["current", "unbounded"]}},
        },
    )
    assert _column(rows, "running") == [2, 6, 10, 20, 1, 4]
    assert _column(rows, "around") == [3.0, 10 / 3, 6.0, 7.0, 2.0, 2.0]
    assert _column(rows, "lo") == [2, 2, 4, 4, 1, 1]
    assert _column(rows, "hi") == [2, 4, 4, 10, 1, 3]
    assert _column(rows, "rest") == [[2, 4, 4, 10], [4, 4, 10], [4, 10], [10], [1, 3], [3]]


def test_range_windows(coll: Any) -> None:
    rows = _window(
        coll,
        {
            "n": {"$count": {}, "window": {"range": [-1, 0]}},
            "recent": {"$push": "$v", "window": {"range": [-2, "current"]}},
            "ahead": {"$sum": "$v", "window": {"range": ["current", "unbounded"]}},
            "set": {"$addToSet": "$v", "window": {"range": ["unbounded", 1.5]}},
        },
    )
    assert _column(rows, "n") == [1, 2, 2, 1, 1, 2]
    assert _column(rows, "recent") == [[2], [2, 4], [2, 4, 4], [4, 10], [1], [1, 3]]
    assert _column(rows, "ahead") == [20, 18, 14, 10, 4, 3]
    assert [sorted(s) for s in _column(rows, "set")] == [
        [2, 4],
        [2, 4],
        [2, 4],
        [2, 4, 10],
        [1, 3],
        [1, 3],
    ]


def test_date_range_with_unit(client: Client) -> None:
    coll = client.windows.days
    day = datetime.datetime(2024, 1, 1)
    coll.insert_many(
        [
            {"_id": 1, "d": day, "v": 1},
            {"_id": 2, "d": day + datetime.timedelta(days=1), "v": 2},
            {"_id": 3, "d": day + datetime.timedelta(days=3), "v": 3},
        ]
    )
    out = coll.aggregate(
        [
            {
                "$setWindowFields": {
                    "sortBy": {"d": 1},
                    "output": {
                        "s": {"$sum": "$v", "window": {"range": [-1, 0], "unit": "day"}},
                        "rate": {
                            "$derivative": {"input": "$v", "unit": "day"},
                            "window": {"documents": [-1, 0]},
                        },
                        "area": {
                            "$integral": {"input": "$v", "unit": "day"},
                            "window": {"documents": ["unbounded", "current"]},
                        },
                    },
                }
            }
        ]
    )
    rows = list(out)
    assert [r["s"] for r in rows] == [1, 3, 3]
    assert [r["rate"] for r in rows] == [None, 1.0, 0.5]
    assert [r["area"] for r in rows] == [0.0, 1.5, 6.5]


def test_shift_and_ranks(coll: Any) -> None:
    rows = _window(
        coll,
        {
            "next": {"$shift": {"output": "$v", "by": 1, "default": -1}},
            "prev": {"$shift": {"output": "$v", "by": -1}},
        },
    )
    assert _column(rows, "next") == [4, 4, 10, -1, 3, -1]
    assert _column(rows, "prev") == [None, 2, 4, 4, None, 1]
    ranks = _window(
        coll,
        {
            "rank": {"$rank": {}},
            "dense": {"$denseRank": {}},
            "number": {"$documentNumber": {}},
        },
        sort={"v": 1},
    )
    # _id 2 and 3 tie on v: either order is MongoDB's
    assert _column(ranks, "_id") in ([1, 2, 3, 4, 5, 6], [1, 3, 2, 4, 5, 6])
    assert _column(ranks, "rank") == [1, 2, 2, 4, 1, 2]
    assert _column(ranks, "dense") == [1, 2, 2, 3, 1, 2]
    assert _column(ranks, "number") == [1, 2, 3, 4, 1, 2]


def test_calculus_and_moving_average(coll: Any) -> None:
    rows = _window(
        coll,
        {
            "rate": {"$derivative": {"input": "$v"}, "window": {"documents": [-1, 0]}},
            "area": {"$integral": {"input": "$v"}, "window": {"documents": ["unbounded", 0]}},
            "ema": {"$expMovingAvg": {"input": "$v", "N": 3}},
            "ema_alpha": {"$expMovingAvg": {"input": "$v", "alpha": 0.75}},
        },
    )
    assert _column(rows, "rate")[:4] == [None, 2.0, 0.0, 3.0]
    assert _column(rows, "area")[:4] == [0.0, 3.0, 7.0, 21.0]
    assert _column(rows, "ema")[:4] == [2.0, 3.0, 3.5, 6.75]
    assert _column(rows, "ema_alpha")[4:] == [1.0, 2.5]


def test_covariance_and_std_dev(coll: Any) -> None:
    rows = _window(
        coll,
        {
            "pop": {"$covariancePop": ["$t", "$v"]},
            "samp": {"$covarianceSamp": ["$t", "$v"]},
            "sd": {"$stdDevSamp": "$v"},
        },
    )
    assert rows[0]["pop"] == 4.25
    assert rows[0]["samp"] == 17 / 3
    assert rows[0]["sd"] == pytest.approx(12**0.5)
    assert rows[4]["pop"] == 0.5 and rows[4]["samp"] == 1.0


def test_no_partition_and_no_sort(coll: Any) -> None:
    rows = list(coll.aggregate([{"$setWindowFields": {"output": {"total": {"$sum": "$v"}}}}]))
    assert {r["total"] for r in rows} == {24}
    assert len(rows) == 6


def _code(coll: Any, stage: dict[str, Any]) -> int | None:
    with pytest.raises(OperationFailure) as info:
        list(coll.aggregate([{"$setWindowFields": stage}]))
    return info.value.code


@pytest.mark.parametrize(
    ("stage", "code"),
    [
        ({"output": {"r": {"$rank": {}}}}, 5371602),
        ({"sortBy": {"t": 1, "v": 1}, "output": {"r": {"$denseRank": {}}}}, 5371602),
        (
            {"sortBy": {"t": 1}, "output": {"r": {"$rank": {}, "window": {"documents": [0, 1]}}}},
            5371601,
        ),
        ({"output": {"s": {"$sum": "$v", "window": {"documents": [-1, 0]}}}}, 5339901),
        ({"output": {"s": {"$sum": "$v", "window": {"range": [-1, 0]}}}}, 5339902),
        (
            {"sortBy": {"t": 1}, "output": {"s": {"$sum": "$v", "window": {"documents": [1, 0]}}}},
            5339900,
        ),
        ({"sortBy": {"t": 1}, "output": {"s": {"$summ": "$v"}}}, 9),
        ({"sortBy": {"t": 1}, "output": {"s": {"$derivative": {"input": "$v"}}}}, 9),
        (
            {
                "sortBy": {"t": 1},
                "output": {
                    "s": {"$shift": {"output": "$v", "by": 1}, "window": {"documents": [0, 1]}}
                },
            },
            9,
        ),
        ({"output": {"s": {"$expMovingAvg": {"input": "$v", "N": 2}}}}, 9),
        ({"sortBy": {"t": 1}, "output": {"s": {"$expMovingAvg": {"input": "$v", "alpha": 2}}}}, 9),
        ({"sortBy": {"t": 1}}, 40414),
        ({"sortBy": {"t": 1}, "output": {}, "bogus": 1}, 40415),
        ({"sortBy": 1, "output": {}}, 14),
        ({"partitionBy": [1, 2], "output": {"s": {"$sum": 1}}}, 14),
        ({"partitionBy": "$arr", "output": {"s": {"$sum": 1}}}, 14),
        ({"sortBy": {"g": 1}, "output": {"s": {"$sum": 1, "window": {"range": [-1, 0]}}}}, 5429414),
    ],
)
def test_errors(coll: Any, stage: dict[str, Any], code: int) -> None:
    coll.update_one({"_id": 1}, {"$set": {"arr": [1]}})
    assert _code(coll, stage) == code
