"""Spherical geometry with S2's semantics, in pure Python: unit-vector points, exact orientation
predicates with S2's symbolic perturbation, semi-open polygon containment, validation with S2's
messages, the intersects/within predicates and point-to-shape distances storage/geometry/geo.py answers
$geoIntersects, $geoWithin and $near with. Edges are great-circle arcs."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

Point = tuple[float, float, float]
Coord = tuple[float, float]

#: S2's bound on the rounding error of (a x b) . c for unit vectors (kMaxDetError): outside it
#: the floating-point sign is the true one, inside it the exact determinant decides.
_MAX_DET_ERROR = 1.8274e-15
#: A fixed point that is no lng/lat grid point: each loop's containment is counted along arcs
#: from it (any point gives the same answers; the semi-open rules decide the boundaries).
_ORIGIN: Point = (-0.0099994664350250197, 0.0025924542609324121, 0.99994664350250195)
_NORTH_POLE: Point = (0.0, 0.0, 1.0)
#: Caps must stay under a hemisphere to be convex: this is cos(0.99 * pi / 2).
_COS_LARGEST_CAP = math.cos(math.pi / 2 * 0.99)


class InvalidGeometry(ValueError):
    """A loop, polygon or multipolygon S2 would refuse; the message is S2's reason."""


def point(lng: float, lat: float) -> Point:
    """The unit vector of a lng/lat pair in degrees, computed as S2LatLng::ToPoint does (the same
    bits: whether two vertices are the same point is decided on them)."""
    phi = math.radians(lat)
    theta = math.radians(lng)
    cosphi = math.cos(phi)
    return (math.cos(theta) * cosphi, math.sin(theta) * cosphi, math.sin(phi))


def _cross(a: Point, b: Point) -> Point:
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def _dot(a: Point, b: Point) -> float:
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def _norm(a: Point) -> float:
    return math.sqrt(_dot(a, a))


def angle(a: Point, b: Point) -> float:
    """The angle between two vectors, in radians (accurate for tiny and near-antipodal angles)."""
    return math.atan2(_norm(_cross(a, b)), _dot(a, b))


# -- the orientation predicate --------------------------------------------------------------------


def sign(a: Point, b: Point, c: Point) -> int:
    """+1 if a, b, c turn counterclockwise, -1 clockwise; 0 only when two of them are the same
    point. Collinear points get S2's symbolic perturbation, so that every other configuration has
    a consistent side (a point exactly on an edge is inside exactly one of two adjacent loops)."""
    det = _dot(_cross(a, b), c)
    if det > _MAX_DET_ERROR:
        return 1
    if det < -_MAX_DET_ERROR:
        return -1
    if a == b or b == c or c == a:
        return 0
    return _exact_sign(a, b, c)


def _exact_sign(a: Point, b: Point, c: Point) -> int:
    # The determinant's sign does not change under a common positive scale, so the coordinates
    # become integers over their common power-of-two denominator and the arithmetic is exact.
    perm = 1
    if a > b:
        a, b, perm = b, a, -perm
    if b > c:
        b, c, perm = c, b, -perm
    if a > b:
        a, b, perm = b, a, -perm
    ratios = [v.as_integer_ratio() for v in (*a, *b, *c)]
    scale = max(d for _, d in ratios)
    xa, xb, xc = ([n * (scale // d) for n, d in ratios[i : i + 3]] for i in (0, 3, 6))
    bc = (
        xb[1] * xc[2] - xb[2] * xc[1],
        xb[2] * xc[0] - xb[0] * xc[2],
        xb[0] * xc[1] - xb[1] * xc[0],
    )
    det = xa[0] * bc[0] + xa[1] * bc[1] + xa[2] * bc[2]
    if det:
        return perm * (1 if det > 0 else -1)
    return perm * _perturbed_sign(xa, xb, xc, bc)


def _sgn(x: int) -> int:
    return (x > 0) - (x < 0)


def _perturbed_sign(a: list[int], b: list[int], c: list[int], bc: tuple[int, int, int]) -> int:
    """The sign of the determinant of sorted points a < b < c, each coordinate perturbed by an
    infinitesimal ordered da[2] > da[1] > da[0] > db[2] > ... > dc[0] (Edelsbrunner and Muecke's
    simulation of simplicity, as S2 orders it): the first nonzero coefficient decides."""
    for s in (
        _sgn(bc[2]),  # da[2]
        _sgn(bc[1]),  # da[1]
        _sgn(bc[0]),  # da[0]
        _sgn(c[0] * a[1] - c[1] * a[0]),  # db[2]
        _sgn(c[0]),  # db[2] da[1]
        -_sgn(c[1]),  # db[2] da[0]
        _sgn(c[2] * a[0] - c[0] * a[2]),  # db[1]
        _sgn(c[2]),  # db[1] da[0]
        _sgn(a[0] * b[1] - a[1] * b[0]),  # dc[2]
        -_sgn(b[0]),  # dc[2] da[1]
        _sgn(b[1]),  # dc[2] da[0]
        _sgn(a[0]),  # dc[2] db[1]
    ):
        if s:
            return s
    return 1


def _ordered_ccw(a: Point, b: Point, c: Point, o: Point) -> bool:
    """Whether a, b, c are met in that order turning counterclockwise around o (a == b or b == c
    counts as ordered, a == c does not unless all three are equal)."""
    n = 0
    if sign(b, o, a) >= 0:
        n += 1
    if sign(c, o, b) >= 0:
        n += 1
    if sign(a, o, c) > 0:
        n += 1
    return n >= 2


def _ref_dir(a: Point) -> Point:
    """S2::RefDir (S2::Ortho): a fixed direction perpendicular to a, the reference that decides
    which of the loops meeting at a vertex contains it."""
    ax, ay, az = abs(a[0]), abs(a[1]), abs(a[2])
    largest = (0 if ax > az else 2) if ax > ay else (1 if ay > az else 2)
    k = largest - 1 if largest else 2
    temp = [0.012, 0.0053, 0.00457]
    temp[k] = 1.0
    c = _cross(a, (temp[0], temp[1], temp[2]))
    n = _norm(c)
    inv = 1.0 / n if n else 0.0
    return (c[0] * inv, c[1] * inv, c[2] * inv)


def _angle_contains_vertex(a: Point, b: Point, c: Point) -> bool:
    """Whether a loop with consecutive vertices a, b, c contains b: the wedge abc (closed at a,
    open at c) holds b's reference direction."""
    return not _ordered_ccw(_ref_dir(b), c, a, b)


def crossing_sign(a: Point, b: Point, c: Point, d: Point) -> int:
    """+1 when arcs ab and cd cross at a point interior to both, 0 when they share a vertex,
    -1 otherwise."""
    if a == c or a == d or b == c or b == d:
        return 0
    if a == b or c == d:
        return -1
    acb = -sign(a, b, c)
    if sign(a, b, d) != acb:
        return -1
    if -sign(c, d, b) != acb:
        return -1
    return 1 if sign(c, d, a) == acb else -1


def _vertex_crossing(a: Point, b: Point, c: Point, d: Point) -> bool:
    """For arcs sharing a vertex: whether they count as crossing, so that crossing parity stays
    consistent with the semi-open vertex rule."""
    if a == b or c == d:
        return False
    if a == c:
        return b == d or _ordered_ccw(_ref_dir(a), d, b, a)
    if b == d:
        return _ordered_ccw(_ref_dir(b), c, a, b)
    if a == d:
        return b == c or _ordered_ccw(_ref_dir(a), c, b, a)
    if b == c:
        return _ordered_ccw(_ref_dir(b), d, a, b)
    return False


def _edge_or_vertex_crossing(a: Point, b: Point, c: Point, d: Point) -> bool:
    s = crossing_sign(a, b, c, d)
    if s < 0:
        return False
    return s > 0 or _vertex_crossing(a, b, c, d)


# -- loops and polygons ---------------------------------------------------------------------------


@dataclass(eq=False)
class Loop:
    """A closed chain of vertices, its interior on the left and at most half the sphere (as S2
    normalizes a loop whose orientation is not given), with a cap around it for a quick reject."""

    vertices: list[Point]
    #: Whether S2's origin is inside, found on first use (most loops of the documents a query
    #: reads are rejected by their cap and never need it).
    _origin_inside: bool | None = None
    center: Point = (0.0, 0.0, 1.0)
    cos_radius: float = -1.0  # -1: the cap is the whole sphere, nothing is rejected early
    #: Each edge (c, d) with its normal c x d and (c x d) . origin, computed once: the
    #: containment test's floating-point fast path reads them.
    edge_data: list[tuple[Point, Point, Point, float]] = field(default_factory=list)

    def edges(self) -> list[tuple[Point, Point]]:
        return [(c, d) for c, d, _, _ in self.edge_data]

    def _find_origin_inside(self) -> bool:
        """As S2Loop finds it: vertex 1 is inside by the semi-open rule exactly when the origin
        is on the side the crossings between them say."""
        v = self.vertices
        v1_inside = v[0] != v[1] and v[2] != v[1] and _angle_contains_vertex(v[0], v[1], v[2])
        self._origin_inside = False
        self._origin_inside = v1_inside != self._crossings(v[1])
        return self._origin_inside

    def contains(self, p: Point) -> bool:
        """Semi-open containment: a point on an edge or vertex belongs to exactly one of the
        loops that meet there."""
        if _dot(p, self.center) < self.cos_radius:
            return False
        return self._crossings(p)

    def _crossings(self, p: Point) -> bool:
        """The origin's side, flipped by each edge the arc from the origin to p crosses."""
        inside = self._origin_inside
        if inside is None:
            inside = self._find_origin_inside()
        px, py, pz = p
        ox, oy, oz = _ORIGIN
        mx, my, mz = oy * pz - oz * py, oz * px - ox * pz, ox * py - oy * px
        err = _MAX_DET_ERROR
        for c, d, n, so in self.edge_data:
            # The common case in plain arithmetic, with the same determinants sign() reads:
            # c and d strictly on one side of the arc's great circle cannot cross it.
            sc = mx * c[0] + my * c[1] + mz * c[2]
            sd = mx * d[0] + my * d[1] + mz * d[2]
            if (sc > err and sd > err) or (sc < -err and sd < -err):
                continue
            sp = n[0] * px + n[1] * py + n[2] * pz
            if min(abs(sc), abs(sd), abs(sp), abs(so)) > err:
                # Proper crossing: p and c on the same side of cd, the origin on the other.
                if (sp > 0) == (sc > 0) and (so > 0) != (sc > 0):
                    inside = not inside
                continue
            if _edge_or_vertex_crossing(_ORIGIN, p, c, d):
                inside = not inside
        return inside


def _turning(vertices: list[Point]) -> float:
    """The loop's total turning angle (2 pi less its area when the interior is on the left): a
    negative one means the left side is the larger one."""
    n = len(vertices)
    total = 0.0
    for i in range(n):
        a, b, c = vertices[i - 1], vertices[i], vertices[(i + 1) % n]
        ab, bc = _cross(a, b), _cross(b, c)
        t = angle(ab, bc)
        det = _dot(ab, c)  # sign(a, b, c)'s determinant: only a near tie needs sign() itself
        left = det > 0 if abs(det) > _MAX_DET_ERROR else sign(a, b, c) > 0
        total += t if left else -t
    return total


def _make_loop(vertices: list[Point], cap: bool = True) -> Loop:
    """A loop of normalized vertices (see _orient), with its edges' normals and its cap."""
    loop = Loop(vertices)
    for i, c in enumerate(vertices):
        d = vertices[(i + 1) % len(vertices)]
        n = _cross(c, d)
        loop.edge_data.append((c, d, n, _dot(n, _ORIGIN)))
    if cap:
        _set_cap(loop)
    return loop


def _set_cap(loop: Loop) -> None:
    # A cap under a hemisphere is convex, so holding every vertex it holds every edge, and the
    # loop's interior (the smaller side) with them.
    v = loop.vertices
    s = (sum(p[0] for p in v), sum(p[1] for p in v), sum(p[2] for p in v))
    n = _norm(s)
    if n < 1e-9:
        return
    center = (s[0] / n, s[1] / n, s[2] / n)
    lowest = min(_dot(center, p) for p in v)
    if lowest > _COS_LARGEST_CAP:
        loop.center, loop.cos_radius = center, lowest - 1e-9  # a margin for rounding


@dataclass(eq=False)
class Polygon:
    """Loops nested by containment, as S2Polygon::InitNested builds them: a point is inside when
    an odd number of loops contain it. `depth` counts the loops around each loop (odd: a hole)."""

    loops: list[Loop]
    depth: list[int] = field(default_factory=list)
    _directed: set[tuple[Point, Point]] | None = None
    _vertices: set[Point] | None = None

    def contains(self, p: Point) -> bool:
        inside = False
        for loop in self.loops:
            if loop.contains(p):
                inside = not inside
        return inside

    def chains(self) -> list[list[tuple[Point, Point]]]:
        """Each loop's edges as S2Polygon's shape numbers them: a hole's run the other way (the
        interior stays on the left)."""
        out = []
        for loop, d in zip(self.loops, self.depth):
            v = loop.vertices
            if d % 2:
                v = v[::-1]
            out.append([(v[i], v[(i + 1) % len(v)]) for i in range(len(v))])
        return out

    def edges(self) -> list[tuple[Point, Point]]:
        return [e for loop in self.loops for e in loop.edges()]

    def vertex_set(self) -> set[Point]:
        if self._vertices is None:
            self._vertices = {v for loop in self.loops for v in loop.vertices}
        return self._vertices

    def directed_edges(self) -> set[tuple[Point, Point]]:
        """The boundary's edges with the interior on their left (computed once)."""
        if self._directed is None:
            self._directed = {e for chain in self.chains() for e in chain}
        return self._directed


def _contains_nested(a: Loop, b: Loop) -> bool:
    """Whether loop a contains loop b, given that they are nested or disjoint."""
    v1 = b.vertices[1]
    if v1 in a.vertices:
        m = a.vertices.index(v1)
        n = len(a.vertices)
        return _wedge_contains(
            a.vertices[m - 1], v1, a.vertices[(m + 1) % n], b.vertices[0], b.vertices[2 % n]
        )
    return a.contains(v1)


def _wedge_contains(a0: Point, ab1: Point, a2: Point, b0: Point, b2: Point) -> bool:
    # Wedge a0-ab1-a2 holds wedge b0-ab1-b2 when, around ab1, the order is a2 b2 b0 a0.
    return _ordered_ccw(a2, b2, b0, ab1) and _ordered_ccw(b0, a0, a2, ab1)


def _orient(vertices: list[Point]) -> list[Point]:
    """The vertices in S2's normalized order (S2Loop::Normalize): reversed when their left side
    is the larger one. S2 takes a loop as it is when its left side holds neither pole and spans
    under 180 degrees of longitude, and otherwise goes by the sign of its turning. A loop that
    turns left passes either way; only one that turns right (a clockwise loop, or one crossing
    itself) needs the first test, which decides for the loops that cross themselves."""
    distinct = [v for i, v in enumerate(vertices) if v != vertices[i - 1]]
    if len(distinct) < 3 or _turning(distinct) >= 0:
        return vertices
    if _lng_span(distinct) < math.pi and not _make_loop(distinct, cap=False).contains(_NORTH_POLE):
        return vertices
    return vertices[::-1]


def _lng_span(vertices: list[Point]) -> float:
    """The shortest longitude interval holding every vertex (the edges, each the shorter way
    between its ends, stay inside it when it is under 180 degrees)."""
    lngs = sorted(math.atan2(v[1], v[0]) for v in vertices)
    gaps = [b - a for a, b in zip(lngs, lngs[1:])] + [lngs[0] + 2 * math.pi - lngs[-1]]
    return 2 * math.pi - max(gaps)


def _loop_error(vertices: list[Point]) -> str | None:
    """S2Loop's checks that need no index, on the normalized vertices."""
    n = len(vertices)
    for j in range(n):
        a, b = vertices[j], vertices[(j + 1) % n]
        if a == b:
            return f"Edge {j} is degenerate (duplicate vertex)"
        if a == (-b[0], -b[1], -b[2]):
            return f"Edge {j} has antipodal vertices"
    return None


def polygon(rings: Sequence[Sequence[Coord]]) -> Polygon:
    """A polygon (or a multipolygon's loops together) from lng/lat rings without their closing
    vertex, each ring normalized to its smaller side. Raises InvalidGeometry with S2's reason."""
    oriented = [_orient([point(x, y) for x, y in ring]) for ring in rings]
    for i, vertices in enumerate(oriented):
        reason = _loop_error(vertices)
        if reason is not None:
            raise InvalidGeometry(f"Loop {i}: {reason}")
    loops = [_make_loop(v) for v in oriented]
    poly = Polygon(loops)
    poly.depth = [0] if len(loops) == 1 else _nesting_depths(loops)
    reason = _crossing_error(poly)
    if reason is not None:
        raise InvalidGeometry(reason)
    return poly


def _nesting_depths(loops: list[Loop]) -> list[int]:
    """How deep each loop sits in the nesting S2Polygon::InitNested builds, inserting the loops
    in order (so of two equal loops the first is the parent)."""
    children: dict[int, list[int]] = {-1: []}
    for i, loop in enumerate(loops):
        parent = -1
        descended = True
        while descended:
            descended = False
            for c in children[parent]:
                if _contains_nested(loops[c], loop):
                    parent, descended = c, True
                    break
        mine = [c for c in children[parent] if _contains_nested(loop, loops[c])]
        children[parent] = [c for c in children[parent] if c not in mine] + [i]
        children[i] = mine
    depth = [0] * len(loops)
    stack = [(c, 0) for c in children[-1]]
    while stack:
        i, d = stack.pop()
        depth[i] = d
        stack += [(c, d + 1) for c in children[i]]
    return depth


def _crossing_error(poly: Polygon) -> str | None:
    """The first pair of edges that cross or meet where S2 allows neither (s2shapeutil's
    FindSelfIntersection and its messages), taking pairs in edge order: S2 visits them in index
    cell order, so with several faults it may name another first."""
    if len(poly.loops) == 1 and len(poly.loops[0].vertices) <= 3:
        return None  # a triangle's edges all meet at its vertices, which are distinct
    chains = poly.chains()
    several = len(chains) > 1
    edges = [(c, k, e) for c, chain in enumerate(chains) for k, e in enumerate(chain)]
    normals = [_cross(a, b) for _, _, (a, b) in edges]
    for i, (ca, ka, (a0, a1)) in enumerate(edges):
        na = normals[i]
        for j in range(i + 1, len(edges)):
            cb, kb, (b0, b1) = edges[j]
            if ca == cb:
                n = len(chains[ca])
                if kb - ka == 1 or (ka == 0 and kb == n - 1):
                    continue  # neighbours share a vertex by construction
            # A cheap reject before the exact test: both ends of b strictly on one side of a.
            s0, s1 = _dot(na, b0), _dot(na, b1)
            if (s0 > _MAX_DET_ERROR and s1 > _MAX_DET_ERROR) or (
                s0 < -_MAX_DET_ERROR and s1 < -_MAX_DET_ERROR
            ):
                continue
            cs = crossing_sign(a0, a1, b0, b1)
            if cs < 0:
                continue
            if cs > 0:
                if ca != cb:
                    return f"Loop {ca} edge {ka} crosses loop {cb} edge {kb}"
                return (f"Loop {ca}: " if several else "") + f"Edge {ka} crosses edge {kb}"
            if a1 != b1:
                continue  # a vertex shared otherwise is reported by the pair ending there
            if ca == cb:
                prefix = f"Loop {ca}: " if several else ""
                return prefix + f"Edge {ka} has duplicate vertex with edge {kb}"
            b2 = chains[cb][(kb + 1) % len(chains[cb])][1]
            if a0 == b0 or a0 == b2:
                # S2's own wording: the second edge number may be one off, hence "near".
                return f"Loop {ca} edge {ka} has duplicate near loop {cb} edge {kb}"
            a2 = chains[ca][(ka + 1) % len(chains[ca])][1]
            if a2 != b0 and a2 != b2:
                # Two loops meeting at a vertex may touch there but not cross: b's edges must
                # both leave on the same side of a's (the side left of a0-a1-a2, or the other).
                if _ordered_ccw(a2, b0, a0, a1) != _ordered_ccw(a2, b2, a0, a1):
                    return f"Loop {ca} edge {ka} crosses loop {cb} edge {kb}"
    return None


def polyline(vertices: Sequence[Coord]) -> list[Point]:
    """A line's vertices (S2 accepts any, repeated ones included)."""
    return [point(x, y) for x, y in vertices]


# -- geographies and predicates ---------------------------------------------------------------


@dataclass(eq=False)
class Geography:
    """A geometry as S2 sees it: points, polylines and polygons (a collection holds several)."""

    points: list[Point] = field(default_factory=list)
    lines: list[list[Point]] = field(default_factory=list)
    polygons: list[Polygon] = field(default_factory=list)
    _cap: tuple[Point, float] | None | bool = False  # False: not computed yet

    def cap(self) -> tuple[Point, float] | None:
        """A cap (center, radius) holding the whole geography, computed once; None when the
        smallest this finds is not under a hemisphere."""
        if self._cap is False:
            self._cap = _cap_of(self.vertices())
        assert self._cap is not True
        return self._cap

    def vertices(self) -> list[Point]:
        out = list(self.points)
        for ln in self.lines:
            out += ln
        for poly in self.polygons:
            for loop in poly.loops:
                out += loop.vertices
        return out


def _cap_of(vertices: list[Point]) -> tuple[Point, float] | None:
    # Under a hemisphere a cap is convex: holding the vertices, it holds the edges and the
    # (smaller-side) polygon interiors between them.
    s = (sum(p[0] for p in vertices), sum(p[1] for p in vertices), sum(p[2] for p in vertices))
    n = _norm(s)
    if n < 1e-9:
        return None
    center = (s[0] / n, s[1] / n, s[2] / n)
    lowest = min(_dot(center, p) for p in vertices)
    if lowest <= _COS_LARGEST_CAP:
        return None
    return center, math.acos(min(1.0, lowest))


def _apart(a: Geography, b: Geography) -> bool:
    """Whether two geographies' caps are disjoint (then so are they)."""
    ca, cb = a.cap(), b.cap()
    if ca is None or cb is None:
        return False
    return angle(ca[0], cb[0]) > ca[1] + cb[1] + 1e-7  # acos near 1 loses ~1e-8


def collection(members: Sequence[Geography]) -> Geography:
    g = Geography()
    for m in members:
        g.points += m.points
        g.lines += m.lines
        g.polygons += m.polygons
    return g


def _line_edges(lines: list[list[Point]]) -> list[tuple[Point, Point]]:
    return [(ln[i], ln[i + 1]) for ln in lines for i in range(len(ln) - 1)]


def _on_edge(p: Point, a: Point, b: Point, n: Point | None = None) -> bool:
    """Whether p lies exactly on arc ab (between its ends, on its great circle: no perturbation);
    n is a x b when the caller has it."""
    if n is None:
        n = _cross(a, b)
    det = _dot(n, p)
    if abs(det) > _MAX_DET_ERROR:
        return False
    if a == b or p == a or p == b:
        return p == a or p == b
    ratios = [v.as_integer_ratio() for v in (*a, *b, *p)]
    scale = max(d for _, d in ratios)
    xa, xb, xp = ([n_ * (scale // d) for n_, d in ratios[i : i + 3]] for i in (0, 3, 6))
    exact = (
        xp[0] * (xa[1] * xb[2] - xa[2] * xb[1])
        + xp[1] * (xa[2] * xb[0] - xa[0] * xb[2])
        + xp[2] * (xa[0] * xb[1] - xa[1] * xb[0])
    )
    if exact:
        return False
    return _dot(_cross(n, a), p) > 0 and _dot(_cross(b, n), p) > 0


def _on_boundary(p: Point, poly: Polygon) -> bool:
    for loop in poly.loops:
        if p in loop.vertices:
            return True
        if _dot(p, loop.center) < loop.cos_radius:
            continue
        if any(_on_edge(p, c, d, n) for c, d, n, _ in loop.edge_data):
            return True
    return False


def _crosses(edges_a: list[tuple[Point, Point]], edges_b: list[tuple[Point, Point]]) -> int:
    """The strongest crossing between two edge sets: 1 an interior crossing, 0 a shared vertex,
    -1 none."""
    best = -1
    err = _MAX_DET_ERROR
    normals_a = [_cross(a0, a1) for a0, a1 in edges_a]
    for b0, b1 in edges_b:
        n = _cross(b0, b1)
        for (a0, a1), na in zip(edges_a, normals_a):
            s0, s1 = _dot(n, a0), _dot(n, a1)
            if (s0 > err and s1 > err) or (s0 < -err and s1 < -err):
                continue
            t0, t1 = _dot(na, b0), _dot(na, b1)
            if (t0 > err and t1 > err) or (t0 < -err and t1 < -err):
                continue
            if min(abs(s0), abs(s1), abs(t0), abs(t1)) > err:
                # Each edge's ends straddle the other's circle; they cross unless the arcs
                # meet only at the antipode (crossing_sign's last test, in plain arithmetic).
                if (s1 > 0) == (t0 > 0):
                    return 1
                continue
            cs = crossing_sign(a0, a1, b0, b1)
            if cs > 0:
                return 1
            best = max(best, cs)
    return best


def _point_touches(p: Point, g: Geography) -> bool:
    """Whether a point meets a geography: equal to one of its points or line vertices (S2 counts
    no point inside a line's edges), or inside one of its polygons (semi-open)."""
    if p in g.points:
        return True
    if any(p in ln for ln in g.lines):
        return True
    return any(poly.contains(p) for poly in g.polygons)


def _pieces(a: Point, b: Point, poly: Polygon) -> list[tuple[Point, Point]]:
    """Arc ab cut where it meets the polygon's boundary without crossing it: at the polygon's
    vertices that lie exactly on it. Each piece then lies wholly inside, outside or along the
    boundary. An arc that touches nothing comes back whole."""
    n = _cross(a, b)
    touches = [
        v
        for loop in poly.loops
        if _dot(a, loop.center) >= loop.cos_radius or _dot(b, loop.center) >= loop.cos_radius
        for v in loop.vertices
        if v != a and v != b and _on_edge(v, a, b, n)
    ]
    if not touches:
        return [(a, b)]
    touches.sort(key=lambda v: angle(a, v))
    stops = [a, *touches, b]
    return [(stops[i], stops[i + 1]) for i in range(len(stops) - 1) if stops[i] != stops[i + 1]]


def _piece_inside(p: Point, q: Point, poly: Polygon) -> bool:
    """Whether a piece from _pieces (which crosses no edge of the polygon) is inside. A piece
    that is one of the boundary's edges is inside when it runs the same way (S2 holds such an
    edge to the polygon whose interior is on its left). Otherwise an end that is no vertex of
    the polygon decides: strictly inside or outside, or on an edge, where S2's perturbation puts
    it on one side, and the piece with it. Between two vertices, the midpoint decides."""
    directed = poly.directed_edges()
    if (p, q) in directed:
        return True
    if (q, p) in directed:
        return False
    corners = poly.vertex_set()
    for end in (q, p):
        if end not in corners:
            return poly.contains(end)
    return poly.contains((p[0] + q[0], p[1] + q[1], p[2] + q[2]))


def _touches_boundary(a: Point, b: Point, poly: Polygon) -> bool:
    return _on_boundary(a, poly) or _on_boundary(b, poly) or len(_pieces(a, b, poly)) > 1


def _edges_inside(edges: list[tuple[Point, Point]], poly: Polygon) -> tuple[bool, bool]:
    """(all, any): whether all edges, and whether any, lie inside the polygon, for edges that
    cross none of its edges and whose ends' containment is known to agree with it elsewhere:
    only edges that touch the boundary are cut and looked at piece by piece."""
    every, some = True, False
    for a, b in edges:
        if not _touches_boundary(a, b, poly):
            inside = poly.contains(a)
            every, some = every and inside, some or inside
            continue
        for p, q in _pieces(a, b, poly):
            inside = _piece_inside(p, q, poly)
            every, some = every and inside, some or inside
    return every, some


def _line_meets_polygon(line: list[Point], poly: Polygon) -> bool:
    if any(poly.contains(v) for v in line):
        return True
    edges = _line_edges([line])
    if _crosses(edges, poly.edges()) > 0:
        return True
    return _edges_inside(edges, poly)[1]


def _polygons_meet(a: Polygon, b: Polygon) -> bool:
    if _crosses(a.edges(), b.edges()) > 0:
        return True
    for x, y in ((a, b), (b, a)):
        for loop in x.loops:
            for v in loop.vertices:
                if y.contains(v) and (x.contains(v) or not _on_boundary(v, y)):
                    return True
    # Boundaries that only touch: one's boundary inside the other, or along it the same way.
    for x, y in ((a, b), (b, a)):
        if _edges_inside([e for chain in x.chains() for e in chain], y)[1]:
            return True
    return False


def intersects(a: Geography, b: Geography) -> bool:
    """Whether two geographies share a point (S2's semi-open polygons, closed polylines)."""
    if (a.lines or a.polygons) and _apart(a, b):
        return False  # the common case of a query: a shape far from the region
    if any(_point_touches(p, b) for p in a.points):
        return True
    if any(_point_touches(p, a) for p in b.points):
        return True
    for line in a.lines:
        if b.lines and _crosses(_line_edges([line]), _line_edges(b.lines)) >= 0:
            return True
        if any(_line_meets_polygon(line, poly) for poly in b.polygons):
            return True
    for line in b.lines:
        if any(_line_meets_polygon(line, poly) for poly in a.polygons):
            return True
    return any(_polygons_meet(pa, pb) for pa in a.polygons for pb in b.polygons)


def within(a: Geography, region: Geography) -> bool:
    """Whether every point of `a` is in the region, a geography of one polygon (semi-open)."""
    if (a.lines or a.polygons) and _apart(a, region):
        return False
    return _within(a, region.polygons[0])


def _within(a: Geography, region: Polygon) -> bool:
    if not all(region.contains(p) for p in a.points):
        return False
    edges = region.edges()
    for line in a.lines:
        if not all(region.contains(v) for v in line):
            return False
        line_edges = _line_edges([line])
        if _crosses(line_edges, edges) > 0:
            return False
        if not _edges_inside(line_edges, region)[0]:
            return False
    return all(_polygon_within(poly, region, edges) for poly in a.polygons)


def _polygon_within(a: Polygon, b: Polygon, b_edges: list[tuple[Point, Point]]) -> bool:
    if _crosses(a.edges(), b_edges) > 0:
        return False
    for loop in a.loops:
        for v in loop.vertices:
            if _on_boundary(v, b):
                # Where the boundaries meet, the semi-open rule gives a vertex A holds to B too
                # when A lies inside B there.
                if a.contains(v) and not b.contains(v):
                    return False
            elif not b.contains(v):
                return False
    # A's boundary where it touches B's: inside B piece by piece, or along it the same way.
    if not _edges_inside([e for chain in a.chains() for e in chain], b)[0]:
        return False
    # B's boundary inside A (a hole of B, say) leaves part of A outside B.
    for loop in b.loops:
        for w in loop.vertices:
            if a.contains(w) and not _on_boundary(w, a):
                return False
    return True


# -- distances ------------------------------------------------------------------------------------


def _edge_distance(x: Point, a: Point, b: Point) -> float:
    """The angle from x to the nearest point of arc ab."""
    n = _cross(a, b)
    nn = _dot(n, n)
    if nn > 0 and _dot(_cross(n, a), x) > 0 and _dot(_cross(b, n), x) > 0:
        # The nearest point of the great circle lies inside the arc: the angle out of its plane.
        k = _dot(x, n) / nn
        inplane = (x[0] - k * n[0], x[1] - k * n[1], x[2] - k * n[2])
        return math.atan2(abs(k) * math.sqrt(nn), _norm(inplane))
    return min(angle(x, a), angle(x, b))


def distance(x: Point, g: Geography) -> float:
    """The angle in radians from a point to the nearest point of a geography (0 inside one of
    its polygons)."""
    best = math.inf
    for p in g.points:
        best = min(best, angle(x, p))
    for a, b in _line_edges(g.lines):
        best = min(best, _edge_distance(x, a, b))
    for poly in g.polygons:
        if poly.contains(x):
            return 0.0
        for a, b in poly.edges():
            best = min(best, _edge_distance(x, a, b))
    return best


__all__ = [
    "Geography",
    "InvalidGeometry",
    "Polygon",
    "collection",
    "crossing_sign",
    "distance",
    "intersects",
    "point",
    "polygon",
    "polyline",
    "sign",
    "within",
]
