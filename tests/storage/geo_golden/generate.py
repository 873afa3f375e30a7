"""Writes cases.json: a fixed set of geometry cases run through storage/geometry/geo.py's public functions,
with the answers they give. A dev tool, not a test (pytest does not collect it): it recorded what
the spherely (S2) and shapely (GEOS) implementation answered, and tests/storage/test_geo_golden.py
holds the pure-Python geometry to those answers. Seeded, so a rerun writes the same file.

To record again (say, with more cases) against the S2 implementation, install spherely and shapely
and point --reference at storage/geometry/geo.py as of commit ad9e09a (the last that used them):
    git show ad9e09a:storage/geometry/geo.py > /tmp/geo_s2.py
    python tests/storage/geo_golden/generate.py --reference /tmp/geo_s2.py
Without --reference it runs the checked-out storage/geometry/geo.py (to see what the current code says)."""

from __future__ import annotations

import importlib.util
import json
import math
import random
import sys
from pathlib import Path
from typing import Any

from ebbdb.storage.core.errors import QueryError


def _load_geo() -> Any:
    """storage/geometry/geo.py, or the reference implementation named by --reference."""
    if "--reference" not in sys.argv:
        from ebbdb.storage.geometry import geo as current

        return current
    path = sys.argv[sys.argv.index("--reference") + 1]
    spec = importlib.util.spec_from_file_location("ebbdb.storage.geo_reference", path)
    if spec is None or spec.loader is None:
        sys.exit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


geo = _load_geo()

OUT = Path(__file__).with_name("cases.json")


def pt(x: float, y: float) -> dict[str, Any]:
    return {"type": "Point", "coordinates": [x, y]}


def ring(*vs: tuple[float, float]) -> list[list[float]]:
    return [list(v) for v in vs] + [list(vs[0])]


def poly(*rings: list[list[float]]) -> dict[str, Any]:
    return {"type": "Polygon", "coordinates": list(rings)}


def line(*vs: tuple[float, float]) -> dict[str, Any]:
    return {"type": "LineString", "coordinates": [list(v) for v in vs]}


def box_ring(x1: float, y1: float, x2: float, y2: float) -> list[list[float]]:
    return ring((x1, y1), (x2, y1), (x2, y2), (x1, y2))


SQUARE = poly(box_ring(0, 0, 10, 10))
HOLED = poly(box_ring(0, 0, 10, 10), box_ring(3, 3, 7, 7))
ANTI = poly(ring((170, -10), (-170, -10), (-170, 10), (170, 10)))  # across the antimeridian
POLAR = poly(ring((0, 80), (90, 80), (180, 80), (-90, 80)))  # around the north pole
SOUTH = poly(ring((-45, -85), (45, -85), (135, -85), (-135, -85)))
TRI = poly(ring((0, 0), (40, 0), (20, 50)))
LONG = poly(ring((-60, 40), (60, 40), (60, 50), (-60, 50)))  # its top edge bulges north
THIN = poly(ring((-1, -1), (1, -1), (1, 1), (-1, 1)))
CW = poly(ring((0, 0), (0, 10), (10, 10), (10, 0)))  # clockwise: S2 takes the smaller side
BIGHOLE = poly(box_ring(-20, -20, 20, 20), box_ring(-10, -10, 10, 10))
MULTI = {
    "type": "MultiPolygon",
    "coordinates": [[box_ring(0, 0, 10, 10)], [box_ring(20, 20, 30, 30), box_ring(22, 22, 28, 28)]],
}
REGIONS = {
    "square": SQUARE,
    "holed": HOLED,
    "anti": ANTI,
    "polar": POLAR,
    "south": SOUTH,
    "tri": TRI,
    "long": LONG,
    "thin": THIN,
    "cw": CW,
    "bighole": BIGHOLE,
    "multi": MULTI,
}


def shapes() -> dict[str, Any]:
    """Named document geometries: hand-written edge cases."""
    out: dict[str, Any] = {
        "origin": pt(0, 0),
        "inside": pt(5, 5),
        "outside": pt(15, 5),
        "in_hole": pt(5, 5.5),
        "on_top_edge_long": pt(0, 50),  # on the flat top edge, south of the great-circle edge
        "north_of_long": pt(0, 50.5),
        "pole": pt(0, 90),
        "pole2": pt(123, 90),
        "south_pole": pt(0, -90),
        "near_pole": pt(45, 89.9),
        "anti_in": pt(180, 0),
        "anti_in2": pt(-180, 0),
        "anti_in3": pt(175, 5),
        "anti_out": pt(160, 0),
        "legacy": [5, 5],
        "legacy_doc": {"x": 25, "y": 25},
        "legacy_far": [500, 5],
        "mp_in": {"type": "MultiPoint", "coordinates": [[1, 1], [9, 9]]},
        "mp_mixed": {"type": "MultiPoint", "coordinates": [[1, 1], [19, 9]]},
        "mp_one": {"type": "MultiPoint", "coordinates": [[25, 25]]},
        "ls_in": line((1, 1), (9, 9)),
        "ls_cross": line((-5, 5), (15, 5)),  # no vertex inside the square
        "ls_out": line((-5, -5), (-5, 20)),
        "ls_edge": line((0, 0), (10, 0)),
        "ls_hole": line((4, 4), (6, 6)),
        "ls_through_hole": line((1, 5), (9, 5)),
        "ls_long": line((-50, 49), (50, 49)),  # great circle bulges north of lat 50
        "ls_anti": line((175, 0), (-175, 0)),
        "ls_polar": line((0, 85), (180, 85)),  # over the pole
        "ls_touch_vertex": line((10, 10), (20, 20)),
        "mls": {"type": "MultiLineString", "coordinates": [[[1, 1], [2, 2]], [[3, 3], [4, 8]]]},
        "mls_out": {
            "type": "MultiLineString",
            "coordinates": [[[1, 1], [2, 2]], [[30, 3], [40, 8]]],
        },
        "poly_in": poly(box_ring(1, 1, 2, 2)),
        "poly_same": SQUARE,
        "poly_overlap": poly(box_ring(5, 5, 15, 15)),
        "poly_out": poly(box_ring(50, 50, 60, 60)),
        "poly_in_hole": poly(box_ring(4, 4, 6, 6)),
        "poly_around_hole": poly(box_ring(2, 2, 8, 8)),
        "poly_ring_in_holed": poly(box_ring(0.5, 0.5, 9.5, 9.5), box_ring(2, 2, 8, 8)),
        "poly_holed": HOLED,
        "poly_contains_square": poly(box_ring(-5, -5, 15, 15)),
        "poly_shared_edge": poly(box_ring(10, 0, 20, 10)),
        "poly_inner_shared_edge": poly(box_ring(0, 0, 5, 10)),
        "poly_shared_corner": poly(box_ring(10, 10, 20, 20)),
        "poly_anti": poly(ring((175, -5), (-175, -5), (-175, 5), (175, 5))),
        "poly_polar": poly(ring((0, 85), (120, 85), (-120, 85))),
        "poly_cw": CW,
        "mpoly": MULTI,
        "mpoly_in": {
            "type": "MultiPolygon",
            "coordinates": [[box_ring(1, 1, 2, 2)], [box_ring(5, 5, 6, 6)]],
        },
        "gc": {"type": "GeometryCollection", "geometries": [pt(1, 1), line((2, 2), (3, 3))]},
        "gc_mixed": {
            "type": "GeometryCollection",
            "geometries": [pt(1, 1), poly(box_ring(30, 30, 31, 31))],
        },
        "gc_nested": {
            "type": "GeometryCollection",
            "geometries": [
                {"type": "GeometryCollection", "geometries": [pt(2, 2)]},
                poly(box_ring(3, 3, 4, 4)),
            ],
        },
    }
    # Every vertex of every region, and points on their edges (exactly, on a meridian or the
    # equator, and at lng/lat midpoints that are not on the great circle).
    for name, region in REGIONS.items():
        rings = region["coordinates"]
        if region["type"] == "Polygon":
            rings = [rings]
        for pi, polygon in enumerate(rings):
            for ri, r in enumerate(polygon):
                for vi, v in enumerate(r[:-1]):
                    out[f"v_{name}_{pi}_{ri}_{vi}"] = pt(*v)
                    a, b = r[vi], r[vi + 1]
                    out[f"mid_{name}_{pi}_{ri}_{vi}"] = pt((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)
    return out


def random_shapes(rng: random.Random, n: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i in range(n):
        cx, cy = rng.uniform(-30, 40), rng.uniform(-30, 40)
        k = rng.random()
        if k < 0.45:
            out[f"r{i}_pt"] = pt(round(cx, 3), round(cy, 3))
        elif k < 0.7:
            out[f"r{i}_ls"] = line(
                *[(round(cx + rng.uniform(-15, 15), 2), round(cy + rng.uniform(-15, 15), 2))] * 1,
                (round(cx + rng.uniform(-15, 15), 2), round(cy + rng.uniform(-15, 15), 2)),
                (round(cx + rng.uniform(-15, 15), 2), round(cy + rng.uniform(-15, 15), 2)),
            )
        else:
            w, h = rng.uniform(0.5, 8), rng.uniform(0.5, 8)
            out[f"r{i}_poly"] = poly(
                ring(
                    (round(cx - w, 2), round(cy - h, 2)),
                    (round(cx + w, 2), round(cy - h * rng.random(), 2)),
                    (round(cx + w * rng.random(), 2), round(cy + h, 2)),
                )
            )
    return out


def invalid_values() -> list[Any]:
    return [
        5,
        "x",
        [1],
        [1, "a"],
        {"type": "Point", "coordinates": [200, 0]},
        {"type": "Point", "coordinates": [0, 91]},
        {"type": "Point"},
        {"type": "Circle", "coordinates": [0, 0]},
        line((0, 0)),
        line((0, 0), (0, 0)),
        line((0, 0), (1, 1), (1, 1)),
        line((0, 0), (180, 0)),
        line((0, 0), (10, 0), (-1, 0)),
        poly([[0, 0], [1, 0], [1, 1], [0, 1]]),
        poly([[0, 0], [1, 0], [0, 0]]),
        poly(ring((0, 0), (10, 0), (0, 10), (10, 10))),  # bowtie
        poly(ring((0, 10), (10, 0), (10, 10), (0, 0))),
        poly(ring((0, 0), (10, 0), (10, 0), (0, 10))),  # degenerate edge
        poly(ring((0, 10), (10, 10), (10, 0), (10, 0), (0, 0))),  # the same, clockwise
        poly(ring((0, 0), (10, 0), (10, 10), (0, 10), (5, -5))),
        poly(ring((0, 0), (10, 0), (5, 5), (10, 10), (0, 10), (5, 5))),  # duplicate vertex
        poly(box_ring(0, 0, 10, 10), box_ring(5, 5, 15, 6)),  # hole crosses the shell
        poly(box_ring(0, 0, 10, 10), box_ring(20, 20, 25, 25)),  # hole outside the shell
        poly(box_ring(0, 0, 10, 10), ring((0, 0), (5, 1), (1, 5))),  # hole at a shell vertex
        poly(box_ring(0, 0, 10, 10), box_ring(0, 0, 10, 10)),  # hole is the shell
        poly(box_ring(0, 0, 10, 10), box_ring(1, 1, 9, 9), box_ring(2, 2, 3, 3)),
        poly(ring((0, 0), (180, 0), (10, 10))),
        {
            "type": "MultiPolygon",
            "coordinates": [[box_ring(0, 0, 10, 10)], [box_ring(5, 5, 15, 15)]],
        },
        {
            "type": "MultiPolygon",
            "coordinates": [[box_ring(0, 0, 10, 10)], [box_ring(10, 0, 20, 10)]],
        },
        {
            "type": "MultiPolygon",
            "coordinates": [[box_ring(0, 0, 10, 10)], [box_ring(2, 2, 30, 8)]],
        },
        {"type": "MultiPolygon", "coordinates": [[box_ring(0, 0, 10, 10)], [box_ring(2, 2, 3, 3)]]},
        {"type": "MultiPolygon", "coordinates": []},
        {"type": "MultiPoint", "coordinates": []},
        {"type": "MultiLineString", "coordinates": [[[0, 0], [0, 0]]]},
        {"type": "MultiLineString", "coordinates": [[[0, 0]]]},
        {"type": "GeometryCollection", "geometries": []},
        {"type": "GeometryCollection", "geometries": [5]},
        {
            "type": "GeometryCollection",
            "geometries": [poly(ring((0, 0), (10, 0), (0, 10), (10, 10)))],
        },
    ]


def answer(f: Any) -> Any:
    try:
        return {"value": f()}
    except QueryError as exc:
        return {"error": [exc.code_name, str(exc)]}


def shape_summary(value: Any) -> Any:
    s = geo.parse_shape(value)
    return {
        "kind": s.kind,
        "vertices": [list(v) for v in s.vertices],
        "legacy": s.legacy,
        "on_sphere": s.geography is not None,
    }


def within_args() -> dict[str, Any]:
    out: dict[str, Any] = {f"geometry_{k}": {"$geometry": v} for k, v in REGIONS.items()}
    out.update(
        {
            "box": {"$box": [[0, 0], [10, 10]]},
            "box_swapped": {"$box": [[10, 10], [0, 0]]},
            "box_doc": {"$box": [{"a": -5, "b": -5}, {"a": 5, "b": 5}]},
            "polygon": {"$polygon": [[0, 0], [10, 0], [10, 10], [0, 10]]},
            "polygon_tri": {"$polygon": [[0, 0], [40, 0], [20, 50]]},
            "polygon_concave": {"$polygon": [[0, 0], [10, 0], [5, 5], [10, 10], [0, 10]]},
            "polygon_bowtie": {"$polygon": [[0, 0], [10, 10], [10, 0], [0, 10]]},
            "center": {"$center": [[5, 5], 5]},
            "center_zero": {"$center": [[5, 5], 0]},
            "center_sphere": {"$centerSphere": [[5, 5], 0.1]},
            "center_sphere_pole": {"$centerSphere": [[0, 90], 0.2]},
            "center_sphere_anti": {"$centerSphere": [[180, 0], 0.1]},
        }
    )
    return out


BAD_WITHIN = [
    5,
    {},
    {"$geometry": pt(0, 0)},
    {"$geometry": line((0, 0), (1, 1))},
    {"$geometry": {"type": "Nope"}},
    {"$geometry": 5},
    {"$box": [[0, 0]]},
    {"$box": 5},
    {"$box": [[0, 0], ["a", 1]]},
    {"$polygon": [[0, 0], [1, 1]]},
    {"$polygon": 5},
    {"$center": [[0, 0]]},
    {"$center": [[0, 0], -1]},
    {"$center": [[0, "x"], 1]},
    {"$centerSphere": [[200, 0], 1]},
    {"$centerSphere": [[0, 0], "x"]},
    {"$nope": 1},
    {"$geometry": poly(ring((0, 0), (10, 0), (0, 10), (10, 10)))},
]
BAD_INTERSECTS = [5, {}, {"$box": [[0, 0], [1, 1]]}, {"$geometry": 5}, {"$geometry": {"type": "X"}}]


def main() -> None:
    rng = random.Random(20261127)
    cases: list[dict[str, Any]] = []

    def add(op: str, **args: Any) -> None:
        cases.append({"id": len(cases), "op": op, **args})

    def add_within(shape: Any, arg: Any) -> None:
        within = geo.within(geo.parse_shape(shape), geo.parse_within(arg))
        add("within", shape=shape, arg=arg, expect={"value": within})

    def add_pair(reg: Any, sh: Any) -> Any:
        """Record whether the shape `sh` is within and intersects the polygon `reg`: the parsed
        shape, or None (nothing recorded) if either does not parse."""
        try:
            region = geo.parse_within({"$geometry": reg})
            s = geo.parse_shape(sh)
        except QueryError:
            return None
        add("within", shape=sh, arg={"$geometry": reg}, expect={"value": geo.within(s, region)})
        add(
            "intersects",
            shape=sh,
            arg={"$geometry": reg},
            expect={"value": geo.intersects(s, region)},
        )
        return s

    def add_region_distance(origin: tuple[float, float], reg: Any) -> None:
        distance = geo.spherical_distance(origin, geo.parse_shape(reg), 1.0)
        add(
            "spherical_distance",
            origin=list(origin),
            shape=reg,
            radius=1.0,
            expect={"value": distance},
        )

    docs = shapes()
    docs.update(random_shapes(rng, 120))
    for v in list(docs.values()) + invalid_values():
        add("parse_shape", value=v, expect=answer(lambda v=v: shape_summary(v)))
    for v in invalid_values():
        add(
            "parse_intersects",
            arg={"$geometry": v},
            expect=answer(lambda v=v: (geo.parse_intersects({"$geometry": v}), None)[1]),
        )
    for a in BAD_WITHIN:
        add("parse_within", arg=a, expect=answer(lambda a=a: (geo.parse_within(a), None)[1]))
    for a in BAD_INTERSECTS:
        add(
            "parse_intersects", arg=a, expect=answer(lambda a=a: (geo.parse_intersects(a), None)[1])
        )

    valid = {}
    for k, v in docs.items():
        try:
            valid[k] = (v, geo.parse_shape(v))
        except QueryError:
            pass

    for rk, arg in within_args().items():
        region = geo.parse_within(arg)
        add("region_box", arg=arg, expect=answer(lambda r=region: _box(geo.region_box(r))))
        for k, (v, s) in valid.items():
            if not _pairs_up(k, rk, s, region.spherical):
                continue
            add("within", shape=v, arg=arg, expect={"value": geo.within(s, region)})

    intersect_regions = dict(REGIONS)
    intersect_regions.update(
        {
            "pt": pt(5, 5),
            "pt_vertex": pt(10, 10),
            "pt_on_line": pt(5, 5.0),
            "line": line((-5, 5), (15, 5)),
            "line_meridian": line((5, -20), (5, 20)),
            "line_long": line((-50, 49), (50, 49)),
            "line_anti": line((170, 0), (-170, 0)),
            "line_polar": line((90, 85), (-90, 85)),
            "mpoint": {"type": "MultiPoint", "coordinates": [[1, 1], [25, 25]]},
            "mline": {
                "type": "MultiLineString",
                "coordinates": [[[-5, 5], [15, 5]], [[40, 40], [41, 41]]],
            },
            "gc": {
                "type": "GeometryCollection",
                "geometries": [pt(25, 25), line((0, 20), (20, 20))],
            },
        }
    )
    for rk, g in intersect_regions.items():
        arg = {"$geometry": g}
        region = geo.parse_intersects(arg)
        for k, (v, s) in valid.items():
            if not _pairs_up(k, rk, s, True):
                continue
            add("intersects", shape=v, arg=arg, expect={"value": geo.intersects(s, region)})

    origins = [(0, 0), (5, 5), (5, 5.5), (15, 5), (-5, 60), (180, 0), (0, 90), (100, -45), (170, 5)]
    origins += [
        (round(rng.uniform(-180, 180), 3), round(rng.uniform(-90, 90), 3)) for _ in range(3)
    ]
    for o in origins:
        for k, (v, s) in valid.items():
            if k.startswith(("v_", "mid_")) or (k.startswith("r") and rng.random() < 0.85):
                continue
            # Meters for a few: the same angle, scaled (the test checks the scaling once).
            for radius in (1.0, geo.EARTH_RADIUS_METERS)[: 1 + (rng.random() < 0.2)]:
                add(
                    "spherical_distance",
                    origin=list(o),
                    shape=v,
                    radius=radius,
                    expect={"value": geo.spherical_distance(o, s, radius)},
                )
            if s.legacy or s.is_point:
                add(
                    "flat_distance",
                    origin=list(o),
                    shape=v,
                    expect={"value": geo.flat_distance(o, s)},
                )

    # Flat regions with random points, some on their boundaries.
    for _ in range(150):
        p = [round(rng.uniform(-2, 12), 1), round(rng.uniform(-2, 12), 1)]
        if rng.random() < 0.3:
            p[rng.randrange(2)] = rng.choice([0, 10])
        for rk in ("box", "polygon", "polygon_concave", "center", "polygon_bowtie"):
            add_within(p, within_args()[rk])
    for p in ([0, 0], [5, 5], [5, 10], [10, 5], [7.5, 7.5], [2.5, 7.5], [0, 5], [10, 10], [5, 0.0]):
        for rk in ("polygon_concave", "center", "center_zero", "polygon_bowtie"):
            add_within(p, within_args()[rk])

    # Random polygons against random polygons, lines and points, all near each other.
    for _ in range(250):
        cx, cy = rng.uniform(-170, 170), rng.uniform(-80, 80)
        reg = poly(_rand_ring(rng, cx, cy, rng.uniform(1, 20)))
        sh: Any
        k = rng.random()
        if k < 0.4:
            sh = pt(
                round(cx + rng.uniform(-15, 15), 4),
                round(max(-90, min(90, cy + rng.uniform(-15, 15))), 4),
            )
        elif k < 0.7:
            sh = line(*[_rand_vertex(rng, cx, cy, 20) for _ in range(rng.randint(2, 4))])
        else:
            sh = poly(_rand_ring(rng, cx + rng.uniform(-10, 10), cy, rng.uniform(1, 10)))
        if add_pair(reg, sh) is not None:
            add_region_distance(_rand_vertex(rng, cx, cy, 30), reg)

    # Shapes on a small grid around (0, 0): shared vertices and edges everywhere, and the edges
    # on the equator and the prime meridian are exact great circles, so points and vertices lie
    # exactly on them (the semi-open rules and symbolic perturbation decide).
    grid = [(x, y) for x in (-10, -5, 0, 5, 10) for y in (-10, -5, 0, 5, 10)]
    for _ in range(600):
        reg = poly(ring(*rng.sample(grid, rng.choice((3, 3, 4)))))
        sh = _grid_shape(rng, grid, (2, 2, 3), (3, 3, 4))
        s = add_pair(reg, sh)
        if s is None:
            continue
        if not s.is_point:
            add(
                "intersects",
                shape=reg,
                arg={"$geometry": sh},
                expect={
                    "value": geo.intersects(
                        geo.parse_shape(reg), geo.parse_intersects({"$geometry": sh})
                    )
                },
            )

    # The same with big regions (often holding the shape), holes whose edges the shapes share,
    # and two-polygon MultiPolygons.
    inner = [(x, y) for x in (-5, 0, 5) for y in (-5, 0, 5)]
    outer = [(-10, -10), (10, -10), (10, 10), (-10, 10)]
    for _ in range(500):
        k = rng.random()
        if k < 0.4:
            reg = poly(ring(*outer), ring(*rng.sample(inner, 3)))
        elif k < 0.7:
            reg = poly(ring(*rng.sample(outer, 3)))
        else:
            reg = {
                "type": "MultiPolygon",
                "coordinates": [
                    [ring((-10, -10), (0, -10), (0, 0), (-10, 0))],
                    [ring(*rng.sample([(0, 0), (10, 0), (10, 10), (0, 10), (5, 5)], 3))],
                ],
            }
        sh = _grid_shape(rng, grid, (2, 2, 3), 3)
        if add_pair(reg, sh) is not None:
            add_region_distance(rng.choice(grid), reg)

    # Polygons with holes on small grids (around (0, 0), across the antimeridian, at the pole):
    # loops that touch, share vertices or cross. Only whether S2 accepts one is recorded here:
    # with several faults, which one its message names follows the order of its index's cells.
    grids = {
        "fine": [(x, y) for x in (0, 1, 2, 3) for y in (0, 1, 2, 3)],
        "anti": [(x, y) for x in (170, 175, 180, -180, -175, -170) for y in (-10, 0, 10)],
        "pole": [(x, y) for x in (-180, -90, 0, 90, 180, 45) for y in (80, 85, 90)],
    }
    for g in grids.values():
        for _ in range(150):
            rings = [ring(*rng.sample(g, rng.choice((3, 4, 5))))]
            rings += [ring(*rng.sample(g, 3)) for _ in range(rng.choice((0, 1, 1, 2)))]
            add("shape_valid", value=poly(*rings), expect={"value": _valid(poly(*rings))})
        # And shapes against regions there.
        for _ in range(150):
            reg = poly(ring(*rng.sample(g, rng.choice((3, 4)))))
            sh = _grid_shape(rng, g, (2, 3), (3, 4))
            add_pair(reg, sh)

    OUT.write_text(json.dumps({"cases": cases}, indent=None, separators=(",", ":")) + "\n")
    print(f"{len(cases)} cases -> {OUT}")


def _grid_shape(
    rng: random.Random,
    grid: list[tuple[float, float]],
    line_sizes: tuple[int, ...],
    polygon_sizes: tuple[int, ...] | int,
) -> Any:
    """A point (3 times in 10), a line or a triangle-or-more (3 and 4 in 10) on `grid`'s points,
    with as many as one of `line_sizes` or `polygon_sizes` (a number: that many, none drawn)."""
    k = rng.random()
    if k < 0.3:
        return pt(*rng.choice(grid))
    if k < 0.6:
        return line(*rng.sample(grid, rng.choice(line_sizes)))
    n = polygon_sizes if isinstance(polygon_sizes, int) else rng.choice(polygon_sizes)
    return poly(ring(*rng.sample(grid, n)))


def _rand_vertex(rng: random.Random, cx: float, cy: float, r: float) -> tuple[float, float]:
    x = (cx + rng.uniform(-r, r) + 180) % 360 - 180
    y = max(-89.0, min(89.0, cy + rng.uniform(-r, r)))
    return (round(x, 3), round(y, 3))


def _rand_ring(rng: random.Random, cx: float, cy: float, r: float) -> list[list[float]]:
    """A star-shaped ring around (cx, cy): angles sorted, so it never crosses itself (in the
    plane; a few do on the sphere, which records their error)."""
    n = rng.randint(3, 7)
    angles = sorted(rng.uniform(0, 2 * math.pi) for _ in range(n))
    vs = []
    for a in angles:
        d = r * rng.uniform(0.3, 1)
        x = (cx + d * math.cos(a) + 180) % 360 - 180
        y = max(-89.0, min(89.0, cy + d * math.sin(a)))
        vs.append((round(x, 3), round(y, 3)))
    return ring(*vs)


def _pairs_up(shape_key: str, region_key: str, shape: geo.Shape, spherical: bool) -> bool:
    """Which (shape, region) pairs to record: a region's own vertices and edge points against it
    (its boundary rules), the random shapes against a few regions, everything hand-written
    against every spherical region, and only points against the flat ones."""
    region_key = region_key.removeprefix("geometry_")
    if shape_key.startswith(("v_", "mid_")):
        return shape_key.split("_")[1] == region_key
    if shape_key.startswith("r") and shape_key[1].isdigit():
        return region_key in ("square", "holed", "tri", "multi", "box", "polygon", "line", "pt")
    return spherical or shape.is_point


def _valid(value: Any) -> bool:
    try:
        geo.parse_shape(value)
    except QueryError:
        return False
    return True


def _box(b: Any) -> Any:
    return None if b is None else list(b)


if __name__ == "__main__":
    main()
