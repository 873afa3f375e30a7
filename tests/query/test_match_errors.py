"""Malformed and unsupported filters, table-driven: each raises QueryError at compile time with
MongoDB's codeName and message, wherever it sits in the filter (inside $and/$or/$nor, $not or
$elemMatch); and filters that only look malformed, with the tree they parse to and the documents
they match."""

from __future__ import annotations

from typing import Any

import pytest

from ebbdb.storage.query import match_tree as t
from ebbdb.storage.query.match import compile_filter, parse_filter
from tests.helpers import errors_test

GETFIELD_HINT = ". If you have a field name that starts with a '$' symbol, consider using $getField or $setField."

ERRORS: list[tuple[str, dict[str, Any], str, str]] = [
    # -- operators ---------------------------------------------------------------------------------
    ("unknown operator", {"a": {"$foo": 1}}, "BadValue", "unknown operator: $foo"),
    (
        "unknown after a known one",
        {"a": {"$gt": 1, "$bar": 2}},
        "BadValue",
        "unknown operator: $bar",
    ),
    ("field after an operator", {"a": {"$gt": 1, "b": 2}}, "BadValue", "unknown operator: b"),
    ("$comment on a field", {"a": {"$comment": "x"}}, "BadValue", "unknown operator: $comment"),
    (
        "$where on a field",
        {"a": {"$where": "1"}},
        "BadValue",
        "$where cannot be applied to a field",
    ),
    (
        "unknown top-level operator",
        {"$foo": 1},
        "BadValue",
        "unknown top level operator: $foo" + GETFIELD_HINT,
    ),
    (
        "top-level $not",
        {"$not": {"a": 1}},
        "BadValue",
        "unknown top level operator: $not. If you are trying to negate an entire expression, use $nor.",
    ),
    (
        "top-level field operator",
        {"$gt": 1},
        "BadValue",
        "unknown top level operator: $gt" + GETFIELD_HINT,
    ),
    # -- $in / $nin --------------------------------------------------------------------------------
    ("$in number", {"a": {"$in": 1}}, "BadValue", "$in needs an array"),
    ("$in document", {"a": {"$in": {"b": 1}}}, "BadValue", "$in needs an array"),
    ("$nin number", {"a": {"$nin": 1}}, "BadValue", "$nin needs an array"),
    ("$in operator element", {"a": {"$in": [{"$gt": 1}]}}, "BadValue", "cannot nest $ under $in"),
    (
        "$nin operator element",
        {"a": {"$nin": [1, {"$exists": 1}]}},
        "BadValue",
        "cannot nest $ under $in",
    ),
    # -- logical -----------------------------------------------------------------------------------
    ("$and not an array", {"$and": {"a": 1}}, "BadValue", "$and must be an array"),
    ("$or not an array", {"$or": 1}, "BadValue", "$or must be an array"),
    ("$nor not an array", {"$nor": "x"}, "BadValue", "$nor must be an array"),
    ("$and empty", {"$and": []}, "BadValue", "$and/$or/$nor must be a nonempty array"),
    ("$or empty", {"$or": []}, "BadValue", "$and/$or/$nor must be a nonempty array"),
    (
        "$nor scalar entry",
        {"$nor": [1]},
        "BadValue",
        "$or/$and/$nor entries need to be full objects",
    ),
    (
        "$or array entry",
        {"$or": [[{"a": 1}]]},
        "BadValue",
        "$or/$and/$nor entries need to be full objects",
    ),
    ("$not number", {"a": {"$not": 5}}, "BadValue", "$not needs a regex or a document"),
    ("$not string", {"a": {"$not": "x"}}, "BadValue", "$not needs a regex or a document"),
    ("$not array", {"a": {"$not": [{"$gt": 1}]}}, "BadValue", "$not needs a regex or a document"),
    ("$not empty", {"a": {"$not": {}}}, "BadValue", "$not cannot be empty"),
    ("$not of a field", {"a": {"$not": {"b": 1}}}, "BadValue", "unknown operator: b"),
    (
        "$alwaysTrue 2",
        {"$alwaysTrue": 2},
        "FailedToParse",
        "$alwaysTrue must be an integer value of 1",
    ),
    (
        "$alwaysFalse string",
        {"$alwaysFalse": "x"},
        "FailedToParse",
        'Expected a number in: $alwaysFalse: "x"',
    ),
    # -- nested errors surface --------------------------------------------------------------------
    ("inside $and", {"$and": [{"a": {"$nope": 1}}]}, "BadValue", "unknown operator: $nope"),
    (
        "inside $or",
        {"$or": [{"a": 1}, {"a": {"$size": -1}}]},
        "BadValue",
        "Failed to parse $size. Expected a positive number in: $size: -1",
    ),
    ("inside $nor", {"$nor": [{"a": {"$in": 5}}]}, "BadValue", "$in needs an array"),
    ("inside $not", {"a": {"$not": {"$type": "foo"}}}, "BadValue", "Unknown type name alias: foo"),
    (
        "inside $elemMatch value",
        {"a": {"$elemMatch": {"$mod": [0, 1]}}},
        "BadValue",
        "divisor cannot be 0",
    ),
    (
        "inside $elemMatch document",
        {"a": {"$elemMatch": {"b": {"$all": 1}}}},
        "BadValue",
        "$all needs an array",
    ),
    (
        "inside $all $elemMatch",
        {"a": {"$all": [{"$elemMatch": 1}]}},
        "BadValue",
        "$elemMatch needs an Object",
    ),
    (
        "$expr inside $elemMatch",
        {"a": {"$elemMatch": {"$expr": {"$eq": ["$b", 1]}}}},
        "BadValue",
        "$expr can only be applied to the top-level document",
    ),
    ("$where of a number", {"$where": 5}, "BadValue", "$where got bad type"),
    # $text parses here; matching needs the collection's text index (tests/e2e/test_text_index.py).
    ("$text", {"$text": "x"}, "BadValue", "$text expects an object"),
    ("$text no $search", {"$text": {}}, "BadValue", "$search required and must be a string"),
    ("$text extra", {"$text": {"$search": "x", "y": 1}}, "BadValue", "extra fields in $text: y"),
    (
        "$text twice",
        {"$and": [{"$text": {"$search": "x"}}, {"$text": {"$search": "y"}}]},
        "BadValue",
        "Too many text expressions",
    ),
    (
        "$text in $nor",
        {"$nor": [{"$text": {"$search": "x"}}]},
        "BadValue",
        "text expression not allowed in nor",
    ),
    (
        "$text in $elemMatch",
        {"a": {"$elemMatch": {"$text": {"$search": "x"}}}},
        "BadValue",
        "$text can only be applied to the top-level document",
    ),
    # $jsonSchema runs (storage/query/json_schema.py); a malformed schema is refused as MongoDB does.
    (
        "$jsonSchema",
        {"$jsonSchema": {"foo": 1}},
        "FailedToParse",
        "Unknown $jsonSchema keyword: foo",
    ),
    # The geo operators run (storage/query/geo_match.py); a malformed argument is BadValue.
    ("$near", {"a": {"$near": "x"}}, "BadValue", 'invalid argument in geo near query: "x"'),
    (
        "$geoWithin",
        {"a": {"$geoWithin": {}}},
        "BadValue",
        "$geoWithin not supported with provided geometry: {}",
    ),
]


test_errors = errors_test(compile_filter, ERRORS)


def _any(v: Any) -> bool:
    return False  # a stand-in: a leaf's test takes no part in comparing nodes


DBREF = {"$ref": "c", "$id": 1}

#: Filters that look wrong and are not: (name, filter, its parsed tree, documents it matches,
#: documents it does not).
ACCEPTED: list[tuple[str, dict[str, Any], t.Node, list[dict[str, Any]], list[dict[str, Any]]]] = [
    (
        "$exists takes anything",  # a document is true, as in MongoDB
        {"a": {"$exists": {"x": [1]}}},
        t.Exists("a", _any),
        [{"a": None}, {"a": 0}],
        [{}, {"b": 1}],
    ),
    (
        "$eq takes an operator document as a value",
        {"a": {"$eq": {"$gt": 1}}},
        t.Compare("a", _any, "$eq", {"$gt": 1}),
        [{"a": {"$gt": 1}}],
        [{"a": 5}, {"a": {"$gt": 2}}],
    ),
    (
        "a literal document not starting with $",
        {"a": {"b": 1, "$gt": 2}},
        t.Compare("a", _any, "$eq", {"b": 1, "$gt": 2}),
        [{"a": {"b": 1, "$gt": 2}}, {"a": [{"b": 1, "$gt": 2}]}],
        [{"a": {"$gt": 2, "b": 1}}, {"a": 5}],
    ),
    (
        "a DBRef-shaped document is a value",
        {"a": DBREF},
        t.Compare("a", _any, "$eq", DBREF),
        [{"a": DBREF}],
        [{"a": {"$ref": "c", "$id": 2}}, {"a": {"$id": 1, "$ref": "c"}}],
    ),
    (
        "$in takes a DBRef-shaped document",
        {"a": {"$in": [DBREF]}},
        t.In("a", _any, (DBREF,)),
        [{"a": DBREF}, {"a": [2, DBREF]}],
        [{"a": {"$ref": "c"}}, {}],
    ),
    (
        "$all takes an unknown $-key document",
        {"a": {"$all": [{"$foo": 1}]}},
        t.All("a", (t.Compare("a", _any, "$eq", {"$foo": 1}),)),
        [{"a": {"$foo": 1}}, {"a": [{"$foo": 1}, 2]}],
        [{"a": {"$foo": 2}}, {"a": []}],
    ),
    ("$comment anywhere at the top", {"$comment": 5}, t.And(()), [{}, {"a": 1}], []),
    (
        "$comment beside a condition",
        {"$comment": 5, "a": 1},
        t.Compare("a", _any, "$eq", 1),
        [{"a": 1}],
        [{"a": 2}, {"$comment": 5}],
    ),
]


@pytest.mark.parametrize(
    ("flt", "tree", "matched", "unmatched"),
    [a[1:] for a in ACCEPTED],
    ids=[a[0] for a in ACCEPTED],
)
def test_accepted(
    flt: dict[str, Any],
    tree: t.Node,
    matched: list[dict[str, Any]],
    unmatched: list[dict[str, Any]],
) -> None:
    assert parse_filter(flt).tree == tree
    compiled = compile_filter(flt)
    assert [doc for doc in matched + unmatched if compiled(doc)] == matched


def test_literal_documents_compare_whole() -> None:
    assert compile_filter({"a": {"b": 1, "$gt": 2}})({"a": {"b": 1, "$gt": 2}}) is True
    assert compile_filter({"a": {"b": 1, "$gt": 2}})({"a": 5}) is False
    assert compile_filter({"a": {"$eq": {"$gt": 1}}})({"a": 5}) is False
    assert compile_filter({"a": {"$eq": {"$gt": 1}}})({"a": {"$gt": 1}}) is True
