"""The geo index kinds: `2dsphere` (keys: the S2 cells covering each geometry, GeoJSON or legacy
pairs, on the sphere) and `2d` (keys: geohashes of legacy pairs in a flat square), their key
pattern and option checks with MongoDB's codes, and how a query plans over them: $geoWithin and
$geoIntersects scan the cells (or geohash squares) covering the query's region, $near,
$nearSphere and $geoNear read the index and order by distance (storage/geometry/geo.py measures). An index
only narrows the candidates: the matcher re-checks every document."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from typing import Any

from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, render, to_float
from ebbdb.storage.geometry import geo
from ebbdb.storage.indexes import keys
from ebbdb.storage.indexes.index_kinds.registry import Bodies, IndexKind, Key, PlainBodies, register
from ebbdb.storage.indexes.plans import IndexScan, Interval, Near, Plan, Planning
from ebbdb.storage.query.geo_match import near_leaves
from ebbdb.storage.query.match_tree import Geo, ParsedFilter, conjuncts
from ebbdb.storage.query.paths import MISSING, split, values_at

SPHERE = "2dsphere"
FLAT = "2d"
_VERSIONS = (1, 2, 3)
_BITS, _MIN, _MAX = 26, -180.0, 180.0


# -- key patterns and options ---------------------------------------------------------------------


def _one_plugin(key: Key, name: str) -> None:
    if any(isinstance(d, str) and d != name for _, d in key):
        raise QueryError(
            "CannotCreateIndex", "Can't use more than one index plugin for a single index."
        )


def _check_sphere(key: Key, options: dict[str, Any]) -> dict[str, Any]:
    _one_plugin(key, SPHERE)
    version = options.get("2dsphereIndexVersion", 3)
    if not is_number(version) or isinstance(version, bool) or to_float(version) not in _VERSIONS:
        raise QueryError(
            "CannotCreateIndex",
            f"unsupported geo index version {{ 2dsphereIndexVersion : {render(version)} }}, only "
            "support versions: [1,2,3]",
        )
    return {"2dsphereIndexVersion": int(to_float(version))}


def _check_flat(key: Key, options: dict[str, Any]) -> dict[str, Any]:
    _one_plugin(key, FLAT)
    geo_fields = [i for i, (_, d) in enumerate(key) if d == FLAT]
    if len(geo_fields) > 1:
        raise QueryError("Location16800", "can't have 2 geo fields")
    if geo_fields[0] != 0:
        raise QueryError("Location16801", "2d has to be first in index")
    out: dict[str, Any] = {}
    for name in ("bits", "min", "max"):
        if name in options:
            value = options[name]
            if not is_number(value) or isinstance(value, bool):
                raise QueryError("InvalidOptions", f"wrong type for field ({name}) {render(value)}")
            out[name] = value
    bits = to_float(out.get("bits", _BITS))
    if not 1 <= int(bits) <= 32:
        raise QueryError(
            "InvalidOptions",
            f"bits for hash must be > 0 and <= 32, but {int(bits)} bits were specified",
        )
    lo, hi = to_float(out.get("min", _MIN)), to_float(out.get("max", _MAX))
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise QueryError(
            "InvalidOptions",
            f"region for hash must be valid and have positive area, but [{_fmt(lo)}, "
            f"{_fmt(hi)}] was specified",
        )
    return out


def _fmt(x: float) -> str:
    return str(int(x)) if math.isfinite(x) and x == int(x) else repr(x)


def flat_params(ix: IndexInfo) -> tuple[int, float, float]:
    """A 2d index's (bits, min, max)."""
    o = ix.options
    return (
        int(to_float(o.get("bits", _BITS))),
        to_float(o.get("min", _MIN)),
        to_float(o.get("max", _MAX)),
    )


# -- entries --------------------------------------------------------------------------------------


def _geo_values(doc: dict[str, Any], path: str) -> Iterator[Any]:
    """The geometries at a path: each value, and each element of an array that is not itself a
    legacy pair (an array of GeoJSON objects or of pairs); null and [] hold none."""
    for v in values_at(doc, split(path), False):
        if v is MISSING or v is None:
            continue
        if isinstance(v, list) and (not v or not is_number(v[0])):
            yield from (e for e in v if e is not None)
        else:
            yield v


def _cell_key(cell: int) -> str:
    return f"{cell:016x}"


def _extract_error(doc: dict[str, Any], reason: str) -> QueryError:
    return QueryError("Location16755", f"Can't extract geo keys: {render(doc)}  {reason}")


def _sphere_keys(doc: dict[str, Any], path: str) -> list[str]:
    cells: set[str] = set()
    for value in _geo_values(doc, path):
        try:
            shape = geo.parse_shape(value)
        except QueryError as exc:
            raise _extract_error(doc, str(exc)) from None
        if shape.geography is None:
            raise _extract_error(
                doc,
                f"longitude/latitude is out of bounds, lng: {_fmt(shape.point[0])} lat: "
                f"{_fmt(shape.point[1])}",
            )
        cells.update(_cell_key(c) for c in geo.shape_cells(shape))
    return sorted(cells)


def _flat_keys(ix: IndexInfo, doc: dict[str, Any], path: str) -> list[str]:
    bits, lo, hi = flat_params(ix)
    out: set[str] = set()
    for value in _geo_values(doc, path):
        if not isinstance(value, (dict, list)):
            continue  # MongoDB's 2d keys skip what is not an embedded document or array
        items = list(value.values()) if isinstance(value, dict) else value
        source = render(value)
        if not items:
            raise QueryError("Location13067", f"geo field is empty :: caused by :: {source}")
        if len(items) < 2:
            raise QueryError(
                "Location13068", f"geo field only has 1 element :: caused by :: {source}"
            )
        if not (is_number(items[0]) and is_number(items[1])):
            raise QueryError(
                "Location13026",
                "geo values must be 'legacy coordinate pairs' for 2d indexes :: caused by :: "
                + source,
            )
        x, y = to_float(items[0]), to_float(items[1])
        if not (lo <= x <= hi and lo <= y <= hi):
            raise QueryError(
                "Location13027",
                f"point not in interval of [ {_fmt(lo)}, {_fmt(hi)} ] :: caused by :: {source}",
            )
        out.add(_cell_key(geo.geohash((x, y), bits, lo, hi)))
    return sorted(out)


def _bodies(ix: IndexInfo, doc: dict[str, Any], plain: PlainBodies) -> Bodies:
    """Entries: each combination of the geo field's keys with the other fields' plain keys. A
    document with no geometry at all has none (2dsphere version 2 and later, and 2d, are sparse
    on their geo fields)."""
    segments: list[list[tuple[bytes, dict[str, Any]]]] = []
    found = False
    multikey = False
    for path, d in ix.key:
        if d == SPHERE or d == FLAT:
            geo_keys = _sphere_keys(doc, path) if d == SPHERE else _flat_keys(ix, doc, path)
            found = found or bool(geo_keys)
            multikey = multikey or len(geo_keys) > 1
            segments.append([(keys.encode(k), {path: k}) for k in geo_keys])
        else:
            single = IndexInfo(ix.id, ix.name, ((path, d),))
            entries, arrays = plain(single, doc, None)
            multikey = multikey or arrays
            segments.append(entries)
    if not found:
        return [], False
    out: list[tuple[bytes, dict[str, Any]]] = [(b"", {})]
    for seg in segments:
        out = [(body + b, {**values, **v}) for body, values in out for b, v in seg]
    return out, multikey or len(out) > 1


# -- planning -------------------------------------------------------------------------------------


def _geo_field(ix: IndexInfo) -> str | None:
    for path, d in ix.key:
        if d == SPHERE or d == FLAT:
            return path
    return None


def _ranges_scan(ix: IndexInfo, ranges: list[tuple[int, int]], near: Near | None) -> IndexScan:
    """A scan of the key ranges (inclusive cell ids or geohashes) of the index's leading geo
    field."""
    intervals = []
    for lo, hi in ranges:
        start = keys.encode(_cell_key(lo))
        end = keys.successor(keys.encode(_cell_key(hi)))
        intervals.append(Interval(start, end))
    merged: list[Interval] = []
    for iv in sorted(intervals, key=lambda i: i.lo):
        last = merged[-1] if merged else None
        if last is not None and last.hi is not None and iv.lo <= last.hi:
            upper = None if iv.hi is None else max(last.hi, iv.hi)
            merged[-1] = Interval(last.lo, upper)
        else:
            merged.append(iv)
    shown = {
        path: (
            [f'["{_cell_key(lo)}", "{_cell_key(hi)}"]' for lo, hi in ranges]
            if i == 0
            else ["[MinKey, MaxKey]"]
        )
        for i, (path, _) in enumerate(ix.key)
    }
    return IndexScan(ix, tuple(merged), bounds=shown, near=near)


def _whole_scan(ix: IndexInfo, near: Near | None) -> IndexScan:
    shown = {path: ["[MinKey, MaxKey]"] for path in ix.fields}
    return IndexScan(ix, (Interval(b"", None),), bounds=shown, near=near)


def _geo_indexes(indexes: list[IndexInfo]) -> list[IndexInfo]:
    """The geo indexes among those the planner says the query may read."""
    return [ix for ix in indexes if ix.kind in (SPHERE, FLAT)]


def _no_near_index(coll: CollectionInfo) -> QueryError:
    return QueryError(
        "NoQueryExecutionPlans",
        f"error processing query: ns={coll.db}.{coll.name} planner returned error :: caused by "
        ":: unable to find index for $geoNear query",
    )


def measure(
    path: str, near: geo.Near, ix: IndexInfo
) -> Callable[[dict[str, Any]], tuple[float, Any] | None]:
    """How a proximity plan over `ix` measures a document: (its distance, the location at `path`
    nearest the point), or None when it has none within the query's bounds. Spherically (meters
    for a GeoJSON point, radians for a legacy one) on a 2dsphere index or for $nearSphere, flat
    on a 2d one."""
    sphere = ix.kind == SPHERE or near.sphere
    radius = geo.EARTH_RADIUS_METERS if near.geojson else 1.0
    lo, hi = near.min_distance, near.max_distance

    def nearest(doc: dict[str, Any]) -> tuple[float, Any] | None:
        best: tuple[float, Any] | None = None
        for value in _geo_values(doc, path):
            try:
                shape = geo.parse_shape(value)
            except QueryError:
                continue
            d = (
                geo.spherical_distance(near.point, shape, radius)
                if sphere
                else geo.flat_distance(near.point, shape)
            )
            if d is not None and (best is None or d < best[0]):
                best = (d, value)
        if best is None or (lo is not None and best[0] < lo) or (hi is not None and best[0] > hi):
            return None
        return best

    return nearest


def _near_order(path: str, near: geo.Near, ix: IndexInfo) -> Near:
    nearest = measure(path, near, ix)

    def distance(doc: dict[str, Any]) -> float | None:
        found = nearest(doc)
        return None if found is None else found[0]

    return Near("GEO_NEAR_2DSPHERE" if ix.kind == SPHERE else "GEO_NEAR_2D", distance)


def _near_plan(coll: CollectionInfo, leaf: Geo, indexes: list[IndexInfo]) -> Plan:
    near: geo.Near = leaf.query
    candidates = [ix for ix in _geo_indexes(indexes) if _geo_field(ix) == leaf.path]
    if near.geojson:
        candidates = [ix for ix in candidates if ix.kind == SPHERE]
    if not candidates:
        raise _no_near_index(coll)
    # A legacy point prefers a 2d index, as MongoDB's planner does.
    ix = min(candidates, key=lambda i: 0 if i.kind == FLAT and not near.geojson else 1)
    order = _near_order(leaf.path, near, ix)
    leading = ix.key[0][0] == leaf.path
    if near.max_distance is None or not leading:
        return _whole_scan(ix, order)
    if ix.kind == SPHERE:
        radians = near.max_distance / (geo.EARTH_RADIUS_METERS if near.geojson else 1.0)
        cells = geo.covering_cells(geo.cap_around(near.point, radians))
        return _ranges_scan(ix, geo.cell_ranges(cells), order)
    if near.sphere:
        return _whole_scan(ix, order)
    bits, lo, hi = flat_params(ix)
    (x, y), r = near.point, near.max_distance
    return _ranges_scan(ix, geo.geohash_ranges((x - r, y - r, x + r, y + r), bits, lo, hi), order)


def _region_plan(ix: IndexInfo, leaf: Geo) -> IndexScan | None:
    region: geo.Region = leaf.query
    if ix.kind == SPHERE and region.spherical:
        cells = geo.region_cells(region)
        return None if cells is None else _ranges_scan(ix, geo.cell_ranges(cells), None)
    if ix.kind == FLAT and not region.spherical:
        box = geo.region_box(region)
        if box is None:
            return None
        bits, lo, hi = flat_params(ix)
        clipped = (max(box[0], lo), max(box[1], lo), min(box[2], hi), min(box[3], hi))
        if clipped[0] > clipped[2] or clipped[1] > clipped[3]:
            clipped = (lo, lo, lo, lo)  # nothing of the index can match: one square to look at
        return _ranges_scan(ix, geo.geohash_ranges(clipped, bits, lo, hi), None)
    return None


def plan(coll: CollectionInfo, parsed: ParsedFilter, indexes: list[IndexInfo]) -> Plan | None:
    """The plan over a geo index for a filter with geo operators (None: plan as usual). A
    proximity operator must stand alone at the top level and needs a geo index on its field."""
    if not parsed.geo:
        return None
    tops = [c for c in conjuncts(parsed.tree) if isinstance(c, Geo)]
    nears = near_leaves(parsed.tree)
    if len(nears) > 1:
        raise QueryError("BadValue", "Too many geoNear expressions")
    if nears:
        if not any(t is nears[0] for t in tops):
            raise QueryError("BadValue", "geoNear must be top-level expr")
        return _near_plan(coll, nears[0], indexes)
    if not tops:
        return None
    for leaf in tops:
        for ix in _geo_indexes(indexes):
            if ix.key[0][0] == leaf.path:
                scan = _region_plan(ix, leaf)
                if scan is not None:
                    return scan
    return None


# Their keys are cells and geohashes, not the fields' values: only `plan` reads them, and a hint
# reads one whole. A filter with a geo operator is planned here even on a collection without a
# geo index (the registry's QUERY_PLANNED): a $near needs one.
_PLANNING = Planning(query=plan, chosen=False, opaque=True)
register(
    IndexKind(
        SPHERE, _check_sphere, _bodies, frozenset({"2dsphereIndexVersion"}), planning=_PLANNING
    )
)
register(
    IndexKind(FLAT, _check_flat, _bodies, frozenset({"bits", "min", "max"}), planning=_PLANNING)
)


__all__ = ["FLAT", "SPHERE", "flat_params", "measure", "plan"]
