"""The users: documents in admin.system.users (salted keys only, never a password), written through
the gateway's writer, and a cache of them with each user's privileges, reloaded after a change.
The store is part of every server; what only logins need (the roles' privileges, SCRAM) and
changing or dropping a user (the query language) are imported on first use, not at start."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import bson

from ebbdb.server.auth.state import user_id
from ebbdb.server.gateway import Gateway
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import DuplicateKey
from ebbdb.storage.expiry import ttl

if TYPE_CHECKING:
    from ebbdb.server.auth.roles import Privileges
    from ebbdb.storage.engine.store import Engine
    from ebbdb.storage.execution.execute import QuerySpec

USERS_DB = "admin"
USERS_COLLECTION = "system.users"


@dataclass(frozen=True)
class User:
    """One user document, read."""

    user: str
    db: str
    user_id: Any
    roles: tuple[tuple[str, str], ...]
    credentials: Mapping[str, Any]
    custom_data: Any = None

    @property
    def id(self) -> str:
        return user_id(self.user, self.db)

    @property
    def mechanisms(self) -> list[str]:
        from ebbdb.server.auth.scram import MECHANISMS

        return [m for m in MECHANISMS if m in self.credentials]

    @classmethod
    def new(
        cls,
        user: str,
        db: str,
        roles: tuple[tuple[str, str], ...],
        credentials: Mapping[str, Any],
        custom_data: Any = None,
    ) -> User:
        return cls(user, db, bson.Binary.from_uuid(uuid.uuid4()), roles, credentials, custom_data)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any]) -> User:
        roles = tuple(
            (str(r.get("role")), str(r.get("db")))
            for r in doc.get("roles") or ()
            if isinstance(r, Mapping)
        )
        return cls(
            str(doc.get("user")),
            str(doc.get("db")),
            doc.get("userId"),
            roles,
            dict(doc.get("credentials") or {}),
            doc.get("customData"),
        )

    def document(self) -> dict[str, Any]:
        """As stored in admin.system.users."""
        doc: dict[str, Any] = {
            "_id": self.id,
            "userId": self.user_id,
            "user": self.user,
            "db": self.db,
            "credentials": dict(self.credentials),
            "roles": self.role_documents(),
        }
        if self.custom_data is not None:
            doc["customData"] = self.custom_data
        return doc

    def role_documents(self) -> list[dict[str, str]]:
        return [{"role": r, "db": d} for r, d in self.roles]

    def info(self, show_credentials: bool = False, show_custom_data: bool = True) -> dict[str, Any]:
        """As usersInfo shows it. Credentials are the salted keys, which cannot log anyone in."""
        doc: dict[str, Any] = {
            "_id": self.id,
            "userId": self.user_id,
            "user": self.user,
            "db": self.db,
        }
        if show_credentials:
            doc["credentials"] = dict(self.credentials)
        if show_custom_data and self.custom_data is not None:
            doc["customData"] = self.custom_data
        doc["roles"] = self.role_documents()
        doc["mechanisms"] = self.mechanisms
        return doc


def _decode(raw: bytes) -> dict[str, Any]:
    return bson.decode(raw, CODEC)


def _load(engine: Engine) -> list[User]:
    coll = engine.collection(USERS_DB, USERS_COLLECTION)
    if coll is None:
        return []
    with engine.read() as r:
        return [User.from_doc(_decode(ttl.body(v))) for _rid, v in r.scan(coll)]


def _by_id(uid: str) -> QuerySpec:
    from ebbdb.storage.execution.execute import QuerySpec

    return QuerySpec.parse({"_id": uid})


class UserStore:
    """The users as last read, and their privileges. Every change made here reloads the cache;
    a write to admin made elsewhere (a root user editing admin.system.users by hand) calls
    `invalidate`."""

    def __init__(self) -> None:
        self._users: dict[str, User] | None = None
        self._privileges: dict[str, Privileges] = {}

    def invalidate(self) -> None:
        self._users = None

    async def users(self, gateway: Gateway) -> dict[str, User]:
        """Every user by id ("db.user")."""
        users = self._users
        if users is None:
            from ebbdb.server.auth.roles import Privileges

            loaded = await gateway.read(_load, gateway.engine)
            users = {u.id: u for u in loaded}
            self._users = users
            self._privileges = {uid: Privileges.of(u.roles) for uid, u in users.items()}
        return users

    async def get(self, gateway: Gateway, user: str, db: str) -> User | None:
        return (await self.users(gateway)).get(user_id(user, db))

    async def privileges(self, gateway: Gateway, ids: list[str]) -> Privileges:
        """What the users `ids` may do together (a dropped user adds nothing)."""
        from ebbdb.server.auth.roles import Privileges

        await self.users(gateway)
        if len(ids) == 1:
            return self._privileges.get(ids[0]) or Privileges()
        users = self._users or {}
        return Privileges.of(r for uid in ids if uid in users for r in users[uid].roles)

    async def insert(self, gateway: Gateway, user: User) -> bool:
        """Store a new user; False if one of that name exists already."""
        raw = bson.encode(user.document(), codec_options=CODEC)
        result = await gateway.write(gateway.engine.insert, USERS_DB, USERS_COLLECTION, [raw])
        self.invalidate()
        if result.errors:
            exc = result.errors[0][1]
            if isinstance(exc, DuplicateKey):
                return False
            raise exc
        return True

    async def replace(self, gateway: Gateway, user: User) -> bool:
        """Store a changed user; False if it no longer exists."""
        from ebbdb.storage.execution import writes
        from ebbdb.storage.query.update import parse_update

        change = parse_update(user.document())
        result = await gateway.write_stamped(
            writes.update,
            gateway.engine,
            USERS_DB,
            USERS_COLLECTION,
            _by_id(user.id),
            change,
            False,
            False,
        )
        self.invalidate()
        return bool(result.matched)

    async def delete(self, gateway: Gateway, ids: list[str]) -> int:
        """Remove users by id; how many there were."""
        if not ids or gateway.engine.collection(USERS_DB, USERS_COLLECTION) is None:
            return 0
        from ebbdb.storage.execution import writes
        from ebbdb.storage.execution.execute import QuerySpec

        spec = QuerySpec.parse({"_id": {"$in": ids}})
        result = await gateway.write_stamped(
            writes.delete, gateway.engine, USERS_DB, USERS_COLLECTION, spec, False
        )
        self.invalidate()
        return result.deleted
