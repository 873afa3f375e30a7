"""The planner over a real engine: which plan a filter, sort and hint get; and, for a table of filters
over mixed-type documents (numbers of every type, strings, null, missing, arrays, nested documents)
and several index shapes, that reading through the chosen index returns exactly what a forced
collection scan returns, in a correct sort order, each document once, in any chunking."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bson
import pytest
from bson import Binary, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.execution.execute import QueryRun, QuerySpec
from ebbdb.storage.indexes.planner import CollScan, IndexScan, Plan, plan_query
from ebbdb.storage.indexes.specs import parse_index_spec
from ebbdb.storage.query.match import parse_filter
from ebbdb.storage.query.sort import parse_sort, sort_documents
from tests.helpers import ids, run_query

INF = float("inf")

# Values of `a` across BSON's types, including ones that make an index multikey.
MIXED_A: list[Any] = [
    1,
    5,
    5.0,
    Int64(5),
    Decimal128("5"),
    7,
    10,
    20,
    -3,
    2.5,
    INF,
    -INF,
    float("nan"),
    "",
    "a",
    "m",
    "x",
    "mz",
    None,
    [1, 20],
    [5, 7],
    [],
    [None],
    [[1, 2]],
    ["m", 3],
    {"b": 1},
    {"b": 5, "c": 1},
    {"c": 1},
    [{"b": 1}, {"b": 7}],
    [{"b": 3}, {"c": 1}],
    True,
    False,
    datetime.datetime(2020, 1, 1),
    ObjectId("0123456789abcdef01234567"),
    Binary(b"xy"),
    Regex("^m"),
    MinKey(),
    MaxKey(),
]
# Scalars only: no index on them becomes multikey, so indexes can deliver sorts.
SCALAR_A: list[Any] = [
    v for v in MIXED_A if not isinstance(v, (list, Regex)) and not (isinstance(v, float) and v != v)
]

INDEX_SETS: dict[str, list[dict[str, Any]]] = {
    "asc": [{"key": {"a": 1}}],
    "desc": [{"key": {"a": -1}}],
    "a_b": [{"key": {"a": 1, "b": 1}}],
    "a_desc_b": [{"key": {"a": -1, "b": 1}}],
    "b_a": [{"key": {"b": 1, "a": -1}}],
    "dotted": [{"key": {"a.b": 1}}, {"key": {"a.c": -1}}],
    "sparse": [{"key": {"a": 1}, "sparse": True}],
    "several": [{"key": {"a": 1}}, {"key": {"b": -1}}, {"key": {"a": -1, "b": -1}}],
}


def make_docs(values: list[Any]) -> list[dict[str, Any]]:
    docs = []
    for i, a in enumerate(values):
        doc: dict[str, Any] = {"_id": i, "a": a}
        # b: small ints, with gaps of other types and missing.
        if i % 7 == 3:
            doc["b"] = "s"
        elif i % 7 != 5:
            doc["b"] = i % 3
        docs.append(doc)
    docs.append({"_id": "missing-a", "b": 1})
    docs.append({"_id": "missing-both"})
    return docs


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    eng = Engine.open(str(tmp_path_factory.mktemp("planner") / "data"))
    for data, values in (("mixed", MIXED_A), ("scalar", SCALAR_A)):
        docs = [bson.encode(d) for d in make_docs(values)]
        for name, specs in INDEX_SETS.items():
            coll = f"{data}_{name}"
            # Index half before the inserts and half after: builds and upkeep both count.
            assert eng.insert("db", coll, docs[::2]).inserted == len(docs[::2])
            eng.create_indexes("db", coll, [parse_index_spec(s) for s in specs])
            assert eng.insert("db", coll, docs[1::2]).inserted == len(docs[1::2])
    try:
        yield eng
    finally:
        eng.close()


#: Collection-scan results by (data set, filter, sort): every collection of a data set holds the
#: same documents in the same record order, whatever its indexes.
_NATURAL: dict[str, list[Any]] = {}


def natural_ids(
    engine: Engine, coll: str, flt: dict[str, Any], sort: dict[str, Any] | None
) -> list[Any]:
    key = repr((coll.split("_")[0], flt, sort))
    if key not in _NATURAL:
        natural, run = run_query(engine, coll, flt, sort, hint={"$natural": 1})
        assert isinstance(run.plan, CollScan)
        _NATURAL[key] = ids(natural)
    return _NATURAL[key]


def assert_same_result(
    engine: Engine, coll: str, flt: dict[str, Any], sort: dict[str, Any] | None
) -> Plan:
    got, run = run_query(engine, coll, flt, sort)
    got_ids = ids(got)
    natural_ids_ = natural_ids(engine, coll, flt, sort)
    assert len(got_ids) == len(set(map(repr, got_ids))), f"a document came twice: {got_ids}"
    assert sorted(map(repr, got_ids)) == sorted(map(repr, natural_ids_))
    if sort:
        spec = parse_sort(sort)
        assert spec is not None
        # A correctly sorted list is a fixed point of a stable sort.
        assert ids(sort_documents([(d, d) for d in got], spec)) == got_ids
    return run.plan


FILTERS: list[dict[str, Any]] = [
    {},
    {"a": 5},
    {"a": 5.0},
    {"a": Decimal128("5")},
    {"a": Int64(20)},
    {"a": "m"},
    {"a": ""},
    {"a": None},
    {"a": {"$eq": None}},
    {"a": {"$in": [1, "x", None]}},
    {"a": {"$in": []}},
    {"a": {"$gt": 5}},
    {"a": {"$gte": 5}},
    {"a": {"$lt": 5}},
    {"a": {"$lte": 5}},
    {"a": {"$gt": 5, "$lt": 10}},
    {"a": {"$gte": 1, "$lte": 7}},
    {"a": {"$gt": 6, "$lt": 6}},
    {"a": {"$gt": "a"}},
    {"a": {"$gte": "", "$lt": "n"}},
    {"a": {"$gt": 1, "$lt": "z"}},
    {"a": {"$lt": INF}},
    {"a": {"$gt": -INF}},
    {"a": {"$lte": INF}},
    {"a": {"$gte": datetime.datetime(2000, 1, 1)}},
    {"a": {"$gt": False}},
    {"a": {"$lt": MaxKey()}},
    {"a": {"$gt": MinKey()}},
    {"a": MinKey()},
    {"a": True},
    {"a": {"b": 1}},
    {"a": {"b": 5, "c": 1}},
    {"a": {"$eq": {"c": 1}}},
    {"a.b": 1},
    {"a.b": 7},
    {"a.b": {"$gt": 2}},
    {"a.b": None},
    {"a.c": 1},
    {"a": [1, 20]},
    {"a": []},
    {"a": {"$in": [[1, 20], 7]}},
    {"a": {"$ne": 5}},
    {"a": {"$exists": False}},
    {"a": {"$exists": True}},
    {"a": {"$elemMatch": {"$gt": 5, "$lt": 10}}},
    {"a": {"$all": [5, 7]}},
    {"a": {"$size": 2}},
    {"a": float("nan")},
    {"a": {"$gte": float("nan")}},
    {"a": Regex("^m")},
    {"a": {"$in": [Regex("^x"), 5]}},
    {"a": {"$type": "string"}},
    {"a": {"$eq": 5, "$in": [5, 7]}},
    {"a": {"$in": [5, 7], "$gt": 6}},
    {"a": 5, "b": 1},
    {"a": 5, "b": {"$gte": 1}},
    {"a": {"$in": [5, 7, 20]}, "b": {"$gt": 0}},
    {"a": {"$gt": 0}, "b": {"$lt": 2}},
    {"b": 1},
    {"b": {"$gt": 0}},
    {"b": None},
    {"$and": [{"a": {"$gt": 1}}, {"a": {"$lt": 9}}]},
    {"$and": [{"a": 5}, {"a": Int64(5)}]},
    {"$or": [{"a": 5}, {"b": 2}]},
    {"$nor": [{"a": {"$gt": 4}}]},
]
SORTS: list[dict[str, Any] | None] = [
    None,
    {"a": 1},
    {"a": -1},
    {"a": 1, "b": 1},
    {"a": -1, "b": -1},
    {"a": 1, "b": -1},
    {"b": 1, "a": -1},
    {"a.b": 1},
]


@pytest.mark.parametrize("data", ["mixed", "scalar"])
@pytest.mark.parametrize("indexes", list(INDEX_SETS))
@pytest.mark.parametrize("flt", FILTERS, ids=[repr(f) for f in FILTERS])
def test_index_results_equal_a_collection_scan(
    engine: Engine, data: str, indexes: str, flt: dict[str, Any]
) -> None:
    for sort in SORTS:
        assert_same_result(engine, f"{data}_{indexes}", flt, sort)


def test_the_table_exercises_index_scans_and_index_sorts(engine: Engine) -> None:
    """Guard against the equivalence table silently running only collection scans."""
    scans = sorts = 0
    for coll in ("scalar_asc", "scalar_a_b", "mixed_desc", "mixed_dotted"):
        for flt in FILTERS:
            for sort in SORTS:
                info = engine.collection("db", coll)
                assert info is not None
                plan = plan_query(info, parse_filter(flt), parse_sort(sort))
                if isinstance(plan, IndexScan) and plan.index.name != "_id_":
                    scans += 1
                    sorts += plan.provides_sort
    assert scans > 100
    assert sorts > 20


@pytest.mark.parametrize("coll", ["mixed_asc", "mixed_a_b", "mixed_dotted", "scalar_a_desc_b"])
@pytest.mark.parametrize(
    ("flt", "sort"),
    [
        ({"a": {"$gte": 1}}, None),
        ({"a": {"$in": [5, 7, "m", None]}}, None),
        ({"a.b": {"$gt": 0}}, None),
        ({}, {"a": -1}),
        ({"a": {"$lt": 100}}, {"a": -1}),
        ({"a": {"$in": [5, 7]}}, {"b": 1}),
    ],
)
@pytest.mark.parametrize(("max_docs", "budget"), [(1, 1), (2, 3), (1000, 2000)])
def test_chunked_index_scans_return_every_document_once(
    engine: Engine,
    coll: str,
    flt: dict[str, Any],
    sort: dict[str, Any] | None,
    max_docs: int,
    budget: int,
) -> None:
    whole, _ = run_query(engine, coll, flt, sort)
    chunked, _ = run_query(engine, coll, flt, sort, max_docs=max_docs, budget=budget)
    assert ids(chunked) == ids(whole)
    natural, _ = run_query(engine, coll, flt, sort, hint={"$natural": 1})
    assert sorted(map(repr, ids(chunked))) == sorted(map(repr, ids(natural)))


# -- which plan ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Engine]:
    eng = Engine.open(str(tmp_path_factory.mktemp("plans") / "data"))
    docs = [
        {"_id": i, "a": i % 10, "b": i % 7, "c": i, "d": i, "e": i, "f": i, "g": {"h": i}}
        for i in range(60)
    ]
    eng.insert("db", "c", [bson.encode(d) for d in docs])
    specs = [
        {"key": {"a": 1}},
        {"key": {"a": 1, "b": 1}},
        {"key": {"b": -1}},
        {"key": {"c": 1}, "unique": True},
        {"key": {"d": 1}, "hidden": True},
        {"key": {"e": 1}, "sparse": True},
        {"key": {"f": 1}, "partialFilterExpression": {"f": {"$gt": 5}}},
        {"key": {"g.h": 1}},
    ]
    eng.create_indexes("db", "c", [parse_index_spec(s) for s in specs])
    try:
        yield eng
    finally:
        eng.close()


def describe(plan: Plan) -> str:
    if isinstance(plan, CollScan):
        return "COLLSCAN" + (" reverse" if plan.reverse else "")
    return (
        f"IXSCAN {plan.index.name}"
        + (" reverse" if plan.reverse else "")
        + (" sorted" if plan.provides_sort else "")
    )


def plan_for(engine: Engine, flt: dict[str, Any], sort: Any = None, hint: Any = None) -> Plan:
    info = engine.collection("db", "c")
    assert info is not None
    return plan_query(info, parse_filter(flt), parse_sort(sort), hint)


@pytest.mark.parametrize(
    ("flt", "sort", "hint", "expected"),
    [
        ({}, None, None, "COLLSCAN"),
        ({"z": 1}, None, None, "COLLSCAN"),
        ({"a": 5}, None, None, "IXSCAN a_1"),
        ({"a": {"$eq": 5}}, None, None, "IXSCAN a_1"),
        ({"a": {"$gt": 5}}, None, None, "IXSCAN a_1"),
        ({"a": {"$gte": 5}}, None, None, "IXSCAN a_1"),
        ({"a": {"$lt": 5}}, None, None, "IXSCAN a_1"),
        ({"a": {"$lte": 5}}, None, None, "IXSCAN a_1"),
        ({"a": {"$in": [1, 2]}}, None, None, "IXSCAN a_1"),
        ({"a": {"$ne": 5}}, None, None, "COLLSCAN"),
        ({"a": {"$exists": True}}, None, None, "COLLSCAN"),
        ({"a": 5, "b": 1}, None, None, "IXSCAN a_1_b_1"),
        ({"a": 5, "b": {"$gt": 1}}, None, None, "IXSCAN a_1_b_1"),
        ({"$and": [{"a": 5}, {"b": 1}]}, None, None, "IXSCAN a_1_b_1"),
        ({"b": 3}, None, None, "IXSCAN b_-1"),
        ({"b": {"$gt": 3}}, None, None, "IXSCAN b_-1"),
        ({"c": 5}, None, None, "IXSCAN c_1"),
        ({"c": 5, "a": 5, "b": 5}, None, None, "IXSCAN c_1"),
        ({"g.h": 3}, None, None, "IXSCAN g.h_1"),
        ({"_id": 3}, None, None, "IXSCAN _id_"),
        # Hidden indexes are invisible to the planner.
        ({"d": 5}, None, None, "COLLSCAN"),
        ({}, {"d": 1}, None, "COLLSCAN"),
        # Sparse indexes have no entries for missing fields: not for null, not for a bare sort.
        ({"e": 5}, None, None, "IXSCAN e_1"),
        ({"e": None}, None, None, "COLLSCAN"),
        ({"e": {"$in": [1, None]}}, None, None, "COLLSCAN"),
        ({}, {"e": 1}, None, "COLLSCAN"),
        # A partial index only when the filter implies its filter.
        ({"f": {"$gt": 5}}, None, None, "IXSCAN f_1"),
        ({"f": 3}, None, None, "COLLSCAN"),
        ({}, {"f": 1}, None, "COLLSCAN"),
        # Sorts an index delivers.
        ({}, {"a": 1}, None, "IXSCAN a_1 sorted"),
        ({}, {"a": -1}, None, "IXSCAN a_1 reverse sorted"),
        ({}, {"a": 1, "b": 1}, None, "IXSCAN a_1_b_1 sorted"),
        ({}, {"a": -1, "b": -1}, None, "IXSCAN a_1_b_1 reverse sorted"),
        ({}, {"a": 1, "b": -1}, None, "COLLSCAN"),
        ({}, {"b": 1}, None, "IXSCAN b_-1 reverse sorted"),
        ({"a": {"$gt": 3}}, {"a": -1}, None, "IXSCAN a_1 reverse sorted"),
        ({"a": 5}, {"b": -1}, None, "IXSCAN a_1_b_1 reverse sorted"),
        # Several point prefixes: entries come grouped by `a`, so `b` is sorted in memory.
        ({"a": {"$in": [1, 2]}, "b": {"$gt": 0}}, {"b": 1}, None, "IXSCAN a_1_b_1"),
        ({}, {"c": 1}, None, "IXSCAN c_1 sorted"),
        ({}, {"$natural": -1}, None, "COLLSCAN reverse"),
        ({"a": 5}, {"$natural": 1}, None, "COLLSCAN"),
        # Hints by name and by key pattern.
        ({"b": 1}, None, "a_1", "IXSCAN a_1"),
        ({"a": 5}, None, {"a": 1, "b": 1}, "IXSCAN a_1_b_1"),
        ({"a": 5}, None, {"a": 1.0}, "IXSCAN a_1"),
        ({"c": 5}, None, {"$natural": 1}, "COLLSCAN"),
        ({"c": 5}, None, {"$natural": -1}, "COLLSCAN reverse"),
        ({}, {"a": 1}, "a_1", "IXSCAN a_1 sorted"),
        ({"e": None}, None, "e_1", "IXSCAN e_1"),
    ],
)
def test_plan_choice(
    planned: Engine, flt: dict[str, Any], sort: Any, hint: Any, expected: str
) -> None:
    assert describe(plan_for(planned, flt, sort, hint)) == expected


@pytest.mark.parametrize("hint", ["d_1", "nope", {"z": 1}, {"a": -1}, {"d": 1}, {"a": 1, "c": 1}])
def test_hints_naming_no_usable_index_are_bad_values(planned: Engine, hint: Any) -> None:
    with pytest.raises(QueryError) as info:
        plan_for(planned, {"a": 1}, None, hint)
    assert info.value.code_name == "BadValue"


@pytest.mark.parametrize(
    ("flt", "sort", "hint", "expected"),
    [
        ({"a": 5}, None, None, [5, 15, 25, 35, 45, 55]),
        ({"a": 5, "b": {"$gt": 2}}, None, None, [5, 25, 45, 55]),
        ({"a": 5}, {"c": -1}, None, [55, 45, 35, 25, 15, 5]),
        ({"c": {"$gt": 55}}, None, None, [56, 57, 58, 59]),
        ({"c": {"$gt": 55}}, {"c": -1}, None, [59, 58, 57, 56]),
        ({"g.h": {"$in": [3, 1, 2]}}, None, None, [1, 2, 3]),
        ({"e": None}, None, "e_1", []),
        ({"f": {"$gt": 57}}, None, None, [58, 59]),
        ({"d": {"$lt": 2}}, None, None, [0, 1]),
    ],
)
def test_results_through_chosen_plans(
    planned: Engine, flt: dict[str, Any], sort: Any, hint: Any, expected: list[int]
) -> None:
    docs, _ = run_query(planned, "c", flt, sort, hint)
    got = ids(docs)
    assert (got if sort else sorted(got)) == expected


def test_point_lookups_examine_only_matching_entries(planned: Engine) -> None:
    docs, run = run_query(planned, "c", {"a": 5})
    assert len(docs) == 6
    assert run.keys_examined == 6
    assert run.docs_examined == 6
    _, coll = run_query(planned, "c", {"a": 5}, hint={"$natural": 1})
    assert coll.keys_examined == 0
    assert coll.docs_examined == 60


def test_range_scans_examine_only_entries_in_range(planned: Engine) -> None:
    docs, run = run_query(planned, "c", {"c": {"$gte": 10, "$lt": 20}})
    assert ids(docs) == list(range(10, 20))
    assert run.keys_examined <= 11
    assert run.docs_examined == 10


def test_explain_bounds_are_described(planned: Engine) -> None:
    plan = plan_for(planned, {"a": 5, "b": {"$gt": 1}})
    assert isinstance(plan, IndexScan)
    assert set(plan.bounds) == {"a", "b"}
    plan = plan_for(planned, {}, {"a": 1})
    assert isinstance(plan, IndexScan)
    assert plan.bounds == {"a": ["[MinKey, MaxKey]"]}


# -- multikey --------------------------------------------------------------------------------------


@pytest.fixture
def multikey(tmp_path: Path) -> Iterator[Engine]:
    eng = Engine.open(str(tmp_path / "data"))
    eng.create_indexes("db", "c", [parse_index_spec({"key": {"a": 1}})])
    eng.insert(
        "db",
        "c",
        [
            bson.encode(d)
            for d in [
                {"_id": 1, "a": [1, 20]},
                {"_id": 2, "a": 7},
                {"_id": 3, "a": [6, 8, 7]},
                {"_id": 4, "a": [30, 40]},
                {"_id": 5, "a": []},
                {"_id": 6},
            ]
        ],
    )
    try:
        yield eng
    finally:
        eng.close()


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        # No single element lies in (5, 10), yet 1 < 10 and 20 > 5: MongoDB matches it.
        ({"a": {"$gt": 5, "$lt": 10}}, [1, 2, 3]),
        # $elemMatch wants one element in range, and only arrays have elements.
        ({"a": {"$elemMatch": {"$gt": 5, "$lt": 10}}}, [3]),
        ({"a": {"$gte": 7, "$lte": 7}}, [1, 2, 3]),
        ({"a": 7}, [2, 3]),
        ({"a": {"$in": [7, 8, 20]}}, [1, 2, 3]),
        ({"a": {"$gt": 25}}, [4]),
        ({"a": {"$lt": 2}}, [1]),
        ({"a": None}, [6]),
        ({"a": []}, [5]),
        ({"a": 7, "$and": [{"a": 8}]}, [3]),
    ],
)
def test_multikey_ranges_and_points(
    multikey: Engine, flt: dict[str, Any], expected: list[int]
) -> None:
    docs, run = run_query(multikey, "c", flt)
    assert sorted(ids(docs)) == expected
    natural, _ = run_query(multikey, "c", flt, hint={"$natural": 1})
    assert sorted(ids(natural)) == expected


def test_multikey_index_does_not_deliver_sorts(multikey: Engine) -> None:
    info = multikey.collection("db", "c")
    assert info is not None
    assert info.index_named("a_1").multikey  # type: ignore[union-attr]
    plan = plan_query(info, parse_filter({"a": {"$gt": 0}}), parse_sort({"a": 1}))
    assert not (isinstance(plan, IndexScan) and plan.provides_sort)
    docs, _ = run_query(multikey, "c", {"a": {"$gt": 0}}, {"a": 1})
    assert ids(docs) == [1, 3, 2, 4]
    docs, _ = run_query(multikey, "c", {"a": {"$gt": 0}}, {"a": -1})
    assert ids(docs) == [4, 1, 3, 2]


def test_multikey_documents_come_once_across_chunks(multikey: Engine) -> None:
    docs, _ = run_query(multikey, "c", {"a": {"$gte": 0}}, max_docs=1, budget=1)
    assert sorted(ids(docs)) == [1, 2, 3, 4]


def test_arrays_of_documents_make_a_dotted_index_multikey(tmp_path: Path) -> None:
    eng = Engine.open(str(tmp_path / "data"))
    try:
        eng.create_indexes("db", "c", [parse_index_spec({"key": {"a.b": 1}})])
        eng.insert(
            "db",
            "c",
            [
                bson.encode({"_id": 1, "a": [{"b": 1}, {"b": 2}]}),
                bson.encode({"_id": 2, "a": {"b": 3}}),
            ],
        )
        info = eng.collection("db", "c")
        assert info is not None
        assert info.index_named("a.b_1").multikey  # type: ignore[union-attr]
        for flt, sort in [
            ({"a.b": {"$gt": 0}}, None),
            ({}, {"a.b": 1}),
            ({"a.b": {"$in": [1, 2]}}, None),
        ]:
            docs, _ = run_query(eng, "c", flt, sort)
            assert sorted(ids(docs)) == ([1] if "$in" in repr(flt) else [1, 2])
    finally:
        eng.close()


def test_inserts_between_chunks_of_an_index_scan(tmp_path: Path) -> None:
    eng = Engine.open(str(tmp_path / "data"))
    try:
        eng.create_indexes("db", "c", [parse_index_spec({"key": {"a": 1}})])
        eng.insert("db", "c", [bson.encode({"_id": i, "a": i * 10}) for i in range(10)])
        info = eng.collection("db", "c")
        assert info is not None
        run = QueryRun(info, QuerySpec.parse({"a": {"$gte": 0}}, None, {"a": 1}))
        assert isinstance(run.plan, IndexScan) and run.plan.provides_sort
        first = run.next_chunk(eng, 4, 1 << 20)
        # One key behind the scan position, one ahead of it.
        eng.insert(
            "db", "c", [bson.encode({"_id": 100, "a": 5}), bson.encode({"_id": 101, "a": 85})]
        )
        rest: list[bytes] = []
        while not run.exhausted:
            rest += run.next_chunk(eng, 4, 1 << 20)
        got = [bson.decode(r)["_id"] for r in first + rest]
        assert got == [0, 1, 2, 3, 4, 5, 6, 7, 8, 101, 9]
    finally:
        eng.close()
