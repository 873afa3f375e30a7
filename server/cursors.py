"""Open cursors: id -> the query run it advances. A cursor holds a resume position, never a
transaction; each batch is read in bounded chunks, yielding to the event loop between them."""

from __future__ import annotations

import asyncio
import functools
import os
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import bson
import bson.errors

from ebbdb.server.gateway import Gateway
from ebbdb.server.sessions import CURRENT_SESSION, CURRENT_TRANSACTION, Session
from ebbdb.storage.core.documents import CODEC, MAX_DOCUMENT_SIZE
from ebbdb.storage.core.errors import QueryError

if TYPE_CHECKING:
    from ebbdb.storage.execution.execute import QueryRun

#: Every reply must stay under maxBsonObjectSize; leave room for the envelope.
MAX_BATCH_BYTES = 16 * 1024 * 1024 - 16 * 1024
DEFAULT_FIRST_BATCH = 101


def _encode_result(doc: dict[str, Any]) -> bytes:
    """A pipeline result as BSON; a value BSON cannot hold (an integer past 64 bits from date
    arithmetic, a string past 2 GiB) is the client's error, not an internal one."""
    try:
        return bson.encode(doc, codec_options=CODEC)
    except OverflowError:
        raise QueryError("Overflow", "a result holds an integer outside the 64-bit range") from None
    except (bson.errors.InvalidStringData, bson.errors.InvalidDocument) as exc:
        raise QueryError("BadValue", f"a result cannot be stored as BSON: {exc}") from None


class PipelineRun:
    """An aggregation's results, pulled lazily from its pipeline on a reader thread batch by
    batch; `set_now` (called before each batch) moves the time the pipeline's reads hide expired
    documents at, so streaming stages check expiry per batch as find does."""

    def __init__(
        self,
        results: Iterator[dict[str, Any]],
        set_now: Callable[[int], None],
        read: Callable[..., Any],
    ) -> None:
        self._results = results
        self._set_now = set_now
        self._read = read
        self._pending: bytes | None = None
        self.exhausted = False

    def _pull(self, max_docs: int, max_bytes: int, now_ms: int) -> list[bytes]:
        self._set_now(now_ms)
        out: list[bytes] = []
        size = 0
        while len(out) < max_docs:
            raw = self._pending
            self._pending = None
            if raw is None:
                doc = next(self._results, None)
                if doc is None:
                    self.exhausted = True
                    break
                raw = _encode_result(doc)
                if len(raw) > MAX_DOCUMENT_SIZE:
                    raise QueryError(
                        "BSONObjectTooLarge",
                        f"BSONObj size: {len(raw)} (0x{len(raw):X}) is invalid. "
                        f"Size must be between 0 and {MAX_DOCUMENT_SIZE}(16MB)",
                    )
            if out and size + len(raw) > max_bytes:
                self._pending = raw
                break
            out.append(raw)
            size += len(raw)
        return out

    async def fill(self, max_docs: int | None, now_ms: int) -> list[bytes]:
        want = max_docs if max_docs is not None else 1 << 31
        out: list[bytes] = await self._read(self._pull, want, MAX_BATCH_BYTES, now_ms)
        return out


@dataclass(frozen=True)
class Tailing:
    """A tailable cursor (on a capped collection, server/tailable.py): it stays open past its
    last document, and with `await_data` a getMore waits a while for new ones."""

    await_data: bool


@dataclass
class Cursor:
    id: int
    ns: str
    run: QueryRun | PipelineRun
    no_timeout: bool = False
    tail: Tailing | None = None
    last_used: float = field(default_factory=time.monotonic)
    #: A getMore is producing a batch (a second one at the same time is refused).
    in_use: bool = False
    #: Closed by killCursors (or the reaper) while a getMore was producing a batch.
    killed: bool = False
    #: What an awaitData getMore waits on (server/tailable.py); closing the cursor resolves it.
    waiting: asyncio.Future[None] | None = None
    #: Seconds of the opening command's maxTimeMS its getMores may still use (None: no limit).
    time_left: float | None = None
    #: The logical session that opened it (the cursor dies with the session).
    session: Session | None = None
    #: The txnNumber of the multi-document transaction that opened it (None: none); it dies
    #: when the transaction ends.
    txn_number: int | None = None


class CursorManager:
    def __init__(self) -> None:
        self._cursors: dict[int, Cursor] = {}

    def __len__(self) -> int:
        return len(self._cursors)

    def open(
        self,
        ns: str,
        run: QueryRun | PipelineRun,
        no_timeout: bool = False,
        tail: Tailing | None = None,
    ) -> Cursor:
        while True:
            # 63 random bits from the system's source, as secrets.randbits(63) gives (that
            # module brings hmac and hashlib with it, for nothing else on the start path).
            cid = int.from_bytes(os.urandom(8)) >> 1
            if cid and cid not in self._cursors:
                break
        cursor = Cursor(cid, ns, run, no_timeout, tail=tail)
        self._cursors[cid] = cursor
        session = CURRENT_SESSION.get()
        if session is not None:
            cursor.session = session
            session.cursors.add(cid)
            txn = CURRENT_TRANSACTION.get()
            if txn is not None:
                cursor.txn_number = txn.number
                txn.cursors.add(cid)
        return cursor

    def get(self, cid: int) -> Cursor | None:
        cursor = self._cursors.get(cid)
        if cursor is not None:
            cursor.last_used = time.monotonic()
        return cursor

    def peek(self, cid: int) -> Cursor | None:
        """The cursor `cid`, not marked used (the express path's look before it decides)."""
        return self._cursors.get(cid)

    def close(self, cid: int) -> bool:
        """Forget a cursor; a getMore producing a batch for it learns from `killed`."""
        cursor = self._cursors.pop(cid, None)
        if cursor is None:
            return False
        if cursor.session is not None:
            cursor.session.cursors.discard(cid)
        cursor.killed = True
        if cursor.waiting is not None and not cursor.waiting.done():
            cursor.waiting.set_result(None)
        return True

    def reap(self, idle_seconds: float, now: float | None = None) -> int:
        """Close cursors idle longer than `idle_seconds` (unless noCursorTimeout); returns how many."""
        t = time.monotonic() if now is None else now
        stale = [
            c.id
            for c in self._cursors.values()
            if not c.no_timeout and not c.in_use and t - c.last_used > idle_seconds
        ]
        for cid in stale:
            cursor = self._cursors.pop(cid)
            if cursor.session is not None:
                cursor.session.cursors.discard(cid)
        return len(stale)

    def close_all(self, ids: Iterable[int]) -> None:
        """Close the cursors of a session that ended, was killed or timed out."""
        for cid in list(ids):
            self.close(cid)


async def _next_chunk(
    gateway: Gateway, run: QueryRun, max_docs: int, max_bytes: int, first: bool, now_ms: int
) -> list[bytes]:
    """One chunk of a run: on the loop when matching a document is cheap (a chunk examines a
    bounded number of documents); on a reader thread when the filter holds regular expressions
    or $expr, whose cost per document has no small bound, or when the run sorts in memory, so
    that the loop keeps serving (killOp, currentOp) meanwhile."""
    chunk = functools.partial(
        run.next_chunk, gateway.engine, max_docs, max_bytes, first=first, now_ms=now_ms
    )
    if run.offload:
        return await gateway.read(chunk)
    return chunk()


async def fill_batch(
    gateway: Gateway, run: QueryRun | PipelineRun, max_docs: int | None, now_ms: int
) -> list[bytes]:
    """Read up to `max_docs` documents (None: as many as fit in one reply), chunk by chunk,
    leaving out documents expired at `now_ms` (one time for the whole batch).
    Between chunks the event loop serves other clients."""
    if isinstance(run, PipelineRun):
        return await run.fill(max_docs, now_ms)
    out: list[bytes] = []
    size = 0
    want = max_docs if max_docs is not None else 1 << 31
    while len(out) < want and not run.exhausted:
        chunk = await _next_chunk(
            gateway, run, want - len(out), MAX_BATCH_BYTES - size, not out, now_ms
        )
        out += chunk
        size += sum(map(len, chunk))
        if run.size_limited:
            break
        if len(out) < want and not run.exhausted:
            await asyncio.sleep(0)
    return out


async def each_chunk(gateway: Gateway, run: QueryRun, now_ms: int) -> AsyncIterator[list[bytes]]:
    """Every remaining document of a run (none expired at `now_ms`), chunk by chunk, yielding to
    the event loop between chunks (count, distinct, explain: results that never become a cursor)."""
    while not run.exhausted:
        chunk = await _next_chunk(gateway, run, 1 << 31, 1 << 62, True, now_ms)
        if chunk:
            yield chunk
        if not run.exhausted:
            await asyncio.sleep(0)
