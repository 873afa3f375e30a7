"""Insert notifications: the writer thread tells, after each commit, which collections it inserted
into; a getMore awaiting data on a tailable cursor waits on the event loop (never blocking it)
until an insert into its collection is committed, or its time is up."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager


class InsertWatch:
    """Waiters by collection id. `committed` is called on the writer thread; everything else runs
    on the event loop."""

    def __init__(self) -> None:
        self._waiters: dict[int, set[asyncio.Future[None]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    @contextmanager
    def waiting(self, coll_id: int) -> Iterator[asyncio.Future[None]]:
        """A future resolved by the next commit that inserts into `coll_id`. Register it BEFORE
        the last look for new documents: an insert committed after that look then wakes it, and
        one committed before is seen by the look."""
        loop = asyncio.get_running_loop()
        self._loop = loop
        fut: asyncio.Future[None] = loop.create_future()
        self._waiters.setdefault(coll_id, set()).add(fut)
        try:
            yield fut
        finally:
            waiters = self._waiters.get(coll_id)
            if waiters is not None:
                waiters.discard(fut)
                if not waiters:
                    del self._waiters[coll_id]

    def committed(self, coll_ids: frozenset[int]) -> None:
        """Writer thread, after a commit: wake the waiters of these collections (a cheap no-op
        when nobody waits, the common case)."""
        loop = self._loop
        if loop is None or not any(c in self._waiters for c in coll_ids):
            return
        try:
            loop.call_soon_threadsafe(self._wake, coll_ids)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    def _wake(self, coll_ids: frozenset[int]) -> None:
        for coll_id in coll_ids:
            for fut in self._waiters.get(coll_id, ()):
                if not fut.done():
                    fut.set_result(None)
