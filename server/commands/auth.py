"""Logging in and managing users: saslStart, saslContinue and logout (and the SASL step hello runs
for speculative authentication), createUser, updateUser, dropUser, dropAllUsersFromDatabase,
usersInfo, grantRolesToUser, revokeRolesFromUser."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from bson import Binary

from ebbdb.server.arguments import COMMAND_VALUE, Kind, NoParams, Unsupported, arg
from ebbdb.server.auth.roles import Privileges, privilege_documents, role_exists
from ebbdb.server.auth.scram import (
    MECHANISMS,
    SHA256,
    Conversation,
    ScramError,
    StoredKeys,
    client_user,
    make_credentials,
)
from ebbdb.server.auth.state import CONVERSATION_ID, user_id
from ebbdb.server.auth.users import User
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.log import clip, log_event
from ebbdb.server.registry import REGISTRY

log = logging.getLogger("ebbdb.access")

#: mongod's lines for a login that worked and one that did not.
AUTH_SUCCEEDED_ID = 20250
AUTH_FAILED_ID = 20249

AUTHENTICATION_FAILED = "Authentication failed."


# -- SASL ------------------------------------------------------------------------------------------


def _payload_bytes(payload: Any) -> bytes:
    if isinstance(payload, (bytes, Binary)):
        return bytes(payload)
    if isinstance(payload, str):  # some shells send the SCRAM text as a string
        return payload.encode("utf-8")
    raise CommandError(ErrorCode.TypeMismatch, "SASL payload must be BinData or a string")


def _log_attempt(
    ctx: CommandContext, mechanism: str, user: str, db: str, why: str | None = None
) -> None:
    """mongod's line for a login that worked (`why` None) or failed (never with a password). The
    client chose the names and the SCRAM text the reason may quote: each is cut to
    CLIENT_STRING_BYTES, and the user is named once, so that a failed login of a client not
    logged in adds about 1 KB to the log at most."""
    user, db = clip(user), clip(db)
    attr: dict[str, Any] = {
        "mechanism": mechanism,
        "speculative": False,
        "principalName": user,
        "authenticationDatabase": db,
        "remote": ctx.client.peer,
        "extraInfo": {},
    }
    conn = f"conn{ctx.client.id}"
    if why is None:
        text = f"[{conn}] {user}@{db} logged in with {mechanism} from {ctx.client.peer}"
        log_event(
            log,
            logging.INFO,
            AUTH_SUCCEEDED_ID,
            "Authentication succeeded",
            attr,
            ctx=conn,
            text=text,
        )
        return
    why = clip(why)
    attr["error"] = why
    text = f"[{conn}] authentication of {user}@{db} with {mechanism} from {ctx.client.peer} failed: {why}"
    log_event(log, logging.INFO, AUTH_FAILED_ID, "Authentication failed", attr, ctx=conn, text=text)


def _failed(
    ctx: CommandContext, mechanism: str, user: str, db: str, why: str, logged: bool = True
) -> CommandError:
    """18 AuthenticationFailed (the client learns nothing more; the log says why, unless not
    `logged`)."""
    if logged:
        _log_attempt(ctx, mechanism, user, db, why)
    return CommandError(ErrorCode.AuthenticationFailed, AUTHENTICATION_FAILED)


async def sasl_start(
    ctx: CommandContext,
    db: str,
    mechanism: str,
    payload: Any,
    options: Mapping[str, Any] | None,
    speculative: bool = False,
) -> dict[str, Any]:
    """Begin a SCRAM conversation as the user the client-first message names in `db`: the
    server-first message, or an error (18 for an unknown user or a malformed message). A
    `speculative` one (hello's) that fails is not logged: the driver then runs saslStart itself,
    whose failure is, so that one failed login is one line."""
    auth = ctx.client.auth
    auth.conversation = auth.conversation_user = None
    if mechanism not in MECHANISMS:
        raise CommandError(
            ErrorCode.MechanismUnavailable,
            f"Received authentication for mechanism {mechanism} which is unknown or not enabled",
        )
    data = _payload_bytes(payload)
    try:
        name = client_user(data)
    except ScramError as exc:
        raise _failed(ctx, mechanism, "", db, str(exc), not speculative) from None
    user = await ctx.users.get(ctx.gateway, name, db)
    if user is None:
        # (mongod's words name the user again: here principalName alone does.)
        raise _failed(
            ctx, mechanism, name, db, "UserNotFound: Could not find the user", not speculative
        )
    if mechanism not in user.credentials:
        raise CommandError(
            ErrorCode.MechanismUnavailable,
            f"Unable to use {mechanism} based authentication for user without any "
            f"{mechanism} credentials registered",
        )
    conversation = Conversation(mechanism, StoredKeys.of(user.credentials[mechanism]))
    try:
        first = conversation.start(data)
    except ScramError as exc:
        raise _failed(ctx, mechanism, name, db, str(exc), not speculative) from None
    conversation.skip_empty = bool((options or {}).get("skipEmptyExchange"))
    auth.conversation, auth.conversation_user = conversation, (name, db)
    return {"conversationId": CONVERSATION_ID, "done": False, "payload": Binary(first), "ok": 1.0}


def _logged_in(ctx: CommandContext, mechanism: str, user: str, db: str) -> None:
    auth = ctx.client.auth
    auth.users[user_id(user, db)] = (user, db)
    auth.conversation = auth.conversation_user = None
    _log_attempt(ctx, mechanism, user, db)


@dataclass(frozen=True)
class SaslStartParams:
    mechanism: str = arg("mechanism", Kind.STRING, required=True)
    payload: Any = arg("payload", Kind.ANY, required=True)
    auto_authorize: Any = arg("autoAuthorize", Kind.ANY)
    options: dict[str, Any] | None = arg("options", Kind.DOC)


@REGISTRY.command("saslStart", params=SaslStartParams)
async def sasl_start_command(ctx: CommandContext, p: SaslStartParams) -> dict[str, Any]:
    """Begin a SCRAM-SHA-256 or SCRAM-SHA-1 login in this database."""
    return await sasl_start(ctx, ctx.db, p.mechanism, p.payload, p.options)


@dataclass(frozen=True)
class SaslContinueParams:
    conversation_id: int = arg("conversationId", Kind.INT, required=True)
    payload: Any = arg("payload", Kind.ANY, required=True)


@REGISTRY.command("saslContinue", params=SaslContinueParams)
async def sasl_continue(ctx: CommandContext, p: SaslContinueParams) -> dict[str, Any]:
    """The next step of the login saslStart began (with skipEmptyExchange, the last)."""
    auth = ctx.client.auth
    conversation, who = auth.conversation, auth.conversation_user
    if conversation is None or who is None or p.conversation_id != CONVERSATION_ID:
        raise CommandError(ErrorCode.ProtocolError, "No SASL session state found")
    user, db = who
    reply: dict[str, Any] = {"conversationId": CONVERSATION_ID}
    if conversation.finished:  # the client's empty last message
        _logged_in(ctx, conversation.mechanism, user, db)
        return {**reply, "done": True, "payload": Binary(b""), "ok": 1.0}
    try:
        final = conversation.finish(_payload_bytes(p.payload))
    except ScramError as exc:
        auth.conversation = auth.conversation_user = None
        raise _failed(ctx, conversation.mechanism, user, db, str(exc)) from None
    if conversation.skip_empty:
        _logged_in(ctx, conversation.mechanism, user, db)
        return {**reply, "done": True, "payload": Binary(final), "ok": 1.0}
    return {**reply, "done": False, "payload": Binary(final), "ok": 1.0}


@REGISTRY.command("logout")
async def logout(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Log out the users this connection logged in as in this database."""
    auth = ctx.client.auth
    for uid in [uid for uid, (_u, db) in auth.users.items() if db == ctx.db]:
        del auth.users[uid]
    return {"ok": 1.0}


async def hello_fields(
    ctx: CommandContext, speculative: Mapping[str, Any] | None, mechs_for: str | None
) -> dict[str, Any]:
    """What hello adds for a client that logs in: `saslSupportedMechs` for the user it names
    ("db.user"), and `speculativeAuthenticate`, the reply to the saslStart it carries (left out
    when that fails: the client then runs saslStart itself and gets the error)."""
    out: dict[str, Any] = {}
    if mechs_for is not None and "." in mechs_for:
        db, _, name = mechs_for.partition(".")
        user = await ctx.users.get(ctx.gateway, name, db)
        if user is not None:
            out["saslSupportedMechs"] = user.mechanisms
    if speculative is not None and "saslStart" in speculative:
        source = speculative.get("db")
        mechanism = speculative.get("mechanism")
        options = speculative.get("options")
        if isinstance(source, str) and isinstance(mechanism, str):
            try:
                reply = await sasl_start(
                    ctx,
                    source,
                    mechanism,
                    speculative.get("payload"),
                    options if isinstance(options, Mapping) else None,
                    speculative=True,
                )
            except CommandError:
                pass
            else:
                reply.pop("ok")
                out["speculativeAuthenticate"] = reply
    return out


# -- users -----------------------------------------------------------------------------------------


def _roles(ctx: CommandContext, command: str, given: list[Any]) -> tuple[tuple[str, str], ...]:
    """A roles array (names in this database, or {role, db}) as (role, db) pairs; 31
    RoleNotFound for a role that does not exist."""
    out: list[tuple[str, str]] = []
    for item in given:
        # (By exact type: pymongo's Code, JavaScript, is a str subclass.)
        if type(item) is str:
            role, db = item, ctx.db
        elif (
            isinstance(item, Mapping)
            and type(item.get("role")) is str
            and type(item.get("db")) is str
        ):
            role, db = item["role"], item["db"]
        else:
            raise CommandError(
                ErrorCode.BadValue,
                f"{command}: a role must be a string or a document with 'role' and 'db' strings",
            )
        if not role_exists(role, db):
            raise CommandError(ErrorCode.RoleNotFound, f"Could not find role: {role}@{db}")
        if (role, db) not in out:
            out.append((role, db))
    return tuple(out)


def _mechanisms(given: list[Any] | None) -> tuple[str, ...]:
    if given is None:
        return MECHANISMS
    if not given:
        raise CommandError(ErrorCode.BadValue, "mechanisms field must not be empty")
    for m in given:
        if m not in MECHANISMS:
            raise CommandError(ErrorCode.BadValue, f"Unknown auth mechanism '{m}'")
    return tuple(m for m in MECHANISMS if m in given)


async def _credentials(
    ctx: CommandContext, user: str, pwd: str, mechanisms: tuple[str, ...], digest: bool
) -> dict[str, Any]:
    if not pwd:
        raise CommandError(ErrorCode.BadValue, "Password cannot be empty")
    if not digest and SHA256 in mechanisms:
        raise CommandError(ErrorCode.BadValue, "Use of SCRAM-SHA-256 requires undigested passwords")
    try:
        # PBKDF2 takes tens of milliseconds: on a reader thread, not the event loop.
        return await ctx.gateway.read(make_credentials, user, pwd, mechanisms, not digest)
    except ValueError as exc:
        raise CommandError(ErrorCode.BadValue, f"Error preparing password: {exc}") from None


def _check_database(db: str) -> None:
    if db == "local":
        raise CommandError(ErrorCode.BadValue, "Cannot create users in the local database")
    if db == "$external":
        raise CommandError(
            ErrorCode.NotImplemented, "ebbdb has no external authentication ($external users)"
        )


_NO_RESTRICTIONS = Unsupported("ebbdb does not support authenticationRestrictions", ([], None))


@dataclass(frozen=True)
class UpdateUserParams:
    user: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    pwd: str | None = arg("pwd", Kind.STRING)
    roles: list[Any] | None = arg("roles", Kind.ARRAY)
    custom_data: dict[str, Any] | None = arg("customData", Kind.DOC)
    mechanisms: list[Any] | None = arg("mechanisms", Kind.ARRAY)
    digest_password: bool = arg("digestPassword", Kind.BOOL, True)
    restrictions: Any = arg("authenticationRestrictions", Kind.ARRAY, check=_NO_RESTRICTIONS)


@dataclass(frozen=True)
class CreateUserParams(UpdateUserParams):
    roles: list[Any] = arg("roles", Kind.ARRAY, required=True)


@REGISTRY.command("createUser", params=CreateUserParams, writes=True)
async def create_user(ctx: CommandContext, p: CreateUserParams) -> dict[str, Any]:
    """Add a user to this database, stored with salted SCRAM keys only."""
    _check_database(ctx.db)
    if not p.user:
        raise CommandError(ErrorCode.BadValue, "User document needs 'user' field to be non-empty")
    if p.pwd is None:
        raise CommandError(
            ErrorCode.BadValue,
            "Must provide a 'pwd' field for all user documents, except those with '$external' "
            "as the user's source db",
        )
    roles = _roles(ctx, "createUser", p.roles)
    mechanisms = _mechanisms(p.mechanisms)
    if await ctx.users.get(ctx.gateway, p.user, ctx.db) is not None:
        raise _exists(p.user, ctx.db)
    credentials = await _credentials(ctx, p.user, p.pwd, mechanisms, p.digest_password)
    user = User.new(p.user, ctx.db, roles, credentials, p.custom_data)
    if not await ctx.users.insert(ctx.gateway, user):
        raise _exists(p.user, ctx.db)
    return {"ok": 1.0}


def _exists(user: str, db: str) -> CommandError:
    return CommandError(ErrorCode.Location51003, f'User "{user}@{db}" already exists')


def _not_found(user: str, db: str) -> CommandError:
    return CommandError(ErrorCode.UserNotFound, f"User '{user}@{db}' not found")


async def _existing(ctx: CommandContext, name: str) -> User:
    user = await ctx.users.get(ctx.gateway, name, ctx.db)
    if user is None:
        raise _not_found(name, ctx.db)
    return user


async def _store(ctx: CommandContext, user: User) -> dict[str, Any]:
    if not await ctx.users.replace(ctx.gateway, user):
        raise _not_found(user.user, user.db)
    return {"ok": 1.0}


@REGISTRY.command("updateUser", params=UpdateUserParams, writes=True)
async def update_user(ctx: CommandContext, p: UpdateUserParams) -> dict[str, Any]:
    """Change a user's password, roles, custom data or mechanisms."""
    if p.pwd is None and p.roles is None and p.custom_data is None and p.mechanisms is None:
        raise CommandError(
            ErrorCode.BadValue, "Must specify at least one field to update in updateUser"
        )
    user = await _existing(ctx, p.user)
    changed = user
    if p.roles is not None:
        changed = replace(changed, roles=_roles(ctx, "updateUser", p.roles))
    if p.custom_data is not None:
        changed = replace(changed, custom_data=p.custom_data)
    if p.pwd is not None:
        mechanisms = _mechanisms(p.mechanisms)
        credentials = await _credentials(ctx, p.user, p.pwd, mechanisms, p.digest_password)
        changed = replace(changed, credentials=credentials)
    elif p.mechanisms is not None:
        mechanisms = _mechanisms(p.mechanisms)
        if not set(mechanisms) <= set(user.credentials):
            raise CommandError(
                ErrorCode.BadValue, "mechanisms field must be a subset of previously set mechanisms"
            )
        kept = {m: v for m, v in user.credentials.items() if m in mechanisms}
        changed = replace(changed, credentials=kept)
    return await _store(ctx, changed)


@dataclass(frozen=True)
class DropUserParams:
    user: str = arg(COMMAND_VALUE, Kind.STRING, required=True)


@REGISTRY.command("dropUser", params=DropUserParams, writes=True)
async def drop_user(ctx: CommandContext, p: DropUserParams) -> dict[str, Any]:
    """Remove a user of this database."""
    if not await ctx.users.delete(ctx.gateway, [user_id(p.user, ctx.db)]):
        raise _not_found(p.user, ctx.db)
    return {"ok": 1.0}


@REGISTRY.command("dropAllUsersFromDatabase", writes=True)
async def drop_all_users(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Remove every user of this database; `n` says how many."""
    users = await ctx.users.users(ctx.gateway)
    ids = [uid for uid, u in users.items() if u.db == ctx.db]
    return {"n": await ctx.users.delete(ctx.gateway, ids), "ok": 1.0}


@dataclass(frozen=True)
class RolesChangeParams:
    user: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    roles: list[Any] = arg("roles", Kind.ARRAY, required=True)


@REGISTRY.command("grantRolesToUser", params=RolesChangeParams, writes=True)
async def grant_roles(ctx: CommandContext, p: RolesChangeParams) -> dict[str, Any]:
    """Add roles to a user."""
    roles = _roles(ctx, "grantRolesToUser", p.roles)
    user = await _existing(ctx, p.user)
    merged = user.roles + tuple(r for r in roles if r not in user.roles)
    return await _store(ctx, replace(user, roles=merged))


@REGISTRY.command("revokeRolesFromUser", params=RolesChangeParams, writes=True)
async def revoke_roles(ctx: CommandContext, p: RolesChangeParams) -> dict[str, Any]:
    """Take roles from a user."""
    roles = _roles(ctx, "revokeRolesFromUser", p.roles)
    user = await _existing(ctx, p.user)
    return await _store(ctx, replace(user, roles=tuple(r for r in user.roles if r not in roles)))


@dataclass(frozen=True)
class UsersInfoParams:
    which: Any = arg(COMMAND_VALUE, Kind.ANY, required=True)
    filter: dict[str, Any] | None = arg(
        "filter", Kind.DOC, check=Unsupported("ebbdb does not support usersInfo's filter", (None,))
    )
    show_custom_data: bool = arg("showCustomData", Kind.BOOL, True)
    show_credentials: bool = arg("showCredentials", Kind.BOOL, False)
    show_privileges: bool = arg("showPrivileges", Kind.BOOL, False)
    show_restrictions: bool = arg("showAuthenticationRestrictions", Kind.BOOL, False)


def _wanted(ctx: CommandContext, which: Any) -> set[str] | None:
    """The user ids usersInfo asks for; None: every user of this database."""
    if isinstance(which, Mapping) and which.get("forAllDBs") is True:
        return {"*"}
    if isinstance(which, (int, float)) and not isinstance(which, bool) and which == 1:
        return None
    items = which if isinstance(which, list) else [which]
    out: set[str] = set()
    for item in items:
        if isinstance(item, str):
            out.add(user_id(item, ctx.db))
        elif (
            isinstance(item, Mapping)
            and isinstance(item.get("user"), str)
            and isinstance(item.get("db"), str)
        ):
            out.add(user_id(item["user"], item["db"]))
        else:
            raise CommandError(
                ErrorCode.BadValue,
                "User name must be either a string or a document with 'user' and 'db' fields",
            )
    return out


@REGISTRY.command("usersInfo", params=UsersInfoParams)
async def users_info(ctx: CommandContext, p: UsersInfoParams) -> dict[str, Any]:
    """Describe users: 1 (this database's), a name, {user, db}, a list of them, or
    {forAllDBs: true}. Credentials, when shown, are the salted keys only."""
    wanted = _wanted(ctx, p.which)
    users = await ctx.users.users(ctx.gateway)
    found = [
        u
        for uid, u in users.items()
        if (u.db == ctx.db if wanted is None else ("*" in wanted or uid in wanted))
    ]
    found.sort(key=lambda u: (u.db, u.user))
    out = []
    for u in found:
        doc = u.info(p.show_credentials, p.show_custom_data)
        if p.show_privileges:
            doc["inheritedRoles"] = u.role_documents()
            doc["inheritedPrivileges"] = privilege_documents(Privileges.of(u.roles))
        if p.show_restrictions or p.show_privileges:
            doc["authenticationRestrictions"] = []
        out.append(doc)
    return {"users": out, "ok": 1.0}
