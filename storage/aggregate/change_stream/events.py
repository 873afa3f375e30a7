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
        # Only a transaction's events name its session (mongod: a retryable write's do not).
        txn = {k: entry[k] for k in ("txnNumber", "lsid") if k in entry}
        for index, inner in enumerate(o["applyOps"]):
            merged = dict(inner)
            merged.setdefault("wall", entry.get("wall"))
            yield from _events(merged, ts, index, txn, scope, expanded)
        return
    yield from _events(entry, ts, 0, {}, scope, expanded)


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
    ddl = _ddl_of(o, o2, db, scope, expanded)
    if ddl is None:
        return
    kind, ns_doc, description, front, after = ddl
    event_id: dict[str, Any] = {"operationType": kind}
    if description is not None:
        event_id["operationDescription"] = description
    doc = _head(entry, ts, index, kind, ui, event_id, expanded, {**txn, **front})
    doc["ns"] = ns_doc
    if expanded and description is not None:
        doc["operationDescription"] = description
    doc.update(after)
    event = Event(Position.of(ts, index), doc, kind, ui=ui if isinstance(ui, Binary) else None)
    yield event
    if kind in _INVALIDATES[scope.kind]:
        yield invalidate(event)


_DDL = tuple[str, dict[str, Any], dict[str, Any] | None, dict[str, Any], dict[str, Any]]


def _ddl_of(o: Mapping[str, Any], o2: Any, db: str, scope: Scope, expanded: bool) -> _DDL | None:
    """A command entry's event for this stream: (operationType, ns, operationDescription,
    fields before the _id, fields after the rest), or None when the stream does not see it."""
    command = next(iter(o))
    target = o[command]
    if command == "drop":
        name = str(target)
        if not _sees(scope, db, name):
            return None
        return "drop", {"db": db, "coll": name}, None, {}, {}
    if command == "renameCollection":
        from_db, from_coll = _split(str(target))
        to_db, to_coll = _split(str(o.get("to", "")))
        # A collection's stream sees a rename of its collection, and one onto its namespace
        # (which replaces what it watched): both end it, as mongod's.
        if not (_sees(scope, from_db, from_coll) or _sees(scope, to_db, to_coll)):
            return None
        to = {"db": to_db, "coll": to_coll}
        # mongod's: the entry's fields but the source and stayTemp, `to` as a namespace; its
        # entry names a dropped target by UUID only when there was one.
        description = {
            k: (to if k == "to" else v)
            for k, v in o.items()
            if k not in ("renameCollection", "stayTemp") and not (k == "dropTarget" and v is False)
        }
        # The top-level `to` predates operationDescription; mongod sets it first of all.
        return "rename", {"db": from_db, "coll": from_coll}, description, {"to": to}, {}
    if command == "dropDatabase":
        # A collection's stream sees the drop of its collection logged just before (and ends).
        if scope.coll is not None or not _sees_db(scope, db):
            return None
        return "dropDatabase", {"db": db}, None, {}, {}
    if not expanded or command not in ("create", "createIndexes", "dropIndexes", "collMod"):
        return None
    name = str(target)
    if not _sees(scope, db, name):
        return None
    ns = {"db": db, "coll": name}
    if command == "create":
        return "create", ns, {k: v for k, v in o.items() if k != "create"}, {}, {}
    if command == "createIndexes":
        spec = {k: v for k, v in o.items() if k != "createIndexes"}
        return "createIndexes", ns, {"indexes": [spec]}, {}, {}
    if command == "dropIndexes":
        if isinstance(o2, Mapping):
            spec = {k: v for k, v in o2.items() if k != "dropIndexes"}
        else:
            spec = {"name": o.get("index")}
        return "dropIndexes", ns, {"indexes": [spec]}, {}, {}
    before = {}
    if isinstance(o2, Mapping):
        for name_old, field in (
            ("collectionOptions_old", "collectionOptions"),
            ("indexOptions_old", "indexOptions"),
        ):
            if name_old in o2:
                before[field] = o2[name_old]
    after = {"stateBeforeChange": before}
    return "modify", ns, {k: v for k, v in o.items() if k != "collMod"}, {}, after


def _head(
    entry: Mapping[str, Any],
    ts: Timestamp,
    index: int,
    kind: str,
    ui: Any,
    event_id: dict[str, Any],
    expanded: bool,
    front: dict[str, Any],
) -> dict[str, Any]:
    """An event's first fields, in mongod's order: a transaction's txnNumber and lsid (and a
    rename's `to`) before all, then _id, operationType, clusterTime, collectionUUID (with
    showExpandedEvents) and wallTime."""
    uuid = ui if isinstance(ui, Binary) else None
    token = encode(TokenData(ts, txn_op_index=index, uuid=uuid, event_id=event_id))
    doc: dict[str, Any] = dict(front)
    doc["_id"] = token
    doc["operationType"] = kind
    doc["clusterTime"] = ts
    if expanded and uuid is not None:
        doc["collectionUUID"] = uuid
    if entry.get("wall") is not None:
        doc["wallTime"] = entry["wall"]
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
    event_id = {"operationType": kind, "documentKey": key}
    doc = _head(entry, ts, index, kind, ui, event_id, expanded, txn)
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
