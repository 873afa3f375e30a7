"""The storage engine on LMDB: one environment per data directory, a catalog, collections of records
keyed by (collection id, record id), and index entries kept in the same write transaction.

Synchronous and thread-aware: one writer thread may run write methods while other threads read;
growing the map waits for open readers (LMDB forbids resizing under a live read transaction).
"""

from __future__ import annotations

import bisect
import fcntl
import itertools
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import bson
import lmdb
from bson.binary import Binary

from storage import keys, ttl
from storage.catalog import (
    CollectionInfo,
    IndexInfo,
    validate_collection_name,
    validate_db_name,
)
from storage.documents import CODEC, MAX_DOCUMENT_SIZE, prepare_document
from storage.entries import ID_INDEX_KEY, index_bodies, index_key_matches
from storage.errors import (
    DuplicateKey,
    NamespaceExists,
    NamespaceNotFound,
    QueryError,
    StorageError,
)
from storage.indexes import MAX_EXPIRE_AFTER_SECONDS as MAX_EXPIRE
from storage.indexes import MAX_INDEXES, IndexSpec, conflict
from storage.query.compare import UNDEFINED

INITIAL_MAP_SIZE = 1 << 30
LOCK_FILE = "ebbdb.lock"

_U64 = struct.Struct(">Q")
_STATS = struct.Struct(">qq")  # document count, data bytes
_NEXT_ID = b"next_id"

T = TypeVar("T")
_CatalogChanges = dict[tuple[str, str], CollectionInfo | None]
_IndexFlags = dict[int, set[str]]
#: A TTL index on `_ts` is the collection's one default time to live (Cosmos DefaultTimeToLive).
_ONE_COSMOS_DEFAULT = (
    "a collection can have only one TTL index on _ts: it sets the collection's default time to live"
)


class DataDirLocked(StorageError):
    """Another process already serves this data directory."""

    code_name = "DBPathInUse"


@dataclass(frozen=True)
class InsertResult:
    """`inserted` counts the documents written; `errors` pairs a batch index with why it failed."""

    inserted: int
    errors: tuple[tuple[int, StorageError], ...] = ()
    created_collection: bool = False


@dataclass(frozen=True)
class IndexChange:
    """What collMod changed on an index (None: not changed / not reported)."""

    expire_old: int | None = None
    expire_new: int | None = None
    hidden_old: bool | None = None
    hidden_new: bool | None = None


@dataclass(frozen=True)
class CreateIndexesResult:
    before: int
    after: int
    created_collection: bool
    note: str | None


@dataclass(frozen=True)
class DatabaseInfo:
    name: str
    collections: int
    documents: int
    data_size: int
    index_count: int


class _Gate:
    """Readers share; a map resize waits until no reader is inside."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._resizing = False

    def enter(self) -> None:
        with self._cond:
            while self._resizing:
                self._cond.wait()
            self._readers += 1

    def leave(self) -> None:
        with self._cond:
            self._readers -= 1
            if self._resizing and not self._readers:
                self._cond.notify_all()

    def resize(self, fn: Callable[[], None]) -> None:
        with self._cond:
            self._resizing = True
            while self._readers:
                self._cond.wait()
            try:
                fn()
            finally:
                self._resizing = False
                self._cond.notify_all()


class Reader:
    """A short read transaction. Use as a context manager; never keep one across awaits or batches."""

    __slots__ = ("_engine", "_txn")

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._txn: Any = None

    def __enter__(self) -> Reader:
        self._engine._gate.enter()
        try:
            self._txn = self._engine._env.begin()
        except BaseException:
            self._engine._gate.leave()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._txn.abort()
        finally:
            self._txn = None
            self._engine._gate.leave()

    def record(self, coll: CollectionInfo, rid: int) -> bytes | None:
        """One stored record (header and BSON: see storage/ttl.py), or None."""
        value: bytes | None = self._txn.get(_record_key(coll.id, rid), db=self._engine._records)
        return value

    def expiry_entries(self, start: bytes, stop: bytes) -> Iterator[int]:
        """Record ids of the expiry-index entries in [start, stop)."""
        cur = self._txn.cursor(db=self._engine._expiry)
        if not cur.set_range(start):
            return
        for k in cur.iternext(values=False):
            if k >= stop:
                return
            yield int(_U64.unpack_from(k, 17)[0])

    def _records_after(
        self, coll: CollectionInfo, after: int | None, reverse: bool
    ) -> tuple[Any, Iterator[tuple[bytes, bytes]]]:
        """An LMDB cursor and an iterator over (key, value) of this collection's records after
        `after` in scan order (the iterator stops at the collection's end)."""
        prefix = _U64.pack(coll.id)
        cur = self._txn.cursor(db=self._engine._records)
        if not reverse:
            start = prefix + _U64.pack(after + 1 if after is not None else 0)
            if not cur.set_range(start):
                return cur, iter(())
            limit = _U64.pack(coll.id + 1)
            return cur, itertools.takewhile(lambda kv: kv[0] < limit, cur.iternext())
        if after is not None:
            positioned = cur.set_range(prefix + _U64.pack(after))
        else:
            positioned = cur.set_range(_U64.pack(coll.id + 1))
        if not (cur.prev() if positioned else cur.last()):
            return cur, iter(())
        return cur, itertools.takewhile(lambda kv: kv[0][:8] == prefix, cur.iterprev())

    def scan(
        self, coll: CollectionInfo, after: int | None = None, reverse: bool = False
    ) -> Iterator[tuple[int, bytes]]:
        """(record id, stored record) in record-id order, starting after `after` (exclusive)."""
        _cur, records = self._records_after(coll, after, reverse)
        unpack = _U64.unpack_from
        for k, v in records:
            yield unpack(k, 8)[0], v

    def scan_batch(
        self,
        coll: CollectionInfo,
        after: int | None,
        reverse: bool,
        max_docs: int,
        max_bytes: int,
        first: bool,
        rules: ttl.Rules = ttl.NO_RULES,
        now_ms: int = 0,
    ) -> tuple[list[bytes], int | None, bool, bool]:
        """The plain-scan fast path: the BSON of up to `max_docs` records after `after` whose sizes
        add up to at most `max_bytes` (one at least when `first`), leaving out records expired at
        `now_ms` under `rules`. Returns (documents, last record id passed, no records remain,
        stopped for size)."""
        prefix = _U64.pack(coll.id)
        cur = self._txn.cursor(db=self._engine._records)
        if not reverse:
            ok = cur.set_range(prefix + _U64.pack(after + 1 if after is not None else 0))
        else:
            bound = prefix + _U64.pack(after) if after is not None else _U64.pack(coll.id + 1)
            ok = cur.prev() if cur.set_range(bound) else cur.last()
        if not ok:
            return [], after, True, False
        # Whole runs at C speed: take the records, then trim what lies past the collection's end
        # and what does not fit.
        items = list(itertools.islice(cur.iterprev() if reverse else cur.iternext(), max_docs))
        taken = len(items)
        if reverse:
            while items and items[-1][0] < prefix:
                items.pop()
        else:
            limit = _U64.pack(coll.id + 1)
            while items and items[-1][0] >= limit:
                items.pop()
        done = len(items) < taken or taken < max_docs
        if items and rules.active:
            last_key = items[-1][0]
            items = [kv for kv in items if not ttl.expired_value(kv[1], rules, now_ms)]
            if not items:
                return [], _rid_of(last_key, after), done, False
        offset = ttl.body_offset
        sizes = list(itertools.accumulate(len(v) - offset(v) for _, v in items))
        limited = False
        if sizes and sizes[-1] > max_bytes:
            cut = bisect.bisect_right(sizes, max_bytes)
            if cut == 0 and first:
                cut = 1
            limited = cut < len(items)
            if limited:
                items = items[:cut]
                done = False
        if not items:
            return [], after, done and not limited, limited
        if taken == max_docs and not done and not limited:
            more = cur.prev() if reverse else cur.next()
            done = not more or cur.key()[:8] != prefix
        out = [v[offset(v) :] for _, v in items]
        return out, _rid_of(items[-1][0], after), done, limited

    def index_entries(
        self, index: IndexInfo, lo: bytes, hi: bytes, reverse: bool, after: bytes | None
    ) -> Iterator[tuple[bytes, int]]:
        """(entry key, record id) of an index's entries whose key bodies lie in [lo, hi), in key
        order (or reverse), resuming strictly after the entry key `after` when given."""
        prefix = _U64.pack(index.id)
        start, stop = prefix + lo, prefix + hi
        cur = self._txn.cursor(db=self._engine._index)
        unpack = _U64.unpack
        if not reverse:
            if after is not None and after >= start:
                ok = cur.set_range(after)
                if ok and cur.key() == after:
                    ok = cur.next()
            else:
                ok = cur.set_range(start)
            if not ok:
                return
            for k, v in cur.iternext():
                if k >= stop:
                    return
                yield k, unpack(v)[0]
        else:
            bound = after if after is not None and after < stop else stop
            ok = cur.set_range(bound)
            ok = cur.prev() if ok else cur.last()
            if not ok:
                return
            for k, v in cur.iterprev():
                if k < start:
                    return
                if k >= bound:
                    continue
                yield k, unpack(v)[0]

    def find_unique(self, index: IndexInfo, value: Any) -> int | None:
        """The record id a unique single-field index maps `value` to, if any."""
        key, _ = keys.fit(_U64.pack(index.id), keys.encode(value))
        rid = self._txn.get(key, db=self._engine._index)
        return None if rid is None else int(_U64.unpack(rid)[0])

    def stats(self, coll: CollectionInfo) -> tuple[int, int]:
        """(document count, data bytes) of a collection."""
        raw = self._txn.get(_U64.pack(coll.id), db=self._engine._stats)
        return (0, 0) if raw is None else _STATS.unpack(raw)


def _rid_of(key: bytes | None, default: int | None) -> int | None:
    return default if key is None else int(_U64.unpack_from(key, 8)[0])


def _record_key(coll_id: int, rid: int) -> bytes:
    return _U64.pack(coll_id) + _U64.pack(rid)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Engine:
    """The storage engine of one data directory. Create with Engine.open(path); close() when done."""

    def __init__(self, path: str, env: Any, lock_fd: int) -> None:
        self.path = path
        self._env = env
        self._lock_fd = lock_fd
        self._gate = _Gate()
        self._write_lock = threading.Lock()
        self._catalog = env.open_db(b"catalog")
        self._records = env.open_db(b"records")
        self._index = env.open_db(b"index")
        self._stats = env.open_db(b"stats")
        self._meta = env.open_db(b"meta")
        self._expiry = env.open_db(b"expiry")
        self._collections: dict[tuple[str, str], CollectionInfo] = {}

    # -- lifecycle -------------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str, map_size: int = INITIAL_MAP_SIZE) -> Engine:
        """Open (creating if needed) the data directory. Raises DataDirLocked if another process
        has it open."""
        os.makedirs(path, exist_ok=True)
        lock_path = os.path.join(path, LOCK_FILE)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise DataDirLocked(
                f"Unable to lock the data directory {path}: another ebbdb process is using it"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            env = lmdb.open(path, map_size=map_size, max_dbs=8, subdir=True, lock=True)
            existing = env.info()["map_size"]
            if existing < map_size:
                env.set_mapsize(map_size)
            engine = cls(path, env, fd)
        except BaseException:
            os.close(fd)
            raise
        engine._load_catalog()
        return engine

    def close(self) -> None:
        if self._env is None:
            return
        with self._write_lock:
            self._env.sync(True)
            self._env.close()
            self._env = None
            os.close(self._lock_fd)

    def _load_catalog(self) -> None:
        with self._env.begin(db=self._catalog) as txn:
            for _k, v in txn.cursor():
                info = CollectionInfo.from_doc(bson.decode(bytes(v), CODEC))
                self._collections[(info.db, info.name)] = info

    # -- transactions ----------------------------------------------------------------------------

    def read(self) -> Reader:
        return Reader(self)

    def _write(self, fn: Callable[[Any, _CatalogChanges], T]) -> T:
        """Run `fn(txn, changes)` in one write transaction and commit it durably; catalog entries
        `fn` put in `changes` (None for dropped) reach the in-memory catalog only after the commit.
        Grows the map and retries when it fills, so callers never see a map-full error."""
        with self._write_lock:
            while True:
                txn = self._env.begin(write=True)
                changes: _CatalogChanges = {}
                try:
                    result = fn(txn, changes)
                    txn.commit()
                    for key, info in changes.items():
                        if info is None:
                            self._collections.pop(key, None)
                        else:
                            self._collections[key] = info
                    return result
                except lmdb.MapFullError:
                    txn.abort()
                    self._grow()
                except BaseException:
                    txn.abort()
                    raise

    def _grow(self) -> None:
        size = self._env.info()["map_size"]
        self._gate.resize(lambda: self._env.set_mapsize(size * 2))

    @property
    def map_size(self) -> int:
        return int(self._env.info()["map_size"])

    def _next_id(self, txn: Any) -> int:
        raw = txn.get(_NEXT_ID, db=self._meta)
        n = 1 if raw is None else _U64.unpack(raw)[0]
        txn.put(_NEXT_ID, _U64.pack(n + 1), db=self._meta)
        return int(n)

    # -- catalog ---------------------------------------------------------------------------------

    def collection(self, db: str, name: str) -> CollectionInfo | None:
        return self._collections.get((db, name))

    def collections(self, db: str | None = None) -> list[CollectionInfo]:
        return sorted(
            (c for c in self._collections.values() if db is None or c.db == db),
            key=lambda c: (c.db, c.name),
        )

    def databases(self) -> list[DatabaseInfo]:
        out: dict[str, list[CollectionInfo]] = {}
        for c in self._collections.values():
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

    def _put_collection(self, txn: Any, info: CollectionInfo) -> None:
        txn.put(info.ns.encode(), bson.encode(info.to_doc(), codec_options=CODEC), db=self._catalog)

    def _new_collection(
        self, txn: Any, db: str, name: str, options: dict[str, Any]
    ) -> CollectionInfo:
        coll_id = self._next_id(txn)
        id_index = IndexInfo(self._next_id(txn), "_id_", ID_INDEX_KEY, {})
        info = CollectionInfo(
            coll_id, db, name, options, (id_index,), Binary(uuid.uuid4().bytes, 4)
        )
        self._put_collection(txn, info)
        return info

    def create_collection(
        self, db: str, name: str, options: dict[str, Any] | None = None
    ) -> CollectionInfo:
        """Create an empty collection. Raises NamespaceExists or InvalidNamespace."""
        validate_collection_name(db, name)

        def run(txn: Any, changes: _CatalogChanges) -> CollectionInfo:
            if (db, name) in self._collections:
                raise NamespaceExists(f"Collection {db}.{name} already exists.")
            info = self._new_collection(txn, db, name, dict(options or {}))
            changes[(db, name)] = info
            return info

        return self._write(run)

    def drop_collection(self, db: str, name: str) -> bool:
        """Drop a collection, its documents and its indexes. False when it did not exist."""

        def run(txn: Any, changes: _CatalogChanges) -> bool:
            info = self._collections.get((db, name))
            if info is None:
                return False
            self._drop(txn, info)
            changes[(db, name)] = None
            return True

        return self._write(run)

    def drop_database(self, db: str) -> list[str]:
        """Drop every collection of `db`; returns their names."""
        validate_db_name(db)

        def run(txn: Any, changes: _CatalogChanges) -> list[str]:
            infos = [c for c in self._collections.values() if c.db == db]
            for info in infos:
                self._drop(txn, info)
                changes[(info.db, info.name)] = None
            return [i.name for i in infos]

        return self._write(run)

    def _drop(self, txn: Any, info: CollectionInfo) -> None:
        _delete_prefix(txn, self._records, _U64.pack(info.id))
        for ix in info.indexes:
            _delete_prefix(txn, self._index, _U64.pack(ix.id))
            _delete_prefix(txn, self._expiry, _U64.pack(ix.id))
        txn.delete(_U64.pack(info.id), db=self._stats)
        txn.delete(info.ns.encode(), db=self._catalog)

    # -- writes ----------------------------------------------------------------------------------

    def insert(
        self,
        db: str,
        name: str,
        documents: Sequence[bytes],
        ordered: bool = True,
        now_ms: int | None = None,
    ) -> InsertResult:
        """Insert raw BSON documents in one transaction, creating the collection if needed.

        Each document is validated and given an `_id` (a new ObjectId, stored as the first field).
        Failures are per document: ordered inserts stop at the first, unordered ones go on."""
        validate_collection_name(db, name)
        stamp = _now_ms() if now_ms is None else now_ms

        def run(txn: Any, changes: _CatalogChanges) -> InsertResult:
            info = self._collections.get((db, name))
            created = info is None
            if info is None:
                info = self._new_collection(txn, db, name, {})
                changes[(db, name)] = info
            rid = self._last_rid(txn, info.id)
            inserted = size = 0
            errors: list[tuple[int, StorageError]] = []
            for i, raw in enumerate(documents):
                try:
                    raw, doc = prepare_document(raw)
                    updated = self._insert_one(txn, info, rid + 1, stamp, raw, doc)
                except StorageError as exc:
                    errors.append((i, exc))
                    if ordered:
                        break
                    continue
                if updated is not info:
                    info = changes[(db, name)] = updated
                rid += 1
                inserted += 1
                size += len(raw)
            if inserted:
                self._add_stats(txn, info.id, inserted, size)
            return InsertResult(inserted, tuple(errors), created)

        return self._write(run)

    def _insert_one(
        self,
        txn: Any,
        info: CollectionInfo,
        rid: int,
        now_ms: int,
        raw: bytes,
        doc: dict[str, Any],
    ) -> CollectionInfo:
        """Write one prepared document, its index entries and its expiry entries (its last-modified
        time is `now_ms`); returns the collection's catalog entry, updated if an index became
        multikey. Checks every unique index before writing; a key held only by a document expired
        at `now_ms` is taken over (that document is deleted in this transaction)."""
        rid_bytes = _U64.pack(rid)
        entries, flags = self._index_entries(txn, info, doc, rid_bytes, now_ms=now_ms)
        return self._put_record(txn, info, rid, raw, doc, entries, flags, now_ms)

    def _put_record(
        self,
        txn: Any,
        info: CollectionInfo,
        rid: int,
        raw: bytes,
        doc: dict[str, Any],
        entries: list[bytes],
        flags: _IndexFlags,
        now_ms: int,
    ) -> CollectionInfo:
        """Store a record (header for `now_ms`, then `raw`), its index entries and its expiry
        entries; record the index flags it set. Returns the (possibly updated) catalog entry."""
        rid_bytes = _U64.pack(rid)
        meta = ttl.meta_for(info, doc, now_ms)
        txn.put(_record_key(info.id, rid), meta.pack() + raw, db=self._records)
        for key in entries:
            txn.put(key, rid_bytes, db=self._index)
        for key in ttl.expiry_keys(info, meta, rid_bytes):
            txn.put(key, b"", db=self._expiry)
        if flags:
            info = info.with_indexes(_flagged(info.indexes, flags))
            self._put_collection(txn, info)
        return info

    def _index_entries(
        self,
        txn: Any,
        info: CollectionInfo,
        doc: dict[str, Any],
        rid_bytes: bytes,
        indexes: tuple[IndexInfo, ...] | None = None,
        now_ms: int | None = None,
    ) -> tuple[list[bytes], _IndexFlags]:
        """The index keys one document needs (raising DuplicateKey when a unique index already
        holds one of them for another record, unless that record is expired at `now_ms`: then it
        is deleted), and the flags (multikey, long keys) it newly sets on indexes, by index id."""
        entries: list[bytes] = []
        flags: _IndexFlags = {}
        for ix in info.indexes if indexes is None else indexes:
            prefix = _U64.pack(ix.id)
            bodies, is_multi = index_bodies(ix, doc)
            if is_multi and not ix.multikey:
                flags.setdefault(ix.id, set()).add("multikey")
            for body, values in bodies:
                if ix.unique:
                    key, shortened = keys.fit(prefix, body)
                    held = txn.get(key, db=self._index)
                    if held is not None and held != rid_bytes:
                        if now_ms is None or not self._take_over_expired(txn, info, held, now_ms):
                            raise DuplicateKey(info.ns, ix.name, dict(ix.key), _shown(values))
                else:
                    key, shortened = keys.fit(prefix, body, rid_bytes)
                if shortened and not ix.long_keys:
                    flags.setdefault(ix.id, set()).add("long_keys")
                entries.append(key)
        return entries, flags

    def _take_over_expired(
        self, txn: Any, info: CollectionInfo, rid_bytes: bytes, now_ms: int
    ) -> bool:
        """Delete the record if it is expired at `now_ms` (its key may then be reused)."""
        rid = int(_U64.unpack(rid_bytes)[0])
        value = txn.get(_record_key(info.id, rid), db=self._records)
        if value is None or not ttl.expired_value(value, ttl.rules_for(info), now_ms):
            return False
        size = self._delete_record(txn, info, rid, value)
        self._add_stats(txn, info.id, -1, -size)
        return True

    def _delete_record(self, txn: Any, info: CollectionInfo, rid: int, value: bytes) -> int:
        """Delete one record with its index and expiry entries; returns its BSON size (the caller
        counts it out of the collection's stats)."""
        rid_bytes = _U64.pack(rid)
        raw = ttl.body(value)
        self._delete_entries(txn, info, value, rid_bytes, keep=frozenset())
        txn.delete(_record_key(info.id, rid), db=self._records)
        return len(raw)

    def _delete_entries(
        self, txn: Any, info: CollectionInfo, value: bytes, rid_bytes: bytes, keep: frozenset[bytes]
    ) -> None:
        """Delete the index and expiry entries of a stored record, except the index keys in `keep`
        (which its replacement still needs). A unique entry goes only while it names this record."""
        doc = bson.decode(ttl.body(value), CODEC)
        for ix in info.indexes:
            prefix = _U64.pack(ix.id)
            bodies, _multi = index_bodies(ix, doc)
            for body, _values in bodies:
                key, _ = keys.fit(prefix, body) if ix.unique else keys.fit(prefix, body, rid_bytes)
                if key in keep:
                    continue
                if not ix.unique or txn.get(key, db=self._index) == rid_bytes:
                    txn.delete(key, db=self._index)
        for key in ttl.expiry_keys(info, ttl.read_meta(value), rid_bytes):
            txn.delete(key, db=self._expiry)

    def _replace_record(
        self,
        txn: Any,
        info: CollectionInfo,
        rid: int,
        value: bytes,
        raw: bytes,
        doc: dict[str, Any],
        now_ms: int,
    ) -> CollectionInfo:
        """Replace a stored record's document with `raw` (decoded: `doc`, same `_id`), keeping its
        record id; its last-modified time becomes `now_ms` (every write refreshes the Cosmos `_ts`).
        Unique keys are checked before anything is written (DuplicateKey; a holder expired at
        `now_ms` is taken over). Returns the catalog entry, updated if an index became multikey."""
        rid_bytes = _U64.pack(rid)
        entries, flags = self._index_entries(txn, info, doc, rid_bytes, now_ms=now_ms)
        self._delete_entries(txn, info, value, rid_bytes, keep=frozenset(entries))
        return self._put_record(txn, info, rid, raw, doc, entries, flags, now_ms)

    def modify(self, db: str, name: str, fn: Callable[[CollectionWrites], T], now_ms: int) -> T:
        """Run `fn` with a view of one collection inside one write transaction, committed durably
        when `fn` returns (and abandoned if it raises). The view's writes are stamped `now_ms`."""
        validate_collection_name(db, name)

        def run(txn: Any, changes: _CatalogChanges) -> T:
            view = CollectionWrites(self, txn, changes, db, name, now_ms)
            result = fn(view)
            view._flush()
            return result

        return self._write(run)

    # -- time to live ------------------------------------------------------------------------------

    def purge_expired(self, db: str, name: str, now_ms: int, limit: int) -> int:
        """Delete up to `limit` documents expired at `now_ms`, in one write transaction, found by
        range reads over the expiry index (never a scan of live documents). Returns how many."""

        def run(txn: Any, changes: _CatalogChanges) -> int:
            info = self._collections.get((db, name))
            if info is None:
                return 0
            rules = ttl.rules_for(info)
            deleted = size = 0
            for rid in self._expired_candidates(txn, rules, now_ms, limit):
                value = txn.get(_record_key(info.id, rid), db=self._records)
                # The predicate decides; the expiry index only finds candidates.
                if value is not None and ttl.expired_value(value, rules, now_ms):
                    size += self._delete_record(txn, info, rid, value)
                    deleted += 1
            if deleted:
                self._add_stats(txn, info.id, -deleted, -size)
            return deleted

        return self._write(run)

    def _expired_candidates(self, txn: Any, rules: ttl.Rules, now_ms: int, limit: int) -> list[int]:
        found: dict[int, None] = {}
        cur = txn.cursor(db=self._expiry)
        for start, stop in ttl.expiry_ranges(rules, now_ms):
            if not cur.set_range(start):
                continue
            for k in cur.iternext(values=False):
                if k >= stop or len(found) >= limit:
                    break
                found[int(_U64.unpack_from(k, 17)[0])] = None
            if len(found) >= limit:
                break
        return list(found)

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

    # -- indexes ---------------------------------------------------------------------------------

    def create_indexes(self, db: str, name: str, specs: Sequence[IndexSpec]) -> CreateIndexesResult:
        """Create indexes, building each over the existing documents, all in one transaction:
        a unique build that meets a duplicate raises DuplicateKey and leaves nothing behind.
        Raises QueryError for conflicts with existing indexes (85, 86) or too many indexes."""
        validate_collection_name(db, name)

        def run(txn: Any, changes: _CatalogChanges) -> CreateIndexesResult:
            info = self._collections.get((db, name))
            created = info is None
            if info is None:
                info = self._new_collection(txn, db, name, {})
            before = len(info.indexes)
            new: list[IndexInfo] = []
            for spec in specs:
                if any(conflict(spec, ix) == "same" for ix in (*info.indexes, *new)):
                    continue
                if any(spec.name == ix.name or conflict(spec, ix) == "same" for ix in new):
                    raise QueryError(
                        "IndexKeySpecsConflict", f"Index with name: {spec.name} is given twice"
                    )
                new.append(IndexInfo(self._next_id(txn), spec.name, spec.key, dict(spec.options)))
            if not new:
                return CreateIndexesResult(before, before, created, "all indexes already exist")
            if sum(map(ttl.is_cosmos_index, (*info.indexes, *new))) > 1:
                raise QueryError("CannotCreateIndex", _ONE_COSMOS_DEFAULT)
            if before + len(new) > MAX_INDEXES:
                raise QueryError(
                    "CannotCreateIndex",
                    f"add index fails, too many indexes for {info.ns} key:{new[-1].spec()['key']}",
                )
            built = self._build_indexes(txn, info, tuple(new))
            info = info.with_indexes(info.indexes + built)
            self._put_collection(txn, info)
            changes[(db, name)] = info
            return CreateIndexesResult(before, len(info.indexes), created, None)

        return self._write(run)

    def _build_indexes(
        self, txn: Any, info: CollectionInfo, indexes: tuple[IndexInfo, ...]
    ) -> tuple[IndexInfo, ...]:
        flags: _IndexFlags = {}
        rewrites: list[tuple[bytes, bytes]] = []
        ttl_view = _ttl_view(info, indexes)
        cur = txn.cursor(db=self._records)
        prefix = _U64.pack(info.id)
        if cur.set_range(prefix):
            for k, v in cur.iternext():
                if k[:8] != prefix:
                    break
                doc = bson.decode(ttl.body(v), CODEC)
                rid_bytes = k[8:16]
                entries, new_flags = self._index_entries(txn, info, doc, rid_bytes, indexes)
                for ix_id, names in new_flags.items():
                    flags.setdefault(ix_id, set()).update(names)
                for key in entries:
                    txn.put(key, rid_bytes, db=self._index)
                rewritten = self._add_expiry_facts(txn, ttl_view, k, v, doc)
                if rewritten is not None:
                    rewrites.append((k, rewritten))
        # Headers are rewritten after the scan, not under the cursor walking the same records.
        for k, value in rewrites:
            txn.put(k, value, db=self._records)
        return _flagged(indexes, flags)

    def _add_expiry_facts(
        self,
        txn: Any,
        ttl_view: CollectionInfo | None,
        key: bytes,
        value: bytes,
        doc: dict[str, Any],
    ) -> bytes | None:
        """For TTL indexes new to a collection (`ttl_view`: the collection with only those, from
        _ttl_view): add a record's expiry entries (native and Cosmos) and return its record value
        with the earliest dates in the header (native), if that changed; the caller writes it."""
        if ttl_view is None:
            return None
        meta = ttl.read_meta(value)
        dates = dict(meta.dates)
        for ix in ttl_view.indexes:
            if ttl.is_native_ttl(ix):
                d = ttl.earliest_date(ix, doc)
                if d is None:
                    dates.pop(ix.id, None)
                else:
                    dates[ix.id] = d
        new_meta = ttl.RecordMeta(meta.modified, meta.ttl, tuple(dates.items()))
        for ek in ttl.expiry_keys(ttl_view, new_meta, key[8:16]):
            txn.put(ek, b"", db=self._expiry)
        return new_meta.pack() + ttl.body(value) if new_meta != meta else None

    def drop_indexes(self, db: str, name: str, which: str | dict[str, Any] | list[str]) -> int:
        """Drop indexes by name, key pattern, list of names, or "*" (all but `_id_`); returns how
        many indexes the collection had. Raises NamespaceNotFound, IndexNotFound, InvalidOptions
        (the `_id_` index) or AmbiguousIndexKeyPattern."""
        validate_collection_name(db, name)

        def run(txn: Any, changes: _CatalogChanges) -> int:
            info = self._collections.get((db, name))
            if info is None:
                raise NamespaceNotFound(f"ns not found {db}.{name}")
            targets = self._resolve_drop(info, which)
            for ix in targets:
                _delete_prefix(txn, self._index, _U64.pack(ix.id))
                _delete_prefix(txn, self._expiry, _U64.pack(ix.id))
            dropped = {ix.id for ix in targets}
            updated = info.with_indexes(tuple(ix for ix in info.indexes if ix.id not in dropped))
            self._put_collection(txn, updated)
            changes[(db, name)] = updated
            return len(info.indexes)

        return self._write(run)

    def modify_index(
        self,
        db: str,
        name: str,
        key_pattern: dict[str, Any] | None,
        index_name: str | None,
        expire_after: int | None,
        hidden: bool | None,
    ) -> IndexChange:
        """collMod's index form: change a TTL index's expireAfterSeconds (or make a single-field
        index a TTL index), and hide or unhide an index. Raises NamespaceNotFound, IndexNotFound,
        AmbiguousIndexKeyPattern, InvalidOptions (spec/ttl.md, collMod)."""
        if (key_pattern is None) == (index_name is None):
            raise QueryError(
                "InvalidOptions", "must specify exactly one of 'name' or 'keyPattern' in 'index'"
            )

        def run(txn: Any, changes: _CatalogChanges) -> IndexChange:
            info = self._collections.get((db, name))
            if info is None:
                raise NamespaceNotFound(f"ns does not exist: {db}.{name}")
            if index_name is not None:
                found = [ix for ix in info.indexes if ix.name == index_name]
                if not found:
                    raise QueryError(
                        "IndexNotFound", f"cannot find index {index_name} for ns {info.ns}"
                    )
            else:
                assert key_pattern is not None
                found = [ix for ix in info.indexes if index_key_matches(ix, key_pattern)]
                if not found:
                    raise QueryError(
                        "IndexNotFound", f"cannot find index {key_pattern} for ns {info.ns}"
                    )
                if len(found) > 1:
                    raise QueryError(
                        "AmbiguousIndexKeyPattern",
                        f"index keyPattern {key_pattern} matches {len(found)} indexes, must use "
                        "index name",
                    )
            ix = found[0]
            options = dict(ix.options)
            change = IndexChange()
            convert = False
            if expire_after is not None:
                cosmos = len(ix.key) == 1 and ix.key[0][0] == ttl.COSMOS_FIELD
                if ix.name == "_id_" or len(ix.key) != 1:
                    raise QueryError(
                        "InvalidOptions",
                        "TTL indexes are single-field indexes, compound indexes "
                        "and the _id index do not support TTL",
                    )
                if cosmos and not (expire_after == -1 or 1 <= expire_after <= MAX_EXPIRE):
                    raise QueryError(
                        "InvalidOptions", f"invalid expireAfterSeconds for _ts: {expire_after}"
                    )
                if not cosmos and not 0 <= expire_after <= MAX_EXPIRE:
                    raise QueryError(
                        "InvalidOptions",
                        f"TTL index 'expireAfterSeconds' must be within [0, {MAX_EXPIRE}], "
                        f"got {expire_after}",
                    )
                old = options.get("expireAfterSeconds")
                convert = old is None
                options["expireAfterSeconds"] = expire_after
                change = replace(change, expire_old=old, expire_new=expire_after)
            if hidden is not None:
                if ix.name == "_id_":
                    raise QueryError("InvalidOptions", "cannot hide _id index")
                was = bool(options.get("hidden"))
                if hidden:
                    options["hidden"] = True
                else:
                    options.pop("hidden", None)
                if was != hidden:
                    change = replace(change, hidden_old=was, hidden_new=hidden)
            updated = replace(ix, options=options)
            others = (i for i in info.indexes if i.id != ix.id)
            if ttl.is_cosmos_index(updated) and any(map(ttl.is_cosmos_index, others)):
                raise QueryError("InvalidOptions", _ONE_COSMOS_DEFAULT)
            info = info.with_indexes(tuple(updated if i.id == ix.id else i for i in info.indexes))
            if convert:
                self._convert_to_ttl(txn, info, updated)
            self._put_collection(txn, info)
            changes[(db, name)] = info
            return change

        return self._write(run)

    def _convert_to_ttl(self, txn: Any, info: CollectionInfo, ix: IndexInfo) -> None:
        """A single-field index just became a TTL index: give every document its expiry facts.
        On `_ts` it becomes the Cosmos default, whose key is the server's last-modified time, so
        its entries built from a client `_ts` field go."""
        if ttl.is_cosmos_index(ix):
            _delete_prefix(txn, self._index, _U64.pack(ix.id))
        prefix = _U64.pack(info.id)
        cur = txn.cursor(db=self._records)
        if not cur.set_range(prefix):
            return
        records = list(itertools.takewhile(lambda kv: kv[0][:8] == prefix, cur.iternext()))
        view = _ttl_view(info, (ix,))
        for k, v in records:
            rewritten = self._add_expiry_facts(txn, view, k, v, bson.decode(ttl.body(v), CODEC))
            if rewritten is not None:
                txn.put(k, rewritten, db=self._records)

    def _resolve_drop(
        self, info: CollectionInfo, which: str | dict[str, Any] | list[str]
    ) -> list[IndexInfo]:
        if which == "*":
            return [ix for ix in info.indexes if ix.name != "_id_"]
        if isinstance(which, dict):
            found = [ix for ix in info.indexes if index_key_matches(ix, which)]
            if not found:
                raise QueryError("IndexNotFound", f"can't find index with key: {which}")
            if len(found) > 1:
                raise QueryError(
                    "AmbiguousIndexKeyPattern",
                    f"{len(found)} indexes found for key: {which}, identify by name instead.",
                )
            targets = found
        else:
            names = [which] if isinstance(which, str) else list(which)
            targets = []
            for n in names:
                ix = info.index_named(n)
                if ix is None:
                    raise QueryError("IndexNotFound", f"index not found with name [{n}]")
                targets.append(ix)
        if any(ix.name == "_id_" for ix in targets):
            raise QueryError("InvalidOptions", "cannot drop _id index")
        return targets

    def _last_rid(self, txn: Any, coll_id: int) -> int:
        cur = txn.cursor(db=self._records)
        positioned = cur.set_range(_U64.pack(coll_id + 1))
        ok = cur.prev() if positioned else cur.last()
        if ok:
            k = cur.key()
            if k[:8] == _U64.pack(coll_id):
                return int(_U64.unpack_from(k, 8)[0])
        return 0

    def _add_stats(self, txn: Any, coll_id: int, count: int, size: int) -> None:
        key = _U64.pack(coll_id)
        raw = txn.get(key, db=self._stats)
        n, s = (0, 0) if raw is None else _STATS.unpack(raw)
        txn.put(key, _STATS.pack(n + count, s + size), db=self._stats)


class CollectionWrites:
    """One collection inside a write transaction (see Engine.modify): read a record, then delete,
    replace or insert documents with their index and expiry entries, statistics kept in step.
    Storage errors (DuplicateKey, DocumentTooLarge, ...) are raised before the failing document
    changes anything, so a caller may report them and go on in the same transaction."""

    def __init__(
        self, engine: Engine, txn: Any, changes: _CatalogChanges, db: str, name: str, now_ms: int
    ) -> None:
        self._engine = engine
        self._txn = txn
        self._changes = changes
        self.db = db
        self.name = name
        self.now_ms = now_ms
        self.info: CollectionInfo | None = engine._collections.get((db, name))
        self.created = False
        self._count = 0
        self._size = 0

    def get(self, rid: int) -> bytes | None:
        """The stored record (header and BSON; see storage/ttl.py), or None."""
        if self.info is None:
            return None
        value: bytes | None = self._txn.get(
            _record_key(self.info.id, rid), db=self._engine._records
        )
        return value

    def delete(self, rid: int, value: bytes) -> None:
        """Delete a record read with get()."""
        assert self.info is not None
        self._size -= self._engine._delete_record(self._txn, self.info, rid, value)
        self._count -= 1

    def replace(self, rid: int, value: bytes, raw: bytes, doc: dict[str, Any]) -> None:
        """Store a new version (`raw`, decoded `doc`) of a record read with get()."""
        assert self.info is not None
        _check_size(raw)
        info = self._engine._replace_record(self._txn, self.info, rid, value, raw, doc, self.now_ms)
        self._size += len(raw) - (len(value) - ttl.body_offset(value))
        self._set_info(info)

    def insert(self, raw: bytes) -> dict[str, Any]:
        """Insert one client document (validated, given an `_id` if it has none), creating the
        collection if needed; returns the document as stored."""
        raw, doc = prepare_document(raw)
        engine = self._engine
        if self.info is None:
            self._set_info(engine._new_collection(self._txn, self.db, self.name, {}))
            self.created = True
        assert self.info is not None
        rid = engine._last_rid(self._txn, self.info.id) + 1
        self._set_info(engine._insert_one(self._txn, self.info, rid, self.now_ms, raw, doc))
        self._count += 1
        self._size += len(raw)
        return doc

    def _set_info(self, info: CollectionInfo) -> None:
        if info is not self.info:
            self.info = self._changes[(self.db, self.name)] = info

    def _flush(self) -> None:
        if self.info is not None and (self._count or self._size):
            self._engine._add_stats(self._txn, self.info.id, self._count, self._size)


def _check_size(raw: bytes) -> None:
    if len(raw) > MAX_DOCUMENT_SIZE:
        raise QueryError(
            "Location17419",
            f"Resulting document after update is larger than {MAX_DOCUMENT_SIZE}",
        )


def _shown(values: dict[str, Any]) -> dict[str, Any]:
    """Key values as a duplicate-key error reports them: an empty array's key is BSON undefined,
    which drivers decode as null (and Python's BSON encoder cannot write)."""
    return {k: None if v is UNDEFINED else v for k, v in values.items()}


def _ttl_view(info: CollectionInfo, indexes: tuple[IndexInfo, ...]) -> CollectionInfo | None:
    """The collection seen with only the TTL indexes among `indexes` (None if there are none)."""
    new_ttl = tuple(ix for ix in indexes if "expireAfterSeconds" in ix.options)
    return info.with_indexes(new_ttl) if new_ttl else None


def _flagged(indexes: tuple[IndexInfo, ...], flags: _IndexFlags) -> tuple[IndexInfo, ...]:
    """The indexes with the flags set (`multikey`, `long_keys`) that documents turned on."""
    out = []
    for ix in indexes:
        names = flags.get(ix.id, set())
        if names:
            multikey = ix.multikey or "multikey" in names
            ix = replace(ix, multikey=multikey, long_keys=ix.long_keys or "long_keys" in names)
        out.append(ix)
    return tuple(out)


def _delete_prefix(txn: Any, db: Any, prefix: bytes) -> None:
    cur = txn.cursor(db=db)
    ok = cur.set_range(prefix)
    while ok and cur.key()[: len(prefix)] == prefix:
        ok = cur.delete()


__all__ = [
    "CODEC",
    "CollectionWrites",
    "MAX_DOCUMENT_SIZE",
    "CreateIndexesResult",
    "DataDirLocked",
    "DatabaseInfo",
    "Engine",
    "IndexChange",
    "InsertResult",
    "Reader",
    "index_bodies",
    "prepare_document",
]
