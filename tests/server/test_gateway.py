"""The gateway without a network, on a real engine: writes queued together commit as one group,
journaled waiters that arrive while a sync runs share the next one, small writes run at once when
the writer is idle, and the fsync lock holds writes back."""

from __future__ import annotations

import asyncio
import threading
import types
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import bson
import pytest
from bson.binary import Binary

from ebbdb.server import gateway as gateway_module
from ebbdb.server import retryable_writes
from ebbdb.server.commands import writes as write_commands
from ebbdb.server.gateway import Gateway
from ebbdb.storage.engine import writer as writer_module
from ebbdb.storage.engine.oplog import WRITE_SESSION
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.expiry import ttl
from tests.helpers import enc

NOW = 1_700_000_000_000
T = TypeVar("T")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    eng = Engine.open(str(tmp_path / "data"))
    yield eng
    eng.close()


def insert(engine: Engine, i: int) -> int:
    return engine.insert("db", "c", [enc({"_id": i})], now_ms=NOW).inserted


def on_gateway(engine: Engine, test: Callable[[Gateway], Awaitable[T]], **options: Any) -> T:
    """Run `test` on an event loop with a gateway to `engine` (the clock at NOW, `options` as
    Gateway takes them), closed after."""

    async def main() -> T:
        gateway = Gateway(engine, lambda: NOW, **options)
        try:
            return await test(gateway)
        finally:
            gateway.close()

    return asyncio.run(main())


def test_writes_queued_together_share_one_commit(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A group past its time budget commits early and leaves the rest to the next group: on a
    # loaded machine fifty inserts (the first creates the collection) can take longer than the
    # 5 ms budget. This test is about grouping, so the budget is out of the way.
    monkeypatch.setattr(gateway_module, "GROUP_BUDGET_SECONDS", 10.0)
    release = threading.Event()
    holding = threading.Event()

    def hold() -> bool:
        holding.set()
        return release.wait(5)

    async def test(gateway: Gateway) -> list[int]:
        # The first job holds the writer until the others are queued behind it (waited for, not
        # slept on: a loaded machine may start the writer's job late).
        first = asyncio.ensure_future(gateway.write(hold))
        await asyncio.get_running_loop().run_in_executor(None, holding.wait, 5)
        before = engine.commits
        rest = [asyncio.ensure_future(gateway.write(insert, engine, i)) for i in range(50)]
        await asyncio.sleep(0.05)
        release.set()
        await first
        results = await asyncio.gather(*rest)
        # The holder's group, then one group for all fifty.
        assert engine.commits - before == 2
        return results

    assert on_gateway(engine, test) == [1] * 50


def test_journaled_waiters_share_a_sync(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    syncing = threading.Event()
    release = threading.Event()
    calls: list[int] = []
    real_sync = engine.sync

    def slow_sync() -> int:
        calls.append(engine.commits)
        syncing.set()
        release.wait(5)
        return real_sync()

    monkeypatch.setattr(engine, "sync", slow_sync)

    async def test(gateway: Gateway) -> None:
        await gateway.write(insert, engine, 0)
        first = asyncio.ensure_future(gateway.wait_durable())
        await asyncio.get_running_loop().run_in_executor(None, syncing.wait, 5)
        # Eight writers commit and wait while that sync is in progress ...
        for i in range(1, 9):
            await gateway.write(insert, engine, i)
        waiters = [asyncio.ensure_future(gateway.wait_durable()) for _ in range(8)]
        await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(first, *waiters)
        # ... and at most one more sync covers all eight (none, when the sync in progress
        # started writing after their commits).
        assert len(calls) <= 2
        assert engine.durable == engine.commits

    on_gateway(engine, test, sync_interval_ms=lambda: 10_000.0)


def test_small_writes_run_at_once_when_the_writer_is_idle(engine: Engine) -> None:
    async def test(gateway: Gateway) -> None:
        loop_thread = threading.get_ident()
        ran_on: list[int] = []

        def job(now_ms: int) -> int:
            ran_on.append(threading.get_ident())
            return insert(engine, 1)

        assert await gateway.write_small(job) == 1
        assert await gateway.write_stamped(job) == 0  # a duplicate _id: nothing inserted
        assert ran_on[0] == loop_thread
        assert ran_on[1] != loop_thread

    on_gateway(engine, test)


def test_fsync_lock_holds_writes_until_unlocked(engine: Engine) -> None:
    async def test(gateway: Gateway) -> None:
        assert await gateway.fsync_lock() == 1
        pending = asyncio.ensure_future(gateway.write(insert, engine, 1))
        await asyncio.sleep(0.2)
        assert not pending.done()
        assert gateway.fsync_unlock() == 0
        assert await asyncio.wait_for(pending, 5) == 1
        assert gateway.fsync_unlock() is None

    on_gateway(engine, test)


def test_a_write_queued_between_two_slices_commits_between_them(engine: Engine) -> None:
    first, go_on = threading.Event(), threading.Event()

    def statement(now_ms: int) -> int:
        insert(engine, 1)  # a slice, committed on the writer
        first.set()
        go_on.wait(10)
        return insert(engine, 2)  # the next slice, queued behind what came meanwhile

    async def test(gw: Gateway) -> None:
        sliced = asyncio.ensure_future(gw.write_sliced(statement))
        await asyncio.to_thread(first.wait, 10)
        other = asyncio.ensure_future(gw.write(insert, engine, 100))
        await asyncio.sleep(0)  # queued now
        go_on.set()
        assert list(await asyncio.gather(sliced, other)) == [1, 1]

    on_gateway(engine, test)
    coll = engine.collection("db", "c")
    assert coll is not None
    with engine.read() as reader:
        stored = [
            bson.decode(ttl.body(value))["_id"] for _, value in reader.scan(coll, None, False)
        ]
    assert stored == [1, 100, 2]  # in commit order


def test_each_write_of_a_sliced_statement_commits_on_its_own(engine: Engine) -> None:
    def statement(now_ms: int) -> int:
        return sum(insert(engine, i) for i in range(5))

    async def test(gw: Gateway) -> tuple[int, int]:
        return await gw.write_sliced(statement), gw.groups

    assert on_gateway(engine, test) == (5, 5)


def test_a_retryable_insert_redone_on_a_full_disk_reports_what_it_stored(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sliced retryable insert whose group the disk refuses at commit, then runs again alone
    and is refused (OutOfDiskSpace): the reply counts, and the session records as executed,
    only what was stored (before the fix: n 40, nothing stored, and a retry inserting
    nothing). Once space is back, the retry inserts them."""
    engine.enable_oplog(16)
    engine.insert("db", "c", [enc({"_id": -1})], now_ms=NOW)
    space = engine.env.space
    commit = writer_module.Writer._commit
    refuse = [True]

    def refused_once(txn: Any) -> None:
        if refuse[0]:  # the disk refuses this commit; from then on it has no room
            refuse[0] = False
            space.low = True
            monkeypatch.setattr(space, "ensure", lambda *a, **k: False)
            raise writer_module._Redo(writer_module._NO_SPACE)
        commit(txn)

    monkeypatch.setattr(writer_module.Writer, "_commit", staticmethod(refused_once))
    lsid = {"id": Binary(uuid.uuid4().bytes, 4), "uid": Binary(b"\0" * 32, 0)}
    state = retryable_writes.RetryState(1)
    docs = tuple(enc({"_id": i, "pad": "x" * 3000}) for i in range(40))  # sliced: > 16
    params = write_commands.InsertParams(collection="c", documents=docs, ordered=True)

    async def insert_once(gateway: Gateway) -> tuple[dict[str, Any], retryable_writes.Retry]:
        ctx = types.SimpleNamespace(
            gateway=gateway, db="db", stats=types.SimpleNamespace(count_documents=lambda *a: None)
        )
        retry = retryable_writes.Retry(
            types.SimpleNamespace(lsid=lsid),  # type: ignore[arg-type]
            state,
            engine,
        )
        token = WRITE_SESSION.set(retry.write_session)
        try:
            reply = await write_commands._insert_retryable(ctx, params, retry)  # type: ignore[arg-type]
        finally:
            WRITE_SESSION.reset(token)
        retry.commit()
        return reply, retry

    def stored() -> int:
        info = engine.collection("db", "c")
        assert info is not None
        with engine.read() as r:
            return int(r.stats(info)[0]) - 1  # less the first document

    reply, _retry = on_gateway(engine, insert_once)
    assert reply["n"] == stored() == 0
    assert [e["code"] for e in reply["writeErrors"]] == [14031]
    assert state.executed == {}

    monkeypatch.undo()  # the commit and space.ensure as they were
    space.low = False
    reply, _retry = on_gateway(engine, insert_once)
    assert reply["n"] == stored() == 40
    assert sorted(state.executed) == list(range(40))
