"""Literals, variables and control: $literal, $let, $cond, $ifNull, $switch, the boolean operators
and the comparisons."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from ebbdb.storage.query.expressions.core import (
    Expression,
    Variables,
    arguments,
    check_variable_name,
    cmp,
    compile_expression,
    const,
    fail,
    fixed,
    function,
    named_args,
    nullish,
    operator,
    require,
    truthy,
    type_name,
)
from ebbdb.storage.query.paths import MISSING


@operator("$literal", "$const")
def _literal(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if isinstance(spec, (dict, list)):
        return lambda doc, v: copy.deepcopy(spec)
    return const(spec)


@operator("$let")
def _let(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = named_args(
        spec,
        ("vars", "in"),
        (16874, "$let only supports an object as its argument"),
        (16875, "Unrecognized parameter to $let: {key}"),
    )
    require(args, op, {"vars": 16876, "in": 16877})
    vars_spec = args["vars"]
    if not isinstance(vars_spec, Mapping):
        fail(10065, "invalid parameter: expected an object (vars)")
    bound = [(name, compile_expression(sub, defined)) for name, sub in vars_spec.items()]
    for name, _ in bound:
        check_variable_name(name, write=True)
    inner = compile_expression(args["in"], defined | {name for name, _ in bound})

    def let(doc: dict[str, Any], v: Variables) -> Any:
        scope = dict(v)
        for name, f in bound:
            scope[name] = f(doc, v)  # each sees only the outer scope
        return inner(doc, scope)

    return let


@operator("$cond")
def _cond(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if isinstance(spec, Mapping):
        parts: dict[str, Expression] = {}
        for key, sub in spec.items():
            if key not in ("if", "then", "else"):
                fail(17083, f"Unrecognized parameter to $cond: {key}")
            parts[key] = compile_expression(sub, defined)
        for key, code in (("if", 17080), ("then", 17081), ("else", 17082)):
            if key not in parts:
                fail(code, f"Missing '{key}' parameter to $cond")
        test, then, other = parts["if"], parts["then"], parts["else"]
    else:
        test, then, other = fixed(spec, defined, op, 3)
    return lambda doc, v: then(doc, v) if truthy(test(doc, v)) else other(doc, v)


@operator("$ifNull")
def _if_null(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = arguments(spec, defined)
    if len(args) < 2:
        fail(1257300, f"$ifNull needs at least two arguments, had: {len(args)}")
    last = len(args) - 1

    def if_null(doc: dict[str, Any], v: Variables) -> Any:
        x: Any = MISSING
        for i, f in enumerate(args):
            x = f(doc, v)
            if not nullish(x) or i == last:
                return x
        return x

    return if_null


def _branch(branch: Any, defined: frozenset[str]) -> tuple[Expression, Expression]:
    if not isinstance(branch, Mapping):
        fail(40062, f"$switch expected each branch to be an object, found: {type_name(branch)}")
    case = then = None
    for key, sub in branch.items():
        if key == "case":
            case = compile_expression(sub, defined)
        elif key == "then":
            then = compile_expression(sub, defined)
        else:
            fail(40063, f"$switch found an unknown argument to a branch: {key}")
    if case is None:
        fail(40064, "$switch requires each branch have a 'case' expression")
    if then is None:
        fail(40065, "$switch requires each branch have a 'then' expression.")
    return case, then


@operator("$switch")
def _switch(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        fail(40060, f"$switch requires an object as an argument, found: {type_name(spec)}")
    branches: list[tuple[Expression, Expression]] = []
    default: Expression | None = None
    for key, sub in spec.items():
        if key == "branches":
            if type(sub) is not list:
                fail(40061, f"$switch expected an array for 'branches', found: {type_name(sub)}")
            branches.extend(_branch(branch, defined) for branch in sub)
        elif key == "default":
            default = compile_expression(sub, defined)
        else:
            fail(40067, f"$switch found an unknown argument: {key}")
    if not branches:
        fail(40068, "$switch requires at least one branch.")

    def switch(doc: dict[str, Any], v: Variables) -> Any:
        for case, then in branches:
            if truthy(case(doc, v)):
                return then(doc, v)
        if default is None:
            fail(
                40066,
                "$switch could not find a matching branch for an input, and no default was "
                "specified.",
            )
        return default(doc, v)

    return switch


# -- boolean and comparison ------------------------------------------------------------------------


@operator("$and")
def _and(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = arguments(spec, defined)
    return lambda doc, v: all(truthy(f(doc, v)) for f in args)


@operator("$or")
def _or(spec: Any, defined: frozenset[str], op: str) -> Expression:
    args = arguments(spec, defined)
    return lambda doc, v: any(truthy(f(doc, v)) for f in args)


@function("$not", arity=1, nulls=False)
def _not(op: str, x: Any) -> bool:
    return not truthy(x)


def _sign(c: int) -> int:
    return (c > 0) - (c < 0)


_COMPARISONS: dict[str, Callable[[int], Any]] = {
    "$eq": lambda c: c == 0,
    "$ne": lambda c: c != 0,
    "$gt": lambda c: c > 0,
    "$gte": lambda c: c >= 0,
    "$lt": lambda c: c < 0,
    "$lte": lambda c: c <= 0,
    "$cmp": _sign,
}


@function(*_COMPARISONS, arity=2, nulls=False)
def _comparison(op: str, a: Any, b: Any) -> Any:
    return _COMPARISONS[op](cmp(a, b))
