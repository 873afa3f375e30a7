"""The `$changeStream` stage's specification, checked as mongod checks it (unknown fields, types,
enumerations, one resume option at most), and what a stream watches (a collection, a database or
the whole deployment) with mongod's namespace errors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bson import Timestamp

from ebbdb.storage.aggregate.change_stream.tokens import (
    HIGH_WATER_MARK,
    TokenData,
    check_shape,
    parse,
)
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import type_name

FULL_DOCUMENT = ("default", "updateLookup", "whenAvailable", "required")
BEFORE_CHANGE = ("off", "whenAvailable", "required")
#: Stages mongod allows after $changeStream (the rest: 20 IllegalOperation).
ALLOWED_AFTER = frozenset(
    "$match $project $addFields $set $unset $replaceRoot $replaceWith $redact"
    " $changeStreamSplitLargeEvent".split()  # (this one: 238, ebbdb does not split events)
)
#: Databases no stream sees (a whole-deployment stream leaves them out; none may be watched).
INTERNAL_DBS = ("admin", "config", "local")

_BOOLS = (
    "allChangesForCluster",
    "showExpandedEvents",
    "showSystemEvents",
    "showRawUpdateDescription",
    "allowToRunOnConfigDB",
    "allowToRunOnSystemNS",
)
_KNOWN = frozenset(
    (
        "resumeAfter",
        "startAfter",
        "startAtOperationTime",
        "fullDocument",
        "fullDocumentBeforeChange",
    )
    + _BOOLS
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
    """The stage's specification as parsed (tokens checked for their shape only: `legal` decodes
    them, after the checks mongod makes first)."""

    full_document: str = "default"
    before_change: str = "off"
    resume_after: Mapping[str, Any] | None = None
    start_after: Mapping[str, Any] | None = None
    start_at: Timestamp | None = None
    flags: frozenset[str] = frozenset()

    @property
    def show_expanded(self) -> bool:
        return "showExpandedEvents" in self.flags

    def flag(self, name: str) -> bool:
        return name in self.flags


def parse_spec(value: Any) -> StreamSpec:
    """The `$changeStream` stage's argument as mongod's parser reads it: 50808 (not a document),
    40415 (an unknown field), 14 (a wrong type), 2 (not one of an option's values), and a resume
    token's shape (tokens.check_shape)."""
    if not isinstance(value, Mapping):
        raise QueryError("Location50808", "$changeStream stage expects a document as argument")
    for name in value:
        if name not in _KNOWN:
            raise QueryError(
                "Location40415", f"BSON field '$changeStream.{name}' is an unknown field."
            )
    flags = frozenset(name for name in _BOOLS if name in value and _bool(name, value[name]))
    full = _enum("fullDocument", value.get("fullDocument", "default"), FULL_DOCUMENT)
    before = _enum(
        "fullDocumentBeforeChange", value.get("fullDocumentBeforeChange", "off"), BEFORE_CHANGE
    )
    start_at = value.get("startAtOperationTime")
    if start_at is not None and not isinstance(start_at, Timestamp):
        raise QueryError(
            "TypeMismatch",
            "BSON field '$changeStream.startAtOperationTime' is the wrong type "
            f"'{type_name(start_at)}', expected type 'timestamp'",
        )
    resume_after = value.get("resumeAfter")
    start_after = value.get("startAfter")
    return StreamSpec(
        full_document=full,
        before_change=before,
        resume_after=None if resume_after is None else check_shape(resume_after, "resumeAfter"),
        start_after=None if start_after is None else check_shape(start_after, "startAfter"),
        start_at=start_at,
        flags=flags,
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


def legal(db: str, collection: str | None, spec: StreamSpec) -> tuple[Scope, TokenData | None]:
    """What a stream opened by `aggregate` on `db` (`collection` None: `aggregate: 1`) watches,
    and the token it resumes after, with mongod's checks in mongod's order (after the replica
    set's 40573): where it may be opened (72, 73), one resume option (50865, then the token's
    own errors, 40674), and 260 for resuming after an invalidate or a single collection's stream
    from a token without a UUID."""
    cluster = spec.flag("allChangesForCluster")
    if cluster and (db != "admin" or collection is not None):
        ns = f"{db}.{collection if collection is not None else '$cmd.aggregate'}"
        raise QueryError(
            "InvalidOptions",
            "A $changeStream with 'allChangesForCluster:true' may only be opened on the 'admin' "
            f"database, and with no collection name; found {ns}",
        )
    allowed = (
        cluster
        if db == "admin"
        else db != "local" and (db != "config" or spec.flag("allowToRunOnConfigDB"))
    )
    if not allowed:
        raise QueryError(
            "InvalidNamespace", f"$changeStream may not be opened on the internal {db} database"
        )
    if (
        collection is not None
        and collection.startswith("system.")
        and not spec.flag("allowToRunOnSystemNS")
    ):
        raise QueryError(
            "InvalidNamespace",
            f"$changeStream may not be opened on the internal {db}.{collection} collection",
        )
    if spec.resume_after is not None and spec.start_after is not None:
        raise QueryError(
            "Location50865",
            "Do not specify both 'resumeAfter' and 'startAfter' in a $changeStream stage",
        )
    token: TokenData | None = None
    if spec.resume_after is not None:
        token = parse(spec.resume_after, "resumeAfter")
    elif spec.start_after is not None:
        token = parse(spec.start_after, "startAfter")
    if spec.start_at is not None and token is not None:
        raise QueryError(
            "Location40674", "Only one type of resume option is allowed, but multiple were found"
        )
    if spec.resume_after is not None and token is not None and token.from_invalidate:
        raise QueryError(
            "InvalidResumeToken",
            "Attempting to resume a change stream using 'resumeAfter' is not allowed from an "
            "invalidate notification",
        )
    if (
        token is not None
        and collection is not None
        and token.uuid is None
        and token.token_type != HIGH_WATER_MARK
    ):
        raise QueryError(
            "InvalidResumeToken",
            "Attempted to resume a single-collection stream, but the resume token does not "
            "include a UUID",
        )
    scope = Scope(None) if cluster else Scope(db, collection)
    return scope, token


def check_after(stages: list[Any]) -> None:
    """The stages after $changeStream: only those mongod allows in a change stream (20)."""
    for stage in stages:
        name = next(iter(stage), "") if isinstance(stage, Mapping) and len(stage) == 1 else ""
        if name and name not in ALLOWED_AFTER and name != "$changeStream":
            raise QueryError(
                "IllegalOperation", f"{name} is not permitted in a $changeStream pipeline"
            )
