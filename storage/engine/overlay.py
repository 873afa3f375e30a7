"""A multi-document transaction's view of storage: an LMDB read transaction opened at its first
statement (its snapshot) with an in-memory overlay of its own writes on top, behind the interface
of the LMDB write transaction the engine's code uses (get, put, delete, pop, cursor). So the
engine's records, DDL and readers run unchanged inside a transaction.

Also here: the table of keys written by open transactions (a second transaction writing the same
key fails at once with WriteConflict), the record ids open transactions took (so that concurrent
inserts into one collection do not collide), and `commit_overlay`, which applies an overlay to
the real write transaction after checking that nothing it wrote changed since its snapshot."""

from __future__ import annotations

import bisect
import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ebbdb.storage.engine import layout

if TYPE_CHECKING:
    from ebbdb.storage.engine.environment import Database, Environment, Txn


class WriteConflict(Exception):
    """Another transaction, or a write committed after this transaction's snapshot, changed what
    this transaction writes (mongod's 112: the transaction must be retried whole). Not a
    StorageError: no write command reports it as one document's failure and goes on; it fails
    the statement, and the transaction."""

    code_name = "WriteConflict"

    def __init__(self, message: str = "") -> None:
        self.message = (
            message
            or "Write conflict during plan execution and yielding is disabled. :: Please retry "
            "your operation or multi-document transaction."
        )
        super().__init__(self.message)


@contextlib.contextmanager
def committed(env: Environment) -> Iterator[Txn]:
    """A short read transaction on the committed data (inside the map-resize gate)."""
    env.gate.enter()
    try:
        txn = env.env.begin()
        try:
            yield txn
        finally:
            txn.abort()
    finally:
        env.gate.leave()


_MISSING = object()


class _Tree:
    """One sub-database's overlay: written values by key (None: deleted) and the keys in order."""

    __slots__ = ("keys", "values")

    def __init__(self) -> None:
        self.values: dict[bytes, bytes | None] = {}
        self.keys: list[bytes] = []

    def set(self, key: bytes, value: bytes | None) -> None:
        if key not in self.values:
            bisect.insort(self.keys, key)
        self.values[key] = value


class KeyTable:
    """What open transactions hold, shared by all of them (thread-safe): the keys each wrote
    (owner by key) and, per collection, the highest record id any of them took."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owners: dict[tuple[int, bytes], int] = {}
        #: The highest record id an open or committed transaction took, by collection id: new
        #: records (in or out of a transaction) go past it (storage/engine/records.py last_rid).
        self.rid_floor: dict[int, int] = {}

    def claim(self, owner: int, tree: int, key: bytes) -> None:
        """Note that `owner` writes `key`; WriteConflict if another open transaction did."""
        with self._lock:
            held = self._owners.setdefault((tree, key), owner)
        if held != owner:
            raise WriteConflict()

    def release(self, owner: int, keys: list[tuple[int, bytes]]) -> None:
        with self._lock:
            for k in keys:
                if self._owners.get(k) == owner:
                    del self._owners[k]

    def take_rid(self, coll_id: int, rid: int) -> None:
        with self._lock:
            if rid > self.rid_floor.get(coll_id, 0):
                self.rid_floor[coll_id] = rid


class Overlay:
    """A snapshot read transaction plus this transaction's writes. Use from one thread at a time
    (py-lmdb opens read transactions without thread-local storage, so any thread may)."""

    def __init__(self, env: Environment, snapshot: Txn, table: KeyTable, owner: int) -> None:
        self._env = env
        self._snap: Txn | None = snapshot
        self._table = table
        self._owner = owner
        self._trees: dict[int, _Tree] = {}
        #: The snapshot's value of every key written, by (tree, key), as first written over.
        self.original: dict[tuple[int, bytes], bytes | None] = {}
        self._dbs: dict[int, Database] = {}
        self._stats_tree = self._tree_id(env.stats)
        self._records_tree = self._tree_id(env.records)
        self._meta_tree = self._tree_id(env.meta)

    # -- the snapshot ----------------------------------------------------------------------------

    @property
    def snapshot(self) -> Txn:
        if self._snap is None:
            raise WriteConflict("the transaction's snapshot was released (the data file grew)")
        return self._snap

    def release_snapshot(self) -> None:
        """End the snapshot's read transaction (at the end of the transaction, or before the map
        grows: later reads raise WriteConflict)."""
        snap, self._snap = self._snap, None
        if snap is not None:
            snap.abort()

    def end(self) -> None:
        """Release the snapshot and the keys this transaction holds in the table."""
        self.release_snapshot()
        self._table.release(self._owner, list(self.original))

    # -- the transaction interface ---------------------------------------------------------------

    def _tree_id(self, db: Database | None) -> int:
        db = self._env.records if db is None else db  # never used without a db
        ident = id(db)
        self._dbs[ident] = db
        return ident

    def get(self, key: bytes, default: Any = None, db: Database | None = None) -> Any:
        tree = self._trees.get(id(db))
        if tree is not None:
            value = tree.values.get(key, _MISSING)
            if value is not _MISSING:
                return default if value is None else value
        return self.snapshot.get(key, default, db=db)

    def _write(self, key: bytes, value: bytes | None, db: Database | None) -> bytes | None:
        """Set `key` (None: delete); returns its value before."""
        ident = self._tree_id(db)
        tree = self._trees.get(ident)
        if tree is None:
            tree = self._trees[ident] = _Tree()
        before = tree.values.get(key, _MISSING)
        if before is _MISSING:
            before = self.snapshot.get(key, db=db)
            mark = (ident, key)
            if mark not in self.original:
                # Noted first: a key claimed by a check that then fails is released with the rest.
                self.original[mark] = before
                self._first_write(ident, key, before, db)
        tree.set(key, value)
        return before  # type: ignore[return-value]

    def _first_write(self, ident: int, key: bytes, before: bytes | None, db: Any) -> None:
        """Checks when this transaction first writes a key: no other open transaction wrote it
        (stats are deltas; the id counter is compared at commit); a document changed since the
        snapshot is a conflict at once, as in mongod."""
        if ident == self._stats_tree or ident == self._meta_tree:
            return
        self._table.claim(self._owner, ident, key)
        if ident == self._records_tree:
            with committed(self._env) as now:
                if now.get(key, db=db) != before:
                    raise WriteConflict()
            if before is None:
                self._table.take_rid(layout.read_u64(key[:8]), layout.record_rid(key))

    def put(
        self,
        key: bytes,
        value: bytes,
        dupdata: bool = False,
        overwrite: bool = True,
        append: bool = False,
        db: Database | None = None,
    ) -> bool:
        if not overwrite and self.get(key, db=db) is not None:
            return False
        self._write(key, bytes(value), db)
        return True

    def delete(self, key: bytes, value: bytes = b"", db: Database | None = None) -> bool:
        if self.get(key, db=db) is None:
            return False
        self._write(key, None, db)
        return True

    def pop(self, key: bytes, db: Database | None = None) -> bytes | None:
        if self.get(key, db=db) is None:
            return None
        return self._write(key, None, db)

    def cursor(self, db: Database | None = None) -> OverlayCursor:
        return OverlayCursor(self, db)

    def stat(self, db: Database | None = None) -> Any:
        return self.snapshot.stat(db) if db is not None else self.snapshot.stat()

    def tree(self, db: Database | None) -> _Tree:
        tree = self._trees.get(id(db))
        if tree is None:
            tree = self._trees[self._tree_id(db)] = _Tree()
        return tree

    def changes(self) -> Iterator[tuple[Database, bytes, bytes | None, bytes | None]]:
        """(db, key, value written or None, value in the snapshot) of every key written."""
        for ident, tree in self._trees.items():
            db = self._dbs[ident]
            for key in tree.keys:
                yield db, key, tree.values[key], self.original.get((ident, key))

    @property
    def written(self) -> int:
        return sum(len(t.keys) for t in self._trees.values())

    def collections_written(self) -> set[int]:
        """Ids of the collections whose records this transaction wrote (a record key and a
        statistics key both start with the collection id)."""
        out: set[int] = set()
        for ident in (self._records_tree, self._stats_tree):
            tree = self._trees.get(ident)
            if tree is not None:
                out.update(layout.read_u64(key[:8]) for key in tree.keys)
        return out


class OverlayCursor:
    """A cursor over the snapshot and the overlay merged (keys the overlay deleted are hidden).
    It follows py-lmdb's Cursor: a failed move leaves it unpositioned, where key() is b""."""

    def __init__(self, overlay: Overlay, db: Database | None) -> None:
        self._overlay = overlay
        self._db = db
        self._tree = overlay.tree(db)
        self._cur = overlay.snapshot.cursor(db=db)
        self._key: bytes | None = None
        self._value = b""
        #: Where the snapshot cursor stands: +1 at the first visible snapshot key >= the current
        #: key, -1 at the last <= it, 0 unknown.
        self._dir = 0

    # -- the snapshot side -------------------------------------------------------------------------

    def _snap_forward(self, key: bytes | None, strict: bool) -> bytes | None:
        """The first snapshot key at or after `key` (after, when strict) that the overlay does not
        cover; leaves the snapshot cursor there."""
        cur, values = self._cur, self._tree.values
        if key is not None and self._dir == 1 and key == self._key:
            ok = bool(cur.key())  # already at the first visible snapshot key >= the current one
        else:
            ok = cur.set_range(key) if key is not None else cur.first()
        while ok:
            k = cur.key()
            if (strict and k == key) or k in values:
                ok = cur.next()
                continue
            self._dir = 1
            return k
        self._dir = 0
        return None

    def _snap_backward(self, key: bytes | None, strict: bool) -> bytes | None:
        """The last snapshot key at or before `key` (before, when strict) that the overlay does
        not cover."""
        cur, values = self._cur, self._tree.values
        if key is None:
            ok = cur.last()
        elif self._dir == -1 and key == self._key:
            ok = bool(cur.key())  # already at the last visible snapshot key <= the current one
        else:
            ok = cur.set_range(key)
            if ok and cur.key() > key:
                ok = cur.prev()
            elif not ok:
                ok = cur.last()
        while ok:
            k = cur.key()
            if (strict and k == key) or k in values:
                ok = cur.prev()
                continue
            self._dir = -1
            return k
        self._dir = 0
        return None

    # -- the overlay side --------------------------------------------------------------------------

    def _over_forward(self, key: bytes | None, strict: bool) -> bytes | None:
        keys, values = self._tree.keys, self._tree.values
        if key is None:
            i = 0
        else:
            i = bisect.bisect_right(keys, key) if strict else bisect.bisect_left(keys, key)
        while i < len(keys):
            if values[keys[i]] is not None:
                return keys[i]
            i += 1
        return None

    def _over_backward(self, key: bytes | None, strict: bool) -> bytes | None:
        keys, values = self._tree.keys, self._tree.values
        if key is None:
            i = len(keys) - 1
        else:
            i = (bisect.bisect_left(keys, key) if strict else bisect.bisect_right(keys, key)) - 1
        while i >= 0:
            if values[keys[i]] is not None:
                return keys[i]
            i -= 1
        return None

    # -- moves -----------------------------------------------------------------------------------

    def _land(self, snap: bytes | None, over: bytes | None, forward: bool) -> bool:
        if snap is None and over is None:
            self._key, self._value = None, b""
            return False
        if over is None or (snap is not None and ((snap < over) if forward else (snap > over))):
            assert snap is not None
            self._key, self._value = snap, self._cur.value()
        else:
            value = self._tree.values[over]
            assert value is not None
            self._key, self._value = over, value
        return True

    def _forward(self, key: bytes | None, strict: bool) -> bool:
        snap = self._snap_forward(key, strict)
        return self._land(snap, self._over_forward(key, strict), True)

    def _backward(self, key: bytes | None, strict: bool) -> bool:
        snap = self._snap_backward(key, strict)
        return self._land(snap, self._over_backward(key, strict), False)

    def set_range(self, key: bytes) -> bool:
        self._dir = 0
        self._key = None
        return self._forward(key, False)

    def set_key(self, key: bytes) -> bool:
        value = self._overlay.get(key, db=self._db)
        if value is None:
            self._key, self._value, self._dir = None, b"", 0
            return False
        self._dir = 0
        self._key = None
        return self._forward(key, False)

    def first(self) -> bool:
        self._dir = 0
        self._key = None
        return self._forward(None, False)

    def last(self) -> bool:
        self._dir = 0
        self._key = None
        return self._backward(None, False)

    def next(self) -> bool:
        if self._key is None:
            return self.first()
        if self._dir != 1:
            self._dir = 0
        return self._forward(self._key, True)

    def prev(self) -> bool:
        if self._key is None:
            return self.last()
        if self._dir != -1:
            self._dir = 0
        return self._backward(self._key, True)

    def key(self) -> bytes:
        return b"" if self._key is None else self._key

    def value(self) -> bytes:
        return self._value

    def item(self) -> tuple[bytes, bytes]:
        return self.key(), self._value

    def get(self, key: bytes, default: Any = None) -> Any:
        return self._overlay.get(key, default, db=self._db)

    def delete(self, dupdata: bool = False) -> bool:
        """Delete the current key and move to the next (unpositioned past the last)."""
        if self._key is None:
            return False
        key = self._key
        self._overlay.delete(key, db=self._db)
        self._dir = 0
        self._forward(key, True)
        return True

    def iternext(self, keys: bool = True, values: bool = True) -> Iterator[Any]:
        if self._key is None and not self.first():
            return
        while self._key is not None:
            yield _shape(self._key, self._value, keys, values)
            if not self.next():
                return

    def iterprev(self, keys: bool = True, values: bool = True) -> Iterator[Any]:
        if self._key is None and not self.last():
            return
        while self._key is not None:
            yield _shape(self._key, self._value, keys, values)
            if not self.prev():
                return

    def __iter__(self) -> Iterator[Any]:
        return self.iternext()


def _shape(key: bytes, value: bytes, keys: bool, values: bool) -> Any:
    if keys and values:
        return key, value
    return key if keys else value


def commit_overlay(env: Environment, txn: Txn, overlay: Overlay) -> None:
    """Apply the overlay's writes to the write transaction `txn`, after checking that every key
    it wrote still holds its snapshot value (WriteConflict otherwise, nothing applied). The
    collections' statistics are applied as deltas: concurrent writes to a collection change its
    counts without conflicting."""
    stats = env.stats
    changes = list(overlay.changes())
    for db, key, _value, before in changes:
        if db is stats:
            continue
        if txn.get(key, db=db) != before:
            raise WriteConflict()
    watched = env.watched
    for db, key, value, before in changes:
        if watched and db is env.records and key[:8] in _watched_prefixes(watched):
            watched[layout.read_u64(key[:8])].add(key[8:16])  # an index build catches it up
        if db is stats:
            n0, s0 = layout.unpack_stats(before)
            n1, s1 = layout.unpack_stats(value)
            if value is None and txn.get(key, db=db) is None:
                continue
            if value is None:
                # The collection was dropped in the transaction: its stats go with it.
                txn.delete(key, db=db)
                continue
            n, s = layout.unpack_stats(txn.get(key, db=db))
            txn.put(key, layout.pack_stats(n + n1 - n0, s + s1 - s0), db=db)
        elif value is None:
            txn.delete(key, db=db)
        else:
            txn.put(key, value, db=db)


def _watched_prefixes(watched: dict[int, set[bytes]]) -> set[bytes]:
    return {layout.collection_prefix(coll_id) for coll_id in watched}
