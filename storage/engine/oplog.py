"""The oplog of a replica set: `local.oplog.rs`, a capped collection with one entry per change to
a user collection, written in the same LMDB write transaction as the change it records (so the
oplog always matches the data). Entries have MongoDB's shape (ts, t, v, op, ns, ui, o, o2, wall,
and for a session's writes lsid, txnNumber, stmtId, prevOpTime).

A standalone server has no oplog: `OpLog.enabled` is False and nothing is written."""

from __future__ import annotations

import contextvars
import datetime
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import bson
from bson.int64 import Int64
from bson.timestamp import Timestamp

from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.engine import capped, layout
from ebbdb.storage.engine.environment import Environment, Txn
from ebbdb.storage.expiry import ttl


class Records(Protocol):
    """What the oplog needs of storage/engine/records.py's Records (which imports this module)."""

    def last_rid(self, txn: Txn, coll_id: int) -> int: ...

    def append_unindexed(
        self, txn: Txn, info: CollectionInfo, rid: int, header: bytes, raw: bytes
    ) -> None: ...

    def insert_one(
        self, txn: Txn, info: CollectionInfo, rid: int, now_ms: int, raw: bytes, doc: dict[str, Any]
    ) -> CollectionInfo: ...

    def add_stats(self, txn: Txn, coll_id: int, count: int, size: int) -> None: ...

    def delete_record(self, txn: Txn, info: CollectionInfo, rid: int, value: bytes) -> int: ...

    def make_room(
        self, txn: Txn, info: CollectionInfo, just_inserted: int, pending: tuple[int, int]
    ) -> tuple[int, int]: ...


#: The oplog's namespace.
OPLOG_DB, OPLOG_NAME = "local", "oplog.rs"
#: The term of the one member's one election.
TERM = 1


@dataclass
class WriteSession:
    """The session a write runs for (set by the server in WRITE_SESSION around the write; the
    gateway carries it into the writer thread). The observer stamps its fields on each entry and
    appends (stmt_id, optime) to `written`; with `collect` set (a transaction's statement), the
    ops go there instead of into the oplog."""

    lsid: dict[str, Any]
    txn_number: int | None = None
    #: The statement id of the write in progress (the caller sets it per statement; an insert
    #: command's documents are statements `first_stmt`, `first_stmt + 1`, ...).
    stmt_id: int | None = None
    first_stmt: int = 0
    #: The optime of the session's previous entry for this txnNumber (chained by the observer).
    prev_op_time: dict[str, Any] | None = None
    collect: list[dict[str, Any]] | None = None
    written: list[tuple[int | None, dict[str, Any]]] = field(default_factory=list)


#: The session of the write running in this context (None: not a session's write).
WRITE_SESSION: contextvars.ContextVar[WriteSession | None] = contextvars.ContextVar(
    "ebbdb_write_session", default=None
)


#: Where change streams find the documents as they were before an update or delete, for
#: collections with changeStreamPreAndPostImages (mongod's collection and shape).
PREIMAGES_DB, PREIMAGES_NAME = "config", "system.preimages"
#: Namespaces whose writes are not logged: the oplog's own database, and the server's session
#: bookkeeping (mongod logs neither).
_UNLOGGED_DBS = frozenset({"local"})
_UNLOGGED_NS = frozenset(
    {
        "config.system.sessions",
        "config.transactions",
        "config.image_collection",
        "config.system.preimages",
    }
)
ZERO = Timestamp(0, 0)


def wants_pre_images(info: CollectionInfo) -> bool:
    """The collection keeps pre-images for change streams (changeStreamPreAndPostImages)."""
    images = info.options.get("changeStreamPreAndPostImages")
    return isinstance(images, dict) and bool(images.get("enabled"))


def optime(ts: Timestamp) -> dict[str, Any]:
    """An optime document, as oplog entries and replSetGetStatus show one."""
    return {"ts": ts, "t": Int64(TERM)}


def logged(db: str, name: str) -> bool:
    """Whether writes to `db.name` get oplog entries."""
    return db not in _UNLOGGED_DBS and f"{db}.{name}" not in _UNLOGGED_NS


def _same(a: Any, b: Any) -> bool:
    """BSON-identical (type and value: 1 and 1.0 differ, as they do in the stored bytes)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (dict, list)):
        return bson.encode({"v": a}, codec_options=CODEC) == bson.encode(
            {"v": b}, codec_options=CODEC
        )
    return bool(a == b)


def keeps_order(old: dict[str, Any], new: dict[str, Any]) -> bool:
    """Whether a diff can turn `old` into `new` with its fields in order: applying one keeps the
    fields that stay where they were and puts added fields last."""
    kept = [k for k in old if k in new]
    added = [k for k in new if k not in old]
    return list(new) == kept + added


def update_diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """MongoDB's oplog update diff (`$v: 2`) from one version of a document to the next: `d`
    removed fields, `u` changed values, `i` added fields, `s<field>` a sub-document's or an
    array's own diff (an array's has `a: true`, `l` its new length when it shrank, `u<index>`
    and `s<index>`). The caller checks `keeps_order(old, new)` first: a diff cannot reorder a
    document's fields (a sub-document whose fields moved is set whole)."""
    removed = {k: False for k in old if k not in new}
    updated: dict[str, Any] = {}
    inserted: dict[str, Any] = {}
    nested: dict[str, Any] = {}
    for k, v in new.items():
        if k not in old:
            inserted[k] = v
            continue
        was = old[k]
        if _same(was, v):
            continue
        # A sub-document or array that is still one, and not emptied, gets a diff of its own
        # (an emptied one is set whole, as `$set: {a: {}}` logs it).
        if type(was) is dict and type(v) is dict and v and keeps_order(was, v):
            nested["s" + k] = update_diff(was, v)
        elif type(was) is list and type(v) is list and v:
            nested["s" + k] = _array_diff(was, v)
        else:
            updated[k] = v
    out: dict[str, Any] = {}
    if removed:
        out["d"] = removed
    if updated:
        out["u"] = updated
    if inserted:
        out["i"] = inserted
    out.update(nested)
    return out


def _array_diff(old: list[Any], new: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"a": True}
    if len(new) < len(old):
        out["l"] = len(new)
    for i, v in enumerate(new):
        if i < len(old):
            was = old[i]
            if _same(was, v):
                continue
            if type(was) is dict and type(v) is dict and v and keeps_order(was, v):
                out[f"s{i}"] = update_diff(was, v)
                continue
        out[f"u{i}"] = v
    return out


def _wall() -> datetime.datetime:
    ms = time.time_ns() // 1_000_000
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


class OpLog:
    """Writes the oplog inside the write transactions of the changes it records, and reads it.
    The writer thread (one group at a time) is the only one that allocates timestamps."""

    def __init__(
        self, env: Environment, records: Records, lookup: Callable[[tuple[str, str]], Any]
    ) -> None:
        self._env = env
        self._records = records
        self._lookup = lookup
        self.enabled = False
        self._last = ZERO
        #: The newest timestamp a commit has made durable in the oplog's tree (the cluster time).
        self.last_committed = ZERO
        self._coll_id = -1
        #: The write transaction that wrote the last oplog record, and that record's id.
        self._rid_txn: Txn | None = None
        self._rid = 0
        self._listeners: list[Callable[[Timestamp], None]] = []
        self._lock = threading.Lock()

    # -- set up ------------------------------------------------------------------------------------

    def enable(self, info: CollectionInfo) -> None:
        """Start writing into `info` (local.oplog.rs), after the last entry it holds."""
        self._coll_id = info.id
        with self._env.env.begin() as txn:
            last = self._records.last_rid(txn, info.id)
            if last:
                raw = txn.get(layout.record_key(info.id, last), db=self._env.records)
                ts = None if raw is None else bson.decode(ttl.body(raw), CODEC).get("ts")
                if isinstance(ts, Timestamp):
                    self._last = ts
        self.last_committed = self._last
        if self._last == ZERO:
            self._last = Timestamp(int(time.time()), 0)
        self.enabled = True

    def refuse_write(self, db: str, name: str) -> None:
        """Clients do not write a replica set's oplog (73 InvalidNamespace, as mongod since 4.4):
        only the server appends to it."""
        if self.enabled and db == OPLOG_DB and name == OPLOG_NAME:
            raise QueryError(
                "InvalidNamespace",
                f"cannot write to '{OPLOG_DB}.{OPLOG_NAME}': a replica set member's oplog is "
                "written by the server only",
            )

    def inserted(self, coll_ids: frozenset[int]) -> None:
        """The writer's insert listener: a commit that wrote entries moves the cluster time."""
        if self._coll_id in coll_ids:
            self.last_committed = self._last
            for listener in self._listeners:
                listener(self._last)

    def on_commit(self, listener: Callable[[Timestamp], None]) -> None:
        """Tell `listener` the newest timestamp after each commit that wrote entries (on the
        writer's thread: it must be quick and must not write)."""
        self._listeners.append(listener)

    # -- writing -----------------------------------------------------------------------------------

    def next_ts(self) -> Timestamp:
        """A timestamp after every one given before (seconds of the wall clock, then a count)."""
        now = int(time.time())
        last = self._last
        ts = Timestamp(now, 1) if now > last.time else Timestamp(last.time, last.inc + 1)
        self._last = ts
        return ts

    def op(
        self,
        txn: Txn,
        op: str,
        info: CollectionInfo,
        o: Mapping[str, Any],
        o2: dict[str, Any] | None = None,
        pre_image: dict[str, Any] | None = None,
    ) -> None:
        """Record a change to a document of `info` (op "i", "u" or "d"); `pre_image` is the
        document before an update or delete (kept for change streams where the collection asks)."""
        if not self.enabled or not logged(info.db, info.name):
            return
        self._log(txn, op, info.ns, info.uuid, o, o2, pre_image)

    def command(
        self,
        txn: Txn,
        db: str,
        o: dict[str, Any],
        ui: Any = None,
        o2: dict[str, Any] | None = None,
        name: str = "",
    ) -> None:
        """Record a DDL command on database `db` (collection `name`, if the command has one)."""
        if not self.enabled or not logged(db, name):
            return
        self._log(txn, "c", f"{db}.$cmd", ui, o, o2, None)

    def _log(
        self,
        txn: Txn,
        op: str,
        ns: str,
        ui: Any,
        o: Mapping[str, Any],
        o2: dict[str, Any] | None,
        pre_image: dict[str, Any] | None,
    ) -> None:
        entry: dict[str, Any] = {"op": op, "ns": ns}
        if ui is not None:
            entry["ui"] = ui
        entry["o"] = o
        if o2 is not None:
            entry["o2"] = o2
        session = WRITE_SESSION.get()
        if session is not None and session.collect is not None:
            if pre_image is not None:
                entry["$preImage"] = pre_image
            session.collect.append(entry)
            return
        # A command entry (an implicit create before a retryable insert) names no session, as
        # mongod's: the session's chain of entries is its writes'.
        ts = self.append(txn, entry, None if op == "c" else session)
        if pre_image is not None and ui is not None:
            self.store_pre_image(txn, ui, ts, 0, pre_image)

    def append(
        self, txn: Txn, entry: dict[str, Any], session: WriteSession | None = None
    ) -> Timestamp:
        """Write one entry (its ts, t, v and wall are added here, and the session's fields when
        `session` is given); returns its timestamp."""
        ts = self.next_ts()
        full = dict(entry)
        if session is not None:
            full["lsid"] = session.lsid
            if session.txn_number is not None:
                full["txnNumber"] = Int64(session.txn_number)
            if session.stmt_id is not None and "stmtId" not in full:
                full["stmtId"] = session.stmt_id
        full["ts"] = ts
        full["t"] = Int64(TERM)
        full["v"] = Int64(2)
        full["wall"] = _wall()
        if session is not None and session.txn_number is not None:
            full["prevOpTime"] = session.prev_op_time or {"ts": ZERO, "t": Int64(-1)}
            written = optime(ts)
            session.prev_op_time = written
            session.written.append((session.stmt_id, written))
        self._insert(txn, self._coll_id, full)
        return ts

    def store_pre_image(
        self, txn: Txn, ui: Any, ts: Timestamp, index: int, pre_image: dict[str, Any]
    ) -> None:
        """Keep the document as it was before the change at `ts` (op `index` of its entry)."""
        info = self._lookup((PREIMAGES_DB, PREIMAGES_NAME))
        if info is None:
            return
        doc = {
            "_id": {"nsUUID": ui, "ts": ts, "applyOpsIndex": Int64(index)},
            "operationTime": _wall(),
            "preImage": pre_image,
        }
        self._insert(txn, info.id, doc)

    def _insert(self, txn: Txn, coll_id: int, doc: dict[str, Any]) -> None:
        info = self._lookup_by_id(coll_id)
        raw = bson.encode(doc, codec_options=CODEC)
        records = self._records
        now_ms = time.time_ns() // 1_000_000
        if coll_id != self._coll_id:
            rid = records.last_rid(txn, info.id) + 1
            info = records.insert_one(txn, info, rid, now_ms, raw, doc)
            records.add_stats(txn, info.id, 1, len(raw))
            return
        # The oplog's own records, on every write of a replica set: the next record id is kept
        # for the transaction that holds it (a new transaction, or a nested one, reads it).
        if txn is self._rid_txn:
            rid = self._rid + 1
        else:
            rid = records.last_rid(txn, coll_id) + 1
        self._rid_txn, self._rid = txn, rid
        records.append_unindexed(txn, info, rid, ttl.plain_header(now_ms), raw)
        records.add_stats(txn, coll_id, 1, len(raw))
        gone, freed = records.make_room(txn, info, rid, (0, 0))
        if gone or freed:
            records.add_stats(txn, coll_id, -gone, -freed)
            self._trim_pre_images(txn)

    def _trim_pre_images(self, txn: Txn) -> None:
        """Delete the pre-images of changes older than the oplog's oldest entry (change streams
        cannot reach them any more): they were stored in timestamp order, so from the front."""
        info = self._lookup((PREIMAGES_DB, PREIMAGES_NAME))
        oldest = self._first_entry_ts(txn)
        if info is None or oldest is None:
            return
        victims: list[tuple[int, bytes]] = []
        prefix = layout.collection_prefix(info.id)
        cur = txn.cursor(db=self._env.records)
        if cur.set_range(prefix):
            for key, value in cur.iternext():
                if not layout.in_collection(key, prefix):
                    break
                ident = bson.decode(ttl.body(value), CODEC)["_id"]
                if not isinstance(ident, dict) or not ident.get("ts", oldest) < oldest:
                    break
                victims.append((layout.record_rid(key), value))
        if victims:
            size = sum(self._records.delete_record(txn, info, rid, v) for rid, v in victims)
            self._records.add_stats(txn, info.id, -len(victims), -size)

    def _first_entry_ts(self, txn: Txn) -> Timestamp | None:
        prefix = layout.collection_prefix(self._coll_id)
        cur = txn.cursor(db=self._env.records)
        if not cur.set_range(prefix) or not layout.in_collection(cur.key(), prefix):
            return None
        ts: Timestamp = bson.decode(ttl.body(cur.value()), CODEC)["ts"]
        return ts

    def _lookup_by_id(self, coll_id: int) -> CollectionInfo:
        key = (OPLOG_DB, OPLOG_NAME) if coll_id == self._coll_id else (PREIMAGES_DB, PREIMAGES_NAME)
        info = self._lookup(key)
        assert info is not None and info.id == coll_id
        return info  # type: ignore[no-any-return]

    # -- reading -----------------------------------------------------------------------------------

    def read_after(
        self, after: Timestamp | None, limit: int = 1000
    ) -> list[tuple[Timestamp, bytes]]:
        """Up to `limit` entries (their ts and raw BSON) with a ts after `after` (None: from the
        oldest), oldest first, as committed now."""
        if not self.enabled:
            return []
        out: list[tuple[Timestamp, bytes]] = []
        prefix = layout.collection_prefix(self._coll_id)
        self._env.gate.enter()
        try:
            with self._env.env.begin() as txn:
                start = self._first_after(txn, after)
                if start is None:
                    return out
                cur = txn.cursor(db=self._env.records)
                if not cur.set_range(layout.record_key(self._coll_id, start)):
                    return out
                for k, v in cur.iternext():
                    if not layout.in_collection(k, prefix) or len(out) >= limit:
                        break
                    raw = bytes(ttl.body(v))
                    ts = bson.decode(raw, CODEC).get("ts")
                    if isinstance(ts, Timestamp) and (after is None or ts > after):
                        out.append((ts, raw))
        finally:
            self._env.gate.leave()
        return out

    def first_ts(self) -> Timestamp | None:
        """The oldest entry's timestamp (None: the oplog is empty)."""
        entries = self.read_after(None, 1)
        return entries[0][0] if entries else None

    def _first_after(self, txn: Txn, after: Timestamp | None) -> int | None:
        """The record id of the first entry with a ts after `after` (a binary search over the
        record ids: entries are appended in ts order, and a capped collection's ids are dense)."""
        cur = txn.cursor(db=self._env.records)
        prefix = layout.collection_prefix(self._coll_id)
        if not cur.set_range(prefix) or not layout.in_collection(cur.key(), prefix):
            return None
        low = layout.record_rid(cur.key())
        high = self._records.last_rid(txn, self._coll_id)
        if after is None:
            return low

        def ts_at(rid: int) -> Timestamp | None:
            raw = txn.get(layout.record_key(self._coll_id, rid), db=self._env.records)
            return None if raw is None else bson.decode(ttl.body(raw), CODEC)["ts"]

        found = high + 1
        while low <= high:
            mid = (low + high) // 2
            ts = ts_at(mid)
            if ts is None or ts <= after:
                low = mid + 1
            else:
                found, high = mid, mid - 1
        return found


def oplog_options(size_mb: int) -> dict[str, Any]:
    """The collection options of local.oplog.rs for an oplog of `size_mb` megabytes."""
    return capped.options(size_mb * 1024 * 1024, None, {})
