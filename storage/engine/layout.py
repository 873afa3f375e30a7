"""Byte layouts of the LMDB keys and values the engine writes, each in one place: record keys,
index entries, collection statistics and the id counter. (The record header and the expiry-index
entry belong to storage/expiry/ttl.py, whose rules they serve.) No other module slices these bytes.

  records   key: collection id u64 | record id u64       value: record header | BSON (storage/expiry/ttl.py)
  index     key: index id u64 | key body [| record id]   value: record id u64
            (unique indexes leave the record id out of the key, so one key maps to one record)
  stats     key: collection id u64                       value: count i64 | data bytes i64
  meta      key: b"next_id"                              value: u64
"""

from __future__ import annotations

import struct

from ebbdb.storage.indexes import keys

_U64 = struct.Struct(">Q")
_STATS = struct.Struct(">qq")

#: The meta key of the counter that numbers collections and indexes.
NEXT_ID = b"next_id"


def u64(n: int) -> bytes:
    return _U64.pack(n)


def read_u64(raw: bytes) -> int:
    return int(_U64.unpack(raw)[0])


# -- records ---------------------------------------------------------------------------------------


def collection_prefix(coll_id: int) -> bytes:
    """Every record key of the collection starts with this."""
    return _U64.pack(coll_id)


def collection_end(coll_id: int) -> bytes:
    """The first record key past the collection."""
    return _U64.pack(coll_id + 1)


def record_key(coll_id: int, rid: int) -> bytes:
    return _U64.pack(coll_id) + _U64.pack(rid)


def record_rid(key: bytes) -> int:
    """The record id of a record key."""
    return int(_U64.unpack_from(key, 8)[0])


def record_rid_bytes(key: bytes) -> bytes:
    """The record id of a record key, as stored in index entries."""
    return key[8:16]


def in_collection(key: bytes, prefix: bytes) -> bool:
    return key[:8] == prefix


# -- index entries ---------------------------------------------------------------------------------


def index_prefix(index_id: int) -> bytes:
    """Every entry of the index starts with this."""
    return _U64.pack(index_id)


def entry_key(index_id: int, body: bytes, unique: bool, rid_bytes: bytes) -> tuple[bytes, bool]:
    """The entry key of one key body (storage/indexes/keys.py) and whether it had to be shortened."""
    if unique:
        return keys.fit(_U64.pack(index_id), body)
    return keys.fit(_U64.pack(index_id), body, rid_bytes)


def entry_body(key: bytes) -> bytes:
    """An entry key without its index prefix: the key body (and record id, if not unique)."""
    return key[8:]


def entry_rid(value: bytes) -> int:
    """The record id an index entry's value names."""
    return int(_U64.unpack(value)[0])


# -- statistics ------------------------------------------------------------------------------------


def stats_key(coll_id: int) -> bytes:
    return _U64.pack(coll_id)


def pack_stats(count: int, size: int) -> bytes:
    return _STATS.pack(count, size)


def unpack_stats(raw: bytes | None) -> tuple[int, int]:
    """(document count, data bytes); (0, 0) for a collection with no statistics yet."""
    if raw is None:
        return 0, 0
    count, size = _STATS.unpack(raw)
    return int(count), int(size)
