"""What drivers and shells send on connect: hello/isMaster, ping, buildInfo, whatsmyuri,
connectionStatus."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import bson

from ebbdb.protocol import MAX_MESSAGE_SIZE
from ebbdb.server import version
from ebbdb.server.arguments import MAX_WRITE_BATCH_SIZE, Kind, NoParams, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CodedError, CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.core.documents import MAX_DOCUMENT_SIZE


@dataclass(frozen=True)
class HelloParams:
    client: dict[str, Any] | None = arg("client", Kind.DOC)
    hello_ok: bool = arg("helloOk", Kind.BOOL, False)
    speculative: dict[str, Any] | None = arg("speculativeAuthenticate", Kind.DOC)
    sasl_supported_mechs: str | None = arg("saslSupportedMechs", Kind.STRING)
    #: An awaitable hello (drivers' streaming monitor): with the server's current topologyVersion,
    #: the reply waits up to maxAwaitTimeMS for a change.
    topology_version: dict[str, Any] | None = arg("topologyVersion", Kind.DOC)
    max_await_ms: int | None = arg("maxAwaitTimeMS", Kind.INT)


#: mongod's limits on the `client` document of a handshake (its ClientMetadata::parse): the
#: whole document (mongod's own; a mongos allows 512), and the application name.
MAX_CLIENT_METADATA_BYTES = 1024
MAX_APP_NAME_BYTES = 128
#: The sub-documents a `client` document may carry, and the string fields mongod checks in each.
_METADATA_STRINGS = {"application": ("name",), "driver": ("name", "version"), "os": ("type",)}


def check_client_metadata(doc: Mapping[str, Any]) -> None:
    """Refuse a `client` document as mongod does: past MAX_CLIENT_METADATA_BYTES 185
    ClientMetadataDocumentTooLarge, an application name past MAX_APP_NAME_BYTES 184
    ClientMetadataAppNameTooLarge, a sub-document or a checked field of the wrong type 14
    (mongod's words, "less then" included). mongod also requires `driver` and `os` (183); that
    is not enforced, as some tools leave `os` out."""
    size = len(bson.encode(doc))
    if size > MAX_CLIENT_METADATA_BYTES:
        raise CommandError(
            ErrorCode.ClientMetadataDocumentTooLarge,
            "The client metadata document must be less then or equal to "
            f"{MAX_CLIENT_METADATA_BYTES}bytes",
        )
    for part, fields in _METADATA_STRINGS.items():
        if part not in doc:
            continue
        sub = doc[part]
        if not isinstance(sub, Mapping):
            raise CommandError(
                ErrorCode.TypeMismatch,
                f"The '{part}' field is required to be a BSON document in the client metadata "
                "document",
            )
        for field in fields:
            if field in sub and type(sub[field]) is not str:
                raise CommandError(
                    ErrorCode.TypeMismatch,
                    f"The '{part}.{field}' field must be a string in the client metadata document",
                )
    name = doc.get("application", {}).get("name", "")
    if len(name.encode("utf-8", "surrogatepass")) > MAX_APP_NAME_BYTES:
        raise CommandError(
            ErrorCode.ClientMetadataAppNameTooLarge,
            f"The 'application.name' field must be less then or equal to {MAX_APP_NAME_BYTES} "
            "bytes in the client metadata document",
        )


@REGISTRY.command("hello", "isMaster", "ismaster", params=HelloParams, lenient=True)
async def hello(ctx: CommandContext, p: HelloParams) -> dict[str, Any]:
    """Describe this server to a connecting client (a standalone, writable primary)."""
    if p.client is not None and ctx.client.metadata is None:
        check_client_metadata(p.client)
        ctx.client.metadata = dict(p.client)
    primary_field = "isWritablePrimary" if ctx.command == "hello" else "ismaster"
    replica_set = ctx.replica_set
    if p.max_await_ms is not None and p.max_await_ms < 0:
        raise CodedError(31373, "Location31373", "maxAwaitTimeMS must be a non-negative integer")
    if (p.topology_version is None) != (p.max_await_ms is None):
        raise CodedError(
            51760,
            "Location51760",
            "A request with a 'topologyVersion' must include 'maxAwaitTimeMS'"
            if p.topology_version is not None
            else "A request with 'maxAwaitTimeMS' must include a 'topologyVersion'",
        )
    if (
        replica_set is not None
        and p.max_await_ms is not None
        and replica_set.same_topology(p.topology_version)
    ):
        await replica_set.await_change(p.max_await_ms)
    login: dict[str, Any] = {}
    if p.speculative is not None or p.sasl_supported_mechs is not None:
        # The login commands' module (and SCRAM) only for a client that logs in.
        from ebbdb.server.commands.auth import hello_fields

        login = await hello_fields(ctx, p.speculative, p.sasl_supported_mechs)
    reply: dict[str, Any] = {}
    if replica_set is not None:
        for key, value in replica_set.hello_fields().items():
            # isMaster's spelling of isWritablePrimary, in its place.
            reply[primary_field if key == "isWritablePrimary" else key] = value
    else:
        reply[primary_field] = True
    return {
        **reply,
        "helloOk": True,
        "maxBsonObjectSize": MAX_DOCUMENT_SIZE,
        "maxMessageSizeBytes": MAX_MESSAGE_SIZE,
        "maxWriteBatchSize": MAX_WRITE_BATCH_SIZE,
        "localTime": datetime.datetime.now(datetime.UTC),
        "logicalSessionTimeoutMinutes": ctx.parameters.get("localLogicalSessionTimeoutMinutes"),
        "connectionId": ctx.client.id,
        "minWireVersion": version.MIN_WIRE_VERSION,
        "maxWireVersion": version.MAX_WIRE_VERSION,
        "readOnly": False,
        **login,
        "ok": 1.0,
    }


@REGISTRY.command("ping", lenient=True)
async def ping(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Answer {ok: 1}: the server is up."""
    return {"ok": 1.0}


@REGISTRY.command("buildInfo", "buildinfo", lenient=True)
async def build_info(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """The MongoDB version ebbdb speaks as, in mongod's fields and types, what it was built with
    (the Python that runs it, the OpenSSL its ssl module links), and ebbdb's own version under
    `ebbdb`."""
    # Imported here: every client's first command loads this module, few ask for buildInfo.
    import platform
    import ssl
    import sys

    machine = platform.machine()
    return {
        "version": version.MONGODB_VERSION,
        "gitVersion": "ebbdb-" + version.EBBDB_VERSION,
        "modules": [],
        "allocator": "system",
        "javascriptEngine": "none",
        "sysInfo": "deprecated",
        "versionArray": list(version.MONGODB_VERSION_ARRAY),
        "openssl": {"running": ssl.OPENSSL_VERSION, "compiled": ssl.OPENSSL_VERSION},
        "buildEnvironment": {
            "distmod": "",
            "distarch": machine,
            "cc": platform.python_compiler(),
            "ccflags": "",
            "cxx": platform.python_compiler(),
            "cxxflags": "",
            "linkflags": "",
            "target_arch": machine,
            "target_os": platform.system().lower(),
            "cppdefines": "",
        },
        "bits": 64 if sys.maxsize > 2**32 else 32,
        "debug": False,
        "maxBsonObjectSize": MAX_DOCUMENT_SIZE,
        "storageEngines": ["lmdb"],
        "ebbdb": {"version": version.EBBDB_VERSION, "python": platform.python_version()},
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
    """Who is logged in on this connection, with their roles (and privileges)."""
    users = await ctx.users.users(ctx.gateway) if ctx.client.auth.users else {}
    names = [{"user": u, "db": d} for u, d in ctx.client.auth.users.values()]
    roles: list[dict[str, str]] = []
    for uid in ctx.client.auth.users:
        if uid in users:
            roles += [r for r in users[uid].role_documents() if r not in roles]
    auth: dict[str, Any] = {"authenticatedUsers": names, "authenticatedUserRoles": roles}
    if p.show_privileges:
        from ebbdb.server.auth.check import client_privileges
        from ebbdb.server.auth.roles import privilege_documents

        privileges = await client_privileges(ctx.users, ctx.gateway, ctx.client.auth)
        auth["authenticatedUserPrivileges"] = privilege_documents(privileges)
    return {"authInfo": auth, "ok": 1.0}
