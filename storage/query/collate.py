"""A parsed filter under a collation (storage/core/collation.py): its comparisons made on the
collation's sort keys, in the one parsed tree the matcher, the planner and upsert seeding read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ebbdb.storage.core.collation import Collation, has_string
from ebbdb.storage.query.match import (
    elem_match_object_test,
    elem_match_value_test,
    element_test,
    node_predicate,
)
from ebbdb.storage.query.match_leaves import (
    eq_test,
    in_test,
    is_regex,
    range_test,
    regex_source,
    regex_test,
)
from ebbdb.storage.query.match_tree import (
    All,
    And,
    Compare,
    ElemMatchObject,
    ElemMatchValue,
    In,
    Node,
    Nor,
    Not,
    Or,
    ParsedFilter,
)


def collate_filter(
    parsed: ParsedFilter, c: Collation, variables: Mapping[str, Any] | None = None
) -> ParsedFilter:
    """The filter with its comparisons ($eq, ranges, $ne, $in, $nin, $all's values, inside
    $elemMatch too) made under the collation; the tree keeps the values as written (for upsert
    seeding and the planner, which collates bounds itself). Regular expressions, $type, $exists
    and the rest do not compare strings, and stay as they are."""
    tree = _collate(parsed.tree, c)
    if tree is parsed.tree:
        return parsed
    return ParsedFilter(parsed.filter, tree, node_predicate(tree, variables))


def _collate(node: Node, c: Collation) -> Node:
    collate = c.collate
    if isinstance(node, Compare):
        if not has_string(node.value):
            return node  # a value without strings compares the same under any collation
        q = collate(node.value)
        base = eq_test(q) if node.op == "$eq" else range_test(q, node.op)
        return replace(node, test=lambda v: base(collate(v)))
    if isinstance(node, In):
        if not any(has_string(v) for v in node.values):
            return node
        plain = in_test([collate(v) for v in node.values if not is_regex(v)])
        regexes = [regex_test(*regex_source(v)) for v in node.values if is_regex(v)]

        def in_values(v: Any) -> bool:
            return plain(collate(v)) or any(r(v) for r in regexes)

        return replace(node, test=in_values)
    if isinstance(node, Not):
        child = _collate(node.child, c)
        return node if child is node.child else Not(child)
    if isinstance(node, (And, Or, Nor, All)):
        children = tuple(_collate(ch, c) for ch in node.children)
        if all(a is b for a, b in zip(children, node.children)):
            return node
        return replace(node, children=children)
    if isinstance(node, (ElemMatchValue, ElemMatchObject)):
        inner = _collate(node.child, c)
        if inner is node.child:
            return node
        if isinstance(node, ElemMatchValue):
            return replace(node, test=elem_match_value_test(element_test(inner)), child=inner)
        return replace(node, test=elem_match_object_test(node_predicate(inner)), child=inner)
    return node
