"""Helpers the expression tests share: evaluate a spec against a document, compare results with
their BSON types (an int32 1 is not a NumberLong 1 nor a double 1.0 here), and the error-table
test each expression module runs over a document of its own."""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from bson import Decimal128, Int64

from ebbdb.storage.query.expressions import Variables, compile_expression
from tests import helpers
from tests.helpers import query_error

Doc = dict[str, Any]


def run(spec: Any, doc: Doc | None = None, variables: Variables | None = None) -> Any:
    variables = dict(variables or {})
    expr = compile_expression(spec, frozenset(variables))
    return expr(doc if doc is not None else {}, variables)


def typed(value: Any) -> Any:
    """A value with each number tagged by its BSON type, for exact comparisons."""
    t = type(value)
    if t is bool:
        return ("bool", value)
    if t is int:
        return ("int" if -(2**31) <= value < 2**31 else "long", value)
    if t is Int64:
        return ("long", int(value))
    if t is float:
        return ("double", "nan" if math.isnan(value) else value, math.copysign(1.0, value))
    if t is Decimal128:
        return ("decimal", str(value))
    if isinstance(value, Mapping):
        return ("object", [(k, typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("array", [typed(v) for v in value])
    return (t.__name__, value)


def exact(value: Any) -> Any:
    """A number with its BSON type, for comparisons where NaN equals NaN and a zero keeps its sign
    (-0.0 is not 0.0); a decimal compares by value (1 equals 1.000), so that a result is pinned
    without pinning how many trailing zeros the Intel library gives it."""
    t = type(value)
    if t is float:
        return (
            ("double", "nan") if math.isnan(value) else ("double", value, math.copysign(1, value))
        )
    if t is Decimal128:
        d: decimal.Decimal = value.to_decimal()
        return ("decimal", "nan") if d.is_nan() else ("decimal", d, d.is_signed())
    return typed(value)


def raises(spec: Any, doc: Doc | None = None) -> tuple[str, str]:
    """(codeName, message) of the QueryError evaluating `spec` over `doc` raises (compiling
    included); fails the test if none is raised."""
    return query_error(run, spec, doc)


def errors_test(table: Sequence[tuple[str, Any, str, str]], doc: Doc) -> Callable[..., None]:
    """The test over a module's table of errors, rows (id, spec, codeName, message): evaluating
    each spec over `doc` raises exactly that codeName and message (see tests.helpers.errors_test).
    A module runs it by naming it `test_errors`."""
    return helpers.errors_test(lambda spec: run(spec, doc), table)
