"""Clustered and time series collections at the command edge: create's `clusteredIndex`,
`timeseries` and `expireAfterSeconds` read as MongoDB 7's IDL reads them, collMod's
`expireAfterSeconds` and `timeseries`, and how listCollections and listIndexes show these
collections. Their rules live in storage/catalog/clustered.py and storage/catalog/timeseries.py; catalog.py and
indexes.py call in here with one line each."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bson import Int64

from ebbdb.server.arguments import Kind, Unsupported, arg, extract
from ebbdb.server.context import CommandContext
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.storage.catalog import clustered, timeseries
from ebbdb.storage.catalog.info import EXPIRE_AFTER, CollectionInfo, ExpireAfter
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, type_name
from ebbdb.storage.expiry import expire_after
from ebbdb.storage.expiry.expire_after import Setting
from ebbdb.storage.indexes.specs import parse_index_spec


@dataclass(frozen=True)
class ClusteredIndexParams:
    """create's `clusteredIndex` document (MongoDB's ClusteredIndexSpec)."""

    key: dict[str, Any] = arg("key", Kind.DOC, required=True)
    unique: bool = arg("unique", Kind.BOOL, required=True)
    name: str | None = arg("name", Kind.STRING)
    v: int | None = arg("v", Kind.INT)


@dataclass(frozen=True)
class TimeseriesParams:
    """create's `timeseries` document (MongoDB's TimeseriesOptions)."""

    time_field: str = arg("timeField", Kind.STRING, required=True)
    meta_field: str | None = arg("metaField", Kind.STRING)
    granularity: str | None = arg("granularity", Kind.STRING)
    bucket_rounding_seconds: int | None = arg("bucketRoundingSeconds", Kind.INT)
    bucket_max_span_seconds: int | None = arg("bucketMaxSpanSeconds", Kind.INT)


_BUCKETS_UNSUPPORTED = Unsupported("collMod option 'timeseries.{field}' is not supported")


@dataclass(frozen=True)
class CollModTimeseriesParams:
    """collMod's `timeseries` document: the granularity may only grow coarser."""

    granularity: str | None = arg("granularity", Kind.STRING)
    bucket_rounding_seconds: Any = arg(
        "bucketRoundingSeconds", Kind.ANY, check=_BUCKETS_UNSUPPORTED
    )
    bucket_max_span_seconds: Any = arg("bucketMaxSpanSeconds", Kind.ANY, check=_BUCKETS_UNSUPPORTED)


def _given(p: Any) -> list[str]:
    """The create options the command gave (their BSON names), in declaration order (a field
    group's in its place)."""
    names: list[str] = []
    for f in dataclasses.fields(p):
        a = f.metadata.get("arg")
        value = getattr(p, f.name)
        if "group" in f.metadata:
            names.extend(_given(value))
            continue
        if a is None or value is None or value == f.default or a.name.startswith("$"):
            continue
        if a.name == "*":
            names.extend(value)
        elif not (a.name == "capped" and value is False):  # capped: false asks for nothing
            names.append(a.name)
    return names


def create_options(ctx: CommandContext, p: Any, options: dict[str, Any]) -> dict[str, Any]:
    """The options to store for create's `p` (its CreateParams): `options` (the plain ones) with
    the clusteredIndex, expireAfterSeconds and timeseries options MongoDB 7 fills in. Raises
    CommandError or QueryError with MongoDB's code for options it refuses."""
    ns = ctx.ns(p.collection)
    ts_params: TimeseriesParams | None = p.timeseries
    expire: int | None = p.expire_after_seconds
    cluster = _clustered_option(p.clustered_index)
    out = dict(options)
    if ts_params is not None:
        for name in _given(p):
            if name not in timeseries.ALLOWED_WITH:
                raise CommandError(
                    ErrorCode.InvalidOptions, f"{ns}: 'timeseries' is not allowed with '{name}'"
                )
    if expire is not None and ts_params is None and p.clustered_index is None:
        raise CommandError(
            ErrorCode.InvalidOptions,
            "'expireAfterSeconds' is only supported on time-series collections or when the "
            "'clusteredIndex' option is specified",
        )
    if ts_params is not None:
        ts = timeseries.create_options(
            ns,
            ts_params.time_field,
            ts_params.meta_field,
            ts_params.granularity,
            ts_params.bucket_max_span_seconds,
            ts_params.bucket_rounding_seconds,
        )
        if expire is not None:
            out[EXPIRE_AFTER] = _listed(expire_after.parse(expire, Setting.NEW_COLLECTION))
        out[timeseries.OPTION] = ts
        return out
    if cluster is None:
        if expire is not None:
            raise CommandError(
                ErrorCode.InvalidOptions, "'expireAfterSeconds' requires clustering to be enabled"
            )
        return out
    if out.get("idIndex"):
        raise CommandError(
            ErrorCode.InvalidOptions,
            "The 'clusteredIndex' option is not supported with the 'idIndex' option",
        )
    if "autoIndexId" in out and not out["autoIndexId"]:
        raise QueryError(
            "Location6026501", "The 'clusteredIndex' option does not support {autoIndexId: false}"
        )
    out[clustered.OPTION] = clustered.clustered_spec(
        cluster.key, cluster.unique, cluster.name, cluster.v
    )
    if expire is not None:
        out[EXPIRE_AFTER] = _listed(expire_after.parse(expire, Setting.NEW_COLLECTION))
    return out


def _listed(expire: ExpireAfter) -> Int64:
    """A collection's expireAfterSeconds as MongoDB 7 stores and lists it: a long."""
    return Int64(expire.seconds)


def _clustered_option(value: Any) -> ClusteredIndexParams | None:
    """create's `clusteredIndex`: a document, or a boolean (false: not clustered; true, the
    legacy form, is for MongoDB's internal bucket collections only)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        return extract(ClusteredIndexParams, "create.clusteredIndex", value, nested=True)
    if isinstance(value, bool) or is_number(value):
        if not value:
            return None
        raise QueryError(
            "Location5979703",
            "The 'clusteredIndex' legacy format {clusteredIndex: <bool>} is only supported for "
            "specific internal collections and vice versa",
        )
    raise CommandError(
        ErrorCode.TypeMismatch,
        f"BSON field 'create.clusteredIndex' is the wrong type '{type_name(value)}', expected "
        "types '[bool, long, int, decimal, double, object]'",
    )


async def after_create(ctx: CommandContext, name: str, options: Mapping[str, Any]) -> None:
    """What MongoDB 7 builds with a new time series collection: an index on {metaField: 1,
    timeField: 1} when it has a metaField."""
    ts = options.get(timeseries.OPTION)
    default = None if ts is None else timeseries.default_index(ts)
    if default is None:
        return
    index_name, key = default
    spec = parse_index_spec({"key": key, "name": index_name})
    engine = ctx.gateway.engine
    await ctx.gateway.write(engine.create_indexes, ctx.db, name, [spec])


# -- collMod ---------------------------------------------------------------------------------------


def _with_expire(options: dict[str, Any], expire: ExpireAfter | None) -> dict[str, Any]:
    """The options with expireAfterSeconds set (None: removed), where MongoDB lists it: after
    clusteredIndex, before timeseries."""
    rest = {k: v for k, v in options.items() if k != EXPIRE_AFTER}
    if expire is None:
        return rest
    out: dict[str, Any] = {}
    for k, v in rest.items():
        if k == timeseries.OPTION:
            out[EXPIRE_AFTER] = _listed(expire)
        out[k] = v
        if k == clustered.OPTION:
            out[EXPIRE_AFTER] = _listed(expire)
    return out


async def coll_mod(
    ctx: CommandContext, name: str, expire: Any, ts_mod: CollModTimeseriesParams | None
) -> None:
    """collMod's collection-level TTL (`expireAfterSeconds`: seconds or "off", on clustered and
    time series collections) and `timeseries: {granularity}`. Takes effect at once for hiding and
    at the monitor's next pass for deleting: every record already carries its date."""
    parsed = (
        None
        if expire is None or expire == expire_after.OFF
        else expire_after.parse(expire, Setting.CHANGED_COLLECTION)
    )

    def change(info: CollectionInfo) -> dict[str, Any] | None:
        options = dict(info.options)
        if ts_mod is not None:
            if timeseries.OPTION not in options:
                raise QueryError(
                    "InvalidOptions",
                    "option only supported on a time-series collection: timeseries",
                )
            if ts_mod.granularity is not None:
                ts = timeseries.with_granularity(options[timeseries.OPTION], ts_mod.granularity)
                if ts is not None:
                    options[timeseries.OPTION] = ts
        if expire is not None:
            if clustered.OPTION not in options and timeseries.OPTION not in options:
                raise QueryError(
                    "InvalidOptions",
                    "'expireAfterSeconds' option is only supported on collections clustered by _id",
                )
            options = _with_expire(options, parsed)
        return options if options != info.options else None

    engine = ctx.gateway.engine
    await ctx.gateway.write(engine.change_collection_options, ctx.db, name, change)


# -- how the catalog shows them --------------------------------------------------------------------


def shown_entry(info: CollectionInfo, entry: dict[str, Any]) -> dict[str, Any]:
    """listCollections' `entry` for `info` as MongoDB 7 shows a time series collection (its view:
    type "timeseries", no uuid, no idIndex; its `system.buckets` collection is not listed) or a
    clustered one (no idIndex); other entries are returned as they are."""
    if timeseries.is_timeseries(info):
        entry["type"] = "timeseries"
        if "info" in entry:
            entry["info"] = {"readOnly": False}
    if (timeseries.is_timeseries(info) or clustered.is_clustered(info)) and "idIndex" in entry:
        del entry["idIndex"]
    return entry


def index_specs(info: CollectionInfo) -> list[dict[str, Any]]:
    """listIndexes' entries: a clustered collection's `_id` index shown as its cluster key; a time
    series collection's `_id` index not at all (MongoDB's has none)."""
    out = []
    for ix in info.indexes:
        if ix.name == "_id_" and timeseries.is_timeseries(info):
            continue
        if ix.name == "_id_" and clustered.is_clustered(info):
            out.append(clustered.index_spec(info))
            continue
        out.append(ix.spec())
    return out
