"""Commands that exist only with --setParameter enableTestCommands=1: put time under the test's
control (run a TTL pass now; move the expiry clock). Without the flag they are CommandNotFound."""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

from bson import Int64

from ebbdb.server.arguments import COMMAND_VALUE, Kind, NoParams, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY

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
    if p.name != "failCommand":
        raise CommandError(
            ErrorCode.BadValue, f"{p.name} not found (ebbdb has the failCommand fail point)"
        )
    count = ctx.fail_command.configure(p.mode, p.data)
    log.info("configureFailPoint failCommand: %s", ctx.fail_command.describe())
    return {"count": count, "ok": 1.0}
