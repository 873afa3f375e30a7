"""storage/geometry/geo.py without a server: GeoJSON and legacy pairs parsed and refused with MongoDB's
messages, the predicates and distances, and the S2 cells and geohashes the geo indexes key by
(a shape's cells always meet the cells covering a query region that holds it)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.geometry import geo
from ebbdb.storage.indexes.index_kinds import kind_named
from ebbdb.storage.query.match import compile_filter

SQUARE = {"type": "Polygon", "coordinates": [[[0, 0], [10, 0], [10, 10], [0, 10], [0, 0]]]}


@pytest.mark.parametrize(
    ("value", "kind", "vertices"),
    [
        ([1, 2], "Point", ((1.0, 2.0),)),
        ({"lng": 1, "lat": 2}, "Point", ((1.0, 2.0),)),
        ({"type": "Point", "coordinates": [1, 2]}, "Point", ((1.0, 2.0),)),
        ({"type": "Point", "coordinates": [1, 2, 300]}, "Point", ((1.0, 2.0),)),  # altitude
        ({"type": "LineString", "coordinates": [[0, 0], [1, 1]]}, "LineString", ((0, 0), (1, 1))),
        (SQUARE, "Polygon", ((0, 0), (10, 0), (10, 10), (0, 10))),
        ({"type": "MultiPoint", "coordinates": [[0, 0], [3, 4]]}, "MultiPoint", ((0, 0), (3, 4))),
    ],
)
def test_parse_shape(value: Any, kind: str, vertices: tuple[tuple[float, float], ...]) -> None:
    shape = geo.parse_shape(value)
    assert (shape.kind, shape.vertices) == (kind, vertices)
    assert shape.geography is not None
    assert shape.legacy == (not geo.is_geojson(value))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"type": "Point", "coordinates": [1, "x"]}, "Point must only contain numeric elements"),
        ({"type": "Point", "coordinates": []}, "Point must only contain numeric elements"),
        ({"type": "Point", "coordinates": 5}, "coordinates must be an array"),
        (
            {"type": "Point", "coordinates": [200, 0]},
            "longitude/latitude is out of bounds, lng: 200 lat: 0",
        ),
        (
            {"type": "Circle", "coordinates": [1, 2]},
            'unknown GeoJSON type: { type: "Circle", coordinates: [ 1, 2 ] }',
        ),
        (
            {"type": "LineString", "coordinates": [[0, 0]]},
            "GeoJSON LineString must have at least 2 vertices: [ [ 0, 0 ] ]",
        ),
        (
            {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [1, 1], [0, 1]]]},
            "Loop is not closed, first vertex does not equal last vertex: "
            "[ [ 0, 0 ], [ 1, 0 ], [ 1, 1 ], [ 0, 1 ] ]",
        ),
        (
            {"type": "Polygon", "coordinates": [[[0, 0], [1, 0], [0, 0]]]},
            "Loop must have at least 3 different vertices: [ [ 0, 0 ], [ 1, 0 ], [ 0, 0 ] ]",
        ),
        ({"type": "Polygon", "coordinates": []}, "Polygon has no loops."),
        ("here", "Point must be an array or object, instead got type string"),
        ([1], "Point must only contain numeric elements"),
    ],
)
def test_parse_shape_refusals(value: Any, message: str) -> None:
    with pytest.raises(QueryError) as info:
        geo.parse_shape(value)
    assert (info.value.code_name, str(info.value)) == ("BadValue", message)


def test_self_crossing_loop_is_refused() -> None:
    bowtie = {"type": "Polygon", "coordinates": [[[0, 0], [10, 10], [10, 0], [0, 10], [0, 0]]]}
    with pytest.raises(QueryError) as info:
        geo.parse_shape(bowtie)
    assert str(info.value).startswith("Loop is not valid: ")


def test_predicates_and_distances() -> None:
    region = geo.parse_within({"$geometry": SQUARE})
    assert geo.within(geo.parse_shape([5, 5]), region)
    assert not geo.within(geo.parse_shape([15, 5]), region)
    line = geo.parse_shape({"type": "LineString", "coordinates": [[5, 5], [15, 5]]})
    assert not geo.within(line, region)
    assert geo.intersects(line, geo.parse_intersects({"$geometry": SQUARE}))
    # A degree of longitude on the equator, on MongoDB's sphere and in radians.
    one = geo.spherical_distance((0, 0), geo.parse_shape([1, 0]), geo.EARTH_RADIUS_METERS)
    assert one == pytest.approx(math.radians(1) * 6378100.0)
    assert geo.spherical_distance((0, 0), geo.parse_shape([0, 1]), 1.0) == pytest.approx(
        math.radians(1)
    )
    # Inside a polygon the distance is zero; a legacy pair off the sphere has none.
    assert geo.spherical_distance((5, 5), geo.parse_shape(SQUARE), 1.0) == 0
    assert geo.spherical_distance((0, 0), geo.parse_shape([500, 0]), 1.0) is None
    assert geo.flat_distance((0, 0), geo.parse_shape([3, 4])) == 5


@pytest.mark.parametrize(
    ("within", "inside", "outside"),
    [
        ({"$box": [[0, 0], [2, 2]]}, [2, 2], [2.1, 1]),
        ({"$polygon": [[0, 0], [2, 0], [0, 2]]}, [0.5, 0.5], [1.5, 1.5]),
        ({"$center": [[0, 0], 1]}, [0.6, 0.8], [0.8, 0.8]),
        ({"$centerSphere": [[0, 0], math.radians(1)]}, [0.9, 0], [1.1, 0]),
    ],
)
def test_legacy_shapes(within: dict[str, Any], inside: list[float], outside: list[float]) -> None:
    match = compile_filter({"p": {"$geoWithin": within}})
    assert match({"p": inside})
    assert not match({"p": outside})
    assert not match({"p": "nowhere"})


def test_shape_cells_meet_the_query_covering() -> None:
    for point in ([2.35, 48.85], [-179.9, 0], [0, 89.9], [100, -45]):
        cell = geo.shape_cells(geo.parse_shape(point))[0]
        region = geo.parse_within({"$centerSphere": [point, 0.001]})
        cells = geo.region_cells(region)
        assert cells is not None
        assert any(lo <= cell <= hi for lo, hi in geo.cell_ranges(cells))
    # A polygon's cells are found from a point query inside it (its ancestors are looked up).
    polygon_cells = geo.shape_cells(geo.parse_shape(SQUARE))
    point_region = geo.parse_intersects({"$geometry": {"type": "Point", "coordinates": [5, 5]}})
    ranges = geo.cell_ranges(geo.region_cells(point_region) or [])
    assert any(lo <= c <= hi for c in polygon_cells for lo, hi in ranges)


def test_geohash_ranges_hold_the_points_in_the_box() -> None:
    bits, lo, hi = 26, -180.0, 180.0
    ranges = geo.geohash_ranges((-1, -1, 3, 2), bits, lo, hi)
    for p in ((-1, -1), (0, 0), (3, 2), (1.5, 0.5)):
        h = geo.geohash(p, bits, lo, hi)
        assert any(a <= h <= b for a, b in ranges)
    far = geo.geohash((50, 50), bits, lo, hi)
    assert not any(a <= far <= b for a, b in ranges)


def test_near_arguments() -> None:
    near = geo.parse_near(
        "$near", {"$geometry": {"type": "Point", "coordinates": [1, 2]}, "$maxDistance": 10}, {}
    )
    assert (near.point, near.geojson, near.sphere, near.max_distance) == ((1, 2), True, True, 10)
    legacy = geo.parse_near("$near", [1, 2], {"$near": [1, 2], "$minDistance": 1})
    assert (legacy.geojson, legacy.sphere, legacy.min_distance) == (False, False, 1)
    with pytest.raises(QueryError, match="maxDistance must be non-negative"):
        geo.parse_near("$nearSphere", [1, 2], {"$maxDistance": -1})


def test_kind_checks() -> None:
    sphere, flat = kind_named("2dsphere"), kind_named("2d")
    assert sphere is not None and flat is not None
    assert sphere.check((("loc", "2dsphere"),), {}) == {"2dsphereIndexVersion": 3}
    assert sphere.check((("loc", "2dsphere"),), {"2dsphereIndexVersion": 2.0}) == {
        "2dsphereIndexVersion": 2
    }
    assert flat.check((("p", "2d"), ("a", 1)), {"bits": 10}) == {"bits": 10}
    with pytest.raises(QueryError) as info:
        flat.check((("p", "2d"),), {"min": 5, "max": 5})
    assert info.value.code_name == "InvalidOptions"
