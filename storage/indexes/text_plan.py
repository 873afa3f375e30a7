"""Planning a `$text` query: find the collection's text index, bind it to the parsed `$text`
(which then matches and scores documents), and read the entries of the search's terms, under
the equalities a compound text index's leading fields need (MongoDB's TEXT_MATCH over TEXT_OR
over one index scan per term). MongoDB's errors for a `$text` no plan can serve."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ebbdb.storage.catalog.info import CollectionInfo, IndexInfo
from ebbdb.storage.core.collation import Collation, has_string
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import render
from ebbdb.storage.indexes import keys
from ebbdb.storage.indexes.index_kinds.text import spec_of, term_prefix
from ebbdb.storage.indexes.planner import CollScan, IndexScan, Interval, Plan, plan_query
from ebbdb.storage.query.match_leaves import is_regex
from ebbdb.storage.query.match_tree import Compare, In, Node, ParsedFilter, TextSite, conjuncts
from ebbdb.storage.query.sort import SortSpec
from ebbdb.storage.query.text_search import TextQuery


@dataclass(frozen=True)
class TextScan(IndexScan):
    """The entries of the search's terms in the text index (one interval per term); every
    document they give is matched and scored by the `$text` it serves."""

    query: TextQuery | None = None

    @property
    def stage(self) -> str:
        return "TEXT_MATCH"


def _no_plan(message: str) -> QueryError:
    return QueryError(
        "NoQueryExecutionPlans",
        f"error processing query: planner returned error :: caused by :: {message}",
    )


def text_index(coll: CollectionInfo) -> IndexInfo:
    """The collection's text index (MongoDB allows one); IndexNotFound without one."""
    for ix in coll.indexes:
        if ix.kind == "text":
            return ix
    raise QueryError("IndexNotFound", "text index required for $text query")


def plan_text(
    coll: CollectionInfo,
    parsed: ParsedFilter,
    sort: SortSpec | None,
    hint: Any,
    collation: Collation | None = None,
) -> Plan | None:
    """The plan of a filter holding a `$text` (None: it holds none). Binds the text index to
    the `$text`. Raises IndexNotFound without a text index, NoQueryExecutionPlans for a hint,
    for a compound text index without equalities on its leading fields (or with string ones
    under a query collation, `collation` not None), and for a `$text` in an `$or` whose other
    clauses no index serves."""
    site = parsed.text
    if site is None:
        return None
    ix = text_index(coll)
    spec = spec_of(ix)
    query = site.node.binding.bind(spec)
    if hint is not None and hint != {} and hint != "":
        raise _no_plan("hint provided with a $text query; $text always uses the text index")
    if sort is not None and sort.natural:
        raise _no_plan("$natural sort cannot be used with a $text query")
    if site.or_clauses is not None:
        _check_or(coll, site)
        return CollScan()
    prefix = _prefix_values(parsed.tree, spec.prefix)
    if prefix is not None and collation is not None and any(map(has_string, prefix)):
        # The index's prefix keys are the strings' bytes (a text index has no collation): they
        # cannot find what the query's collation calls equal.
        prefix = None
    if prefix is None:
        raise _no_plan(
            "failed to use text index to satisfy $text query (if text index is compound, are "
            "equality predicates given for all prefix fields?)"
        )
    intervals = set()
    for term in query.index_terms:
        start = term_prefix(ix, prefix, term)
        kept = start[: keys.BODY_KEEP]  # entries whose keys were shortened keep this much
        intervals.add(Interval(kept, keys.successor(kept)))
    bounds = {f: [f"[{render(v)}, {render(v)}]"] for f, v in zip(spec.prefix, prefix)}
    bounds["_fts"] = [f'["{t}", "{t}"]' for t in sorted(query.index_terms)]
    # Distinct terms' intervals never overlap (a string's key ends with its terminator); terms
    # alike in their first BODY_KEEP bytes share one.
    ordered = tuple(sorted(intervals, key=lambda iv: iv.lo))
    return TextScan(ix, ordered, bounds=bounds, query=query)


def _prefix_values(tree: Node, fields: tuple[str, ...]) -> tuple[Any, ...] | None:
    """The values the filter's top-level equalities give the index's leading fields (None: one
    has none). A one-value `$in` is an equality, as MongoDB rewrites it."""
    values = []
    for field in fields:
        value = next(
            (v for c in conjuncts(tree) if (v := _equality_on(c, field)) is not _NONE), _NONE
        )
        if value is _NONE:
            return None
        values.append(value)
    return tuple(values)


def _equality_on(node: Node, field: str) -> Any:
    """The scalar `node` sets `field` equal to, or _NONE."""
    if isinstance(node, Compare) and node.op == "$eq" and node.path == field:
        value = node.value
    elif isinstance(node, In) and node.path == field and len(node.values) == 1:
        value = node.values[0]
    else:
        return _NONE
    if isinstance(value, (list, dict)) or is_regex(value):
        return _NONE
    return value


_NONE = object()


def _check_or(coll: CollectionInfo, site: TextSite) -> None:
    """A `$text` under `$or` needs every other clause of that `$or` served by an index (MongoDB
    reads each clause by its index); the documents are then matched one by one here."""
    assert site.or_clauses is not None
    for i, clause in enumerate(site.or_clauses):
        if i != site.clause and isinstance(plan_query(coll, clause), CollScan):
            raise _no_plan(
                "Failed to produce a solution for TEXT under OR - other non-TEXT "
                "clauses under OR have to be indexed as well."
            )


def check_no_collection(query: ParsedFilter, ns: str) -> None:
    """A `$text` on a collection that does not exist: MongoDB's IndexNotFound (it looks for the
    text index when it parses the filter)."""
    if query.text is not None:
        raise QueryError(
            "IndexNotFound", f"text index required for $text query (no such collection '{ns}')"
        )


__all__ = ["TextScan", "check_no_collection", "plan_text", "text_index"]
