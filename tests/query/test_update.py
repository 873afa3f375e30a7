"""The update language on documents, table-driven: the field modifiers ($set, $unset, $inc, $mul,
$min, $max, $rename, $currentDate, $setOnInsert, $bit), dotted and numeric paths, the order new
fields land in, numeric type rules, replacement documents and the immutable `_id`.

Every expected document is compared as BSON bytes as well as by value, so a type (int against
long against double) or a field order that differs from MongoDB's fails the test."""

from __future__ import annotations

from typing import Any

import bson
from bson import Decimal128, Int64, Timestamp
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.query.update import parse_update
from tests.helpers import cases

Doc = dict[str, Any]
NOW = 1_700_000_000_123


def run(doc: Doc, spec: Doc, **kwargs: Any) -> Doc:
    return parse_update(spec).apply(doc, now_ms=NOW, **kwargs)


def assert_same(actual: Doc, expected: Doc) -> None:
    assert actual == expected
    assert bson.encode(actual, codec_options=CODEC) == bson.encode(expected, codec_options=CODEC)


# (id, document, update, expected)
CASES: list[tuple[str, Doc, Doc, Doc]] = [
    # -- $set ----------------------------------------------------------------------------------------
    ("set new field", {"_id": 1, "a": 1}, {"$set": {"b": 2}}, {"_id": 1, "a": 1, "b": 2}),
    (
        "set existing field in place",
        {"_id": 1, "a": 1, "b": 2},
        {"$set": {"a": 5}},
        {"_id": 1, "a": 5, "b": 2},
    ),
    (
        "new fields appended in field order",
        {"_id": 1},
        {"$set": {"z": 1, "b": 2, "a0": 3}},
        {"_id": 1, "a0": 3, "b": 2, "z": 1},
    ),
    (
        "existing fields stay, new ones append",
        {"_id": 1, "m": 1},
        {"$set": {"z": 1, "m": 2, "a": 3}},
        {"_id": 1, "m": 2, "a": 3, "z": 1},
    ),
    (
        "dotted creates documents",
        {"_id": 1},
        {"$set": {"a.b.c": 1}},
        {"_id": 1, "a": {"b": {"c": 1}}},
    ),
    (
        "dotted into an existing document",
        {"_id": 1, "a": {"x": 1}},
        {"$set": {"a.b": 2}},
        {"_id": 1, "a": {"x": 1, "b": 2}},
    ),
    (
        "two new fields under one new parent",
        {"_id": 1},
        {"$set": {"a.c": 1, "a.b": 2}},
        {"_id": 1, "a": {"b": 2, "c": 1}},
    ),
    (
        "replace a whole subdocument",
        {"_id": 1, "a": {"b": 1, "c": 2}},
        {"$set": {"a": {"d": 1}}},
        {"_id": 1, "a": {"d": 1}},
    ),
    (
        "array element by index",
        {"_id": 1, "a": [1, 2, 3]},
        {"$set": {"a.1": 9}},
        {"_id": 1, "a": [1, 9, 3]},
    ),
    (
        "index at the end appends",
        {"_id": 1, "a": [1]},
        {"$set": {"a.1": 9}},
        {"_id": 1, "a": [1, 9]},
    ),
    (
        "index past the end pads with nulls",
        {"_id": 1, "a": [1]},
        {"$set": {"a.3": 9}},
        {"_id": 1, "a": [1, None, None, 9]},
    ),
    (
        "index past the end, then a field",
        {"_id": 1, "a": []},
        {"$set": {"a.1.b": 2}},
        {"_id": 1, "a": [None, {"b": 2}]},
    ),
    (
        "field of an array element",
        {"_id": 1, "a": [{"b": 1}, {"b": 2}]},
        {"$set": {"a.0.b": 5}},
        {"_id": 1, "a": [{"b": 5}, {"b": 2}]},
    ),
    (
        "new field in an array element",
        {"_id": 1, "a": [{"b": 1}]},
        {"$set": {"a.0.c": 5}},
        {"_id": 1, "a": [{"b": 1, "c": 5}]},
    ),
    (
        "nested arrays",
        {"_id": 1, "a": [[1, 2], [3]]},
        {"$set": {"a.0.1": 9}},
        {"_id": 1, "a": [[1, 9], [3]]},
    ),
    (
        "an index is a field name on a missing path",
        {"_id": 1},
        {"$set": {"a.0": 1}},
        {"_id": 1, "a": {"0": 1}},
    ),
    (
        "an index is a field name in a document",
        {"_id": 1, "a": {}},
        {"$set": {"a.0": 1}},
        {"_id": 1, "a": {"0": 1}},
    ),
    (
        "leading zeros still index an array",
        {"_id": 1, "a": [1, 2]},
        {"$set": {"a.01": 9}},
        {"_id": 1, "a": [1, 9]},
    ),
    (
        "indexes 9 and 10 fill an array in number order",
        {"_id": 1, "a": []},
        {"$set": {"a.10": 2, "a.9": 1}},
        {"_id": 1, "a": [None] * 9 + [1, 2]},
    ),
    (
        "numeric field names are created in number order",
        {"_id": 1, "a": {}},
        {"$set": {"a.10": 1, "a.9": 2}},
        {"_id": 1, "a": {"9": 2, "10": 1}},
    ),
    ("same value is a no-op", {"_id": 1, "a": 1}, {"$set": {"a": 1}}, {"_id": 1, "a": 1}),
    ("1.0 over 1 changes the type", {"_id": 1, "a": 1}, {"$set": {"a": 1.0}}, {"_id": 1, "a": 1.0}),
    (
        "a $-prefixed field below the top level is allowed",
        {"_id": 1},
        {"$set": {"a": {"$x": 1}}},
        {"_id": 1, "a": {"$x": 1}},
    ),
    ("set _id to its own value", {"_id": 1, "a": 1}, {"$set": {"_id": 1}}, {"_id": 1, "a": 1}),
    (
        "set a field of _id to its own value",
        {"_id": {"x": 1}},
        {"$set": {"_id.x": 1}},
        {"_id": {"x": 1}},
    ),
    (
        "empty $set does nothing (MongoDB 5.0+)",
        {"_id": 1, "a": 1},
        {"$set": {}},
        {"_id": 1, "a": 1},
    ),
    # -- $unset -------------------------------------------------------------------------------------
    ("unset", {"_id": 1, "a": 1, "b": 2}, {"$unset": {"a": ""}}, {"_id": 1, "b": 2}),
    ("unset a missing field", {"_id": 1, "b": 2}, {"$unset": {"a": 1}}, {"_id": 1, "b": 2}),
    (
        "unset a dotted field",
        {"_id": 1, "a": {"b": 1, "c": 2}},
        {"$unset": {"a.b": 1}},
        {"_id": 1, "a": {"c": 2}},
    ),
    (
        "unset leaves an empty parent",
        {"_id": 1, "a": {"b": 1}},
        {"$unset": {"a.b": 1}},
        {"_id": 1, "a": {}},
    ),
    (
        "unset an array element nulls it",
        {"_id": 1, "a": [1, 2, 3]},
        {"$unset": {"a.1": 1}},
        {"_id": 1, "a": [1, None, 3]},
    ),
    ("unset past the end", {"_id": 1, "a": [1]}, {"$unset": {"a.5": 1}}, {"_id": 1, "a": [1]}),
    ("unset through a scalar", {"_id": 1, "a": 1}, {"$unset": {"a.b": 1}}, {"_id": 1, "a": 1}),
    (
        "unset by name in an array",
        {"_id": 1, "a": [1]},
        {"$unset": {"a.b": 1}},
        {"_id": 1, "a": [1]},
    ),
    (
        "unset several",
        {"_id": 1, "a": 1, "b": 2, "c": 3},
        {"$unset": {"c": 1, "a": 1}},
        {"_id": 1, "b": 2},
    ),
    # -- $inc ---------------------------------------------------------------------------------------
    ("inc int", {"_id": 1, "a": 1}, {"$inc": {"a": 2}}, {"_id": 1, "a": 3}),
    ("inc negative", {"_id": 1, "a": 1}, {"$inc": {"a": -5}}, {"_id": 1, "a": -4}),
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
    ("inc int by double", {"_id": 1, "a": 1}, {"$inc": {"a": 0.5}}, {"_id": 1, "a": 1.5}),
    ("inc double by int", {"_id": 1, "a": 1.0}, {"$inc": {"a": 1}}, {"_id": 1, "a": 2.0}),
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
    ("inc creates", {"_id": 1}, {"$inc": {"a": 5}}, {"_id": 1, "a": 5}),
    ("inc creates a long", {"_id": 1}, {"$inc": {"a": Int64(5)}}, {"_id": 1, "a": Int64(5)}),
    ("inc creates a dotted path", {"_id": 1}, {"$inc": {"a.b": 1.5}}, {"_id": 1, "a": {"b": 1.5}}),
    ("inc by zero is a no-op", {"_id": 1, "a": 1}, {"$inc": {"a": 0}}, {"_id": 1, "a": 1}),
    (
        "inc an array element",
        {"_id": 1, "a": [1, 2]},
        {"$inc": {"a.1": 1}},
        {"_id": 1, "a": [1, 3]},
    ),
    (
        "inc past the end pads",
        {"_id": 1, "a": [1]},
        {"$inc": {"a.2": 1}},
        {"_id": 1, "a": [1, None, 1]},
    ),
    ("inc _id by zero", {"_id": 1}, {"$inc": {"_id": 0}}, {"_id": 1}),
    # -- $mul ---------------------------------------------------------------------------------------
    ("mul int", {"_id": 1, "a": 2}, {"$mul": {"a": 3}}, {"_id": 1, "a": 6}),
    (
        "mul int past int32 becomes a long",
        {"_id": 1, "a": 2**30},
        {"$mul": {"a": 4}},
        {"_id": 1, "a": Int64(2**32)},
    ),
    ("mul int by double", {"_id": 1, "a": 2}, {"$mul": {"a": 1.5}}, {"_id": 1, "a": 3.0}),
    ("mul long by int", {"_id": 1, "a": Int64(2)}, {"$mul": {"a": 3}}, {"_id": 1, "a": Int64(6)}),
    (
        "mul decimal",
        {"_id": 1, "a": Decimal128("1.5")},
        {"$mul": {"a": 2}},
        {"_id": 1, "a": Decimal128("3.0")},
    ),
    ("mul creates an int zero", {"_id": 1}, {"$mul": {"a": 5}}, {"_id": 1, "a": 0}),
    ("mul creates a long zero", {"_id": 1}, {"$mul": {"a": Int64(5)}}, {"_id": 1, "a": Int64(0)}),
    ("mul creates a double zero", {"_id": 1}, {"$mul": {"a": 2.5}}, {"_id": 1, "a": 0.0}),
    ("mul creates a signed zero", {"_id": 1}, {"$mul": {"a": -2.5}}, {"_id": 1, "a": -0.0}),
    (
        "mul creates a decimal zero",
        {"_id": 1},
        {"$mul": {"a": Decimal128("2.5")}},
        {"_id": 1, "a": Decimal128("0.0")},
    ),
    ("mul by one is a no-op", {"_id": 1, "a": 7}, {"$mul": {"a": 1}}, {"_id": 1, "a": 7}),
    # -- $min / $max --------------------------------------------------------------------------------
    ("min lower", {"_id": 1, "a": 5}, {"$min": {"a": 3}}, {"_id": 1, "a": 3}),
    ("min higher", {"_id": 1, "a": 5}, {"$min": {"a": 7}}, {"_id": 1, "a": 5}),
    ("min equal keeps the type", {"_id": 1, "a": 1}, {"$min": {"a": 1.0}}, {"_id": 1, "a": 1}),
    ("max higher", {"_id": 1, "a": 5}, {"$max": {"a": 7}}, {"_id": 1, "a": 7}),
    ("max lower", {"_id": 1, "a": 5}, {"$max": {"a": 3}}, {"_id": 1, "a": 5}),
    ("min across types", {"_id": 1, "a": "x"}, {"$min": {"a": 1}}, {"_id": 1, "a": 1}),
    ("max across types", {"_id": 1, "a": 1}, {"$max": {"a": "x"}}, {"_id": 1, "a": "x"}),
    ("null is below numbers", {"_id": 1, "a": None}, {"$min": {"a": 1}}, {"_id": 1, "a": None}),
    ("min creates", {"_id": 1}, {"$min": {"a": 3}}, {"_id": 1, "a": 3}),
    ("max creates", {"_id": 1}, {"$max": {"a.b": 3}}, {"_id": 1, "a": {"b": 3}}),
    (
        "max of dates",
        {"_id": 1, "d": DatetimeMS(5)},
        {"$max": {"d": DatetimeMS(9)}},
        {"_id": 1, "d": DatetimeMS(9)},
    ),
    (
        "max of documents",
        {"_id": 1, "a": {"b": 1}},
        {"$max": {"a": {"b": 2}}},
        {"_id": 1, "a": {"b": 2}},
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
    # -- $setOnInsert --------------------------------------------------------------------------------
    (
        "setOnInsert does nothing on an update",
        {"_id": 1},
        {"$setOnInsert": {"a": 1}, "$set": {"b": 2}},
        {"_id": 1, "b": 2},
    ),
    # -- $rename ------------------------------------------------------------------------------------
    (
        "rename",
        {"_id": 1, "a": 1, "b": 2},
        {"$rename": {"a": "c"}},
        {"_id": 1, "b": 2, "c": 1},
    ),
    (
        "rename over an existing field",
        {"_id": 1, "a": 1, "b": 2, "c": 3},
        {"$rename": {"a": "b"}},
        {"_id": 1, "b": 1, "c": 3},
    ),
    (
        "rename onto an equal value keeps the target",
        {"_id": 1, "a": 1, "b": 1.0},
        {"$rename": {"a": "b"}},
        {"_id": 1, "b": 1.0},
    ),
    ("rename a missing field", {"_id": 1, "b": 2}, {"$rename": {"a": "c"}}, {"_id": 1, "b": 2}),
    (
        "rename dotted paths",
        {"_id": 1, "a": {"b": 1}},
        {"$rename": {"a.b": "c.d"}},
        {"_id": 1, "a": {}, "c": {"d": 1}},
    ),
    (
        "rename into an existing document",
        {"_id": 1, "a": 1, "c": {}},
        {"$rename": {"a": "c.x"}},
        {"_id": 1, "c": {"x": 1}},
    ),
    (
        "rename an array",
        {"_id": 1, "a": [1, 2]},
        {"$rename": {"a": "z"}},
        {"_id": 1, "z": [1, 2]},
    ),
    (
        "renames apply in target order",
        {"_id": 1, "a": 1, "b": 2},
        {"$rename": {"a": "y", "b": "x"}},
        {"_id": 1, "x": 2, "y": 1},
    ),
    (
        "rename with other modifiers",
        {"_id": 1, "a": 1},
        {"$rename": {"a": "b"}, "$set": {"c": 3}},
        {"_id": 1, "b": 1, "c": 3},
    ),
    # -- $bit ---------------------------------------------------------------------------------------
    ("bit and", {"_id": 1, "a": 13}, {"$bit": {"a": {"and": 10}}}, {"_id": 1, "a": 8}),
    ("bit or", {"_id": 1, "a": 13}, {"$bit": {"a": {"or": 10}}}, {"_id": 1, "a": 15}),
    ("bit xor", {"_id": 1, "a": 13}, {"$bit": {"a": {"xor": 10}}}, {"_id": 1, "a": 7}),
    (
        "bit with a long operand makes a long",
        {"_id": 1, "a": 1},
        {"$bit": {"a": {"or": Int64(2)}}},
        {"_id": 1, "a": Int64(3)},
    ),
    (
        "bit ops in order",
        {"_id": 1, "a": 13},
        {"$bit": {"a": {"and": 12, "or": 1}}},
        {"_id": 1, "a": 13},
    ),
    ("bit creates from zero", {"_id": 1}, {"$bit": {"a": {"or": 5}}}, {"_id": 1, "a": 5}),
    ("bit negative", {"_id": 1, "a": -1}, {"$bit": {"a": {"and": 6}}}, {"_id": 1, "a": 6}),
    # -- several modifiers ---------------------------------------------------------------------------
    (
        "modifiers mix, in field order",
        {"_id": 1, "n": 1, "old": 1},
        {"$inc": {"n": 1}, "$set": {"b": 1}, "$unset": {"old": 1}, "$push": {"a": 1}},
        {"_id": 1, "n": 2, "a": [1], "b": 1},
    ),
    (
        "siblings under one parent",
        {"_id": 1, "a": {"x": 1}},
        {"$inc": {"a.x": 1}, "$set": {"a.y": 1}},
        {"_id": 1, "a": {"x": 2, "y": 1}},
    ),
]


@cases(("doc", "spec", "expected"), CASES)
def test_update(doc: Doc, spec: Doc, expected: Doc) -> None:
    assert_same(run(doc, spec), expected)


# -- replacement ------------------------------------------------------------------------------------

REPLACEMENTS: list[tuple[str, Doc, Doc, Doc]] = [
    ("keeps _id, drops the rest", {"_id": 1, "a": 1}, {"b": 2}, {"_id": 1, "b": 2}),
    ("same _id", {"_id": 1, "a": 1}, {"_id": 1, "b": 2}, {"_id": 1, "b": 2}),
    ("_id moves first", {"_id": 1, "a": 1}, {"b": 2, "_id": 1}, {"_id": 1, "b": 2}),
    ("an equal _id of another type", {"_id": 1}, {"_id": 1.0, "b": 2}, {"_id": 1.0, "b": 2}),
    ("empty replacement", {"_id": 1, "a": 1}, {}, {"_id": 1}),
    ("nested $ fields are allowed", {"_id": 1}, {"a": {"$x": 1}}, {"_id": 1, "a": {"$x": 1}}),
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
