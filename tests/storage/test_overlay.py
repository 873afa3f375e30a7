"""The transaction overlay (storage/engine/overlay.py): its merged view against a plain model,
the write-conflict table, and commit_overlay's checks and stats deltas."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from ebbdb.storage.engine import layout
from ebbdb.storage.engine.environment import Environment
from ebbdb.storage.engine.overlay import KeyTable, Overlay, WriteConflict, commit_overlay
from ebbdb.storage.engine.writer import TRANSACTION
from ebbdb.storage.indexes.specs import parse_index_spec


@pytest.fixture
def env(tmp_path: object) -> Iterator[Environment]:
    e = Environment.open(str(tmp_path), 64 << 20)
    yield e
    e.close()


def _fill(env: Environment, items: dict[bytes, bytes]) -> None:
    with env.env.begin(write=True) as txn:
        for k, v in items.items():
            txn.put(k, v, db=env.index)


def _overlay(env: Environment, table: KeyTable | None = None, owner: int = 1) -> Overlay:
    return Overlay(env, env.env.begin(), table or KeyTable(), owner)


def _walk_forward(cur: object, start: bytes | None) -> list[tuple[bytes, bytes]]:
    ok = cur.set_range(start) if start is not None else cur.first()  # type: ignore[attr-defined]
    return list(cur.iternext()) if ok else []  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(30))
def test_merged_view_matches_a_model(env: Environment, seed: int) -> None:
    rng = random.Random(seed)
    keys = [bytes([rng.randrange(40)]) for _ in range(25)]
    base = {k: b"s" + k for k in keys}
    _fill(env, base)
    model = dict(base)
    ov = _overlay(env)
    for _ in range(rng.randrange(30)):
        k = bytes([rng.randrange(40)])
        op = rng.random()
        if op < 0.5:
            ov.put(k, b"o" + k, db=env.index)
            model[k] = b"o" + k
        elif op < 0.8:
            assert ov.delete(k, db=env.index) == (k in model)
            model.pop(k, None)
        else:
            assert ov.pop(k, db=env.index) == model.pop(k, None)
    ordered = sorted(model.items())
    assert [ov.get(bytes([i]), db=env.index) for i in range(40)] == [
        model.get(bytes([i])) for i in range(40)
    ]
    cur = ov.cursor(db=env.index)
    assert _walk_forward(cur, None) == ordered
    for _ in range(10):
        start = bytes([rng.randrange(42)])
        assert _walk_forward(ov.cursor(db=env.index), start) == [
            kv for kv in ordered if kv[0] >= start
        ]
        c = ov.cursor(db=env.index)
        positioned = c.set_range(start)
        expect_prev = [kv for kv in ordered if kv[0] < start][::-1]
        if positioned:
            assert c.prev() == bool(expect_prev)
        else:
            assert c.last() == bool(ordered)
            expect_prev = ordered[::-1]
        got = list(c.iterprev()) if expect_prev else []
        assert got == expect_prev
    # Alternating moves agree with the model's order.
    c = ov.cursor(db=env.index)
    if ordered:
        assert c.first()
        i = 0
        for _ in range(40):
            if rng.random() < 0.6:
                moved = c.next()
                i += 1
            else:
                moved = c.prev()
                i -= 1
            if not 0 <= i < len(ordered):
                assert not moved and c.key() == b""
                assert c.first()
                i = 0
            else:
                assert moved and c.item() == ordered[i]
    ov.end()


def test_cursor_delete_moves_on(env: Environment) -> None:
    _fill(env, {b"a1": b"", b"a2": b"", b"b1": b""})
    ov = _overlay(env)
    ov.put(b"a3", b"x", db=env.index)
    cur = ov.cursor(db=env.index)
    ok = cur.set_range(b"a")
    while ok and cur.key()[:1] == b"a":
        ok = cur.delete()
    assert list(ov.cursor(db=env.index).iternext(values=False)) == [b"b1"]
    ov.end()


def test_second_writer_of_a_key_conflicts_at_once(env: Environment) -> None:
    table = KeyTable()
    a, b = _overlay(env, table, 1), _overlay(env, table, 2)
    key = layout.record_key(5, 1)
    a.put(key, b"A", db=env.records)
    with pytest.raises(WriteConflict):
        b.put(key, b"B", db=env.records)
    a.end()
    b.put(key, b"B", db=env.records)  # released
    assert table.rid_floor[5] == 1
    b.end()


def test_write_to_a_document_changed_after_the_snapshot_conflicts(env: Environment) -> None:
    key = layout.record_key(5, 1)
    with env.env.begin(write=True) as txn:
        txn.put(key, b"v1", db=env.records)
    ov = _overlay(env)
    with env.env.begin(write=True) as txn:
        txn.put(key, b"v2", db=env.records)
    assert ov.get(key, db=env.records) == b"v1"  # the snapshot
    with pytest.raises(WriteConflict):
        ov.put(key, b"v3", db=env.records)
    ov.end()
    # The key it claimed before the check failed is released with it.
    other = _overlay(env, ov._table, 2)
    other.put(key, b"v4", db=env.records)
    other.end()


def test_commit_checks_and_applies_stats_as_deltas(env: Environment) -> None:
    skey = layout.stats_key(5)
    with env.env.begin(write=True) as txn:
        txn.put(skey, layout.pack_stats(10, 100), db=env.stats)
        txn.put(b"k", b"old", db=env.index)
    ov = _overlay(env)
    ov.put(skey, layout.pack_stats(11, 130), db=env.stats)
    ov.put(b"n", b"new", db=env.index)
    with env.env.begin(write=True) as txn:  # a concurrent commit adds two documents
        txn.put(skey, layout.pack_stats(12, 120), db=env.stats)
    ov.release_snapshot()
    with env.env.begin(write=True) as txn:
        commit_overlay(env, txn, ov)
    with env.env.begin() as txn:
        assert layout.unpack_stats(txn.get(skey, db=env.stats)) == (13, 150)
        assert txn.get(b"n", db=env.index) == b"new"
    ov2 = _overlay(env)
    ov2.put(b"k", b"mine", db=env.index)
    with env.env.begin(write=True) as txn:
        txn.put(b"k", b"theirs", db=env.index)
    with env.env.begin(write=True) as txn, pytest.raises(WriteConflict):
        commit_overlay(env, txn, ov2)
    ov2.end()


# -- the engine running inside a transaction ---------------------------------------------------------


def _docs(engine: object, name: str = "c") -> list[dict]:
    import bson

    from ebbdb.storage.engine.store import CODEC
    from ebbdb.storage.expiry import ttl

    coll = engine.collection("db", name)  # type: ignore[attr-defined]
    if coll is None:
        return []
    with engine.read() as r:  # type: ignore[attr-defined]
        return [bson.decode(ttl.body(v), CODEC) for _rid, v in r.scan(coll)]


def test_engine_writes_in_a_transaction_commit_at_once(tmp_path: object) -> None:
    import bson

    from ebbdb.storage.engine.store import Engine

    engine = Engine.open(str(tmp_path))
    try:
        engine.insert("db", "c", [bson.encode({"_id": 1})])
        t1 = engine.begin_transaction(1)
        engine.insert("db", "c", [bson.encode({"_id": 0})])  # after the snapshot
        token = t1.use()
        try:
            engine.insert("db", "c", [bson.encode({"_id": 2}), bson.encode({"_id": 3})])
            engine.insert("db", "new", [bson.encode({"_id": "n"})])
            engine.create_indexes("db", "new", [parse_index_spec({"key": {"a": 1}, "name": "a_1"})])
            assert _docs(engine) == [{"_id": 1}, {"_id": 2}, {"_id": 3}]
            assert _docs(engine, "new") == [{"_id": "n"}]
        finally:
            TRANSACTION.reset(token)
        assert _docs(engine) == [{"_id": 1}, {"_id": 0}]
        assert engine.collection("db", "new") is None
        engine.commit_transaction(t1)
        t1.end()
        assert sorted(d["_id"] for d in _docs(engine)) == [0, 1, 2, 3]
        assert _docs(engine, "new") == [{"_id": "n"}]
        new = engine.collection("db", "new")
        assert new is not None and [ix.name for ix in new.indexes] == ["_id_", "a_1"]
        with engine.read() as r:
            coll = engine.collection("db", "c")
            assert coll is not None and r.stats(coll)[0] == 4
    finally:
        engine.close()
