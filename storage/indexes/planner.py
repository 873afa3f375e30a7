"""The query planner: turns a parsed filter, a sort and a hint into a plan over the collection's
indexes, reading the bounds off the matcher's tree (storage/query/match_tree.py).

An index only narrows the candidates: every plan's documents still pass through the matcher, so a
bound here may be wider than the filter (never narrower). Plans are chosen by a fixed preference
(a unique point lookup, then the most equality-bound leading fields, a range, a sort it delivers),
not by racing candidates as MongoDB does.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import bson
from bson import Decimal128, Int64, MaxKey, MinKey, ObjectId
from bson.binary import Binary

from ebbdb.storage.catalog.clustered import is_clustered
from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.core.collation import Collation, has_string
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import render
from ebbdb.storage.expiry.ttl import is_cosmos_index
from ebbdb.storage.indexes import keys
from ebbdb.storage.indexes.index_kinds.registry import kind_named, query_planners
from ebbdb.storage.indexes.plans import (
    Bounds,
    Candidate,
    CollScan,
    FieldBounds,
    IndexScan,
    Interval,
    Near,
    Plan,
    Planning,
)
from ebbdb.storage.query.compare import RANK_MAXKEY, RANK_MINKEY, compare, is_nan, rank
from ebbdb.storage.query.match_tree import Compare, In, Node, ParsedFilter, condition, conjuncts
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.sort import SortSpec

#: Beyond this many point combinations a compound index uses fewer leading fields.
MAX_INTERVALS = 4096


# -- what the filter says about each field ---------------------------------------------------------


@dataclass
class _Range:
    lo: Any = None
    lo_incl: bool = True
    hi: Any = None
    hi_incl: bool = True
    has_lo: bool = False
    has_hi: bool = False


def _boundable(v: Any) -> bool:
    """Values an index can look up exactly (arrays and regexes need the matcher's rules)."""
    if isinstance(v, (list, bson.Regex)) or type(v).__name__ == "Pattern":
        return False
    if isinstance(v, Mapping) and any(str(k).startswith("$") for k in v):
        return False
    return not is_nan(v) and rank(v) not in (RANK_MINKEY, RANK_MAXKEY)


def _collect(node: Node, out: dict[str, FieldBounds]) -> None:
    """The bounds the filter's conjuncts put on each path: equalities, `$in` and ranges (not
    what sits under $or, $nor, $not, $all or $elemMatch)."""
    for c in conjuncts(node):
        if isinstance(c, Compare):
            fb = out.setdefault(c.path, FieldBounds())
            if c.op == "$eq":
                if _boundable(c.value):
                    fb.point_sets.append([c.value])
            elif _boundable(c.value) and c.value is not None:
                fb.ranges.append((c.op, c.value))
        elif isinstance(c, In) and all(_boundable(v) for v in c.values):
            out.setdefault(c.path, FieldBounds()).point_sets.append(list(c.values))


# -- bounds as byte intervals ----------------------------------------------------------------------


def _enc(v: Any, direction: int) -> bytes:
    return keys.encode(v) if direction > 0 else keys.encode_descending(v)


def _bracket(v: Any, direction: int) -> tuple[bytes, bytes]:
    tb = keys.type_byte(v)
    if direction < 0:
        tb = 0xFF - tb
    return bytes((tb,)), bytes((tb + 1,))


def _component_ranges(
    fb: FieldBounds, direction: int, multikey: bool
) -> tuple[list[tuple[bytes, bytes | None]], str] | None:
    """Byte ranges for one index field (lo inclusive, hi exclusive), and their description; None
    when the filter does not bound this field."""
    points = fb.points(multikey)
    if points is not None:
        encoded = sorted({_enc(p, direction) for p in points})
        desc = ", ".join(f"[{render(p)}, {render(p)}]" for p in points)
        return [(e, keys.successor(e)) for e in encoded], desc
    if not fb.ranges:
        return None
    # One type bracket: the first range's. On a multikey index two predicates may be satisfied by
    # different elements, so only the first is used there.
    preds = (
        fb.ranges[:1] if multikey else [r for r in fb.ranges if rank(r[1]) == rank(fb.ranges[0][1])]
    )
    rg = _Range()
    for op, q in preds:
        if op in ("$gt", "$gte"):
            if not rg.has_lo or compare(q, rg.lo) > 0 or (compare(q, rg.lo) == 0 and op == "$gt"):
                rg.lo, rg.lo_incl, rg.has_lo = q, op == "$gte", True
        else:
            if not rg.has_hi or compare(q, rg.hi) < 0 or (compare(q, rg.hi) == 0 and op == "$lt"):
                rg.hi, rg.hi_incl, rg.has_hi = q, op == "$lte", True
    sample = preds[0][1]
    start, end = _bracket(sample, direction)
    lo_val, hi_val = (rg.lo, rg.hi) if direction > 0 else (rg.hi, rg.lo)
    has_lo, has_hi = (rg.has_lo, rg.has_hi) if direction > 0 else (rg.has_hi, rg.has_lo)
    lo_incl, hi_incl = (rg.lo_incl, rg.hi_incl) if direction > 0 else (rg.hi_incl, rg.lo_incl)
    if has_lo:
        e = _enc(lo_val, direction)
        lo = e if lo_incl else (keys.successor(e) or e)
    else:
        lo = start
    hi: bytes | None
    if has_hi:
        e = _enc(hi_val, direction)
        hi = keys.successor(e) if hi_incl else e
    else:
        hi = end
    left = ("[" if rg.lo_incl else "(") + (render(rg.lo) if rg.has_lo else _edge(sample, low=True))
    right = (render(rg.hi) if rg.has_hi else _edge(sample, low=False)) + (
        "]" if rg.hi_incl else ")"
    )
    return [(lo, hi)], f"{left}, {right}"


def _edge(sample: Any, low: bool) -> str:
    r = rank(sample)
    if r == 10:
        return "-inf.0" if low else "inf.0"
    return "MinKey" if low else "MaxKey"


def _clip(b: bytes, upper: bool) -> bytes | None:
    """Widen a bound so index entries whose keys were shortened still fall inside it."""
    if len(b) <= keys.BODY_KEEP:
        return b
    cut = b[: keys.BODY_KEEP]
    return keys.successor(cut) if upper else cut


def _intervals(
    index: IndexInfo, bounds: dict[str, FieldBounds]
) -> tuple[tuple[Interval, ...], int, bool, dict[str, list[str]]] | None:
    """Intervals over the index for the filter's bounds: (intervals, number of leading fields
    bound to points, whether a range bounds the next field, explain bounds). None when the
    filter does not bound the index's first field."""
    prefixes: list[bytes] = [b""]
    points = 0
    ranged = False
    shown: dict[str, list[str]] = {}
    result: list[tuple[bytes, bytes | None]] | None = None
    for (path, _), direction in zip(index.key, index.directions):
        fb = bounds.get(path)
        comp = _component_ranges(fb, direction, index.multikey) if fb is not None else None
        if comp is None:
            break
        ranges, desc = comp
        shown[path] = [desc]
        if fb is not None and fb.point_sets:
            if len(prefixes) * len(ranges) > MAX_INTERVALS:
                break
            prefixes = [p + lo for p in prefixes for lo, _ in ranges]
            points += 1
            continue
        result = [
            (p + lo, (p + hi) if hi is not None else keys.successor(p))
            for p in prefixes
            for lo, hi in ranges
        ]
        ranged = True
        break
    if points == 0 and not ranged:
        return None
    if result is None:
        result = [(p, keys.successor(p)) for p in prefixes]
    for path, _ in index.key:
        shown.setdefault(path, ["[MinKey, MaxKey]"])
    clipped = []
    for lo, hi in sorted(result, key=lambda r: r[0]):
        clo = _clip(lo, upper=False) or lo
        chi = _clip(hi, upper=True) if hi is not None else None
        clipped.append(Interval(clo, chi))
    return _merge(clipped), points, ranged, shown


def _merge(intervals: list[Interval]) -> tuple[Interval, ...]:
    out: list[Interval] = []
    for iv in intervals:
        if out and (out[-1].hi is None or iv.lo <= out[-1].hi):
            last = out[-1]
            hi = None if last.hi is None or iv.hi is None else max(last.hi, iv.hi)
            out[-1] = Interval(last.lo, hi)
        else:
            out.append(iv)
    return tuple(out)


# -- choosing ---------------------------------------------------------------------------------------


def _sort_direction(index: IndexInfo, points: int, sort: SortSpec | None) -> bool | None:
    """Whether scanning this index (skipping `points` equality-bound leading fields) delivers the
    sort: None if not, else whether the scan must run in reverse."""
    if sort is None or not sort.keys or index.multikey or index.long_keys:
        return None
    rest = list(zip(index.key, index.directions))[points:]
    if len(sort.keys) > len(rest):
        return None
    flips = set()
    for (parts, d), ((path, kind), idir) in zip(sort.keys, rest):
        if ".".join(parts) != path or isinstance(kind, str):
            return None  # not this field, or a hashed one (in hash order)
        flips.add(d != idir)
    if len(flips) != 1:
        return None
    return flips.pop()


def _partial_implied(index: IndexInfo, parsed: ParsedFilter) -> bool:
    """Whether the filter implies the index's partial filter, read as written: each of the partial
    filter's conditions is one of the filter's top-level conditions, verbatim (MongoDB proves
    more; this is the sure part of it)."""
    pfe = index.partial_filter
    if pfe is None:
        return True
    flt = parsed.filter
    return all(k in flt and compare(flt[k], v) == 0 for k, v in pfe.items())


def find_hinted(coll: CollectionInfo, hint: Any) -> IndexInfo | None | str:
    """The index a hint names; "natural" for {$natural: ±1}. Raises BadValue for no such index."""
    if isinstance(hint, Mapping) and "$natural" in hint:
        return "natural"
    for ix in coll.indexes:
        if ix.hidden or is_cosmos_index(ix):
            continue  # a Cosmos `_ts` TTL index holds no entries a query could read
        if isinstance(hint, str) and ix.name == hint:
            return ix
        if (
            isinstance(hint, Mapping)
            and len(hint) == len(ix.key)
            and all(
                f == hf and compare(d, hd) == 0 for (f, d), (hf, hd) in zip(ix.key, hint.items())
            )
        ):
            return ix
    raise QueryError("BadValue", "hint provided does not correspond to an existing index")


#: `_id` values whose equality is one key of the `_id` index (arrays, documents, regular
#: expressions and null match in other ways, so they go through the planner).
_POINT_TYPES = (int, float, str, bytes, ObjectId, Int64, datetime.datetime, Binary, Decimal128)
_POINT_TYPE_SET = frozenset(_POINT_TYPES)  # the same types exactly, without isinstance's walk


def id_point(query: ParsedFilter) -> Any:
    """The `_id` value a filter pins by plain equality (at most one document), else MISSING: its
    top-level `_id` condition, `{_id: v}` or `{_id: {$eq: v}}`, parsed to one equality."""
    node = condition(query, "_id")
    if type(node) is not Compare or node.op != "$eq":
        return MISSING
    value = node.value
    if type(value) in _POINT_TYPE_SET or isinstance(value, _POINT_TYPES):
        return value
    return MISSING


def id_hack(
    coll: CollectionInfo,
    query: ParsedFilter,
    sort: SortSpec | None,
    hint: Any,
    collation: Collation | None,
) -> IndexScan | None:
    """MongoDB's IDHACK: a filter pinning `_id` by equality (as id_point reads it), without a
    hint or a $natural sort, reads one key of the `_id` index, with no planning; None when it
    does not apply (or the `_id` index's collation orders the value otherwise)."""
    if not (hint is None or hint == {} or hint == ""):
        return None
    if sort is not None and sort.natural and not sort.keys:
        return None
    key = id_key(coll, query, collation)
    return None if key is MISSING else _id_lookup(coll, key, sort)


def id_key(coll: CollectionInfo, query: ParsedFilter, collation: Collation | None) -> Any:
    """The one key of the `_id` index that a filter pinning `_id` by equality can match, under
    the query's collation (the `_id` index holds its own collation's keys); MISSING when the
    filter pins no `_id`, or the index's collation orders the value otherwise (a string under
    another collation)."""
    point = id_point(query)
    id_index = coll.index_named("_id_")
    if point is MISSING or id_index is None or not id_index.unique:
        return MISSING  # no `_id` index (the oplog's), or one of shared `_id`s (a time series')
    id_collation = id_index.collation
    if id_collation is collation or id_collation == collation:
        return point if collation is None else collation.collate(point)
    return MISSING if has_string(point) else point


def _id_lookup(coll: CollectionInfo, value: Any, sort: SortSpec | None) -> IndexScan:
    """One key of the `_id` index. At most one document matches, so any sort is already
    satisfied."""
    e = keys.encode(value)
    hi = keys.successor(e)
    interval = Interval(_clip(e, upper=False) or e, _clip(hi, upper=True) if hi else None)
    shown = render(value)
    return IndexScan(
        coll.id_index,
        (interval,),
        False,
        sort is not None and bool(sort.keys),
        {"_id": [f"[{shown}, {shown}]"]},
        e,
    )


def _collated_bounds(bounds: dict[str, FieldBounds], c: Collation) -> dict[str, FieldBounds]:
    """The bounds on an index with the query's collation: its keys hold the strings' sort keys."""
    return {
        path: FieldBounds(
            [[c.collate(v) for v in points] for points in fb.point_sets],
            [(op, c.collate(v)) for op, v in fb.ranges],
        )
        for path, fb in bounds.items()
    }


def _without_strings(bounds: dict[str, FieldBounds]) -> dict[str, FieldBounds]:
    """The bounds an index with another collation than the query's can take: only those of
    fields bounded without strings (strings are ordered differently there)."""
    return {
        path: fb
        for path, fb in bounds.items()
        if not any(has_string(v) for points in fb.point_sets for v in points)
        and not any(has_string(v) for _, v in fb.ranges)
    }


def plan_query(
    coll: CollectionInfo,
    query: ParsedFilter,
    sort: SortSpec | None = None,
    hint: Any = None,
    collation: Collation | None = None,
    min_key: Mapping[str, Any] | None = None,
    max_key: Mapping[str, Any] | None = None,
) -> Plan:
    """Choose how to read the candidates for a parsed filter under a collation (None: the simple
    one). An index with another collation than the query's takes no bounds on strings and
    delivers no sort. `min_key`/`max_key` are find's `min` and `max`: the hinted index's scan
    from the one (inclusive) to the other (exclusive). Raises QueryError for a bad hint, min or
    max."""
    if min_key or max_key:
        return _min_max_scan(coll, hint, min_key or {}, max_key or {}, sort, collation)
    plan = _plan_query(coll, query, sort, hint, collation)
    if isinstance(plan, CollScan) and is_clustered(coll):
        # A clustered collection's natural order is its `_id` order: its scan is the `_id`
        # index's, whole (records themselves stay keyed by insertion).
        return IndexScan(
            coll.id_index,
            (Interval(b"", None),),
            plan.reverse,
            False,
            {"_id": ["[MinKey, MaxKey]"]},
        )
    return plan


def _min_max_scan(
    coll: CollectionInfo,
    hint: Any,
    low: Mapping[str, Any],
    high: Mapping[str, Any],
    sort: SortSpec | None,
    collation: Collation | None,
) -> IndexScan:
    """find's `min` and `max` as MongoDB 7.0 plans them: only over the hinted index, whose key
    pattern both must name (fields in order), min before max in the index's order."""
    if low and high and list(low) != list(high):
        raise QueryError("Location51176", "min and max must have the same field names")
    if hint is None or hint == {} or hint == "":
        raise QueryError(
            "Location51173", "When using min()/max() a hint of which index to use must be provided"
        )
    hinted = find_hinted(coll, hint)
    if hinted == "natural":
        raise QueryError("NoQueryExecutionPlans", "min and max are incompatible with $natural")
    assert isinstance(hinted, IndexInfo)
    for bound in (low, high):
        # Strings in the bounds compare as the index orders them only under its own collation.
        if bound and (
            list(bound) != list(hinted.fields)
            or (hinted.collation != collation and any(has_string(v) for v in bound.values()))
        ):
            raise QueryError("Location51174", "The index chosen is not compatible with min/max")
    lo, hi = _bound_key(hinted, low, True), _bound_key(hinted, high, False)
    if lo >= hi:
        raise QueryError(
            "Location51175",
            "The value provided for min() does not come before the value provided for max() in "
            "the hinted index",
        )
    reverse = _sort_direction(hinted, 0, sort)
    shown = {
        path: [f"[{render(low.get(path, MinKey()))}, {render(high.get(path, MaxKey()))})"]
        for path in hinted.fields
    }
    interval = Interval(
        (_clip(lo, upper=False) or lo) if low else b"",
        _clip(hi, upper=True) if high else None,
    )
    return IndexScan(hinted, (interval,), bool(reverse), reverse is not None, shown)


def _bound_key(ix: IndexInfo, bound: Mapping[str, Any], low: bool) -> bytes:
    """A min or max as an index key body; an empty one is the index's first (last) key."""
    if bound:
        values = list(bound.values())
        if ix.collation is not None:
            values = [ix.collation.collate(v) for v in values]
    else:
        values = [MinKey() if (d > 0) == low else MaxKey() for d in ix.directions]
    return keys.encode_compound(tuple(values), ix.directions)


def _plan_query(
    coll: CollectionInfo,
    parsed: ParsedFilter,
    sort: SortSpec | None,
    hint: Any,
    collation: Collation | None,
) -> Plan:
    for planning in query_planners(parsed):
        assert planning.query is not None
        kind_plan = planning.query(coll, parsed, _readable(coll, parsed, hint))
        if kind_plan is not None:
            return kind_plan
    scan = id_hack(coll, parsed, sort, hint, collation)
    if scan is not None:
        return scan
    bounds: dict[str, FieldBounds] = {}
    _collect(parsed.tree, bounds)
    if collation is not None or any(ix.collation is not None for ix in coll.indexes):
        return _plan_collated(coll, parsed, sort, hint, collation, bounds)
    return _choose(coll, parsed, sort, hint, None, bounds)


def _readable(coll: CollectionInfo, parsed: ParsedFilter, hint: Any) -> list[IndexInfo]:
    """The indexes a kind's query planner may read: the hinted one, else every visible one whose
    partial filter the query implies (a partial index lacks the documents outside its filter)."""
    if hint is not None and hint != {} and hint != "":
        hinted = find_hinted(coll, hint)
        return [hinted] if isinstance(hinted, IndexInfo) else []
    return [ix for ix in coll.indexes if not ix.hidden and _partial_implied(ix, parsed)]


_PLAIN = Planning()


def _planning(ix: IndexInfo) -> Planning:
    """How the planner reads `ix`: its kind's hooks, or as ascending and descending keys."""
    kind = None if ix.kind is None else kind_named(ix.kind)
    return _PLAIN if kind is None or kind.planning is None else kind.planning


def _choose(
    coll: CollectionInfo,
    parsed: ParsedFilter,
    sort: SortSpec | None,
    hint: Any,
    offers: dict[int, tuple[dict[str, FieldBounds], SortSpec | None]] | None,
    bounds: dict[str, FieldBounds] | None = None,
) -> Plan:
    """The plan among the indexes: each takes `bounds` and the sort, or what `offers` gives it
    (by index id) when a collation is in play."""

    def offer(ix: IndexInfo) -> tuple[dict[str, FieldBounds], SortSpec | None]:
        if offers is None:
            assert bounds is not None
            return bounds, sort
        return offers[ix.id]

    natural_reverse = bool(sort and not sort.keys and sort.natural < 0)
    if hint is not None and hint != {} and hint != "":
        hinted = find_hinted(coll, hint)
        if hinted == "natural":
            assert isinstance(hint, Mapping)
            return CollScan(reverse=hint["$natural"] < 0)
        assert isinstance(hinted, IndexInfo)
        ix_bounds, ix_sort = offer(hinted)
        planning = _planning(hinted)
        if planning.opaque:
            # Its keys are not the values bounds and sorts name: the whole index, unsorted.
            ix_bounds, ix_sort = {}, None
        scan = _scan_for(hinted, ix_bounds, ix_sort)
        if scan is None and planning.needs_bounds:
            # It lacks entries for some documents: it cannot be read whole in place of the
            # collection.
            raise QueryError("NoQueryExecutionPlans", "No query solutions")
        return scan or IndexScan(
            hinted,
            (Interval(b"", None),),
            bool(_sort_direction(hinted, 0, ix_sort)),
            _sort_direction(hinted, 0, ix_sort) is not None,
            {p: ["[MinKey, MaxKey]"] for p in hinted.fields},
        )
    if sort is not None and sort.natural and not sort.keys:
        return CollScan(reverse=natural_reverse)
    best: tuple[tuple[int, ...], IndexScan] | None = None
    for order, ix in enumerate(coll.indexes):
        if ix.hidden or is_cosmos_index(ix) or not _partial_implied(ix, parsed):
            continue
        if not _planning(ix).chosen:
            continue  # its keys are not the fields' values (text terms, geo cells)
        candidate = _candidate(ix, *offer(ix))
        if candidate is None:
            continue
        scan, points, ranged = candidate
        if ix.unique and points == len(ix.key) and not ix.multikey:
            return scan  # a point lookup in a unique index: nothing can beat it
        # (A wildcard index's scan is of two keys, $_path and the path: an index on the path
        # alone wins a tie, by the length of the key.)
        score = (points, int(ranged), int(scan.provides_sort), -len(scan.index.key), -order)
        if best is None or score > best[0]:
            best = (score, scan)
    if best is None:
        return CollScan(reverse=natural_reverse)
    return best[1]


def _plan_collated(
    coll: CollectionInfo,
    parsed: ParsedFilter,
    sort: SortSpec | None,
    hint: Any,
    collation: Collation | None,
    bounds: dict[str, FieldBounds],
) -> Plan:
    """plan_query where a collation is in play: each index is offered the bounds and the sort
    its collation can serve, on a collection whose indexes are offered them as they suit it."""
    same = _collated_bounds(bounds, collation) if collation is not None else bounds
    other = _without_strings(bounds)
    offers = {
        ix.id: (same, sort) if ix.collation == collation else (other, None) for ix in coll.indexes
    }
    return _choose(coll, parsed, sort, hint, offers)


def _scan_for(
    ix: IndexInfo, bounds: dict[str, FieldBounds], sort: SortSpec | None
) -> IndexScan | None:
    candidate = _candidate(ix, bounds, sort)
    return None if candidate is None else candidate[0]


def _candidate(ix: IndexInfo, bounds: Bounds, sort: SortSpec | None) -> Candidate | None:
    """The scan of `ix` for these bounds, with how many leading fields are bound to points and
    whether a range bounds the next; None when the index does not help. A kind that reads bounds
    its own way (Planning.candidate) builds on the plain reading."""
    if ix.sparse and any(
        any(p is None for p in bounds[f].points(ix.multikey) or [])
        for f in ix.fields
        if f in bounds
    ):
        return None  # a sparse index has no entries for documents missing the field
    own = _planning(ix).candidate
    return (
        _plain_candidate(ix, bounds, sort)
        if own is None
        else own(ix, bounds, sort, _plain_candidate)
    )


def _plain_candidate(ix: IndexInfo, bounds: Bounds, sort: SortSpec | None) -> Candidate | None:
    """_candidate for an index whose keys are its fields' values."""
    found = _intervals(ix, bounds)
    if found is None:
        # No bounds: worth a full index scan only to deliver the sort (not for sparse or partial
        # indexes, which leave documents out).
        reverse = _sort_direction(ix, 0, sort)
        if reverse is None or ix.sparse or ix.partial_filter is not None:
            return None
        full = IndexScan(
            ix, (Interval(b"", None),), reverse, True, {p: ["[MinKey, MaxKey]"] for p in ix.fields}
        )
        return full, 0, False
    intervals, points, ranged, shown = found
    reverse = _sort_direction(ix, points, sort)
    if reverse is not None and len(intervals) > 1 and points:
        # Several point prefixes: entries come out grouped by prefix, not by the sort field.
        reverse = None
    return IndexScan(ix, intervals, bool(reverse), reverse is not None, shown), points, ranged


__all__ = [
    "id_hack",
    "id_key",
    "CollScan",
    "IndexScan",
    "Interval",
    "Near",
    "Plan",
    "find_hinted",
    "id_point",
    "plan_query",
]
