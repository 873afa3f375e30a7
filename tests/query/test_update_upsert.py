"""Upserts: the seed document MongoDB builds from a query's equality conditions (which conditions
count, dotted paths, order, conflicts), and updates applied to it as the insert
($setOnInsert, `_id` rules, positional paths, replacements)."""

from __future__ import annotations

from typing import Any

import bson
from bson import ObjectId, Regex
from bson.datetime_ms import DatetimeMS

from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.query.match import parse_filter
from ebbdb.storage.query.update import parse_update
from ebbdb.storage.query.update import upsert_seed as seed_of_parsed
from tests.helpers import cases, errors_test, query_error

Doc = dict[str, Any]
NOW = 1_700_000_000_123


def upsert_seed(query: Doc, *, replacement: bool = False) -> Doc:
    """The seed of a query as a write parses it: once, then the seed reads its tree."""
    return seed_of_parsed(parse_filter(query), replacement=replacement)


OID = ObjectId("65a000000000000000000001")

# (id, query, seed)
SEEDS: list[tuple[str, Doc, Doc]] = [
    ("empty query", {}, {}),
    ("equality", {"a": 1}, {"a": 1}),
    ("_id first", {"a": 1, "_id": OID}, {"_id": OID, "a": 1}),
    ("fields in path order", {"b": 1, "a": 2, "_id": 3}, {"_id": 3, "a": 2, "b": 1}),
    ("dotted paths nest", {"a.c": 2, "a.b": 1}, {"a": {"b": 1, "c": 2}}),
    ("numeric parts are field names", {"a.0": 1}, {"a": {"0": 1}}),
    ("$eq", {"a": {"$eq": 3}}, {"a": 3}),
    ("$eq with a range", {"a": {"$gt": 0, "$eq": 3}}, {"a": 3}),
    ("$eq of a document", {"a": {"$eq": {"b": 1}}}, {"a": {"b": 1}}),
    ("a document", {"a": {"b": 1}}, {"a": {"b": 1}}),
    ("an empty document", {"a": {}}, {"a": {}}),
    ("an array", {"a": [1, 2]}, {"a": [1, 2]}),
    ("null", {"a": None}, {"a": None}),
    ("one-value $in", {"a": {"$in": [3]}}, {"a": 3}),
    ("two-value $in", {"a": {"$in": [3, 4]}}, {}),
    ("one-regex $in", {"a": {"$in": [Regex("x")]}}, {}),
    ("one-value $all", {"a": {"$all": [5]}}, {"a": 5}),
    ("ranges", {"a": {"$gt": 1}, "b": {"$ne": 2}, "c": {"$exists": True}}, {}),
    ("regex", {"a": Regex("^x")}, {}),
    ("$and", {"$and": [{"a": 1}, {"b": {"$eq": 2}}]}, {"a": 1, "b": 2}),
    ("nested $and", {"$and": [{"$and": [{"a": 1}]}, {"b": 2}]}, {"a": 1, "b": 2}),
    ("one-clause $or", {"$or": [{"a": 1}]}, {"a": 1}),
    ("two-clause $or", {"$or": [{"a": 1}, {"b": 2}]}, {}),
    ("$nor", {"$nor": [{"a": 1}]}, {}),
    ("$expr", {"$expr": {"$eq": ["$a", 1]}, "b": 1}, {"b": 1}),
    ("$elemMatch", {"a": {"$elemMatch": {"b": 1}}}, {}),
    ("_id subfields", {"_id.x": 1, "_id.y": 2}, {"_id": {"x": 1, "y": 2}}),
    ("a parent after its child", {"a.b": 1, "a": {"c": 1}}, {"a": {"c": 1, "b": 1}}),
]


@cases(("query", "seed"), SEEDS)
def test_seed(query: Doc, seed: Doc) -> None:
    out = upsert_seed(query)
    assert out == seed
    assert bson.encode(out, codec_options=CODEC) == bson.encode(seed, codec_options=CODEC)


# (id, query, codeName, message)
SEED_ERRORS: list[tuple[str, Doc, str, str]] = [
    (
        "a child under an equality",
        {"a": 1, "a.b": 2},
        "NotSingleValueField",
        "cannot infer query fields to set, both paths 'a.b' and 'a' are matched",
    ),
    (
        "one path twice",
        {"a": 1, "$and": [{"a": 2}]},
        "NotSingleValueField",
        "cannot infer query fields to set, path 'a' is matched twice",
    ),
    (
        "$all of two values",
        {"a": {"$all": [1, 2]}},
        "NotSingleValueField",
        "cannot infer query fields to set, path 'a' is matched twice",
    ),
    (
        "the nearest parent is named",
        {"x.y": 1, "x": {"q": 1}, "x.y.z": 1},
        "NotSingleValueField",
        "cannot infer query fields to set, both paths 'x.y.z' and 'x.y' are matched",
    ),
    (
        # Only parents of a later path are checked; this one fails while building the seed.
        "a child before a scalar parent",
        {"x.y.z": 1, "x.y": 2},
        "PathNotViable",
        "cannot use the part (y of x.y.z) to traverse the element ({y: 2})",
    ),
    (
        "a parent that is not a document",
        {"a.b": 1, "a": 5},
        "PathNotViable",
        "cannot use the part (a of a.b) to traverse the element ({a: 5})",
    ),
]


test_seed_error = errors_test(upsert_seed, SEED_ERRORS)


def test_seed_for_a_replacement_takes_only_id() -> None:
    assert upsert_seed({"_id": 1, "a": 2}, replacement=True) == {"_id": 1}
    # Conflicts away from _id do not matter to a replacement.
    assert upsert_seed({"a": 1, "a.b": 2, "_id": 3}, replacement=True) == {"_id": 3}
    assert query_error(upsert_seed, {"_id.x": 1}, replacement=True) == (
        "NotExactValueField",
        "field at '_id' must be exactly specified, field at sub-path '_id.x'found",
    )


def test_seed_copies_query_values() -> None:
    query = {"a": {"b": [1]}}
    seed = upsert_seed(query)
    seed["a"]["b"].append(2)
    assert query == {"a": {"b": [1]}}


# -- applying to the seed ---------------------------------------------------------------------------

# (id, query, update, inserted document)
INSERTS: list[tuple[str, Doc, Doc, Doc]] = [
    (
        "$setOnInsert applies",
        {"a": 1},
        {"$setOnInsert": {"c": 3}, "$set": {"b": 2}},
        {"a": 1, "b": 2, "c": 3},
    ),
    ("$set over a seed field", {"a": 1}, {"$set": {"a": 5}}, {"a": 5}),
    ("$inc a seed field", {"a": 1}, {"$inc": {"a": 1}}, {"a": 2}),
    ("$set _id when the query has none", {"a": 1}, {"$set": {"_id": 5}}, {"_id": 5, "a": 1}),
    ("$set the query's _id", {"_id": 5}, {"$set": {"_id": 5, "x": 1}}, {"_id": 5, "x": 1}),
    (
        "$setOnInsert _id",
        {"a": 1},
        {"$setOnInsert": {"_id": OID}},
        {"_id": OID, "a": 1},
    ),
    (
        "$[] on a seed array",
        {"a": [1, 2]},
        {"$inc": {"a.$[]": 1}},
        {"a": [2, 3]},
    ),
    ("$currentDate", {"_id": 1}, {"$currentDate": {"at": True}}, {"_id": 1, "at": DatetimeMS(NOW)}),
    (
        "$push and $addToSet create arrays",
        {"k": 1},
        {"$push": {"p": 1}, "$addToSet": {"s": {"$each": [1, 1]}}},
        {"k": 1, "p": [1], "s": [1]},
    ),
    ("$unset a seed field", {"a": 1, "b": 2}, {"$unset": {"a": 1}}, {"b": 2}),
]


@cases(("query", "spec", "expected"), INSERTS)
def test_insert(query: Doc, spec: Doc, expected: Doc) -> None:
    parsed = parse_filter(query)
    out = parse_update(spec).apply(seed_of_parsed(parsed), now_ms=NOW, inserting=True, query=parsed)
    assert out == expected
    assert list(out) == list(expected)


# (id, query, update, codeName, message)
INSERT_ERRORS: list[tuple[str, Doc, Doc, str, str]] = [
    (
        "$set another _id than the query's",
        {"_id": 1},
        {"$set": {"_id": 2}},
        "ImmutableField",
        "Performing an update on the path '_id' would modify the immutable field '_id'",
    ),
    (
        "positional on an insert",
        {"a": [1]},
        {"$set": {"a.$": 2}},
        "BadValue",
        "The positional operator did not find the match needed from the query.",
    ),
    (
        "$[] on a missing array",
        {"x": 1},
        {"$set": {"a.$[]": 2}},
        "BadValue",
        "The path 'a' must exist in the document in order to apply array updates.",
    ),
    (
        "a replacement with another _id",
        {"_id": 1},
        {"_id": 2, "a": 1},
        "ImmutableField",
        "After applying the update, the (immutable) field '_id' was found to have been altered "
        "to _id: 2",
    ),
]


@cases(("query", "spec", "code", "message"), INSERT_ERRORS)
def test_insert_error(query: Doc, spec: Doc, code: str, message: str) -> None:
    update = parse_update(spec)
    seed = upsert_seed(query, replacement=update.replacement)
    assert query_error(
        update.apply, seed, now_ms=NOW, inserting=True, query=parse_filter(query)
    ) == (
        code,
        message,
    )


def test_replacement_upsert_keeps_the_query_id() -> None:
    update = parse_update({"b": 1})
    seed = upsert_seed({"_id": 7, "a": 1}, replacement=True)
    assert update.apply(seed, now_ms=NOW, inserting=True) == {"_id": 7, "b": 1}
    same = parse_update({"b": 1, "_id": 7})
    assert list(same.apply(seed, now_ms=NOW, inserting=True)) == ["_id", "b"]
