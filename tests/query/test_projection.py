"""Projection, table-driven: inclusion and exclusion of top-level, dotted and nested fields, MongoDB's
`_id` rules, arrays under dotted paths, literal fields, and MongoDB's codes and messages for mixing,
path collisions and malformed values. The find-only operators are in test_projection_operators.py."""

from __future__ import annotations

import pytest
from bson import Decimal128, Int64

from ebbdb.storage.query.projection import parse_projection
from tests.case_tables import load_cases
from tests.helpers import cases, errors_test

DOC = {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}, {"g": 3}, 4], "h": "x"}

CASES = [tuple(case.values()) for case in load_cases("projection")] + [
    # -- flags of every numeric type -------------------------------------------------------------
    ("Int64 includes", {"a": Int64(1)}, DOC, {"_id": 1, "a": 1}),
    ("Decimal128 one includes", {"a": Decimal128("1")}, DOC, {"_id": 1, "a": 1}),
    (
        "Decimal128 zero excludes",
        {"a": Decimal128("0"), "_id": Decimal128("-0")},
        {"_id": 1, "a": 1, "h": 2},
        {"h": 2},
    ),
    ("NaN includes", {"a": float("nan")}, DOC, {"_id": 1, "a": 1}),
]


@cases(("spec", "doc", "expected"), CASES)
def test_projection(spec: dict, doc: dict, expected: dict) -> None:
    projection = parse_projection(spec)
    assert projection is not None
    out = projection.apply(doc)
    assert out == expected
    assert list(out) == list(expected)  # field order too


def test_projection_does_not_modify_its_input() -> None:
    doc = {"_id": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}]}
    snapshot = {"_id": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}]}
    parse_projection({"b.c": 0, "e.f": 0}).apply(doc)
    parse_projection({"b.c": 1, "e.f": 1}).apply(doc)
    assert doc == snapshot


@pytest.mark.parametrize("spec", [None, {}])
def test_empty_projection_means_whole_documents(spec: dict | None) -> None:
    assert parse_projection(spec) is None


def test_id_first_in_inclusion_output() -> None:
    out = parse_projection({"a": 1}).apply({"_id": 7, "a": 1})
    assert list(out) == ["_id", "a"]


@pytest.mark.parametrize("spec", [{"_id": 1, "a": 0}, {"_id": 0, "a": 1}, {"a": 1, "_id": 0}])
def test_id_does_not_count_as_mixing(spec: dict) -> None:
    # _id may be included in an exclusion projection and excluded in an inclusion one.
    assert parse_projection(spec) is not None


def test_id_included_in_exclusion_projection() -> None:
    out = parse_projection({"_id": 1, "a": 0}).apply({"_id": 1, "a": 1, "b": 2})
    assert out == {"_id": 1, "b": 2}


# (id, projection, code name, message)
ERRORS = [tuple(case.values()) for case in load_cases("projection_errors")]


test_malformed_projection = errors_test(parse_projection, ERRORS)


def test_literal_values_are_not_shared_between_documents() -> None:
    projection = parse_projection({"x": [1, {"y": 2}]})
    first = projection.apply({"_id": 1})
    first["x"][1]["y"] = 99
    assert projection.apply({"_id": 2}) == {"_id": 2, "x": [1, {"y": 2}]}


def test_filter_is_optional_without_a_positional() -> None:
    with_filter = parse_projection({"a": 1}, filter={"a": {"$gt": 1}})
    assert with_filter is not None
    assert with_filter.apply({"_id": 1, "a": 2, "b": 3}) == {"_id": 1, "a": 2}
