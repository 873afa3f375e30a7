"""Indexes through real drivers: createIndexes, listIndexes and dropIndexes with MongoDB 7.0's reply
shapes, names and error codes; unique (with the null/missing rule), sparse, partial, multikey and
hidden indexes; builds over existing documents; index upkeep on every write; keys beyond LMDB's key
size."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import pytest
from bson import Int64
from bson.codec_options import CodecOptions
from bson.raw_bson import RawBSONDocument
from pymongo import ASCENDING, DESCENDING, IndexModel, MongoClient
from pymongo.errors import BulkWriteError, DuplicateKeyError, OperationFailure, WriteError

from ebbdb.server.embedded import ServerThread
from tests.helpers import LONG, LONG_RANGES, PREFIX, ids, plan_stages

Client = MongoClient[dict[str, Any]]


def error_code(fn: Callable[[], Any]) -> int:
    with pytest.raises((OperationFailure, BulkWriteError)) as info:
        fn()
    return int(info.value.code)  # type: ignore[arg-type]


def specs(coll: Any) -> list[dict[str, Any]]:
    return [dict(ix) for ix in coll.list_indexes()]


def names(coll: Any) -> list[str]:
    return [ix["name"] for ix in coll.list_indexes()]


def scan_of(coll: Any, flt: dict[str, Any], **find: Any) -> dict[str, Any]:
    """The leaf (IXSCAN or COLLSCAN) stage of find's winning plan."""
    plan = coll.find(flt, **find).explain()["queryPlanner"]["winningPlan"]
    return plan_stages(plan)[-1]


def uses_index(coll: Any, flt: dict[str, Any], name: str, **find: Any) -> bool:
    leaf = scan_of(coll, flt, **find)
    return leaf["stage"] == "IXSCAN" and leaf["indexName"] == name


def top_level_bson_types(raw: bytes) -> dict[str, int]:
    """Element type bytes of a document's top-level fields (enough types for these replies)."""
    fixed = {0x01: 8, 0x08: 1, 0x10: 4, 0x12: 8, 0x0A: 0}
    out: dict[str, int] = {}
    pos = 4
    while raw[pos] != 0:
        t = raw[pos]
        end = raw.index(b"\x00", pos + 1)
        out[raw[pos + 1 : end].decode()] = t
        pos = end + 1
        if t in fixed:
            pos += fixed[t]
        elif t == 0x02:
            pos += 4 + struct.unpack_from("<i", raw, pos)[0]
        elif t in (0x03, 0x04):
            pos += struct.unpack_from("<i", raw, pos)[0]
        else:
            raise AssertionError(f"unexpected BSON type {t:#x}")
    return out


RAW = CodecOptions(document_class=RawBSONDocument)
INT32, INT64, DOUBLE, BOOL = 0x10, 0x12, 0x01, 0x08


# -- create, list, drop ----------------------------------------------------------------------------


def test_create_list_and_drop_through_pymongo(client: Client) -> None:
    coll = client.ix.things
    coll.insert_one({"a": 1, "b": 2, "c": 3})
    assert coll.create_index("a") == "a_1"
    assert coll.create_index([("a", ASCENDING), ("b", DESCENDING)]) == "a_1_b_-1"
    assert coll.create_index([("c", DESCENDING)]) == "c_-1"
    assert coll.create_index([("n.m", 1)], name="nested") == "nested"
    assert specs(coll) == [
        {"v": 2, "key": {"_id": 1}, "name": "_id_"},
        {"v": 2, "key": {"a": 1}, "name": "a_1"},
        {"v": 2, "key": {"a": 1, "b": -1}, "name": "a_1_b_-1"},
        {"v": 2, "key": {"c": -1}, "name": "c_-1"},
        {"v": 2, "key": {"n.m": 1}, "name": "nested"},
    ]
    info = coll.index_information()
    assert info["a_1_b_-1"]["key"] == [("a", 1), ("b", -1)]
    coll.drop_index("a_1")
    coll.drop_index([("c", DESCENDING)])
    assert names(coll) == ["_id_", "a_1_b_-1", "nested"]
    coll.drop_indexes()
    assert names(coll) == ["_id_"]


def test_create_indexes_many_at_once(client: Client) -> None:
    coll = client.ix.many
    created = coll.create_indexes(
        [IndexModel([("x", 1)]), IndexModel([("y", -1)], unique=True), IndexModel("z", sparse=True)]
    )
    assert created == ["x_1", "y_-1", "z_1"]
    assert specs(coll)[2:] == [
        {"v": 2, "key": {"y": -1}, "name": "y_-1", "unique": True},
        {"v": 2, "key": {"z": 1}, "name": "z_1", "sparse": True},
    ]


def test_create_indexes_reply_shape(client: Client) -> None:
    db = client.ix
    body = {"createIndexes": "shape", "indexes": [{"key": {"a": 1}, "name": "a_1"}]}
    raw = db.command(body, codec_options=RAW)
    assert top_level_bson_types(raw.raw) == {
        "numIndexesBefore": INT32,
        "numIndexesAfter": INT32,
        "createdCollectionAutomatically": BOOL,
        "ok": DOUBLE,
    }
    reply = db.command(body | {"indexes": [{"key": {"b": 1}, "name": "b_1"}]})
    assert reply == {
        "numIndexesBefore": 2,
        "numIndexesAfter": 3,
        "createdCollectionAutomatically": False,
        "ok": 1.0,
    }
    assert type(reply["numIndexesBefore"]) is int and type(reply["numIndexesAfter"]) is int
    first = db.command({"createIndexes": "fresh", "indexes": [{"key": {"a": 1}, "name": "a_1"}]})
    assert first["createdCollectionAutomatically"] is True
    assert (first["numIndexesBefore"], first["numIndexesAfter"]) == (1, 2)


def test_identical_repeat_notes_that_all_indexes_exist(client: Client) -> None:
    db = client.ix
    body = {
        "createIndexes": "again",
        "indexes": [{"key": {"a": 1}, "name": "a_1", "unique": True}],
    }
    db.command(body)
    reply = db.command(body, codec_options=RAW)
    assert top_level_bson_types(reply.raw) == {
        "numIndexesBefore": INT32,
        "numIndexesAfter": INT32,
        "note": 0x02,
        "ok": DOUBLE,
    }
    assert dict(db.command(body)) == {
        "numIndexesBefore": 2,
        "numIndexesAfter": 2,
        "note": "all indexes already exist",
        "ok": 1.0,
    }
    # The _id index "exists" on any collection that exists.
    reply = db.command({"createIndexes": "again", "indexes": [{"key": {"_id": 1}, "name": "_id_"}]})
    assert reply["note"] == "all indexes already exist"


def test_server_generates_names(client: Client) -> None:
    db = client.ix
    db.command(
        {
            "createIndexes": "gen",
            "indexes": [
                {"key": {"a": 1, "b": -1}},
                {"key": {"x.y": 1}},
                {"key": {"c": -1.0}},
                {"key": {"d": Int64(1)}},
            ],
        }
    )
    assert names(db.gen) == ["_id_", "a_1_b_-1", "x.y_1", "c_-1", "d_1"]


def test_options_appear_in_list_indexes(client: Client) -> None:
    coll = client.ix.opts
    coll.create_index("u", unique=True)
    coll.create_index("s", sparse=True)
    coll.create_index("p", partialFilterExpression={"p": {"$gt": 5}})
    coll.create_index("h", hidden=True)
    coll.create_index("k", collation={"locale": "simple"})
    assert specs(coll)[1:] == [
        {"v": 2, "key": {"u": 1}, "name": "u_1", "unique": True},
        {"v": 2, "key": {"s": 1}, "name": "s_1", "sparse": True},
        {"v": 2, "key": {"p": 1}, "name": "p_1", "partialFilterExpression": {"p": {"$gt": 5}}},
        {"v": 2, "key": {"h": 1}, "name": "h_1", "hidden": True},
        {"v": 2, "key": {"k": 1}, "name": "k_1"},
    ]


def test_list_indexes_is_a_cursor(client: Client) -> None:
    client.ix.lc.create_index("a")
    reply = client.ix.command("listIndexes", "lc")
    assert reply["ok"] == 1.0
    assert reply["cursor"]["id"] == 0
    assert reply["cursor"]["ns"] == "ix.lc"
    assert [ix["name"] for ix in reply["cursor"]["firstBatch"]] == ["_id_", "a_1"]


def test_indexes_survive_a_restart(start_server: Callable[..., ServerThread], dbpath: str) -> None:
    srv = start_server()
    with MongoClient(srv.uri) as c:
        c.ix.keep.insert_many([{"_id": i, "a": i} for i in range(10)])
        c.ix.keep.create_index("a", unique=True)
    srv.stop()
    srv = start_server(path=dbpath)
    with MongoClient(srv.uri) as c:
        assert names(c.ix.keep) == ["_id_", "a_1"]
        assert uses_index(c.ix.keep, {"a": 3}, "a_1")
        assert ids(c.ix.keep.find({"a": 3})) == [3]
        with pytest.raises(DuplicateKeyError):
            c.ix.keep.insert_one({"a": 3})


# -- errors ----------------------------------------------------------------------------------------


def create_raw(db: Any, coll: str, *indexes: dict[str, Any]) -> dict[str, Any]:
    return db.command({"createIndexes": coll, "indexes": list(indexes)})


@pytest.mark.parametrize(
    ("index", "code"),
    [
        ({"key": {}, "name": "e"}, 67),
        ({"key": {"a": 0}, "name": "z"}, 67),
        ({"key": {"a": True}, "name": "t"}, 67),
        ({"key": {"a": False}, "name": "f"}, 67),
        ({"key": {"a": "foo"}, "name": "p"}, 67),
        ({"key": {"a": None}, "name": "n"}, 67),
        ({"key": {"a": 1}, "name": "x", "bogus": True}, 197),
        ({"key": {"a": 1}, "name": "x", "unique": True, "storageEngineX": {}}, 197),
        ({"key": {"a": 1}, "name": "x", "collation": {"locale": "xx"}}, 2),
        ({"key": {"a": 1}, "name": "x", "collation": {"locale": "fr", "strength": 9}}, 9),
    ],
)
def test_bad_index_specs(client: Client, index: dict[str, Any], code: int) -> None:
    db = client.ix
    db.bad.insert_one({"a": 1})
    assert error_code(lambda: create_raw(db, "bad", index)) == code
    assert names(db.bad) == ["_id_"]


def test_collation_through_pymongo(client: Client) -> None:
    coll = client.ix.coll8n
    assert error_code(lambda: coll.create_index("a", collation={"locale": "xx"})) == 2
    assert coll.create_index("a", collation={"locale": "simple"}) == "a_1"
    assert coll.create_index("b", collation={"locale": "en"}) == "b_1"


def test_same_key_different_name_is_an_options_conflict(client: Client) -> None:
    db = client.ix
    create_raw(db, "cf", {"key": {"a": 1}, "name": "a_1"})
    with pytest.raises(OperationFailure) as info:
        create_raw(db, "cf", {"key": {"a": 1}, "name": "other"})
    assert info.value.code == 85
    assert info.value.details is not None
    assert info.value.details["codeName"] == "IndexOptionsConflict"
    assert names(db.cf) == ["_id_", "a_1"]


@pytest.mark.parametrize(
    "second",
    [
        {"key": {"b": 1}, "name": "a_1"},
        {"key": {"a": -1}, "name": "a_1"},
        {"key": {"a": 1}, "name": "a_1", "unique": True},
    ],
)
def test_same_name_different_index_is_a_key_specs_conflict(
    client: Client, second: dict[str, Any]
) -> None:
    db = client.ix
    create_raw(db, "ks", {"key": {"a": 1}, "name": "a_1"})
    with pytest.raises(OperationFailure) as info:
        create_raw(db, "ks", second)
    assert info.value.code == 86
    assert info.value.details is not None
    assert info.value.details["codeName"] == "IndexKeySpecsConflict"
    assert specs(db.ks)[1] == {"v": 2, "key": {"a": 1}, "name": "a_1"}


def test_list_indexes_on_a_missing_collection(client: Client) -> None:
    with pytest.raises(OperationFailure) as info:
        client.ix.command("listIndexes", "nope")
    assert info.value.code == 26
    assert info.value.details is not None
    assert info.value.details["codeName"] == "NamespaceNotFound"
    # pymongo hides that error: no collection, no indexes.
    assert list(client.ix.nope.list_indexes()) == []


@pytest.mark.parametrize(
    ("index", "code"),
    [
        ("nope", 27),
        ({"zz": 1}, 27),
        ({"a": -1}, 27),
        (["a_1", "nope"], 27),
        ("_id_", 72),
        ({"_id": 1}, 72),
    ],
)
def test_drop_index_errors(client: Client, index: Any, code: int) -> None:
    coll = client.ix.dr
    coll.create_index("a")
    assert error_code(lambda: client.ix.command("dropIndexes", "dr", index=index)) == code
    assert names(coll) == ["_id_", "a_1"]


def test_drop_indexes_on_a_missing_collection(client: Client) -> None:
    assert error_code(lambda: client.ix.command("dropIndexes", "nope", index="*")) == 26


@pytest.mark.parametrize(
    ("index", "left"),
    [
        ("a_1", ["_id_", "b_-1", "a_1_b_1"]),
        ({"b": -1}, ["_id_", "a_1", "a_1_b_1"]),
        (["a_1", "a_1_b_1"], ["_id_", "b_-1"]),
        ("*", ["_id_"]),
    ],
)
def test_drop_indexes_reply(client: Client, index: Any, left: list[str]) -> None:
    coll = client.ix.drops
    coll.create_index("a")
    coll.create_index([("b", -1)])
    coll.create_index([("a", 1), ("b", 1)])
    reply = client.ix.command("dropIndexes", "drops", index=index)
    assert reply == {"nIndexesWas": 4, "ok": 1.0}
    assert type(reply["nIndexesWas"]) is int
    assert names(coll) == left


# -- unique ----------------------------------------------------------------------------------------


def test_unique_violation_is_a_duplicate_key_write_error(client: Client) -> None:
    coll = client.ix.uq
    coll.create_index("email", unique=True)
    coll.insert_one({"_id": 1, "email": "a@x"})
    with pytest.raises(DuplicateKeyError) as info:
        coll.insert_one({"_id": 2, "email": "a@x"})
    assert info.value.code == 11000
    details = info.value.details
    assert details is not None
    assert "email_1" in details["errmsg"]
    assert details["keyPattern"] == {"email": 1}
    assert details["keyValue"] == {"email": "a@x"}
    assert ids(coll.find()) == [1]


@pytest.mark.parametrize(
    ("key", "options", "first", "second", "collides"),
    [
        ([("a", 1)], {}, {}, {}, True),
        ([("a", 1)], {}, {}, {"a": None}, True),
        ([("a", 1)], {"sparse": True}, {}, {}, False),
        ([("a", 1)], {"partialFilterExpression": {"a": {"$exists": True}}}, {}, {}, False),
        ([("a", 1), ("b", 1)], {}, {}, {}, True),
        ([("a", 1), ("b", 1)], {}, {"a": 1}, {"a": 1, "b": None}, True),
        ([("a", 1), ("b", -1)], {}, {"a": 1}, {"b": 1}, False),
        ([("a", 1), ("b", 1)], {"sparse": True}, {}, {}, False),
        ([("a", 1)], {}, {"a": 1}, {"a": 1.0}, True),
        ([("a", 1)], {}, {"a": [1, 2]}, {"a": [2, 3]}, True),
    ],
)
def test_unique_null_and_missing_rule(
    client: Client,
    key: list[tuple[str, int]],
    options: dict[str, Any],
    first: dict[str, Any],
    second: dict[str, Any],
    collides: bool,
) -> None:
    coll = client.ix.nulls
    coll.create_index(key, unique=True, **options)
    coll.insert_one({"_id": 1, **first})
    if collides:
        with pytest.raises(DuplicateKeyError):
            coll.insert_one({"_id": 2, **second})
        assert ids(coll.find()) == [1]
    else:
        coll.insert_one({"_id": 2, **second})
        assert ids(coll.find()) == [1, 2]


def test_one_document_may_repeat_a_value_in_a_unique_multikey_index(client: Client) -> None:
    coll = client.ix.umk
    coll.create_index("tags", unique=True)
    coll.insert_one({"_id": 1, "tags": ["x", "x", "y"]})
    with pytest.raises(DuplicateKeyError):
        coll.insert_one({"_id": 2, "tags": ["z", "y"]})
    coll.insert_one({"_id": 3, "tags": ["z"]})
    assert ids(coll.find({"tags": {"$in": ["x", "z"]}})) == [1, 3]


def test_unique_build_over_a_duplicate_fails_and_leaves_nothing(client: Client) -> None:
    coll = client.ix.ubuild
    coll.insert_many([{"_id": i, "a": i % 5} for i in range(20)])
    before = specs(coll)
    with pytest.raises(OperationFailure) as info:
        coll.create_index("a", unique=True)
    assert info.value.code == 11000
    assert specs(coll) == before
    assert coll.create_index("a") == "a_1"
    assert uses_index(coll, {"a": 3}, "a_1")
    assert sorted(ids(coll.find({"a": 3}))) == [3, 8, 13, 18]
    assert len(list(coll.find())) == 20


def test_build_over_existing_documents(client: Client) -> None:
    coll = client.ix.existing
    coll.insert_many([{"_id": i, "n": i, "tag": f"t{i % 4}"} for i in range(200)])
    coll.create_index("tag")
    coll.create_index([("n", DESCENDING)])
    assert uses_index(coll, {"tag": "t1"}, "tag_1")
    assert sorted(ids(coll.find({"tag": "t1"}))) == list(range(1, 200, 4))
    assert uses_index(coll, {"n": {"$gte": 195}}, "n_-1")
    assert sorted(ids(coll.find({"n": {"$gte": 195}}))) == [195, 196, 197, 198, 199]
    # New documents join the built index.
    coll.insert_one({"_id": 1000, "n": 1000, "tag": "t1"})
    assert ids(coll.find({"n": {"$gt": 500}})) == [1000]
    assert len(list(coll.find({"tag": "t1"}))) == 51


# -- sparse, partial, multikey, hidden ----------------------------------------------------------------


def test_sparse_index(client: Client) -> None:
    coll = client.ix.sparse
    coll.insert_many([{"_id": 1, "a": 1}, {"_id": 2}, {"_id": 3, "a": None}, {"_id": 4, "a": 2}])
    coll.create_index("a", sparse=True)
    assert uses_index(coll, {"a": 2}, "a_1")
    # {a: null} must find the document without `a`, which the sparse index leaves out.
    assert scan_of(coll, {"a": None})["stage"] == "COLLSCAN"
    assert sorted(ids(coll.find({"a": None}))) == [2, 3]
    # Hinting a sparse index reads only what it holds (MongoDB's documented incomplete result).
    assert sorted(ids(coll.find().hint("a_1"))) == [1, 3, 4]


def test_partial_index(client: Client) -> None:
    coll = client.ix.partial
    coll.insert_many([{"_id": i, "a": i} for i in range(10)])
    coll.create_index("a", partialFilterExpression={"a": {"$gt": 5}})
    assert uses_index(coll, {"a": {"$gt": 5}}, "a_1")
    assert ids(coll.find({"a": {"$gt": 5}})) == [6, 7, 8, 9]
    # A query outside the filter cannot use the index and still finds everything.
    assert scan_of(coll, {"a": {"$lt": 3}})["stage"] == "COLLSCAN"
    assert sorted(ids(coll.find({"a": {"$lt": 3}}))) == [0, 1, 2]
    coll.insert_many([{"_id": 10, "a": 10}, {"_id": 11, "a": 1}])
    assert ids(coll.find({"a": {"$gt": 5}})) == [6, 7, 8, 9, 10]
    assert sorted(ids(coll.find({"a": {"$lt": 3}}))) == [0, 1, 2, 11]


def test_multikey_index(client: Client) -> None:
    coll = client.ix.mk
    coll.create_index("a")
    coll.insert_many([{"_id": 1, "a": [1, 20]}, {"_id": 2, "a": 7}, {"_id": 3, "a": [6, 9]}])
    leaf = scan_of(coll, {"a": {"$gt": 5, "$lt": 10}})
    assert leaf["stage"] == "IXSCAN" and leaf["isMultiKey"] is True
    assert sorted(ids(coll.find({"a": {"$gt": 5, "$lt": 10}}))) == [1, 2, 3]
    assert sorted(ids(coll.find({"a": {"$elemMatch": {"$gt": 5, "$lt": 10}}}))) == [3]
    assert ids(coll.find({"a": 20})) == [1]
    # Each document once, though it has several entries.
    assert sorted(ids(coll.find({"a": {"$gte": 0}}))) == [1, 2, 3]


def test_array_of_documents_makes_a_dotted_index_multikey(client: Client) -> None:
    coll = client.ix.mkdot
    coll.create_index("a.b")
    coll.insert_many([{"_id": 1, "a": [{"b": 1}, {"b": 2}]}, {"_id": 2, "a": {"b": 3}}])
    assert scan_of(coll, {"a.b": {"$gt": 0}})["isMultiKey"] is True
    assert ids(coll.find({"a.b": {"$gt": 0}})) == [1, 2]
    assert ids(coll.find({"a.b": {"$in": [1, 2]}})) == [1]
    assert ids(coll.find().sort("a.b", 1)) == [1, 2]


def test_parallel_arrays_are_refused_on_insert(client: Client) -> None:
    coll = client.ix.par
    coll.create_index([("a", 1), ("b", 1)])
    coll.insert_one({"_id": 1, "a": [1, 2], "b": 1})
    coll.insert_one({"_id": 2, "a": 1, "b": [1, 2]})
    with pytest.raises(WriteError) as info:
        coll.insert_one({"_id": 3, "a": [1, 2], "b": [3, 4]})
    assert info.value.code == 171
    assert info.value.details is not None
    assert "parallel arrays" in info.value.details["errmsg"]
    assert ids(coll.find()) == [1, 2]
    assert ids(coll.find({"a": {"$gte": 0}}).hint("a_1_b_1")) == [1, 2]


def test_parallel_arrays_through_a_dotted_path_are_refused(client: Client) -> None:
    coll = client.ix.pardot
    coll.create_index([("a.b", 1), ("c", 1)])
    with pytest.raises(WriteError) as info:
        coll.insert_one({"_id": 1, "a": [{"b": 1}, {"b": 2}], "c": [1, 2]})
    assert info.value.code == 171
    assert list(coll.find()) == []


def test_parallel_arrays_fail_a_build(client: Client) -> None:
    coll = client.ix.parbuild
    coll.insert_many([{"_id": 1, "a": [1], "b": 1}, {"_id": 2, "a": [1, 2], "b": [3]}])
    with pytest.raises(OperationFailure) as info:
        coll.create_index([("a", 1), ("b", 1)])
    assert info.value.code == 171
    assert names(coll) == ["_id_"]


def test_hidden_index_is_kept_up_but_not_planned(client: Client) -> None:
    coll = client.ix.hidden
    coll.create_index("a", hidden=True)
    coll.insert_many([{"_id": i, "a": i} for i in range(20)])
    assert scan_of(coll, {"a": 5})["stage"] == "COLLSCAN"
    assert scan_of(coll, {}, sort=[("a", 1)])["stage"] == "COLLSCAN"
    assert ids(coll.find({"a": 5})) == [5]
    for hint in ("a_1", [("a", 1)]):
        with pytest.raises(OperationFailure) as info:
            list(coll.find({"a": 5}).hint(hint))
        assert info.value.code == 2
    # Unhiding (drop and create without hidden) makes it plannable again.
    coll.drop_index("a_1")
    coll.create_index("a")
    assert uses_index(coll, {"a": 5}, "a_1")


# -- every write keeps its indexes in step ---------------------------------------------------------


def test_inserted_documents_are_found_through_each_index(client: Client) -> None:
    coll = client.ix.upkeep
    coll.create_index("a")
    coll.create_index([("b", -1), ("a", 1)])
    coll.create_index("c.d")
    for i in range(30):
        coll.insert_one({"_id": i, "a": i % 3, "b": str(i), "c": {"d": i}})
        assert ids(coll.find({"a": i % 3, "_id": i}).hint("a_1")) == [i]
        assert ids(coll.find({"b": str(i)}).hint("b_-1_a_1")) == [i]
        assert ids(coll.find({"c.d": i}).hint("c.d_1")) == [i]


def test_failed_unique_insert_leaves_no_entries_in_any_index(client: Client) -> None:
    coll = client.ix.atomic
    coll.create_index("v")
    coll.create_index("u", unique=True)
    coll.create_index("w")
    coll.insert_one({"_id": 1, "u": 1, "v": "x", "w": 10})
    with pytest.raises(DuplicateKeyError):
        coll.insert_one({"_id": 2, "u": 1, "v": "y", "w": 20})
    for hint, flt in (("v_1", {"v": "y"}), ("w_1", {"w": 20}), ("_id_", {"_id": 2})):
        assert list(coll.find(flt).hint(hint)) == []
    coll.insert_one({"_id": 2, "u": 2, "v": "y", "w": 20})
    assert ids(coll.find({"v": "y"}).hint("v_1")) == [2]
    assert ids(coll.find({"w": {"$gte": 0}}).hint("w_1")) == [1, 2]
    assert ids(coll.find({"u": {"$gte": 0}}).hint("u_1")) == [1, 2]
    assert ids(coll.find({"v": {"$gte": ""}}).hint("v_1")) == [1, 2]


def test_unordered_insert_many_with_duplicates_indexes_only_the_survivors(client: Client) -> None:
    coll = client.ix.unordered
    coll.create_index("u", unique=True)
    coll.create_index("v")
    docs = [{"_id": i, "u": u, "v": i} for i, u in enumerate([1, 2, 1, 3, 2])]
    with pytest.raises(BulkWriteError) as info:
        coll.insert_many(docs, ordered=False)
    assert [e["index"] for e in info.value.details["writeErrors"]] == [2, 4]
    assert ids(coll.find({"v": {"$gte": 0}}).hint("v_1")) == [0, 1, 3]
    assert ids(coll.find({"u": {"$gte": 0}}).hint("u_1")) == [0, 1, 3]


# -- keys longer than LMDB allows ------------------------------------------------------------------


@pytest.fixture
def long_coll(client: Client) -> Any:
    coll = client.ix.long
    coll.insert_many([{"_id": i, "s": s, "t": s} for i, s in enumerate(LONG)])
    coll.create_index("s", unique=True)
    coll.create_index([("t", DESCENDING)])
    return coll


@pytest.mark.parametrize("field", ["s", "t"])
def test_equality_on_long_values(long_coll: Any, field: str) -> None:
    for i, value in enumerate(LONG):
        assert uses_index(long_coll, {field: value}, f"{field}_{1 if field == 's' else -1}")
        assert ids(long_coll.find({field: value})) == [i]
    assert list(long_coll.find({field: PREFIX + "c" * 3999})) == []


def test_long_duplicates_are_detected(long_coll: Any) -> None:
    with pytest.raises(DuplicateKeyError):
        long_coll.insert_one({"_id": 100, "s": PREFIX + "e" * 2000})
    long_coll.insert_one({"_id": 101, "s": PREFIX + "e" * 1999 + "f"})
    both = [PREFIX + "e" * 2000, PREFIX + "e" * 1999 + "f"]
    assert sorted(ids(long_coll.find({"s": {"$in": both}}))) == [4, 101]
    # A unique build meets two equal long values.
    long_coll.insert_many(
        [{"_id": 102, "s": "s102", "t": "x" * 3000}, {"_id": 103, "s": "s103", "t": "x" * 3000}]
    )
    with pytest.raises(OperationFailure) as info:
        long_coll.create_index([("t", 1)], unique=True)
    assert info.value.code == 11000
    assert names(long_coll) == ["_id_", "s_1", "t_-1"]


@pytest.mark.parametrize("field", ["s", "t"])
@pytest.mark.parametrize(
    "cond",
    [*LONG_RANGES, {"$lt": "q"}],
    ids=range(7),
)
def test_ranges_on_long_values_match_a_collection_scan(
    long_coll: Any, field: str, cond: dict[str, Any]
) -> None:
    assert scan_of(long_coll, {field: cond})["stage"] == "IXSCAN"
    through_index = sorted(ids(long_coll.find({field: cond})))
    natural = sorted(ids(long_coll.find({field: cond}).hint({"$natural": 1})))
    expected = sorted(i for i, s in enumerate(LONG) if _holds(s, cond))
    assert through_index == natural == expected


def _holds(s: str, cond: dict[str, Any]) -> bool:
    ops = {
        "$gt": lambda q: s > q,
        "$gte": lambda q: s >= q,
        "$lt": lambda q: s < q,
        "$lte": lambda q: s <= q,
    }
    return all(ops[op](q) for op, q in cond.items())


@pytest.mark.parametrize("field", ["s", "t"])
@pytest.mark.parametrize("direction", [1, -1])
def test_sort_on_long_values_through_an_index(long_coll: Any, field: str, direction: int) -> None:
    expected = sorted(range(len(LONG)), key=lambda i: LONG[i], reverse=direction < 0)
    assert ids(long_coll.find().sort(field, direction)) == expected
    assert ids(long_coll.find().sort(field, direction).hint({"$natural": 1})) == expected
