"""Views end to end through pymongo: create (create_collection, the create command), the
definitions in system.views and listCollections, reads through find, count, distinct and
aggregate with the view's pipeline in front, chained views, cycles and depth, collMod, drop, the
commands a view refuses with MongoDB 7's codes, and expired documents hidden through a view."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bson import Int64
from pymongo import DeleteMany, DeleteOne
from pymongo.database import Database
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

from tests.e2e.node_tools import run_mongosh

Doc = dict[str, Any]


def _seed(db: Database[Doc]) -> None:
    """`src`: ten documents, `g` = `_id % 3`, `v` = `_id * 10`; `other`: three; `v1`: the
    documents of `src` with `g` 1; `v2`: `v1` with only `v` and `g`."""
    db.src.insert_many([{"_id": i, "g": i % 3, "v": i * 10, "tags": [i, i + 1]} for i in range(10)])
    db.other.insert_many([{"_id": i, "g": i} for i in range(3)])
    db.create_collection("v1", viewOn="src", pipeline=[{"$match": {"g": 1}}])
    db.command("create", "v2", viewOn="v1", pipeline=[{"$project": {"v": 1, "g": 1}}])


def _code(exc: pytest.ExceptionInfo[OperationFailure]) -> tuple[int | None, str]:
    details = exc.value.details or {}
    return exc.value.code, str(details.get("errmsg"))


def test_a_view_reads_its_source_through_its_pipeline(mongo_db: Database[Doc]) -> None:
    _seed(mongo_db)
    assert [d["_id"] for d in mongo_db.v1.find()] == [1, 4, 7]
    assert list(mongo_db.v2.find()) == [
        {"_id": 1, "g": 1, "v": 10},
        {"_id": 4, "g": 1, "v": 40},
        {"_id": 7, "g": 1, "v": 70},
    ]
    # find's filter, sort, skip, limit and projection run after the view's pipeline.
    found = mongo_db.v2.find({"v": {"$gt": 10}}, {"_id": 0, "v": 1}).sort("v", -1).skip(1)
    assert list(found) == [{"v": 40}]
    assert list(mongo_db.v1.find({}, {"v": 1}).sort("_id", 1).limit(2)) == [
        {"_id": 1, "v": 10},
        {"_id": 4, "v": 40},
    ]
    assert mongo_db.v2.find_one({"_id": 4}) == {"_id": 4, "g": 1, "v": 40}
    assert mongo_db.v1.find_one({"_id": 5}) is None
    # count, countDocuments, estimatedDocumentCount and distinct read through the view.
    assert mongo_db.v1.count_documents({}) == 3
    assert mongo_db.v1.count_documents({"v": {"$gte": 40}}) == 2
    assert mongo_db.v1.count_documents({}, skip=1, limit=1) == 1
    assert mongo_db.v2.estimated_document_count() == 3
    assert mongo_db.command("count", "v1", query={"v": 70}) == {"n": 1, "ok": 1.0}
    assert mongo_db.v1.distinct("v") == [10, 40, 70]
    assert mongo_db.v1.distinct("tags", {"v": {"$gt": 10}}) == [4, 5, 7, 8]
    reply = mongo_db.command("distinct", "v2", key="g")
    assert reply == {"values": [1], "ok": 1} and isinstance(reply["ok"], int)
    # aggregate: the view's pipeline, then the command's.
    grouped = mongo_db.v1.aggregate([{"$group": {"_id": None, "total": {"$sum": "$v"}}}])
    assert list(grouped) == [{"_id": None, "total": 120}]
    # A view joined by $lookup and $unionWith is read through its pipeline too.
    joined = mongo_db.other.aggregate(
        [
            {"$lookup": {"from": "v1", "localField": "g", "foreignField": "g", "as": "m"}},
            {"$project": {"n": {"$size": "$m"}}},
            {"$sort": {"_id": 1}},
        ]
    )
    assert [d["n"] for d in joined] == [0, 3, 0]
    union = mongo_db.other.aggregate([{"$unionWith": "v1"}, {"$count": "n"}])
    assert list(union) == [{"n": 6}]


def test_a_view_cursor_is_the_views_and_goes_on_with_getmore(mongo_db: Database[Doc]) -> None:
    _seed(mongo_db)
    reply = mongo_db.command("find", "v1", filter={"_id": {"$gt": 0}}, batchSize=2)
    cursor = reply["cursor"]
    assert cursor["ns"] == f"{mongo_db.name}.v1"
    assert [d["_id"] for d in cursor["firstBatch"]] == [1, 4]
    more = mongo_db.command("getMore", cursor["id"], collection="v1")
    assert more["cursor"]["ns"] == f"{mongo_db.name}.v1"
    assert [d["_id"] for d in more["cursor"]["nextBatch"]] == [7]
    assert more["cursor"]["id"] == 0
    assert [d["_id"] for d in mongo_db.v1.find(batch_size=1)] == [1, 4, 7]


def test_a_view_is_stored_and_listed_as_mongodb_shows_it(mongo_db: Database[Doc]) -> None:
    _seed(mongo_db)
    mongo_db.create_collection("later", viewOn="nosuch")  # no pipeline: an empty one
    listed = {c["name"]: c for c in mongo_db.list_collections()}
    assert sorted(listed) == ["later", "other", "src", "system.views", "v1", "v2"]
    assert listed["v1"] == {
        "name": "v1",
        "type": "view",
        "options": {"viewOn": "src", "pipeline": [{"$match": {"g": 1}}]},
        "info": {"readOnly": True},
    }
    assert listed["later"]["options"] == {"viewOn": "nosuch", "pipeline": []}
    assert listed["system.views"]["type"] == "collection"
    assert listed["system.views"]["info"]["readOnly"] is False
    assert mongo_db.list_collection_names(filter={"type": "view"}) == ["later", "v1", "v2"]
    names = mongo_db.command("listCollections", nameOnly=True, filter={"name": "v2"})
    assert names["cursor"]["firstBatch"] == [{"name": "v2", "type": "view"}]
    # The definitions are system.views' documents, as in MongoDB.
    ns = mongo_db.name
    assert list(mongo_db["system.views"].find({}, sort=[("_id", 1)])) == [
        {"_id": f"{ns}.later", "viewOn": "nosuch", "pipeline": []},
        {"_id": f"{ns}.v1", "viewOn": "src", "pipeline": [{"$match": {"g": 1}}]},
        {"_id": f"{ns}.v2", "viewOn": "v1", "pipeline": [{"$project": {"v": 1, "g": 1}}]},
    ]
    # A view over a collection that does not exist yet reads nothing, then what it holds.
    assert list(mongo_db.later.find()) == []
    mongo_db.nosuch.insert_one({"_id": 1})
    assert list(mongo_db.later.find()) == [{"_id": 1}]
    stats = mongo_db.command("dbStats")
    assert (stats["views"], stats["collections"]) == (Int64(3), Int64(4))


def test_names_are_shared_by_collections_and_views(mongo_db: Database[Doc]) -> None:
    _seed(mongo_db)
    ns = mongo_db.name
    for name in ("src", "v1"):
        with pytest.raises(OperationFailure) as exc:
            mongo_db.command("create", name, viewOn="other")
        assert _code(exc) == (48, f"Collection {ns}.{name} already exists.")
    with pytest.raises(OperationFailure) as exc:
        mongo_db.command("create", "v1")
    assert _code(exc) == (48, f"Collection {ns}.v1 already exists.")


def test_writes_and_collection_commands_are_refused_on_a_view(mongo_db: Database[Doc]) -> None:
    _seed(mongo_db)
    refused = f"Namespace {mongo_db.name}.v1 is a view, not a collection"
    with pytest.raises(WriteError) as werr:
        mongo_db.v1.insert_one({"_id": 100})
    assert (werr.value.code, werr.value.details["errmsg"]) == (166, refused)
    for ordered, reported in ((True, 1), (False, 2)):
        reply = mongo_db.command(
            "insert", "v1", documents=[{"_id": 100}, {"_id": 101}], ordered=ordered
        )
        assert reply == {
            "n": 0,
            "writeErrors": [{"index": i, "code": 166, "errmsg": refused} for i in range(reported)],
            "ok": 1.0,
        }
    reply = mongo_db.command("update", "v1", updates=[{"q": {}, "u": {"$set": {"a": 1}}}])
    assert reply == {
        "n": 0,
        "nModified": 0,
        "writeErrors": [{"index": 0, "code": 166, "errmsg": refused}],
        "ok": 1.0,
    }
    with pytest.raises(WriteError) as werr:
        mongo_db.v1.delete_many({})
    assert werr.value.code == 166
    with pytest.raises(BulkWriteError) as bulk:
        mongo_db.v1.bulk_write([DeleteOne({}), DeleteMany({})], ordered=False)
    assert [e["code"] for e in bulk.value.details["writeErrors"]] == [166, 166]
    with pytest.raises(WriteError) as werr:
        mongo_db.v1.update_one({"_id": 1}, {"$set": {"a": 1}})
    assert werr.value.code == 166
    for call in (
        lambda: mongo_db.v1.find_one_and_update({}, {"$set": {"a": 1}}),
        lambda: mongo_db.v1.find_one_and_delete({}),
        lambda: mongo_db.v1.create_index("v"),
        lambda: mongo_db.v1.index_information(),
        lambda: mongo_db.v1.drop_index("v_1"),
        lambda: mongo_db.command("collStats", "v1"),
    ):
        with pytest.raises(OperationFailure) as exc:
            call()
        assert _code(exc) == (166, refused)
    with pytest.raises(OperationFailure) as exc:
        mongo_db.command("validate", "v1")
    assert _code(exc) == (166, "Cannot validate a view")
    admin = mongo_db.client.admin
    ns = mongo_db.name
    with pytest.raises(OperationFailure) as exc:
        admin.command("renameCollection", f"{ns}.v1", to=f"{ns}.v9")
    assert _code(exc) == (166, f"cannot rename view: {ns}.v1")
    with pytest.raises(OperationFailure) as exc:
        admin.command("renameCollection", f"{ns}.other", to=f"{ns}.v1", dropTarget=True)
    assert _code(exc) == (48, f"a view already exists with that name: {ns}.v1")
    # Nothing was written anywhere.
    assert mongo_db.list_collection_names(filter={"name": {"$in": ["v1", "v9"]}}) == ["v1"]
    assert [d["_id"] for d in mongo_db.v1.find()] == [1, 4, 7]
    assert mongo_db.src.count_documents({}) == 10
    assert mongo_db.other.count_documents({}) == 3


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"min": {"_id": 1}}, "Option min not supported in aggregation."),
        ({"max": {"_id": 1}}, "Option max not supported in aggregation."),
        ({"returnKey": True}, "Option returnKey not supported in aggregation."),
        ({"showRecordId": True}, "Option showRecordId not supported in aggregation."),
        ({"tailable": True}, "Tailable cursors are not supported in aggregation."),
        ({"noCursorTimeout": True}, "Option noCursorTimeout not supported in aggregation."),
        (
            {"allowPartialResults": True},
            "Option allowPartialResults not supported in aggregation.",
        ),
        ({"sort": {"$natural": -1}}, "Sort option $natural not supported in aggregation."),
        ({"singleBatch": True, "limit": 2}, "Option singleBatch not supported in aggregation."),
    ],
)
def test_find_options_an_aggregation_cannot_express_are_refused_on_a_view(
    mongo_db: Database[Doc], options: Doc, message: str
) -> None:
    _seed(mongo_db)
    with pytest.raises(OperationFailure) as exc:
        mongo_db.command("find", "v1", **options)
    assert _code(exc) == (168, message)
    assert exc.value.details["codeName"] == "InvalidPipelineOperator"


def test_a_views_collation(mongo_db: Database[Doc]) -> None:
    _seed(mongo_db)
    # The simple collation is the default one: accepted and not stored.
    mongo_db.command("create", "simple", viewOn="src", pipeline=[], collation={"locale": "simple"})
    listed = mongo_db.command("listCollections", filter={"name": "simple"})
    assert listed["cursor"]["firstBatch"][0]["options"] == {"viewOn": "src", "pipeline": []}
    assert mongo_db.simple.count_documents({}, collation={"locale": "simple"}) == 10
    # Another collation on a read of a view is refused, as MongoDB refuses overriding the view's.
    with pytest.raises(OperationFailure) as exc:
        mongo_db.command("find", "v1", collation={"locale": "fr"})
    assert _code(exc) == (167, "Cannot override a view's default collation")
    # A view with a collation: its reads compare strings by it, unless they name the same one.
    mongo_db.names.insert_many(
        [
            {"_id": 1, "n": "apple"},
            {"_id": 2, "n": "Apple"},
            {"_id": 3, "n": "Banana"},
            {"_id": 4, "n": "item10"},
            {"_id": 5, "n": "item9"},
        ]
    )
    ci = {"locale": "en", "strength": 2, "numericOrdering": True}
    mongo_db.command("create", "ci", viewOn="names", pipeline=[], collation=ci)
    (entry,) = mongo_db.command("listCollections", filter={"name": "ci"})["cursor"]["firstBatch"]
    stored = entry["options"]["collation"]
    assert (stored["locale"], stored["strength"], stored["numericOrdering"]) == ("en", 2, True)
    assert stored["version"] == "57.1"
    view = mongo_db.ci
    assert [d["_id"] for d in view.find({"n": "APPLE"}).sort("_id", 1)] == [1, 2]
    assert view.count_documents({"n": "apple"}) == 2
    assert sorted(view.distinct("n"), key=str.lower) == ["apple", "Banana", "item10", "item9"]
    assert [d["n"] for d in view.find({"n": {"$gte": "item"}}).sort("n", 1)] == ["item9", "item10"]
    assert [d["_id"] for d in view.aggregate([{"$match": {"n": "banana"}}])] == [3]
    assert view.count_documents({"n": "apple"}, collation=ci) == 2  # the view's own: accepted
    with pytest.raises(OperationFailure) as exc:
        view.find_one({}, collation={"locale": "en"})
    assert _code(exc) == (167, "Cannot override a view's default collation")
    # The collection itself still compares by code point.
    assert mongo_db.names.count_documents({"n": "apple"}) == 1
    # A view on a view must keep the collation of the view under it.
    with pytest.raises(OperationFailure) as exc:
        mongo_db.command("create", "plain_on_ci", viewOn="ci", pipeline=[])
    assert exc.value.code == 167
    mongo_db.command("create", "ci_on_ci", viewOn="ci", pipeline=[], collation=ci)
    assert mongo_db.ci_on_ci.count_documents({"n": "APPLE"}) == 2
    with pytest.raises(OperationFailure) as exc:
        mongo_db.command("create", "bad", viewOn="names", collation={"locale": "xx_nowhere"})
    assert exc.value.code == 2
    assert "bad" not in mongo_db.list_collection_names()


def test_a_views_definition_is_checked(mongo_db: Database[Doc]) -> None:
    _seed(mongo_db)
    ns = mongo_db.name
    for args, code, message in [
        ({"pipeline": []}, 72, "'pipeline' requires 'viewOn' to also be specified"),
        (
            {"viewOn": "src", "pipeline": [{"$nope": 1}]},
            40324,
            "Unrecognized pipeline stage name: '$nope'",
        ),
        (
            {"viewOn": "src", "pipeline": [{"$match": {"g": 1}}, {"$merge": {"into": "x"}}]},
            167,
            f"Invalid pipeline for view {ns}.bad :: caused by :: The aggregation stage $merge "
            f"in location 1 of the pipeline cannot be used in the view definition of {ns}.bad "
            "because it writes to disk",
        ),
        (
            {"viewOn": "src", "pipeline": [{"$out": "x"}]},
            167,
            f"Invalid pipeline for view {ns}.bad :: caused by :: The aggregation stage $out "
            f"in location 0 of the pipeline cannot be used in the view definition of {ns}.bad "
            "because it writes to disk",
        ),
        (
            {"viewOn": "src", "pipeline": [{"$changeStream": {}}]},
            167,
            f"Invalid pipeline for view {ns}.bad :: caused by :: $changeStream cannot be used "
            "in a view definition",
        ),
        (
            {"viewOn": "src", "pipeline": {"$match": {}}},
            14,
            "BSON field 'create.pipeline' is the wrong type 'object', expected type 'array'",
        ),
        (
            {"viewOn": 5, "pipeline": []},
            14,
            "BSON field 'create.viewOn' is the wrong type 'int', expected type 'string'",
        ),
        ({"viewOn": "", "pipeline": []}, 2, "'viewOn' cannot be empty"),
        ({"viewOn": "bad"}, 5, f"View cycle detected: {ns}.bad => {ns}.bad => {ns}.bad"),
    ]:
        with pytest.raises(OperationFailure) as exc:
            mongo_db.command("create", "bad", **args)
        assert _code(exc) == (code, message), args
    assert "bad" not in mongo_db.list_collection_names()


def test_coll_mod_redefines_a_view_and_only_a_view(mongo_db: Database[Doc]) -> None:
    _seed(mongo_db)
    ns = mongo_db.name
    # Each of viewOn and pipeline replaces its own half.
    assert mongo_db.command("collMod", "v1", pipeline=[{"$match": {"g": 2}}]) == {"ok": 1.0}
    assert [d["_id"] for d in mongo_db.v1.find()] == [2, 5, 8]
    assert [d["_id"] for d in mongo_db.v2.find()] == [2, 5, 8]  # v2 reads v1
    mongo_db.command("collMod", "v1", viewOn="other")
    assert [d["_id"] for d in mongo_db.v1.find()] == [2]
    mongo_db.command("collMod", "v1", viewOn="src", pipeline=[{"$match": {"g": 0}}])
    assert [d["_id"] for d in mongo_db.v1.find()] == [0, 3, 6, 9]
    listed = mongo_db.command("listCollections", filter={"name": "v1"})["cursor"]["firstBatch"]
    assert listed[0]["options"] == {"viewOn": "src", "pipeline": [{"$match": {"g": 0}}]}
    for name, args, code, message in [
        (
            "src",
            {"viewOn": "other", "pipeline": []},
            72,
            "option only supported on a view: pipeline",
        ),
        ("src", {"viewOn": "other"}, 72, "option only supported on a view: viewOn"),
        (
            "v1",
            {"index": {"name": "x", "hidden": True}},
            72,
            "option not supported on a view: index",
        ),
        (
            "v1",
            {"viewOn": "v2", "pipeline": []},
            5,
            f"View cycle detected: {ns}.v1 => {ns}.v1 => {ns}.v2 => {ns}.v1",
        ),
        (
            "v1",
            {"pipeline": [{"$out": "x"}]},
            167,
            f"Invalid pipeline for view {ns}.v1 :: caused by :: The aggregation stage $out in "
            f"location 0 of the pipeline cannot be used in the view definition of {ns}.v1 "
            "because it writes to disk",
        ),
        (
            "v1",
            {"pipeline": {"a": 1}},
            14,
            "BSON field 'collMod.pipeline' is the wrong type 'object', expected type 'array'",
        ),
        ("v1", {"viewOn": ""}, 2, "'viewOn' cannot be empty"),
        ("nosuch", {"viewOn": "src"}, 26, f"ns does not exist: {ns}.nosuch"),
    ]:
        with pytest.raises(OperationFailure) as exc:
            mongo_db.command("collMod", name, **args)
        assert _code(exc) == (code, message), (name, args)
    assert [d["_id"] for d in mongo_db.v1.find()] == [0, 3, 6, 9]


def test_drop_of_a_view(mongo_db: Database[Doc]) -> None:
    _seed(mongo_db)
    ns = mongo_db.name
    assert mongo_db.command("drop", "v2") == {"ns": f"{ns}.v2", "ok": 1.0}
    assert mongo_db.command("drop", "v2") == {"ok": 1.0}
    mongo_db.drop_collection("v1")
    assert mongo_db.list_collection_names(filter={"type": "view"}) == []
    # system.views stays, empty, as in MongoDB; the source is untouched.
    assert mongo_db["system.views"].count_documents({}) == 0
    assert mongo_db.src.count_documents({}) == 10
    # The name is free again, for a collection or a view.
    mongo_db.create_collection("v1")
    mongo_db.create_collection("v2", viewOn="v1")
    assert mongo_db.list_collection_names(filter={"type": "view"}) == ["v2"]


def test_chained_views_have_mongodbs_depth_limit(mongo_db: Database[Doc]) -> None:
    mongo_db.base.insert_many([{"_id": i} for i in range(5)])
    previous = "base"
    for i in range(1, 21):
        mongo_db.command(
            "create", f"c{i}", viewOn=previous, pipeline=[{"$match": {"_id": {"$ne": i % 5}}}]
        )
        previous = f"c{i}"
    with pytest.raises(OperationFailure) as exc:
        mongo_db.command("create", "c21", viewOn="c20")
    assert _code(exc) == (165, "View depth limit exceeded; maximum depth is 20")
    # Nineteen views resolve; a chain of twenty is as deep as MongoDB's resolution goes.
    assert list(mongo_db.c19.find()) == []
    assert list(mongo_db.c4.find()) == [{"_id": 0}]
    with pytest.raises(OperationFailure) as exc:
        list(mongo_db.c20.find())
    assert _code(exc) == (
        165,
        "View depth too deep or view cycle detected; maximum depth is 20",
    )
    # A view in the middle of a chain cannot make it longer than 20 either.
    mongo_db.command("create", "c0", viewOn="base")
    with pytest.raises(OperationFailure) as exc:
        mongo_db.command("collMod", "c1", viewOn="c0")
    assert _code(exc) == (165, "View depth limit exceeded; maximum depth is 20")


def test_expired_documents_stay_hidden_through_a_view(
    mongo_db: Database[Doc], ebbdb_clock: Any
) -> None:
    now = ebbdb_clock.now()
    mongo_db.sessions.create_index("at", expireAfterSeconds=60)
    mongo_db.sessions.insert_many(
        [
            {"_id": 1, "at": now, "user": "a"},
            {"_id": 2, "at": now, "user": "b"},
            {"_id": 3, "user": "c"},
        ]
    )
    mongo_db.create_collection("users", viewOn="sessions", pipeline=[{"$project": {"user": 1}}])
    assert mongo_db.users.count_documents({}) == 3
    ebbdb_clock.advance(61)
    # Expired but not yet deleted: hidden through the view as from the collection.
    assert [d["user"] for d in mongo_db.users.find()] == ["c"]
    assert mongo_db.users.count_documents({}) == 1
    assert mongo_db.users.distinct("user") == ["c"]
    assert list(mongo_db.users.aggregate([{"$count": "n"}])) == [{"n": 1}]
    ebbdb_clock.run_ttl_pass()
    assert mongo_db.sessions.count_documents({}) == 1
    assert [d["user"] for d in mongo_db.users.find()] == ["c"]


VIEW_SCRIPT = """
const shop = db.getSiblingDB('viewshop');
shop.orders.insertMany([{ _id: 1, qty: 5 }, { _id: 2, qty: 0 }, { _id: 3, qty: 9 }]);
const out = {};
out.created = shop.createView('big', 'orders', [{ $match: { qty: { $gt: 1 } } }]);
out.found = shop.big.find({}, { qty: 1 }).sort({ qty: -1 }).toArray();
out.count = shop.big.countDocuments();
out.infos = shop.getCollectionInfos({ type: 'view' });
try {
  shop.big.insertOne({ _id: 4 });
} catch (e) {
  out.insert = { code: e.code, message: e.message };
}
out.dropped = shop.big.drop();
out.names = shop.getCollectionNames();
shop.dropDatabase();
print(EJSON.stringify(out, { relaxed: true }));
"""


def test_mongosh_create_view(uri: str, tmp_path: Path) -> None:
    out = json.loads(run_mongosh(uri, VIEW_SCRIPT, tmp_path)[-1])
    assert out == {
        "created": {"ok": 1},
        "found": [{"_id": 3, "qty": 9}, {"_id": 1, "qty": 5}],
        "count": 2,
        "infos": [
            {
                "name": "big",
                "type": "view",
                "options": {"viewOn": "orders", "pipeline": [{"$match": {"qty": {"$gt": 1}}}]},
                "info": {"readOnly": True},
            }
        ],
        "insert": {"code": 166, "message": "Namespace viewshop.big is a view, not a collection"},
        "dropped": True,
        "names": ["orders", "system.views"],
    }
