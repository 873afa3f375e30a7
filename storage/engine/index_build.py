"""Index builds over a collection's documents as mongod's hybrid builds run them: the collection
scanned outside the writer (short read transactions, a resume key between them), the keys sorted,
then appended to the index in bounded write jobs; documents written meanwhile (the engine keeps
their record ids while a build watches the collection) get their keys again in the last job,
which publishes the index. The result is the index an incremental build makes, entry for entry,
and a unique index meets its first duplicate where the incremental build would (same error).

A TTL index's build also writes its expiry entries (sorted as the keys are) and the headers of
the records that gain dates (storage/expiry/ttl.py). Builds inside a multi-document transaction
or over an empty collection take the one-transaction path (storage/engine/ddl.py)."""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import bson

from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.core import interrupt
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import DuplicateKey, StorageError
from ebbdb.storage.engine import layout
from ebbdb.storage.engine.ddl import BuildSuperseded, CreateIndexesResult, Ddl, ttl_view
from ebbdb.storage.engine.environment import EMPTIED, Environment, Txn
from ebbdb.storage.engine.reader import Reader
from ebbdb.storage.engine.records import IndexFlags, Records, _shown, delete_prefix, flagged
from ebbdb.storage.engine.writer import CatalogChanges, Writer
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes.entries import index_bodies
from ebbdb.storage.indexes.specs import IndexSpec

#: Records one read transaction of the scan covers (short: a map resize waits for readers).
SCAN_CHUNK = 5_000
#: Keys sorted at once into a run (a few milliseconds); the runs are merged.
RUN = 4096
#: Entries one write job appends.
WRITE_CHUNK = 10_000

#: The phases of a build, as mongod's progress meters name them.
SCANNING = "Index Build: scanning collection"
INSERTING = "Index Build: inserting keys from external sorter into index"

#: A key the scan found: a non-unique index's entry key (which ends with the record id), or a
#: unique index's (entry key, record id). Plain bytes sort faster and cost the collector nothing.
Entry = Any

#: Told (phase, done, total) as a build goes on (every few thousand records or keys).
Progress = Callable[[str, int, int], None]


def _no_progress(phase: str, done: int, total: int) -> None:
    return None


@dataclass
class IndexBuild:
    """One createIndexes in flight: begun by `Builds.begin` (a write job), then `scan` (any
    thread but the writer's), `write_step` until it says done, and `finish` (write jobs); `abort`
    (a write job) undoes it after a failure."""

    builds: Builds
    db: str
    name: str
    coll: CollectionInfo
    indexes: tuple[IndexInfo, ...]
    specs: tuple[IndexSpec, ...]
    before: int
    total: int
    progress: Progress = _no_progress
    #: The collection with only its new TTL indexes (ddl.ttl_view), if any: then the build also
    #: writes their expiry entries and the record headers that gain dates.
    ttl_view: CollectionInfo | None = None
    #: Per new index, its sorted entries once scanned; then, with TTL indexes, the sorted
    #: expiry entries (keys that end with the record id).
    sorted_entries: list[list[Entry]] = field(default_factory=list)
    #: (record key, new header) of the records whose headers gain dates, in record order.
    rewrites: list[tuple[bytes, bytes]] = field(default_factory=list)
    flags: IndexFlags = field(default_factory=dict)
    scanned: int = 0
    scan_seconds: float = 0.0
    keys_inserted: int = 0
    insert_seconds: float = 0.0
    _cursor: tuple[int, int] = (0, 0)

    def keys_inserted_for(self, index_id: int) -> int:
        """The keys the build gave the index (its sorted keys; `finish` may change a few)."""
        for ix, entries in zip(self.indexes, self.sorted_entries):
            if ix.id == index_id:
                return len(entries)
        return 0

    @property
    def keys_total(self) -> int:
        return sum(map(len, self.sorted_entries)) + len(self.rewrites)

    # -- the collection scan (outside the writer) ---------------------------------------------

    def scan(self) -> None:
        """Read every record, compute the new indexes' keys, sort them; raise what the
        incremental build would raise first (DuplicateKey, CannotIndexParallelArrays, ...)."""
        started = time.perf_counter()
        tick = interrupt.current.get().tick
        env = self.builds.env
        lists = len(self.indexes) + (self.ttl_view is not None)
        per_index: list[list[Entry]] = [[] for _ in range(lists)]
        runs: list[list[list[Entry]]] = [[] for _ in range(lists)]
        after = 0
        failure: tuple[tuple[int, int, int], BaseException] | None = None
        done = 0
        self.progress(SCANNING, 0, self.total)
        while failure is None:
            # Short read transactions with a resume key: what changes meanwhile, the engine
            # notes for `finish`.
            with Reader(env) as r:
                chunk = r.record_run(self.coll, after, SCAN_CHUNK)
            for i, (key, value) in enumerate(chunk):
                tick()
                failure = self._keys_of(key, value, per_index)
                if failure is not None:
                    break
                if not i & 255:
                    _cut_runs(per_index, runs)
            done += len(chunk)
            if len(chunk) < SCAN_CHUNK or failure is not None:
                break
            after = layout.record_rid(chunk[-1][0])
            self.progress(SCANNING, min(done, self.total), self.total)
        self.scanned = done
        _cut_runs(per_index, runs, 1)
        # The runs merged (mongod's external sorter): in Python, a step at a time, so that other
        # threads keep their turns (one sort of the whole would hold the interpreter for seconds).
        self.sorted_entries = [
            list(heapq.merge(*index_runs))
            if len(index_runs) > 1
            else [*itertools.chain(*index_runs)]
            for index_runs in runs
        ]
        first = self._first_duplicate()
        if first is not None and (failure is None or first[0] < failure[0]):
            failure = first
        if failure is not None:
            raise failure[1]
        self.scan_seconds = time.perf_counter() - started
        self.progress(SCANNING, self.total, self.total)

    def _keys_of(
        self, record_key: bytes, value: bytes, per_index: list[list[Entry]]
    ) -> tuple[tuple[int, int, int], BaseException] | None:
        """Add one record's keys (and expiry facts); the failure (with where the incremental
        build meets it) if a new index cannot take the document."""
        rid_bytes = record_key[8:16]
        doc = bson.decode(ttl.body(value), CODEC)
        flags = self.flags
        for pos, ix in enumerate(self.indexes):
            try:
                bodies, is_multi = index_bodies(ix, doc)
            except StorageError as exc:
                return (_rid(rid_bytes), pos, -1), exc
            if is_multi and not ix.multikey:
                flags.setdefault(ix.id, set()).add("multikey")
            out = per_index[pos]
            unique = ix.unique
            for body, _values in bodies:
                key, shortened = layout.entry_key(ix.id, body, unique, rid_bytes)
                if shortened and not ix.long_keys:
                    flags.setdefault(ix.id, set()).add("long_keys")
                out.append((key, rid_bytes) if unique else key)
        if self.ttl_view is not None:
            header, expiry = self.builds.ddl.expiry_facts(self.ttl_view, value, doc, rid_bytes)
            per_index[-1] += expiry
            if header is not None:
                self.rewrites.append((record_key, header))
        return None

    def _first_duplicate(self) -> tuple[tuple[int, int, int], BaseException] | None:
        """The first unique-key collision in the incremental build's order (record, index, key
        of the record): in a run of equal keys sorted by record id, the second record meets it.
        Records written since the build began are left to `finish`, which checks them as
        incremental writes."""
        touched = self.builds.touched(self.coll.id)
        hits: dict[int, set[bytes]] = {}  # record id -> colliding keys
        for pos, ix in enumerate(self.indexes):
            if not ix.unique:
                continue
            entries: list[tuple[bytes, bytes]] = [
                e for e in self.sorted_entries[pos] if e[1] not in touched
            ]
            for (k0, r0), (k1, r1) in zip(entries, entries[1:]):
                if k0 == k1 and r0 != r1:
                    hits.setdefault(_rid(r1), set()).add(k1)
        if not hits:
            return None
        # Only the collisions of the lowest record can come first; find where its keys meet
        # them (its keys are computed again, with the values a duplicate-key error shows).
        rid = min(hits)
        rid_bytes = layout.u64(rid)
        with Reader(self.builds.env) as r:
            value = r.record(self.coll, rid)
        assert value is not None
        doc = bson.decode(ttl.body(value), CODEC)
        for pos, ix in enumerate(self.indexes):
            bodies, _multi = index_bodies(ix, doc) if ix.unique else ([], False)
            for i, (body, values) in enumerate(bodies):
                key, _ = layout.entry_key(ix.id, body, True, rid_bytes)
                if key in hits[rid]:
                    exc = DuplicateKey(self.coll.ns, ix.name, dict(ix.key), _shown(values))
                    return (rid, pos, i), exc
        return None

    # -- writing (bounded write jobs) ----------------------------------------------------------

    def write_step(self) -> bool:
        """Append the next chunk of sorted keys, or rewrite the next headers (a write job);
        True once all is in. The build moves past the chunk only when the job's group commits:
        a group aborted and run again (the writer's redo) writes the same chunk again."""
        started = time.perf_counter()
        pos, start = self._cursor
        lists = self.sorted_entries
        while pos < len(lists) and start >= len(lists[pos]):
            pos, start = pos + 1, 0
        if pos > len(lists) or (pos == len(lists) and start >= len(self.rewrites)):
            return True
        env = self.builds.env
        touched = self.builds.touched(self.coll.id)
        if pos == len(lists):
            # Headers that gain dates: each record as the scan read it (one written since is
            # `finish`'s), its document as it is.
            heads = [
                h for h in self.rewrites[start : start + WRITE_CHUNK] if h[0][8:16] not in touched
            ]

            def rewrite(txn: Txn, _changes: CatalogChanges) -> None:
                for record_key, header in heads:
                    value = txn.get(record_key, db=env.records)
                    if value is not None:
                        txn.put(record_key, header + ttl.body(value), db=env.records)
                self.builds.writer.after_commit(moved)

            written = len(heads)
            job = rewrite
        else:
            expiry = pos == len(self.indexes)
            part = lists[pos][start : start + WRITE_CHUNK]
            chunk = [(k, b"") for k in part] if expiry else _pairs(part)
            if touched:  # their keys are written again by `finish`
                chunk = [e for e in chunk if (e[0][-8:] if expiry else e[1]) not in touched]
            db = env.expiry if expiry else env.index

            def run(txn: Txn, _changes: CatalogChanges) -> None:
                self.builds.writer.after_commit(moved)
                if not chunk:
                    return
                cur = txn.cursor(db=db)
                # In key order past the tree's last key: LMDB appends, no search per key.
                append = not cur.last() or cur.key() < chunk[0][0]
                consumed, added = cur.putmulti(chunk, append=append)
                if added != len(chunk):  # an append out of order adds nothing, silently
                    raise AssertionError(f"index build wrote {added} of {len(chunk)} entries")

            written = len(chunk) if not expiry else 0
            job = run

        def moved() -> None:
            self._cursor = (pos, start + WRITE_CHUNK)
            self.keys_inserted += written
            self.insert_seconds += time.perf_counter() - started

        self.builds.writer.write(job)
        done = sum(map(len, lists[:pos])) + min(
            start + WRITE_CHUNK, len(lists[pos]) if pos < len(lists) else len(self.rewrites)
        )
        self.progress(INSERTING, done, self.keys_total)
        return False

    def finish(self) -> CreateIndexesResult:
        """The last write job: the keys of records written since the build began, checked as
        incremental writes are (DuplicateKey), then the index published."""
        builds = self.builds
        env = builds.env
        records = builds.records

        def run(txn: Txn, changes: CatalogChanges) -> CreateIndexesResult:
            info = builds.writer.lookup((self.db, self.name))
            touched = builds.touched(self.coll.id)
            if info is None or info.id != self.coll.id or EMPTIED in touched:
                raise BuildSuperseded(
                    f"Index build aborted: collection {self.coll.ns} was dropped, renamed or "
                    "emptied during the build"
                )
            if touched:
                for entries, ix in zip(self.sorted_entries, self.indexes):
                    for key, rid_bytes in _pairs(entries):
                        if rid_bytes in touched and (
                            not ix.unique or txn.get(key, db=env.index) == rid_bytes
                        ):
                            txn.delete(key, db=env.index)
                if self.ttl_view is not None:
                    for key in self.sorted_entries[-1]:
                        if key[-8:] in touched:
                            txn.delete(key, db=env.expiry)
                view = info.with_indexes(self.indexes)
                prefix = layout.collection_prefix(info.id)
                for rid_bytes in sorted(touched):
                    value = txn.get(prefix + rid_bytes, db=env.records)
                    if value is None:
                        continue
                    doc = bson.decode(ttl.body(value), CODEC)
                    now, flags = records.index_entries(txn, view, doc, rid_bytes, self.indexes)
                    for ix_id, names in flags.items():
                        self.flags.setdefault(ix_id, set()).update(names)
                    for key in now:
                        txn.put(key, rid_bytes, db=env.index)
                    rewritten = builds.ddl._add_expiry_facts(
                        txn, self.ttl_view, prefix + rid_bytes, value, doc
                    )
                    if rewritten is not None:
                        txn.put(prefix + rid_bytes, rewritten, db=env.records)
            builds.ddl.check_still_new(info, self.specs)
            built = flagged(self.indexes, self.flags)
            info = info.with_indexes(info.indexes + built)
            records.put_collection(txn, info)
            changes[(self.db, self.name)] = info
            builds.ddl.log_built(txn, self.db, self.name, info, built)
            # Once committed: a redone group needs the records touched meanwhile again.
            builds.writer.after_commit(lambda: builds.unwatch(self))
            return CreateIndexesResult(self.before, len(info.indexes), False, None)

        return builds.writer.write(run)

    def abort(self) -> None:
        """Remove what the build wrote (a write job); the collection is as it was."""

        def run(txn: Txn, _changes: CatalogChanges) -> None:
            for ix in self.indexes:
                delete_prefix(txn, self.builds.env.index, layout.index_prefix(ix.id))
                delete_prefix(txn, self.builds.env.expiry, layout.index_prefix(ix.id))
            self.builds.writer.after_commit(lambda: self.builds.unwatch(self))

        self.builds.writer.write(run)

    def run(self) -> CreateIndexesResult:
        """The whole build on this thread (tests, tools): scan, write, finish; abort on failure."""
        try:
            self.scan()
            while not self.write_step():
                pass
            return self.finish()
        except BaseException:
            self.abort()
            raise


class Builds:
    """The engine's index builds: `begin` decides the path and starts a bulk build."""

    def __init__(self, env: Environment, records: Records, writer: Writer, ddl: Ddl) -> None:
        self.env = env
        self.records = records
        self.writer = writer
        self.ddl = ddl
        #: Builds in flight by collection id (each named by its first new index's id).
        self._watchers: dict[int, set[int]] = {}

    def touched(self, coll_id: int) -> frozenset[bytes]:
        """Record ids written in the collection since its builds began (EMPTIED: emptied)."""
        watched = self.env.watched.get(coll_id)
        return frozenset(watched) if watched else frozenset()

    def watch(self, build: IndexBuild) -> None:
        """From now on the collection's writes are noted for `build` (the writer's thread,
        once `begin`'s write has committed)."""
        coll_id = build.coll.id
        self._watchers.setdefault(coll_id, set()).add(build.indexes[0].id)
        self.env.watched.setdefault(coll_id, set())

    def unwatch(self, build: IndexBuild) -> None:
        """The build is over (the writer's thread; twice is once)."""
        coll_id = build.coll.id
        watchers = self._watchers.get(coll_id, set())
        watchers.discard(build.indexes[0].id)
        if not watchers:
            self._watchers.pop(coll_id, None)
            self.env.watched.pop(coll_id, None)

    def begin(
        self,
        db: str,
        name: str,
        specs: list[IndexSpec],
        progress: Progress = _no_progress,
        in_transaction: bool = False,
    ) -> CreateIndexesResult | IndexBuild:
        """A write job: the createIndexes checks, then either the whole build in this one
        transaction (a TTL index, an empty collection, a multi-document transaction's
        statement: see the module docstring) and its result, or a bulk build begun (ids given
        to the new indexes, the collection watched) for the caller to run."""

        def one_transaction(info: CollectionInfo | None, new: tuple[IndexInfo, ...]) -> bool:
            if in_transaction or info is None:
                return True
            with Reader(self.env, self.writer.current_txn()) as r:
                return r.stats(info)[0] == 0

        outcome = self.ddl.create_or_plan_indexes(db, name, specs, bulk_unless=one_transaction)
        if isinstance(outcome, CreateIndexesResult):
            return outcome
        info, new, new_specs, before = outcome
        with Reader(self.env, self.writer.current_txn()) as r:
            total = r.stats(info)[0]
        build = IndexBuild(self, db, name, info, new, new_specs, before, total, progress)
        build.ttl_view = ttl_view(info, new)
        if self.writer.current_txn() is None:  # committed already: begun outside a group
            self.watch(build)
        else:  # a job of a group: watched once the group commits, never if it is undone
            self.writer.after_commit(lambda: self.watch(build))
        return build


def _pairs(entries: list[Entry]) -> list[tuple[bytes, bytes]]:
    """(entry key, value) of scanned keys: a non-unique entry's value is its record id."""
    if entries and type(entries[0]) is tuple:
        return entries
    return [(k, k[-8:]) for k in entries]


def _cut_runs(
    per_index: list[list[Entry]],
    runs: list[list[list[Entry]]],
    least: int = RUN,
) -> None:
    """Sort each index's keys so far into a run once there are `least` of them."""
    for pos, entries in enumerate(per_index):
        if len(entries) >= least:
            entries.sort()
            runs[pos].append(entries)
            per_index[pos] = []


def _rid(rid_bytes: bytes) -> int:
    return layout.read_u64(rid_bytes)


def entries_of(env: Environment, index: IndexInfo) -> list[tuple[bytes, int]]:
    """Every entry of one index, (key, record id) in key order (tests compare builds with it)."""
    with Reader(env) as r:
        return list(r.index_entries(index, b"", b"\xff" * 600, False, None))


__all__ = ["Builds", "INSERTING", "SCANNING", "IndexBuild", "entries_of"]
