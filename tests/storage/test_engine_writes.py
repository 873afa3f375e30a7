"""Writes in the engine: CollectionWrites (replace, delete and insert inside one write transaction,
with index, expiry and statistics bookkeeping) and storage/execution/writes.py (update, delete and
findAndModify matching through the query engine, so expired documents are never touched).
Time is injected as `now_ms`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import bson
import pytest
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core.errors import DuplicateKey, QueryError
from ebbdb.storage.engine.store import CODEC, CollectionWrites, Engine
from ebbdb.storage.execution import writes
from ebbdb.storage.execution.execute import QueryRun, QuerySpec
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes.specs import parse_index_spec
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.projection import parse_projection
from ebbdb.storage.query.update import parse_update
from tests.helpers import drain, enc

DB = "db"
T0 = 1_700_000_000_000
SECOND = 1000


def create(engine: Engine, *specs: Mapping[str, Any], name: str = "c") -> None:
    engine.create_indexes(DB, name, [parse_index_spec(s) for s in specs])


def load(engine: Engine, *docs: Mapping[str, Any], now: int = T0) -> None:
    result = engine.insert(DB, "c", [enc(d) for d in docs], now_ms=now)
    assert not result.errors


def find(
    engine: Engine, flt: Mapping[str, Any] | None = None, now: int = T0, **kw: Any
) -> list[Any]:
    coll = engine.collection(DB, "c")
    if coll is None:
        return []
    run = QueryRun(coll, QuerySpec.parse(dict(flt or {}), **kw))
    return [bson.decode(raw, CODEC) for raw in drain(engine, run, now_ms=now)]


def stats(engine: Engine) -> tuple[int, int]:
    coll = engine.collection(DB, "c")
    assert coll is not None
    with engine.read() as r:
        return r.stats(coll)


def stored_sizes(engine: Engine) -> int:
    coll = engine.collection(DB, "c")
    assert coll is not None
    with engine.read() as r:
        return sum(len(ttl.body(v)) for _rid, v in r.scan(coll))


def update(
    engine: Engine,
    flt: Mapping[str, Any],
    change: Mapping[str, Any],
    multi: bool = False,
    upsert: bool = False,
    now: int = T0,
) -> writes.UpdateResult:
    return writes.update(
        engine, DB, "c", QuerySpec.parse(dict(flt)), parse_update(dict(change)), multi, upsert, now
    )


# -- CollectionWrites ------------------------------------------------------------------------------


def test_replace_moves_index_entries_and_keeps_stats(engine: Engine) -> None:
    create(engine, {"key": {"k": 1}, "name": "k_1"}, {"key": {"tags": 1}, "name": "tags_1"})
    load(engine, {"_id": 1, "k": 1, "tags": ["a"]}, {"_id": 2, "k": 2})
    r = update(engine, {"_id": 1}, {"$set": {"k": 10, "tags": ["b", "c"]}})
    assert (r.matched, r.modified) == (1, 1)
    assert find(engine, {"k": 1}, hint="k_1") == []
    assert find(engine, {"k": 10}, hint="k_1") == [{"_id": 1, "k": 10, "tags": ["b", "c"]}]
    assert find(engine, {"tags": "a"}, hint="tags_1") == []
    assert [d["_id"] for d in find(engine, {"tags": "c"}, hint="tags_1")] == [1]
    coll = engine.collection(DB, "c")
    assert coll is not None
    assert [ix.multikey for ix in coll.indexes if ix.name == "tags_1"] == [True]
    assert stats(engine) == (2, stored_sizes(engine))


def test_unique_index_kept_through_replace(engine: Engine) -> None:
    create(engine, {"key": {"k": 1}, "name": "k_1", "unique": True})
    load(engine, {"_id": 1, "k": 1}, {"_id": 2, "k": 2})
    # Re-writing a document with its own unique key is not a conflict.
    assert update(engine, {"_id": 1}, {"$set": {"x": 1}}).modified == 1
    r = update(engine, {"_id": 2}, {"$set": {"k": 1}})
    assert isinstance(r.error, DuplicateKey) and (r.matched, r.modified) == (0, 0)
    # Freeing a key lets another document take it.
    assert update(engine, {"_id": 1}, {"$set": {"k": 3}}).modified == 1
    assert update(engine, {"_id": 2}, {"$set": {"k": 1}}).modified == 1
    assert [d["_id"] for d in find(engine, {"k": 1}, hint="k_1")] == [2]


def test_modify_rolls_back_when_fn_raises(engine: Engine) -> None:
    load(engine, {"_id": 1})

    def fail(view: CollectionWrites) -> None:
        view.insert(enc({"_id": 2}))
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        engine.modify(DB, "c", fail, T0)
    assert find(engine) == [{"_id": 1}]
    assert stats(engine)[0] == 1


def test_replace_refreshes_last_modified(engine: Engine) -> None:
    load(engine, {"_id": 1, "v": 0})
    update(engine, {"_id": 1}, {"$set": {"v": 1}}, now=T0 + 5 * SECOND)
    coll = engine.collection(DB, "c")
    assert coll is not None
    with engine.read() as r:
        ((_rid, value),) = list(r.scan(coll))
    assert ttl.read_meta(value).modified == T0 + 5 * SECOND


def test_too_large_update_is_refused(engine: Engine) -> None:
    load(engine, {"_id": 1})
    r = update(engine, {"_id": 1}, {"$set": {"big": "x" * (16 * 1024 * 1024)}})
    assert isinstance(r.error, QueryError) and r.error.code_name == "Location17419"
    assert find(engine) == [{"_id": 1}]


# -- update, delete, findAndModify -----------------------------------------------------------------


def test_multi_update_spans_slices(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writes, "SLICE_DOCUMENTS", 7)
    load(engine, *({"_id": i, "v": i} for i in range(30)))
    r = update(engine, {"v": {"$gte": 5}}, {"$inc": {"v": 100}}, multi=True)
    assert (r.matched, r.modified) == (25, 25)
    assert sorted(d["v"] for d in find(engine)) == [*range(5), *range(105, 130)]


def test_update_does_not_revisit_moved_documents(engine: Engine) -> None:
    create(engine, {"key": {"v": 1}, "name": "v_1"})
    load(engine, *({"_id": i, "v": i} for i in range(10)))
    # Each matched document moves ahead in the index it is found by; it is changed once only.
    r = update(engine, {"v": {"$gte": 0}}, {"$inc": {"v": 100}}, multi=True)
    assert r.modified == 10
    assert sorted(d["v"] for d in find(engine)) == list(range(100, 110))


def test_upsert_inserts_once(engine: Engine) -> None:
    r = update(engine, {"name": "x"}, {"$inc": {"n": 1}}, upsert=True)
    assert r.matched == 0 and r.upserted_id is not MISSING
    assert find(engine) == [{"_id": r.upserted_id, "name": "x", "n": 1}]
    r = update(engine, {"name": "x"}, {"$inc": {"n": 1}}, upsert=True)
    assert (r.matched, r.modified, r.upserted_id) == (1, 1, MISSING)


def test_delete_one_and_many(engine: Engine) -> None:
    load(engine, *({"_id": i, "even": i % 2 == 0} for i in range(10)))
    spec = QuerySpec.parse({"even": True})
    assert writes.delete(engine, DB, "c", spec, True, T0).deleted == 1
    assert writes.delete(engine, DB, "c", spec, False, T0).deleted == 4
    assert stats(engine) == (5, stored_sizes(engine))
    assert writes.delete(engine, DB, "missing", spec, False, T0).deleted == 0


def test_find_and_modify_sort_projection_and_new(engine: Engine) -> None:
    load(engine, {"_id": 1, "q": 3}, {"_id": 2, "q": 9})
    result = writes.find_and_modify(
        engine,
        DB,
        "c",
        QuerySpec.parse({}, sort={"q": -1}),
        remove=False,
        change=parse_update({"$inc": {"q": 1}}),
        upsert=False,
        return_new=True,
        fields=parse_projection({"q": 1, "_id": 0}),
        now_ms=T0,
    )
    assert (result.value, result.matched, result.updated_existing) == ({"q": 10}, 1, True)


# -- expired documents are never matched -----------------------------------------------------------


@pytest.fixture
def expiring(engine: Engine) -> Engine:
    """ids 1-3 expire at T0 + 60 s (TTL index on `at`), ids 4-5 never."""
    create(engine, {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 60})
    load(engine, *({"_id": i, "at": DatetimeMS(T0), "g": 1} for i in (1, 2, 3)))
    load(engine, {"_id": 4, "g": 1}, {"_id": 5, "g": 1})
    return engine


LATER = T0 + 61 * SECOND


def test_update_and_delete_skip_expired(expiring: Engine) -> None:
    assert update(expiring, {"g": 1}, {"$set": {"x": 1}}, multi=True, now=LATER).matched == 2
    assert update(expiring, {"g": 1}, {"$set": {"x": 1}}, multi=True, now=T0).matched == 5
    spec = QuerySpec.parse({"g": 1})
    assert writes.delete(expiring, DB, "c", spec, False, LATER).deleted == 2
    assert expiring.purge_expired(DB, "c", LATER, 100) == 3


def test_upsert_over_expired_id_takes_it_over(expiring: Engine) -> None:
    r = update(expiring, {"_id": 1}, {"$set": {"y": 1}}, upsert=True, now=LATER)
    assert r.upserted_id == 1
    assert find(expiring, {"_id": 1}, now=LATER) == [{"_id": 1, "y": 1}]
    assert stats(expiring) == (5, stored_sizes(expiring))


def test_find_and_modify_skips_expired(expiring: Engine) -> None:
    def fam(now: int) -> Any:
        return writes.find_and_modify(
            expiring,
            DB,
            "c",
            QuerySpec.parse({}, sort={"_id": 1}),
            remove=True,
            change=None,
            upsert=False,
            return_new=False,
            fields=None,
            now_ms=now,
        ).value

    assert fam(LATER) == {"_id": 4, "g": 1}
    assert fam(T0)["_id"] == 1


def test_counts_exact_when_the_map_grows_mid_update(tmp_path: Any) -> None:
    """A write transaction that fills the map is run again from the start in a bigger one; the
    statement's counts must not count the abandoned attempt."""
    eng = Engine.open(str(tmp_path / "small"), map_size=1 << 20)
    try:
        eng.insert(DB, "c", [enc({"_id": i}) for i in range(200)], now_ms=T0)
        start = eng.map_size
        r = update(eng, {}, {"$set": {"pad": "x" * 20_000}}, multi=True)
        assert eng.map_size > start
        assert (r.matched, r.modified, r.error) == (200, 200, None)
        assert stats(eng) == (200, stored_sizes(eng))
    finally:
        eng.close()


def test_insert_slices_bound_documents_and_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writes, "INSERT_SLICE_DOCUMENTS", 3)
    monkeypatch.setattr(writes, "INSERT_SLICE_BYTES", 100)
    docs = [b"x" * 10] * 7 + [b"y" * 150, b"z" * 60, b"z" * 60]
    assert list(writes.insert_slices(docs, 0, len(docs))) == [
        (0, 3),
        (3, 6),
        (6, 7),
        (7, 8),
        (8, 9),
        (9, 10),
    ]
    assert list(writes.insert_slices(docs, 2, 5)) == [(2, 5)]


def test_sliced_insert_reports_errors_in_the_whole_batch(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writes, "INSERT_SLICE_DOCUMENTS", 4)
    docs = [bson.encode({"_id": i}) for i in range(10)]
    docs[6] = bson.encode({"_id": 1})
    ordered = writes.insert(engine, DB, "o", docs, True, T0)
    assert (ordered.inserted, [i for i, _ in ordered.errors]) == (6, [6])
    unordered = writes.insert(engine, DB, "u", docs, False, T0)
    assert (unordered.inserted, [i for i, _ in unordered.errors]) == (9, [6])
