"""The update language on documents, table-driven: the field modifiers ($set, $unset, $inc, $mul,
$min, $max, $rename, $currentDate, $setOnInsert, $bit), dotted and numeric paths, the order new
fields land in, numeric type rules, replacement documents and the immutable `_id`.

Every expected document is compared as BSON bytes as well as by value, so a type (int against
long against double) or a field order that differs from MongoDB's fails the test."""

from __future__ import annotations

import copy
from typing import Any

import bson
from bson import Decimal128, Int64, Timestamp
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.update import parse_update
from tests.case_tables import load_cases
from tests.helpers import cases

Doc = dict[str, Any]
NOW = 1_700_000_000_123


def run(doc: Doc, spec: Doc, **kwargs: Any) -> Doc:
    return parse_update(spec).apply(doc, now_ms=NOW, **kwargs)


def assert_same(actual: Doc, expected: Doc) -> None:
    assert actual == expected
    assert bson.encode(actual, codec_options=CODEC) == bson.encode(expected, codec_options=CODEC)


# (id, document, update, expected)
CASES = [tuple(case.values()) for case in load_cases("update")] + [
    (
        "inc int past int32 becomes a long",
        {"_id": 1, "a": 2**31 - 1},
        {"$inc": {"a": 1}},
        {"_id": 1, "a": Int64(2**31)},
    ),
    (
        "inc int below int32 becomes a long",
        {"_id": 1, "a": -(2**31)},
        {"$inc": {"a": -1}},
        {"_id": 1, "a": Int64(-(2**31) - 1)},
    ),
    ("inc int by long", {"_id": 1, "a": 1}, {"$inc": {"a": Int64(2)}}, {"_id": 1, "a": Int64(3)}),
    ("inc long by int", {"_id": 1, "a": Int64(1)}, {"$inc": {"a": 2}}, {"_id": 1, "a": Int64(3)}),
    ("inc long by double", {"_id": 1, "a": Int64(2)}, {"$inc": {"a": 0.5}}, {"_id": 1, "a": 2.5}),
    (
        "inc decimal by int",
        {"_id": 1, "a": Decimal128("1.1")},
        {"$inc": {"a": 1}},
        {"_id": 1, "a": Decimal128("2.1")},
    ),
    (
        "inc int by decimal",
        {"_id": 1, "a": 1},
        {"$inc": {"a": Decimal128("0.5")}},
        {"_id": 1, "a": Decimal128("1.5")},
    ),
    (
        "inc decimal by double (15 digits)",
        {"_id": 1, "a": Decimal128("1")},
        {"$inc": {"a": 0.1}},
        {"_id": 1, "a": Decimal128("1.100000000000000")},
    ),
    ("inc creates a long", {"_id": 1}, {"$inc": {"a": Int64(5)}}, {"_id": 1, "a": Int64(5)}),
    (
        "mul int past int32 becomes a long",
        {"_id": 1, "a": 2**30},
        {"$mul": {"a": 4}},
        {"_id": 1, "a": Int64(2**32)},
    ),
    ("mul long by int", {"_id": 1, "a": Int64(2)}, {"$mul": {"a": 3}}, {"_id": 1, "a": Int64(6)}),
    (
        "mul decimal",
        {"_id": 1, "a": Decimal128("1.5")},
        {"$mul": {"a": 2}},
        {"_id": 1, "a": Decimal128("3.0")},
    ),
    ("mul creates a long zero", {"_id": 1}, {"$mul": {"a": Int64(5)}}, {"_id": 1, "a": Int64(0)}),
    (
        "mul creates a decimal zero",
        {"_id": 1},
        {"$mul": {"a": Decimal128("2.5")}},
        {"_id": 1, "a": Decimal128("0.0")},
    ),
    (
        "max of dates",
        {"_id": 1, "d": DatetimeMS(5)},
        {"$max": {"d": DatetimeMS(9)}},
        {"_id": 1, "d": DatetimeMS(9)},
    ),
    # -- $currentDate --------------------------------------------------------------------------------
    (
        "currentDate true",
        {"_id": 1},
        {"$currentDate": {"d": True}},
        {"_id": 1, "d": DatetimeMS(NOW)},
    ),
    (
        "currentDate false is a date too",
        {"_id": 1},
        {"$currentDate": {"d": False}},
        {"_id": 1, "d": DatetimeMS(NOW)},
    ),
    (
        "currentDate $type date",
        {"_id": 1, "d": 1},
        {"$currentDate": {"d": {"$type": "date"}}},
        {"_id": 1, "d": DatetimeMS(NOW)},
    ),
    (
        "currentDate timestamps tick",
        {"_id": 1},
        {"$currentDate": {"t2": {"$type": "timestamp"}, "t1": {"$type": "timestamp"}}},
        {"_id": 1, "t1": Timestamp(NOW // 1000, 1), "t2": Timestamp(NOW // 1000, 2)},
    ),
    (
        "bit with a long operand makes a long",
        {"_id": 1, "a": 1},
        {"$bit": {"a": {"or": Int64(2)}}},
        {"_id": 1, "a": Int64(3)},
    ),
]


@cases(("doc", "spec", "expected"), CASES)
def test_update(doc: Doc, spec: Doc, expected: Doc) -> None:
    assert_same(run(doc, spec), expected)


# -- replacement ------------------------------------------------------------------------------------

REPLACEMENTS = [tuple(case.values()) for case in load_cases("update_replacements")] + [
    (
        "empty top-level timestamps take the time",
        {"_id": 1},
        {"t": Timestamp(0, 0), "n": {"t": Timestamp(0, 0)}, "u": Timestamp(5, 1)},
        {
            "_id": 1,
            "t": Timestamp(NOW // 1000, 1),
            "n": {"t": Timestamp(0, 0)},
            "u": Timestamp(5, 1),
        },
    ),
]


@cases(("doc", "spec", "expected"), REPLACEMENTS)
def test_replacement(doc: Doc, spec: Doc, expected: Doc) -> None:
    update = parse_update(spec)
    assert update.replacement
    assert_same(update.apply(doc, now_ms=NOW), expected)


def test_replacement_flag() -> None:
    assert parse_update({"a": 1}).replacement
    assert parse_update({}).replacement
    assert not parse_update({"$set": {"a": 1}}).replacement


# -- what apply leaves alone ------------------------------------------------------------------------


def test_input_document_untouched() -> None:
    doc = {"_id": 1, "a": {"b": [1, {"c": 2}]}, "l": [1], "n": 1}
    before = bson.encode(doc)
    spec = {"$set": {"a.b.1.c": 3, "x": 1}, "$inc": {"n": 1}, "$push": {"l": 4}}
    out = run(doc, spec)
    assert out == {"_id": 1, "a": {"b": [1, {"c": 3}]}, "l": [1, 4], "n": 2, "x": 1}
    assert bson.encode(doc) == before


def test_results_share_nothing_with_the_update() -> None:
    update = parse_update({"$set": {"a": {"b": [1]}}, "$push": {"p": {"q": [1]}}})
    first = update.apply({"_id": 1}, now_ms=NOW)
    first["a"]["b"].append(2)
    first["p"][0]["q"].append(2)
    second = update.apply({"_id": 2}, now_ms=NOW)
    assert second == {"_id": 2, "a": {"b": [1]}, "p": [{"q": [1]}]}


def test_no_op_returns_an_equal_document() -> None:
    doc = {"_id": 1, "a": [1, 2], "b": {"c": 1.5}, "p": [3]}
    spec = {"$set": {"b.c": 1.5}, "$addToSet": {"a": 2}, "$pull": {"p": 7}, "$unset": {"z": 1}}
    out = run(doc, spec)
    assert out is not doc
    assert_same(out, doc)


def test_dbref_is_a_document_to_update() -> None:
    doc = bson.decode(bson.encode({"_id": 1, "r": {"$ref": "c", "$id": 1}}), CODEC)
    out = run(doc, {"$set": {"r.$id": 2}})
    assert bson.encode(out) == bson.encode({"_id": 1, "r": {"$ref": "c", "$id": 2}})


def test_one_update_many_documents() -> None:
    update = parse_update({"$inc": {"n": 1}, "$currentDate": {"at": True}})
    docs = [{"_id": i, "n": i} for i in range(3)]
    out = [update.apply(d, now_ms=NOW + i) for i, d in enumerate(docs)]
    assert out == [{"_id": i, "n": i + 1, "at": DatetimeMS(NOW + i)} for i in range(3)]


_FLAT_UPDATES: list[Doc] = [
    {"$inc": {"a": 1}},
    {"$inc": {"a": 1, "missing": 2}, "$set": {"b": {"x": [1]}}},
    {"$set": {"r": {"$ref": "d", "$id": 3}}, "$unset": {"c": ""}},
    {"$mul": {"a": 2}, "$min": {"m": 0}, "$max": {"n": [1, 2]}},
    {"$currentDate": {"t": True}, "$setOnInsert": {"s": 1}},
    {"$inc": {"s": 1}},  # a string: TypeMismatch
    {"$set": {"_id": 2}},  # ImmutableField
    {"$set": {"$dollar": 2}},
]
_FLAT_DOCS: list[Doc] = [
    {"_id": 1, "a": 1, "b": {"x": 1}, "c": [1, {"y": 2}], "s": "text"},
    {"_id": 1, "r": {"$ref": "c", "$id": 1}, "a": 2.5, "$dollar": 1, "m": 5, "n": [0]},
    {"_id": 1},
]


@cases(
    ("u", "d"),
    [(f"u{i}-d{j}", u, d) for i, u in enumerate(_FLAT_UPDATES) for j, d in enumerate(_FLAT_DOCS)],
)
def test_top_level_updates_apply_as_the_walk_does(u: Doc, d: Doc) -> None:
    """Update's flat case (a shallow copy, apply_top_level) answers as the general one."""
    change = parse_update(u)
    assert change._flat
    walk = copy.copy(change)
    object.__setattr__(walk, "_flat", False)
    object.__setattr__(walk, "_dollar_free", False)
    for inserting in (False, True):
        doc = bson.decode(bson.encode(d), CODEC)
        before = bson.encode(doc)
        got: Any
        want: Any
        try:
            got = bson.encode(change.apply(doc, now_ms=NOW, inserting=inserting))
        except QueryError as exc:
            got = (exc.args, str(exc))
        try:
            want = bson.encode(walk.apply(doc, now_ms=NOW, inserting=inserting))
        except QueryError as exc:
            want = (exc.args, str(exc))
        assert got == want
        assert bson.encode(doc) == before  # the document applied to is left as it was
