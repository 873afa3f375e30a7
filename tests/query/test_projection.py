"""Projection, table-driven: inclusion and exclusion of top-level and dotted fields, MongoDB's `_id`
rules, arrays under dotted paths, and the errors for mixing or malformed values."""

from __future__ import annotations

import pytest

from storage.errors import QueryError
from storage.query.projection import parse_projection

DOC = {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}, {"g": 3}, 4], "h": "x"}

CASES: list[tuple[str, dict, dict, dict]] = [
    # -- inclusion ---------------------------------------------------------------------------------
    ("include one", {"a": 1}, DOC, {"_id": 1, "a": 1}),
    ("include keeps document order", {"h": 1, "a": 1}, DOC, {"_id": 1, "a": 1, "h": "x"}),
    ("include with true", {"a": True}, DOC, {"_id": 1, "a": 1}),
    ("include with non-zero numbers", {"a": 2, "h": -1.5}, DOC, {"_id": 1, "a": 1, "h": "x"}),
    ("include missing field", {"zz": 1}, DOC, {"_id": 1}),
    ("include without _id", {"a": 1, "_id": 0}, DOC, {"a": 1}),
    ("include, _id excluded first", {"_id": 0, "a": 1}, DOC, {"a": 1}),
    ("include _id explicitly", {"_id": 1, "a": 1}, DOC, {"_id": 1, "a": 1}),
    ("include a whole subdocument", {"b": 1}, DOC, {"_id": 1, "b": {"c": 2, "d": 3}}),
    ("include dotted", {"b.c": 1}, DOC, {"_id": 1, "b": {"c": 2}}),
    ("include two dotted siblings", {"b.c": 1, "b.d": 1}, DOC, {"_id": 1, "b": {"c": 2, "d": 3}}),
    ("include dotted missing leaf", {"b.zz": 1}, DOC, {"_id": 1, "b": {}}),
    ("include dotted through a scalar", {"a.zz": 1}, DOC, {"_id": 1}),
    (
        "include dotted through an array",
        {"e.g": 1},
        DOC,
        {"_id": 1, "e": [{"g": 2}, {"g": 3}]},
    ),
    (
        "include dotted through an array, leaf missing",
        {"e.f": 1},
        DOC,
        {"_id": 1, "e": [{"f": 1}, {}]},
    ),
    ("document without _id", {"a": 1}, {"a": 1, "b": 2}, {"a": 1}),
    # -- exclusion ---------------------------------------------------------------------------------
    ("exclude one", {"a": 0}, DOC, {k: v for k, v in DOC.items() if k != "a"}),
    ("exclude with false", {"a": False, "h": 0}, DOC, {"_id": 1, "b": DOC["b"], "e": DOC["e"]}),
    ("exclude _id only", {"_id": 0}, DOC, {k: v for k, v in DOC.items() if k != "_id"}),
    ("exclude _id and another", {"_id": 0, "a": 0, "b": 0, "e": 0}, DOC, {"h": "x"}),
    ("exclude missing field", {"zz": 0}, DOC, DOC),
    (
        "exclude dotted",
        {"b.c": 0},
        DOC,
        {"_id": 1, "a": 1, "b": {"d": 3}, "e": DOC["e"], "h": "x"},
    ),
    (
        "exclude dotted through an array keeps scalars",
        {"e.g": 0},
        DOC,
        {"_id": 1, "a": 1, "b": DOC["b"], "e": [{"f": 1}, {}, 4], "h": "x"},
    ),
    ("exclude dotted through a scalar", {"a.zz": 0}, DOC, DOC),
    # -- _id alone ---------------------------------------------------------------------------------
    ("only _id included", {"_id": 1}, DOC, {"_id": 1}),
    ("only _id true", {"_id": True}, DOC, {"_id": 1}),
]


@pytest.mark.parametrize(
    ("spec", "doc", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
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


MIXED = [
    (
        "exclusion in inclusion",
        {"a": 1, "b": 0},
        "Location31254",
        "Cannot do exclusion on field b in inclusion projection",
    ),
    (
        "inclusion in exclusion",
        {"a": 0, "b": 1},
        "Location31253",
        "Cannot do inclusion on field b in exclusion projection",
    ),
    (
        "dotted exclusion in inclusion",
        {"a": 1, "b.c": False},
        "Location31254",
        "Cannot do exclusion on field b.c in inclusion projection",
    ),
    (
        "dotted inclusion in exclusion",
        {"a.b": 0, "c": True},
        "Location31253",
        "Cannot do inclusion on field c in exclusion projection",
    ),
    (
        "mixing after _id",
        {"_id": 0, "a": 1, "b": 0},
        "Location31254",
        "Cannot do exclusion on field b in inclusion projection",
    ),
]


@pytest.mark.parametrize(
    ("spec", "code_name", "message"), [m[1:] for m in MIXED], ids=[m[0] for m in MIXED]
)
def test_mixing_inclusion_and_exclusion(spec: dict, code_name: str, message: str) -> None:
    with pytest.raises(QueryError) as excinfo:
        parse_projection(spec)
    assert excinfo.value.code_name == code_name
    assert excinfo.value.message == message


@pytest.mark.parametrize("spec", [{"_id": 1, "a": 0}, {"_id": 0, "a": 1}, {"a": 1, "_id": 0}])
def test_id_does_not_count_as_mixing(spec: dict) -> None:
    # _id may be included in an exclusion projection and excluded in an inclusion one.
    assert parse_projection(spec) is not None


def test_id_included_in_exclusion_projection() -> None:
    out = parse_projection({"_id": 1, "a": 0}).apply({"_id": 1, "a": 1, "b": 2})
    assert out == {"_id": 1, "b": 2}


@pytest.mark.parametrize("spec", [{"$a": 1}, {"a": {}}])
def test_malformed_projection(spec: dict) -> None:
    with pytest.raises(QueryError):
        parse_projection(spec)
