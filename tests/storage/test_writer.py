"""Group commit in the engine (storage/engine/writer.py): many jobs in one write transaction, each seeing
the ones before it; a failing write undone alone; a full map grown and the group run again; the
catalog readers see replaced, never changed, and only after the commit."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import bson
import pytest

from ebbdb.storage.core.errors import DuplicateKey, NamespaceExists
from ebbdb.storage.engine.store import CODEC, Engine
from ebbdb.storage.execution import writes
from ebbdb.storage.execution.execute import QuerySpec
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes.specs import parse_index_spec
from ebbdb.storage.query.update import parse_update
from tests.helpers import enc

DB = "db"
NOW = 1_700_000_000_000


def ids(engine: Engine, name: str = "c") -> list[Any]:
    coll = engine.collection(DB, name)
    if coll is None:
        return []
    with engine.read() as r:
        return [bson.decode(ttl.body(v), CODEC)["_id"] for _rid, v in r.scan(coll)]


def test_jobs_of_a_group_share_one_commit_and_see_each_other(engine: Engine) -> None:
    before = engine.commits

    def upsert_then_update() -> Any:
        spec = QuerySpec.parse({"_id": 1})
        return writes.update(
            engine, DB, "c", spec, parse_update({"$inc": {"n": 1}}), False, True, NOW
        )

    outcomes = engine.run_batch(
        [
            lambda: engine.insert(DB, "c", [enc({"_id": 0})], now_ms=NOW),
            upsert_then_update,  # no match yet: inserts {_id: 1, n: 1}
            upsert_then_update,  # sees the upsert before it: matches and increments
        ]
    )
    assert [ok for ok, _ in outcomes] == [True, True, True]
    assert outcomes[1][1].upserted_id == 1
    assert (outcomes[2][1].matched, outcomes[2][1].modified) == (1, 1)
    assert engine.commits == before + 1
    assert ids(engine) == [0, 1]
    run = engine.collection(DB, "c")
    assert run is not None
    with engine.read() as r:
        docs = [bson.decode(ttl.body(v), CODEC) for _rid, v in r.scan(run)]
    assert docs == [{"_id": 0}, {"_id": 1, "n": 2}]


def test_a_write_that_fails_is_undone_alone(engine: Engine) -> None:
    engine.create_indexes(
        DB, "c", [parse_index_spec({"key": {"u": 1}, "name": "u_1", "unique": True})]
    )
    engine.insert(DB, "c", [enc({"_id": 1, "u": 1})], now_ms=NOW)

    def failing_build() -> Any:
        # The index build writes entries before it meets the duplicate: those must go.
        engine.insert(DB, "c", [enc({"_id": 2, "u": 2, "v": 7})], now_ms=NOW)
        return engine.create_indexes(
            DB, "c", [parse_index_spec({"key": {"v": 1}, "name": "v_1", "unique": True})]
        )

    def duplicate_v() -> Any:
        return engine.insert(DB, "c", [enc({"_id": 3, "u": 3, "v": 7})], now_ms=NOW)

    outcomes = engine.run_batch(
        [
            lambda: engine.insert(DB, "c", [enc({"_id": 10, "u": 10})], now_ms=NOW),
            failing_build,
            duplicate_v,
            lambda: engine.create_collection(DB, "c"),
        ]
    )
    assert outcomes[0][0] and outcomes[2][0]
    assert not outcomes[1][0] and isinstance(outcomes[1][1], DuplicateKey)
    assert not outcomes[3][0] and isinstance(outcomes[3][1], NamespaceExists)
    # The insert inside the failed job was its own write and stays, as a separate commit would.
    assert ids(engine) == [1, 10, 2, 3]
    info = engine.collection(DB, "c")
    assert info is not None and [ix.name for ix in info.indexes] == ["_id_", "u_1"]


def test_a_full_map_is_grown_and_the_group_run_again(tmp_path: Path) -> None:
    engine = Engine.open(str(tmp_path / "small"), map_size=256 * 1024)
    try:
        big = "x" * 2000
        outcomes = engine.run_batch(
            [
                (lambda i=i: engine.insert(DB, "c", [enc({"_id": i, "s": big})], now_ms=NOW))
                for i in range(400)
            ]
        )
        assert all(ok for ok, _ in outcomes)
        assert [r.inserted for _ok, r in outcomes] == [1] * 400
        assert ids(engine) == list(range(400))
        assert engine.map_size > 256 * 1024
    finally:
        engine.close()


def test_readers_see_the_catalog_only_after_the_commit(engine: Engine) -> None:
    seen: list[Any] = []
    snapshot_before = engine.collections()

    def create_and_look() -> None:
        engine.create_collection(DB, "new")
        # The writer sees its own group's change ...
        assert engine.collection(DB, "new") is not None
        # ... another thread does not, until the group commits.
        t = threading.Thread(target=lambda: seen.append(engine.collection(DB, "new")))
        t.start()
        t.join()

    assert engine.run_batch([create_and_look])[0][0]
    assert seen == [None]
    assert engine.collection(DB, "new") is not None
    assert snapshot_before == []  # a list taken before is never changed


def test_budget_stops_a_group_after_the_job_that_used_it(engine: Engine) -> None:
    jobs = [(lambda i=i: engine.insert(DB, "c", [enc({"_id": i})], now_ms=NOW)) for i in range(5)]
    assert len(engine.run_batch(jobs, budget_seconds=0.0)) == 1
    assert ids(engine) == [0]


def test_try_run_gives_way_to_a_group_in_progress(engine: Engine) -> None:
    inside: list[Any] = []

    def job() -> None:
        t = threading.Thread(target=lambda: inside.append(engine.try_run(lambda: 1)))
        t.start()
        t.join()

    engine.run_batch([job])
    assert inside == [None]
    assert engine.try_run(lambda: 2) == (True, 2)


def test_sync_covers_every_commit(engine: Engine) -> None:
    engine.insert(DB, "c", [enc({"_id": 1})], now_ms=NOW)
    assert engine.durable < engine.commits
    assert engine.sync() == engine.commits == engine.durable


@pytest.mark.parametrize("n", [1, 3])
def test_reopen_after_close_keeps_group_commits(tmp_path: Path, n: int) -> None:
    path = str(tmp_path / "d")
    engine = Engine.open(path)
    engine.run_batch(
        [(lambda i=i: engine.insert(DB, "c", [enc({"_id": i})], now_ms=NOW)) for i in range(n)]
    )
    engine.close()
    again = Engine.open(path)
    try:
        assert ids(again) == list(range(n))
    finally:
        again.close()


def test_a_group_run_again_with_savepoints_publishes_its_catalog_changes(engine: Engine) -> None:
    """A write that fails after changing something makes the group run again with a savepoint
    around every write: the catalog changes of the writes that succeed are still published, the
    failed write's are not (nested writes included)."""

    def fails_after_creating() -> None:
        def run() -> None:
            engine.create_collection(DB, "gone")
            raise ValueError("fails after creating")

        engine.atomic(run)

    def nested() -> None:
        engine.atomic(lambda: engine.create_collection(DB, "inner"))

    outcomes = engine.run_batch(
        [lambda: engine.create_collection(DB, "kept"), fails_after_creating, nested]
    )
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert engine.collection(DB, "kept") is not None
    assert engine.collection(DB, "inner") is not None
    assert engine.collection(DB, "gone") is None


def test_after_commit_runs_once_for_writes_that_committed(engine: Engine) -> None:
    """A job's after_commit runs once its group commits: once, though the group was aborted and
    run again (a later write failed without savepoints), and never for a write undone alone."""
    writer = engine.index_builds.writer
    ran: list[str] = []
    seen_committed: list[bool] = []

    def job(name: str, fail: bool = False) -> Any:
        def fn(_txn: Any, _changes: Any) -> None:
            engine.create_collection(DB, name)

            def after() -> None:
                ran.append(name)
                seen_committed.append(engine.collection(DB, name) is not None)

            writer.after_commit(after)
            if fail:
                raise NamespaceExists("undone")

        return lambda: writer.write(fn)

    outcomes = engine.run_batch([job("a"), job("b", fail=True), job("c")])
    assert [ok for ok, _ in outcomes] == [True, False, True]
    assert ran == ["a", "c"]
    assert seen_committed == [True, True]  # after the commit, with the catalog published
    assert ids(engine, "a") == [] and engine.collection(DB, "b") is None
    with pytest.raises(AssertionError):
        writer.after_commit(lambda: None)  # outside any group
