"""The check the dispatcher runs before a handler under --auth: 13 Unauthorized, in MongoDB's two
wordings, for a client that has not logged in and for a user whose roles do not allow the command;
and the localhost exception, which lets a local client create the first user."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ebbdb.server.auth.roles import NONE, Privileges, required
from ebbdb.server.auth.state import ClientAuth, is_localhost
from ebbdb.server.auth.users import UserStore
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.gateway import Gateway
from ebbdb.server.profiler import MAX_LOGGED_COMMAND, loggable_command
from ebbdb.storage.core.values import render


async def authorize(
    store: UserStore,
    gateway: Gateway,
    auth: ClientAuth,
    peer: str,
    name: str,
    db: str,
    body: Mapping[str, Any],
) -> None:
    """Raise 13 Unauthorized unless the client may run command `name` (canonical) on `db`."""
    needs = required(name, db, body)
    if all(action == NONE for _db, action in needs):
        return
    if not auth.users:
        if (
            name == "createUser"
            and db == "admin"
            and await localhost_exception(store, gateway, peer)
        ):
            return
        raise CommandError(ErrorCode.Unauthorized, f"Command {name} requires authentication")
    if name == "usersInfo" and _only_self(auth, db, body.get("usersInfo")):
        return  # every user may see their own
    privileges = await store.privileges(gateway, list(auth.users))
    if not all(privileges.allows(on, action) for on, action in needs):
        raise not_authorized(db, body)


def _only_self(auth: ClientAuth, db: str, which: Any) -> bool:
    """Whether usersInfo's argument names only users the client is logged in as."""
    names = which if isinstance(which, list) else [which]
    for one in names:
        if isinstance(one, str):
            user, user_db = one, db
        elif isinstance(one, Mapping) and isinstance(one.get("user"), str):
            user, user_db = one["user"], one.get("db", db)
        else:
            return False
        if (user, user_db) not in auth.users.values():
            return False
    return bool(names)


async def localhost_exception(store: UserStore, gateway: Gateway, peer: str) -> bool:
    """MongoDB's localhost exception: while no user exists, a client on this machine may create
    the first one (in admin)."""
    return is_localhost(peer) and not await store.users(gateway)


def not_authorized(db: str, body: Mapping[str, Any]) -> CommandError:
    shown = render(loggable_command(body, MAX_LOGGED_COMMAND))
    return CommandError(
        ErrorCode.Unauthorized, f"not authorized on {db} to execute command {shown}"
    )


async def client_privileges(store: UserStore, gateway: Gateway, auth: ClientAuth) -> Privileges:
    """What the client's users may do together (nothing before a login)."""
    if not auth.users:
        return Privileges()
    return await store.privileges(gateway, list(auth.users))


async def visible_databases(
    enabled: bool, store: UserStore, gateway: Gateway, auth: ClientAuth
) -> set[str] | None:
    """The databases listDatabases shows the client: under --auth, those its roles name, unless
    it may list them all (None: every database)."""
    if not enabled:
        return None
    return (await client_privileges(store, gateway, auth)).databases()
