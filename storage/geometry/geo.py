"""Geometry for the geo indexes and operators: GeoJSON objects and legacy coordinate pairs parsed
and checked with MongoDB's messages, spherical predicates and distances (storage/geometry/spherical.py,
S2's rules), flat $box/$polygon tests (storage/geometry/planar.py), and the S2 cells that cover a shape
(s2sphere), which the `2dsphere` index keys hold."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import s2sphere

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, render, to_float, type_name
from ebbdb.storage.geometry import spherical
from ebbdb.storage.geometry.planar import FlatBox, FlatPolygon

#: MongoDB's radius of the earth (kRadiusOfEarthInMeters): GeoJSON distances are in meters.
EARTH_RADIUS_METERS = 6378100.0
#: The finest and coarsest S2 levels a 2dsphere index keys hold, and how many cells cover a shape
#: (MongoDB's finestIndexedLevel / coarsestIndexedLevel / maxCellsInCovering, near enough).
FINEST_LEVEL = 23
COARSEST_LEVEL = 0
MAX_CELLS = 8

GEOJSON_TYPES = (
    "Point",
    "LineString",
    "Polygon",
    "MultiPoint",
    "MultiLineString",
    "MultiPolygon",
    "GeometryCollection",
)

Coord = tuple[float, float]


def _bad(message: str) -> QueryError:
    return QueryError("BadValue", message)


@dataclass(frozen=True, eq=False)
class Shape:
    """A parsed geometry: its GeoJSON type ("Point" for a legacy pair too), every vertex as
    (x, y) = (longitude, latitude), whether it was a legacy pair, and its S2 geography (None for a
    legacy pair outside longitude/latitude bounds, which only a flat `2d` index may hold)."""

    kind: str
    vertices: tuple[Coord, ...]
    legacy: bool
    geography: spherical.Geography | None

    @property
    def is_point(self) -> bool:
        return self.kind == "Point"

    @property
    def point(self) -> Coord:
        return self.vertices[0]


# -- legacy coordinate pairs -------------------------------------------------------------------------


def legacy_pair(value: Any) -> Coord | None:
    """[x, y] or {a: x, b: y} (the first two values; more are allowed): the pair, or None when
    `value` is not an array or document of two leading numbers."""
    if isinstance(value, Mapping):
        items = list(value.values())[:2]
    elif isinstance(value, list):
        items = value[:2]
    else:
        return None
    if len(items) != 2 or not all(is_number(v) and not isinstance(v, bool) for v in items):
        return None
    return to_float(items[0]), to_float(items[1])


def in_lng_lat(p: Coord) -> bool:
    return -180 <= p[0] <= 180 and -90 <= p[1] <= 90


def _legacy_shape(p: Coord) -> Shape:
    geography = _point_geography(p) if in_lng_lat(p) else None
    return Shape("Point", (p,), True, geography)


# -- GeoJSON -------------------------------------------------------------------------------------------


def is_geojson(value: Any) -> bool:
    """A document that names a GeoJSON type (its checks are then GeoJSON's)."""
    return isinstance(value, Mapping) and isinstance(value.get("type"), str)


def parse_shape(value: Any) -> Shape:
    """A document's geometry as a 2dsphere index and $geoIntersects/$geoWithin see it: a GeoJSON
    object or a legacy pair. Raises QueryError (BadValue) with MongoDB's reason."""
    if is_geojson(value):
        return parse_geojson(value)
    pair = legacy_pair(value)
    if pair is None:
        if isinstance(value, (Mapping, list)):
            raise _bad("Point must only contain numeric elements")
        raise _bad(f"Point must be an array or object, instead got type {type_name(value)}")
    return _legacy_shape(pair)


def parse_geojson(value: Mapping[str, Any]) -> Shape:
    kind = value.get("type")
    if kind not in GEOJSON_TYPES:
        raise _bad(f"unknown GeoJSON type: {render(dict(value))}")
    if kind == "GeometryCollection":
        members = value.get("geometries")
        if not isinstance(members, list):
            raise _bad("GeometryCollection geometries must be an array")
        if not members:
            raise _bad("GeometryCollection has no geometries")
        shapes = []
        for m in members:
            if not is_geojson(m):
                raise _bad(f"Element is not valid GeoJSON: {render(m)}")
            shapes.append(parse_geojson(m))
        geography = spherical.collection([s.geography for s in shapes if s.geography])
        return Shape(kind, tuple(v for s in shapes for v in s.vertices), False, geography)
    coords = value.get("coordinates")
    if not isinstance(coords, list):
        raise _bad("coordinates must be an array")
    return _PARSERS[kind](coords)


def _coordinate(value: Any) -> Coord:
    if not isinstance(value, list):
        raise _bad("GeoJSON coordinates must be an array")
    if len(value) < 2 or not all(is_number(v) and not isinstance(v, bool) for v in value[:2]):
        raise _bad("Point must only contain numeric elements")
    if len(value) > 3 or not all(is_number(v) for v in value):
        raise _bad("Point must only contain numeric elements")
    p = (to_float(value[0]), to_float(value[1]))
    if not in_lng_lat(p):
        raise _bad(f"longitude/latitude is out of bounds, lng: {_num(p[0])} lat: {_num(p[1])}")
    return p


def _num(x: float) -> str:
    return str(int(x)) if x == int(x) else repr(x)


def _point_geography(p: Coord) -> spherical.Geography:
    return spherical.Geography(points=[spherical.point(p[0], p[1])])


def _point(coords: list[Any]) -> Shape:
    p = _coordinate(coords)
    return Shape("Point", (p,), False, _point_geography(p))


def _line_vertices(coords: Any) -> list[Coord]:
    if not isinstance(coords, list):
        raise _bad("GeoJSON coordinates must be an array")
    vertices = [_coordinate(c) for c in coords]
    if len(vertices) < 2:
        raise _bad(f"GeoJSON LineString must have at least 2 vertices: {render(coords)}")
    return vertices


def _spherical_polygon(rings: list[list[Coord]], what: str, coords: Any) -> spherical.Polygon:
    try:
        return spherical.polygon(rings)
    except spherical.InvalidGeometry as exc:
        raise _bad(f"{what} is not valid: {render(coords)} {exc}") from None


def _line(coords: list[Any]) -> Shape:
    vertices = _line_vertices(coords)
    geography = spherical.Geography(lines=[spherical.polyline(vertices)])
    return Shape("LineString", tuple(vertices), False, geography)


def _ring(coords: Any) -> list[Coord]:
    if not isinstance(coords, list):
        raise _bad("Polygon coordinates must be an array")
    vertices = [_coordinate(c) for c in coords]
    if len(vertices) < 4 or len(set(vertices)) < 3:
        raise _bad(f"Loop must have at least 3 different vertices: {render(coords)}")
    if vertices[0] != vertices[-1]:
        raise _bad(f"Loop is not closed, first vertex does not equal last vertex: {render(coords)}")
    return vertices[:-1]


def _polygon_rings(coords: list[Any]) -> tuple[list[Coord], list[list[Coord]]]:
    if not coords:
        raise _bad("Polygon has no loops.")
    rings = [_ring(r) for r in coords]
    return rings[0], rings[1:]


def _polygon(coords: list[Any]) -> Shape:
    shell, holes = _polygon_rings(coords)
    geography = spherical.Geography(polygons=[_spherical_polygon([shell, *holes], "Loop", coords)])
    return Shape("Polygon", tuple(v for r in (shell, *holes) for v in r), False, geography)


def _multi_point(coords: list[Any]) -> Shape:
    if not coords:
        raise _bad("MultiPoint coordinates must have at least 1 element")
    vertices = [_coordinate(c) for c in coords]
    geography = spherical.Geography(points=[spherical.point(x, y) for x, y in vertices])
    return Shape("MultiPoint", tuple(vertices), False, geography)


def _multi_line(coords: list[Any]) -> Shape:
    if not coords:
        raise _bad("MultiLineString coordinates must have at least 1 element")
    lines = [_line_vertices(c) for c in coords]
    geography = spherical.Geography(lines=[spherical.polyline(ln) for ln in lines])
    return Shape("MultiLineString", tuple(v for ln in lines for v in ln), False, geography)


def _multi_polygon(coords: list[Any]) -> Shape:
    if not coords:
        raise _bad("MultiPolygon coordinates must have at least 1 element")
    rings: list[list[Coord]] = []
    for c in coords:
        if not isinstance(c, list):
            raise _bad("Polygon coordinates must be an array")
        shell, holes = _polygon_rings(c)
        _spherical_polygon([shell, *holes], "Loop", c)  # each polygon is checked on its own first
        rings += [shell, *holes]
    vertices = [v for r in rings for v in r]
    # S2 then nests every loop of every polygon together: one polygon, holes and all.
    geography = spherical.Geography(polygons=[_spherical_polygon(rings, "MultiPolygon", coords)])
    return Shape("MultiPolygon", tuple(vertices), False, geography)


_PARSERS = {
    "Point": _point,
    "LineString": _line,
    "Polygon": _polygon,
    "MultiPoint": _multi_point,
    "MultiLineString": _multi_line,
    "MultiPolygon": _multi_polygon,
}


# -- regions a query names ------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Region:
    """What $geoWithin or $geoIntersects tests against: a GeoJSON shape (spherical), a cap
    ($centerSphere: center and radius in radians, spherical), or a flat legacy shape ($box,
    $polygon; $center keeps its center and radius)."""

    kind: str  # "geometry", "centerSphere", "box", "polygon", "center"
    shape: Shape | None = None
    center: Coord = (0.0, 0.0)
    radius: float = 0.0
    flat: FlatBox | FlatPolygon | None = None

    @property
    def spherical(self) -> bool:
        return self.kind in ("geometry", "centerSphere")


def _pairs(value: Any, what: str) -> list[Coord]:
    if not isinstance(value, list):
        raise _bad(f"{what} must be an array")
    out = []
    for v in value:
        p = legacy_pair(v)
        if p is None:
            raise _bad("Point must only contain numeric elements")
        out.append(p)
    return out


def parse_within(arg: Any) -> Region:
    """$geoWithin's (and $within's) argument. Raises QueryError (BadValue)."""
    if not isinstance(arg, Mapping) or not arg:
        raise _bad("$geoWithin not supported with provided geometry: " + render(arg))
    op, value = next(iter(arg.items()))
    if op == "$geometry":
        shape = _query_geometry(value)
        if shape.kind not in ("Polygon", "MultiPolygon"):
            raise _bad(f"$geoWithin not supported with provided geometry: {render(dict(arg))}")
        return Region("geometry", shape)
    if op == "$box":
        corners = _pairs(value, "$box")
        if len(corners) != 2:
            raise _bad("Point must only contain numeric elements")
        (x1, y1), (x2, y2) = corners
        return Region("box", flat=FlatBox(min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2)))
    if op == "$polygon":
        vertices = _pairs(value, "$polygon")
        if len(vertices) < 3:
            raise _bad("Polygon must have at least 3 points")
        return Region("polygon", flat=FlatPolygon(tuple(vertices)))
    if op in ("$center", "$centerSphere"):
        if not isinstance(value, list) or len(value) != 2:
            raise _bad(f"{op} requires an array of a point and a radius")
        center = legacy_pair(value[0])
        if center is None:
            raise _bad("Point must only contain numeric elements")
        if not is_number(value[1]) or to_float(value[1]) < 0:
            raise _bad("radius must be a non-negative number")
        radius = to_float(value[1])
        if op == "$center":
            return Region("center", center=center, radius=radius)
        if not in_lng_lat(center):
            raise _bad(
                f"longitude/latitude is out of bounds, lng: {_num(center[0])} lat: "
                f"{_num(center[1])}"
            )
        return Region("centerSphere", center=center, radius=radius)
    raise _bad(f"$geoWithin not supported with provided geometry: {render(dict(arg))}")


def _query_geometry(value: Any) -> Shape:
    if not is_geojson(value):
        raise _bad(f"unknown GeoJSON type: {render(value)}")
    return parse_geojson(value)


def parse_intersects(arg: Any) -> Region:
    """$geoIntersects' argument: {$geometry: <GeoJSON>}. Raises QueryError (BadValue)."""
    if not isinstance(arg, Mapping) or "$geometry" not in arg:
        raise _bad(f"$geoIntersects not supported with provided geometry: {render(arg)}")
    return Region("geometry", _query_geometry(arg["$geometry"]))


# -- predicates ---------------------------------------------------------------------------------


def within(shape: Shape, region: Region) -> bool:
    """Whether the document's shape lies within the region."""
    if region.kind == "geometry":
        assert region.shape is not None and region.shape.geography is not None
        # $geoWithin's $geometry is a Polygon or MultiPolygon: one S2 polygon.
        return shape.geography is not None and spherical.within(
            shape.geography, region.shape.geography
        )
    if region.kind == "centerSphere":
        if shape.geography is None:
            return False
        # A cap under a hemisphere is convex on the sphere: the vertices decide.
        c = region.center
        return all(angle(c, v) <= region.radius for v in shape.vertices)
    if not shape.is_point:
        return False  # the flat shapes hold points only
    x, y = shape.point
    if region.kind == "center":
        return math.hypot(x - region.center[0], y - region.center[1]) <= region.radius
    assert region.flat is not None
    return region.flat.covers((x, y))


def intersects(shape: Shape, region: Region) -> bool:
    assert region.shape is not None and region.shape.geography is not None
    return shape.geography is not None and spherical.intersects(
        shape.geography, region.shape.geography
    )


def angle(a: Coord, b: Coord) -> float:
    """The great-circle angle between two lng/lat points, in radians (S2's)."""
    pa = s2sphere.LatLng.from_degrees(a[1], a[0]).to_point()
    pb = s2sphere.LatLng.from_degrees(b[1], b[0]).to_point()
    return float(pa.angle(pb))


def spherical_distance(origin: Coord, shape: Shape, radius: float) -> float | None:
    """The distance from a point to the nearest point of a shape on a sphere of this radius
    (1.0: radians); None for a shape off the sphere."""
    if shape.geography is None:
        return None
    if shape.is_point:
        return angle(origin, shape.point) * radius
    return spherical.distance(spherical.point(origin[0], origin[1]), shape.geography) * radius


def flat_distance(origin: Coord, shape: Shape) -> float | None:
    """The flat distance from a point to a legacy point (other shapes: None)."""
    if not shape.is_point:
        return None
    return math.hypot(shape.point[0] - origin[0], shape.point[1] - origin[1])


# -- S2 cells -----------------------------------------------------------------------------------


def _cap_of(points: Iterable[Coord]) -> s2sphere.Cap | None:
    """A cap holding every point, around their mean direction; None when it would reach past
    a hemisphere (a cap that large is not convex, and the world's cells serve)."""
    unit = [s2sphere.LatLng.from_degrees(p[1], p[0]).to_point() for p in points]
    sx = sum(u[0] for u in unit)
    sy = sum(u[1] for u in unit)
    sz = sum(u[2] for u in unit)
    norm = math.sqrt(sx * sx + sy * sy + sz * sz)
    if norm < 1e-9:
        return None
    axis = s2sphere.Point(sx / norm, sy / norm, sz / norm)
    r = max(axis.angle(u) for u in unit)
    if r >= math.pi / 2 * 0.99:
        return None
    return s2sphere.Cap.from_axis_angle(axis, s2sphere.Angle.from_radians(r + 1e-9))


def _covering(region: s2sphere.Cap | None) -> list[s2sphere.CellId]:
    if region is None:
        return [s2sphere.CellId.from_face_pos_level(face, 0, 0) for face in range(6)]
    coverer = s2sphere.RegionCoverer()
    coverer.min_level, coverer.max_level, coverer.max_cells = (
        COARSEST_LEVEL,
        FINEST_LEVEL,
        MAX_CELLS,
    )
    return list(coverer.get_covering(region))


def shape_cells(shape: Shape) -> list[int]:
    """The cell ids a 2dsphere index keys a shape by: a point's cell at the finest level, or the
    cells covering a cap around any other shape (an index key only narrows the candidates)."""
    if shape.is_point:
        p = shape.point
        ll = s2sphere.LatLng.from_degrees(p[1], p[0])
        return [s2sphere.CellId.from_lat_lng(ll).parent(FINEST_LEVEL).id()]
    return sorted({c.id() for c in _covering(_cap_of(shape.vertices))})


def region_cells(region: Region) -> list[s2sphere.CellId] | None:
    """The cells covering what a query may match, or None for everything."""
    if region.kind == "centerSphere":
        return _covering(cap_around(region.center, region.radius))
    if region.shape is not None:
        return _covering(_cap_of(region.shape.vertices))
    return None


def cap_around(center: Coord, radians: float) -> s2sphere.Cap | None:
    if radians >= math.pi / 2:
        return None
    axis = s2sphere.LatLng.from_degrees(center[1], center[0]).to_point()
    return s2sphere.Cap.from_axis_angle(axis, s2sphere.Angle.from_radians(radians + 1e-9))


def cell_ranges(cells: list[s2sphere.CellId]) -> list[tuple[int, int]]:
    """Inclusive id ranges holding every indexed cell that meets one of `cells`: each cell's
    descendants (one range), and its ancestors down to the coarsest level (single ids)."""
    out: set[tuple[int, int]] = set()
    for c in cells:
        out.add((c.range_min().id(), c.range_max().id()))
        for level in range(COARSEST_LEVEL, c.level()):
            a = c.parent(level).id()
            out.add((a, a))
    return sorted(out)


def covering_cells(cap: s2sphere.Cap | None) -> list[s2sphere.CellId]:
    return _covering(cap)


# -- 2d geohashes -------------------------------------------------------------------------------


def geohash(p: Coord, bits: int, lo: float, hi: float) -> int:
    """The `2d` index's key of a point: x and y scaled to `bits` bits each, interleaved."""
    x, y = _scaled(p[0], bits, lo, hi), _scaled(p[1], bits, lo, hi)
    return _interleave(x, y, bits)


def _scaled(v: float, bits: int, lo: float, hi: float) -> int:
    cells = 1 << bits
    return min(cells - 1, max(0, int((v - lo) / (hi - lo) * cells)))


def _interleave(x: int, y: int, bits: int) -> int:
    out = 0
    for i in range(bits - 1, -1, -1):
        out = (out << 2) | (((x >> i) & 1) << 1) | ((y >> i) & 1)
    return out


def geohash_ranges(
    box: tuple[float, float, float, float], bits: int, lo: float, hi: float
) -> list[tuple[int, int]]:
    """Inclusive geohash ranges covering a box (x1, y1, x2, y2): the quadtree cells of the
    finest level at which at most 16 cells cover it."""
    x1, y1, x2, y2 = box
    level = bits
    while level > 0:
        shift = bits - level
        cx = (_scaled(x2, bits, lo, hi) >> shift) - (_scaled(x1, bits, lo, hi) >> shift) + 1
        cy = (_scaled(y2, bits, lo, hi) >> shift) - (_scaled(y1, bits, lo, hi) >> shift) + 1
        if cx * cy <= 16:
            break
        level -= 1
    shift = bits - level
    out = []
    for gx in range(_scaled(x1, bits, lo, hi) >> shift, (_scaled(x2, bits, lo, hi) >> shift) + 1):
        for gy in range(
            _scaled(y1, bits, lo, hi) >> shift, (_scaled(y2, bits, lo, hi) >> shift) + 1
        ):
            base = _interleave(gx, gy, level) << (2 * shift)
            out.append((base, base + (1 << (2 * shift)) - 1))
    return sorted(out)


def region_box(region: Region) -> tuple[float, float, float, float] | None:
    """The flat bounding box of a flat region (None: unbounded in the plane)."""
    if region.kind == "center":
        (x, y), r = region.center, region.radius
        return (x - r, y - r, x + r, y + r)
    if region.flat is not None:
        return region.flat.bounds
    return None


__all__ = [
    "EARTH_RADIUS_METERS",
    "Region",
    "Shape",
    "cell_ranges",
    "flat_distance",
    "geohash",
    "geohash_ranges",
    "intersects",
    "is_geojson",
    "legacy_pair",
    "parse_geojson",
    "parse_intersects",
    "parse_shape",
    "parse_within",
    "region_box",
    "region_cells",
    "shape_cells",
    "spherical_distance",
    "within",
]


# -- $near and $nearSphere ------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Near:
    """A proximity query: the point, whether it was GeoJSON (distances in meters) and whether it
    was $nearSphere, and the distance bounds in the query's units (None: unbounded)."""

    op: str
    point: Coord
    geojson: bool
    min_distance: float | None = None
    max_distance: float | None = None

    @property
    def sphere(self) -> bool:
        """Whether distances are spherical whatever the index ($nearSphere, or GeoJSON)."""
        return self.op == "$nearSphere" or self.geojson


def _distance_bound(value: Any, name: str) -> float:
    if not is_number(value) or isinstance(value, bool):
        raise _bad(f"{name} must be a number")
    f = to_float(value)
    if f < 0 or math.isnan(f):
        raise _bad(f"{name} must be non-negative")
    return f


def parse_near(op: str, arg: Any, siblings: Mapping[str, Any]) -> Near:
    """$near / $nearSphere with its argument and the field's other operators ($maxDistance and
    $minDistance may stand beside a legacy pair). Raises QueryError (BadValue)."""
    bounds = {k: siblings[k] for k in ("$minDistance", "$maxDistance") if k in siblings}
    if is_geojson(arg) or (isinstance(arg, Mapping) and "$geometry" in arg):
        # {$geometry: <point>, $maxDistance: ...}, or the bare point ($geoNear's form).
        geometry = arg["$geometry"] if "$geometry" in arg else arg
        if not is_geojson(geometry) or geometry.get("type") != "Point":
            raise _bad(f"invalid point in geo near query $geometry argument: {render(geometry)}")
        point = _point(geometry.get("coordinates")).point
        for k in ("$minDistance", "$maxDistance"):
            if k in arg:
                bounds[k] = arg[k]
        geojson = True
    else:
        pair = legacy_pair(arg)
        if pair is None:
            raise _bad(f"invalid argument in geo near query: {render(arg)}")
        point = pair
        if isinstance(arg, Mapping):
            for k in ("$minDistance", "$maxDistance"):
                if k in arg:
                    bounds[k] = arg[k]
        geojson = False
    lo = bounds.get("$minDistance")
    hi = bounds.get("$maxDistance")
    return Near(
        op,
        point,
        geojson,
        None if lo is None else _distance_bound(lo, "minDistance"),
        None if hi is None else _distance_bound(hi, "maxDistance"),
    )
