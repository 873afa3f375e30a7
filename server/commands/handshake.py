"""What drivers and shells send on connect: hello/isMaster, ping, buildInfo, whatsmyuri,
connectionStatus, endSessions."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

from ebbdb.protocol import MAX_MESSAGE_SIZE
from ebbdb.server.arguments import MAX_WRITE_BATCH_SIZE, Kind, NoParams, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.registry import REGISTRY
from ebbdb.server.version import (
    EBBDB_VERSION,
    MAX_WIRE_VERSION,
    MIN_WIRE_VERSION,
    MONGODB_VERSION,
    MONGODB_VERSION_ARRAY,
)
from ebbdb.storage.documents import MAX_DOCUMENT_SIZE

LOGICAL_SESSION_TIMEOUT_MINUTES = 30


@dataclass(frozen=True)
class HelloParams:
    client: dict[str, Any] | None = arg("client", Kind.DOC)
    hello_ok: bool = arg("helloOk", Kind.BOOL, False)


@REGISTRY.command("hello", "isMaster", "ismaster", params=HelloParams, lenient=True)
async def hello(ctx: CommandContext, p: HelloParams) -> dict[str, Any]:
    """Describe this server to a connecting client (a standalone, writable primary)."""
    if p.client is not None and ctx.client.metadata is None:
        ctx.client.metadata = dict(p.client)
    primary_field = "isWritablePrimary" if ctx.command == "hello" else "ismaster"
    return {
        primary_field: True,
        "helloOk": True,
        "maxBsonObjectSize": MAX_DOCUMENT_SIZE,
        "maxMessageSizeBytes": MAX_MESSAGE_SIZE,
        "maxWriteBatchSize": MAX_WRITE_BATCH_SIZE,
        "localTime": datetime.datetime.now(datetime.UTC),
        "logicalSessionTimeoutMinutes": LOGICAL_SESSION_TIMEOUT_MINUTES,
        "connectionId": ctx.client.id,
        "minWireVersion": MIN_WIRE_VERSION,
        "maxWireVersion": MAX_WIRE_VERSION,
        "readOnly": False,
        "ok": 1.0,
    }


@REGISTRY.command("ping", lenient=True)
async def ping(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Answer {ok: 1}: the server is up."""
    return {"ok": 1.0}


@REGISTRY.command("buildInfo", "buildinfo", lenient=True)
async def build_info(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """The MongoDB version ebbdb speaks as, and ebbdb's own version under `ebbdb`."""
    return {
        "version": MONGODB_VERSION,
        "gitVersion": "ebbdb-" + EBBDB_VERSION,
        "modules": [],
        "allocator": "system",
        "javascriptEngine": "none",
        "sysInfo": "deprecated",
        "versionArray": list(MONGODB_VERSION_ARRAY),
        "bits": 64,
        "debug": False,
        "maxBsonObjectSize": MAX_DOCUMENT_SIZE,
        "storageEngines": ["lmdb"],
        "buildEnvironment": {},
        "ebbdb": {"version": EBBDB_VERSION},
        "ok": 1.0,
    }


@REGISTRY.command("whatsmyuri", lenient=True)
async def whatsmyuri(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """The client's own address as the server sees it."""
    return {"you": ctx.client.peer, "ok": 1.0}


@dataclass(frozen=True)
class ConnectionStatusParams:
    show_privileges: bool = arg("showPrivileges", Kind.BOOL, False)


@REGISTRY.command("connectionStatus", params=ConnectionStatusParams, lenient=True)
async def connection_status(ctx: CommandContext, p: ConnectionStatusParams) -> dict[str, Any]:
    """Who is authenticated on this connection (nobody: ebbdb has no auth yet)."""
    auth: dict[str, Any] = {"authenticatedUsers": [], "authenticatedUserRoles": []}
    if p.show_privileges:
        auth["authenticatedUserPrivileges"] = []
    return {"authInfo": auth, "ok": 1.0}


@REGISTRY.command("endSessions", lenient=True)
async def end_sessions(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Accept the driver's list of ended sessions (ebbdb keeps no session state)."""
    return {"ok": 1.0}
