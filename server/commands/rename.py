"""renameCollection: a collection's new name, in its database or another, with MongoDB 7.0's checks
and errors (the move itself is storage/engine/ddl.py's, one write that keeps indexes, TTL and expiry)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ebbdb.server.arguments import COMMAND_VALUE, Kind, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.catalog.info import validate_collection_name
from ebbdb.storage.core.errors import InvalidNamespace

#: System collections a client may write (MongoDB's legal client system namespaces that ebbdb
#: could hold); any other `system.` name is refused on either side of a rename.
_CLIENT_SYSTEM = frozenset({"system.js"})


@dataclass(frozen=True)
class RenameCollectionParams:
    source: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    to: str = arg("to", Kind.STRING, required=True)
    drop_target: bool = arg("dropTarget", Kind.STRICT_BOOL, False)
    #: For temporary collections, which ebbdb does not have: accepted, no effect.
    stay_temp: bool = arg("stayTemp", Kind.STRICT_BOOL, False)


def _namespace(ns: str, which: str) -> tuple[str, str]:
    """(database, collection) of a full namespace; 73 InvalidNamespace if it is not a valid one."""
    db, _, coll = ns.partition(".")
    try:
        validate_collection_name(db, coll)
    except InvalidNamespace:
        raise CommandError(ErrorCode.InvalidNamespace, f"Invalid {which} namespace: {ns}") from None
    return db, coll


def _check_writable(ns: str, coll: str, which: str) -> None:
    """MongoDB refuses to rename from or to a system collection (20 IllegalOperation)."""
    if not coll.startswith("system.") or coll in _CLIENT_SYSTEM:
        return
    reason = "cannot write to" if coll == "system.profile" else "Invalid system namespace:"
    raise CommandError(ErrorCode.IllegalOperation, f"error with {which} namespace: {reason} {ns}")


@REGISTRY.command("renameCollection", params=RenameCollectionParams, admin_only=True, writes=True)
async def rename_collection(ctx: CommandContext, p: RenameCollectionParams) -> dict[str, Any]:
    """Rename a collection ({renameCollection: "db.a", to: "db.b"}, run on admin), also into
    another database; dropTarget: true replaces an existing target. Its documents, indexes and
    TTL indexes go with it, and the TTL monitor deletes under the new name."""
    if p.source == p.to:
        raise CommandError(ErrorCode.IllegalOperation, "Can't rename a collection to itself")
    source = _namespace(p.source, "source")
    target = _namespace(p.to, "target")
    _check_writable(p.source, source[1], "source")
    _check_writable(p.to, target[1], "target")
    engine = ctx.gateway.engine
    await ctx.gateway.write(engine.rename_collection, *source, *target, p.drop_target)
    return {"ok": 1.0}
