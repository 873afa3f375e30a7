"""`hashed` indexes: one field of the key pattern (alone or among ascending/descending ones) holds
the 64-bit hash of the document's value instead of the value (storage/query/hashing.py: mongod's
own hash, bit for bit), with MongoDB's rules: no arrays anywhere along any of the index's paths,
no `unique`, at most one hashed field."""

from __future__ import annotations

from typing import Any

from ebbdb.storage.catalog.info import IndexInfo
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import render
from ebbdb.storage.indexes.index_kinds.registry import Bodies, IndexKind, Key, PlainBodies, register
from ebbdb.storage.indexes.plans import Bounds, Candidate, FieldBounds, PlainCandidate, Planning
from ebbdb.storage.query.hashing import hash_value, point_hashes
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.sort import SortSpec

HASHED = "hashed"

__all__ = ["hash_value", "hashed_field", "point_hashes"]


def hashed_field(ix: IndexInfo) -> str | None:
    return next((f for f, d in ix.key if d == HASHED), None)


# -- the kind ----------------------------------------------------------------------------------------


def check(key: Key, options: dict[str, Any]) -> dict[str, Any]:
    hashed = [f for f, d in key if d == HASHED]
    if len(hashed) > 1:
        raise QueryError(
            "Location31303",
            f"A maximum of one index field is allowed to be hashed but found {len(hashed)} "
            f"for 'key' {render(dict(key))}",
        )
    for field, direction in key:
        if isinstance(direction, str) and direction != HASHED:
            raise QueryError(
                "CannotCreateIndex", "Can't use more than one index plugin for a single index."
            )
        if field == "$**" or field.endswith(".$**"):
            raise QueryError(
                "CannotCreateIndex",
                "Index key contains an illegal field name: field name starts with '$'.",
            )
    if options.get("unique"):
        raise QueryError(
            "Location16764",
            "Currently hashed indexes cannot guarantee uniqueness. Use a regular index.",
        )
    # expireAfterSeconds is accepted on a single hashed field (as MongoDB does), but such an
    # index expires nothing: MongoDB's TTL monitor skips every index that is not a plain btree
    # (storage/expiry/ttl.py is_native_ttl).
    return {}


def _array_along(doc: Any, path: str) -> str | None:
    """The prefix of `path` (through the array) where it meets an array, or None."""
    value = doc
    parts = path.split(".")
    for i, part in enumerate(parts):
        if type(value) is list:
            return ".".join(parts[:i])
        if not isinstance(value, dict):
            return None
        value = value.get(part, MISSING)
        if value is MISSING:
            return None
    return path if type(value) is list else None


def bodies(ix: IndexInfo, doc: dict[str, Any], plain: PlainBodies) -> Bodies:
    for path in ix.fields:
        found = _array_along(doc, path)
        if found is not None:
            raise QueryError(
                "Location16766",
                "Error: hashed indexes do not currently support array values. Found array at "
                f"path: {found}",
            )
    field = hashed_field(ix)

    def leaf(path: str, value: Any) -> Any:
        return hash_value(value) if path == field else value

    bodies, _ = plain(ix, doc, leaf)
    # What returnKey shows (and a report would): the hash in the hashed field's place.
    shown = [(body, {f: leaf(f, v) for f, v in values.items()}) for body, values in bodies]
    return shown, False


# -- planning ----------------------------------------------------------------------------------------


def _hashed_bounds(ix: IndexInfo, bounds: Bounds) -> Bounds:
    """The bounds on a hashed index: its hashed field's equalities become points on their hashes
    (ranges cannot use it); the other fields keep theirs."""
    field = hashed_field(ix)
    fb = bounds.get(field) if field is not None else None
    if field is None or fb is None:
        return bounds
    out = {path: b for path, b in bounds.items() if path != field}
    if fb.point_sets:
        out[field] = FieldBounds(
            [[h for p in points for h in point_hashes(p)] for points in fb.point_sets]
        )
    return out


def candidate(
    ix: IndexInfo, bounds: Bounds, sort: SortSpec | None, plain: PlainCandidate
) -> Candidate | None:
    return plain(ix, _hashed_bounds(ix, bounds), sort)


register(IndexKind(HASHED, check, bodies, planning=Planning(candidate=candidate)))
