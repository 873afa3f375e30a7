"""Who may run what: MongoDB's built-in roles as sets of action classes, the action class of every
command (one declarative table, checked by a test against the registry), and the check the
dispatcher runs before a handler under --auth."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# -- action classes --------------------------------------------------------------------------------
#: Needs no login at all (the handshake, the login itself).
NONE = "none"
#: Any logged-in user (what it shows or touches is the user's own).
AUTHENTICATED = "authenticated"
#: Per database.
READ = "read"  # find, count, distinct, aggregate, getMore, killCursors
CATALOG = "catalog"  # listCollections, listIndexes, collStats, dbStats
WRITE = "write"  # insert, update, delete, findAndModify
DDL = "ddl"  # create, drop, createIndexes, dropIndexes, renameCollection
DB_ADMIN = "dbAdmin"  # collMod, dropDatabase, profile, validate
USER_ADMIN = "userAdmin"  # createUser & co
#: admin.system.users and the other collections of the auth schema (root only, as MongoDB).
SYSTEM_READ = "systemRead"
SYSTEM_WRITE = "systemWrite"
#: The cluster.
CLUSTER_MONITOR = "clusterMonitor"  # serverStatus, getLog, getParameter, hostInfo, ...
CLUSTER_ADMIN = "clusterAdmin"  # shutdown, setParameter, fsync, ...
LIST_DATABASES = "listDatabases"

CLUSTER_CLASSES = frozenset({CLUSTER_MONITOR, CLUSTER_ADMIN, LIST_DATABASES})

#: The action class of every command, by its canonical name (tests/server/test_auth_roles.py
#: fails for a registered command missing here: a new command must be classified).
COMMANDS: dict[str, str] = {
    # handshake and login
    "hello": NONE,
    "buildInfo": NONE,
    "ping": NONE,
    "whatsmyuri": NONE,
    "connectionStatus": NONE,
    "endSessions": NONE,
    "listCommands": NONE,
    "saslStart": NONE,
    "saslContinue": NONE,
    "logout": NONE,
    # reads
    "find": READ,
    "getMore": READ,
    "killCursors": READ,
    "count": READ,
    "distinct": READ,
    "aggregate": READ,
    "explain": READ,
    "listCollections": CATALOG,
    "listIndexes": CATALOG,
    "collStats": CATALOG,
    "dbStats": CATALOG,
    "ttlStatus": CATALOG,
    # writes
    "insert": WRITE,
    "update": WRITE,
    "delete": WRITE,
    "findAndModify": WRITE,
    "create": DDL,
    "drop": DDL,
    "createIndexes": DDL,
    "dropIndexes": DDL,
    "renameCollection": DDL,
    "convertToCapped": DDL,
    "cloneCollectionAsCapped": DDL,
    # database administration
    "collMod": DB_ADMIN,
    "dropDatabase": DB_ADMIN,
    "profile": DB_ADMIN,
    "validate": DB_ADMIN,
    # users
    "createUser": USER_ADMIN,
    "updateUser": USER_ADMIN,
    "dropUser": USER_ADMIN,
    "dropAllUsersFromDatabase": USER_ADMIN,
    "usersInfo": USER_ADMIN,
    "grantRolesToUser": USER_ADMIN,
    "revokeRolesFromUser": USER_ADMIN,
    # sessions and transactions: the user's own
    "startSession": AUTHENTICATED,
    "refreshSessions": AUTHENTICATED,
    "killSessions": AUTHENTICATED,
    # any user's sessions (MongoDB's killAnySession action, in hostManager and clusterAdmin)
    "killAllSessions": CLUSTER_ADMIN,
    "killAllSessionsByPattern": CLUSTER_ADMIN,
    "commitTransaction": AUTHENTICATED,
    "abortTransaction": AUTHENTICATED,
    "listDatabases": AUTHENTICATED,  # lists only the databases the user has a role on
    # the server
    "serverStatus": CLUSTER_MONITOR,
    "getLog": CLUSTER_MONITOR,
    "getCmdLineOpts": CLUSTER_MONITOR,
    "getParameter": CLUSTER_MONITOR,
    "hostInfo": CLUSTER_MONITOR,
    "currentOp": CLUSTER_MONITOR,  # MongoDB's inprog action
    "killOp": CLUSTER_ADMIN,  # MongoDB's killop action (hostManager, in clusterAdmin)
    # the replica set: MongoDB's replSetGetStatus and replSetGetConfig actions (clusterMonitor),
    # replSetConfigure and replSetStateChange (clusterManager, in clusterAdmin)
    "replSetGetStatus": CLUSTER_MONITOR,
    "replSetGetConfig": CLUSTER_MONITOR,
    "replSetInitiate": CLUSTER_ADMIN,
    "replSetStepDown": CLUSTER_ADMIN,
    "setParameter": CLUSTER_ADMIN,
    "shutdown": CLUSTER_ADMIN,
    "fsync": CLUSTER_ADMIN,
    "fsyncUnlock": CLUSTER_ADMIN,
    # test commands (enableTestCommands=1)
    "ttlClock": CLUSTER_ADMIN,
    "ttlMonitorPass": CLUSTER_ADMIN,
    "configureFailPoint": CLUSTER_ADMIN,
    "resetTestState": CLUSTER_ADMIN,
    "refreshLogicalSessionCacheNow": CLUSTER_ADMIN,
    "reapLogicalSessionCacheNow": CLUSTER_ADMIN,
    # refused for everyone (server-side JavaScript), after the check a read would pass
    "mapReduce": READ,
}

#: Collections of the admin database that belong to the auth schema.
_AUTH_SCHEMA = frozenset({"system.users", "system.roles", "system.version"})

# -- roles -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Role:
    """A built-in role: action classes on the database it is granted on (`db`), on every
    database (`any_db`: roles that exist only in admin), on the cluster; `everything` for root."""

    db: frozenset[str] = frozenset()
    any_db: frozenset[str] = frozenset()
    cluster: frozenset[str] = frozenset()
    admin_only: bool = False
    everything: bool = False


_READ = frozenset({READ, CATALOG})
_READ_WRITE = _READ | {WRITE, DDL}
_DB_ADMIN = frozenset({CATALOG, DDL, DB_ADMIN})
ROLES: dict[str, Role] = {
    "read": Role(db=_READ),
    "readWrite": Role(db=_READ_WRITE),
    "dbAdmin": Role(db=_DB_ADMIN),
    "userAdmin": Role(db=frozenset({USER_ADMIN})),
    "dbOwner": Role(db=_READ_WRITE | _DB_ADMIN | {USER_ADMIN}),
    "clusterMonitor": Role(
        cluster=frozenset({CLUSTER_MONITOR, LIST_DATABASES}),
        any_db=frozenset({CATALOG}),
        admin_only=True,
    ),
    "clusterAdmin": Role(
        cluster=frozenset({CLUSTER_MONITOR, CLUSTER_ADMIN, LIST_DATABASES}),
        any_db=frozenset({CATALOG}),
        admin_only=True,
    ),
    "readAnyDatabase": Role(any_db=_READ, cluster=frozenset({LIST_DATABASES}), admin_only=True),
    "readWriteAnyDatabase": Role(
        any_db=_READ_WRITE, cluster=frozenset({LIST_DATABASES}), admin_only=True
    ),
    "userAdminAnyDatabase": Role(
        any_db=frozenset({USER_ADMIN, SYSTEM_READ}),
        cluster=frozenset({LIST_DATABASES}),
        admin_only=True,
    ),
    "dbAdminAnyDatabase": Role(
        any_db=_DB_ADMIN, cluster=frozenset({LIST_DATABASES}), admin_only=True
    ),
    "root": Role(admin_only=True, everything=True),
}


def role_exists(role: str, db: str) -> bool:
    """Whether `role@db` names a built-in role (the AnyDatabase, cluster and root roles exist only
    in admin)."""
    found = ROLES.get(role)
    return found is not None and (db == "admin" or not found.admin_only)


@dataclass
class Privileges:
    """What a set of granted roles allows, flattened."""

    by_db: dict[str, set[str]] = field(default_factory=dict)
    any_db: set[str] = field(default_factory=set)
    cluster: set[str] = field(default_factory=set)
    everything: bool = False

    @classmethod
    def of(cls, roles: Iterable[tuple[str, str]]) -> Privileges:
        out = cls()
        for name, db in roles:
            role = ROLES.get(name)
            if role is None or (role.admin_only and db != "admin"):
                continue
            out.everything |= role.everything
            out.by_db.setdefault(db, set()).update(role.db)
            out.any_db |= role.any_db
            out.cluster |= role.cluster
        return out

    def allows(self, db: str, action: str) -> bool:
        if self.everything or action in (NONE, AUTHENTICATED):
            return True
        if action in CLUSTER_CLASSES:
            return action in self.cluster
        return action in self.any_db or action in self.by_db.get(db, ())

    def databases(self) -> set[str] | None:
        """The databases a role names (None: every database, as listDatabases shows them)."""
        if self.everything or LIST_DATABASES in self.cluster:
            return None
        return {db for db, actions in self.by_db.items() if actions}


# -- what a command needs --------------------------------------------------------------------------


def _collection(name: str, body: Mapping[str, Any]) -> str | None:
    target = body.get("collection") if name == "getMore" else body.get(name)
    return target if isinstance(target, str) else None


def _on_auth_schema(db: str, action: str, collection: str | None) -> str:
    """Reads and writes of admin.system.users (and the other auth collections) need root."""
    if db != "admin" or collection not in _AUTH_SCHEMA:
        return action
    if action in (READ, CATALOG):
        return SYSTEM_READ
    if action in (WRITE, DDL):
        return SYSTEM_WRITE
    return action


def _split(ns: Any, default_db: str) -> tuple[str, str | None]:
    if not isinstance(ns, str) or "." not in ns:
        return default_db, None
    db, _, coll = ns.partition(".")
    return db, coll


def required(name: str, db: str, body: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(database, action class) pairs that `name` run on `db` with `body` needs, all of them.
    A command missing from COMMANDS needs root."""
    action = COMMANDS.get(name, SYSTEM_WRITE)
    if name == "explain":
        inner = body.get("explain")
        if isinstance(inner, Mapping) and inner:
            inner_name = next(iter(inner))
            inner_action = COMMANDS.get(inner_name, SYSTEM_WRITE)
            if inner_action in (READ, WRITE):
                return [(db, _on_auth_schema(db, READ, _collection(inner_name, inner)))]
        return [(db, READ)]
    if name == "renameCollection":
        source_db, source = _split(body.get("renameCollection"), db)
        target_db, target = _split(body.get("to"), db)
        return [
            (source_db, _on_auth_schema(source_db, READ, source)),
            (source_db, _on_auth_schema(source_db, DDL, source)),
            (target_db, _on_auth_schema(target_db, DDL, target)),
        ]
    if name == "aggregate" and (listing := _session_listing(body.get("pipeline"))) is not None:
        return [(db, listing)]
    needs = [(db, _on_auth_schema(db, action, _collection(name, body)))]
    if name == "aggregate":
        needs += _pipeline_needs(db, body.get("pipeline"))
    return needs


def _session_listing(pipeline: Any) -> str | None:
    """What a pipeline that lists sessions needs, as MongoDB's $listLocalSessions and
    $listSessions: nothing but a login for the user's own, the cluster's listSessions action
    (clusterMonitor) for every user's or named users' (None: not such a pipeline)."""
    if not isinstance(pipeline, list) or not pipeline or not isinstance(pipeline[0], Mapping):
        return None
    stage = next(iter(pipeline[0]), "")
    if stage not in ("$listLocalSessions", "$listSessions"):
        return None
    spec = pipeline[0][stage]
    if isinstance(spec, Mapping) and (spec.get("allUsers") or spec.get("users")):
        return CLUSTER_MONITOR
    return AUTHENTICATED


def _pipeline_needs(db: str, pipeline: Any) -> list[tuple[str, str]]:
    """$out and $merge write to their target; $currentOp is the cluster's."""
    if not isinstance(pipeline, list) or not pipeline:
        return []
    needs: list[tuple[str, str]] = []
    first, last = pipeline[0], pipeline[-1]
    if isinstance(first, Mapping) and "$currentOp" in first:
        needs.append((db, CLUSTER_MONITOR))
    if isinstance(last, Mapping) and ("$out" in last or "$merge" in last):
        spec = last.get("$out", last.get("$merge"))
        target_db, target = db, spec if isinstance(spec, str) else None
        if isinstance(spec, Mapping):
            into = spec.get("into", spec)
            if isinstance(into, Mapping):
                target_db = into.get("db", db) if isinstance(into.get("db", db), str) else db
                coll = into.get("coll")
                target = coll if isinstance(coll, str) else None
            elif isinstance(into, str):
                target = into
            if isinstance(spec.get("db"), str):
                target_db = spec["db"]
        needs += [
            (target_db, _on_auth_schema(target_db, WRITE, target)),
            (target_db, _on_auth_schema(target_db, DDL, target)),
        ]
    return needs


# -- connectionStatus's privileges -----------------------------------------------------------------

#: MongoDB's action names that each class stands for (connectionStatus showPrivileges).
ACTION_NAMES: dict[str, tuple[str, ...]] = {
    READ: ("changeStream", "find", "killCursors"),
    CATALOG: ("collStats", "dbStats", "listCollections", "listIndexes"),
    WRITE: ("insert", "remove", "update"),
    DDL: (
        "createCollection",
        "createIndex",
        "dropCollection",
        "dropIndex",
        "renameCollectionSameDB",
    ),
    DB_ADMIN: ("collMod", "dropDatabase", "enableProfiler", "validate"),
    USER_ADMIN: ("changePassword", "createUser", "dropUser", "grantRole", "revokeRole", "viewUser"),
    SYSTEM_READ: ("find",),
    CLUSTER_MONITOR: (
        "getCmdLineOpts",
        "getLog",
        "getParameter",
        "hostInfo",
        "inprog",
        "serverStatus",
    ),
    CLUSTER_ADMIN: ("fsync", "setParameter", "shutdown", "unlock"),
    LIST_DATABASES: ("listDatabases",),
}


def privilege_documents(p: Privileges) -> list[dict[str, Any]]:
    """The privileges as connectionStatus's authenticatedUserPrivileges lists them."""
    if p.everything:
        return [{"resource": {"anyResource": True}, "actions": ["anyAction"]}]

    def actions(classes: Iterable[str]) -> list[str]:
        return sorted({a for c in classes for a in ACTION_NAMES.get(c, ())})

    out: list[dict[str, Any]] = []
    if p.cluster:
        out.append({"resource": {"cluster": True}, "actions": actions(p.cluster)})
    if p.any_db:
        out.append({"resource": {"db": "", "collection": ""}, "actions": actions(p.any_db)})
    for db in sorted(p.by_db):
        if p.by_db[db]:
            out.append({"resource": {"db": db, "collection": ""}, "actions": actions(p.by_db[db])})
    return out
