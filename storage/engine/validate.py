"""The `validate` check of one collection: its records, its index entries and its expiry entries
agree both ways (every entry names a record whose document gives it, every document has all its
entries), and its statistics match its records. Read-only, in one read transaction."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import bson

from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import NamespaceNotFound, QueryError, StorageError
from ebbdb.storage.engine import layout
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes import keys
from ebbdb.storage.indexes.entries import index_bodies
from ebbdb.storage.indexes.specs import parse_index_spec
from ebbdb.storage.query import compare as cmp

#: How many missing and how many extra entries a result lists (all are counted). MongoDB caps the
#: lists by size (1 MB); a count is simpler and as useful for finding what went wrong.
MAX_LISTED = 1000
#: Past every key body of an index (keys are at most keys.MAX_KEY bytes, prefix included).
_PAST_EVERY_BODY = b"\xff" * keys.MAX_KEY
#: Names of the expiry-entry kinds (storage/expiry/ttl.py), as results show them.
EXPIRY_KINDS = {
    ttl.KIND_DATE: "date",
    ttl.KIND_MODIFIED: "lastModified",
    ttl.KIND_ABSOLUTE: "expiresAt",
}


class Reader(Protocol):
    """The reads validate makes (storage.engine's Reader): nothing else of the engine is used."""

    def scan(self, coll: CollectionInfo) -> Iterator[tuple[int, bytes]]: ...

    def record(self, coll: CollectionInfo, rid: int) -> bytes | None: ...

    def index_entries(
        self, index: IndexInfo, lo: bytes, hi: bytes, reverse: bool, after: bytes | None
    ) -> Iterator[tuple[bytes, int]]: ...

    def expiry_entries(self, start: bytes, stop: bytes) -> Iterator[int]: ...

    def stats(self, coll: CollectionInfo) -> tuple[int, int]: ...


class Engine(Protocol):
    """What validate needs of storage.engine's Engine: the catalog and a read transaction."""

    def collection(self, db: str, name: str) -> CollectionInfo | None: ...

    def read(self) -> AbstractContextManager[Reader]: ...


#: How often the check starts over when the collection's indexes change under it.
_ATTEMPTS = 3


@dataclass(frozen=True)
class IndexResult:
    """One index: how many entries it holds (for a Cosmos `_ts` TTL index, which has no key
    entries, its expiry entries) and what is wrong with it."""

    name: str
    keys: int
    errors: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class Inconsistency:
    """One entry that a document needs but the index lacks (missing) or that the index holds but
    no document gives (extra). `key` is ((field, value), ...) when the key could be decoded;
    `key_bytes` is the stored key body. Expiry-index entries carry their `expiry` kind instead, and
    the time when it is known (missing ones)."""

    index: str
    record_id: int
    key: tuple[tuple[str, Any], ...] | None = None
    key_bytes: bytes = b""
    #: The document's `_id` (missing entries: the document is known).
    doc_id: Any = None
    has_doc_id: bool = False
    expiry: str | None = None
    expiry_ms: int | None = None


@dataclass(frozen=True)
class ValidateResult:
    """What validate found. `records` is None for a metadata-only check (no scan). Counts of
    missing and extra entries are in `warnings`; `missing` and `extra` list up to MAX_LISTED."""

    ns: str
    uuid: Any
    records: int | None
    invalid_documents: int
    indexes: tuple[IndexResult, ...]
    warnings: tuple[str, ...]
    errors: tuple[str, ...]
    extra: tuple[Inconsistency, ...] = ()
    missing: tuple[Inconsistency, ...] = ()
    corrupt_records: tuple[int, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.errors


def validate_collection(
    engine: Engine, coll: CollectionInfo, full: bool, enforce_fast_count: bool = False
) -> ValidateResult:
    """Check a collection in one read transaction (see the module docstring). `full` also checks
    each record header's expiry facts against its document. A count that differs from the
    collection's statistics is a warning (MongoDB corrects it silently; a read cannot), an error
    with `enforce_fast_count`. Raises NamespaceNotFound if the collection is gone.

    Cost: one pass over the records, one point read per entry a document needs, one pass over each
    index; an index whose entry count differs from what its documents found is walked once more,
    entry by entry, to name the extra entries. Memory does not grow with the collection (only
    naming the extra entries of a damaged TTL index keeps the record ids of one entry kind)."""
    result: ValidateResult | None = None
    for _attempt in range(_ATTEMPTS):
        current = engine.collection(coll.db, coll.name)
        if current is None:
            raise NamespaceNotFound(f"Collection '{coll.ns}' does not exist to validate.")
        with engine.read() as reader:
            result = _Check(reader, current, full, enforce_fast_count).run()
        # The catalog may change between reading it and opening the snapshot (an index created or
        # dropped): entries would then look missing or extra. Check against the catalog again.
        after = engine.collection(coll.db, coll.name)
        if after is not None and _shape(after) == _shape(current):
            return result
    assert result is not None
    note = "The collection's indexes changed while it was validated; run validate again."
    return replace(result, warnings=(*result.warnings, note))


def validate_metadata(coll: CollectionInfo) -> ValidateResult:
    """validate's `metadata: true`: only the catalog entry (index specifications, the `_id` index,
    TTL rules), no scan."""
    errors: list[str] = []
    if coll.index_named("_id_") is None:
        errors.append(f"Collection '{coll.ns}' has no _id index.")
    for ix in coll.indexes:
        try:
            parse_index_spec({k: v for k, v in ix.spec().items() if k != "v"})
        except StorageError as exc:
            errors.append(f"The index specification for index '{ix.name}' is not valid: {exc}")
    if sum(map(ttl.is_cosmos_index, coll.indexes)) > 1:
        errors.append(f"Collection '{coll.ns}' has more than one TTL index on _ts.")
    return ValidateResult(coll.ns, coll.uuid, None, 0, (), (), tuple(errors))


def _shape(coll: CollectionInfo) -> tuple[Any, ...]:
    """What the check depends on: the collection, its indexes and which of them are TTL indexes."""
    return (coll.id, tuple((ix.id, ix.expire_after is not None) for ix in coll.indexes))


@dataclass
class _Problem:
    """A problem many records may share: counted, reported once with the first record id."""

    count: int = 0
    first: int = 0
    detail: str = ""

    def add(self, rid: int, detail: str = "") -> None:
        if not self.count:
            self.first, self.detail = rid, detail
        self.count += 1


@dataclass
class _IndexState:
    ix: IndexInfo
    prefix: bytes
    found: int = 0
    missing: int = 0
    extra: int = 0
    unindexable: _Problem = field(default_factory=_Problem)
    unflagged_multikey: _Problem = field(default_factory=_Problem)
    unflagged_long_key: _Problem = field(default_factory=_Problem)
    header_date: _Problem = field(default_factory=_Problem)

    def errors(self) -> list[str]:
        name = self.ix.name
        out = []
        if self.missing or self.extra:
            out.append(f"Index with name '{name}' has inconsistencies.")  # MongoDB's words
        p = self.unindexable
        if p.count:
            out.append(
                f"{_records(p)} cannot be indexed by '{name}' (first: RecordId {p.first}: "
                f"{p.detail})"
            )
        # The planner trusts these flags (index bounds, sorts), so a document the flag does not
        # cover is an error, not something to fix quietly.
        p = self.unflagged_multikey
        if p.count:
            out.append(
                f"Index '{name}' is not marked multikey but {_records(p)} give it arrays "
                f"(first: RecordId {p.first})"
            )
        p = self.unflagged_long_key
        if p.count:
            out.append(
                f"Index '{name}' is not marked as holding shortened keys but {_records(p)} give it "
                f"keys too long for LMDB (first: RecordId {p.first})"
            )
        p = self.header_date
        if p.count:
            out.append(
                f"The expiry date kept in the header of {_records(p)} for index '{name}' is not "
                f"the one the document gives (first: RecordId {p.first}: {p.detail})"
            )
        return out


def _records(p: _Problem) -> str:
    return "1 document" if p.count == 1 else f"{p.count} documents"


@dataclass
class _SpaceState:
    """The expiry entries of one TTL index (its "space" in the expiry index)."""

    ix: IndexInfo
    found: int = 0
    missing: int = 0
    extra: int = 0
    actual: int = 0


class _Check:
    """One validation over one read snapshot."""

    def __init__(
        self, reader: Reader, coll: CollectionInfo, full: bool, enforce_fast_count: bool
    ) -> None:
        self.r = reader
        self.coll = coll
        self.full = full
        self.enforce_fast_count = enforce_fast_count
        self.indexes = {ix.id: _IndexState(ix, layout.index_prefix(ix.id)) for ix in coll.indexes}
        self.rules = ttl.rules_for(coll)
        ttl_indexes = [ix for ix, _e in self.rules.native]
        if self.rules.cosmos_index is not None:
            ttl_indexes.append(self.rules.cosmos_index)
        if self.rules.derived:  # a clustered or time series collection's dates: the `_id` index's
            ttl_indexes.append(coll.id_index)
        self.spaces = {ix.id: _SpaceState(ix) for ix in ttl_indexes}
        self.missing: list[Inconsistency] = []
        self.extra: list[Inconsistency] = []
        self.corrupt: dict[int, None] = {}
        self.invalid_documents = 0
        self.header_ttl = _Problem()

    def run(self) -> ValidateResult:
        records = size = 0
        for rid, value in self.r.scan(self.coll):
            records += 1
            rid_bytes = layout.u64(rid)
            meta = _read_meta(value)
            doc = _read_document(value)
            if meta is None or doc is None:
                self.invalid_documents += 1
                self.corrupt[rid] = None
            if doc is not None:
                size += len(value) - ttl.body_offset(value)
                for state in self.indexes.values():
                    self._check_entries_of(state, rid, rid_bytes, doc)
            if meta is not None:
                self._check_expiry_of(rid, rid_bytes, meta, doc)
                if self.full and doc is not None:
                    self._check_header(rid, meta, doc)
        counts = {ix_id: self._walk_index(state) for ix_id, state in self.indexes.items()}
        for space in self.spaces.values():
            self._walk_expiry(space)
        return self._result(records, size, counts)

    # -- what each record needs --------------------------------------------------------------------

    def _check_entries_of(
        self, state: _IndexState, rid: int, rid_bytes: bytes, doc: dict[str, Any]
    ) -> None:
        ix = state.ix
        try:
            bodies, multikey = index_bodies(ix, doc)
        except QueryError as exc:
            state.unindexable.add(rid, exc.message)
            return
        if multikey and not ix.multikey:
            state.unflagged_multikey.add(rid)
        for body, values in bodies:
            if ix.unique:
                key, shortened = keys.fit(state.prefix, body)
            else:
                key, shortened = keys.fit(state.prefix, body, rid_bytes)
            if shortened and not ix.long_keys:
                state.unflagged_long_key.add(rid)
            if self._has_entry(ix, key, rid):
                state.found += 1
                continue
            state.missing += 1
            if len(self.missing) < MAX_LISTED:
                key_values = tuple((f, _shown(values[f])) for f in ix.fields)
                self.missing.append(
                    Inconsistency(ix.name, rid, key_values, body, doc.get("_id"), True)
                )

    def _has_entry(self, ix: IndexInfo, key: bytes, rid: int) -> bool:
        """Whether the index holds exactly this entry key, naming this record (a point read: the
        range [key, key + 00) holds that key and nothing else)."""
        rest = layout.entry_body(key)
        for k, holder in self.r.index_entries(ix, rest, rest + b"\x00", False, None):
            return k == key and holder == rid
        return False

    def _check_expiry_of(
        self, rid: int, rid_bytes: bytes, meta: ttl.RecordMeta, doc: dict[str, Any] | None
    ) -> None:
        """The expiry entries the record's header asks for are there."""
        for key in ttl.expiry_keys(self.coll, meta, rid_bytes):
            entry = ttl.parse_expiry_key(key)
            space = self.spaces[entry.space]
            if self._has_expiry_entry(key):
                space.found += 1
                continue
            space.missing += 1
            if len(self.missing) < MAX_LISTED:
                self.missing.append(
                    Inconsistency(
                        space.ix.name,
                        rid,
                        doc_id=None if doc is None else doc.get("_id"),
                        has_doc_id=doc is not None,
                        expiry=_kind_name(entry.kind),
                        expiry_ms=entry.time_ms,
                    )
                )

    def _has_expiry_entry(self, key: bytes) -> bool:
        return any(True for _ in self.r.expiry_entries(key, key + b"\x00"))

    def _check_header(self, rid: int, meta: ttl.RecordMeta, doc: dict[str, Any]) -> None:
        """`full`: the expiry facts the record's header keeps are the ones its document gives."""
        bad = False
        doc_ttl = ttl.valid_doc_ttl(doc)
        if meta.ttl != doc_ttl:
            bad = True
            self.header_ttl.add(rid, f"header {meta.ttl}, document {doc_ttl}")
        dates = dict(meta.dates)
        for ix, _e in self.rules.native:
            kept, given = dates.get(ix.id), ttl.earliest_date(ix, doc)
            if kept != given:
                bad = True
                self.indexes[ix.id].header_date.add(rid, f"header {kept}, document {given}")
        for rule in self.rules.derived:
            kept, given = dates.get(rule.space), rule.date_of(doc)
            if kept != given:
                bad = True
                self.indexes[rule.space].header_date.add(rid, f"header {kept}, document {given}")
        if bad:
            self.corrupt[rid] = None

    # -- what each index and expiry space holds ----------------------------------------------------

    def _walk_index(self, state: _IndexState) -> int:
        """Count the index's entries. When there are more than the documents found, walk them again
        and name the extra ones: those that their record does not give."""
        ix = state.ix
        count = sum(1 for _ in self.r.index_entries(ix, b"", _PAST_EVERY_BODY, False, None))
        if count == state.found:
            return count
        last: tuple[int, frozenset[bytes] | None] = (-1, None)
        for key, rid in self.r.index_entries(ix, b"", _PAST_EVERY_BODY, False, None):
            if last[0] != rid:
                last = (rid, self._keys_of(ix, state.prefix, rid))
            given = last[1]
            if given is None or key in given:
                continue  # a record that cannot be read cannot be judged; it is reported already
            state.extra += 1
            if len(self.extra) < MAX_LISTED:
                body = key[8:] if ix.unique else key[8:-8]
                self.extra.append(Inconsistency(ix.name, rid, _decode_key(ix, body), body))
        return count

    def _keys_of(self, ix: IndexInfo, prefix: bytes, rid: int) -> frozenset[bytes] | None:
        """The entry keys a record gives an index: none if there is no such record, None if its
        document cannot be read or indexed."""
        value = self.r.record(self.coll, rid)
        if value is None:
            return frozenset()
        doc = _read_document(value)
        if doc is None:
            return None
        try:
            bodies, _multikey = index_bodies(ix, doc)
        except QueryError:
            return None
        if ix.unique:
            return frozenset(keys.fit(prefix, body)[0] for body, _v in bodies)
        rid_bytes = layout.u64(rid)
        return frozenset(keys.fit(prefix, body, rid_bytes)[0] for body, _v in bodies)

    def _walk_expiry(self, space: _SpaceState) -> None:
        """Count a TTL index's expiry entries. When there are more than the records found, name the
        extra ones by record id and kind (the reader gives their record ids, not their times)."""
        start, stop = layout.index_prefix(space.ix.id), layout.index_prefix(space.ix.id + 1)
        space.actual = sum(1 for _ in self.r.expiry_entries(start, stop))
        if space.actual == space.found:
            return
        for kind in range(256):
            prefix = ttl.expiry_prefix(space.ix.id, kind)
            matched: set[int] = set()
            for rid in self.r.expiry_entries(prefix, prefix + _PAST_EVERY_BODY):
                # A record has at most one entry of a kind under one TTL index: the first that is
                # the one its header asks for is right, any other is extra.
                wanted = self._expiry_key_of(space, kind, rid)
                if wanted is None:
                    continue  # a header that cannot be read cannot be judged
                if rid not in matched and wanted and self._has_expiry_entry(wanted):
                    matched.add(rid)
                    continue
                space.extra += 1
                if len(self.extra) < MAX_LISTED:
                    self.extra.append(Inconsistency(space.ix.name, rid, expiry=_kind_name(kind)))

    def _expiry_key_of(self, space: _SpaceState, kind: int, rid: int) -> bytes | None:
        """The expiry key of this kind under this TTL index that the record's header asks for:
        b"" if none (or no such record), None if the header cannot be read."""
        value = self.r.record(self.coll, rid)
        if value is None:
            return b""
        meta = _read_meta(value)
        if meta is None:
            return None
        for key in ttl.expiry_keys(self.coll, meta, layout.u64(rid)):
            entry = ttl.parse_expiry_key(key)
            if entry.space == space.ix.id and entry.kind == kind:
                return key
        return b""

    # -- the result --------------------------------------------------------------------------------

    def _result(self, records: int, size: int, counts: dict[int, int]) -> ValidateResult:
        ns = self.coll.ns
        errors: list[str] = []
        warnings: list[str] = []
        if self.invalid_documents:
            errors.append("Detected one or more invalid documents.")  # MongoDB's words
        p = self.header_ttl
        if p.count:
            errors.append(
                f"The ttl kept in the header of {_records(p)} is not the one the document gives "
                f"(first: RecordId {p.first}: {p.detail})"
            )
        count, data_size = self.r.stats(self.coll)
        if count != records:
            # MongoDB's words. It corrects a wrong count quietly unless asked to enforce it; a read
            # cannot correct, so it is a warning here.
            message = (
                f"fast count ({count}) does not match number of records ({records}) for "
                f"collection '{ns}'"
            )
            (errors if self.enforce_fast_count else warnings).append(message)
        if data_size != size:
            warnings.append(
                f"data size ({data_size}) does not match the size of the documents ({size}) for "
                f"collection '{ns}'"
            )
        results = []
        for ix_id, state in self.indexes.items():
            index_errors = state.errors()
            space = self.spaces.get(ix_id)
            keys_count = counts[ix_id]
            if space is not None:
                if (space.missing or space.extra) and not (state.missing or state.extra):
                    index_errors.insert(
                        0, f"Index with name '{state.ix.name}' has inconsistencies."
                    )
                if ttl.is_cosmos_index(state.ix):
                    keys_count = space.actual  # its keys are its expiry entries
            results.append(IndexResult(state.ix.name, keys_count, tuple(index_errors)))
            # As MongoDB does, an index's errors are also the collection's.
            errors.extend(index_errors)
        missing = sum(s.missing for s in self.indexes.values())
        extra = sum(s.extra for s in self.indexes.values())
        missing_expiry = sum(s.missing for s in self.spaces.values())
        extra_expiry = sum(s.extra for s in self.spaces.values())
        # MongoDB reports the counts as warnings; the index errors make the collection invalid.
        for n, what in (
            (missing, "missing index entries"),
            (extra, "extra index entries"),
            (missing_expiry, "missing expiry entries"),
            (extra_expiry, "extra expiry entries"),
        ):
            if n:
                warnings.append(f"Detected {n} {what}.")
        if missing + missing_expiry > len(self.missing):
            errors.append(
                "Not all missing index entry inconsistencies are listed due to size limitations."
            )
        if extra + extra_expiry > len(self.extra):
            errors.append(
                "Not all extra index entry inconsistencies are listed due to size limitations."
            )
        return ValidateResult(
            ns,
            self.coll.uuid,
            records,
            self.invalid_documents,
            tuple(results),
            tuple(warnings),
            tuple(errors),
            tuple(self.extra),
            tuple(self.missing),
            tuple(self.corrupt)[:MAX_LISTED],
        )


def _read_meta(value: bytes) -> ttl.RecordMeta | None:
    try:
        return ttl.read_meta(value)
    except Exception:  # struct raises for a header cut short
        return None


def _read_document(value: bytes) -> dict[str, Any] | None:
    try:
        return bson.decode(ttl.body(value), CODEC)
    except Exception:  # bson raises several types for corrupt input
        return None


def _kind_name(kind: int) -> str:
    return EXPIRY_KINDS.get(kind, f"kind {kind}")


def _shown(value: Any) -> Any:
    """A key value as a reply can hold it (an empty array's key is BSON undefined: null)."""
    return None if value is cmp.UNDEFINED else value


# -- reading a key body back -----------------------------------------------------------------------
# Only to show an extra entry's values. Whatever is decoded is re-encoded and compared with the
# stored body, so a key that does not decode exactly (a shortened long key) is shown as bytes.


def _decode_key(ix: IndexInfo, body: bytes) -> tuple[tuple[str, Any], ...] | None:
    values: list[Any] = []
    i = 0
    try:
        for d in ix.directions:
            rest = body[i:] if d >= 0 else bytes(b ^ 0xFF for b in body[i:])
            value, used = keys.decode(rest)
            values.append(value)
            i += used
    except ValueError:
        return None
    if i != len(body) or keys.encode_compound(tuple(values), ix.directions) != body:
        return None
    return tuple((f, _shown(v)) for f, v in zip(ix.fields, values))
