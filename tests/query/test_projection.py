"""Projection, table-driven: inclusion and exclusion of top-level, dotted and nested fields, MongoDB's
`_id` rules, arrays under dotted paths, literal fields, and MongoDB's codes and messages for mixing,
path collisions and malformed values. The find-only operators are in test_projection_operators.py."""

from __future__ import annotations

import pytest
from bson import Decimal128, Int64

from ebbdb.storage.query.projection import parse_projection
from tests.helpers import cases, errors_test

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
    # -- arrays under dotted paths -----------------------------------------------------------------
    ("include drops scalar elements", {"a.b": 1}, {"a": [{"b": 1, "c": 2}, 3]}, {"a": [{"b": 1}]}),
    (
        "exclude keeps scalar elements",
        {"a.b": 0},
        {"a": [{"b": 1, "c": 2}, 3]},
        {"a": [{"c": 2}, 3]},
    ),
    (
        "include through nested arrays",
        {"a.b": 1},
        {"a": [[{"b": 1, "c": 2}, 5], {"c": 1}]},
        {"a": [[{"b": 1}], {}]},
    ),
    (
        "exclude through nested arrays",
        {"a.b": 0},
        {"a": [[{"b": 1, "c": 2}, 5]]},
        {"a": [[{"c": 2}, 5]]},
    ),
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
    ("zero double excludes", {"a": 0.0}, {"_id": 1, "a": 1, "h": 2}, {"_id": 1, "h": 2}),
    # -- sub-objects name paths like dots ----------------------------------------------------------
    ("sub-object include", {"b": {"c": 1}}, DOC, {"_id": 1, "b": {"c": 2}}),
    ("sub-object exclude", {"b": {"c": 0}}, DOC, {**DOC, "b": {"d": 3}}),
    (
        "sub-object with a dotted key",
        {"x": {"y.z": 1}},
        {"x": {"y": {"z": 1, "w": 2}}},
        {"x": {"y": {"z": 1}}},
    ),
    (
        "sub-object merges with a dotted path",
        {"b.c": 1, "b": {"d": 1}},
        DOC,
        {"_id": 1, "b": {"c": 2, "d": 3}},
    ),
    ("sub-object through an array", {"e": {"g": 1}}, DOC, {"_id": 1, "e": [{"g": 2}, {"g": 3}]}),
    # -- _id parts ---------------------------------------------------------------------------------
    ("include part of _id", {"_id.x": 1}, {"_id": {"x": 1, "y": 2}, "a": 1}, {"_id": {"x": 1}}),
    (
        "include part of _id and a field",
        {"a": 1, "_id.y": 1},
        {"_id": {"x": 1, "y": 2}, "a": 1},
        {"_id": {"y": 2}, "a": 1},
    ),
    (
        "exclude part of _id",
        {"_id.x": 0},
        {"_id": {"x": 1, "y": 2}, "a": 1},
        {"_id": {"y": 2}, "a": 1},
    ),
    ("_id follows the document's order", {"a": 1}, {"a": 1, "_id": 5}, {"a": 1, "_id": 5}),
    # -- literals: computed fields after the included ones -----------------------------------------
    ("string literal", {"x": "hi"}, {"_id": 1, "a": 1}, {"_id": 1, "x": "hi"}),
    (
        "literal replaces the field and comes last",
        {"x": "hi", "a": 1},
        {"_id": 1, "x": 5, "a": 2, "z": 3},
        {"_id": 1, "a": 2, "x": "hi"},
    ),
    (
        "literals in projection order",
        {"y": "b", "x": "a"},
        {"_id": 1, "x": 0},
        {"_id": 1, "y": "b", "x": "a"},
    ),
    ("null literal", {"x": None}, {"_id": 1}, {"_id": 1, "x": None}),
    ("array literal", {"x": [1, "b", {"c": 1}]}, {"_id": 1}, {"_id": 1, "x": [1, "b", {"c": 1}]}),
    ("$literal number", {"x": {"$literal": 1}}, {"_id": 1, "x": 7}, {"_id": 1, "x": 1}),
    (
        "$literal operator object",
        {"x": {"$literal": {"$gt": 1}}},
        {"_id": 1},
        {"_id": 1, "x": {"$gt": 1}},
    ),
    ("literal without _id", {"_id": 0, "x": "hi"}, {"_id": 1, "a": 1}, {"x": "hi"}),
    ("dotted literal into a document", {"b.x": "hi"}, DOC, {"_id": 1, "b": {"x": "hi"}}),
    (
        "dotted literal beside an inclusion",
        {"b.x": "hi", "b.c": 1},
        DOC,
        {"_id": 1, "b": {"c": 2, "x": "hi"}},
    ),
    (
        "dotted literal over a scalar",
        {"a.x": "hi"},
        {"_id": 1, "a": 1},
        {"_id": 1, "a": {"x": "hi"}},
    ),
    (
        "dotted literal over a missing field",
        {"n.x": "hi"},
        {"_id": 1},
        {"_id": 1, "n": {"x": "hi"}},
    ),
    (
        "dotted literal into every element",
        {"e.x": "hi"},
        {"_id": 1, "e": [{"f": 1}, 4]},
        {"_id": 1, "e": [{"x": "hi"}, {"x": "hi"}]},
    ),
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
ERRORS: list[tuple[str, dict, str, str]] = [
    # -- mixing inclusion and exclusion ------------------------------------------------------------
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
    # -- path collisions ---------------------------------------------------------------------------
    (
        "parent then child",
        {"a": 1, "a.b": 1},
        "Location31249",
        "Path collision at a.b remaining portion b",
    ),
    ("child then parent", {"a.b": 1, "a": 1}, "Location31250", "Path collision at a"),
    (
        "deeper child",
        {"a.b": 1, "a.b.c": 1},
        "Location31249",
        "Path collision at a.b.c remaining portion b.c",
    ),
    (
        # The remaining portion is the path less its first field, whatever the depth.
        "remaining portion",
        {"x.period": 1, "x.period.start": 1},
        "Location31249",
        "Path collision at x.period.start remaining portion period.start",
    ),
    ("exclusions collide too", {"a.b": 0, "a": 0}, "Location31250", "Path collision at a"),
    (
        "sub-object over an included field",
        {"a.b": 1, "a": {"b": {"c": 1}}},
        "Location31250",
        "Path collision at b",
    ),
    (
        "path over a sub-object",
        {"a": {"b": {"c": 1}}, "a.b": 1},
        "Location31250",
        "Path collision at a.b",
    ),
    (
        "_id and a part of it",
        {"_id": 1, "_id.x": 1},
        "Location31249",
        "Path collision at _id.x remaining portion x",
    ),
    (
        "literal and a path under it",
        {"a": "x", "a.b": 1},
        "Location31249",
        "Path collision at a.b remaining portion b",
    ),
    # -- field names -------------------------------------------------------------------------------
    ("empty name", {"": 1}, "Location40352", "FieldPath cannot be constructed with empty string"),
    ("trailing dot", {"a.": 1}, "Location40353", "FieldPath must not end with a '.'."),
    ("empty part", {"a..b": 1}, "Location15998", "FieldPath field names may not be empty strings."),
    ("leading dot", {".a": 1}, "Location15998", "FieldPath field names may not be empty strings."),
    (
        "dollar name",
        {"$a": 1},
        "Location16410",
        "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
    ),
    (
        "dollar part",
        {"a.$b": 0},
        "Location16410",
        "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
    ),
    (
        # Two keys make a sub-projection, not an operator, so "$slice" is a field name.
        "operator beside a field",
        {"a": {"$slice": 1, "b": 1}},
        "Location16410",
        "FieldPath field names may not start with '$'. Consider using $getField or $setField.",
    ),
    # -- sub-objects -------------------------------------------------------------------------------
    (
        "empty sub-object",
        {"a": {}},
        "Location51270",
        "An empty sub-projection is not a valid value. Found empty object at path",
    ),
    (
        "empty nested sub-object",
        {"a": {"b": {}}},
        "Location51270",
        "An empty sub-projection is not a valid value. Found empty object at path",
    ),
    (
        "mixing inside a sub-object names the inner field",
        {"a": {"b": 1, "c": 0}},
        "Location31254",
        "Cannot do exclusion on field c in inclusion projection",
    ),
    (
        "_id inside a sub-object is a plain field",
        {"a": {"b": 0, "_id": 1}},
        "Location31253",
        "Cannot do inclusion on field _id in exclusion projection",
    ),
    # -- literals and expressions ------------------------------------------------------------------
    (
        "literal in an exclusion",
        {"a": 0, "x": "hi"},
        "Location31310",
        'Cannot use an expression x: "hi" in an exclusion projection',
    ),
    (
        "null literal in an exclusion",
        {"a": 0, "x": None},
        "Location31310",
        "Cannot use an expression x: null in an exclusion projection",
    ),
    (
        "array literal in an exclusion",
        {"a": 0, "x": [1, 2.5]},
        "Location31310",
        "Cannot use an expression x: [ 1, 2.5 ] in an exclusion projection",
    ),
    (
        "exclusion after a literal",
        {"x": "hi", "a": 0},
        "Location31254",
        "Cannot do exclusion on field a in inclusion projection",
    ),
    (
        "expression in an exclusion",
        {"a": 0, "x": {"$add": [1, 2]}},
        "Location31252",
        "Cannot use expression other than $meta in exclusion projection",
    ),
    (
        "$literal in an exclusion",
        {"a": 0, "x": {"$literal": 1}},
        "Location31252",
        "Cannot use expression other than $meta in exclusion projection",
    ),
    (
        "aggregation expression",
        {"x": {"$add": [1, 2]}},
        "NotImplemented",
        "aggregation expression $add in a projection is not supported yet (field x)",
    ),
    (
        "field path",
        {"x": "$a"},
        "NotImplemented",
        'aggregation expressions in a projection are not supported yet: "$a"',
    ),
    (
        "field path inside an array",
        {"x": [1, "$a"]},
        "NotImplemented",
        'aggregation expressions in a projection are not supported yet: [ 1, "$a" ]',
    ),
    (
        "operator inside an array",
        {"x": [{"$add": [1]}]},
        "NotImplemented",
        "aggregation expressions in a projection are not supported yet: [ { $add: [ 1 ] } ]",
    ),
]


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
