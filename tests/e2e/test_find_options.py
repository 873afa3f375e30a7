"""find's `min`, `max`, `returnKey` and `showRecordId` through pymongo, with MongoDB 7.0's errors
(51173 without a hint, 51174 for bounds that do not fit the hinted index, 51175 for min not
before max, 51176 for min and max naming different fields, NoQueryExecutionPlans with $natural),
and `$natural` hints and sorts."""

from __future__ import annotations

from typing import Any

import pytest
from bson import MaxKey, MinKey
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo.database import Database
from pymongo.errors import OperationFailure

Db = Database[dict[str, Any]]
HINT = "a_1__id_-1"


@pytest.fixture
def coll(mongo_db: Db) -> Any:
    c = mongo_db.nums
    c.insert_many([{"_id": i, "a": i % 4, "b": [i, i + 10] if i == 3 else i} for i in range(8)])
    c.create_index([("a", 1), ("_id", -1)])
    c.create_index("b")
    return c


def failure(db: Db, **command: Any) -> tuple[int, str, str]:
    with pytest.raises(OperationFailure) as info:
        db.command("find", "nums", **command)
    details = info.value.details or {}
    return int(info.value.code or 0), str(details["codeName"]), str(details["errmsg"])


def ids(cursor: Any) -> list[Any]:
    return [d["_id"] for d in cursor]


def test_min_and_max_scan_the_hinted_index(coll: Any) -> None:
    # The index orders (a ascending, _id descending): min inclusive, max exclusive.
    found = coll.find().min([("a", 1), ("_id", 5)]).max([("a", 3), ("_id", MaxKey())]).hint(HINT)
    assert ids(found) == [5, 1, 6, 2]
    assert ids(coll.find().max([("a", 1), ("_id", 4)]).hint(HINT)) == [4, 0, 5]
    assert ids(coll.find().min([("a", 3), ("_id", 3)]).hint(HINT)) == [3]
    # The filter still applies, and a sort is applied on top.
    bounded = coll.find({"_id": {"$gt": 1}}).min([("a", 1), ("_id", MaxKey())]).hint(HINT)
    assert ids(bounded.max([("a", 2), ("_id", MinKey())]).sort("_id", 1)) == [2, 5, 6]


def test_min_and_max_on_a_single_field_index(coll: Any) -> None:
    # A multikey index: each document once, in the order of the first key in range.
    assert ids(coll.find().min([("b", 5)]).max([("b", 12)]).hint([("b", 1)])) == [5, 6, 7]
    assert ids(coll.find().min([("b", 12)]).hint("b_1")) == [3]


def test_min_max_errors(mongo_db: Db, coll: Any) -> None:
    assert failure(mongo_db, min={"a": 1, "_id": 0}) == (
        51173,
        "Location51173",
        "When using min()/max() a hint of which index to use must be provided",
    )
    assert failure(mongo_db, min={"a": 1}, hint=HINT) == (
        51174,
        "Location51174",
        "The index chosen is not compatible with min/max",
    )
    assert failure(mongo_db, max={"_id": 1, "a": 1}, hint=HINT)[0] == 51174
    assert failure(mongo_db, min={"a": 2, "_id": 5}, max={"a": 1, "_id": 5}, hint=HINT) == (
        51175,
        "Location51175",
        "The value provided for min() does not come before the value provided for max() in the "
        "hinted index",
    )
    assert failure(mongo_db, min={"a": 1, "_id": 5}, max={"a": 1, "_id": 5}, hint=HINT)[0] == 51175
    assert failure(mongo_db, min={"a": 1}, max={"b": 2}, hint=HINT) == (
        51176,
        "Location51176",
        "min and max must have the same field names",
    )
    assert failure(mongo_db, min={"a": 1, "_id": 0}, hint={"$natural": 1}) == (
        291,
        "NoQueryExecutionPlans",
        "min and max are incompatible with $natural",
    )


def test_return_key(coll: Any) -> None:
    # The key of the index that found each document, in the key pattern's order.
    found = coll.find({"a": {"$gte": 2}}, return_key=True).hint(HINT)
    assert list(found) == [
        {"a": 2, "_id": 6},
        {"a": 2, "_id": 2},
        {"a": 3, "_id": 7},
        {"a": 3, "_id": 3},
    ]
    # A multikey index gives the element that was in range; a projection is left aside.
    assert list(coll.find({"b": {"$gte": 12}}, {"a": 1}, return_key=True)) == [{"b": 13}]
    assert list(coll.find({"_id": 3}, return_key=True)) == [{"_id": 3}]
    # A collection scan has no key: empty documents.
    assert list(coll.find({"a": 2}, return_key=True).hint({"$natural": 1})) == [{}, {}]


def test_show_record_id(coll: Any) -> None:
    raw = coll.with_options(codec_options=CodecOptions(document_class=RawBSONDocument))
    docs = list(raw.find({"a": 1}, {"a": 1}, show_record_id=True).sort("_id", -1))
    assert [list(d.keys()) for d in docs] == [["_id", "a", "$recordId"]] * 2
    assert all(b"\x12$recordId\x00" in d.raw for d in docs)  # a long
    five, one = (d["$recordId"] for d in docs)
    assert isinstance(five, int) and isinstance(one, int) and five > one
    # The same record id each time, for the whole document too.
    again = {d["_id"]: d["$recordId"] for d in coll.find({}, show_record_id=True)}
    assert (again[5], again[1]) == (five, one)
    # With returnKey, the key alone: mongod's returnKey stage drops the record id.
    with_key = list(coll.find({"_id": 5}, return_key=True, show_record_id=True))
    assert with_key == [{"_id": 5}]


def test_natural_hint_and_sort(coll: Any) -> None:
    assert ids(coll.find().sort("$natural", -1)) == [7, 6, 5, 4, 3, 2, 1, 0]
    assert ids(coll.find({"a": 1}).hint([("$natural", -1)])) == [5, 1]
    assert ids(coll.find({"a": 1}).hint([("$natural", 1)]).sort("_id", -1)) == [5, 1]
    plan = coll.find({"a": 1}).hint([("$natural", 1)]).explain()["queryPlanner"]["winningPlan"]
    assert plan == {"stage": "COLLSCAN", "direction": "forward"}
