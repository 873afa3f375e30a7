"""Blocking work under a memory limit: the sorter behind find's blocking sort and $sort, and the
grouping behind $group, $bucket and $sortByCount. Within the limit all is in memory; past it,
without disk use, MongoDB's 292; with it, the work goes on with spill files in the operation's
spill directory (`<dbpath>/_tmp` under the server), which are removed when the work is done,
when its cursor is dropped, and at startup.
"""

from __future__ import annotations

import heapq
import itertools
import operator
import os
import struct
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO, Generic, TypeVar

import bson

from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.footprint import DICT_ENTRY, LIST_SLOT, footprint, state_footprint
from ebbdb.storage.core.interrupt import current
from ebbdb.storage.core.limits import (
    MemoryLimits,
    exceeded_no_disk,
    group_exceeded,
    sort_exceeded,
)
from ebbdb.storage.core.memory import Tracker, bound

P = TypeVar("P")  # what is sorted: stored BSON (find) or documents (pipelines)
S = TypeVar("S")  # a group's state

#: What a row costs besides its payload and its key's values: the row's tuple and list slot, the
#: size's int, the key's wrapper (functools.cmp_to_key's) and its tuple.
_ROW_BYTES = 64 + LIST_SLOT + 28 + 48 + 56
#: Rows are charged to the tracker in steps of this many bytes, not one by one.
_CHARGE_EVERY = 1 << 16
_first = operator.itemgetter(0)
_TAKEN: Any = (
    None,
    None,
    0,
)  # a row handed out  # list.sort is stable: rows keep their arrival order on ties


def clear(spill_dir: str) -> None:
    """Remove what operations left in `spill_dir` (at startup: a killed server's spill files)."""
    if not os.path.isdir(spill_dir):
        return  # the usual case at startup, told without importing shutil
    import shutil

    shutil.rmtree(spill_dir, ignore_errors=True)


class _Files:
    """The spill files of one operation; removed by `close`, or when the owner is collected."""

    def __init__(self, spill_dir: str | None) -> None:
        self.dir = spill_dir
        self.paths: list[str] = []
        self._finalizer = weakref.finalize(self, _remove, self.paths)

    def create(self, prefix: str) -> tuple[str, BinaryIO]:
        if self.dir is not None:
            os.makedirs(self.dir, exist_ok=True)
        import tempfile  # by the first operation that spills, not at startup

        fd, path = tempfile.mkstemp(prefix=prefix, suffix=".bson", dir=self.dir)
        self.paths.append(path)
        return path, os.fdopen(fd, "w+b", buffering=1 << 16)

    def close(self) -> None:
        self._finalizer()


def _remove(paths: list[str]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass
    paths.clear()


def _read_records(path: str) -> Iterator[bytes]:
    """The BSON documents written one after another in `path`."""
    with open(path, "rb", buffering=1 << 16) as f:
        while True:
            head = f.read(4)
            if len(head) < 4:
                return
            (length,) = struct.unpack("<i", head)
            yield head + f.read(length - 4)


def dump_document(doc: dict[str, Any]) -> bytes:
    """A document as BSON, for a spill file."""
    return bson.encode(doc, codec_options=CODEC)


def load_document(raw: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """A spilled document back, as a Sorter's `load` gives it: (the document, the document)."""
    doc = bson.decode(raw, CODEC)
    return doc, doc


# -- sorting -----------------------------------------------------------------------------------------


class Sorter(Generic[P]):
    """Sorts payloads by the key of their documents, stably, under `limits.sort_bytes`.

    `add` takes a document, its payload and what the payload holds (storage/core/footprint.py);
    the rows are charged to a tracker of the running operation's (`what`), and past the limit the
    rows held so far are sorted into a run on disk (or, without disk use, 292 is raised). `keep` (0: all)
    bounds what is wanted, as find's skip + limit do: then rows past it are dropped instead, as
    MongoDB's top-k sort does. `dump` turns a payload into BSON and `load` BSON into (document,
    payload), for the runs on disk. `keys_in_payload`: the key's values are the payload's (not
    counted again)."""

    def __init__(
        self,
        key: Callable[[Any], Any],
        limits: MemoryLimits,
        dump: Callable[[P], bytes],
        load: Callable[[bytes], tuple[Any, P]],
        keep: int = 0,
        what: str = "$sort",
        keys_in_payload: bool = False,
    ) -> None:
        self._key, self._limits, self._keep = key, limits, keep
        # Whether a key's values are the payload's own (a document sorted by its fields, no
        # collation): then only the key's tuple is more.
        self._shared = keys_in_payload
        self._dump, self._load = dump, load  # for the runs on disk
        self._rows: list[tuple[Any, P, int]] = []  # key, payload, size, in arrival order
        self._memory = 0
        self._runs: list[str] = []
        self._files = _Files(limits.spill_dir)
        self._tracker = tracker = current.get().memory.child(what, limits.sort_bytes)
        # A sorter dropped without its result read to the end (an error on the way, a cursor
        # closed) gives back what it held when it is collected.
        weakref.finalize(self, tracker.close)
        self.spilled = 0  # runs written

    def add(self, doc: Any, payload: P, size: int) -> None:
        key = self._key(doc)
        size += _ROW_BYTES
        if not self._shared:
            size += footprint(getattr(key, "obj", key)) - 56  # the tuple is in _ROW_BYTES
        self._rows.append((key, payload, size))
        self._memory += size
        if self._memory - self._tracker.used >= _CHARGE_EVERY:
            self._tracker.set(self._memory)
        if self._memory > self._limits.sort_bytes:
            self._overflow()

    def _overflow(self) -> None:
        if self._keep and len(self._rows) > self._keep:
            self._rows.sort(key=_first)
            del self._rows[self._keep :]
            self._memory = sum(r[2] for r in self._rows)
            self._tracker.set(self._memory)
            if self._memory <= self._limits.sort_bytes:
                return
        if not self._limits.allow_disk:
            raise sort_exceeded(self._limits.sort_bytes)
        self._spill()

    def _spill(self) -> None:
        self._rows.sort(key=_first)
        path, f = self._files.create("sort-")
        with f:
            for row in self._rows:
                f.write(self._dump(row[1]))
        self._runs.append(path)
        self.spilled += 1
        self._rows = []
        self._memory = 0
        self._tracker.set(0)

    def result(self) -> Iterator[P]:
        """The payloads in order (the first `keep` of them, when it is set). Spill files are
        removed once the result is read to its end or dropped."""
        self._tracker.set(self._memory)
        self._rows.sort(key=_first)
        if not self._runs:
            rows, self._rows = self._rows, []
            if self._keep:
                del rows[self._keep :]
            self._files.close()
            if self._keep:  # what was dropped is no longer held
                self._memory = sum(r[2] for r in rows)
                self._tracker.set(self._memory)
            return self._handed(rows)
        return self._merged()

    def close(self) -> None:
        """Give back what the rows held (their memory, their files)."""
        self._rows = []
        self._tracker.close()
        self._files.close()

    def _handed(self, rows: list[tuple[Any, P, int]]) -> Iterator[P]:
        # Each row is let go (and no longer counted) once taken: what the stages after the sort
        # keep of it, they count themselves.
        memory, tracker = self._memory, self._tracker
        try:
            for i, (_, payload, size) in enumerate(rows):
                rows[i] = _TAKEN
                memory -= size
                if tracker.used - memory >= _CHARGE_EVERY:
                    tracker.set(memory)
                yield payload
        finally:
            rows.clear()
            self.close()

    def _merged(self) -> Iterator[P]:
        key, load = self._key, self._load

        def run(path: str) -> Iterator[tuple[Any, P]]:
            for raw in _read_records(path):
                doc, payload = load(raw)
                yield key(doc), payload

        memory = ((r[0], r[1]) for r in self._rows)
        merged: Iterator[tuple[Any, P]] = heapq.merge(
            *(run(p) for p in self._runs), memory, key=lambda kp: kp[0]
        )
        if self._keep:
            merged = itertools.islice(merged, self._keep)
        try:
            for _, payload in merged:
                yield payload
        finally:
            self.close()


# -- documents read more than once -------------------------------------------------------------------


class Replay:
    """Documents held to be read more than once ($facet's input, read by each of its pipelines):
    in memory, charged to a tracker of the running operation's (`what`) under `limit`; past it,
    with disk use, in a spill file read again each time; without, 292 (`refusal`)."""

    def __init__(
        self, docs: Iterable[dict[str, Any]], limits: MemoryLimits, limit: int, what: str
    ) -> None:
        self._tracker = current.get().memory.child(what, limit)
        self._files = _Files(limits.spill_dir)
        self._rows: list[dict[str, Any]] = []
        self._path: str | None = None
        try:
            self._hold(docs, limits, limit, what)
        except BaseException:
            self.close()
            raise

    def _hold(
        self, docs: Iterable[dict[str, Any]], limits: MemoryLimits, limit: int, what: str
    ) -> None:
        rows, tracker, token = self._rows, self._tracker, current.get()
        f: BinaryIO | None = None
        try:
            for doc in docs:
                token.tick()
                if f is not None:
                    f.write(dump_document(doc))
                    continue
                rows.append(doc)
                tracker.charge(footprint(doc) + LIST_SLOT)
                if tracker.over_limit:
                    if not limits.allow_disk:
                        raise exceeded_no_disk(
                            f"{what} exceeded memory limit of {limit} bytes holding its input,"
                            " but did not opt in to spilling it. Pass allowDiskUse:true to opt in."
                        )
                    self._path, f = self._files.create("replay-")
                    for row in rows:
                        f.write(dump_document(row))
                    rows.clear()
                    tracker.set(0)
        finally:
            if f is not None:
                f.close()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._path is None:
            return iter(self._rows)
        return (load_document(raw)[0] for raw in _read_records(self._path))

    def close(self) -> None:
        self._rows = []
        self._tracker.close()
        self._files.close()


# -- grouping ----------------------------------------------------------------------------------------

#: Partitions the documents of groups that do not fit are spilled to.
_PARTITIONS = 16
#: What a group costs besides its key and its state: the table's entry, the (key, state) tuple,
#: the state's list, the hashable key's tuple.
_GROUP_BYTES = DICT_ENTRY + 56 + 56 + 56


def group(
    docs: Iterable[Any],
    key_of: Callable[[Any], tuple[Any, Any]],
    new_state: Callable[[], S],
    add: Callable[[S, Any], None],
    limits: MemoryLimits,
    dump: Callable[[Any], bytes],
    load: Callable[[bytes], Any],
    what: str = "$group",
    level: int = 0,
    tracker: Tracker | None = None,
) -> Iterator[tuple[Any, S]]:
    """Group `docs`: `key_of(doc)` gives (hashable key, key value), `new_state()` a group's state
    and `add(state, doc)` adds a document to it; yields (key value, state) once per group.

    What the groups hold (keys, states, and the values accumulators keep, which they charge
    through `memory.bound`) is charged to a tracker of the running operation's named `what`.
    Past `limits.group_bytes`, without disk use, 292; with it, documents of groups already held
    still go to them, and those of other groups are spilled, partitioned by key, to files each
    grouped the same way once the input is read (so every group still sees its documents in
    their order): by this function again, at the next `level`, with the same `tracker`."""
    own = tracker is None
    if tracker is None:
        tracker = current.get().memory.child(what, limits.group_bytes)
    groups: dict[Any, tuple[Any, S]] = {}
    files: _Files | None = None
    partitions: list[tuple[str, BinaryIO]] = []
    state_bytes = -1  # what a fresh state holds: the same for every group
    token = current.get()
    try:
        for doc in docs:
            token.tick()
            key, key_value = key_of(doc)
            held = groups.get(key)
            if held is None:
                if partitions:
                    partitions[hash((level, key)) % _PARTITIONS][1].write(dump(doc))
                    continue
                state = bound(tracker, new_state)
                if state_bytes < 0:
                    state_bytes = state_footprint(state)
                held = groups[key] = (key_value, state)
                # The key value, and the hashable key (which shares its scalars).
                tracker.charge(2 * footprint(key_value) + state_bytes + _GROUP_BYTES)
            add(held[1], doc)
            if tracker.over_limit and not partitions:
                if not limits.allow_disk:
                    raise group_exceeded()
                files = _Files(limits.spill_dir)
                partitions = [files.create("group-") for _ in range(_PARTITIONS)]
        for _, f in partitions:
            f.close()
        yield from groups.values()
        groups.clear()
        tracker.set(0)
        for path, _ in partitions:
            spilled = (load(raw) for raw in _read_records(path))
            yield from group(
                spilled, key_of, new_state, add, limits, dump, load, what, level + 1, tracker
            )
            os.unlink(path)
            assert files is not None
            files.paths.remove(path)
    finally:
        for _, f in partitions:
            f.close()
        if files is not None:
            files.close()
        if own:
            tracker.close()
