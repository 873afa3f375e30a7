"""What a plan is, and how an index kind takes part in planning: the plan types (a scan of an
index's key intervals, a collection scan, a proximity order), the bounds a filter puts on a
field, and `Planning`, the hooks a kind registers with its IndexKind (storage/indexes/index_kinds)
so that the planner (storage/indexes/planner.py) reads any kind's index without naming the kind.
The planner and the kinds both import this module, when they load; neither imports the other.
The registry, which loads at start-up, does not."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ebbdb.storage.catalog.info import IndexInfo
from ebbdb.storage.query.compare import compare, rank

if TYPE_CHECKING:
    from ebbdb.storage.catalog.info import CollectionInfo
    from ebbdb.storage.query.match_tree import ParsedFilter
    from ebbdb.storage.query.sort import SortSpec


@dataclass(frozen=True)
class Interval:
    """Key bodies from `lo` (inclusive) to `hi` (exclusive; None: to the end of the index)."""

    lo: bytes
    hi: bytes | None


@dataclass(frozen=True)
class Near:
    """A proximity plan ($near, $nearSphere, $geoNear): its explain stage (GEO_NEAR_2DSPHERE,
    GEO_NEAR_2D) and a document's distance (None: out of the query's bounds, or no geometry).
    Results come out by ascending distance (a blocking sort on it, unless the query sorts)."""

    stage: str
    distance: Callable[[dict[str, Any]], float | None]


@dataclass(frozen=True)
class IndexScan:
    index: IndexInfo
    intervals: tuple[Interval, ...]
    reverse: bool = False
    provides_sort: bool = False
    bounds: dict[str, list[str]] = field(default_factory=dict)  # for explain
    #: IDHACK: the key body of the one entry a unique index can hold for this equality, read with
    #: one lookup instead of a range scan (None: scan the intervals).
    point: bytes | None = None
    near: Near | None = None

    @property
    def stage(self) -> str:
        return "IXSCAN" if self.near is None else self.near.stage


@dataclass(frozen=True)
class CollScan:
    reverse: bool = False

    @property
    def stage(self) -> str:
        return "COLLSCAN"


Plan = IndexScan | CollScan


@dataclass
class FieldBounds:
    """What a filter's conjuncts say about one field: equalities and `$in` lists, and ranges."""

    point_sets: list[list[Any]] = field(default_factory=list)  # one per equality / $in predicate
    ranges: list[tuple[str, Any]] = field(default_factory=list)  # ($gt|$gte|$lt|$lte, value)

    def points(self, multikey: bool) -> list[Any] | None:
        """The values the field must equal. On a multikey index each predicate may be met by a
        different element, so only the first predicate bounds it; otherwise they intersect."""
        if not self.point_sets:
            return None
        if multikey:
            return self.point_sets[0]
        out = self.point_sets[0]
        for other in self.point_sets[1:]:
            out = [x for x in out if any(compare(x, y) == 0 for y in other)]
        return [p for p in out if all(_satisfies(p, op, q) for op, q in self.ranges)]


def _satisfies(v: Any, op: str, q: Any) -> bool:
    if rank(v) != rank(q):
        return False
    c = compare(v, q)
    return {"$gt": c > 0, "$gte": c >= 0, "$lt": c < 0, "$lte": c <= 0}[op]


#: Field bounds by path.
Bounds = dict[str, FieldBounds]
#: A scan of one index for some bounds, with how many leading fields are bound to points and
#: whether a range bounds the next.
Candidate = tuple[IndexScan, int, bool]
#: The planner's own reading of an index for bounds and a sort (None: the index does not help).
PlainCandidate = Callable[[IndexInfo, Bounds, "SortSpec | None"], "Candidate | None"]


@dataclass(frozen=True)
class Planning:
    """How the planner reads the indexes of one kind (the defaults: as ascending and descending
    keys, whose keys are the fields' values)."""

    #: Plans a whole query before the plain planner does: (collection, parsed filter, the indexes
    #: it may read: the hinted one, else every visible one whose partial filter the query implies)
    #: -> a plan, or None to plan as usual. May raise (a $near with no geo index).
    query: Callable[[CollectionInfo, ParsedFilter, list[IndexInfo]], Plan | None] | None = None
    #: Reads bounds itself, given the plain reading to build on (hashed: equalities become their
    #: hashes; wildcard: one covered path at a time).
    candidate: Callable[[IndexInfo, Bounds, SortSpec | None, PlainCandidate], Candidate | None] | (
        None
    ) = None
    #: False: the planner never chooses it for plain bounds (its keys are not the fields' values:
    #: text terms, geo cells; only `query`, or a hint, reads it).
    chosen: bool = True
    #: Hinted, it is read whole and unsorted whatever the bounds (its keys are not the values that
    #: bounds and sorts name).
    opaque: bool = False
    #: Hinted, with no bounds it can use: refused (NoQueryExecutionPlans) rather than read whole,
    #: since it lacks entries for some documents (wildcard: those without the path).
    needs_bounds: bool = False


__all__ = [
    "Bounds",
    "Candidate",
    "CollScan",
    "FieldBounds",
    "IndexScan",
    "Interval",
    "Near",
    "Plan",
    "PlainCandidate",
    "Planning",
]
