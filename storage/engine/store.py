"""The storage engine of one data directory: the facade the server uses. It composes the LMDB
environment (storage/engine/environment.py), the one writer with its group commit and catalog snapshots
(storage/engine/writer.py), record upkeep (storage/engine/records.py), DDL (storage/engine/ddl.py) and readers
(storage/engine/reader.py).

Synchronous and thread-aware: writes from any thread are serialized by the writer (the server runs
them on one writer thread, many per commit); readers on other threads see committed data and an
immutable catalog snapshot.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import bson
from bson.raw_bson import RawBSONDocument

from ebbdb.storage.catalog import schema, timeseries
from ebbdb.storage.catalog.info import CollectionInfo, validate_collection_name
from ebbdb.storage.core.documents import CODEC, MAX_DOCUMENT_SIZE, prepare_document
from ebbdb.storage.core.errors import OutOfDiskSpace, StorageError
from ebbdb.storage.engine import capped, layout, purge
from ebbdb.storage.engine.capped_ddl import CappedDdl
from ebbdb.storage.engine.ddl import CreateIndexesResult, Ddl, IndexChange
from ebbdb.storage.engine.environment import INITIAL_MAP_SIZE, DataDirLocked, Environment, Txn
from ebbdb.storage.engine.index_build import Builds
from ebbdb.storage.engine.oplog import (
    OPLOG_DB,
    OPLOG_NAME,
    PREIMAGES_DB,
    PREIMAGES_NAME,
    WRITE_SESSION,
    OpLog,
    oplog_options,
)
from ebbdb.storage.engine.overlay import KeyTable
from ebbdb.storage.engine.reader import Reader
from ebbdb.storage.engine.records import CollectionWrites, Records
from ebbdb.storage.engine.sizes import CollectionSizes, collection_sizes
from ebbdb.storage.engine.usage import Usage
from ebbdb.storage.engine.writer import CatalogChanges, Outcome, Transaction, Writer
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes.entries import index_bodies

T = TypeVar("T")
_U64 = struct.Struct(">Q")


@dataclass(frozen=True)
class InsertResult:
    """`inserted` counts the documents written; `errors` pairs a batch index with why it failed."""

    inserted: int
    errors: tuple[tuple[int, StorageError], ...] = ()
    created_collection: bool = False


@dataclass(frozen=True)
class DatabaseInfo:
    name: str
    collections: int
    documents: int
    data_size: int
    index_count: int


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Engine:
    """The storage engine of one data directory. Create with Engine.open(path); close() when done."""

    def __init__(self, env: Environment) -> None:
        self.path = env.path
        self.env = env
        catalog = self._load_catalog(env)
        #: How queries used indexes and collections since the open (storage/engine/usage.py).
        self.usage = Usage(catalog.values())
        self._writer = Writer(env, catalog, self.usage.published)
        self._records = Records(env, self._writer.note_insert)
        #: The keys and record ids open multi-document transactions hold.
        self.transaction_keys = KeyTable()
        self._records.rid_floor = self.transaction_keys.rid_floor
        #: See Writer.begin_transaction and commit_transaction.
        self.commit_transaction = self._writer.commit_transaction
        #: The oplog of a replica set (enabled by enable_oplog; a standalone writes none).
        self.oplog = OpLog(env, self._records, self._writer.lookup)
        self._records.oplog = self.oplog
        self._writer.on_inserts(self.oplog.inserted)
        #: Date-like strings met in TTL fields since the open; the TTL monitor logs them.
        self.date_strings = self._records.date_strings
        #: See Writer.on_inserts.
        self.on_inserts = self._writer.on_inserts
        ddl = Ddl(env, self._records, self._writer)
        # The DDL operations are Ddl's own methods (storage/engine/ddl.py says what each returns and
        # raises), handed out as they are rather than declared a second time here.
        self.create_collection = ddl.create_collection
        self.drop_collection = ddl.drop_collection
        self.empty_collection = ddl.empty_collection
        self.drop_database = ddl.drop_database
        self.create_indexes = ddl.create_indexes
        self.drop_indexes = ddl.drop_indexes
        self.modify_index = ddl.modify_index
        self.rename_collection = ddl.rename_collection
        self.set_collection_options = ddl.set_collection_options
        self.change_collection_options = ddl.change_collection_options
        #: Bulk index builds (storage/engine/index_build.py): createIndexes as the server runs it.
        self.index_builds = Builds(env, self._records, self._writer, ddl)
        capped_ddl = CappedDdl(env, self._records, self._writer, ddl)
        self.clone_as_capped = capped_ddl.clone_as_capped
        self.convert_to_capped = capped_ddl.convert_to_capped
        self.set_capped_limits = capped_ddl.set_limits

    # -- lifecycle -------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str, map_size: int = INITIAL_MAP_SIZE) -> Engine:
        """Open (creating if needed) the data directory. Raises DataDirLocked if another process
        has it open."""
        return cls(Environment.open(path, map_size))

    def close(self) -> None:
        """Wait for the write in progress, sync, close."""
        self._writer.run_batch([])
        self.env.close()

    @staticmethod
    def _load_catalog(env: Environment) -> dict[tuple[str, str], CollectionInfo]:
        out = {}
        with env.env.begin(db=env.catalog) as txn:
            for _k, v in txn.cursor():
                info = CollectionInfo.from_doc(bson.decode(bytes(v), CODEC))
                out[(info.db, info.name)] = info
        return out

    def enable_oplog(self, size_mb: int) -> None:
        """Make this a replica set member's storage: local.oplog.rs (capped at `size_mb` MB, an
        existing oplog keeps its size) and config.system.preimages are created if missing, and
        every change from now on is recorded in the oplog, in the transaction that makes it."""
        initiating = self.collection(OPLOG_DB, OPLOG_NAME) is None
        if initiating:
            self.create_collection(OPLOG_DB, OPLOG_NAME, oplog_options(size_mb), id_index=False)
        if self.collection(PREIMAGES_DB, PREIMAGES_NAME) is None:
            self.create_collection(PREIMAGES_DB, PREIMAGES_NAME)
        oplog = self.collection(OPLOG_DB, OPLOG_NAME)
        assert oplog is not None
        self.oplog.enable(oplog)
        if initiating:  # mongod's first entry, written when a set is initiated
            entry = {"op": "n", "ns": "", "o": {"msg": "initiating set"}}
            self._writer.write(lambda txn, _changes: self.oplog.append(txn, entry))

    # -- transactions ----------------------------------------------------------------------------

    def read(self) -> Reader:
        """A short read transaction; on the writer thread inside a group of writes, a view of the
        group's write transaction (a write sees the writes before it)."""
        return Reader(self.env, self._writer.current_txn())

    def begin_transaction(self, owner: int) -> Transaction:
        """A multi-document transaction's storage (storage/engine/overlay.py): statements run
        with `transaction.use()` in their context read its snapshot and write its overlay."""
        return self._writer.begin_transaction(self.transaction_keys, owner)

    def run_batch(
        self, jobs: Sequence[Callable[[], Any]], budget_seconds: float | None = None
    ) -> list[Outcome]:
        """Group commit: run write jobs (functions calling this engine's write methods) in one
        write transaction; see storage/engine/writer.py."""
        return self._writer.run_batch(jobs, budget_seconds)

    def atomic(self, fn: Callable[[], T]) -> T:
        """Run `fn`, which calls this engine's write methods, as one storage write: what it
        writes commits together, or not at all if it raises ($out's replacement of a target)."""
        return self._writer.write(lambda _txn, _changes: fn())

    def try_run(self, job: Callable[[], Any]) -> Outcome | None:
        """Run one write job at once if no other write is in progress (see Writer.try_run)."""
        return self._writer.try_run(job)

    def sync(self) -> int:
        """Make every commit so far durable; returns how many commits that covers."""
        return self.env.sync()

    @property
    def commits(self) -> int:
        return self.env.commits

    @property
    def durable(self) -> int:
        return self.env.durable

    @property
    def map_size(self) -> int:
        return self.env.map_size

    # -- catalog ---------------------------------------------------------------------------------

    def collection(self, db: str, name: str) -> CollectionInfo | None:
        return self._writer.lookup((db, name))

    def collections(self, db: str | None = None) -> list[CollectionInfo]:
        return sorted(
            (c for c in self._writer.catalog().values() if db is None or c.db == db),
            key=lambda c: (c.db, c.name),
        )

    def sizes(self, colls: Sequence[CollectionInfo]) -> list[CollectionSizes]:
        """What each collection and its indexes take (storage/engine/sizes.py: exact counts, estimated
        sizes), in one read transaction. It may read whole indexes: call it off the event loop."""
        with self.read() as r:
            return [collection_sizes(r, c, self.env.page_size) for c in colls]

    def databases(self) -> list[DatabaseInfo]:
        out: dict[str, list[CollectionInfo]] = {}
        for c in self._writer.catalog().values():
            out.setdefault(c.db, []).append(c)
        result = []
        with self.read() as r:
            for db, colls in sorted(out.items()):
                docs = size = 0
                for c in colls:
                    n, s = r.stats(c)
                    docs += n
                    size += s
                result.append(
                    DatabaseInfo(db, len(colls), docs, size, sum(len(c.indexes) for c in colls))
                )
        return result

    # -- writes ----------------------------------------------------------------------------------

    def insert(
        self,
        db: str,
        name: str,
        documents: Sequence[bytes],
        ordered: bool = True,
        now_ms: int | None = None,
        bypass: bool = False,
    ) -> InsertResult:
        """Insert raw BSON documents in one transaction, creating the collection if needed.

        Each document is validated and given an `_id` (a new ObjectId, stored as the first field).
        Failures are per document: ordered inserts stop at the first, unordered ones go on.
        Each document is checked against the collection's validator (storage/catalog/schema.py) unless
        `bypass`."""
        validate_collection_name(db, name)
        self.oplog.refuse_write(db, name)
        stamp = _now_ms() if now_ms is None else now_ms

        def run(txn: Txn, changes: CatalogChanges) -> InsertResult:
            info = self._writer.lookup((db, name))
            created = info is None
            if info is None:
                info = self._records.new_collection(txn, db, name, {})
                changes[(db, name)] = info
            rid = self._records.last_rid(txn, info.id)
            inserted = size = removed = 0
            errors: list[tuple[int, StorageError]] = []
            oplog = self.oplog if self.oplog.enabled else None
            session = WRITE_SESSION.get()
            # What a batch's documents all share, looked up once (an insert does not change
            # whether its collection is capped or a time series).
            is_capped = capped.limits(info) is not None
            measurements = timeseries.OPTION in info.options
            for i, raw in enumerate(documents):
                if session is not None:
                    session.stmt_id = session.first_stmt + i
                try:
                    raw, doc = prepare_document(raw)
                    if measurements:
                        raw, doc = timeseries.prepare_measurement(info, raw, doc)
                    schema.check(info, doc, bypass=bypass)
                    updated = self._records.insert_one(txn, info, rid + 1, stamp, raw, doc, True)
                except StorageError as exc:
                    # Kept without its traceback: 50,000 failed documents' frames (and what they
                    # held) kept alive made every garbage collection walk them, for 100s of ms.
                    errors.append((i, exc.with_traceback(None)))
                    if ordered:
                        break
                    continue
                if updated is not info:
                    info = changes[(db, name)] = updated
                if oplog is not None:
                    oplog.op(txn, "i", info, RawBSONDocument(raw), {"_id": doc.get("_id")})
                rid += 1
                inserted += 1
                size += len(raw)
                if is_capped:  # it drops its oldest documents as each one goes in
                    gone, freed = self._records.make_room(
                        txn, info, rid, (inserted - removed, size)
                    )
                    removed += gone
                    size -= freed
            if inserted:
                self._writer.note_insert(info.id)  # once for the batch (a set of ids)
                self._records.add_stats(txn, info.id, inserted - removed, size)
            return InsertResult(inserted, tuple(errors), created)

        try:
            return self._writer.write(run)
        except OutOfDiskSpace as exc:
            # Low space refuses the whole write: each document failed (an ordered insert
            # stops at the first), as MongoDB reports a storage error per document.
            failed = range(1 if ordered else len(documents))
            return InsertResult(0, tuple((i, exc) for i in failed), False)

    def modify(
        self,
        db: str,
        name: str,
        fn: Callable[[CollectionWrites], T],
        now_ms: int,
        bypass: bool = False,
    ) -> T:
        """Run `fn` with a view of one collection inside one write transaction, committed durably
        when `fn` returns (and abandoned if it raises). The view's writes are stamped `now_ms`;
        with `bypass` they skip the collection's validator."""
        validate_collection_name(db, name)
        self.oplog.refuse_write(db, name)

        def run(txn: Txn, changes: CatalogChanges) -> T:
            view = CollectionWrites(
                self._records, txn, changes, db, name, now_ms, self._writer.lookup((db, name))
            )
            view.bypass = bypass
            result = fn(view)
            view._flush()
            return result

        return self._writer.write(run)

    # -- time to live ------------------------------------------------------------------------------

    def purge_expired(self, db: str, name: str, now_ms: int, limit: int) -> int:
        """Delete up to `limit` documents expired at `now_ms`, in one write transaction, found by
        range reads over the expiry index (never a scan of live documents). Returns how many."""
        return self.purge_expired_batch(db, name, now_ms, limit)[0]

    def purge_expired_batch(
        self,
        db: str,
        name: str,
        now_ms: int,
        limit: int,
        budget_seconds: float | None = None,
        general: bool = False,
    ) -> tuple[int, bool]:
        """purge_expired bounded also in time: it stops once `budget_seconds` have passed (the
        purge must not hold the one writer for long). Returns (deleted, more): `more` when it
        stopped at the limit or the budget, so that expired documents may be left. The fast
        loop (storage/engine/purge.py) runs where it can; `general` forces the general one."""

        def run(txn: Txn, changes: CatalogChanges) -> tuple[int, bool]:
            info = self._writer.lookup((db, name))
            if info is None:
                return 0, False
            stop_at = None if budget_seconds is None else time.perf_counter() + budget_seconds
            job = purge.PurgeJob(self._records, txn, info, now_ms, limit, stop_at)
            deleted, size, more = purge.run(job, general)
            if deleted:
                self._records.add_stats(txn, info.id, -deleted, -size)
            return deleted, more

        return self._writer.write(run)

    def count_expired(self, coll: CollectionInfo, now_ms: int) -> int:
        """How many documents of the collection are expired at `now_ms` but not yet deleted
        (read from the expiry index: the cost follows the number expired)."""
        rules = ttl.rules_for(coll)
        if not rules.active:
            return 0
        with self.read() as r:
            rids = {
                rid
                for start, stop in ttl.expiry_ranges(rules, now_ms)
                for rid in r.expiry_entries(start, stop)
            }
            return sum(
                1
                for rid in rids
                if (v := r.record(coll, rid)) is not None and ttl.expired_value(v, rules, now_ms)
            )

    def ttl_collections(self) -> list[CollectionInfo]:
        """Collections with at least one TTL index, in a stable order."""
        return [c for c in self.collections() if ttl.rules_for(c).active]


__all__ = [
    "CODEC",
    "CollectionSizes",
    "CollectionWrites",
    "CreateIndexesResult",
    "DataDirLocked",
    "DatabaseInfo",
    "Engine",
    "IndexChange",
    "InsertResult",
    "MAX_DOCUMENT_SIZE",
    "Reader",
    "index_bodies",
    "layout",
    "prepare_document",
]
