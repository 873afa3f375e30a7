"""How queries used the data since the data directory was opened: how many ran on each index and
how many scanned a whole collection ($indexStats' `accesses`, $collStats' `queryExecStats`). Kept in
memory, as MongoDB keeps its own: they start again from zero at every start."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ebbdb.storage.catalog.info import CollectionInfo


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class IndexAccesses:
    """Queries that ran on an index, counted since `since_ms` (ms since the epoch): when the data
    directory was opened, or when the index was created if that was later."""

    ops: int
    since_ms: int


class Usage:
    """The counters of one engine. Thread-safe: queries count from the loop and from reader
    threads alike. A query counts once however many batches it is read in, as MongoDB counts an
    index access per operation, not per key."""

    def __init__(self, collections: Iterable[CollectionInfo] = ()) -> None:
        self._lock = threading.Lock()
        self.opened_ms = _wall_ms()
        self._index_ops: dict[int, int] = {}
        #: When each index's count started (index ids are never used again).
        self._index_since = {ix.id: self.opened_ms for c in collections for ix in c.indexes}
        self._scans: dict[int, int] = {}

    def published(self, changes: Mapping[tuple[str, str], CollectionInfo | None]) -> None:
        """Catalog entries just committed: the indexes among them that are new start counting."""
        now = _wall_ms()
        with self._lock:
            for info in changes.values():
                for ix in () if info is None else info.indexes:
                    self._index_since.setdefault(ix.id, now)

    def index_used(self, index_id: int) -> None:
        with self._lock:
            self._index_ops[index_id] = self._index_ops.get(index_id, 0) + 1

    def collection_scanned(self, collection_id: int) -> None:
        with self._lock:
            self._scans[collection_id] = self._scans.get(collection_id, 0) + 1

    def index_accesses(self, index_id: int) -> IndexAccesses:
        with self._lock:
            since = self._index_since.get(index_id, self.opened_ms)
            return IndexAccesses(self._index_ops.get(index_id, 0), since)

    def collection_scans(self, collection_id: int) -> int:
        with self._lock:
            return self._scans.get(collection_id, 0)
