"""Objects and the rest: $getField, $setField/$unsetField, $bsonSize, $binarySize, $rand, and the
operators this server refuses ($function, $accumulator, $meta, ...)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from typing import Any

import bson

from ebbdb.storage.query.expressions.core import (
    NULL,
    Check,
    Expression,
    Variables,
    as_doc,
    checked,
    compile_expression,
    fail,
    function,
    is_object,
    nullish,
    operator,
    type_name,
    var_path,
)
from ebbdb.storage.query.hashing import hash_value
from ebbdb.storage.query.metadata import check_keyword, text_score
from ebbdb.storage.query.paths import MISSING


def _constant(spec: Any) -> tuple[bool, Any]:
    """Whether an argument parses to a constant (a literal or $literal), and its value."""
    if type(spec) is str:
        return not spec.startswith("$"), spec
    if isinstance(spec, Mapping) and len(spec) == 1:
        key = next(iter(spec))
        if key in ("$literal", "$const"):
            return True, spec[key]
    if isinstance(spec, (Mapping, list)):
        return False, None
    return True, spec


def _field_argument(op: str, spec: Any, codes: tuple[int, int, int]) -> str:
    if type(spec) is str and spec.startswith("$"):
        fail(
            codes[0],
            f"'{spec}' is a field path reference which is not allowed in this context. Did you "
            f"mean {{$literal: '{spec}'}}?",
        )
    is_constant, value = _constant(spec)
    if not is_constant:
        fail(
            codes[1],
            f"{op} requires 'field' to evaluate to a constant, but got a non-constant argument",
        )
    if type(value) is not str:
        fail(
            codes[2],
            f"{op} requires 'field' to evaluate to type String, but got {type_name(value)}",
        )
    return value


@operator("$getField")
def _get_field(spec: Any, defined: frozenset[str], op: str) -> Expression:
    field_spec: Any = MISSING
    input_f: Expression | None = None
    if isinstance(spec, Mapping) and not (spec and next(iter(spec)).startswith("$")):
        # Named arguments, unless the object is itself an expression like {$literal: "a"}.
        for key, sub in spec.items():
            if key == "field":
                field_spec = sub
            elif key == "input":
                input_f = compile_expression(sub, defined)
            else:
                fail(3041701, f"$getField found an unknown argument: {key}")
    else:
        field_spec = spec
    if field_spec is MISSING:
        fail(3041702, "$getField requires 'field' to be specified")
    compile_expression(field_spec, defined)
    field = _field_argument(op, field_spec, (5654600, 5654601, 5654602))
    source = input_f if input_f is not None else var_path("CURRENT", (), defined)

    def get_field(doc: dict[str, Any], v: Variables) -> Any:
        x = source(doc, v)
        if x is MISSING:
            return MISSING
        if nullish(x):
            return None
        d = as_doc(x)
        return MISSING if d is None else d.get(field, MISSING)

    return get_field


# MongoDB names $setField here even for $unsetField.
_SET_FIELD_INPUT = (
    Check(is_object, 4161105, "$setField requires 'input' to evaluate to type Object"),
)


@operator("$setField", "$unsetField")
def _set_field(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        fail(4161100, f"{op} only supports an object as its argument")
    unset = op == "$unsetField"
    parts: dict[str, Any] = {}
    for key, sub in spec.items():
        if key in ("field", "input") or (key == "value" and not unset):
            parts[key] = sub
        else:
            fail(4161101, f"{op} found an unknown argument: {key}")
    if unset:
        parts["value"] = "$$REMOVE"
    if "field" not in parts:
        fail(4161102, f"{op} requires 'field' to be specified")
    if "value" not in parts:
        fail(4161103, f"{op} requires 'value' to be specified")
    if "input" not in parts:
        fail(4161109, f"{op} requires 'input' to be specified")
    compile_expression(parts["field"], defined)
    field = _field_argument(op, parts["field"], (4161108, 4161106, 4161107))
    input_f = compile_expression(parts["input"], defined)
    value_f = compile_expression(parts["value"], defined)

    def set_field(doc: dict[str, Any], v: Variables) -> Any:
        x = checked(op, input_f(doc, v), _SET_FIELD_INPUT)
        if x is NULL:
            return None
        value = value_f(doc, v)
        out = dict(as_doc(x) or {})
        if value is MISSING:
            out.pop(field, None)
        else:
            out[field] = value
        return out

    return set_field


@function(
    "$bsonSize",
    arity=1,
    operands=[(Check(is_object, 31393, "$bsonSize requires a document input, found: {type}"),)],
)
def _bson_size(op: str, x: Any) -> int:
    return len(bson.encode(as_doc(x) or {}))


def _string_or_binary(x: Any) -> bool:
    return type(x) is str or isinstance(x, (bytes, uuid.UUID))


@function(
    "$binarySize",
    arity=1,
    operands=[
        (
            Check(
                _string_or_binary,
                51276,
                "$binarySize requires a string or BinData argument, found: {type}",
            ),
        )
    ],
)
def _binary_size(op: str, x: Any) -> int:
    if type(x) is str:
        return len(x.encode())
    return len(x.bytes if isinstance(x, uuid.UUID) else x)


@operator("$rand")
def _rand(spec: Any, defined: frozenset[str], op: str) -> Expression:
    if not isinstance(spec, Mapping):
        fail(10065, "invalid parameter: expected an object ($rand)")
    if spec:
        fail(3040501, "$rand does not currently accept arguments")
    return lambda doc, v: random.random()


@function("$toHashedIndexKey", arity=1, nulls=False)
def _to_hashed_index_key(op: str, x: Any) -> Any:
    # A hashed index's key for the value (missing and null alike), never collated.
    return hash_value(x)


#: Operators MongoDB has and ebbdb does not run (238 NotImplemented).
UNSUPPORTED: tuple[str, ...] = ()


@operator("$meta")
def _meta(spec: Any, defined: frozenset[str], op: str) -> Expression:
    """{$meta: "textScore"}: the score a $text gave the document (40218 for a document that has
    none); MongoDB's other keywords are refused when parsed."""
    check_keyword(spec)
    return lambda doc, v: text_score(doc)


@operator(*UNSUPPORTED)
def _unsupported(spec: Any, defined: frozenset[str], op: str) -> Expression:
    fail("NotImplemented", f"{op} is not supported")
