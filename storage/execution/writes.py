"""The storage side of delete, update (with upsert), findAndModify, and insert in slices.

Matching goes through the query engine (QueryRun), so a document expired at `now` is invisible to
writes exactly as to reads; each matched record is read again and re-checked (present, not expired,
still matching) inside the write transaction that changes it. A statement touching many documents
writes in slices of about SLICE_SECONDS or SLICE_DOCUMENTS documents, each one storage write (one
commit when the server runs the statement sliced, see server/gateway.py's write_sliced), as
MongoDB's multi-document writes are not atomic either and yield between documents: each
document's change (document, index entries, oplog entry) is in one slice, and a crash leaves the
slices committed before it, a prefix of the statement in the order it visits the documents.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import bson

from ebbdb.storage.core import interrupt
from ebbdb.storage.core.errors import StorageError
from ebbdb.storage.core.limits import check_update_depth
from ebbdb.storage.engine.store import CODEC, CollectionWrites, Engine, InsertResult
from ebbdb.storage.execution.execute import QueryRun, QuerySpec
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes.planner import id_key, id_point
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.projection import Projection
from ebbdb.storage.query.update import Update, upsert_seed

#: A slice of a statement that changes many documents ends after this long (mongod yields a
#: multi-document write about every 10 ms)...
SLICE_SECONDS = 0.010
#: ... or this many documents (mongod: 1,000), whichever comes first.
SLICE_DOCUMENTS = 1000
#: An insert's slices: at most this many documents or bytes (the insert path is the engine's,
#: not timed here).
INSERT_SLICE_DOCUMENTS = 1000
INSERT_SLICE_BYTES = 1 << 20


@dataclass(frozen=True)
class UpdateResult:
    """`matched` documents matched (and re-checked), `modified` of them changed; `upserted_id` is
    MISSING unless an upsert inserted; `error` stopped the statement after what is counted."""

    matched: int
    modified: int
    upserted_id: Any = MISSING
    error: StorageError | None = None


@dataclass(frozen=True)
class DeleteResult:
    deleted: int


@dataclass(frozen=True)
class FindAndModifyResult:
    """`value` is the document to return (None: none); `matched` is 1 if a document was found
    (or upserted); `updated_existing` says an existing document was updated."""

    value: dict[str, Any] | None
    matched: int
    updated_existing: bool
    upserted_id: Any = MISSING


def _matches(
    engine: Engine, db: str, name: str, spec: QuerySpec, now_ms: int, limit: int
) -> list[int]:
    coll = engine.collection(db, name)
    if coll is None:
        return []
    key = id_key(coll, spec.query, spec.collation) if spec.hint is None else MISSING
    if key is not MISSING:
        # One look-up in the `_id` index (its key under the index's collation, as IDHACK reads
        # it); the caller's re-check applies the whole filter and the expiry rules, as for any
        # candidate.
        with engine.read() as reader:
            rid = reader.find_unique(coll.id_index, key)
        engine.usage.index_used(coll.id_index.id)
        return [] if rid is None else [rid]
    # Every document matches an empty filter: the candidates need no decoding here (each is
    # decoded once, by the re-check that applies the whole filter and the expiry rules).
    match = bool(limit) or bool(spec.query.filter)
    return QueryRun(coll, spec).record_ids(engine, now_ms, limit, match=match)


def _recheck(
    view: CollectionWrites, rid: int, spec: QuerySpec
) -> tuple[bytes, dict[str, Any]] | None:
    """The record as stored now, if it still exists, is not expired and still matches."""
    value = view.get(rid)
    if value is None or view.info is None:
        return None
    if ttl.expired_value(value, ttl.rules_for(view.info), view.now_ms):
        return None
    doc = bson.decode(ttl.body(value), CODEC)
    return (value, doc) if spec.predicate(doc) else None


def slice_end(items: Sequence[Any], start: int) -> Callable[[int], bool]:
    """For a slice starting at `items[start]` (documents, or statements): whether it ends before
    the one at position `i` (time or count used up; never before the first, so that every slice
    goes forward)."""
    stop = min(len(items), start + SLICE_DOCUMENTS)
    deadline = time.perf_counter() + SLICE_SECONDS
    clock = time.perf_counter

    def ends(i: int) -> bool:
        return i >= stop or (i > start and clock() >= deadline)

    return ends


def delete(
    engine: Engine, db: str, name: str, spec: QuerySpec, limit_one: bool, now_ms: int
) -> DeleteResult:
    """Delete the first (`limit_one`) or every document matching `spec` at `now_ms`."""
    deleted = 0
    rids = _matches(engine, db, name, spec, now_ms, 1 if limit_one else 0)
    start = 0
    while start < len(rids):
        # Each slice returns how far it got, never changing what it closes over: the engine may
        # run it again from the start (a fresh transaction) when its group is redone.
        def run(view: CollectionWrites, start: int = start) -> tuple[int, int]:
            n = 0
            tick = interrupt.current.get().tick
            ends = slice_end(rids, start)
            i = start
            while not ends(i):
                tick()
                rid = rids[i]
                i += 1
                found = _recheck(view, rid, spec)
                if found is not None:
                    view.delete(rid, *found)
                    n += 1
            return i, n

        start, n = engine.modify(db, name, run, now_ms)
        deleted += n
    return DeleteResult(deleted)


def _apply(change: Update, doc: dict[str, Any], spec: QuerySpec, now_ms: int) -> dict[str, Any]:
    return change.apply(doc, now_ms=now_ms, query=spec.query)


def _store(
    view: CollectionWrites,
    rid: int,
    value: bytes,
    new_doc: dict[str, Any],
    old_doc: dict[str, Any],
    replacement: bool = False,
    keeps_depth: bool = False,
) -> bool:
    """Write the new version; True if the document changed. An update that changes nothing is
    no modification (nModified counts it out, as MongoDB does), but under a Cosmos default TTL
    it is still a write that refreshes the last-modified time (spec/ttl.md section 2).
    `keeps_depth`: the change cannot nest the document deeper (Update.keeps_depth), so its
    depth, checked when it was stored, needs no new check."""
    if not keeps_depth:
        check_update_depth(new_doc)
    raw = bson.encode(new_doc, codec_options=CODEC)
    changed = raw != ttl.body(value)
    assert view.info is not None
    if changed or ttl.rules_for(view.info).cosmos is not None:
        view.replace(rid, value, raw, new_doc, old_doc, replacement)
    return changed


def _upsert_document(change: Update, spec: QuerySpec, now_ms: int) -> dict[str, Any]:
    """The document an upsert inserts: the query's equality fields under the update, or the
    replacement with the query's `_id`."""
    seed = upsert_seed(spec.query, replacement=change.replacement)
    return change.apply(seed, now_ms=now_ms, inserting=True, query=spec.query)


def _insert(view: CollectionWrites, doc: dict[str, Any]) -> dict[str, Any]:
    return view.insert(bson.encode(doc, codec_options=CODEC))


def update(
    engine: Engine,
    db: str,
    name: str,
    spec: QuerySpec,
    change: Update,
    multi: bool,
    upsert: bool,
    now_ms: int,
    bypass: bool = False,
) -> UpdateResult:
    """Apply `change` to the first (or, with `multi`, every) document matching `spec` at `now_ms`;
    with `upsert` and no match, insert the document the query and update describe. A failure
    (bad operand, duplicate key, too large, refused by the validator unless `bypass`) ends the
    statement; what it already changed stays."""
    matched = modified = 0
    rids = _matches(engine, db, name, spec, now_ms, 0 if multi else 1)
    start = 0
    while start < len(rids):
        # Counts are returned, not accumulated in place: the engine may run `run` again from
        # the start (a fresh transaction) when its group is redone.
        def run(
            view: CollectionWrites, start: int = start
        ) -> tuple[int, int, int, StorageError | None]:
            n = changed = 0
            tick = interrupt.current.get().tick
            ends = slice_end(rids, start)
            i = start
            while not ends(i):
                tick()
                rid = rids[i]
                i += 1
                found = _recheck(view, rid, spec)
                if found is None:
                    continue
                value, doc = found
                try:
                    new_doc = _apply(change, doc, spec, now_ms)
                    wrote = _store(
                        view, rid, value, new_doc, doc, change.replacement, change.keeps_depth
                    )
                except StorageError as exc:
                    return i, n, changed, exc
                n += 1
                changed += wrote
            return i, n, changed, None

        start, n, changed, error = engine.modify(db, name, run, now_ms, bypass)
        matched += n
        modified += changed
        if error is not None:
            return UpdateResult(matched, modified, error=error)
    if matched or not upsert:
        return UpdateResult(matched, modified)

    def insert(view: CollectionWrites) -> Any:
        return _insert(view, _upsert_document(change, spec, now_ms))["_id"]

    try:
        upserted = engine.modify(db, name, insert, now_ms, bypass)
    except StorageError as exc:
        return UpdateResult(0, 0, error=exc)
    return UpdateResult(0, 0, upserted)


def find_and_modify(
    engine: Engine,
    db: str,
    name: str,
    spec: QuerySpec,
    *,
    remove: bool,
    change: Update | None,
    upsert: bool,
    return_new: bool,
    fields: Projection | None,
    now_ms: int,
    bypass: bool = False,
) -> FindAndModifyResult:
    """Remove or update the first document matching `spec` (in its sort order) at `now_ms`, or
    upsert; returns the document before (or, with `return_new`, after) the change, projected by
    `fields`. Raises StorageError for a failing update, a duplicate key or a document the
    collection's validator refuses (unless `bypass`)."""
    shown: Callable[[dict[str, Any] | None], dict[str, Any] | None] = (
        (lambda d: d) if fields is None else (lambda d: None if d is None else fields.apply(d))
    )
    # Re-check can only fail if another writer got between the read and the write; try again.
    for _attempt in range(3):
        rids = _matches(engine, db, name, spec, now_ms, 1)
        if not rids:
            break

        def run(view: CollectionWrites, rid: int = rids[0]) -> FindAndModifyResult | None:
            found = _recheck(view, rid, spec)
            if found is None:
                return None
            value, doc = found
            if remove:
                view.delete(rid, value, doc)
                return FindAndModifyResult(shown(doc), 1, False)
            assert change is not None
            new_doc = _apply(change, doc, spec, now_ms)
            _store(view, rid, value, new_doc, doc, change.replacement)
            return FindAndModifyResult(shown(new_doc if return_new else doc), 1, True)

        result = engine.modify(db, name, run, now_ms, bypass)
        if result is not None:
            return result
    if remove or not upsert or change is None:
        return FindAndModifyResult(None, 0, False)
    upsert_change = change

    def insert(view: CollectionWrites) -> FindAndModifyResult:
        doc = _insert(view, _upsert_document(upsert_change, spec, now_ms))
        return FindAndModifyResult(shown(doc) if return_new else None, 1, False, doc["_id"])

    return engine.modify(db, name, insert, now_ms, bypass)


def insert(
    engine: Engine,
    db: str,
    name: str,
    documents: Sequence[bytes],
    ordered: bool = True,
    now_ms: int | None = None,
    bypass: bool = False,
) -> InsertResult:
    """Engine.insert in slices of at most INSERT_SLICE_DOCUMENTS documents or INSERT_SLICE_BYTES
    (the first document of a slice whatever its size): the same answer, `errors` indexed in the
    whole of `documents`; an ordered insert stops at the slice that failed, an unordered one goes
    on with the next."""
    inserted = 0
    errors: list[tuple[int, StorageError]] = []
    created = False
    for start, stop in insert_slices(documents, 0, len(documents)):
        part = engine.insert(db, name, documents[start:stop], ordered, now_ms, bypass)
        inserted += part.inserted
        errors += [(start + i, exc) for i, exc in part.errors]
        created = created or part.created_collection
        if ordered and part.errors:
            break
    return InsertResult(inserted, tuple(errors), created)


def one_insert_slice(documents: Sequence[bytes]) -> bool:
    """Whether `documents` make one insert slice (see insert_slices)."""
    return (
        len(documents) <= INSERT_SLICE_DOCUMENTS and sum(map(len, documents)) <= INSERT_SLICE_BYTES
    )


def insert_slices(documents: Sequence[bytes], start: int, stop: int) -> Iterator[tuple[int, int]]:
    """documents[start:stop] cut into an insert's slices, as (start, stop) pairs: at most
    INSERT_SLICE_DOCUMENTS documents or INSERT_SLICE_BYTES (a slice's first whatever its size)."""
    while start < stop:
        end, size = start + 1, len(documents[start])
        limit = min(stop, start + INSERT_SLICE_DOCUMENTS)
        while end < limit and size + len(documents[end]) <= INSERT_SLICE_BYTES:
            size += len(documents[end])
            end += 1
        yield start, end
        start = end


__all__ = [
    "DeleteResult",
    "FindAndModifyResult",
    "id_point",
    "UpdateResult",
    "delete",
    "find_and_modify",
    "insert",
    "insert_slices",
    "one_insert_slice",
    "slice_end",
    "update",
]
