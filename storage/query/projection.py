"""Find projections as MongoDB 7.0 runs them: inclusion and exclusion of dotted and nested paths with
the `_id` rules, literal fields, and the find-only operators `$slice`, `$elemMatch` and positional `$`.

Parsing follows MongoDB's projection parser check for check, so a bad projection fails with the code
and message MongoDB gives; applying it follows the classic engine (output keeps the document's order).
"""

from __future__ import annotations

import copy
import decimal
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bson import Decimal128

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import DBREF_FIELDS, INT32_MAX, INT32_MIN, is_number, type_name
from ebbdb.storage.core.values import render as render_value
from ebbdb.storage.query.match import compile_filter, node_predicate
from ebbdb.storage.query.match_tree import (
    All,
    Compare,
    Leaf,
    Node,
    Or,
    ParsedFilter,
    Predicate,
    Regex,
    conjuncts,
)
from ebbdb.storage.query.metadata import TEXT_SCORE, check_keyword, text_score
from ebbdb.storage.query.paths import MISSING, split

# FieldPath accepts these `$` names (DBRef parts and metadata fields); any other `$` name is invalid.
_DOLLAR_FIELDS = DBREF_FIELDS | {"$sortKey", "$recordId", "$searchSortValues", "$searchScore"}

# An $elemMatch whose first key is one of these is a document match on each element; any other
# `$` key makes it a value match applied to the element itself ({$elemMatch: {$gt: 5}}).
_PATHLESS_OPERATORS = frozenset(
    "$and $or $nor $where $expr $jsonSchema $text $comment $alwaysTrue $alwaysFalse $sampleRate"
    " $id $ref $db".split()
)

_POSITIONAL_IN_MIDDLE = (
    "As of 4.4, it's illegal to specify positional operator in the middle of a path.Positional "
    "projection may only be used at the end, for example: a.b.$. If the query previously used a "
    "form like a.b.$.d, remove the parts following the '$' and the results will be equivalent."
)


# -- the projection tree ---------------------------------------------------------------------------


class _Flag:
    """A field included or excluded whole."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


INCLUDE = _Flag("INCLUDE")
EXCLUDE = _Flag("EXCLUDE")


@dataclass(frozen=True)
class _Literal:
    """A computed field with a constant value ({x: "hi"}, {x: {$literal: 1}})."""

    value: Any


@dataclass(frozen=True)
class _Slice:
    """Find's $slice: `limit` elements after `skip`; without `skip`, a negative limit counts from
    the end. A parsed skip comes with a positive limit."""

    skip: int | None
    limit: int


@dataclass(frozen=True)
class _ElemMatch:
    """Find's $elemMatch on a top-level field: the first element for which `test` holds."""

    test: Callable[[Any], bool]


class _Positional:
    """Find's positional `a.$`: the element of the first array on the path that the query matched."""

    __slots__ = ()


POSITIONAL = _Positional()


class _Node:
    """An inner path node: children in the order the projection named them. `computed` says
    whether the subtree holds a literal or $elemMatch field (computed after the included ones)."""

    __slots__ = ("children", "computed")

    def __init__(self) -> None:
        self.children: dict[str, Any] = {}
        self.computed = False


# One step of the positional key search: a query leaf's path and its compiled predicate.
KeyLeaf = tuple[tuple[str, ...], Predicate]


@dataclass(frozen=True)
class Projection:
    """A parsed find projection. `apply` never modifies the document it is given.

    Raises QueryError from `apply` only for a positional projection whose query matched no element
    of the projected array (Location51246, Location51247), as MongoDB does while executing."""

    inclusion: bool
    root: _Node
    # $slice and positional steps, applied to the projected document in the order of the tree.
    steps: tuple[tuple[tuple[str, ...], _Slice | _Positional], ...]
    key_leaves: tuple[KeyLeaf, ...]
    #: Top-level fields set to the document's `$meta` value (name, keyword), last.
    meta: tuple[tuple[str, str], ...] = ()

    @property
    def uses_text_score(self) -> bool:
        return any(kw == TEXT_SCORE for _, kw in self.meta)

    def apply(self, doc: dict[str, Any]) -> dict[str, Any]:
        if self.inclusion:
            out = _include_doc(doc, self.root, doc)
        else:
            out = _exclude_doc(doc, self.root, doc)
        for parts, step in self.steps:
            if isinstance(step, _Slice):
                out = _slice_path(out, parts, 0, step)
            else:
                out = _positional(out, parts, lambda: match_key(self.key_leaves, doc))
        for name, _keyword in self.meta:
            out[name] = text_score(doc)  # textScore, the one keyword with a value
        return out


# -- parsing ---------------------------------------------------------------------------------------


def parse_projection(
    spec: Mapping[str, Any] | None, filter: ParsedFilter | None = None
) -> Projection | None:
    """Parse a find projection; None (for None or {}) means "whole documents". `filter` is the
    query's parsed filter, whose tree a positional projection (`a.$`) reads. Raises QueryError with
    MongoDB's codeName and message for a malformed projection."""
    if not spec:
        return None
    return _Parser(filter).parse(spec)


def _error(code: int, message: str) -> QueryError:
    return QueryError(f"Location{code}", message)


class _SliceSyntaxError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(eq=False)
class _Parser:
    """MongoDB's ParseContext: the projection's type is decided by its first inclusion, exclusion
    or computed field; ambiguous ones (only _id, $slice, $elemMatch) are settled at the end."""

    filter: ParsedFilter | None
    root: _Node = field(default_factory=_Node)
    inclusion: bool | None = None
    id_specified: bool = False
    id_included: bool = False
    has_positional: bool = False
    has_elem_match: bool = False
    meta: list[tuple[str, str]] = field(default_factory=list)
    has_slice: bool = False
    # Raised once parsing succeeds: MongoDB finds it when it optimizes the parsed projection.
    deferred: QueryError | None = None

    def parse(self, spec: Mapping[str, Any]) -> Projection:
        for name, value in spec.items():
            if name == "_id" or name.startswith("_id."):
                self.id_specified = True
            self.parse_element(name, value, self.root)
        inclusion = self.inclusion
        if inclusion is None:
            if self.has_slice:
                # With a find $slice only an explicit {_id: 1} makes an inclusion projection.
                inclusion = self.id_included
            else:
                inclusion = self.has_elem_match or self.id_included
        if not self.id_specified and inclusion:
            _add(self.root, ("_id",), INCLUDE)
        # {_id: 1} in an exclusion projection stays in the tree as a field kept whole, which is what
        # an exclusion does with any field it does not name.
        if self.deferred is not None:
            raise self.deferred
        _mark_computed(self.root)
        steps: list[tuple[tuple[str, ...], _Slice | _Positional]] = []
        _collect_steps(self.root, (), steps)
        leaves: tuple[KeyLeaf, ...] = ()
        if self.has_positional and self.filter is not None:
            leaves = tuple(key_leaves(self.filter.tree))
        return Projection(inclusion, self.root, tuple(steps), leaves, tuple(self.meta))

    def parse_element(self, name: str, value: Any, parent: _Node) -> None:
        positional = name.endswith(".$")
        if ".$." in name:
            raise _error(31394, _POSITIONAL_IN_MIDDLE)
        if isinstance(value, Mapping):
            if positional:
                raise _error(
                    31271, "positional projection cannot be used with an expression or sub object"
                )
            self.sub_object(name, value, parent)
        elif _is_flag(value):
            if _truthy(value):
                self.inclusion_field(name, parent)
            else:
                if positional:
                    raise _error(31395, "positional projection cannot be used with exclusion")
                self.exclusion_field(name, parent)
        else:
            if positional:
                raise _error(31308, "positional projection cannot be used with a literal")
            self.literal_field(name, value, parent)

    def inclusion_field(self, name: str, parent: _Node) -> None:
        top_level_id = name == "_id" and parent is self.root
        if not name.endswith(".$"):
            _add(parent, field_path(name), INCLUDE)
            if top_level_id:
                self.id_included = True
        else:
            if self.has_positional:
                raise _error(31276, "Cannot specify more than one positional projection per query.")
            if self.has_elem_match:
                raise _error(31256, "Cannot specify positional operator and $elemMatch.")
            if self.filter is None:
                raise _error(51050, "Projections with a positional operator require a matcher")
            if name == ".$":
                raise _error(5392900, f"Projection on field {name} is invalid")
            _add(parent, field_path(name[:-2]), POSITIONAL)
            self.has_positional = True
        if not top_level_id:
            if self.inclusion is False:
                raise _error(31253, f"Cannot do inclusion on field {name} in exclusion projection")
            self.inclusion = True

    def exclusion_field(self, name: str, parent: _Node) -> None:
        _add(parent, field_path(name), EXCLUDE)
        if name == "_id" and parent is self.root:
            return
        if self.inclusion is True:
            raise _error(31254, f"Cannot do exclusion on field {name} in inclusion projection")
        self.inclusion = False

    def literal_field(self, name: str, value: Any, parent: _Node) -> None:
        path = field_path(name)
        _add(parent, path, _Literal(value))
        if self.inclusion is False:
            raise _error(
                31310,
                f"Cannot use an expression {name}: {render_value(value)} in an exclusion projection",
            )
        self.inclusion = True
        if not _is_constant(value):
            # A string starting with `$` is a field path ("$a", "$$ROOT"); arrays may hold them.
            raise QueryError(
                "NotImplemented",
                f"aggregation expressions in a projection are not supported yet: {render_value(value)}",
            )

    def sub_object(self, name: str, obj: Mapping[str, Any], parent: _Node) -> None:
        if not obj:
            raise _error(
                51270, "An empty sub-projection is not a valid value. Found empty object at path"
            )
        path = field_path(name)
        first = next(iter(obj))
        if len(obj) == 1 and first.startswith("$") and first not in _DOLLAR_FIELDS:
            self.expression(name, path, first, obj[first], parent)
            return
        node = _inner_at(parent, path)
        if node is None:
            node = _Node()
            _add(parent, path, node)
        for child_name, child_value in obj.items():
            self.parse_element(child_name, child_value, node)

    def expression(
        self, name: str, path: tuple[str, ...], op: str, arg: Any, parent: _Node
    ) -> None:
        if op == "$slice":
            try:
                step = _find_slice(arg)
            except _SliceSyntaxError as exc:
                self.expression_slice(path, arg, exc, parent)
                return
            _add(parent, path, step)
            self.has_slice = True
            return
        if op == "$elemMatch":
            if not isinstance(arg, Mapping):
                raise _error(
                    31274,
                    f"elemMatch: Invalid argument, object required, but got {type_name(arg)}",
                )
            if self.has_positional:
                raise _error(31255, "Cannot specify positional operator and $elemMatch.")
            if len(path) != 1 or parent is not self.root:
                raise _error(31275, "Cannot use $elemMatch projection on a nested field.")
            _add(parent, path, _ElemMatch(_elem_match_test(arg)))
            self.has_elem_match = True
            return
        if op == "$meta":
            keyword = check_keyword(arg)
            if len(path) != 1 or parent is not self.root:
                raise QueryError("NotImplemented", f"$meta on a nested field ({name})")
            self.meta.append((path[0], keyword))
            return
        # Any other operator is an aggregation expression, which makes a computed field.
        if self.inclusion is False:
            raise _error(31252, "Cannot use expression other than $meta in exclusion projection")
        if op == "$literal":
            _add(parent, path, _Literal(arg))
            self.inclusion = True
            return
        raise QueryError(
            "NotImplemented",
            f"aggregation expression {op} in a projection is not supported yet (field {name})",
        )

    def expression_slice(
        self, path: tuple[str, ...], arg: Any, find_error: _SliceSyntaxError, parent: _Node
    ) -> None:
        """A $slice that is not find's [skip, limit] is parsed as the aggregation $slice; when that
        fails too, MongoDB reports its error with find's reason as context."""
        context = (
            f"Invalid $slice syntax. The given syntax {render_value({'$slice': arg})} did not match the"
            f" find() syntax because :: Location{find_error.code}: {find_error.message} :: The"
            " given syntax did not match the expression $slice syntax. :: caused by :: "
        )
        if self.inclusion is False:
            raise _error(
                31252,
                context + "Cannot use expression other than $meta in exclusion projection",
            )
        self.inclusion = True
        operands = arg if isinstance(arg, list) else [arg]
        if not 2 <= len(operands) <= 3:
            raise _error(
                28667,
                context + "Expression $slice takes at least 2 arguments, and at most 3, but"
                f" {len(operands)} were passed in.",
            )
        _add(parent, path, _Literal(None))
        if all(_is_constant(v) for v in operands):
            # Constant operands are folded when the projection is optimized, so a [skip, limit]
            # with limit <= 0 fails here rather than per document.
            array, count = operands[0], operands[1]
            if array is None or count is None:
                return  # $slice of null is null
            if not isinstance(array, list):
                if self.deferred is None:
                    self.deferred = _error(
                        28724,
                        "First argument to $slice must be an array, but is of type: "
                        + type_name(array),
                    )
                return
        raise QueryError(
            "NotImplemented",
            "the aggregation expression $slice in a projection is not supported yet",
        )


def _is_flag(value: Any) -> bool:
    """Bools and numbers include or exclude; anything else (strings, null, arrays) is a literal."""
    return isinstance(value, (bool, int, float, Decimal128))


def _truthy(value: Any) -> bool:
    if isinstance(value, Decimal128):
        return not value.to_decimal().is_zero()
    return bool(value)


def field_path(
    name: str,
    fail: Callable[[int, str], QueryError] = _error,
    dollar_fields: frozenset[str] = _DOLLAR_FIELDS,
) -> tuple[str, ...]:
    """MongoDB's FieldPath validation, with its codes: the path's parts. `fail` builds the error
    (a caller may word it for its stage); `dollar_fields` are the `$` names a part may have."""
    if not name:
        raise fail(40352, "FieldPath cannot be constructed with empty string")
    if name.endswith("."):
        raise fail(40353, "FieldPath must not end with a '.'.")
    parts = tuple(name.split("."))
    for part in parts:
        if not part:
            raise fail(15998, "FieldPath field names may not be empty strings.")
        if part.startswith("$") and part not in dollar_fields:
            raise fail(
                16410,
                "FieldPath field names may not start with '$'. Consider using $getField or"
                " $setField.",
            )
    return parts


def _add(root: _Node, path: tuple[str, ...], entry: Any) -> None:
    """Place `entry` at `path`, creating inner nodes; a path named twice, or through a field that is
    already projected whole, is a collision."""
    node = root
    for i, part in enumerate(path):
        child = node.children.get(part)
        if i == len(path) - 1:
            if child is not None:
                raise _error(31250, f"Path collision at {'.'.join(path)}")
            node.children[part] = entry
            return
        if child is None:
            child = _Node()
            node.children[part] = child
        elif not isinstance(child, _Node):
            # MongoDB names the remaining portion as the path less its first field.
            raise _error(
                31249, f"Path collision at {'.'.join(path)} remaining portion {'.'.join(path[1:])}"
            )
        node = child


def _inner_at(root: _Node, path: tuple[str, ...]) -> _Node | None:
    node = root
    for part in path:
        child = node.children.get(part)
        if not isinstance(child, _Node):
            return None
        node = child
    return node


def _mark_computed(node: _Node) -> bool:
    computed = False
    for entry in node.children.values():
        if isinstance(entry, _Node):
            computed = _mark_computed(entry) or computed
        elif isinstance(entry, (_Literal, _ElemMatch)):
            computed = True
    node.computed = computed
    return computed


def _collect_steps(
    node: _Node, prefix: tuple[str, ...], out: list[tuple[tuple[str, ...], _Slice | _Positional]]
) -> None:
    for name, entry in node.children.items():
        if isinstance(entry, _Node):
            _collect_steps(entry, prefix + (name,), out)
        elif isinstance(entry, (_Slice, _Positional)):
            out.append((prefix + (name,), entry))


def _is_constant(value: Any) -> bool:
    """Whether a literal is a constant: no field paths ("$a") and no operator objects inside."""
    if isinstance(value, str):
        return not value.startswith("$")
    if isinstance(value, list):
        return all(_is_constant(v) for v in value)
    if isinstance(value, Mapping):
        return all(
            not k.startswith("$") and "." not in k and _is_constant(v) for k, v in value.items()
        )
    return True


# -- $slice ----------------------------------------------------------------------------------------


def _to_int32(value: Any) -> int:
    """BSONElement::safeNumberInt: truncate toward zero, clamp to int32, NaN is 0."""
    number = value.to_decimal() if isinstance(value, Decimal128) else value
    if isinstance(number, (float, decimal.Decimal)):
        if number.is_nan() if isinstance(number, decimal.Decimal) else math.isnan(number):
            return 0
        if number in (math.inf, -math.inf):
            return INT32_MAX if number > 0 else INT32_MIN
    return max(INT32_MIN, min(INT32_MAX, int(number)))


def _find_slice(arg: Any) -> _Slice:
    if is_number(arg):
        return _Slice(None, _to_int32(arg))
    if isinstance(arg, list):
        if len(arg) != 2:
            raise _SliceSyntaxError(31272, "$slice array argument should be of form [skip, limit]")
        skip, limit = arg
        if not is_number(skip):
            raise _SliceSyntaxError(
                31257, f"$slice expects the skip argument to be a number, got {type_name(skip)}"
            )
        if not is_number(limit):
            raise _SliceSyntaxError(
                31258, f"$slice expects the limit argument to be a number, got {type_name(limit)}"
            )
        count = _to_int32(limit)
        if count <= 0:
            raise _SliceSyntaxError(31259, f"$slice limit must be positive, got {count}")
        return _Slice(_to_int32(skip), count)
    raise _SliceSyntaxError(31273, "$slice only supports numbers and [skip, limit] arrays")


def _slice_list(array: list[Any], step: _Slice) -> list[Any]:
    n = len(array)
    if step.skip is None:
        if step.limit < 0:
            return array[max(0, n + step.limit) :]
        return array[: step.limit]
    start = max(0, n + step.skip) if step.skip < 0 else min(n, step.skip)
    return array[start : start + step.limit]


def _slice_path(
    doc: dict[str, Any], parts: tuple[str, ...], i: int, step: _Slice
) -> dict[str, Any]:
    """Slice the array at `parts`, descending through documents and through arrays of documents;
    other values on the way (nested arrays included) are left as they are."""
    name = parts[i]
    if name not in doc:
        return doc
    value = doc[name]
    last = i + 1 == len(parts)
    if isinstance(value, list):
        if last:
            value = _slice_list(value, step)
        else:
            value = [
                _slice_path(e, parts, i + 1, step) if isinstance(e, dict) else e for e in value
            ]
    elif isinstance(value, dict) and not last:
        value = _slice_path(value, parts, i + 1, step)
    else:
        return doc
    out = dict(doc)
    out[name] = value
    return out


# -- $elemMatch ------------------------------------------------------------------------------------


def _elem_match_test(cond: Mapping[str, Any]) -> Callable[[Any], bool]:
    """Whether one array element satisfies {$elemMatch: cond}, through the one matcher."""
    first = next(iter(cond), "")
    if first.startswith("$") and first not in _PATHLESS_OPERATORS:
        return _value_match_test(cond)
    doc_match = compile_filter(dict(cond))

    def test(e: Any) -> bool:
        if isinstance(e, dict):
            return doc_match(e)
        if isinstance(e, list):  # MongoDB matches an array element as the document {"0": ..., ...}
            return doc_match({str(i): v for i, v in enumerate(e)})
        return False

    return test


# Operators that judge an array element as a whole array; the others compare it as one value.
_WHOLE_ARRAY_OPERATORS = frozenset(("$size", "$elemMatch"))


def _value_match_test(cond: Mapping[str, Any]) -> Callable[[Any], bool]:
    """{$elemMatch: {$gt: 5}}: every operator applies to the element itself, as the value of a
    one-field document. The matcher would search an array value for a matching element, which
    MongoDB does not do here, so an element that is an array is wrapped in one more array for the
    operators that compare values ($gt 5 never matches [1, 10]); $size and $elemMatch see it bare."""
    tests: list[tuple[Predicate, bool]] = []
    compared: dict[str, Any] = {}
    for op, arg in cond.items():
        inner = arg if op == "$not" and isinstance(arg, Mapping) else {op: arg}
        if any(k in _WHOLE_ARRAY_OPERATORS for k in inner):
            tests.append((compile_filter({"v": {op: arg}}), False))
        else:
            compared[op] = arg  # $regex stays with its $options
    if compared:
        tests.append((compile_filter({"v": compared}), True))

    def test(e: Any) -> bool:
        wrapped = {"v": [e]} if isinstance(e, list) else {"v": e}
        return all(pred(wrapped if wrap else {"v": e}) for pred, wrap in tests)

    return test


def _elem_match(value: Any, entry: _ElemMatch) -> Any:
    if isinstance(value, list):
        for element in value:
            if entry.test(element):
                return [element]
    return MISSING


# -- positional $ ----------------------------------------------------------------------------------


def key_leaves(tree: Node) -> list[KeyLeaf]:
    """The query conditions that can record which array element matched, in the order MongoDB
    evaluates them; the last one that records an element wins. Negations ($ne, $nin, $not, $nor,
    {$exists: false}) record nothing, nor does an $or unless it is one clause or an $in in disguise;
    `$all` records as the And of its values it is."""
    leaves: list[KeyLeaf] = []
    for node in conjuncts(tree):
        if isinstance(node, All):
            leaves.extend(_key_leaf(child) for child in node.children if isinstance(child, Leaf))
        elif isinstance(node, Or):
            if len(node.children) == 1:
                leaves.extend(key_leaves(node.children[0]))
            else:
                path = _or_as_in(node)
                if path is not None:
                    leaves.append((split(path), node_predicate(node)))
        elif isinstance(node, Leaf) and not node.path.startswith("$"):
            leaves.append(_key_leaf(node))
    return leaves


def _key_leaf(node: Leaf) -> KeyLeaf:
    return split(node.path), node_predicate(node)


def _or_as_in(node: Or) -> str | None:
    """The path of an $or of equalities (or regexes) on one path, which MongoDB rewrites to $in
    before matching; None for any other $or."""
    paths = set()
    for clause in node.children:
        if isinstance(clause, Compare):
            if clause.op != "$eq" or _is_operator_doc(clause.value):
                return None
        elif not isinstance(clause, Regex):
            return None
        paths.add(clause.path)
    return paths.pop() if len(paths) == 1 else None


def _is_operator_doc(value: Any) -> bool:
    return isinstance(value, Mapping) and bool(value) and next(iter(value)).startswith("$")


def _first_array(doc: dict[str, Any], parts: tuple[str, ...]) -> tuple[int, list[Any]] | None:
    """The first array along `parts` and how many parts lead to it; None when the path ends, or
    meets a value that is not a document, before any array."""
    value: Any = doc
    for depth, part in enumerate(parts, 1):
        if not isinstance(value, dict):
            return None
        value = value.get(part, MISSING)
        if isinstance(value, list):
            return depth, value
    return None


def _with_value(doc: dict[str, Any], parts: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A copy of `doc` (copied only along `parts`) with `value` at `parts`."""
    out = dict(doc)
    if len(parts) == 1:
        out[parts[0]] = value
    else:
        out[parts[0]] = _with_value(out[parts[0]], parts[1:], value)
    return out


def match_key(leaves: tuple[KeyLeaf, ...], doc: dict[str, Any]) -> int | None:
    """MongoDB's elemMatchKey: the index of the element of the first array on a leaf's path through
    which that leaf matched (each element tried alone, in order); the last leaf that has one wins."""
    key = None
    for parts, pred in leaves:
        found = _first_array(doc, parts)
        if found is None:
            continue
        depth, array = found
        for i, element in enumerate(array):
            if pred(_with_value(doc, parts[:depth], [element])):
                key = i
                break
    return key


def _positional(
    doc: dict[str, Any], parts: tuple[str, ...], key: Callable[[], int | None]
) -> dict[str, Any]:
    """Keep only the matched element of the first array on `parts`; with no array on the path the
    document is left as it is."""
    found = _first_array(doc, parts)
    if found is None:
        return doc
    depth, array = found
    index = key()
    if index is None:
        raise _error(
            51246, "positional operator '.$' couldn't find a matching element in the array"
        )
    if index >= len(array):
        raise _error(51247, "positional operator '.$' element mismatch")
    return _with_value(doc, parts[:depth], [array[index]])


# -- applying --------------------------------------------------------------------------------------


def _include_doc(doc: dict[str, Any], node: _Node, root: dict[str, Any]) -> dict[str, Any]:
    """Included fields in the document's order, then computed fields in the projection's order."""
    out: dict[str, Any] = {}
    for name, value in doc.items():
        entry = node.children.get(name)
        if entry is None or entry is EXCLUDE or isinstance(entry, (_Literal, _ElemMatch)):
            continue
        if isinstance(entry, _Node):
            if isinstance(value, dict):
                out[name] = _include_doc(value, entry, root)
            elif isinstance(value, list):
                out[name] = _include_list(value, entry, root)
        else:  # included whole: INCLUDE, or a $slice / positional field applied afterwards
            out[name] = value
    if node.computed:
        _add_computed(out, node, root)
    return out


def _include_list(array: list[Any], node: _Node, root: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for element in array:
        if isinstance(element, dict):
            out.append(_include_doc(element, node, root))
        elif isinstance(element, list):
            out.append(_include_list(element, node, root))
        elif node.computed:
            # A scalar under a path with computed fields becomes a document of those fields.
            out.append(_computed_doc(node, root))
    return out


def _add_computed(out: dict[str, Any], node: _Node, root: dict[str, Any]) -> None:
    for name, entry in node.children.items():
        if isinstance(entry, _Literal):
            out[name] = copy.deepcopy(entry.value)
        elif isinstance(entry, _ElemMatch):
            # After the other included fields, as MongoDB 4.4+ returns it; absent when none match.
            found = _elem_match(root.get(name, MISSING), entry)
            if found is not MISSING:
                out[name] = found
        elif isinstance(entry, _Node) and entry.computed and name not in out:
            out[name] = _computed_doc(entry, root)


def _computed_doc(node: _Node, root: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    _add_computed(out, node, root)
    return out


def _exclude_doc(doc: dict[str, Any], node: _Node, root: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in doc.items():
        entry = node.children.get(name)
        if entry is EXCLUDE:
            continue
        out[name] = _exclude_value(value, entry) if isinstance(entry, _Node) else value
    for name, entry in node.children.items():
        if isinstance(entry, _ElemMatch):
            found = _elem_match(root.get(name, MISSING), entry)
            if found is MISSING:
                out.pop(name, None)
            else:
                out[name] = found  # replaced where the field was
    return out


def _exclude_value(value: Any, node: _Node) -> Any:
    if isinstance(value, dict):
        return _exclude_doc(value, node, value)
    if isinstance(value, list):
        return [_exclude_value(e, node) for e in value]
    return value


__all__ = ["Projection", "parse_projection", "render_value", "type_name"]
