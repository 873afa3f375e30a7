"""The one extractor from command documents to typed parameters: unknown fields (40415), missing
required ones (40414), wrong types (14 TypeMismatch), generic fields accepted and ignored, and the
conversions MongoDB's IDL applies to numbers, bools and document arrays."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import bson
import pytest
from bson import Decimal128, Int64

from server.arguments import (
    COMMAND_VALUE,
    GENERIC_FIELDS,
    REST,
    DocSequence,
    Kind,
    NoParams,
    arg,
    extract,
    extract_lenient,
)
from server.errors import CommandError, ErrorCode


@dataclass(frozen=True)
class CmdParams:
    target: str = arg(COMMAND_VALUE, Kind.STRING, required=True)
    count: int | None = arg("count", Kind.INT)
    flag: bool = arg("flag", Kind.BOOL, False)
    spec: dict[str, Any] | None = arg("spec", Kind.DOC)
    items: list[Any] | None = arg("items", Kind.ARRAY)
    name_or_doc: Any = arg("nameOrDoc", Kind.STRING_OR_DOC)
    anything: Any = arg("anything", Kind.ANY)
    docs: tuple[Any, ...] = arg("docs", Kind.DOCS, ())
    raw: tuple[bytes, ...] = arg("raw", Kind.RAW_DOCS, ())


@dataclass(frozen=True)
class NeedsParams:
    target: str = arg(COMMAND_VALUE, Kind.STRING)
    must: int = arg("must", Kind.INT, required=True)


@dataclass(frozen=True)
class RestParams:
    value: Any = arg(COMMAND_VALUE, Kind.ANY)
    rest: dict[str, Any] | None = arg(REST, Kind.ANY)


def cmd(**fields: Any) -> dict[str, Any]:
    return {"cmd": "coll", **fields}


def raises(cls: type, body: dict[str, Any], command: str = "cmd") -> CommandError:
    with pytest.raises(CommandError) as excinfo:
        extract(cls, command, body)
    return excinfo.value


# -- basics ----------------------------------------------------------------------------------------


def test_defaults_and_command_value() -> None:
    p = extract(CmdParams, "cmd", cmd())
    assert p == CmdParams(target="coll")
    assert dataclasses.is_dataclass(p)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.target = "x"  # type: ignore[misc]


def test_all_fields() -> None:
    p = extract(
        CmdParams,
        "cmd",
        cmd(count=3, flag=True, spec={"a": 1}, items=[1, "x"], nameOrDoc="n", anything=b"z"),
    )
    assert (p.count, p.flag, p.spec, p.items, p.name_or_doc, p.anything) == (
        3,
        True,
        {"a": 1},
        [1, "x"],
        "n",
        b"z",
    )


def test_unknown_field() -> None:
    err = raises(CmdParams, cmd(foo=1))
    assert err.code is ErrorCode.Location40415
    assert int(err.code) == 40415
    assert err.message == "BSON field 'cmd.foo' is an unknown field."


def test_unknown_field_names_the_command() -> None:
    err = raises(CmdParams, {"find": "c", "bogus": True}, command="find")
    assert err.message == "BSON field 'find.bogus' is an unknown field."


def test_missing_required_field() -> None:
    err = raises(NeedsParams, cmd())
    assert err.code is ErrorCode.Location40414
    assert int(err.code) == 40414
    assert err.message == "BSON field 'cmd.must' is missing but a required field"
    assert extract(NeedsParams, "cmd", cmd(must=2)).must == 2


def test_required_command_value_is_always_present() -> None:
    # The command's own field is the body's first key, so it can never be missing...
    assert extract(CmdParams, "cmd", {"cmd": "x"}).target == "x"
    # ...but it is type-checked like any other.
    err = raises(CmdParams, {"cmd": 5})
    assert err.code is ErrorCode.TypeMismatch


@pytest.mark.parametrize(
    ("field", "value", "type_name"),
    [
        ("count", "3", "string"),
        ("count", True, "bool"),
        ("count", None, "null"),
        ("count", [1], "array"),
        ("flag", "yes", "string"),
        ("flag", None, "null"),
        ("spec", [], "array"),
        ("spec", "x", "string"),
        ("items", {"a": 1}, "object"),
        ("nameOrDoc", 1, "int"),
        ("nameOrDoc", Int64(1), "long"),
        ("docs", {"a": 1}, "object"),
        ("raw", "x", "string"),
    ],
)
def test_wrong_type(field: str, value: Any, type_name: str) -> None:
    err = raises(CmdParams, cmd(**{field: value}))
    assert err.code is ErrorCode.TypeMismatch
    assert int(err.code) == 14
    assert err.message.startswith(f"BSON field 'cmd.{field}' is the wrong type '{type_name}'")


def test_wrong_type_of_a_document_in_an_array() -> None:
    err = raises(CmdParams, cmd(docs=[{"a": 1}, 5]))
    assert err.code is ErrorCode.TypeMismatch
    assert err.message.startswith("BSON field 'cmd.docs.1' is the wrong type 'int'")


# -- generic fields --------------------------------------------------------------------------------

GENERIC = {
    "lsid": {"id": bson.Binary(b"\x00" * 16, 4)},
    "$db": "test",
    "$clusterTime": {"clusterTime": bson.Timestamp(1, 1), "signature": {}},
    "writeConcern": {"w": "majority"},
    "readConcern": {"level": "local"},
    "$readPreference": {"mode": "primaryPreferred"},
    "comment": "why",
    "apiVersion": "1",
    "apiStrict": False,
    "txnNumber": Int64(1),
    "maxTimeMS": 100,
}


def test_generic_fields_are_accepted_and_ignored() -> None:
    assert set(GENERIC) <= GENERIC_FIELDS
    p = extract(CmdParams, "cmd", cmd(count=2, **GENERIC))
    assert p == CmdParams(target="coll", count=2)
    assert extract(NoParams, "ping", {"ping": 1, **GENERIC}) == NoParams()


def test_no_params_rejects_unknown_fields_under_strict_extract() -> None:
    err = raises(NoParams, {"ping": 1, "extra": 1}, command="ping")
    assert err.code is ErrorCode.Location40415


def test_lenient_extract_ignores_unknown_fields_but_checks_known_ones() -> None:
    p = extract_lenient(CmdParams, "cmd", cmd(count=4.0, whatever=1, **GENERIC))
    assert p.count == 4
    with pytest.raises(CommandError) as excinfo:
        extract_lenient(CmdParams, "cmd", cmd(count="x", whatever=1))
    assert excinfo.value.code is ErrorCode.TypeMismatch


def test_rest_collects_other_fields() -> None:
    p = extract(RestParams, "getParameter", {"getParameter": 1, "a": 1, "b": "x", "$db": "admin"})
    assert p.value == 1
    assert p.rest == {"a": 1, "b": "x"}
    assert extract(RestParams, "getParameter", {"getParameter": "*"}).rest is None


# -- conversions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (3, 3),
        (Int64(2**40), 2**40),
        (3.0, 3),
        (3.9, 3),  # truncated, as MongoDB's IDL does
        (-2.5, -2),
        (Decimal128("7"), 7),
        (Decimal128("7.9"), 7),
    ],
)
def test_int_converts_numbers(value: Any, expected: int) -> None:
    got = extract(CmdParams, "cmd", cmd(count=value)).count
    assert got == expected
    assert type(got) is int


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf"), Decimal128("NaN")])
def test_int_rejects_non_finite_numbers(value: Any) -> None:
    err = raises(CmdParams, cmd(count=value))
    assert err.code is ErrorCode.BadValue


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (True, True),
        (False, False),
        (1, True),
        (0, False),
        (-1, True),
        (Int64(0), False),
        (Int64(5), True),
        (0.0, False),
        (0.5, True),
        (float("nan"), True),
        (Decimal128("0"), False),
        (Decimal128("1"), True),
        # BSONElement::trueValue: any non-zero decimal is true, NaN and infinities included.
        (Decimal128("0.5"), True),
        (Decimal128("-0"), False),
        (Decimal128("NaN"), True),
        (Decimal128("Infinity"), True),
    ],
)
def test_bool_accepts_numbers(value: Any, expected: bool) -> None:
    got = extract(CmdParams, "cmd", cmd(flag=value)).flag
    assert got is expected


def test_docs_decodes_bytes_and_keeps_dicts() -> None:
    p = extract(CmdParams, "cmd", cmd(docs=[bson.encode({"a": 1}), {"b": 2}]))
    assert p.docs == ({"a": 1}, {"b": 2})


def test_docs_rejects_invalid_bson() -> None:
    err = raises(CmdParams, cmd(docs=[b"\x05\x00\x00"]))
    assert err.code is ErrorCode.InvalidBSON


def test_raw_docs_accepts_a_document_sequence_of_bytes_and_dicts() -> None:
    first = bson.encode({"_id": 1, "x": "y"})
    seq = DocSequence([first, bytearray(bson.encode({"_id": 2})), {"_id": 3}])
    p = extract(CmdParams, "cmd", cmd(raw=seq))
    assert p.raw == (first, bson.encode({"_id": 2}), bson.encode({"_id": 3}))
    assert all(type(d) is bytes for d in p.raw)


def test_raw_docs_keeps_bytes_unchanged() -> None:
    # Validation happens later, per document, so one bad document fails alone.
    junk = b"\x05\x00\x00\x00\x01"
    p = extract(CmdParams, "cmd", cmd(raw=[junk]))
    assert p.raw == (junk,)


def test_empty_arrays() -> None:
    p = extract(CmdParams, "cmd", cmd(raw=DocSequence(), docs=[], items=[]))
    assert (p.raw, p.docs, p.items) == ((), (), [])


# -- how the object is built -----------------------------------------------------------------------


@dataclass(frozen=True)
class CheckedParams:
    """A class with work after __init__ (and a factory default) is built through __init__."""

    target: str = arg(COMMAND_VALUE, Kind.STRING)
    tags: list[Any] = dataclasses.field(default_factory=list)
    count: int = arg("count", Kind.INT, 0)

    def __post_init__(self) -> None:
        if self.count > 10:
            raise ValueError("too many")


def test_extracted_objects_equal_constructed_ones() -> None:
    p = extract(CmdParams, "cmd", cmd(count=3, docs=[{"a": 1}]))
    assert p == CmdParams(target="coll", count=3, docs=({"a": 1},))
    assert repr(p) == repr(CmdParams(target="coll", count=3, docs=({"a": 1},)))
    assert hash(extract(NoParams, "ping", {"ping": 1})) == hash(NoParams())


def test_classes_with_post_init_or_factories_go_through_init() -> None:
    p = extract(CheckedParams, "cmd", cmd(count=2))
    assert p == CheckedParams(target="coll", count=2) and p.tags == []
    with pytest.raises(ValueError, match="too many"):
        extract(CheckedParams, "cmd", cmd(count=11))
