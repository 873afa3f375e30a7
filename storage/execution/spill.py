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
from ebbdb.storage.core.limits import MemoryLimits, approximate_size, group_exceeded, sort_exceeded

P = TypeVar("P")  # what is sorted: stored BSON (find) or documents (pipelines)
S = TypeVar("S")  # a group's state

#: What a row costs besides its payload: the key, the list slot, the tuple.
_ROW_BYTES = 64
_first = operator.itemgetter(0)  # list.sort is stable: rows keep their arrival order on ties


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

    `add` takes a document, its payload and the payload's size; past the limit the rows held so
    far are sorted into a run on disk (or, without disk use, 292 is raised). `keep` (0: all)
    bounds what is wanted, as find's skip + limit do: then rows past it are dropped instead, as
    MongoDB's top-k sort does. `dump` turns a payload into BSON and `load` BSON into (document,
    payload), for the runs on disk."""

    def __init__(
        self,
        key: Callable[[Any], Any],
        limits: MemoryLimits,
        dump: Callable[[P], bytes],
        load: Callable[[bytes], tuple[Any, P]],
        keep: int = 0,
    ) -> None:
        self._key, self._limits, self._keep = key, limits, keep
        self._dump, self._load = dump, load  # for the runs on disk
        self._rows: list[tuple[Any, P, int]] = []  # key, payload, size, in arrival order
        self._memory = 0
        self._runs: list[str] = []
        self._files = _Files(limits.spill_dir)
        self.spilled = 0  # runs written

    def add(self, doc: Any, payload: P, size: int) -> None:
        size += _ROW_BYTES
        self._rows.append((self._key(doc), payload, size))
        self._memory += size
        if self._memory > self._limits.sort_bytes:
            self._overflow()

    def _overflow(self) -> None:
        if self._keep and len(self._rows) > self._keep:
            self._rows.sort(key=_first)
            del self._rows[self._keep :]
            self._memory = sum(r[2] for r in self._rows)
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

    def result(self) -> Iterator[P]:
        """The payloads in order (the first `keep` of them, when it is set). Spill files are
        removed once the result is read to its end or dropped."""
        self._rows.sort(key=_first)
        if not self._runs:
            rows, self._rows = self._rows, []
            if self._keep:
                del rows[self._keep :]
            self._files.close()
            return iter([r[1] for r in rows])
        return self._merged()

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
            self._rows = []
            self._files.close()


# -- grouping ----------------------------------------------------------------------------------------

#: Partitions the documents of groups that do not fit are spilled to.
_PARTITIONS = 16
#: What a group costs besides its key: the table slot and its state.
_GROUP_BYTES = 96


def group(
    docs: Iterable[Any],
    key_of: Callable[[Any], tuple[Any, Any]],
    new_state: Callable[[], S],
    add: Callable[[S, Any], None],
    limits: MemoryLimits,
    dump: Callable[[Any], bytes],
    load: Callable[[bytes], Any],
    level: int = 0,
) -> Iterator[tuple[Any, S]]:
    """Group `docs`: `key_of(doc)` gives (hashable key, key value), `new_state()` a group's state
    and `add(state, doc)` adds a document to it; yields (key value, state) once per group.

    Groups are held in memory while their keys take at most `limits.group_bytes`. Past that,
    without disk use, 292; with it, documents of groups already held still go to them, and those
    of other groups are spilled, partitioned by key, to files each grouped the same way once the
    input is read (so every group still sees its documents in their order)."""
    groups: dict[Any, tuple[Any, S]] = {}
    memory = 0
    files: _Files | None = None
    partitions: list[tuple[str, BinaryIO]] = []
    try:
        for doc in docs:
            key, key_value = key_of(doc)
            held = groups.get(key)
            if held is None:
                if partitions:
                    partitions[hash((level, key)) % _PARTITIONS][1].write(dump(doc))
                    continue
                held = groups[key] = (key_value, new_state())
                memory += approximate_size(key_value) + _GROUP_BYTES
                if memory > limits.group_bytes:
                    if not limits.allow_disk:
                        raise group_exceeded()
                    files = _Files(limits.spill_dir)
                    partitions = [files.create("group-") for _ in range(_PARTITIONS)]
            add(held[1], doc)
        for _, f in partitions:
            f.close()
        yield from groups.values()
        groups.clear()
        for path, _ in partitions:
            spilled = (load(raw) for raw in _read_records(path))
            yield from group(spilled, key_of, new_state, add, limits, dump, load, level + 1)
            os.unlink(path)
            assert files is not None
            files.paths.remove(path)
    finally:
        for _, f in partitions:
            f.close()
        if files is not None:
            files.close()
