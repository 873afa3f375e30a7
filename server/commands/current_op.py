"""currentOp and killOp: the operations in progress as MongoDB 7.0 shows them (the currentOp
command, and the $currentOp stage of an `aggregate: 1` on admin, which mongosh's db.currentOp()
and drivers use), and interrupting one by its opid (it ends with 11601 Interrupted)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ebbdb.server.arguments import REST, Kind, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.core.values import is_number, to_float, type_name
from ebbdb.storage.query.match import parse_filter

#: The $currentOp options MongoDB 7.0 takes (all booleans). ebbdb has no sessions, cursors
#: without a request, or other users to leave out, so only the fact that they are booleans counts.
_STAGE_OPTIONS = frozenset(
    {
        "allUsers",
        "idleConnections",
        "idleCursors",
        "idleSessions",
        "localOps",
        "backtrace",
        "truncateOps",
        "targetAllNodes",
    }
)


def _reports(ctx: CommandContext) -> list[dict[str, Any]]:
    now = time.monotonic()
    host = ctx.listener.host
    return [op.report(host, now) for op in ctx.operations]


def _namespace_error() -> CommandError:
    return CommandError(
        ErrorCode.InvalidNamespace,
        "$currentOp must be run against the 'admin' database with {aggregate: 1}",
    )


def current_op_pipeline(
    ctx: CommandContext, collection: str | None, pipeline: list[Any]
) -> list[Any]:
    """A pipeline that starts with $currentOp, with that stage replaced by the operations in
    progress as `$documents` (the rest of the pipeline filters and shapes them)."""
    if ctx.db != "admin" or collection is not None:
        raise _namespace_error()
    spec = pipeline[0]["$currentOp"]
    if not isinstance(spec, Mapping):
        raise CommandError(
            ErrorCode.FailedToParse,
            f"$currentOp options must be specified in an object, but found: {type_name(spec)}",
        )
    for name, value in spec.items():
        if name not in _STAGE_OPTIONS:
            raise CommandError(
                ErrorCode.FailedToParse,
                f"Unrecognized option '{name}' in $currentOp stage.",
            )
        if not isinstance(value, bool):
            raise CommandError(
                ErrorCode.FailedToParse,
                f"The '{name}' parameter of the $currentOp stage must be a boolean value, but "
                f"found: {type_name(value)}",
            )
    return [{"$documents": {"$literal": _reports(ctx)}}, *pipeline[1:]]


@dataclass(frozen=True)
class CurrentOpParams:
    all: bool = arg("$all", Kind.BOOL, False)
    own_ops: bool = arg("$ownOps", Kind.BOOL, False)
    #: Every other field is a query on the operations' documents ({active: true, ns: ...}).
    filter: dict[str, Any] | None = arg(REST, Kind.ANY)


@REGISTRY.command("currentOp", params=CurrentOpParams, admin_only=True)
async def current_op(ctx: CommandContext, p: CurrentOpParams) -> dict[str, Any]:
    """The operations in progress: `inprog`, filtered by the other fields as a query. Without
    authentication every operation is the client's own, so `$ownOps` leaves none out."""
    query = {k: v for k, v in (p.filter or {}).items() if k != "currentOp"}
    predicate = parse_filter(query).predicate
    return {"inprog": [doc for doc in _reports(ctx) if predicate(doc)], "ok": 1.0}


@dataclass(frozen=True)
class KillOpParams:
    op: Any = arg("op", Kind.ANY)


@REGISTRY.command("killOp", params=KillOpParams, admin_only=True)
async def kill_op(ctx: CommandContext, p: KillOpParams) -> dict[str, Any]:
    """Interrupt the operation with opid `op`: it stops at its next check with 11601 Interrupted.
    MongoDB answers the same whether or not such an operation runs."""
    if p.op is None:
        raise CommandError(ErrorCode.NoSuchKey, 'Missing expected field "op"')
    if not is_number(p.op) or isinstance(p.op, bool):
        raise CommandError(
            ErrorCode.TypeMismatch,
            f'Expected field "op" to have numeric type, but found {type_name(p.op)}',
        )
    opid = to_float(p.op)
    if math.isfinite(opid):  # NaN and the infinities name no operation: nothing to interrupt
        ctx.operations.kill(int(opid))
    return {"info": "attempting to kill op", "ok": 1.0}
