"""The TTL monitor's policy with no App, no storage and no sleeping: a store that counts expired
documents, a clock the test sets, and a pause that only records. A pass gives every TTL collection
a batch in turn until each has fewer expired documents than a batch; the monitor's task passes
when woken, unless ttlMonitorEnabled is off."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from ebbdb.server.parameters import Parameters
from ebbdb.server.ttl_monitor import (
    BATCH,
    DATE_STRINGS_ID,
    PAUSE_SECONDS,
    Expiring,
    LastPass,
    TTLMonitor,
)
from ebbdb.storage.expiry.date_strings import DateStringNotice

NOW = 1_700_000_000_000


@dataclass(frozen=True)
class Coll:
    db: str
    name: str

    @property
    def ns(self) -> str:
        return f"{self.db}.{self.name}"


class Store:
    """Expired documents by namespace; records every purge as (ns, now_ms, limit)."""

    def __init__(self, expired: dict[str, int]) -> None:
        self.expired = dict(expired)
        self.calls: list[tuple[str, int, int]] = []
        self.purged = asyncio.Event()
        self.notices: list[DateStringNotice] = []

    def ttl_collections(self) -> Sequence[Expiring]:
        return [Coll(*ns.split(".", 1)) for ns in self.expired]

    async def purge_expired(self, db: str, name: str, now_ms: int, limit: int) -> tuple[int, bool]:
        ns = f"{db}.{name}"
        self.calls.append((ns, now_ms, limit))
        n = min(limit, self.expired[ns])
        self.expired[ns] -= n
        self.purged.set()
        return n, n >= limit

    def date_strings(self) -> Sequence[DateStringNotice]:
        taken, self.notices = self.notices, []
        return taken


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def monitor(store: Store, pauses: list[float], **parameters: object) -> TTLMonitor:
    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    return TTLMonitor(store, Parameters(dict(parameters)), Clock(NOW), pause)


def test_a_pass_visits_collections_round_robin_until_each_has_less_than_a_batch() -> None:
    b = BATCH
    store = Store({"db.a": 2 * b + 5, "db.b": b, "db.c": 0, "other.d": 2 * b})
    pauses: list[float] = []
    ttl = monitor(store, pauses)
    result = asyncio.run(ttl.run_pass())
    assert [ns for ns, _, _ in store.calls] == [
        "db.a", "db.b", "db.c", "other.d",  # every collection gets a batch
        "db.a", "db.b", "other.d",  # those whose batch was full get another
        "db.a", "other.d",
    ]  # fmt: skip
    assert {(now, limit) for _, now, limit in store.calls} == {(NOW, b)}
    assert result.deleted == {"db.a": 2 * b + 5, "db.b": b, "other.d": 2 * b}
    assert (result.total, result.now_ms) == (5 * b + 5, NOW)
    assert pauses == [PAUSE_SECONDS] * 6  # after each batch that deleted something
    assert (ttl.passes, ttl.sub_passes, ttl.deleted_documents) == (1, 3, 5 * b + 5)


def test_a_pass_runs_at_the_clock_s_time_or_at_the_time_given() -> None:
    store = Store({"db.a": 0})
    ttl = monitor(store, [])
    assert asyncio.run(ttl.run_pass()).now_ms == NOW
    assert asyncio.run(ttl.run_pass(NOW + 5)).now_ms == NOW + 5
    assert [now for _, now, _ in store.calls] == [NOW, NOW + 5]
    assert ttl.passes == 2 and ttl.deleted_documents == 0


def test_a_pass_without_ttl_collections_deletes_nothing() -> None:
    pauses: list[float] = []
    ttl = monitor(Store({}), pauses)
    result = asyncio.run(ttl.run_pass())
    assert result.deleted == {} and result.total == 0
    assert (ttl.passes, ttl.sub_passes, pauses) == (1, 0, [])


def test_the_last_pass_over_each_collection() -> None:
    store = Store({"db.a": 3, "db.b": 0})
    ttl = monitor(store, [])
    assert ttl.last_pass("db.a") is None
    asyncio.run(ttl.run_pass())
    assert ttl.last_pass("db.a") == LastPass(NOW, 3)
    assert ttl.last_pass("db.b") == LastPass(NOW, 0)
    del store.expired["db.b"]  # no TTL index any more: not visited, forgotten
    asyncio.run(ttl.run_pass(NOW + 9))
    assert ttl.last_pass("db.a") == LastPass(NOW + 9, 0)
    assert ttl.last_pass("db.b") is None
    assert ttl.last_pass("db.zzz") is None


def test_a_pass_logs_each_date_string_notice_as_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = Store({"db.a": 0})
    ttl = monitor(store, [])
    store.notices = [
        DateStringNotice("db.a", "t_1", "t", 1, "2024-01-01"),
        DateStringNotice("db.a", "u_1", "u", 2, "2024-01-02"),
    ]
    with caplog.at_level(logging.WARNING, logger="ebbdb.ttl"):
        asyncio.run(ttl.run_pass())
        asyncio.run(ttl.run_pass())
    warnings = [r for r in caplog.records if r.name == "ebbdb.ttl"]
    assert [r.levelno for r in warnings] == [logging.WARNING, logging.WARNING]
    events = [r.__dict__["event"] for r in warnings]
    assert [(e.id, e.ctx, e.attr["index"]) for e in events] == [
        (DATE_STRINGS_ID, "TTLMonitor", "t_1"),
        (DATE_STRINGS_ID, "TTLMonitor", "u_1"),
    ]
    assert "'2024-01-01'" in warnings[0].getMessage()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_task_passes_when_woken_unless_disabled(enabled: bool) -> None:
    store = Store({"db.a": 3})

    async def main() -> TTLMonitor:
        ttl = monitor(store, [], ttlMonitorSleepSecs=3600, ttlMonitorEnabled=enabled)
        task = asyncio.create_task(ttl.run())
        await asyncio.sleep(0)
        ttl.wake()
        if enabled:
            await asyncio.wait_for(store.purged.wait(), 5)
        for _ in range(5):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return ttl

    ttl = asyncio.run(main())
    assert ttl.passes == (1 if enabled else 0)
    assert store.expired == {"db.a": 0 if enabled else 3}
