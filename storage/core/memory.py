"""Memory operations hold, counted (mongod's memory usage trackers).

Three levels, each charging the one above it:

- `Pool`: the server's memory for operations, with a cap (the `ebbdbMaxTrackedMemoryBytes`
  server parameter; 0: no cap). Past the cap the operation asking for more gets 146
  ExceededMemoryLimit, and the others go on.
- the operation's own `Tracker` (`OpToken.memory`): what one operation holds in all its stages,
  and its peak, for the profiler and the slow-operation log.
- a stage's (or an accumulator's, or an expression's) `Tracker`, made with `child()`, with an
  optional limit of its own (a stage's 100 MB): `over_limit` tells the stage to spill, or to
  answer 292 without disk use.

A tracker takes from the pool in grains of `GRAIN` bytes, so the pool's lock is taken once per
64 KB, not once per value (and a thousand small operations hold 64 MB of the cap, not 1 GB). A tracker is used by one thread at a time (the thread running its
operation's work); the pool is shared by all, under its lock. `close()` gives back everything a
tracker still holds: a stage calls it when it is done (a generator's `finally`), so a cursor
dropped half-way gives back its memory when its generators are closed.

What is counted is what Python holds, not what BSON would: `approximate_size` in limits.py
counts values, and each stage adds what its own structures cost per row.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import TypeVar

from ebbdb.storage.core.errors import QueryError

T = TypeVar("T")

#: What a tracker takes from the pool at a time.
GRAIN = 1 << 16


class Pool:
    """The server's memory for operations: `cap` bytes (0: no cap), `used` now, `peak` ever."""

    __slots__ = ("_lock", "cap", "peak", "used")

    def __init__(self, cap: int = 0) -> None:
        self.cap = cap
        self.used = 0
        self.peak = 0
        self._lock = threading.Lock()

    def take(self, n: int, what: str) -> None:
        """Take `n` bytes for `what` (a stage's name), or raise 146 past the cap."""
        with self._lock:
            used = self.used + n
            if self.cap and used > self.cap:
                raise exceeded_server(what, self.used, self.cap)
            self.used = used
            if used > self.peak:
                self.peak = used

    def give(self, n: int) -> None:
        with self._lock:
            self.used -= n


def exceeded_server(what: str, used: int, cap: int) -> QueryError:
    return QueryError(
        "ExceededMemoryLimit",
        f"{what} needs more memory, but the server's operations already hold {used} bytes of"
        f" the {cap} bytes they may (ebbdbMaxTrackedMemoryBytes)",
    )


class Tracker:
    """The bytes one operation, stage or value holds: `used` now and `peak` ever, charged to the
    tracker above (`parent`) and so to the pool. `limit` (0: none) is the stage's own limit:
    charging past it does not raise, `over_limit` says so (the stage spills, or raises 292)."""

    __slots__ = ("_held", "limit", "parent", "peak", "pool", "used", "what")

    def __init__(self, what: str, pool: Pool, parent: Tracker | None = None, limit: int = 0):
        self.what = what
        self.pool = pool
        self.parent = parent
        self.limit = limit
        self.used = 0
        self.peak = 0
        self._held = 0  # taken from the pool (top-level trackers only)

    def child(self, what: str, limit: int = 0) -> Tracker:
        """A tracker for one stage (or accumulator, or value) of this operation."""
        return Tracker(what, self.pool, self, limit)

    def charge(self, n: int) -> None:
        """Count `n` more bytes held; 146 ExceededMemoryLimit when the server's cap is past
        (then nothing is counted)."""
        self._add(n, self.what)

    def _add(self, n: int, what: str) -> None:
        used = self.used + n
        parent = self.parent
        if parent is not None:
            parent._add(n, what)  # raises before anything here changes
        elif used > self._held:
            want = -(-used // GRAIN) * GRAIN - self._held
            self.pool.take(want, what)
            self._held += want
        self.used = used
        if used > self.peak:
            self.peak = used

    def release(self, n: int) -> None:
        """Count `n` bytes no longer held."""
        n = min(n, self.used)
        self.used -= n
        parent = self.parent
        if parent is not None:
            parent.release(n)
        elif self._held - self.used >= 2 * GRAIN or (self.used == 0 and self._held):
            # Nothing held: all given back, so that an operation whose cursor outlives it (its
            # stages closing later) leaves nothing taken from the pool.
            keep = -(-self.used // GRAIN) * GRAIN
            self.pool.give(self._held - keep)
            self._held = keep

    def set(self, n: int) -> None:
        """Count exactly `n` bytes held (a stage that measures its whole state at once)."""
        if n > self.used:
            self.charge(n - self.used)
        elif n < self.used:
            self.release(self.used - n)

    @property
    def over_limit(self) -> bool:
        return bool(self.limit) and self.used > self.limit

    def close(self) -> None:
        """Give back everything still held (when the stage or operation is done)."""
        if self.used:
            self.release(self.used)
        if self.parent is None and self._held:
            self.pool.give(self._held)
            self._held = 0


#: The tracker of the stage whose accumulators are being made: an accumulator that holds values
#: (limits.py's `Tracked`) charges the tracker bound here when it was made. Bound only around the
#: synchronous call that makes a group's accumulators (`bound`), never across a generator's yield,
#: so interleaved stages cannot see each other's.
CHARGED: contextvars.ContextVar[Tracker | None] = contextvars.ContextVar(
    "ebbdb_charged", default=None
)


def bound(tracker: Tracker | None, make: Callable[[], T]) -> T:
    """`make()`, with `tracker` the one what it makes charges (CHARGED)."""
    token = CHARGED.set(tracker)
    try:
        return make()
    finally:
        CHARGED.reset(token)


#: The pool of work no server runs (storage tests, tools): no cap.
UNLIMITED = Pool()


__all__ = ["CHARGED", "GRAIN", "UNLIMITED", "Pool", "Tracker", "bound", "exceeded_server"]
