"""Databases and collections: listDatabases, listCollections, create, drop, dropDatabase."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bson import Int64

from server.arguments import COMMAND_VALUE, Kind, arg
from server.context import CommandContext
from server.errors import CommandError, ErrorCode
from server.registry import REGISTRY
from storage.catalog import CollectionInfo, validate_collection_name, validate_db_name
from storage.query.match import compile_filter
from storage.values import type_name

#: What an empty collection or index counts toward sizeOnDisk (LMDB's page size).
_PAGE = 4096


@dataclass(frozen=True)
class ListDatabasesParams:
    filter: dict[str, Any] | None = arg("filter", Kind.DOC)
    name_only: bool = arg("nameOnly", Kind.BOOL, False)
    authorized_databases: bool = arg("authorizedDatabases", Kind.BOOL, False)


@REGISTRY.command("listDatabases", params=ListDatabasesParams, admin_only=True)
async def list_databases(ctx: CommandContext, p: ListDatabasesParams) -> dict[str, Any]:
    """Every database that holds at least one collection, with its size."""
    match = compile_filter(p.filter)
    entries = []
    total = 0
    for db in ctx.gateway.engine.databases():
        size = db.data_size + _PAGE * (db.collections + db.index_count)
        entry: dict[str, Any] = {"name": db.name}
        if not p.name_only:
            entry.update(sizeOnDisk=Int64(size), empty=False)
        if match(entry):
            entries.append(entry)
            total += size
    if p.name_only:
        return {"databases": entries, "ok": 1.0}
    return {
        "databases": entries,
        "totalSize": Int64(total),
        "totalSizeMb": Int64(total // (1024 * 1024)),
        "ok": 1.0,
    }


@dataclass(frozen=True)
class ListCollectionsParams:
    filter: dict[str, Any] | None = arg("filter", Kind.DOC)
    name_only: bool = arg("nameOnly", Kind.BOOL, False)
    authorized_collections: bool = arg("authorizedCollections", Kind.BOOL, False)
    cursor: dict[str, Any] | None = arg("cursor", Kind.DOC)


def _collection_entry(info: CollectionInfo, name_only: bool) -> dict[str, Any]:
    if name_only:
        return {"name": info.name, "type": "collection"}
    return {
        "name": info.name,
        "type": "collection",
        "options": dict(info.options),
        "info": {"readOnly": False, "uuid": info.uuid},
        "idIndex": info.id_index.spec(),
    }


@REGISTRY.command("listCollections", params=ListCollectionsParams)
async def list_collections(ctx: CommandContext, p: ListCollectionsParams) -> dict[str, Any]:
    """The collections of a database, as a cursor (filterable by name and other fields)."""
    validate_db_name(ctx.db)
    match = compile_filter(p.filter)
    batch = [
        e
        for e in (_collection_entry(c, p.name_only) for c in ctx.gateway.engine.collections(ctx.db))
        if match(e)
    ]
    return {
        "cursor": {"id": Int64(0), "ns": f"{ctx.db}.$cmd.listCollections", "firstBatch": batch},
        "ok": 1.0,
    }


#: create options that ebbdb does not implement yet; accepting them silently would break fidelity.
_UNSUPPORTED_CREATE = (
    "capped",
    "size",
    "max",
    "validator",
    "validationLevel",
    "validationAction",
    "viewOn",
    "pipeline",
    "timeseries",
    "clusteredIndex",
    "changeStreamPreAndPostImages",
    "expireAfterSeconds",
    "encryptedFields",
)


@dataclass(frozen=True)
class CreateParams:
    collection: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    options: dict[str, Any] | None = arg("*", Kind.ANY)


@REGISTRY.command("create", params=CreateParams, writes=True)
async def create(ctx: CommandContext, p: CreateParams) -> dict[str, Any]:
    """Create an empty collection (NamespaceExists if it is there already)."""
    options = dict(p.options or {})
    for name in _UNSUPPORTED_CREATE:
        if name in options and options[name] not in (False, None, 0):
            raise CommandError(
                ErrorCode.NotImplemented, f"create option '{name}' is not supported yet"
            )
    for name in list(options):
        if (
            name
            not in (
                "idIndex",
                "storageEngine",
                "indexOptionDefaults",
                "autoIndexId",
                "flags",
                "collation",
            )
            and name not in _UNSUPPORTED_CREATE
        ):
            raise CommandError(
                ErrorCode.Location40415, f"BSON field 'create.{name}' is an unknown field."
            )
    options = {k: v for k, v in options.items() if k not in _UNSUPPORTED_CREATE}
    await ctx.gateway.write(ctx.gateway.engine.create_collection, ctx.db, p.collection, options)
    return {"ok": 1.0}


@dataclass(frozen=True)
class DropParams:
    collection: str = arg(COMMAND_VALUE, Kind.STRING, required=True)


@REGISTRY.command("drop", params=DropParams, writes=True)
async def drop(ctx: CommandContext, p: DropParams) -> dict[str, Any]:
    """Drop a collection with its indexes (dropping a missing one succeeds, as in MongoDB 7)."""
    validate_collection_name(ctx.db, p.collection)
    info = ctx.collection(p.collection)
    if info is None:
        return {"ok": 1.0}
    await ctx.gateway.write(ctx.gateway.engine.drop_collection, ctx.db, p.collection)
    return {"nIndexesWas": len(info.indexes), "ns": info.ns, "ok": 1.0}


@REGISTRY.command("dropDatabase", lenient=True, writes=True)
async def drop_database(ctx: CommandContext, p: Any) -> dict[str, Any]:
    """Drop every collection of the database."""
    validate_db_name(ctx.db)
    await ctx.gateway.write(ctx.gateway.engine.drop_database, ctx.db)
    return {"dropped": ctx.db, "ok": 1.0}


@dataclass(frozen=True)
class CollModParams:
    collection: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    index: dict[str, Any] | None = arg("index", Kind.DOC)
    other: dict[str, Any] | None = arg("*", Kind.ANY)


_COLLMOD_UNSUPPORTED = frozenset(
    {
        "validator",
        "validationLevel",
        "validationAction",
        "viewOn",
        "pipeline",
        "changeStreamPreAndPostImages",
        "expireAfterSeconds",
        "timeseries",
        "cappedSize",
        "cappedMax",
        "recordIdsReplicated",
        "dryRun",
    }
)
_INDEX_FIELDS = frozenset({"keyPattern", "name", "expireAfterSeconds", "hidden"})


def _index_ttl(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, Int64)):
        raise CommandError(
            ErrorCode.TypeMismatch,
            f"BSON field 'collMod.index.expireAfterSeconds' is the wrong type "
            f"'{type_name(value)}', expected types '[long, int, decimal, double]'",
        )
    if isinstance(value, float) and value != value:
        raise CommandError(ErrorCode.InvalidOptions, "expireAfterSeconds cannot be NaN")
    return int(value)


@REGISTRY.command("collMod", params=CollModParams, writes=True)
async def coll_mod(ctx: CommandContext, p: CollModParams) -> dict[str, Any]:
    """Change an index: expireAfterSeconds (also making a single-field index a TTL index) and
    hidden, by name or key pattern."""
    validate_collection_name(ctx.db, p.collection)
    for name in p.other or {}:
        if name in _COLLMOD_UNSUPPORTED:
            raise CommandError(
                ErrorCode.NotImplemented, f"collMod option '{name}' is not supported"
            )
        raise CommandError(
            ErrorCode.Location40415, f"BSON field 'collMod.{name}' is an unknown field."
        )
    if ctx.collection(p.collection) is None:
        raise CommandError(
            ErrorCode.NamespaceNotFound, f"ns does not exist: {ctx.ns(p.collection)}"
        )
    if p.index is None:
        return {"ok": 1.0}
    spec = dict(p.index)
    for name in spec:
        if name not in _INDEX_FIELDS:
            if name in ("unique", "prepareUnique", "forceNonUnique"):
                raise CommandError(
                    ErrorCode.NotImplemented, f"collMod index option '{name}' is not supported"
                )
            raise CommandError(
                ErrorCode.Location40415, f"BSON field 'collMod.index.{name}' is an unknown field."
            )
    key_pattern = spec.get("keyPattern")
    index_name = spec.get("name")
    if key_pattern is not None and not isinstance(key_pattern, dict):
        raise CommandError(
            ErrorCode.TypeMismatch,
            "BSON field 'collMod.index.keyPattern' is the wrong type, expected type 'object'",
        )
    if index_name is not None and not isinstance(index_name, str):
        raise CommandError(
            ErrorCode.TypeMismatch,
            "BSON field 'collMod.index.name' is the wrong type, expected type 'string'",
        )
    expire = _index_ttl(spec["expireAfterSeconds"]) if "expireAfterSeconds" in spec else None
    hidden = spec.get("hidden")
    if hidden is not None and not isinstance(hidden, bool):
        raise CommandError(
            ErrorCode.TypeMismatch,
            "BSON field 'collMod.index.hidden' is the wrong type, expected type 'bool'",
        )
    if expire is None and hidden is None:
        raise CommandError(
            ErrorCode.InvalidOptions, "no expireAfterSeconds or hidden field to change in 'index'"
        )
    change = await ctx.gateway.write(
        ctx.gateway.engine.modify_index,
        ctx.db,
        p.collection,
        key_pattern,
        index_name,
        expire,
        hidden,
    )
    reply: dict[str, Any] = {}
    if change.expire_new is not None:
        if change.expire_old is not None:
            reply["expireAfterSeconds_old"] = Int64(change.expire_old)
        reply["expireAfterSeconds_new"] = Int64(change.expire_new)
    if change.hidden_new is not None:
        reply["hidden_old"] = change.hidden_old
        reply["hidden_new"] = change.hidden_new
    reply["ok"] = 1.0
    return reply
