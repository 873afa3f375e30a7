"""$collStats and $indexStats: what a collection and its indexes hold and how queries used them, in
MongoDB 7.0's shapes. Each makes its own documents in place of the collection's (one for
$collStats, one per index for $indexStats). Counts and sizes come from storage/engine/sizes.py (exact
counts, estimated bytes), uses from storage/engine/usage.py, the host and latency from the server.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from decimal import InvalidOperation
from typing import Any

from bson import Int64

from ebbdb.storage.aggregate.source import EngineSource
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Placement, Stage, error
from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, render_element, to_decimal, type_name
from ebbdb.storage.engine.sizes import number, storage_stats

_FIRST = Placement(first=True, in_facet=False)


def _as_datetime(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)


def _engine_source(ctx: Context, stage: str) -> tuple[EngineSource, str]:
    """The engine source and the collection a reporting stage runs on."""
    source = ctx.source
    if not isinstance(source, EngineSource) or ctx.collection is None:
        raise QueryError("NotImplemented", f"{stage} needs a collection of the storage engine")
    return source, ctx.collection


# -- $collStats --------------------------------------------------------------------------------------


class CollStats(Stage, name="$collStats"):
    """$collStats: one document with the namespace, the host and the local time, and what the
    spec asks for: `latencyStats` (histograms or not: `latency`), `storageStats` divided by
    `storage_scale`, `count`, `queryExecStats`, in MongoDB's order."""

    makes_input = True
    latency: bool | None
    storage_scale: int | None
    count: bool
    query_exec: bool

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        source, collection = _engine_source(ctx, self.name)
        ns = f"{source.db}.{collection}"
        out: Doc = {
            "ns": ns,
            "host": source.server.host,
            "localTime": datetime.datetime.now(datetime.UTC),
        }
        if self.latency is not None:
            out["latencyStats"] = source.server.latency_stats(ns, self.latency)
        engine = source.engine
        coll = engine.collection(source.db, collection)
        count: int | None = None
        if self.storage_scale is not None:
            (sizes,) = engine.sizes([_existing(coll, ns, "storageStats")])
            assert coll is not None
            out["storageStats"] = storage_stats(coll, sizes, self.storage_scale)
            count = sizes.count
        if self.count:
            existing = _existing(coll, ns, "count")
            if count is None:
                with engine.read() as r:
                    count = r.stats(existing)[0]
            out["count"] = number(count)
        if self.query_exec:
            scans = Int64(engine.usage.collection_scans(_existing(coll, ns, "queryExecStats").id))
            out["queryExecStats"] = {"collectionScans": {"total": scans, "nonTailable": scans}}
        yield out


def _existing(coll: CollectionInfo | None, ns: str, what: str) -> CollectionInfo:
    if coll is None:
        raise QueryError(
            "NamespaceNotFound",
            "PlanExecutor error during aggregation :: caused by :: Unable to retrieve "
            f"{what} in $collStats stage :: caused by :: Collection [{ns}] not found.",
        )
    return coll


def _unknown(path: str) -> QueryError:
    return QueryError("Location40415", f"BSON field '{path}' is an unknown field.")


def _object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise QueryError(
            "TypeMismatch",
            f"BSON field '{path}' is the wrong type '{type_name(value)}', expected type 'object'",
        )
    return value


def _optional_bool(value: Any, path: str) -> bool:
    """IDL's optionalBool: a boolean, nothing else."""
    if not isinstance(value, bool):
        name = path.rpartition(".")[2]
        raise QueryError(
            "TypeMismatch",
            f"Field '{name}' should be a boolean value, but found: {type_name(value)}",
        )
    return value


def _scale(value: Any, path: str) -> int:
    """StorageStatsSpec's `scale`: IDL's safeInt (any number, the fraction dropped), at least 1."""
    if not is_number(value):
        raise QueryError(
            "TypeMismatch",
            f"BSON field '{path}' is the wrong type '{type_name(value)}', "
            "expected types '[long, int, decimal, double]'",
        )
    try:
        scale = int(to_decimal(value))
    except (ValueError, OverflowError, InvalidOperation):
        raise QueryError("BadValue", f"BSON field '{path}' must be a finite number") from None
    if scale < 1:
        raise error(51024, f"BSON field 'scale' value must be >= 1, actual value '{scale}'")
    return scale


def storage_stats_scale(spec: Mapping[str, Any], path: str) -> int:
    """The scale a StorageStatsSpec asks for (1 if none); its other fields (verbose, waitForLock,
    numericOnly) change nothing here but must be booleans, and unknown ones are ignored, as the
    spec is not strict in MongoDB."""
    scale = 1
    for name, value in spec.items():
        if name == "scale":
            scale = _scale(value, f"{path}.scale")
        elif name in ("verbose", "waitForLock", "numericOnly"):
            _optional_bool(value, f"{path}.{name}")
    return scale


def _latency_histograms(spec: Mapping[str, Any], path: str) -> bool:
    histograms = False
    for name, value in spec.items():
        if name != "histograms":
            raise _unknown(f"{path}.{name}")
        histograms = _optional_bool(value, f"{path}.{name}")
    return histograms


@STAGES.stage("$collStats", _FIRST)
def _parse_coll_stats(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping):
        raise error(
            5447000,
            "$collStats must take a nested object but found: " + render_element("$collStats", spec),
        )
    latency: bool | None = None
    scale: int | None = None
    count = query_exec = False
    for name, value in spec.items():
        path = f"$collStats.{name}"
        if name == "latencyStats":
            latency = _latency_histograms(_object(value, path), path)
        elif name == "storageStats":
            scale = storage_stats_scale(_object(value, path), path)
        elif name == "count":
            _object(value, path)
            count = True
        elif name == "queryExecStats":
            _object(value, path)
            query_exec = True
        else:
            raise _unknown(path)
    return CollStats(latency, scale, count, query_exec)


# -- $indexStats -------------------------------------------------------------------------------------


class IndexStats(Stage, name="$indexStats"):
    """$indexStats: per index of the collection, its name, key, the host, how many queries ran on
    it since when (`accesses`), and its listIndexes spec; nothing for a missing collection."""

    makes_input = True

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        source, collection = _engine_source(ctx, self.name)
        coll = source.engine.collection(source.db, collection)
        if coll is None:
            return
        host = source.server.host
        for ix in coll.indexes:
            used = source.engine.usage.index_accesses(ix.id)
            yield {
                "name": ix.name,
                "key": dict(ix.key),
                "host": host,
                "accesses": {"ops": Int64(used.ops), "since": _as_datetime(used.since_ms)},
                "spec": ix.spec(),
            }


@STAGES.stage("$indexStats", _FIRST)
def _parse_index_stats(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping) or spec:
        raise error(28803, "The $indexStats stage specification must be an empty object")
    return IndexStats()
