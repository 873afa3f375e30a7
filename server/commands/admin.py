"""Server administration and diagnostics: parameters, logs, the profiler's settings, command line,
host, status, commands, and fsync (with its lock)."""

from __future__ import annotations

import asyncio
import datetime
import logging
import mmap
import os
import platform
import sys
from dataclasses import dataclass
from typing import Any

from bson import Int64

from ebbdb.server import latency
from ebbdb.server.arguments import COMMAND_VALUE, REST, Kind, NoParams, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.memory import memory_status
from ebbdb.server.profiler import FILTER_NOTE
from ebbdb.server.registry import REGISTRY
from ebbdb.server.version import EBBDB_VERSION, MONGODB_VERSION
from ebbdb.storage.core import portability
from ebbdb.storage.core.values import to_float

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
    if p.sample_rate is not None and not 0.0 <= to_float(p.sample_rate) <= 1.0:
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
    return (portability.physical_memory() or 0) // _MB


_MB = 1024 * 1024


def _os_release() -> tuple[str, str]:
    """The operating system's name and version as mongod's hostInfo gives them: on Linux the
    distribution's (os-release NAME and VERSION_ID), elsewhere the system's."""
    if platform.system() == "Linux":
        try:
            release = platform.freedesktop_os_release()
            return release.get("NAME", "Linux"), release.get("VERSION_ID", platform.release())
        except OSError:
            pass
    return platform.platform(terse=True), platform.release()


@REGISTRY.command("hostInfo", lenient=True)
async def host_info(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """The machine ebbdb runs on, in mongod's fields and types: `system` (time, name, memory,
    processors), `os`, and the platform's `extra`."""
    mem = _mem_total_mb()
    cpu = await asyncio.to_thread(portability.cpu_details)  # reads /proc on Linux
    cores = os.cpu_count() or 1
    name, version = _os_release()
    extra: dict[str, Any] = {"versionString": portability.kernel_version()}
    libc, libc_version = platform.libc_ver()
    if libc == "glibc":
        extra["libcVersion"] = libc_version
    extra["kernelVersion"] = platform.release()
    if cpu is not None:
        extra["cpuFrequencyMHz"] = cpu["frequencyMHz"]
        extra["cpuFeatures"] = cpu["features"]
    page = mmap.PAGESIZE
    extra["pageSize"] = Int64(page)
    extra["numPages"] = int((portability.physical_memory() or 0) // page)
    open_files = portability.max_open_files()
    if open_files is not None:
        extra["maxOpenFiles"] = open_files
    physical = int(cpu["physicalCores"]) if cpu is not None else cores
    extra["physicalCores"] = physical
    extra["pythonVersion"] = platform.python_version()
    return {
        "system": {
            "currentTime": datetime.datetime.now(datetime.UTC),
            "hostname": ctx.listener.host,
            "cpuAddrSize": 64 if sys.maxsize > 2**32 else 32,
            "memSizeMB": Int64(mem),
            "memLimitMB": Int64(mem),
            "numCores": cores,
            "numPhysicalCores": physical,
            "numCpuSockets": int(cpu["sockets"]) if cpu is not None else 1,
            "cpuArch": platform.machine(),
            "numaEnabled": False,
            "numNumaNodes": 1,
        },
        "os": {"type": platform.system(), "name": name, "version": version},
        "extra": extra,
        "ok": 1.0,
    }


@dataclass(frozen=True)
class ServerStatusParams:
    #: Sections to leave out ({metrics: 0}) or put in: every section ebbdb has is in by default.
    #: Any other field is taken (and ignored), as mongod takes one for a section it lacks.
    sections: dict[str, Any] | None = arg(REST, Kind.ANY)


#: What an asserts section counts (ebbdb raises no server-side assertion but user ones).
_ASSERTS = ("regular", "warning", "msg", "user", "tripwire", "rollovers")
#: metrics.operation's counters that ebbdb never has cause to count.
_OPERATION_ZEROS = (
    "killedDueToClientDisconnect",
    "numConnectionNetworkTimeouts",
    "scanAndOrder",
    "temporarilyUnavailableErrors",
    "temporarilyUnavailableErrorsConvertedToWriteConflict",
    "temporarilyUnavailableErrorsEscaped",
    "totalTimeWaitingBeforeConnectionTimeoutMillis",
    "transactionTooLargeForCacheErrors",
    "transactionTooLargeForCacheErrorsConvertedToWriteConflict",
    "unsendableCompletedResponses",
    "writeConflicts",
)
_HELLO = frozenset({"hello", "isMaster", "ismaster"})


@REGISTRY.command("serverStatus", params=ServerStatusParams)
async def server_status(ctx: CommandContext, p: ServerStatusParams) -> dict[str, Any]:
    """The server's state for monitoring tools, in mongod's sections, fields and BSON types:
    instance information, asserts, connections, network, opLatencies, opcounters, mem, metrics,
    and ebbdb's own. A section given as 0 or false in the command is left out."""
    stats = ctx.stats
    engine = ctx.gateway.engine
    ttl = ctx.ttl_monitor
    uptime = stats.uptime
    commands = await asyncio.to_thread(REGISTRY.commands)  # imports the modules not loaded yet
    current = stats.connections_current
    active = ctx.listener.active_connections()
    running = list(ctx.operations)
    awaiting = sum(1 for op in running if op.command in _HELLO and "maxAwaitTimeMS" in op.body)
    readers = sum(1 for op in running if latency.is_read(op.command))
    writers = sum(1 for op in running if latency.is_write(op.command))
    memory = portability.process_memory()
    reply: dict[str, Any] = {
        "host": ctx.listener.host,
        "version": MONGODB_VERSION,
        "process": "mongod",
        "pid": Int64(os.getpid()),
        "uptime": float(int(uptime)),
        "uptimeMillis": Int64(int(uptime * 1000)),
        "uptimeEstimate": Int64(int(uptime)),
        "localTime": datetime.datetime.now(datetime.UTC),
        "asserts": {name: stats.user_asserts if name == "user" else 0 for name in _ASSERTS},
        "connections": {
            "current": current,
            "available": ctx.config.max_connections - current,
            "totalCreated": stats.connections_total,
            "rejected": stats.connections_rejected,
            "active": active,
            "threaded": current,
            "exhaustIsMaster": 0,
            "exhaustHello": 0,
            "awaitingTopologyChanges": awaiting,
            "loadBalanced": 0,
        },
        # No lock queues: an operation runs once it is read (the writer thread queues writes,
        # which ebbdb.writes counts); activeClients are the operations running now.
        "globalLock": {
            "totalTime": Int64(int(uptime * 1_000_000)),
            "currentQueue": {"total": 0, "readers": 0, "writers": 0},
            "activeClients": {"total": readers + writers, "readers": readers, "writers": writers},
        },
        "mem": (
            {
                "bits": 64 if sys.maxsize > 2**32 else 32,
                "resident": memory[0] // _MB,
                "virtual": memory[1] // _MB,
                "supported": True,
            }
            if memory is not None
            else {
                "bits": 64 if sys.maxsize > 2**32 else 32,
                "note": "not all mem info support on this platform",
                "supported": False,
            }
        ),
        "metrics": {
            "commands": _command_metrics(stats, commands, ctx.test_commands_enabled()),
            "cursor": {"open": {"total": Int64(len(ctx.cursors))}},
            "document": {
                "deleted": Int64(stats.docs_deleted),
                "inserted": Int64(stats.docs_inserted),
                "returned": Int64(stats.docs_returned),
                "updated": Int64(stats.docs_updated),
            },
            "operation": {
                "killedDueToClientDisconnect": Int64(0),
                "killedDueToMaxTimeMSExpired": Int64(stats.max_time_expired),
                **{name: Int64(0) for name in _OPERATION_ZEROS[1:]},
            },
            "queryExecutor": {
                "collectionScans": {
                    "nonTailable": Int64(stats.collection_scans - stats.collection_scans_tailable),
                    "total": Int64(stats.collection_scans),
                },
                "scanned": Int64(stats.keys_scanned),
                "scannedObjects": Int64(stats.docs_scanned),
            },
            "ttl": {
                "passes": Int64(ttl.passes),
                "subPasses": Int64(ttl.sub_passes),
                "deletedDocuments": Int64(ttl.deleted_documents),
            },
        },
        "network": {
            # No compression: the logical bytes are the physical ones.
            "bytesIn": Int64(stats.bytes_in),
            "bytesOut": Int64(stats.bytes_out),
            "physicalBytesIn": Int64(stats.bytes_in),
            "physicalBytesOut": Int64(stats.bytes_out),
            "numSlowDNSOperations": Int64(0),
            "numSlowSSLOperations": Int64(0),
            "numRequests": Int64(stats.requests),
            "tcpFastOpen": {
                "serverSupported": False,
                "clientSupported": False,
                "accepted": Int64(0),
            },
            # One event loop serves every connection.
            "serviceExecutors": {
                "passthrough": {
                    "threadsRunning": 1,
                    "clientsInTotal": current,
                    "clientsRunning": active,
                    "clientsWaitingForData": current - active,
                },
            },
        },
        "opLatencies": stats.latency.server_document(),
        "opcounters": {k: Int64(v) for k, v in stats.opcounters.items()},
        # A standalone server applies no replicated operations (mongod reports zeros too).
        "opcountersRepl": dict.fromkeys(_OPCOUNTERS, Int64(0)),
        # A replica set's member: its part of the set, as mongod's section (server/replication.py).
        **({} if ctx.replica_set is None else {"repl": ctx.replica_set.server_status()}),
        "storageEngine": {
            "name": "lmdb",
            "persistent": True,
            "mapSize": Int64(engine.map_size),
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
            "memory": memory_status(ctx.operations.pool),  # what operations hold (server/memory.py)
        },
        "ok": 1.0,
    }
    for section, value in (p.sections or {}).items():
        if section in reply and section != "ok" and value in (0, False):
            del reply[section]
    return reply


_OPCOUNTERS = ("insert", "query", "update", "delete", "getmore", "command")


def _command_metrics(stats: Any, commands: list[Any], test_commands: bool) -> dict[str, Any]:
    """metrics.commands: {failed, total} of every command the server has (as mongod, those never
    run too), and `<UNKNOWN>`, the requests naming no command; in name order, as mongod's."""
    out: dict[str, Any] = {"<UNKNOWN>": Int64(stats.unknown_commands)}
    for cmd in commands:
        if cmd.test_only and not test_commands:
            continue
        out[cmd.name] = {
            "failed": Int64(stats.failed.get(cmd.name, 0)),
            "total": Int64(stats.commands.get(cmd.name, 0)),
        }
    return dict(sorted(out.items()))


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
