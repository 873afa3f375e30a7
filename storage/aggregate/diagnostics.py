"""$collStats and $indexStats: what a collection and its indexes hold and how queries used them, in
MongoDB 7.0's shapes. Each makes its own documents in place of the collection's (one for
$collStats, one per index for $indexStats). Counts and sizes come from storage/engine/sizes.py (exact
counts, estimated bytes), uses from storage/engine/usage.py, the host and latency from the server.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator, Mapping
from typing import Any

from bson import Int64

from ebbdb.storage.aggregate.arguments import Arguments, Kind, Refusal, arg, extract
from ebbdb.storage.aggregate.source import EngineSource
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Placement, Stage, error
from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import render_element
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


def _at_least_one(scale: int, defined: frozenset[str]) -> int:
    if scale < 1:
        raise error(51024, f"BSON field 'scale' value must be >= 1, actual value '{scale}'")
    return scale


#: IDL's optionalBool: a boolean, nothing else, in its own words.
_NOT_BOOL = Refusal("TypeMismatch", "Field '{name}' should be a boolean value, but found: {type}")


class _StorageStatsArgs(Arguments, lenient=True):
    """A StorageStatsSpec: not strict in MongoDB, so unknown fields are ignored; verbose,
    waitForLock and numericOnly change nothing here but must be booleans."""

    scale: int = arg("scale", Kind.INT, 1, parse=_at_least_one)
    verbose: bool = arg("verbose", Kind.BOOL, mismatch=_NOT_BOOL)
    wait_for_lock: bool = arg("waitForLock", Kind.BOOL, mismatch=_NOT_BOOL)
    numeric_only: bool = arg("numericOnly", Kind.BOOL, mismatch=_NOT_BOOL)


def storage_stats_scale(spec: Mapping[str, Any], path: str) -> int:
    """The scale a StorageStatsSpec at `path` asks for (1 if none)."""
    return extract(_StorageStatsArgs, path, spec).scale


class _LatencyStatsArgs(Arguments):
    histograms: bool = arg("histograms", Kind.BOOL, False, mismatch=_NOT_BOOL)


class _CollStatsArgs(Arguments):
    latency: _LatencyStatsArgs | None = arg("latencyStats", Kind.OBJECT, of=_LatencyStatsArgs)
    storage: _StorageStatsArgs | None = arg("storageStats", Kind.OBJECT, of=_StorageStatsArgs)
    count: Mapping[str, Any] | None = arg("count", Kind.OBJECT)
    query_exec: Mapping[str, Any] | None = arg("queryExecStats", Kind.OBJECT)


@STAGES.stage("$collStats", _FIRST)
def _parse_coll_stats(spec: Any, defined: frozenset[str]) -> Stage:
    if not isinstance(spec, Mapping):
        raise error(
            5447000,
            "$collStats must take a nested object but found: " + render_element("$collStats", spec),
        )
    a = extract(_CollStatsArgs, "$collStats", spec)
    latency = None if a.latency is None else a.latency.histograms
    scale = None if a.storage is None else a.storage.scale
    count, query_exec = a.count is not None, a.query_exec is not None
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
