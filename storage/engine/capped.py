"""Capped collections: their limits as the catalog stores them (MongoDB's `capped`, `size`, `max`
options), and the removal of the oldest documents when an insert takes a collection past them,
inside the insert's own write transaction. Natural order is record-id order, which is insertion
order, so "oldest" is simply the lowest record id."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.engine import layout
from ebbdb.storage.engine.environment import Environment, Txn
from ebbdb.storage.engine.sizes import number
from ebbdb.storage.expiry import ttl

#: The largest `size` MongoDB takes (1 PB).
MAX_SIZE = 1024**5
#: `max` must stay below this (2^31); a `max` of 0 or less means "no limit", stored as 2^31 - 1.
MAX_DOCS_BOUND = 1 << 31
NO_MAX = MAX_DOCS_BOUND - 1


@dataclass(frozen=True)
class Limits:
    """A capped collection's bounds: total BSON bytes, and documents (0: no document limit)."""

    size: int
    max_docs: int

    def exceeded(self, count: int, data_size: int) -> bool:
        return data_size > self.size or (self.max_docs > 0 and count > self.max_docs)


def round_size(size: int) -> int:
    """MongoDB 7.0 rounds a capped size up to a multiple of 256 bytes (no other minimum: the
    4096-byte floor was MMAPv1's)."""
    return (size + 0xFF) & ~0xFF


def stored_max(max_docs: int) -> int:
    """`max` as MongoDB stores it: 0 or less is "no limit", kept as 2^31 - 1."""
    return NO_MAX if max_docs <= 0 else max_docs


def options(size: int, max_docs: int | None, rest: dict[str, Any]) -> dict[str, Any]:
    """A capped collection's stored options, in MongoDB's order (capped, size, max, then the
    others): `size` rounded, `max` normalised (None: not given)."""
    out: dict[str, Any] = {"capped": True, "size": number(round_size(size))}
    if max_docs is not None:
        out["max"] = number(stored_max(max_docs))
    out.update((k, v) for k, v in rest.items() if k not in ("capped", "size", "max"))
    return out


def limits(info: CollectionInfo | None) -> Limits | None:
    """The bounds of a capped collection (None: not capped)."""
    if info is None or not info.options.get("capped"):
        return None
    return Limits(int(info.options.get("size", 0)), int(info.options.get("max", 0)))


def make_room(
    txn: Txn,
    env: Environment,
    info: CollectionInfo,
    bounds: Limits,
    just_inserted: int,
    pending: tuple[int, int],
    delete: Callable[[int, bytes], int],
) -> tuple[int, int]:
    """After record `just_inserted` went into `info`, delete the oldest records until the
    collection is within `bounds` again, never the record just inserted (as mongod, which keeps
    a document larger than the whole cap alone). `pending` is the (documents, bytes) this write
    inserted and has not yet counted into the stored statistics; `delete(rid, value)` deletes a
    record with its entries and returns its BSON size. Returns (documents deleted, bytes freed),
    which the caller takes off its pending counts."""
    stored_count, stored_size = layout.unpack_stats(
        txn.get(layout.stats_key(info.id), db=env.stats)
    )
    count, size = stored_count + pending[0], stored_size + pending[1]
    if not bounds.exceeded(count, size):
        return 0, 0
    victims: list[tuple[int, bytes]] = []
    cur = txn.cursor(db=env.records)
    prefix = layout.collection_prefix(info.id)
    if cur.set_range(prefix):
        for key, value in cur.iternext():
            if not layout.in_collection(key, prefix):
                break
            rid = layout.record_rid(key)
            if rid >= just_inserted or not bounds.exceeded(count, size):
                break
            victims.append((rid, value))
            count -= 1
            size -= len(value) - ttl.body_offset(value)
    # Deleted after the walk, not under the cursor reading the same records.
    return len(victims), sum(delete(rid, value) for rid, value in victims)
