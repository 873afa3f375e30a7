"""TTL in the engine (spec/ttl.md, collMod and section 3): collMod on TTL indexes, hiding expired
documents from reads and taking over their keys on insert, purge_expired (exact, batched, complete,
cost by the number expired), restarts, and TTL indexes built over existing documents. Time is
injected as `now_ms`; nothing sleeps."""

from __future__ import annotations

from typing import Any

import bson
import pytest
from bson import Int64

from ebbdb.storage.core.errors import DuplicateKey, QueryError, StorageError
from ebbdb.storage.engine.store import CODEC, Engine, IndexChange, InsertResult
from ebbdb.storage.engine.validate import validate_collection
from ebbdb.storage.execution.execute import QueryRun, QuerySpec, count_documents
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes.specs import parse_index_spec
from tests.helpers import enc
from tests.storage.ttl_support import (
    DB,
    FAR,
    MAX32,
    T0,
    D,
    assert_stats_match,
    check_schedule,
    coll_of,
    create,
    expiring,
    find,
    records,
    stats,
    visible,
)

DAY = 86_400_000


def rids(engine: Engine, name: str = "c") -> dict[Any, int]:
    with engine.read() as r:
        return {
            bson.decode(ttl.body(v), CODEC)["_id"]: rid for rid, v in r.scan(coll_of(engine, name))
        }


def only_error(result: InsertResult) -> StorageError:
    """The one error of a one-document insert that failed."""
    assert result.inserted == 0
    [(index, exc)] = result.errors
    assert index == 0
    return exc


def reopen(engine: Engine) -> Engine:
    path = engine.path
    engine.close()
    return Engine.open(path)


# -- collMod -----------------------------------------------------------------------------------------


@pytest.fixture
def collmod(engine: Engine) -> Engine:
    """db.c with a TTL index t_1 (E = 10), a plain single-field index n_1, a compound index,
    two {p: 1} indexes that differ by partial filter, and one document."""
    create(
        engine,
        "c",
        expiring("t", 10),
        {"key": {"n": 1}},
        {"key": {"a": 1, "b": 1}, "name": "ab"},
        {"key": {"p": 1}, "name": "p_x", "partialFilterExpression": {"x": 1}},
        {"key": {"p": 1}, "name": "p_y", "partialFilterExpression": {"y": 1}},
    )
    engine.insert(DB, "c", [enc({"_id": 1, "t": D(T0), "n": D(T0)})], now_ms=T0)
    return engine


Change = IndexChange
# (key pattern, index name, expireAfterSeconds, hidden) -> IndexChange or the error's codeName.
COLLMOD: list[tuple[str, dict[str, Any] | None, str | None, int | None, bool | None, Any]] = [
    ("ttl_by_key", {"t": 1}, None, 20, None, Change(10, 20)),
    ("ttl_by_name", None, "t_1", 20, None, Change(10, 20)),
    ("ttl_same_value", None, "t_1", 10, None, Change(10, 10)),
    ("ttl_double_key", {"t": 1.0}, None, 0, None, Change(10, 0)),
    ("ttl_int64_key", {"t": Int64(1)}, None, MAX32, None, Change(10, MAX32)),
    ("convert_by_key", {"n": 1}, None, 5, None, Change(None, 5)),
    ("convert_by_name", None, "n_1", 0, None, Change(None, 0)),
    ("convert_partial_by_name", None, "p_x", 5, None, Change(None, 5)),
    ("compound_by_name", None, "ab", 5, None, "InvalidOptions"),
    ("compound_by_key", {"a": 1, "b": 1}, None, 5, None, "InvalidOptions"),
    ("id_by_name", None, "_id_", 5, None, "InvalidOptions"),
    ("id_by_key", {"_id": 1}, None, 5, None, "InvalidOptions"),
    ("negative_ttl", None, "t_1", -1, None, "InvalidOptions"),
    ("negative_convert", None, "n_1", -5, None, "InvalidOptions"),
    ("name_and_key", {"t": 1}, "t_1", 20, None, "InvalidOptions"),
    ("neither", None, None, 20, None, "InvalidOptions"),
    ("no_such_name", None, "nope", 20, None, "IndexNotFound"),
    ("no_such_key", {"zz": 1}, None, 20, None, "IndexNotFound"),
    ("other_direction", {"t": -1}, None, 20, None, "IndexNotFound"),
    ("ambiguous_key", {"p": 1}, None, 5, None, "AmbiguousIndexKeyPattern"),
    ("hide", None, "t_1", None, True, Change(hidden_old=False, hidden_new=True)),
    ("unhide_unhidden", None, "t_1", None, False, Change()),
    ("hide_and_ttl", {"t": 1}, None, 30, True, Change(10, 30, False, True)),
    ("hide_plain", None, "n_1", None, True, Change(hidden_old=False, hidden_new=True)),
]


@pytest.mark.parametrize(
    ("tag", "key", "name", "expire", "hidden", "want"), COLLMOD, ids=[r[0] for r in COLLMOD]
)
def test_collmod_table(
    collmod: Engine,
    tag: str,
    key: dict[str, Any] | None,
    name: str | None,
    expire: int | None,
    hidden: bool | None,
    want: Any,
) -> None:
    before = coll_of(collmod)
    if isinstance(want, str):
        with pytest.raises(QueryError) as info:
            collmod.modify_index(DB, "c", key, name, expire, hidden)
        assert info.value.code_name == want
        assert coll_of(collmod).indexes == before.indexes
        return
    target_id = next(
        ix.id for ix in before.indexes if ix.name == name or (name is None and dict(ix.key) == key)
    )
    assert collmod.modify_index(DB, "c", key, name, expire, hidden) == want
    changed = [
        (old, new) for old, new in zip(before.indexes, coll_of(collmod).indexes) if old != new
    ]
    assert len(changed) <= 1
    if expire is not None:
        [new] = [ix for ix in coll_of(collmod).indexes if ix.id == target_id]
        assert new.options["expireAfterSeconds"] == expire
        assert (new, expire) in ttl.rules_for(coll_of(collmod)).native
    if want.hidden_new is not None:
        assert changed[0][1].hidden is want.hidden_new


def test_collmod_no_such_collection(engine: Engine) -> None:
    for key, name, expire, hidden in (({"t": 1}, None, 10, None), (None, "t_1", None, True)):
        with pytest.raises(StorageError) as info:
            engine.modify_index(DB, "missing", key, name, expire, hidden)
        assert info.value.code_name == "NamespaceNotFound"


def test_collmod_hidden_is_reported_only_when_it_changes(collmod: Engine) -> None:
    steps = [
        (True, Change(hidden_old=False, hidden_new=True)),
        (True, Change()),
        (False, Change(hidden_old=True, hidden_new=False)),
        (False, Change()),
    ]
    for hidden, want in steps:
        assert collmod.modify_index(DB, "c", None, "t_1", None, hidden) == want
        assert coll_of(collmod).index_named("t_1").hidden is hidden  # type: ignore[union-attr]
    # A hidden TTL index's E can still change, and it still expires documents.
    collmod.modify_index(DB, "c", None, "t_1", None, True)
    assert collmod.modify_index(DB, "c", None, "t_1", 20, True) == Change(10, 20)
    check_schedule(collmod, {1: T0 + 20_000})


def test_new_expire_takes_effect_at_once(engine: Engine) -> None:
    """Shorter E: documents become hidden at once and the next purge deletes them; longer E:
    documents not yet deleted become visible again."""
    create(engine, "c", expiring("t", 100))
    docs = [enc({"_id": i, "t": D(T0 + i * 1000)}) for i in range(10)]
    engine.insert(DB, "c", docs, now_ms=T0)
    now = T0 + 50_000
    assert visible(engine, now) == set(range(10))
    assert engine.modify_index(DB, "c", {"t": 1}, None, 45, None) == Change(100, 45)
    assert visible(engine, now) == set(range(6, 10))  # t + 45 s <= now for i <= 5
    assert count_documents(engine, coll_of(engine), now) == 4
    assert engine.modify_index(DB, "c", None, "t_1", 1000, None) == Change(45, 1000)
    assert visible(engine, now) == set(range(10))
    assert engine.purge_expired(DB, "c", now, 100) == 0
    engine.modify_index(DB, "c", None, "t_1", 47, None)
    assert visible(engine, now) == set(range(4, 10))
    assert engine.purge_expired(DB, "c", now, 100) == 4
    assert set(records(engine)) == set(range(4, 10))
    engine.modify_index(DB, "c", None, "t_1", 0, None)
    check_schedule(engine, {i: T0 + i * 1000 for i in range(4, 10)})


def test_collmod_converts_a_single_field_index(engine: Engine) -> None:
    """A plain index made TTL by collMod: documents already there and documents inserted later
    expire under it, and the index still serves queries."""
    create(engine, "c", {"key": {"n": 1}}, {"key": {"q.r": 1}, "name": "qr"})
    engine.insert(
        DB,
        "c",
        [
            enc({"_id": "date", "n": D(T0)}),
            enc({"_id": "array", "n": [3, D(T0 + 500), D(T0 + 200)]}),
            enc({"_id": "number", "n": 3}),
            enc({"_id": "missing"}),
            enc({"_id": "nested", "q": [{"r": D(T0 + 7)}]}),
        ],
        now_ms=T0,
    )
    assert not ttl.rules_for(coll_of(engine)).active
    assert engine.modify_index(DB, "c", {"n": 1}, None, 5, None) == Change(None, 5)
    assert engine.modify_index(DB, "c", None, "qr", 0, None) == Change(None, 0)
    engine.insert(DB, "c", [enc({"_id": "later", "n": D(T0 + 1)})], now_ms=T0 + 1)
    expected = {
        "date": T0 + 5_000,
        "array": T0 + 5_200,
        "number": None,
        "missing": None,
        "nested": T0 + 7,
        "later": T0 + 5_001,
    }
    found = find(engine, T0 + 5_000, {"n": {"$exists": True}}, hint="n_1")
    assert {d["_id"] for d in found} == {"array", "number", "later"}
    check_schedule(engine, expected)


def test_collmod_on_the_ts_index_changes_the_default(engine: Engine) -> None:
    create(engine, "c", expiring("_ts", 10))
    engine.insert(
        DB,
        "c",
        [enc({"_id": "plain"}), enc({"_id": "ttl5", "ttl": 5}), enc({"_id": "keep", "ttl": -1})],
        now_ms=T0,
    )
    now = T0 + 20_000
    assert visible(engine, now) == {"keep"}
    assert engine.modify_index(DB, "c", {"_ts": 1}, None, -1, None) == Change(10, -1)
    assert ttl.rules_for(coll_of(engine)).cosmos == -1
    assert visible(engine, now) == {"plain", "keep"}  # D = -1: only a document's own ttl counts
    assert engine.purge_expired(DB, "c", now, 100) == 1
    assert set(records(engine)) == {"plain", "keep"}
    for bad in (0, -2, MAX32 + 1):
        with pytest.raises(QueryError):
            engine.modify_index(DB, "c", None, "_ts_1", bad, None)
        assert ttl.rules_for(coll_of(engine)).cosmos == -1
    assert engine.modify_index(DB, "c", None, "_ts_1", 30, None) == Change(-1, 30)
    assert visible(engine, now) == {"plain", "keep"}
    assert engine.modify_index(DB, "c", None, "_ts_1", 20, None) == Change(30, 20)
    assert visible(engine, now) == {"keep"}
    check_schedule(engine, {"plain": T0 + 20_000, "keep": None})


def test_collmod_converts_a_plain_ts_index_to_the_cosmos_default(engine: Engine) -> None:
    """A plain index on a client `_ts` field, made TTL by collMod, becomes the Cosmos default:
    expiry follows the server's last-modified time, never the client's field, which stays data."""
    create(engine, "c", {"key": {"_ts": 1}})
    docs = [
        {"_id": "old_ts", "_ts": D(0)},
        {"_id": "future_ts", "_ts": D(T0 + DAY)},
        {"_id": "no_ts"},
        {"_id": "own", "ttl": 2},
    ]
    engine.insert(DB, "c", [enc(d) for d in docs], now_ms=T0)
    assert engine.modify_index(DB, "c", None, "_ts_1", 10, None) == Change(None, 10)
    assert ttl.rules_for(coll_of(engine)).cosmos == 10
    assert [d["_id"] for d in find(engine, T0, {"_ts": D(0)})] == ["old_ts"]
    check_schedule(
        engine,
        {"old_ts": T0 + 10_000, "future_ts": T0 + 10_000, "no_ts": T0 + 10_000, "own": T0 + 2_000},
    )


def test_one_cosmos_default_per_collection(engine: Engine) -> None:
    """A second TTL index on `_ts` (another direction, or a plain one made TTL) is refused: the
    collection has one default time to live, and its expiry entries follow that one index."""
    create(engine, "c", expiring("_ts", 10))
    with pytest.raises(QueryError) as info:
        create(engine, "c", {"key": {"_ts": -1}, "expireAfterSeconds": 20})
    assert info.value.code_name == "CannotCreateIndex"
    create(engine, "c", {"key": {"_ts": -1}})  # a plain index on a client `_ts` field is fine
    with pytest.raises(QueryError) as info:
        engine.modify_index(DB, "c", None, "_ts_-1", 20, None)
    assert info.value.code_name == "InvalidOptions"
    assert ttl.rules_for(coll_of(engine)).cosmos == 10
    # Once the default is dropped, another may take its place.
    engine.drop_indexes(DB, "c", "_ts_1")
    assert engine.modify_index(DB, "c", None, "_ts_-1", 20, None) == Change(None, 20)


# -- hiding ----------------------------------------------------------------------------------------


@pytest.fixture
def mixed(engine: Engine) -> Engine:
    """db.c: 30 documents, _id i expires at T0 + i s (i even, by date) or never (i odd), with a
    secondary index on k and a multikey index on tags."""
    create(
        engine,
        "c",
        expiring("t", 0),
        {"key": {"k": 1}},
        {"key": {"tags": 1}},
    )
    docs = []
    for i in range(30):
        doc: dict[str, Any] = {"_id": i, "k": i % 3, "tags": ["a", f"t{i % 2}"]}
        if i % 2 == 0:
            doc["t"] = D(T0 + i * 1000)
        docs.append(enc(doc))
    engine.insert(DB, "c", docs, now_ms=T0)
    return engine


def mixed_alive(now: int) -> set[int]:
    return {i for i in range(30) if i % 2 or T0 + i * 1000 > now}


def unordered(ids: set[int]) -> list[int]:
    return sorted(ids)


# (tag, filter, other find options, which live documents match, how the result is ordered: None
# when any order will do).
QUERIES: list[tuple[str, dict[str, Any] | None, dict[str, Any], Any, Any]] = [
    ("plain", None, {}, None, None),
    ("filter", {"k": {"$gte": 0}}, {}, None, None),
    ("index_k", {"k": {"$in": [0, 1, 2]}}, {"hint": "k_1"}, None, None),
    ("multikey", {"tags": "a"}, {"hint": "tags_1"}, None, None),
    ("ttl_index", {"t": {"$exists": True}}, {"hint": "t_1"}, lambda i: i % 2 == 0, None),
    (
        "sorted",
        None,
        {"sort": {"k": -1, "_id": 1}},
        None,
        lambda ids: sorted(ids, key=lambda i: (-(i % 3), i)),
    ),
    ("sorted_by_index", None, {"sort": {"_id": -1}}, None, lambda ids: sorted(ids, reverse=True)),
    ("skip", None, {"skip": 3, "sort": {"_id": 1}}, None, lambda ids: sorted(ids)[3:]),
    ("limit", None, {"limit": 4, "sort": {"_id": 1}}, None, lambda ids: sorted(ids)[:4]),
    ("projection", None, {"projection": {"k": 1}}, None, None),
]


@pytest.mark.parametrize(
    ("tag", "flt", "spec", "matches", "order"), QUERIES, ids=[q[0] for q in QUERIES]
)
def test_reads_hide_expired_documents(
    mixed: Engine,
    tag: str,
    flt: dict[str, Any] | None,
    spec: dict[str, Any],
    matches: Any,
    order: Any,
) -> None:
    for now in (T0 - 1, T0, T0 + 9_999, T0 + 10_000, T0 + 29_000, FAR):
        alive = {i for i in mixed_alive(now) if matches is None or matches(i)}
        got = [d["_id"] for d in find(mixed, now, flt, max_docs=4, **spec)]
        if order is None:
            assert len(got) == len(set(got))
            assert set(got) == alive, now
        else:
            assert got == order(alive), now


def test_each_batch_hides_what_expired_since_the_last(mixed: Engine) -> None:
    """getMore checks expiry per batch: a run started before documents expired does not return
    them in later batches."""
    for spec in ({}, {"hint": {"_id": 1}}, {"hint": "k_1"}):
        run = QueryRun(coll_of(mixed), QuerySpec.parse({"k": {"$gte": 0}}, **spec))
        first = run.next_chunk(mixed, 5, 1 << 30, now_ms=T0 - 1)
        assert len(first) == 5
        seen = [bson.decode(raw, CODEC)["_id"] for raw in first]
        later = T0 + 29_000  # every even _id has expired
        while not run.exhausted:
            seen += [
                bson.decode(r, CODEC)["_id"]
                for r in run.next_chunk(mixed, 5, 1 << 30, now_ms=later)
            ]
        assert len(seen) == len(set(seen))
        rest = set(seen[5:])
        assert rest <= mixed_alive(later)
        assert set(seen) == set(seen[:5]) | (mixed_alive(later) - set(seen[:5]))


def test_counts_hide_expired_documents(mixed: Engine) -> None:
    coll = coll_of(mixed)
    for now in (T0 - 1, T0, T0 + 1, T0 + 14_000, FAR):
        assert count_documents(mixed, coll, now) == len(mixed_alive(now)), now
        assert mixed.count_expired(coll, now) == 30 - len(mixed_alive(now)), now
    assert stats(mixed)[0] == 30  # nothing deleted by reading


# -- taking over keys held by expired documents ------------------------------------------------------


def test_insert_takes_over_an_id_held_by_an_expired_document(engine: Engine) -> None:
    create(engine, "c", expiring("t", 0))
    engine.insert(DB, "c", [enc({"_id": 1, "t": D(T0)}), enc({"_id": 2})], now_ms=T0 - 10)
    new = enc({"_id": 1, "v": 2})
    early = engine.insert(DB, "c", [new], now_ms=T0 - 1)
    assert early.inserted == 0
    exc = only_error(early)
    assert isinstance(exc, DuplicateKey)
    assert exc.index_name == "_id_"
    result = engine.insert(DB, "c", [new], now_ms=T0)
    assert (result.inserted, result.errors) == (1, ())
    stored = records(engine)
    assert set(stored) == {1, 2}
    assert ttl.body(stored[1]) == new
    assert ttl.read_meta(stored[1]) == ttl.RecordMeta(T0, 0, ())
    assert_stats_match(engine)
    assert [d.get("v") for d in find(engine, FAR, {"_id": 1})] == [2]
    assert engine.purge_expired(DB, "c", FAR, 100) == 0
    with engine.read() as r:
        assert r.find_unique(coll_of(engine).id_index, 1) == rids(engine)[1]


def test_insert_takes_over_a_unique_key_held_by_an_expired_document(engine: Engine) -> None:
    create(
        engine,
        "c",
        expiring("_ts", 10),
        {"key": {"u": 1}, "unique": True},
        {"key": {"k": 1}},
    )
    engine.insert(
        DB,
        "c",
        [enc({"_id": "old", "u": "key", "k": 1}), enc({"_id": "own", "u": "own", "ttl": 3})],
        now_ms=T0,
    )
    engine.insert(DB, "c", [enc({"_id": "live", "u": "live", "k": 1})], now_ms=T0 + 9_000)
    attempt = [enc({"_id": "new", "u": "key", "k": 2})]
    exc = only_error(engine.insert(DB, "c", attempt, now_ms=T0 + 9_999))
    assert isinstance(exc, DuplicateKey) and exc.index_name == "u_1"
    assert engine.insert(DB, "c", attempt, now_ms=T0 + 10_000).inserted == 1
    # A document's own ttl expires it too; its key is then free.
    assert engine.insert(DB, "c", [enc({"_id": 5, "u": "own"})], now_ms=T0 + 3_000).inserted == 1
    assert set(records(engine)) == {"live", "new", 5}
    assert_stats_match(engine)
    assert [d["_id"] for d in find(engine, T0 + 10_000, {"k": {"$gte": 0}}, hint="k_1")] == [
        "live",
        "new",
    ]
    # The live document still holds its key.
    exc = only_error(engine.insert(DB, "c", [enc({"_id": 6, "u": "live"})], now_ms=T0 + 18_999))
    assert isinstance(exc, DuplicateKey)
    check_schedule(engine, {"live": T0 + 19_000, "new": T0 + 20_000, 5: T0 + 13_000})


def test_one_expired_document_holding_id_and_unique_key(engine: Engine) -> None:
    create(engine, "c", expiring("t", 1), {"key": {"u": 1}, "unique": True})
    engine.insert(
        DB, "c", [enc({"_id": 1, "u": 1, "t": D(T0)}), enc({"_id": 2, "u": 2})], now_ms=T0
    )
    new = enc({"_id": 1, "u": 1, "x": "new"})
    assert engine.insert(DB, "c", [new], now_ms=T0 + 1_000).inserted == 1
    assert ttl.body(records(engine)[1]) == new
    assert stats(engine)[0] == 2
    assert_stats_match(engine)
    check_schedule(engine, {1: None, 2: None})


def test_live_holder_wins_even_when_an_expired_one_holds_another_key(engine: Engine) -> None:
    """_id held by an expired document, unique key by a live one: the insert fails."""
    create(engine, "c", expiring("t", 0), {"key": {"u": 1}, "unique": True})
    engine.insert(DB, "c", [enc({"_id": 1, "t": D(T0)}), enc({"_id": 2, "u": "k"})], now_ms=T0 - 5)
    exc = only_error(engine.insert(DB, "c", [enc({"_id": 1, "u": "k"})], now_ms=T0))
    assert isinstance(exc, DuplicateKey) and exc.index_name == "u_1"
    assert visible(engine, T0) == {2}
    assert [d.get("u") for d in find(engine, T0, {"_id": 2})] == ["k"]
    assert_stats_match(engine)
    assert count_documents(engine, coll_of(engine), T0) == 1


@pytest.mark.parametrize(
    ("index", "doc"),
    [
        (expiring("t", 0), {"t": D(T0 + 1)}),  # not yet expired
        (expiring("t", 0), {"t": "2000-01-01"}),  # never expires
        (
            expiring("t", 0, partialFilterExpression={"tmp": True}),
            {"t": D(0)},
        ),
        (expiring("_ts", -1), {}),
        (expiring("_ts", 1), {"ttl": -1}),
        (expiring("_ts", 10), {"ttl": 1.5, "_ts": D(0)}),
        (None, {"t": D(0), "ttl": 1}),
    ],
    ids=[
        "not_yet",
        "text_date",
        "partial_rejects",
        "ts_minus_one",
        "ttl_minus_one",
        "ignored_ttl",
        "no_ttl_index",
    ],
)
def test_live_documents_keep_their_keys(
    engine: Engine, index: dict[str, Any] | None, doc: dict[str, Any]
) -> None:
    if index is not None:
        create(engine, "c", index)
    create(engine, "c", {"key": {"u": 1}, "unique": True})
    engine.insert(DB, "c", [enc({"_id": 1, "u": 1, **doc})], now_ms=T0 - 2_000)
    for clash in ({"_id": 1}, {"_id": 2, "u": 1}):
        exc = only_error(engine.insert(DB, "c", [enc(clash)], now_ms=T0))
        assert isinstance(exc, DuplicateKey)
    assert visible(engine, T0) == {1}
    assert_stats_match(engine)


def test_batch_takes_over_several_expired_documents(engine: Engine) -> None:
    create(engine, "c", expiring("t", 0), {"key": {"u": 1}, "unique": True})
    engine.insert(
        DB, "c", [enc({"_id": i, "u": i, "t": D(T0 + i)}) for i in range(10)], now_ms=T0 - 1
    )
    now = T0 + 4  # _id 0..4 expired
    batch = [enc({"_id": i, "u": 100 + i}) for i in range(10)] + [
        enc({"_id": 100 + i, "u": i}) for i in range(10)
    ]
    result = engine.insert(DB, "c", batch, ordered=False, now_ms=now)
    assert result.inserted == 10
    assert sorted(i for i, _ in result.errors) == [*range(5, 10), *range(15, 20)]
    assert all(isinstance(e, DuplicateKey) for _, e in result.errors)
    assert set(records(engine)) == {*range(10), *range(100, 105)}
    assert_stats_match(engine)
    assert count_documents(engine, coll_of(engine), now) == 15


def test_insert_with_the_real_clock_takes_over(engine: Engine) -> None:
    create(engine, "c", expiring("t", 0))
    engine.insert(DB, "c", [enc({"_id": 1, "t": D(DAY)})], now_ms=0)
    assert engine.insert(DB, "c", [enc({"_id": 1, "x": 1})]).inserted == 1
    assert [d.get("x") for d in find(engine, FAR)] == [1]


# -- purge -----------------------------------------------------------------------------------------


def expiry_rids(engine: Engine, name: str = "c") -> set[int]:
    """Record ids with any expiry-index entry under the collection's indexes."""
    coll = coll_of(engine, name)
    out: set[int] = set()
    with engine.read() as r:
        for ix in coll.indexes:
            out |= set(r.expiry_entries(ix.id.to_bytes(8, "big"), (ix.id + 1).to_bytes(8, "big")))
    return out


def index_rids(engine: Engine, name: str = "c") -> dict[str, set[int]]:
    coll = coll_of(engine, name)
    with engine.read() as r:
        return {
            ix.name: {rid for _k, rid in r.index_entries(ix, b"", b"\xff" * 9, False, None)}
            for ix in coll.indexes
        }


def test_purge_deletes_in_batches_of_limit(engine: Engine) -> None:
    create(engine, "c", expiring("t", 60))
    docs = [enc({"_id": i, "t": D(T0 - 60_000 - i)}) for i in range(25)]
    docs += [enc({"_id": 100 + i, "t": D(T0 + i)}) for i in range(5)]
    engine.insert(DB, "c", docs, now_ms=T0)
    assert [engine.purge_expired(DB, "c", T0, 10) for _ in range(4)] == [10, 10, 5, 0]
    assert set(records(engine)) == set(range(100, 105))
    assert_stats_match(engine)
    assert engine.purge_expired(DB, "c", T0, 1) == 0
    assert [engine.purge_expired(DB, "c", T0 + 60_002, 1) for _ in range(4)] == [1, 1, 1, 0]


def test_purge_counts_a_document_once_under_several_indexes(engine: Engine) -> None:
    create(
        engine,
        "c",
        expiring("a", 0),
        expiring("b", 0),
        expiring("_ts", 1),
    )
    docs = [enc({"_id": i, "a": D(T0), "b": [D(T0), D(T0 - 1)], "ttl": 1}) for i in range(5)]
    engine.insert(DB, "c", docs, now_ms=T0)
    assert engine.count_expired(coll_of(engine), T0 + 1_000) == 5
    assert [engine.purge_expired(DB, "c", T0 + 1_000, 3) for _ in range(3)] == [3, 2, 0]
    assert records(engine) == {}
    assert expiry_rids(engine) == set()
    assert stats(engine) == (0, 0)


def test_purge_removes_every_trace(engine: Engine) -> None:
    """Index entries and expiry entries of purged documents go with them: a later purge finds
    nothing, index scans do not return them, and their unique keys are free at once."""
    create(
        engine,
        "c",
        expiring("t", 0),
        expiring("_ts", 100),
        {"key": {"u": 1}, "unique": True},
        {"key": {"k": 1}},
        {"key": {"tags": 1}},
        {"key": {"k": 1, "tags": 1}},
    )
    docs = {
        "date": {"t": [D(T0), D(T0 + 5)], "u": "a", "k": 1, "tags": ["x", "y"]},
        "own": {"ttl": 1, "u": "b", "k": 1, "tags": "x"},
        "default": {"u": "c", "k": 2},
        "live_date": {"t": D(FAR), "ttl": -1, "u": "d", "k": 1, "tags": ["x"]},
        "live": {"ttl": -1, "u": "e", "k": 2},
    }
    engine.insert(DB, "c", [enc({"_id": i, **d}) for i, d in docs.items()], now_ms=T0)
    before = rids(engine)
    assert expiry_rids(engine) == {before[i] for i in ("date", "own", "default", "live_date")}
    now = T0 + 100_000
    assert engine.count_expired(coll_of(engine), now) == 3
    assert engine.purge_expired(DB, "c", now, 1000) == 3
    live = {before["live_date"], before["live"]}
    assert set(records(engine)) == {"live_date", "live"}
    assert expiry_rids(engine) == {before["live_date"]}
    entries = index_rids(engine)
    assert all(found <= live for found in entries.values()), entries
    assert entries["_id_"] == entries["u_1"] == entries["k_1"] == live
    assert engine.purge_expired(DB, "c", now, 1000) == 0
    assert engine.purge_expired(DB, "c", FAR - 1, 1000) == 0
    assert engine.count_expired(coll_of(engine), FAR - 1) == 0
    assert [d["_id"] for d in find(engine, T0, {"k": 1}, hint="k_1")] == ["live_date"]
    assert [d["_id"] for d in find(engine, T0, {"tags": "x"}, hint="tags_1")] == ["live_date"]
    assert_stats_match(engine)
    # Keys free without any take-over: re-insert at a time when the old ones were still alive.
    again = [enc({"_id": i, **d}) for i, d in docs.items() if i in ("date", "own", "default")]
    result = engine.insert(DB, "c", again, now_ms=T0)
    assert (result.inserted, result.errors) == (3, ())
    assert_stats_match(engine)


def test_purge_cost_follows_the_number_expired(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20,000 live documents: purge_expired and count_expired apply the predicate only to the
    expired ones (found by range reads), never to the live ones."""
    create(
        engine,
        "c",
        expiring("t", 3600),
        expiring("_ts", 3600),
    )
    live = [enc({"_id": i, "t": D(T0)}) for i in range(20_000)]
    assert engine.insert(DB, "c", live, now_ms=T0).inserted == 20_000
    calls = 0
    real = ttl.expired_value

    def counting(value: bytes, rules: ttl.Rules, now_ms: int) -> bool:
        nonlocal calls
        calls += 1
        return real(value, rules, now_ms)

    monkeypatch.setattr(ttl, "expired_value", counting)
    now = T0 + 1_000
    assert engine.purge_expired(DB, "c", now, 1000) == 0
    assert engine.count_expired(coll_of(engine), now) == 0
    assert calls <= 10  # not one per live document
    expired = [
        enc({"_id": -1, "t": D(0)}),
        enc({"_id": -2, "ttl": 1}),
        enc({"_id": -3, "t": [D(1)]}),
    ]
    engine.insert(DB, "c", expired, now_ms=T0)
    calls = 0
    assert engine.count_expired(coll_of(engine), now) == 3
    assert engine.purge_expired(DB, "c", now, 1000) == 3
    assert calls <= 20  # a small multiple of the 3 expired, not of the 20,003 stored
    calls = 0
    assert engine.purge_expired(DB, "c", now, 1000) == 0
    assert calls <= 10
    assert stats(engine)[0] == 20_000


def test_purge_of_unknown_or_ttl_less_collections(engine: Engine) -> None:
    assert engine.purge_expired(DB, "missing", FAR, 10) == 0
    engine.insert(DB, "c", [enc({"_id": 1, "t": D(0), "ttl": 1})], now_ms=0)
    assert engine.purge_expired(DB, "c", FAR, 10) == 0
    assert engine.count_expired(coll_of(engine), FAR) == 0
    assert visible(engine, FAR) == {1}


def test_purge_is_per_collection(engine: Engine) -> None:
    for name in ("a", "b"):
        create(engine, name, expiring("t", 0))
        engine.insert(DB, name, [enc({"_id": 1, "t": D(T0)})], now_ms=T0)
    assert engine.purge_expired(DB, "a", T0, 10) == 1
    assert set(records(engine, "a")) == set()
    assert set(records(engine, "b")) == {1}
    assert visible(engine, T0 - 1, "b") == {1}


# -- restarts --------------------------------------------------------------------------------------


def test_restart_keeps_ttl_indexes_metadata_and_document_ttl(engine: Engine) -> None:
    create(
        engine,
        "c",
        expiring("t", 10),
        expiring("h", 0, hidden=True),
        expiring("_ts", 50),
    )
    engine.modify_index(DB, "c", None, "t_1", 20, None)
    engine.modify_index(DB, "c", None, "_ts_1", 40, None)
    docs = [
        enc({"_id": "t", "t": [D(T0 + 3), "x"]}),
        enc({"_id": "h", "h": D(T0 + 7_000)}),
        enc({"_id": "default"}),
        enc({"_id": "own", "ttl": 30}),
        enc({"_id": "keep", "ttl": -1}),
    ]
    engine.insert(DB, "c", docs[:3], now_ms=T0)
    engine.insert(DB, "c", docs[3:], now_ms=T0 + 5)
    specs = [ix.spec() for ix in coll_of(engine).indexes]
    stored = records(engine)
    again = reopen(engine)
    try:
        assert [ix.spec() for ix in coll_of(again).indexes] == specs
        rules = ttl.rules_for(coll_of(again))
        assert [(ix.name, e) for ix, e in rules.native] == [("t_1", 20), ("h_1", 0)]
        assert rules.cosmos == 40
        assert records(again) == stored
        assert {i: ttl.read_meta(v) for i, v in records(again).items()} == {
            "t": ttl.RecordMeta(T0, 0, ((coll_of(again).index_named("t_1").id, T0 + 3),)),  # type: ignore[union-attr]
            "h": ttl.RecordMeta(T0, 0, ((coll_of(again).index_named("h_1").id, T0 + 7_000),)),  # type: ignore[union-attr]
            "default": ttl.RecordMeta(T0, 0, ()),
            "own": ttl.RecordMeta(T0 + 5, 30, ()),
            "keep": ttl.RecordMeta(T0 + 5, -1, ()),
        }
        check_schedule(
            again,
            {
                "t": T0 + 20_003,
                "h": T0 + 7_000,
                "default": T0 + 40_000,
                "own": T0 + 30_005,
                "keep": None,
            },
        )
    finally:
        again.close()


def test_documents_that_expired_while_down(engine: Engine) -> None:
    create(
        engine,
        "c",
        expiring("t", 60),
        expiring("_ts", 3600),
        {"key": {"u": 1}, "unique": True},
    )
    docs = [
        enc({"_id": "date", "t": D(T0), "u": 1}),
        enc({"_id": "default", "u": 2}),
        enc({"_id": "own", "ttl": 600, "u": 3}),
        enc({"_id": "keep", "ttl": -1, "u": 4}),
    ]
    engine.insert(DB, "c", docs, now_ms=T0)
    assert visible(engine, T0 + 59_999) == {"date", "default", "own", "keep"}
    again = reopen(engine)
    try:
        later = T0 + DAY  # the server was down for a day
        assert visible(again, later) == {"keep"}
        assert count_documents(again, coll_of(again), later) == 1
        assert again.count_expired(coll_of(again), later) == 3
        # An insert may take over a key at once, before any purge.
        assert again.insert(DB, "c", [enc({"_id": "new", "u": 1})], now_ms=later).inserted == 1
        assert again.purge_expired(DB, "c", later, 1000) == 2
        assert set(records(again)) == {"keep", "new"}
        # The purge left every index consistent: the new holder's u entry stays.
        checked = validate_collection(again, coll_of(again), full=True)
        assert checked.valid and {ix.name: ix.keys for ix in checked.indexes}["u_1"] == 2
        assert_stats_match(again)
        assert expiry_rids(again) == {rids(again)["new"]}
    finally:
        again.close()
    third = Engine.open(again.path)
    try:
        assert set(records(third)) == {"keep", "new"}
        assert third.purge_expired(DB, "c", T0 + DAY, 1000) == 0
        check_schedule(third, {"keep": None, "new": T0 + DAY + 3_600_000})
    finally:
        third.close()


# -- TTL indexes built over existing documents -----------------------------------------------------


def test_native_ttl_index_built_on_existing_documents(engine: Engine) -> None:
    docs = {
        "date": {"t": D(T0)},
        "array": {"t": [5, D(T0 + 30), D(T0 + 10)]},
        "pre_1970": {"t": D(-DAY)},
        "string": {"t": "2023-11-14T22:13:20Z"},
        "missing": {},
        "nested": {"a": [{"b": D(T0 + 2)}, {"b": 1}]},
        "partial_no": {"p": D(T0)},
        "partial_yes": {"p": D(T0), "tmp": True},
    }
    engine.insert(DB, "c", [enc({"_id": i, **d}) for i, d in docs.items()], now_ms=T0)
    assert not ttl.rules_for(coll_of(engine)).active
    result = engine.create_indexes(
        DB,
        "c",
        [
            parse_index_spec(expiring("t", 10)),
            parse_index_spec(expiring("a.b", 0)),
            parse_index_spec(expiring("p", 1, partialFilterExpression={"tmp": True})),
        ],
    )
    assert (result.before, result.after) == (1, 4)
    bodies = {i: ttl.body(v) for i, v in records(engine).items()}
    assert bodies == {i: enc({"_id": i, **d}) for i, d in docs.items()}
    check_schedule(
        engine,
        {
            "date": T0 + 10_000,
            "array": T0 + 10_010,
            "pre_1970": -DAY + 10_000,
            "string": None,
            "missing": None,
            "nested": T0 + 2,
            "partial_no": None,
            "partial_yes": T0 + 1_000,
        },
    )


def test_ts_index_built_on_existing_documents(engine: Engine) -> None:
    engine.insert(
        DB,
        "c",
        [enc({"_id": "plain"}), enc({"_id": "own", "ttl": 5}), enc({"_id": "keep", "ttl": -1})],
        now_ms=T0,
    )
    engine.insert(
        DB,
        "c",
        [enc({"_id": "later", "_ts": D(0)}), enc({"_id": "bad_ttl", "ttl": 0.5})],
        now_ms=T0 + 100,
    )
    assert visible(engine, FAR) == {"plain", "own", "keep", "later", "bad_ttl"}
    create(engine, "c", expiring("_ts", 10))
    check_schedule(
        engine,
        {
            "plain": T0 + 10_000,
            "own": T0 + 5_000,
            "keep": None,
            "later": T0 + 10_100,
            "bad_ttl": T0 + 10_100,
        },
        purge=False,
    )
    engine.modify_index(DB, "c", None, "_ts_1", -1, None)
    check_schedule(
        engine, {"plain": None, "own": T0 + 5_000, "keep": None, "later": None, "bad_ttl": None}
    )


def test_already_expired_documents_hide_as_soon_as_the_index_exists(engine: Engine) -> None:
    engine.insert(DB, "c", [enc({"_id": 1, "t": D(0)}), enc({"_id": 2})], now_ms=0)
    assert visible(engine, T0) == {1, 2}
    create(engine, "c", expiring("t", 0))
    assert visible(engine, T0) == {2}
    assert engine.purge_expired(DB, "c", T0, 10) == 1


def test_dropping_and_recreating_a_ttl_index(engine: Engine) -> None:
    create(engine, "c", expiring("t", 0))
    create(engine, "c", expiring("_ts", 10))
    engine.insert(DB, "c", [enc({"_id": 1, "t": D(T0)}), enc({"_id": 2, "ttl": 1})], now_ms=T0)
    engine.drop_indexes(DB, "c", "t_1")
    check_schedule(engine, {1: T0 + 10_000, 2: T0 + 1_000}, purge=False)
    engine.drop_indexes(DB, "c", {"_ts": 1})
    assert not ttl.rules_for(coll_of(engine)).active
    assert expiry_rids(engine) == set()
    check_schedule(engine, {1: None, 2: None}, purge=False)
    create(engine, "c", expiring("t", 5))
    create(engine, "c", expiring("_ts", -1))
    check_schedule(engine, {1: T0 + 5_000, 2: T0 + 1_000})


@pytest.mark.parametrize("budget", [0.0, None])
def test_bounded_purge_deletes_what_the_predicate_says(
    engine: Engine, budget: float | None
) -> None:
    """purge_expired_batch, bounded in time (0: one chunk a call) or not, over both models at
    once: it deletes exactly the documents `ttl.expired` calls expired, says when some may be
    left, and spares the document that took an expired holder's unique key."""
    create(
        engine,
        "c",
        expiring("t", 60),
        expiring("_ts", 3600),
        {"key": {"u": 1}, "name": "u_1", "unique": True},
    )
    docs = [enc({"_id": i, "t": D(T0 - 61_000 - i), "u": i}) for i in range(150)]
    docs += [enc({"_id": 200 + i, "t": D(T0), "u": 200 + i}) for i in range(20)]  # not yet
    docs += [enc({"_id": 300 + i, "ttl": 1, "u": 300 + i}) for i in range(80)]  # own ttl 1 s
    docs += [enc({"_id": 400 + i, "ttl": -1, "u": 400 + i}) for i in range(10)]  # never
    docs += [enc({"_id": 500 + i, "u": 500 + i}) for i in range(10)]  # D = 3600 s
    engine.insert(DB, "c", docs, now_ms=T0)
    now = T0 + 2_000
    # A new document takes over the unique key of an expired holder (which goes with it).
    engine.insert(DB, "c", [enc({"_id": 1000, "u": 7})], now_ms=now)
    rules = ttl.rules_for(coll_of(engine))
    expected = {
        _id for _id, v in records(engine).items() if ttl.expired(ttl.read_meta(v), rules, now)
    }
    assert len(expected) == 150 - 1 + 80
    before = set(records(engine))
    calls, deleted, more = 0, 0, True
    while more:
        n, more = engine.purge_expired_batch(DB, "c", now, 10_000, budget)
        deleted += n
        calls += 1
    assert deleted == len(expected)
    assert calls > 2 if budget == 0.0 else calls == 1
    assert set(records(engine)) == before - expected
    assert 1000 in records(engine)
    assert_stats_match(engine)
    assert validate_collection(engine, coll_of(engine), full=False).valid
    assert engine.purge_expired_batch(DB, "c", now, 10_000, budget) == (0, False)
