"""Arrays: $size, $arrayElemAt/$first/$last, $in, $indexOfArray, $concatArrays, $isArray,
$reverseArray, $slice, $range, $arrayToObject/$objectToArray, and the ones that bind a variable or
take named arguments: $map, $filter, $reduce, $sortArray and $zip."""

from __future__ import annotations

import functools
import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bson.int64 import Int64

from ebbdb.storage.core import interrupt, limits
from ebbdb.storage.core.footprint import LIST_SLOT
from ebbdb.storage.core.values import is_number, to_float
from ebbdb.storage.query.compare import compare
from ebbdb.storage.query.expressions import budget
from ebbdb.storage.query.expressions.coerce import coerce_int, integral
from ebbdb.storage.query.expressions.core import (
    NULL,
    NUMBER_TYPES,
    Check,
    Expression,
    Variables,
    as_doc,
    check,
    check_variable_name,
    checked,
    cmp,
    compile_expression,
    fail,
    function,
    is_object,
    named_args,
    nullish,
    operator,
    optional,
    ranged,
    require,
    show,
    truthy,
    type_name,
)
from ebbdb.storage.query.expressions.strings import index_bound
from ebbdb.storage.query.paths import MISSING
from ebbdb.storage.query.sort import parse_sort, sort_documents


@function(
    "$size",
    arity=1,
    nulls=False,
    operands=[
        (
            Check.typed(
                (list,), 17124, "The argument to $size must be an array, but was of type: {type}"
            ),
        )
    ],
)
def _size(op: str, x: list[Any]) -> int:
    return len(x)


def _element(array: list[Any], i: int) -> Any:
    if i < 0:
        i += len(array)
    return array[i] if 0 <= i < len(array) else MISSING


@function(
    "$arrayElemAt",
    arity=2,
    operands=[
        (Check.typed((list,), 28689, "{op}'s first argument must be an array, but is {type}"),),
        (
            Check.typed(
                NUMBER_TYPES, 28690, "{op}'s second argument must be a numeric value, but is {type}"
            ),
            Check(
                integral,
                28691,
                "{op}'s second argument must be representable as a 32-bit integer: {double}",
            ),
        ),
    ],
)
def _array_elem_at(op: str, array: list[Any], index: Any) -> Any:
    return _element(array, coerce_int(index))


@function(
    "$first",
    "$last",
    arity=1,
    operands=[(Check.typed((list,), 28689, "{op}'s argument must be an array, but is {type}"),)],
)
def _first_last(op: str, array: list[Any]) -> Any:
    return _element(array, 0 if op == "$first" else -1)


@function(
    "$in",
    arity=2,
    nulls=False,
    operands=[
        (),
        (Check.typed((list,), 40081, "$in requires an array as a second argument, found: {type}"),),
    ],
)
def _in(op: str, x: Any, array: list[Any]) -> bool:
    tick = interrupt.current.get().tick
    for e in array:
        tick()
        if cmp(x, e) == 0:
            return True
    return False


_INDEX_ARRAY = (
    Check.typed(
        (list,), 40090, "$indexOfArray requires an array as a first argument, found: {type}"
    ),
)


@operator("$indexOfArray")
def _index_of_array(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = ranged(spec, defined, op, 2, 4)

    def index_of(doc: dict[str, Any], v: Variables) -> Any:
        array = checked(op, args[0](doc, v), _INDEX_ARRAY)
        if array is NULL:
            return None
        start = index_bound(op, args[2](doc, v), "starting index") if len(args) > 2 else 0
        end = len(array)
        if len(args) > 3:
            end = min(end, index_bound(op, args[3](doc, v), "ending index"))
        target = args[1](doc, v)
        tick = interrupt.current.get().tick
        for i in range(start, end):
            tick()
            if cmp(array[i], target) == 0:
                return i
        return -1

    return index_of


@function(
    "$concatArrays",
    arity=None,
    operands=[(Check.typed((list,), 28664, "$concatArrays only supports arrays, not {type}"),)],
)
def _concat_arrays(op: str, arrays: list[list[Any]]) -> list[Any]:
    limits.check_array_length(op, sum(map(len, arrays)))
    out: list[Any] = []
    for a in arrays:
        budget.copy(out, a)
    return out


@function("$isArray", arity=1, nulls=False)
def _is_array(op: str, x: Any) -> bool:
    return type(x) is list


@function(
    "$reverseArray",
    arity=1,
    operands=[
        (
            Check.typed(
                (list,),
                34435,
                "The argument to $reverseArray must be an array, but was of type: {type}",
            ),
        )
    ],
)
def _reverse_array(op: str, x: list[Any]) -> list[Any]:
    if len(x) <= budget.PASS:
        return x[::-1]
    out: list[Any] = []
    check = interrupt.current.get().check
    for end in range(len(x), 0, -budget.PASS):
        check()
        out.extend(x[max(0, end - budget.PASS) : end][::-1])
    return out


_SLICE_ARRAY = (
    Check.typed(
        (list,), 28724, "First argument to $slice must be an array, but is of type: {type}"
    ),
)
_SLICE_SECOND = (
    Check.typed(
        NUMBER_TYPES,
        28725,
        "Second argument to $slice must be a numeric value, but is of type: {type}",
    ),
    Check(
        integral,
        28726,
        "Second argument to $slice can't be represented as a 32-bit integer: {double}",
    ),
)
_SLICE_THIRD = (
    Check.typed(
        NUMBER_TYPES, 28727, "Third argument to $slice must be numeric, but is of type: {type}"
    ),
    Check(
        integral,
        28728,
        "Third argument to $slice can't be represented as a 32-bit integer: {double}",
    ),
)


@operator("$slice")
def _slice(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = ranged(spec, defined, op, 2, 3)

    def slice_(doc: dict[str, Any], v: Variables) -> Any:
        array, second = args[0](doc, v), args[1](doc, v)
        if nullish(array) or nullish(second):
            return None
        check(op, array, _SLICE_ARRAY)
        check(op, second, _SLICE_SECOND)
        n = len(array)
        if len(args) == 2:
            count = coerce_int(second)
            return array[:count] if count >= 0 else array[max(0, n + count) :]
        position = coerce_int(second)
        start = max(0, n + position) if position < 0 else min(n, position)
        # The count is evaluated only when the array and position are good.
        third = args[2](doc, v)
        if nullish(third):
            return None
        check(op, third, _SLICE_THIRD)
        count = coerce_int(third)
        if count <= 0:
            fail(28729, f"Third argument to $slice must be positive: {count}")
        return array[start : start + count]

    return slice_


# internalQueryMaxRangeBytes, and an estimate of MongoDB's per-element size.
_RANGE_MEMORY_LIMIT = 104857600
_RANGE_ELEMENT_BYTES = 16
#: What CPython holds for an int past the small ones it caches.
_INT_BYTES = 28


def _range_bound(code: int, what: str, article: str) -> tuple[Check, ...]:
    return (
        Check.typed(
            NUMBER_TYPES,
            code,
            f"$range requires a numeric {what} value, found value of type: {{type}}",
        ),
        Check(
            integral,
            code + 1,
            f"$range requires {article} {what} value that can be represented as a 32-bit integer, "
            "found value: {value}",
        ),
    )


_RANGE_START = _range_bound(34443, "starting", "a")
_RANGE_END = _range_bound(34445, "ending", "an")
# MongoDB's message for a step of the wrong type lacks the space after the colon.
_RANGE_STEP = (
    Check.typed(
        NUMBER_TYPES, 34447, "$range requires a numeric step value, found value of type:{type}"
    ),
    _range_bound(34447, "step", "a")[1],
)


@operator("$range")
def _range(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = ranged(spec, defined, op, 2, 3)

    def range_(doc: dict[str, Any], v: Variables) -> Any:
        start, end = args[0](doc, v), args[1](doc, v)
        check(op, start, _RANGE_START)
        check(op, end, _RANGE_END)
        step = 1
        if len(args) == 3:
            step_v = args[2](doc, v)
            check(op, step_v, _RANGE_STEP)
            step = coerce_int(step_v)
            if step == 0:
                fail(34449, "$range requires a non-zero step value")
        first, last = coerce_int(start), coerce_int(end)
        length = len(range(first, last, step))
        memory = 24 + length * _RANGE_ELEMENT_BYTES
        if memory >= _RANGE_MEMORY_LIMIT:
            fail(
                "ExceededMemoryLimit",
                f"$range would use too much memory ({memory} bytes) and cannot spill to disk. "
                f"Memory limit: {_RANGE_MEMORY_LIMIT} bytes",
            )
        # What CPython will hold, charged before it is built: a slot and an int per element.
        budget.charge_up_front(op, 56 + length * (LIST_SLOT + _INT_BYTES))
        numbers = range(first, last, step)
        if length <= budget.PASS:
            return list(numbers)
        out: list[int] = []
        interrupted = interrupt.current.get().check
        for i in range(0, length, budget.PASS):
            interrupted()
            out.extend(numbers[i : i + budget.PASS])
        return out

    return range_


# -- arrays and objects ----------------------------------------------------------------------------


def _pair_key(element: Any, pairs: bool) -> tuple[str, Any]:
    """One element of $arrayToObject's input: a [key, value] array or a {k, v} object, as the
    first element decided."""
    if pairs:
        if type(element) is not list:
            fail(
                40396,
                "$arrayToObject requires a consistent input format. Elements mustall be arrays or "
                f"all be objects. Array was detected, now found: {type_name(element)}",
            )
        if len(element) != 2:
            fail(
                40397,
                "$arrayToObject requires an array of size 2 arrays,found array of size: "
                f"{len(element)}",
            )
        key, value = element
        if type(key) is not str:
            fail(
                40395,
                "$arrayToObject requires an array of key-value pairs, where the key must be of "
                f"type string. Found key type: {type_name(key)}",
            )
        if "\0" in key:
            fail(4940400, "Key field cannot contain an embedded null byte")
        return key, value
    if not is_object(element):
        fail(
            40391,
            "$arrayToObject requires a consistent input format. Elements mustall be arrays or "
            f"all be objects. Object was detected, now found: {type_name(element)}",
        )
    pair = as_doc(element) or {}
    if len(pair) != 2:
        fail(
            40392,
            "$arrayToObject requires an object keys of 'k' and 'v'. Found incorrect number of "
            f"keys:{len(pair)}",
        )
    if "k" not in pair or "v" not in pair:
        fail(
            40393,
            "$arrayToObject requires an object with keys 'k' and 'v'. Missing either or both "
            f"keys from: {show(pair)}",
        )
    key, value = pair["k"], pair["v"]
    if type(key) is not str:
        fail(
            40394,
            "$arrayToObject requires an object with keys 'k' and 'v', where the value of 'k' "
            f"must be of type string. Found type: {type_name(key)}",
        )
    if "\0" in key:
        fail(4940401, "Key field cannot contain an embedded null byte")
    return key, value


@function(
    "$arrayToObject",
    arity=1,
    operands=[
        (Check.typed((list,), 40386, "$arrayToObject requires an array input, found: {type}"),)
    ],
)
def _array_to_object(op: str, x: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not x:
        return out
    if type(x[0]) is list:
        pairs = True
    elif is_object(x[0]):
        pairs = False
    else:
        fail(40398, f"Unrecognised input type format for $arrayToObject: {type_name(x[0])}")
    tick = interrupt.current.get().tick
    for element in x:
        tick()
        key, value = _pair_key(element, pairs)
        out[key] = value  # a repeated key keeps its first place and its last value
    return out


@function(
    "$objectToArray",
    arity=1,
    operands=[
        (Check(is_object, 40390, "$objectToArray requires a document input, found: {type}"),)
    ],
)
def _object_to_array(op: str, x: Any) -> list[dict[str, Any]]:
    out = []
    tick = interrupt.current.get().tick
    for k, value in (as_doc(x) or {}).items():
        tick()
        out.append({"k": k, "v": value})
    return out


# -- with a variable or named arguments ------------------------------------------------------------


@dataclass(frozen=True)
class _Iteration:
    """$map's and $filter's arguments: the input array, the variable `as` names ("this" when
    absent) and the expression evaluated for each element with the variable bound to it."""

    args: dict[str, Any]
    input: Expression
    name: str
    body: Expression

    @classmethod
    def parse(
        cls,
        spec: Any,
        defined: frozenset[str],
        op: str,
        names: tuple[str, ...],
        codes: tuple[int, ...],
    ) -> _Iteration:
        """`names` are the arguments, the body's third; MongoDB's codes, in order: not an
        object, unknown argument, no input, no body."""
        body = names[2]
        args = named_args(
            spec,
            names,
            (codes[0], f"{op} only supports an object as its argument"),
            (codes[1], f"Unrecognized parameter to {op}: {{key}}"),
        )
        require(args, op, {"input": codes[2], body: codes[3]})
        input_f = compile_expression(args["input"], defined)
        name = args.get("as", "this")
        name = name if type(name) is str else ""
        check_variable_name(name, write=True)
        return cls(args, input_f, name, compile_expression(args[body], defined | {name}))

    def elements(
        self, op: str, operand: tuple[Check, ...], doc: dict[str, Any], v: Variables
    ) -> Any:
        """The input array, checked (NULL for a nullish one)."""
        return checked(op, self.input(doc, v), operand)


_MAP_INPUT = (Check.typed((list,), 16883, "input to $map must be an array not {type}"),)


@operator("$map")
def _map(spec: Any, defined: frozenset[str], op: str) -> Expression:
    it = _Iteration.parse(spec, defined, op, ("input", "as", "in"), (16878, 16879, 16880, 16882))

    def map_(doc: dict[str, Any], v: Variables) -> Any:
        x = it.elements(op, _MAP_INPUT, doc, v)
        if x is NULL:
            return None
        scope = dict(v)
        out: list[Any] = []
        for element in budget.building(op, x, out):
            scope[it.name] = element
            y = it.body(doc, scope)
            out.append(None if y is MISSING else y)
        return out

    return map_


_FILTER_INPUT = (Check.typed((list,), 28651, "input to $filter must be an array not {type}"),)


@operator("$filter")
def _filter(spec: Any, defined: frozenset[str], op: str) -> Expression:
    it = _Iteration.parse(
        spec, defined, op, ("input", "as", "cond", "limit"), (28646, 28647, 28648, 28650)
    )
    limit_f = optional(it.args, "limit", defined)

    def filter_(doc: dict[str, Any], v: Variables) -> Any:
        x = it.elements(op, _FILTER_INPUT, doc, v)
        if x is NULL:
            return None
        if not x:
            return x
        remaining = -1
        if limit_f is not None:
            limit = limit_f(doc, v)
            if not nullish(limit):  # limit: null means no limit
                if not integral(limit):
                    fail(
                        327391,
                        "$filter: limit must be represented as a 32-bit integral value: "
                        f"{show(limit)}",
                    )
                remaining = coerce_int(limit)
                if remaining <= 0:
                    fail(327392, f"$filter: limit must be greater than 0: {show(limit)}")
        scope = dict(v)
        out: list[Any] = []
        for element in budget.building(op, x, out):
            scope[it.name] = element
            if truthy(it.body(doc, scope)):
                out.append(element)
                remaining -= 1
                if remaining == 0:
                    return out
        return out

    return filter_


_REDUCE_INPUT = (
    Check.typed((list,), 40080, "$reduce requires that 'input' be an array, found: {value}"),
)


@operator("$reduce")
def _reduce(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        fail(40075, f"$reduce requires an object as an argument, found: {type_name(spec)}")
    parts: dict[str, Expression] = {}
    for key, sub in spec.items():
        if key in ("input", "initialValue"):
            parts[key] = compile_expression(sub, defined)
        elif key == "in":
            parts[key] = compile_expression(sub, defined | {"this", "value"})
        else:
            fail(40076, f"$reduce found an unknown argument: {key}")
    for key, code in (("input", 40077), ("initialValue", 40078), ("in", 40079)):
        if key not in parts:
            fail(code, f"$reduce requires '{key}' to be specified")
    input_f, initial_f, in_f = parts["input"], parts["initialValue"], parts["in"]

    def reduce_(doc: dict[str, Any], v: Variables) -> Any:
        x = checked(op, input_f(doc, v), _REDUCE_INPUT)
        if x is NULL:
            return None
        acc = initial_f(doc, v)
        scope = dict(v)
        tick = interrupt.current.get().tick
        held = budget.SCOPE.get()
        if held is None:
            for element in x:
                tick()
                scope["this"] = element
                scope["value"] = acc
                acc = in_f(doc, scope)
            return acc
        mark = held.held
        for element in x:
            tick()
            scope["this"] = element
            scope["value"] = acc
            before = held.held
            acc = in_f(doc, scope)
            if held.held != before:
                # What this step built replaces what the step before built (its value).
                held.settle(op, mark, held.held - before)
        return acc

    return reduce_


SORT_CLAUSE_MESSAGE = "$sort key ordering must be 1 (for ascending) or -1 (for descending)"
_SORT_INPUT = (
    Check.typed(
        (list,),
        2942504,
        "The input argument to $sortArray must be an array, but was of type: {type}",
    ),
)


def sort_direction(d: Any) -> int | None:
    """A sort direction (1 or -1, of any numeric type), None for anything else."""
    if not is_number(d):
        return None
    f = to_float(d)
    return int(f) if f in (1.0, -1.0) else None


#: Numbers that Python orders as BSON does (NaN aside, which the caller leaves out).
_PLAIN_NUMBERS = frozenset({int, float, Int64})
#: How many numbers one C sort takes at most (about 10 ms holding the interpreter).
_NUMBER_RUN = 65536


def _sorted_numbers(x: list[Any], reverse: bool, tick: Any) -> list[Any]:
    """An array of plain numbers sorted as BSON orders them, stably: Python's own order, with no
    key object per element (a sort of stored arrays made a wrapper for each, and the collections
    of them walked the whole heap, pausing every client for tens of ms). Past one run, runs sorted
    in C are merged, a tick per element: the interpreter is never held for long."""
    if len(x) <= _NUMBER_RUN:
        return sorted(x, reverse=reverse)
    runs = []
    for start in range(0, len(x), _NUMBER_RUN):
        tick()
        runs.append(sorted(x[start : start + _NUMBER_RUN], reverse=reverse))
    out = []
    for value in heapq.merge(*runs, reverse=reverse):
        tick()
        out.append(value)
    return out


@operator("$sortArray")
def _sort_array(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        fail(2942500, f"$sortArray requires an object as an argument, found: {type_name(spec)}")
    input_f: Expression | None = None
    sort_by: Any = spec.get("sortBy", MISSING)
    for key, sub in spec.items():
        # The input compiles as it comes, before a later unknown argument fails.
        if key not in ("input", "sortBy"):
            fail(2942501, f"$sortArray found an unknown argument: {key}")
        if key == "input":
            input_f = compile_expression(sub, defined)
    if input_f is None:
        fail(2942502, "$sortArray requires 'input' to be specified")
    if sort_by is MISSING:
        fail(2942503, "$sortArray requires 'sortBy' to be specified")
    direction = 0
    pattern = None
    if isinstance(sort_by, Mapping):
        directions = {k: sort_direction(d) for k, d in sort_by.items()}
        if not directions or None in directions.values():
            fail(2942505, SORT_CLAUSE_MESSAGE)
        pattern = parse_sort(directions)
    elif is_number(sort_by):
        if sort_direction(sort_by) is None:
            fail(2942506, "The $sort element value must be either 1 or -1")
        direction = int(to_float(sort_by))
    else:
        fail(
            2942507,
            "The $sort is invalid: use 1/-1 to sort the whole element, or {field:1/-1} to sort "
            "embedded fields",
        )
    array_f = input_f

    def sort_array(doc: dict[str, Any], v: Variables) -> Any:
        x = checked(op, array_f(doc, v), _SORT_INPUT)
        if x is NULL:
            return None
        if len(x) < 2:
            return x
        if pattern is None:
            tick = interrupt.current.get().tick
            if all(type(e) in _PLAIN_NUMBERS and e == e for e in x):
                return _sorted_numbers(x, direction < 0, tick)

            def ticking(a: Any, b: Any) -> int:
                tick()
                return compare(a, b)

            return sorted(x, key=functools.cmp_to_key(ticking), reverse=direction < 0)
        return sort_documents([(as_doc(e) or {}, e) for e in x], pattern)

    return sort_array


def _expressions(key: str, sub: Any, code: int, defined: frozenset[str]) -> list[Expression]:
    if type(sub) is not list:
        fail(code, f"{key} must be an array of expressions, found {type_name(sub)}")
    return [compile_expression(s, defined) for s in sub]


_ZIP_INPUT = (Check.typed((list,), 34468, "$zip found a non-array expression in input: {value}"),)


# $zip's arguments that are arrays of expressions, and the code for one that is not an array.
_ZIP_LISTS = {"inputs": 34461, "defaults": 34462}


@operator("$zip")
def _zip(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        fail(34460, f"$zip only supports an object as an argument, found {type_name(spec)}")
    lists: dict[str, list[Expression]] = {}
    longest = False
    for key, sub in spec.items():
        if key in _ZIP_LISTS:
            lists[key] = _expressions(key, sub, _ZIP_LISTS[key], defined)
        elif key != "useLongestLength":
            fail(34464, f"$zip found an unknown argument: {key}")
        elif type(sub) is not bool:
            fail(34463, "useLongestLength must be a bool, found object")
        else:
            longest = sub
    inputs, defaults = lists.get("inputs", []), lists.get("defaults", [])
    if not inputs:
        fail(34465, "$zip requires at least one input array")
    if defaults and not longest:
        fail(34466, "cannot specify defaults unless useLongestLength is true")
    if defaults and len(defaults) != len(inputs):
        fail(34467, "defaults and inputs must have the same length")

    def zip_(doc: dict[str, Any], v: Variables) -> Any:
        arrays = []
        for f in inputs:
            x = checked(op, f(doc, v), _ZIP_INPUT)
            if x is NULL:
                return None
            arrays.append(x)
        sizes = [len(a) for a in arrays]
        fill: list[Any] = [None] * len(arrays)
        if min(sizes) != max(sizes) and defaults:
            fill = [f(doc, v) for f in defaults]
        length = max(sizes) if longest else min(sizes)
        tick = interrupt.current.get().tick
        out: list[Any] = []
        built = budget.Built(op, out) if length > budget.CHUNK else None
        for row in range(length):
            tick()
            out.append([a[row] if row < len(a) else fill[col] for col, a in enumerate(arrays)])
            if built is not None and len(out) % budget.CHUNK == 0:
                built.measure()
        return out

    return zip_
