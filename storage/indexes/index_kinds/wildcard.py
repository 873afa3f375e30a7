"""Wildcard indexes (`{"$**": 1}`, `{"a.$**": 1}`, `wildcardProjection`): one entry per leaf
of the document, keyed by its path and its value, as MongoDB's wildcard key generator makes them
(arrays give their elements and are multikey, nested arrays are indexed whole, empty documents
and arrays are leaves, `_id` is left out unless the projection includes it). The planner reads
one path of such an index at a time, as an index on `{$_path: 1, <path>: 1}`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ebbdb.storage.catalog.info import IndexInfo
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import is_number, to_float, type_name
from ebbdb.storage.indexes import keys
from ebbdb.storage.indexes.index_kinds.registry import Bodies, IndexKind, Key, PlainBodies, register
from ebbdb.storage.indexes.plans import Bounds, Candidate, FieldBounds, PlainCandidate, Planning
from ebbdb.storage.query.compare import UNDEFINED
from ebbdb.storage.query.sort import SortSpec

WILDCARD = "wildcard"

PATH_FIELD = "$_path"
PROJECTION = "wildcardProjection"
OPTIONS = frozenset({PROJECTION})


def is_wildcard_field(field: str) -> bool:
    return field == "$**" or field.endswith(".$**")


# -- the projection ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Paths:
    """Which paths an index holds: those under `root` ("" for `$**`), then the projection's
    `paths` included (inclusion) or left out (not inclusion); `_id` only when named."""

    root: str
    paths: tuple[str, ...] = ()
    inclusion: bool = False
    with_id: bool = False

    def indexed(self, path: str) -> bool:
        """Whether a leaf at `path` gets an entry."""
        if self.root and not _under(path, self.root):
            return False
        if _under(path, "_id") and not self.with_id:
            return False
        if self.inclusion:
            return any(_under(path, p) for p in self.paths) or (
                self.with_id and _under(path, "_id")
            )
        return not any(_under(path, p) for p in self.paths)

    def reaches(self, path: str) -> bool:
        """Whether something at or below `path` may be indexed (the walk goes on into it)."""
        if self.indexed(path):
            return True
        if _under(path, "_id") and not self.with_id:
            return False
        if self.root:
            return _under(self.root, path)  # on the way to the root
        return self.inclusion and any(_under(p, path) for p in self.paths)


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".")


def _flatten(spec: Mapping[str, Any], prefix: str, out: list[tuple[str, Any]]) -> None:
    for name, value in spec.items():
        path = f"{prefix}.{name}" if prefix else name
        if isinstance(value, Mapping):
            _flatten(value, path, out)
        else:
            out.append((path, value))


def _parse_projection(spec: Mapping[str, Any]) -> tuple[tuple[str, ...], bool, bool]:
    """(paths, inclusion, _id included) of a wildcardProjection, with MongoDB's errors."""
    flat: list[tuple[str, Any]] = []
    _flatten(spec, "", flat)
    inclusion: bool | None = None
    with_id = False
    paths = []
    for path, value in flat:
        if not (is_number(value) or isinstance(value, bool)):
            raise QueryError(
                "Location51271",
                f"The field '{PROJECTION}' may only contain numeric or boolean values, but "
                f"'{path}' is {type_name(value)}",
            )
        include = to_float(value) != 0 if is_number(value) else bool(value)
        if path == "_id":
            with_id = include
            continue
        if inclusion is None:
            inclusion = include
        elif include != inclusion:
            if inclusion:
                raise QueryError(
                    "Location31254", f"Cannot do exclusion on field {path} in inclusion projection"
                )
            raise QueryError(
                "Location31253", f"Cannot do inclusion on field {path} in exclusion projection"
            )
        paths.append(path)
    if inclusion is None:  # only `_id` named: {_id: 1} indexes everything, _id too
        inclusion = False
    return tuple(paths), inclusion, with_id


@lru_cache(maxsize=256)
def _paths_of(field: str, projection: Any) -> Paths:
    root = "" if field == "$**" else field[: -len(".$**")]
    if projection is None:
        return Paths(root)
    paths, inclusion, with_id = _parse_projection(_thaw(projection))
    return Paths(root, paths, inclusion, with_id)


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple((k, _freeze(v)) for k, v in value.items())
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple):
        return {k: _thaw(v) for k, v in value}
    return value


def paths_of(ix: IndexInfo) -> Paths:
    """What a wildcard index holds (parsed once per index spec)."""
    return _paths_of(ix.key[0][0], _freeze(ix.options.get(PROJECTION)))


# -- checking a request ------------------------------------------------------------------------------


def _refuse(message: str, code: str = "CannotCreateIndex") -> QueryError:
    return QueryError(code, message)


def check(key: Key, options: dict[str, Any]) -> dict[str, Any]:
    wild = [f for f, _ in key if is_wildcard_field(f)]
    for _, direction in key:
        if isinstance(direction, str):
            if direction == WILDCARD or not wild:
                raise _refuse(f"Unknown index plugin '{direction}'")
            raise _refuse("Can't use more than one index plugin for a single index.")
    if len(wild) > 1:
        raise _refuse("An index can only have one wildcard component", "Location7246201")
    field = wild[0]
    head = field.split(".")[:-1]
    if any(part.startswith("$") for part in head):
        raise _refuse("Index key contains an illegal field name: field name starts with '$'.")
    for _, direction in key:
        if not is_number(direction):
            raise _refuse(
                f"Values in v:2 index key pattern cannot be of type {type_name(direction)}. Only "
                "numbers > 0, numbers < 0, and strings are allowed."
            )
        if to_float(direction) == 0 or to_float(direction) != to_float(direction):
            raise _refuse("Values in the index key pattern can't be 0 or NaN.")
    if options.get("sparse"):
        raise _refuse("Index type 'wildcard' does not support the sparse option")
    if options.get("unique"):
        raise _refuse("Index type 'wildcard' does not support the unique option")
    if "expireAfterSeconds" in options:
        raise _refuse("Index type 'wildcard' cannot be a TTL index")
    out: dict[str, Any] = {}
    if PROJECTION in options:
        spec = options[PROJECTION]
        if not isinstance(spec, Mapping):
            raise _refuse(
                f"The field '{PROJECTION}' must be a non-empty object, but got {type_name(spec)}",
                "TypeMismatch",
            )
        if field != "$**":
            raise _refuse(
                f"The field '{PROJECTION}' is only allowed when 'key' is {{\"$**\": ±1}}",
                "FailedToParse",
            )
        if not spec:
            raise _refuse(f"The '{PROJECTION}' field can't be an empty object", "FailedToParse")
        _parse_projection(spec)
        out[PROJECTION] = dict(spec)
    if len(key) > 1:
        # MongoDB 7.0's compound wildcard indexes ({a: 1, "b.$**": 1}) are not built here.
        raise _refuse("compound wildcard indexes are not supported", "NotImplemented")
    return out


# -- entries -----------------------------------------------------------------------------------------


class _Walk:
    """One document's (path, value) leaves under a Paths, and whether an array was crossed."""

    def __init__(self, paths: Paths) -> None:
        self.paths = paths
        self.leaves: list[tuple[str, Any]] = []
        self.multikey = False

    def document(self, doc: Mapping[str, Any], prefix: str) -> None:
        for name, value in doc.items():
            if "." in name:
                continue  # a dotted field name is no path a query can name
            path = f"{prefix}.{name}" if prefix else name
            if self.paths.reaches(path):
                self.value(value, path, in_array=False)

    def value(self, value: Any, path: str, in_array: bool) -> None:
        if type(value) is list:
            if in_array:
                self._leaf(path, value)  # an array in an array is indexed whole
                return
            self.multikey = True
            if not value:
                self._leaf(path, UNDEFINED)
            for item in value:
                self.value(item, path, in_array=True)
        elif isinstance(value, Mapping) and value:
            self.document(value, path)
        else:
            self._leaf(path, value)

    def _leaf(self, path: str, value: Any) -> None:
        if self.paths.indexed(path):
            self.leaves.append((path, value))


def leaves(ix: IndexInfo, doc: Mapping[str, Any]) -> tuple[list[tuple[str, Any]], bool]:
    """The (path, value) pairs a document gives a wildcard index, and whether it is multikey."""
    walk = _Walk(paths_of(ix))
    walk.document(doc, "")
    return walk.leaves, walk.multikey


def bodies(ix: IndexInfo, doc: dict[str, Any], plain: PlainBodies) -> Bodies:
    found, multikey = leaves(ix, doc)
    directions = (1, ix.directions[0])
    out: dict[bytes, dict[str, Any]] = {}
    for path, value in found:
        body = keys.encode_compound((path, value), directions)
        out.setdefault(body, {PATH_FIELD: path, path: value})
    return list(out.items()), multikey


# -- planning ----------------------------------------------------------------------------------------


def covers(ix: IndexInfo, path: str) -> bool:
    """Whether a query on `path` may read this index: the path is one the index holds, and names
    no array position (those the planner leaves to a collection scan)."""
    parts = path.split(".")
    if any(p.isdigit() or p.startswith("$") or not p for p in parts):
        return False
    return paths_of(ix).indexed(path)


def path_index(ix: IndexInfo, path: str) -> IndexInfo:
    """The index as the planner reads it for one path: keys `{$_path: 1, <path>: ±1}` (what
    explain shows as its keyPattern), the same id, entries and flags."""
    direction = ix.key[0][1]
    return IndexInfo(
        ix.id,
        ix.name,
        ((PATH_FIELD, 1), (path, direction)),
        ix.options,
        ix.multikey,
        ix.long_keys,
    )


def _lookup_value(v: Any) -> bool:
    """Values a wildcard index can look up: not null (a missing path has no entry), nor a whole
    document or array (their leaves are indexed, not they)."""
    return v is not None and not isinstance(v, (Mapping, list))


def candidate(
    ix: IndexInfo, bounds: Bounds, sort: SortSpec | None, plain: PlainCandidate
) -> Candidate | None:
    """A wildcard index read for the one bounded path it serves best, as `{$_path: 1, path: 1}`
    (the path is a point, not a field of the query: it does not count)."""
    best: Candidate | None = None
    for path, fb in bounds.items():
        if not covers(ix, path):
            continue
        usable = FieldBounds(
            [ps for ps in fb.point_sets if all(_lookup_value(v) for v in ps)],
            [(op, v) for op, v in fb.ranges if _lookup_value(v)],
        )
        if not usable.point_sets and not usable.ranges:
            continue
        view = path_index(ix, path)
        found = plain(view, {PATH_FIELD: FieldBounds([[path]]), path: usable}, sort)
        if found is None:
            continue
        scan, points, ranged = found
        if best is None or (points, ranged) > (best[1] + 1, best[2]):
            best = (scan, points - 1, ranged)
    return best


# Hinted, a wildcard index with no usable bounds is refused: it holds no entry for a document
# without the path, so it cannot be read whole in place of the collection.
register(
    IndexKind(
        WILDCARD,
        check,
        bodies,
        OPTIONS,
        planning=Planning(candidate=candidate, needs_bounds=True),
    )
)
