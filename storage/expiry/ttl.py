"""Time to live: the facts a record carries for expiry, the rules a collection's TTL indexes set, and
`expired`, the one predicate that decides whether a document is gone (hiding and deleting alike).

A stored record is a header followed by the client's BSON, unchanged. The header holds what expiry
needs so that deciding costs a comparison, not a decode or a second read:
  format (1 byte) | last-modified ms (int64) | the document's own `ttl` (int32; 0: none valid)
  | n (1 byte) | n x (TTL index id uint64, earliest date ms int64)
The last-modified time is the Cosmos `_ts`: kept here, never in the document, never returned.
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from bson import Int64
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.catalog import clustered, timeseries
from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.query.compare import RANK_DATE, date_ms, rank
from ebbdb.storage.query.paths import MISSING, leaves, split

RECORD_FORMAT = 1
_HEAD = struct.Struct(">BqiB")
_DATE = struct.Struct(">Qq")
HEAD_LEN = _HEAD.size
_INT32_MAX = 2_147_483_647
#: The field a Cosmos-style TTL index names: the server-kept last-modified time.
COSMOS_FIELD = "_ts"


@dataclass(frozen=True)
class RecordMeta:
    """What a record's header says: last-modified ms, the document's valid `ttl` (0 when it has
    none), and the earliest date under each native TTL index ((index id, ms), ...)."""

    modified: int
    ttl: int = 0
    dates: tuple[tuple[int, int], ...] = ()

    def pack(self) -> bytes:
        head = _HEAD.pack(RECORD_FORMAT, self.modified, self.ttl, len(self.dates))
        if not self.dates:
            return head
        return head + b"".join(_DATE.pack(ix, ms) for ix, ms in self.dates)


def body_offset(value: bytes) -> int:
    """Where the BSON starts in a stored record."""
    return HEAD_LEN + (value[HEAD_LEN - 1] << 4)


def body(value: bytes) -> bytes:
    return value[HEAD_LEN + (value[HEAD_LEN - 1] << 4) :]


def bodies(items: list[tuple[bytes, bytes]]) -> list[bytes]:
    """The BSON of each stored record in (key, record) pairs: `body` without a call per record
    (a scan's batch takes thousands)."""
    head, count = HEAD_LEN, HEAD_LEN - 1
    return [v[head + (v[count] << 4) :] for _, v in items]


def read_meta(value: bytes) -> RecordMeta:
    _fmt, modified, ttl, n = _HEAD.unpack_from(value)
    if not n:
        return RecordMeta(modified, ttl)
    return RecordMeta(modified, ttl, tuple(_DATE.iter_unpack(value[HEAD_LEN : HEAD_LEN + 16 * n])))


# -- rules -----------------------------------------------------------------------------------------


def is_cosmos_key(key: tuple[tuple[str, Any], ...]) -> bool:
    """Whether an index on this key pattern, given a TTL, is the Cosmos default: one field, `_ts`
    (storage/expiry/expire_after.py gives its TTL the Cosmos range)."""
    return len(key) == 1 and key[0][0] == COSMOS_FIELD


def is_cosmos_index(ix: IndexInfo) -> bool:
    """A TTL index on `_ts`: the collection's default TTL over last-modified times."""
    return ix.expire_after is not None and is_cosmos_key(ix.key)


def is_native_ttl(ix: IndexInfo) -> bool:
    # MongoDB's TTL monitor skips an index of a special kind (a hashed one may carry
    # expireAfterSeconds): it expires nothing.
    return ix.expire_after is not None and not is_cosmos_index(ix) and ix.kind is None


@dataclass(frozen=True)
class CollectionRule:
    """A TTL rule that a collection's own options set, not an index: `kind` "clustered" (expiry
    by the `_id` date) or "timeseries" (by the timeField). Its dates are kept in record headers
    and the expiry index under `space`, the id of the collection's `_id` index (which never has a
    TTL of its own), even while `seconds` is None (off): collMod can then switch it on, or change
    it, without rewriting a record."""

    kind: str
    space: int
    seconds: int | None
    field: str
    date_of: Callable[[dict[str, Any]], int | None]


@dataclass(frozen=True)
class Rules:
    """A collection's TTL rules: (index, E seconds) per native TTL index, the Cosmos default
    D (-1 or > 0) when it has a `_ts` TTL index, and the rules its options set (`derived`)."""

    native: tuple[tuple[IndexInfo, int], ...] = ()
    cosmos: int | None = None
    cosmos_index: IndexInfo | None = None
    derived: tuple[CollectionRule, ...] = ()

    @functools.cached_property
    def active(self) -> bool:
        # Cached: asked for every record a write or a scan touches.
        return (
            bool(self.native)
            or self.cosmos is not None
            or any(r.seconds is not None for r in self.derived)
        )

    @functools.cached_property
    def bounds(self) -> tuple[tuple[int, int], ...]:
        """(date space, E in ms) of each date rule in force: a native TTL index, or a collection
        rule that is on (what `expires_at` adds to a record's earliest date in that space)."""
        out = [(ix.id, e * 1000) for ix, e in self.native]
        out += [(r.space, r.seconds * 1000) for r in self.derived if r.seconds is not None]
        return tuple(out)

    @functools.cached_property
    def one_entry(self) -> bool:
        """Whether a record has at most one expiry entry under these rules (one date space, or
        only the Cosmos default, whose entry is of one kind or the other): then the entry that
        found a record is all it has."""
        return len(self.date_spaces) + (self.cosmos_index is not None) == 1

    @functools.cached_property
    def date_spaces(self) -> tuple[int, ...]:
        """The spaces whose dates have expiry entries: every native TTL index and collection
        rule, on or off (`expiry_keys`)."""
        return tuple([ix.id for ix, _e in self.native] + [r.space for r in self.derived])


NO_RULES = Rules()
_RULES_CACHE: dict[int, tuple[CollectionInfo, Rules]] = {}


def rules_for(coll: CollectionInfo) -> Rules:
    """The TTL rules of a collection (cached per catalog entry)."""
    cached = _RULES_CACHE.get(id(coll))
    if cached is not None and cached[0] is coll:
        return cached[1]
    native = tuple((ix, _seconds(ix)) for ix in coll.indexes if is_native_ttl(ix))
    cosmos_ix = next((ix for ix in coll.indexes if is_cosmos_index(ix)), None)
    derived = collection_rules(coll)
    rules = (
        Rules(native, None if cosmos_ix is None else _seconds(cosmos_ix), cosmos_ix, derived)
        if native or cosmos_ix is not None or derived
        else NO_RULES
    )
    if len(_RULES_CACHE) > 4096:
        _RULES_CACHE.clear()
    _RULES_CACHE[id(coll)] = (coll, rules)
    return rules


def _seconds(ix: IndexInfo) -> int:
    e = ix.expire_after
    assert e is not None
    return e.seconds


def collection_rules(coll: CollectionInfo) -> tuple[CollectionRule, ...]:
    """The TTL rules the collection's options set: a clustered collection's (by the `_id` date)
    or a time series collection's (by the timeField), whether or not expireAfterSeconds is set."""
    options = coll.options
    id_index = coll.index_named("_id_")
    # A view of the collection with only some of its indexes (storage/engine/ddl.py, building new TTL
    # indexes) has no `_id` index, and so none of these rules: their entries are already there.
    if id_index is None or (clustered.OPTION not in options and timeseries.OPTION not in options):
        return ()
    e = None if coll.expire_after is None else coll.expire_after.seconds
    space = id_index.id
    if clustered.OPTION in options:
        return (CollectionRule("clustered", space, e, "_id", clustered.id_date_ms),)
    ts = dict(options[timeseries.OPTION])
    return (
        CollectionRule(
            "timeseries", space, e, ts["timeField"], lambda doc: timeseries.time_ms(ts, doc)
        ),
    )


def valid_doc_ttl(doc: dict[str, Any]) -> int:
    """The document's own root-level `ttl` when Cosmos would honour it: an int32, an int64 that
    fits int32, or a whole double that fits int32, equal to -1 or in 1..2147483647. 0: none."""
    v = doc.get("ttl", MISSING)
    if v is MISSING or isinstance(v, bool):
        return 0
    if isinstance(v, float):
        if not math.isfinite(v) or v != int(v):
            return 0
        n = int(v)
    elif isinstance(v, (int, Int64)):
        n = int(v)
    else:
        return 0
    if n == -1 or 1 <= n <= _INT32_MAX:
        return n
    return 0


def earliest_date(ix: IndexInfo, doc: dict[str, Any]) -> int | None:
    """The earliest BSON date the index's path yields (array elements included), in ms; None when
    it yields none or the index's partial filter rejects the document."""
    pred = ix.partial_predicate
    if pred is not None and not pred(doc):
        return None
    field = ix.key[0][0]
    if "." not in field:
        # The common case: a top-level date (decoded as DatetimeMS), what the walk below finds.
        value = doc.get(field)
        if type(value) is DatetimeMS:
            return int(value)
    best: int | None = None
    for v in leaves(doc, split(ix.key[0][0])):
        if v is MISSING:
            continue
        for item in v if isinstance(v, list) else (v,):
            if rank(item) == RANK_DATE:
                ms = date_ms(item)
                if best is None or ms < best:
                    best = ms
    return best


def meta_for(coll: CollectionInfo, doc: dict[str, Any], modified: int) -> RecordMeta:
    """The header for a document written now (`modified` is the write's time)."""
    rules = rules_for(coll)
    dates = []
    for ix, _e in rules.native:
        d = earliest_date(ix, doc)
        if d is not None:
            dates.append((ix.id, d))
    for rule in rules.derived:
        d = rule.date_of(doc)
        if d is not None:
            dates.append((rule.space, d))
    return RecordMeta(modified, valid_doc_ttl(doc), tuple(dates))


def plain_header(modified: int) -> bytes:
    """The header of a record that no TTL rule can touch and that carries no `ttl` of its own
    (an oplog entry), last modified at `modified`."""
    return _HEAD.pack(RECORD_FORMAT, modified, 0, 0)


def header_for(
    coll: CollectionInfo, doc: dict[str, Any], modified: int, rid_bytes: bytes
) -> tuple[bytes, list[bytes]]:
    """The packed header of a document written now, and its expiry-index entries. Without TTL
    rules there are no dates to find and no entries (the common case, kept cheap)."""
    rules = rules_for(coll)
    if not rules.active and not rules.derived:
        return _HEAD.pack(RECORD_FORMAT, modified, valid_doc_ttl(doc), 0), []
    meta = meta_for(coll, doc, modified)
    return meta.pack(), expiry_keys(coll, meta, rid_bytes)


def expires_at(meta: RecordMeta, rules: Rules) -> int | None:
    """When the document expires under the rules (ms since the epoch), or None: never."""
    best: int | None = None
    if meta.dates:
        dates = dict(meta.dates)
        for space, e_ms in rules.bounds:
            d = dates.get(space)
            if d is not None and (best is None or d + e_ms < best):
                best = d + e_ms
    if rules.cosmos is not None:
        t: int | None
        if meta.ttl > 0:
            t = meta.modified + meta.ttl * 1000
        elif meta.ttl == 0 and rules.cosmos > 0:
            t = meta.modified + rules.cosmos * 1000
        else:
            t = None  # ttl -1, or no ttl under D = -1: never
        if t is not None and (best is None or t < best):
            best = t
    return best


def expired(meta: RecordMeta, rules: Rules, now_ms: int) -> bool:
    """THE expiry predicate: whether a document with this header is expired at `now_ms`."""
    if not rules.active:
        return False
    t = expires_at(meta, rules)
    return t is not None and t <= now_ms


def expired_value(value: bytes, rules: Rules, now_ms: int) -> bool:
    """`expired` on a stored record (header + BSON)."""
    return rules.active and expired(read_meta(value), rules, now_ms)


# -- the expiry index ------------------------------------------------------------------------------
# Keys: space id (8) | kind (1) | time (8, order-preserving) | record id (8). Times that a collMod
# does not move: native entries hold the earliest date (bound: now - E), Cosmos default entries the
# last-modified time (bound: now - D), per-document entries the absolute expiry time (bound: now).

KIND_DATE = 0
KIND_MODIFIED = 1
KIND_ABSOLUTE = 2
_U64 = struct.Struct(">Q")
_SIGN = 1 << 63
_EXPIRY_KEY = struct.Struct(">QBQQ")
_EXPIRY_HEAD = struct.Struct(">QB")


def _time(ms: int) -> bytes:
    return _U64.pack((ms + _SIGN) & ((1 << 64) - 1))


def expiry_prefix(space: int, kind: int) -> bytes:
    return _EXPIRY_HEAD.pack(space, kind)


@dataclass(frozen=True)
class ExpiryEntry:
    """An expiry-index key taken apart: TTL index id, kind, time (ms) and record id."""

    space: int
    kind: int
    time_ms: int
    rid: int


def parse_expiry_key(key: bytes) -> ExpiryEntry:
    space, kind, time, rid = _EXPIRY_KEY.unpack(key)
    return ExpiryEntry(space, kind, time - _SIGN, rid)


def expiry_rid(key: bytes) -> int:
    """The record id an expiry-index entry names."""
    return int(_U64.unpack_from(key, 17)[0])


def expiry_rid_bytes(key: bytes) -> bytes:
    """The record id an expiry-index entry names, as a record key ends with it."""
    return key[17:25]


def expiry_keys(coll: CollectionInfo, meta: RecordMeta, rid_bytes: bytes) -> list[bytes]:
    """The expiry-index entries of one record under the collection's current TTL indexes."""
    rules = rules_for(coll)
    if not rules.active and not rules.derived:
        return []
    out = []
    if meta.dates:
        dates = dict(meta.dates)
        for space in rules.date_spaces:
            d = dates.get(space)
            if d is not None:
                out.append(_EXPIRY_HEAD.pack(space, KIND_DATE) + _time(d) + rid_bytes)
    cosmos = rules.cosmos_index
    if cosmos is not None:
        if meta.ttl == 0:
            out.append(expiry_prefix(cosmos.id, KIND_MODIFIED) + _time(meta.modified) + rid_bytes)
        elif meta.ttl > 0:
            at = meta.modified + meta.ttl * 1000
            out.append(expiry_prefix(cosmos.id, KIND_ABSOLUTE) + _time(at) + rid_bytes)
    return out


def expiry_ranges(rules: Rules, now_ms: int) -> Iterator[tuple[bytes, bytes]]:
    """Key ranges [start, stop) of the expiry index that can hold expired records now."""
    for ix, e in rules.native:
        p = expiry_prefix(ix.id, KIND_DATE)
        yield p, p + _time(now_ms - e * 1000 + 1)
    for rule in rules.derived:
        if rule.seconds is not None:
            p = expiry_prefix(rule.space, KIND_DATE)
            yield p, p + _time(now_ms - rule.seconds * 1000 + 1)
    if rules.cosmos is not None and rules.cosmos_index is not None:
        if rules.cosmos > 0:
            p = expiry_prefix(rules.cosmos_index.id, KIND_MODIFIED)
            yield p, p + _time(now_ms - rules.cosmos * 1000 + 1)
        p = expiry_prefix(rules.cosmos_index.id, KIND_ABSOLUTE)
        yield p, p + _time(now_ms + 1)
