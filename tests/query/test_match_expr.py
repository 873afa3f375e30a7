"""`$expr` in the matcher, table-driven: aggregation expressions over the document, nested in
$and/$or/$nor, with variables from the caller; refused below the top level."""

from __future__ import annotations

from typing import Any

import pytest

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query.match import compile_filter
from tests.helpers import cases, errors_test

DOCS: list[dict[str, Any]] = [
    {"_id": 1, "qty": 5, "limit": 10, "tags": ["a", "b"]},
    {"_id": 2, "qty": 15, "limit": 10, "tags": []},
    {"_id": 3, "qty": 10, "limit": 10},
    {"_id": 4, "limit": 0},
]

CASES: list[tuple[str, dict[str, Any], list[int]]] = [
    ("compare two fields", {"$expr": {"$gt": ["$qty", "$limit"]}}, [2]),
    ("equal fields", {"$expr": {"$eq": ["$qty", "$limit"]}}, [3]),
    ("missing field sorts below numbers", {"$expr": {"$lt": ["$qty", "$limit"]}}, [1, 4]),
    ("truthiness of a field", {"$expr": "$limit"}, [1, 2, 3]),
    ("truthiness of a literal", {"$expr": True}, [1, 2, 3, 4]),
    ("arithmetic", {"$expr": {"$eq": [{"$add": ["$qty", 5]}, 15]}}, [3]),
    (
        "array size, guarded",
        {"$expr": {"$gt": [{"$size": {"$ifNull": ["$tags", []]}}, 0]}},
        [1],
    ),
    ("with a plain condition", {"limit": 10, "$expr": {"$gte": ["$qty", 10]}}, [2, 3]),
    ("inside $and", {"$and": [{"$expr": {"$lt": ["$qty", 12]}}, {"qty": {"$gt": 5}}]}, [3]),
    (
        "inside $or",
        {"$or": [{"$expr": {"$eq": ["$qty", 5]}}, {"$expr": {"$eq": ["$limit", 0]}}]},
        [1, 4],
    ),
    ("inside $nor", {"$nor": [{"$expr": "$qty"}]}, [4]),
    ("a variable", {"$expr": {"$eq": ["$qty", "$$target"]}}, [2]),
]


@cases(("flt", "ids"), CASES)
def test_expr(flt: dict[str, Any], ids: list[int]) -> None:
    pred = compile_filter(flt, {"target": 15})
    assert [d["_id"] for d in DOCS if pred(d)] == ids


def test_without_variables() -> None:
    pred = compile_filter({"$expr": {"$eq": ["$qty", 5]}})
    assert [d["_id"] for d in DOCS if pred(d)] == [1]


ERRORS: list[tuple[str, dict[str, Any], str, str]] = [
    ("undefined variable", {"$expr": "$$nope"}, "Location17276", "Use of undefined variable: nope"),
    (
        "unknown operator",
        {"$expr": {"$bogus": 1}},
        "InvalidPipelineOperator",
        "Unrecognized expression '$bogus'",
    ),
    (
        "in $elemMatch",
        {"tags": {"$elemMatch": {"$expr": True}}},
        "BadValue",
        "$expr can only be applied to the top-level document",
    ),
]


test_errors = errors_test(compile_filter, ERRORS)


def test_evaluation_errors_surface_per_document() -> None:
    pred = compile_filter({"$expr": {"$divide": [1, "$limit"]}})
    assert pred(DOCS[0])
    with pytest.raises(QueryError) as info:
        pred(DOCS[3])
    assert info.value.code_name == "BadValue"
