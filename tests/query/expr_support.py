"""Helpers the expression tests share: evaluate a spec against a document, and compare results with
their BSON types (an int32 1 is not a NumberLong 1 nor a double 1.0 here)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from bson import Decimal128, Int64

from storage.query.expressions import Variables, compile_expression

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


def raises(spec: Any, doc: Doc | None = None) -> tuple[str, str]:
    """(codeName, message) of the QueryError evaluating `spec` over `doc` raises (compiling
    included); fails the test if none is raised."""
    import pytest

    from storage.errors import QueryError

    with pytest.raises(QueryError) as info:
        run(spec, doc)
    return info.value.code_name, info.value.message
