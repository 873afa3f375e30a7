"""Logical operators, table-driven: $not over operators (with arrays and missing fields), $and, $or
and $nor nested at any depth and inside $elemMatch, $alwaysTrue/$alwaysFalse, $comment, and
$exists' BSON truthiness."""

from __future__ import annotations

from typing import Any

from bson import Decimal128

from ebbdb.storage.query.match import compile_filter
from tests.helpers import cases

CASES: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    # -- $not --------------------------------------------------------------------------------------
    ("not gt, greater", {"a": {"$not": {"$gt": 5}}}, {"a": 6}, False),
    ("not gt, smaller", {"a": {"$not": {"$gt": 5}}}, {"a": 4}, True),
    ("not gt, missing", {"a": {"$not": {"$gt": 5}}}, {}, True),
    ("not gt, other type", {"a": {"$not": {"$gt": 5}}}, {"a": "x"}, True),
    ("not gt, array with a greater", {"a": {"$not": {"$gt": 5}}}, {"a": [1, 6]}, False),
    ("not gt, array without", {"a": {"$not": {"$gt": 5}}}, {"a": [1, 2]}, True),
    ("not of a range", {"a": {"$not": {"$gt": 1, "$lt": 5}}}, {"a": 3}, False),
    ("not of a range, outside", {"a": {"$not": {"$gt": 1, "$lt": 5}}}, {"a": 7}, True),
    (
        "not of a range split over elements",
        {"a": {"$not": {"$gt": 1, "$lt": 5}}},
        {"a": [0, 10]},
        False,
    ),
    ("not not", {"a": {"$not": {"$not": {"$gt": 5}}}}, {"a": 6}, True),
    ("not eq null on missing", {"a": {"$not": {"$eq": None}}}, {}, False),
    ("not eq null on value", {"a": {"$not": {"$eq": None}}}, {"a": 1}, True),
    ("not exists", {"a": {"$not": {"$exists": True}}}, {}, True),
    ("not in", {"a": {"$not": {"$in": [1, 2]}}}, {"a": [3, 2]}, False),
    ("not elemMatch", {"a": {"$not": {"$elemMatch": {"$gt": 1}}}}, {"a": [0]}, True),
    ("not with a sibling", {"a": {"$not": {"$gt": 5}, "$gt": 1}}, {"a": 3}, True),
    ("not with a sibling, fails", {"a": {"$not": {"$gt": 5}, "$gt": 1}}, {"a": 0}, False),
    ("not on a dotted path", {"a.b": {"$not": {"$gt": 5}}}, {"a": [{"b": 1}, {"b": 9}]}, False),
    (
        "not on a dotted path, none",
        {"a.b": {"$not": {"$gt": 5}}},
        {"a": [{"b": 1}, {"c": 9}]},
        True,
    ),
    # -- $and / $or / $nor -------------------------------------------------------------------------
    ("and same field", {"$and": [{"a": {"$gt": 1}}, {"a": {"$lt": 3}}]}, {"a": 2}, True),
    (
        "and same field, split over elements",
        {"$and": [{"a": {"$gt": 1}}, {"a": {"$lt": 3}}]},
        {"a": [0, 5]},
        True,
    ),
    ("or with arrays", {"$or": [{"a": 1}, {"a.b": 2}]}, {"a": [{"b": 2}]}, True),
    ("or none", {"$or": [{"a": 1}, {"b": 1}]}, {}, False),
    ("or single clause", {"$or": [{"a": 1}]}, {"a": 1}, True),
    ("nor of or", {"$nor": [{"$or": [{"a": 1}, {"b": 1}]}, {"c": 1}]}, {"a": 2, "b": 2}, True),
    ("nor of or, one holds", {"$nor": [{"$or": [{"a": 1}, {"b": 1}]}, {"c": 1}]}, {"b": 1}, False),
    (
        "and of or",
        {"$and": [{"$or": [{"a": 1}, {"b": 1}]}, {"$or": [{"c": 1}, {"d": 1}]}]},
        {"b": 1, "d": 1},
        True,
    ),
    (
        "and of or, one fails",
        {"$and": [{"$or": [{"a": 1}, {"b": 1}]}, {"$or": [{"c": 1}, {"d": 1}]}]},
        {"b": 1},
        False,
    ),
    ("or of and", {"$or": [{"$and": [{"a": 1}, {"b": 1}]}, {"c": 1}]}, {"a": 1, "b": 2}, False),
    ("deep nesting", {"$and": [{"$or": [{"$nor": [{"a": 1}]}]}]}, {"a": 2}, True),
    ("deep nesting, fails", {"$and": [{"$or": [{"$nor": [{"a": 1}]}]}]}, {"a": 1}, False),
    ("nor with $ne", {"$nor": [{"a": {"$ne": 1}}]}, {"a": 1}, True),
    ("nor on a missing field", {"$nor": [{"a": {"$exists": True}}]}, {}, True),
    (
        "elemMatch with or",
        {"a": {"$elemMatch": {"$or": [{"b": 1}, {"b": 2}]}}},
        {"a": [{"b": 2}]},
        True,
    ),
    ("elemMatch with nor", {"a": {"$elemMatch": {"$nor": [{"b": 1}]}}}, {"a": [{"b": 1}]}, False),
    ("empty clause matches", {"$and": [{}]}, {"a": 1}, True),
    ("comment-only clause matches", {"$and": [{"$comment": "x"}]}, {"a": 1}, True),
    ("or with an empty clause", {"$or": [{}, {"a": 5}]}, {"a": 1}, True),
    # -- $alwaysTrue / $alwaysFalse / $comment -----------------------------------------------------
    ("alwaysTrue", {"$alwaysTrue": 1}, {}, True),
    ("alwaysFalse", {"$alwaysFalse": 1}, {"a": 1}, False),
    ("alwaysTrue as double", {"$alwaysTrue": 1.0}, {}, True),
    ("or alwaysFalse", {"$or": [{"$alwaysFalse": 1}, {"a": 1}]}, {"a": 1}, True),
    ("comment ignored", {"$comment": {"any": "thing"}, "a": 1}, {"a": 1}, True),
    ("comment ignored, field fails", {"$comment": "why", "a": 1}, {"a": 2}, False),
    # -- $exists takes BSON truthiness ----------------------------------------------------------------
    ("exists empty string is true", {"a": {"$exists": ""}}, {"a": 1}, True),
    ("exists empty array is true", {"a": {"$exists": []}}, {}, False),
    ("exists empty object is true", {"a": {"$exists": {}}}, {"a": 1}, True),
    ("exists null is false", {"a": {"$exists": None}}, {}, True),
    ("exists 0.0 is false", {"a": {"$exists": 0.0}}, {"a": 1}, False),
    ("exists NaN is true", {"a": {"$exists": float("nan")}}, {"a": 1}, True),
    ("exists decimal 0 is false", {"a": {"$exists": Decimal128("0")}}, {}, True),
    ("exists -1 is true", {"a": {"$exists": -1}}, {"a": 1}, True),
    # -- top-level DBRef fields compare by equality --------------------------------------------------
    ("$ref field", {"$ref": "c"}, {"$ref": "c", "x": 1}, True),
    ("$id field", {"$id": {"$gt": 1}}, {"$id": {"$gt": 1}}, True),
    ("$id field, not an operator", {"$id": {"$gt": 1}}, {"$id": 5}, False),
]


@cases(("flt", "doc", "expected"), CASES)
def test_logical(flt: dict[str, Any], doc: dict[str, Any], expected: bool) -> None:
    assert compile_filter(flt)(doc) is expected
