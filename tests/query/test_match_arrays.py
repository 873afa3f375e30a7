"""Array operators, table-driven: $elemMatch in its value form ({$elemMatch: {$gt: 1}}) and document
form ({$elemMatch: {b: 1}}), $size, and $all (values, regexes, $elemMatch elements, the empty
list), with their argument errors."""

from __future__ import annotations

from typing import Any

from bson import Decimal128, Int64

from ebbdb.storage.query.match import compile_filter
from tests.helpers import cases, query_error

NOPE = object()  # stands for a missing field a

CASES: list[tuple[str, dict[str, Any], Any, bool]] = [
    # (name, operators on field a, value of a, matches?)
    # -- $elemMatch, value form -------------------------------------------------------------------
    ("value: one element in range", {"$elemMatch": {"$gt": 1, "$lt": 5}}, [0, 3], True),
    ("value: range split across elements", {"$elemMatch": {"$gt": 1, "$lt": 5}}, [0, 10], False),
    ("value: plain range splits fine", {"$gt": 1, "$lt": 5}, [0, 10], True),
    ("value: scalar field", {"$elemMatch": {"$gt": 1}}, 3, False),
    ("value: missing field", {"$elemMatch": {"$gt": 1}}, NOPE, False),
    ("value: empty array", {"$elemMatch": {"$gt": 1}}, [], False),
    ("value: nested array is one value", {"$elemMatch": {"$gt": 1}}, [[3]], False),
    ("value: $eq on nested array", {"$elemMatch": {"$eq": 5}}, [[5]], False),
    ("value: $eq", {"$elemMatch": {"$eq": 5}}, [4, 5], True),
    ("value: $ne some element differs", {"$elemMatch": {"$ne": 5}}, [5, 6], True),
    ("value: $ne all equal", {"$elemMatch": {"$ne": 5}}, [5, 5], False),
    ("value: $in", {"$elemMatch": {"$in": [1, 2]}}, [3, 2], True),
    ("value: $nin", {"$elemMatch": {"$nin": [1, 2]}}, [1, 2], False),
    ("value: $regex", {"$elemMatch": {"$regex": "^a"}}, ["ba", "ab"], True),
    ("value: $not", {"$elemMatch": {"$not": {"$gt": 5}}}, [6, 7], False),
    ("value: $not, one passes", {"$elemMatch": {"$not": {"$gt": 5}}}, [6, 1], True),
    ("value: $exists", {"$elemMatch": {"$exists": True}}, [1], True),
    ("value: $exists on empty", {"$elemMatch": {"$exists": True}}, [], False),
    ("value: $type", {"$elemMatch": {"$type": "string"}}, [1, "x"], True),
    ("value: $size of an element", {"$elemMatch": {"$size": 2}}, [[1, 2]], True),
    ("value: $size of scalars", {"$elemMatch": {"$size": 2}}, [1, 2], False),
    ("value: nested $elemMatch", {"$elemMatch": {"$elemMatch": {"$gt": 1}}}, [[0, 2]], True),
    ("value: nested $elemMatch, none", {"$elemMatch": {"$elemMatch": {"$gt": 1}}}, [[0, 1]], False),
    ("value: $mod", {"$elemMatch": {"$mod": [2, 1]}}, [2, 4, 5], True),
    ("value: null element", {"$elemMatch": {"$eq": None}}, [1, None], True),
    ("value: object field", {"$elemMatch": {"$gt": 1}}, {"b": 2}, False),
    # -- $elemMatch, document form ----------------------------------------------------------------
    ("doc: one element has both", {"$elemMatch": {"b": 1, "c": 2}}, [{"b": 1, "c": 2}], True),
    (
        "doc: fields in different elements",
        {"$elemMatch": {"b": 1, "c": 2}},
        [{"b": 1}, {"c": 2}],
        False,
    ),
    ("doc: operator on a field", {"$elemMatch": {"b": {"$gt": 1}}}, [{"b": 0}, {"b": 3}], True),
    ("doc: scalars never match", {"$elemMatch": {"b": 1}}, [1, 2], False),
    ("doc: not an array", {"$elemMatch": {"b": 1}}, {"b": 1}, False),
    ("doc: empty filter, document element", {"$elemMatch": {}}, [{}], True),
    ("doc: empty filter, scalar elements", {"$elemMatch": {}}, [1], False),
    ("doc: empty filter, array element", {"$elemMatch": {}}, [[1]], True),
    ("doc: array element keyed by position", {"$elemMatch": {"0": 5}}, [[5, 6]], True),
    ("doc: $or first", {"$elemMatch": {"$or": [{"b": 1}, {"c": 1}]}}, [{"c": 1}], True),
    (
        "doc: $and in one element",
        {"$elemMatch": {"$and": [{"b": {"$gt": 1}}, {"b": {"$lt": 3}}]}},
        [{"b": 0}, {"b": 4}],
        False,
    ),
    ("doc: dotted field inside", {"$elemMatch": {"b.c": 1}}, [{"b": {"c": 1}}], True),
    ("doc: array inside an element", {"$elemMatch": {"b": 2}}, [{"b": [1, 2]}], True),
    ("doc: null matches a missing field", {"$elemMatch": {"b": None}}, [{"c": 1}], True),
    ("doc: null on scalars", {"$elemMatch": {"b": None}}, [1], False),
    ("doc: $comment first", {"$elemMatch": {"$comment": "x", "b": 1}}, [{"b": 1}], True),
    # -- $size -----------------------------------------------------------------------------------------
    ("size", {"$size": 2}, [1, 2], True),
    ("size other", {"$size": 2}, [1], False),
    ("size zero on empty", {"$size": 0}, [], True),
    ("size zero on missing", {"$size": 0}, NOPE, False),
    ("size of a string", {"$size": 2}, "ab", False),
    ("size of a document", {"$size": 1}, {"b": 1}, False),
    ("size counts a nested array once", {"$size": 1}, [[1, 2]], True),
    ("size does not look inside elements", {"$size": 2}, [[1, 2]], False),
    ("size as double", {"$size": 2.0}, [1, 2], True),
    ("size as long", {"$size": Int64(2)}, [1, 2], True),
    ("size as decimal", {"$size": Decimal128("2")}, [1, 2], True),
    ("not size", {"$not": {"$size": 2}}, [1], True),
    ("not size on missing", {"$not": {"$size": 2}}, NOPE, True),
    ("size with another operator", {"$size": 2, "$all": [1]}, [1, 2], True),
    # -- $all ------------------------------------------------------------------------------------------
    ("all", {"$all": [1, 2]}, [1, 2, 3], True),
    ("all any order", {"$all": [1, 2]}, [2, 1], True),
    ("all one missing", {"$all": [1, 2]}, [1], False),
    ("all on a scalar", {"$all": [1]}, 1, True),
    ("all duplicates", {"$all": [1, 1]}, [1], True),
    ("all empty list on an array", {"$all": []}, [1], False),
    ("all empty list on an empty array", {"$all": []}, [], False),
    ("all of an array value", {"$all": [[1, 2]]}, [1, 2], True),
    ("all of an array value, nested", {"$all": [[1, 2]]}, [[1, 2], 3], True),
    ("all null on missing", {"$all": [None]}, NOPE, True),
    ("all literal document", {"$all": [{"b": 1}]}, [{"b": 1}], True),
    (
        "all $elemMatch",
        {"$all": [{"$elemMatch": {"b": 1}}, {"$elemMatch": {"c": 1}}]},
        [{"b": 1}, {"c": 1}],
        True,
    ),
    (
        "all $elemMatch, one fails",
        {"$all": [{"$elemMatch": {"b": 1}}, {"$elemMatch": {"c": 1}}]},
        [{"b": 1}],
        False,
    ),
    ("all $elemMatch value form", {"$all": [{"$elemMatch": {"$gt": 5}}]}, [1, 6], True),
    ("not all", {"$not": {"$all": [1, 2]}}, [1], True),
]


@cases(("ops", "value", "expected"), CASES)
def test_array_operators(ops: dict[str, Any], value: Any, expected: bool) -> None:
    doc = {} if value is NOPE else {"a": value}
    assert compile_filter({"a": ops})(doc) is expected


DOTTED: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("elemMatch under a path", {"a.b": {"$elemMatch": {"$gt": 1}}}, {"a": [{"b": [0, 2]}]}, True),
    (
        "elemMatch under a document path",
        {"a.b": {"$elemMatch": {"$gt": 1}}},
        {"a": {"b": [2]}},
        True,
    ),
    ("size under a path", {"a.b": {"$size": 2}}, {"a": [{"b": [1, 2]}, {"b": [1]}]}, True),
    ("size under a path, none", {"a.b": {"$size": 3}}, {"a": [{"b": [1, 2]}, {"b": [1]}]}, False),
    ("all under a path", {"a.b": {"$all": [1, 2]}}, {"a": [{"b": 1}, {"b": 2}]}, True),
    ("fields of elements vs $elemMatch", {"a.b": 1, "a.c": 2}, {"a": [{"b": 1}, {"c": 2}]}, True),
]


@cases(("flt", "doc", "expected"), DOTTED)
def test_array_operators_on_paths(flt: dict[str, Any], doc: dict[str, Any], expected: bool) -> None:
    assert compile_filter(flt)(doc) is expected


ERRORS: list[tuple[str, dict[str, Any], str]] = [
    ("elemMatch number", {"$elemMatch": 1}, "$elemMatch needs an Object"),
    ("elemMatch array", {"$elemMatch": [1]}, "$elemMatch needs an Object"),
    ("elemMatch unknown operator", {"$elemMatch": {"$gt": 1, "b": 1}}, "unknown operator: b"),
    (
        "size negative",
        {"$size": -1},
        "Failed to parse $size. Expected a positive number in: $size: -1",
    ),
    ("size fractional", {"$size": 1.5}, "Failed to parse $size. Expected an integer: $size: 1.5"),
    ("size string", {"$size": "2"}, 'Failed to parse $size. Expected a number in: $size: "2"'),
    ("size null", {"$size": None}, "Failed to parse $size. Expected a number in: $size: null"),
    ("size bool", {"$size": True}, "Failed to parse $size. Expected a number in: $size: true"),
    (
        "size NaN",
        {"$size": float("nan")},
        "Failed to parse $size. Expected an integer, but found NaN in: $size: nan",
    ),
    (
        "size too big",
        {"$size": 2**40},
        "Failed to parse $size. Cannot represent $size: 1099511627776 in an int",
    ),
    ("all not an array", {"$all": 1}, "$all needs an array"),
    ("all document", {"$all": {"b": 1}}, "$all needs an array"),
    (
        "all elemMatch then value",
        {"$all": [{"$elemMatch": {"b": 1}}, 5]},
        "$all/$elemMatch has to be consistent",
    ),
    (
        "all elemMatch then document",
        {"$all": [{"$elemMatch": {"b": 1}}, {"b": 1}]},
        "$all/$elemMatch has to be consistent",
    ),
    ("all operator", {"$all": [{"$gt": 1}]}, "no $ expressions in $all"),
    (
        "all value then elemMatch",
        {"$all": [1, {"$elemMatch": {"b": 1}}]},
        "no $ expressions in $all",
    ),
]


@cases(("ops", "message"), ERRORS)
def test_array_operator_errors(ops: dict[str, Any], message: str) -> None:
    assert query_error(compile_filter, {"a": ops}) == ("BadValue", message)
