"""Inserting and reading documents, cursors, and the database/collection catalog commands, driven by
real drivers against the real server and checked against MongoDB 7.0's behaviour."""

from __future__ import annotations

import datetime
from typing import Any

import bson
import pytest
from bson import SON, Binary, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from pymongo import ASCENDING, DESCENDING, AsyncMongoClient, MongoClient
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure

from ebbdb.server.embedded import ServerThread
from tests.e2e.rawwire import connect, op_msg
from tests.helpers import Recorder

Client = MongoClient[dict[str, Any]]

MAX_BSON = 16 * 1024 * 1024


# --- insert ----------------------------------------------------------------------------------------


def test_insert_one_generates_an_object_id(client: Client) -> None:
    coll = client.crud.c
    result = coll.insert_one({"a": 1})
    assert isinstance(result.inserted_id, ObjectId)
    doc = coll.find_one({"a": 1})
    assert doc == {"_id": result.inserted_id, "a": 1}
    assert list(doc) == ["_id", "a"]


def test_server_generates_id_as_first_field_when_client_sends_none(client: Client) -> None:
    db = client.crud
    reply = db.command("insert", "c", documents=[{"a": 1, "b": 2}])
    assert reply == {"n": 1, "ok": 1.0}
    doc = db.c.find_one()
    assert doc is not None
    assert list(doc) == ["_id", "a", "b"]
    assert isinstance(doc["_id"], ObjectId)


def test_server_moves_id_to_the_front(client: Client) -> None:
    db = client.crud
    reply = db.command("insert", "c", documents=[SON([("a", 1), ("_id", 5), ("z", 2)])])
    assert reply["n"] == 1
    doc = db.c.find_one({"_id": 5})
    assert doc is not None
    assert list(doc) == ["_id", "a", "z"]
    assert doc == {"_id": 5, "a": 1, "z": 2}


def test_insert_many_ordered_and_unordered(client: Client) -> None:
    coll = client.crud.c
    r1 = coll.insert_many([{"_id": i} for i in range(5)])
    assert r1.inserted_ids == list(range(5))
    r2 = coll.insert_many([{"_id": i} for i in range(5, 10)], ordered=False)
    assert r2.inserted_ids == list(range(5, 10))
    assert [d["_id"] for d in coll.find().sort("_id", 1)] == list(range(10))


def test_insert_reply_counts_documents(client: Client) -> None:
    reply = client.crud.command("insert", "c", documents=[{"_id": 1}, {"_id": 2}])
    assert reply == {"n": 2, "ok": 1.0}
    assert type(reply["ok"]) is float


def test_duplicate_key_write_error_shape(client: Client) -> None:
    db = client.db
    db.c.insert_one({"_id": 1})
    reply = db.command("insert", "c", documents=[{"_id": 1}])
    assert reply["ok"] == 1.0
    assert reply["n"] == 0
    assert reply["writeErrors"] == [
        {
            "index": 0,
            "code": 11000,
            "errmsg": "E11000 duplicate key error collection: db.c index: _id_ dup key: { _id: 1 }",
            "keyPattern": {"_id": 1},
            "keyValue": {"_id": 1},
        }
    ]


def test_array_id_is_refused(client: Client) -> None:
    reply = client.crud.command(
        "insert", "c", documents=[{"_id": [1, 2]}, {"_id": 3}], ordered=False
    )
    assert reply["n"] == 1
    (error,) = reply["writeErrors"]
    assert error["index"] == 0
    assert error["code"] == 53  # InvalidIdField
    assert [d["_id"] for d in client.crud.c.find()] == [3]


_OID = ObjectId("64b7f0c2a1b2c3d4e5f60718")


@pytest.mark.parametrize(
    ("key", "shown"),
    [
        ("k", '{ _id: "k" }'),
        (_OID, "{ _id: ObjectId('64b7f0c2a1b2c3d4e5f60718') }"),
        (1.5, "{ _id: 1.5 }"),
        ({"a": 1}, "{ _id: { a: 1 } }"),
    ],
    ids=["string", "objectid", "double", "document"],
)
def test_duplicate_key_message_renders_the_key(client: Client, key: Any, shown: str) -> None:
    db = client.db
    db.c.insert_one({"_id": key})
    reply = db.command("insert", "c", documents=[{"_id": key}])
    (error,) = reply["writeErrors"]
    assert (
        error["errmsg"]
        == f"E11000 duplicate key error collection: db.c index: _id_ dup key: {shown}"
    )
    assert error["keyValue"] == {"_id": key}


def test_duplicate_key_through_insert_one(client: Client) -> None:
    coll = client.db.c
    coll.insert_one({"_id": "k"})
    with pytest.raises(DuplicateKeyError) as info:
        coll.insert_one({"_id": "k"})
    assert info.value.code == 11000
    assert info.value.details is not None
    assert info.value.details["keyValue"] == {"_id": "k"}
    assert len(list(coll.find({}))) == 1


def test_ordered_insert_stops_at_the_first_error(client: Client) -> None:
    coll = client.crud.c
    with pytest.raises(BulkWriteError) as info:
        coll.insert_many([{"_id": 1}, {"_id": 1}, {"_id": 2}, {"_id": 3}], ordered=True)
    details = info.value.details
    assert details["nInserted"] == 1
    assert [(e["index"], e["code"]) for e in details["writeErrors"]] == [(1, 11000)]
    assert [d["_id"] for d in coll.find().sort("_id", 1)] == [1]


def test_unordered_insert_continues_after_errors(client: Client) -> None:
    coll = client.crud.c
    with pytest.raises(BulkWriteError) as info:
        coll.insert_many(
            [{"_id": 1}, {"_id": 1}, {"_id": 2}, {"_id": 2}, {"_id": 3}], ordered=False
        )
    details = info.value.details
    assert details["nInserted"] == 3
    assert [(e["index"], e["code"]) for e in details["writeErrors"]] == [(1, 11000), (3, 11000)]
    assert [d["_id"] for d in coll.find().sort("_id", 1)] == [1, 2, 3]


def test_raw_unordered_insert_reply(client: Client) -> None:
    reply = client.crud.command(
        "insert", "c", documents=[{"_id": 1}, {"_id": 1}, {"_id": 2}], ordered=False
    )
    assert reply["n"] == 2
    assert [e["index"] for e in reply["writeErrors"]] == [1]


@pytest.mark.parametrize(
    ("first", "second"),
    [(1, 1.0), (1, Int64(1)), (1.0, Int64(1)), (Int64(1), 1), (1.0, 1)],
    ids=["int-double", "int-long", "double-long", "long-int", "double-int"],
)
def test_numerically_equal_ids_collide(client: Client, first: Any, second: Any) -> None:
    coll = client.crud.c
    coll.insert_one({"_id": first})
    with pytest.raises(DuplicateKeyError) as info:
        coll.insert_one({"_id": second})
    assert info.value.code == 11000
    assert len(list(coll.find({}))) == 1


def test_numerically_equal_ids_find_each_other(client: Client) -> None:
    coll = client.crud.c
    coll.insert_one({"_id": Int64(7), "v": "x"})
    for key in (7, 7.0, Int64(7)):
        assert coll.find_one({"_id": key}) == {"_id": 7, "v": "x"}


# --- find: filters ---------------------------------------------------------------------------------

FILTER_DOCS = [
    {"_id": 1, "a": 5, "b": {"c": 1}},
    {"_id": 2, "a": [5, 6], "b": {"c": 2}},
    {"_id": 3, "a": [6, 7], "b": [{"c": 1}, {"c": 3}]},
    {"_id": 4, "a": None},
    {"_id": 5, "b": {"c": None}},
    {"_id": 6, "a": "5", "b": {"c": {"d": 1}}},
    {"_id": 7, "a": [[5, 6], 7]},
]

FILTER_CASES = [
    ({}, [1, 2, 3, 4, 5, 6, 7]),
    ({"a": 5}, [1, 2]),
    ({"a": 6}, [2, 3]),
    ({"a": "5"}, [6]),
    ({"a": [5, 6]}, [2, 7]),
    ({"a": [6, 5]}, []),
    ({"a": None}, [4, 5]),
    ({"b.c": 1}, [1, 3]),
    ({"b.c": 3}, [3]),
    ({"b.c": None}, [4, 5, 7]),
    ({"b.c.d": 1}, [6]),
    ({"b": {"c": 1}}, [1, 3]),
    ({"b": {"c": 2}}, [2]),
    ({"a": 5, "b.c": 2}, [2]),
    ({"missing": None}, [1, 2, 3, 4, 5, 6, 7]),
    ({"a": 8}, []),
    ({"_id": 3}, [3]),
    ({"_id": 3.0}, [3]),
    ({"_id": 42}, []),
]


@pytest.fixture
def filter_coll(client: Client) -> Any:
    coll = client.crud.filters
    coll.insert_many(FILTER_DOCS)
    return coll


@pytest.mark.parametrize(
    ("query", "expected"), FILTER_CASES, ids=[repr(q) for q, _ in FILTER_CASES]
)
def test_find_equality(filter_coll: Any, query: dict[str, Any], expected: list[int]) -> None:
    assert sorted(d["_id"] for d in filter_coll.find(query)) == expected


def test_find_one_by_id_returns_the_whole_document(filter_coll: Any) -> None:
    assert filter_coll.find_one({"_id": 3}) == FILTER_DOCS[2]
    assert filter_coll.find_one({"_id": 99}) is None


def test_find_object_id(client: Client) -> None:
    coll = client.crud.c
    ids = coll.insert_many([{"n": i} for i in range(3)]).inserted_ids
    assert coll.find_one({"_id": ids[1]}) == {"_id": ids[1], "n": 1}


def test_find_on_missing_collection_is_empty(client: Client) -> None:
    assert list(client.crud.nothing_here.find()) == []
    assert client.crud.nothing_here.find_one() is None


# --- find: projection ------------------------------------------------------------------------------

PROJECTION_DOC = {"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}, {"f": 3}]}

PROJECTION_CASES = [
    ({"a": 1}, {"_id": 1, "a": 1}),
    ({"a": 1, "_id": 0}, {"a": 1}),
    ({"_id": 0}, {"a": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}, {"f": 3}]}),
    ({"a": 0}, {"_id": 1, "b": {"c": 2, "d": 3}, "e": [{"f": 1, "g": 2}, {"f": 3}]}),
    ({"a": 0, "b": 0, "e": 0}, {"_id": 1}),
    ({"b.c": 1}, {"_id": 1, "b": {"c": 2}}),
    ({"b.c": 1, "_id": 0}, {"b": {"c": 2}}),
    ({"b.c": 0}, {"_id": 1, "a": 1, "b": {"d": 3}, "e": [{"f": 1, "g": 2}, {"f": 3}]}),
    ({"e.f": 1}, {"_id": 1, "e": [{"f": 1}, {"f": 3}]}),
    ({"nope": 1}, {"_id": 1}),
    ({"_id": 1}, {"_id": 1}),
]


@pytest.mark.parametrize(
    ("projection", "expected"), PROJECTION_CASES, ids=[repr(p) for p, _ in PROJECTION_CASES]
)
def test_find_projection(client: Client, projection: dict[str, Any], expected: Any) -> None:
    coll = client.crud.proj
    coll.insert_one(PROJECTION_DOC)
    assert coll.find_one({}, projection) == expected


def test_projection_keeps_field_order(client: Client) -> None:
    coll = client.crud.proj
    coll.insert_one(PROJECTION_DOC)
    doc = coll.find_one({}, {"e": 1, "a": 1})
    assert doc is not None
    assert list(doc) == ["_id", "a", "e"]


# --- find: sort, skip, limit ------------------------------------------------------------------------


@pytest.fixture
def numbers(client: Client) -> Any:
    coll = client.crud.numbers
    order = [7, 2, 9, 0, 5, 3, 8, 1, 6, 4]
    coll.insert_many([{"_id": i, "v": v, "name": f"n{v}"} for i, v in enumerate(order)])
    return coll


def test_sort_ascending(numbers: Any) -> None:
    assert [d["v"] for d in numbers.find().sort("v", ASCENDING)] == list(range(10))


def test_sort_descending(numbers: Any) -> None:
    assert [d["v"] for d in numbers.find().sort("v", DESCENDING)] == list(range(9, -1, -1))


def test_sort_skip_limit(numbers: Any) -> None:
    got = [d["v"] for d in numbers.find().sort("v", ASCENDING).skip(3).limit(4)]
    assert got == [3, 4, 5, 6]


def test_skip_past_the_end(numbers: Any) -> None:
    assert list(numbers.find().skip(50)) == []


def test_limit_without_sort_returns_that_many(numbers: Any) -> None:
    assert len(list(numbers.find().limit(3))) == 3


def test_sort_across_types_follows_bson_order(client: Client) -> None:
    coll = client.crud.mixed
    values: list[Any] = [
        MinKey(),
        None,
        1,
        2.5,
        Int64(3),
        "a",
        "b",
        {"x": 1},
        Binary(b"\x01"),
        ObjectId("64b7f0c2a1b2c3d4e5f60718"),
        False,
        True,
        datetime.datetime(2020, 1, 1),
        Timestamp(1, 1),
        Regex("a"),
        MaxKey(),
    ]
    docs = [{"_id": i, "v": v} for i, v in enumerate(values)]
    docs.append({"_id": "missing"})
    coll.insert_many(reversed(docs))
    up = [d["_id"] for d in coll.find().sort("v", 1)]
    # null and missing compare equal, so their relative order is not fixed.
    assert up[0] == 0
    assert set(up[1:3]) == {1, "missing"}
    assert up[3:] == list(range(2, len(values)))
    down = [d["_id"] for d in coll.find().sort("v", -1)]
    assert down[:-3] == list(range(len(values) - 1, 1, -1))
    assert set(down[-3:-1]) == {1, "missing"}
    assert down[-1] == 0


def test_sort_on_arrays_uses_the_smallest_or_largest_element(client: Client) -> None:
    coll = client.crud.arrsort
    coll.insert_many([{"_id": 1, "a": [5, 1]}, {"_id": 2, "a": 3}, {"_id": 3, "a": [2, 9]}])
    assert [d["_id"] for d in coll.find().sort("a", 1)] == [1, 3, 2]
    assert [d["_id"] for d in coll.find().sort("a", -1)] == [3, 1, 2]


def test_sort_on_two_fields(client: Client) -> None:
    coll = client.crud.twosort
    coll.insert_many([{"_id": i, "g": i % 3, "n": i} for i in range(9)])
    got = [d["_id"] for d in coll.find().sort([("g", 1), ("n", -1)])]
    assert got == [6, 3, 0, 7, 4, 1, 8, 5, 2]


def test_sort_with_filter_and_projection(numbers: Any) -> None:
    got = list(numbers.find({"v": {"$gte": 0}}, {"v": 1, "_id": 0}).sort("v", DESCENDING).limit(2))
    assert got == [{"v": 9}, {"v": 8}]


# --- cursors ---------------------------------------------------------------------------------------


@pytest.fixture
def many(client: Client) -> Any:
    coll = client.crud.many
    coll.insert_many([{"_id": i, "pad": "x" * 10} for i in range(250)])
    return coll


def test_batch_size_uses_get_more_and_returns_everything_in_order(
    many: Any, watched: Client, recorder: Recorder
) -> None:
    coll = watched.crud.many
    recorder.clear()
    got = [d["_id"] for d in coll.find().sort("_id", 1).batch_size(100)]
    assert got == list(range(250))
    (first,) = recorder.replies_to("find")
    assert len(first["cursor"]["firstBatch"]) == 100
    assert first["cursor"]["id"] != 0
    assert first["cursor"]["ns"] == "crud.many"
    more = recorder.replies_to("getMore")
    assert [len(r["cursor"]["nextBatch"]) for r in more] == [100, 50]
    assert more[-1]["cursor"]["id"] == 0


def test_default_first_batch_is_101(many: Any, watched: Client, recorder: Recorder) -> None:
    recorder.clear()
    got = [d["_id"] for d in watched.crud.many.find()]
    assert sorted(got) == list(range(250))
    (first,) = recorder.replies_to("find")
    assert len(first["cursor"]["firstBatch"]) == 101
    assert recorder.replies_to("getMore"), "the rest must come through getMore"


def test_get_more_reply_shape(many: Any, client: Client) -> None:
    db = client.crud
    first = db.command("find", "many", batchSize=10)
    cid = first["cursor"]["id"]
    assert isinstance(cid, Int64)
    assert cid != 0
    more = db.command("getMore", cid, collection="many", batchSize=20)
    assert more["ok"] == 1.0
    assert more["cursor"]["id"] == cid
    assert more["cursor"]["ns"] == "crud.many"
    assert [d["_id"] for d in more["cursor"]["nextBatch"]] == list(range(10, 30))
    db.command("killCursors", "many", cursors=[cid])


def test_negative_limit_is_a_single_batch(many: Any, watched: Client, recorder: Recorder) -> None:
    recorder.clear()
    got = [d["_id"] for d in watched.crud.many.find().sort("_id", 1).limit(-5)]
    assert got == [0, 1, 2, 3, 4]
    (reply,) = recorder.replies_to("find")
    assert reply["cursor"]["id"] == 0
    assert recorder.sent_named("getMore") == []


def test_find_one_is_a_single_batch(many: Any, watched: Client, recorder: Recorder) -> None:
    recorder.clear()
    assert watched.crud.many.find_one({"_id": {"$gte": 10}}, sort=[("_id", 1)]) == {
        "_id": 10,
        "pad": "x" * 10,
    }
    (reply,) = recorder.replies_to("find")
    assert reply["cursor"]["id"] == 0
    assert recorder.sent_named("getMore") == []


def test_raw_single_batch_closes_the_cursor(many: Any, client: Client) -> None:
    reply = client.crud.command("find", "many", batchSize=10, singleBatch=True)
    assert reply["cursor"]["id"] == 0
    assert len(reply["cursor"]["firstBatch"]) == 10


def test_killed_cursor_is_gone(many: Any, watched: Client, recorder: Recorder) -> None:
    cursor = watched.crud.many.find().batch_size(10)
    next(cursor)
    cid = cursor.cursor_id
    assert cid
    cursor.close()
    (killed,) = recorder.replies_to("killCursors")
    assert killed["cursorsKilled"] == [cid]
    with pytest.raises(OperationFailure) as info:
        watched.crud.command("getMore", Int64(cid), collection="many")
    assert info.value.code == 43
    assert info.value.details is not None
    assert info.value.details["codeName"] == "CursorNotFound"


def test_batch_size_zero_opens_a_cursor_with_an_empty_first_batch(
    many: Any, client: Client
) -> None:
    db = client.crud
    reply = db.command("find", "many", batchSize=0)
    assert reply["cursor"]["firstBatch"] == []
    cid = reply["cursor"]["id"]
    assert cid != 0
    more = db.command("getMore", cid, collection="many", batchSize=5)
    assert [d["_id"] for d in more["cursor"]["nextBatch"]] == [0, 1, 2, 3, 4]
    db.command("killCursors", "many", cursors=[cid])


def test_limit_reached_in_first_batch_closes_the_cursor(many: Any, client: Client) -> None:
    reply = client.crud.command("find", "many", limit=20, batchSize=20)
    assert len(reply["cursor"]["firstBatch"]) == 20
    assert reply["cursor"]["id"] == 0


def test_limit_spanning_batches(many: Any, watched: Client, recorder: Recorder) -> None:
    recorder.clear()
    got = [d["_id"] for d in watched.crud.many.find().sort("_id", 1).limit(130).batch_size(50)]
    assert got == list(range(130))
    assert [len(r["cursor"]["nextBatch"]) for r in recorder.replies_to("getMore")] == [50, 30]
    assert recorder.replies_to("getMore")[-1]["cursor"]["id"] == 0


def test_get_more_from_another_collection_is_refused(many: Any, client: Client) -> None:
    db = client.crud
    cid = db.command("find", "many", batchSize=1)["cursor"]["id"]
    with pytest.raises(OperationFailure) as info:
        db.command("getMore", cid, collection="other")
    assert info.value.code == 13
    more = db.command("getMore", cid, collection="many", batchSize=1)
    assert [d["_id"] for d in more["cursor"]["nextBatch"]] == [1]
    db.command("killCursors", "many", cursors=[cid])


def test_get_more_with_an_int32_cursor_id_is_a_type_mismatch(many: Any, client: Client) -> None:
    with pytest.raises(OperationFailure) as info:
        client.crud.command("getMore", 5, collection="many")
    assert info.value.code == 14


def test_get_more_on_unknown_cursor(client: Client) -> None:
    with pytest.raises(OperationFailure) as info:
        client.crud.command("getMore", Int64(123456789), collection="many")
    assert info.value.code == 43


def test_kill_cursors_reports_unknown_ids(client: Client) -> None:
    reply = client.crud.command("killCursors", "many", cursors=[Int64(987654321)])
    assert reply["cursorsKilled"] == []
    assert reply["cursorsNotFound"] == [987654321]


# --- catalog: databases ---------------------------------------------------------------------------


def test_list_databases(client: Client) -> None:
    client.alpha.c.insert_one({"x": 1})
    client.beta.c.insert_many([{"x": i} for i in range(10)])
    reply = client.admin.command("listDatabases")
    assert reply["ok"] == 1.0
    by_name = {d["name"]: d for d in reply["databases"]}
    assert {"alpha", "beta"} <= set(by_name)
    for name in ("alpha", "beta"):
        entry = by_name[name]
        assert isinstance(entry["sizeOnDisk"], Int64)
        assert entry["sizeOnDisk"] > 0
        assert entry["empty"] is False
    assert isinstance(reply["totalSize"], Int64)
    assert reply["totalSize"] >= by_name["alpha"]["sizeOnDisk"] + by_name["beta"]["sizeOnDisk"]


def test_list_databases_name_only(client: Client) -> None:
    client.alpha.c.insert_one({"x": 1})
    reply = client.admin.command("listDatabases", nameOnly=True)
    assert {"name": "alpha"} in reply["databases"]
    assert all(set(d) == {"name"} for d in reply["databases"])
    assert "alpha" in client.list_database_names()


def test_list_databases_filter(client: Client) -> None:
    client.alpha.c.insert_one({"x": 1})
    client.beta.c.insert_one({"x": 1})
    reply = client.admin.command("listDatabases", filter={"name": "beta"})
    assert [d["name"] for d in reply["databases"]] == ["beta"]


# --- catalog: collections --------------------------------------------------------------------------


def test_list_collections_is_a_cursor(client: Client) -> None:
    db = client.cat
    db.a.insert_one({})
    db.b.insert_one({})
    reply = db.command("listCollections")
    cursor = reply["cursor"]
    assert cursor["id"] == 0
    assert cursor["ns"] == "cat.$cmd.listCollections"
    entries = {e["name"]: e for e in cursor["firstBatch"]}
    assert set(entries) == {"a", "b"}
    assert entries["a"]["type"] == "collection"
    assert entries["a"]["idIndex"]["key"] == {"_id": 1}
    assert entries["a"]["idIndex"]["name"] == "_id_"


def test_list_collections_name_only_and_filter(client: Client) -> None:
    db = client.cat
    db.a.insert_one({})
    db.b.insert_one({})
    names = db.command("listCollections", nameOnly=True)["cursor"]["firstBatch"]
    assert sorted(names, key=lambda e: e["name"]) == [
        {"name": "a", "type": "collection"},
        {"name": "b", "type": "collection"},
    ]
    only_a = db.command("listCollections", filter={"name": "a"})["cursor"]["firstBatch"]
    assert [e["name"] for e in only_a] == ["a"]
    assert sorted(db.list_collection_names()) == ["a", "b"]
    assert db.list_collection_names(filter={"name": "b"}) == ["b"]


def test_create_then_create_again(client: Client) -> None:
    db = client.cat
    assert db.command("create", "made") == {"ok": 1.0}
    assert "made" in db.list_collection_names()
    assert db.made.find_one() is None
    with pytest.raises(OperationFailure) as info:
        db.command("create", "made")
    assert info.value.code == 48
    assert info.value.details is not None
    assert info.value.details["codeName"] == "NamespaceExists"


def test_drop_collection(client: Client) -> None:
    db = client.cat
    db.gone.insert_many([{"x": 1}, {"x": 2}])
    db.stays.insert_one({"x": 1})
    reply = db.command("drop", "gone")
    assert reply["ok"] == 1.0
    assert reply["ns"] == "cat.gone"
    assert reply["nIndexesWas"] == 1
    assert db.list_collection_names() == ["stays"]
    assert list(db.gone.find()) == []
    db.gone.insert_one({"_id": 1})
    assert list(db.gone.find()) == [{"_id": 1}]


def test_drop_missing_collection_succeeds(client: Client) -> None:
    assert client.cat.command("drop", "never_there")["ok"] == 1.0


def test_drop_database(client: Client) -> None:
    client.doomed.a.insert_one({"x": 1})
    client.doomed.b.insert_one({"x": 1})
    client.kept.a.insert_one({"x": 1})
    reply = client.doomed.command("dropDatabase")
    assert reply["ok"] == 1.0
    names = client.list_database_names()
    assert "doomed" not in names
    assert "kept" in names
    assert list(client.doomed.a.find()) == []
    assert client.doomed.list_collection_names() == []


# --- invalid names ---------------------------------------------------------------------------------


def _assert_invalid_namespace(exc: OperationFailure) -> None:
    assert exc.code == 73
    assert exc.details is not None
    assert exc.details["codeName"] == "InvalidNamespace"


def test_insert_into_empty_collection_name(client: Client) -> None:
    with pytest.raises(OperationFailure) as info:
        client.crud.command("insert", "", documents=[{"a": 1}])
    _assert_invalid_namespace(info.value)


def test_insert_into_collection_name_with_dollar(client: Client) -> None:
    with pytest.raises(OperationFailure) as info:
        client.crud.command("insert", "a$b", documents=[{"a": 1}])
    _assert_invalid_namespace(info.value)
    assert "a$b" not in client.crud.list_collection_names()


def test_create_collection_name_with_dollar(client: Client) -> None:
    with pytest.raises(OperationFailure) as info:
        client.crud.command("create", "x$y")
    _assert_invalid_namespace(info.value)


@pytest.mark.parametrize("db_name", ["a b", "a.b", "a/b", 'a"b'])
def test_insert_into_invalid_database_name(
    server: ServerThread, client: Client, db_name: str
) -> None:
    # pymongo refuses these names before sending, so the request goes over a raw socket.
    with connect(server) as sock:
        reply = op_msg(sock, {"insert": "c", "documents": [{"_id": 1}], "$db": db_name})
    assert reply["ok"] == 0.0
    assert reply["code"] == 73
    assert reply["codeName"] == "InvalidNamespace"
    assert db_name not in client.list_database_names()


def test_find_on_invalid_database_name(server: ServerThread) -> None:
    # pymongo refuses this name before sending, so the request goes over a raw socket.
    with connect(server) as sock:
        reply = op_msg(sock, {"find": "c", "$db": "a b"})
    assert reply["ok"] == 0.0
    assert reply["code"] == 73


# --- size limits and big batches --------------------------------------------------------------------


def test_document_over_16_mib_is_refused_and_the_server_keeps_serving(client: Client) -> None:
    # pymongo's insert_one refuses this client-side (DocumentTooLarge). A raw insert command is only
    # checked against maxBsonObjectSize + 16 KiB of command overhead, so this one reaches the server.
    big = {"_id": "big", "x": "a" * MAX_BSON}
    size = len(bson.encode(big))
    assert MAX_BSON < size < MAX_BSON + 16 * 1024
    db = client.crud
    try:
        reply = db.command("insert", "big", documents=[big])
    except OperationFailure as exc:  # a command-level refusal is acceptable too
        assert exc.code in (10334, 2), exc.details
    else:
        assert reply["ok"] == 1.0
        assert reply["n"] == 0
        (error,) = reply["writeErrors"]
        assert error["index"] == 0
        # MongoDB 7.0 itself answers BadValue (2) "object to insert too large"; BSONObjectTooLarge
        # (10334) is the other code a MongoDB-compatible server may use for this.
        assert error["code"] in (10334, 2)
        assert "too large" in error["errmsg"]
    assert db.big.find_one({"_id": "big"}) is None
    assert db.command("ping")["ok"] == 1.0
    db.big.insert_one({"_id": "small"})
    assert db.big.find_one() == {"_id": "small"}


def test_document_of_exactly_16_mib_is_accepted(client: Client) -> None:
    probe = len(bson.encode({"_id": 1, "x": ""}))
    doc = {"_id": 1, "x": "a" * (MAX_BSON - probe)}
    assert len(bson.encode(doc)) == MAX_BSON
    client.crud.big.insert_one(doc)
    got = client.crud.big.find_one({"_id": 1})
    assert got is not None
    assert len(got["x"]) == MAX_BSON - probe


def test_thousand_document_batches(client: Client) -> None:
    db = client.crud
    for batch in range(3):
        docs = [{"_id": batch * 1000 + i, "batch": batch, "v": [i, str(i)]} for i in range(1000)]
        assert db.command("insert", "bulk", documents=docs) == {"n": 1000, "ok": 1.0}
    assert len(list(db.bulk.find({}))) == 3000
    got = list(db.bulk.find().sort("_id", 1))
    assert [d["_id"] for d in got] == list(range(3000))
    assert got[1234] == {"_id": 1234, "batch": 1, "v": [234, "234"]}
    assert len(list(db.bulk.find({"batch": 2}))) == 1000


def test_insert_many_of_thousands(client: Client) -> None:
    coll = client.crud.bulk2
    result = coll.insert_many([{"i": i} for i in range(5000)])
    assert len(result.inserted_ids) == 5000
    assert [d["i"] for d in coll.find({}, {"i": 1, "_id": 0})] == list(range(5000))


# --- async drivers ----------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_async_mongo_client_crud_and_cursor(
    async_client: AsyncMongoClient[dict[str, Any]],
) -> None:
    coll = async_client.acrud.c
    await coll.insert_many([{"_id": i} for i in range(250)])
    got = [d["_id"] async for d in coll.find().sort("_id", -1).batch_size(60)]
    assert got == list(range(249, -1, -1))
    with pytest.raises(BulkWriteError) as info:
        await coll.insert_many([{"_id": 300}, {"_id": 0}, {"_id": 301}], ordered=False)
    assert info.value.details["nInserted"] == 2
    assert len([_ async for _ in coll.find({})]) == 252
    assert "c" in await async_client.acrud.list_collection_names()


@pytest.mark.asyncio
async def test_motor_crud(motor_client: Any) -> None:
    coll = motor_client.mcrud.c
    result = await coll.insert_one({"a": {"b": 1}})
    assert isinstance(result.inserted_id, ObjectId)
    assert await coll.find_one({"a.b": 1}, {"_id": 0}) == {"a": {"b": 1}}
    with pytest.raises(DuplicateKeyError):
        await coll.insert_one({"_id": result.inserted_id})
    await motor_client.mcrud.drop_collection("c")
    assert await motor_client.mcrud.list_collection_names() == []
