"""Collations through pymongo: case- and accent-insensitive find, sort, distinct, count, updates,
deletes and aggregation; numeric ordering; unique indexes at strength 2; a collection's default
collation inherited by its indexes and queries; the planner using a collated index only for the
same collation; MongoDB's codes for bad collation documents and its normalised document."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.collation import Collation
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from tests.helpers import plan_stages

Client = MongoClient[dict[str, Any]]

EN2 = {"locale": "en", "strength": 2}
FULL_EN2 = {
    "locale": "en",
    "caseLevel": False,
    "caseFirst": "off",
    "strength": 2,
    "numericOrdering": False,
    "alternate": "non-ignorable",
    "maxVariable": "punct",
    "normalization": False,
    "backwards": False,
    "version": "57.1",
}


def failure(fn: Callable[[], Any]) -> tuple[int, str, str]:
    with pytest.raises((OperationFailure, BulkWriteError)) as info:
        fn()
    details = info.value.details or {}
    return int(info.value.code or 0), str(details.get("codeName")), str(details.get("errmsg"))


def names(docs: Any) -> list[str]:
    return [d["name"] for d in docs]


@pytest.fixture
def people(client: Client) -> Any:
    coll = client.coll8.people
    coll.insert_many(
        [
            {"_id": 1, "name": "bob"},
            {"_id": 2, "name": "Alice"},
            {"_id": 3, "name": "BOB"},
            {"_id": 4, "name": "carl"},
            {"_id": 5, "name": "alice"},
            {"_id": 6, "name": "Bob"},
        ]
    )
    return coll


def test_case_insensitive_find_count_and_in(people: Any) -> None:
    assert [d["_id"] for d in people.find({"name": "bob"}, collation=EN2)] == [1, 3, 6]
    assert [d["_id"] for d in people.find({"name": "bob"})] == [1]
    assert people.count_documents({"name": "ALICE"}, collation=EN2) == 2
    assert people.count_documents({"name": "ALICE"}) == 0
    found = people.find({"name": {"$in": ["ALICE", "CARL"]}}, collation=EN2)
    assert [d["_id"] for d in found] == [2, 4, 5]
    assert [d["_id"] for d in people.find({"name": {"$ne": "bob"}}, collation=EN2)] == [2, 4, 5]
    assert [d["_id"] for d in people.find({"name": {"$nin": ["bob", "alice"]}}, collation=EN2)] == [
        4
    ]
    assert [d["_id"] for d in people.find({"name": {"$gt": "BOB"}}, collation=EN2)] == [4]
    # A regular expression ignores the collation, as MongoDB's does.
    assert [d["_id"] for d in people.find({"name": {"$regex": "^b"}}, collation=EN2)] == [1]


def test_sort_and_distinct_under_a_collation(people: Any) -> None:
    # Under the simple collation upper case sorts first; under "en" by letter, ties by _id.
    assert names(people.find({}, sort=[("name", 1), ("_id", 1)])) == [
        "Alice",
        "BOB",
        "Bob",
        "alice",
        "bob",
        "carl",
    ]
    assert names(people.find({}, sort=[("name", 1), ("_id", 1)], collation=EN2)) == [
        "Alice",
        "alice",
        "bob",
        "BOB",
        "Bob",
        "carl",
    ]
    assert names(people.find({}, sort=[("name", 1), ("_id", 1)], collation={"locale": "en"})) == [
        "alice",
        "Alice",
        "bob",
        "Bob",
        "BOB",
        "carl",
    ]
    assert people.distinct("name", collation=EN2) == ["Alice", "bob", "carl"]
    assert sorted(people.distinct("name")) == ["Alice", "BOB", "Bob", "alice", "bob", "carl"]


def test_strength_one_ignores_accents(client: Client) -> None:
    coll = client.coll8.cafes
    coll.insert_many([{"_id": 1, "w": "café"}, {"_id": 2, "w": "cafe"}, {"_id": 3, "w": "Cafe"}])
    assert [
        d["_id"] for d in coll.find({"w": "CAFE"}, collation={"locale": "fr", "strength": 1})
    ] == [
        1,
        2,
        3,
    ]
    assert [d["_id"] for d in coll.find({"w": "cafe"}, collation=EN2)] == [2, 3]


def test_numeric_ordering(client: Client) -> None:
    coll = client.coll8.numbers
    coll.insert_many([{"_id": i, "n": n} for i, n in enumerate(["10", "9", "100", "2"])])
    numeric = {"locale": "en", "numericOrdering": True}
    assert [d["n"] for d in coll.find({}, sort=[("n", 1)], collation=numeric)] == [
        "2",
        "9",
        "10",
        "100",
    ]
    assert [d["n"] for d in coll.find({}, sort=[("n", 1)])] == ["10", "100", "2", "9"]
    assert [d["n"] for d in coll.find({"n": {"$gt": "9"}}, collation=numeric)] == ["10", "100"]


def test_writes_and_aggregation_under_a_collation(people: Any) -> None:
    result = people.update_many({"name": "BOB"}, {"$set": {"b": True}}, collation=EN2)
    assert (result.matched_count, result.modified_count) == (3, 3)
    found = people.find_one_and_update(
        {"name": "ALICE"}, {"$set": {"a": 1}}, sort=[("_id", -1)], collation=EN2
    )
    assert found is not None and found["_id"] == 5
    rows = list(
        people.aggregate(
            [
                {"$match": {"name": {"$in": ["bob", "alice"]}}},
                {"$group": {"_id": "$name", "n": {"$sum": 1}}},
                {"$sort": {"_id": 1}},
            ],
            collation=EN2,
        )
    )
    assert rows == [{"_id": "Alice", "n": 2}, {"_id": "bob", "n": 3}]
    assert people.delete_many({"name": "alice"}, collation=EN2).deleted_count == 2
    assert people.count_documents({}) == 4


def test_unique_index_at_strength_two_refuses_case_variants(client: Client) -> None:
    coll = client.coll8.users
    assert coll.create_index("email", unique=True, collation=EN2) == "email_1"
    coll.insert_one({"email": "A@x.org"})
    with pytest.raises(DuplicateKeyError) as info:
        coll.insert_one({"email": "a@X.ORG"})
    assert info.value.code == 11000
    coll.insert_one({"email": "b@x.org"})
    assert coll.count_documents({}) == 2
    spec = next(ix for ix in coll.list_indexes() if ix["name"] == "email_1")
    assert spec["collation"] == FULL_EN2
    assert list(spec["collation"]) == list(FULL_EN2)
    # An existing duplicate stops the build.
    other = client.coll8.users2
    other.insert_many([{"k": "A"}, {"k": "a"}])
    assert failure(lambda: other.create_index("k", unique=True, collation=EN2))[0] == 11000
    assert other.create_index("k", unique=True) == "k_1"


def test_default_collation_is_inherited(client: Client) -> None:
    db = client.coll8
    coll = db.create_collection("dflt", collation=Collation("en", strength=2))
    info = next(c for c in db.list_collections() if c["name"] == "dflt")
    assert info["options"] == {"collation": FULL_EN2}
    coll.insert_many([{"_id": 1, "s": "x"}, {"_id": 2, "s": "X"}, {"_id": 3, "s": "y"}])
    assert [d["_id"] for d in coll.find({"s": "x"})] == [1, 2]
    assert [d["_id"] for d in coll.find({"s": "x"}, collation={"locale": "simple"})] == [1]
    assert coll.count_documents({"s": "X"}) == 2
    assert coll.distinct("s") == ["x", "y"]
    coll.create_index("s")
    coll.create_index("t", collation={"locale": "simple"})
    specs = {ix["name"]: ix for ix in coll.list_indexes()}
    assert specs["_id_"]["collation"] == FULL_EN2
    assert specs["s_1"]["collation"] == FULL_EN2
    assert "collation" not in specs["t_1"]
    plan = db.command("explain", {"find": "dflt", "filter": {"s": "x"}})["queryPlanner"]
    assert plan_stages(plan["winningPlan"])[-1]["indexName"] == "s_1"
    # The `_id` index has the collection's collation: "A" and "a" are one _id.
    coll.insert_one({"_id": "A"})
    with pytest.raises(DuplicateKeyError):
        coll.insert_one({"_id": "a"})
    assert coll.find_one({"_id": "a"}) == {"_id": "A"}


def test_planner_uses_a_collated_index_only_with_its_collation(client: Client) -> None:
    db = client.coll8
    coll = db.plan
    coll.insert_many([{"s": v, "n": i} for i, v in enumerate(["a", "A", "b"])])
    coll.create_index("s", collation=EN2)
    coll.create_index("n", collation=EN2)

    def winning(filter: dict[str, Any], **extra: Any) -> dict[str, Any]:
        cmd = {"find": "plan", "filter": filter, **extra}
        plan = db.command("explain", cmd)["queryPlanner"]["winningPlan"]
        return plan_stages(plan)[-1]

    assert winning({"s": "a"}, collation=EN2)["indexName"] == "s_1"
    assert winning({"s": "a"})["stage"] == "COLLSCAN"
    assert winning({"s": "a"}, collation={"locale": "en"})["stage"] == "COLLSCAN"
    # Bounds without strings may use an index of any collation.
    assert winning({"n": 1})["indexName"] == "n_1"
    assert [d["s"] for d in coll.find({"s": "a"}, collation=EN2).sort("n", 1)] == ["a", "A"]
    assert [d["s"] for d in coll.find({"s": "a"})] == ["a"]
    got = [d["s"] for d in coll.find({}, collation=EN2).sort("s", -1).hint("s_1")]
    assert got[0] == "b" and sorted(got[1:]) == ["A", "a"]


@pytest.mark.parametrize(
    ("collation", "code", "code_name", "message"),
    [
        ({"locale": "xx"}, 2, "BadValue", "Field 'locale' is invalid in: { locale: \"xx\" }"),
        (
            {"locale": "EN"},
            2,
            "BadValue",
            "Field 'locale' is invalid in: { locale: \"EN\" }. Did you mean 'en'?",
        ),
        ({"strength": 2}, 4, "NoSuchKey", 'Missing expected field "locale"'),
        (
            {"locale": 5},
            14,
            "TypeMismatch",
            '"locale" had the wrong type. Expected string, found int',
        ),
        (
            {"locale": "en", "strength": 6},
            9,
            "FailedToParse",
            "Field 'strength' must be an integer 1 through 5. Got: 6",
        ),
        (
            {"locale": "en", "caseLevel": "yes"},
            14,
            "TypeMismatch",
            '"caseLevel" had the wrong type. Expected bool, found string',
        ),
        (
            {"locale": "en", "bogus": 1},
            9,
            "FailedToParse",
            'Collation spec contains unknown field. Collation spec: { locale: "en", bogus: 1 }',
        ),
        (
            {"locale": "simple", "strength": 2},
            9,
            "FailedToParse",
            'If locale=simple, no other fields should be present in: { locale: "simple", '
            "strength: 2 }",
        ),
        (
            {"locale": "en", "version": "1.0"},
            161,
            "IncompatibleCollationVersion",
            "Requested collation version 1.0 but the only available collator version was 57.1. "
            'Requested collation spec: { locale: "en", version: "1.0" }',
        ),
        (
            {"locale": "en", "strength": 1, "backwards": True},
            2,
            "BadValue",
            "'backwards' is invalid with 'strength' of 1 in: { locale: \"en\", caseLevel: false, "
            'caseFirst: "off", strength: 1, numericOrdering: false, alternate: "non-ignorable", '
            'maxVariable: "punct", normalization: false, backwards: true, version: "57.1" }',
        ),
    ],
)
def test_bad_collation_documents(
    client: Client, collation: dict[str, Any], code: int, code_name: str, message: str
) -> None:
    db = client.coll8
    db.bad.insert_one({"a": "x"})
    for run in (
        lambda: db.command("find", "bad", collation=collation),
        lambda: db.command("count", "bad", collation=collation),
        lambda: db.command("aggregate", "bad", pipeline=[], cursor={}, collation=collation),
        lambda: db.command("create", "bad2", collation=collation),
        lambda: db.bad.create_index("a", collation=collation),
    ):
        assert failure(run) == (code, code_name, message)


def test_every_option_is_accepted(client: Client) -> None:
    coll = client.coll8.opts
    coll.insert_many([{"s": "a b"}, {"s": "ab"}, {"s": "a-b"}, {"s": "Ab"}])
    shifted = {"locale": "en", "alternate": "shifted", "maxVariable": "space", "strength": 3}
    # Spaces are ignorable, punctuation is not (maxVariable: space).
    assert sorted(d["s"] for d in coll.find({"s": "ab"}, collation=shifted)) == ["a b", "ab"]
    punct = {"locale": "en", "alternate": "shifted", "strength": 3}
    assert sorted(d["s"] for d in coll.find({"s": "ab"}, collation=punct)) == ["a b", "a-b", "ab"]
    upper = {"locale": "en", "caseFirst": "upper"}
    assert [d["s"] for d in coll.find({"s": {"$in": ["ab", "Ab"]}}, collation=upper).sort("s")] == [
        "Ab",
        "ab",
    ]
    level = {"locale": "en", "strength": 1, "caseLevel": True}
    assert [d["s"] for d in coll.find({"s": "AB"}, collation=level)] == []
    extra = {"locale": "fr", "backwards": True, "normalization": True, "strength": 5}
    assert [d["s"] for d in coll.find({"s": "ab"}, collation=extra)] == ["ab"]
    for quaternary in ({"locale": "ja", "strength": 4},):
        assert coll.count_documents({"s": "ab"}, collation=quaternary) == 1


def test_writes_by_string_id_under_the_collections_default_collation(client: Client) -> None:
    """update, delete and findAndModify by `_id` read the `_id` index as find does: its keys are
    the collection's collation's, so "A" and "a" both find "A" (the one-key look-up used the raw
    value and found nothing, not even "A" itself)."""
    db = client.collation_ids
    db.drop_collection("d")
    coll = db.create_collection("d", collation={"locale": "en", "strength": 2})
    coll.insert_many([{"_id": "A", "n": 0}, {"_id": "b", "n": 0}, {"_id": 1, "n": 0}])
    assert coll.update_one({"_id": "A"}, {"$inc": {"n": 1}}).matched_count == 1
    assert coll.update_one({"_id": "a"}, {"$inc": {"n": 1}}).matched_count == 1
    assert coll.update_one({"_id": 1}, {"$inc": {"n": 1}}).matched_count == 1
    found = coll.find_one_and_update({"_id": "a"}, {"$inc": {"n": 1}}, return_document=True)
    assert found == {"_id": "A", "n": 3}
    upserted = coll.update_one({"_id": "a"}, {"$inc": {"n": 1}}, upsert=True)
    assert (upserted.matched_count, upserted.upserted_id) == (1, None)
    # An explicit simple collation: "a" is not "A".
    simple = Collation(locale="simple")
    assert coll.update_one({"_id": "a"}, {"$inc": {"n": 1}}, collation=simple).matched_count == 0
    assert coll.delete_one({"_id": "B"}).deleted_count == 1
    assert {d["_id"]: d["n"] for d in coll.find()} == {1: 1, "A": 4}
