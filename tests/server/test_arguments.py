"""The one extractor from command documents to typed parameters: unknown fields (40415), missing
required ones (40414), wrong types (14 TypeMismatch), generic fields accepted and ignored, the
conversions MongoDB's IDL applies to numbers, bools and document arrays, and the rules fields
declare (unsupported options 238, options refused unless default, non-negative numbers, the simple
collation), with the commands' own declarations and messages."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import bson
import pytest
from bson import Decimal128, Int64

from ebbdb.server.arguments import (
    COMMAND_VALUE,
    GENERIC_FIELDS,
    REST,
    TERSE_MISMATCH,
    DocSequence,
    Kind,
    NonNegative,
    NoParams,
    OneOf,
    RefusedUnlessDefault,
    Unsupported,
    arg,
    extract,
    extract_lenient,
    group,
    type_mismatch,
)
from ebbdb.server.commands.aggregate import AggregateParams
from ebbdb.server.commands.catalog import CollModIndex, CollModParams, CreateParams
from ebbdb.server.commands.reads import CountParams, DistinctParams, FindParams, GetMoreParams
from ebbdb.server.commands.schema_options import ValidationOptions
from ebbdb.server.commands.writes import (
    DeleteParams,
    DeleteStatement,
    FindAndModifyParams,
    InsertParams,
    UpdateParams,
    UpdateStatement,
)
from ebbdb.server.errors import CommandError, ErrorCode


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


# -- declared rules: unsupported options, defaults, ranges, collation ------------------------------

_NOT_YET = Unsupported("cmd option '{field}' is not supported yet", accept=(False, None, 0))


@dataclass(frozen=True)
class RuledParams:
    target: str = arg(COMMAND_VALUE, Kind.STRING)
    # Checked in this order, whatever the order of the fields in the command.
    collation: dict[str, Any] | None = arg("collation", Kind.COLLATION)
    tailable: bool = arg(
        "tailable", Kind.BOOL, False, check=RefusedUnlessDefault("option '{field}' refused")
    )
    low: dict[str, Any] | None = arg("low", Kind.DOC, check=RefusedUnlessDefault("no '{field}'"))
    capped: Any = arg("capped", Kind.ANY, check=_NOT_YET)
    dry_run: Any = arg("dryRun", Kind.ANY, check=Unsupported("cmd option '{field}' is refused"))
    skip: int = arg("skip", Kind.INT, 0, check=NonNegative("skip is negative: {value}"))
    limit: int | None = arg("limit", Kind.INT, check=OneOf((0, 1), "limit must be 0 or 1: {value}"))
    count: int | None = arg("count", Kind.INT)


@pytest.mark.parametrize("collation", [{}, {"locale": "simple"}], ids=["empty", "simple"])
def test_the_simple_collation_is_accepted(collation: dict[str, Any]) -> None:
    assert extract(RuledParams, "cmd", cmd(collation=collation)).collation == collation


@pytest.mark.parametrize(
    "collation",
    [{"locale": "en"}, {"locale": "simple", "strength": 1}, {"strength": 1}],
    ids=["en", "simple_with_strength", "no_locale"],
)
def test_collations_are_checked_as_mongodb_checks_them(collation: dict[str, Any]) -> None:
    if collation == {"locale": "en"}:
        assert extract(RuledParams, "cmd", cmd(collation=collation)).collation == collation
        return
    err = raises(RuledParams, cmd(collation=collation))
    if "locale" in collation:
        assert err.code is ErrorCode.FailedToParse
        assert err.message == (
            'If locale=simple, no other fields should be present in: { locale: "simple", '
            "strength: 1 }"
        )
    else:
        assert (err.code, err.message) == (ErrorCode.NoSuchKey, 'Missing expected field "locale"')


def test_a_collation_is_an_object() -> None:
    err = raises(RuledParams, cmd(collation="simple"))
    assert err.code is ErrorCode.TypeMismatch
    assert err.message == (
        "BSON field 'cmd.collation' is the wrong type 'string', expected type 'object'"
    )


@pytest.mark.parametrize("value", [False, 0, 0.0, Decimal128("0")])
def test_refused_unless_default_accepts_the_default(value: Any) -> None:
    assert extract(RuledParams, "cmd", cmd(tailable=value)).tailable is False


@pytest.mark.parametrize("value", [True, 1, -1.5])
def test_refused_unless_default_refuses_anything_else(value: Any) -> None:
    err = raises(RuledParams, cmd(tailable=value))
    assert (err.code, err.message) == (ErrorCode.NotImplemented, "option 'tailable' refused")


def test_refused_unless_default_refuses_even_an_empty_document() -> None:
    err = raises(RuledParams, cmd(low={}))
    assert (err.code, err.message) == (ErrorCode.NotImplemented, "no 'low'")


@pytest.mark.parametrize("value", [False, None, 0, Int64(0), 0.0])
def test_unsupported_accepts_the_values_it_lists(value: Any) -> None:
    p = extract(RuledParams, "cmd", cmd(capped=value))
    assert p.capped == value


@pytest.mark.parametrize("value", [True, 1, "", {}, Decimal128("0")])
def test_unsupported_refuses_the_others(value: Any) -> None:
    err = raises(RuledParams, cmd(capped=value))
    assert err.code is ErrorCode.NotImplemented
    assert err.message == "cmd option 'capped' is not supported yet"


@pytest.mark.parametrize("value", [None, False, {}])
def test_unsupported_without_accepted_values_refuses_whatever_is_given(value: Any) -> None:
    err = raises(RuledParams, cmd(dryRun=value))
    assert (err.code, err.message) == (ErrorCode.NotImplemented, "cmd option 'dryRun' is refused")
    assert extract(RuledParams, "cmd", cmd()).dry_run is None  # not given: nothing to refuse


@pytest.mark.parametrize(("value", "shown"), [(-1, "-1"), (Int64(-3), "-3"), (-2.7, "-2")])
def test_non_negative_reports_the_converted_number(value: Any, shown: str) -> None:
    err = raises(RuledParams, cmd(skip=value))
    assert (err.code, err.message) == (ErrorCode.BadValue, f"skip is negative: {shown}")


@pytest.mark.parametrize("value", [0, 3, -0.5])  # -0.5 truncates to 0
def test_non_negative_accepts_zero_and_more(value: Any) -> None:
    assert extract(RuledParams, "cmd", cmd(skip=value)).skip >= 0


def test_one_of() -> None:
    assert extract(RuledParams, "cmd", cmd(limit=1.5)).limit == 1
    err = raises(RuledParams, cmd(limit=2))
    assert (err.code, err.message) == (ErrorCode.FailedToParse, "limit must be 0 or 1: 2")


def test_rules_come_after_unknown_missing_and_mistyped_fields() -> None:
    bad = {"collation": {"locale": "xx"}, "tailable": True, "skip": -1}
    assert raises(RuledParams, cmd(**bad, bogus=1)).code is ErrorCode.Location40415
    assert raises(RuledParams, cmd(**bad, count="x")).code is ErrorCode.TypeMismatch

    @dataclass(frozen=True)
    class Needs:
        skip: int = arg("skip", Kind.INT, 0, check=NonNegative("negative"))
        must: int = arg("must", Kind.INT, required=True)

    assert raises(Needs, {"cmd": 1, "skip": -1}).code is ErrorCode.Location40414


def test_rules_run_in_declaration_order() -> None:
    body = {"skip": -1, "capped": True, "low": {"a": 1}, "tailable": True}
    assert raises(RuledParams, cmd(**body)).message == "option 'tailable' refused"
    assert raises(RuledParams, cmd(**body, collation={"locale": "xx"})).message == (
        "Field 'locale' is invalid in: { locale: \"xx\" }"
    )
    assert raises(RuledParams, cmd(skip=-1, capped=1)).message == (
        "cmd option 'capped' is not supported yet"
    )


def test_rules_apply_inside_nested_documents() -> None:
    err = raises_nested(RuledParams, "update.updates", {"collation": {"locale": "xx"}})
    assert err.code is ErrorCode.BadValue


def raises_nested(cls: type, path: str, body: dict[str, Any]) -> CommandError:
    with pytest.raises(CommandError) as excinfo:
        extract(cls, path, body, nested=True)
    return excinfo.value


# -- declared kinds and wordings -------------------------------------------------------------------


@dataclass(frozen=True)
class KindsParams:
    target: Any = arg(COMMAND_VALUE, Kind.ANY)
    number: Any = arg("number", Kind.NUMBER)
    flag: bool | None = arg("flag", Kind.STRICT_BOOL)
    cursor: Int64 | None = arg("cursor", Kind.CURSOR_ID, mismatch=TERSE_MISMATCH)
    cursors: list[Int64] | None = arg("cursors", Kind.CURSOR_IDS)
    index: Any = arg("index", Kind.STRING_OR_DOC_OR_STRINGS, mismatch=TERSE_MISMATCH)
    maybe: str | None = arg("maybe", Kind.STRING, "unset", nullable=True, mismatch=TERSE_MISMATCH)
    named: str | None = arg("named", Kind.STRING, mismatch="Argument to cmd must be a string")


@pytest.mark.parametrize("value", [1, Int64(2), 2.5, Decimal128("3"), float("nan")])
def test_number_keeps_the_number_given(value: Any) -> None:
    got = extract(KindsParams, "cmd", cmd(number=value)).number
    assert got is value


@pytest.mark.parametrize(("value", "found"), [(True, "bool"), ("1", "string"), (None, "null")])
def test_number_refuses_other_types(value: Any, found: str) -> None:
    assert raises(KindsParams, cmd(number=value)).message == (
        f"BSON field 'cmd.number' is the wrong type '{found}', expected types "
        "'[long, int, decimal, double]'"
    )


def test_strict_bool_takes_only_bools() -> None:
    assert extract(KindsParams, "cmd", cmd(flag=False)).flag is False
    assert raises(KindsParams, cmd(flag=1)).message == (
        "BSON field 'cmd.flag' is the wrong type 'int', expected type 'bool'"
    )


def test_cursor_ids_are_longs() -> None:
    p = extract(KindsParams, "cmd", cmd(cursor=Int64(7), cursors=[Int64(1), Int64(2)]))
    assert p.cursor == 7 and type(p.cursor) is Int64
    assert p.cursors == [1, 2] and all(type(c) is Int64 for c in p.cursors)
    terse = "BSON field 'cmd.{}' is the wrong type, expected type 'long'"
    assert raises(KindsParams, cmd(cursor=7)).message == terse.format("cursor")
    assert raises(KindsParams, cmd(cursors=[Int64(1), 2])).message == terse.format("cursors")
    assert raises(KindsParams, cmd(cursors="x")).message == (
        "BSON field 'cmd.cursors' is the wrong type 'string', expected type 'array'"
    )


@pytest.mark.parametrize("value", ["a_1", {"a": 1}, ["a_1", "b_1"], []])
def test_string_or_doc_or_strings(value: Any) -> None:
    assert extract(KindsParams, "cmd", cmd(index=value)).index == value


def test_string_or_doc_or_strings_refusals() -> None:
    err = raises(KindsParams, cmd(index=5))
    assert (err.code, err.message) == (
        ErrorCode.TypeMismatch,
        "BSON field 'cmd.index' is the wrong type, expected types '[string, object, array]'",
    )
    err = raises(KindsParams, cmd(index=["a", 1]))
    assert (err.code, err.message) == (
        ErrorCode.TypeMismatch,
        "cmd 'index' array must contain only strings",
    )


def test_nullable_takes_null_whatever_the_kind() -> None:
    assert extract(KindsParams, "cmd", cmd(maybe=None)).maybe is None
    assert extract(KindsParams, "cmd", cmd(maybe="x")).maybe == "x"
    assert extract(KindsParams, "cmd", cmd()).maybe == "unset"
    assert raises(KindsParams, cmd(maybe=3)).message == (
        "BSON field 'cmd.maybe' is the wrong type, expected type 'string'"
    )


def test_a_field_may_declare_mongodbs_own_message() -> None:
    err = raises(KindsParams, cmd(named=5))
    assert (err.code, err.message) == (ErrorCode.TypeMismatch, "Argument to cmd must be a string")


@pytest.mark.parametrize(
    ("value", "found"),
    [
        (bson.ObjectId(), "objectId"),
        (bson.Regex("a"), "regex"),
        (bson.Binary(b"x", 0), "binData"),
        (bson.Timestamp(1, 1), "timestamp"),
        (bson.MinKey(), "minKey"),
        (bson.Code("x"), "javascript"),
        (Decimal128("1"), "decimal"),
        (2.5, "double"),
    ],
)
def test_type_names_are_mongodbs(value: Any, found: str) -> None:
    err = raises(CmdParams, cmd(spec=value))
    assert (
        err.message == f"BSON field 'cmd.spec' is the wrong type '{found}', expected type 'object'"
    )
    assert type_mismatch("a.b", value, Kind.BOOL).message == (
        f"BSON field 'a.b' is the wrong type '{found}', expected types "
        "'[bool, long, int, decimal, double]'"
    )


@dataclass(frozen=True)
class OnlyParams:
    target: str = arg(COMMAND_VALUE, Kind.STRING)
    options: dict[str, Any] | None = arg(REST, Kind.ANY, only=("a", "b"))
    c: Any = arg("c", Kind.ANY)


def test_rest_with_only_collects_those_names_in_order() -> None:
    p = extract(OnlyParams, "cmd", cmd(b=2, c=3, a=1, **GENERIC))
    assert p.options == {"b": 2, "a": 1} and list(p.options) == ["b", "a"]
    assert p.c == 3
    err = raises(OnlyParams, cmd(a=1, d=4))
    assert (err.code, err.message) == (
        ErrorCode.Location40415,
        "BSON field 'cmd.d' is an unknown field.",
    )


# -- the commands' own declarations ----------------------------------------------------------------


def test_find_and_count_word_a_negative_skip_their_own_way() -> None:
    err = raises(FindParams, {"find": "c", "skip": -2}, command="find")
    assert (err.code, err.message) == (
        ErrorCode.BadValue,
        "Skip value must be non-negative, but received: -2",
    )
    err = raises(CountParams, {"count": "c", "skip": -2}, command="count")
    assert (err.code, err.message) == (
        ErrorCode.BadValue,
        "skip value is negative in count query: -2",
    )


def test_batch_sizes_are_non_negative() -> None:
    message = "BatchSize value must be non-negative, but received: -1"
    assert raises(FindParams, {"find": "c", "batchSize": -1}, "find").message == message
    body = {"getMore": Int64(1), "collection": "c", "batchSize": -1}
    assert raises(GetMoreParams, body, "getMore").message == message


def test_find_takes_min_max_return_key_and_show_record_id() -> None:
    body = {"find": "c", "returnKey": 1, "showRecordId": True, "min": {}, "max": {"a": 1}}
    p = extract(FindParams, "find", body)
    assert (p.return_key, p.show_record_id, p.min, p.max) == (True, True, {}, {"a": 1})


def test_find_takes_tailable_and_await_data() -> None:
    """Tailable cursors exist (server/tailable.py checks them against the collection)."""
    p = extract(FindParams, "find", {"find": "c", "tailable": True, "awaitData": 1})
    assert (p.tailable, p.await_data) == (True, True)


def test_find_answers_several_faults_in_its_order() -> None:
    body: dict[str, Any] = {"find": "c", "skip": -1, "batchSize": -1, "max": {}, "returnKey": True}
    body["collation"] = {"locale": "en", "strength": 0}
    assert raises(FindParams, body, "find").message == (
        "Field 'strength' must be an integer 1 through 5. Got: 0"
    )
    body = {"find": "c", "skip": -1, "batchSize": -1}
    assert raises(FindParams, body, "find").message == (
        "BatchSize value must be non-negative, but received: -1"
    )


@pytest.mark.parametrize(
    ("cls", "command", "body"),
    [
        (FindParams, "find", {"find": "c"}),
        (CountParams, "count", {"count": "c"}),
        (DistinctParams, "distinct", {"distinct": "c", "key": "a"}),
        (AggregateParams, "aggregate", {"aggregate": "c", "pipeline": []}),
        (FindAndModifyParams, "findAndModify", {"findAndModify": "c"}),
        (UpdateStatement, "update.updates", {"q": {}, "u": {}}),
        (DeleteStatement, "delete.deletes", {"q": {}, "limit": 0}),
    ],
)
def test_every_collation_is_checked_by_the_extractor(
    cls: type, command: str, body: dict[str, Any]
) -> None:
    nested = "." in command
    extract(cls, command, {**body, "collation": {"locale": "simple"}}, nested=nested)
    extract(cls, command, {**body, "collation": {"locale": "de"}}, nested=nested)
    with pytest.raises(CommandError) as excinfo:
        extract(cls, command, {**body, "collation": {"locale": "de", "bogus": 1}}, nested=nested)
    assert excinfo.value.code is ErrorCode.FailedToParse
    assert excinfo.value.message == (
        'Collation spec contains unknown field. Collation spec: { locale: "de", bogus: 1 }'
    )


def test_delete_limit_is_zero_or_one() -> None:
    err = raises_nested(DeleteStatement, "delete.deletes", {"q": {}, "limit": 2})
    assert (err.code, err.message) == (
        ErrorCode.FailedToParse,
        "The limit field in delete objects must be 0 or 1. Got 2",
    )


def test_aggregate_explain_is_accepted() -> None:
    # Explain of aggregate runs now (server/commands/aggregate_explain.py; tests/e2e/
    # test_aggregate_explain.py has its shapes); the flag needs no cursor.
    body = {"aggregate": "c", "pipeline": [], "explain": True}
    p = extract(AggregateParams, "aggregate", body)
    assert (p.explain, p.cursor) == (True, None)


def test_create_options() -> None:
    body = {"create": "c", "storageEngine": {}, "capped": False, "idIndex": {}, "size": 0}
    p = extract(CreateParams, "create", body)
    assert p.options == {"storageEngine": {}, "idIndex": {}}
    # Capped collections exist: their options are extracted, and checked by the handler
    # (server/commands/capped.py; tests/e2e/test_capped.py has mongod's answers).
    p = extract(CreateParams, "create", {"create": "c", "capped": True, "size": 4096.5})
    assert (p.capped, p.size, p.max) == (True, 4096.5, None)
    err = raises(CreateParams, {"create": "c", "encryptedFields": {"fields": []}}, "create")
    assert (err.code, err.message) == (
        ErrorCode.NotImplemented,
        "create option 'encryptedFields' is not supported yet",
    )
    err = raises(CreateParams, {"create": "c", "bogus": 1}, "create")
    assert (err.code, err.message) == (
        ErrorCode.Location40415,
        "BSON field 'create.bogus' is an unknown field.",
    )


def test_coll_mod_options() -> None:
    err = raises(CollModParams, {"collMod": "c", "validator": None}, "collMod")
    assert (err.code, err.message) == (
        ErrorCode.TypeMismatch,
        "BSON field 'collMod.validator' is the wrong type 'null', expected type 'object'",
    )
    err = raises(CollModParams, {"collMod": "c", "dryRun": True}, "collMod")
    assert (err.code, err.message) == (
        ErrorCode.NotImplemented,
        "collMod option 'dryRun' is not supported",
    )
    err = raises_nested(CollModIndex, "collMod.index", {"name": "a_1", "unique": True})
    assert (err.code, err.message) == (
        ErrorCode.NotImplemented,
        "collMod index option 'unique' is not supported",
    )
    err = raises_nested(CollModIndex, "collMod.index", {"name": "a_1", "bogus": True})
    assert err.message == "BSON field 'collMod.index.bogus' is an unknown field."
    err = raises_nested(CollModIndex, "collMod.index", {"keyPattern": "a"})
    assert err.message == (
        "BSON field 'collMod.index.keyPattern' is the wrong type, expected type 'object'"
    )
    index = extract(CollModIndex, "collMod.index", {"name": None, "hidden": None}, nested=True)
    assert (index.name, index.hidden) == (None, None)


# -- field groups: declared once, read as each command's own fields ------------------------------


@dataclass(frozen=True)
class Limits:
    low: int | None = arg("low", Kind.INT, check=NonNegative("{command}.{field} is {value}"))
    high: int | None = arg("high", Kind.INT, required=True)


@dataclass(frozen=True)
class GroupedParams:
    target: str = arg(COMMAND_VALUE, Kind.STRING)
    first: Any = arg("first", Kind.ANY, check=Unsupported("first: {field}"))
    limits: Limits = group(Limits)
    last: Any = arg("last", Kind.ANY, check=Unsupported("last: {field}"))


def test_a_group_is_read_as_the_command_s_own_fields() -> None:
    p = extract(GroupedParams, "cmd", cmd(high=5, low=1.5))
    assert p == GroupedParams("coll", limits=Limits(low=1, high=5))
    err = raises(GroupedParams, cmd(high="x"))
    assert err.message == type_mismatch("cmd.high", "x", Kind.INT).message
    err = raises(GroupedParams, cmd())
    assert err.message == "BSON field 'cmd.high' is missing but a required field"
    assert raises(GroupedParams, cmd(limits={"high": 1})).code is ErrorCode.Location40415
    # Its checks run in its place among the command's, and may name the command.
    assert raises(GroupedParams, cmd(high=1, low=-1)).message == "cmd.low is -1"
    assert raises(GroupedParams, cmd(high=1, low=-1, first=1)).message == "first: first"
    assert raises(GroupedParams, cmd(high=1, low=-1, last=1)).message == "cmd.low is -1"


@dataclass(frozen=True)
class OptionalGroupParams:
    target: str = arg(COMMAND_VALUE, Kind.STRING)
    validation: ValidationOptions = group(ValidationOptions)


def test_a_group_none_of_whose_fields_is_given_is_its_default() -> None:
    p = extract(OptionalGroupParams, "cmd", cmd())
    assert p.validation == ValidationOptions()
    p = extract(OptionalGroupParams, "cmd", cmd(validationLevel="moderate"))
    assert p.validation == ValidationOptions(level="moderate")


@pytest.mark.parametrize("cls", [CreateParams, CollModParams])
def test_create_and_coll_mod_declare_the_validation_options_once(cls: type) -> None:
    command = "create" if cls is CreateParams else "collMod"
    body = {command: "c", "validator": {"a": 1}, "validationAction": "warn"}
    p = extract(cls, command, body)
    assert p.validation == ValidationOptions(validator={"a": 1}, action="warn")
    for field, value in (("validationLevel", "bogus"), ("validationAction", "nope")):
        err = raises(cls, {command: "c", field: value}, command)
        assert (err.code, err.message) == (
            ErrorCode.BadValue,
            f"Enumeration value '{value}' for field '{command}.{field}' is not a valid value.",
        )


def test_statements_are_extracted_with_their_command() -> None:
    body = {"update": "c", "updates": [{"q": {}, "u": {"$set": {"a": 1}}, "multi": 1}]}
    p = extract(UpdateParams, "update", body)
    assert p.updates == (UpdateStatement(q={}, u={"$set": {"a": 1}}, multi=True),)
    body = {"update": "c", "updates": [bson.encode({"q": {}, "u": {}, "bogus": 1})]}
    err = raises(UpdateParams, body, "update")
    assert (err.code, err.message) == (
        ErrorCode.Location40415,
        "BSON field 'update.updates.bogus' is an unknown field.",
    )
    err = raises(DeleteParams, {"delete": "c", "deletes": [{"q": {}}]}, "delete")
    assert err.message == "BSON field 'delete.deletes.limit' is missing but a required field"


@pytest.mark.parametrize(
    ("cls", "body"),
    [
        (InsertParams, {"insert": "c", "documents": []}),
        (UpdateParams, {"update": "c", "updates": []}),
        (DeleteParams, {"delete": "c", "deletes": []}),
    ],
)
def test_write_batches_hold_at_least_one_item(cls: type, body: dict[str, Any]) -> None:
    err = raises(cls, body, next(iter(body)))
    assert (err.code, err.message) == (
        ErrorCode.InvalidLength,
        "Write batch sizes must be between 1 and 100000. Got 0 operations.",
    )


def test_coll_mod_index_is_extracted_with_the_command() -> None:
    body = {"collMod": "c", "index": {"name": "a_1", "expireAfterSeconds": 5}}
    p = extract(CollModParams, "collMod", body)
    assert p.index == CollModIndex(name="a_1", expire_after_seconds=5)
    body = {"collMod": "c", "index": {"name": "a_1", "hidden": 1}}
    assert raises(CollModParams, body, "collMod").message == (
        "BSON field 'collMod.index.hidden' is the wrong type, expected type 'bool'"
    )


def test_fields_named_like_the_sentinels_are_ordinary_fields() -> None:
    # Found by tests/e2e/test_fuzz_server.py: {setParameter: 1, "*": 3.5} gave the REST field
    # the value 3.5 itself (an InternalError in the handler).
    assert raises(CmdParams, cmd(**{"*": 3.5})).code is ErrorCode.Location40415
    assert raises(CmdParams, cmd(**{COMMAND_VALUE: 1})).code is ErrorCode.Location40415
    assert extract(RestParams, "cmd", cmd(**{"*": 3.5})).rest == {"*": 3.5}


@pytest.mark.parametrize(
    ("value", "bound"), [(1.5e308, 2**63 - 1), (2.0**63, 2**63 - 1), (-1e19, -(2**63))]
)
def test_an_integer_past_the_int64_range_is_its_bound(value: float, bound: int) -> None:
    # Found by the fuzzer: dbStats {scale: 1e308} failed encoding scaleFactor (InternalError);
    # MongoDB's safeNumberLong gives the nearest 64-bit bound.
    assert extract(CmdParams, "cmd", cmd(count=value)).count == bound
