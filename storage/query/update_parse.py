"""The update language, parsed: an update document's modifiers checked as MongoDB's parser checks
them (its codes and messages) and merged into a tree of paths, one node per path component, `$` and
`$[<id>]` kept for the apply step (storage/query/update_apply.py) to resolve per document."""

from __future__ import annotations

import decimal
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bson import DBRef, Regex

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import (
    IntegerError,
    is_number,
    parse_integer,
    render,
    render_element,
    type_name,
)
from ebbdb.storage.query import match_tree
from ebbdb.storage.query.compare import equal
from ebbdb.storage.query.match import compile_filter, parse_filter
from ebbdb.storage.query.match_tree import And, Nor, Or, Predicate, path_of
from ebbdb.storage.query.paths import split

_MODIFIERS = frozenset(
    "$addToSet $bit $currentDate $inc $max $min $mul $pop $pull $pullAll $push $rename $set"
    " $setOnInsert $unset".split()
)
UPDATE_OPERATORS = _MODIFIERS  # public, for the README's compatibility table (server/compat.py)
# Operators a $pull condition may start with to be a condition on the element itself
# ({$gte: 5}); any other first key makes it a query on document elements ({b: 1}, {$and: ...}).
_VALUE_OPERATORS = frozenset(
    "$all $bitsAllClear $bitsAllSet $bitsAnyClear $bitsAnySet $elemMatch $eq $exists $geoIntersects"
    " $geoWithin $gt $gte $in $lt $lte $maxDistance $minDistance $mod $ne $near $nearSphere $nin"
    " $not $options $regex $size $type $within".split()
)
_IDENTIFIER = re.compile(r"[a-z][a-zA-Z0-9]*")
DOLLAR_HINT = (
    "is not allowed in the context of an update's replacement document. Consider using an "
    "aggregation pipeline with $replaceWith."
)


def parse_modifiers(
    spec: Mapping[str, Any], filters: Mapping[str, Predicate]
) -> tuple[ObjNode, bool]:
    """A modifier update's tree, and whether a path uses the positional `$`. Raises QueryError
    with MongoDB's code for an unknown modifier, a bad path or argument, a conflict, or an array
    filter no path uses."""
    root = ObjNode()
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
                f"Modifiers operate on fields but we found type {type_name(fields)} instead. "
                f"For example: {{$mod: {{<field>: ...}}}} not {{{render_element(modifier, fields)}}}",
            )
        # An empty modifier ({$set: {}}) is accepted and does nothing, as since MongoDB 5.0.
        for path, arg in fields.items():
            positional |= _parse_and_merge(root, modifier, path, arg, filters, used)
    for ident in filters:
        if ident not in used:
            raise QueryError(
                "FailedToParse",
                f"The array filter for identifier '{ident}' was not used in the update "
                f"{render(spec)}",
            )
    root.finish()
    return root, positional


# -- the tree ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Leaf:
    """One modifier at one path; `arg` is its argument as parsed."""

    op: str
    path: str
    arg: Any


class ObjNode:
    """The children of a document (or array element reached by number), applied in field order;
    `positional` is the child under `$`, which applies at the index the query matched."""

    __slots__ = ("children", "order", "positional")

    def __init__(self) -> None:
        self.children: dict[str, Node] = {}
        self.order: tuple[str, ...] = ()
        self.positional: Node | None = None

    def finish(self) -> None:
        self.order = tuple(sorted(self.children, key=_FIELD_ORDER))
        for child in self.children.values():
            if not isinstance(child, Leaf):
                child.finish()
        if self.positional is not None and not isinstance(self.positional, Leaf):
            self.positional.finish()


class ArrNode:
    """The children of an array under `$[]` (identifier "") and `$[<identifier>]`."""

    __slots__ = ("children", "order")

    def __init__(self) -> None:
        self.children: dict[str, Node] = {}
        self.order: tuple[str, ...] = ()

    def finish(self) -> None:
        self.order = tuple(sorted(self.children, key=_FIELD_ORDER))
        for child in self.children.values():
            if not isinstance(child, Leaf):
                child.finish()


Node = ObjNode | ArrNode | Leaf


def field_cmp(a: str, b: str) -> int:
    """MongoDB's order for update children: strings, except that two names starting with a digit
    (and not zero-padded) order shorter first, so `a.9` is applied before `a.10`."""
    if _number_like(a) and _number_like(b) and len(a) != len(b):
        return -1 if len(a) < len(b) else 1
    return (a > b) - (a < b)


def _number_like(name: str) -> bool:
    return bool(name) and "0" <= name[0] <= "9" and not (name[0] == "0" and len(name) > 1)


_FIELD_ORDER = functools.cmp_to_key(field_cmp)


def _is_identifier(part: str) -> bool:
    return len(part) >= 3 and part.startswith("$[") and part.endswith("]")


def _parse_and_merge(
    root: ObjNode,
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
                f"The 'to' field for $rename must be a string: {render_element(path, arg)}",
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
    leaf = Leaf(op, leaf_path, _parse_argument(op, path, arg))

    node: ObjNode | ArrNode = root
    for i, part in enumerate(parts):
        name = _child_name(part, i, leaf_path, filters, used)
        positional = isinstance(node, ObjNode) and name == "$"
        existing = node.positional if isinstance(node, ObjNode) and positional else None
        if not positional:
            existing = node.children.get(name)
        child: Node
        if i == len(parts) - 1:
            if existing is not None:
                raise _conflict(leaf_path, leaf_path)
            child = leaf
        else:
            wants_array = _is_identifier(parts[i + 1])
            if existing is not None:
                if not isinstance(existing, ArrNode if wants_array else ObjNode):
                    raise _conflict(leaf_path, ".".join(parts[: i + 1]))
                node = existing
                continue
            child = ArrNode() if wants_array else ObjNode()
        if isinstance(node, ObjNode) and positional:
            node.positional = child
        else:
            node.children[name] = child
        if not isinstance(child, Leaf):
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


def merge(a: Node, b: Node, path: list[str]) -> Node:
    """Two subtrees that land on the same element (the positional `$` and a number, or `$[]` and
    `$[x]`), combined; two modifiers on one path are a conflict."""
    if isinstance(a, ObjNode) and isinstance(b, ObjNode):
        merged = ObjNode()
        merged.children = _merge_children(a.children, b.children, path, False)
        if a.positional is None or b.positional is None:
            merged.positional = a.positional or b.positional
        else:
            merged.positional = merge(a.positional, b.positional, [*path, "$"])
        merged.order = tuple(sorted(merged.children, key=_FIELD_ORDER))
        return merged
    if isinstance(a, ArrNode) and isinstance(b, ArrNode):
        merged_array = ArrNode()
        merged_array.children = _merge_children(a.children, b.children, path, True)
        merged_array.order = tuple(sorted(merged_array.children, key=_FIELD_ORDER))
        return merged_array
    raise QueryError("ConflictingUpdateOperators", f"Update created a conflict at '{dotted(path)}'")


def _merge_children(
    a: dict[str, Node], b: dict[str, Node], path: list[str], identifiers: bool
) -> dict[str, Node]:
    out = dict(a)
    for name, node in b.items():
        if name in out:
            out[name] = merge(out[name], node, [*path, f"$[{name}]" if identifiers else name])
        else:
            out[name] = node
    return out


# -- modifier arguments -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Push:
    values: tuple[Any, ...]
    position: int | None = None
    slice: int | None = None
    sort: int | tuple[tuple[tuple[str, ...], int], ...] | None = None  # ±1, or (path, ±1) pairs


@dataclass(frozen=True, slots=True)
class Rename:
    source: tuple[str, ...]
    source_path: str


def _parse_argument(op: str, path: str, arg: Any) -> Any:
    """Check a modifier's argument as MongoDB's node init does; returns its parsed form."""
    if op in ("$inc", "$mul"):
        if number_kind(arg) is None:
            verb = "increment" if op == "$inc" else "multiply"
            raise QueryError(
                "TypeMismatch",
                f"Cannot {verb} with non-numeric argument: {{{render_element(path, arg)}}}",
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
            direction = parse_integer(arg, render_element(path, arg))
        except IntegerError as exc:
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
                f"$pullAll requires an array argument but was given a {type_name(arg)}",
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
        f"{type_name(arg)} is not valid type for $currentDate. Please use a boolean ('true') or "
        "a $type expression ({$type: 'timestamp/date'}).",
    )


def _parse_push(arg: Any) -> Push:
    if not (isinstance(arg, dict) and "$each" in arg):
        return Push((arg,))  # the value itself is pushed, even {$slice: 1} without $each
    for clause in arg:
        if clause not in ("$each", "$slice", "$sort", "$position"):
            raise QueryError("BadValue", f"Unrecognized clause in $push: {clause}")
    each = _each(
        arg, "BadValue", "The argument to $each in $push must be an array but it was of type: "
    )
    sort: int | tuple[tuple[tuple[str, ...], int], ...] | None = None
    slice_ = _push_integer(arg, "$slice", "must be an integer value but was given type")
    if "$sort" in arg:
        sort = _parse_push_sort(arg["$sort"])
    position = _push_integer(arg, "$position", "must be an integer value, not of type")
    return Push(tuple(each), position, slice_, sort)


def _each(arg: dict[str, Any], code_name: str, refusal: str) -> list[Any]:
    """The array of `arg`'s $each; anything else is a `code_name` error, `refusal` followed by its
    type (MongoDB's $push and $addToSet give different codes and wordings)."""
    each = arg["$each"]
    if not isinstance(each, list):
        raise QueryError(code_name, refusal + type_name(each))
    return each


def _push_integer(arg: dict[str, Any], clause: str, refusal: str) -> int | None:
    """The integer of $push's `clause` (None: not given); BadValue "The value for <clause>
    <refusal>: <type>" for anything else (the two clauses word it differently)."""
    if clause not in arg:
        return None
    try:
        return parse_integer(arg[clause], "")
    except IntegerError:
        raise QueryError(
            "BadValue", f"The value for {clause} {refusal}: " + type_name(arg[clause])
        ) from None


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
    if number_kind(spec) is not None:
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
    if number_kind(value) is None:
        return None
    number = _to_python(value)
    return int(number) if number in (1, -1) else None


def _parse_add_to_set(arg: Any) -> tuple[Any, ...]:
    values: list[Any] = [arg]
    if isinstance(arg, dict) and next(iter(arg), None) == "$each":
        each = _each(
            arg,
            "TypeMismatch",
            "The argument to $each in $addToSet must be an array but it was of type ",
        )
        if len(arg) > 1:
            raise QueryError(
                "BadValue", f"Found unexpected fields after $each in $addToSet: {render(arg)}"
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
            f"The $bit modifier is not compatible with a {type_name(arg)}. You must pass in an "
            "embedded document: {$bit: {field: {and/or/xor: #}}",
        )
    ops = []
    for name, operand in arg.items():
        if name not in ("and", "or", "xor"):
            raise QueryError(
                "BadValue",
                f"The $bit modifier only supports 'and', 'or', and 'xor', not '{name}' which is an "
                f"unknown operator: {{{render_element(name, operand)}}}",
            )
        if number_kind(operand) not in ("int", "long"):
            raise QueryError(
                "BadValue",
                "The $bit modifier field must be an Integer(32/64 bit); a "
                f"'{type_name(operand)}' is not supported here: {{{render_element(name, operand)}}}",
            )
        ops.append((name, operand))
    if not ops:
        raise QueryError(
            "BadValue",
            "You must pass in at least one bitwise operation. The format is: "
            "{$bit: {field: {and/or/xor: #}}",
        )
    return tuple(ops)


def _parse_rename(source: str, target: str) -> Rename:
    shown = render_element(source, target)
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
    return Rename(source_parts, source)


# -- array filters ----------------------------------------------------------------------------------


def parse_array_filters(raw: list[Any]) -> dict[str, Predicate]:
    filters: dict[str, Predicate] = {}
    for i, flt in enumerate(raw):
        if not isinstance(flt, dict):
            raise QueryError(
                "TypeMismatch",
                f"BSON field 'arrayFilters.{i}' is the wrong type '{type_name(flt)}', "
                "expected type 'object'",
            )
        try:
            parsed = parse_filter(flt)
            ident = _filter_identifier(parsed.tree)
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
        filters[ident] = parsed.predicate
    return filters


def _filter_identifier(node: match_tree.Node) -> str | None:
    """The one top-level field an array filter's parsed tree is over, looking through $and, $or
    and $nor (each clause's field found before it is compared with the others')."""
    if isinstance(node, (And, Or, Nor)):
        found: str | None = None
        for child in node.children:
            ident = _filter_identifier(child)
            if ident is not None:
                found = _same_identifier(found, ident)
        return found
    path = path_of(node)
    if path is None or path.startswith("$"):
        return None  # pathless ($expr, $alwaysTrue, ...), or a DBRef's $ref, $id, $db
    return path.split(".", 1)[0]


def _same_identifier(found: str | None, ident: str) -> str:
    if found is not None and found != ident:
        raise QueryError(
            "FailedToParse",
            f"Expected a single top-level field name, found '{found}' and '{ident}'",
        )
    return ident


# -- shared with applying --------------------------------------------------------------------------


def number_kind(value: Any) -> str | None:
    """The BSON numeric type of a value ("int", "long", "double", "decimal"), None if not one."""
    return type_name(value) if is_number(value) else None


def _to_python(value: Any) -> int | float | decimal.Decimal:
    kind = number_kind(value)
    if kind == "decimal":
        return value.to_decimal()  # type: ignore[no-any-return]
    if kind == "double":
        return float(value)
    return int(value)


def copy_value(value: Any) -> Any:
    """A copy of the containers in a decoded value (BSON scalars are immutable)."""
    t = type(value)
    if t is dict:
        return {k: copy_value(v) for k, v in value.items()}
    if t is list:
        return [copy_value(v) for v in value]
    if t is DBRef:
        # pymongo decodes {$ref, $id} subdocuments as DBRef; updates see a plain subdocument.
        return {k: copy_value(v) for k, v in value.as_doc().items()}
    return value


def dotted(parts: Iterable[str]) -> str:
    return ".".join(parts)
