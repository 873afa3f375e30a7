"""ttlStatus: why a collection's documents do or do not expire. For each TTL rule, how many live
documents will expire and when the next one does, how many are expired but not yet deleted, how
many never expire and why; and the TTL monitor's last pass over the collection. Read-only; the
count (storage/expiry/status.py) runs on a reader thread at the expiry clock's time."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import bson
from bson import Int64
from bson.datetime_ms import DatetimeMS

from ebbdb.server.arguments import COMMAND_VALUE, Kind, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.catalog.info import validate_collection_name
from ebbdb.storage.expiry.status import Reason, Sample, Tally, ttl_status
from ebbdb.storage.query.paths import MISSING

#: An example value larger than this (as BSON) is left out: the reply is a summary.
_LARGEST_EXAMPLE = 1024


@dataclass(frozen=True)
class TtlStatusParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION, required=True)


@REGISTRY.command("ttlStatus", params=TtlStatusParams)
async def ttl_status_command(ctx: CommandContext, p: TtlStatusParams) -> dict[str, Any]:
    """Why documents do or do not expire: for each TTL rule of a collection, how many will expire
    and when the next does, how many are expired but not yet deleted, how many never expire and
    why; and the TTL monitor's last pass over the collection."""
    validate_collection_name(ctx.db, p.collection)
    coll = ctx.collection(p.collection)
    if coll is None:
        raise CommandError(
            ErrorCode.NamespaceNotFound, f"Collection '{ctx.ns(p.collection)}' does not exist"
        )
    status = await ctx.gateway.read(ttl_status, ctx.gateway.engine, coll, ctx.now())
    last = ctx.ttl_monitor.last_pass(status.ns)
    return {
        "ns": status.ns,
        "now": DatetimeMS(status.now_ms),
        "documents": Int64(status.documents),
        **_counts(status.overall),
        "rules": [_rule(t) for t in status.rules],
        "lastPass": None
        if last is None
        else {"time": DatetimeMS(last.now_ms), "deleted": Int64(last.deleted)},
        "ok": 1.0,
    }


def _counts(t: Tally) -> dict[str, Any]:
    return {
        "willExpire": Int64(t.will_expire),
        "nextExpiry": None if t.next_expiry is None else DatetimeMS(t.next_expiry),
        "expiredNotDeleted": Int64(t.expired),
        "neverExpire": Int64(t.never),
    }


def _rule(t: Tally) -> dict[str, Any]:
    rule = t.rule
    assert rule is not None
    out: dict[str, Any] = {
        "kind": rule.kind,
        "index": rule.index,
        "field": rule.field,
        "expireAfterSeconds": rule.seconds,
    }
    if rule.partial_filter is not None:
        out["partialFilterExpression"] = rule.partial_filter
    out.update(_counts(t))
    out["reasons"] = {r.value: _sample(s, r is Reason.NOT_A_DATE) for r, s in t.reasons.items()}
    if rule.ignores is not None:
        out["ignored"] = {"field": rule.ignores, **_sample(t.ignored)}
    return out


def _sample(s: Sample, types: bool = False) -> dict[str, Any]:
    """{count, [types,] example: {_id, value}}: the example is the first such document met."""
    out: dict[str, Any] = {"count": Int64(s.count)}
    if types:
        out["types"] = {name: Int64(n) for name, n in sorted(s.types.items())}
    if s.count:
        example: dict[str, Any] = {"_id": s.id}
        if s.value is not MISSING and len(bson.encode({"v": s.value})) <= _LARGEST_EXAMPLE:
            example["value"] = s.value
        out["example"] = example
    return out
