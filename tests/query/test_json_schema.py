"""$jsonSchema without a server: which documents a schema matches (keywords judge only values of
their type; the root is a document), and the refusals of malformed schemas."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Decimal128, Int64

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.json_schema import parse

MATCHES: list[tuple[dict[str, Any], dict[str, Any], bool]] = [
    ({"properties": {"a": {"minimum": 3}}}, {"a": "x"}, True),  # minimum judges numbers only
    ({"properties": {"a": {"minimum": 3}}}, {"a": Int64(2)}, False),
    ({"properties": {"a": {"bsonType": "number"}}}, {"a": Decimal128("1.5")}, True),
    ({"properties": {"a": {"type": "number", "multipleOf": 0.5}}}, {"a": 1.5}, True),
    ({"properties": {"a": {"multipleOf": 2}}}, {"a": 3}, False),
    ({"properties": {"a": {"bsonType": "int"}}}, {}, True),  # absent and not required
    ({"required": ["a"]}, {"b": 1}, False),
    ({"minimum": 3, "maxLength": 1}, {"a": 1}, True),  # scalar keywords at the root hold
    ({"bsonType": "array"}, {"a": 1}, False),  # the root is a document
    ({"enum": [{"a": 1}]}, {"a": 1}, True),
    ({"properties": {"a": {"enum": [{"x": 1, "y": 2}]}}}, {"a": {"y": 2, "x": 1}}, True),
    ({"properties": {"a": {"uniqueItems": True}}}, {"a": [1, 1.0]}, False),
    (
        {"properties": {"a": {"items": [{"bsonType": "int"}], "additionalItems": False}}},
        {"a": [1]},
        True,
    ),
    ({"patternProperties": {"^x": {"bsonType": "string"}}}, {"xa": 1}, False),
    ({"patternProperties": {"^x": {"bsonType": "string"}}}, {"ya": 1}, True),
    (
        {"properties": {"_id": {}}, "additionalProperties": {"bsonType": "int"}},
        {"_id": 1, "b": 2},
        True,
    ),
    ({"dependencies": {"a": {"required": ["b"]}}}, {"a": 1}, False),
    ({"dependencies": {"a": {"required": ["b"]}}}, {"c": 1}, True),
    ({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, {"a": 1, "b": 1}, False),
    ({"not": {"required": ["a"]}}, {"b": 1}, True),
    ({"properties": {"s": {"pattern": "é$", "minLength": 2}}}, {"s": "aé"}, True),
]


@pytest.mark.parametrize(("schema", "doc", "expected"), MATCHES)
def test_matches(schema: dict[str, Any], doc: dict[str, Any], expected: bool) -> None:
    assert parse(schema).matches(doc) is expected


REFUSED: list[tuple[Any, str, str]] = [
    ({"default": 1}, "FailedToParse", "$jsonSchema keyword 'default' is not currently supported"),
    ({"title": 1}, "TypeMismatch", "$jsonSchema keyword 'title' must be of type string"),
    (
        {"type": ["string", "string"]},
        "FailedToParse",
        "$jsonSchema keyword 'type' has duplicate value: string",
    ),
    ({"type": []}, "FailedToParse", "$jsonSchema keyword 'type' must name at least one type"),
    ({"maxLength": -1}, "FailedToParse", "Expected a positive number in: maxLength: -1"),
    (
        {"multipleOf": 0},
        "FailedToParse",
        "$jsonSchema keyword 'multipleOf' must have a positive value",
    ),
    (
        {"exclusiveMinimum": True},
        "FailedToParse",
        "$jsonSchema keyword 'minimum' must be a present if exclusiveMinimum is present",
    ),
    (
        {"enum": [1, 1.0]},
        "FailedToParse",
        "$jsonSchema keyword 'enum' array cannot contain duplicate values.",
    ),
    (
        {"properties": {"a": 1}},
        "TypeMismatch",
        "Nested schema for $jsonSchema property 'a' must be an object",
    ),
    (
        {"dependencies": {"a": []}},
        "FailedToParse",
        "property 'a' in $jsonSchema keyword 'dependencies' cannot be an empty array",
    ),
    (
        {"items": 1},
        "TypeMismatch",
        "$jsonSchema keyword 'items' must be an array or an object, not int",
    ),
    (
        {"encrypt": {}},
        "QueryFeatureNotAllowed",
        "Encryption-related validator keywords are not allowed in this context",
    ),
]


@pytest.mark.parametrize(("schema", "code", "message"), REFUSED)
def test_refused(schema: Any, code: str, message: str) -> None:
    with pytest.raises(QueryError) as exc:
        parse(schema)
    assert (exc.value.code_name, exc.value.message) == (code, message)
