"""shutdown: a client stops the server, as mongod lets it: from the admin database, from this machine
(without authentication mongod accepts it only over a loopback address), gracefully (requests in
flight get `timeoutSecs` to finish unless `force`, storage is synced and closed), and without a
reply: the client sees its connection close."""

from __future__ import annotations

import asyncio
import ipaddress
from dataclasses import dataclass
from typing import Any

from ebbdb.server.arguments import Kind, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY

#: mongod's default time for requests in flight to finish (the shutdown command's timeoutSecs).
DEFAULT_TIMEOUT_SECS = 15


@dataclass(frozen=True)
class ShutdownParams:
    force: bool = arg("force", Kind.STRICT_BOOL, False)
    timeout_secs: int = arg("timeoutSecs", Kind.INT, DEFAULT_TIMEOUT_SECS)


def _from_this_machine(peer: str) -> bool:
    """Whether a client's address (`host:port`; empty for a local socket) is a loopback one."""
    host = peer.rpartition(":")[0].strip("[]")
    if not host:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@REGISTRY.command("shutdown", params=ShutdownParams, admin_only=True)
async def shutdown(ctx: CommandContext, p: ShutdownParams) -> dict[str, Any]:
    """Shut the server down gracefully: stop accepting connections, let requests in flight finish
    for up to timeoutSecs (default 15; none with force: true), close every connection, sync and
    close storage. No reply comes: the connection closes, as with mongod."""
    if not _from_this_machine(ctx.client.peer):
        raise CommandError(
            ErrorCode.Unauthorized, "shutdown must run from localhost when running db without auth"
        )
    ctx.listener.shutdown(ctx.client.id, p.force, float(p.timeout_secs))
    # The server closes this connection while it stops; this request ends with it.
    await asyncio.Event().wait()
    raise AssertionError("the server closes the connection of a shutdown request")
