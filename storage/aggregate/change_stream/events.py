"""Oplog entries -> change events of MongoDB 7.0's shape, for one stream's scope: CRUD events
(insert, update with its updateDescription from the entry's v2 diff, replace, delete), DDL
events (drop, rename, dropDatabase, and with showExpandedEvents create, createIndexes,
dropIndexes, modify), invalidate where the stream ends, and a transaction's applyOps entry as
its ops' events, each with the transaction's lsid and txnNumber. Pure: documents the stream must
look up (updateLookup, pre-images) are named on the event, the server fetches them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from bson import Binary, Timestamp

from ebbdb.storage.aggregate.change_stream.spec import INTERNAL_DBS, Scope
from ebbdb.storage.aggregate.change_stream.tokens import Position, TokenData, encode
from ebbdb.storage.core.errors import QueryError

#: The kinds of event that end a stream of each scope (after the event, an invalidate).
_INVALIDATES = {
    "collection": ("drop", "rename", "dropDatabase"),
    "database": ("dropDatabase",),
    "cluster": (),
}
#: DDL events shown only with showExpandedEvents.
EXPANDED = frozenset(("create", "createIndexes", "dropIndexes", "modify"))


@dataclass
class Event:
    """One event: its place in the oplog, its document (`_id` is its token) and what the stream
    may have to look up for it: the collection (`ns`, `ui`) and the entry's post-change document
    where the oplog holds one (`post`: insert, replace) or its diff (`diff`: update)."""

    position: Position
    doc: dict[str, Any]
    op: str
    ns: tuple[str, str] | None = None
    ui: Binary | None = None
    document_key: dict[str, Any] | None = None
    post: dict[str, Any] | None = None
    diff: dict[str, Any] | None = None
    #: The event ends the stream (an invalidate).
    ends: bool = False


def events_of(entry: Mapping[str, Any], scope: Scope, expanded: bool) -> Iterator[Event]:
    """The events one oplog entry makes for a stream of `scope`, in order (an invalidate right
    after the event that causes it)."""
    ts: Timestamp = entry["ts"]
    op = entry.get("op")
    o = entry.get("o")
    if op == "c" and isinstance(o, Mapping) and "applyOps" in o:
        txn = {k: entry[k] for k in ("lsid", "txnNumber") if k in entry}
        for index, inner in enumerate(o["applyOps"]):
            merged = dict(inner)
            merged.setdefault("wall", entry.get("wall"))
            yield from _events(merged, ts, index, txn, scope, expanded)
        return
    txn = {k: entry[k] for k in ("lsid", "txnNumber") if k in entry}
    yield from _events(entry, ts, 0, txn, scope, expanded)


def _split(ns: str) -> tuple[str, str]:
    db, _, coll = ns.partition(".")
    return db, coll


def _sees_db(scope: Scope, db: str) -> bool:
    return db not in INTERNAL_DBS if scope.db is None else db == scope.db


def _sees(scope: Scope, db: str, coll: str) -> bool:
    if not _sees_db(scope, db):
        return False
    if scope.coll is not None:
        return coll == scope.coll
    return not coll.startswith("system.")


def _events(
    entry: Mapping[str, Any],
    ts: Timestamp,
    index: int,
    txn: dict[str, Any],
    scope: Scope,
    expanded: bool,
) -> Iterator[Event]:
    op = entry.get("op")
    ns = entry.get("ns", "")
    if not isinstance(ns, str):
        return
    ui = entry.get("ui")
    o = entry.get("o") or {}
    o2 = entry.get("o2")
    db, coll = _split(ns)
    if op in ("i", "u", "d"):
        if not _sees(scope, db, coll):
            return
        if op == "i":
            kind, key = "insert", dict(o2) if o2 else {"_id": o.get("_id")}
        elif op == "d":
            kind, key = "delete", {"_id": o.get("_id")}
        else:
            kind = "update" if "$v" in o or "diff" in o else "replace"
            key = dict(o2) if o2 else {"_id": o.get("_id")}
        yield _crud(entry, ts, index, txn, kind, (db, coll), ui, key, expanded)
        return
    if op != "c" or coll != "$cmd" or not isinstance(o, Mapping) or not o:
        return  # "n" (no-op) entries and anything else make no event
    command = next(iter(o))
    target = o[command]
    if command == "drop":
        yield from _ddl(entry, ts, index, txn, scope, expanded, "drop", db, str(target), ui, {})
    elif command == "renameCollection":
        from_db, from_coll = _split(str(target))
        to_db, to_coll = _split(str(o.get("to", "")))
        sees_from = _sees(scope, from_db, from_coll)
        sees_to = scope.coll is None and _sees(scope, to_db, to_coll)
        if not (sees_from or sees_to):
            return
        to = {"db": to_db, "coll": to_coll}
        description: dict[str, Any] = {"to": to}
        if isinstance(o.get("dropTarget"), Binary):
            description["dropTarget"] = o["dropTarget"]
        extra = {"to": to, "operationDescription": description} if expanded else {"to": to}
        yield from _ddl(
            entry, ts, index, txn, scope, expanded, "rename", from_db, from_coll, ui, extra, True
        )
    elif command == "dropDatabase":
        # A collection's stream sees the drop of its collection logged just before (and ends).
        if scope.coll is not None or not _sees_db(scope, db):
            return
        yield from _ddl(entry, ts, index, txn, scope, expanded, "dropDatabase", db, None, None, {})
    elif expanded and command in ("create", "createIndexes", "dropIndexes", "collMod"):
        name = str(target)
        if command == "create":
            kind, description = "create", {k: v for k, v in o.items() if k != "create"}
        elif command == "createIndexes":
            spec = {k: v for k, v in o.items() if k != "createIndexes"}
            kind, description = "createIndexes", {"indexes": [spec]}
        elif command == "dropIndexes":
            spec = dict(o2) if isinstance(o2, Mapping) else {"name": o.get("index")}
            kind, description = "dropIndexes", {"indexes": [spec]}
        else:
            kind, description = "modify", {k: v for k, v in o.items() if k != "collMod"}
        extra = {"operationDescription": description}
        yield from _ddl(entry, ts, index, txn, scope, expanded, kind, db, name, ui, extra)


def _head(
    entry: Mapping[str, Any],
    ts: Timestamp,
    index: int,
    kind: str,
    ui: Any,
    event_id: dict[str, Any],
    expanded: bool,
) -> dict[str, Any]:
    uuid = ui if isinstance(ui, Binary) else None
    token = encode(TokenData(ts, txn_op_index=index, uuid=uuid, event_id=event_id))
    doc: dict[str, Any] = {"_id": token, "operationType": kind, "clusterTime": ts}
    if entry.get("wall") is not None:
        doc["wallTime"] = entry["wall"]
    if expanded and uuid is not None:
        doc["collectionUUID"] = uuid
    return doc


def _crud(
    entry: Mapping[str, Any],
    ts: Timestamp,
    index: int,
    txn: dict[str, Any],
    kind: str,
    ns: tuple[str, str],
    ui: Any,
    key: dict[str, Any],
    expanded: bool,
) -> Event:
    o = entry.get("o") or {}
    doc = _head(entry, ts, index, kind, ui, {"operationType": kind, "documentKey": key}, expanded)
    post: dict[str, Any] | None = None
    diff: dict[str, Any] | None = None
    if kind in ("insert", "replace"):
        post = dict(o)
        doc["fullDocument"] = post
    doc["ns"] = {"db": ns[0], "coll": ns[1]}
    doc["documentKey"] = key
    if kind == "update":
        diff = o.get("diff") or {}
        doc["updateDescription"] = update_description(diff, expanded)
    doc.update(txn)
    return Event(
        Position.of(ts, index),
        doc,
        kind,
        ns,
        ui if isinstance(ui, Binary) else None,
        key,
        post,
        diff,
    )


def _ddl(
    entry: Mapping[str, Any],
    ts: Timestamp,
    index: int,
    txn: dict[str, Any],
    scope: Scope,
    expanded: bool,
    kind: str,
    db: str,
    coll: str | None,
    ui: Any,
    extra: dict[str, Any],
    sees: bool | None = None,
) -> Iterator[Event]:
    if sees is None:
        sees = _sees_db(scope, db) if coll is None else _sees(scope, db, coll)
    if not sees:
        return
    ns = {"db": db} if coll is None else {"db": db, "coll": coll}
    description = extra.get("operationDescription")
    event_id: dict[str, Any] = {"operationType": kind}
    event_id["operationDescription"] = description if description is not None else {}
    doc = _head(entry, ts, index, kind, ui, event_id, expanded)
    doc["ns"] = ns
    doc.update(extra)
    doc.update(txn)
    event = Event(Position.of(ts, index), doc, kind, ui=ui if isinstance(ui, Binary) else None)
    yield event
    if kind in _INVALIDATES[scope.kind] and (
        kind != "rename" or (scope.coll is not None and _sees(scope, db, coll or ""))
    ):
        yield invalidate(event)


def invalidate(cause: Event) -> Event:
    """The invalidate event after `cause` (a drop, rename or dropDatabase that ends the stream):
    its token is the cause's, marked fromInvalidate (startAfter may resume after it)."""
    from ebbdb.storage.aggregate.change_stream.tokens import parse

    data = parse(cause.doc["_id"], "resumeAfter")
    token = encode(
        TokenData(
            data.cluster_time,
            txn_op_index=data.txn_op_index,
            from_invalidate=True,
            uuid=data.uuid,
            event_id=data.event_id,
        )
    )
    doc: dict[str, Any] = {"_id": token, "operationType": "invalidate"}
    doc["clusterTime"] = cause.doc["clusterTime"]
    if "wallTime" in cause.doc:
        doc["wallTime"] = cause.doc["wallTime"]
    position = Position(cause.position.ts_key, cause.position.index, 1)
    return Event(position, doc, "invalidate", ends=True)


# -- updates -----------------------------------------------------------------------------------------


def update_description(diff: Mapping[str, Any], expanded: bool) -> dict[str, Any]:
    """An update event's updateDescription from the entry's v2 diff: updatedFields (dotted paths,
    array elements by index), removedFields, truncatedArrays, and with showExpandedEvents
    disambiguatedPaths (the paths whose dots or numeric names could be read two ways)."""
    updated: dict[str, Any] = {}
    removed: list[str] = []
    truncated: list[dict[str, Any]] = []
    ambiguous: dict[str, list[Any]] = {}
    _walk(diff, [], False, updated, removed, truncated, ambiguous)
    out: dict[str, Any] = {
        "updatedFields": updated,
        "removedFields": removed,
        "truncatedArrays": truncated,
    }
    if expanded:
        out["disambiguatedPaths"] = ambiguous
    return out


def _note(path: list[Any], ambiguous: dict[str, list[Any]]) -> str:
    dotted = ".".join(str(p) for p in path)
    # A field name with a dot, or a numeric one (not an array index), reads two ways.
    if any(isinstance(p, str) and ("." in p or p.isdigit()) for p in path):
        ambiguous[dotted] = list(path)
    return dotted


def _walk(
    diff: Mapping[str, Any],
    path: list[Any],
    in_array: bool,
    updated: dict[str, Any],
    removed: list[str],
    truncated: list[dict[str, Any]],
    ambiguous: dict[str, list[Any]],
) -> None:
    if in_array:
        size = diff.get("l")
        if size is not None:
            truncated.append({"field": _note(path, ambiguous), "newSize": int(size)})
        for key, value in diff.items():
            if key in ("a", "l"):
                continue
            kind, idx = key[0], int(key[1:])
            if kind == "u":
                updated[_note([*path, idx], ambiguous)] = value
            elif kind == "s":
                _walk(
                    value,
                    [*path, idx],
                    bool(value.get("a")),
                    updated,
                    removed,
                    truncated,
                    ambiguous,
                )
        return
    for key, value in diff.items():
        if key in ("u", "i"):
            for name, item in value.items():
                updated[_note([*path, name], ambiguous)] = item
        elif key == "d":
            for name in value:
                removed.append(_note([*path, name], ambiguous))
        elif key.startswith("s"):
            sub = value
            _walk(sub, [*path, key[1:]], bool(sub.get("a")), updated, removed, truncated, ambiguous)


def apply_diff(doc: Mapping[str, Any], diff: Mapping[str, Any]) -> dict[str, Any]:
    """A document after a v2 diff (a post-image from a pre-image). Raises QueryError for a diff
    that does not fit the document."""
    out = dict(doc)
    for key, value in diff.items():
        if key == "d":
            for name in value:
                out.pop(name, None)
        elif key in ("u", "i"):
            for name, item in value.items():
                out[name] = item
        elif key.startswith("s"):
            name = key[1:]
            current = out.get(name)
            if value.get("a"):
                if not isinstance(current, list):
                    raise QueryError("BadValue", f"a diff for an array at {name} met no array")
                out[name] = _apply_array(current, value)
            else:
                if not isinstance(current, Mapping):
                    raise QueryError("BadValue", f"a diff for a document at {name} met none")
                out[name] = apply_diff(current, value)
    return out


def _apply_array(items: list[Any], diff: Mapping[str, Any]) -> list[Any]:
    out = list(items)
    size = diff.get("l")
    if size is not None:
        out = out[: int(size)]
        out += [None] * (int(size) - len(out))
    for key, value in diff.items():
        if key in ("a", "l"):
            continue
        idx = int(key[1:])
        while len(out) <= idx:
            out.append(None)
        if key[0] == "u":
            out[idx] = value
        elif key[0] == "s":
            current = out[idx]
            if value.get("a"):
                out[idx] = _apply_array(current if isinstance(current, list) else [], value)
            else:
                out[idx] = apply_diff(current if isinstance(current, Mapping) else {}, value)
    return out
