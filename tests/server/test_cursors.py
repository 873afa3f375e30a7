"""The cursor table without a network: ids, lookups that refresh a cursor's idle clock, closing, and
reaping idle cursors at an injected `now` (noCursorTimeout cursors are never reaped)."""

from __future__ import annotations

import time
from typing import Any

from ebbdb.server.cursors import CursorManager

RUN: Any = object()  # the manager never looks inside a cursor's query run


def opened(mgr: CursorManager, last_used: float, no_timeout: bool = False) -> int:
    cursor = mgr.open("db.c", RUN, no_timeout)
    cursor.last_used = last_used
    return cursor.id


def test_open_gives_distinct_positive_63_bit_ids() -> None:
    mgr = CursorManager()
    ids = {mgr.open("db.c", RUN).id for _ in range(200)}
    assert len(ids) == 200 == len(mgr)
    assert all(0 < cid < 2**63 for cid in ids)


def test_get_and_close() -> None:
    mgr = CursorManager()
    cursor = mgr.open("db.c", RUN, no_timeout=True)
    got = mgr.get(cursor.id)
    assert got is cursor
    assert (got.ns, got.run, got.no_timeout) == ("db.c", RUN, True)
    assert mgr.get(cursor.id + 1) is None
    assert mgr.close(cursor.id) is True
    assert mgr.close(cursor.id) is False
    assert mgr.get(cursor.id) is None
    assert len(mgr) == 0


def test_reap_closes_only_cursors_idle_longer_than_the_timeout() -> None:
    mgr = CursorManager()
    old = opened(mgr, 100.0)
    edge = opened(mgr, 105.0)
    fresh = opened(mgr, 109.0)
    pinned = opened(mgr, 0.0, no_timeout=True)
    assert mgr.reap(5.0, now=110.0) == 1
    assert mgr.get(old) is None
    # Idle exactly as long as the timeout: not yet.
    assert mgr.get(edge) is not None
    assert mgr.get(fresh) is not None
    assert mgr.get(pinned) is not None
    assert len(mgr) == 3


def test_reap_with_nothing_stale() -> None:
    mgr = CursorManager()
    assert mgr.reap(1.0, now=1e9) == 0
    opened(mgr, 50.0)
    assert mgr.reap(600.0, now=100.0) == 0
    assert len(mgr) == 1


def test_get_refreshes_the_idle_clock() -> None:
    mgr = CursorManager()
    cid = opened(mgr, 0.0)
    before = time.monotonic()
    cursor = mgr.get(cid)
    assert cursor is not None and cursor.last_used >= before
    assert mgr.reap(60.0, now=before + 30.0) == 0
    assert mgr.reap(60.0, now=cursor.last_used + 61.0) == 1
    assert mgr.get(cid) is None


def test_reap_without_now_uses_the_monotonic_clock() -> None:
    mgr = CursorManager()
    stale = opened(mgr, time.monotonic() - 1000.0)
    live = mgr.open("db.c", RUN).id
    assert mgr.reap(10.0) == 1
    assert mgr.get(stale) is None and mgr.get(live) is not None
