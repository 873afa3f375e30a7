"""Commands that exist only with --setParameter enableTestCommands=1: put time under the test's
control (run a TTL pass now; move the expiry clock), fail points, and the reset to a clean server
the pytest plugin sends before each test. Without the flag they are CommandNotFound."""

from __future__ import annotations

import datetime
import logging
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bson import Int64

from ebbdb.server.arguments import COMMAND_VALUE, Kind, NoParams, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.failpoints import SpinIgnoringInterrupts
from ebbdb.server.parameters import PARAMETERS, Parameters
from ebbdb.server.registry import COMMANDS_PACKAGE, REGISTRY

log = logging.getLogger("ebbdb.command")

# The clock stays where BSON dates and Python datetimes can both show it.
_MIN_MS = 0
_MAX_MS = 253_402_300_799_000  # 9999-12-31T23:59:59Z


def _as_datetime(ms: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(milliseconds=ms)


@REGISTRY.command("ttlMonitorPass", params=NoParams, admin_only=True, test_only=True)
async def ttl_monitor_pass(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Run a TTL monitor pass now, at the expiry clock's time; reply with what it deleted."""
    result = await ctx.ttl_monitor.run_pass()
    return {
        "deleted": Int64(result.total),
        "collections": [
            {"ns": ns, "deleted": Int64(n)} for ns, n in sorted(result.deleted.items())
        ],
        "now": _as_datetime(result.now_ms),
        "ok": 1.0,
    }


@dataclass(frozen=True)
class TtlClockParams:
    advance_seconds: int | None = arg("advanceSeconds", Kind.INT)
    advance_millis: int | None = arg("advanceMillis", Kind.INT)
    reset: bool = arg("reset", Kind.BOOL, False)


@REGISTRY.command("ttlClock", params=TtlClockParams, admin_only=True, test_only=True)
async def ttl_clock(ctx: CommandContext, p: TtlClockParams) -> dict[str, Any]:
    """Move the clock that expiry and last-modified times use: {advanceSeconds: n} or
    {advanceMillis: n} forward (negative: back), {reset: true} back to real time; with neither,
    just report it. Replies with the clock's time and its offset from real time."""
    clock = ctx.clock
    if p.reset and (p.advance_seconds is not None or p.advance_millis is not None):
        raise CommandError(
            ErrorCode.BadValue, "ttlClock takes either reset or an advance, not both"
        )
    step = (p.advance_seconds or 0) * 1000 + (p.advance_millis or 0)
    if not _MIN_MS <= clock.now_ms() + step <= _MAX_MS:
        raise CommandError(
            ErrorCode.BadValue, "ttlClock would move the clock outside the years 1970 to 9999"
        )
    if p.reset:
        clock.reset()
    clock.advance(step)
    return {"now": _as_datetime(clock.now_ms()), "offsetMillis": Int64(clock.offset_ms), "ok": 1.0}


@dataclass(frozen=True)
class ConfigureFailPointParams:
    name: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    mode: Any = arg("mode", Kind.ANY, required=True)
    data: dict[str, Any] | None = arg("data", Kind.DOC)


@REGISTRY.command(
    "configureFailPoint", params=ConfigureFailPointParams, admin_only=True, test_only=True
)
async def configure_fail_point(ctx: CommandContext, p: ConfigureFailPointParams) -> dict[str, Any]:
    """Set the failCommand fail point: `mode` alwaysOn, off, {times: n}, {skip: n} or
    {activationProbability: p}; `data` names the commands (failCommands) and what happens to
    them (errorCode, closeConnection, blockConnection with blockTimeMS, writeConcernError,
    errorLabels, appName). Replies with how many times it fired before."""
    from ebbdb.server.commands.indexes import HangBeforeCommit  # loaded with the command

    if p.name == HangBeforeCommit.NAME:
        return HangBeforeCommit.configure(p.mode)
    if p.name == SpinIgnoringInterrupts.NAME:
        reply = SpinIgnoringInterrupts.configure(p.mode, p.data)
        log.info("configureFailPoint %s: %s", p.name, p.mode)
        return reply
    if p.name != "failCommand":
        raise CommandError(
            ErrorCode.BadValue, f"{p.name} not found (ebbdb has the failCommand fail point)"
        )
    count = ctx.fail_command.configure(p.mode, p.data)
    log.info("configureFailPoint failCommand: %s", ctx.fail_command.describe())
    return {"count": count, "ok": 1.0}


# -- the plugin's clean start ------------------------------------------------------------------------


def _active_fail_points(ctx: CommandContext) -> dict[str, Callable[[], object]]:
    """The fail points that are on, each with what turns it off (ebbdb has three: failCommand,
    ebbdbSpinIgnoringInterrupts and hangIndexBuildBeforeCommit; mongod has no command that
    lists its own)."""
    active: dict[str, Callable[[], object]] = {}
    if ctx.fail_command.active:
        active["failCommand"] = lambda: ctx.fail_command.configure("off", None)
    if SpinIgnoringInterrupts.on:
        active[SpinIgnoringInterrupts.NAME] = lambda: SpinIgnoringInterrupts.configure("off", None)
    # The index commands' module holds the other; not imported yet, it cannot be on.
    indexes = sys.modules.get(f"{COMMANDS_PACKAGE}.indexes")
    if indexes is not None and indexes.HangBeforeCommit.on:
        hang = indexes.HangBeforeCommit
        active[hang.NAME] = lambda: hang.configure("off")
    return active


def _restore_parameters(ctx: CommandContext) -> list[str]:
    """Set every runtime parameter that differs from its start-up value back to it (through
    Parameters.set, so that whoever listens to one hears of it); returns their names."""
    started = Parameters(ctx.config.parameters)
    restored = []
    for name, p in PARAMETERS.items():
        if p.runtime and ctx.parameters.get(name) != started.get(name):
            ctx.parameters.set(name, started.get(name))
            restored.append(name)
    return restored


@REGISTRY.command("resetTestState", params=NoParams, admin_only=True, test_only=True)
async def reset_test_state(ctx: CommandContext, p: NoParams) -> dict[str, Any]:
    """Put the server back as it started (the pytest plugin sends it before each test): every
    fail point off, the TTL clock at real time, runtime parameters at their start-up values, users
    dropped but the caller's own, profiling as at start-up, fsync locks released; data is left
    alone. Replies with what it changed."""
    # One round trip for all of it, so that a test's setup stays about a ping slower. ebbdb has
    # no user-defined roles (no createRole), so there are none to drop.
    # The fsync locks first: writes (the users' deletion) wait while one is held.
    unlocked = 0
    while (left := ctx.gateway.fsync_unlock()) is not None:
        unlocked += 1
        if left == 0:
            break
    fail_points = _active_fail_points(ctx)
    for turn_off in fail_points.values():
        turn_off()
    offset = ctx.clock.offset_ms
    ctx.clock.reset()
    parameters = _restore_parameters(ctx)
    kept = set(ctx.client.auth.users)
    users = sorted(set(await ctx.users.users(ctx.gateway)) - kept)
    if users:
        await ctx.users.delete(ctx.gateway, users)
    cfg = ctx.config
    profiled = ctx.profiler.reset(cfg.profile, cfg.slowms, cfg.sample_rate)
    if fail_points or offset or parameters or users or profiled or unlocked:
        log.info(
            "resetTestState: fail points %s off, clock offset %d ms undone, parameters %s, "
            "users %s dropped, profiling of %s reset, %d fsync locks released",
            sorted(fail_points),
            offset,
            parameters,
            users,
            profiled,
            unlocked,
        )
    return {
        "failPoints": sorted(fail_points),
        "ttlClockOffsetMillis": Int64(offset),
        "parameters": parameters,
        "droppedUsers": users,
        "profiledDatabases": profiled,
        "fsyncLocksReleased": unlocked,
        "ok": 1.0,
    }
