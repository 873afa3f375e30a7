"""The storage engine on LMDB: one environment per data directory, a catalog, collections of records
keyed by (collection id, record id), and index entries kept in the same write transaction.

Synchronous and thread-aware: one writer thread may run write methods while other threads read;
growing the map waits for open readers (LMDB forbids resizing under a live read transaction).
"""

from __future__ import annotations

import fcntl
import itertools
import os
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import bson
import lmdb
from bson import ObjectId, Regex
from bson.binary import Binary, UuidRepresentation
from bson.codec_options import CodecOptions, DatetimeConversion

from storage import keys
from storage.catalog import (
    CollectionInfo,
    IndexInfo,
    validate_collection_name,
    validate_db_name,
)
from storage.errors import (
    DocumentTooLarge,
    DuplicateKey,
    InvalidBSON,
    InvalidIdField,
    NamespaceExists,
    QueryError,
    StorageError,
)
from storage.query.paths import MISSING, leaves, split

#: How documents are decoded inside ebbdb: dates stay exact milliseconds, UUIDs stay Binary, so a
#: decoded document re-encodes to the same bytes.
CODEC: CodecOptions[dict[str, Any]] = CodecOptions(
    datetime_conversion=DatetimeConversion.DATETIME_MS,
    uuid_representation=UuidRepresentation.UNSPECIFIED,
)
#: MongoDB's maxBsonObjectSize.
MAX_DOCUMENT_SIZE = 16 * 1024 * 1024
INITIAL_MAP_SIZE = 1 << 30
LOCK_FILE = "ebbdb.lock"

_U64 = struct.Struct(">Q")
_STATS = struct.Struct(">qq")  # document count, data bytes
_RECORD_HEADER = struct.Struct(">Bq")  # record format, last-modified time (ms since the epoch)
_RECORD_FORMAT = 1
_HEADER_LEN = _RECORD_HEADER.size
_NEXT_ID = b"next_id"
_ID_INDEX_KEY = (("_id", 1),)

T = TypeVar("T")
_CatalogChanges = dict[tuple[str, str], CollectionInfo | None]


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
        """The stored BSON of one record, or None."""
        raw = self._txn.get(_record_key(coll.id, rid), db=self._engine._records)
        return None if raw is None else raw[_HEADER_LEN:]

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
        """(record id, BSON) in record-id order, starting after `after` (exclusive)."""
        _cur, records = self._records_after(coll, after, reverse)
        unpack = _U64.unpack_from
        for k, v in records:
            yield unpack(k, 8)[0], v[_HEADER_LEN:]

    def scan_batch(
        self,
        coll: CollectionInfo,
        after: int | None,
        reverse: bool,
        max_docs: int,
        max_bytes: int,
        first: bool,
    ) -> tuple[list[bytes], int | None, bool, bool]:
        """The plain-scan fast path: up to `max_docs` records after `after` whose sizes add up to
        at most `max_bytes` (one at least when `first`). Returns (documents, last record id
        returned, no records remain, stopped for size)."""
        cur, records = self._records_after(coll, after, reverse)
        out: list[bytes] = []
        size = 0
        last_key = None
        for k, v in records:
            n = len(v) - _HEADER_LEN
            if size + n > max_bytes and (out or not first):
                return out, _rid_of(last_key, after), False, True
            out.append(v[_HEADER_LEN:])
            size += n
            last_key = k
            if len(out) >= max_docs:
                more = cur.prev() if reverse else cur.next()
                done = not more or cur.key()[:8] != k[:8]
                return out, _rid_of(last_key, after), done, False
        return out, _rid_of(last_key, after), True, False

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
        id_index = IndexInfo(self._next_id(txn), "_id_", _ID_INDEX_KEY, {})
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
            header = _RECORD_HEADER.pack(_RECORD_FORMAT, stamp)
            for i, raw in enumerate(documents):
                try:
                    raw, doc = prepare_document(raw)
                    self._insert_one(txn, info, rid + 1, header, raw, doc)
                except StorageError as exc:
                    errors.append((i, exc))
                    if ordered:
                        break
                    continue
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
        header: bytes,
        raw: bytes,
        doc: dict[str, Any],
    ) -> None:
        rid_bytes = _U64.pack(rid)
        entries: list[bytes] = []
        for ix in info.indexes:
            prefix = _U64.pack(ix.id)
            for body, values in index_bodies(ix, doc):
                if ix.unique:
                    key, _ = keys.fit(prefix, body)
                    if txn.get(key, db=self._index) is not None:
                        raise DuplicateKey(info.ns, ix.name, dict(ix.key), values)
                else:
                    key, _ = keys.fit(prefix, body, rid_bytes)
                entries.append(key)
        txn.put(_record_key(info.id, rid), header + raw, db=self._records)
        for key in entries:
            txn.put(key, rid_bytes, db=self._index)

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


def _delete_prefix(txn: Any, db: Any, prefix: bytes) -> None:
    cur = txn.cursor(db=db)
    ok = cur.set_range(prefix)
    while ok and cur.key()[: len(prefix)] == prefix:
        ok = cur.delete()


def prepare_document(raw: bytes) -> tuple[bytes, dict[str, Any]]:
    """Validate one client document and make sure `_id` is present and first.
    Returns (the BSON to store, its decoded form)."""
    try:
        doc = bson.decode(raw, CODEC)
    except Exception as exc:  # bson raises several types for corrupt input
        raise InvalidBSON(f"invalid BSON document: {exc}") from None
    if "_id" not in doc:
        oid = ObjectId()
        # Splice one ObjectId element in front of the original elements, so every other value
        # keeps its exact bytes (a decode/encode round trip would not for deprecated types).
        raw = struct.pack("<i", len(raw) + 17) + b"\x07_id\x00" + oid.binary + raw[4:]
        doc = {"_id": oid, **doc}
    else:
        _check_id(doc["_id"])
        if next(iter(doc)) != "_id":
            doc = {"_id": doc["_id"], **doc}
            raw = bson.encode(doc, codec_options=CODEC)
    if len(raw) > MAX_DOCUMENT_SIZE:
        raise DocumentTooLarge(
            f"object to insert too large. size in bytes: {len(raw)}, max size: {MAX_DOCUMENT_SIZE}"
        )
    return raw, doc


def _check_id(value: Any) -> None:
    if isinstance(value, list):
        raise InvalidIdField("The '_id' value cannot be of type array")
    if isinstance(value, Regex):
        raise QueryError("BadValue", "can't use a regex for _id")


def index_bodies(ix: IndexInfo, doc: dict[str, Any]) -> list[tuple[bytes, dict[str, Any]]]:
    """The encoded key bodies a document contributes to an index, each with the field values that
    make it (for duplicate-key reports). Array values give one entry per element (multikey)."""
    if ix.key == _ID_INDEX_KEY:
        value = doc["_id"]
        return [(keys.encode(value), {"_id": value})]
    per_field: list[list[Any]] = []
    for path, _direction in ix.key:
        values: list[Any] = []
        for v in leaves(doc, split(path)):
            if type(v) is list:
                values.extend(v) if v else values.append(None)
            else:
                values.append(None if v is MISSING else v)
        per_field.append(values or [None])
    if ix.options.get("sparse") and all(
        all(v is MISSING for v in leaves(doc, split(p))) for p, _ in ix.key
    ):
        return []
    directions = tuple(-1 if isinstance(d, (int, float)) and d < 0 else 1 for _, d in ix.key)
    fields = [p for p, _ in ix.key]
    out: dict[bytes, dict[str, Any]] = {}
    for combo in _product(per_field):
        body = keys.encode_compound(tuple(combo), directions)
        out.setdefault(body, dict(zip(fields, combo)))
    return list(out.items())


def _product(lists: list[list[Any]]) -> Iterator[list[Any]]:
    if not lists:
        yield []
        return
    for head in lists[0]:
        for rest in _product(lists[1:]):
            yield [head, *rest]


__all__ = [
    "CODEC",
    "MAX_DOCUMENT_SIZE",
    "DataDirLocked",
    "DatabaseInfo",
    "Engine",
    "InsertResult",
    "Reader",
]
