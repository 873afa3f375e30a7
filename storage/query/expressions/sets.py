"""Set expressions over arrays (distinct values by BSON equality): $setUnion, $setIntersection,
$setDifference, $setEquals, $setIsSubset, $anyElementTrue and $allElementsTrue."""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable
from typing import Any

from ebbdb.storage.core import interrupt
from ebbdb.storage.query.compare import SortKey, compare
from ebbdb.storage.query.expressions.core import (
    Check,
    Expression,
    arguments,
    evaluator,
    fail,
    function,
    operator,
    truthy,
)


def _unique_sorted(values: Iterable[Any]) -> list[Any]:
    """MongoDB's ordered ValueSet: the distinct values (by BSON equality) in BSON order."""
    tick = interrupt.current.get().tick

    def ticking(a: Any, b: Any) -> int:
        tick()
        return compare(a, b)

    ordered = sorted(values, key=functools.cmp_to_key(ticking))
    out: list[Any] = []
    for x in ordered:
        tick()
        if not out or compare(out[-1], x) != 0:
            out.append(x)
    return out


def _member(sorted_keys: list[SortKey], value: Any) -> bool:
    key = SortKey(value)
    i = bisect.bisect_left(sorted_keys, key)
    return i < len(sorted_keys) and compare(sorted_keys[i].value, value) == 0


def _all_arrays(code: int) -> Check:
    return Check.typed(
        (list,), code, "All operands of {op} must be arrays. One argument is of type: {type}"
    )


@function("$setUnion", arity=None, operands=[(_all_arrays(17043),)])
def _set_union(op: str, arrays: list[list[Any]]) -> list[Any]:
    return _unique_sorted(e for a in arrays for e in a)


@function("$setIntersection", arity=None, operands=[(_all_arrays(17047),)])
def _set_intersection(op: str, arrays: list[list[Any]]) -> list[Any]:
    if not arrays:
        return []
    result = _unique_sorted(arrays[0])
    for array in arrays[1:]:
        keys = [SortKey(e) for e in _unique_sorted(array)]
        result = [e for e in result if _member(keys, e)]
    return result


def _both_arrays(code: int, which: str) -> Check:
    return Check.typed(
        (list,),
        code,
        f"both operands of {{op}} must be arrays. {which} argument is of type: {{type}}",
    )


@function(
    "$setDifference",
    arity=2,
    operands=[(_both_arrays(17048, "First"),), (_both_arrays(17049, "Second"),)],
)
def _set_difference(op: str, a: list[Any], b: list[Any]) -> list[Any]:
    seen = [SortKey(e) for e in _unique_sorted(b)]
    out = []
    tick = interrupt.current.get().tick
    for e in a:
        tick()
        if not _member(seen, e):
            out.append(e)
            bisect.insort(seen, SortKey(e))
    return out


_SET_EQUALS_OPERAND = (
    Check.typed(
        (list,),
        17044,
        "All operands of $setEquals must be arrays. {index}-th argument is of type: {type}",
    ),
)


@operator("$setEquals")
def _set_equals(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = arguments(spec, defined)
    if len(args) < 2:
        fail(17045, f"$setEquals needs at least two arguments had: {len(args)}")
    return evaluator(op, args, _equal_sets, [_SET_EQUALS_OPERAND], nulls=False, variadic=True)


def _equal_sets(op: str, arrays: list[list[Any]]) -> bool:
    sets = [_unique_sorted(a) for a in arrays]
    first = sets[0]
    return all(
        len(s) == len(first) and all(compare(a, b) == 0 for a, b in zip(s, first)) for s in sets[1:]
    )


@function(
    "$setIsSubset",
    arity=2,
    nulls=False,
    operands=[(_both_arrays(17046, "First"),), (_both_arrays(17042, "Second"),)],
)
def _set_is_subset(op: str, a: list[Any], b: list[Any]) -> bool:
    keys = [SortKey(e) for e in _unique_sorted(b)]
    return all(_member(keys, e) for e in a)


def _element_truth(code: int) -> Check:
    return Check.typed((list,), code, "{op}'s argument must be an array, but is {type}")


@function("$anyElementTrue", arity=1, nulls=False, operands=[(_element_truth(17041),)])
def _any_element_true(op: str, x: list[Any]) -> bool:
    return any(truthy(e) for e in x)


@function("$allElementsTrue", arity=1, nulls=False, operands=[(_element_truth(17040),)])
def _all_elements_true(op: str, x: list[Any]) -> bool:
    return all(truthy(e) for e in x)
