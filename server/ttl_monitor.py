"""The TTL monitor: an asyncio task that sleeps ttlMonitorSleepSecs, then deletes expired documents
in bounded batches (one short write transaction each), visiting collections round robin, and warns
once per TTL index about date-like strings in its field. It is given its storage, its clock and its
pause, so a test drives a pass with neither App nor sleep."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ebbdb.server.gateway import Gateway
from ebbdb.server.log import log_event
from ebbdb.server.parameters import Parameters
from ebbdb.storage.expiry.date_strings import DateStringNotice

log = logging.getLogger("ebbdb.ttl")
#: ebbdb's own log id (MongoDB has no such warning) for date-like strings in a TTL index's field.
DATE_STRINGS_ID = 9_100_001

#: Documents one job of a pass deletes at most ...
BATCH = 10_000
#: ... and the time it may take: one short write transaction on the writer thread, so that other
#: clients' writes (queued behind it) wait little, as mongod's deletes yield. Between two jobs the
#: writer thread waits for the next, and the event loop's thread has the interpreter: another
#: client's read waits at most about this long (the interpreter's own switch interval is 5 ms).
BATCH_SECONDS = 0.002
#: A pause after each batch: 0 is one turn of the event loop, which answers what came meanwhile
#: (a longer pause costs the purge its rate and buys the others little more).
PAUSE_SECONDS = 0.0


class Expiring(Protocol):
    """A collection with a TTL index, as a pass visits it."""

    @property
    def db(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def ns(self) -> str: ...


class ExpiryStore(Protocol):
    """What a pass needs from storage: the collections that have a TTL index, and a way to delete
    up to `limit` of a collection's documents expired at `now_ms` in one bounded job (returning
    how many it did, and whether it stopped at its bounds: some may be left)."""

    def ttl_collections(self) -> Sequence[Expiring]: ...

    async def purge_expired(
        self, db: str, name: str, now_ms: int, limit: int
    ) -> tuple[int, bool]: ...

    def date_strings(self) -> Sequence[DateStringNotice]:
        """TTL indexes that met date-like strings since the last call (each once per engine)."""
        ...


class GatewayExpiry:
    """The server's ExpiryStore: the catalog is read on the loop, deletions run on the writer."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    def ttl_collections(self) -> Sequence[Expiring]:
        return self._gateway.engine.ttl_collections()

    async def purge_expired(self, db: str, name: str, now_ms: int, limit: int) -> tuple[int, bool]:
        engine = self._gateway.engine
        purge = engine.purge_expired_batch
        return await self._gateway.write(purge, db, name, now_ms, limit, BATCH_SECONDS)

    def date_strings(self) -> Sequence[DateStringNotice]:
        return self._gateway.engine.date_strings.take()


@dataclass(frozen=True)
class PassResult:
    deleted: dict[str, int]  # namespace -> documents deleted
    now_ms: int

    @property
    def total(self) -> int:
        return sum(self.deleted.values())


@dataclass(frozen=True)
class LastPass:
    """The monitor's last pass over one collection: when (the expiry clock's time) and how many
    documents it deleted there."""

    now_ms: int
    deleted: int


class TTLMonitor:
    """`run()` is the monitor's task; `run_pass()` is one pass (the ttlMonitorPass test command
    calls it too). `now` is the expiry clock; `pause` is awaited after each batch that deleted
    something (asyncio.sleep in the server)."""

    def __init__(
        self,
        store: ExpiryStore,
        parameters: Parameters,
        now: Callable[[], int],
        pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._store = store
        self._parameters = parameters
        self._now = now
        self._pause = pause
        self.passes = self.sub_passes = self.deleted_documents = 0
        self._last: dict[str, LastPass] = {}
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()

    def last_pass(self, ns: str) -> LastPass | None:
        """The last pass that visited namespace `ns` (None: none since the server started)."""
        return self._last.get(ns)

    def wake(self) -> None:
        """Cut the current sleep short (ttlMonitorSleepSecs changed)."""
        self._wake.set()

    async def run(self) -> None:
        """Sleep first, then pass, forever; a failing pass is logged and the next one runs."""
        while True:
            seconds = int(self._parameters.get("ttlMonitorSleepSecs"))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(seconds):
                    await self._wake.wait()
            self._wake.clear()
            if not self._parameters.get("ttlMonitorEnabled"):
                continue
            try:
                await self.run_pass()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("TTL pass failed; the next one runs in due course")

    async def run_pass(self, now_ms: int | None = None) -> PassResult:
        """One pass at `now_ms` (default: the clock's time): every collection with a TTL index
        gets a batch in turn, again and again, until none has expired documents left (a batch
        that ends within its bounds ends its collection's turns). Passes do not
        overlap: a second one waits for the first."""
        async with self._lock:
            now = self._now() if now_ms is None else now_ms
            self.passes += 1
            deleted: dict[str, int] = {}
            elapsed: dict[str, float] = {}
            pending = list(self._store.ttl_collections())
            visited = [coll.ns for coll in pending]
            while pending:
                self.sub_passes += 1
                still = []
                for coll in pending:
                    started = time.perf_counter()
                    n, more = await self._store.purge_expired(coll.db, coll.name, now, BATCH)
                    elapsed[coll.ns] = elapsed.get(coll.ns, 0.0) + time.perf_counter() - started
                    deleted[coll.ns] = deleted.get(coll.ns, 0) + n
                    if more:
                        still.append(coll)
                    if n:
                        await self._pause(PAUSE_SECONDS)
                pending = still
            for ns, n in deleted.items():
                if n:
                    log.info("TTL deleted %d documents from %s in %d ms", n, ns, elapsed[ns] * 1000)
            self._last = {ns: LastPass(now, deleted.get(ns, 0)) for ns in visited}
            self._warn_date_strings()
            result = PassResult({ns: n for ns, n in deleted.items() if n}, now)
            self.deleted_documents += result.total
            return result

    def _warn_date_strings(self) -> None:
        """One warning per TTL index that met date-like strings (storage says each only once)."""
        for n in self._store.date_strings():
            log_event(
                log,
                logging.WARNING,
                DATE_STRINGS_ID,
                "TTL index field holds strings that look like dates; they never expire",
                {
                    "namespace": n.ns,
                    "index": n.index,
                    "field": n.field,
                    "_id": n.id,
                    "value": n.value,
                },
                ctx="TTLMonitor",
                text=f"TTL index {n.index} on {n.ns}: field {n.field!r} holds strings that look "
                f"like dates, such as {n.value!r} (_id {n.id!r}); TTL expires by BSON dates only, "
                "so these documents never expire (ttlStatus counts them)",
            )
