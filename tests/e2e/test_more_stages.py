"""$graphLookup, $densify, $fill and $bucketAuto through pymongo: exact, hand-computed results and
MongoDB's error codes for bad specifications."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from bson import Int64
from pymongo import MongoClient
from pymongo.errors import OperationFailure

Client = MongoClient[dict[str, Any]]


def _code(coll: Any, pipeline: list[Any]) -> int | None:
    with pytest.raises(OperationFailure) as info:
        list(coll.aggregate(pipeline))
    return info.value.code


# -- $graphLookup ------------------------------------------------------------------------------------

STAFF = [
    {"_id": 1, "name": "Dev"},
    {"_id": 2, "name": "Eliot", "boss": "Dev"},
    {"_id": 3, "name": "Ron", "boss": "Eliot"},
    {"_id": 4, "name": "Andrew", "boss": "Eliot"},
    {"_id": 5, "name": "Asya", "boss": "Ron"},
    {"_id": 6, "name": "Dan", "boss": "Andrew"},
]
CHAIN = {
    "from": "staff",
    "startWith": "$boss",
    "connectFromField": "boss",
    "connectToField": "name",
    "as": "chain",
}


@pytest.fixture
def staff(client: Client) -> Any:
    client.graph.staff.insert_many(STAFF)
    return client.graph.staff


def _chain(staff: Any, **options: Any) -> dict[str, list[Any]]:
    """Each of Asya's and Dev's chains as (name, depth) pairs, by depth then name."""
    stage = {"$graphLookup": {**CHAIN, **options}}
    out = staff.aggregate([{"$match": {"name": {"$in": ["Asya", "Dev"]}}}, stage])
    return {
        d["name"]: sorted(
            ((c["name"], c.get("depth")) for c in d["chain"]), key=lambda p: (p[1] or 0, p[0])
        )
        for d in out
    }


def test_graph_lookup_walks_the_chain(staff: Any) -> None:
    assert _chain(staff, depthField="depth") == {
        "Asya": [("Ron", 0), ("Eliot", 1), ("Dev", 2)],
        "Dev": [],
    }
    got = next(
        staff.aggregate([{"$match": {"_id": 5}}, {"$graphLookup": {**CHAIN, "depthField": "d"}}])
    )
    assert all(type(c["d"]) is Int64 for c in got["chain"])


def test_graph_lookup_max_depth_and_restrict(staff: Any) -> None:
    assert _chain(staff, maxDepth=1)["Asya"] == [("Eliot", None), ("Ron", None)]
    assert _chain(staff, maxDepth=0, depthField="depth")["Asya"] == [("Ron", 0)]
    restricted = _chain(staff, restrictSearchWithMatch={"name": {"$ne": "Eliot"}})
    assert restricted["Asya"] == [("Ron", None)]


def test_graph_lookup_follows_arrays_and_stops_on_cycles(client: Client) -> None:
    coll = client.graph.airports
    coll.insert_many(
        [
            {"_id": "JFK", "to": ["BOS", "ORD"]},
            {"_id": "BOS", "to": ["JFK", "PWM"]},
            {"_id": "ORD", "to": ["JFK"]},
            {"_id": "PWM", "to": ["BOS"]},
        ]
    )
    spec = {
        "from": "airports",
        "startWith": "$to",
        "connectFromField": "to",
        "connectToField": "_id",
        "as": "reach",
        "depthField": "hops",
    }
    got = next(coll.aggregate([{"$match": {"_id": "ORD"}}, {"$graphLookup": spec}]))
    assert sorted((r["_id"], r["hops"]) for r in got["reach"]) == [
        ("BOS", 1),
        ("JFK", 0),
        ("ORD", 1),
        ("PWM", 2),
    ]


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        (5, 9),
        ({**CHAIN, "maxDepth": -1}, 40101),
        ({**CHAIN, "maxDepth": 1.5}, 40102),
        ({**CHAIN, "maxDepth": "1"}, 40100),
        ({**CHAIN, "bogus": 1}, 40104),
        ({k: v for k, v in CHAIN.items() if k != "as"}, 40105),
        ({**CHAIN, "connectToField": 1}, 40103),
        ({**CHAIN, "restrictSearchWithMatch": 1}, 40185),
    ],
)
def test_graph_lookup_errors(staff: Any, spec: Any, code: int) -> None:
    assert _code(staff, [{"$graphLookup": spec}]) == code


# -- $densify ----------------------------------------------------------------------------------------


def _strip(rows: list[Any]) -> list[Any]:
    return [
        {k: v for k, v in r.items() if k != "_id"} | ({"doc": True} if "_id" in r else {})
        for r in rows
    ]


def test_densify_full_and_explicit_bounds(client: Client) -> None:
    coll = client.gaps.readings
    coll.insert_many([{"_id": 1, "t": 4}, {"_id": 2, "t": 1}, {"_id": 3, "t": 6}, {"_id": 4}])
    full = list(
        coll.aggregate([{"$densify": {"field": "t", "range": {"step": 1, "bounds": "full"}}}])
    )
    assert _strip(full) == [
        {"doc": True},
        {"t": 1, "doc": True},
        {"t": 2},
        {"t": 3},
        {"t": 4, "doc": True},
        {"t": 5},
        {"t": 6, "doc": True},
    ]
    explicit = coll.aggregate(
        [{"$densify": {"field": "t", "range": {"step": 2, "bounds": [0, 8]}}}]
    )
    assert _strip(list(explicit)) == [
        {"doc": True},
        {"t": 0},
        {"t": 1, "doc": True},
        {"t": 2},
        {"t": 4, "doc": True},
        {"t": 6, "doc": True},
    ]


def test_densify_partitions_and_dates(client: Client) -> None:
    coll = client.gaps.parts
    coll.insert_many(
        [
            {"_id": 1, "k": "a", "t": 1},
            {"_id": 2, "k": "a", "t": 3},
            {"_id": 3, "k": "b", "t": 10},
            {"_id": 4, "k": "b", "t": 12.5},
        ]
    )
    out = coll.aggregate(
        [
            {
                "$densify": {
                    "field": "t",
                    "partitionByFields": ["k"],
                    "range": {"step": 1, "bounds": "partition"},
                }
            }
        ]
    )
    assert _strip(list(out)) == [
        {"k": "a", "t": 1, "doc": True},
        {"k": "a", "t": 2},
        {"k": "a", "t": 3, "doc": True},
        {"k": "b", "t": 10, "doc": True},
        {"k": "b", "t": 11},
        {"k": "b", "t": 12},
        {"k": "b", "t": 12.5, "doc": True},
    ]
    days = client.gaps.days
    day = datetime.datetime(2024, 3, 1)
    days.insert_many([{"_id": 1, "d": day}, {"_id": 2, "d": day + datetime.timedelta(days=3)}])
    out = days.aggregate(
        [{"$densify": {"field": "d", "range": {"step": 1, "unit": "day", "bounds": "full"}}}]
    )
    assert [r["d"] for r in out] == [day + datetime.timedelta(days=i) for i in range(4)]


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        ({"field": "t", "range": {"step": 0, "bounds": "full"}}, 5733401),
        ({"field": "t", "range": {"step": 1, "bounds": [0]}}, 5733403),
        ({"field": "t", "range": {"step": 1, "bounds": [5, 1]}}, 5733402),
        ({"field": "t", "range": {"step": 1, "bounds": "partition"}}, 5733408),
        ({"field": "t", "range": {"step": 1, "bounds": "everything"}}, 5946802),
        ({"field": "t", "range": {"step": 1.5, "unit": "day", "bounds": "full"}}, 6586400),
        ({"range": {"step": 1, "bounds": "full"}}, 40414),
        ({"field": "t", "range": {"step": 1, "bounds": "full"}, "zzz": 1}, 40415),
        ({"field": "t", "range": {"step": 1, "bounds": "full", "unit": 1}}, 14),
    ],
)
def test_densify_errors(client: Client, spec: Any, code: int) -> None:
    client.gaps.bad.insert_one({"t": 1})
    assert _code(client.gaps.bad, [{"$densify": spec}]) == code


DAY = datetime.datetime(2024, 3, 1)
SAME_TYPE = "Upper bound, lower bound, and step must all have the same type"


@pytest.mark.parametrize(
    ("range_", "code", "message"),
    [
        # 5876900: numeric bounds and the step of one BSON type (mongod's RangeStatement::parse).
        ({"step": 1, "bounds": [0, 10.5]}, 5876900, SAME_TYPE),
        ({"step": 1.0, "bounds": [0, 10]}, 5876900, SAME_TYPE),
        ({"step": 1, "bounds": [Int64(0), Int64(10)]}, 5876900, SAME_TYPE),
        ({"step": Int64(1), "bounds": [0, Int64(10)]}, 5876900, SAME_TYPE),
        # mongod's order: a unit with numeric bounds before the types of the bounds.
        (
            {"step": 1, "unit": "day", "bounds": [1, DAY]},
            5733409,
            "Numeric bounds may not have unit parameter",
        ),
    ],
)
def test_densify_numeric_bounds_checks(
    client: Client, range_: dict[str, Any], code: int, message: str
) -> None:
    client.gaps.bad.insert_one({"t": 1})
    with pytest.raises(OperationFailure) as info:
        list(client.gaps.bad.aggregate([{"$densify": {"field": "t", "range": range_}}]))
    assert (info.value.code, (info.value.details or {}).get("errmsg")) == (code, message)


@pytest.mark.parametrize(
    "range_",
    [
        {"step": Int64(2), "bounds": [Int64(0), Int64(6)]},
        {"step": 2.0, "bounds": [0.0, 6.0]},
        {"step": 2, "bounds": [0, 6]},
    ],
)
def test_densify_bounds_and_step_of_one_type(client: Client, range_: dict[str, Any]) -> None:
    client.gaps.typed.insert_one({"t": 3})
    out = client.gaps.typed.aggregate(
        [{"$densify": {"field": "t", "range": range_}}, {"$project": {"_id": 0}}]
    )
    assert [r["t"] for r in out] == [0, 2, 3, 4]


@pytest.mark.parametrize(
    ("doc", "partition"),
    [
        ({"a": [1, 2]}, "a"),  # mongod's generator: 5733307, nested inside arrays
        ({"a": 5}, "a"),  # mongod's generator: 5733308, overwrite non-object values
        ({"a": {"c": [1]}}, "a.c"),
    ],
)
def test_densify_a_field_under_a_partition_field_is_refused_at_parse(
    client: Client, doc: dict[str, Any], partition: str
) -> None:
    # mongod's generator refuses to write the field through a partition value that is an array
    # (5733307) or not an object (5733308). Those partition values are always on the field's
    # path, which mongod (and ebbdb) refuse before the stage runs (9554500): with that check the
    # generator's two can never be reached. Were 9554500 ever dropped, the generator's two
    # would be needed.
    client.gaps.under.insert_one(doc)
    spec = {
        "field": f"{partition}.b",
        "partitionByFields": [partition],
        "range": {"step": 1, "bounds": [0, 3]},
    }
    assert _code(client.gaps.under, [{"$densify": spec}]) == 9554500


def test_densify_refuses_a_string_value(client: Client) -> None:
    client.gaps.bad.insert_many([{"t": 1}, {"t": "x"}])
    spec = {"field": "t", "range": {"step": 1, "bounds": "full"}}
    assert _code(client.gaps.bad, [{"$densify": spec}]) == 5733201


# -- $fill -------------------------------------------------------------------------------------------


@pytest.fixture
def holes(client: Client) -> Any:
    coll = client.gaps.holes
    coll.insert_many(
        [
            {"_id": 5, "k": "a", "t": 5, "v": None},
            {"_id": 1, "k": "a", "t": 1, "v": 10},
            {"_id": 3, "k": "a", "t": 3},
            {"_id": 2, "k": "a", "t": 2, "v": None},
            {"_id": 4, "k": "a", "t": 4, "v": 40},
            {"_id": 6, "k": "b", "t": 1, "v": None},
            {"_id": 7, "k": "b", "t": 2, "v": 7},
        ]
    )
    return coll


def test_fill_linear_and_locf(holes: Any) -> None:
    out = holes.aggregate(
        [
            {"$set": {"w": "$v"}},
            {
                "$fill": {
                    "partitionByFields": ["k"],
                    "sortBy": {"t": 1},
                    "output": {"v": {"method": "linear"}, "w": {"method": "locf"}},
                }
            },
        ]
    )
    rows = [(r["_id"], r["v"], r["w"]) for r in out]
    assert rows == [
        (1, 10, 10),
        (2, 20.0, 10),
        (3, 30.0, 10),
        (4, 40, 40),
        (5, None, 40),
        (6, None, None),
        (7, 7, 7),
    ]


def test_fill_value_keeps_the_order(holes: Any) -> None:
    out = holes.aggregate(
        [{"$sort": {"_id": 1}}, {"$fill": {"output": {"v": {"value": {"$multiply": ["$t", 100]}}}}}]
    )
    assert [(r["_id"], r["v"]) for r in out] == [
        (1, 10),
        (2, 200),
        (3, 300),
        (4, 40),
        (5, 500),
        (6, 100),
        (7, 7),
    ]


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        ({"output": {"v": {"method": "linear"}}}, 605001),
        ({"sortBy": {"t": 1, "k": 1}, "output": {"v": {"method": "linear"}}}, 605001),
        ({"partitionBy": "$k", "partitionByFields": ["k"], "output": {"v": {"value": 1}}}, 6050204),
        ({"output": {"v": {"method": "nearest"}}}, 6050201),
        ({"output": {"v": {"value": 1, "method": "locf"}}}, 6050202),
        ({"sortBy": {"t": 1}}, 40414),
        ({"output": {"v": {"value": 1}}, "zzz": 1}, 40415),
    ],
)
def test_fill_errors(holes: Any, spec: Any, code: int) -> None:
    assert _code(holes, [{"$fill": spec}]) == code


# -- $bucketAuto -------------------------------------------------------------------------------------


@pytest.fixture
def prices(client: Client) -> Any:
    coll = client.buckets.prices
    coll.insert_many([{"_id": i, "p": i} for i in range(10, 0, -1)])
    return coll


def test_bucket_auto_even_buckets(prices: Any) -> None:
    out = prices.aggregate([{"$bucketAuto": {"groupBy": "$p", "buckets": 3}}])
    assert list(out) == [
        {"_id": {"min": 1, "max": 4}, "count": 3},
        {"_id": {"min": 4, "max": 7}, "count": 3},
        {"_id": {"min": 7, "max": 10}, "count": 4},
    ]
    out = prices.aggregate(
        [
            {
                "$bucketAuto": {
                    "groupBy": "$p",
                    "buckets": 4,
                    "output": {"total": {"$sum": "$p"}, "ids": {"$push": "$_id"}},
                }
            }
        ]
    )
    # 10 / 4 rounds to 3 a bucket; the last takes the rest.
    assert [(b["_id"], b["total"]) for b in out] == [
        ({"min": 1, "max": 4}, 6),
        ({"min": 4, "max": 7}, 15),
        ({"min": 7, "max": 10}, 24),
        ({"min": 10, "max": 10}, 10),
    ]


def test_bucket_auto_keeps_equal_values_together(client: Client) -> None:
    coll = client.buckets.ties
    coll.insert_many([{"p": p} for p in (1, 1, 1, 2, 3, 3)])
    out = coll.aggregate([{"$bucketAuto": {"groupBy": "$p", "buckets": 3}}])
    # Two a bucket: the first takes all three 1s, the second 2 and both 3s; no third is left.
    assert list(out) == [
        {"_id": {"min": 1, "max": 2}, "count": 3},
        {"_id": {"min": 2, "max": 3}, "count": 3},
    ]


def test_bucket_auto_granularity(prices: Any) -> None:
    out = prices.aggregate(
        [{"$bucketAuto": {"groupBy": "$p", "buckets": 2, "granularity": "1-2-5"}}]
    )
    assert list(out) == [
        {"_id": {"min": 0.5, "max": 10.0}, "count": 9},
        {"_id": {"min": 10.0, "max": 20.0}, "count": 1},
    ]
    out = prices.aggregate(
        [{"$bucketAuto": {"groupBy": "$p", "buckets": 2, "granularity": "POWERSOF2"}}]
    )
    assert list(out) == [
        {"_id": {"min": 0.5, "max": 8}, "count": 7},
        {"_id": {"min": 8, "max": 16}, "count": 3},
    ]
    out = prices.aggregate([{"$bucketAuto": {"groupBy": "$p", "buckets": 3, "granularity": "E6"}}])
    # 1..3 round to [0.68, 3.3); 4..6 to [3.3, 6.8); 7..10 to [6.8, 15), each series number
    # scaled to its decade in doubles as MongoDB does (33 * 0.1 is 3.3000000000000003).
    assert [(b["_id"]["min"], b["_id"]["max"], b["count"]) for b in out] == [
        (68 * 0.01, 33 * 0.1, 3),
        (33 * 0.1, 68 * 0.1, 3),
        (68 * 0.1, 15.0, 4),
    ]


@pytest.mark.parametrize(
    ("spec", "code"),
    [
        (1, 40240),
        ({"groupBy": "p", "buckets": 2}, 40239),
        ({"groupBy": "$p", "buckets": "2"}, 40241),
        ({"groupBy": "$p", "buckets": 2.5}, 40242),
        ({"groupBy": "$p", "buckets": float("nan")}, 40242),
        ({"groupBy": "$p", "buckets": float("inf")}, 40242),
        ({"groupBy": "$p", "buckets": 0}, 40243),
        ({"groupBy": "$p", "buckets": 2, "output": 1}, 40244),
        ({"groupBy": "$p", "buckets": 2, "bogus": 1}, 40245),
        ({"groupBy": "$p"}, 40246),
        ({"groupBy": "$p", "buckets": 2, "granularity": "R7"}, 40257),
        ({"groupBy": "$p", "buckets": 2, "granularity": 5}, 40261),
        ({"groupBy": "$s", "buckets": 2, "granularity": "R5"}, 40258),
    ],
)
def test_bucket_auto_errors(prices: Any, spec: Any, code: int) -> None:
    prices.update_one({"_id": 1}, {"$set": {"s": "x"}})
    assert _code(prices, [{"$bucketAuto": spec}]) == code


@pytest.mark.parametrize(
    ("buckets", "shown"), [(2.5, "2.5"), (float("nan"), "nan"), (-1e300, "-1e+300")]
)
def test_bucket_auto_buckets_not_an_int32(prices: Any, buckets: float, shown: str) -> None:
    """A non-integral, NaN or out-of-range count is refused with 40242 (NaN was InternalError)."""
    with pytest.raises(OperationFailure) as info:
        list(prices.aggregate([{"$bucketAuto": {"groupBy": "$p", "buckets": buckets}}]))
    assert info.value.code == 40242
    assert info.value.details is not None
    assert info.value.details["errmsg"] == (
        "The $bucketAuto 'buckets' field must be representable as a 32-bit integer, but found "
        + shown
    )
