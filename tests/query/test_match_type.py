"""$type, table-driven: every alias and numeric code against decoded BSON values (int32 decodes as int,
int64 as Int64), arrays ("array" matches the array, other types its elements), and the argument
errors MongoDB gives."""

from __future__ import annotations

import datetime
from typing import Any

from bson import Binary, Code, DBRef, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.query.match import compile_filter
from tests.helpers import cases, errors_test

OID = ObjectId(b"\x02" * 12)

CASES: list[tuple[str, Any, Any, bool]] = [
    # (name, $type argument, value of field a, matches?)
    ("double", "double", 1.5, True),
    ("double code", 1, 1.5, True),
    ("double is not int", "double", 1, False),
    ("int", "int", 1, True),
    ("int code", 16, 7, True),
    ("int is not long", "int", Int64(1), False),
    ("int is not double", "int", 1.0, False),
    ("int32 upper bound", "int", 2**31 - 1, True),
    ("beyond int32 is long", "long", 2**31, True),
    ("beyond int32 is not int", "int", 2**31, False),
    ("long", "long", Int64(1), True),
    ("long code", 18, Int64(5), True),
    ("decimal", "decimal", Decimal128("1.5"), True),
    ("decimal code", 19, Decimal128("1"), True),
    ("number int", "number", 1, True),
    ("number double", "number", 1.5, True),
    ("number long", "number", Int64(1), True),
    ("number decimal", "number", Decimal128("1"), True),
    ("number is not bool", "number", True, False),
    ("number is not string", "number", "1", False),
    ("string", "string", "x", True),
    ("string code", 2, "", True),
    ("string is not number", "string", 1, False),
    ("object", "object", {"b": 1}, True),
    ("empty object", "object", {}, True),
    ("DBRef is an object", "object", DBRef("c", 1), True),
    ("array", "array", [1], True),
    ("empty array", "array", [], True),
    ("array code", 4, [1, 2], True),
    ("array of arrays", "array", [[1]], True),
    ("scalar is not array", "array", 1, False),
    ("object is not array", "array", {"0": 1}, False),
    ("element type", "int", [1.5, 2], True),
    ("no element of the type", "int", [1.5, "x"], False),
    ("string element", "string", ["x"], True),
    ("array is not object", "object", [1], False),
    ("object element", "object", [1, {}], True),
    ("binData bytes", "binData", b"x", True),
    ("binData subtype", "binData", Binary(b"x", 4), True),
    ("binData code", 5, b"", True),
    ("objectId", "objectId", OID, True),
    ("objectId code", 7, OID, True),
    ("bool", "bool", False, True),
    ("bool code", 8, True, True),
    ("bool is not int", "bool", 1, False),
    ("date", "date", DatetimeMS(0), True),
    ("date as datetime", "date", datetime.datetime(2020, 1, 1), True),
    ("date code", 9, DatetimeMS(5), True),
    ("null", "null", None, True),
    ("null code", 10, None, True),
    ("null is not 0", "null", 0, False),
    ("undefined never (decoded as null)", "undefined", None, False),
    ("regex", "regex", Regex("x"), True),
    ("regex code", 11, Regex("x", "i"), True),
    ("javascript", "javascript", Code("f()"), True),
    ("javascript code", 13, Code("f()"), True),
    ("javascript is not string", "string", Code("f()"), False),
    ("javascriptWithScope", "javascriptWithScope", Code("f()", {"x": 1}), True),
    ("javascriptWithScope code", 15, Code("f()", {}), True),
    ("javascript without scope", "javascriptWithScope", Code("f()"), False),
    ("timestamp", "timestamp", Timestamp(1, 2), True),
    ("timestamp code", 17, Timestamp(1, 2), True),
    ("timestamp is not date", "date", Timestamp(1, 2), False),
    ("minKey", "minKey", MinKey(), True),
    ("minKey code", -1, MinKey(), True),
    ("maxKey", "maxKey", MaxKey(), True),
    ("maxKey code", 127, MaxKey(), True),
    ("symbol never (decoded as string)", "symbol", "x", False),
    ("dbPointer never (decoded as DBRef)", "dbPointer", DBRef("c", 1), False),
    ("code as double", 2.0, "x", True),
    ("code as long", Int64(2), "x", True),
    ("code as decimal", Decimal128("2"), "x", True),
    ("list of types, first", ["string", "int"], "x", True),
    ("list of types, second", ["string", "int"], 1, True),
    ("list of types, none", ["string", "int"], 1.5, False),
    ("list mixing codes and aliases", [8, "null"], None, True),
]


@cases(("arg", "value", "expected"), CASES)
def test_type(arg: Any, value: Any, expected: bool) -> None:
    assert compile_filter({"a": {"$type": arg}})({"a": value}) is expected


def test_type_never_matches_a_missing_field() -> None:
    pred = compile_filter({"a": {"$type": ["null", "number", "string", "object", "array"]}})
    assert pred({}) is False
    assert pred({"b": 1}) is False


def test_type_on_dotted_paths() -> None:
    pred = compile_filter({"a.b": {"$type": "int"}})
    assert pred({"a": [{"b": "x"}, {"b": 1}]}) is True
    assert pred({"a": [{"b": "x"}, {"c": 1}]}) is False
    assert compile_filter({"a.b": {"$type": "array"}})({"a": [{"b": [1]}]}) is True


def test_not_type() -> None:
    pred = compile_filter({"a": {"$not": {"$type": "string"}}})
    assert pred({"a": 1}) is True
    assert pred({}) is True
    assert pred({"a": [1, "x"]}) is False


ERRORS: list[tuple[str, Any, str, str]] = [
    ("unknown alias", "foo", "BadValue", "Unknown type name alias: foo"),
    ("alias case matters", "Double", "BadValue", "Unknown type name alias: Double"),
    ("bad code", 99, "BadValue", "Invalid numerical type code: 99"),
    ("fractional code", 2.5, "BadValue", "Invalid numerical type code: 2.5"),
    ("NaN code", float("nan"), "BadValue", "Invalid numerical type code: nan"),
    (
        "code 0",
        0,
        "BadValue",
        "Invalid numerical type code: 0. Instead use {$exists:false}.",
    ),
    (
        "missing",
        "missing",
        "BadValue",
        "'missing' is not a legal type name. To query for non-existence of a field, use "
        "{$exists:false}.",
    ),
    ("bool", True, "TypeMismatch", "type must be represented as a number or a string"),
    ("null", None, "TypeMismatch", "type must be represented as a number or a string"),
    ("object", {}, "TypeMismatch", "type must be represented as a number or a string"),
    ("nested list", [["int"]], "TypeMismatch", "type must be represented as a number or a string"),
    ("empty list", [], "FailedToParse", "a must match at least one type"),
    ("bad alias in a list", ["int", "foo"], "BadValue", "Unknown type name alias: foo"),
    ("bad code in a list", ["int", 42], "BadValue", "Invalid numerical type code: 42"),
]


test_type_errors = errors_test(lambda arg: compile_filter({"a": {"$type": arg}}), ERRORS)
