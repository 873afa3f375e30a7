"""The parsed filter: MongoDB's MatchExpression tree as frozen dataclasses. The matcher builds it in
the same pass that compiles the predicate (match.parse_filter), under the query's collation; the
planner, upsert seeding, positional projection, pipeline pushdown, `$text` planning and a validator's
error details read it instead of the filter document."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import bson

if TYPE_CHECKING:  # the tree names them; importing it (as time series' checks do) loads neither
    from ebbdb.storage.core.collation import Collation
    from ebbdb.storage.query.text_search import TextArgs, TextBinding

#: A leaf's test of one value (MongoDB's matchesSingleElement).
Test = Callable[[Any], bool]
Predicate = Callable[[dict[str, Any]], bool]


@dataclass(frozen=True, slots=True)
class Annotation:
    """How a validator wrote one operator (MongoDB's ErrorAnnotation), kept on its node when the
    filter is parsed as a collection validator: the operator's name as written (`$ne`, `$nin` and
    `$not` included, which parse to a Not), the path it tests ("" for a pathless one) and the
    operator as MongoDB shows it in errInfo's `specifiedAs` ({path: {op: arg}}, {path: value})."""

    operator: str
    path: str
    specified: Mapping[str, Any]


# -- logical nodes ----------------------------------------------------------------------------------
#
# A filter document parses to the node of its one condition, or to an And of its conditions in
# order (an empty one, which always holds, for none); `$comment` parses to nothing. A field's
# operators do the same: `{a: {$gt: 1, $lt: 5}}` is And(Compare, Compare).
#
# Every node has an `annotation`, None unless the filter was parsed as a validator (keyword-only,
# so that a leaf's own fields still follow `path` and `test` positionally).


@dataclass(frozen=True, slots=True)
class And:
    """Every child holds: a filter document, `$and`, a field's several operators."""

    children: tuple[Node, ...]
    annotation: Annotation | None = field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Or:
    """`$or`: some child holds (a one-clause `$or` stays an Or)."""

    children: tuple[Node, ...]
    annotation: Annotation | None = field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Nor:
    """`$nor`: no child holds."""

    children: tuple[Node, ...]
    annotation: Annotation | None = field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Not:
    """The child does not hold: `$not`, and `$ne`, `$nin` and `{$exists: false}`, which MongoDB
    parses as the negation of `$eq`, `$in` and `$exists`."""

    child: Node
    annotation: Annotation | None = field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Always:
    """A constant: `$alwaysTrue`, `$alwaysFalse`, and `{$all: []}` (matches nothing), which keeps
    the path of the field it was written on."""

    value: bool
    path: str = ""
    annotation: Annotation | None = field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Expr:
    """`{$expr: spec}`: the aggregation expression as written (what it sees as `$$name` is given
    when the filter is compiled, so the tree does not depend on it)."""

    spec: Any
    annotation: Annotation | None = field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class JsonSchema:
    """`{$jsonSchema: schema}`: the schema as written, and parsed (storage/query/json_schema.py's
    Schema, which matches a document and details why one fails)."""

    schema: Any
    parsed: Any = field(default=None, compare=False, repr=False)
    annotation: Annotation | None = field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Text:
    """`{$text: {...}}` (top level, or in `$and`/`$or`): its checked arguments, and the binding
    the planner gives the collection's text index (what matching and scoring read)."""

    args: TextArgs
    binding: TextBinding = field(compare=False, repr=False)
    annotation: Annotation | None = field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Where:
    """`{$where: code}`: the JavaScript as written, and its predicate (storage/query/
    javascript_operators.py), which runs it on each document."""

    code: Any
    predicate: Callable[[Mapping[str, Any]], bool] = field(compare=False, repr=False)
    annotation: Annotation | None = field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class All:
    """`$all` on a field: an And of its values' equalities (Compare), regexes (Regex) or
    `$elemMatch` nodes. Kept apart from a plain And because the planner does not bound it."""

    path: str
    children: tuple[Node, ...]
    annotation: Annotation | None = field(default=None, compare=False, repr=False, kw_only=True)


# -- leaves -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Leaf:
    """A test on the values at one path: `test` is the compiled test of one value (built from the
    operands that follow it; it takes no part in comparing nodes); `expand` says whether an array
    at the path also has its elements tested (MongoDB's array rule), which $size and $elemMatch,
    judging the array itself, do not."""

    expand: ClassVar[bool] = True
    path: str
    test: Test = field(compare=False, repr=False)
    annotation: Annotation | None = field(default=None, compare=False, repr=False, kw_only=True)


@dataclass(frozen=True, slots=True)
class Compare(Leaf):
    """`path op value` for $eq (a plain `{path: value}` too), $gt, $gte, $lt and $lte."""

    op: str
    value: Any


@dataclass(frozen=True, slots=True)
class In(Leaf):
    """`$in` (its values as written, regular expressions included)."""

    values: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Exists(Leaf):
    """`{$exists: true}` (false is Not(Exists))."""


@dataclass(frozen=True, slots=True)
class Type(Leaf):
    """`$type`: the BSON type codes it accepts ("number" stands for 1, 16, 18 and 19)."""

    codes: frozenset[int]


@dataclass(frozen=True, slots=True)
class Regex(Leaf):
    """A regular expression (`{path: /p/}`, `$regex` with `$options`); its option letters sorted."""

    pattern: str
    options: str


@dataclass(frozen=True, slots=True)
class ArrayLeaf(Leaf):
    """A test of the array at the path itself, never of its elements (MongoDB's
    ArrayMatchingMatchExpression): $size and $elemMatch."""

    expand: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class Size(ArrayLeaf):
    """`$size`: the value is an array of this length."""

    size: int


@dataclass(frozen=True, slots=True)
class ElemMatchValue(ArrayLeaf):
    """`{$elemMatch: {$gt: 1, ...}}`: one element passes every operator of `child` (a tree of
    leaves with the empty path, tested against the element itself)."""

    child: Node


@dataclass(frozen=True, slots=True)
class ElemMatchObject(ArrayLeaf):
    """`{$elemMatch: {b: 1, ...}}`: one element, as a document, matches the filter `child`."""

    child: Node


@dataclass(frozen=True, slots=True)
class Mod(Leaf):
    """`$mod`: divisor and remainder as 64-bit integers."""

    divisor: int
    remainder: int


@dataclass(frozen=True, slots=True)
class Bits(Leaf):
    """`$bitsAllSet`, `$bitsAllClear`, `$bitsAnySet`, `$bitsAnyClear` over bit positions."""

    op: str
    positions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Geo(Leaf):
    """`$geoWithin` (`$within`), `$geoIntersects`, `$near`, `$nearSphere`: the operator, its
    argument as written, and its parsed form (storage/geometry/geo.py: a Region, or a Near). A proximity
    leaf's test only asks for a geometry: the GEO_NEAR plan filters by distance and sorts."""

    op: str
    arg: Any
    query: Any = field(compare=False, repr=False)


Node = And | Or | Nor | Not | Always | Expr | JsonSchema | Text | Where | All | Leaf


@dataclass(frozen=True, slots=True)
class TextSite:
    """Where a filter's one `$text` sits, as the parse found it: its node and, when an `$or`
    holds it, that `$or`'s clauses (each parsed, as written) and the index of the one holding it
    (the planner reads the others through their indexes)."""

    node: Text
    or_clauses: tuple[ParsedFilter, ...] | None = None
    clause: int = -1


@dataclass(frozen=True, slots=True)
class ParsedFilter:
    """A filter parsed once: the document as written, its tree, and the compiled predicate (built
    in the same pass, with the `$$` variables the filter was parsed with); where its `$text` is,
    and the collation its comparisons were built under (None: the simple one)."""

    filter: Mapping[str, Any]
    tree: Node
    predicate: Predicate = field(compare=False, repr=False)
    text: TextSite | None = field(default=None, compare=False, repr=False)
    collation: Collation | None = None
    #: Whether a geo operator stands anywhere in it (the planner's cue for the geo kinds).
    geo: bool = field(default=False, compare=False, repr=False)


# -- reading the tree -------------------------------------------------------------------------------


def conjuncts(node: Node) -> Iterator[Node]:
    """The conditions that must all hold for `node` to hold, And nodes (documents, `$and`, a
    field's operators) opened all the way down; `$all` and one-clause `$or` are not opened."""
    if isinstance(node, And):
        for child in node.children:
            yield from conjuncts(child)
    else:
        yield node


def conditions(parsed: ParsedFilter) -> Iterator[tuple[str, Any, Node]]:
    """The filter's top-level conditions as written, each with its node: (key, value, node) in
    order, `$comment` left out (it parses to nothing). For a filter parsed as a query (a
    validator's tree opens its fields' operators into the document's conditions)."""
    entries = [(k, v) for k, v in parsed.filter.items() if k != "$comment"]
    if len(entries) == 1:
        yield entries[0][0], entries[0][1], parsed.tree
        return
    assert isinstance(parsed.tree, And) and len(parsed.tree.children) == len(entries)
    for (key, value), node in zip(entries, parsed.tree.children):
        yield key, value, node


def condition(parsed: ParsedFilter, key: str) -> Node | None:
    """The node of the filter's top-level condition written under `key` (None: there is none),
    as conditions() pairs them, without walking the others."""
    flt = parsed.filter
    if key not in flt or key == "$comment":
        return None
    if len(flt) == 1:
        return parsed.tree
    return next((node for k, _value, node in conditions(parsed) if k == key), None)


def path_of(node: Node) -> str | None:
    """The path a node of a field's operators tests: a leaf's or `$all`'s, through a Not (`$ne`,
    `$nin`, `$not`) and a field's And of operators (its first child that has one). None for a
    node that tests no field ($expr, $text, $jsonSchema, $alwaysTrue, ...)."""
    if isinstance(node, (Leaf, All)):
        return node.path
    if isinstance(node, Always):
        return node.path or None
    if isinstance(node, Not):
        return path_of(node.child)
    if isinstance(node, And):
        return next((p for p in map(path_of, node.children) if p is not None), None)
    return None


def uses_expr(node: Node) -> bool:
    """Whether the node holds an `$expr` (whose result depends on the variables)."""
    if isinstance(node, Expr):
        return True
    if isinstance(node, (And, Or, Nor)):
        return any(uses_expr(c) for c in node.children)
    if isinstance(node, Not):
        return uses_expr(node.child)
    return False  # $expr is refused below the top level ($elemMatch)


def text_nodes(node: Node) -> list[tuple[Text, bool]]:
    """The `$text` nodes of a tree, each with whether it sits under an Or (MongoDB parses
    `$text` only at the top level and in `$and`, `$or` and `$nor`)."""
    out: list[tuple[Text, bool]] = []

    def walk(n: Node, under_or: bool) -> None:
        if isinstance(n, Text):
            out.append((n, under_or))
        elif isinstance(n, And):
            for c in n.children:
                walk(c, under_or)
        elif isinstance(n, (Or, Nor)):
            for c in n.children:
                walk(c, True)

    walk(node, False)
    return out


def unbounded(node: Node) -> bool:
    """Whether testing a document against the node can take long: regular expressions (a match
    attempt may backtrack up to PCRE2's limit), `$expr` (any computation), `$text` and the geo
    operators (a geometry parsed and tested per document: tens of microseconds each), `$where`
    (JavaScript). Queries holding one match on a reader thread, not on the event loop."""
    if isinstance(node, (Expr, Regex, Text, Geo, Where)):
        return True  # a $text match tokenizes and stems the document's strings
    if isinstance(node, In):
        return any(isinstance(v, (bson.Regex, re.Pattern)) for v in node.values)
    if isinstance(node, (And, Or, Nor, All)):
        return any(unbounded(c) for c in node.children)
    if isinstance(node, (Not, ElemMatchValue, ElemMatchObject)):
        return unbounded(node.child)
    return False


__all__ = [
    "All",
    "Always",
    "And",
    "Annotation",
    "ArrayLeaf",
    "Bits",
    "Compare",
    "ElemMatchObject",
    "ElemMatchValue",
    "Exists",
    "Expr",
    "Geo",
    "In",
    "JsonSchema",
    "Leaf",
    "Mod",
    "Node",
    "Nor",
    "Not",
    "Or",
    "ParsedFilter",
    "Regex",
    "Size",
    "Test",
    "Text",
    "Where",
    "TextSite",
    "Type",
    "condition",
    "conditions",
    "conjuncts",
    "path_of",
    "text_nodes",
    "unbounded",
    "uses_expr",
]
