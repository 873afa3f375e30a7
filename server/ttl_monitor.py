"""The TTL monitor: an asyncio task that sleeps ttlMonitorSleepSecs, then deletes expired documents
in bounded batches (one short write transaction each), visiting collections round robin."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from server.app import App

log = logging.getLogger("ebbdb.ttl")

#: Documents one job of a pass deletes at most: a few milliseconds on the writer thread, so other
#: clients' writes (which share its group) wait little. No commit syncs, so bigger is not faster.
BATCH = 250
#: A pause after each batch, so the purge leaves CPU time to the clients it competes with.
PAUSE_SECONDS = 0.002


@dataclass(frozen=True)
class PassResult:
    deleted: dict[str, int]  # namespace -> documents deleted
    now_ms: int

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


class TTLMonitor:
    def __init__(self, app: App) -> None:
        self.app = app
        self.passes = 0
        self.sub_passes = 0
        self.deleted_documents = 0
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()

    def wake(self) -> None:
        """Cut the current sleep short (ttlMonitorSleepSecs changed)."""
        self._wake.set()

    async def run(self) -> None:
        """Sleep first, then pass, forever; a failing pass is logged and the next one runs."""
        while True:
            seconds = int(self.app.parameters.get("ttlMonitorSleepSecs"))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._wake.wait()
            self._wake.clear()
            if not self.app.parameters.get("ttlMonitorEnabled"):
                continue
            try:
                await self.run_pass()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("TTL pass failed; the next one runs in due course")

    async def run_pass(self, now_ms: int | None = None) -> PassResult:
        """One pass at `now_ms` (default: the expiry clock): every collection with a TTL index gets
        a batch in turn, again and again, until none has expired documents left."""
        async with self._lock:
            app = self.app
            now = app.clock.now_ms() if now_ms is None else now_ms
            self.passes += 1
            deleted: dict[str, int] = {}
            elapsed: dict[str, float] = {}
            pending = app.engine.ttl_collections()
            while pending:
                self.sub_passes += 1
                still = []
                for coll in pending:
                    started = time.perf_counter()
                    n = await app.gateway.write(
                        app.engine.purge_expired, coll.db, coll.name, now, BATCH
                    )
                    elapsed[coll.ns] = elapsed.get(coll.ns, 0.0) + time.perf_counter() - started
                    deleted[coll.ns] = deleted.get(coll.ns, 0) + n
                    if n >= BATCH:
                        still.append(coll)
                    if n:
                        await asyncio.sleep(PAUSE_SECONDS)
                pending = still
            for ns, n in deleted.items():
                if n:
                    log.info("TTL deleted %d documents from %s in %d ms", n, ns, elapsed[ns] * 1000)
            result = PassResult({ns: n for ns, n in deleted.items() if n}, now)
            self.deleted_documents += result.total
            return result
