"""The update language, applied: a parsed update tree (storage/query/update_parse.py) run over a
copy of a decoded document with MongoDB 7.0's rules: children in field order (new fields appended
in that order), `$` at the index the query matched, `$[<id>]` where the array filters hold, and
MongoDB's errors, element rendering included ({_id: 1}, {a: [ 1, 2 ]})."""

from __future__ import annotations

import decimal
import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bson import Decimal128, Int64, Timestamp
from bson.datetime_ms import DatetimeMS
from bson.decimal128 import create_decimal128_context

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.core.values import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    is_number,
    render,
    render_element,
    type_name,
)
from ebbdb.storage.query.compare import compare, equal
from ebbdb.storage.query.match_tree import Predicate
from ebbdb.storage.query.paths import MISSING, get
from ebbdb.storage.query.update_parse import (
    ArrNode,
    Leaf,
    Node,
    ObjNode,
    Push,
    Rename,
    copy_value,
    dotted,
    field_cmp,
    merge,
    number_kind,
)

_DECIMAL = create_decimal128_context()
#: MongoDB's cap on the nulls it pads an array with when a path names an index past its end.
_MAX_PADDING = 1_500_000
_POSITIONAL_NOT_FOUND = "The positional operator did not find the match needed from the query."


def apply_modifiers(root: ObjNode, ctx: Ctx) -> None:
    """Apply a modifier tree to `ctx.doc` in place (a copy the caller made)."""
    _apply_obj(root, ctx, _At(ctx.doc, None, None, [], []))


def apply_top_level(root: ObjNode, ctx: Ctx) -> None:
    """apply_modifiers for a tree whose children are all leaves at top-level fields, with no
    positional child (Update's flat case): each leaf where _apply_child would put it, without
    the walk."""
    doc = ctx.doc
    for name in root.order:
        leaf = root.children[name]
        assert isinstance(leaf, Leaf)
        if name in doc:
            _apply_leaf(leaf, ctx, _At(doc[name], doc, name, [name], []))
        else:
            _apply_leaf(leaf, ctx, _At(doc, None, None, [], [name]))


# -- applying ---------------------------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class Ctx:
    """What one application of an update shares: the document being built and the inputs
    (`matched` is the array index the query matched, for the positional `$`)."""

    doc: dict[str, Any]
    now_ms: int
    inserting: bool
    matched: str | None
    filters: Mapping[str, Predicate]
    ticks: int = field(default=0, init=False)

    def id_text(self) -> str:
        """The document's `_id` as MongoDB's messages show it."""
        if "_id" not in self.doc:
            return "no id"
        return render_element("_id", self.doc["_id"])


@dataclass(slots=True, eq=False)
class _At:
    """Where a node applies: an existing element `value` (held by `parent` under `key`, reached by
    the parts in `taken`), or, when `create` is not empty, the deepest existing element on the
    way and the parts below it that do not exist yet."""

    value: Any
    parent: dict[str, Any] | list[Any] | None
    key: str | int | None
    taken: list[str]
    create: list[str]

    @property
    def name(self) -> str:
        return "" if self.key is None else str(self.key)

    def set(self, value: Any) -> None:
        assert self.parent is not None
        self.parent[self.key] = value  # type: ignore[index]
        self.value = value


def _apply_node(node: Node, ctx: Ctx, at: _At) -> None:
    if isinstance(node, ObjNode):
        _apply_obj(node, ctx, at)
    elif isinstance(node, ArrNode):
        _apply_arr(node, ctx, at)
    elif node.op == "$rename":
        _apply_rename(node, ctx, at)
    elif node.op != "$rename-from":
        _apply_leaf(node, ctx, at)


def _apply_obj(node: ObjNode, ctx: Ctx, at: _At) -> None:
    steps = [(name, node.children[name]) for name in node.order]
    if node.positional is not None:
        matched = ctx.matched
        if matched is None:
            raise QueryError("BadValue", _POSITIONAL_NOT_FOUND)
        # The `$` child applies at the matched index, merged with any child of that name.
        for i, (name, child) in enumerate(steps):
            if name == matched:
                path = [*at.taken, *at.create, matched]
                steps[i] = (name, merge(child, node.positional, path))
                break
            if field_cmp(matched, name) < 0:
                steps.insert(i, (matched, node.positional))
                break
        else:
            steps.append((matched, node.positional))
    for name, child in steps:
        _apply_child(child, name, ctx, at)


def _apply_child(child: Node, name: str, ctx: Ctx, at: _At) -> None:
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
        index = index_of(name)
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


def index_of(part: str) -> int | None:
    """A path part as an array index: decimal digits, leading zeros allowed ("00" is 0)."""
    return int(part) if part.isascii() and part.isdigit() else None


def _apply_arr(node: ArrNode, ctx: Ctx, at: _At) -> None:
    if at.create:
        raise QueryError(
            "BadValue",
            f"The path '{dotted([*at.taken, *at.create])}' must exist in the document in order "
            "to apply array updates.",
        )
    array = at.value
    if type(array) is not list:
        raise QueryError(
            "BadValue",
            f"Cannot apply array updates to non-array element {render_element(at.name, array)}",
        )
    # Which children apply to which element is decided on the array as it was.
    plan: list[tuple[int, list[Node]]] = []
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
            merged = merge(merged, other, path)
        _apply_node(merged, ctx, _At(array[i], array, i, path, []))


# -- leaves -----------------------------------------------------------------------------------------


def _apply_leaf(leaf: Leaf, ctx: Ctx, at: _At) -> None:
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
            f"Performing an update on the path '{dotted(taken)}' would modify the immutable "
            "field '_id'",
        )


def _create(ctx: Ctx, at: _At, value: Any) -> None:
    """Create `at.create` under the existing element `at.value`, ending in `value`: documents on
    the way, an array padded with nulls up to a numeric part."""
    container = at.value
    parts = at.create
    if type(container) is list:
        index = index_of(parts[0])
        if index is None:
            raise _not_viable_create(parts[0], at)
        put_past_end(container, index, parts[1:], value)
    elif type(container) is dict:
        fill(container, parts, value)
    else:
        raise _not_viable_create(parts[0], at)
    if at.taken[:1] == ["_id"]:
        raise QueryError(
            "ImmutableField",
            f"Updating the path '{dotted(at.taken)}' to {render_element(at.name, at.value)} "
            "would modify the immutable field '_id'",
        )


def put_past_end(array: list[Any], index: int, rest: list[str], value: Any) -> None:
    """Put `value` (under documents named by `rest`) at `index` >= len(array), padding with nulls."""
    if index - len(array) > _MAX_PADDING:
        raise QueryError("CannotBackfillArray", f"can't backfill more than {_MAX_PADDING} elements")
    array.extend([None] * (index - len(array)))
    if rest:
        sub: dict[str, Any] = {}
        array.append(sub)
        fill(sub, rest, value)
    else:
        array.append(value)


def fill(container: dict[str, Any], parts: list[str], value: Any) -> None:
    for part in parts[:-1]:
        sub: dict[str, Any] = {}
        container[part] = sub
        container = sub
    container[parts[-1]] = value


def _not_viable_create(part: str, at: _At) -> QueryError:
    return QueryError(
        "PathNotViable",
        f"Cannot create field '{part}' in element {{{render_element(at.name, at.value)}}}",
    )


def _check_viable(at: _At) -> None:
    if type(at.value) is dict or (type(at.value) is list and index_of(at.create[0]) is not None):
        return
    raise QueryError(
        "PathNotViable",
        f"Cannot use the part ({at.create[0]}) of ({dotted(at.taken)}.{dotted(at.create)}) to "
        f"traverse the element ({{{render_element(at.name, at.value)}}})",
    )


def _set_existing(leaf: Leaf, ctx: Ctx, at: _At) -> bool:
    if _same(at.value, leaf.arg):
        return False
    at.set(copy_value(leaf.arg))
    return True


def _unset_existing(leaf: Leaf, ctx: Ctx, at: _At) -> bool:
    if type(at.parent) is list:
        at.set(None)  # an array element is nulled, never removed
    else:
        assert isinstance(at.parent, dict) and isinstance(at.key, str)
        del at.parent[at.key]
    return True


def _arith_existing(leaf: Leaf, ctx: Ctx, at: _At) -> bool:
    current = at.value
    if not is_number(current):
        raise QueryError(
            "TypeMismatch",
            f"Cannot apply {leaf.op} to a value of non-numeric type. {{{ctx.id_text()}}} has the "
            f"field '{at.name}' of non-numeric type {type_name(current)}",
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


def _min_max_existing(leaf: Leaf, ctx: Ctx, at: _At) -> bool:
    c = compare(at.value, leaf.arg)
    if c == 0 or (c > 0 if leaf.op == "$max" else c < 0):
        return False
    at.set(copy_value(leaf.arg))
    return True


def _current_date_existing(leaf: Leaf, ctx: Ctx, at: _At) -> bool:
    at.set(_now(leaf, ctx))
    return True


def _push_existing(leaf: Leaf, ctx: Ctx, at: _At) -> bool:
    if type(at.value) is not list:
        raise QueryError(
            "BadValue",
            f"The field '{dotted(at.taken)}' must be an array but is of type "
            f"{type_name(at.value)} in document {{{ctx.id_text()}}}",
        )
    return _push(at.value, leaf.arg)


def _push(array: list[Any], spec: Push) -> bool:
    """MongoDB's $push on `array` in place; True unless nothing could have changed."""
    changed = bool(spec.values)
    values = [copy_value(v) for v in spec.values]
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


def _add_to_set_existing(leaf: Leaf, ctx: Ctx, at: _At) -> bool:
    array = at.value
    if type(array) is not list:
        raise QueryError(
            "BadValue",
            f"Cannot apply $addToSet to non-array field. Field named '{at.name}' has non-array "
            f"type {type_name(array)}",
        )
    added = [copy_value(v) for v in leaf.arg if not any(equal(v, e) for e in array)]
    array.extend(added)
    return bool(added)


def _pop_existing(leaf: Leaf, ctx: Ctx, at: _At) -> bool:
    array = at.value
    if type(array) is not list:
        raise QueryError(
            "TypeMismatch",
            f"Path '{dotted(at.taken)}' contains an element of non-array type '{type_name(array)}'",
        )
    if not array:
        return False
    array.pop(0 if leaf.arg == -1 else -1)
    return True


def _pull_existing(leaf: Leaf, ctx: Ctx, at: _At) -> bool:
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


def _bit_existing(leaf: Leaf, ctx: Ctx, at: _At) -> bool:
    current = at.value
    if number_kind(current) not in ("int", "long"):
        raise QueryError(
            "BadValue",
            f"Cannot apply $bit to a value of non-integral type.{ctx.id_text()} has the field "
            f"{at.name} of non-integer type {type_name(current)}",
        )
    result = _bits(current, leaf.arg)
    if _same(result, current):
        return False
    at.set(result)
    return True


_UPDATE_EXISTING: dict[str, Callable[[Leaf, Ctx, _At], bool]] = {
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


def _new_pushed(leaf: Leaf, ctx: Ctx) -> list[Any]:
    array: list[Any] = []
    _push(array, leaf.arg)
    return array


def _new_mul(leaf: Leaf, ctx: Ctx) -> Any:
    # A missing field becomes a zero of the argument's type (and sign, for a double).
    return _arith(leaf.arg, 0, True)


def _now(leaf: Leaf, ctx: Ctx) -> Any:
    if leaf.arg:
        return DatetimeMS(ctx.now_ms)
    # Each timestamp an update records is distinct, as MongoDB reserves one clock tick for each.
    ctx.ticks += 1
    return Timestamp(ctx.now_ms // 1000, ctx.ticks)


_NEW_VALUE: dict[str, Callable[[Leaf, Ctx], Any]] = {
    "$set": lambda leaf, ctx: copy_value(leaf.arg),
    "$setOnInsert": lambda leaf, ctx: copy_value(leaf.arg),
    "$inc": lambda leaf, ctx: leaf.arg,
    "$mul": _new_mul,
    "$min": lambda leaf, ctx: copy_value(leaf.arg),
    "$max": lambda leaf, ctx: copy_value(leaf.arg),
    "$currentDate": _now,
    "$push": _new_pushed,
    "$addToSet": lambda leaf, ctx: [copy_value(v) for v in leaf.arg],
    "$bit": lambda leaf, ctx: _bits(0, leaf.arg),
}


# -- $rename ----------------------------------------------------------------------------------------


def _apply_rename(leaf: Leaf, ctx: Ctx, at: _At) -> None:
    """Move the source's value to this node's path (a $set there, then an $unset of the source)."""
    spec: Rename = leaf.arg
    value: Any = ctx.doc
    parent: Any = ctx.doc
    chain: list[tuple[Any, str]] = []  # the source's ancestors below the root, with their names
    name = ""
    for i, part in enumerate(spec.source):
        if type(value) is dict:
            if part not in value:
                return  # no source: nothing to do
            child = value[part]
        elif type(value) is list and index_of(part) is not None:
            index = index_of(part)
            assert index is not None
            if index >= len(value):
                return
            child = value[index]
        else:
            raise QueryError(
                "PathNotViable",
                f"cannot use the part ({spec.source[i - 1]} of {spec.source_path}) to traverse "
                f"the element ({{{render_element(name, value)}}})",
            )
        if i:
            chain.append((value, name))
        parent, value, name = value, child, part
    _refuse_array_element(chain, "source", spec.source_path, ctx)
    _check_rename_target(leaf, ctx, at)
    moved = value
    if at.create:
        _create(ctx, at, moved)
    elif not equal(at.value, moved):
        at.set(moved)
        _check_immutable(at.taken)
    del parent[name]
    _check_immutable(list(spec.source))


def _check_rename_target(leaf: Leaf, ctx: Ctx, at: _At) -> None:
    """The target may be an array itself, but no element of one."""
    elements: list[tuple[Any, str]] = []
    value: Any = ctx.doc
    for part in at.taken:
        _, value, _ = _child_of(value, part)
        elements.append((value, part))
    if not at.create:
        elements.pop()  # the element the rename overwrites
    _refuse_array_element(elements, "destination", leaf.path, ctx)


def _refuse_array_element(chain: list[tuple[Any, str]], side: str, path: str, ctx: Ctx) -> None:
    """BadValue when one of the values on a $rename `side`'s `path` (with their names, from the
    top down) is an array: that side would be an array element. The deepest array is named."""
    for value, name in reversed(chain):
        if type(value) is list:
            raise QueryError(
                "BadValue",
                f"The {side} field cannot be an array element, '{path}' in doc with "
                f"{ctx.id_text()} has an array field called '{name}'",
            )


# -- replacement ------------------------------------------------------------------------------------


def replace(
    doc: dict[str, Any], replacement: dict[str, Any], now_ms: int, stamp: bool = True
) -> dict[str, Any]:
    """`doc` replaced by `replacement`, keeping its `_id` (ImmutableField if the replacement has
    another); with `stamp`, empty top-level timestamps record `now_ms` as an insert's do."""
    out: dict[str, Any] = {}
    if "_id" in replacement:
        new_id = replacement["_id"]
        if "_id" in doc and not equal(doc["_id"], new_id):
            raise QueryError(
                "ImmutableField",
                "After applying the update, the (immutable) field '_id' was found to have been "
                f"altered to {render_element('_id', new_id)}",
            )
        out["_id"] = copy_value(new_id)
    elif "_id" in doc:
        out["_id"] = copy_value(doc["_id"])
    ticks = 0
    for name, value in replacement.items():
        if name == "_id":
            continue
        if stamp and type(value) is Timestamp and value.time == 0 and value.inc == 0:
            # Like an insert, a replacement's empty top-level timestamps record the current time.
            ticks += 1
            value = Timestamp(now_ms // 1000, ticks)
        out[name] = copy_value(value)
    return out


# -- numbers ----------------------------------------------------------------------------------------


def _to_decimal(value: Any) -> decimal.Decimal:
    kind = number_kind(value)
    if kind == "decimal":
        return value.to_decimal()  # type: ignore[no-any-return]
    if kind == "double":
        if not math.isfinite(value):
            return decimal.Decimal(value)
        # MongoDB converts a double to a decimal rounded to 15 significant digits.
        return decimal.Decimal(f"{value:.14e}")
    return decimal.Decimal(int(value))


def _arith(a: Any, b: Any, multiply: bool) -> Any:
    """a + b or a * b with MongoDB's type rules: an int32 result that overflows widens to a long,
    a long that overflows is None (an error); any double makes a double, any decimal a decimal."""
    if type(a) is int and type(b) is int:  # the common case, without naming the kinds
        n = a * b if multiply else a + b
        if INT32_MIN <= a <= INT32_MAX and INT32_MIN <= b <= INT32_MAX:
            return n if INT32_MIN <= n <= INT32_MAX else Int64(n)
        return Int64(n) if INT64_MIN <= n <= INT64_MAX else None
    ka, kb = number_kind(a), number_kind(b)
    if "decimal" in (ka, kb):
        x, y = _to_decimal(a), _to_decimal(b)
        result = _DECIMAL.multiply(x, y) if multiply else _DECIMAL.add(x, y)
        return Decimal128(result)
    if "double" in (ka, kb):
        return float(a) * float(b) if multiply else float(a) + float(b)
    n = int(a) * int(b) if multiply else int(a) + int(b)
    if ka == kb == "int":
        return n if INT32_MIN <= n <= INT32_MAX else Int64(n)
    return Int64(n) if INT64_MIN <= n <= INT64_MAX else None


def _bits(value: Any, ops: tuple[tuple[str, Any], ...]) -> Any:
    long = number_kind(value) == "long"
    n = int(value)
    for name, operand in ops:
        long = long or number_kind(operand) == "long"
        m = int(operand)
        n = n & m if name == "and" else n | m if name == "or" else n ^ m
    return Int64(n) if long else n


def _debug_number(value: Any) -> str:
    """A number as MongoDB's SafeNum prints one: (NumberLong)9223372036854775807."""
    names = {"int": "NumberInt", "long": "NumberLong", "double": "NumberDouble"}
    kind = number_kind(value)
    if kind == "decimal":
        return f"(NumberDecimal){value}"
    return f"({names.get(kind or '', 'EOO')}){render(value)}"


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
        return bool(a == b) and number_kind(a) == number_kind(b)
    return bool(a == b)
