"""Field names with dots and dollars as MongoDB 5.0+ stores them, through pymongo: inserts and
upserts keep `$`-prefixed and dotted names (top level and nested), replacements refuse top-level
`$` names, update operators may not create or change a top-level `$` field (52), an `_id` holding a
`$` field is refused (52) as a regex `_id` is (53); $getField, $setField, $unsetField and $literal
read and write such fields, in find, aggregate and pipeline updates."""

from __future__ import annotations

from typing import Any

import pytest
from bson import Regex
from pymongo.database import Database
from pymongo.errors import OperationFailure, WriteError

Db = Database[dict[str, Any]]

HINT = (
    "is not allowed in the context of an update's replacement document. Consider using an "
    "aggregation pipeline with $replaceWith."
)


@pytest.fixture
def coll(mongo_db: Db) -> Any:
    c = mongo_db.odd
    c.insert_one({"_id": 1, "$price": 50, "a.b": 1, "pricing": {"$discount": 10, "x.y": 2}})
    return c


def write_failure(exc: pytest.ExceptionInfo[WriteError]) -> tuple[int, str]:
    return int(exc.value.code or 0), str((exc.value.details or {})["errmsg"])


def test_inserted_names_round_trip(coll: Any) -> None:
    coll.insert_one({"_id": 2, "$id": "h1", "location": {"$db": "n", "$ref": "r", "$inc": True}})
    assert list(coll.find().sort("_id", 1)) == [
        {"_id": 1, "$price": 50, "a.b": 1, "pricing": {"$discount": 10, "x.y": 2}},
        {"_id": 2, "$id": "h1", "location": {"$db": "n", "$ref": "r", "$inc": True}},
    ]
    # A dotted filter is a path, not the dotted name.
    assert list(coll.find({"a.b": 1})) == []
    assert list(coll.find({"pricing.$discount": 10}, {"_id": 1})) == [{"_id": 1}]


def test_id_rules(mongo_db: Db) -> None:
    reply = mongo_db.command(
        "insert",
        "ids",
        documents=[{"_id": {"$a": 1}}, {"_id": {"a": [{"$x": 1}]}}, {"_id": Regex("a")}],
        ordered=False,
    )
    assert reply["writeErrors"] == [
        {
            "index": 0,
            "code": 52,
            "errmsg": "_id fields may not contain '$'-prefixed fields: $a is not valid for storage.",
        },
        {
            "index": 1,
            "code": 52,
            "errmsg": "_id fields may not contain '$'-prefixed fields: $x is not valid for storage.",
        },
        {"index": 2, "code": 53, "errmsg": "The '_id' value cannot be of type regex"},
    ]
    mongo_db.ids.insert_one({"_id": {"a.b": 1}})  # dots are fine in an _id
    assert mongo_db.ids.find_one() == {"_id": {"a.b": 1}}
    with pytest.raises(WriteError) as exc:
        mongo_db.ids.update_one({"k": 1}, {"$set": {"_id": {"$q": 5}}}, upsert=True)
    assert write_failure(exc)[0] == 52


def test_replacements(coll: Any) -> None:
    coll.replace_one({"_id": 1}, {"a.b": 2, "nested": {"$ok": 1}})
    assert coll.find_one({"_id": 1}) == {"_id": 1, "a.b": 2, "nested": {"$ok": 1}}
    with pytest.raises(WriteError) as exc:
        coll.replace_one({"_id": 1}, {"x": 1, "$price": 60})
    assert write_failure(exc) == (52, f"The dollar ($) prefixed field '$price' in '$price' {HINT}")


def test_update_operators(coll: Any) -> None:
    coll.update_one({"_id": 1}, {"$inc": {"pricing.$discount": 5}, "$set": {"x": {"$y": 1}}})
    doc = coll.find_one({"_id": 1})
    assert (doc["pricing"]["$discount"], doc["x"]) == (15, {"$y": 1})
    for change in ({"$inc": {"$price": 1}}, {"$set": {"$new": 1}}, {"$rename": {"x": "$x"}}):
        with pytest.raises(WriteError) as exc:
            coll.update_one({"_id": 1}, change)
        name = next(iter(next(iter(change.values())).items()))
        field = name[1] if "$rename" in change else name[0]
        assert write_failure(exc) == (
            52,
            f"The dollar ($) prefixed field '{field}' in '{field}' {HINT}",
        )
    # Setting the value it already has changes nothing and is allowed; $unset removes it.
    assert coll.update_one({"_id": 1}, {"$set": {"$price": 50}}).modified_count == 0
    assert coll.update_one({"_id": 1}, {"$unset": {"$price": ""}}).modified_count == 1
    assert "$price" not in coll.find_one({"_id": 1})


def test_an_upsert_inserts_dollar_fields(coll: Any) -> None:
    r = coll.update_one({"date": "d1"}, {"$set": {"phone": 25, "$hotel": 320}}, upsert=True)
    assert coll.find_one({"_id": r.upserted_id}, {"_id": 0}) == {
        "date": "d1",
        "phone": 25,
        "$hotel": 320,
    }
    with pytest.raises(WriteError) as exc:  # the same update on the document now found
        coll.update_one({"date": "d1"}, {"$set": {"phone": 25, "$hotel": 321}}, upsert=True)
    assert write_failure(exc)[0] == 52


def test_get_field_set_field_unset_field(coll: Any) -> None:
    price = {"$getField": {"$literal": "$price"}}
    assert list(coll.find({"$expr": {"$eq": [price, 50]}}, {"_id": 1})) == [{"_id": 1}]
    got = coll.aggregate(
        [
            {
                "$project": {
                    "price": price,
                    "ab": {"$getField": "a.b"},
                    "disc": {
                        "$getField": {"field": {"$literal": "$discount"}, "input": "$pricing"}
                    },
                    "xy": {"$getField": {"field": "x.y", "input": "$pricing"}},
                }
            }
        ]
    )
    assert list(got) == [{"_id": 1, "price": 50, "ab": 1, "disc": 10, "xy": 2}]
    with pytest.raises(OperationFailure) as info:  # "$discount" alone is a field path
        list(coll.aggregate([{"$project": {"d": {"$getField": "$discount"}}}]))
    assert info.value.code == 5654600
    set_price = {
        "$replaceWith": {
            "$setField": {"field": {"$literal": "$price"}, "input": "$$ROOT", "value": 60}
        }
    }
    unset_dotted = {"$replaceWith": {"$unsetField": {"field": "a.b", "input": "$$ROOT"}}}
    assert list(coll.aggregate([set_price, unset_dotted])) == [
        {"_id": 1, "$price": 60, "pricing": {"$discount": 10, "x.y": 2}}
    ]


def test_pipeline_updates_write_top_level_dollar_fields(coll: Any) -> None:
    set_term = {"$setField": {"field": {"$literal": "$term"}, "input": "$$ROOT", "value": "spring"}}
    r = coll.update_one({"_id": 1}, [{"$replaceWith": set_term}])
    assert r.modified_count == 1
    drop_dotted = {"$unsetField": {"field": "a.b", "input": "$$ROOT"}}
    coll.update_one({"_id": 1}, [{"$replaceWith": drop_dotted}])
    assert coll.find_one({"_id": 1}) == {
        "_id": 1,
        "$price": 50,
        "pricing": {"$discount": 10, "x.y": 2},
        "$term": "spring",
    }
