"""Storage statistics: dbStats and collStats, in MongoDB 7.0's reply shapes and field types. The
figures are storage/engine/sizes.py's (exact counts and data sizes, estimated storage and index sizes);
they count documents that have expired but are not yet deleted, as MongoDB's do."""

from __future__ import annotations

import dataclasses
import logging
import shutil
from dataclasses import dataclass
from typing import Any

from bson import Int64

from ebbdb.server.arguments import COMMAND_VALUE, REST, Check, Kind, arg
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import ErrorCode
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.aggregate.diagnostics import storage_stats_scale
from ebbdb.storage.catalog.info import validate_collection_name, validate_db_name
from ebbdb.storage.engine.sizes import missing_storage_stats, storage_stats
from ebbdb.storage.execution import views

log = logging.getLogger("ebbdb.storage")


@dataclasses.dataclass(frozen=True)
class _Positive(Check):
    """A number above zero."""

    message: str
    code: ErrorCode = ErrorCode.BadValue

    def refuses(self, value: Any, default: Any) -> bool:
        return bool(value <= 0)


@dataclass(frozen=True)
class DbStatsParams:
    scale: int = arg(
        "scale", Kind.INT, 1, check=_Positive("Scale factor must be greater than zero")
    )
    free_storage: bool = arg("freeStorage", Kind.BOOL, False)


def _file_system(path: str, scale: int) -> dict[str, float]:
    """fsUsedSize and fsTotalSize of the file system holding the data directory (none if it
    cannot be read, as mongod leaves them out)."""
    try:
        usage = shutil.disk_usage(path)  # statvfs on POSIX, GetDiskFreeSpaceExW on Windows
    except OSError as exc:
        log.warning("dbStats: cannot read the file system of %s: %s", path, exc)
        return {}
    # Used is what is not free to us: blocks reserved for root count as used, as mongod counts.
    return {"fsUsedSize": (usage.total - usage.free) / scale, "fsTotalSize": usage.total / scale}


@REGISTRY.command("dbStats", "dbstats", params=DbStatsParams)
async def db_stats(ctx: CommandContext, p: DbStatsParams) -> dict[str, Any]:
    """Storage statistics of a database: collections, documents, data, storage and index sizes
    (divided by `scale`), and the file system's. A database without collections has zeros."""
    validate_db_name(ctx.db)
    colls = ctx.gateway.engine.collections(ctx.db)
    sizes = await ctx.gateway.read(ctx.gateway.engine.sizes, colls) if colls else []
    objects = sum(s.count for s in sizes)
    data = sum(s.data_size for s in sizes)
    storage = sum(s.storage_size for s in sizes)
    indexes = sum(s.total_index_size for s in sizes)
    scale = p.scale
    reply: dict[str, Any] = {
        "db": ctx.db,
        "collections": Int64(len(colls)),
        "views": Int64(len(views.views(ctx.gateway.engine, ctx.db))),
        "objects": Int64(objects),
        "avgObjSize": data / objects if objects else 0.0,
        "dataSize": data / scale,
        "storageSize": storage / scale,
        "indexes": Int64(sum(len(c.indexes) for c in colls)),
        "indexSize": indexes / scale,
        "totalSize": (storage + indexes) / scale,
    }
    if p.free_storage:
        # LMDB reuses freed pages for the whole environment: no free space belongs to a database.
        reply.update(freeStorageSize=0.0, indexFreeStorageSize=0.0, totalFreeStorageSize=0.0)
    reply["scaleFactor"] = Int64(scale)
    # A call into the file system: on a reader thread, like the sizes.
    file_system = await ctx.gateway.read(_file_system, ctx.config.dbpath, scale) if colls else None
    reply.update(_NO_FILE_SYSTEM if file_system is None else file_system)
    reply["ok"] = 1.0
    return reply


#: What mongod answers for a database that does not exist.
_NO_FILE_SYSTEM = {"fsUsedSize": 0.0, "fsTotalSize": 0.0}

#: The StorageStatsSpec fields collStats takes besides its collection (storage/aggregate/
#: diagnostics.py reads them, for $collStats and collStats alike).
_STORAGE_STATS_SPEC = ("scale", "verbose", "waitForLock", "numericOnly")


@dataclass(frozen=True)
class CollStatsParams:
    collection: str = arg(COMMAND_VALUE, Kind.COLLECTION_BY_HAND, required=True)
    spec: dict[str, Any] | None = arg(REST, Kind.ANY, only=_STORAGE_STATS_SPEC)
    validation_level: str | None = arg("validationLevel", Kind.STRING)


@REGISTRY.command("collStats", "collstats", params=CollStatsParams)
async def coll_stats(ctx: CommandContext, p: CollStatsParams) -> dict[str, Any]:
    """Storage statistics of a collection (deprecated in MongoDB 7 in favour of $collStats, still
    what drivers and tools call): count, sizes divided by `scale`, indexes and their sizes.
    A missing collection has zeros."""
    validate_collection_name(ctx.db, p.collection)
    scale = storage_stats_scale(p.spec or {}, "collStats")
    ns = ctx.ns(p.collection)
    coll = ctx.collection(p.collection)
    if coll is None:
        return {"ns": ns, **missing_storage_stats(scale), "ok": 1.0}
    (sizes,) = await ctx.gateway.read(ctx.gateway.engine.sizes, [coll])
    return {"ns": ns, **storage_stats(coll, sizes, scale), "ok": 1.0}
