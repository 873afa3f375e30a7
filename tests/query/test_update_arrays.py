"""The array modifiers and array paths, table-driven: $push (with $each, $position, $sort, $slice),
$addToSet, $pop, $pull (values, element conditions, document queries), $pullAll, the positional
`$` resolved from the query, `$[]`, and `$[<identifier>]` with arrayFilters."""

from __future__ import annotations

from typing import Any

import bson
from bson import Decimal128, Int64, Regex

from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.query.match import parse_filter
from ebbdb.storage.query.update import parse_update
from tests.helpers import cases

Doc = dict[str, Any]
NOW = 1_700_000_000_123


def assert_same(actual: Doc, expected: Doc) -> None:
    assert actual == expected
    assert bson.encode(actual, codec_options=CODEC) == bson.encode(expected, codec_options=CODEC)


def arr(*values: Any) -> Doc:
    return {"_id": 1, "a": list(values)}


# (id, array before, update of `a`, array after)
MODIFIERS: list[tuple[str, list[Any] | None, Doc, list[Any] | None]] = [
    # -- $push --------------------------------------------------------------------------------------
    ("push", [1], {"$push": {"a": 2}}, [1, 2]),
    ("push creates the array", None, {"$push": {"a": 1}}, [1]),
    ("push an array as one element", [], {"$push": {"a": [1, 2]}}, [[1, 2]]),
    ("push a document", [], {"$push": {"a": {"b": 1}}}, [{"b": 1}]),
    ("push $each", [1], {"$push": {"a": {"$each": [2, 3]}}}, [1, 2, 3]),
    ("push $each empty", [1], {"$push": {"a": {"$each": []}}}, [1]),
    ("push $each not first", [1], {"$push": {"a": {"$slice": 5, "$each": [2]}}}, [1, 2]),
    (
        "push a modifier-like document without $each",
        [],
        {"$push": {"a": {"$slice": 1}}},
        [{"$slice": 1}],
    ),
    ("$position 0", [1, 2], {"$push": {"a": {"$each": [0], "$position": 0}}}, [0, 1, 2]),
    ("$position 1", [1, 2], {"$push": {"a": {"$each": [8, 9], "$position": 1}}}, [1, 8, 9, 2]),
    ("$position at the end", [1, 2], {"$push": {"a": {"$each": [9], "$position": 2}}}, [1, 2, 9]),
    ("$position past the end", [1, 2], {"$push": {"a": {"$each": [9], "$position": 7}}}, [1, 2, 9]),
    ("$position -1", [1, 2, 3], {"$push": {"a": {"$each": [9], "$position": -1}}}, [1, 2, 9, 3]),
    (
        "$position past the start",
        [1, 2],
        {"$push": {"a": {"$each": [9], "$position": -5}}},
        [9, 1, 2],
    ),
    (
        "$position as long",
        [1, 2],
        {"$push": {"a": {"$each": [9], "$position": Int64(1)}}},
        [1, 9, 2],
    ),
    (
        "$position as integral double",
        [1, 2],
        {"$push": {"a": {"$each": [9], "$position": 1.0}}},
        [1, 9, 2],
    ),
    ("$slice keeps the first", [1, 2], {"$push": {"a": {"$each": [3], "$slice": 2}}}, [1, 2]),
    ("$slice keeps the last", [1, 2], {"$push": {"a": {"$each": [3], "$slice": -2}}}, [2, 3]),
    ("$slice 0 empties", [1, 2], {"$push": {"a": {"$each": [3], "$slice": 0}}}, []),
    ("$slice larger than the array", [1], {"$push": {"a": {"$each": [2], "$slice": 9}}}, [1, 2]),
    ("$slice with no values", [1, 2, 3], {"$push": {"a": {"$each": [], "$slice": 1}}}, [1]),
    (
        "$slice on a missing array",
        None,
        {"$push": {"a": {"$each": [1, 2, 3], "$slice": -2}}},
        [2, 3],
    ),
    ("$sort ascending", [3, 1], {"$push": {"a": {"$each": [2], "$sort": 1}}}, [1, 2, 3]),
    ("$sort descending", [3, 1], {"$push": {"a": {"$each": [2], "$sort": -1}}}, [3, 2, 1]),
    (
        "$sort across types",
        [3, "a"],
        {"$push": {"a": {"$each": [None, 1], "$sort": 1}}},
        [None, 1, 3, "a"],
    ),
    (
        "$sort by field",
        [{"b": 3}, {"b": 1}],
        {"$push": {"a": {"$each": [{"b": 2}], "$sort": {"b": 1}}}},
        [{"b": 1}, {"b": 2}, {"b": 3}],
    ),
    (
        "$sort by field descending, non-documents as null",
        [{"b": 3}, 7, {"c": 1}],
        {"$push": {"a": {"$each": [{"b": 2}], "$sort": {"b": -1}}}},
        [{"b": 3}, {"b": 2}, 7, {"c": 1}],
    ),
    (
        "$sort by two fields",
        [{"x": 1, "y": 2}, {"x": 1, "y": 1}, {"x": 0, "y": 9}],
        {"$push": {"a": {"$each": [], "$sort": {"x": 1, "y": -1}}}},
        [{"x": 0, "y": 9}, {"x": 1, "y": 2}, {"x": 1, "y": 1}],
    ),
    (
        "$sort by a dotted field",
        [{"b": {"c": 2}}, {"b": {"c": 1}}],
        {"$push": {"a": {"$each": [], "$sort": {"b.c": 1}}}},
        [{"b": {"c": 1}}, {"b": {"c": 2}}],
    ),
    (
        "$sort by a field has no array rule",
        [{"b": [1, 9]}, {"b": 5}],
        {"$push": {"a": {"$each": [], "$sort": {"b": 1}}}},
        [{"b": 5}, {"b": [1, 9]}],
    ),
    (
        "$sort then $slice",
        [1, 9, 3],
        {"$push": {"a": {"$each": [5], "$sort": -1, "$slice": 2}}},
        [9, 5],
    ),
    (
        "$position then $sort",
        [3, 1],
        {"$push": {"a": {"$each": [2], "$position": 0, "$sort": 1}}},
        [1, 2, 3],
    ),
    # -- $addToSet ----------------------------------------------------------------------------------
    ("addToSet new", [1], {"$addToSet": {"a": 2}}, [1, 2]),
    ("addToSet present", [1, 2], {"$addToSet": {"a": 1}}, [1, 2]),
    ("addToSet an equal number", [1], {"$addToSet": {"a": 1.0}}, [1]),
    ("addToSet creates", None, {"$addToSet": {"a": 1}}, [1]),
    ("addToSet $each", [1], {"$addToSet": {"a": {"$each": [2, 2, 1, 3]}}}, [1, 2, 3]),
    (
        "addToSet $each creates, deduplicated",
        None,
        {"$addToSet": {"a": {"$each": [1, 1, 2]}}},
        [1, 2],
    ),
    ("addToSet $each empty", [1], {"$addToSet": {"a": {"$each": []}}}, [1]),
    ("addToSet an equal document", [{"b": 1}], {"$addToSet": {"a": {"b": 1}}}, [{"b": 1}]),
    (
        "addToSet field order matters",
        [{"b": 1, "c": 1}],
        {"$addToSet": {"a": {"c": 1, "b": 1}}},
        [{"b": 1, "c": 1}, {"c": 1, "b": 1}],
    ),
    ("addToSet an array as one element", [1], {"$addToSet": {"a": [1]}}, [1, [1]]),
    (
        "addToSet $each not first is a plain document",
        [],
        {"$addToSet": {"a": {"x": 1, "$each": [1]}}},
        [{"x": 1, "$each": [1]}],
    ),
    # -- $pop ---------------------------------------------------------------------------------------
    ("pop last", [1, 2, 3], {"$pop": {"a": 1}}, [1, 2]),
    ("pop first", [1, 2, 3], {"$pop": {"a": -1}}, [2, 3]),
    ("pop empty", [], {"$pop": {"a": 1}}, []),
    ("pop missing", None, {"$pop": {"a": 1}}, None),
    ("pop 1.0", [1, 2], {"$pop": {"a": 1.0}}, [1]),
    ("pop long -1", [1, 2], {"$pop": {"a": Int64(-1)}}, [2]),
    ("pop decimal", [1, 2], {"$pop": {"a": Decimal128("1")}}, [1]),
    # -- $pull --------------------------------------------------------------------------------------
    ("pull a value", [1, 2, 1, 3], {"$pull": {"a": 1}}, [2, 3]),
    ("pull an equal number", [1, 2], {"$pull": {"a": 1.0}}, [2]),
    ("pull nothing matching", [1, 2], {"$pull": {"a": 5}}, [1, 2]),
    ("pull from missing", None, {"$pull": {"a": 5}}, None),
    ("pull with a condition", [1, 2, 3, 4], {"$pull": {"a": {"$gte": 3}}}, [1, 2]),
    ("pull with $in", [1, 2, 3], {"$pull": {"a": {"$in": [1, 3]}}}, [2]),
    ("pull with $ne", [1, 2, 3, 2], {"$pull": {"a": {"$ne": 2}}}, [2, 2]),
    ("pull with two conditions", [1, 2, 3, 4], {"$pull": {"a": {"$gt": 1, "$lt": 4}}}, [1, 4]),
    ("pull with a regex", ["apple", "banana", 1], {"$pull": {"a": Regex("^a")}}, ["banana", 1]),
    (
        "pull arrays with $elemMatch",
        [[1, 2], [3]],
        {"$pull": {"a": {"$elemMatch": {"$gt": 2}}}},
        [[1, 2]],
    ),
    (
        "pull documents with a query",
        [{"b": 1, "c": 1}, {"b": 2}],
        {"$pull": {"a": {"b": 1}}},
        [{"b": 2}],
    ),
    (
        "pull documents with an operator",
        [{"b": 1}, {"b": 2}, {"b": 3}],
        {"$pull": {"a": {"b": {"$gt": 1}}}},
        [{"b": 1}],
    ),
    (
        "pull documents with $and",
        [{"b": 1, "c": 1}, {"b": 1, "c": 2}],
        {"$pull": {"a": {"$and": [{"b": 1}, {"c": 2}]}}},
        [{"b": 1, "c": 1}],
    ),
    (
        "a document query never matches scalars",
        [1, {"b": 1}, {"b": 2}],
        {"$pull": {"a": {"b": 1}}},
        [1, {"b": 2}],
    ),
    ("an empty query pulls every document", [1, {"b": 1}, {}, [1]], {"$pull": {"a": {}}}, [1, [1]]),
    ("pull an array value", [[1, 2], [1], 1], {"$pull": {"a": [1, 2]}}, [[1], 1]),
    (
        "pull by query through a nested array",
        [{"b": [1, 5]}, {"b": [2]}],
        {"$pull": {"a": {"b": 5}}},
        [{"b": [2]}],
    ),
    # -- $pullAll -----------------------------------------------------------------------------------
    ("pullAll", [1, 2, 3, 1], {"$pullAll": {"a": [1, 3]}}, [2]),
    ("pullAll equal numbers", [1, 2], {"$pullAll": {"a": [2.0]}}, [1]),
    (
        "pullAll exact documents",
        [{"b": 1, "c": 1}],
        {"$pullAll": {"a": [{"b": 1}]}},
        [{"b": 1, "c": 1}],
    ),
    ("pullAll empty", [1], {"$pullAll": {"a": []}}, [1]),
    ("pullAll missing", None, {"$pullAll": {"a": [1]}}, None),
]


@cases(("before", "spec", "after"), MODIFIERS)
def test_array_modifier(before: list[Any] | None, spec: Doc, after: list[Any] | None) -> None:
    doc = {"_id": 1} if before is None else arr(*before)
    expected = {"_id": 1} if after is None else arr(*after)
    assert_same(parse_update(spec).apply(doc, now_ms=NOW), expected)


# (id, document, update, expected)
NESTED: list[tuple[str, Doc, Doc, Doc]] = [
    (
        "push to a nested array element",
        {"_id": 1, "a": [[1]]},
        {"$push": {"a.0": 2}},
        {"_id": 1, "a": [[1, 2]]},
    ),
    (
        "push to a dotted path",
        {"_id": 1, "a": {"b": [1]}},
        {"$push": {"a.b": 2}},
        {"_id": 1, "a": {"b": [1, 2]}},
    ),
    (
        "push creates a dotted path",
        {"_id": 1},
        {"$push": {"a.b": 2}},
        {"_id": 1, "a": {"b": [2]}},
    ),
    (
        "pop through a missing document",
        {"_id": 1, "a": {}},
        {"$pop": {"a.b.c": 1}},
        {"_id": 1, "a": {}},
    ),
    (
        "pull past the end of an array",
        {"_id": 1, "a": [[1]]},
        {"$pull": {"a.3": 1}},
        {"_id": 1, "a": [[1]]},
    ),
    (
        "array modifiers on separate fields",
        {"_id": 1, "a": [1, 2], "b": [3], "c": [4, 5]},
        {"$pop": {"a": 1}, "$push": {"b": 4}, "$pull": {"c": 4}},
        {"_id": 1, "a": [1], "b": [3, 4], "c": [5]},
    ),
]


@cases(("doc", "spec", "expected"), NESTED)
def test_nested_array_modifier(doc: Doc, spec: Doc, expected: Doc) -> None:
    assert_same(parse_update(spec).apply(doc, now_ms=NOW), expected)


# -- the positional $ -------------------------------------------------------------------------------

# (id, document, query, update, expected)
POSITIONAL: list[tuple[str, Doc, Doc, Doc, Doc]] = [
    (
        "set a field of the matched element",
        {"_id": 1, "a": [{"b": 1}, {"b": 2}]},
        {"a.b": 2},
        {"$set": {"a.$.c": 9}},
        {"_id": 1, "a": [{"b": 1}, {"b": 2, "c": 9}]},
    ),
    (
        "set the matched scalar",
        {"_id": 1, "a": [1, 2, 3]},
        {"a": 2},
        {"$set": {"a.$": 20}},
        {"_id": 1, "a": [1, 20, 3]},
    ),
    (
        "inc the matched element",
        {"_id": 1, "a": [1, 2, 3]},
        {"a": {"$gte": 2}},
        {"$inc": {"a.$": 10}},
        {"_id": 1, "a": [1, 12, 3]},
    ),
    (
        "unset the matched element nulls it",
        {"_id": 1, "a": [1, 2, 3]},
        {"a": 3},
        {"$unset": {"a.$": 1}},
        {"_id": 1, "a": [1, 2, None]},
    ),
    (
        "with $elemMatch",
        {"_id": 1, "a": [{"b": 2, "c": 0}, {"b": 2, "c": 1}]},
        {"a": {"$elemMatch": {"b": 2, "c": 1}}},
        {"$set": {"a.$.d": 1}},
        {"_id": 1, "a": [{"b": 2, "c": 0}, {"b": 2, "c": 1, "d": 1}]},
    ),
    (
        "inside $and, with other conditions",
        {"_id": 1, "x": 5, "a": [{"b": 1}, {"b": 2}]},
        {"$and": [{"x": 5}, {"a.b": 2}]},
        {"$set": {"a.$.b": 3}},
        {"_id": 1, "x": 5, "a": [{"b": 1}, {"b": 3}]},
    ),
    (
        "the index applies to another array",
        {"_id": 1, "a": [1, 2], "x": [10, 20]},
        {"a": 2},
        {"$set": {"x.$": 0}},
        {"_id": 1, "a": [1, 2], "x": [10, 0]},
    ),
    (
        "push into the matched element",
        {"_id": 1, "a": [{"k": 1, "v": []}, {"k": 2, "v": [1]}]},
        {"a.k": 2},
        {"$push": {"a.$.v": 2}},
        {"_id": 1, "a": [{"k": 1, "v": []}, {"k": 2, "v": [1, 2]}]},
    ),
    (
        "merged with the same index",
        {"_id": 1, "a": [{"b": 1}, {"b": 5}]},
        {"a.b": 5},
        {"$set": {"a.$.c": 1, "a.1.d": 2}},
        {"_id": 1, "a": [{"b": 1}, {"b": 5, "c": 1, "d": 2}]},
    ),
    (
        "next to other indexes",
        {"_id": 1, "a": [0, 0, 0]},
        {"a": 0},
        {"$set": {"a.$": 1, "a.2": 3}},
        {"_id": 1, "a": [1, 0, 3]},
    ),
    (
        "a deeper positional path",
        {"_id": 1, "a": [{"b": {"c": 1}}, {"b": {"c": 2}}]},
        {"a.b.c": 2},
        {"$set": {"a.$.b.d": 0}},
        {"_id": 1, "a": [{"b": {"c": 1}}, {"b": {"c": 2, "d": 0}}]},
    ),
]


@cases(("doc", "query", "spec", "expected"), POSITIONAL)
def test_positional(doc: Doc, query: Doc, spec: Doc, expected: Doc) -> None:
    assert_same(parse_update(spec).apply(doc, now_ms=NOW, query=parse_filter(query)), expected)


def test_positional_follows_each_query() -> None:
    update = parse_update({"$set": {"a.$": 0}})
    doc = {"_id": 1, "a": [1, 2, 3]}
    three, one = parse_filter({"a": 3}), parse_filter({"a": 1})
    assert update.apply(doc, now_ms=NOW, query=three) == {"_id": 1, "a": [1, 2, 0]}
    assert update.apply(doc, now_ms=NOW, query=one) == {"_id": 1, "a": [0, 2, 3]}
    other = {"_id": 2, "a": [7, 1]}  # a multi-update: the same parsed query, another document
    assert update.apply(other, now_ms=NOW, query=one) == {"_id": 2, "a": [7, 0]}


# -- $[] and $[<identifier>] ------------------------------------------------------------------------

# (id, document, update, arrayFilters, expected)
ALL_POSITIONAL: list[tuple[str, Doc, Doc, list[Doc] | None, Doc]] = [
    ("inc every element", arr(1, 2, 3), {"$inc": {"a.$[]": 1}}, None, arr(2, 3, 4)),
    (
        "set a field in every element",
        arr({"b": 1}, {"b": 2}),
        {"$set": {"a.$[].c": 0}},
        None,
        arr({"b": 1, "c": 0}, {"b": 2, "c": 0}),
    ),
    ("an empty array", arr(), {"$set": {"a.$[]": 0}}, None, arr()),
    ("unset every element", arr(1, 2), {"$unset": {"a.$[]": 1}}, None, arr(None, None)),
    (
        "unset a field of every element",
        arr({"b": 1, "c": 1}, {"c": 2}),
        {"$unset": {"a.$[].c": 1}},
        None,
        arr({"b": 1}, {}),
    ),
    (
        "nested $[]",
        arr({"b": [1, 2]}, {"b": [3]}),
        {"$inc": {"a.$[].b.$[]": 1}},
        None,
        arr({"b": [2, 3]}, {"b": [4]}),
    ),
    (
        "push into every element",
        arr([1], []),
        {"$push": {"a.$[]": 9}},
        None,
        arr([1, 9], [9]),
    ),
    ("filtered", arr(1, 2, 3), {"$set": {"a.$[x]": 0}}, [{"x": {"$gt": 1}}], arr(1, 0, 0)),
    ("filtered, none match", arr(1, 2), {"$set": {"a.$[x]": 0}}, [{"x": 9}], arr(1, 2)),
    (
        "filter on a field of the element",
        arr({"b": 1}, {"b": 2}),
        {"$set": {"a.$[e].c": 1}},
        [{"e.b": 2}],
        arr({"b": 1}, {"b": 2, "c": 1}),
    ),
    (
        "two identifiers on different elements",
        arr({"b": 1}, {"b": 2}),
        {"$set": {"a.$[x].c": 1, "a.$[y].d": 2}},
        [{"x.b": 1}, {"y.b": 2}],
        arr({"b": 1, "c": 1}, {"b": 2, "d": 2}),
    ),
    (
        "two identifiers on the same element merge",
        arr({"b": 1}, {"b": 2}),
        {"$set": {"a.$[x].c": 1, "a.$[y].d": 2}},
        [{"x.b": {"$gte": 1}}, {"y.b": 2}],
        arr({"b": 1, "c": 1}, {"b": 2, "c": 1, "d": 2}),
    ),
    (
        "$[] and $[x] merge",
        arr({"b": 1}, {"b": 2}),
        {"$set": {"a.$[].c": 0, "a.$[x].d": 1}},
        [{"x.b": 2}],
        arr({"b": 1, "c": 0}, {"b": 2, "c": 0, "d": 1}),
    ),
    (
        "nested identifiers",
        arr({"n": 1, "v": [1, 5]}, {"n": 2, "v": [5]}),
        {"$set": {"a.$[o].v.$[i]": 0}},
        [{"o.n": 2}, {"i": 5}],
        arr({"n": 1, "v": [1, 5]}, {"n": 2, "v": [0]}),
    ),
    (
        "filter with $or",
        arr(1, 2, 3),
        {"$set": {"a.$[x]": 0}},
        [{"$or": [{"x": 1}, {"x": 3}]}],
        arr(0, 2, 0),
    ),
    (
        "filter with two conditions on one identifier",
        arr({"b": 1, "c": 1}, {"b": 1, "c": 2}),
        {"$set": {"a.$[x].d": 1}},
        [{"x.b": 1, "x.c": 2}],
        arr({"b": 1, "c": 1}, {"b": 1, "c": 2, "d": 1}),
    ),
    (
        "filters see the array before the update",
        arr(1, 2),
        {"$inc": {"a.$[x]": 1}},
        [{"x": {"$lt": 2}}],
        arr(2, 2),
    ),
]


@cases(("doc", "spec", "filters", "expected"), ALL_POSITIONAL)
def test_array_filters(doc: Doc, spec: Doc, filters: list[Doc] | None, expected: Doc) -> None:
    assert_same(parse_update(spec, filters).apply(doc, now_ms=NOW), expected)
