"""The replica set's commands: replSetGetStatus, replSetGetConfig, replSetInitiate and
replSetStepDown, as a one-member set initiated at start answers them (mongosh's rs.status(),
rs.conf(), rs.initiate(), rs.stepDown()). A standalone server answers 76 NoReplicationEnabled."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from dataclasses import dataclass
from typing import Any

from ebbdb.server.arguments import COMMAND_VALUE, Kind, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.server.replication import ReplicaSet

#: mongod's answer to a replica-set command on a server started without --replSet.
NOT_RUNNING = "not running with --replSet"
#: replSetStepDown's defaults (seconds).
STEP_DOWN_SECS = 60
CATCH_UP_SECS = 10


def _replica_set(ctx: CommandContext) -> ReplicaSet:
    if ctx.replica_set is None:
        raise CommandError(ErrorCode.NoReplicationEnabled, NOT_RUNNING)
    return ctx.replica_set


@dataclass(frozen=True)
class StatusParams:
    initial_sync: Any = arg("initialSync", Kind.ANY)


@REGISTRY.command("replSetGetStatus", params=StatusParams, admin_only=True, lenient=True)
async def repl_set_get_status(ctx: CommandContext, p: StatusParams) -> dict[str, Any]:
    """The set's state: its one member, primary since start, and the optimes."""
    # The wall clock, not the expiry clock a test may have moved.
    return {**_replica_set(ctx).status(datetime.datetime.now(datetime.UTC)), "ok": 1.0}


@dataclass(frozen=True)
class ConfigParams:
    commitment_status: bool = arg("commitmentStatus", Kind.BOOL, False)
    include_newly_added: bool = arg("$includeNewlyAdded", Kind.BOOL, False)


@REGISTRY.command("replSetGetConfig", params=ConfigParams, admin_only=True)
async def repl_set_get_config(ctx: CommandContext, p: ConfigParams) -> dict[str, Any]:
    """The set's config (rs.conf()); with commitmentStatus, whether it is committed (always)."""
    reply: dict[str, Any] = {"config": _replica_set(ctx).config_document()}
    if p.commitment_status:
        reply["commitmentStatus"] = True
    return {**reply, "ok": 1.0}


@dataclass(frozen=True)
class InitiateParams:
    config: Any = arg(COMMAND_VALUE, Kind.ANY)


@REGISTRY.command("replSetInitiate", params=InitiateParams, admin_only=True)
async def repl_set_initiate(ctx: CommandContext, p: InitiateParams) -> dict[str, Any]:
    """23 AlreadyInitialized: the set initiated itself at start (whatever config is given)."""
    if ctx.replica_set is None:
        raise CommandError(
            ErrorCode.NoReplicationEnabled, "This node was not started with replication enabled."
        )
    raise CommandError(ErrorCode.AlreadyInitialized, "already initialized")


@dataclass(frozen=True)
class StepDownParams:
    step_down_secs: Any = arg(COMMAND_VALUE, Kind.NUMBER)
    catch_up_secs: Any = arg("secondaryCatchUpPeriodSecs", Kind.NUMBER)
    force: bool = arg("force", Kind.BOOL, False)


@REGISTRY.command("replSetStepDown", params=StepDownParams, admin_only=True)
async def repl_set_step_down(ctx: CommandContext, p: StepDownParams) -> dict[str, Any]:
    """Refused as a lone primary refuses it: 262 once secondaryCatchUpPeriodSecs pass; 238 with
    force."""
    # No secondary can catch up and be elected: mongod waits the catch-up period for one, then
    # refuses. With force it would step down, refuse writes for stepDownSecs and be elected
    # again; ebbdb's one member stays primary and says so.
    replica_set = _replica_set(ctx)
    step_down = STEP_DOWN_SECS if p.step_down_secs is None else int(p.step_down_secs)
    if step_down <= 0:
        raise CommandError(ErrorCode.BadValue, "stepdown period must be a positive integer")
    default_catch_up = 0 if p.force else CATCH_UP_SECS
    catch_up = default_catch_up if p.catch_up_secs is None else int(p.catch_up_secs)
    if catch_up < 0:
        raise CommandError(
            ErrorCode.BadValue, "secondaryCatchUpPeriodSecs period must be a positive or absent"
        )
    if catch_up >= step_down:
        raise CommandError(
            ErrorCode.BadValue, "stepdown period must be longer than secondaryCatchUpPeriodSecs"
        )
    if p.force:
        raise CommandError(
            ErrorCode.NotImplemented,
            "ebbdb's replica set has one member, always primary: it cannot step down",
        )
    # Waiting for a secondary that does not exist, as mongod does (a shutdown ends the wait).
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(catch_up):
            await replica_set.closing.wait()
    now = datetime.datetime.now(datetime.UTC)
    raise CommandError(
        ErrorCode.ExceededTimeLimit,
        f"No electable secondaries caught up as of {now.isoformat(timespec='milliseconds')}. "
        "Please use the replSetStepDown command with the argument {force: true} to force node "
        "to step down.",
    )
