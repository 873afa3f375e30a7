"""What a collection and its indexes take in storage, as dbStats, collStats and $collStats report it,
and the `storageStats` document MongoDB 7.0 gives for it.

The document count and the data size are exact: every write keeps them (storage/engine/layout.py, stats).
They count what is stored, so a document that has expired but that the TTL monitor has not deleted
yet is still in them, as it is in MongoDB's (see docs/ttl.md). Storage and index sizes are
estimates of the bytes the entries take in LMDB's pages, in whole pages, at least one: LMDB keeps
every collection and index in shared B-trees, so no file or tree size belongs to one of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bson import Int64

from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.engine.reader import Reader
from ebbdb.storage.expiry import ttl

#: LMDB's bytes per entry beyond its key and value: the node's header and the page's pointer to it.
NODE_OVERHEAD = 10
#: Entries of an index read to learn their average size when their number is known without a scan.
SAMPLE = 1000
#: A record's key (collection id, record id) and an index entry's value (the record id).
_RECORD_KEY = 16
_ENTRY_VALUE = 8


@dataclass(frozen=True)
class CollectionSizes:
    """One collection in bytes: `count` documents whose BSON takes `data_size`, records estimated at
    `storage_size`, and one estimate per index, in the collection's index order."""

    count: int
    data_size: int
    storage_size: int
    index_sizes: tuple[tuple[str, int], ...]

    @property
    def total_index_size(self) -> int:
        return sum(size for _, size in self.index_sizes)

    @property
    def avg_obj_size(self) -> int:
        """MongoDB's averageObjectSize: whole bytes, 0 for an empty collection."""
        return self.data_size // self.count if self.count else 0


def _pages(size: float, page: int) -> int:
    """`size` bytes in whole pages (at least one: an empty tree still takes its root)."""
    return max(1, -(-int(size) // page)) * page


def _one_entry_per_document(ix: IndexInfo) -> bool:
    """Whether the index holds exactly one entry per document (so the count says how many)."""
    partial = "partialFilterExpression" in ix.options
    return not (ix.multikey or ix.sparse or partial or ttl.is_cosmos_index(ix))


def _index_bytes(reader: Reader, ix: IndexInfo, count: int) -> float:
    """An index's entries (its expiry entries too, for a TTL index) with LMDB's overhead. An index
    with one entry per document is sampled for the average key size; others are counted."""
    if _one_entry_per_document(ix):
        sampled, key_bytes = reader.index_footprint(ix, SAMPLE)
        entries = count
        keys = key_bytes / sampled * count if sampled else 0.0
    else:
        entries, key_bytes = reader.index_footprint(ix)
        keys = float(key_bytes)
    total = keys + entries * (_ENTRY_VALUE + NODE_OVERHEAD)
    if ix.expire_after is not None:
        expiring, expiry_bytes = reader.expiry_footprint(ix)
        total += expiry_bytes + expiring * NODE_OVERHEAD
    return total


def collection_sizes(reader: Reader, coll: CollectionInfo, page: int) -> CollectionSizes:
    """The figures of one collection, read in `reader`'s transaction; `page` is LMDB's page size.
    Records are estimated from the count and data size (each adds its key, its header without TTL
    dates, and LMDB's overhead to its BSON); indexes as `_index_bytes` says."""
    count, data = reader.stats(coll)
    records = data + count * (_RECORD_KEY + ttl.HEAD_LEN + NODE_OVERHEAD)
    indexes = tuple((ix.name, _pages(_index_bytes(reader, ix, count), page)) for ix in coll.indexes)
    return CollectionSizes(count, data, _pages(records, page), indexes)


# -- MongoDB's storageStats document ---------------------------------------------------------------


def number(n: int) -> int | Int64:
    """A count or size as MongoDB's BSONObjBuilder::appendNumber writes it: an int32 below 2^30 in
    magnitude, an int64 above."""
    return n if -(1 << 30) < n < (1 << 30) else Int64(n)


def storage_stats(coll: CollectionInfo, sizes: CollectionSizes, scale: int) -> dict[str, Any]:
    """The `storageStats` of $collStats (and the body of collStats) for an existing collection,
    sizes divided by `scale` (whole numbers; avgObjSize is never scaled), fields in MongoDB 7.0's
    order (a capped collection adds its `max` and `maxSize`). ebbdb has no free space to report
    per collection, and no engine-specific section (MongoDB's `wiredTiger`)."""
    doc: dict[str, Any] = {"size": number(sizes.data_size // scale), "count": number(sizes.count)}
    if sizes.count:
        doc["avgObjSize"] = sizes.avg_obj_size
    index_total = sizes.total_index_size
    doc.update(
        numOrphanDocs=0,
        storageSize=number(sizes.storage_size // scale),
        freeStorageSize=0,
        capped=False,
    )
    if coll.options.get("capped"):  # storage/engine/capped.py's options
        size, max_docs = int(coll.options["size"]), int(coll.options.get("max", 0))
        doc.update(capped=True, max=number(max_docs), maxSize=number(size // scale))
    doc.update(
        nindexes=len(coll.indexes),
        indexDetails={},
        indexBuilds=[],
        totalIndexSize=number(index_total // scale),
        indexSizes={name: number(size // scale) for name, size in sizes.index_sizes},
        totalSize=number((sizes.storage_size + index_total) // scale),
        scaleFactor=scale,
    )
    return doc


def missing_storage_stats(scale: int) -> dict[str, Any]:
    """What collStats answers for a collection that does not exist: zeros, in MongoDB's order."""
    return {
        "size": 0,
        "count": 0,
        "numOrphanDocs": 0,
        "storageSize": 0,
        "totalSize": 0,
        "nindexes": 0,
        "totalIndexSize": 0,
        "indexDetails": {},
        "indexSizes": {},
        "scaleFactor": scale,
    }
