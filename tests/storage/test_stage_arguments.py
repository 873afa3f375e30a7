"""The stages' one extractor (storage/aggregate/arguments.py): MongoDB's IDL errors by default, a
stage's own where it declares them, fields read in the order given, then the required ones."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Decimal128

from ebbdb.storage.aggregate.arguments import Arguments, Kind, Refusal, arg, extract
from ebbdb.storage.core.errors import QueryError


class _Inner(Arguments):
    flag: bool = arg("flag", Kind.BOOL, False)


class _Idl(Arguments):
    name: str = arg("name", Kind.STRING, required=True)
    names: list[str] = arg("names", Kind.ARRAY, items=Kind.STRING)
    step: Any = arg("step", null_is_missing=True)
    inner: _Inner | None = arg("inner", Kind.OBJECT, of=_Inner)
    scale: int = arg("scale", Kind.INT, 1, parse=lambda value, _: value * 10)


class _Own(
    Arguments,
    not_document=Refusal(40240, "the spec is {type}"),
    unknown=Refusal(40245, "Unrecognized option to $s: {name}"),
    missing=Refusal(40246, "$s requires 'n' to be specified"),
):
    n: int = arg("n", Kind.NUMBER, required=True, mismatch=Refusal(40241, "n is {type}"))


class _Lenient(Arguments, lenient=True):
    n: Any = arg("n")


ERRORS = [
    (_Idl, 5, "TypeMismatch", "BSON field '$s' is the wrong type 'int', expected type 'object'"),
    (_Idl, {"name": "a", "x": 1}, "Location40415", "BSON field '$s.x' is an unknown field."),
    (_Idl, {}, "Location40414", "BSON field '$s.name' is missing but a required field"),
    (
        _Idl,
        {"name": 1},
        "TypeMismatch",
        "BSON field '$s.name' is the wrong type 'int', expected type 'string'",
    ),
    (
        _Idl,
        {"names": ["a", 2]},
        "TypeMismatch",
        "BSON field '$s.names' is the wrong type 'int', expected type 'string'",
    ),
    (
        _Idl,
        {"inner": {"flag": "x"}},
        "TypeMismatch",
        "BSON field '$s.inner.flag' is the wrong type 'string', expected type 'bool'",
    ),
    (_Idl, {"scale": float("inf")}, "BadValue", "BSON field '$s.scale' must be a finite number"),
    # In the order given: the first field's error wins, and a missing field comes last.
    (_Idl, {"x": 1, "name": 1}, "Location40415", "BSON field '$s.x' is an unknown field."),
    (
        _Idl,
        {"name": 1, "x": 1},
        "TypeMismatch",
        "BSON field '$s.name' is the wrong type 'int', expected type 'string'",
    ),
    (_Own, 5, "Location40240", "the spec is int"),
    (_Own, {"x": 1, "n": 1}, "Location40245", "Unrecognized option to $s: x"),
    (_Own, {"n": "1"}, "Location40241", "n is string"),
    (_Own, {}, "Location40246", "$s requires 'n' to be specified"),
    (
        _Lenient,
        [],
        "TypeMismatch",
        "BSON field '$s' is the wrong type 'array', expected type 'object'",
    ),
]


@pytest.mark.parametrize(("cls", "spec", "code", "message"), ERRORS)
def test_refusals(cls: type[Arguments], spec: Any, code: str, message: str) -> None:
    with pytest.raises(QueryError) as excinfo:
        extract(cls, "$s", spec)
    assert (excinfo.value.code_name, excinfo.value.message) == (code, message)


def test_values_and_defaults() -> None:
    got = extract(_Idl, "$s", {"name": "a", "step": None, "inner": {}, "scale": Decimal128("2.7")})
    assert got == _Idl("a", None, None, _Inner(False), 20)
    assert extract(_Lenient, "$s", {"n": 1, "other": 2}) == _Lenient(1)
