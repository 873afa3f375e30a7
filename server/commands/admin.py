"""Server administration and diagnostics: parameters, logs, the profiler's settings, command line,
host, status, commands, and fsync (with its lock)."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import platform
import socket
from dataclasses import dataclass
from typing import Any

from bson import Int64

from ebbdb.server.arguments import COMMAND_VALUE, REST, Kind, NoParams, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.profiler import FILTER_NOTE
from ebbdb.server.registry import REGISTRY
from ebbdb.server.version import EBBDB_VERSION, MONGODB_VERSION
from ebbdb.storage.core import portability

log = logging.getLogger("ebbdb.storage")


@dataclass(frozen=True)
class GetParameterParams:
    which: Any = arg("$command", Kind.ANY)
    names: dict[str, Any] | None = arg(REST, Kind.ANY)


@REGISTRY.command("getParameter", params=GetParameterParams, admin_only=True)
async def get_parameter(ctx: CommandContext, p: GetParameterParams) -> dict[str, Any]:
    """Read server parameters: by name, or all with '*' or {allParameters: true}."""
    params = ctx.parameters
    everything = p.which == "*" or (
        isinstance(p.which, dict) and bool(p.which.get("allParameters"))
    )
    names = params.names() if everything else [n for n in (p.names or {}) if params.known(n)]
    if not names:
        raise CommandError(ErrorCode.InvalidOptions, "no option found to get")
    return {**{n: params.get(n) for n in names}, "ok": 1.0}


@dataclass(frozen=True)
class SetParameterParams:
    values: dict[str, Any] | None = arg(REST, Kind.ANY)


@REGISTRY.command("setParameter", params=SetParameterParams, admin_only=True)
async def set_parameter(ctx: CommandContext, p: SetParameterParams) -> dict[str, Any]:
    """Change a server parameter at runtime; replies with the value it `was`."""
    values = p.values or {}
    if len(values) != 1:
        raise CommandError(ErrorCode.InvalidOptions, "setParameter takes exactly one parameter")
    ((name, value),) = values.items()
    if not ctx.parameters.known(name) or name == "featureCompatibilityVersion":
        raise CommandError(
            ErrorCode.InvalidOptions,
            f"attempted to set unrecognized parameter [{name}], use help:true to see options",
        )
    was = ctx.parameters.set(name, value)
    return {"was": was, "ok": 1.0}


@dataclass(frozen=True)
class GetLogParams:
    name: str = arg(
        COMMAND_VALUE, Kind.STRING, mismatch="Argument to getLog must be of type String"
    )


@REGISTRY.command("getLog", params=GetLogParams, admin_only=True)
async def get_log(ctx: CommandContext, p: GetLogParams) -> dict[str, Any]:
    """Recent log lines as JSON strings: 'global', 'startupWarnings', or '*' for the names."""
    ring = ctx.log_ring
    if p.name == "*":
        return {"names": ["global", "startupWarnings"], "ok": 1.0}
    if p.name == "global":
        lines = list(ring.lines)
    elif p.name == "startupWarnings":
        lines = list(ring.startup_warnings)
    else:
        raise CommandError(ErrorCode.BadValue, f"No log named '{p.name}'")
    total = ring.total if p.name == "global" else len(lines)
    return {"totalLinesWritten": total, "log": lines, "ok": 1.0}


#: `filter` left out of a profile command (None, from the client's null, is refused).
_KEEP = object()


@dataclass(frozen=True)
class ProfileParams:
    level: int = arg(COMMAND_VALUE, Kind.INT, required=True)
    slowms: int | None = arg("slowms", Kind.INT)
    sample_rate: float | None = arg("sampleRate", Kind.NUMBER)
    filter: Any = arg("filter", Kind.ANY, _KEEP)


@REGISTRY.command("profile", params=ProfileParams)
async def profile(ctx: CommandContext, p: ProfileParams) -> dict[str, Any]:
    """Read (level -1) or set this database's profiling level (0 off, 1 operations slower than
    slowms, 2 all) and filter, and the server's slowms and sampleRate. Replies with the settings
    that were in force before, as mongod does."""
    if p.sample_rate is not None and not 0.0 <= float(p.sample_rate) <= 1.0:
        raise CommandError(ErrorCode.BadValue, "'sampleRate' must be between 0.0 and 1.0 inclusive")
    new_filter: dict[str, Any] | None | bool = False
    if p.filter is not _KEEP:
        if isinstance(p.filter, dict):
            new_filter = p.filter
        elif p.filter == "unset":
            new_filter = None
        else:
            raise CommandError(ErrorCode.BadValue, "Expected an object, or the string 'unset'.")
    old, slowms, sample_rate = ctx.profiler.configure(
        ctx.db,
        p.level,
        new_filter,
        p.slowms,
        None if p.sample_rate is None else float(p.sample_rate),
        f"conn{ctx.client.id}",
    )
    reply: dict[str, Any] = {"was": old.level, "slowms": slowms, "sampleRate": sample_rate}
    if old.filter is not None:
        reply["filter"] = old.filter
    if old.filter is not None or isinstance(new_filter, dict):
        reply["note"] = FILTER_NOTE
    reply["ok"] = 1.0
    return reply


@REGISTRY.command("getCmdLineOpts", admin_only=True, lenient=True)
async def get_cmd_line_opts(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """The command line the server was started with, raw and parsed."""
    return {
        "argv": list(ctx.config.argv),
        "parsed": ctx.config.parsed(),
        "ok": 1.0,
    }


def _mem_total_mb() -> int:
    """The machine's memory in MB (0 where it cannot be read)."""
    return (portability.physical_memory() or 0) // (1024 * 1024)


@REGISTRY.command("hostInfo", lenient=True)
async def host_info(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """The machine ebbdb runs on."""
    mem = _mem_total_mb()
    return {
        "system": {
            "currentTime": datetime.datetime.now(datetime.UTC),
            "hostname": socket.gethostname(),
            "cpuAddrSize": 64,
            "memSizeMB": Int64(mem),
            "memLimitMB": Int64(mem),
            "numCores": os.cpu_count() or 1,
            "cpuArch": platform.machine(),
            "numaEnabled": False,
        },
        "os": {
            "type": platform.system(),
            "name": platform.platform(),
            "version": platform.release(),
        },
        "extra": {"pythonVersion": platform.python_version()},
        "ok": 1.0,
    }


@REGISTRY.command("serverStatus", lenient=True)
async def server_status(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Uptime, connections and operation counters."""
    stats = ctx.stats
    engine = ctx.gateway.engine
    ttl = ctx.ttl_monitor
    uptime = stats.uptime
    return {
        "host": ctx.listener.host,
        "version": MONGODB_VERSION,
        "process": "ebbdb",
        "pid": Int64(os.getpid()),
        "uptime": float(round(uptime, 3)),
        "uptimeMillis": Int64(int(uptime * 1000)),
        "uptimeEstimate": Int64(int(uptime)),
        "localTime": datetime.datetime.now(datetime.UTC),
        "connections": {
            "current": stats.connections_current,
            "available": ctx.config.max_connections - stats.connections_current,
            "totalCreated": stats.connections_total,
            "active": ctx.listener.active_connections(),
        },
        "opcounters": {k: Int64(v) for k, v in stats.opcounters.items()},
        "storageEngine": {
            "name": "lmdb",
            "persistent": True,
            "mapSize": Int64(engine.map_size),
        },
        # A replica set's member: its part of the set, as mongod's section (server/replication.py).
        **({} if ctx.replica_set is None else {"repl": ctx.replica_set.server_status()}),
        "metrics": {
            "cursor": {"open": {"total": Int64(len(ctx.cursors))}},
            "ttl": {
                "passes": Int64(ttl.passes),
                "subPasses": Int64(ttl.sub_passes),
                "deletedDocuments": Int64(ttl.deleted_documents),
            },
        },
        "ebbdb": {
            "version": EBBDB_VERSION,
            "writes": {
                "commits": Int64(engine.commits),
                "durableCommits": Int64(engine.durable),
                "groups": Int64(ctx.gateway.groups),
                "syncs": Int64(ctx.gateway.syncs),
            },
            "expressPath": {name: Int64(n) for name, n in sorted(stats.express.items())},
        },
        "ok": 1.0,
    }


@REGISTRY.command("listCommands", lenient=True)
async def list_commands(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Every command this server knows, from the registry."""
    commands = {}
    # The registry imports every command module not loaded yet: on a worker thread, as the
    # dispatcher does for one command's module, so the event loop does not wait on it.
    for cmd in await asyncio.to_thread(REGISTRY.commands):
        if cmd.test_only and not ctx.test_commands_enabled():
            continue
        commands[cmd.name] = {
            "help": cmd.help,
            "adminOnly": cmd.admin_only,
            "requiresAuth": False,
            "secondaryOk": True,
            "apiVersions": [],
            "deprecatedApiVersions": [],
        }
    return {"commands": commands, "ok": 1.0}


@dataclass(frozen=True)
class FsyncParams:
    lock: bool = arg("lock", Kind.BOOL, False)
    timeout: int | None = arg("fsyncLockAcquisitionTimeoutMillis", Kind.INT)


_FSYNC_SEE_ALSO = "http://dochub.mongodb.org/core/fsynccommand"


@REGISTRY.command("fsync", params=FsyncParams, admin_only=True)
async def fsync(ctx: CommandContext, p: FsyncParams) -> dict[str, Any]:
    """Flush every write to disk; with lock: true, also block writes until fsyncUnlock."""
    if p.lock:
        count = await ctx.gateway.fsync_lock()
        log.warning("fsync lock taken (lock count %d): writes wait until fsyncUnlock", count)
        return {
            "info": "now locked against writes, use db.fsyncUnlock() to unlock",
            "lockCount": Int64(count),
            "seeAlso": _FSYNC_SEE_ALSO,
            "ok": 1.0,
        }
    await ctx.gateway.wait_durable(force=True)
    return {"numFiles": 1, "ok": 1.0}


@REGISTRY.command("fsyncUnlock", admin_only=True)
async def fsync_unlock(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Release one fsync lock; writes resume when none is left."""
    left = ctx.gateway.fsync_unlock()
    if left is None:
        raise CommandError(ErrorCode.IllegalOperation, "fsyncUnlock called when not locked")
    log.warning("fsyncUnlock completed, lock count %d", left)
    return {"info": "fsyncUnlock completed", "lockCount": Int64(left), "ok": 1.0}
