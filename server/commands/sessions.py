"""Logical sessions' commands: startSession, endSessions, refreshSessions, killSessions,
killAllSessions and killAllSessionsByPattern; the $listLocalSessions and $listSessions stages
(turned into `$documents` and `$match` here, as current_op turns $currentOp); and the test commands
refreshLogicalSessionCacheNow and reapLogicalSessionCacheNow."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bson.binary import Binary

from ebbdb.server.arguments import COMMAND_VALUE, Kind, NoParams, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CodedError, CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.server.session_cache import refresh_now, timeout_minutes
from ebbdb.server.sessions import (
    SESSIONS_COLL,
    SESSIONS_DB,
    Session,
    as_datetime,
    parse_lsid,
    user_digest,
)
from ebbdb.storage.core.values import type_name


def current_user(ctx: CommandContext) -> tuple[str, str] | None:
    """The user logged in on the client ((name, db); None without auth or nobody)."""
    users = ctx.client.auth.users
    return next(iter(users.values()), None) if users else None


def _keys(ctx: CommandContext, command: str, lsids: list[Any]) -> list[bytes]:
    """The catalog keys of a command's lsids (checked as mongod parses them)."""
    uid = user_digest(current_user(ctx))
    keys = []
    for i, lsid in enumerate(lsids):
        ident, given = parse_lsid(lsid, f"{command}.{i}")
        keys.append(ident + (given if given is not None else uid))
    return keys


@REGISTRY.command("startSession", params=NoParams)
async def start_session(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """A new session for the client's user: {id: {id: UUID}, timeoutMinutes}."""
    user = current_user(ctx)
    session = ctx.sessions.start(user_digest(user), user)
    return {
        "id": {"id": Binary(session.id, 4)},
        "timeoutMinutes": timeout_minutes(ctx.parameters),
        "ok": 1.0,
    }


@dataclass(frozen=True)
class SessionsParams:
    lsids: list[Any] = arg(COMMAND_VALUE, Kind.ARRAY, required=True)


@REGISTRY.command("endSessions", params=SessionsParams)
async def end_sessions(ctx: CommandContext, p: SessionsParams) -> dict[str, Any]:
    """End sessions: their cursors and transactions end now, their records at the next refresh."""
    ctx.sessions.end(_keys(ctx, "endSessions", p.lsids))
    return {"ok": 1.0}


@REGISTRY.command("refreshSessions", params=SessionsParams)
async def refresh_sessions(ctx: CommandContext, p: SessionsParams) -> dict[str, Any]:
    """Mark sessions used now (a driver keeping idle sessions alive)."""
    user = current_user(ctx)
    for key in _keys(ctx, "refreshSessions", p.lsids):
        ctx.sessions.vivify(key, user)
    return {"ok": 1.0}


@REGISTRY.command("killSessions", params=SessionsParams)
async def kill_sessions(ctx: CommandContext, p: SessionsParams) -> dict[str, Any]:
    """Kill the named sessions (none named: every session of the client's user): their cursors
    are closed and their transactions aborted."""
    if p.lsids:
        keys = set(_keys(ctx, "killSessions", p.lsids))
        ctx.sessions.kill(lambda s: s.key in keys)
    else:
        uid = user_digest(current_user(ctx))
        ctx.sessions.kill(lambda s: s.uid == uid)
    return {"ok": 1.0}


def _user_of(value: Any, field: str) -> tuple[str, str]:
    """A {user, db} document (KillAllSessionsUser, ListSessionsUser)."""
    if not isinstance(value, Mapping):
        raise _wrong_type(field, value, "object")
    for name in value:
        if name not in ("user", "db"):
            raise CommandError(
                ErrorCode.Location40415, f"BSON field '{field}.{name}' is an unknown field."
            )
    out = []
    for name in ("user", "db"):
        v = value.get(name)
        if v is None:
            raise CommandError(
                ErrorCode.Location40414,
                f"BSON field '{field}.{name}' is missing but a required field",
            )
        if not isinstance(v, str):
            raise _wrong_type(f"{field}.{name}", v, "string")
        out.append(v)
    return out[0], out[1]


def _wrong_type(field: str, value: Any, expected: str) -> CommandError:
    return CommandError(
        ErrorCode.TypeMismatch,
        f"BSON field '{field}' is the wrong type '{type_name(value)}', expected type '{expected}'",
    )


@REGISTRY.command("killAllSessions", params=SessionsParams)
async def kill_all_sessions(ctx: CommandContext, p: SessionsParams) -> dict[str, Any]:
    """Kill every session of the users named ({user, db}), or of every user (none named)."""
    if not p.lsids:
        ctx.sessions.kill(lambda s: True)
        return {"ok": 1.0}
    uids = {
        user_digest(_user_of(u, f"KillAllSessionsCmd.killAllSessions.{i}"))
        for i, u in enumerate(p.lsids)
    }
    ctx.sessions.kill(lambda s: s.uid in uids)
    return {"ok": 1.0}


@dataclass(frozen=True)
class _Pattern:
    """One killAllSessionsByPattern pattern: each part given must match (none given: every
    session). ebbdb gives sessions no roles: a non-empty `roles` matches none."""

    ident: bytes | None = None
    uid: bytes | None = None
    uids: frozenset[bytes] | None = None
    no_roles: bool = True

    def matches(self, s: Session) -> bool:
        return (
            (self.ident is None or s.id == self.ident)
            and (self.uid is None or s.uid == self.uid)
            and (self.uids is None or s.uid in self.uids)
            and self.no_roles
        )


def _pattern(value: Any, i: int) -> _Pattern:
    """A pattern: {lsid}, {uid}, {users: [{user, db}]}, {roles: [...]}, or {}."""
    field = f"KillAllSessionsByPatternCmd.killAllSessionsByPattern.{i}"
    if not isinstance(value, Mapping):
        raise _wrong_type(field, value, "object")
    parts: dict[str, Any] = {}
    for name, v in value.items():
        if name == "lsid":
            ident, given = parse_lsid(v, f"{field}.lsid")
            parts["ident"] = ident
            if given is not None:
                parts["uid"] = given
        elif name == "uid":
            if not isinstance(v, bytes):
                raise _wrong_type(f"{field}.uid", v, "binData")
            parts["uid"] = bytes(v)
        elif name == "users":
            if not isinstance(v, list):
                raise _wrong_type(f"{field}.users", v, "array")
            parts["uids"] = frozenset(
                user_digest(_user_of(u, f"{field}.users.{j}")) for j, u in enumerate(v)
            )
        elif name == "roles":
            if not isinstance(v, list):
                raise _wrong_type(f"{field}.roles", v, "array")
            parts["no_roles"] = not v
        else:
            raise CommandError(
                ErrorCode.Location40415, f"BSON field '{field}.{name}' is an unknown field."
            )
    return _Pattern(**parts)


@REGISTRY.command("killAllSessionsByPattern", params=SessionsParams)
async def kill_all_sessions_by_pattern(ctx: CommandContext, p: SessionsParams) -> dict[str, Any]:
    """Kill the sessions any pattern matches (no pattern: every session)."""
    if not p.lsids:
        ctx.sessions.kill(lambda s: True)
        return {"ok": 1.0}
    patterns = [_pattern(v, i) for i, v in enumerate(p.lsids)]
    ctx.sessions.kill(lambda s: any(m.matches(s) for m in patterns))
    return {"ok": 1.0}


@REGISTRY.command("refreshLogicalSessionCacheNow", params=NoParams, test_only=True)
async def refresh_logical_session_cache_now(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Run the periodic refresh now: write config.system.sessions, expire idle sessions."""
    await refresh_now(ctx.sessions, ctx.gateway, ctx.parameters)
    return {"ok": 1.0}


@REGISTRY.command("reapLogicalSessionCacheNow", params=NoParams, test_only=True)
async def reap_logical_session_cache_now(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Forget sessions idle past the timeout now (with their cursors)."""
    ctx.sessions.expire(timeout_minutes(ctx.parameters) * 60_000)
    return {"ok": 1.0}


# -- $listLocalSessions and $listSessions -----------------------------------------------------------


def _list_spec(stage: str, spec: Any, ctx: CommandContext) -> set[bytes] | None:
    """The uids a listing stage asks for (None: every user's, with allUsers)."""
    if not isinstance(spec, Mapping):
        raise CommandError(
            ErrorCode.TypeMismatch,
            f"{stage} options must be specified in an object, but found: {type_name(spec)}",
        )
    all_users: Any = False
    users: list[tuple[str, str]] = []
    for name, v in spec.items():
        if name == "allUsers":
            if not isinstance(v, bool):
                raise _wrong_type(f"{stage}.allUsers", v, "bool")
            all_users = v
        elif name == "users":
            if not isinstance(v, list):
                raise _wrong_type(f"{stage}.users", v, "array")
            users = [_user_of(u, f"{stage}.users.{i}") for i, u in enumerate(v)]
        elif name != "$_internalPredicate":
            raise CommandError(
                ErrorCode.Location40415, f"BSON field '{stage}.{name}' is an unknown field."
            )
    if all_users and users:
        raise CodedError(
            12,
            "UnsupportedFormat",
            f"{stage} may not specify {{allUsers:true}} and {{users:[...]}} at the same time",
        )
    if all_users:
        return None
    if not users:
        return {user_digest(current_user(ctx))}
    return {user_digest(u) for u in users}


def _record(session: Session) -> dict[str, Any]:
    """A session as config.system.sessions and $listLocalSessions show it."""
    doc: dict[str, Any] = {
        "_id": {"id": Binary(session.id, 4), "uid": Binary(session.uid, 0)},
        "lastUse": as_datetime(session.last_use),
    }
    if session.user is not None:
        doc["user"] = {"name": f"{session.user[0]}@{session.user[1]}"}
    return doc


def list_sessions_pipeline(
    ctx: CommandContext, collection: str | None, pipeline: list[Any]
) -> list[Any]:
    """A pipeline that starts with $listLocalSessions (the sessions in memory, as `$documents`)
    or $listSessions (config.system.sessions' records, filtered by `_id.uid`)."""
    stage = next(iter(pipeline[0]))
    spec = pipeline[0][stage]
    if stage == "$listLocalSessions":
        if collection is not None:
            raise CommandError(
                ErrorCode.InvalidNamespace,
                "$listLocalSessions must be run against the database with {aggregate: 1}, "
                "not a collection",
            )
        uids = _list_spec(stage, spec, ctx)
        records = [_record(s) for s in ctx.sessions.sessions() if uids is None or s.uid in uids]
        return [{"$documents": {"$literal": records}}, *pipeline[1:]]
    if ctx.db != SESSIONS_DB or collection != SESSIONS_COLL:
        raise CommandError(
            ErrorCode.InvalidNamespace,
            f"$listSessions must be run against the '{SESSIONS_COLL}' collection in the "
            f"'{SESSIONS_DB}' database.",
        )
    uids = _list_spec(stage, spec, ctx)
    if uids is None:
        return list(pipeline[1:])
    match = {"_id.uid": {"$in": [Binary(u, 0) for u in sorted(uids)]}}
    return [{"$match": match}, *pipeline[1:]]
