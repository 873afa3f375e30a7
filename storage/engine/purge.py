"""The TTL purge inside one write transaction: expired records found by range reads over the expiry
index, each decided by `ttl.expired`, deleted with its index and expiry entries.

Beside the general loop (any TTL rules, any indexes) there is a faster one for the usual case: a
record has at most one expiry entry (`Rules.one_entry`), so the cursor that found it deletes it,
and where every index is a plain one over one top-level field (the `_id` index, a TTL index on
`t`, ...), each entry key is computed directly from that field's value instead of by the generic
walk (storage/indexes/entries.py). A document whose indexed field holds an array, or a collection
with any other index, takes the general computation. tests/storage/test_ttl_purge_paths.py holds
the two loops to leaving the same LMDB contents.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import bson
from bson import ObjectId
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.core import interrupt
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.engine import layout
from ebbdb.storage.engine.environment import Txn
from ebbdb.storage.engine.records import Records
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes import keys
from ebbdb.storage.indexes.entries import ID_INDEX_KEY
from ebbdb.storage.query.paths import MISSING

#: The longest key body keys.fit keeps whole after an index id (8 bytes).
_ROOM = keys.MAX_KEY - 8 - keys.SUFFIX_ROOM
#: How many records the fast loop deletes between two looks at the clock.
_CLOCK_EVERY = 32


@dataclass(frozen=True)
class PurgeJob:
    """One purge job: delete up to `limit` records of the collection `info` expired at `now_ms`,
    in the write transaction `txn`, stopping once perf_counter() passes `stop_at` (if set)."""

    records: Records
    txn: Txn
    info: CollectionInfo
    now_ms: int
    limit: int
    stop_at: float | None

    def unpack(self) -> tuple[Records, Txn, CollectionInfo, int, int, float | None]:
        return self.records, self.txn, self.info, self.now_ms, self.limit, self.stop_at


def run(job: PurgeJob, general: bool = False) -> tuple[int, int, bool]:
    """Run the job with the fast loop where the collection's TTL rules give a record at most one
    expiry entry (unless `general`), else the general loop. Returns (deleted, their BSON bytes,
    more: it stopped at the limit or the clock, so that expired records may be left)."""
    fast = not general and ttl.rules_for(job.info).one_entry
    return purge_one_entry(job) if fast else purge_general(job)


@dataclass(frozen=True)
class PlainIndex:
    """An index whose entry for a document is the encoding of one top-level field's value (or
    null when missing, or none when missing and sparse), as plain_bodies' first case gives."""

    prefix: bytes  # the index id, as every entry key starts
    field: str
    encode: Callable[[Any], bytes]
    sparse: bool
    unique: bool


def plain_index(ix: IndexInfo) -> PlainIndex | None:
    """The index as a PlainIndex, or None when its entries need the general computation
    (a collation, a partial filter, a special kind, a compound or dotted key)."""
    if ix.collation is not None or len(ix.key) != 1:
        return None
    field = ix.key[0][0]
    is_id = ix.key == ID_INDEX_KEY
    if not is_id and (ix.partial_predicate is not None or ix.kind is not None or "." in field):
        return None
    encode = keys.encode if ix.directions[0] > 0 else keys.encode_descending
    return PlainIndex(layout.u64(ix.id), field, encode, ix.sparse and not is_id, ix.unique)


@dataclass(frozen=True)
class PurgePlan:
    """How the fast loop computes a collection's index entries: its indexes, all plain, and
    whether the fields they read can be had without decoding the document: the `_id` (read from
    the document's first element) and, when set, `date_field`, the field of the one native TTL
    index, never an array there (not multikey), whose value is then the date in the record's
    header that the expiry entry found it by."""

    indexes: tuple[PlainIndex, ...]
    date_field: str | None
    needs_doc: bool


_PLANS: dict[int, tuple[CollectionInfo, PurgePlan | None]] = {}


def purge_plan(info: CollectionInfo) -> PurgePlan | None:
    """The collection's PurgePlan, or None when one of its indexes is not plain (a Cosmos `_ts`
    index has no entries and is left out). Cached per catalog entry."""
    cached = _PLANS.get(id(info))
    if cached is not None and cached[0] is info:
        return cached[1]
    plan: list[PlainIndex] | None = []
    for ix in info.indexes:
        if ttl.is_cosmos_index(ix):
            continue
        p = plain_index(ix)
        if p is None or plan is None:
            plan = None
            continue
        plan.append(p)
    result = None
    if plan is not None:
        rules = ttl.rules_for(info)
        date_field = None
        if rules.one_entry and len(rules.native) == 1 and not rules.native[0][0].multikey:
            date_field = rules.native[0][0].key[0][0]
        needs_doc = any(p.field not in ("_id", date_field) for p in plan)
        result = PurgePlan(tuple(plan), date_field, needs_doc)
    if len(_PLANS) > 4096:
        _PLANS.clear()
    _PLANS[id(info)] = (info, result)
    return result


def plain_indexes(info: CollectionInfo) -> tuple[PlainIndex, ...] | None:
    """Every index of the collection as a PlainIndex, or None when one of them is not plain."""
    plan = purge_plan(info)
    return None if plan is None else plan.indexes


def indexed_fields(
    plan: PurgePlan, value: bytes, offset: int, meta: ttl.RecordMeta
) -> dict[str, Any] | None:
    """The fields `plan`'s indexes read from the stored record (BSON at `offset`), without
    decoding the document: its `_id` when it is the first element and an int32, an ObjectId or
    a string, and the TTL field's date from the header. None when it takes a decode."""
    if plan.needs_doc or value[offset + 5 : offset + 9] != b"_id\x00":
        return None
    at = offset + 9
    kind = value[offset + 4]
    _id: Any
    if kind == 0x10:  # int32
        _id = int.from_bytes(value[at : at + 4], "little", signed=True)
    elif kind == 0x07:  # ObjectId
        _id = ObjectId(value[at : at + 12])
    elif kind == 0x02:  # string: int32 length (with its NUL), UTF-8
        n = int.from_bytes(value[at : at + 4], "little")
        _id = value[at + 4 : at + 3 + n].decode("utf-8")
    else:
        return None
    if plan.date_field is None:
        return {"_id": _id}
    if len(meta.dates) != 1:
        return None
    return {"_id": _id, plan.date_field: DatetimeMS(meta.dates[0][1])}


def plain_entry_keys(
    plan: PurgePlan, doc: dict[str, Any], rid_bytes: bytes
) -> list[tuple[bytes, bool]] | None:
    """The (entry key, unique) pairs of a document under plain indexes; None when a field holds
    an array (multikey entries: the general computation makes them)."""
    out = []
    for p in plan.indexes:
        value = doc.get(p.field, MISSING)
        if type(value) is list:
            return None
        if value is MISSING:
            if p.sparse:
                continue
            value = None
        unique, body = p.unique, p.encode(value)
        if len(body) <= _ROOM:  # keys.fit's common case, without the call
            out.append((p.prefix + body if unique else p.prefix + body + rid_bytes, unique))
        else:
            out.append((keys.fit(p.prefix, body, b"" if unique else rid_bytes)[0], unique))
    return out


def purge_general(job: PurgeJob) -> tuple[int, int, bool]:
    """The general loop: candidates in chunks from the expiry index, each record deleted by
    Records.delete_record. Returns (deleted, their BSON bytes, more)."""
    records, txn, info, now_ms, limit, stop_at = job.unpack()
    rules = ttl.rules_for(info)
    deleted = size = 0
    tick = interrupt.current.get().tick
    get, records_db = txn.get, records.env.records
    prefix = layout.collection_prefix(info.id)
    seen: set[bytes] = set()
    one_entry = rules.one_entry
    while deleted < limit:
        found = _expired_candidates(records, txn, rules, now_ms, min(limit - deleted, 32))
        chunk = [(rb, k) for rb, k in found.items() if rb not in seen]
        if not chunk:
            break
        seen.update(rb for rb, _k in chunk)
        for rb, k in chunk:
            tick()
            value = get(prefix + rb, db=records_db)
            if value is None:
                continue
            # The predicate decides; the expiry index only finds candidates.
            meta = ttl.read_meta(value)
            if ttl.expired(meta, rules, now_ms):
                records.log_delete(txn, info, value)
                rid = layout.read_u64(rb)
                expiry = (k,) if one_entry else None
                size += records.delete_record(txn, info, rid, value, meta, expiry)
                deleted += 1
        if stop_at is not None and time.perf_counter() >= stop_at:
            return deleted, size, True
    return deleted, size, deleted >= limit


def _expired_candidates(
    records: Records, txn: Txn, rules: ttl.Rules, now_ms: int, limit: int
) -> dict[bytes, bytes]:
    """Record ids (as key bytes) of up to `limit` expiry-index entries in range at `now_ms`,
    each with its (last) entry."""
    found: dict[bytes, bytes] = {}
    cur = txn.cursor(db=records.env.expiry)
    rid_of = ttl.expiry_rid_bytes
    for start, stop in ttl.expiry_ranges(rules, now_ms):
        if not cur.set_range(start):
            continue
        for k in cur.iternext(values=False):
            if k >= stop or len(found) >= limit:
                break
            found[rid_of(k)] = k
        if len(found) >= limit:
            break
    return found


def purge_one_entry(job: PurgeJob) -> tuple[int, int, bool]:
    """The fast loop, for rules under which a record has at most one expiry entry: the cursor on
    the entry that found a record deletes it, and plain indexes' keys are computed directly.
    Returns (deleted, their BSON bytes, more)."""
    records, txn, info, now_ms, limit, stop_at = job.unpack()
    rules = ttl.rules_for(info)
    plan = purge_plan(info)
    env = records.env
    tick = interrupt.current.get().tick
    get, delete, pop, put = txn.get, txn.delete, txn.pop, txn.put
    records_db, index_db = env.records, env.index
    prefix = layout.collection_prefix(info.id)
    read_meta, expired, body_offset = ttl.read_meta, ttl.expired, ttl.body_offset
    decode, log_delete = bson.decode, records.log_delete
    fields: dict[str, Any] | None
    deleted = size = 0
    clock = _CLOCK_EVERY
    cur = txn.cursor(db=env.expiry)
    for start, stop in ttl.expiry_ranges(rules, now_ms):
        positioned = cur.set_range(start)
        while positioned:
            k = cur.key()
            if not k or k >= stop:
                break
            if deleted >= limit:
                return deleted, size, True
            tick()
            rb = k[17:25]  # the record id the entry names (ttl.expiry_rid_bytes)
            value = get(prefix + rb, db=records_db)
            # The predicate decides; the expiry index only finds candidates.
            if value is None or not expired(meta := read_meta(value), rules, now_ms):
                positioned = cur.next()
                continue
            offset = body_offset(value)
            fields = doc = None  # doc: the whole document, when decoded
            if plan is not None:
                fields = indexed_fields(plan, value, offset, meta)
            if fields is None:
                fields = doc = decode(value[offset:], CODEC)
            log_delete(txn, info, value, doc)
            if env.watched:
                records._watch(info.id, rb)  # an index build watches the collection
            entries = None if plan is None else plain_entry_keys(plan, fields, rb)
            if entries is None:
                records.delete_entries(txn, info, value, rb, frozenset(), doc=doc, expiry=())
            else:
                for key, unique in entries:
                    if not unique:
                        delete(key, b"", index_db)
                    elif (held := pop(key, index_db)) is not None and held != rb:
                        # A unique entry is this record's only while it names it.
                        put(key, held, db=index_db)
            delete(prefix + rb, db=records_db)
            size += len(value) - offset
            deleted += 1
            positioned = cur.delete()  # the record's one expiry entry; on to the next
            clock -= 1
            if not clock:
                clock = _CLOCK_EVERY
                if stop_at is not None and time.perf_counter() >= stop_at:
                    return deleted, size, True
    return deleted, size, False
