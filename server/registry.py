"""The command registry: handlers register with a decorator; the dispatcher and listCommands read it.

A command module is imported on the first request that names one of its commands, not at start:
COMMAND_MODULES says where each name lives (tests/server/test_registry.py holds it to what the
modules register, so a new command cannot be left out)."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ebbdb.server.arguments import NoParams

Handler = Callable[[Any, Any], Awaitable[dict[str, Any]]]

#: The package of the command modules the global registry loads.
COMMANDS_PACKAGE = "ebbdb.server.commands"

#: Every module under server/commands that registers commands, with the names (aliases included)
#: each registers.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "admin": (
        "fsync",
        "fsyncUnlock",
        "getCmdLineOpts",
        "getLog",
        "getParameter",
        "hostInfo",
        "listCommands",
        "profile",
        "serverStatus",
        "setParameter",
    ),
    "aggregate": ("aggregate",),
    "map_reduce": ("mapReduce",),
    "auth": (
        "createUser",
        "dropAllUsersFromDatabase",
        "dropUser",
        "grantRolesToUser",
        "logout",
        "revokeRolesFromUser",
        "saslContinue",
        "saslStart",
        "updateUser",
        "usersInfo",
    ),
    "capped": ("cloneCollectionAsCapped", "convertToCapped"),
    "catalog": ("collMod", "create", "drop", "dropDatabase", "listCollections", "listDatabases"),
    "current_op": ("currentOp", "killOp"),
    "handshake": (
        "buildInfo",
        "buildinfo",
        "connectionStatus",
        "hello",
        "isMaster",
        "ismaster",
        "ping",
        "whatsmyuri",
    ),
    "indexes": ("createIndexes", "deleteIndexes", "dropIndexes", "listIndexes"),
    "lifecycle": ("shutdown",),
    "reads": ("count", "distinct", "explain", "find", "getMore", "killCursors"),
    "rename": ("renameCollection",),
    "replication": ("replSetGetConfig", "replSetGetStatus", "replSetInitiate", "replSetStepDown"),
    "sessions": (
        "endSessions",
        "killAllSessions",
        "killAllSessionsByPattern",
        "killSessions",
        "reapLogicalSessionCacheNow",
        "refreshLogicalSessionCacheNow",
        "refreshSessions",
        "startSession",
    ),
    "stats": ("collStats", "collstats", "dbStats", "dbstats"),
    "testing": ("configureFailPoint", "resetTestState", "ttlClock", "ttlMonitorPass"),
    "transactions": ("abortTransaction", "commitTransaction"),
    "ttl_status": ("ttlStatus",),
    "validate": ("validate",),
    "writes": ("delete", "findAndModify", "findandmodify", "insert", "update"),
}


@dataclass(frozen=True)
class Command:
    name: str
    handler: Handler
    params: type
    help: str
    admin_only: bool = False
    lenient: bool = False  # ignore unknown fields (handshake/diagnostics)
    test_only: bool = False  # exists only with enableTestCommands=1
    aliases: tuple[str, ...] = ()
    #: Changes data: takes a writeConcern (others refuse one, as MongoDB); a function of the
    #: command document for a command that writes only sometimes (aggregate with $out/$merge).
    writes: bool | Callable[[Mapping[str, Any]], bool] = False

    def takes_write_concern(self, body: Mapping[str, Any]) -> bool:
        return self.writes(body) if callable(self.writes) else self.writes


class Registry:
    """Commands by name. `modules` (module -> the names it registers, under `package`) are
    imported on the first lookup of one of their names, or all at once by commands()."""

    def __init__(
        self, modules: Mapping[str, tuple[str, ...]] | None = None, package: str = ""
    ) -> None:
        self._by_name: dict[str, Command] = {}
        self._canonical: dict[str, Command] = {}
        self._package = package
        self._module_of = {name: m for m, names in (modules or {}).items() for name in names}
        self._unloaded = set(modules or ())

    def command(
        self,
        name: str,
        *aliases: str,
        params: type = NoParams,
        admin_only: bool = False,
        lenient: bool = False,
        test_only: bool = False,
        writes: bool | Callable[[Mapping[str, Any]], bool] = False,
    ) -> Callable[[Handler], Handler]:
        """Register `async def handler(ctx, params) -> reply` under `name` and its aliases."""

        def register(handler: Handler) -> Handler:
            help_text = inspect.getdoc(handler) or ""
            cmd = Command(
                name, handler, params, help_text, admin_only, lenient, test_only, aliases, writes
            )
            taken = [n for n in (name, *aliases) if n in self._by_name]
            if taken:
                raise ValueError(f"command {taken[0]!r} registered twice")
            for n in (name, *aliases):
                self._by_name[n] = cmd
            self._canonical[name] = cmd
            return handler

        return register

    def lookup(self, name: str) -> Command | None:
        """The command `name` names (case-sensitive), importing its module the first time;
        None for a name nothing registers. While another thread imports that module, this waits
        for the import to finish (Python's per-module import lock): a handler registered early in
        its module is not handed out before the helpers defined after it exist."""
        module = self._module_of.get(name)
        if module is not None and module in self._unloaded:
            self._load(module)
        return self._by_name.get(name)

    def unloaded_module(self, name: str) -> str | None:
        """The module that registers `name` while it is not imported yet (the next lookup of
        `name` imports it); None once it is, and for a name no module registers."""
        module = self._module_of.get(name)
        return module if module in self._unloaded else None

    def commands(self) -> list[Command]:
        """Every command, once each (not its aliases), in name order: every module loaded."""
        for module in sorted(self._unloaded):
            self._load(module)
        return [self._canonical[n] for n in sorted(self._canonical)]

    def _load(self, module: str) -> None:
        importlib.import_module(f"{self._package}.{module}")
        self._unloaded.discard(module)


#: The one registry every module under server/commands registers into.
REGISTRY = Registry(COMMAND_MODULES, COMMANDS_PACKAGE)
