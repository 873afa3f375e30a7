"""What storage reports about a collection's size (storage/engine/sizes.py) and its use (storage/engine/usage.py):
exact counts and data sizes, estimates built the documented way, MongoDB's storageStats document,
and index accesses counted once per query."""

from __future__ import annotations

from typing import Any

import bson
from bson import Int64

from ebbdb.storage.engine.sizes import NODE_OVERHEAD, CollectionSizes, number, storage_stats
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.execution.execute import QueryRun, QuerySpec
from ebbdb.storage.expiry import ttl
from tests.helpers import STORAGE_STATS_FIELDS, drain
from tests.storage.ttl_support import DB, T0, D, coll_of, create

DOCS = [{"_id": i, "a": i, "tags": [i, i + 100], "at": D(T0)} for i in range(50)]


def _load(engine: Engine) -> None:
    engine.insert(DB, "c", [bson.encode(d) for d in DOCS], now_ms=T0)
    create(
        engine,
        "c",
        {"key": {"a": 1}, "name": "a_1"},
        {"key": {"tags": 1}, "name": "tags_1"},
        {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 60},
    )


def _sizes(engine: Engine) -> CollectionSizes:
    (sizes,) = engine.sizes([coll_of(engine)])
    return sizes


def _pages(n: float, page: int) -> int:
    return max(1, -(-int(n) // page)) * page


def test_counts_and_data_size_are_exact(engine: Engine) -> None:
    _load(engine)
    sizes = _sizes(engine)
    data = sum(len(bson.encode(d)) for d in DOCS)
    assert (sizes.count, sizes.data_size, sizes.avg_obj_size) == (50, data, data // 50)
    assert [name for name, _ in sizes.index_sizes] == ["_id_", "a_1", "tags_1", "at_1"]
    assert sizes.total_index_size == sum(size for _, size in sizes.index_sizes)


def test_sizes_are_the_entries_bytes_in_whole_pages(engine: Engine) -> None:
    _load(engine)
    coll = coll_of(engine)
    page = engine.env.page_size
    sizes = dict(_sizes(engine).index_sizes)
    with engine.read() as r:
        expected = {}
        for ix in coll.indexes:
            entries, keys = r.index_footprint(ix)
            total = keys + entries * (8 + NODE_OVERHEAD)
            if "expireAfterSeconds" in ix.options:
                expiring, expiry_keys = r.expiry_footprint(ix)
                assert expiring == 50
                total += expiry_keys + expiring * NODE_OVERHEAD
            expected[ix.name] = _pages(total, page)
        tags = coll.index_named("tags_1")
        assert tags is not None and r.index_footprint(tags)[0] == 100  # multikey: counted
    # Fewer entries than the sample: the sampled estimate of a one-entry-per-document index is
    # the count itself.
    assert sizes == expected
    records = _sizes(engine).data_size + 50 * (16 + ttl.HEAD_LEN + NODE_OVERHEAD)
    assert _sizes(engine).storage_size == _pages(records, page)


def test_an_empty_collection_takes_a_page_per_tree(engine: Engine) -> None:
    engine.create_collection(DB, "c")
    page = engine.env.page_size
    assert _sizes(engine) == CollectionSizes(0, 0, page, (("_id_", page),))


def test_storage_stats_document(engine: Engine) -> None:
    _load(engine)
    sizes = _sizes(engine)
    doc = storage_stats(coll_of(engine), sizes, 1000)
    assert list(doc) == STORAGE_STATS_FIELDS
    assert doc["size"] == sizes.data_size // 1000
    assert doc["avgObjSize"] == sizes.avg_obj_size  # never scaled
    assert doc["totalSize"] == (sizes.storage_size + sizes.total_index_size) // 1000
    assert doc["indexSizes"] == {n: s // 1000 for n, s in sizes.index_sizes}
    assert (doc["nindexes"], doc["scaleFactor"], doc["capped"]) == (4, 1000, False)


def test_empty_collection_has_no_avg_obj_size() -> None:
    from ebbdb.storage.catalog.info import CollectionInfo

    coll = CollectionInfo(1, DB, "c", {}, ())
    assert "avgObjSize" not in storage_stats(coll, CollectionSizes(0, 0, 4096, ()), 1)


def test_numbers_are_int32_below_two_to_the_thirty() -> None:
    assert type(number((1 << 30) - 1)) is int
    assert type(number(-(1 << 30) + 1)) is int
    assert number(1 << 30) == Int64(1 << 30) and type(number(1 << 30)) is Int64


def _run(engine: Engine, flt: dict[str, Any], max_docs: int = 1000) -> None:
    drain(engine, QueryRun(coll_of(engine), QuerySpec.parse(flt)), max_docs, now_ms=T0)


def test_a_query_counts_once_on_its_index_or_as_a_collection_scan(engine: Engine) -> None:
    _load(engine)
    coll = coll_of(engine)
    a_1 = coll.index_named("a_1")
    assert a_1 is not None
    assert engine.usage.index_accesses(a_1.id).ops == 0
    _run(engine, {"a": {"$gte": 0}}, max_docs=3)  # many batches, one query
    _run(engine, {"a": 7})
    assert engine.usage.index_accesses(a_1.id).ops == 2
    assert engine.usage.collection_scans(coll.id) == 0
    _run(engine, {"b": 1})
    _run(engine, {})
    assert engine.usage.collection_scans(coll.id) == 2
    assert engine.usage.index_accesses(coll.id_index.id).ops == 0


def test_an_index_counts_from_its_creation(engine: Engine) -> None:
    opened = engine.usage.opened_ms
    _load(engine)
    coll = coll_of(engine)
    for ix in coll.indexes:
        assert engine.usage.index_accesses(ix.id).since_ms >= opened
