"""The gateway between the event loop and storage. Reads run on the loop in short bounded calls;
aggregation pipelines, whose stages compute in Python for as long as they need, and queries whose
filter holds a regular expression or $expr (no small bound on the cost of one document) run on
reader threads. Writes are jobs for the one writer thread, which runs every job queued at that moment in
one LMDB write transaction and commits once (group commit); one loop callback then answers them
all. A commit does not wait for the disk: the syncer thread makes commits durable every
journalCommitInterval ms, and at once for a write that asks (`j: true`, `fsync`, "majority"),
one sync shared by every waiter that arrived before it started.

A statement that may change many documents (update or delete with multi, a large insert) is
sliced: it runs on a slicer thread, and each of its storage writes (a slice of about 10 ms or a
bounded number of documents, see storage/execution/writes.py) is a job of the writer like any
other, queued behind the writes that arrived meanwhile: no write waits behind a long one, as
mongod yields a multi-document write. Each slice commits on its own, so a crash leaves a prefix."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ebbdb.server.inserts import InsertWatch
from ebbdb.storage.core import interrupt
from ebbdb.storage.engine.oplog import WRITE_SESSION
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.engine.writer import SLICER, TRANSACTION

T = TypeVar("T")
log = logging.getLogger("ebbdb.storage")

#: How long one group of writes may run before it commits and answers what it holds, so that a
#: long job (a big insert_many, an update of many documents) does not hold back many short ones.
GROUP_BUDGET_SECONDS = 0.005
#: At most this many jobs in one group.
MAX_GROUP = 1000

#: Statements that commit in slices running at once (more wait for a thread).
SLICERS = 4

#: A job and who waits for it: a request on the event loop, or a slicer thread.
_Job = tuple[Callable[[], Any], "asyncio.Future[Any] | concurrent.futures.Future[Any]"]
#: A job that runs even under an fsync lock (the lock's own barrier).
_BARRIER: Callable[[], Any] = lambda: None  # noqa: E731


def _carrying_token(job: Callable[[], T]) -> Callable[[], T]:
    """`job` run under the interruption token of the operation that queues it (a thread does
    not share the request's context): it does not start once that operation is interrupted, and
    its loops check the token. The session a write is for (storage/engine/oplog.py) goes with it
    too: the oplog entries it writes carry the session's fields."""
    token = interrupt.current.get()
    session = WRITE_SESSION.get()
    if token is interrupt.NEVER and session is None:
        return job

    def run() -> T:
        reset = interrupt.current.set(token)
        reset_session = WRITE_SESSION.set(session)
        try:
            token.check()
            return job()
        finally:
            WRITE_SESSION.reset(reset_session)
            interrupt.current.reset(reset)

    return run


class Gateway:
    def __init__(
        self,
        engine: Engine,
        clock: Callable[[], int],
        sync_interval_ms: Callable[[], float] = lambda: 100.0,
    ) -> None:
        self.engine = engine
        #: Committed inserts, by collection: what tailable cursors awaiting data wait on.
        self.inserts = InsertWatch()
        engine.on_inserts(self.inserts.committed)
        self._clock = clock
        self._sync_interval_ms = sync_interval_ms
        self._readers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ebbdb-reader")
        #: Where the writes and long reads of multi-document transactions' statements run.
        self._transactions = ThreadPoolExecutor(max_workers=2, thread_name_prefix="ebbdb-txn")
        #: Where statements that commit in slices run (write_sliced).
        self._slicers = ThreadPoolExecutor(max_workers=SLICERS, thread_name_prefix="ebbdb-slicer")
        self._jobs: deque[_Job] = deque()
        self._cond = threading.Condition(threading.Lock())
        self._closing = False  # no new request's write is taken
        self._closed = False  # nor a slice: the writer ends once the queue is empty
        self._locks = 0  # fsync lock count: while above 0 the writer takes no job
        self._sync_wanted = threading.Event()
        self._sync_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._sync_lock = threading.Lock()
        self.groups = 0  # commits by the writer (for serverStatus)
        self.syncs = 0
        self._writer = threading.Thread(target=self._write_loop, name="ebbdb-writer", daemon=True)
        self._syncer = threading.Thread(target=self._sync_loop, name="ebbdb-syncer", daemon=True)
        self._writer.start()
        self._syncer.start()

    # -- writes ----------------------------------------------------------------------------------

    async def write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a storage write (a function calling the engine's write methods; it may be run again
        if its group has to be redone) on the writer thread; returns once it is committed."""
        job = functools.partial(fn, *args, **kwargs) if args or kwargs else fn
        if TRANSACTION.get() is not None:
            return await self._in_transaction(job)
        return await self._queue(job)

    async def _in_transaction(self, job: Callable[[], T]) -> T:
        """A statement of a multi-document transaction: its storage work goes to its overlay
        (storage/engine/overlay.py), not to the writer, on a thread of its own (the statement's
        context, which names the transaction, goes with it)."""
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        return await loop.run_in_executor(self._transactions, ctx.run, _carrying_token(job))

    async def write_small(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A write the caller knows is small and bounded (a few documents found by `_id`): when
        no other write is queued or running it runs at once on the loop (an LMDB commit without a
        sync is a copy into the page cache, tens of microseconds, cheaper than two thread hops);
        otherwise it joins the writer's next group. The expiry clock is read when it starts."""

        def stamped() -> T:
            return fn(*args, now_ms=self._clock(), **kwargs)

        if TRANSACTION.get() is not None:
            return await self._in_transaction(stamped)
        outcome = self.try_now(stamped)
        if outcome is not None:
            ok, value = outcome
            if not ok:
                raise value
            return value  # type: ignore[no-any-return]
        return await self._queue(stamped)

    def try_now(self, job: Callable[[], Any]) -> tuple[bool, Any] | None:
        """Run a small bounded write job at once on the loop when no other write is queued or
        running (write_small's fast case; the express path's, which answers without waiting):
        (True, its value) or (False, the exception it raised); None, having done nothing,
        otherwise (or inside a multi-document transaction)."""
        if self._jobs or self._locks or self._closing or TRANSACTION.get() is not None:
            return None
        return self.engine.try_run(job)

    def clock_ms(self) -> int:
        """The expiry clock's time: what a write stamps and hides by when it starts."""
        return self._clock()

    async def _queue(self, job: Callable[[], T]) -> T:
        job = _carrying_token(job)
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        with self._cond:
            if self._closing:
                raise RuntimeError("the server is shutting down")
            self._jobs.append((job, fut))
            self._cond.notify()
        return await fut

    async def write_stamped(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Like write, passing `now_ms=` the expiry clock's time when the job starts on the
        writer thread (not when it was queued: a write waiting behind another must not match,
        or stamp, documents as of an earlier time than readers already see)."""

        def stamped() -> T:
            return fn(*args, now_ms=self._clock(), **kwargs)

        if TRANSACTION.get() is not None:
            return await self._in_transaction(stamped)
        return await self._queue(stamped)

    async def write_sliced(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Like write_stamped, for a statement that may change many documents: `fn` runs on a
        slicer thread, and each storage write it makes is a job of the writer, committed with
        whatever group it joins (write_slice). `fn` itself is run once (never again for a redone
        group: each slice is re-run alone). Inside a multi-document transaction it is not sliced:
        its writes commit with the transaction."""

        def stamped() -> T:
            return fn(*args, now_ms=self._clock(), **kwargs)

        if TRANSACTION.get() is not None:
            return await self._in_transaction(stamped)
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        ctx.run(SLICER.set, self.write_slice)
        return await loop.run_in_executor(self._slicers, ctx.run, _carrying_token(stamped))

    def write_slice(self, job: Callable[[], T]) -> T:
        """On a slicer thread: run `job` (one storage write of a sliced statement) as a job of
        the writer, queued behind those waiting, and return its result (or raise its error).
        The job checks the operation's interruption token first (a killOp or maxTimeMS ends the
        statement between two slices). The writer may run a job again when its group is redone:
        the session's oplog chain (WRITE_SESSION) is rewound to where this slice began each time."""
        session = WRITE_SESSION.get()
        if session is not None:
            stmt_id, prev, written = session.stmt_id, session.prev_op_time, len(session.written)
            run = job

            def rewound() -> T:
                session.stmt_id, session.prev_op_time = stmt_id, prev
                del session.written[written:]
                return run()

            job = rewound
        fut: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the server is shutting down")
            self._jobs.append((_carrying_token(job), fut))
            self._cond.notify()
        return fut.result()

    def _write_loop(self) -> None:
        while True:
            with self._cond:
                while not self._jobs or (self._locks and self._jobs[0][0] is not _BARRIER):
                    if self._closed and not self._jobs:
                        return
                    self._cond.wait()
                count = 1 if self._locks else min(len(self._jobs), MAX_GROUP)
                group = [self._jobs.popleft() for _ in range(count)]
            while group:
                try:
                    outcomes = self.engine.run_batch(
                        [job for job, _ in group], GROUP_BUDGET_SECONDS
                    )
                except BaseException as exc:  # a failure of the group itself (the disk, a bug)
                    log.error("a group of %d writes failed", len(group), exc_info=exc)
                    outcomes = [(False, exc)] * len(group)
                self.groups += 1
                done, group = group[: len(outcomes)], group[len(outcomes) :]
                self._answer(done, outcomes)

    @staticmethod
    def _answer(done: list[_Job], outcomes: list[tuple[bool, Any]]) -> None:
        """Resolve the futures of a committed group: the slicer threads' at once, the requests'
        with one callback on their loop."""
        waiting: list[tuple[asyncio.Future[Any], tuple[bool, Any]]] = []
        for (_job, fut), outcome in zip(done, outcomes):
            if isinstance(fut, asyncio.Future):
                waiting.append((fut, outcome))
            elif outcome[0]:
                fut.set_result(outcome[1])
            else:
                fut.set_exception(outcome[1])
        if not waiting:
            return

        def resolve() -> None:
            for fut, (ok, value) in waiting:
                if fut.done():
                    continue  # the request was cancelled (its connection closed)
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)

        loop = waiting[0][0].get_loop()
        try:
            loop.call_soon_threadsafe(resolve)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    # -- fsync lock ------------------------------------------------------------------------------

    async def fsync_lock(self) -> int:
        """Stop taking writes (those queued wait), after the group in progress; sync; returns the
        lock count."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._cond:
            self._locks += 1
            count = self._locks
            # The barrier goes first and runs despite the lock: once it has, the group that was
            # in progress is committed and no other starts.
            self._jobs.appendleft((_BARRIER, fut))
            self._cond.notify()
        await fut
        await self.wait_durable(force=True)
        return count

    def fsync_unlock(self) -> int | None:
        """Drop one lock; returns the count left, or None if there was no lock."""
        with self._cond:
            if not self._locks:
                return None
            self._locks -= 1
            self._cond.notify()
            return self._locks

    # -- durability ------------------------------------------------------------------------------

    async def wait_durable(self, force: bool = False) -> None:
        """Return once a sync covers every commit made so far. Waiters that arrive together
        share one sync."""
        target = self.engine.commits
        if target <= self.engine.durable and not force:
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        with self._sync_lock:
            self._sync_waiters.append((target, fut))
        self._sync_wanted.set()
        await fut

    def _sync_loop(self) -> None:
        while True:
            self._sync_wanted.wait(timeout=self._sync_interval_ms() / 1000)
            self._sync_wanted.clear()
            closing = self._closed and not self._writer.is_alive()  # the last writes are in
            try:
                started = time.perf_counter()
                covered = self.engine.sync()
                self.syncs += 1
                if time.perf_counter() - started > 1.0:
                    log.warning("a sync took %.1f s", time.perf_counter() - started)
            except Exception as exc:  # the disk failed: waiters get the error, nothing is lost
                log.error("sync failed", exc_info=exc)
                self._release_waiters(None, exc)
            else:
                self._release_waiters(covered, None)
            if closing:
                return

    def _release_waiters(self, covered: int | None, error: BaseException | None) -> None:
        with self._sync_lock:
            if covered is None:
                ready, self._sync_waiters = self._sync_waiters, []
            else:
                ready = [w for w in self._sync_waiters if w[0] <= covered]
                self._sync_waiters = [w for w in self._sync_waiters if w[0] > covered]
        if not ready:
            return

        def resolve() -> None:
            for _target, fut in ready:
                if fut.done():
                    continue
                if error is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(error)

        try:
            ready[0][1].get_loop().call_soon_threadsafe(resolve)
        except RuntimeError:
            pass

    # -- reads -----------------------------------------------------------------------------------

    async def read(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a long read-only computation on a reader thread."""
        if TRANSACTION.get() is not None:
            return await self._in_transaction(functools.partial(fn, *args))
        loop = asyncio.get_running_loop()
        job = _carrying_token(functools.partial(fn, *args))
        return await loop.run_in_executor(self._readers, job)

    def close(self) -> None:
        """Finish the queued writes, stop the writer, the syncer and the reader threads (the
        engine's close makes the last sync)."""
        with self._cond:
            self._closing = True
            self._locks = 0
            self._cond.notify_all()
        # The sliced statements running finish first: their slices need the writer.
        self._slicers.shutdown(wait=True)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._writer.join()
        self._sync_wanted.set()
        self._syncer.join()
        self._readers.shutdown(wait=True)
        self._transactions.shutdown(wait=True)
