"""Indexes: createIndexes, listIndexes, dropIndexes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bson import Int64

from ebbdb.server.arguments import COMMAND_VALUE, TERSE_MISMATCH, Kind, arg
from ebbdb.server.commands import collection_kinds
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.catalog.info import validate_collection_name
from ebbdb.storage.indexes.specs import parse_index_spec


@dataclass(frozen=True)
class CreateIndexesParams:
    collection: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    indexes: tuple[dict[str, Any], ...] = arg("indexes", Kind.DOCS, required=True)
    commit_quorum: Any = arg("commitQuorum", Kind.ANY)


@REGISTRY.command("createIndexes", params=CreateIndexesParams, writes=True)
async def create_indexes(ctx: CommandContext, p: CreateIndexesParams) -> dict[str, Any]:
    """Create indexes, building them over the existing documents."""
    validate_collection_name(ctx.db, p.collection)
    if not p.indexes:
        raise CommandError(ErrorCode.BadValue, "Must specify at least one index to create")
    specs = [parse_index_spec(doc) for doc in p.indexes]
    result = await ctx.gateway.write(ctx.gateway.engine.create_indexes, ctx.db, p.collection, specs)
    reply: dict[str, Any] = {
        "numIndexesBefore": result.before,
        "numIndexesAfter": result.after,
    }
    if result.note is not None:
        reply["note"] = result.note
    else:
        reply["createdCollectionAutomatically"] = result.created_collection
    reply["ok"] = 1.0
    return reply


@dataclass(frozen=True)
class ListIndexesParams:
    collection: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    cursor: dict[str, Any] | None = arg("cursor", Kind.DOC)


@REGISTRY.command("listIndexes", params=ListIndexesParams)
async def list_indexes(ctx: CommandContext, p: ListIndexesParams) -> dict[str, Any]:
    """The indexes of a collection, as a cursor."""
    validate_collection_name(ctx.db, p.collection)
    info = ctx.collection(p.collection)
    if info is None:
        raise CommandError(
            ErrorCode.NamespaceNotFound, f"ns does not exist: {ctx.ns(p.collection)}"
        )
    return {
        "cursor": {
            "id": Int64(0),
            "ns": ctx.ns(p.collection),
            "firstBatch": collection_kinds.index_specs(info),
        },
        "ok": 1.0,
    }


@dataclass(frozen=True)
class DropIndexesParams:
    collection: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    index: str | dict[str, Any] | list[str] = arg(
        "index", Kind.STRING_OR_DOC_OR_STRINGS, required=True, mismatch=TERSE_MISMATCH
    )


@REGISTRY.command("dropIndexes", "deleteIndexes", params=DropIndexesParams, writes=True)
async def drop_indexes(ctx: CommandContext, p: DropIndexesParams) -> dict[str, Any]:
    """Drop indexes by name, key pattern, a list of names, or "*" (all but _id_)."""
    validate_collection_name(ctx.db, p.collection)
    which = p.index
    was = await ctx.gateway.write(ctx.gateway.engine.drop_indexes, ctx.db, p.collection, which)
    return {"nIndexesWas": was, "ok": 1.0}
