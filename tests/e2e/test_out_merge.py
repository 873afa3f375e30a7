"""$out and $merge through pymongo: exact target contents, the atomic replacement of $out (a reader
never sees a partial target; indexes and options kept), every whenMatched / whenNotMatched mode of
$merge, `on` with and without its unique index, MongoDB 7.0's errors with their codes, other
databases, the empty cursor they answer, and expired target documents treated as absent (the
test clock)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from bson import ObjectId
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import OperationFailure

from ebbdb.server.pytest_plugin import TtlClock

Db = Database[dict[str, Any]]
Client = MongoClient[dict[str, Any]]


def _sorted(db: Db, name: str) -> list[dict[str, Any]]:
    return list(db[name].find().sort("_id", 1))


def _fails(db: Db, pipeline: list[dict[str, Any]], code: int, coll: str = "src") -> str:
    with pytest.raises(OperationFailure) as info:
        db[coll].aggregate(pipeline)
    assert info.value.code == code, info.value.details
    return str(info.value.details["errmsg"])


@pytest.fixture
def src(mongo_db: Db) -> Db:
    mongo_db.src.insert_many([{"_id": 1, "a": 1, "b": "x"}, {"_id": 2, "a": 2, "b": "y"}])
    return mongo_db


# -- $out --------------------------------------------------------------------------------------------


def test_out_writes_results_and_answers_an_empty_cursor(src: Db) -> None:
    reply = src.command(
        "aggregate",
        "src",
        pipeline=[{"$set": {"c": {"$add": ["$a", 10]}}}, {"$out": "t"}],
        cursor={},
    )
    assert reply["cursor"] == {"firstBatch": [], "id": 0, "ns": f"{src.name}.src"}
    assert _sorted(src, "t") == [
        {"_id": 1, "a": 1, "b": "x", "c": 11},
        {"_id": 2, "a": 2, "b": "y", "c": 12},
    ]
    assert list(src.src.aggregate([{"$match": {"a": 1}}, {"$out": "t"}])) == []
    assert _sorted(src, "t") == [{"_id": 1, "a": 1, "b": "x"}]


def test_out_replaces_contents_keeping_indexes_and_options(src: Db) -> None:
    src.create_collection("t", validator={"a": {"$type": "number"}})
    src.t.create_index("a", unique=True, name="a_u")
    src.t.insert_many([{"_id": 9, "a": 9}, {"_id": 8, "a": 8}])
    src.src.aggregate([{"$out": "t"}])
    assert _sorted(src, "t") == [{"_id": 1, "a": 1, "b": "x"}, {"_id": 2, "a": 2, "b": "y"}]
    indexes = {ix["name"]: ix for ix in src.t.list_indexes()}
    assert set(indexes) == {"_id_", "a_u"} and indexes["a_u"]["unique"] is True
    options = src.t.options()
    assert options["validator"] == {"a": {"$type": "number"}}
    # The unique index is enforced on the new contents: a duplicate leaves the target as it was.
    src.dup.insert_many([{"_id": 1, "a": 5}, {"_id": 2, "a": 5}])
    msg = _fails(src, [{"$out": "t"}], 11000, coll="dup")
    assert "index: a_u dup key: { a: 5 }" in msg
    assert _sorted(src, "t") == [{"_id": 1, "a": 1, "b": "x"}, {"_id": 2, "a": 2, "b": "y"}]
    # So is the validator (unless bypassed).
    src.bad.insert_one({"_id": 1, "a": "text"})
    _fails(src, [{"$out": "t"}], 121, coll="bad")
    assert src.t.count_documents({}) == 2
    src.bad.aggregate([{"$out": "t"}], bypassDocumentValidation=True)
    assert _sorted(src, "t") == [{"_id": 1, "a": "text"}]


def test_out_with_no_results_empties_or_creates_the_target(src: Db) -> None:
    src.t.insert_one({"_id": 5})
    src.src.aggregate([{"$match": {"a": 99}}, {"$out": "t"}])
    assert _sorted(src, "t") == []
    src.src.aggregate([{"$match": {"a": 99}}, {"$out": "fresh"}])
    assert "fresh" in src.list_collection_names()


def test_out_to_another_database_and_to_itself(src: Db, mongo_client: Client) -> None:
    other = mongo_client[f"{src.name}_other"]
    try:
        src.src.aggregate([{"$project": {"a": 1}}, {"$out": {"db": other.name, "coll": "t"}}])
        assert _sorted(other, "t") == [{"_id": 1, "a": 1}, {"_id": 2, "a": 2}]
    finally:
        mongo_client.drop_database(other.name)
    src.src.aggregate([{"$set": {"a": {"$multiply": ["$a", 3]}}}, {"$out": "src"}])
    assert _sorted(src, "src") == [{"_id": 1, "a": 3, "b": "x"}, {"_id": 2, "a": 6, "b": "y"}]


def test_out_generates_missing_ids(src: Db) -> None:
    src.src.aggregate([{"$project": {"_id": 0, "a": 1}}, {"$out": "t"}])
    docs = list(src.t.find().sort("a", 1))
    assert [d["a"] for d in docs] == [1, 2]
    assert all(isinstance(d["_id"], ObjectId) for d in docs)


def test_out_is_atomic_for_readers(mongo_db: Db) -> None:
    """Another thread runs $out over and over, alternating 100 and 250 documents: every count a
    reader takes meanwhile is one of the two, never a partial target. (Each read here is one
    storage read; a read that spans several chunks is not a snapshot in ebbdb, see README.)"""
    mongo_db.small.insert_many([{"_id": i} for i in range(100)])
    mongo_db.big.insert_many([{"_id": i} for i in range(250)])
    mongo_db.small.aggregate([{"$out": "t"}])
    done = threading.Event()
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(16):
                mongo_db["big" if i % 2 == 0 else "small"].aggregate([{"$out": "t"}])
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
        finally:
            done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    counts = set()
    while not done.is_set():
        counts.add(len(list(mongo_db.t.find({}, {"_id": 1}, batch_size=1000))))
        counts.add(mongo_db.t.count_documents({}))
        counts.add(mongo_db.t.estimated_document_count())
    thread.join()
    assert not errors
    assert counts <= {100, 250}
    assert mongo_db.t.count_documents({}) == 100


def test_out_refusals(src: Db) -> None:
    assert _fails(src, [{"$out": "t"}, {"$match": {}}], 40601) == (
        "$out can only be the final stage in the pipeline"
    )
    assert _fails(src, [{"$facet": {"f": [{"$out": "t"}]}}], 40600) == (
        "$out is not allowed to be used within a $facet stage"
    )
    lookup = {"$lookup": {"from": "x", "pipeline": [{"$out": "t"}], "as": "j"}}
    assert _fails(src, [lookup], 51047) == "$out is not allowed within a $lookup's sub-pipeline"
    union = {"$unionWith": {"coll": "x", "pipeline": [{"$out": "t"}]}}
    assert _fails(src, [union], 31441) == "$out is not allowed within a $unionWith's sub-pipeline"
    assert _fails(src, [{"$out": 5}], 16990) == (
        "$out only supports a string or object argument, but found int"
    )
    assert _fails(src, [{"$out": {"db": src.name}}], 40414) == (
        "BSON field '$out.coll' is missing but a required field"
    )
    assert _fails(src, [{"$out": {"db": src.name, "coll": "t", "x": 1}}], 40415) == (
        "BSON field '$out.x' is an unknown field."
    )
    assert _fails(src, [{"$out": {"db": 1, "coll": "t"}}], 14) == (
        "BSON field '$out.db' is the wrong type 'int', expected type 'string'"
    )
    assert (
        _fails(src, [{"$out": "system.x"}], 17385) == "Can't $out to special collection: system.x"
    )
    assert _fails(src, [{"$out": {"db": "admin", "coll": "t"}}], 31321) == (
        "Can't $out to internal database: admin"
    )
    assert _fails(src, [{"$out": ""}], 73) == f"Invalid $out target namespace, {src.name}."
    src.create_collection("capped", capped=True, size=4096)
    assert _fails(src, [{"$out": "capped"}], 17152) == (
        f"namespace '{src.name}.capped' is capped so it can't be used for $out"
    )
    src.create_collection("view", viewOn="src", pipeline=[])
    assert _fails(src, [{"$out": "view"}], 166) == (
        f"Namespace {src.name}.view is a view, not a collection"
    )
    src.create_collection("ts", timeseries={"timeField": "t"})
    assert _fails(src, [{"$out": "ts"}], 166) == (
        f"Namespace {src.name}.ts is a view, not a collection"
    )
    assert _fails(src, [{"$out": {"db": src.name, "coll": "t", "timeseries": {}}}], 238)
    assert "t" not in src.list_collection_names()


def test_out_cursor_options_and_write_concern(src: Db) -> None:
    """batchSize 0: an open cursor, and the write at its first getMore, as MongoDB; the write
    concern of a write is accepted (and refused on a pipeline that does not write)."""
    reply = src.command("aggregate", "src", pipeline=[{"$out": "t"}], cursor={"batchSize": 0})
    assert reply["cursor"]["firstBatch"] == [] and reply["cursor"]["id"] != 0
    assert "t" not in src.list_collection_names()
    more = src.command("getMore", reply["cursor"]["id"], collection="src")
    assert more["cursor"]["nextBatch"] == [] and more["cursor"]["id"] == 0
    assert src.t.count_documents({}) == 2
    reply = src.command(
        "aggregate",
        "src",
        pipeline=[{"$match": {"a": 1}}, {"$out": "t"}],
        cursor={"batchSize": 5},
        writeConcern={"w": 1, "j": True},
    )
    assert reply["cursor"] == {"firstBatch": [], "id": 0, "ns": f"{src.name}.src"}
    assert src.t.count_documents({}) == 1
    with pytest.raises(OperationFailure) as info:
        src.command("aggregate", "src", pipeline=[], cursor={}, writeConcern={"w": 1})
    assert info.value.code == 72


def test_out_from_a_view_and_from_documents(src: Db) -> None:
    src.create_collection("v", viewOn="src", pipeline=[{"$match": {"a": 2}}])
    src.v.aggregate([{"$out": "t"}])
    assert _sorted(src, "t") == [{"_id": 2, "a": 2, "b": "y"}]
    src.aggregate([{"$documents": [{"_id": 7}, {"_id": 8}]}, {"$out": "t"}])
    assert _sorted(src, "t") == [{"_id": 7}, {"_id": 8}]


# -- $merge ------------------------------------------------------------------------------------------


@pytest.fixture
def tgt(src: Db) -> Db:
    """src: {_id 1, a 1, b x}, {_id 2, a 2, b y}; t: {_id 1, a 100, z 1}, {_id 3, a 3}."""
    src.t.insert_many([{"_id": 1, "a": 100, "z": 1}, {"_id": 3, "a": 3}])
    return src


def _merge(db: Db, **spec: Any) -> list[dict[str, Any]]:
    out = list(db.src.aggregate([{"$merge": {"into": "t", **spec}}]))
    assert out == []
    return _sorted(db, "t")


def test_merge_default_is_merge_and_insert(tgt: Db) -> None:
    reply = tgt.command("aggregate", "src", pipeline=[{"$merge": "t"}], cursor={})
    assert reply["cursor"] == {"firstBatch": [], "id": 0, "ns": f"{tgt.name}.src"}
    assert _sorted(tgt, "t") == [
        {"_id": 1, "a": 1, "z": 1, "b": "x"},
        {"_id": 2, "a": 2, "b": "y"},
        {"_id": 3, "a": 3},
    ]


def test_merge_replace_insert(tgt: Db) -> None:
    assert _merge(tgt, whenMatched="replace", whenNotMatched="insert") == [
        {"_id": 1, "a": 1, "b": "x"},
        {"_id": 2, "a": 2, "b": "y"},
        {"_id": 3, "a": 3},
    ]


def test_merge_keep_existing(tgt: Db) -> None:
    assert _merge(tgt, whenMatched="keepExisting") == [
        {"_id": 1, "a": 100, "z": 1},
        {"_id": 2, "a": 2, "b": "y"},
        {"_id": 3, "a": 3},
    ]


def test_merge_discard(tgt: Db) -> None:
    assert _merge(tgt, whenMatched="replace", whenNotMatched="discard") == [
        {"_id": 1, "a": 1, "b": "x"},
        {"_id": 3, "a": 3},
    ]
    tgt.t.delete_many({})
    tgt.t.insert_one({"_id": 2, "q": 1})
    assert _merge(tgt, whenMatched="merge", whenNotMatched="discard") == [
        {"_id": 2, "q": 1, "a": 2, "b": "y"}
    ]


def test_merge_when_matched_fail(tgt: Db) -> None:
    msg = _fails(tgt, [{"$merge": {"into": "t", "whenMatched": "fail"}}], 11000)
    assert msg == (
        "$merge with whenMatched: fail found an existing document with the same values for the"
        f" 'on' fields :: caused by :: E11000 duplicate key error collection: {tgt.name}.t index:"
        " _id_ dup key: { _id: 1 }"
    )
    tgt.t.delete_one({"_id": 1})
    assert _merge(tgt, whenMatched="fail") == [
        {"_id": 1, "a": 1, "b": "x"},
        {"_id": 2, "a": 2, "b": "y"},
        {"_id": 3, "a": 3},
    ]


def test_merge_when_not_matched_fail(tgt: Db) -> None:
    msg = _fails(tgt, [{"$merge": {"into": "t", "whenNotMatched": "fail"}}], 13113)
    assert msg == (
        "$merge could not find a matching document in the target collection for at least one"
        " document in the source collection"
    )
    with pytest.raises(OperationFailure) as info:
        tgt.src.aggregate([{"$merge": {"into": "t", "whenNotMatched": "fail"}}])
    assert info.value.details["codeName"] == "MergeStageNoMatchingDocument"
    tgt.t.insert_one({"_id": 2})
    assert _merge(tgt, whenMatched="replace", whenNotMatched="fail") == [
        {"_id": 1, "a": 1, "b": "x"},
        {"_id": 2, "a": 2, "b": "y"},
        {"_id": 3, "a": 3},
    ]


def test_merge_pipeline_with_new_and_let(tgt: Db) -> None:
    assert _merge(
        tgt,
        whenMatched=[{"$set": {"a": {"$add": ["$a", "$$new.a"]}, "seen": "$$tag"}}],
        let={"tag": {"$concat": ["$b", "!"]}},
    ) == [
        {"_id": 1, "a": 101, "z": 1, "seen": "x!"},
        {"_id": 2, "a": 2, "b": "y"},
        {"_id": 3, "a": 3},
    ]
    assert _merge(
        tgt, whenMatched=[{"$replaceWith": {"n": "$$new.b"}}], whenNotMatched="discard"
    ) == [
        {"_id": 1, "n": "x"},
        {"_id": 2, "n": "y"},
        {"_id": 3, "a": 3},
    ]


def test_merge_on_other_fields_needs_a_unique_index(tgt: Db) -> None:
    tgt.src.drop()
    tgt.src.insert_many([{"k": "a", "v": 1}, {"k": "c", "v": 3}])
    tgt.t.delete_many({})
    tgt.t.insert_one({"_id": 10, "k": "a", "v": 0, "w": 1})
    msg = _fails(tgt, [{"$project": {"_id": 0}}, {"$merge": {"into": "t", "on": "k"}}], 51183)
    assert msg == "Cannot find index to verify that join fields will be unique"
    tgt.t.create_index("k")  # not unique: still refused
    _fails(tgt, [{"$merge": {"into": "t", "on": "k"}}], 51183)
    tgt.t.create_index([("k", 1), ("v", 1)], unique=True)  # unique, other fields
    _fails(tgt, [{"$merge": {"into": "t", "on": "k"}}], 51183)
    tgt.t.drop_index("k_1")
    tgt.t.create_index("k", unique=True, name="k_u")
    tgt.src.aggregate([{"$project": {"_id": 0}}, {"$merge": {"into": "t", "on": "k"}}])
    docs = list(tgt.t.find().sort("k", 1))
    assert docs[0] == {"_id": 10, "k": "a", "v": 1, "w": 1}
    assert docs[1]["k"] == "c" and docs[1]["v"] == 3 and isinstance(docs[1]["_id"], ObjectId)
    # The source `_id` differs from the matched document's: MongoDB's ImmutableField.
    msg = _fails(tgt, [{"$merge": {"into": "t", "on": "k", "whenMatched": "replace"}}], 66)
    assert msg.startswith(
        "$merge failed to update the matching document, did you attempt to modify the _id or the"
        " shard key? :: caused by :: "
    )
    # A missing target takes only `_id`.
    _fails(tgt, [{"$merge": {"into": "nowhere", "on": "k"}}], 51183)
    tgt.src.aggregate([{"$merge": {"into": "nowhere", "on": ["_id"]}}])
    assert tgt.nowhere.count_documents({}) == 2


def test_merge_on_values_must_be_present(tgt: Db) -> None:
    tgt.t.create_index("a", unique=True)
    tgt.src.insert_one({"_id": 4, "b": "no a"})
    only_4 = {"$match": {"_id": 4}}
    msg = _fails(tgt, [only_4, {"$merge": {"into": "t", "on": "a"}}], 51132)
    assert (
        msg == "$merge write error: 'on' field 'a' cannot be missing, null, undefined or an array"
    )
    tgt.src.update_one({"_id": 4}, {"$set": {"a": [1, 2]}})
    assert _fails(tgt, [only_4, {"$merge": {"into": "t", "on": "a"}}], 51185) == (
        "$merge write error: 'on' field 'a' is an array"
    )


def test_merge_other_database_and_duplicate_key_context(tgt: Db, mongo_client: Client) -> None:
    other = mongo_client[f"{tgt.name}_m"]
    try:
        tgt.src.aggregate([{"$merge": {"into": {"db": other.name, "coll": "t"}}}])
        assert _sorted(other, "t") == [{"_id": 1, "a": 1, "b": "x"}, {"_id": 2, "a": 2, "b": "y"}]
    finally:
        mongo_client.drop_database(other.name)
    tgt.t.create_index("a", unique=True)
    tgt.t.insert_one({"_id": 5, "a": 2})
    msg = _fails(tgt, [{"$merge": "t"}], 11000)
    assert msg.startswith("$merge failed due to a DuplicateKey error :: caused by :: E11000")


def test_merge_refusals(tgt: Db) -> None:
    def fails(spec: Any, code: int) -> str:
        return _fails(tgt, [{"$merge": spec}], code)

    assert fails(5, 14) == "$merge requires a string or object argument, but found int"
    assert fails({"on": "_id"}, 40414) == "BSON field '$merge.into' is missing but a required field"
    assert fails({"into": "t", "x": 1}, 40415) == "BSON field '$merge.x' is an unknown field."
    assert fails({"into": "t", "whenMatched": "keepExisting", "whenNotMatched": "fail"}, 51181) == (
        "Combination of $merge modes 'whenMatched: keepExisting' and 'whenNotMatched: fail' is"
        " not supported"
    )
    assert fails({"into": "t", "let": {"x": 1}}, 51199) == (
        "Cannot use 'let' variables with 'whenMatched: merge' mode"
    )
    fails({"into": "t", "whenMatched": [], "let": {"new": 1}}, 51273)
    fails({"into": "t", "whenMatched": "sometimes"}, 2)
    fails({"into": "t", "on": []}, 51187)
    fails({"into": "t", "on": ["a", "a"]}, 31465)
    fails({"into": "t", "whenMatched": [{"$group": {"_id": 1}}]}, 72)
    assert fails("system.x", 31319) == "Cannot $merge to special collection: system.x"
    assert fails({"into": {"db": "config", "coll": "t"}}, 31320) == (
        "Cannot $merge to internal database: config"
    )
    tgt.create_collection("view", viewOn="src", pipeline=[])
    assert fails("view", 166) == f"Namespace {tgt.name}.view is a view, not a collection"
    assert _fails(tgt, [{"$merge": "t"}, {"$match": {}}], 40601) == (
        "$merge can only be the final stage in the pipeline"
    )
    assert _fails(tgt, [{"$facet": {"f": [{"$merge": "t"}]}}], 40600) == (
        "$merge is not allowed to be used within a $facet stage"
    )


def test_merge_validation_and_bypass(tgt: Db) -> None:
    tgt.create_collection("checked", validator={"a": {"$lt": 2}})
    _fails(tgt, [{"$merge": "checked"}], 121)
    tgt.src.aggregate([{"$merge": "checked"}], bypassDocumentValidation=True)
    assert tgt.checked.count_documents({}) == 2


# -- expired target documents ------------------------------------------------------------------------


def test_expired_target_documents_are_absent(tgt: Db, ebbdb_clock: TtlClock) -> None:
    """The target's documents expired at the write's time (not yet deleted) count as not there:
    $merge inserts over them (whenNotMatched insert, and a whenMatched: fail insert meets no
    duplicate), a whenNotMatched: fail finds no match, and $out drops them with the rest."""
    now = ebbdb_clock.now()
    tgt.t.drop()
    tgt.t.create_index("at", expireAfterSeconds=60)
    tgt.t.insert_many([{"_id": 1, "at": now, "old": True}, {"_id": 9, "at": now, "old": True}])
    ebbdb_clock.advance(61)
    assert tgt.t.count_documents({}) == 0  # expired, still stored
    msg = _fails(tgt, [{"$merge": {"into": "t", "whenNotMatched": "fail"}}], 13113)
    assert msg.startswith("$merge could not find a matching document")
    assert _merge(tgt, whenMatched="keepExisting") == [
        {"_id": 1, "a": 1, "b": "x"},
        {"_id": 2, "a": 2, "b": "y"},
    ]
    tgt.src.insert_one({"_id": 9, "a": 9})
    tgt.src.delete_many({"_id": {"$in": [1, 2]}})
    assert _merge(tgt, whenMatched="fail") == [
        {"_id": 1, "a": 1, "b": "x"},
        {"_id": 2, "a": 2, "b": "y"},
        {"_id": 9, "a": 9},
    ]
    assert ebbdb_clock.run_ttl_pass() is not None
    assert _sorted(tgt, "t") == [
        {"_id": 1, "a": 1, "b": "x"},
        {"_id": 2, "a": 2, "b": "y"},
        {"_id": 9, "a": 9},
    ]
    # $out: the expired documents go with the rest; the TTL index stays.
    tgt.t.insert_one({"_id": 50, "at": ebbdb_clock.now()})
    ebbdb_clock.advance(61)
    tgt.src.aggregate([{"$out": "t"}])
    assert _sorted(tgt, "t") == [{"_id": 9, "a": 9}]
    assert [ix["name"] for ix in tgt.t.list_indexes()] == ["_id_", "at_1"]


def test_explain_writes_nothing(src: Db) -> None:
    for stage in ({"$out": "t"}, {"$merge": "t"}):
        try:
            src.command("aggregate", "src", pipeline=[stage], explain=True)
        except OperationFailure:
            pass
        assert "t" not in src.list_collection_names()


def test_merge_pipeline_sees_the_commands_let(tgt: Db) -> None:
    tgt.src.aggregate(
        [{"$merge": {"into": "t", "whenMatched": [{"$set": {"k": "$$k", "n": "$$new.b"}}]}}],
        let={"k": 5},
    )
    assert tgt.t.find_one({"_id": 1}) == {"_id": 1, "a": 100, "z": 1, "k": 5, "n": "x"}
