"""Flat geometry for the legacy `2d` regions of $geoWithin: whether a point lies in a $box or a
$polygon, its boundary included (GEOS's `covers`, which these answers followed), and a region's
bounds. $center is a distance test and lives in storage/geometry/geo.py."""

from __future__ import annotations

from dataclasses import dataclass

Coord = tuple[float, float]


def _orientation(a: Coord, b: Coord, p: Coord) -> int:
    """The side of line ab that p is on (+1 left, -1 right, 0 on it), exactly: a point that
    rounds onto an edge in floating point must not count as on it, and the reverse."""
    det = (b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])
    bound = 1e-14 * (abs((b[0] - a[0]) * (p[1] - a[1])) + abs((b[1] - a[1]) * (p[0] - a[0])))
    if det > bound:
        return 1
    if det < -bound:
        return -1
    # Near a tie, exactly: each coordinate an integer over the common power-of-two denominator.
    ratios = [v.as_integer_ratio() for v in (*a, *b, *p)]
    scale = max(d for _, d in ratios)
    ax, ay, bx, by, px, py = (n * (scale // d) for n, d in ratios)
    exact = (bx - ax) * (py - ay) - (by - ay) * (px - ax)
    return (exact > 0) - (exact < 0)


@dataclass(frozen=True)
class FlatBox:
    """An axis-aligned box, corners ordered."""

    x1: float
    y1: float
    x2: float
    y2: float

    def covers(self, p: Coord) -> bool:
        return self.x1 <= p[0] <= self.x2 and self.y1 <= p[1] <= self.y2

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        return (self.x1, self.y1, self.x2, self.y2)


@dataclass(frozen=True)
class FlatPolygon:
    """A ring of vertices (closed implicitly). A self-crossing ring is read by the even-odd
    rule, as GEOS locates a point in one."""

    vertices: tuple[Coord, ...]

    def covers(self, p: Coord) -> bool:
        x, y = p
        inside = False
        v = self.vertices
        prev = v[-1]
        for cur in v:
            (x1, y1), (x2, y2) = prev, cur
            prev = cur
            if x1 < x and x2 < x:
                continue  # the ray runs to the right of p
            if min(y1, y2) <= y <= max(y1, y2) and min(x1, x2) <= x <= max(x1, x2):
                if _orientation((x1, y1), (x2, y2), p) == 0:
                    return True  # on the boundary
            # An upward edge holds its start and not its end, a downward one the reverse, so a
            # vertex on the ray is counted once.
            if (y1 > y) != (y2 > y):
                side = _orientation((x1, y1), (x2, y2), p)
                if (side > 0) == (y2 > y1):
                    inside = not inside
        return inside

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        xs = [v[0] for v in self.vertices]
        ys = [v[1] for v in self.vertices]
        return (min(xs), min(ys), max(xs), max(ys))


__all__ = ["FlatBox", "FlatPolygon"]
