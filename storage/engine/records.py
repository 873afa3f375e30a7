"""Record upkeep inside a write transaction: a document with its index entries, expiry entries and
the collection's statistics, always changed together; and the catalog entries they live under.
Storage errors (DuplicateKey, DocumentTooLarge, ...) are raised before the failing document changes
anything."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import bson
from bson.binary import Binary
from bson.raw_bson import RawBSONDocument

from ebbdb.storage.catalog import schema
from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.core.documents import CODEC, MAX_DOCUMENT_SIZE, prepare_document
from ebbdb.storage.core.errors import DuplicateKey, QueryError
from ebbdb.storage.engine import capped, layout
from ebbdb.storage.engine.environment import Database, Environment, Txn
from ebbdb.storage.engine.oplog import OpLog, keeps_order, update_diff, wants_pre_images
from ebbdb.storage.engine.overlay import Overlay, committed
from ebbdb.storage.engine.writer import CatalogChanges
from ebbdb.storage.expiry import ttl
from ebbdb.storage.expiry.date_strings import DateStringNotices
from ebbdb.storage.indexes.entries import ID_INDEX_KEY, index_bodies
from ebbdb.storage.query.compare import UNDEFINED

IndexFlags = dict[int, set[str]]


_KEEP_NONE: frozenset[bytes] = frozenset()


def new_uuid() -> Binary:
    """A new collection UUID, as listCollections shows it (BSON binary subtype 4)."""
    return Binary(uuid.uuid4().bytes, 4)


class Records:
    """The record-level operations the engine's writes are made of (each takes the write
    transaction it runs in)."""

    def __init__(self, env: Environment, on_insert: Callable[[int], None] | None = None) -> None:
        """`on_insert` is told the collection id of every record inserted (the writer collects
        them for the listeners it tells after the commit: tailable cursors awaiting data)."""
        self.env = env
        #: Date-like strings met in TTL fields, for the TTL monitor's warning (storage/expiry/date_strings.py).
        self.date_strings = DateStringNotices()
        self._on_insert = on_insert
        #: The highest record id open transactions took, by collection (storage/engine/overlay.py):
        #: new records go past them, so that a transaction's inserts commit without colliding.
        self.rid_floor: dict[int, int] = {}
        #: The oplog (storage/engine/oplog.py), set by the engine: every change to a document
        #: is recorded there in the same transaction (a standalone's is never enabled).
        self.oplog: OpLog | None = None

    def next_id(self, txn: Txn) -> int:
        raw = txn.get(layout.NEXT_ID, db=self.env.meta)
        n = 1 if raw is None else layout.read_u64(raw)
        txn.put(layout.NEXT_ID, layout.u64(n + 1), db=self.env.meta)
        return n

    def put_collection(self, txn: Txn, info: CollectionInfo) -> None:
        txn.put(
            info.ns.encode(), bson.encode(info.to_doc(), codec_options=CODEC), db=self.env.catalog
        )

    def new_collection(
        self, txn: Txn, db: str, name: str, options: dict[str, Any], id_index: bool = True
    ) -> CollectionInfo:
        """A new empty collection's catalog entry, with its `_id` index unless `id_index` is
        False (the oplog: its entries have no `_id`, as in mongod)."""
        coll_id = self.next_id(txn)
        indexes: tuple[IndexInfo, ...] = ()
        if id_index:
            # The `_id` index takes the collection's default collation, as every index does.
            id_options = {"collation": options["collation"]} if options.get("collation") else {}
            if "timeseries" in options:
                # Measurements may share an `_id` (MongoDB's time series collections have no
                # `_id` index): this one, hidden from listIndexes, only finds them.
                id_options["unique"] = False
            indexes = (IndexInfo(self.next_id(txn), "_id_", ID_INDEX_KEY, id_options),)
        info = CollectionInfo(coll_id, db, name, options, indexes, new_uuid())
        self.put_collection(txn, info)
        if self.oplog is not None and indexes:
            created = {"create": name, **options, "idIndex": indexes[0].spec()}
            self.oplog.command(txn, db, created, info.uuid, name=name)
        return info

    def log_delete(
        self, txn: Txn, info: CollectionInfo, value: bytes, doc: dict[str, Any] | None = None
    ) -> None:
        """Record the deletion of a stored record in the oplog (with its pre-image where the
        collection keeps them); `doc` is its document, if the caller has it decoded."""
        oplog = self.oplog
        if oplog is None or not oplog.enabled:
            return
        if doc is None:
            doc = bson.decode(ttl.body(value), CODEC)
        pre = doc if wants_pre_images(info) else None
        oplog.op(txn, "d", info, {"_id": doc.get("_id")}, pre_image=pre)

    def insert_one(
        self,
        txn: Txn,
        info: CollectionInfo,
        rid: int,
        now_ms: int,
        raw: bytes,
        doc: dict[str, Any],
        noted: bool = False,
    ) -> CollectionInfo:
        """Write one prepared document, its index entries and its expiry entries (its last-modified
        time is `now_ms`); returns the collection's catalog entry, updated if an index became
        multikey. Checks every unique index before writing; a key held only by a document expired
        at `now_ms` is taken over (that document is deleted in this transaction). `noted`: the
        caller tells `on_insert` itself (once for a batch)."""
        rid_bytes = layout.u64(rid)
        entries, flags = self.index_entries(txn, info, doc, rid_bytes, now_ms=now_ms)
        if self._on_insert is not None and not noted:
            self._on_insert(info.id)
        return self.put_record(txn, info, rid, raw, doc, entries, flags, now_ms, rid_bytes)

    def append_unindexed(
        self, txn: Txn, info: CollectionInfo, rid: int, header: bytes, raw: bytes
    ) -> None:
        """Write a record that no index holds and no TTL rule touches, with its `header` (an
        oplog entry: it has no `_id`, and mongod's oplog has no `_id` index)."""
        if self._on_insert is not None:
            self._on_insert(info.id)
        txn.put(layout.record_key(info.id, rid), header + raw, db=self.env.records)

    def put_record(
        self,
        txn: Txn,
        info: CollectionInfo,
        rid: int,
        raw: bytes,
        doc: dict[str, Any],
        entries: list[bytes],
        flags: IndexFlags,
        now_ms: int,
        rid_bytes: bytes | None = None,
    ) -> CollectionInfo:
        """Store a record (header for `now_ms`, then `raw`), its index entries and its expiry
        entries; record the index flags it set. Returns the (possibly updated) catalog entry.
        `rid_bytes`: `rid` packed, when the caller has it."""
        if rid_bytes is None:
            rid_bytes = layout.u64(rid)
        if self.env.watched:
            self._watch(info.id, rid_bytes)
        header, expiry = ttl.header_for(info, doc, now_ms, rid_bytes)
        self.date_strings.check(info, doc, header)
        txn.put(layout.record_key(info.id, rid), header + raw, db=self.env.records)
        index_db = self.env.index
        for key in entries:
            txn.put(key, rid_bytes, db=index_db)
        for key in expiry:
            txn.put(key, b"", db=self.env.expiry)
        if flags:
            info = info.with_indexes(flagged(info.indexes, flags))
            self.put_collection(txn, info)
        return info

    def index_entries(
        self,
        txn: Txn,
        info: CollectionInfo,
        doc: dict[str, Any],
        rid_bytes: bytes,
        indexes: tuple[IndexInfo, ...] | None = None,
        now_ms: int | None = None,
    ) -> tuple[list[bytes], IndexFlags]:
        """The index keys one document needs (raising DuplicateKey when a unique index already
        holds one of them for another record, unless that record is expired at `now_ms`: then it
        is deleted), and the flags (multikey, long keys) it newly sets on indexes, by index id."""
        entries: list[bytes] = []
        flags: IndexFlags = {}
        for ix in info.indexes if indexes is None else indexes:
            bodies, is_multi = index_bodies(ix, doc)
            if is_multi and not ix.multikey:
                flags.setdefault(ix.id, set()).add("multikey")
            unique = ix.unique
            for body, values in bodies:
                key, shortened = layout.entry_key(ix.id, body, unique, rid_bytes)
                if unique:
                    held = txn.get(key, db=self.env.index)
                    if held is not None and held != rid_bytes:
                        if now_ms is None or not self.take_over_expired(txn, info, held, now_ms):
                            raise DuplicateKey(info.ns, ix.name, dict(ix.key), _shown(values))
                if shortened and not ix.long_keys:
                    flags.setdefault(ix.id, set()).add("long_keys")
                entries.append(key)
        return entries, flags

    def take_over_expired(
        self, txn: Txn, info: CollectionInfo, rid_bytes: bytes, now_ms: int
    ) -> bool:
        """Delete the record if it is expired at `now_ms` (its key may then be reused)."""
        rid = layout.read_u64(rid_bytes)
        value = txn.get(layout.record_key(info.id, rid), db=self.env.records)
        if value is None or not ttl.expired_value(value, ttl.rules_for(info), now_ms):
            return False
        self.log_delete(txn, info, value)
        size = self.delete_record(txn, info, rid, value)
        self.add_stats(txn, info.id, -1, -size)
        return True

    def delete_record(
        self,
        txn: Txn,
        info: CollectionInfo,
        rid: int,
        value: bytes,
        meta: ttl.RecordMeta | None = None,
        expiry: Sequence[bytes] | None = None,
        doc: dict[str, Any] | None = None,
    ) -> int:
        """Delete one record with its index and expiry entries; returns its BSON size (the caller
        counts it out of the collection's stats). `meta` is its header, if already read,
        `expiry` its expiry entries, if known (the TTL purge found the record by its one), and
        `doc` its document, if decoded already."""
        rid_bytes = layout.u64(rid)
        if self.env.watched:
            self._watch(info.id, rid_bytes)
        self.delete_entries(txn, info, value, rid_bytes, _KEEP_NONE, doc, meta, expiry=expiry)
        txn.delete(layout.record_key(info.id, rid), db=self.env.records)
        return len(value) - ttl.body_offset(value)

    def _watch(self, coll_id: int, rid_bytes: bytes) -> None:
        """An index build watches the collection: note the record written."""
        watched = self.env.watched.get(coll_id)
        if watched is not None:
            watched.add(rid_bytes)

    def delete_entries(
        self,
        txn: Txn,
        info: CollectionInfo,
        value: bytes,
        rid_bytes: bytes,
        keep: frozenset[bytes],
        doc: dict[str, Any] | None = None,
        meta: ttl.RecordMeta | None = None,
        expiry: Sequence[bytes] | None = None,
        indexes: tuple[IndexInfo, ...] | None = None,
    ) -> set[bytes]:
        """Delete the index and expiry entries of a stored record, except the index keys in `keep`
        (which its replacement still needs); returns the kept keys the record had. A unique entry
        goes only while it names this record. `doc` is the record's document, `meta` its header
        and `expiry` its expiry entries, if the caller has them already; `indexes`, if given, the
        only indexes whose entries go (the others' are unchanged)."""
        if doc is None:
            doc = bson.decode(ttl.body(value), CODEC)
        kept: set[bytes] = set()
        index_db = self.env.index
        for ix in info.indexes if indexes is None else indexes:
            bodies, _multi = index_bodies(ix, doc)
            for body, _values in bodies:
                key, _ = layout.entry_key(ix.id, body, ix.unique, rid_bytes)
                if key in keep:
                    kept.add(key)
                elif not ix.unique:
                    txn.delete(key, b"", index_db)
                else:
                    # A unique entry is this record's only while it names it: pop it, and put
                    # back one that names another record (one lookup instead of get + delete).
                    held = txn.pop(key, index_db)
                    if held is not None and held != rid_bytes:
                        txn.put(key, held, db=index_db)
        if expiry is None:
            rules = ttl.rules_for(info)
            if not rules.active and not rules.derived:
                return kept  # no expiry entries (ttl.expiry_keys), no header to read
            if meta is None:
                meta = ttl.read_meta(value)
            expiry = ttl.expiry_keys(info, meta, rid_bytes)
        expiry_db = self.env.expiry
        for key in expiry:
            txn.delete(key, b"", expiry_db)
        return kept

    def replace_record(
        self,
        txn: Txn,
        info: CollectionInfo,
        rid: int,
        value: bytes,
        raw: bytes,
        doc: dict[str, Any],
        now_ms: int,
        old_doc: dict[str, Any] | None = None,
    ) -> CollectionInfo:
        """Replace a stored record's document with `raw` (decoded: `doc`, same `_id`), keeping its
        record id; its last-modified time becomes `now_ms` (every write refreshes the Cosmos `_ts`).
        Unique keys are checked before anything is written (DuplicateKey; a holder expired at
        `now_ms` is taken over). Returns the catalog entry, updated if an index became multikey."""
        rid_bytes = layout.u64(rid)
        if old_doc is None:
            old_doc = bson.decode(ttl.body(value), CODEC)
        # Only the indexes whose keys the change moves are touched (an update of an unindexed
        # field, the common case, rewrites no entry and looks up no unique key).
        moved = tuple(ix for ix in info.indexes if not _same_keys(ix, doc, old_doc))
        entries, flags = self.index_entries(txn, info, doc, rid_bytes, moved, now_ms)
        kept = self.delete_entries(
            txn, info, value, rid_bytes, frozenset(entries), old_doc, indexes=moved
        )
        # Entries the old version already had stay as they are (no rewrite of their pages).
        changed = [key for key in entries if key not in kept] if kept else entries
        return self.put_record(txn, info, rid, raw, doc, changed, flags, now_ms)

    def make_room(
        self, txn: Txn, info: CollectionInfo, just_inserted: int, pending: tuple[int, int]
    ) -> tuple[int, int]:
        """A capped collection's oldest records deleted until it is within its bounds again
        after an insert (storage/engine/capped.py); returns (documents, bytes) removed, (0, 0) for a
        collection that is not capped."""
        bounds = capped.limits(info)
        if bounds is None:
            return 0, 0

        def delete(rid: int, value: bytes) -> int:
            # Logged as deletes, as mongod's primary does since 5.0 (the oplog's own are not).
            self.log_delete(txn, info, value)
            return self.delete_record(txn, info, rid, value)

        return capped.make_room(txn, self.env, info, bounds, just_inserted, pending, delete)

    def stored(self, txn: Txn, info: CollectionInfo) -> list[bytes]:
        """The collection's stored records (header and BSON) in natural order."""
        prefix = layout.collection_prefix(info.id)
        cur = txn.cursor(db=self.env.records)
        out: list[bytes] = []
        if cur.set_range(prefix):
            for key, value in cur.iternext():
                if not layout.in_collection(key, prefix):
                    break
                out.append(bytes(value))
        return out

    def last_rid(self, txn: Txn, coll_id: int) -> int:
        """The highest record id the collection has, or any open transaction took for it. In a
        transaction, records committed since its snapshot count too (its records must not take
        their ids)."""
        rid = max(self._last_in(txn, coll_id), self.rid_floor.get(coll_id, 0))
        if isinstance(txn, Overlay):
            with committed(self.env) as now:
                rid = max(rid, self._last_in(now, coll_id))
        return rid

    def _last_in(self, txn: Txn, coll_id: int) -> int:
        cur = txn.cursor(db=self.env.records)
        positioned = cur.set_range(layout.collection_end(coll_id))
        ok = cur.prev() if positioned else cur.last()
        if ok:
            k = cur.key()
            if layout.in_collection(k, layout.collection_prefix(coll_id)):
                return layout.record_rid(k)
        return 0

    def add_stats(self, txn: Txn, coll_id: int, count: int, size: int) -> None:
        key = layout.stats_key(coll_id)
        n, s = layout.unpack_stats(txn.get(key, db=self.env.stats))
        txn.put(key, layout.pack_stats(n + count, s + size), db=self.env.stats)


class CollectionWrites:
    """One collection inside a write transaction (see Engine.modify): read a record, then delete,
    replace or insert documents with their index and expiry entries, statistics kept in step.
    Storage errors (DuplicateKey, DocumentTooLarge, ...) are raised before the failing document
    changes anything, so a caller may report them and go on in the same transaction."""

    def __init__(
        self,
        records: Records,
        txn: Txn,
        changes: CatalogChanges,
        db: str,
        name: str,
        now_ms: int,
        info: CollectionInfo | None,
    ) -> None:
        self._records = records
        self._txn = txn
        self._changes = changes
        self.db = db
        self.name = name
        self.now_ms = now_ms
        self.info: CollectionInfo | None = info
        #: bypassDocumentValidation: the collection's validator is not applied.
        self.bypass = False
        self.created = False
        self._count = 0
        self._size = 0

    def get(self, rid: int) -> bytes | None:
        """The stored record (header and BSON; see storage/expiry/ttl.py), or None."""
        if self.info is None:
            return None
        return self._txn.get(layout.record_key(self.info.id, rid), db=self._records.env.records)

    def delete(self, rid: int, value: bytes, doc: dict[str, Any] | None = None) -> None:
        """Delete a record read with get() (`doc`: its document, if decoded already)."""
        assert self.info is not None
        self._records.log_delete(self._txn, self.info, value, doc)
        self._size -= self._records.delete_record(self._txn, self.info, rid, value, doc=doc)
        self._count -= 1

    def replace(
        self,
        rid: int,
        value: bytes,
        raw: bytes,
        doc: dict[str, Any],
        old_doc: dict[str, Any] | None = None,
        replacement: bool = False,
    ) -> None:
        """Store a new version (`raw`, decoded `doc`) of a record read with get(). The oplog
        records it as a `replacement` (the whole document) or as an update's diff."""
        assert self.info is not None
        _check_size(raw)
        if raw != ttl.body(value):
            if old_doc is None:
                old_doc = bson.decode(ttl.body(value), CODEC)
            schema.check(self.info, doc, old_doc, self.bypass)
        info = self._records.replace_record(
            self._txn, self.info, rid, value, raw, doc, self.now_ms, old_doc
        )
        # Logged once the write went in: a DuplicateKey above leaves no entry.
        oplog = self._records.oplog
        if oplog is not None and oplog.enabled:
            if old_doc is None:
                old_doc = bson.decode(ttl.body(value), CODEC)
            whole = replacement or not keeps_order(old_doc, doc)
            o = doc if whole else {"$v": 2, "diff": update_diff(old_doc, doc)}
            pre = old_doc if wants_pre_images(self.info) else None
            oplog.op(self._txn, "u", self.info, o, {"_id": doc.get("_id")}, pre_image=pre)
        self._size += len(raw) - (len(value) - ttl.body_offset(value))
        self._set_info(info)

    def insert(self, raw: bytes) -> dict[str, Any]:
        """Insert one client document (validated, given an `_id` if it has none), creating the
        collection if needed; returns the document as stored."""
        raw, doc = prepare_document(raw)
        records = self._records
        if self.info is None:
            self._set_info(records.new_collection(self._txn, self.db, self.name, {}))
            self.created = True
        assert self.info is not None
        schema.check(self.info, doc, bypass=self.bypass)
        rid = records.last_rid(self._txn, self.info.id) + 1
        self._set_info(records.insert_one(self._txn, self.info, rid, self.now_ms, raw, doc))
        if records.oplog is not None:
            records.oplog.op(
                self._txn, "i", self.info, RawBSONDocument(raw), {"_id": doc.get("_id")}
            )
        self._count += 1
        self._size += len(raw)
        gone, freed = records.make_room(self._txn, self.info, rid, (self._count, self._size))
        self._count -= gone
        self._size -= freed
        return doc

    def _set_info(self, info: CollectionInfo) -> None:
        if info is not self.info:
            self.info = self._changes[(self.db, self.name)] = info

    def _flush(self) -> None:
        if self.info is not None and (self._count or self._size):
            self._records.add_stats(self._txn, self.info.id, self._count, self._size)


def _check_size(raw: bytes) -> None:
    if len(raw) > MAX_DOCUMENT_SIZE:
        raise QueryError(
            "Location17419",
            f"Resulting document after update is larger than {MAX_DOCUMENT_SIZE}",
        )


_ABSENT = object()


def _same_keys(ix: IndexInfo, doc: dict[str, Any], old_doc: dict[str, Any]) -> bool:
    """Whether two versions of a document have the same keys in `ix` (in the same order): then
    its entries stay as they are."""
    if ix.kind is None and "partialFilterExpression" not in ix.options:
        # The cheap answer first: the top-level values its keys are made of are the very same
        # objects (an update leaves the fields it does not change as they were decoded).
        for path in ix.fields:
            top = path.partition(".")[0]
            if doc.get(top, _ABSENT) is not old_doc.get(top, _ABSENT):
                break
        else:
            return True
    new, _ = index_bodies(ix, doc)
    old, _ = index_bodies(ix, old_doc)
    return len(new) == len(old) and all(a[0] == b[0] for a, b in zip(new, old))


def _shown(values: dict[str, Any]) -> dict[str, Any]:
    """Key values as a duplicate-key error reports them: an empty array's key is BSON undefined,
    which drivers decode as null (and Python's BSON encoder cannot write)."""
    return {k: None if v is UNDEFINED else v for k, v in values.items()}


def flagged(indexes: tuple[IndexInfo, ...], flags: IndexFlags) -> tuple[IndexInfo, ...]:
    """The indexes with the flags set (`multikey`, `long_keys`) that documents turned on."""
    out = []
    for ix in indexes:
        names = flags.get(ix.id, set())
        if names:
            multikey = ix.multikey or "multikey" in names
            ix = replace(ix, multikey=multikey, long_keys=ix.long_keys or "long_keys" in names)
        out.append(ix)
    return tuple(out)


def delete_prefix(txn: Txn, db: Database, prefix: bytes) -> None:
    cur = txn.cursor(db=db)
    ok = cur.set_range(prefix)
    while ok and cur.key()[: len(prefix)] == prefix:
        ok = cur.delete()
