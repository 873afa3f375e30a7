"""Databases and collections: listDatabases, listCollections, create, drop, dropDatabase."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import bson
from bson import Int64

from ebbdb.server import arguments, views
from ebbdb.server.arguments import (
    COMMAND_VALUE,
    REST,
    TERSE_MISMATCH,
    Kind,
    Unsupported,
    arg,
    group,
)
from ebbdb.server.auth.check import visible_databases
from ebbdb.server.commands import capped, collection_kinds
from ebbdb.server.commands.collection_kinds import CollModTimeseriesParams, TimeseriesParams
from ebbdb.server.commands.replies import listing_reply
from ebbdb.server.commands.schema_options import (
    ChangeStreamImages,
    ValidationOptions,
    schema_options,
)
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.catalog.info import CollectionInfo, validate_collection_name, validate_db_name
from ebbdb.storage.core.collation import normalise
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.execution import views as storage_views
from ebbdb.storage.expiry import expire_after
from ebbdb.storage.expiry.expire_after import Setting
from ebbdb.storage.query.match import compile_filter

#: What an empty collection or index counts toward sizeOnDisk (LMDB's page size).
_PAGE = 4096


@dataclass(frozen=True)
class ListDatabasesParams:
    filter: dict[str, Any] | None = arg("filter", Kind.DOC)
    name_only: bool = arg("nameOnly", Kind.BOOL, False)
    authorized_databases: bool | None = arg("authorizedDatabases", Kind.BOOL)


@REGISTRY.command("listDatabases", params=ListDatabasesParams, admin_only=True)
async def list_databases(ctx: CommandContext, p: ListDatabasesParams) -> dict[str, Any]:
    """Every database that holds at least one collection (admin, config and local too, once they
    do), with its size, as mongod lists them; under --auth, those the user may see."""
    # What exists is what the catalog holds: admin once it has a collection (admin.system.users
    # with the first user), config once the session refresh wrote config.system.sessions (from
    # the start on a replica set member: config.system.preimages), local on a replica set member
    # (its oplog) or once a client writes there. A user who may not list them all sees those its
    # roles name, and is refused if it asks for all (authorizedDatabases: false), as mongod.
    match = compile_filter(p.filter)
    entries = []
    total = 0
    visible = await visible_databases(ctx.config.auth, ctx.users, ctx.gateway, ctx.client.auth)
    if visible is not None and p.authorized_databases is False:
        raise CommandError(ErrorCode.Unauthorized, "Insufficient permissions to list all databases")
    for db in ctx.gateway.engine.databases():
        if visible is not None and db.name not in visible:
            continue
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
    entry = {
        "name": info.name,
        "type": "collection",
        "options": dict(info.options),
        "info": {"readOnly": False, "uuid": info.uuid},
    }
    id_index = info.index_named("_id_")
    if id_index is not None:  # the oplog has none
        entry["idIndex"] = id_index.spec()
    return entry


@REGISTRY.command("listCollections", params=ListCollectionsParams)
async def list_collections(ctx: CommandContext, p: ListCollectionsParams) -> dict[str, Any]:
    """The collections of a database, as a cursor (filterable by name and other fields)."""
    validate_db_name(ctx.db)
    match = compile_filter(p.filter)
    engine = ctx.gateway.engine
    db = ctx.db

    def listing() -> list[bytes]:
        # On a reader thread: a database of 10,000 collections took the event loop 60 ms to
        # walk and as long again to encode.
        entries = [
            collection_kinds.shown_entry(c, _collection_entry(c, p.name_only))
            for c in engine.collections(db)
        ]
        entries += views.list_entries(engine, db, p.name_only)
        entries.sort(key=lambda e: str(e["name"]))
        return [bson.encode(e, codec_options=CODEC) for e in entries if match(e)]

    return listing_reply(f"{db}.$cmd.listCollections", await ctx.gateway.read(listing))


#: create options ebbdb takes and stores with the collection (in the order given).
_CREATE_OPTIONS = (
    "idIndex",
    "storageEngine",
    "indexOptionDefaults",
    "autoIndexId",
    "flags",
    "collation",
)
#: create options that ebbdb does not implement yet; accepting them silently would break fidelity.
#: Given as false, null or 0 they ask for nothing, and are accepted (and not stored).
_NOT_YET = Unsupported("create option '{field}' is not supported yet", accept=(False, None, 0))


@dataclass(frozen=True)
class CreateParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION, required=True)
    options: dict[str, Any] | None = arg(REST, Kind.ANY, only=_CREATE_OPTIONS)
    capped: bool | None = arg("capped", Kind.BOOL, nullable=True)
    size: Any = arg("size", Kind.NUMBER, nullable=True)
    max: Any = arg("max", Kind.NUMBER, nullable=True)
    validation: ValidationOptions = group(ValidationOptions)
    view_on: str | None = arg("viewOn", Kind.STRING)
    pipeline: list[Any] | None = arg("pipeline", Kind.ARRAY)
    timeseries: TimeseriesParams | None = arg("timeseries", Kind.DOC, of=TimeseriesParams)
    clustered_index: Any = arg("clusteredIndex", Kind.ANY)
    change_stream_images: ChangeStreamImages | None = arg(
        "changeStreamPreAndPostImages", Kind.DOC, of=ChangeStreamImages
    )
    expire_after_seconds: int | None = arg("expireAfterSeconds", Kind.INT)
    encrypted_fields: Any = arg("encryptedFields", Kind.ANY, check=_NOT_YET)


@REGISTRY.command("create", params=CreateParams, writes=True)
async def create(ctx: CommandContext, p: CreateParams) -> dict[str, Any]:
    """Create an empty collection or a view (NamespaceExists if either is there already): plain,
    capped (`capped`/`size`/`max`), clustered (clusteredIndex, expireAfterSeconds) or time series
    (timeseries, expireAfterSeconds), with validation rules."""
    options = dict(p.options or {})
    rules = schema_options(p.validation, p.change_stream_images)
    if p.view_on is not None or p.pipeline is not None:
        given = [k for k, v in rules.items() if v is not None]
        if p.capped:
            given.insert(0, "capped")
        if given:
            raise CommandError(
                ErrorCode.InvalidOptions, f"option not supported on a view: {given[0]}"
            )
        return await views.create_view(ctx, p.collection, p.view_on, p.pipeline, options)
    if storage_views.lookup(ctx.gateway.engine, ctx.db, p.collection) is not None:
        raise CommandError(
            ErrorCode.NamespaceExists, f"Collection {ctx.ns(p.collection)} already exists."
        )
    if "collation" in options:
        options = _with_collation(options)
    options = collection_kinds.create_options(ctx, p, options)
    options = capped.create_options(p.capped, p.size, p.max, options)
    options.update((k, v) for k, v in rules.items() if v is not None)
    await ctx.gateway.write(ctx.gateway.engine.create_collection, ctx.db, p.collection, options)
    await collection_kinds.after_create(ctx, p.collection, options)
    return {"ok": 1.0}


def _with_collation(options: dict[str, Any]) -> dict[str, Any]:
    """create's options with the collation MongoDB stores: its normalised document (listed by
    listCollections, inherited by the collection's indexes and queries); none for the simple
    one."""
    given = options.pop("collation")
    if not isinstance(given, Mapping):
        raise arguments.type_mismatch("create.collation", given, Kind.COLLATION)
    if given:
        normalised = normalise(given)
        if normalised is not None:
            options["collation"] = normalised
    return options


@dataclass(frozen=True)
class DropParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION, required=True)


@REGISTRY.command("drop", params=DropParams, writes=True)
async def drop(ctx: CommandContext, p: DropParams) -> dict[str, Any]:
    """Drop a collection with its indexes (dropping a missing one succeeds, as in MongoDB 7)."""
    validate_collection_name(ctx.db, p.collection)
    info = ctx.collection(p.collection)
    if info is None:
        engine = ctx.gateway.engine
        view = storage_views.lookup(engine, ctx.db, p.collection)
        if view is not None and await ctx.gateway.write_stamped(
            storage_views.drop_view, engine, ctx.db, p.collection
        ):
            return {"ns": ctx.ns(p.collection), "ok": 1.0}  # a view: no indexes to count
        return {"ok": 1.0}
    await ctx.gateway.write(ctx.gateway.engine.drop_collection, ctx.db, p.collection)
    return {"nIndexesWas": len(info.indexes), "ns": info.ns, "ok": 1.0}


@REGISTRY.command("dropDatabase", lenient=True, writes=True)
async def drop_database(ctx: CommandContext, p: Any) -> dict[str, Any]:
    """Drop every collection of the database."""
    validate_db_name(ctx.db)
    await ctx.gateway.write(ctx.gateway.engine.drop_database, ctx.db)
    return {"dropped": ctx.db, "ok": 1.0}


#: collMod options ebbdb does not implement: refused whatever their value.
_COLLMOD_UNSUPPORTED = Unsupported("collMod option '{field}' is not supported")
_INDEX_UNSUPPORTED = Unsupported("collMod index option '{field}' is not supported")


@dataclass(frozen=True)
class CollModIndex:
    """collMod's `index`: which index (by key pattern or name; null for neither) and what to
    change. Its type errors keep the words ebbdb has always answered with."""

    key_pattern: dict[str, Any] | None = arg(
        "keyPattern", Kind.DOC, nullable=True, mismatch=TERSE_MISMATCH
    )
    name: str | None = arg("name", Kind.STRING, nullable=True, mismatch=TERSE_MISMATCH)
    expire_after_seconds: Any = arg("expireAfterSeconds", Kind.NUMBER)
    hidden: bool | None = arg("hidden", Kind.STRICT_BOOL, nullable=True, mismatch=TERSE_MISMATCH)
    unique: Any = arg("unique", Kind.ANY, check=_INDEX_UNSUPPORTED)
    prepare_unique: Any = arg("prepareUnique", Kind.ANY, check=_INDEX_UNSUPPORTED)
    force_non_unique: Any = arg("forceNonUnique", Kind.ANY, check=_INDEX_UNSUPPORTED)


@dataclass(frozen=True)
class CollModParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION, required=True)
    index: CollModIndex | None = arg("index", Kind.DOC, of=CollModIndex)
    validation: ValidationOptions = group(ValidationOptions)
    view_on: str | None = arg("viewOn", Kind.STRING)
    pipeline: list[Any] | None = arg("pipeline", Kind.ARRAY)
    change_stream_images: ChangeStreamImages | None = arg(
        "changeStreamPreAndPostImages", Kind.DOC, of=ChangeStreamImages
    )
    expire_after_seconds: Any = arg("expireAfterSeconds", Kind.ANY)
    timeseries: CollModTimeseriesParams | None = arg(
        "timeseries", Kind.DOC, of=CollModTimeseriesParams
    )
    capped_size: Any = arg("cappedSize", Kind.NUMBER, nullable=True)
    capped_max: Any = arg("cappedMax", Kind.NUMBER, nullable=True)
    record_ids_replicated: Any = arg("recordIdsReplicated", Kind.ANY, check=_COLLMOD_UNSUPPORTED)
    dry_run: Any = arg("dryRun", Kind.ANY, check=_COLLMOD_UNSUPPORTED)


@REGISTRY.command("collMod", params=CollModParams, writes=True)
async def coll_mod(ctx: CommandContext, p: CollModParams) -> dict[str, Any]:
    """Change an index: expireAfterSeconds (also making a single-field index a TTL index) and
    hidden, by name or key pattern; the collection's validation rules and change stream images;
    a clustered or time series collection's expireAfterSeconds (or "off") and a time series
    collection's granularity (coarser only); a capped collection's cappedSize and cappedMax; or a
    view's viewOn and pipeline."""
    validate_collection_name(ctx.db, p.collection)
    if ctx.collection(p.collection) is None:
        if storage_views.lookup(ctx.gateway.engine, ctx.db, p.collection) is not None:
            return await views.modify_view(ctx, p.collection, p.view_on, p.pipeline, p.index)
        raise CommandError(
            ErrorCode.NamespaceNotFound, f"ns does not exist: {ctx.ns(p.collection)}"
        )
    views.refuse_view_options(p.view_on, p.pipeline)
    rules = schema_options(p.validation, p.change_stream_images)
    if p.expire_after_seconds is not None or p.timeseries is not None:
        await collection_kinds.coll_mod(ctx, p.collection, p.expire_after_seconds, p.timeseries)
    index = p.index
    if rules:
        engine = ctx.gateway.engine
        await ctx.gateway.write(engine.set_collection_options, ctx.db, p.collection, rules)
    await capped.coll_mod_limits(ctx, p.collection, p.capped_size, p.capped_max)
    if index is None:
        return {"ok": 1.0}
    key_pattern, index_name, hidden = index.key_pattern, index.name, index.hidden
    expire = (
        None
        if index.expire_after_seconds is None
        else expire_after.read(index.expire_after_seconds, Setting.CHANGED_INDEX)
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
