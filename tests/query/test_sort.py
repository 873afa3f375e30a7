"""Sorting: ascending and descending by MongoDB's order, arrays by their smallest (ascending) or
largest (descending) element, missing as null, compound keys, stability, and sort-spec errors."""

from __future__ import annotations

import pytest
from bson import Int64, MaxKey, MinKey

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.sort import SortSpec, parse_sort, sort_documents


def run_sort(docs: list[dict], spec: dict) -> list[object]:
    """Sort documents and return their `_id`s in order."""
    parsed = parse_sort(spec)
    assert parsed is not None
    return sort_documents([(d, d["_id"]) for d in docs], parsed)


MIXED = [
    {"_id": "str", "a": "x"},
    {"_id": "num", "a": 5},
    {"_id": "null", "a": None},
    {"_id": "obj", "a": {"b": 1}},
    {"_id": "bool", "a": False},
    {"_id": "missing"},
    {"_id": "min", "a": MinKey()},
    {"_id": "max", "a": MaxKey()},
    {"_id": "small", "a": -2.5},
]


def test_ascending_across_types() -> None:
    # null and missing tie, so they keep their input order.
    assert run_sort(MIXED, {"a": 1}) == [
        "min",
        "null",
        "missing",
        "small",
        "num",
        "str",
        "obj",
        "bool",
        "max",
    ]


def test_descending_across_types() -> None:
    assert run_sort(MIXED, {"a": -1}) == [
        "max",
        "bool",
        "obj",
        "str",
        "num",
        "small",
        "null",
        "missing",
        "min",
    ]


def test_numbers_sort_by_value_across_types() -> None:
    docs = [
        {"_id": 0, "a": 3.5},
        {"_id": 1, "a": Int64(3)},
        {"_id": 2, "a": float("nan")},
        {"_id": 3, "a": -1},
        {"_id": 4, "a": float("-inf")},
    ]
    assert run_sort(docs, {"a": 1}) == [2, 4, 3, 1, 0]
    assert run_sort(docs, {"a": -1}) == [0, 1, 3, 4, 2]


def test_arrays_sort_by_min_ascending_and_max_descending() -> None:
    docs = [
        {"_id": "a", "x": [1, 10]},
        {"_id": "b", "x": 5},
        {"_id": "c", "x": [3, 4]},
        {"_id": "d", "x": [0, 6]},
    ]
    # ascending keys: a=1, b=5, c=3, d=0
    assert run_sort(docs, {"x": 1}) == ["d", "a", "c", "b"]
    # descending keys: a=10, b=5, c=4, d=6
    assert run_sort(docs, {"x": -1}) == ["a", "d", "b", "c"]


def test_array_elements_of_mixed_types() -> None:
    docs = [{"_id": 1, "x": ["s", 7]}, {"_id": 2, "x": 8}, {"_id": 3, "x": "r"}]
    # min of ["s", 7] is 7 (numbers before strings); max is "s".
    assert run_sort(docs, {"x": 1}) == [1, 2, 3]
    assert run_sort(docs, {"x": -1}) == [1, 3, 2]


def test_dotted_sort_through_arrays_of_documents() -> None:
    docs = [
        {"_id": 1, "a": [{"b": 5}, {"b": 1}]},
        {"_id": 2, "a": {"b": 3}},
        {"_id": 3, "a": [{"b": 2}, {"c": 9}]},  # the element without b counts as null
    ]
    assert run_sort(docs, {"a.b": 1}) == [3, 1, 2]
    assert run_sort(docs, {"a.b": -1}) == [1, 2, 3]


def test_mongodb_docs_example_with_arrays_and_missing() -> None:
    # The example from MongoDB's DOCS-2760 (insertion order {}, {a: 1}, {a: []}, {a: [1]},
    # {a: [0, 1]}): an empty array sorts below a missing field (its sort key is undefined).
    docs = [
        {"_id": "missing"},
        {"_id": "1", "a": 1},
        {"_id": "[]", "a": []},
        {"_id": "[1]", "a": [1]},
        {"_id": "[0,1]", "a": [0, 1]},
    ]
    assert run_sort(docs, {"a": 1}) == ["[]", "missing", "[0,1]", "1", "[1]"]
    assert run_sort(docs, {"a": -1}) == ["1", "[1]", "[0,1]", "missing", "[]"]


def test_empty_array_sorts_before_null_ascending() -> None:
    docs = [{"_id": "null", "a": None}, {"_id": "empty", "a": []}]
    assert run_sort(docs, {"a": 1}) == ["empty", "null"]
    assert run_sort(docs, {"a": -1}) == ["null", "empty"]


def test_compound_sort_with_mixed_directions() -> None:
    docs = [
        {"_id": 1, "a": 1, "b": "x"},
        {"_id": 2, "a": 2, "b": "y"},
        {"_id": 3, "a": 1, "b": "z"},
        {"_id": 4, "a": 2, "b": "a"},
        {"_id": 5, "a": 1.0, "b": "m"},
    ]
    assert run_sort(docs, {"a": 1, "b": -1}) == [3, 1, 5, 2, 4]
    assert run_sort(docs, {"a": -1, "b": 1}) == [4, 2, 5, 1, 3]
    assert run_sort(docs, {"b": 1, "a": 1}) == [4, 5, 1, 2, 3]


def test_sort_is_stable() -> None:
    docs = [{"_id": i, "k": i % 3} for i in range(12)]
    assert run_sort(docs, {"k": 1}) == [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11]
    assert run_sort(docs, {"k": -1}) == [2, 5, 8, 11, 1, 4, 7, 10, 0, 3, 6, 9]
    # Equal keys of different numeric types keep their input order too.
    same = [{"_id": "f", "k": 1.0}, {"_id": "i", "k": 1}, {"_id": "l", "k": Int64(1)}]
    assert run_sort(same, {"k": 1}) == ["f", "i", "l"]
    assert run_sort(same, {"k": -1}) == ["f", "i", "l"]


def test_natural_order() -> None:
    docs = [{"_id": i} for i in range(4)]
    assert run_sort(docs, {"$natural": 1}) == [0, 1, 2, 3]
    assert run_sort(docs, {"$natural": -1}) == [3, 2, 1, 0]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"a": 1}, SortSpec(((("a",), 1),))),
        ({"a.b": -1}, SortSpec(((("a", "b"), -1),))),
        ({"a": 1.0, "b": Int64(-1)}, SortSpec(((("a",), 1), (("b",), -1)))),
        ({"$natural": -1}, SortSpec((), -1)),
    ],
)
def test_parse_sort(spec: dict, expected: SortSpec) -> None:
    assert parse_sort(spec) == expected


@pytest.mark.parametrize("spec", [None, {}])
def test_no_sort(spec: dict | None) -> None:
    assert parse_sort(spec) is None


@pytest.mark.parametrize(
    "spec",
    [
        {"a": 2},
        {"a": 0},
        {"a": "asc"},
        {"a": True},
        {"a": None},
        {"a": 0.5},
        {"": 1},
        {"a..b": 1},
        {"$a": 1},
    ],
)
def test_bad_sort_specs(spec: dict) -> None:
    with pytest.raises(QueryError) as excinfo:
        parse_sort(spec)
    assert excinfo.value.code_name == "BadValue"
