"""The geospatial query operators as the matcher parses them: `$geoWithin` (and its old name
`$within`), `$geoIntersects`, `$near` and `$nearSphere` (with `$minDistance`/`$maxDistance`
beside a legacy point), each a Geo leaf whose test reads a value's geometry (storage/geometry/geo.py, and
its geometry libraries, imported by the first geo operator parsed, not by every filter)."""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.match_tree import And, ElemMatchObject, Geo, Node, Nor, Not, Or, Test

if TYPE_CHECKING:
    from ebbdb.storage.geometry import geo

NEAR_OPERATORS = frozenset({"$near", "$nearSphere"})
#: MongoDB's message for a proximity operator where results cannot be sorted by distance (a
#: pipeline's $match, a validator; the run-together "operationfor" is MongoDB's own).
NEAR_REFUSED = (
    "$geoNear, $near, and $nearSphere are not allowed in this context, as these operators require "
    "sorting geospatial data. If you do not need sort, consider using $geoWithin instead. Check "
    "out https://dochub.mongodb.org/core/near-sort-operation and "
    "https://dochub.mongodb.org/core/nearSphere-sort-operationfor more details."
)


def _shape_of(g: ModuleType, value: Any) -> geo.Shape | None:
    """A value's geometry (`g` is storage/geometry/geo.py), or None when it holds none (the value then
    matches no geo operator)."""
    try:
        shape: geo.Shape = g.parse_shape(value)
    except QueryError:
        return None
    return shape


def _within_test(g: ModuleType, region: geo.Region) -> Test:
    def test(value: Any) -> bool:
        shape = _shape_of(g, value)
        return shape is not None and bool(g.within(shape, region))

    return test


def _intersects_test(g: ModuleType, region: geo.Region) -> Test:
    def test(value: Any) -> bool:
        shape = _shape_of(g, value)
        return shape is not None and bool(g.intersects(shape, region))

    return test


def _has_geometry_test(g: ModuleType) -> Test:
    def test(value: Any) -> bool:
        return _shape_of(g, value) is not None

    return test


def parse_geo(op: str, path: str, arg: Any, ops: Mapping[str, Any], _parse: object) -> Node:
    """One geo operator on `path` (with the field's other operators at hand, for the distance
    bounds of a legacy $near; `_parse` is the matcher's state, which no geo operator reads).
    Raises QueryError (BadValue) for a malformed argument."""
    from ebbdb.storage.geometry import geo

    if op in ("$geoWithin", "$within"):
        region = geo.parse_within(arg)
        return Geo(path, _within_test(geo, region), op, arg, region)
    if op == "$geoIntersects":
        region = geo.parse_intersects(arg)
        return Geo(path, _intersects_test(geo, region), op, arg, region)
    near = geo.parse_near(op, arg, ops)
    return Geo(path, _has_geometry_test(geo), op, arg, near)


def parse_distance(
    op: str, path: str, arg: Any, ops: Mapping[str, Any], _parse: object
) -> Node | None:
    """`$maxDistance` / `$minDistance`: read with the field's $near or $nearSphere."""
    if NEAR_OPERATORS & set(ops):
        return None
    raise QueryError("BadValue", f"unknown operator: {op}")


def near_leaves(node: Node) -> list[Geo]:
    """Every proximity leaf anywhere in a parsed filter."""
    if isinstance(node, Geo):
        return [node] if node.op in NEAR_OPERATORS else []
    if isinstance(node, (And, Or, Nor)):
        return [g for c in node.children for g in near_leaves(c)]
    if isinstance(node, (Not, ElemMatchObject)):
        return near_leaves(node.child)
    return []


__all__ = ["NEAR_OPERATORS", "NEAR_REFUSED", "near_leaves", "parse_distance", "parse_geo"]
