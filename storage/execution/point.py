"""Point operations by `_id` (the storage side of the server's express path): reading, updating,
deleting and finding-and-modifying the one document an `_id` equality names, without parsing a filter or planning.

The caller vouches that the `_id` value is one whose `_id` index key equality is the query's
equality (no collation, no array, no document, no regular expression, no null): the index look-up
then is the whole match, as MongoDB's IDHACK and express path read it. The writes reuse the
general path's helpers (storage/execution/writes.py), so a document changes exactly as there."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import bson

from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.core import interrupt
from ebbdb.storage.core.errors import StorageError
from ebbdb.storage.engine.store import CODEC, CollectionWrites, Engine
from ebbdb.storage.execution.writes import (
    DeleteResult,
    FindAndModifyResult,
    UpdateResult,
    _store,
    slice_end,
)
from ebbdb.storage.expiry import ttl
from ebbdb.storage.indexes import keys
from ebbdb.storage.query.update import Update, parse_update


def locate(engine: Engine, coll: CollectionInfo, value: Any) -> int | None:
    """The record id of the document whose `_id` is `value` (None: none), counted as a use of
    the `_id` index as the general path's look-up is."""
    with engine.read() as reader:
        found = reader.unique_entry(coll.id_index, keys.encode(value))
    engine.usage.index_used(coll.id_index.id)
    return None if found is None else found[1]


def read(engine: Engine, coll: CollectionInfo, value: Any, now_ms: int) -> bytes | None:
    """The stored BSON of the document whose `_id` is `value`, unless none is or it is expired at
    `now_ms` (hidden as from every read)."""
    with engine.read() as reader:
        found = reader.unique_entry(coll.id_index, keys.encode(value))
        stored = None if found is None else reader.record(coll, found[1])
    engine.usage.index_used(coll.id_index.id)
    if stored is None:
        return None
    rules = ttl.rules_for(coll)
    if rules.active and ttl.expired_value(stored, rules, now_ms):
        return None
    return ttl.body(stored)


def _current(view: CollectionWrites, rid: int) -> tuple[bytes, dict[str, Any]] | None:
    """The record as stored now, unless gone or expired (writes.py's re-check, whose filter
    re-check the `_id` look-up makes moot: `_id` never changes)."""
    value = view.get(rid)
    if value is None or view.info is None:
        return None
    if ttl.expired_value(value, ttl.rules_for(view.info), view.now_ms):
        return None
    return value, bson.decode(ttl.body(value), CODEC)


def update(
    engine: Engine,
    coll: CollectionInfo,
    statements: Sequence[tuple[Any, dict[str, Any]]],
    now_ms: int,
    bypass: bool,
    ordered: bool,
) -> list[UpdateResult]:
    """Apply each `(id value, update document of operators)` to the document with that `_id`, in
    slices of statements (writes.slice_end: about a slice's time, each slice one write
    transaction; on a slicer thread each is a writer job of its own, so that other writes go
    between). Each statement's change is whole or absent, as in the general path, which also
    keeps what a statement wrote before it failed; an ordered batch stops after the first
    failure, a malformed update document included (parsed here, off the event loop, as the
    general path parses it in its job). One result per statement run."""
    out: list[UpdateResult] = []
    while len(out) < len(statements):
        start = len(out)
        ends = slice_end(statements, start)

        # The slice returns what it did rather than adding to `out`: the writer may run it
        # again from its start (a fresh transaction).
        def run(
            view: CollectionWrites, start: int = start, ends: Callable[[int], bool] = ends
        ) -> tuple[list[UpdateResult], bool]:
            done: list[UpdateResult] = []
            tick = interrupt.current.get().tick
            for i in range(start, len(statements)):
                if ends(i):
                    break
                tick()
                result = _update_one(engine, coll, view, statements[i], now_ms)
                done.append(result)
                if ordered and result.error is not None:
                    return done, True
            return done, False

        try:
            done, stopped = engine.modify(coll.db, coll.name, run, now_ms, bypass)
        except StorageError:
            # The transaction itself failed (no room on disk): the slice's first statement
            # again alone, so that the error is that statement's, as in the general path, where
            # each statement is a write of its own.
            done = [_update_alone(engine, coll, statements[start], now_ms, bypass)]
            stopped = ordered and done[0].error is not None
        out += done
        if stopped:
            break
    return out


def _update_alone(
    engine: Engine,
    coll: CollectionInfo,
    statement: tuple[Any, dict[str, Any]],
    now_ms: int,
    bypass: bool,
) -> UpdateResult:
    def run(view: CollectionWrites) -> UpdateResult:
        return _update_one(engine, coll, view, statement, now_ms)

    try:
        return engine.modify(coll.db, coll.name, run, now_ms, bypass)
    except StorageError as exc:
        return UpdateResult(0, 0, error=exc)


def _update_one(
    engine: Engine,
    coll: CollectionInfo,
    view: CollectionWrites,
    statement: tuple[Any, dict[str, Any]],
    now_ms: int,
) -> UpdateResult:
    value, u = statement
    try:
        change = parse_update(u)
    except StorageError as exc:
        return UpdateResult(0, 0, error=exc)
    rid = locate(engine, coll, value)
    found = None if rid is None else _current(view, rid)
    if rid is None or found is None:
        return UpdateResult(0, 0)
    stored, doc = found
    try:
        new_doc = change.apply(doc, now_ms=now_ms)
        wrote = _store(view, rid, stored, new_doc, doc, change.replacement)
    except StorageError as exc:
        return UpdateResult(0, 0, error=exc)
    return UpdateResult(1, int(wrote))


def find_and_modify(
    engine: Engine,
    coll: CollectionInfo,
    value: Any,
    change: Update | None,
    return_new: bool,
    now_ms: int,
    bypass: bool,
) -> FindAndModifyResult:
    """Remove (`change` None) or update the document whose `_id` is `value`, unless none is or it
    is expired; returns it before (or, with `return_new`, after) the change, as
    writes.find_and_modify does. Raises StorageError as that does."""
    rid = locate(engine, coll, value)
    if rid is None:
        return FindAndModifyResult(None, 0, False)

    def run(view: CollectionWrites) -> FindAndModifyResult:
        found = _current(view, rid)
        if found is None:
            return FindAndModifyResult(None, 0, False)
        stored, doc = found
        if change is None:
            view.delete(rid, stored)
            return FindAndModifyResult(doc, 1, False)
        new_doc = change.apply(doc, now_ms=now_ms)
        _store(view, rid, stored, new_doc, doc, change.replacement)
        return FindAndModifyResult(new_doc if return_new else doc, 1, True)

    return engine.modify(coll.db, coll.name, run, now_ms, bypass)


def delete(engine: Engine, coll: CollectionInfo, value: Any, now_ms: int) -> DeleteResult:
    """Delete the document whose `_id` is `value`, unless none is or it is expired."""
    rid = locate(engine, coll, value)
    if rid is None:
        return DeleteResult(0)

    def run(view: CollectionWrites) -> int:
        found = _current(view, rid)
        if found is None:
            return 0
        view.delete(rid, found[0])
        return 1

    return DeleteResult(engine.modify(coll.db, coll.name, run, now_ms))


__all__ = ["delete", "find_and_modify", "locate", "read", "update"]
