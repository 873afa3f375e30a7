"""Find projection operators, table-driven: $slice, $elemMatch and the positional `$`, with MongoDB's
rules for the projection type they imply, where their fields land, and MongoDB's codes and messages
for their misuse (parse errors, and the positional errors raised per document)."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Decimal128, Int64

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.match import parse_filter
from ebbdb.storage.query.projection import parse_projection
from tests.helpers import cases, errors_test, query_error

Doc = dict[str, Any]

ARR = {"_id": 1, "a": [0, 1, 2, 3, 4, 5, -5, -4, -3, -2, -1], "b": 1, "c": 1}
A = ARR["a"]

# (id, projection, document, expected output)
SLICE_CASES: list[tuple[str, Doc, Doc, Doc]] = [
    # -- the forms ---------------------------------------------------------------------------------
    ("first n", {"a": {"$slice": 3}}, ARR, {**ARR, "a": [0, 1, 2]}),
    ("last n", {"a": {"$slice": -3}}, ARR, {**ARR, "a": [-3, -2, -1]}),
    ("zero", {"a": {"$slice": 0}}, ARR, {**ARR, "a": []}),
    ("more than there are", {"a": {"$slice": 100}}, ARR, ARR),
    ("more than there are, from the end", {"a": {"$slice": -100}}, ARR, ARR),
    ("skip, limit", {"a": {"$slice": [2, 3]}}, ARR, {**ARR, "a": [2, 3, 4]}),
    ("negative skip", {"a": {"$slice": [-5, 4]}}, ARR, {**ARR, "a": [-5, -4, -3, -2]}),
    ("negative skip, long limit", {"a": {"$slice": [-5, 10]}}, ARR, {**ARR, "a": A[-5:]}),
    ("skip past the end", {"a": {"$slice": [20, 2]}}, ARR, {**ARR, "a": []}),
    ("negative skip past the start", {"a": {"$slice": [-20, 2]}}, ARR, {**ARR, "a": [0, 1]}),
    ("double is truncated", {"a": {"$slice": 2.9}}, ARR, {**ARR, "a": [0, 1]}),
    (
        "Int64 and Decimal128",
        {"a": {"$slice": [Int64(1), Decimal128("2")]}},
        ARR,
        {**ARR, "a": [1, 2]},
    ),
    # -- projection type -------------------------------------------------------------------------
    ("alone it is an exclusion", {"a": {"$slice": 1}}, ARR, {"_id": 1, "a": [0], "b": 1, "c": 1}),
    ("with an inclusion", {"a": {"$slice": 1}, "b": True}, ARR, {"_id": 1, "a": [0], "b": 1}),
    ("with an exclusion", {"a": {"$slice": 1}, "b": False}, ARR, {"_id": 1, "a": [0], "c": 1}),
    (
        "with _id: 1 it is an inclusion",
        {"_id": 1, "a": {"$slice": [1, 1]}},
        ARR,
        {"_id": 1, "a": [1]},
    ),
    (
        "with _id: 0 it is an exclusion",
        {"_id": 0, "a": {"$slice": 1}},
        ARR,
        {"a": [0], "b": 1, "c": 1},
    ),
    (
        "inclusion keeps the document's order",
        {"c": 1, "a": {"$slice": 1}},
        ARR,
        {"_id": 1, "a": [0], "c": 1},
    ),
    (
        "inclusion of an absent field",
        {"comments": {"$slice": 2}, "irrelevant": 1},
        {"_id": 1, "comments": [1, 2, 3], "title": "foo"},
        {"_id": 1, "comments": [1, 2]},
    ),
    # -- values that are not arrays ----------------------------------------------------------------
    ("object is left whole", {"a": {"$slice": 1}}, {"a": {"c": 123}}, {"a": {"c": 123}}),
    (
        "object is left whole, inclusion",
        {"a": {"$slice": 1}, "d": 1},
        {"a": {"c": 123}, "d": 456},
        {"a": {"c": 123}, "d": 456},
    ),
    ("scalar is left whole", {"a": {"$slice": 1}}, {"a": 5}, {"a": 5}),
    ("missing stays missing", {"a": {"$slice": 1}}, {"b": {"e": 1}}, {"b": {"e": 1}}),
    (
        "missing stays missing, inclusion",
        {"a": {"$slice": 1}, "d": 1},
        {"b": {"e": 1}, "d": 456},
        {"d": 456},
    ),
    # -- dotted and nested paths -----------------------------------------------------------------
    (
        "dotted through a document",
        {"a.b": {"$slice": [1, 1]}},
        {"a": {"b": [1, 2, 3]}},
        {"a": {"b": [2]}},
    ),
    (
        "sub-object form",
        {"a": {"b": {"$slice": [1, 1]}}},
        {"a": [{"b": [1, 2, 3]}]},
        {"a": [{"b": [2]}]},
    ),
    (
        "one level into arrays only",
        {"a": {"b": {"$slice": [1, 1]}}},
        {"a": [[{"b": [1, 2, 3]}], {"b": [1, 2, 3]}, 1, None, {}]},
        {"a": [[{"b": [1, 2, 3]}], {"b": [2]}, 1, None, {}]},
    ),
    (
        "deep nesting",
        {"a.b.c.d.e": {"$slice": [1, 1]}},
        {"a": [{"b": [{"c": [{"d": [{"e": [1, 2, 3]}]}]}]}]},
        {"a": [{"b": [{"c": [{"d": [{"e": [2]}]}]}]}]},
    ),
    (
        "inclusion still filters inside nested arrays",
        {"e": 1, "a.b": {"$slice": 1}},
        {"e": 123, "a": [[[{"b": [1, 2, 3], "d": 4, "f": 5}]]]},
        {"e": 123, "a": [[[{"b": [1, 2, 3]}]]]},
    ),
    (
        "two slices in one sub-object",
        {"a": {"b": {"c": {"$slice": [1, 1]}, "d": {"$slice": -1}}}},
        {"a": [{"b": {"c": [1, 2, 3], "d": [4, 5, 6]}}]},
        {"a": [{"b": {"c": [2], "d": [6]}}]},
    ),
    (
        "nested slice with an exclusion beside it",
        {"a": {"b": {"c": {"$slice": [1, 1]}, "d": 0}}},
        {"a": [{"b": {"c": [1, 2, 3], "d": 123}}, {"b": [{"c": [4, 5, 6], "d": 456}]}]},
        {"a": [{"b": {"c": [2]}}, {"b": [{"c": [5]}]}]},
    ),
    (
        # find() falls back to the aggregation $slice, whose null argument makes a null field.
        "aggregation $slice of null is null",
        {"a": {"$slice": [None, 1]}},
        {"_id": 1, "a": [1, 2], "b": 2},
        {"_id": 1, "a": None},
    ),
]

SCHOOL = {
    "_id": 1,
    "zipcode": "63109",
    "students": [
        {"name": "john", "school": 102, "age": 10},
        {"name": "jess", "school": 102, "age": 11},
        {"name": "jeff", "school": 108, "age": 15},
    ],
}
JOHN, JESS, JEFF = SCHOOL["students"]
PLAYER = {
    "_id": 1,
    "name": "player1",
    "games": [{"game": "abc", "score": 8}, {"game": "xyz", "score": 5}],
    "joined": 2020,
    "lastLogin": 2021,
}

ELEM_MATCH_CASES: list[tuple[str, Doc, Doc, Doc]] = [
    # -- document elements -----------------------------------------------------------------------
    (
        "first match",
        {"students": {"$elemMatch": {"school": 102}}},
        SCHOOL,
        {"_id": 1, "students": [JOHN]},
    ),
    (
        "all conditions on one element",
        {"students": {"$elemMatch": {"school": 102, "age": {"$gt": 10}}}},
        SCHOOL,
        {"_id": 1, "students": [JESS]},
    ),
    ("no match omits the field", {"students": {"$elemMatch": {"school": 1}}}, SCHOOL, {"_id": 1}),
    (
        "with an inclusion",
        {"zipcode": 1, "students": {"$elemMatch": {"age": 15}}},
        SCHOOL,
        {"_id": 1, "zipcode": "63109", "students": [JEFF]},
    ),
    (
        "after the included fields whatever the document order",
        {"games": {"$elemMatch": {"score": {"$gt": 5}}}, "joined": 1, "lastLogin": 1},
        PLAYER,
        {"_id": 1, "joined": 2020, "lastLogin": 2021, "games": [PLAYER["games"][0]]},
    ),
    (
        "_id: 0 keeps it an inclusion",
        {"_id": 0, "students": {"$elemMatch": {"school": 108}}},
        SCHOOL,
        {"students": [JEFF]},
    ),
    (
        "empty condition matches a document element",
        {"a": {"$elemMatch": {}}},
        {"a": [1, {"b": 1}]},
        {"a": [{"b": 1}]},
    ),
    (
        "an array element is matched as a document of its indexes",
        {"a": {"$elemMatch": {"0": 5}}},
        {"a": [4, [5]]},
        {"a": [[5]]},
    ),
    (
        "logical operators match documents",
        {"a": {"$elemMatch": {"$or": [{"b": 2}, {"c": 3}]}}},
        {"a": [{"b": 1}, {"c": 3}]},
        {"a": [{"c": 3}]},
    ),
    # -- scalar elements -------------------------------------------------------------------------
    (
        "value match",
        {"a": {"$elemMatch": {"$gt": 5}}},
        {"_id": 1, "a": [1, 7, 9]},
        {"_id": 1, "a": [7]},
    ),
    (
        "value match, two bounds",
        {"a": {"$elemMatch": {"$gt": 5, "$lt": 9}}},
        {"a": [9, 1, 8]},
        {"a": [8]},
    ),
    ("value match, none", {"a": {"$elemMatch": {"$gt": 50}}}, {"_id": 1, "a": [1, 7]}, {"_id": 1}),
    (
        "a nested array is compared whole, not searched",
        {"a": {"$elemMatch": {"$gt": 5}}},
        {"a": [[1, 10], 7]},
        {"a": [7]},
    ),
    (
        "value match of a whole nested array",
        {"a": {"$elemMatch": {"$eq": [1, 2]}}},
        {"a": [1, [1, 2]]},
        {"a": [[1, 2]]},
    ),
    ("value match never hits a document", {"a": {"$elemMatch": {"$gt": 5}}}, {"a": [{"b": 9}]}, {}),
    # -- array elements in a value match: compared whole, except by $size and $elemMatch -----------
    (
        "$size of an element",
        {"a": {"$elemMatch": {"$size": 2}}},
        {"a": [[1], [1, 2]]},
        {"a": [[1, 2]]},
    ),
    (
        "$elemMatch inside $elemMatch",
        {"a": {"$elemMatch": {"$elemMatch": {"$gt": 3}}}},
        {"a": [[1], [1, 5]]},
        {"a": [[1, 5]]},
    ),
    (
        "$size beside $elemMatch",
        {"a": {"$elemMatch": {"$size": 2, "$elemMatch": {"$gt": 1}}}},
        {"a": [[5], [0, 1], [0, 2]]},
        {"a": [[0, 2]]},
    ),
    (
        "$not $size",
        {"a": {"$elemMatch": {"$not": {"$size": 1}}}},
        {"a": [[1], [1, 2]]},
        {"a": [[1, 2]]},
    ),
    ("$type array", {"a": {"$elemMatch": {"$type": "array"}}}, {"a": [1, [2]]}, {"a": [[2]]}),
    (
        "$type int skips an array of ints",
        {"a": {"$elemMatch": {"$type": "int"}}},
        {"a": [[1], 2]},
        {"a": [2]},
    ),
    (
        "$ne holds for an array element",
        {"a": {"$elemMatch": {"$ne": 1}}},
        {"a": [1, [1], 2]},
        {"a": [[1]]},
    ),
    (
        "$in of an array",
        {"a": {"$elemMatch": {"$in": [[1, 2], 5]}}},
        {"a": [1, [1, 2]]},
        {"a": [[1, 2]]},
    ),
    (
        "$regex with $options first",
        {"a": {"$elemMatch": {"$options": "i", "$regex": "^B"}}},
        {"a": ["abc", "bcd"]},
        {"a": ["bcd"]},
    ),
    # -- not an array ----------------------------------------------------------------------------
    ("scalar field is omitted", {"a": {"$elemMatch": {"$gt": 5}}}, {"_id": 1, "a": 7}, {"_id": 1}),
    (
        "document field is omitted",
        {"a": {"$elemMatch": {"b": 1}}},
        {"_id": 1, "a": {"b": 1}},
        {"_id": 1},
    ),
    ("missing field stays missing", {"a": {"$elemMatch": {"b": 1}}}, {"_id": 1}, {"_id": 1}),
    # -- with other fields -------------------------------------------------------------------------
    (
        "with a literal, computed fields in projection order",
        {"x": "lit", "a": {"$elemMatch": {"$gt": 1}}, "b": 1},
        {"_id": 1, "a": [1, 2], "b": 3, "x": 0},
        {"_id": 1, "b": 3, "x": "lit", "a": [2]},
    ),
    (
        # The exclusion decides the type; the field is replaced where it is, or dropped.
        "in an exclusion projection",
        {"b": 0, "a": {"$elemMatch": {"$gt": 5}}},
        {"_id": 1, "a": [1, 7], "b": 2, "c": 3},
        {"_id": 1, "a": [7], "c": 3},
    ),
    (
        "in an exclusion projection, no match",
        {"b": 0, "a": {"$elemMatch": {"$gt": 50}}},
        {"_id": 1, "a": [1, 7], "b": 2, "c": 3},
        {"_id": 1, "c": 3},
    ),
    (
        # A find $slice makes an otherwise undecided projection an exclusion.
        "with a $slice it is an exclusion",
        {"a": {"$elemMatch": {"$gt": 5}}, "b": {"$slice": 1}},
        {"_id": 1, "a": [1, 7], "b": [1, 2], "c": 3},
        {"_id": 1, "a": [7], "b": [1], "c": 3},
    ),
]

X = [{"a": 1, "b": 2}, {"a": 2, "c": 3}, {"a": 1, "d": 5}]
Y = [{"aa": 1, "bb": 2}, {"aa": 2, "cc": 3}, {"aa": 1, "dd": 5}]
AB = {"a": [1, 2, 3], "b": [4, 5, 6]}

# (id, filter, projection, document, expected output)
POSITIONAL_CASES: list[tuple[str, Doc, Doc, Doc, Doc]] = [
    (
        "match through a field of the elements",
        {"x.a": 2},
        {"x.$": 1},
        {"x": X, "y": Y},
        {"x": [X[1]]},
    ),
    ("first of several matches", {"x.a": 1}, {"x.$": 1}, {"x": X, "y": Y}, {"x": [X[0]]}),
    ("the other array", {"y.dd": 5}, {"y.$": 1}, {"x": X, "y": Y}, {"y": [Y[2]]}),
    ("scalar elements", {"a": 2}, {"a.$": 1}, AB, {"a": [2]}),
    ("with _id", {"a": 3}, {"a.$": 1}, {"_id": 7, **AB}, {"_id": 7, "a": [3]}),
    (
        "with an inclusion, in document order",
        {"a": 3},
        {"b": 1, "a.$": 1},
        AB,
        {"a": [3], "b": [4, 5, 6]},
    ),
    ("comparison", {"a": {"$gt": 1}}, {"a.$": 1}, AB, {"a": [2]}),
    ("$in takes the first element in any", {"a": {"$in": [2, 3]}}, {"b.$": 1}, AB, {"b": [5]}),
    ("$or on one path is an $in", {"$or": [{"a": 2}, {"a": 3}]}, {"b.$": 1}, AB, {"b": [5]}),
    ("$or of one clause", {"$or": [{"a": 3}]}, {"b.$": 1}, AB, {"b": [6]}),
    ("index from another array", {"a": 1}, {"b.$": 1}, AB, {"b": [4]}),
    (
        "$and: the last clause wins",
        {"$and": [{"a": 1}, {"a": 2}, {"a": 3}]},
        {"b.$": 1},
        AB,
        {"b": [6]},
    ),
    ("$and reversed", {"$and": [{"a": 3}, {"a": 2}, {"a": 1}]}, {"b.$": 1}, AB, {"b": [4]}),
    (
        "two fields: the last condition wins",
        {"a": 2, "b": 6},
        {"c.$": 1},
        {**AB, "c": [7, 8, 9]},
        {"c": [9]},
    ),
    ("a negation records nothing", {"a": {"$ne": 9}, "b": 5}, {"a.$": 1}, AB, {"a": [2]}),
    (
        "nested path",
        {"x.y.a": 1},
        {"x.y.$": 1},
        {"x": {"y": [{"a": 1, "b": 1}, {"a": 1, "b": 2}]}},
        {"x": {"y": [{"a": 1, "b": 1}]}},
    ),
    (
        "sub-object form",
        {"x.y.a": 1},
        {"x": {"y.$": 1}},
        {"x": {"y": [{"a": 2}, {"a": 1}]}},
        {"x": {"y": [{"a": 1}]}},
    ),
    # -- query operators that record the element ---------------------------------------------------
    (
        "$elemMatch of values",
        {"x": {"$elemMatch": {"$gt": 1, "$lt": 3}}},
        {"x.$": 1},
        {"x": [1, 2, 3]},
        {"x": [2]},
    ),
    (
        "$elemMatch of documents",
        {"x": {"$elemMatch": {"a": 1, "b": 2}}},
        {"x.$": 1},
        {"x": X},
        {"x": [X[0]]},
    ),
    (
        "nested $elemMatch gives the outer index",
        {"a": {"$elemMatch": {"p": {"$elemMatch": {"$eq": 6}}}}},
        {"b.$": 1},
        {"a": [{"p": [1, 2], "q": [3, 4]}, {"p": [5, 6], "q": [7, 8]}], "b": [11, 12]},
        {"b": [12]},
    ),
    (
        "$elemMatch of arrays",
        {"a": {"$elemMatch": {"$elemMatch": {"$eq": 3}}}},
        {"b.$": 1},
        {"a": [[1, 2], [3, 4]], "b": [[5, 6], [7, 8]]},
        {"b": [[7, 8]]},
    ),
    (
        "$elemMatch with $type",
        {"a": {"$elemMatch": {"y": {"$type": ["array", "double"]}}}},
        {"a.$": 1},
        {"a": [{"y": 1.0}, {"y": []}]},
        {"a": [{"y": 1.0}]},
    ),
    ("$all: its last value wins", {"a": {"$all": [2, 3]}}, {"b.$": 1}, AB, {"b": [6]}),
    ("$all reversed", {"a": {"$all": [3, 2]}}, {"b.$": 1}, AB, {"b": [5]}),
    ("$regex", {"s": {"$regex": "^b"}}, {"s.$": 1}, {"s": ["abc", "bcd"]}, {"s": ["bcd"]}),
    # -- the path has no array -------------------------------------------------------------------
    ("missing field, empty filter", {}, {"g.$": 1}, {"x": X, "y": Y}, {}),
    ("missing field", {"a.b": 1}, {"g.$": 1}, {"a": {"b": 1}}, {}),
    ("scalar field", {"x": 1}, {"a.$": 1}, {"x": 1, "a": 5}, {"a": 5}),
    (
        "the existing part of the path is returned",
        {"x": {"$gt": 0}},
        {"a.b.c.$": 1},
        {"x": [-1, 1, 2], "a": {"b": {"d": [1, 2, 3], "f": 456}, "e": 123}},
        {"a": {"b": {}}},
    ),
    (
        "a document at the end is returned whole",
        {"x": {"$gt": 0}},
        {"a.b.c.$": 1},
        {"x": [-1, 1, 2], "a": {"b": {"c": {"d": {"e": 1}}}}},
        {"a": {"b": {"c": {"d": {"e": 1}}}}},
    ),
    # -- the first array on the path is the one cut ------------------------------------------------
    (
        "array at the top",
        {"x.y.z": 1},
        {"a.b.c.$": 1},
        {"x": {"y": {"z": [0, 1, 2]}}, "a": [{"b": {"c": [1, 2]}}, {"b": {"c": [4, 5]}}]},
        {"a": [{"b": {"c": [4, 5]}}]},
    ),
    (
        "array in the middle",
        {"x.y.z": 1},
        {"a.b.c.$": 1},
        {"x": {"y": {"z": [0, 1, 2]}}, "a": {"b": [{"c": [1, 2]}, {"c": [4, 5]}]}},
        {"a": {"b": [{"c": [4, 5]}]}},
    ),
    (
        "array at the end",
        {"x.y.z": 1},
        {"a.b.c.$": 1},
        {"x": {"y": {"z": [0, 1, 2]}}, "a": {"b": {"c": [1, 2, 3]}}},
        {"a": {"b": {"c": [2]}}},
    ),
    (
        "only the projected part of the element",
        {"x": 1},
        {"a.b.c.$": 1},
        {"x": [1], "a": [{"b": [[[{"c": 1, "d": 2}]]]}]},
        {"a": [{"b": [[[{"c": 1}]]]}]},
    ),
]

# (id, filter, projection, document, code name, message): errors while applying.
POSITIONAL_RUNTIME_ERRORS: list[tuple[str, Doc, Doc, Doc, str, str]] = [
    ("empty filter", {}, {"x.$": 1}, {"x": X}, "Location51246", ""),
    (
        "whole-array equality",
        {"b": [4, 5, 6]},
        {"c.$": 1},
        {**AB, "c": [7, 8, 9]},
        "Location51246",
        "",
    ),
    ("$or over two paths", {"$or": [{"a": 1}, {"b": 5}]}, {"a.$": 1}, AB, "Location51246", ""),
    ("$or, second clause true", {"$or": [{"a": 0}, {"b": 5}]}, {"a.$": 1}, AB, "Location51246", ""),
    ("$nor", {"$nor": [{"a": -1}, {"a": -2}]}, {"a.$": 1}, AB, "Location51246", ""),
    ("$ne", {"a": {"$ne": 9}}, {"a.$": 1}, AB, "Location51246", ""),
    ("$nin", {"a": {"$nin": [9]}}, {"a.$": 1}, AB, "Location51246", ""),
    ("$exists: false", {"z": {"$exists": False}}, {"a.$": 1}, AB, "Location51246", ""),
    ("$not", {"a": {"$not": {"$elemMatch": {"$eq": 100}}}}, {"a.$": 1}, AB, "Location51246", ""),
    ("$size judges the whole array", {"a": {"$size": 3}}, {"a.$": 1}, AB, "Location51246", ""),
    ("index past the end", {"a": 3}, {"b.$": 1}, {"a": [1, 2, 3], "b": [4]}, "Location51247", ""),
]
NO_MATCH = "positional operator '.$' couldn't find a matching element in the array"
MISMATCH = "positional operator '.$' element mismatch"

# (id, filter, projection, code name, message): errors while parsing.
PARSE_ERRORS: list[tuple[str, Doc | None, Doc, str, str]] = [
    # -- $slice ----------------------------------------------------------------------------------
    (
        # Not find's [skip, limit], so parsed as the aggregation $slice, whose constant first
        # argument is not an array.
        "limit zero",
        None,
        {"a": {"$slice": [1, 0]}},
        "Location28724",
        "First argument to $slice must be an array, but is of type: int",
    ),
    (
        "negative limit, double skip",
        None,
        {"a": {"$slice": [1.5, -1]}},
        "Location28724",
        "First argument to $slice must be an array, but is of type: double",
    ),
    (
        "three elements",
        None,
        {"a": {"$slice": [1, 2, 3]}},
        "Location28724",
        "First argument to $slice must be an array, but is of type: int",
    ),
    (
        "string skip",
        None,
        {"a": {"$slice": ["x", 1]}},
        "Location28724",
        "First argument to $slice must be an array, but is of type: string",
    ),
    (
        "one element",
        None,
        {"a": {"$slice": [1]}},
        "Location28667",
        "Invalid $slice syntax. The given syntax { $slice: [ 1 ] } did not match the find() syntax"
        " because :: Location31272: $slice array argument should be of form [skip, limit] :: The"
        " given syntax did not match the expression $slice syntax. :: caused by :: Expression"
        " $slice takes at least 2 arguments, and at most 3, but 1 were passed in.",
    ),
    (
        "a string",
        None,
        {"a": {"$slice": "x"}},
        "Location28667",
        'Invalid $slice syntax. The given syntax { $slice: "x" } did not match the find() syntax'
        " because :: Location31273: $slice only supports numbers and [skip, limit] arrays :: The"
        " given syntax did not match the expression $slice syntax. :: caused by :: Expression"
        " $slice takes at least 2 arguments, and at most 3, but 1 were passed in.",
    ),
    (
        "limit zero in an exclusion projection",
        None,
        {"b": 0, "a": {"$slice": [1, 0]}},
        "Location31252",
        "Invalid $slice syntax. The given syntax { $slice: [ 1, 0 ] } did not match the find()"
        " syntax because :: Location31259: $slice limit must be positive, got 0 :: The given"
        " syntax did not match the expression $slice syntax. :: caused by :: Cannot use"
        " expression other than $meta in exclusion projection",
    ),
    (
        "string limit in an exclusion projection",
        None,
        {"b": 0, "a": {"$slice": [1, "x"]}},
        "Location31252",
        'Invalid $slice syntax. The given syntax { $slice: [ 1, "x" ] } did not match the find()'
        " syntax because :: Location31258: $slice expects the limit argument to be a number, got"
        " string :: The given syntax did not match the expression $slice syntax. :: caused by ::"
        " Cannot use expression other than $meta in exclusion projection",
    ),
    (
        # The aggregation $slice makes a computed field, so the projection is an inclusion.
        "the aggregation $slice makes an inclusion",
        None,
        {"a": {"$slice": [1, 0]}, "b": 0},
        "Location31254",
        "Cannot do exclusion on field b in inclusion projection",
    ),
    (
        # A parse error comes before the constant-folding error found after parsing.
        "collision before folding",
        None,
        {"a": {"$slice": [1, 0]}, "a.b": 1},
        "Location31249",
        "Path collision at a.b remaining portion b",
    ),
    (
        "aggregation $slice of a field path",
        None,
        {"a": {"$slice": ["$a", 1, 2]}},
        "NotImplemented",
        "the aggregation expression $slice in a projection is not supported yet",
    ),
    (
        "slice then a path under it",
        None,
        {"a": {"$slice": 1}, "a.b": 1},
        "Location31249",
        "Path collision at a.b remaining portion b",
    ),
    (
        "path then a slice over it",
        None,
        {"a.b": 1, "a": {"$slice": 1}},
        "Location31250",
        "Path collision at a",
    ),
    # -- $elemMatch ------------------------------------------------------------------------------
    (
        "elemMatch of a number",
        None,
        {"a": {"$elemMatch": 1}},
        "Location31274",
        "elemMatch: Invalid argument, object required, but got int",
    ),
    (
        "elemMatch of a string",
        None,
        {"a": {"$elemMatch": "x"}},
        "Location31274",
        "elemMatch: Invalid argument, object required, but got string",
    ),
    (
        "elemMatch of an array",
        None,
        {"a": {"$elemMatch": []}},
        "Location31274",
        "elemMatch: Invalid argument, object required, but got array",
    ),
    (
        "elemMatch on a dotted path",
        None,
        {"a.b": {"$elemMatch": {"c": 1}}},
        "Location31275",
        "Cannot use $elemMatch projection on a nested field.",
    ),
    (
        "elemMatch in a sub-object",
        None,
        {"a": {"b": {"$elemMatch": {"c": 1}}}},
        "Location31275",
        "Cannot use $elemMatch projection on a nested field.",
    ),
    (
        "elemMatch then a path under it",
        None,
        {"a": {"$elemMatch": {}}, "a.b": 1},
        "Location31249",
        "Path collision at a.b remaining portion b",
    ),
    # -- positional ------------------------------------------------------------------------------
    (
        "positional without a filter",
        None,
        {"a.$": 1},
        "Location51050",
        "Projections with a positional operator require a matcher",
    ),
    (
        "two positionals",
        {"x.a": 1, "y.aa": 1},
        {"x.$": 1, "y.$": 1},
        "Location31276",
        "Cannot specify more than one positional projection per query.",
    ),
    (
        "positional with $slice",
        {"x": 1},
        {"x.$": {"$slice": 1}},
        "Location31271",
        "positional projection cannot be used with an expression or sub object",
    ),
    (
        "positional with a sub-object",
        {"x": 1},
        {"x.$": {"a": 1}},
        "Location31271",
        "positional projection cannot be used with an expression or sub object",
    ),
    (
        "positional excluded",
        {"x": 1},
        {"x.$": 0},
        "Location31395",
        "positional projection cannot be used with exclusion",
    ),
    (
        "positional with a literal",
        {"x": 1},
        {"x.$": "a"},
        "Location31308",
        "positional projection cannot be used with a literal",
    ),
    (
        "positional then an exclusion",
        {"x.a": 2},
        {"x.$": 1, "y": 0},
        "Location31254",
        "Cannot do exclusion on field y in inclusion projection",
    ),
    (
        "exclusion then a positional",
        {"x.a": 2},
        {"y": 0, "x.$": 1},
        "Location31253",
        "Cannot do inclusion on field x.$ in exclusion projection",
    ),
    ("bare .$", {}, {".$": 1}, "Location5392900", "Projection on field .$ is invalid"),
    (
        "positional in the middle",
        {"a": 1},
        {"a.$.b": 1},
        "Location31394",
        "As of 4.4, it's illegal to specify positional operator in the middle of a path.Positional"
        " projection may only be used at the end, for example: a.b.$. If the query previously used"
        " a form like a.b.$.d, remove the parts following the '$' and the results will be"
        " equivalent.",
    ),
    (
        "positional then elemMatch",
        {"a": 1},
        {"a.$": 1, "b": {"$elemMatch": {}}},
        "Location31255",
        "Cannot specify positional operator and $elemMatch.",
    ),
    (
        "elemMatch then positional",
        {"a": 1},
        {"b": {"$elemMatch": {}}, "a.$": 1},
        "Location31256",
        "Cannot specify positional operator and $elemMatch.",
    ),
    (
        "positional and the same field",
        {"a": 1},
        {"a.$": 1, "a": 1},
        "Location31250",
        "Path collision at a",
    ),
]


def _apply(spec: Doc, doc: Doc, flt: Doc | None = None) -> Doc:
    projection = parse_projection(spec, filter=None if flt is None else parse_filter(flt))
    assert projection is not None
    return projection.apply(doc)


@cases(("spec", "doc", "expected"), SLICE_CASES)
def test_slice(spec: Doc, doc: Doc, expected: Doc) -> None:
    out = _apply(spec, doc)
    assert out == expected
    assert list(out) == list(expected)


@cases(("spec", "doc", "expected"), ELEM_MATCH_CASES)
def test_elem_match(spec: Doc, doc: Doc, expected: Doc) -> None:
    out = _apply(spec, doc)
    assert out == expected
    assert list(out) == list(expected)


@cases(("flt", "spec", "doc", "expected"), POSITIONAL_CASES)
def test_positional(flt: Doc, spec: Doc, doc: Doc, expected: Doc) -> None:
    out = _apply(spec, doc, flt)
    assert out == expected
    assert list(out) == list(expected)


@pytest.mark.parametrize(
    ("flt", "spec", "doc", "code_name"),
    [c[1:5] for c in POSITIONAL_RUNTIME_ERRORS],
    ids=[c[0] for c in POSITIONAL_RUNTIME_ERRORS],
)
def test_positional_errors_while_applying(flt: Doc, spec: Doc, doc: Doc, code_name: str) -> None:
    # It parses: the error belongs to the document.
    projection = parse_projection(spec, filter=parse_filter(flt))
    assert projection is not None
    message = NO_MATCH if code_name == "Location51246" else MISMATCH
    assert query_error(projection.apply, doc) == (code_name, message)


def test_positional_error_only_for_documents_with_the_array() -> None:
    projection = parse_projection({"x.$": 1}, filter=parse_filter({}))
    assert projection is not None
    assert projection.apply({"_id": 1, "y": 2}) == {"_id": 1}
    with pytest.raises(QueryError):
        projection.apply({"_id": 2, "x": [1]})


test_parse_errors = errors_test(
    lambda flt, spec: parse_projection(spec, filter=None if flt is None else parse_filter(flt)),
    PARSE_ERRORS,
)


def test_elem_match_condition_errors_come_from_the_matcher() -> None:
    with pytest.raises(QueryError):
        parse_projection({"a": {"$elemMatch": {"$bogus": 1}}})


@pytest.mark.parametrize(
    ("spec", "flt"),
    [
        ({"a": {"$slice": [1, 2]}}, None),
        ({"a": {"$elemMatch": {"$gt": 1}}}, None),
        ({"a.$": 1}, {"a": 2}),
        ({"a.b": {"$slice": -1}, "c": 1}, None),
    ],
)
def test_operators_do_not_modify_their_input(spec: Doc, flt: Doc | None) -> None:
    doc = {"_id": 1, "a": [1, 2, 3, {"b": [1, 2]}], "c": {"d": [1, 2]}}
    snapshot = {"_id": 1, "a": [1, 2, 3, {"b": [1, 2]}], "c": {"d": [1, 2]}}
    out = _apply(spec, doc, flt)
    assert doc == snapshot
    assert out != snapshot
