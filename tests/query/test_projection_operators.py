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
from tests.case_tables import load_cases
from tests.helpers import cases, errors_test, query_error

Doc = dict[str, Any]

ARR = {"_id": 1, "a": [0, 1, 2, 3, 4, 5, -5, -4, -3, -2, -1], "b": 1, "c": 1}

# (id, projection, document, expected output)
SLICE_CASES = [tuple(case.values()) for case in load_cases("projection_slice")] + [
    (
        "Int64 and Decimal128",
        {"a": {"$slice": [Int64(1), Decimal128("2")]}},
        ARR,
        {**ARR, "a": [1, 2]},
    ),
]

ELEM_MATCH_CASES = [tuple(case.values()) for case in load_cases("projection_elem_match")]

# (id, filter, projection, document, expected output)
POSITIONAL_CASES = [tuple(case.values()) for case in load_cases("projection_positional")]

# (id, filter, projection, document, code name, message): errors while applying.
POSITIONAL_RUNTIME_ERRORS = [tuple(case.values()) for case in load_cases("projection_apply_errors")]
NO_MATCH = "positional operator '.$' couldn't find a matching element in the array"
MISMATCH = "positional operator '.$' element mismatch"

# (id, filter, projection, code name, message): errors while parsing.
PARSE_ERRORS = [tuple(case.values()) for case in load_cases("projection_parse_errors")]


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
