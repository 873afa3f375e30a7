"""Query execution over a real engine: plans, skip and limit, chunking under small budgets and byte
limits (every matching document exactly once, in order), sort and projection."""

from __future__ import annotations

from collections.abc import Iterator

import bson
import pytest

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.engine.reader import take_records
from ebbdb.storage.engine.store import CODEC, Engine
from ebbdb.storage.execution.execute import QueryRun, QuerySpec, choose_plan, count_documents
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes.planner import CollScan, IndexScan
from ebbdb.storage.indexes.specs import parse_index_spec
from ebbdb.storage.query.match_tree import And, Compare
from tests.helpers import enc

N = 40


def dec(raw: bytes) -> dict:
    return bson.decode(raw, CODEC)


@pytest.fixture
def engine(engine: Engine) -> Engine:
    """conftest's empty engine with N documents in db.c."""
    # Several inserts, so record ids come from more than one transaction.
    for start in range(0, N, 7):
        docs = [
            enc({"_id": i, "n": i, "odd": i % 2 == 1, "pad": "x" * (i % 5), "grp": i % 4})
            for i in range(start, min(start + 7, N))
        ]
        assert engine.insert("db", "c", docs).inserted == len(docs)
    return engine


def make_run(engine: Engine, **spec: object) -> QueryRun:
    coll = engine.collection("db", "c")
    assert coll is not None
    return QueryRun(coll, QuerySpec.parse(**spec))  # type: ignore[arg-type]


def drain(
    engine: Engine,
    run: QueryRun,
    max_docs: int = 1000,
    max_bytes: int = 1 << 24,
    budget: int = 2000,
) -> tuple[list[bytes], int]:
    """Call next_chunk until the run is exhausted; returns (documents, number of calls)."""
    out: list[bytes] = []
    calls = 0
    while not run.exhausted:
        calls += 1
        assert calls < 10_000, "the run never finished"
        chunk = run.next_chunk(engine, max_docs, max_bytes, budget)
        assert len(chunk) <= max_docs
        out += chunk
    return out, calls


def ids(docs: list[bytes]) -> list[object]:
    return [dec(d)["_id"] for d in docs]


# -- plans -----------------------------------------------------------------------------------------


def describe(plan: object) -> str:
    if isinstance(plan, CollScan):
        return "COLLSCAN" + (" reverse" if plan.reverse else "")
    assert isinstance(plan, IndexScan)
    return f"IXSCAN {plan.index.name}" + (" reverse" if plan.reverse else "")


@pytest.mark.parametrize(
    ("filter", "sort", "plan"),
    [
        ({}, None, "COLLSCAN"),
        (None, None, "COLLSCAN"),
        ({"_id": 5}, None, "IXSCAN _id_"),
        ({"_id": "k"}, None, "IXSCAN _id_"),
        ({"_id": {"a": 1}}, None, "IXSCAN _id_"),
        ({"_id": None}, None, "IXSCAN _id_"),
        ({"_id": {"$eq": 5}}, None, "IXSCAN _id_"),
        ({"_id": 5, "n": 1}, None, "IXSCAN _id_"),
        ({"_id": {"$gt": 5}}, None, "IXSCAN _id_"),
        ({"_id": {"$eq": 5, "$lt": 9}}, None, "IXSCAN _id_"),
        ({"_id": {"$in": [1, 2]}}, None, "IXSCAN _id_"),
        ({"_id": {"$eq": [1]}}, None, "COLLSCAN"),
        ({"_id": [1, 2]}, None, "COLLSCAN"),
        ({"n": 5}, None, "COLLSCAN"),
        ({}, {"$natural": -1}, "COLLSCAN reverse"),
        ({}, {"$natural": 1}, "COLLSCAN"),
        ({}, {"n": -1}, "COLLSCAN"),
        ({}, {"_id": 1}, "IXSCAN _id_"),
        ({}, {"_id": -1}, "IXSCAN _id_ reverse"),
    ],
)
def test_choose_plan(engine: Engine, filter: dict | None, sort: dict | None, plan: str) -> None:
    coll = engine.collection("db", "c")
    assert coll is not None
    assert describe(choose_plan(coll, QuerySpec.parse(filter, None, sort))) == plan


def test_id_lookup_reads_one_record(engine: Engine) -> None:
    run = make_run(engine, filter={"_id": 17.0})
    assert isinstance(run.plan, IndexScan) and run.plan.index.name == "_id_"
    docs, _ = drain(engine, run)
    assert ids(docs) == [17]
    assert run.examined == 1


def test_id_lookup_rechecks_the_rest_of_the_filter(engine: Engine) -> None:
    assert drain(engine, make_run(engine, filter={"_id": 17, "n": 18}))[0] == []
    assert ids(drain(engine, make_run(engine, filter={"_id": 17, "n": 17}))[0]) == [17]


def test_id_lookup_of_a_missing_id(engine: Engine) -> None:
    run = make_run(engine, filter={"_id": 12345})
    docs, calls = drain(engine, run)
    assert docs == [] and calls == 1 and run.exhausted


def test_id_lookup_after_a_small_first_chunk_is_not_lost(engine: Engine) -> None:
    run = make_run(engine, filter={"_id": 3})
    # A continuation chunk (first=False) with no room holds the document back for the next batch.
    assert run.next_chunk(engine, 10, 1, first=False) == []
    assert run.size_limited and not run.exhausted
    assert ids(run.next_chunk(engine, 10, 1 << 20)) == [3]
    assert run.exhausted


# -- scans, skip, limit ----------------------------------------------------------------------------


def test_full_scan_in_one_chunk(engine: Engine) -> None:
    run = make_run(engine)
    docs, calls = drain(engine, run)
    assert ids(docs) == list(range(N))
    assert calls == 1
    assert run.returned == N


@pytest.mark.parametrize("budget", [1, 2, 3, 7, 39, 40, 41])
@pytest.mark.parametrize("max_docs", [1, 2, 5, 1000])
def test_small_budgets_return_every_document_once_in_order(
    engine: Engine, budget: int, max_docs: int
) -> None:
    docs, _ = drain(engine, make_run(engine), max_docs=max_docs, budget=budget)
    assert ids(docs) == list(range(N))


@pytest.mark.parametrize("budget", [1, 3, 40])
def test_small_budgets_with_a_filter(engine: Engine, budget: int) -> None:
    run = make_run(engine, filter={"n": {"$gte": 30}})
    docs, calls = drain(engine, run, max_docs=4, budget=budget)
    assert ids(docs) == list(range(30, N))
    if budget == 1:
        assert calls >= N  # at most one record examined per call


def test_budget_exhaustion_reports_call_again(engine: Engine) -> None:
    run = make_run(engine, filter={"n": {"$gte": 30}})
    chunk = run.next_chunk(engine, 10, 1 << 20, budget=5)
    assert chunk == []
    assert not run.exhausted and not run.size_limited
    assert run.examined == 5


def test_backward_natural_scan(engine: Engine) -> None:
    docs, _ = drain(engine, make_run(engine, sort={"$natural": -1}), max_docs=3, budget=4)
    assert ids(docs) == list(range(N - 1, -1, -1))


@pytest.mark.parametrize(
    ("skip", "limit", "expected"),
    [
        (0, 0, list(range(N))),
        (5, 0, list(range(5, N))),
        (0, 7, list(range(7))),
        (5, 7, list(range(5, 12))),
        (N - 2, 10, [N - 2, N - 1]),
        (N, 0, []),
        (N + 10, 3, []),
        (0, N + 10, list(range(N))),
    ],
)
@pytest.mark.parametrize(("max_docs", "budget"), [(1000, 2000), (2, 3), (1, 1)])
def test_skip_and_limit(
    engine: Engine, skip: int, limit: int, expected: list[int], max_docs: int, budget: int
) -> None:
    run = make_run(engine, skip=skip, limit=limit)
    docs, _ = drain(engine, run, max_docs=max_docs, budget=budget)
    assert ids(docs) == expected


def test_skip_and_limit_with_filter_and_reverse(engine: Engine) -> None:
    run = make_run(engine, filter={"odd": True}, sort={"$natural": -1}, skip=2, limit=3)
    docs, _ = drain(engine, run, max_docs=2, budget=3)
    assert ids(docs) == [35, 33, 31]


def test_limit_marks_the_run_exhausted(engine: Engine) -> None:
    run = make_run(engine, limit=3)
    assert ids(run.next_chunk(engine, 100, 1 << 20)) == [0, 1, 2]
    assert run.exhausted
    assert run.next_chunk(engine, 100, 1 << 20) == []


def test_exhausted_without_limit_after_last_chunk(engine: Engine) -> None:
    run = make_run(engine)
    assert len(run.next_chunk(engine, N, 1 << 20)) == N
    # Either known now or after one more (empty) call; never more documents.
    assert run.next_chunk(engine, N, 1 << 20) == []
    assert run.exhausted


def test_zero_docs_asked_returns_nothing_and_keeps_going(engine: Engine) -> None:
    run = make_run(engine)
    assert run.next_chunk(engine, 0, 1 << 20) == []
    assert not run.exhausted
    assert ids(drain(engine, run)[0]) == list(range(N))


# -- size limits -----------------------------------------------------------------------------------


def test_byte_limit_splits_chunks_without_losing_documents(engine: Engine) -> None:
    sizes = [
        len(enc({"_id": i, "n": i, "odd": i % 2 == 1, "pad": "x" * (i % 5), "grp": i % 4}))
        for i in range(N)
    ]
    max_bytes = max(sizes) * 2 + 1  # room for two documents, never three
    run = make_run(engine)
    seen: list[bytes] = []
    while not run.exhausted:
        chunk = run.next_chunk(engine, 1000, max_bytes)
        assert chunk, "a first chunk always makes progress"
        assert len(chunk) <= 2
        assert sum(map(len, chunk)) <= max_bytes
        if not run.exhausted:
            assert run.size_limited
        seen += chunk
    assert ids(seen) == list(range(N))


def test_first_chunk_returns_one_document_even_if_too_big(engine: Engine) -> None:
    run = make_run(engine)
    chunk = run.next_chunk(engine, 1000, 1)
    assert ids(chunk) == [0]
    assert run.size_limited


def test_continuation_chunk_holds_back_a_document_that_does_not_fit(engine: Engine) -> None:
    run = make_run(engine)
    assert run.next_chunk(engine, 1000, 1, first=False) == []
    assert run.size_limited and not run.exhausted
    assert ids(drain(engine, run)[0]) == list(range(N))


def test_byte_limit_backward(engine: Engine) -> None:
    run = make_run(engine, sort={"$natural": -1})
    seen: list[bytes] = []
    while not run.exhausted:
        seen += run.next_chunk(engine, 1000, 1)
    assert ids(seen) == list(range(N - 1, -1, -1))


def test_byte_limit_with_projection_counts_projected_size(engine: Engine) -> None:
    run = make_run(engine, projection={"_id": 1})
    small = len(enc({"_id": 0}))
    chunk = run.next_chunk(engine, 1000, small * 3)
    assert len(chunk) == 3
    assert all(list(dec(d)) == ["_id"] for d in chunk)


# -- sort and projection ---------------------------------------------------------------------------


@pytest.mark.parametrize(("max_docs", "budget"), [(1000, 2000), (3, 4), (1, 1)])
def test_sort_descending(engine: Engine, max_docs: int, budget: int) -> None:
    run = make_run(engine, sort={"n": -1})
    docs, _ = drain(engine, run, max_docs=max_docs, budget=budget)
    assert ids(docs) == list(range(N - 1, -1, -1))


def test_sort_collects_before_returning(engine: Engine) -> None:
    run = make_run(engine, sort={"n": -1})
    assert run.next_chunk(engine, 10, 1 << 20, budget=5) == []
    assert not run.exhausted


def test_compound_sort_with_filter_skip_limit(engine: Engine) -> None:
    run = make_run(engine, filter={"n": {"$lt": 20}}, sort={"grp": 1, "n": -1}, skip=1, limit=6)
    docs, _ = drain(engine, run, max_docs=2, budget=3)
    # grp 0: 16, 12, 8, 4, 0; grp 1: 17, 13, ...  skip the first, take six.
    assert ids(docs) == [12, 8, 4, 0, 17, 13]


def test_sort_is_stable_in_record_order(engine: Engine) -> None:
    docs, _ = drain(engine, make_run(engine, sort={"odd": 1}))
    assert ids(docs) == list(range(0, N, 2)) + list(range(1, N, 2))


def test_sort_with_byte_limit(engine: Engine) -> None:
    run = make_run(engine, sort={"n": -1})
    seen: list[bytes] = []
    while not run.exhausted:
        chunk = run.next_chunk(engine, 1000, 1)
        assert len(chunk) <= 1
        seen += chunk
    assert ids(seen) == list(range(N - 1, -1, -1))


def test_projection_is_applied(engine: Engine) -> None:
    run = make_run(engine, filter={"n": {"$in": [3, 4]}}, projection={"n": 1, "_id": 0})
    docs, _ = drain(engine, run)
    assert [dec(d) for d in docs] == [{"n": 3}, {"n": 4}]
    run = make_run(engine, filter={"_id": 3}, projection={"pad": 0, "odd": 0, "grp": 0})
    assert [dec(d) for d in drain(engine, run)[0]] == [{"_id": 3, "n": 3}]
    run = make_run(engine, sort={"n": -1}, limit=1, projection={"grp": 1})
    assert [dec(d) for d in drain(engine, run)[0]] == [{"_id": N - 1, "grp": (N - 1) % 4}]


def test_unchanged_documents_go_out_as_stored_bytes(engine: Engine) -> None:
    coll = engine.collection("db", "c")
    with engine.read() as r:
        stored = [ttl.body(v) for _, v in r.scan(coll)]
    assert drain(engine, make_run(engine))[0] == stored
    assert drain(engine, make_run(engine, filter={"n": {"$lt": 3}}))[0] == stored[:3]


def test_documents_inserted_between_chunks_are_seen_later(engine: Engine) -> None:
    run = make_run(engine)
    first = run.next_chunk(engine, 10, 1 << 20)
    engine.insert("db", "c", [enc({"_id": "late"})])
    rest, _ = drain(engine, run)
    assert ids(first + rest) == [*range(N), "late"]


# -- spec validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        {"skip": -1},
        {"limit": -1},
        {"filter": {"a": {"$bogus": 1}}},
        {"sort": {"a": 2}},
        {"projection": {"a": 1, "b": 0}},
    ],
)
def test_query_spec_rejects_bad_input(kwargs: dict) -> None:
    with pytest.raises(QueryError):
        QuerySpec.parse(**kwargs)


def test_query_spec_parses_the_filter_once() -> None:
    """The spec holds the parsed filter: as written, its tree (what the planner and a positional
    projection read) and its predicate."""
    flt = {"n": {"$gte": 3}, "odd": True}
    spec = QuerySpec.parse(flt, {"pad.$": 1})
    assert spec.filter is flt and spec.query.filter is flt
    assert isinstance(spec.query.tree, And)
    assert [
        (c.path, c.op, c.value) for c in spec.query.tree.children if isinstance(c, Compare)
    ] == [
        ("n", "$gte", 3),
        ("odd", "$eq", True),
    ]
    assert spec.predicate({"n": 3, "odd": True}) and not spec.predicate({"n": 2, "odd": True})
    assert QuerySpec.parse().filter == {}


def test_the_plan_comes_from_the_parsed_filter(engine: Engine) -> None:
    assert engine.create_indexes("db", "c", [parse_index_spec({"key": {"grp": 1}})])
    coll = engine.collection("db", "c")
    assert coll is not None
    spec = QuerySpec.parse({"$and": [{"grp": {"$in": [1, 2]}}, {"n": {"$lt": 9}}]})
    plan = choose_plan(coll, spec)
    assert isinstance(plan, IndexScan) and plan.index.name == "grp_1"
    assert plan.bounds == {"grp": ["[1, 1], [2, 2]"]}
    assert sorted(dec(raw)["_id"] for raw in drain(engine, QueryRun(coll, spec))[0]) == [1, 2, 5, 6]


def test_count_documents(engine: Engine) -> None:
    assert count_documents(engine, engine.collection("db", "c")) == N


# -- IDHACK: one lookup of the unique `_id` index ----------------------------------------------


def test_id_lookup_reads_one_key_without_a_scan(engine: Engine) -> None:
    run = make_run(engine, filter={"_id": 5})
    assert isinstance(run.plan, IndexScan) and run.plan.point is not None
    assert ids(drain(engine, run)[0]) == [5]
    assert (run.keys_examined, run.docs_examined) == (1, 1)
    missing = make_run(engine, filter={"_id": 999})
    assert drain(engine, missing)[0] == [] and missing.keys_examined == 0


def test_id_lookup_is_passed_once_skipped_or_rejected(engine: Engine) -> None:
    skipped = make_run(engine, filter={"_id": 5}, skip=1)
    assert drain(engine, skipped, max_docs=1)[0] == []
    rejected = make_run(engine, filter={"_id": 5, "n": 6})
    assert drain(engine, rejected, max_docs=1, budget=1)[0] == []


def test_id_lookup_of_a_key_too_long_for_lmdb(engine: Engine) -> None:
    # Such keys are stored shortened (a prefix and a hash): the lookup must shorten them alike.
    long_ids = ["k" * 600 + "a", "k" * 600 + "b"]
    assert engine.insert("db", "c", [enc({"_id": i, "n": -1}) for i in long_ids]).inserted == 2
    for i in long_ids:
        docs, _ = drain(engine, make_run(engine, filter={"_id": i}))
        assert [dec(d)["_id"] for d in docs] == [i]


def test_a_plain_scan_reads_no_further_than_its_byte_budget() -> None:
    # Records of 1,000 bytes with room for 10: the scan reads a dozen, not the 2,000 asked for
    # (a getMore over 250 KB documents read 2,000 of them, 500 MB, to send 64).
    pulled = 0

    def records() -> Iterator[tuple[bytes, bytes]]:
        nonlocal pulled
        for i in range(5000):
            pulled += 1
            yield b"%d" % i, b"x" * 1000

    items, exhausted = take_records(records(), 2000, 10_000)
    assert not exhausted
    assert 10_000 < sum(len(v) for _, v in items) <= 11_000
    assert pulled == len(items) <= 12


def test_a_plain_scan_of_small_records_takes_the_count_asked() -> None:
    rows = [(b"%d" % i, b"y" * 20) for i in range(5000)]
    items, exhausted = take_records(iter(rows), 2000, 16 * 1024 * 1024)
    assert items == rows[:2000] and not exhausted
    items, exhausted = take_records(iter(rows[:30]), 2000, 16 * 1024 * 1024)
    assert items == rows[:30] and exhausted
