"""$geoNear: the documents nearest a point, nearest first, each with its distance (and, with
`includeLocs`, the location measured). As MongoDB does, the stage is a query: `query` with a
$near (or, `spherical`, $nearSphere) on the geo index's field, read through the engine, so the
proximity plan (storage/indexes/index_kinds/geo.py) finds, bounds and orders the documents."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ebbdb.storage.aggregate.fields import field_path, with_path
from ebbdb.storage.aggregate.source import EngineSource
from ebbdb.storage.aggregate.stage import STAGES, Context, Doc, Placement, Read, Stage, error
from ebbdb.storage.catalog.info import CollectionInfo
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, to_float, type_name
from ebbdb.storage.indexes.planner import IndexScan, plan_query
from ebbdb.storage.query.geo_match import near_leaves
from ebbdb.storage.query.match import parse_filter
from ebbdb.storage.query.match_tree import Geo, ParsedFilter, conjuncts


class GeoNear(Stage, name="$geoNear"):
    """A parsed $geoNear: the near point as written, where the distance (and location) go, the
    bounds, the filter, the multiplier and the index key (None: the collection's one geo index)."""

    makes_input = True
    near: Any
    distance_field: tuple[str, ...]
    spherical: bool
    min_distance: float | None
    max_distance: float | None
    query: dict[str, Any]
    include_locs: tuple[str, ...] | None
    multiplier: float
    key: str | None

    def run(self, docs: Iterator[Doc], ctx: Context) -> Iterator[Doc]:
        # The geo index kinds and the geometry libraries: loaded by the first $geoNear that
        # runs, not by every pipeline (this family registers with the others).
        from ebbdb.storage.indexes.index_kinds.geo import measure

        source = ctx.source
        if not isinstance(source, EngineSource) or ctx.collection is None:
            raise QueryError("NotImplemented", "$geoNear needs a collection of the storage engine")
        coll = source.engine.collection(source.db, ctx.collection)
        if coll is None:
            return iter(())
        path = self.key if self.key is not None else _geo_field(coll)
        near: dict[str, Any] = {"$nearSphere" if self.spherical else "$near": self.near}
        if self.min_distance is not None:
            near["$minDistance"] = self.min_distance
        if self.max_distance is not None:
            near["$maxDistance"] = self.max_distance
        flt = {**self.query, path: near}
        parsed = parse_filter(flt)
        plan = plan_query(coll, parsed)  # raises for no index on `path`, as the read would
        leaf = next(c for c in _leaves(parsed) if c.path == path)
        assert isinstance(plan, IndexScan)
        where = measure(path, leaf.query, plan.index)
        return self._annotate(source.documents(ctx.collection, Read(flt)), where)

    def _annotate(self, docs: Iterator[Doc], where: Any) -> Iterator[Doc]:
        for doc in docs:
            found = where(doc)
            if found is None:
                continue
            distance, location = found
            out = with_path(doc, self.distance_field, distance * self.multiplier)
            if self.include_locs is not None:
                out = with_path(out, self.include_locs, location)
            yield out


def _leaves(parsed: ParsedFilter) -> list[Geo]:
    return [c for c in conjuncts(parsed.tree) if isinstance(c, Geo)]


def _geo_field(coll: CollectionInfo) -> str:
    """The field of the collection's one 2d index, else of its one 2dsphere index (MongoDB's
    choice), with its IndexNotFound errors."""
    from ebbdb.storage.indexes.index_kinds.geo import FLAT, SPHERE

    ns = f"{coll.db}.{coll.name}"
    for kind in (FLAT, SPHERE):
        found = [ix for ix in coll.indexes if ix.kind == kind]
        if len(found) > 1:
            raise QueryError(
                "IndexNotFound",
                f"There is more than one {kind} index on {ns}; unsure which to use for $geoNear",
            )
        if found:
            return next(path for path, d in found[0].key if d == kind)
    raise QueryError(
        "IndexNotFound", "$geoNear requires a 2d or 2dsphere index, but none were found"
    )


def _distance(spec: Mapping[str, Any], name: str) -> float | None:
    if name not in spec:
        return None
    value = spec[name]
    if not is_number(value) or isinstance(value, bool):
        raise QueryError("TypeMismatch", f"{name} must be a number")
    f = to_float(value)
    if not f >= 0:
        raise QueryError("BadValue", f"{name} must be nonnegative")
    return f


@STAGES.stage(
    "$geoNear",
    Placement(
        first=True,
        in_facet=False,
        not_first=(
            40603,
            "$geoNear was not the first stage in the pipeline after optimization. Is "
            "optimization disabled or inhibited?",
        ),
    ),
    document=(10065, "invalid parameter: expected an object ($geoNear)"),
)
def _parse_geo_near(spec: Any, defined: frozenset[str]) -> Stage:
    if "collation" in spec:
        raise error(
            40227,
            "$geoNear does not accept the 'collation' parameter. Instead, specify a collation "
            "for the entire aggregation command.",
        )
    for old, code in (("limit", 50858), ("num", 50857)):
        if old in spec:
            raise error(
                code,
                f"$geoNear no longer supports the '{old}' parameter. Use a $limit stage instead.",
            )
    if "start" in spec:
        raise error(50856, "$geoNear no longer supports the 'start' argument.")
    if "near" not in spec:
        raise error(5860400, "$geoNear requires a 'near' argument")
    near = spec["near"]
    if not isinstance(near, (Mapping, list)):
        raise error(
            5860401,
            "$geoNear requires near argument to be a GeoJSON object or a legacy point(array)",
        )
    if not isinstance(spec.get("distanceField"), str):
        raise error(16606, "$geoNear requires a 'distanceField' option as a String")
    query = spec.get("query", {})
    if not isinstance(query, Mapping):
        raise QueryError("TypeMismatch", "query must be an object")
    locs = spec.get("includeLocs")
    if locs is not None and not isinstance(locs, str):
        raise error(16607, "$geoNear requires that 'includeLocs' option is a String")
    multiplier = 1.0
    if "distanceMultiplier" in spec:
        value = spec["distanceMultiplier"]
        if not is_number(value) or isinstance(value, bool):
            raise QueryError("TypeMismatch", "distanceMultiplier must be a number")
        multiplier = to_float(value)
        if not multiplier >= 0:
            raise QueryError("BadValue", "distanceMultiplier must be nonnegative")
    key = spec.get("key")
    if key is not None:
        if not isinstance(key, str):
            raise QueryError(
                "TypeMismatch",
                f"$geoNear parameter 'key' must be of type string but found type: {type_name(key)}",
            )
        if not key:
            raise QueryError("BadValue", "$geoNear parameter 'key' cannot be the empty string")
    parsed_query = parse_filter(dict(query))  # a malformed query fails here, as in MongoDB
    if near_leaves(parsed_query.tree):
        # The stage's own `near` is the query's proximity operator: a second one is refused.
        raise QueryError("BadValue", "Too many geoNear expressions")
    return GeoNear(
        near,
        field_path(spec["distanceField"]),
        bool(spec.get("spherical", False)),
        _distance(spec, "minDistance"),
        _distance(spec, "maxDistance"),
        dict(query),
        None if locs is None else field_path(locs),
        multiplier,
        key,
    )
