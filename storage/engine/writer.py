"""The one writer: group commit of write jobs, and the catalog snapshot readers see.

`run_batch(jobs)` runs every job it is given in ONE LMDB write transaction and commits once; each
job's storage writes (`write(fn)`) see what the jobs before them did. A write that fails is undone
alone: the group first runs without savepoints (the fast path: engine writes raise their ordinary
errors before changing anything), and if a write raises after all, the group is run again from the
start with a nested transaction around every write, so that the failure undoes only that write.
A full map aborts the group, grows the map, and runs it again; so jobs must be re-runnable
(functions of the stored state, no effects outside storage until they return).

Disk space (storage/engine/space.py): a commit the disk cannot take is undone and the group runs again,
first measured (the file is extended by what the group grew the stored trees); if the disk cannot
give that, or the space is low, jobs run one at a time, each of their writes committed alone and
refused with OutOfDiskSpace if it grew the trees; deletes and drops go on and free pages.

Readers see an immutable catalog (a dict never changed after it is published), replaced after each
commit. The writer thread, inside a group, sees that catalog with the group's changes on top.
A multi-document transaction (storage/engine/overlay.py) runs its statements against a snapshot
with an overlay of its own writes, outside any group: with TRANSACTION set in the statement's
context, this writer hands the engine's code the overlay as its transaction and the snapshot's
catalog with the transaction's changes. Its commit is one job like any other write. Several
processes could later share the environment, since LMDB's own writer lock already serializes
their write transactions.
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import lmdb

from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.core.errors import OutOfDiskSpace
from ebbdb.storage.engine.environment import Environment, Txn
from ebbdb.storage.engine.overlay import KeyTable, Overlay, WriteConflict, commit_overlay
from ebbdb.storage.engine.space import SPACE_ERRNOS

T = TypeVar("T")
CatalogKey = tuple[str, str]
CatalogChanges = dict[CatalogKey, CollectionInfo | None]
#: (True, result) or (False, the exception the job raised).
Outcome = tuple[bool, Any]


#: Why a group runs again: a write failed without savepoints, the map filled, the disk did.
_SAVEPOINTS, _MAP_FULL, _NO_SPACE = "savepoints", "map full", "no space"


class _Redo(BaseException):
    """The group must run again (`why`). A BaseException, so that no job's `except Exception`
    swallows it."""

    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why


def _no_space(exc: lmdb.Error) -> bool:
    """An LMDB error that means the data file could not be written for lack of space."""
    return getattr(exc, "code", None) in SPACE_ERRNOS


@dataclass
class _Group:
    """The write transaction in progress, its nested transactions, and their catalog changes."""

    txns: list[Txn]
    savepoints: bool
    layers: list[CatalogChanges] = field(default_factory=lambda: [{}])
    #: Ids of the collections this group inserted into (told to the insert listeners).
    inserted: set[int] = field(default_factory=set)
    #: What jobs asked to run once the group commits (Writer.after_commit), in order.
    after: list[Callable[[], None]] = field(default_factory=list)
    #: A multi-document transaction's group: `txns` is its overlay, `layers[0]` its catalog
    #: changes so far, `base` the catalog at its snapshot.
    base: dict[CatalogKey, CollectionInfo] | None = None


#: The multi-document transaction whose statement runs in this context (the server sets it
#: around the statement): the engine's writes and reads then go to its overlay
#: (storage/engine/overlay.py), on whatever thread the statement runs.
TRANSACTION: contextvars.ContextVar[_Group | None] = contextvars.ContextVar(
    "ebbdb_transaction", default=None
)


#: Set in the context of a statement that commits in slices (server/gateway.py runs it on a
#: thread of its own): each of its storage writes outside a group is handed to this function,
#: which runs it as one job of the writer (a group member, committed with that group, so that
#: other queued writes go in between two slices) and returns its result or raises its error.
SLICER: contextvars.ContextVar[Callable[[Callable[[], Any]], Any] | None] = contextvars.ContextVar(
    "ebbdb_slicer", default=None
)


class Transaction:
    """A multi-document transaction's storage: its overlay and catalog view (see
    Writer.begin_transaction). `use()` makes it the context's transaction."""

    def __init__(self, group: _Group, overlay: Overlay) -> None:
        self.group = group
        self.overlay = overlay

    def use(self) -> contextvars.Token[_Group | None]:
        return TRANSACTION.set(self.group)

    @property
    def catalog_changes(self) -> CatalogChanges:
        return self.group.layers[0]

    def end(self) -> None:
        """Release the snapshot and the keys held (after a commit or an abort)."""
        self.overlay.end()


class Writer:
    """Serializes write transactions and publishes the catalog. Thread-safe: any thread may call
    `write` or `run_batch`; they run one group at a time."""

    def __init__(
        self,
        env: Environment,
        catalog: dict[CatalogKey, CollectionInfo],
        on_publish: Callable[[CatalogChanges], None] | None = None,
    ) -> None:
        """`on_publish` is told the catalog entries of each commit that changed any, once they
        are published."""
        self._env = env
        self._published: dict[CatalogKey, CollectionInfo] = dict(catalog)
        self._on_publish = on_publish
        self._lock = threading.RLock()
        self._group: _Group | None = None
        self._thread = 0
        self._insert_listeners: list[Callable[[frozenset[int]], None]] = []
        self._alone = 0  # the thread running a job whose writes commit one by one (low space)

    # -- the catalog ---------------------------------------------------------------------------

    def _active(self) -> _Group | None:
        txn_group = TRANSACTION.get()
        if txn_group is not None:
            return txn_group
        group = self._group
        if group is not None and threading.get_ident() == self._thread:
            return group
        return None

    def lookup(self, key: CatalogKey) -> CollectionInfo | None:
        group = self._active()
        if group is not None:
            for layer in reversed(group.layers):
                if key in layer:
                    return layer[key]
            if group.base is not None:
                return group.base.get(key)
        return self._published.get(key)

    def catalog(self) -> dict[CatalogKey, CollectionInfo]:
        """The catalog as this thread sees it (a snapshot: never changed afterwards)."""
        group = self._active()
        if group is None:
            return self._published
        merged = dict(self._published if group.base is None else group.base)
        for layer in group.layers:
            for key, info in layer.items():
                if info is None:
                    merged.pop(key, None)
                else:
                    merged[key] = info
        return merged

    def note_insert(self, coll_id: int) -> None:
        """A record was inserted into collection `coll_id` by the group in progress."""
        group = self._active()
        if group is not None:
            group.inserted.add(coll_id)

    def on_inserts(self, listener: Callable[[frozenset[int]], None]) -> None:
        """Tell `listener`, on the writer thread after each commit, the ids of the collections
        the commit inserted into (tailable cursors awaiting data wake on it). It must be quick
        and must not write."""
        self._insert_listeners.append(listener)

    def after_commit(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the writer thread once the group in progress commits (before the next
        group begins); never if the write asking for it is undone or the group aborted. A job
        that keeps Python state about what it wrote (a build's position) changes it here, since
        a group may be aborted and its jobs run again. Not for a multi-document transaction's
        statements (they commit with the transaction, not with a group)."""
        group = self._active()
        assert group is not None and group.base is None, "after_commit outside a write group"
        group.after.append(fn)

    def current_txn(self) -> Txn | None:
        """The innermost write transaction, on the writer thread inside a group; else None."""
        group = self._active()
        return None if group is None else group.txns[-1]

    # -- multi-document transactions -------------------------------------------------------------

    def begin_transaction(self, table: KeyTable, owner: int) -> Transaction:
        """A new transaction's storage: a snapshot of the committed data and the catalog that goes
        with it (taken between two commits), and an empty overlay."""
        with self._lock:
            self._env.gate.enter()
            try:
                snapshot = self._env.env.begin()
            finally:
                self._env.gate.leave()
            base = self._published
        overlay = Overlay(self._env, snapshot, table, owner)
        return Transaction(_Group([overlay], False, base=base), overlay)  # type: ignore[list-item]

    def commit_transaction(
        self, transaction: Transaction, also: Callable[[Txn], None] | None = None
    ) -> None:
        """Apply a transaction's writes and catalog changes as one storage write (and `also`, in
        the same LMDB transaction: its oplog entry); WriteConflict, with nothing applied, if
        anything it wrote changed since its snapshot, or if the catalog entry (existence, name,
        indexes, options) of a collection it wrote changed since then: an index built, or a
        drop or rename, outside it meanwhile (its writes would miss the new index or land in a
        collection that is gone). mongod makes such DDL wait for the transaction instead; here
        the DDL never waits, and the transaction, which drivers retry whole, gives way. Call
        outside the transaction's context."""
        overlay = transaction.overlay
        overlay.release_snapshot()
        base = transaction.group.base or {}

        def run(txn: Txn, changes: CatalogChanges) -> None:
            written = overlay.collections_written()
            if written:
                for key, info in base.items():
                    if info.id in written and self._published.get(key) != info:
                        raise WriteConflict()
            commit_overlay(self._env, txn, overlay)
            changes.update(transaction.catalog_changes)
            if also is not None:
                also(txn)

        self.write(run)

    # -- writing -------------------------------------------------------------------------------

    def write(self, fn: Callable[[Txn, CatalogChanges], T]) -> T:
        """Run `fn(txn, changes)` as one storage write: `changes` collects catalog entries it
        changes (None for dropped), published with the commit. Inside a group it joins the group;
        in a sliced statement's context (SLICER) it is one job of the writer; elsewhere it is a
        group of its own, committed before this returns."""
        group = self._active()
        if group is None:
            slicer = SLICER.get()
            if slicer is not None:
                return slicer(lambda: self.write(fn))  # type: ignore[no-any-return]
            if self._alone == threading.get_ident():
                return self._write_alone(fn)
            ok, value = self.run_batch([lambda: self.write(fn)])[0]
            if not ok:
                raise value
            return value  # type: ignore[no-any-return]
        if group.base is not None:
            # A transaction's statement: no savepoints (an error aborts the whole transaction,
            # as in mongod), and the overlay is memory: it is never full.
            return fn(group.txns[-1], group.layers[-1])
        if not group.savepoints:
            try:
                return fn(group.txns[-1], group.layers[-1])
            except lmdb.MapFullError:
                raise _Redo(_MAP_FULL) from None
            except _Redo:
                raise
            except lmdb.Error as exc:
                raise _Redo(_NO_SPACE if _no_space(exc) else _SAVEPOINTS) from None
            except BaseException:
                raise _Redo(_SAVEPOINTS) from None
        child = self._env.env.begin(write=True, parent=group.txns[-1])
        group.txns.append(child)
        group.layers.append({})
        asked = len(group.after)
        try:
            result = fn(child, group.layers[-1])
        except lmdb.MapFullError:
            raise _Redo(_MAP_FULL) from None
        except BaseException as exc:
            if isinstance(exc, lmdb.Error) and _no_space(exc):
                raise _Redo(_NO_SPACE) from None
            group.txns.pop()
            group.layers.pop()
            del group.after[asked:]  # the undone write's
            child.abort()
            raise
        child.commit()
        group.txns.pop()
        # Pop first: `layers[-1].update(layers.pop())` would update the popped layer with itself
        # and lose the write's catalog changes.
        done = group.layers.pop()
        group.layers[-1].update(done)
        return result

    def run_batch(
        self, jobs: Sequence[Callable[[], Any]], budget_seconds: float | None = None
    ) -> list[Outcome]:
        """Run jobs in order in one write transaction and commit it: one outcome per job run.
        With `budget_seconds`, the group stops after the job that used up the budget (so a long
        job does not hold back the acknowledgement of many short ones); the caller runs the rest
        in a later group. An exception a job raises is its outcome; the others are unaffected."""
        with self._lock:
            if not jobs:
                return []
            savepoints = measured = low = False
            while True:
                self._env.make_room()
                try:
                    if low or self._env.space.low:
                        return [self._run_alone(jobs[0])]
                    return self._attempt(jobs, savepoints, budget_seconds, measured)
                except _Redo as redo:
                    if redo.why == _MAP_FULL:
                        self._env.grow()
                    elif redo.why == _NO_SPACE:
                        low, measured = measured, True
                    else:
                        savepoints = True

    def try_run(self, job: Callable[[], Any]) -> Outcome | None:
        """Run one job as its own group now, if that costs no wait: None when another group is
        in progress or the map would have to grow first (the caller then queues the job)."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._env.needs_room():
                return None
            savepoints = False
            while True:
                try:
                    return self._attempt([job], savepoints, None)[0]
                except _Redo as redo:
                    if redo.why != _SAVEPOINTS:
                        return None
                    savepoints = True
        finally:
            self._lock.release()

    def _attempt(
        self,
        jobs: Sequence[Callable[[], Any]],
        savepoints: bool,
        budget: float | None,
        measured: bool = False,
    ) -> list[Outcome]:
        """Run the jobs in one transaction and commit. `measured` (after the disk refused this
        group once): before the commit, allocate what the group grew the trees by (twice, for
        the pages it copied), or give up with the disk's refusal."""
        started = time.perf_counter()
        txn = self._env.begin_write()
        group = _Group([txn], savepoints)
        self._group, self._thread = group, threading.get_ident()
        outcomes: list[Outcome] = []
        try:
            before = self._env.tree_pages(txn) if measured else 0
            for job in jobs:
                try:
                    outcomes.append((True, job()))
                except _Redo:
                    raise
                except lmdb.MapFullError:
                    raise _Redo(_MAP_FULL) from None
                except BaseException as exc:  # noqa: BLE001 - the job's own outcome
                    if isinstance(exc, lmdb.Error) and _no_space(exc):
                        raise _Redo(_NO_SPACE) from None
                    outcomes.append((False, exc))
                if budget is not None and time.perf_counter() - started > budget:
                    break
            if measured:
                grown = max(0, self._env.tree_pages(txn) - before) * self._env.page_size
                if not self._env.room_for(2 * grown):
                    raise _Redo(_NO_SPACE)
            self._commit(txn)
        except BaseException:
            txn.abort()
            raise
        finally:
            self._group = None
            self._thread = 0
        self._committed(group)
        return outcomes

    @staticmethod
    def _commit(txn: Txn) -> None:
        try:
            txn.commit()
        except lmdb.MapFullError:
            raise _Redo(_MAP_FULL) from None
        except lmdb.Error as exc:
            if _no_space(exc):
                raise _Redo(_NO_SPACE) from None
            raise

    def _run_alone(self, job: Callable[[], Any]) -> Outcome:
        """Low space: run one job with each of its storage writes committed on its own
        (`_write_alone`), so that a delete of many documents frees pages as it goes."""
        self._alone = threading.get_ident()
        try:
            return (True, job())
        except BaseException as exc:  # noqa: BLE001 - the job's own outcome
            return (False, exc)
        finally:
            self._alone = 0

    def _write_alone(self, fn: Callable[[Txn, CatalogChanges], T]) -> T:
        """One storage write in its own transaction, refused with OutOfDiskSpace (and undone)
        if it grew the trees or the disk would not take its commit."""
        while True:
            txn = self._env.begin_write()
            group = _Group([txn], savepoints=True)
            self._group, self._thread = group, threading.get_ident()
            try:
                before = self._env.tree_pages(txn)
                result = fn(txn, group.layers[0])
                if self._env.tree_pages(txn) > before:
                    raise OutOfDiskSpace(self._env.space.message)
                self._commit(txn)
            except (_Redo, lmdb.Error) as exc:
                txn.abort()
                if isinstance(exc, lmdb.Error) and not _no_space(exc):
                    if not isinstance(exc, lmdb.MapFullError):
                        raise
                elif not isinstance(exc, _Redo) or exc.why != _MAP_FULL:
                    raise OutOfDiskSpace(self._env.space.message) from None
            except BaseException:
                txn.abort()
                raise
            else:
                self._committed(group)
                return result
            finally:
                self._group = None
                self._thread = 0
            self._env.grow()

    def _committed(self, group: _Group) -> None:
        """After a group's commit: the catalog published, then what its jobs asked to run
        after it, then the insert listeners told."""
        self._env.committed()
        self._publish(group.layers[0])
        for then in group.after:
            then()
        if group.inserted:
            inserted = frozenset(group.inserted)
            for listener in self._insert_listeners:
                listener(inserted)

    def _publish(self, changes: CatalogChanges) -> None:
        if not changes:
            return
        catalog = dict(self._published)
        for key, info in changes.items():
            if info is None:
                catalog.pop(key, None)
            else:
                catalog[key] = info
        self._published = catalog
        if self._on_publish is not None:
            self._on_publish(changes)
