"""The aggregation pipeline over a real engine: every stage, MongoDB's parse errors, push-down of a
leading $match/$sort/$skip/$limit into an index read, and TTL: expired documents appear neither in
the first read nor in what $lookup joins or $unionWith appends."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from bson import Decimal128, Int64, Regex
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.aggregate import EngineSource, parse_pipeline, run_pipeline
from ebbdb.storage.aggregate import source as pipeline_source
from ebbdb.storage.aggregate.stage import ANYWHERE, STAGES, StageRegistry
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.indexes.planner import CollScan, IndexScan
from ebbdb.storage.indexes.specs import parse_index_spec
from tests.helpers import enc, query_error

DB = "db"
T0 = 1_700_000_000_000

PEOPLE = [
    {"_id": 1, "name": "ann", "grp": "x", "n": 1, "tags": ["a", "b"], "sub": {"p": 1, "q": 2}},
    {"_id": 2, "name": "bob", "grp": "y", "n": 2, "tags": [], "sub": {"p": 3}},
    {"_id": 3, "name": "cid", "grp": "x", "n": 3, "tags": "solo"},
    {"_id": 4, "name": "dee", "grp": None, "n": 4},
    {"_id": 5, "name": "eve", "n": 5, "tags": None},
]


def load(engine: Engine, name: str, docs: list[dict[str, Any]], now_ms: int = T0) -> None:
    result = engine.insert(DB, name, [enc(d) for d in docs], now_ms=now_ms)
    assert result.inserted == len(docs), result.errors


def index(engine: Engine, name: str, *specs: dict[str, Any]) -> None:
    engine.create_indexes(DB, name, [parse_index_spec(s) for s in specs])


def agg(
    engine: Engine,
    pipeline: list[Any],
    coll: str | None = "c",
    now: int = T0,
    let: dict[str, Any] | None = None,
    source: EngineSource | None = None,
) -> list[dict[str, Any]]:
    src = source or EngineSource(engine, DB, now)
    parsed = parse_pipeline(pipeline, frozenset(let or {}))
    return list(run_pipeline(parsed, src, coll, dict(let or {})))


def ids(docs: list[dict[str, Any]]) -> list[Any]:
    return [d["_id"] for d in docs]


def parse_error(pipeline: list[Any]) -> QueryError:
    with pytest.raises(QueryError) as info:
        parse_pipeline(pipeline)
    return info.value


@pytest.fixture
def people(engine: Engine) -> Engine:
    load(engine, "c", PEOPLE)
    return engine


# -- $match, push-down -----------------------------------------------------------------------------


def test_match_and_empty_pipeline(people: Engine) -> None:
    assert ids(agg(people, [])) == [1, 2, 3, 4, 5]
    assert ids(agg(people, [{"$match": {"grp": "x"}}])) == [1, 3]
    assert ids(agg(people, [{"$match": {"n": {"$gte": 2}}}, {"$match": {"n": {"$lt": 4}}}])) == [
        2,
        3,
    ]
    # A $match after another stage runs in Python over the stage's output.
    out = agg(people, [{"$project": {"m": "$n"}}, {"$match": {"m": {"$gt": 3}}}])
    assert out == [{"_id": 4, "m": 4}, {"_id": 5, "m": 5}]


def test_missing_collection_yields_nothing(engine: Engine) -> None:
    assert agg(engine, [{"$match": {}}], coll="nope") == []
    assert agg(engine, [{"$count": "n"}], coll="nope") == []


def test_push_down_uses_an_index(people: Engine) -> None:
    index(people, "c", {"key": {"n": 1}})
    source = EngineSource(people, DB, T0)
    out = agg(people, [{"$match": {"n": {"$gte": 4}}}], source=source)
    assert ids(out) == [4, 5]
    plan = source.plans["c"]
    assert isinstance(plan, IndexScan) and plan.index.name == "n_1"
    assert source.docs_examined == 2  # only the index's candidates were read

    # A leading $sort the index provides, with $skip and $limit after it.
    source = EngineSource(people, DB, T0)
    out = agg(people, [{"$sort": {"n": -1}}, {"$skip": 1}, {"$limit": 2}], source=source)
    assert ids(out) == [4, 3]
    plan = source.plans["c"]
    assert isinstance(plan, IndexScan) and plan.provides_sort

    # A leading $limit stops the read early.
    source = EngineSource(people, DB, T0)
    assert ids(agg(people, [{"$limit": 2}, {"$project": {"n": 1}}], source=source)) == [1, 2]
    assert source.docs_examined == 2

    # A $match after the $sort is pushed down with it.
    source = EngineSource(people, DB, T0)
    out = agg(people, [{"$sort": {"n": -1}}, {"$match": {"n": {"$lt": 3}}}], source=source)
    assert ids(out) == [2, 1]
    plan = source.plans["c"]
    assert isinstance(plan, IndexScan) and plan.provides_sort and source.docs_examined == 2

    # Not pushed down behind a stage that changes documents: a collection scan.
    source = EngineSource(people, DB, T0)
    out = agg(people, [{"$addFields": {}}, {"$match": {"n": {"$gte": 4}}}], source=source)
    assert ids(out) == [4, 5]
    assert isinstance(source.plans["c"], CollScan)


SKIP_LIMIT: list[list[dict[str, Any]]] = [
    [{"$limit": 3}, {"$skip": 1}],
    [{"$skip": 1}, {"$limit": 3}],
    [{"$limit": 2}, {"$skip": 2}],
    [{"$limit": 4}, {"$limit": 2}, {"$skip": 1}, {"$limit": 5}],
    [{"$skip": 2}, {"$skip": 1}],
    [{"$sort": {"name": -1}}, {"$limit": 2}],
    [{"$sort": {"name": -1}}, {"$match": {"n": {"$lt": 5}}}, {"$sort": {"n": 1}}, {"$limit": 2}],
    [{"$sort": {"grp": 1}}, {"$match": {"n": {"$ne": 2}}}, {"$skip": 1}],
]


@pytest.mark.parametrize("tail", SKIP_LIMIT, ids=[str(i) for i in range(len(SKIP_LIMIT))])
def test_push_down_agrees_with_running_in_python(
    people: Engine, tail: list[dict[str, Any]]
) -> None:
    head: list[dict[str, Any]] = [{"$match": {"n": {"$gt": 0}}}]
    pushed = agg(people, head + tail)
    # An empty $addFields in front stops the push-down: every stage then runs in Python.
    in_python = agg(people, [{"$addFields": {}}, *head, *tail])
    assert pushed == in_python


# -- $project, $addFields / $set, $unset -------------------------------------------------------------

PROJECT: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ({"_id": 1, "a": 1, "b": 2}, {"a": 1}, {"_id": 1, "a": 1}),
    ({"_id": 1, "a": 1, "b": 2}, {"a": 1, "_id": 0}, {"a": 1}),
    ({"_id": 1, "a": 1, "b": 2}, {"a": 0}, {"_id": 1, "b": 2}),
    ({"_id": 1, "a": 1, "b": 2}, {"_id": 0}, {"a": 1, "b": 2}),
    ({"_id": 1, "a": 1, "b": 2}, {"_id": 1}, {"_id": 1}),
    ({"_id": 1, "b": 2, "a": 1}, {"a": True, "b": 1.0}, {"_id": 1, "b": 2, "a": 1}),
    ({"_id": 1, "a": {"x": 1, "y": 2}}, {"a.x": 1}, {"_id": 1, "a": {"x": 1}}),
    ({"_id": 1, "a": {"x": 1, "y": 2}}, {"a": {"y": 1}}, {"_id": 1, "a": {"y": 2}}),
    ({"_id": 1, "a": {"x": 1, "y": 2}}, {"a.x": 0}, {"_id": 1, "a": {"y": 2}}),
    # Inclusion through an array keeps its documents' fields and drops its scalars.
    (
        {"_id": 1, "a": [{"x": 1, "y": 2}, 5, [{"x": 3}]]},
        {"a.x": 1},
        {"_id": 1, "a": [{"x": 1}, [{"x": 3}]]},
    ),
    ({"_id": 1, "a": [{"x": 1, "y": 2}, 5]}, {"a.x": 0}, {"_id": 1, "a": [{"y": 2}, 5]}),
    ({"_id": 1, "a": 5}, {"a.x": 1}, {"_id": 1}),
    # Computed fields: field paths, literals (strings, null), and objects of expressions; they come
    # after the included fields.
    ({"_id": 1, "a": 1, "b": 2}, {"c": "$a", "b": 1}, {"_id": 1, "b": 2, "c": 1}),
    ({"_id": 1, "a": 1}, {"s": "text", "z": None}, {"_id": 1, "s": "text", "z": None}),
    (
        {"_id": 1, "a": 1},
        {"o": {"x": "$a", "y": {"$literal": "$a"}}},
        {"_id": 1, "o": {"x": 1, "y": "$a"}},
    ),
    ({"_id": 1, "a": 1}, {"gone": "$nope", "a": 1}, {"_id": 1, "a": 1}),
    ({"_id": 1, "a": 1}, {"_id": "$a"}, {"_id": 1}),
    ({"_id": 1, "a": 5}, {"a.b": {"$literal": 7}}, {"_id": 1, "a": {"b": 7}}),
    ({"_id": 1, "a": [{"k": 1}, 2]}, {"a.b": "$_id"}, {"_id": 1, "a": [{"b": 1}]}),
]


@pytest.mark.parametrize(
    ("doc", "spec", "want"), PROJECT, ids=[str(i) for i in range(len(PROJECT))]
)
def test_project(
    engine: Engine, doc: dict[str, Any], spec: dict[str, Any], want: dict[str, Any]
) -> None:
    load(engine, "c", [doc])
    assert agg(engine, [{"$project": spec}]) == [want]


ADD_FIELDS: list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    ({"_id": 1, "a": 1}, {"b": 2}, {"_id": 1, "a": 1, "b": 2}),
    (
        {"_id": 1, "a": 1, "b": 0},
        {"a": "$b", "b": "$a"},
        {"_id": 1, "a": 0, "b": 1},
    ),  # from the input
    ({"_id": 1, "a": {"x": 1}}, {"a.y": 2}, {"_id": 1, "a": {"x": 1, "y": 2}}),
    ({"_id": 1, "a": {"x": 1}}, {"a": {"y": 2}}, {"_id": 1, "a": {"x": 1, "y": 2}}),  # merges
    ({"_id": 1, "a": [{"x": 1}, 3]}, {"a.y": 2}, {"_id": 1, "a": [{"x": 1, "y": 2}, {"y": 2}]}),
    ({"_id": 1, "a": 1}, {"a": "$$REMOVE"}, {"_id": 1}),
    ({"_id": 1, "a": 1}, {"e": {}}, {"_id": 1, "a": 1, "e": {}}),
    ({"_id": 1}, {"t": True, "n": 0}, {"_id": 1, "t": True, "n": 0}),  # numbers are values here
]


@pytest.mark.parametrize(
    ("doc", "spec", "want"), ADD_FIELDS, ids=[str(i) for i in range(len(ADD_FIELDS))]
)
@pytest.mark.parametrize("stage", ["$addFields", "$set"])
def test_add_fields(
    engine: Engine, stage: str, doc: dict[str, Any], spec: dict[str, Any], want: dict[str, Any]
) -> None:
    load(engine, "c", [doc])
    assert agg(engine, [{stage: spec}]) == [want]


def test_unset(engine: Engine) -> None:
    load(engine, "c", [{"_id": 1, "a": 1, "b": {"c": 1, "d": 2}, "e": [{"c": 1, "f": 1}]}])
    assert agg(engine, [{"$unset": "a"}]) == [
        {"_id": 1, "b": {"c": 1, "d": 2}, "e": [{"c": 1, "f": 1}]}
    ]
    assert agg(engine, [{"$unset": ["_id", "b.c", "e.c"]}]) == [
        {"a": 1, "b": {"d": 2}, "e": [{"f": 1}]}
    ]


# -- $sort, $skip, $limit, $count, $sample ---------------------------------------------------------


def test_sort(people: Engine) -> None:
    assert ids(agg(people, [{"$sort": {"n": -1}}])) == [5, 4, 3, 2, 1]
    # Missing and null sort first; ties keep their input order.
    assert ids(agg(people, [{"$sort": {"grp": 1}}])) == [4, 5, 1, 3, 2]
    assert ids(agg(people, [{"$sort": {"grp": -1, "n": -1}}])) == [2, 3, 1, 5, 4]
    # An array sorts by its smallest element ascending; empty arrays before null and missing.
    assert ids(agg(people, [{"$addFields": {}}, {"$sort": {"tags": 1, "_id": 1}}])) == [
        2,
        4,
        5,
        1,
        3,
    ]
    assert ids(agg(people, [{"$sort": {"n": Decimal128("-1")}}, {"$limit": 1}])) == [5]


def test_skip_limit(people: Engine) -> None:
    assert ids(agg(people, [{"$skip": 3}])) == [4, 5]
    assert ids(agg(people, [{"$skip": Int64(10)}])) == []
    assert ids(agg(people, [{"$limit": 2.0}])) == [1, 2]
    assert ids(agg(people, [{"$project": {"n": 1}}, {"$skip": 1}, {"$limit": 2}])) == [2, 3]


def test_count(people: Engine) -> None:
    assert agg(people, [{"$count": "total"}]) == [{"total": 5}]
    assert agg(people, [{"$match": {"grp": "x"}}, {"$count": "xs"}]) == [{"xs": 2}]
    assert agg(people, [{"$match": {"grp": "none"}}, {"$count": "n"}]) == []


def test_sample(people: Engine) -> None:
    out = agg(people, [{"$sample": {"size": 3}}])
    assert len(out) == 3 and len(set(ids(out))) == 3 and set(ids(out)) <= {1, 2, 3, 4, 5}
    assert sorted(ids(agg(people, [{"$sample": {"size": 50}}]))) == [1, 2, 3, 4, 5]
    assert agg(people, [{"$sample": {"size": 0}}]) == []


# -- $group, $sortByCount, $bucket -------------------------------------------------------------------


def test_group_keys(engine: Engine) -> None:
    load(
        engine,
        "c",
        [
            {"_id": 1, "k": 1},
            {"_id": 2, "k": 1.0},
            {"_id": 3, "k": Int64(1)},
            {"_id": 4, "k": None},
            {"_id": 5},
            {"_id": 6, "k": "1"},
            {"_id": 7, "k": {"a": 1, "b": 2}},
            {"_id": 8, "k": {"a": 1.0, "b": 2}},
            {"_id": 9, "k": {"b": 2, "a": 1}},
            {"_id": 10, "k": [1, 2]},
            {"_id": 11, "k": True},
        ],
    )
    out = agg(engine, [{"$group": {"_id": "$k"}}])
    # Numbers group by value, missing with null, documents by ordered fields; first value reported.
    assert [d["_id"] for d in out] == [
        1,
        None,
        "1",
        {"a": 1, "b": 2},
        {"b": 2, "a": 1},
        [1, 2],
        True,
    ]
    assert agg(engine, [{"$match": {"_id": {"$gt": 100}}}, {"$group": {"_id": None}}]) == []


def test_group_object_id_and_accumulators(people: Engine) -> None:
    out = agg(
        people,
        [
            {"$group": {"_id": {"g": "$grp"}, "total": {"$sum": "$n"}, "count": {"$sum": 1}}},
            {"$sort": {"total": 1}},
        ],
    )
    # {g: "$grp"} leaves out a missing grp, so _id 5 has a group of its own; the stable sort
    # keeps x (seen first) before null.
    assert out == [
        {"_id": {"g": "y"}, "total": 2, "count": 1},
        {"_id": {"g": "x"}, "total": 4, "count": 2},
        {"_id": {"g": None}, "total": 4, "count": 1},
        {"_id": {}, "total": 5, "count": 1},
    ]
    assert agg(people, [{"$group": {"_id": None, "s": {"$sum": {"$add": ["$n", 1]}}}}]) == [
        {"_id": None, "s": 20}
    ]


def test_sort_by_count(people: Engine) -> None:
    # Missing groups with null; ties keep the order groups first appeared in.
    assert agg(people, [{"$sortByCount": "$grp"}]) == [
        {"_id": "x", "count": 2},
        {"_id": None, "count": 2},
        {"_id": "y", "count": 1},
    ]
    assert agg(people, [{"$sortByCount": {"$gt": ["$n", 3]}}]) == [
        {"_id": False, "count": 3},
        {"_id": True, "count": 2},
    ]


def test_bucket(people: Engine) -> None:
    out = agg(people, [{"$bucket": {"groupBy": "$n", "boundaries": [0, 2, 4], "default": "other"}}])
    assert out == [
        {"_id": 0, "count": 1},
        {"_id": 2, "count": 2},
        {"_id": "other", "count": 2},
    ]
    out = agg(
        people,
        [
            {
                "$bucket": {
                    "groupBy": "$n",
                    "boundaries": [1, 3, 6],
                    "output": {"total": {"$sum": "$n"}},
                }
            }
        ],
    )
    assert out == [{"_id": 1, "total": 3}, {"_id": 3, "total": 12}]
    with pytest.raises(QueryError) as info:
        agg(people, [{"$bucket": {"groupBy": "$n", "boundaries": [0, 2]}}])
    assert info.value.code_name == "Location40066"


# -- $unwind -----------------------------------------------------------------------------------------

UNWIND: list[tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]] = [
    ({"_id": 0, "a": [1, 2]}, {"path": "$a"}, [{"_id": 0, "a": 1}, {"_id": 0, "a": 2}]),
    (
        {"_id": 0, "a": [1, 2]},
        {"path": "$a", "includeArrayIndex": "i"},
        [{"_id": 0, "a": 1, "i": Int64(0)}, {"_id": 0, "a": 2, "i": Int64(1)}],
    ),
    ({"_id": 0}, {"path": "$a"}, []),
    ({"_id": 0}, {"path": "$a", "preserveNullAndEmptyArrays": True}, [{"_id": 0}]),
    (
        {"_id": 0},
        {"path": "$a", "preserveNullAndEmptyArrays": True, "includeArrayIndex": "a"},
        [{"_id": 0, "a": None}],
    ),
    ({"_id": 0, "a": None}, {"path": "$a"}, []),
    (
        {"_id": 0, "a": None},
        {"path": "$a", "preserveNullAndEmptyArrays": True, "includeArrayIndex": "i"},
        [{"_id": 0, "a": None, "i": None}],
    ),
    ({"_id": 0, "a": []}, {"path": "$a"}, []),
    (
        {"_id": 0, "a": [], "b": 1},
        {"path": "$a", "preserveNullAndEmptyArrays": True},
        [{"_id": 0, "b": 1}],
    ),
    ({"_id": 0, "a": 5}, {"path": "$a"}, [{"_id": 0, "a": 5}]),
    ({"_id": 0, "a": 5}, {"path": "$a", "includeArrayIndex": "i"}, [{"_id": 0, "a": 5, "i": None}]),
    (
        {"_id": 0, "x": {"a": [{"b": 1}, {"b": 2}]}},
        {"path": "$x.a"},
        [{"_id": 0, "x": {"a": {"b": 1}}}, {"_id": 0, "x": {"a": {"b": 2}}}],
    ),
    # A path through an array is not followed.
    ({"_id": 0, "x": [{"a": [1, 2]}]}, {"path": "$x.a"}, []),
]


@pytest.mark.parametrize(("doc", "spec", "want"), UNWIND, ids=[str(i) for i in range(len(UNWIND))])
def test_unwind(
    engine: Engine, doc: dict[str, Any], spec: dict[str, Any], want: list[dict[str, Any]]
) -> None:
    load(engine, "c", [doc])
    assert agg(engine, [{"$unwind": spec}]) == want
    if set(spec) == {"path"}:
        assert agg(engine, [{"$unwind": spec["path"]}]) == want


def test_unwind_then_group(people: Engine) -> None:
    out = agg(people, [{"$unwind": "$tags"}, {"$project": {"tags": 1}}])
    assert out == [{"_id": 1, "tags": "a"}, {"_id": 1, "tags": "b"}, {"_id": 3, "tags": "solo"}]


# -- $lookup -----------------------------------------------------------------------------------------

ORDERS = [
    {"_id": 1, "item": "pen", "qty": 2},
    {"_id": 2, "item": ["ink", "pad"], "qty": 1},
    {"_id": 3, "qty": 7},  # no item: joins foreign documents whose sku is null or missing
    {"_id": 4, "item": "nib", "qty": 3},
    {"_id": 5, "item": Regex("^p"), "qty": 1},
]
ITEMS = [
    {"_id": 10, "sku": "pen", "kind": "a"},
    {"_id": 11, "sku": "ink", "kind": "b"},
    {"_id": 12, "sku": ["pad", "pen"], "kind": "a"},
    {"_id": 13, "kind": "none"},
    {"_id": 14, "sku": None, "kind": "null"},
    {"_id": 15, "sku": Regex("^p"), "kind": "re"},
]


@pytest.fixture
def shop(engine: Engine) -> Engine:
    load(engine, "orders", ORDERS)
    load(engine, "items", ITEMS)
    return engine


def joined(out: list[dict[str, Any]], field: str = "j") -> dict[Any, list[Any]]:
    return {d["_id"]: [x["_id"] for x in d[field]] for d in out}


def test_lookup_equality(shop: Engine) -> None:
    stage = {"$lookup": {"from": "items", "localField": "item", "foreignField": "sku", "as": "j"}}
    out = agg(shop, [stage], coll="orders")
    assert joined(out) == {
        1: [10, 12],  # a foreign array matches an element
        2: [11, 12],  # a local array joins on each element
        3: [13, 14],  # missing joins as null
        4: [],
        5: [15],  # a regex joins only an equal regex
    }
    assert out[0]["qty"] == 2 and out[0]["j"][0] == ITEMS[0]
    stage["$lookup"]["from"] = "nope"
    assert joined(agg(shop, [stage], coll="orders")) == {i: [] for i in range(1, 6)}


def test_lookup_equality_uses_an_index_and_dotted_as(shop: Engine) -> None:
    index(shop, "items", {"key": {"sku": 1}})
    source = EngineSource(shop, DB, T0)
    stage = {"$lookup": {"from": "items", "localField": "item", "foreignField": "sku", "as": "x.j"}}
    out = agg(shop, [{"$match": {"_id": 1}}, stage], coll="orders", source=source)
    assert [x["_id"] for x in out[0]["x"]["j"]] == [10, 12]
    assert isinstance(source.plans["items"], IndexScan)


def test_lookup_let_and_pipeline_without_expr(shop: Engine) -> None:
    stage = {
        "$lookup": {
            "from": "items",
            "let": {"q": "$qty"},
            "pipeline": [{"$match": {"kind": "a"}}, {"$project": {"_id": 1, "q": "$$q"}}],
            "as": "j",
        }
    }
    out = agg(shop, [{"$match": {"_id": {"$lte": 2}}}, stage], coll="orders")
    assert [d["j"] for d in out] == [
        [{"_id": 10, "q": 2}, {"_id": 12, "q": 2}],
        [{"_id": 10, "q": 1}, {"_id": 12, "q": 1}],
    ]


def test_lookup_let_and_expr(shop: Engine) -> None:
    stage = {
        "$lookup": {
            "from": "items",
            "let": {"it": "$item"},
            "pipeline": [{"$match": {"$expr": {"$eq": ["$sku", "$$it"]}}}],
            "as": "j",
        }
    }
    out = agg(shop, [stage], coll="orders")
    # $expr's $eq compares whole values: no array element matching, and a missing `let` value
    # equals only a missing sku (not null).
    assert joined(out) == {1: [10], 2: [], 3: [13], 4: [], 5: [15]}

    # The equality with a value the variable fixes narrows the foreign read through the index.
    index(shop, "items", {"key": {"sku": 1}})
    source = EngineSource(shop, DB, T0)
    out = agg(shop, [{"$match": {"_id": 1}}, stage], coll="orders", source=source)
    assert joined(out) == {1: [10]}
    assert isinstance(source.plans["items"], IndexScan)
    # Order 1, then items 10 and 12 (whose sku array holds "pen"; $expr then rejects it).
    assert source.docs_examined == 3


def test_lookup_fields_and_pipeline_combined(shop: Engine) -> None:
    stage = {
        "$lookup": {
            "from": "items",
            "localField": "item",
            "foreignField": "sku",
            "let": {"q": "$qty"},
            "pipeline": [{"$match": {"kind": "a"}}, {"$addFields": {"q": "$$q"}}],
            "as": "j",
        }
    }
    out = agg(shop, [stage], coll="orders")
    assert joined(out) == {1: [10, 12], 2: [12], 3: [], 4: [], 5: []}
    assert out[0]["j"][0]["q"] == 2


def test_lookup_collectionless_pipeline(shop: Engine) -> None:
    stage = {
        "$lookup": {
            "localField": "qty",
            "foreignField": "v",
            "pipeline": [{"$documents": [{"v": 1, "w": "one"}, {"v": 2, "w": "two"}]}],
            "as": "j",
        }
    }
    out = agg(shop, [stage, {"$project": {"w": "$j.w"}}], coll="orders")
    assert [d["w"] for d in out] == [["two"], ["one"], [], [], ["one"]]


# -- $unionWith, $facet, $replaceRoot, $documents, $redact ---------------------------------------------


def test_union_with(shop: Engine) -> None:
    out = agg(shop, [{"$project": {"_id": 1}}, {"$unionWith": "items"}], coll="orders")
    assert ids(out) == [1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15]
    out = agg(
        shop,
        [
            {"$match": {"_id": 1}},
            {
                "$unionWith": {
                    "coll": "items",
                    "pipeline": [{"$match": {"kind": "a"}}, {"$project": {"kind": 1}}],
                }
            },
            {"$unionWith": {"pipeline": [{"$documents": [{"_id": "doc"}]}]}},
        ],
        coll="orders",
    )
    assert out[1:] == [{"_id": 10, "kind": "a"}, {"_id": 12, "kind": "a"}, {"_id": "doc"}]
    assert ids(agg(shop, [{"$unionWith": "nope"}], coll="orders")) == [1, 2, 3, 4, 5]


def test_facet_shares_its_input(people: Engine) -> None:
    out = agg(
        people,
        [
            {
                "$facet": {
                    "changed": [
                        {"$addFields": {"n": 0}},
                        {"$unwind": "$tags"},
                        {"$project": {"n": 1}},
                    ],
                    "plain": [{"$match": {"_id": 1}}],
                    "count": [{"$count": "n"}],
                }
            }
        ],
    )
    assert out == [
        {
            "changed": [{"_id": 1, "n": 0}, {"_id": 1, "n": 0}, {"_id": 3, "n": 0}],
            "plain": [PEOPLE[0]],
            "count": [{"n": 5}],
        }
    ]


def test_replace_root(people: Engine) -> None:
    out = agg(
        people, [{"$match": {"sub": {"$exists": True}}}, {"$replaceRoot": {"newRoot": "$sub"}}]
    )
    assert out == [{"p": 1, "q": 2}, {"p": 3}]
    out = agg(people, [{"$match": {"_id": 1}}, {"$replaceWith": {"who": "$name", "n": "$n"}}])
    assert out == [{"who": "ann", "n": 1}]
    with pytest.raises(QueryError) as info:
        agg(people, [{"$replaceRoot": {"newRoot": "$name"}}])
    assert info.value.code_name == "Location40228"
    assert info.value.message.startswith(
        "'newRoot' expression  must evaluate to an object, but resulting value was: \"ann\"."
        " Type of resulting value: 'string'."
    )
    with pytest.raises(QueryError) as info:
        agg(people, [{"$match": {"_id": 5}}, {"$replaceWith": "$sub"}])
    assert "resulting value was: MISSING. Type of resulting value: 'missing'" in info.value.message


def test_documents(engine: Engine) -> None:
    pipeline = [{"$documents": [{"a": 1}, {"a": 2}, {"a": 3}]}, {"$match": {"a": {"$gte": 2}}}]
    assert agg(engine, pipeline, coll=None) == [{"a": 2}, {"a": 3}]
    assert agg(engine, [{"$documents": "$$rows"}], coll=None, let={"rows": [{"x": 1}]}) == [
        {"x": 1}
    ]
    with pytest.raises(QueryError) as info:
        agg(engine, [{"$documents": 5}], coll=None)
    assert info.value.code_name == "Location5858203"


@pytest.mark.parametrize(
    ("pipeline", "coll", "message"),
    [
        ([], None, "{aggregate: 1} is not valid for an empty pipeline."),
        (
            [{"$match": {}}],
            None,
            "{aggregate: 1} is not valid for '$match'; a collection is required.",
        ),
        ([{"$documents": []}], "c", "'$documents' can only be run with {aggregate: 1}"),
    ],
)
def test_collection_and_documents_must_agree(
    engine: Engine, pipeline: list[Any], coll: str | None, message: str
) -> None:
    assert query_error(agg, engine, pipeline, coll=coll) == ("InvalidNamespace", message)


def test_redact(engine: Engine) -> None:
    load(
        engine,
        "c",
        [
            {
                "_id": 1,
                "v": "descend",
                "keep": {"v": "keep", "x": {"v": "prune"}},
                "gone": {"v": "prune"},
                "arr": [{"v": "prune"}, {"v": "descend", "y": 1}, 7],
            },
            {"_id": 2, "v": "prune"},
        ],
    )
    out = agg(engine, [{"$redact": "$v"}])
    assert out == [
        {
            "_id": 1,
            "v": "descend",
            "keep": {"v": "keep", "x": {"v": "prune"}},
            "arr": [{"v": "descend", "y": 1}, 7],
        }
    ]
    assert ids(agg(engine, [{"$redact": "$$KEEP"}])) == [1, 2]
    assert agg(engine, [{"$redact": "$$PRUNE"}]) == []
    with pytest.raises(QueryError) as info:
        agg(engine, [{"$redact": "$_id"}])
    assert info.value.code_name == "Location17053"


def test_variables_reach_stages(people: Engine) -> None:
    out = agg(
        people, [{"$match": {"_id": 1}}, {"$project": {"_id": 0, "v": "$$limit"}}], let={"limit": 3}
    )
    assert out == [{"v": 3}]
    # A leading $match with $expr runs here with the variables; its plain part is pushed down.
    index(people, "c", {"key": {"grp": 1}})
    source = EngineSource(people, DB, T0)
    pipeline = [{"$match": {"grp": "x", "$expr": {"$gte": ["$n", "$$limit"]}}}]
    assert ids(agg(people, pipeline, let={"limit": 3}, source=source)) == [3]
    assert isinstance(source.plans["c"], IndexScan) and source.docs_examined == 2


# -- TTL: expired documents never enter a pipeline -------------------------------------------------

E = 10  # expireAfterSeconds
EXPIRY = T0 + E * 1000


@pytest.fixture
def expiring(engine: Engine) -> Engine:
    """db.c and db.f each with a TTL index on t; documents 1 and 11 expire at EXPIRY, the others
    never (no date)."""
    index(engine, "c", {"key": {"t": 1}, "expireAfterSeconds": E}, {"key": {"k": 1}})
    index(engine, "f", {"key": {"t": 1}, "expireAfterSeconds": E}, {"key": {"k": 1}})
    load(
        engine,
        "c",
        [{"_id": 1, "k": 1, "t": DatetimeMS(T0)}, {"_id": 2, "k": 1}, {"_id": 3, "k": 2}],
    )
    load(
        engine,
        "f",
        [{"_id": 11, "k": 1, "t": DatetimeMS(T0)}, {"_id": 12, "k": 1}, {"_id": 13, "k": 2}],
    )
    return engine


@pytest.mark.parametrize(("now", "alive"), [(EXPIRY - 1, True), (EXPIRY, False)])
def test_ttl_hides_expired_documents_from_reads(expiring: Engine, now: int, alive: bool) -> None:
    first = [1] if alive else []
    assert ids(agg(expiring, [], now=now)) == [*first, 2, 3]
    # Through the index the push-down picks, too.
    source = EngineSource(expiring, DB, now)
    assert ids(agg(expiring, [{"$match": {"k": 1}}], source=source)) == [*first, 2]
    assert isinstance(source.plans["c"], IndexScan)
    assert agg(expiring, [{"$count": "n"}], now=now) == [{"n": 3 if alive else 2}]


@pytest.mark.parametrize(("now", "alive"), [(EXPIRY - 1, True), (EXPIRY, False)])
def test_ttl_hides_expired_documents_from_joins(expiring: Engine, now: int, alive: bool) -> None:
    foreign = [11] if alive else []
    local = [1] if alive else []
    equality = {"$lookup": {"from": "f", "localField": "k", "foreignField": "k", "as": "j"}}
    out = agg(expiring, [equality], now=now)
    assert joined(out) == {**({1: [*foreign, 12]} if alive else {}), 2: [*foreign, 12], 3: [13]}

    pipeline_form = {
        "$lookup": {
            "from": "f",
            "let": {"k": "$k"},
            "pipeline": [{"$match": {"k": {"$gte": 1}}}, {"$project": {"_id": 1}}],
            "as": "j",
        }
    }
    out = agg(expiring, [{"$match": {"_id": 2}}, pipeline_form], now=now)
    assert joined(out) == {2: [*foreign, 12, 13]}

    out = agg(expiring, [{"$unionWith": "f"}], now=now)
    assert ids(out) == [*local, 2, 3, *foreign, 12, 13]
    out = agg(
        expiring, [{"$unionWith": {"coll": "f", "pipeline": [{"$match": {"k": 1}}]}}], now=now
    )
    assert ids(out) == [*local, 2, 3, *foreign, 12]


@pytest.mark.parametrize("chunk", [1, pipeline_source.READ_CHUNK])
def test_ttl_time_moves_between_batches(
    expiring: Engine, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """A pipeline read over several batches hides what expired since the last one: the cursor moves
    `now_ms` before each batch, and documents read ahead in a chunk are checked again."""
    monkeypatch.setattr(pipeline_source, "READ_CHUNK", chunk)
    load(expiring, "c", [{"_id": 4, "t": DatetimeMS(T0)}, {"_id": 5}])
    source = EngineSource(expiring, DB, EXPIRY - 1)
    pipeline = parse_pipeline([{"$addFields": {"seen": True}}])
    results: Iterator[dict[str, Any]] = run_pipeline(pipeline, source, "c", {})
    assert [next(results)["_id"], next(results)["_id"]] == [1, 2]
    source.now_ms = EXPIRY
    assert [d["_id"] for d in results] == [3, 5]


# -- parse errors ----------------------------------------------------------------------------------

ERRORS: list[tuple[str, list[Any], str]] = [
    ("stage_not_document", [5], "TypeMismatch"),
    ("two_fields", [{"$match": {}, "$limit": 1}], "Location40323"),
    ("no_fields", [{}], "Location40323"),
    ("unknown_stage", [{"$foo": 1}], "Location40324"),
    ("unknown_plain_name", [{"match": {}}], "Location40324"),
    ("match_not_object", [{"$match": 1}], "Location15959"),
    ("limit_zero", [{"$limit": 0}], "Location15958"),
    ("limit_negative", [{"$limit": -1}], "Location5107201"),
    ("limit_string", [{"$limit": "1"}], "Location5107201"),
    ("limit_fraction", [{"$limit": 1.5}], "Location5107201"),
    ("skip_negative", [{"$skip": -1}], "Location5107200"),
    ("skip_string", [{"$skip": "a"}], "Location5107200"),
    ("skip_nan", [{"$skip": float("nan")}], "Location5107200"),
    ("sort_not_object", [{"$sort": 1}], "Location15973"),
    ("sort_empty", [{"$sort": {}}], "Location15976"),
    ("sort_bad_key", [{"$sort": {"a": "asc"}}], "Location15974"),
    ("sort_bad_direction", [{"$sort": {"a": 2}}], "Location15975"),
    ("sort_other_expression", [{"$sort": {"a": {"$add": 1}}}], "Location17312"),
    ("sort_dollar_path", [{"$sort": {"$a": 1}}], "Location16410"),
    ("group_not_object", [{"$group": 1}], "Location15947"),
    ("group_no_id", [{"$group": {"n": {"$sum": 1}}}], "Location15955"),
    ("group_not_accumulator", [{"$group": {"_id": 1, "n": 1}}], "Location40234"),
    ("group_empty_accumulator", [{"$group": {"_id": 1, "n": {}}}], "Location40234"),
    ("group_dotted", [{"$group": {"_id": 1, "a.b": {"$sum": 1}}}], "Location40235"),
    ("group_operator_name", [{"$group": {"_id": 1, "$a": {"$sum": 1}}}], "Location40236"),
    (
        "group_two_accumulators",
        [{"$group": {"_id": 1, "n": {"$sum": 1, "$max": 1}}}],
        "Location40238",
    ),
    ("group_array_argument", [{"$group": {"_id": 1, "n": {"$sum": [1, 2]}}}], "Location40237"),
    ("count_not_string", [{"$count": 1}], "Location40156"),
    ("count_empty", [{"$count": ""}], "Location40157"),
    ("count_dollar", [{"$count": "$n"}], "Location40158"),
    ("count_dot", [{"$count": "a.b"}], "Location40160"),
    ("unwind_number", [{"$unwind": 1}], "Location15981"),
    ("unwind_no_dollar", [{"$unwind": "a"}], "Location28818"),
    ("unwind_empty", [{"$unwind": ""}], "Location28812"),
    ("unwind_no_path", [{"$unwind": {}}], "Location28812"),
    ("unwind_path_not_string", [{"$unwind": {"path": 1}}], "Location28808"),
    (
        "unwind_preserve_not_bool",
        [{"$unwind": {"path": "$a", "preserveNullAndEmptyArrays": 1}}],
        "Location28809",
    ),
    ("unwind_index_empty", [{"$unwind": {"path": "$a", "includeArrayIndex": ""}}], "Location28810"),
    (
        "unwind_index_dollar",
        [{"$unwind": {"path": "$a", "includeArrayIndex": "$i"}}],
        "Location28822",
    ),
    ("unwind_unknown_option", [{"$unwind": {"path": "$a", "x": 1}}], "Location28811"),
    ("project_not_object", [{"$project": 1}], "Location15969"),
    ("project_empty", [{"$project": {}}], "Location51272"),
    ("project_exclusion_in_inclusion", [{"$project": {"a": 1, "b": 0}}], "Location31254"),
    ("project_inclusion_in_exclusion", [{"$project": {"a": 0, "b": 1}}], "Location31253"),
    ("project_expression_in_exclusion", [{"$project": {"a": 0, "b": "$x"}}], "Location31252"),
    ("project_collision", [{"$project": {"a": 1, "a.b": 1}}], "Location31249"),
    ("project_same_path", [{"$project": {"a.b": 1, "a": {"b": 1}}}], "Location31250"),
    ("project_dollar_field", [{"$project": {"$a": 1}}], "Location16410"),
    ("project_empty_sub", [{"$project": {"a": {}}}], "Location51270"),
    ("add_fields_not_object", [{"$addFields": 1}], "Location40272"),
    ("set_not_object", [{"$set": []}], "Location40272"),
    ("unset_number", [{"$unset": 1}], "Location31002"),
    ("unset_empty", [{"$unset": []}], "Location31119"),
    ("unset_mixed", [{"$unset": ["a", 1]}], "Location31120"),
    ("replace_root_not_object", [{"$replaceRoot": 1}], "Location40229"),
    ("replace_root_unknown", [{"$replaceRoot": {"newRoot": "$a", "x": 1}}], "Location40415"),
    ("replace_root_missing", [{"$replaceRoot": {}}], "Location40414"),
    ("sort_by_count_number", [{"$sortByCount": 1}], "Location40149"),
    ("sort_by_count_plain", [{"$sortByCount": "a"}], "Location40148"),
    ("sort_by_count_object", [{"$sortByCount": {"a": 1}}], "Location40147"),
    ("facet_not_object", [{"$facet": 1}], "Location40169"),
    ("facet_empty", [{"$facet": {}}], "Location40169"),
    ("facet_not_array", [{"$facet": {"a": 1}}], "Location40170"),
    ("facet_bad_element", [{"$facet": {"a": [1]}}], "Location40171"),
    ("facet_out", [{"$facet": {"a": [{"$out": "x"}]}}], "Location40600"),
    ("facet_nested", [{"$facet": {"a": [{"$facet": {"b": []}}]}}], "Location40600"),
    ("sample_not_object", [{"$sample": 1}], "Location28745"),
    ("sample_size_string", [{"$sample": {"size": "a"}}], "Location28746"),
    ("sample_negative", [{"$sample": {"size": -1}}], "Location28747"),
    ("sample_unknown", [{"$sample": {"size": 1, "x": 1}}], "Location28748"),
    ("sample_no_size", [{"$sample": {}}], "Location28749"),
    ("documents_not_first", [{"$match": {}}, {"$documents": []}], "Location40602"),
    ("out_not_last", [{"$out": "x"}, {"$match": {}}], "Location40601"),
    (
        "out_timeseries",
        [{"$match": {}}, {"$out": {"db": "d", "coll": "x", "timeseries": {}}}],
        "NotImplemented",
    ),
    (
        "merge_modes",
        [{"$merge": {"into": "x", "whenMatched": "fail", "whenNotMatched": "discard"}}],
        "Location51181",
    ),
    (
        "geo_near_not_first",
        [{"$match": {}}, {"$geoNear": {"near": [0, 0], "distanceField": "d"}}],
        "Location40603",
    ),
    # The stage parses first: a malformed $geoNear fails so wherever it stands.
    ("geo_near_no_near", [{"$match": {}}, {"$geoNear": {}}], "Location5860400"),
    ("graph_lookup", [{"$graphLookup": {}}], "Location40105"),
    ("lookup_not_object", [{"$lookup": 1}], "FailedToParse"),
    (
        "lookup_no_as",
        [{"$lookup": {"from": "f", "localField": "a", "foreignField": "b"}}],
        "FailedToParse",
    ),
    ("lookup_no_fields", [{"$lookup": {"from": "f", "as": "j"}}], "FailedToParse"),
    (
        "lookup_one_field",
        [{"$lookup": {"from": "f", "localField": "a", "as": "j"}}],
        "FailedToParse",
    ),
    (
        "lookup_one_field_with_pipeline",
        [{"$lookup": {"from": "f", "localField": "a", "pipeline": [], "as": "j"}}],
        "FailedToParse",
    ),
    (
        "lookup_let_without_pipeline",
        [{"$lookup": {"from": "f", "localField": "a", "foreignField": "b", "let": {}, "as": "j"}}],
        "FailedToParse",
    ),
    (
        "lookup_unknown",
        [{"$lookup": {"from": "f", "pipeline": [], "as": "j", "x": "y"}}],
        "FailedToParse",
    ),
    (
        "lookup_as_not_string",
        [{"$lookup": {"from": "f", "pipeline": [], "as": 1}}],
        "FailedToParse",
    ),
    (
        "lookup_from_not_string",
        [{"$lookup": {"from": 1, "pipeline": [], "as": "j"}}],
        "FailedToParse",
    ),
    (
        "lookup_no_from_no_pipeline",
        [{"$lookup": {"as": "j", "localField": "a", "foreignField": "b"}}],
        "FailedToParse",
    ),
    (
        "lookup_no_from_no_documents",
        [{"$lookup": {"as": "j", "pipeline": [{"$match": {}}]}}],
        "FailedToParse",
    ),
    (
        "lookup_pipeline_not_array",
        [{"$lookup": {"from": "f", "pipeline": {}, "as": "j"}}],
        "TypeMismatch",
    ),
    (
        "lookup_pipeline_element",
        [{"$lookup": {"from": "f", "pipeline": [1], "as": "j"}}],
        "TypeMismatch",
    ),
    (
        "lookup_out",
        [{"$lookup": {"from": "f", "pipeline": [{"$out": "x"}], "as": "j"}}],
        "Location51047",
    ),
    (
        "lookup_let_upper",
        [{"$lookup": {"from": "f", "let": {"A": 1}, "pipeline": [], "as": "j"}}],
        "Location16867",
    ),
    (
        "lookup_let_bad_char",
        [{"$lookup": {"from": "f", "let": {"a-b": 1}, "pipeline": [], "as": "j"}}],
        "Location16868",
    ),
    (
        "lookup_undefined_variable",
        [{"$lookup": {"from": "f", "pipeline": [{"$project": {"x": "$$nope"}}], "as": "j"}}],
        "Location17276",
    ),
    ("union_with_number", [{"$unionWith": 1}], "FailedToParse"),
    ("union_with_unknown", [{"$unionWith": {"coll": "f", "x": 1}}], "Location40415"),
    ("union_with_coll_type", [{"$unionWith": {"coll": 1}}], "TypeMismatch"),
    ("union_with_nothing", [{"$unionWith": {}}], "FailedToParse"),
    (
        "union_with_out",
        [{"$unionWith": {"coll": "f", "pipeline": [{"$out": "x"}]}}],
        "Location31441",
    ),
    ("bucket_not_object", [{"$bucket": 1}], "Location40201"),
    ("bucket_missing", [{"$bucket": {"groupBy": "$a"}}], "Location40198"),
    ("bucket_group_by", [{"$bucket": {"groupBy": "a", "boundaries": [0, 1]}}], "Location40202"),
    ("bucket_one_boundary", [{"$bucket": {"groupBy": "$a", "boundaries": [0]}}], "Location40192"),
    ("bucket_unsorted", [{"$bucket": {"groupBy": "$a", "boundaries": [2, 1]}}], "Location40194"),
    ("bucket_mixed", [{"$bucket": {"groupBy": "$a", "boundaries": [0, "a"]}}], "Location40193"),
    (
        "bucket_default_inside",
        [{"$bucket": {"groupBy": "$a", "boundaries": [0, 5], "default": 1}}],
        "Location40199",
    ),
    (
        "bucket_unknown",
        [{"$bucket": {"groupBy": "$a", "boundaries": [0, 5], "x": 1}}],
        "Location40197",
    ),
    (
        "bucket_output",
        [{"$bucket": {"groupBy": "$a", "boundaries": [0, 5], "output": 1}}],
        "Location40196",
    ),
    ("undefined_variable", [{"$project": {"x": "$$nope"}}], "Location17276"),
    ("match_expr_undefined_variable", [{"$match": {"$expr": "$$nope"}}], "Location17276"),
    (
        "lookup_match_expr_undefined_variable",
        [
            {
                "$lookup": {
                    "from": "f",
                    "let": {"a": 1},
                    "pipeline": [{"$match": {"$expr": "$$b"}}],
                    "as": "j",
                }
            }
        ],
        "Location17276",
    ),
]


@pytest.mark.parametrize(("tag", "pipeline", "code"), ERRORS, ids=[e[0] for e in ERRORS])
def test_parse_errors(tag: str, pipeline: list[Any], code: str) -> None:
    assert parse_error(pipeline).code_name == code


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        ([{"$foo": 1}], "Unrecognized pipeline stage name: '$foo'"),
        ([{"$limit": 0}], "the limit must be positive"),
        (
            [{"$skip": -1}],
            "invalid argument to $skip stage: Expected a non-negative number in: $skip: -1",
        ),
        ([{"$limit": 1.5}], "invalid argument to $limit stage: Expected an integer: $limit: 1.5"),
        ([{"$unwind": "a"}], "path option to $unwind stage should be prefixed with a '$': a"),
        (
            [{"$project": {"a": 1, "b": 0}}],
            "Invalid $project :: caused by :: Cannot do exclusion on field b in inclusion projection",
        ),
        ([{"$out": "x"}, {"$match": {}}], "$out can only be the final stage in the pipeline"),
        ([{"$group": {"_id": 1, "n": 1}}], "The field 'n' must be an accumulator object"),
        (
            [{"$lookup": {"from": "f", "as": "j"}}],
            "$lookup requires either 'pipeline' or both 'localField' and 'foreignField' to be specified",
        ),
        ([{"$count": ""}], "the count field must be a non-empty string"),
        (
            [{"$unionWith": {"coll": 1}}],
            "BSON field '$unionWith.coll' is the wrong type 'int', expected type 'string'",
        ),
        (
            [{"$unionWith": {"pipeline": "x"}}],
            "BSON field '$unionWith.pipeline' is the wrong type 'string', expected type 'array'",
        ),
        (
            [{"$bucket": {"groupBy": "a", "boundaries": [0, 1]}}],
            "The $bucket 'groupBy' field must be defined as a $-prefixed path or an expression, but"
            ' found: "a".',
        ),
        (
            [{"$bucket": {"groupBy": "$a", "boundaries": [0, 5], "default": "$x"}}],
            "The $bucket 'default' field must be a constant expression, but found: \"$x\".",
        ),
        (
            [{"$bucket": {"groupBy": "$a", "boundaries": [0, 5], "default": 2}}],
            "The $bucket 'default' field must be less than the lowest boundary or greater than or"
            " equal to the highest boundary.",
        ),
        (
            [{"$bucket": {"groupBy": "$a", "boundaries": [0, 5], "output": 1}}],
            "The $bucket 'output' field must be an object, but found type: int.",
        ),
        (
            [{"$bucket": {"groupBy": "$a", "boundaries": 1}}],
            "The $bucket 'boundaries' field must be an array, but found type: int.",
        ),
        (
            [{"$bucket": {"groupBy": "$a", "boundaries": [0, "$x"]}}],
            "The $bucket 'boundaries' field must be an array of constant values, but found value:"
            ' "$x".',
        ),
        (
            [{"$bucket": {"groupBy": "$a", "boundaries": [0]}}],
            "The $bucket 'boundaries' field must have at least 2 values, but found 1 value(s).",
        ),
    ],
)
def test_parse_error_messages(pipeline: list[Any], message: str) -> None:
    assert parse_error(pipeline).message == message


def test_a_stage_name_registers_once() -> None:
    """Each stage family registers its stages in the one registry; a name taken twice is refused."""
    registry = StageRegistry()
    registry.unsupported(ANYWHERE, "$x")
    with pytest.raises(ValueError, match="registered twice"):
        registry.stage("$x")(lambda spec, defined: parse_pipeline([]).stages[0])
    assert STAGES.lookup("$match") is not None
    assert STAGES.lookup("$search") is not None and STAGES.lookup("$search").parser is None
