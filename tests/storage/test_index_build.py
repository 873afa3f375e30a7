"""Bulk index builds (storage/engine/index_build.py) against the incremental build of one
transaction (Ddl.create_indexes): the same entries byte for byte, the same flags, the same first
error; and writes made while a build runs caught up by its last step."""

from __future__ import annotations

import datetime
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bson
import pytest
from bson import Int64

from ebbdb.storage.core.errors import DuplicateKey, StorageError
from ebbdb.storage.engine import index_build
from ebbdb.storage.engine.ddl import BuildSuperseded, CreateIndexesResult
from ebbdb.storage.engine.index_build import IndexBuild, entries_of
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.engine.validate import validate_collection
from ebbdb.storage.engine.writer import TRANSACTION
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes.specs import parse_index_spec

DB = "db"
#: The last-modified time of every record loaded (two data directories compare byte for byte).
T0 = 1_700_000_000_000


def _docs(n: int, seed: int = 7) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    t0 = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    out = []
    for i in range(n):
        doc: dict[str, Any] = {
            "_id": i,
            "a": rnd.choice([1, 2.0, Int64(3), "x", "Y", None, [1, 2], [], {"b": 1}]),
            "s": rnd.choice(["apple", "Apple", "banana", "Banana", "cherry"]),
            "tags": [rnd.randrange(20) for _ in range(rnd.randrange(4))],
            "u": i,
            "nested": {"x": rnd.randrange(10), "arr": [{"y": rnd.randrange(5)}]},
            "t": t0 + datetime.timedelta(seconds=i),
            "loc": {"type": "Point", "coordinates": [rnd.uniform(-170, 170), rnd.uniform(-80, 80)]},
            "text": rnd.choice(["the quick brown fox", "lazy dogs sleep", "quick quick"]),
            "long": "z" * rnd.choice([10, 900]),
        }
        if i % 5 == 0:
            del doc["s"]
        out.append(doc)
    return out


def _load(engine: Engine, docs: list[dict[str, Any]], name: str = "c") -> None:
    for start in range(0, len(docs), 500):
        engine.insert(DB, name, [bson.encode(d) for d in docs[start : start + 500]], now_ms=T0)


def _bulk(engine: Engine, specs: list[dict[str, Any]], name: str = "c") -> Any:
    begun = engine.index_builds.begin(DB, name, [parse_index_spec(s) for s in specs])
    assert isinstance(begun, IndexBuild)
    return begun.run()


def _state(engine: Engine, name: str = "c") -> list[tuple[Any, ...]]:
    info = engine.collection(DB, name)
    assert info is not None
    out: list[tuple[Any, ...]] = []
    for ix in info.indexes:
        spec = ix.spec()
        entries = [(k[8:], rid) for k, rid in entries_of(engine.env, ix)]
        with engine.read() as r:
            expiry = list(
                r.expiry_entries(ix.id.to_bytes(8, "big"), (ix.id + 1).to_bytes(8, "big"))
            )
        out.append((spec, ix.multikey, ix.long_keys, entries, expiry))
    with engine.read() as r:
        out.append(tuple(r.scan(info)))  # the records, headers included
    return out


SPECS: list[dict[str, Any]] = [
    {"key": {"a": 1}, "name": "a_1"},
    {"key": {"a": 1, "s": -1}, "name": "a_s"},
    {"key": {"tags": 1}, "name": "tags"},
    {"key": {"nested.arr.y": 1, "nested.x": -1}, "name": "nested"},
    {"key": {"u": 1}, "name": "u_unique", "unique": True},
    {"key": {"s": 1}, "name": "s_sparse", "sparse": True},
    {"key": {"s": 1, "u": 1}, "name": "s_partial", "partialFilterExpression": {"u": {"$gt": 30}}},
    {"key": {"s": 1}, "name": "s_collation", "collation": {"locale": "en", "strength": 2}},
    {"key": {"long": 1}, "name": "long"},
    {"key": {"s": "hashed"}, "name": "hashed"},
    {"key": {"$**": 1}, "name": "wildcard"},
    {"key": {"text": "text"}, "name": "text"},
    {"key": {"loc": "2dsphere"}, "name": "geo"},
    {"key": {"t": 1}, "name": "ttl", "expireAfterSeconds": 60},
    {
        "key": {"t": 1},
        "name": "ttl_partial",
        "expireAfterSeconds": 0,
        "partialFilterExpression": {"u": {"$lt": 100}},
    },
    {"key": {"_ts": 1}, "name": "cosmos", "expireAfterSeconds": 3600},
]


@pytest.mark.parametrize("spec", SPECS, ids=[s["name"] for s in SPECS])
def test_bulk_build_equals_the_incremental_build(tmp_path: Path, spec: dict[str, Any]) -> None:
    docs = _docs(300)
    incremental, bulk = Engine.open(str(tmp_path / "i")), Engine.open(str(tmp_path / "b"))
    try:
        _load(incremental, docs)
        _load(bulk, docs)
        expected = incremental.create_indexes(DB, "c", [parse_index_spec(spec)])
        assert _bulk(bulk, [spec]) == expected
        assert _state(bulk) == _state(incremental)
    finally:
        incremental.close()
        bulk.close()


def test_several_indexes_in_one_build(tmp_path: Path) -> None:
    docs = _docs(400)
    incremental, bulk = Engine.open(str(tmp_path / "i")), Engine.open(str(tmp_path / "b"))
    try:
        _load(incremental, docs)
        _load(bulk, docs)
        specs = SPECS[:9]
        incremental.create_indexes(DB, "c", [parse_index_spec(s) for s in specs])
        _bulk(bulk, specs)
        assert _state(bulk) == _state(incremental)
    finally:
        incremental.close()
        bulk.close()


def _first_error(engine: Engine, build: Callable[[], Any]) -> tuple[str, str, Any]:
    with pytest.raises(StorageError) as caught:
        build()
    exc = caught.value
    extra = (exc.key_pattern, exc.key_value) if isinstance(exc, DuplicateKey) else None
    return type(exc).__name__, str(exc), extra


@pytest.mark.parametrize(
    "docs, specs",
    [
        # 1 and 1.0 are one key; the error shows the later document's value, as incremental does.
        (
            [{"_id": 0, "k": 5}, {"_id": 1, "k": 1}, {"_id": 2, "k": 2}, {"_id": 3, "k": 1.0}],
            [{"key": {"k": 1}, "name": "k", "unique": True}],
        ),
        # Several collisions: the first in record order wins, across two unique indexes.
        (
            [
                {"_id": 0, "k": 1, "m": "a"},
                {"_id": 1, "k": 2, "m": "b"},
                {"_id": 2, "k": 3, "m": "a"},
                {"_id": 3, "k": 2, "m": "c"},
            ],
            [
                {"key": {"k": 1}, "name": "k", "unique": True},
                {"key": {"m": 1}, "name": "m", "unique": True},
            ],
        ),
        # Multikey: the record's second key is its first collision.
        (
            [{"_id": 0, "k": [1, 2]}, {"_id": 1, "k": [3, 2, 1]}],
            [{"key": {"k": 1}, "name": "k", "unique": True}],
        ),
        # Parallel arrays before a duplicate, and a duplicate before parallel arrays.
        (
            [{"_id": 0, "a": [1], "b": [2]}, {"_id": 1, "k": 1}, {"_id": 2, "k": 1}],
            [
                {"key": {"k": 1}, "name": "k", "unique": True},
                {"key": {"a": 1, "b": 1}, "name": "ab"},
            ],
        ),
        (
            [{"_id": 0, "k": 1}, {"_id": 1, "k": 1}, {"_id": 2, "a": [1], "b": [2]}],
            [
                {"key": {"k": 1}, "name": "k", "unique": True},
                {"key": {"a": 1, "b": 1}, "name": "ab"},
            ],
        ),
        # A collation's duplicate: "A" and "a" at strength 2.
        (
            [{"_id": 0, "s": "a"}, {"_id": 1, "s": "b"}, {"_id": 2, "s": "A"}],
            [
                {
                    "key": {"s": 1},
                    "name": "s",
                    "unique": True,
                    "collation": {"locale": "en", "strength": 2},
                }
            ],
        ),
    ],
)
def test_the_first_error_is_the_incremental_builds(
    tmp_path: Path, docs: list[dict[str, Any]], specs: list[dict[str, Any]]
) -> None:
    incremental, bulk = Engine.open(str(tmp_path / "i")), Engine.open(str(tmp_path / "b"))
    try:
        _load(incremental, docs)
        _load(bulk, docs)
        parsed = [parse_index_spec(s) for s in specs]
        expected = _first_error(incremental, lambda: incremental.create_indexes(DB, "c", parsed))
        assert _first_error(bulk, lambda: _bulk(bulk, specs)) == expected
        # Nothing is left behind: the collection has only its _id index and its entries.
        assert _state(bulk) == _state(incremental)
        assert [k for k, _ in bulk.env.env.begin().cursor(db=bulk.env.index)] == [
            k for k, _ in incremental.env.env.begin().cursor(db=incremental.env.index)
        ]
    finally:
        incremental.close()
        bulk.close()


def test_writes_during_the_build_are_caught_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inserts, updates and deletes between the scan and the last step, in order and through a
    multi-document transaction, end in the index the incremental build makes of the result."""
    monkeypatch.setattr(index_build, "WRITE_CHUNK", 50)
    monkeypatch.setattr(index_build, "SCAN_CHUNK", 64)
    docs = [{"_id": i, "k": i % 37, "u": i} for i in range(500)]
    specs: list[dict[str, Any]] = [
        {"key": {"k": 1}, "name": "k"},
        {"key": {"u": 1}, "name": "u", "unique": True},
    ]
    engine = Engine.open(str(tmp_path / "b"))
    try:
        _load(engine, docs)
        build = _scanned(engine, specs)
        assert not build.write_step()
        engine.insert(DB, "c", [bson.encode({"_id": 1000, "k": [1, 2, 3], "u": 1000})])

        def change(view: Any) -> None:
            for rid in (3, 250, 499):  # record ids start at 1
                value = view.get(rid)
                doc = bson.decode(value[view_offset(value) :])
                doc["k"] = -doc["k"] - 1
                doc["u"] = -doc["u"] - 1
                view.replace(rid, value, bson.encode(doc), doc)
            view.delete(10, view.get(10))

        engine.modify(DB, "c", change, now_ms=0)
        transaction = engine.begin_transaction(1)
        token = transaction.use()
        try:
            engine.insert(DB, "c", [bson.encode({"_id": 2000, "k": 99, "u": 2000})])
        finally:
            TRANSACTION.reset(token)
        engine.commit_transaction(transaction)
        transaction.end()
        while not build.write_step():
            pass
        assert isinstance(build.finish(), CreateIndexesResult)
        assert engine.env.watched == {}

        _same_as_the_incremental_build(engine, tmp_path / "i", specs)
    finally:
        engine.close()


def _scanned(engine: Engine, specs: list[dict[str, Any]]) -> IndexBuild:
    """A bulk build of `specs` on collection c, begun and past its scan."""
    build = engine.index_builds.begin(DB, "c", [parse_index_spec(s) for s in specs])
    assert isinstance(build, IndexBuild)
    build.scan()
    return build


def _same_as_the_incremental_build(engine: Engine, path: Path, specs: list[dict[str, Any]]) -> None:
    """The incremental build over the same documents, in record order, in a data directory at
    `path`, gives the same entries as the bulk build finished on `engine`."""
    other = Engine.open(str(path))
    try:
        with engine.read() as r:
            info = engine.collection(DB, "c")
            assert info is not None
            stored = [value for _rid, value in r.scan(info)]
        other.insert(DB, "c", [ttl.body(v) for v in stored], now_ms=T0)
        other.create_indexes(DB, "c", [parse_index_spec(s) for s in specs])
        assert _by_id(engine) == _by_id(other)
    finally:
        other.close()


def _by_id(engine: Engine) -> list[tuple[Any, ...]]:
    """_state with each entry named by its document's _id rather than its record id (two data
    directories number their records apart)."""
    info = engine.collection(DB, "c")
    assert info is not None
    out: list[tuple[Any, ...]] = []
    with engine.read() as r:
        for ix in info.indexes:
            named = []
            for k, rid in entries_of(engine.env, ix):
                value = r.record(info, rid)
                assert value is not None
                body = k[8:] if ix.unique else k[8:-8]
                named.append((body, bson.decode(ttl.body(value))["_id"]))
            out.append((ix.spec(), ix.multikey, sorted(named)))
    return out


def view_offset(value: bytes) -> int:
    return ttl.body_offset(value)


def test_a_duplicate_written_during_the_build_fails_it_cleanly(tmp_path: Path) -> None:
    engine = Engine.open(str(tmp_path / "b"))
    try:
        _load(engine, [{"_id": i, "u": i} for i in range(100)])
        build = engine.index_builds.begin(
            DB, "c", [parse_index_spec({"key": {"u": 1}, "name": "u", "unique": True})]
        )
        assert isinstance(build, IndexBuild)
        build.scan()
        engine.insert(DB, "c", [bson.encode({"_id": 500, "u": 7})])
        while not build.write_step():
            pass
        with pytest.raises(DuplicateKey):
            build.finish()
        build.abort()
        info = engine.collection(DB, "c")
        assert info is not None and [ix.name for ix in info.indexes] == ["_id_"]
        assert engine.env.watched == {}
        assert len(entries_of(engine.env, info.indexes[0])) == 101
    finally:
        engine.close()


def test_a_dropped_collection_aborts_the_build(tmp_path: Path) -> None:
    engine = Engine.open(str(tmp_path / "b"))
    try:
        _load(engine, [{"_id": i} for i in range(10)])
        build = engine.index_builds.begin(DB, "c", [parse_index_spec({"key": {"x": 1}})])
        assert isinstance(build, IndexBuild)
        build.scan()
        engine.drop_collection(DB, "c")
        with pytest.raises(BuildSuperseded) as caught:
            build.run()
        assert caught.value.code_name == "IndexBuildAborted"
        assert engine.env.watched == {}
    finally:
        engine.close()


@pytest.mark.parametrize(
    "why, specs",
    [
        ("an empty collection", [{"key": {"x": 1}, "name": "x"}]),
        ("an empty collection", [{"key": {"t": 1}, "name": "t", "expireAfterSeconds": 60}]),
    ],
)
def test_builds_of_one_transaction(engine: Engine, why: str, specs: list[dict[str, Any]]) -> None:
    engine.create_collection(DB, "c")
    outcome = engine.index_builds.begin(DB, "c", [parse_index_spec(s) for s in specs])
    assert isinstance(outcome, CreateIndexesResult)
    assert outcome.after == 2


def test_a_ttl_build_with_writes_during_it_is_whole(tmp_path: Path) -> None:
    """A TTL index built while documents are inserted, updated and deleted: every header and
    expiry entry is right (validate's full check), and a purge deletes exactly the dated ones."""
    t0 = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    docs = [{"_id": i, "t": t0} if i % 3 else {"_id": i, "t": "no date"} for i in range(300)]
    engine = Engine.open(str(tmp_path / "b"))
    try:
        _load(engine, docs)
        spec = {"key": {"t": 1}, "name": "t", "expireAfterSeconds": 60}
        build = engine.index_builds.begin(DB, "c", [parse_index_spec(spec)])
        assert isinstance(build, IndexBuild)
        build.scan()
        engine.insert(DB, "c", [bson.encode({"_id": 1000, "t": t0})], now_ms=T0)

        def change(view: Any) -> None:
            for rid in (2, 150):  # _id 1 and 149: dated; given no date / another date
                value = view.get(rid)
                doc = bson.decode(ttl.body(value))
                doc["t"] = None if rid == 2 else t0 + datetime.timedelta(days=1)
                view.replace(rid, value, bson.encode(doc), doc)
            view.delete(3, view.get(3))  # _id 2

        engine.modify(DB, "c", change, now_ms=T0)
        while not build.write_step():
            pass
        build.finish()
        info = engine.collection(DB, "c")
        assert info is not None
        assert validate_collection(engine, info, full=True).valid
        expired_at = int((t0 + datetime.timedelta(days=2)).timestamp() * 1000)
        deleted = engine.purge_expired(DB, "c", expired_at, 10_000)
        with engine.read() as r:
            left = {bson.decode(ttl.body(v))["_id"] for _rid, v in r.scan(info)}
        assert deleted == 200 - 2 + 1  # dated: 200, less _id 1 and 2, plus _id 1000
        assert left == {i for i in range(300) if i % 3 == 0} | {1}
    finally:
        engine.close()


def test_a_build_whose_groups_are_redone_is_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each step of a TTL build shares its group with a write that fails, so that the writer
    aborts the group and runs it again with savepoints: the build must write every chunk
    (keys, expiry entries, headers) once committed, and its last step must still catch up the
    writes made meanwhile. (Before the fix, a redone step skipped its chunk: the index was
    published without its keys, as a catalog stress run found.)"""
    monkeypatch.setattr(index_build, "WRITE_CHUNK", 40)
    t0 = datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC)
    docs = [{"_id": i, "t": t0 + datetime.timedelta(seconds=i), "k": i % 7} for i in range(150)]
    specs: list[dict[str, Any]] = [
        {"key": {"t": 1}, "name": "t", "expireAfterSeconds": 60},
        {"key": {"k": 1}, "name": "k"},
    ]
    engine = Engine.open(str(tmp_path / "b"))
    try:
        _load(engine, docs)
        build = _scanned(engine, specs)
        engine.insert(DB, "c", [bson.encode({"_id": 1000, "t": t0, "k": 3})], now_ms=T0)

        def fails() -> None:  # NamespaceNotFound, raised inside its write: the group is redone
            engine.drop_indexes(DB, "no such collection", "x_1")

        steps = 0
        while True:
            (ok, done), (failed, _exc) = engine.run_batch([build.write_step, fails])
            assert ok and not failed
            if done:
                break
            steps += 1
        # 150 scanned records, 40 a step: keys of t, keys of k, expiry entries, headers.
        assert steps == 4 * 4
        engine.insert(DB, "c", [bson.encode({"_id": 1001, "t": t0, "k": 4})], now_ms=T0)
        (ok, result), (failed, _exc) = engine.run_batch([build.finish, fails])
        assert ok and isinstance(result, CreateIndexesResult) and not failed
        assert engine.env.watched == {}
        info = engine.collection(DB, "c")
        assert info is not None
        report = validate_collection(engine, info, full=True)
        assert report.valid, report
        _same_as_the_incremental_build(engine, tmp_path / "i", specs)
    finally:
        engine.close()


def test_a_begun_build_undone_with_its_group_watches_nothing(engine: Engine) -> None:
    """A build begun in a group that is then redone, and not begun again (its operation was
    killed meanwhile): the collection is not left watched, as it was before the watch waited
    for the commit (every later write to it noted, forever)."""
    _load(engine, [{"_id": i, "a": i} for i in range(100)])
    runs: list[int] = []

    def begin_then_killed() -> Any:
        runs.append(1)
        if len(runs) > 1:
            raise RuntimeError("killed")  # as the token check of a killed operation raises
        return engine.index_builds.begin(DB, "c", [parse_index_spec({"key": {"a": 1}})])

    def fails() -> None:  # NamespaceNotFound inside its write: the group is redone
        engine.drop_indexes(DB, "no such collection", "x_1")

    (ok, exc), (failed, _exc) = engine.run_batch([begin_then_killed, fails])
    assert len(runs) == 2 and not ok and str(exc) == "killed" and not failed
    assert engine.env.watched == {}
    _load(engine, [{"_id": 1000 + i} for i in range(10)])
    assert engine.env.watched == {}
    # A build begun in a group that commits watches from then on.
    ((ok, build),) = engine.run_batch(
        [lambda: engine.index_builds.begin(DB, "c", [parse_index_spec({"key": {"a": 1}})])]
    )
    assert ok and isinstance(build, IndexBuild)
    info = engine.collection(DB, "c")
    assert info is not None and set(engine.env.watched) == {info.id}
    build.run()
    assert engine.env.watched == {}
