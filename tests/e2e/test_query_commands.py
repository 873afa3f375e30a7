"""count, distinct, explain and find's hint through pymongo, checked against MongoDB 7.0's replies;
index-driven results equal forced collection scans; cursors: batch sizes and byte limits, getMore
while another client writes, unknown cursors, noCursorTimeout and idle-cursor reaping."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Iterator
from typing import Any

import bson
import pytest
from bson import Decimal128, Int64
from pymongo import DESCENDING, MongoClient
from pymongo.errors import OperationFailure

from ebbdb.server.embedded import ServerThread
from ebbdb.storage.query.sort import parse_sort, sort_documents
from tests.helpers import Recorder, ids, plan_stages

Client = MongoClient[dict[str, Any]]


def stage_names(plan: dict[str, Any]) -> list[str]:
    return [s["stage"] for s in plan_stages(plan)]


def leaf(plan: dict[str, Any]) -> dict[str, Any]:
    return plan_stages(plan)[-1]


def index_used(plan: dict[str, Any]) -> str | None:
    """The index a winning plan reads (IXSCAN, or DISTINCT_SCAN for distinct), None for COLLSCAN."""
    bottom = leaf(plan)
    if bottom["stage"] in ("IXSCAN", "DISTINCT_SCAN", "COUNT_SCAN"):
        return str(bottom["indexName"])
    assert bottom["stage"] == "COLLSCAN", plan
    return None


@pytest.fixture
def people(client: Client) -> Any:
    coll = client.q.people
    coll.insert_many(
        [
            {"_id": i, "age": 20 + i % 30, "city": ["Oslo", "Rome", "Lima"][i % 3], "n": i}
            for i in range(90)
        ]
    )
    coll.create_index("age")
    coll.create_index([("city", 1), ("age", -1)])
    return coll


# -- count -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "n"),
    [
        ({}, 90),
        ({"query": {}}, 90),
        ({"query": {"age": 25}}, 3),
        ({"query": {"age": {"$gte": 45}}}, 15),
        ({"query": {"city": "Rome"}}, 30),
        ({"query": {"city": "Rome", "age": {"$lt": 30}}}, 9),
        ({"query": {"nope": 1}}, 0),
        ({"skip": 80}, 10),
        ({"skip": 100}, 0),
        ({"limit": 7}, 7),
        ({"limit": -7}, 7),
        ({"limit": 0}, 90),
        ({"query": {"age": {"$gte": 45}}, "skip": 5, "limit": 4}, 4),
        ({"query": {"age": {"$gte": 45}}, "skip": 13, "limit": 4}, 2),
        ({"query": {"age": 25}, "hint": "age_1"}, 3),
        ({"query": {"age": 25}, "hint": {"$natural": 1}}, 3),
        ({"hint": {"city": 1, "age": -1}}, 90),
    ],
)
def test_count(people: Any, client: Client, args: dict[str, Any], n: int) -> None:
    reply = client.q.command("count", "people", **args)
    assert reply == {"n": n, "ok": 1.0}
    assert type(reply["n"]) is int


def test_count_on_a_missing_collection_is_zero(client: Client) -> None:
    assert client.q.command("count", "nope") == {"n": 0, "ok": 1.0}
    assert client.q.command("count", "nope", query={"a": 1}) == {"n": 0, "ok": 1.0}
    assert client.q.nope.estimated_document_count() == 0


def test_estimated_document_count(people: Any) -> None:
    assert people.estimated_document_count() == 90


def test_count_with_a_bad_hint(people: Any, client: Client) -> None:
    with pytest.raises(OperationFailure) as info:
        client.q.command("count", "people", query={"age": 1}, hint="nope")
    assert info.value.code == 2


# -- distinct --------------------------------------------------------------------------------------


@pytest.fixture
def shapes(client: Client) -> Any:
    coll = client.q.shapes
    coll.insert_many(
        [
            {"_id": 1, "a": 1, "tags": ["x", "y"], "p": {"q": 1}},
            {"_id": 2, "a": 1.0, "tags": ["y", "z"], "p": {"q": 2}},
            {"_id": 3, "a": "1", "p": [{"q": 3}, {"q": 1}]},
            {"_id": 4, "a": None, "tags": "x", "p": {"r": 1}},
            {"_id": 5, "tags": [["nested"], "w"]},
            {"_id": 6, "a": [2, [3]], "p": {"q": {"deep": True}}},
            {"_id": 7, "a": Int64(2), "p": {"q": None}},
        ]
    )
    return coll


def test_distinct_values(shapes: Any) -> None:
    # Equal numbers of different types are one value; arrays are unwound one level.
    values = shapes.distinct("a")
    assert values == [None, 1, 2, "1", [3]]
    assert shapes.distinct("tags") == ["w", "x", "y", "z", ["nested"]]


def test_distinct_dotted_keys(shapes: Any) -> None:
    assert shapes.distinct("p.q") == [None, 1, 2, 3, {"deep": True}]
    assert shapes.distinct("p.r") == [1]
    assert shapes.distinct("nope.x") == []


def test_distinct_with_a_query(shapes: Any) -> None:
    assert shapes.distinct("tags", {"_id": {"$lte": 2}}) == ["x", "y", "z"]
    assert shapes.distinct("a", {"tags": "x"}) == [None, 1]
    assert shapes.distinct("a", {"nope": 1}) == []


def test_distinct_reply_shape(shapes: Any, client: Client) -> None:
    reply = client.q.command("distinct", "shapes", key="p.r")
    assert reply == {"values": [1], "ok": 1.0}


def test_distinct_on_a_missing_collection(client: Client) -> None:
    assert client.q.nope.distinct("a") == []


def test_distinct_through_an_index(people: Any) -> None:
    assert people.distinct("city", {"age": {"$lt": 23}}) == ["Lima", "Oslo", "Rome"]
    assert people.distinct("age", {"city": "Oslo", "age": {"$lt": 30}}) == [20, 23, 26, 29]


# -- explain ---------------------------------------------------------------------------------------


def test_explain_find_with_an_index(people: Any) -> None:
    explain = people.find({"age": 25}).explain()
    planner = explain["queryPlanner"]
    assert planner["namespace"] == "q.people"
    plan = planner["winningPlan"]
    assert stage_names(plan) == ["FETCH", "IXSCAN"]
    scan = leaf(plan)
    assert scan["indexName"] == "age_1"
    assert scan["keyPattern"] == {"age": 1}
    assert scan["direction"] == "forward"
    assert scan["isMultiKey"] is False
    stats = explain["executionStats"]
    assert stats["nReturned"] == 3
    assert stats["totalKeysExamined"] == 3
    assert stats["totalDocsExamined"] == 3
    for field in ("nReturned", "totalKeysExamined", "totalDocsExamined", "executionTimeMillis"):
        assert type(stats[field]) is int, field


def test_explain_find_without_an_index(people: Any) -> None:
    explain = people.find({"n": {"$lt": 10}}).explain()
    assert stage_names(explain["queryPlanner"]["winningPlan"]) == ["COLLSCAN"]
    stats = explain["executionStats"]
    assert stats["nReturned"] == 10
    assert stats["totalKeysExamined"] == 0
    assert stats["totalDocsExamined"] == 90


@pytest.mark.parametrize(
    ("flt", "index"),
    [
        ({"age": 25}, "age_1"),
        ({"age": {"$gt": 45}}, "age_1"),
        ({"age": {"$gte": 45}}, "age_1"),
        ({"age": {"$lt": 22}}, "age_1"),
        ({"age": {"$lte": 22}}, "age_1"),
        ({"age": {"$in": [21, 33]}}, "age_1"),
        ({"city": "Rome"}, "city_1_age_-1"),
        ({"city": "Rome", "age": 21}, "city_1_age_-1"),
        ({"city": {"$in": ["Rome", "Lima"]}, "age": {"$gt": 40}}, "city_1_age_-1"),
        ({"n": 5}, None),
        ({"age": {"$ne": 5}}, None),
        ({"_id": 5}, "_id_"),
    ],
)
def test_explain_find_picks_the_index(people: Any, flt: dict[str, Any], index: str | None) -> None:
    explain = people.find(flt).explain()
    assert index_used(explain["queryPlanner"]["winningPlan"]) == index
    expected = sorted(ids(people.find(flt).hint({"$natural": 1})))
    assert sorted(ids(people.find(flt))) == expected
    assert explain["executionStats"]["nReturned"] == len(expected)


@pytest.mark.parametrize(
    ("flt", "sort", "index", "in_memory"),
    [
        ({}, [("age", 1)], "age_1", False),
        ({}, [("age", -1)], "age_1", False),
        ({"age": {"$gt": 30}}, [("age", -1)], "age_1", False),
        ({"city": "Rome"}, [("age", -1)], "city_1_age_-1", False),
        ({"city": "Rome"}, [("age", 1)], "city_1_age_-1", False),
        ({}, [("city", 1), ("age", -1)], "city_1_age_-1", False),
        ({}, [("city", -1), ("age", 1)], "city_1_age_-1", False),
        ({}, [("city", 1), ("age", 1)], None, True),
        ({}, [("n", 1)], None, True),
        ({"age": 25}, [("n", -1)], "age_1", True),
    ],
)
def test_explain_sort(
    people: Any,
    flt: dict[str, Any],
    sort: list[tuple[str, int]],
    index: str | None,
    in_memory: bool,
) -> None:
    plan = people.find(flt, sort=sort).explain()["queryPlanner"]["winningPlan"]
    assert index_used(plan) == index
    assert ("SORT" in stage_names(plan)) == in_memory
    got = list(people.find(flt, sort=sort))
    natural = list(people.find(flt, sort=sort).hint({"$natural": 1}))
    keys = [k for k, _ in sort]
    assert [[d[k] for k in keys] for d in got] == [[d[k] for k in keys] for d in natural]
    assert sorted(ids(got)) == sorted(ids(natural))


def test_explain_with_projection_still_shows_the_scan(people: Any) -> None:
    plan = people.find({"age": 25}, {"n": 1, "_id": 0}).explain()["queryPlanner"]["winningPlan"]
    names = stage_names(plan)
    assert names[0].startswith("PROJECTION")
    assert names[-1] == "IXSCAN"
    assert leaf(plan)["indexName"] == "age_1"


@pytest.mark.parametrize(
    ("hint", "index"),
    [
        ("age_1", "age_1"),
        ([("age", 1)], "age_1"),
        ("city_1_age_-1", "city_1_age_-1"),
        ([("city", 1), ("age", -1)], "city_1_age_-1"),
        ([("$natural", 1)], None),
        ([("$natural", -1)], None),
        ("_id_", "_id_"),
    ],
)
def test_hint_is_honoured(people: Any, hint: Any, index: str | None) -> None:
    flt = {"age": 25, "city": "Lima"}
    explain = people.find(flt).hint(hint).explain()
    assert index_used(explain["queryPlanner"]["winningPlan"]) == index
    assert sorted(ids(people.find(flt).hint(hint))) == sorted(
        ids(people.find(flt).hint({"$natural": 1}))
    )


def test_natural_hint_backward(people: Any) -> None:
    plan = people.find().hint([("$natural", -1)]).explain()["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "COLLSCAN" and plan["direction"] == "backward"
    assert ids(people.find().hint([("$natural", -1)]).limit(3)) == [89, 88, 87]


@pytest.mark.parametrize("hint", ["nope", [("age", -1)], [("zz", 1)], [("age", 1), ("n", 1)]])
def test_hint_naming_no_index_is_bad_value(people: Any, hint: Any) -> None:
    with pytest.raises(OperationFailure) as info:
        list(people.find({"age": 25}).hint(hint))
    assert info.value.code == 2
    assert info.value.details is not None
    assert info.value.details["codeName"] == "BadValue"


def test_explain_count(people: Any, client: Client) -> None:
    reply = client.q.command(
        "explain", {"count": "people", "query": {"age": {"$gt": 40}}}, verbosity="executionStats"
    )
    assert index_used(reply["queryPlanner"]["winningPlan"]) == "age_1"
    stats = reply["executionStats"]
    for field in ("nReturned", "totalKeysExamined", "totalDocsExamined", "executionTimeMillis"):
        assert type(stats[field]) is int, field
    assert stats["totalDocsExamined"] <= 27
    reply = client.q.command(
        "explain", {"count": "people", "query": {"n": 3}}, verbosity="queryPlanner"
    )
    assert index_used(reply["queryPlanner"]["winningPlan"]) is None
    assert "executionStats" not in reply


def test_explain_distinct(people: Any, client: Client) -> None:
    reply = client.q.command(
        "explain",
        {"distinct": "people", "key": "city", "query": {"city": {"$in": ["Rome", "Oslo"]}}},
        verbosity="executionStats",
    )
    assert index_used(reply["queryPlanner"]["winningPlan"]) == "city_1_age_-1"
    stats = reply["executionStats"]
    for field in ("nReturned", "totalKeysExamined", "totalDocsExamined", "executionTimeMillis"):
        assert type(stats[field]) is int, field
    reply = client.q.command(
        "explain", {"distinct": "people", "key": "n", "query": {"n": 3}}, verbosity="queryPlanner"
    )
    assert index_used(reply["queryPlanner"]["winningPlan"]) is None


def test_explain_on_a_missing_collection(client: Client) -> None:
    reply = client.q.command("explain", {"find": "nope", "filter": {"a": 1}})
    assert reply["ok"] == 1.0
    assert reply["queryPlanner"]["namespace"] == "q.nope"


# -- index results equal collection scans ----------------------------------------------------------

MIXED: list[Any] = [
    1,
    5,
    5.0,
    Int64(5),
    Decimal128("5.0"),
    7,
    10,
    20,
    -3,
    2.5,
    "",
    "a",
    "m",
    "x",
    None,
    [1, 20],
    [5, 7],
    [],
    [None],
    {"b": 1},
    {"b": 5, "c": 1},
    [{"b": 1}, {"b": 7}],
    True,
    datetime.datetime(2020, 1, 1),
]


@pytest.fixture(scope="module")
def mixed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    srv = ServerThread(str(tmp_path_factory.mktemp("mixed") / "data")).start()
    c: Client = MongoClient(srv.uri)
    try:
        for name, keys in [
            ("asc", [[("a", 1)]]),
            ("desc", [[("a", -1)]]),
            ("compound", [[("a", 1), ("b", -1)]]),
            ("scalar", [[("a", 1), ("b", 1)]]),
        ]:
            coll = c.eq[name]
            values = MIXED if name != "scalar" else [v for v in MIXED if not isinstance(v, list)]
            coll.insert_many(
                [{"_id": i, "a": v, "b": i % 4} for i, v in enumerate(values)]
                + [{"_id": "no-a", "b": 1}]
            )
            for key in keys:
                coll.create_index(key)
        yield c
    finally:
        c.close()
        srv.stop()


EQ_FILTERS: list[dict[str, Any]] = [
    {"a": 5},
    {"a": Decimal128("5")},
    {"a": "m"},
    {"a": None},
    {"a": {"$in": [1, "x", None]}},
    {"a": {"$gt": 5}},
    {"a": {"$gte": 5}},
    {"a": {"$lt": 5}},
    {"a": {"$lte": 5}},
    {"a": {"$gt": 5, "$lt": 10}},
    {"a": {"$gt": "a"}},
    {"a": {"$gte": "", "$lt": "n"}},
    {"a": {"b": 1}},
    {"a.b": {"$gte": 1}},
    {"a": [1, 20]},
    {"a": []},
    {"a": {"$exists": False}},
    {"a": 5, "b": {"$gt": 1}},
    {"a": {"$in": [5, 7]}, "b": {"$lte": 2}},
    {"b": 2},
]


@pytest.mark.parametrize("coll", ["asc", "desc", "compound", "scalar"])
@pytest.mark.parametrize("flt", EQ_FILTERS, ids=[repr(f) for f in EQ_FILTERS])
def test_index_results_equal_a_collection_scan(
    mixed_server: Client, coll: str, flt: dict[str, Any]
) -> None:
    c = mixed_server.eq[coll]
    natural = ids(c.find(flt).hint({"$natural": 1}))
    got = ids(c.find(flt))
    assert len(got) == len(set(map(repr, got)))
    assert sorted(map(repr, got)) == sorted(map(repr, natural))
    for sort in ([("a", 1)], [("a", -1)], [("a", 1), ("b", 1)], [("a", -1), ("b", -1)]):
        # With _id breaking ties the order is fully determined.
        tied = sort + [("_id", 1)]
        assert ids(c.find(flt, sort=tied)) == ids(c.find(flt, sort=tied).hint({"$natural": 1}))
        # Without it, whatever plan delivers the sort must still deliver a sorted result.
        docs = list(c.find(flt, sort=sort))
        assert sorted(map(repr, ids(docs))) == sorted(map(repr, natural))
        spec = parse_sort(dict(sort))
        assert spec is not None
        assert ids(sort_documents([(d, d) for d in docs], spec)) == ids(docs)


# -- cursors ---------------------------------------------------------------------------------------


def test_first_batch_is_101_by_default(watched: Client, recorder: Recorder) -> None:
    coll = watched.q.cur
    coll.insert_many([{"_id": i} for i in range(300)])
    recorder.replies.clear()
    assert ids(coll.find()) == list(range(300))
    sizes = [len(b) for b in recorder.batches()]
    assert sizes[0] == 101
    assert sum(sizes) == 300
    recorder.replies.clear()
    assert ids(coll.find({"_id": {"$gte": 0}}).sort("_id", -1)) == list(range(299, -1, -1))
    assert [len(b) for b in recorder.batches()][0] == 101


@pytest.mark.parametrize("batch_size", [1, 7, 100, 299, 300, 1000])
def test_batch_size_is_honoured(watched: Client, recorder: Recorder, batch_size: int) -> None:
    coll = watched.q.bs
    coll.insert_many([{"_id": i, "k": i % 10} for i in range(300)])
    coll.create_index("k")
    for query in ({}, {"k": {"$gte": 3}}):
        expected = ids(coll.find(query).hint({"$natural": 1}))
        recorder.replies.clear()
        got = ids(coll.find(query).batch_size(batch_size))
        assert sorted(got) == sorted(expected)
        sizes = [len(b) for b in recorder.batches()]
        assert all(s <= batch_size for s in sizes)
        assert all(s == batch_size for s in sizes[:-1]), sizes
        assert sum(sizes) == len(expected)


@pytest.mark.parametrize("sort", [None, [("n", DESCENDING)]], ids=["natural", "sorted"])
def test_every_batch_stays_under_16_mib(
    watched: Client, recorder: Recorder, sort: list[tuple[str, int]] | None
) -> None:
    coll = watched.q.big
    pad = "x" * (1024 * 1024)
    coll.insert_many([{"_id": i, "n": i, "pad": pad} for i in range(40)])
    recorder.replies.clear()
    got = ids(coll.find({}, sort=sort))
    assert sorted(got) == list(range(40))
    if sort:
        assert got == list(range(39, -1, -1))
    batches = recorder.batches()
    assert len(batches) >= 3
    for batch in batches:
        assert sum(len(bson.encode(d)) for d in batch) <= 16 * 1024 * 1024
    assert sum(len(b) for b in batches) == 40


def test_get_more_while_another_client_inserts(client: Client, uri: str) -> None:
    coll = client.q.live
    coll.create_index("k")
    coll.insert_many([{"_id": i, "k": i * 10} for i in range(30)])
    with MongoClient(uri) as other:
        for base, query, sort in ((1000, {}, None), (2000, {"k": {"$gte": 0}}, [("k", 1)])):
            before = ids(coll.find(query, sort=sort))
            cursor = coll.find(query, sort=sort).batch_size(10)
            seen = [next(cursor)["_id"] for _ in range(10)]
            inserted = {base + i for i in range(20)}
            other.q.live.insert_many([{"_id": i, "k": i - base + 0.5} for i in sorted(inserted)])
            seen += ids(cursor)
            assert len(seen) == len(set(seen)), "no document twice"
            # Every document there at the start comes once, in order; new ones may come too.
            assert [i for i in seen if i in set(before)] == before
            assert set(seen) - set(before) <= inserted
            if sort:
                k = {d["_id"]: d["k"] for d in coll.find()}
                assert [k[i] for i in seen] == sorted(k[i] for i in seen)


def test_get_more_on_an_unknown_cursor(client: Client) -> None:
    client.q.some.insert_one({})
    with pytest.raises(OperationFailure) as info:
        client.q.command("getMore", Int64(424242), collection="some")
    assert info.value.code == 43
    assert info.value.details is not None
    assert info.value.details["codeName"] == "CursorNotFound"


def test_no_cursor_timeout_is_accepted(client: Client) -> None:
    coll = client.q.nct
    coll.insert_many([{"_id": i} for i in range(10)])
    assert ids(coll.find(no_cursor_timeout=True).batch_size(3)) == list(range(10))
    reply = client.q.command("find", "nct", batchSize=2, noCursorTimeout=True)
    assert reply["cursor"]["id"] != 0
    client.q.command("killCursors", "nct", cursors=[reply["cursor"]["id"]])


def test_cursor_timeout_is_a_runtime_parameter(client: Client) -> None:
    old = client.admin.command("getParameter", 1, cursorTimeoutMillis=1)["cursorTimeoutMillis"]
    assert old == 600_000
    reply = client.admin.command("setParameter", 1, cursorTimeoutMillis=1234)
    assert reply["was"] == 600_000
    now = client.admin.command("getParameter", 1, cursorTimeoutMillis=1)
    assert now["cursorTimeoutMillis"] == 1234


def test_idle_cursors_are_reaped(start_server: Callable[..., ServerThread]) -> None:
    srv = start_server({"cursorTimeoutMillis": Int64(300)})
    with MongoClient(srv.uri) as c:
        db = c.q
        db.reap.insert_many([{"_id": i} for i in range(100)])
        idle = db.command("find", "reap", batchSize=2)["cursor"]["id"]
        kept = db.command("find", "reap", batchSize=2, noCursorTimeout=True)["cursor"]["id"]
        busy = db.command("find", "reap", batchSize=1)["cursor"]["id"]
        last = 0
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            # Used far more often than the timeout: stays open.
            more = db.command("getMore", busy, collection="reap", batchSize=1)
            (last,) = ids(more["cursor"]["nextBatch"])
            time.sleep(0.03)
        with pytest.raises(OperationFailure) as info:
            db.command("getMore", idle, collection="reap")
        assert info.value.code == 43
        more = db.command("getMore", kept, collection="reap", batchSize=3)
        assert ids(more["cursor"]["nextBatch"]) == [2, 3, 4]
        more = db.command("getMore", busy, collection="reap", batchSize=2)
        assert ids(more["cursor"]["nextBatch"]) == [last + 1, last + 2]
        db.command("killCursors", "reap", cursors=[kept, busy])
