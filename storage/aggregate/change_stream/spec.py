"""The `$changeStream` stage's specification, checked as mongod checks it (unknown fields, types,
enumerations, one resume option at most), and what a stream watches (a collection, a database or
the whole deployment) with mongod's namespace errors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bson import Timestamp

from ebbdb.storage.aggregate.change_stream.tokens import TokenData, parse
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import type_name

FULL_DOCUMENT = ("default", "updateLookup", "whenAvailable", "required")
BEFORE_CHANGE = ("off", "whenAvailable", "required")
#: Stages mongod allows after $changeStream (the rest: 20 IllegalOperation).
ALLOWED_AFTER = frozenset(
    "$match $project $addFields $set $unset $replaceRoot $replaceWith $redact".split()
)
#: Databases no stream sees (a whole-deployment stream leaves them out; none may be watched).
INTERNAL_DBS = ("admin", "config", "local")

_BOOLS = (
    "allChangesForCluster",
    "showExpandedEvents",
    "showSystemEvents",
    "showRawUpdateDescription",
)
_KNOWN = frozenset(
    (
        "resumeAfter",
        "startAfter",
        "startAtOperationTime",
        "fullDocument",
        "fullDocumentBeforeChange",
        "allowToRunOnConfigDB",
        "allowToRunOnSystemNS",
        *_BOOLS,
    )
)


@dataclass(frozen=True)
class Scope:
    """What a stream watches: `coll` in `db`, all of `db` (coll None), or everything (db None)."""

    db: str | None
    coll: str | None = None

    @property
    def kind(self) -> str:
        return "cluster" if self.db is None else "database" if self.coll is None else "collection"


@dataclass(frozen=True)
class StreamSpec:
    full_document: str = "default"
    before_change: str = "off"
    #: The token to resume after (resumeAfter or startAfter) and which option gave it.
    resume: TokenData | None = None
    start_after: bool = False
    start_at: Timestamp | None = None
    all_changes_for_cluster: bool = False
    show_expanded: bool = False


def parse_spec(value: Any) -> StreamSpec:
    """The `$changeStream` stage's argument, checked; raises QueryError with mongod's codes."""
    if not isinstance(value, Mapping):
        raise QueryError("Location50808", "$changeStream stage expects a document as argument")
    for name in value:
        if name not in _KNOWN:
            raise QueryError(
                "Location40415", f"BSON field '$changeStream.{name}' is an unknown field."
            )
    options: dict[str, Any] = {}
    for name in _BOOLS:
        if name in value:
            options[name] = _bool(name, value[name])
    full = _enum("fullDocument", value.get("fullDocument", "default"), FULL_DOCUMENT)
    before = _enum(
        "fullDocumentBeforeChange", value.get("fullDocumentBeforeChange", "off"), BEFORE_CHANGE
    )
    given = [n for n in ("resumeAfter", "startAfter", "startAtOperationTime") if n in value]
    if len(given) > 1:
        raise QueryError(
            "Location40674", "Only one type of resume option is allowed, but multiple were found."
        )
    resume: TokenData | None = None
    start_at: Timestamp | None = None
    if "startAtOperationTime" in value:
        start_at = value["startAtOperationTime"]
        if not isinstance(start_at, Timestamp):
            raise QueryError(
                "TypeMismatch",
                "BSON field '$changeStream.startAtOperationTime' is the wrong type "
                f"'{type_name(start_at)}', expected type 'timestamp'",
            )
    elif given:
        resume = parse(value[given[0]], given[0])
        if given[0] == "resumeAfter" and resume.from_invalidate:
            raise QueryError(
                "InvalidResumeToken",
                "Attempting to resume a change stream using 'resumeAfter' is not allowed from an "
                "invalidate notification.",
            )
    return StreamSpec(
        full_document=full,
        before_change=before,
        resume=resume,
        start_after=bool(given) and given[0] == "startAfter",
        start_at=start_at,
        all_changes_for_cluster=options.get("allChangesForCluster", False),
        show_expanded=options.get("showExpandedEvents", False),
    )


def _bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise QueryError(
            "TypeMismatch",
            f"BSON field '$changeStream.{name}' is the wrong type '{type_name(value)}', "
            "expected type 'bool'",
        )
    return value


def _enum(name: str, value: Any, allowed: tuple[str, ...]) -> str:
    if not isinstance(value, str):
        raise QueryError(
            "TypeMismatch",
            f"BSON field '$changeStream.{name}' is the wrong type '{type_name(value)}', "
            "expected type 'string'",
        )
    if value not in allowed:
        raise QueryError(
            "BadValue",
            f"Enumeration value '{value}' for field '$changeStream.{name}' is not a valid value.",
        )
    return value


def scope_of(db: str, collection: str | None, spec: StreamSpec) -> Scope:
    """What a stream opened by `aggregate` on `db` (`collection` None: `aggregate: 1`) watches,
    with mongod's errors for a namespace no stream may watch."""
    if spec.all_changes_for_cluster:
        if db != "admin" or collection is not None:
            raise QueryError(
                "InvalidOptions",
                "A $changeStream with 'allChangesForCluster:true' may only be opened on the "
                "'admin' database, and with no collection name",
            )
        return Scope(None)
    if db == "admin" and collection is None:
        raise QueryError(
            "InvalidNamespace",
            "$changeStream on the admin database requires {allChangesForCluster:true}",
        )
    if db in INTERNAL_DBS:
        raise QueryError(
            "InvalidNamespace", f"$changeStream may not be opened on the internal {db} database"
        )
    if collection is not None and collection.startswith("system."):
        raise QueryError(
            "InvalidNamespace",
            f"$changeStream may not be opened on the internal {db}.{collection} collection",
        )
    return Scope(db, collection)


def check_after(stages: list[Any]) -> None:
    """The stages after $changeStream: only those mongod allows in a change stream (20)."""
    for stage in stages:
        name = next(iter(stage), "") if isinstance(stage, Mapping) and len(stage) == 1 else ""
        if name and name not in ALLOWED_AFTER and name != "$changeStream":
            raise QueryError(
                "IllegalOperation", f"{name} is not permitted in a $changeStream pipeline"
            )
