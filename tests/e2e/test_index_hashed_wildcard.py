"""Hashed and wildcard indexes through pymongo: creation and MongoDB 7.0's refusals (codes and
messages), listIndexes, entries (arrays refused in hashed paths; wildcard leaves), the planner's
use of them (explain: IXSCAN with hash bounds, or `{$_path: 1, <path>: 1}`), hints, TTL rules,
validate, dropIndexes, and `$toHashedIndexKey` with mongod's own hash values."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from bson import Decimal128, Int64
from pymongo import MongoClient
from pymongo.errors import OperationFailure, WriteError

from tests.e2e.ttl_helpers import advance, ttl_pass
from tests.helpers import plan_stages

Client = MongoClient[dict[str, Any]]

# mongod's hashes (its key generator's golden outputs and the $toHashedIndexKey docs).
HASH_1 = 5902408780260971510
HASH_5 = 4470791281878691347
HASH_NULL = 2338878944348059895


def leaf(coll: Any, flt: dict[str, Any], **find: Any) -> dict[str, Any]:
    return plan_stages(coll.find(flt, **find).explain()["queryPlanner"]["winningPlan"])[-1]


def ids(coll: Any, flt: dict[str, Any], **find: Any) -> list[Any]:
    return sorted((d["_id"] for d in coll.find(flt, **find)), key=str)


def refusal(db: Any, key: dict[str, Any], **options: Any) -> tuple[int, str, str]:
    with pytest.raises(OperationFailure) as info:
        db.command("createIndexes", "refused", indexes=[{"key": key, "name": "ix", **options}])
    details = info.value.details or {}
    return int(info.value.code or 0), details["codeName"], details["errmsg"]


# -- hashed ------------------------------------------------------------------------------------------


@pytest.fixture
def numbers(client: Client) -> Any:
    coll = client.hw.numbers
    coll.insert_many([{"_id": i, "a": i % 5, "b": {"s": f"x{i % 3}"}} for i in range(20)])
    coll.insert_many(
        [
            {"_id": "double", "a": 1.0},
            {"_id": "long", "a": Int64(1)},
            {"_id": "decimal", "a": Decimal128("1")},
            {"_id": "half", "a": 1.5},
            {"_id": "half-decimal", "a": Decimal128("1.5")},
            {"_id": "missing"},
        ]
    )
    return coll


def test_hashed_index_is_listed_and_used_for_equality(numbers: Any) -> None:
    assert numbers.create_index([("a", "hashed")]) == "a_hashed"
    assert [dict(ix) for ix in numbers.list_indexes()][1] == {
        "v": 2,
        "key": {"a": "hashed"},
        "name": "a_hashed",
    }
    # 1, 1.0, NumberLong(1) and NumberDecimal(1) hash alike; the matcher still decides.
    assert ids(numbers, {"a": 1}) == [1, 11, 16, 6, "decimal", "double", "long"]
    scan = leaf(numbers, {"a": 1})
    assert scan["stage"] == "IXSCAN" and scan["indexName"] == "a_hashed"
    assert scan["keyPattern"] == {"a": "hashed"}
    assert scan["indexBounds"] == {"a": [f"[{HASH_1}, {HASH_1}]"]}
    # A fractional number: a double truncates, a decimal rounds half to even; both are found.
    assert ids(numbers, {"a": 1.5}) == ["half", "half-decimal"]
    assert ids(numbers, {"a": Decimal128("1.5")}) == ["half", "half-decimal"]
    assert leaf(numbers, {"a": 1.5})["stage"] == "IXSCAN"
    # $in: one point per hash; null finds the missing field (hashed as null).
    assert ids(numbers, {"a": {"$in": [1, 4]}})[:8] == [1, 11, 14, 16, 19, 4, 6, 9]
    assert leaf(numbers, {"a": {"$in": [1, 4]}})["stage"] == "IXSCAN"
    assert ids(numbers, {"a": None}) == ["missing"]
    assert leaf(numbers, {"a": None})["indexBounds"] == {"a": [f"[{HASH_NULL}, {HASH_NULL}]"]}


def test_hashed_index_is_not_used_for_ranges_or_sorts(numbers: Any) -> None:
    numbers.create_index([("a", "hashed")])
    assert leaf(numbers, {"a": {"$gt": 3}})["stage"] == "COLLSCAN"
    assert ids(numbers, {"a": {"$gt": 3}}) == [14, 19, 4, 9]
    plan = numbers.find({}).sort("a", 1).explain()["queryPlanner"]["winningPlan"]
    assert [s["stage"] for s in plan_stages(plan)] == ["SORT", "COLLSCAN"]
    plan = numbers.find({"a": 1}).sort("a", 1).explain()["queryPlanner"]["winningPlan"]
    assert [s["stage"] for s in plan_stages(plan)] == ["SORT", "FETCH", "IXSCAN"]
    # A sub-document's field is not what the index hashes.
    numbers.create_index([("b", "hashed")])
    assert leaf(numbers, {"b.s": "x1"})["stage"] == "COLLSCAN"
    assert leaf(numbers, {"b": {"s": "x1"}})["indexName"] == "b_hashed"
    assert ids(numbers, {"b": {"s": "x1"}}) == [1, 10, 13, 16, 19, 4, 7]
    # Hinted for a range: the whole index, the matcher decides.
    assert ids(numbers, {"a": {"$gte": 4}}, hint=[("a", "hashed")]) == [14, 19, 4, 9]


def test_compound_hashed_indexes(client: Client) -> None:
    coll = client.hw.compound
    coll.insert_many([{"_id": i, "a": i, "b": i % 13, "c": i % 10} for i in range(60)])
    assert coll.create_index([("a", 1), ("b", "hashed"), ("c", -1)]) == "a_1_b_hashed_c_-1"
    assert coll.create_index([("b", "hashed"), ("c", -1)]) == "b_hashed_c_-1"
    flt = {"a": {"$gt": 25, "$lt": 29}, "b": 0}
    assert ids(coll, flt) == [26]
    scan = leaf(coll, flt, hint="a_1_b_hashed_c_-1")
    assert scan["indexBounds"]["a"] == ["(25, 29)"]
    assert scan["indexBounds"]["c"] == ["[MinKey, MaxKey]"]
    # Equality on the hashed prefix gives the next field's order.
    plan = coll.find({"b": 3}).sort("c", -1).hint("b_hashed_c_-1").explain()
    stages = plan_stages(plan["queryPlanner"]["winningPlan"])
    assert [s["stage"] for s in stages] == ["FETCH", "IXSCAN"]
    found = coll.find({"b": 3}).sort("c", -1).hint("b_hashed_c_-1")
    assert [d["c"] for d in found] == [9, 6, 5, 3, 2]
    # No field of a hashed index may hold an array, nor meet one on its path.
    with pytest.raises(WriteError) as info:
        coll.insert_one({"a": 1, "c": [1]})
    assert info.value.code == 16766
    assert info.value.details is not None
    assert info.value.details["errmsg"] == (
        "Error: hashed indexes do not currently support array values. Found array at path: c"
    )


def test_arrays_along_a_hashed_path_are_refused(client: Client) -> None:
    coll = client.hw.paths
    coll.create_index([("f.g.0.h", "hashed")])
    for doc, path in [
        ({"f": []}, "f"),
        ({"f": {"g": []}}, "f.g"),
        ({"f": {"g": {"0": []}}}, "f.g.0"),
        ({"f": {"g": {"0": {"h": [1]}}}}, "f.g.0.h"),
    ]:
        with pytest.raises(WriteError) as info:
            coll.insert_one(doc)
        assert info.value.code == 16766
        assert info.value.details is not None
        assert info.value.details["errmsg"].endswith(f"Found array at path: {path}")
    coll.insert_one({"_id": 1, "f": {"g": {"0": {"other": []}}}})
    with pytest.raises(WriteError) as info:
        coll.update_one({"_id": 1}, {"$set": {"f": [1]}})
    assert info.value.code == 16766
    # Building over a document that holds an array fails, and leaves no index.
    client.hw.prebuilt.insert_one({"a": [1, 2]})
    with pytest.raises(OperationFailure) as built:
        client.hw.prebuilt.create_index([("a", "hashed")])
    assert built.value.code == 16766
    assert [ix["name"] for ix in client.hw.prebuilt.list_indexes()] == ["_id_"]


def test_hashed_creation_errors(client: Client) -> None:
    db = client.hw
    assert refusal(db, {"a": "hashed"}, unique=True) == (
        16764,
        "Location16764",
        "Currently hashed indexes cannot guarantee uniqueness. Use a regular index.",
    )
    assert refusal(db, {"a": "hashed", "b": "hashed"}) == (
        31303,
        "Location31303",
        "A maximum of one index field is allowed to be hashed but found 2 for 'key' "
        '{ a: "hashed", b: "hashed" }',
    )
    assert refusal(db, {"$**": "hashed"})[:2] == (67, "CannotCreateIndex")
    assert refusal(db, {"a": "hashed", "b": 1}, expireAfterSeconds=10)[:2] == (
        67,
        "CannotCreateIndex",
    )
    # Sparse, partial and collated hashed indexes are fine.
    coll = db.options
    coll.create_index([("a", "hashed")], sparse=True)
    coll.create_index([("b", "hashed")], partialFilterExpression={"c": {"$gt": 5}})
    coll.create_index([("s", "hashed")], collation={"locale": "en", "strength": 2})
    coll.insert_many([{"_id": 1, "b": [1], "c": 1}, {"_id": 2, "s": "ABC"}, {"_id": 3}])
    assert ids(coll, {"a": None}) == [1, 2, 3]
    assert leaf(coll, {"a": None})["stage"] == "COLLSCAN"  # a sparse index lacks them
    found = coll.find({"s": "abc"}, collation={"locale": "en", "strength": 2})
    assert [d["_id"] for d in found] == [2]
    plan = coll.find({"s": "abc"}, collation={"locale": "en", "strength": 2}).explain()
    assert plan_stages(plan["queryPlanner"]["winningPlan"])[-1]["indexName"] == "s_hashed"


def test_hashed_id_index(client: Client) -> None:
    coll = client.hw.by_id
    coll.insert_many([{"_id": i} for i in range(10)])
    assert coll.create_index([("_id", "hashed")]) == "_id_hashed"
    assert ids(coll, {"_id": {"$in": [3, 4]}}, hint="_id_hashed") == [3, 4]
    scan = leaf(coll, {"_id": {"$in": [3, 4]}}, hint="_id_hashed")
    assert scan["keyPattern"] == {"_id": "hashed"}


def test_ttl_on_a_hashed_index_is_accepted_and_expires_nothing(client: Client) -> None:
    coll = client.hw.ttl
    coll.create_index([("at", "hashed")], expireAfterSeconds=0)
    spec = [dict(ix) for ix in coll.list_indexes()][1]
    assert spec == {"v": 2, "key": {"at": "hashed"}, "name": "at_hashed", "expireAfterSeconds": 0}
    coll.insert_one({"_id": 1, "at": datetime.datetime(2000, 1, 1)})
    advance(client, 3600)
    ttl_pass(client)
    # MongoDB's TTL monitor skips indexes that are not plain btrees.
    assert ids(coll, {}) == [1]


def test_to_hashed_index_key_is_mongods_hash(client: Client) -> None:
    out = list(
        client.hw.aggregate(
            [
                {"$documents": [{"v": "string to hash"}, {"v": 5}, {"v": 5.9}, {"v": None}, {}]},
                {"$project": {"_id": 0, "h": {"$toHashedIndexKey": "$v"}}},
            ]
        )
    )
    assert out == [
        {"h": 763543691661428748},
        {"h": HASH_5},
        {"h": HASH_5},
        {"h": HASH_NULL},
        {"h": HASH_NULL},
    ]
    assert type(out[0]["h"]) is Int64


# -- wildcard ----------------------------------------------------------------------------------------


@pytest.fixture
def wild(client: Client) -> Any:
    coll = client.hw.wild
    coll.insert_many(
        [
            {"_id": 1, "a": 1, "b": {"c": 2, "d": "x"}},
            {"_id": 2, "a": [1, 3], "b": {"c": 5}},
            {"_id": 3, "a": "s", "b": {}},
            {"_id": 4, "b": [{"c": 2}, {"c": 7}]},
            {"_id": 5, "a": None, "e": [[1, 2]]},
        ]
    )
    return coll


def test_wildcard_index_answers_one_path(wild: Any) -> None:
    assert wild.create_index([("$**", 1)]) == "$**_1"
    assert [dict(ix) for ix in wild.list_indexes()][1] == {
        "v": 2,
        "key": {"$**": 1},
        "name": "$**_1",
    }
    cases = [
        ({"a": 1}, [1, 2], ["[1, 1]"]),
        ({"b.c": 2}, [1, 4], ["[2, 2]"]),
        ({"b.c": {"$gt": 2}}, [2, 4], ["(2, inf.0]"]),
        ({"a": {"$in": [3, "s"]}}, [2, 3], ['[3, 3], ["s", "s"]']),
    ]
    for flt, expected, bounds in cases:
        path = next(iter(flt))
        assert ids(wild, flt) == expected
        scan = leaf(wild, flt)
        assert scan["stage"] == "IXSCAN" and scan["indexName"] == "$**_1"
        assert scan["keyPattern"] == {"$_path": 1, path: 1}
        assert scan["indexBounds"] == {"$_path": [f'["{path}", "{path}"]'], path: bounds}
        assert scan["isMultiKey"] is True
    # What a wildcard index cannot answer: missing paths, whole documents or arrays, $ne.
    for flt, expected in [
        ({"a": None}, [4, 5]),
        ({"a": {"$exists": False}}, [4]),
        ({"b": {"c": 5}}, [2]),
        ({"a": {"$ne": 1}}, [3, 4, 5]),
        ({"a": {"$in": [None, 1]}}, [1, 2, 4, 5]),
        ({"a.0": 1}, [2]),
        ({"_id": {"$gt": 3}}, [4, 5]),
    ]:
        assert ids(wild, flt) == expected
        assert leaf(wild, flt)["stage"] != "IXSCAN" or leaf(wild, flt)["indexName"] == "_id_"
    # Sorts come from elsewhere.
    plan = wild.find({"a": 1}).sort("a", 1).explain()["queryPlanner"]["winningPlan"]
    assert plan["stage"] == "SORT"


def test_wildcard_entries_as_mongod_makes_them(client: Client, wild: Any) -> None:
    wild.create_index([("$**", 1)])
    assert ids(wild, {"e": [1, 2]}) == [5]  # a nested array is indexed whole; matcher decides
    assert ids(wild, {"b.d": "x"}) == [1]
    assert ids(wild, {"b.c": {"$gte": 2, "$lte": 5}}) == [1, 2, 4]
    wild.update_one({"_id": 1}, {"$set": {"b.c": 100}})
    wild.delete_one({"_id": 4})
    assert ids(wild, {"b.c": 2}) == []
    assert ids(wild, {"b.c": 100}) == [1]
    assert client.hw.command("validate", "wild")["valid"] is True
    # A regular index on the path wins over the wildcard one.
    wild.create_index([("a", 1)])
    assert leaf(wild, {"a": 1})["indexName"] == "a_1"


def test_wildcard_subpath_and_projection(client: Client, wild: Any) -> None:
    assert wild.create_index([("b.$**", 1)]) == "b.$**_1"
    assert leaf(wild, {"b.c": 2})["indexName"] == "b.$**_1"
    assert leaf(wild, {"a": 1})["stage"] == "COLLSCAN"
    wild.drop_index("b.$**_1")
    wild.create_index([("$**", 1)], wildcardProjection={"a": 1, "_id": 0}, name="only_a")
    assert [dict(ix) for ix in wild.list_indexes()][1]["wildcardProjection"] == {
        "a": 1,
        "_id": 0,
    }
    assert leaf(wild, {"a": 1})["indexName"] == "only_a"
    assert leaf(wild, {"b.c": 2})["stage"] == "COLLSCAN"
    wild.drop_index("only_a")
    wild.create_index([("$**", 1)], wildcardProjection={"b": 0, "_id": 1}, name="not_b")
    assert leaf(wild, {"a": 1})["indexName"] == "not_b"
    assert leaf(wild, {"_id": 2}, hint="not_b")["keyPattern"] == {"$_path": 1, "_id": 1}
    assert ids(wild, {"_id": 2}, hint="not_b") == [2]
    assert leaf(wild, {"b.c": 2})["stage"] == "COLLSCAN"
    assert client.hw.command("validate", "wild")["valid"] is True
    client.hw.command("dropIndexes", "wild", index={"$**": 1})
    assert [ix["name"] for ix in wild.list_indexes()] == ["_id_"]


def test_wildcard_hints(client: Client, wild: Any) -> None:
    wild.create_index([("$**", 1)])
    wild.create_index([("a", 1)])
    assert leaf(wild, {"a": 1}, hint=[("$**", 1)])["indexName"] == "$**_1"
    assert ids(wild, {"a": 1}, hint="$**_1") == [1, 2]
    with pytest.raises(OperationFailure) as info:
        list(wild.find({"zz": {"$exists": False}}, hint=[("$**", 1)]))
    assert info.value.code == 291  # NoQueryExecutionPlans
    with pytest.raises(OperationFailure) as minmax:
        list(wild.find({}, min={"a": 0}, hint=[("$**", 1)]))
    assert minmax.value.code == 51174


def test_wildcard_creation_errors(client: Client) -> None:
    db = client.hw
    cannot = (67, "CannotCreateIndex")
    assert refusal(db, {"$**": 1}, unique=True) == (
        *cannot,
        "Index type 'wildcard' does not support the unique option",
    )
    assert refusal(db, {"$**": 1}, sparse=True) == (
        *cannot,
        "Index type 'wildcard' does not support the sparse option",
    )
    assert refusal(db, {"$**": 1}, expireAfterSeconds=60) == (
        *cannot,
        "Index type 'wildcard' cannot be a TTL index",
    )
    assert refusal(db, {"$**": 0})[:2] == cannot
    assert refusal(db, {"$**.$**": 1})[:2] == cannot
    assert refusal(db, {"a.$**.$**": 1})[:2] == cannot
    assert refusal(db, {"$**": "wildcard"})[:2] == cannot
    assert refusal(db, {"a": "wildcard"})[:2] == cannot
    assert refusal(db, {"$**": 1}, wildcardProjection={"a": 1, "b": 0}) == (
        31254,
        "Location31254",
        "Cannot do exclusion on field b in inclusion projection",
    )
    assert refusal(db, {"$**": 1}, wildcardProjection={"a": 0, "b": 1})[:2] == (
        31253,
        "Location31253",
    )
    assert refusal(db, {"$**": 1}, wildcardProjection={"a": 1, "b": "x"})[:2] == (
        51271,
        "Location51271",
    )
    assert refusal(db, {"$**": 1}, wildcardProjection={})[:2] == (9, "FailedToParse")
    assert refusal(db, {"a.$**": 1}, wildcardProjection={"a": 1})[:2] == (9, "FailedToParse")
    assert refusal(db, {"a.$**": 1}, wildcardProjection="x")[:2] == (14, "TypeMismatch")
    assert refusal(db, {"a": 1}, wildcardProjection={"a": 1})[:2] == (2, "BadValue")
    # MongoDB 7.0's compound wildcard indexes are not built (yet).
    assert refusal(db, {"a": 1, "b.$**": 1}) == (
        238,
        "NotImplemented",
        "compound wildcard indexes are not supported",
    )
    assert refusal(db, {"a": 1, "b.$**": 1}, unique=True)[:2] == cannot
    # A descending wildcard index is one (MongoDB 7.0).
    db.desc.insert_many([{"_id": 1, "a": 2}, {"_id": 2, "a": 5}])
    assert db.desc.create_index([("$**", -1)]) == "$**_-1"
    assert ids(db.desc, {"a": {"$gt": 3}}) == [2]
    assert leaf(db.desc, {"a": {"$gt": 3}})["keyPattern"] == {"$_path": 1, "a": -1}
