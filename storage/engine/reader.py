"""Reading storage: a Reader is one short read transaction (or, on the writer thread during a group
of writes, a view of that write transaction, so a write sees what earlier writes of its group did).
"""

from __future__ import annotations

import bisect
import itertools
import operator
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.engine import layout
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes import keys

if TYPE_CHECKING:
    from ebbdb.storage.engine.environment import Cursor, Database, Environment, Txn


class Reader:
    """A short read transaction. Use as a context manager; never keep one across awaits or batches."""

    __slots__ = ("_env", "_txn", "_owned")

    def __init__(self, env: Environment, txn: Txn | None = None) -> None:
        """A new read transaction, or (`txn`) a view of a write transaction the caller owns."""
        self._env = env
        self._owned = txn is None
        if txn is not None:
            self._txn: Txn = txn  # else set in __enter__

    def __enter__(self) -> Reader:
        if self._owned:
            self._env.gate.enter()
            try:
                self._txn = self._env.env.begin()
            except BaseException:
                self._env.gate.leave()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._owned:
            return
        try:
            self._txn.abort()
        finally:
            del self._txn
            self._env.gate.leave()

    def record(self, coll: CollectionInfo, rid: int) -> bytes | None:
        """One stored record (header and BSON: see storage/expiry/ttl.py), or None."""
        return self._txn.get(layout.record_key(coll.id, rid), db=self._env.records)

    def expiry_entries(self, start: bytes, stop: bytes) -> Iterator[int]:
        """Record ids of the expiry-index entries in [start, stop)."""
        cur = self._txn.cursor(db=self._env.expiry)
        if not cur.set_range(start):
            return
        for k in cur.iternext(values=False):
            if k >= stop:
                return
            yield ttl.expiry_rid(k)

    def _records_after(
        self, coll: CollectionInfo, after: int | None, reverse: bool
    ) -> tuple[Cursor, Iterator[tuple[bytes, bytes]]]:
        """An LMDB cursor and an iterator over (key, value) of this collection's records after
        `after` in scan order (the iterator stops at the collection's end)."""
        prefix = layout.collection_prefix(coll.id)
        cur = self._txn.cursor(db=self._env.records)
        if not reverse:
            start = layout.record_key(coll.id, after + 1 if after is not None else 0)
            if not cur.set_range(start):
                return cur, iter(())
            limit = layout.collection_end(coll.id)
            return cur, itertools.takewhile(lambda kv: kv[0] < limit, cur.iternext())
        if after is not None:
            positioned = cur.set_range(layout.record_key(coll.id, after))
        else:
            positioned = cur.set_range(layout.collection_end(coll.id))
        if not (cur.prev() if positioned else cur.last()):
            return cur, iter(())
        return cur, itertools.takewhile(
            lambda kv: layout.in_collection(kv[0], prefix), cur.iterprev()
        )

    def scan(
        self, coll: CollectionInfo, after: int | None = None, reverse: bool = False
    ) -> Iterator[tuple[int, bytes]]:
        """(record id, stored record) in record-id order, starting after `after` (exclusive)."""
        _cur, records = self._records_after(coll, after, reverse)
        rid = layout.record_rid
        for k, v in records:
            yield rid(k), v

    def record_run(self, coll: CollectionInfo, after: int, n: int) -> list[tuple[bytes, bytes]]:
        """Up to `n` (record key, stored record) pairs of the collection after record id `after`
        (0: from the start), in record-id order, read at C speed (a bulk index build's scan)."""
        cur = self._txn.cursor(db=self._env.records)
        if not cur.set_range(layout.record_key(coll.id, after + 1)):
            return []
        items = list(itertools.islice(cur.iternext(), n))
        end = layout.collection_end(coll.id)
        if items and items[-1][0] >= end:
            items = [kv for kv in items if kv[0] < end]
        return items

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
        prefix = layout.collection_prefix(coll.id)
        end = layout.collection_end(coll.id)
        cur = self._txn.cursor(db=self._env.records)
        if not reverse:
            ok = cur.set_range(layout.record_key(coll.id, after + 1 if after is not None else 0))
        else:
            bound = layout.record_key(coll.id, after) if after is not None else end
            ok = cur.prev() if cur.set_range(bound) else cur.last()
        if not ok:
            return [], after, True, False
        # Whole runs at C speed: take the records, then trim what lies past the collection's end
        # and what does not fit.
        items, exhausted = take_records(
            cur.iterprev() if reverse else cur.iternext(), max_docs, max_bytes
        )
        taken = len(items)
        if reverse:
            while items and items[-1][0] < prefix:
                items.pop()
        else:
            while items and items[-1][0] >= end:
                items.pop()
        done = len(items) < taken or exhausted
        if items and rules.active:
            last_key = items[-1][0]
            items = [kv for kv in items if not ttl.expired_value(kv[1], rules, now_ms)]
            if not items:
                return [], _rid_of(last_key, after), done, False
        out = ttl.bodies(items)
        limited = False
        if out and sum(map(len, out)) > max_bytes:
            sizes = list(itertools.accumulate(map(len, out)))
            cut = bisect.bisect_right(sizes, max_bytes)
            if cut == 0 and first:
                cut = 1
            limited = cut < len(items)
            if limited:
                items, out = items[:cut], out[:cut]
                done = False
        if not items:
            return [], after, done and not limited, limited
        if taken == max_docs and not done and not limited:
            more = cur.prev() if reverse else cur.next()
            done = not more or not layout.in_collection(cur.key(), prefix)
        return out, _rid_of(items[-1][0], after), done, limited

    def index_entries(
        self, index: IndexInfo, lo: bytes, hi: bytes, reverse: bool, after: bytes | None
    ) -> Iterator[tuple[bytes, int]]:
        """(entry key, record id) of an index's entries whose key bodies lie in [lo, hi), in key
        order (or reverse), resuming strictly after the entry key `after` when given."""
        prefix = layout.index_prefix(index.id)
        start, stop = prefix + lo, prefix + hi
        cur = self._txn.cursor(db=self._env.index)
        unpack = layout.entry_rid
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
                yield k, unpack(v)
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
                yield k, unpack(v)

    def find_unique(self, index: IndexInfo, value: Any) -> int | None:
        """The record id a unique single-field index maps `value` to, if any."""
        found = self.unique_entry(index, keys.encode(value))
        return None if found is None else found[1]

    def unique_entry(self, index: IndexInfo, body: bytes) -> tuple[bytes, int] | None:
        """(entry key, record id) of the entry a unique index holds for the key body `body`, if
        any: one lookup, no cursor."""
        key, _ = layout.entry_key(index.id, body, True, b"")
        rid = self._txn.get(key, db=self._env.index)
        return None if rid is None else (key, layout.entry_rid(rid))

    def index_footprint(self, index: IndexInfo, limit: int | None = None) -> tuple[int, int]:
        """(entries, bytes of their keys) of an index, or of its first `limit` entries."""
        start = layout.index_prefix(index.id)
        return self._footprint(self._env.index, start, layout.index_prefix(index.id + 1), limit)

    def expiry_footprint(self, index: IndexInfo) -> tuple[int, int]:
        """(entries, bytes of their keys) of a TTL index's entries in the expiry index."""
        start = ttl.expiry_prefix(index.id, 0)
        return self._footprint(self._env.expiry, start, ttl.expiry_prefix(index.id + 1, 0), None)

    def _footprint(
        self, db: Database, start: bytes, stop: bytes, limit: int | None
    ) -> tuple[int, int]:
        cur = self._txn.cursor(db=db)
        if not cur.set_range(start):
            return 0, 0
        keys: Iterator[bytes] = itertools.takewhile(lambda k: k < stop, cur.iternext(values=False))
        if limit is not None:
            keys = itertools.islice(keys, limit)
        entries = size = 0
        for key in keys:
            entries += 1
            size += len(key)
        return entries, size

    def stats(self, coll: CollectionInfo) -> tuple[int, int]:
        """(document count, data bytes) of a collection."""
        return layout.unpack_stats(self._txn.get(layout.stats_key(coll.id), db=self._env.stats))


#: Records a plain scan reads before it knows their sizes (a record may be up to 16 MB).
_FIRST_TAKE = 8
_VALUE = operator.itemgetter(1)


def take_records(
    records: Iterator[tuple[bytes, bytes]], max_docs: int, max_bytes: int
) -> tuple[list[tuple[bytes, bytes]], bool]:
    """Up to `max_docs` (key, record) pairs, read in runs at C speed and no further than one
    record past `max_bytes`: after a first few, each run is as long as the bytes left are likely
    to hold at the average size so far (a batch of large records is not read whole to be cut to
    16 MB). Also says whether the records ran out."""
    items: list[tuple[bytes, bytes]] = []
    size = 0
    want = min(max_docs, _FIRST_TAKE)
    while want > 0:
        run = list(itertools.islice(records, want))
        items += run
        if len(run) < want:
            return items, True
        size += sum(map(len, map(_VALUE, run)))
        if size > max_bytes:
            break
        want = min(max_docs - len(items), (max_bytes - size) * len(items) // size + 1)
    return items, False


def _rid_of(key: bytes | None, default: int | None) -> int | None:
    return default if key is None else layout.record_rid(key)
