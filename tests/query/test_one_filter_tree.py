"""The one parsed filter and what reads it instead of the filter document: where `$text` sits (found
by the parse, not by walking the tree again), the `_id` a filter pins, and a collection validator
whose matching and errInfo details come from the same tree (annotated as MongoDB annotates a
validator's operators), parsed once."""

from __future__ import annotations

from typing import Any

import pytest

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.indexes.planner import id_point
from ebbdb.storage.query import match, validator
from ebbdb.storage.query import match_tree as t
from ebbdb.storage.query.match import parse_filter
from ebbdb.storage.query.paths import MISSING
from tests.helpers import query_error

TEXT = {"$search": "coffee"}


# -- $text ------------------------------------------------------------------------------------------


def test_the_parse_records_a_top_level_text() -> None:
    parsed = parse_filter({"a": 1, "$text": TEXT})
    assert isinstance(parsed.tree, t.And)
    site = parsed.text
    assert site is not None and site.node is parsed.tree.children[1]
    assert site.or_clauses is None
    assert parse_filter({"a": 1, "$or": [{"b": 1}, {"c": 1}]}).text is None


def test_the_parse_records_the_or_that_holds_the_text() -> None:
    flt = {"b": 2, "$or": [{"a": 1}, {"$and": [{"$text": TEXT}, {"c": 3}]}]}
    parsed = parse_filter(flt)
    site = parsed.text
    assert site is not None and site.or_clauses is not None
    assert site.clause == 1
    # Each clause is parsed as written, with its own predicate, for the planner to read.
    first, second = site.or_clauses
    assert first.filter == {"a": 1} and first.predicate({"a": 1}) and not first.predicate({})
    assert second.filter == flt["$or"][1]
    assert isinstance(second.tree, t.And) and second.tree.children[0] is site.node
    # The outermost $or is the one recorded.
    deeper = parse_filter({"$or": [{"$or": [{"$text": TEXT}, {"a": 1}]}, {"b": 1}]}).text
    assert deeper is not None and deeper.or_clauses is not None
    assert [c.filter for c in deeper.or_clauses][1] == {"b": 1} and deeper.clause == 0


@pytest.mark.parametrize(
    ("flt", "message"),
    [
        ({"$text": TEXT, "$and": [{"$text": TEXT}]}, "Too many text expressions"),
        ({"$nor": [{"a": 1}, {"$text": TEXT}]}, "text expression not allowed in nor"),
        ({"$or": [{"$nor": [{"$text": TEXT}]}]}, "text expression not allowed in nor"),
    ],
)
def test_text_rules_are_checked_once_the_filter_is_parsed(
    flt: dict[str, Any], message: str
) -> None:
    assert query_error(parse_filter, flt) == ("BadValue", message)
    assert query_error(match.compile_filter, flt) == ("BadValue", message)


# -- the `_id` a filter pins --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flt", "point"),
    [
        ({"_id": 5}, 5),
        ({"_id": {"$eq": "x"}, "a": 1}, "x"),
        ({"a": 1, "_id": 5, "$comment": "c"}, 5),
        ({"_id": {"$eq": 5, "$gt": 1}}, MISSING),  # two conditions on `_id`
        ({"_id": {"$gt": 5}}, MISSING),
        ({"_id": {"$in": [5]}}, MISSING),
        ({"_id": {"a": 1}}, MISSING),  # a document: other `_id`s than one key may equal it
        ({"_id": None}, MISSING),
        ({"$and": [{"_id": 5}]}, MISSING),  # IDHACK reads the top-level condition as written
        ({"a": 5}, MISSING),
        ({}, MISSING),
    ],
)
def test_id_point_reads_the_top_level_id_condition(flt: dict[str, Any], point: Any) -> None:
    assert id_point(parse_filter(flt)) == point


# -- a validator ------------------------------------------------------------------------------------

SPEC = {"a": {"$gt": 1, "$lt": 9}, "$or": [{"b": 1}, {"c": {"$ne": 2}}], "d": {"$exists": False}}


def test_a_validator_parses_to_annotated_nodes() -> None:
    tree = parse_filter(SPEC, {}, validator=True).tree
    # The field's two operators are clauses of the document's $and, as MongoDB lists them.
    assert isinstance(tree, t.And) and len(tree.children) == 4
    gt, lt, either, d = tree.children
    assert isinstance(gt, t.Compare) and gt.annotation == t.Annotation(
        "$gt", "a", {"a": {"$gt": 1}}
    )
    assert isinstance(lt, t.Compare) and lt.annotation == t.Annotation(
        "$lt", "a", {"a": {"$lt": 9}}
    )
    assert isinstance(either, t.Or)
    ne = either.children[1]
    assert isinstance(ne, t.Not) and ne.annotation == t.Annotation("$ne", "c", {"c": {"$ne": 2}})
    assert isinstance(d, t.Not) and d.annotation is not None and d.annotation.operator == "$exists"
    # A find's parse of the same filter carries no annotations and nests the field's operators.
    plain = parse_filter(SPEC).tree
    assert isinstance(plain, t.And) and len(plain.children) == 3
    assert plain.children[0].annotation is None


def test_a_validator_keeps_a_one_clause_and() -> None:
    tree = parse_filter({"$and": [{"a": 1}]}, {}, validator=True).tree
    assert isinstance(tree, t.And) and len(tree.children) == 1
    assert parse_filter({"$and": [{"a": 1}]}).tree == t.Compare("a", lambda v: False, "$eq", 1)


def test_validator_details_come_from_the_one_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    parses: list[dict[str, Any]] = []
    real = match._parse_doc

    def counted(flt: Any, variables: Any, cx: Any) -> Any:
        parses.append(dict(flt))
        return real(flt, variables, cx)

    monkeypatch.setattr(match, "_parse_doc", counted)
    v = validator.Validator(SPEC)
    # The validator and its two $or clauses: one parse.
    assert parses == [SPEC, {"b": 1}, {"c": {"$ne": 2}}]
    doc = {"_id": 1, "a": 0, "b": 2, "c": 2, "d": 1}
    assert not v.matches(doc)
    assert v.details(doc) == {
        "operatorName": "$and",
        "clausesNotSatisfied": [
            {
                "index": 0,
                "details": {
                    "operatorName": "$gt",
                    "specifiedAs": {"a": {"$gt": 1}},
                    "reason": "comparison failed",
                    "consideredValue": 0,
                },
            },
            {
                "index": 2,
                "details": {
                    "operatorName": "$or",
                    "clausesNotSatisfied": [
                        {
                            "index": 0,
                            "details": {
                                "operatorName": "$eq",
                                "specifiedAs": {"b": 1},
                                "reason": "comparison failed",
                                "consideredValue": 2,
                            },
                        },
                        {
                            "index": 1,
                            "details": {
                                "operatorName": "$ne",
                                "specifiedAs": {"c": {"$ne": 2}},
                                "reason": "comparison succeeded",
                                "consideredValue": 2,
                            },
                        },
                    ],
                },
            },
            {
                "index": 3,
                "details": {
                    "operatorName": "$exists",
                    "specifiedAs": {"d": {"$exists": False}},
                    "reason": "path does exist",
                },
            },
        ],
    }
    assert v.matches({"a": 5, "c": 3})
    assert len(parses) == 3  # matching and detailing parsed nothing again


def test_an_expr_that_throws_fails_only_its_own_clause() -> None:
    v = validator.Validator({"$or": [{"$expr": {"$divide": [1, "$a"]}}, {"a": 0}]})
    assert v.matches({"a": 0})  # $divide by zero throws: that clause fails, the other holds
    assert not v.matches({"a": "x"})
    details = v.details({"a": "x"})
    assert details["clausesNotSatisfied"][0]["details"]["reason"] == (
        "failed to evaluate aggregation expression"
    )


@pytest.mark.parametrize(
    ("spec", "code", "message"),
    [
        ({"$where": "1"}, "BadValue", "$where is not allowed in this context"),
        ({"$or": [{"$where": "1"}]}, "BadValue", "$where is not allowed in this context"),
        ({"$and": [{"$text": TEXT}]}, "BadValue", "$text is not allowed in this context"),
        ({"a": {"$near": [0, 0]}}, "Location5626500", match.NEAR_REFUSED),
        ({"a": {"$elemMatch": {"$near": [0, 0]}}}, "Location5626500", match.NEAR_REFUSED),
    ],
)
def test_a_validator_refuses_what_mongodb_refuses_there(
    spec: dict[str, Any], code: str, message: str
) -> None:
    assert query_error(validator.parse_validator, spec) == (
        code,
        f"Parsing of collection validator failed :: caused by :: {message}",
    )
    with pytest.raises(QueryError):
        parse_filter(spec, validator=True)
