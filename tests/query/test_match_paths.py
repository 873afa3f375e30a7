"""Dotted paths as the matcher walks them (storage.query.paths.values_at), table-driven from MongoDB's
element iterator: which values a path yields through documents, arrays and array indexes, and what
that means for equality, null and $exists."""

from __future__ import annotations

from typing import Any

from bson import DBRef

from ebbdb.storage.query.match import compile_filter
from ebbdb.storage.query.paths import MISSING, split, values_at
from tests.helpers import cases

M = MISSING

# (name, path, document, expand, values in the order values_at yields them)
VALUES: list[tuple[str, str, dict[str, Any], bool, list[Any]]] = [
    ("top-level scalar", "a", {"a": 5}, True, [5]),
    ("top-level missing", "a", {}, True, [M]),
    ("leaf array expanded: array then elements", "a", {"a": [5, 6]}, True, [[5, 6], 5, 6]),
    ("leaf array not expanded", "a", {"a": [5, 6]}, False, [[5, 6]]),
    ("nested array element stays whole", "a", {"a": [[5]]}, True, [[[5]], [5]]),
    ("empty leaf array", "a.b", {"a": {"b": []}}, True, [[]]),
    ("scalar before the end", "a.b", {"a": 4}, True, [M]),
    ("scalar deeper before the end", "a.b.c", {"a": {"b": 5}}, True, [M]),
    ("array of scalars yields nothing", "a.b", {"a": [4]}, True, []),
    ("empty array yields nothing", "a.b", {"a": []}, True, []),
    ("nested arrays are not searched", "a.b", {"a": [[{"b": 1}]]}, True, []),
    (
        "mixed array: documents searched, missing field yields MISSING",
        "a.b",
        {"a": [{"b": 5}, 3, {}, {"b": [9, 11]}, {"b": 7}]},
        True,
        [5, M, [9, 11], 9, 11, 7],
    ),
    (
        "mixed array, leaf arrays kept whole",
        "a.b",
        {"a": [{"b": 5}, 3, {}, {"b": [9, 11]}, {"b": 7}]},
        False,
        [5, M, [9, 11], 7],
    ),
    ("empty arrays in the middle yield nothing", "a.b.x", {"a": [{"b": []}, {"b": []}]}, True, []),
    ("index", "a.1", {"a": [5, 7, 3]}, True, [7]),
    ("index out of range", "a.5", {"a": [5, 7, 3]}, True, []),
    ("index reaching an array keeps it whole", "a.1", {"a": [5, [2, 4], 3]}, True, [[2, 4]]),
    ("index on a document element", "a.1", {"a": [5, {"1": 4}, 3]}, True, [4, {"1": 4}]),
    ("numeric field of another element", "a.1", {"a": [{"1": 9}, 5]}, True, [9, 5]),
    ("index then field", "a.1.b", {"a": [5, {"b": 4}, 3]}, True, [M, 4]),
    ("index into a nested array then field", "a.1.b", {"a": [5, [{"b": 4}], 3]}, True, [4]),
    ("index into a nested array then index", "a.0.1", {"a": [[1, 2]]}, True, [2]),
    (
        "index with implicit traversal below",
        "a.0.b",
        {"a": [{"b": [2, 3]}, {"b": [4, 5]}]},
        True,
        [M, [2, 3], 2, 3, M],
    ),
    ("a non-canonical number is a field name", "a.01", {"a": [5, 6]}, True, []),
    ("a non-canonical number on documents", "a.01", {"a": [{"01": 1}]}, True, [1]),
    ("numeric key of a document", "a.0", {"a": {"0": 5}}, True, [5]),
    ("through a DBRef", "r.$id", {"r": DBRef("c", 5)}, True, [5]),
]


@cases(("path", "doc", "expand", "expected"), VALUES)
def test_values_at(path: str, doc: dict[str, Any], expand: bool, expected: list[Any]) -> None:
    assert values_at(doc, split(path), expand) == expected


# (name, filter, document, matches?) where the path rules decide the answer.
CASES: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = [
    ("null vs array of scalars", {"a.b": None}, {"a": [1]}, False),
    ("null vs empty array", {"a.b": None}, {"a": []}, False),
    ("null vs element lacking the field", {"a.b": None}, {"a": [{"c": 1}]}, True),
    ("null vs scalar elements and a present field", {"a.b": None}, {"a": [{"b": 1}, 2]}, False),
    ("null vs scalar on the way", {"a.b": None}, {"a": 5}, True),
    (
        "null after an index, the element's own field quirk",
        {"a.1.b": None},
        {"a": [5, {"b": 4}]},
        True,
    ),
    ("exists false vs array of scalars", {"a.b": {"$exists": False}}, {"a": [1]}, True),
    ("exists true vs array of scalars", {"a.b": {"$exists": True}}, {"a": [1]}, False),
    ("exists false vs empty array", {"a.b": {"$exists": False}}, {"a": []}, True),
    ("$ne null vs array of scalars", {"a.b": {"$ne": None}}, {"a": [1]}, True),
    ("index: element not searched", {"a.0": 5}, {"a": [[5]]}, False),
    ("index: element compared whole", {"a.0": [5]}, {"a": [[5]]}, True),
    ("index: $size sees the element", {"a.0": {"$size": 2}}, {"a": [[1, 2]]}, True),
    ("index then field in a nested array", {"a.0.b": 1}, {"a": [[{"b": 1}]]}, True),
    ("field through arrays of arrays", {"a.b.c": 1}, {"a": [{"b": [{"c": 1}]}]}, True),
    ("leaf array whole equality", {"a.b": [1, 2]}, {"a": [{"b": [1, 2]}]}, True),
    ("leaf array element", {"a.b": 2}, {"a": [{"b": [1, 2]}]}, True),
    ("no match through scalars", {"a.b": 1}, {"a": [1, 2]}, False),
    ("DBRef id", {"r.$id": 5}, {"r": DBRef("c", 5)}, True),
    ("DBRef collection", {"r.$ref": "d"}, {"r": DBRef("c", 5)}, False),
    ("$gt through a path with no values", {"a.b": {"$gt": 0}}, {"a": [1, 2]}, False),
    ("$nin through a path with no values", {"a.b": {"$nin": [1]}}, {"a": [1, 2]}, True),
]


@cases(("flt", "doc", "expected"), CASES)
def test_path_rules(flt: dict[str, Any], doc: dict[str, Any], expected: bool) -> None:
    assert compile_filter(flt)(doc) is expected
