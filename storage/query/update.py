"""The update language as MongoDB 7.0 runs it: an update document (modifiers or a replacement) is
parsed once into a tree of paths, then applied to decoded documents; also the document an upsert
starts from (the query's equality fields).

The tree follows MongoDB's update nodes: one node per path component, children applied in field
order (so new fields are appended in that order), `$` and `$[<id>]` resolved per document. Errors
carry MongoDB's codes and messages, element rendering included ({_id: 1}, {a: [ 1, 2 ]}).
"""

from __future__ import annotations

import decimal
import functools
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bson import Binary, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS
from bson.decimal128 import create_decimal128_context

from storage.errors import InvalidIdField, QueryError
from storage.query.compare import compare, equal, regex_flags
from storage.query.match import Predicate, compile_filter
from storage.query.paths import MISSING, get, split

# MongoDB records which array element a query matched the same way for updates as for find
# projections; projection.py owns that logic and the update reuses it rather than copying it.
from storage.query.projection import key_leaves, match_key

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_DECIMAL = create_decimal128_context()
#: MongoDB's cap on the nulls it pads an array with when a path names an index past its end.
_MAX_PADDING = 1_500_000

_MODIFIERS = frozenset(
    "$addToSet $bit $currentDate $inc $max $min $mul $pop $pull $pullAll $push $rename $set"
    " $setOnInsert $unset".split()
)
# Operators a $pull condition may start with to be a condition on the element itself
# ({$gte: 5}); any other first key makes it a query on document elements ({b: 1}, {$and: ...}).
_VALUE_OPERATORS = frozenset(
    "$all $bitsAllClear $bitsAllSet $bitsAnyClear $bitsAnySet $elemMatch $eq $exists $geoIntersects"
    " $geoWithin $gt $gte $in $lt $lte $maxDistance $minDistance $mod $ne $near $nearSphere $nin"
    " $not $options $regex $size $type $within".split()
)
_IDENTIFIER = re.compile(r"[a-z][a-zA-Z0-9]*")
_POSITIONAL_NOT_FOUND = "The positional operator did not find the match needed from the query."
_DOLLAR_HINT = (
    "is not allowed in the context of an update's replacement document. Consider using an "
    "aggregation pipeline with $replaceWith."
)


# -- the public interface ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Update:
    """A parsed update: a replacement document or a tree of modifiers. Built by parse_update."""

    replacement: bool  # True for a replacement document (no $-operators)
    _document: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    _root: _ObjNode | None = field(default=None, repr=False, compare=False)
    _positional: bool = field(default=False, repr=False, compare=False)
    _filters: Mapping[str, Predicate] = field(default_factory=dict, repr=False, compare=False)
    # (query, its compiled positional conditions) for the query seen last: a multi-update calls
    # apply once per document with the same query. One tuple, so a reader never mixes two.
    _keys: list[tuple[Mapping[str, Any], Any]] = field(
        default_factory=list, repr=False, compare=False
    )

    def apply(
        self,
        doc: dict[str, Any],
        *,
        now_ms: int,
        inserting: bool = False,
        query: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Return the updated document (a new dict; `doc` untouched), `_id` first.
        `inserting` is True for the document an upsert inserts (then $setOnInsert applies);
        `query` is the filter that matched, which the positional `$` resolves against; `now_ms`
        is what $currentDate (and a replacement's empty timestamps) record.
        Raises QueryError (ImmutableField, PathNotViable, TypeMismatch, BadValue, ...) or
        InvalidIdField as MongoDB would for this document."""
        if self._document is not None:
            out = _replace(doc, self._document, now_ms)
        else:
            assert self._root is not None
            out = _copy(doc)
            matched = None
            if self._positional and query is not None and not inserting:
                matched = self._matched_index(query, doc)
            ctx = _Ctx(out, now_ms, inserting, matched, self._filters)
            _apply_obj(self._root, ctx, _At(out, None, None, [], []))
        if "_id" in out:
            if inserting or self._document is not None:
                _check_id(out["_id"])
            if next(iter(out)) != "_id":
                out = {"_id": out.pop("_id"), **out}
        return out

    def _matched_index(self, query: Mapping[str, Any], doc: dict[str, Any]) -> str | None:
        entry = self._keys[0] if self._keys else None
        if entry is None or entry[0] is not query:
            entry = (query, tuple(key_leaves(query)))
            self._keys[:] = [entry]
        index = match_key(entry[1], doc)
        return None if index is None else str(index)


def parse_update(spec: dict[str, Any], array_filters: list[Any] | None = None) -> Update:
    """Validate an update document once. A document whose first field starts with `$` is a
    modifier update, any other a replacement. Raises QueryError with MongoDB's code for a
    malformed update or array filter."""
    filters = _parse_array_filters(array_filters or [])
    first = next(iter(spec), None)
    if first is None or not first.startswith("$"):
        for name in spec:
            # MongoDB finds these while applying; here they fail before any document is read.
            if name.startswith("$"):
                raise QueryError(
                    "DollarPrefixedFieldName",
                    f"The dollar ($) prefixed field '{name}' in '{name}' {_DOLLAR_HINT}",
                )
        return Update(True, _document=_copy(spec))
    root = _ObjNode()
    used: set[str] = set()
    positional = False
    for modifier, fields in spec.items():
        if modifier not in _MODIFIERS:
            raise QueryError(
                "FailedToParse",
                f"Unknown modifier: {modifier}. Expected a valid update modifier or "
                "pipeline-style update specified as an array",
            )
        if not isinstance(fields, dict):
            raise QueryError(
                "FailedToParse",
                f"Modifiers operate on fields but we found type {_type_name(fields)} instead. "
                f"For example: {{$mod: {{<field>: ...}}}} not {{{_show_element(modifier, fields)}}}",
            )
        # An empty modifier ({$set: {}}) is accepted and does nothing, as since MongoDB 5.0.
        for path, arg in fields.items():
            positional |= _parse_and_merge(root, modifier, path, arg, filters, used)
    for ident in filters:
        if ident not in used:
            raise QueryError(
                "FailedToParse",
                f"The array filter for identifier '{ident}' was not used in the update "
                f"{_show(spec)}",
            )
    root.finish()
    return Update(False, _root=root, _positional=positional, _filters=filters)


def upsert_seed(query: Mapping[str, Any], *, replacement: bool = False) -> dict[str, Any]:
    """The document an upsert starts from: the query's equality conditions (`{a: 1}`, `$eq`, a
    one-value `$in`, `$all`'s values, inside `$and` or a one-clause `$or`), dotted paths expanded
    into nested documents, `_id` first. With `replacement`, only `_id` is taken, as MongoDB does
    for a replacement upsert. Raises QueryError NotSingleValueField for conflicting equalities
    ({a: 1, 'a.b': 2}), NotExactValueField for `_id.x` under a replacement, PathNotViable where
    the paths cannot be built."""
    found: list[tuple[str, Any]] = []
    for path, value in _equalities(query):
        if replacement:
            if path != "_id" and not path.startswith("_id."):
                continue
            if path != "_id":
                raise QueryError(
                    "NotExactValueField",
                    f"field at '_id' must be exactly specified, field at sub-path '{path}'found",
                )
        parts = split(path)
        # Only an equality at this path or above it conflicts (MongoDB checks the longest).
        above = [seen for seen, _ in found if parts[: len(split(seen))] == split(seen)]
        if above:
            seen = max(above, key=len)
            raise QueryError(
                "NotSingleValueField",
                "cannot infer query fields to set, "
                + (
                    f"path '{path}' is matched twice"
                    if seen == path
                    else f"both paths '{path}' and '{seen}' are matched"
                ),
            )
        found.append((path, value))
    seed: dict[str, Any] = {}
    # MongoDB keeps the equalities in a map keyed by path and adds them in that order.
    for path, value in sorted(found, key=lambda item: item[0]):
        _seed_path(seed, split(path), _copy(value))
    if "_id" in seed and next(iter(seed)) != "_id":
        seed = {"_id": seed.pop("_id"), **seed}
    return seed


# -- the tree ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Leaf:
    """One modifier at one path; `arg` is its argument as parsed."""

    op: str
    path: str
    arg: Any


class _ObjNode:
    """The children of a document (or array element reached by number), applied in field order;
    `positional` is the child under `$`, which applies at the index the query matched."""

    __slots__ = ("children", "order", "positional")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.order: tuple[str, ...] = ()
        self.positional: _Node | None = None

    def finish(self) -> None:
        self.order = tuple(sorted(self.children, key=_FIELD_ORDER))
        for child in self.children.values():
            if not isinstance(child, _Leaf):
                child.finish()
        if self.positional is not None and not isinstance(self.positional, _Leaf):
            self.positional.finish()


class _ArrNode:
    """The children of an array under `$[]` (identifier "") and `$[<identifier>]`."""

    __slots__ = ("children", "order")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.order: tuple[str, ...] = ()

    def finish(self) -> None:
        self.order = tuple(sorted(self.children, key=_FIELD_ORDER))
        for child in self.children.values():
            if not isinstance(child, _Leaf):
                child.finish()


_Node = _ObjNode | _ArrNode | _Leaf


def _field_cmp(a: str, b: str) -> int:
    """MongoDB's order for update children: strings, except that two names starting with a digit
    (and not zero-padded) order shorter first, so `a.9` is applied before `a.10`."""
    if _number_like(a) and _number_like(b) and len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


def _number_like(name: str) -> bool:
    return bool(name) and "0" <= name[0] <= "9" and not (name[0] == "0" and len(name) > 1)


_FIELD_ORDER = functools.cmp_to_key(_field_cmp)


def _is_identifier(part: str) -> bool:
    return len(part) >= 3 and part.startswith("$[") and part.endswith("]")


def _parse_and_merge(
    root: _ObjNode,
    op: str,
    path: str,
    arg: Any,
    filters: Mapping[str, Predicate],
    used: set[str],
) -> bool:
    """Add one `path: arg` of modifier `op` to the tree, checking it as MongoDB's parser does;
    returns whether the path uses the positional `$`."""
    if op == "$rename":
        # The source holds a do-nothing node, so that no other modifier may touch it.
        _parse_and_merge(root, "$rename-from", path, None, filters, used)
        if not isinstance(arg, str):
            raise QueryError(
                "BadValue",
                f"The 'to' field for $rename must be a string: {_show_element(path, arg)}",
            )
        leaf_path, arg = arg, (path, arg)
    else:
        leaf_path = path
    parts = leaf_path.split(".")
    if leaf_path == "":
        raise QueryError("EmptyFieldName", "An empty update path is not valid.")
    if "" in parts:
        raise QueryError(
            "EmptyFieldName",
            f"The update path '{leaf_path}' contains an empty field name, which is not allowed.",
        )
    dollars = parts.count("$")
    if dollars > 1:
        raise QueryError(
            "BadValue", f"Too many positional (i.e. '$') elements found in path '{leaf_path}'"
        )
    if parts[0] == "$":
        raise QueryError(
            "BadValue",
            f"Cannot have positional (i.e. '$') element in the first position in path '{leaf_path}'",
        )
    leaf = _Leaf(op, leaf_path, _parse_argument(op, path, arg))

    node: _ObjNode | _ArrNode = root
    for i, part in enumerate(parts):
        name = _child_name(part, i, leaf_path, filters, used)
        positional = isinstance(node, _ObjNode) and name == "$"
        existing = node.positional if isinstance(node, _ObjNode) and positional else None
        if not positional:
            existing = node.children.get(name)
        child: _Node
        if i == len(parts) - 1:
            if existing is not None:
                raise _conflict(leaf_path, leaf_path)
            child = leaf
        else:
            wants_array = _is_identifier(parts[i + 1])
            if existing is not None:
                if not isinstance(existing, _ArrNode if wants_array else _ObjNode):
                    raise _conflict(leaf_path, ".".join(parts[: i + 1]))
                node = existing
                continue
            child = _ArrNode() if wants_array else _ObjNode()
        if isinstance(node, _ObjNode) and positional:
            node.positional = child
        else:
            node.children[name] = child
        if not isinstance(child, _Leaf):
            node = child
    return dollars > 0


def _child_name(
    part: str, position: int, path: str, filters: Mapping[str, Predicate], used: set[str]
) -> str:
    if not _is_identifier(part):
        return part
    if position == 0:
        raise QueryError(
            "BadValue",
            "Cannot have array filter identifier (i.e. '$[<id>]') element in the first position "
            f"in path '{path}'",
        )
    ident = part[2:-1]
    if ident:
        if ident not in filters:
            raise QueryError(
                "BadValue", f"No array filter found for identifier '{ident}' in path '{path}'"
            )
        used.add(ident)
    return ident


def _conflict(path: str, at: str) -> QueryError:
    return QueryError(
        "ConflictingUpdateOperators",
        f"Updating the path '{path}' would create a conflict at '{at}'",
    )


def _merge(a: _Node, b: _Node, path: list[str]) -> _Node:
    """Two subtrees that land on the same element (the positional `$` and a number, or `$[]` and
    `$[x]`), combined; two modifiers on one path are a conflict."""
    if isinstance(a, _ObjNode) and isinstance(b, _ObjNode):
        merged = _ObjNode()
        merged.children = _merge_children(a.children, b.children, path, False)
        if a.positional is None or b.positional is None:
            merged.positional = a.positional or b.positional
        else:
            merged.positional = _merge(a.positional, b.positional, [*path, "$"])
        merged.order = tuple(sorted(merged.children, key=_FIELD_ORDER))
        return merged
    if isinstance(a, _ArrNode) and isinstance(b, _ArrNode):
        merged_array = _ArrNode()
        merged_array.children = _merge_children(a.children, b.children, path, True)
        merged_array.order = tuple(sorted(merged_array.children, key=_FIELD_ORDER))
        return merged_array
    raise QueryError(
        "ConflictingUpdateOperators", f"Update created a conflict at '{_dotted(path)}'"
    )


def _merge_children(
    a: dict[str, _Node], b: dict[str, _Node], path: list[str], identifiers: bool
) -> dict[str, _Node]:
    out = dict(a)
    for name, node in b.items():
        if name in out:
            out[name] = _merge(out[name], node, [*path, f"$[{name}]" if identifiers else name])
        else:
            out[name] = node
    return out


# -- modifier arguments -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Push:
    values: tuple[Any, ...]
    position: int | None = None
    slice: int | None = None
    sort: int | tuple[tuple[tuple[str, ...], int], ...] | None = None  # ±1, or (path, ±1) pairs


@dataclass(frozen=True, slots=True)
class _Rename:
    source: tuple[str, ...]
    source_path: str


def _parse_argument(op: str, path: str, arg: Any) -> Any:
    """Check a modifier's argument as MongoDB's node init does; returns its parsed form."""
    if op in ("$inc", "$mul"):
        if _kind(arg) is None:
            verb = "increment" if op == "$inc" else "multiply"
            raise QueryError(
                "TypeMismatch",
                f"Cannot {verb} with non-numeric argument: {{{_show_element(path, arg)}}}",
            )
        return arg
    if op == "$currentDate":
        return _parse_current_date(arg)
    if op == "$push":
        return _parse_push(arg)
    if op == "$addToSet":
        return _parse_add_to_set(arg)
    if op == "$pop":
        try:
            direction = _to_long(arg, _show_element(path, arg))
        except _NotInteger as exc:
            raise QueryError("FailedToParse", str(exc)) from None
        if direction not in (1, -1):
            raise QueryError("FailedToParse", f"$pop expects 1 or -1, found: {direction}")
        return direction
    if op == "$pull":
        return _parse_pull(arg)
    if op == "$pullAll":
        if not isinstance(arg, list):
            raise QueryError(
                "BadValue",
                f"$pullAll requires an array argument but was given a {_type_name(arg)}",
            )
        return tuple(arg)
    if op == "$bit":
        return _parse_bit(arg)
    if op == "$rename":
        return _parse_rename(*arg)
    return arg  # $set, $setOnInsert, $unset, $min, $max, the $rename source


def _parse_current_date(arg: Any) -> bool:
    """True for a date, False for a timestamp."""
    if isinstance(arg, bool):
        return True  # any boolean, even false, asks for a date
    if isinstance(arg, dict):
        kind = None
        for name, value in arg.items():
            if name != "$type":
                raise QueryError("BadValue", f"Unrecognized $currentDate option: {name}")
            if isinstance(value, str) and value in ("date", "timestamp"):
                kind = value == "date"
        if kind is None:
            raise QueryError(
                "BadValue",
                "The '$type' string field is required to be 'date' or 'timestamp': "
                "{$currentDate: {field : {$type: 'date'}}}",
            )
        return kind
    raise QueryError(
        "BadValue",
        f"{_type_name(arg)} is not valid type for $currentDate. Please use a boolean ('true') or "
        "a $type expression ({$type: 'timestamp/date'}).",
    )


def _parse_push(arg: Any) -> _Push:
    if not (isinstance(arg, dict) and "$each" in arg):
        return _Push((arg,))  # the value itself is pushed, even {$slice: 1} without $each
    for clause in arg:
        if clause not in ("$each", "$slice", "$sort", "$position"):
            raise QueryError("BadValue", f"Unrecognized clause in $push: {clause}")
    each = arg["$each"]
    if not isinstance(each, list):
        raise QueryError(
            "BadValue",
            "The argument to $each in $push must be an array but it was of type: "
            + _type_name(each),
        )
    slice_ = position = None
    sort: int | tuple[tuple[tuple[str, ...], int], ...] | None = None
    if "$slice" in arg:
        slice_ = _push_integer(arg["$slice"])
        if slice_ is None:
            raise QueryError(
                "BadValue",
                "The value for $slice must be an integer value but was given type: "
                + _type_name(arg["$slice"]),
            )
    if "$sort" in arg:
        sort = _parse_push_sort(arg["$sort"])
    if "$position" in arg:
        position = _push_integer(arg["$position"])
        if position is None:
            raise QueryError(
                "BadValue",
                "The value for $position must be an integer value, not of type: "
                + _type_name(arg["$position"]),
            )
    return _Push(tuple(each), position, slice_, sort)


def _push_integer(value: Any) -> int | None:
    try:
        return _to_long(value, "")
    except _NotInteger:
        return None


def _parse_push_sort(spec: Any) -> int | tuple[tuple[tuple[str, ...], int], ...]:
    if isinstance(spec, dict):
        if not spec:
            raise QueryError(
                "BadValue", "The $sort pattern is empty when it should be a set of fields."
            )
        keys = []
        for name, direction in spec.items():
            order = _sort_direction(direction)
            if order is None:
                raise QueryError("BadValue", "The $sort element value must be either 1 or -1")
            if name == "":
                raise QueryError("BadValue", "The $sort field cannot be empty")
            if "" in name.split("."):
                raise QueryError(
                    "BadValue",
                    f"The $sort field is a dotted field but has an empty part: {name}",
                )
            keys.append((split(name), order))
        return tuple(keys)
    if _kind(spec) is not None:
        order = _sort_direction(spec)
        if order is None:
            raise QueryError("BadValue", "The $sort element value must be either 1 or -1")
        return order
    raise QueryError(
        "BadValue",
        "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort "
        "embedded fields",
    )


def _sort_direction(value: Any) -> int | None:
    if _kind(value) is None:
        return None
    number = _to_python(value)
    return int(number) if number in (1, -1) else None


def _parse_add_to_set(arg: Any) -> tuple[Any, ...]:
    values: list[Any] = [arg]
    if isinstance(arg, dict) and next(iter(arg), None) == "$each":
        each = arg["$each"]
        if not isinstance(each, list):
            raise QueryError(
                "TypeMismatch",
                "The argument to $each in $addToSet must be an array but it was of type "
                + _type_name(each),
            )
        if len(arg) > 1:
            raise QueryError(
                "BadValue", f"Found unexpected fields after $each in $addToSet: {_show(arg)}"
            )
        values = each
    unique: list[Any] = []
    for value in values:
        if not any(equal(value, seen) for seen in unique):
            unique.append(value)
    return tuple(unique)


def _parse_pull(arg: Any) -> Callable[[Any], bool]:
    """The test an array element must pass to be removed."""
    if isinstance(arg, dict) and next(iter(arg), "") not in _VALUE_OPERATORS:
        # A query on document elements; other elements never match it.
        pred = compile_filter(arg)
        return lambda element: isinstance(element, dict) and pred(element)
    if isinstance(arg, dict | Regex | re.Pattern):
        # A condition on the element itself: MongoDB wraps element and condition under one name.
        wrapped = compile_filter({"v": arg})
        return lambda element: wrapped({"v": element})
    return lambda element: equal(element, arg)


def _parse_bit(arg: Any) -> tuple[tuple[str, Any], ...]:
    if not isinstance(arg, dict):
        raise QueryError(
            "BadValue",
            f"The $bit modifier is not compatible with a {_type_name(arg)}. You must pass in an "
            "embedded document: {$bit: {field: {and/or/xor: #}}",
        )
    ops = []
    for name, operand in arg.items():
        if name not in ("and", "or", "xor"):
            raise QueryError(
                "BadValue",
                f"The $bit modifier only supports 'and', 'or', and 'xor', not '{name}' which is an "
                f"unknown operator: {{{_show_element(name, operand)}}}",
            )
        if _kind(operand) not in ("int", "long"):
            raise QueryError(
                "BadValue",
                "The $bit modifier field must be an Integer(32/64 bit); a "
                f"'{_type_name(operand)}' is not supported here: {{{_show_element(name, operand)}}}",
            )
        ops.append((name, operand))
    if not ops:
        raise QueryError(
            "BadValue",
            "You must pass in at least one bitwise operation. The format is: "
            "{$bit: {field: {and/or/xor: #}}",
        )
    return tuple(ops)


def _parse_rename(source: str, target: str) -> _Rename:
    shown = _show_element(source, target)
    if "\0" in target:
        raise QueryError(
            "BadValue", "The 'to' field for $rename cannot contain an embedded null byte"
        )
    source_parts, target_parts = split(source), split(target)
    if source_parts == target_parts:
        raise QueryError(
            "BadValue", f"The source and target field for $rename must differ: {shown}"
        )
    shorter = min(len(source_parts), len(target_parts))
    if source_parts[:shorter] == target_parts[:shorter]:
        raise QueryError(
            "BadValue",
            f"The source and target field for $rename must not be on the same path: {shown}",
        )
    for parts, which in ((source_parts, "source"), (target_parts, "destination")):
        if any(p == "$" or _is_identifier(p) for p in parts):
            raise QueryError(
                "BadValue",
                f"The {which} field for $rename may not be dynamic: {'.'.join(parts)}",
            )
    return _Rename(source_parts, source)


# -- array filters ----------------------------------------------------------------------------------


def _parse_array_filters(raw: list[Any]) -> dict[str, Predicate]:
    filters: dict[str, Predicate] = {}
    for i, flt in enumerate(raw):
        if not isinstance(flt, dict):
            raise QueryError(
                "TypeMismatch",
                f"BSON field 'arrayFilters.{i}' is the wrong type '{_type_name(flt)}', "
                "expected type 'object'",
            )
        try:
            pred = compile_filter(flt)
            ident = _filter_identifier(flt)
            if ident is not None and not _IDENTIFIER.fullmatch(ident):
                raise QueryError(
                    "BadValue",
                    "The top-level field name must be an alphanumeric string beginning with a "
                    f"lowercase letter, found '{ident}'",
                )
        except QueryError as exc:
            raise QueryError(
                exc.code_name, f"Error parsing array filter :: caused by :: {exc.message}"
            ) from None
        if ident is None:
            raise QueryError(
                "FailedToParse",
                "Cannot use an expression without a top-level field name in arrayFilters",
            )
        if ident in filters:
            raise QueryError(
                "FailedToParse",
                f"Found multiple array filters with the same top-level field name {ident}",
            )
        filters[ident] = pred
    return filters


def _filter_identifier(flt: Mapping[str, Any]) -> str | None:
    """The one top-level field an array filter is over, looking through $and/$or/$nor."""
    found: str | None = None
    for name, value in flt.items():
        ident: str | None = None
        if name in ("$and", "$or", "$nor") and isinstance(value, list):
            for clause in value:
                sub = _filter_identifier(clause) if isinstance(clause, Mapping) else None
                if sub is not None:
                    ident = _same_identifier(ident, sub)
        elif not name.startswith("$"):
            ident = name.split(".", 1)[0]
        if ident is not None:
            found = _same_identifier(found, ident)
    return found


def _same_identifier(found: str | None, ident: str) -> str:
    if found is not None and found != ident:
        raise QueryError(
            "FailedToParse",
            f"Expected a single top-level field name, found '{found}' and '{ident}'",
        )
    return ident


# -- applying ---------------------------------------------------------------------------------------


class _Ctx:
    """What one application of an update shares: the document being built and the inputs."""

    __slots__ = ("doc", "now_ms", "inserting", "matched", "filters", "ticks")

    def __init__(
        self,
        doc: dict[str, Any],
        now_ms: int,
        inserting: bool,
        matched: str | None,
        filters: Mapping[str, Predicate],
    ) -> None:
        self.doc = doc
        self.now_ms = now_ms
        self.inserting = inserting
        self.matched = matched
        self.filters = filters
        self.ticks = 0

    def id_text(self) -> str:
        """The document's `_id` as MongoDB's messages show it."""
        if "_id" not in self.doc:
            return "no id"
        return _show_element("_id", self.doc["_id"])


class _At:
    """Where a node applies: an existing element `value` (held by `parent` under `key`, reached by
    the parts in `taken`), or, when `create` is not empty, the deepest existing element on the
    way and the parts below it that do not exist yet."""

    __slots__ = ("value", "parent", "key", "taken", "create")

    def __init__(
        self,
        value: Any,
        parent: dict[str, Any] | list[Any] | None,
        key: str | int | None,
        taken: list[str],
        create: list[str],
    ) -> None:
        self.value = value
        self.parent = parent
        self.key = key
        self.taken = taken
        self.create = create

    @property
    def name(self) -> str:
        return "" if self.key is None else str(self.key)

    def set(self, value: Any) -> None:
        assert self.parent is not None
        self.parent[self.key] = value  # type: ignore[index]
        self.value = value


def _apply_node(node: _Node, ctx: _Ctx, at: _At) -> None:
    if isinstance(node, _ObjNode):
        _apply_obj(node, ctx, at)
    elif isinstance(node, _ArrNode):
        _apply_arr(node, ctx, at)
    elif node.op == "$rename":
        _apply_rename(node, ctx, at)
    elif node.op != "$rename-from":
        _apply_leaf(node, ctx, at)


def _apply_obj(node: _ObjNode, ctx: _Ctx, at: _At) -> None:
    steps = [(name, node.children[name]) for name in node.order]
    if node.positional is not None:
        matched = ctx.matched
        if matched is None:
            raise QueryError("BadValue", _POSITIONAL_NOT_FOUND)
        # The `$` child applies at the matched index, merged with any child of that name.
        for i, (name, child) in enumerate(steps):
            if name == matched:
                path = [*at.taken, *at.create, matched]
                steps[i] = (name, _merge(child, node.positional, path))
                break
            if _field_cmp(matched, name) < 0:
                steps.insert(i, (matched, node.positional))
                break
        else:
            steps.append((matched, node.positional))
    for name, child in steps:
        _apply_child(child, name, ctx, at)


def _apply_child(child: _Node, name: str, ctx: _Ctx, at: _At) -> None:
    if at.create:
        _apply_node(child, ctx, _At(at.value, at.parent, at.key, at.taken, [*at.create, name]))
        # The child may have created the path this node stands on: later children go inside it.
        _advance(at)
        return
    found, value, key = _child_of(at.value, name)
    if found:
        _apply_node(child, ctx, _At(value, at.value, key, [*at.taken, name], []))
    else:
        _apply_node(child, ctx, _At(at.value, at.parent, at.key, at.taken, [name]))


def _child_of(value: Any, name: str) -> tuple[bool, Any, str | int | None]:
    if type(value) is dict:
        if name in value:
            return True, value[name], name
    elif type(value) is list:
        index = _index(name)
        if index is not None and index < len(value):
            return True, value[index], index
    return False, None, None


def _advance(at: _At) -> None:
    value, parent, key = at.value, at.parent, at.key
    for part in at.create:
        found, child, child_key = _child_of(value, part)
        if not found:
            return
        value, parent, key = child, value, child_key
    at.value, at.parent, at.key = value, parent, key
    at.taken = [*at.taken, *at.create]
    at.create = []


def _index(part: str) -> int | None:
    """A path part as an array index: decimal digits, leading zeros allowed ("00" is 0)."""
    return int(part) if part.isascii() and part.isdigit() else None


def _apply_arr(node: _ArrNode, ctx: _Ctx, at: _At) -> None:
    if at.create:
        raise QueryError(
            "BadValue",
            f"The path '{_dotted([*at.taken, *at.create])}' must exist in the document in order "
            "to apply array updates.",
        )
    array = at.value
    if type(array) is not list:
        raise QueryError(
            "BadValue",
            f"Cannot apply array updates to non-array element {_show_element(at.name, array)}",
        )
    # Which children apply to which element is decided on the array as it was.
    plan: list[tuple[int, list[_Node]]] = []
    for i, element in enumerate(array):
        nodes = [
            node.children[ident]
            for ident in node.order
            if ident == "" or ctx.filters[ident]({ident: element})
        ]
        if nodes:
            plan.append((i, nodes))
    for i, nodes in plan:
        path = [*at.taken, str(i)]
        merged = nodes[0]
        for other in nodes[1:]:
            merged = _merge(merged, other, path)
        _apply_node(merged, ctx, _At(array[i], array, i, path, []))


# -- leaves -----------------------------------------------------------------------------------------


def _apply_leaf(leaf: _Leaf, ctx: _Ctx, at: _At) -> None:
    if leaf.op == "$setOnInsert" and not ctx.inserting:
        return
    if at.create:
        make = _NEW_VALUE.get(leaf.op)
        if make is None:
            # $unset ignores any missing path; $pop, $pull and $pullAll only one that could exist.
            if leaf.op != "$unset":
                _check_viable(at)
            return
        _create(ctx, at, make(leaf, ctx))
        return
    if _UPDATE_EXISTING[leaf.op](leaf, ctx, at):
        _check_immutable(at.taken)


def _check_immutable(taken: list[str]) -> None:
    if taken[0] == "_id":
        raise QueryError(
            "ImmutableField",
            f"Performing an update on the path '{_dotted(taken)}' would modify the immutable "
            "field '_id'",
        )


def _create(ctx: _Ctx, at: _At, value: Any) -> None:
    """Create `at.create` under the existing element `at.value`, ending in `value`: documents on
    the way, an array padded with nulls up to a numeric part."""
    container = at.value
    parts = at.create
    if type(container) is list:
        index = _index(parts[0])
        if index is None:
            raise _not_viable_create(parts[0], at)
        _put_past_end(container, index, parts[1:], value)
    elif type(container) is dict:
        if not at.taken and parts[0].startswith("$"):
            raise QueryError(
                "DollarPrefixedFieldName",
                f"The dollar ($) prefixed field '{parts[0]}' in '{parts[0]}' {_DOLLAR_HINT}",
            )
        _fill(container, parts, value)
    else:
        raise _not_viable_create(parts[0], at)
    if at.taken[:1] == ["_id"]:
        raise QueryError(
            "ImmutableField",
            f"Updating the path '{_dotted(at.taken)}' to {_show_element(at.name, at.value)} "
            "would modify the immutable field '_id'",
        )


def _put_past_end(array: list[Any], index: int, rest: list[str], value: Any) -> None:
    """Put `value` (under documents named by `rest`) at `index` >= len(array), padding with nulls."""
    if index - len(array) > _MAX_PADDING:
        raise QueryError("CannotBackfillArray", f"can't backfill more than {_MAX_PADDING} elements")
    array.extend([None] * (index - len(array)))
    if rest:
        sub: dict[str, Any] = {}
        array.append(sub)
        _fill(sub, rest, value)
    else:
        array.append(value)


def _fill(container: dict[str, Any], parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        sub: dict[str, Any] = {}
        container[part] = sub
        container = sub
    container[parts[-1]] = value


def _not_viable_create(part: str, at: _At) -> QueryError:
    return QueryError(
        "PathNotViable",
        f"Cannot create field '{part}' in element {{{_show_element(at.name, at.value)}}}",
    )


def _check_viable(at: _At) -> None:
    if type(at.value) is dict or (type(at.value) is list and _index(at.create[0]) is not None):
        return
    raise QueryError(
        "PathNotViable",
        f"Cannot use the part ({at.create[0]}) of ({_dotted(at.taken)}.{_dotted(at.create)}) to "
        f"traverse the element ({{{_show_element(at.name, at.value)}}})",
    )


def _set_existing(leaf: _Leaf, ctx: _Ctx, at: _At) -> bool:
    if _same(at.value, leaf.arg):
        return False
    at.set(_copy(leaf.arg))
    return True


def _unset_existing(leaf: _Leaf, ctx: _Ctx, at: _At) -> bool:
    if type(at.parent) is list:
        at.set(None)  # an array element is nulled, never removed
    else:
        assert isinstance(at.parent, dict) and isinstance(at.key, str)
        del at.parent[at.key]
    return True


def _arith_existing(leaf: _Leaf, ctx: _Ctx, at: _At) -> bool:
    current = at.value
    if _kind(current) is None:
        raise QueryError(
            "TypeMismatch",
            f"Cannot apply {leaf.op} to a value of non-numeric type. {{{ctx.id_text()}}} has the "
            f"field '{at.name}' of non-numeric type {_type_name(current)}",
        )
    result = _arith(current, leaf.arg, leaf.op == "$mul")
    if result is not None and _same(result, current):
        return False
    if result is None:
        raise QueryError(
            "BadValue",
            f"Failed to apply {leaf.op} operations to current value ({_debug_number(current)}) "
            f"for document {{{ctx.id_text()}}}",
        )
    at.set(result)
    return True


def _min_max_existing(leaf: _Leaf, ctx: _Ctx, at: _At) -> bool:
    c = compare(at.value, leaf.arg)
    if c == 0 or (c > 0 if leaf.op == "$max" else c < 0):
        return False
    at.set(_copy(leaf.arg))
    return True


def _current_date_existing(leaf: _Leaf, ctx: _Ctx, at: _At) -> bool:
    at.set(_now(leaf, ctx))
    return True


def _push_existing(leaf: _Leaf, ctx: _Ctx, at: _At) -> bool:
    if type(at.value) is not list:
        raise QueryError(
            "BadValue",
            f"The field '{_dotted(at.taken)}' must be an array but is of type "
            f"{_type_name(at.value)} in document {{{ctx.id_text()}}}",
        )
    return _push(at.value, leaf.arg)


def _push(array: list[Any], spec: _Push) -> bool:
    """MongoDB's $push on `array` in place; True unless nothing could have changed."""
    changed = bool(spec.values)
    values = [_copy(v) for v in spec.values]
    n, position = len(array), spec.position
    if not values:
        pass
    elif n == 0 or position is None or position >= n:
        array.extend(values)
    elif position >= 0:
        array[position:position] = values
    elif -position < n:
        array[n + position : n + position] = values
    else:
        array[0:0] = values
    if spec.sort is not None:
        changed = True
        array.sort(key=_push_sort_key(spec.sort))
    if spec.slice is not None and len(array) > abs(spec.slice):
        changed = True
        keep = abs(spec.slice)
        array[:] = array[:keep] if spec.slice >= 0 else array[len(array) - keep :]
    return changed


def _push_sort_key(
    sort: int | tuple[tuple[tuple[str, ...], int], ...],
) -> Callable[[Any], Any]:
    if isinstance(sort, int):
        direction = sort
        return functools.cmp_to_key(lambda a, b: compare(a, b) * direction)
    keys = sort

    def sort_value(element: Any, parts: tuple[str, ...]) -> Any:
        # Only document elements have fields; anything else sorts as null (no array rule here).
        value = get(element, parts) if type(element) is dict else MISSING
        return None if value is MISSING else value

    def cmp(a: Any, b: Any) -> int:
        for parts, direction in keys:
            c = compare(sort_value(a, parts), sort_value(b, parts))
            if c:
                return c * direction
        return 0

    return functools.cmp_to_key(cmp)


def _add_to_set_existing(leaf: _Leaf, ctx: _Ctx, at: _At) -> bool:
    array = at.value
    if type(array) is not list:
        raise QueryError(
            "BadValue",
            f"Cannot apply $addToSet to non-array field. Field named '{at.name}' has non-array "
            f"type {_type_name(array)}",
        )
    added = [_copy(v) for v in leaf.arg if not any(equal(v, e) for e in array)]
    array.extend(added)
    return bool(added)


def _pop_existing(leaf: _Leaf, ctx: _Ctx, at: _At) -> bool:
    array = at.value
    if type(array) is not list:
        raise QueryError(
            "TypeMismatch",
            f"Path '{_dotted(at.taken)}' contains an element of non-array type "
            f"'{_type_name(array)}'",
        )
    if not array:
        return False
    array.pop(0 if leaf.arg == -1 else -1)
    return True


def _pull_existing(leaf: _Leaf, ctx: _Ctx, at: _At) -> bool:
    array = at.value
    if type(array) is not list:
        raise QueryError("BadValue", "Cannot apply $pull to a non-array value")
    if leaf.op == "$pull":
        test = leaf.arg
        kept = [e for e in array if not test(e)]
    else:
        kept = [e for e in array if not any(equal(e, v) for v in leaf.arg)]
    if len(kept) == len(array):
        return False
    array[:] = kept
    return True


def _bit_existing(leaf: _Leaf, ctx: _Ctx, at: _At) -> bool:
    current = at.value
    if _kind(current) not in ("int", "long"):
        raise QueryError(
            "BadValue",
            f"Cannot apply $bit to a value of non-integral type.{ctx.id_text()} has the field "
            f"{at.name} of non-integer type {_type_name(current)}",
        )
    result = _bits(current, leaf.arg)
    if _same(result, current):
        return False
    at.set(result)
    return True


_UPDATE_EXISTING: dict[str, Callable[[_Leaf, _Ctx, _At], bool]] = {
    "$set": _set_existing,
    "$setOnInsert": _set_existing,
    "$unset": _unset_existing,
    "$inc": _arith_existing,
    "$mul": _arith_existing,
    "$min": _min_max_existing,
    "$max": _min_max_existing,
    "$currentDate": _current_date_existing,
    "$push": _push_existing,
    "$addToSet": _add_to_set_existing,
    "$pop": _pop_existing,
    "$pull": _pull_existing,
    "$pullAll": _pull_existing,
    "$bit": _bit_existing,
}


def _new_pushed(leaf: _Leaf, ctx: _Ctx) -> list[Any]:
    array: list[Any] = []
    _push(array, leaf.arg)
    return array


def _new_mul(leaf: _Leaf, ctx: _Ctx) -> Any:
    # A missing field becomes a zero of the argument's type (and sign, for a double).
    return _arith(leaf.arg, 0, True)


def _now(leaf: _Leaf, ctx: _Ctx) -> Any:
    if leaf.arg:
        return DatetimeMS(ctx.now_ms)
    # Each timestamp an update records is distinct, as MongoDB reserves one clock tick for each.
    ctx.ticks += 1
    return Timestamp(ctx.now_ms // 1000, ctx.ticks)


_NEW_VALUE: dict[str, Callable[[_Leaf, _Ctx], Any]] = {
    "$set": lambda leaf, ctx: _copy(leaf.arg),
    "$setOnInsert": lambda leaf, ctx: _copy(leaf.arg),
    "$inc": lambda leaf, ctx: leaf.arg,
    "$mul": _new_mul,
    "$min": lambda leaf, ctx: _copy(leaf.arg),
    "$max": lambda leaf, ctx: _copy(leaf.arg),
    "$currentDate": _now,
    "$push": _new_pushed,
    "$addToSet": lambda leaf, ctx: [_copy(v) for v in leaf.arg],
    "$bit": lambda leaf, ctx: _bits(0, leaf.arg),
}


# -- $rename ----------------------------------------------------------------------------------------


def _apply_rename(leaf: _Leaf, ctx: _Ctx, at: _At) -> None:
    """Move the source's value to this node's path (a $set there, then an $unset of the source)."""
    spec: _Rename = leaf.arg
    value: Any = ctx.doc
    parent: Any = ctx.doc
    chain: list[tuple[Any, str]] = []  # the source's ancestors below the root, with their names
    name = ""
    for i, part in enumerate(spec.source):
        if type(value) is dict:
            if part not in value:
                return  # no source: nothing to do
            child = value[part]
        elif type(value) is list and _index(part) is not None:
            index = _index(part)
            assert index is not None
            if index >= len(value):
                return
            child = value[index]
        else:
            raise QueryError(
                "PathNotViable",
                f"cannot use the part ({spec.source[i - 1]} of {spec.source_path}) to traverse "
                f"the element ({{{_show_element(name, value)}}})",
            )
        if i:
            chain.append((value, name))
        parent, value, name = value, child, part
    for ancestor, ancestor_name in reversed(chain):
        if type(ancestor) is list:
            raise QueryError(
                "BadValue",
                f"The source field cannot be an array element, '{spec.source_path}' in doc with "
                f"{ctx.id_text()} has an array field called '{ancestor_name}'",
            )
    _check_rename_target(leaf, ctx, at)
    moved = value
    if at.create:
        _create(ctx, at, moved)
    elif not equal(at.value, moved):
        at.set(moved)
        _check_immutable(at.taken)
    del parent[name]
    _check_immutable(list(spec.source))


def _check_rename_target(leaf: _Leaf, ctx: _Ctx, at: _At) -> None:
    """The target may be an array itself, but no element of one."""
    elements: list[tuple[Any, str]] = []
    value: Any = ctx.doc
    for part in at.taken:
        _, value, _ = _child_of(value, part)
        elements.append((value, part))
    if not at.create:
        elements.pop()  # the element the rename overwrites
    for element, element_name in reversed(elements):
        if type(element) is list:
            raise QueryError(
                "BadValue",
                f"The destination field cannot be an array element, '{leaf.path}' in doc with "
                f"{ctx.id_text()} has an array field called '{element_name}'",
            )


# -- replacement ------------------------------------------------------------------------------------


def _replace(doc: dict[str, Any], replacement: dict[str, Any], now_ms: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "_id" in replacement:
        new_id = replacement["_id"]
        if "_id" in doc and not equal(doc["_id"], new_id):
            raise QueryError(
                "ImmutableField",
                "After applying the update, the (immutable) field '_id' was found to have been "
                f"altered to {_show_element('_id', new_id)}",
            )
        out["_id"] = _copy(new_id)
    elif "_id" in doc:
        out["_id"] = _copy(doc["_id"])
    ticks = 0
    for name, value in replacement.items():
        if name == "_id":
            continue
        if type(value) is Timestamp and value.time == 0 and value.inc == 0:
            # Like an insert, a replacement's empty top-level timestamps record the current time.
            ticks += 1
            value = Timestamp(now_ms // 1000, ticks)
        out[name] = _copy(value)
    return out


def _check_id(value: Any) -> None:
    kind = (
        "array" if type(value) is list else "regex" if isinstance(value, Regex | re.Pattern) else ""
    )
    if kind:
        raise InvalidIdField(f"The '_id' value cannot be of type {kind}")


# -- the upsert seed --------------------------------------------------------------------------------


def _equalities(query: Mapping[str, Any]) -> Iterable[tuple[str, Any]]:
    """The (path, value) equality conditions MongoDB extracts from a query, in query order."""
    for name, cond in query.items():
        if name == "$and" and isinstance(cond, list):
            for clause in cond:
                if isinstance(clause, Mapping):
                    yield from _equalities(clause)
        elif name == "$or" and isinstance(cond, list) and len(cond) == 1:
            # A one-clause $or is optimized into its clause before extraction.
            if isinstance(cond[0], Mapping):
                yield from _equalities(cond[0])
        elif name.startswith("$"):
            continue
        elif isinstance(cond, dict) and next(iter(cond), "").startswith("$"):
            for op, arg in cond.items():
                if op == "$eq":
                    yield name, arg
                elif op == "$in" and isinstance(arg, list) and len(arg) == 1:
                    if not isinstance(arg[0], Regex | re.Pattern):
                        yield name, arg[0]  # a one-value $in is an equality
                elif op == "$all" and isinstance(arg, list):
                    for value in arg:
                        # $all is an $and of equalities (regexes and $elemMatch aside).
                        if not isinstance(value, Regex | re.Pattern) and not (
                            isinstance(value, dict) and "$elemMatch" in value
                        ):
                            yield name, value
        elif not isinstance(cond, Regex | re.Pattern):
            yield name, cond


def _seed_path(seed: dict[str, Any], parts: tuple[str, ...], value: Any) -> None:
    """Set `value` at `parts`, building documents on the way (MongoDB's setElementAtPath)."""
    current: Any = seed
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if type(current) is dict:
            if part not in current:
                _fill(current, list(parts[i:]), value)
                return
            if last:
                current[part] = value
                return
            current = current[part]
        elif type(current) is list and _index(part) is not None:
            index = _index(part)
            assert index is not None
            if index >= len(current):
                _put_past_end(current, index, list(parts[i + 1 :]), value)
                return
            if last:
                current[index] = value
                return
            current = current[index]
        else:
            raise QueryError(
                "PathNotViable",
                f"cannot use the part ({parts[i - 1]} of {'.'.join(parts)}) to traverse the "
                f"element ({{{_show_element(parts[i - 1], current)}}})",
            )


# -- numbers ----------------------------------------------------------------------------------------


def _kind(value: Any) -> str | None:
    """The BSON numeric type of a value ("int", "long", "double", "decimal"), None if not one."""
    t = type(value)
    if t is int:
        return "int" if _INT32_MIN <= value <= _INT32_MAX else "long"
    if t is Int64:
        return "long"
    if t is float:
        return "double"
    if t is Decimal128:
        return "decimal"
    return None


def _to_decimal(value: Any) -> decimal.Decimal:
    kind = _kind(value)
    if kind == "decimal":
        return value.to_decimal()  # type: ignore[no-any-return]
    if kind == "double":
        if not math.isfinite(value):
            return decimal.Decimal(value)
        # MongoDB converts a double to a decimal rounded to 15 significant digits.
        return decimal.Decimal(f"{value:.14e}")
    return decimal.Decimal(int(value))


def _to_python(value: Any) -> int | float | decimal.Decimal:
    kind = _kind(value)
    if kind == "decimal":
        return value.to_decimal()  # type: ignore[no-any-return]
    if kind == "double":
        return float(value)
    return int(value)


def _arith(a: Any, b: Any, multiply: bool) -> Any:
    """a + b or a * b with MongoDB's type rules: an int32 result that overflows widens to a long,
    a long that overflows is None (an error); any double makes a double, any decimal a decimal."""
    ka, kb = _kind(a), _kind(b)
    if "decimal" in (ka, kb):
        x, y = _to_decimal(a), _to_decimal(b)
        result = _DECIMAL.multiply(x, y) if multiply else _DECIMAL.add(x, y)
        return Decimal128(result)
    if "double" in (ka, kb):
        return float(a) * float(b) if multiply else float(a) + float(b)
    n = int(a) * int(b) if multiply else int(a) + int(b)
    if ka == kb == "int":
        return n if _INT32_MIN <= n <= _INT32_MAX else Int64(n)
    return Int64(n) if _INT64_MIN <= n <= _INT64_MAX else None


def _bits(value: Any, ops: tuple[tuple[str, Any], ...]) -> Any:
    long = _kind(value) == "long"
    n = int(value)
    for name, operand in ops:
        long = long or _kind(operand) == "long"
        m = int(operand)
        n = n & m if name == "and" else n | m if name == "or" else n ^ m
    return Int64(n) if long else n


def _debug_number(value: Any) -> str:
    """A number as MongoDB's SafeNum prints one: (NumberLong)9223372036854775807."""
    names = {"int": "NumberInt", "long": "NumberLong", "double": "NumberDouble"}
    kind = _kind(value)
    if kind == "decimal":
        return f"(NumberDecimal){value}"
    return f"({names.get(kind or '', 'EOO')}){_show(value)}"


class _NotInteger(Exception):
    pass


def _to_long(value: Any, shown: str) -> int:
    """MongoDB's parseIntegerElementToLong: an integral number as a long, else _NotInteger with
    its message (`shown` is the element as `name: value`)."""
    kind = _kind(value)
    if kind is None:
        raise _NotInteger(f"Expected a number in: {shown}")
    if kind == "double":
        if math.isnan(value):
            raise _NotInteger(f"Expected an integer, but found NaN in: {shown}")
        if not -(2.0**63) <= value < 2.0**63:
            raise _NotInteger(f"Cannot represent as a 64-bit integer: {shown}")
        if value != int(value):
            raise _NotInteger(f"Expected an integer: {shown}")
        return int(value)
    if kind == "decimal":
        d = value.to_decimal()
        if not d.is_finite() or d != d.to_integral_value() or not _INT64_MIN <= d <= _INT64_MAX:
            raise _NotInteger(f"Cannot represent as a 64-bit integer: {shown}")
        return int(d)
    return int(value)


# -- values -----------------------------------------------------------------------------------------


def _copy(value: Any) -> Any:
    """A copy of the containers in a decoded value (BSON scalars are immutable)."""
    t = type(value)
    if t is dict:
        return {k: _copy(v) for k, v in value.items()}
    if t is list:
        return [_copy(v) for v in value]
    if t is DBRef:
        # pymongo decodes {$ref, $id} subdocuments as DBRef; updates see a plain subdocument.
        return {k: _copy(v) for k, v in value.as_doc().items()}
    return value


def _same(a: Any, b: Any) -> bool:
    """Whether two values would encode to the same BSON: the same types, values and field order
    (so 1 and 1.0 differ, which `equal` does not see)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if type(a) is float:
        if math.isnan(a):
            return math.isnan(b)
        return bool(a == b and math.copysign(1.0, a) == math.copysign(1.0, b))
    if type(a) is int:
        return bool(a == b) and _kind(a) == _kind(b)
    return bool(a == b)


def _dotted(parts: Iterable[str]) -> str:
    return ".".join(parts)


_TYPE_NAMES: tuple[tuple[type | tuple[type, ...], str], ...] = (
    (bool, "bool"),
    (float, "double"),
    (str, "string"),
    (dict, "object"),
    (DBRef, "object"),
    (list, "array"),
    (Decimal128, "decimal"),
    (Int64, "long"),
    (ObjectId, "objectId"),
    (DatetimeMS, "date"),
    ((Regex, re.Pattern), "regex"),
    ((Binary, bytes), "binData"),
    (Timestamp, "timestamp"),
    (MinKey, "minKey"),
    (MaxKey, "maxKey"),
)


def _type_name(value: Any) -> str:
    """MongoDB's name for a value's BSON type, as its messages print it."""
    if value is None:
        return "null"
    if type(value) is int:
        return "int" if _INT32_MIN <= value <= _INT32_MAX else "long"
    if isinstance(value, Code):
        return "javascript" if value.scope is None else "javascriptWithScope"
    for kind, name in _TYPE_NAMES:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _show_element(name: str, value: Any) -> str:
    """An element as MongoDB's BSONElement::toString prints it: `a: 1`."""
    return f"{name}: {_show(value)}"


def _show(value: Any) -> str:
    """A value as MongoDB prints BSON in messages: { a: "x", b: [ 1, 2.5 ] }."""
    if value is None:
        return "null"
    t = type(value)
    if t is bool:
        return "true" if value else "false"
    if t is int or t is Int64:
        return str(int(value))
    if t is float:
        if math.isnan(value):
            return "nan.0"
        text = f"{value:.16g}"
        return text if any(c in text for c in ".eni") else text + ".0"
    if t is str:
        return f'"{value}"'
    if t is dict:
        if not value:
            return "{}"
        return "{ " + ", ".join(_show_element(k, v) for k, v in value.items()) + " }"
    if t is list:
        return "[ " + ", ".join(_show(v) for v in value) + " ]" if value else "[]"
    if t is Decimal128:
        return f'NumberDecimal("{value}")'
    if t is ObjectId:
        return f"ObjectId('{value}')"
    if t is DatetimeMS:
        return f"new Date({int(value)})"
    if t is Timestamp:
        return f"Timestamp({value.time}, {value.inc})"
    if t is Regex:
        return f"/{value.pattern}/{regex_flags(value.flags)}"
    if isinstance(value, Binary | bytes):
        subtype = value.subtype if isinstance(value, Binary) else 0
        return f"BinData({subtype}, {bytes(value).hex().upper()})"
    if t is MinKey:
        return "MinKey"
    if t is MaxKey:
        return "MaxKey"
    if t is DBRef:
        return _show(dict(value.as_doc()))
    return str(value)


__all__ = ["Update", "parse_update", "upsert_seed"]
