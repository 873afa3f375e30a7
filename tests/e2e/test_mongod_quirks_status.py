"""Two behaviours as mongod 7.0 has them (issue 25 item 9): a find with both showRecordId and
returnKey returns the index key alone (mongod's returnKey stage drops the record id), and a time
series collection takes measurements that share an `_id` (MongoDB's have no `_id` index), ordered
or not, which finds, counts and deletes then see as separate documents."""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

import pytest
from bson import Int64
from pymongo import MongoClient
from pymongo.collection import Collection

from ebbdb.server.embedded import ServerThread

Client = MongoClient[dict[str, Any]]
T0 = datetime.datetime(2024, 5, 1, 12, 0)


@pytest.fixture
def keyed(client: Client) -> Collection[dict[str, Any]]:
    coll = client.status_quirks.keyed
    coll.insert_many([{"_id": i, "a": i % 2, "b": str(i)} for i in range(4)])
    coll.create_index("a")
    return coll


def test_return_key_with_show_record_id_is_the_key_alone(
    keyed: Collection[dict[str, Any]],
) -> None:
    both = {"return_key": True, "show_record_id": True}
    assert list(keyed.find({"a": 1}, **both).hint("a_1")) == [{"a": 1}, {"a": 1}]
    assert list(keyed.find({"_id": 2}, **both)) == [{"_id": 2}]
    # A collection scan has no key: empty documents, still no record id.
    assert list(keyed.find({"a": 0}, **both).hint({"$natural": 1})) == [{}, {}]
    # The same across getMores.
    assert list(keyed.find({}, **both).hint("a_1").batch_size(1)) == [{"a": 0}] * 2 + [{"a": 1}] * 2
    # Either one alone is unchanged.
    assert list(keyed.find({"a": 1}, return_key=True).hint("a_1")) == [{"a": 1}, {"a": 1}]
    shown = list(keyed.find({"_id": 3}, {"b": 1}, show_record_id=True))
    assert list(shown[0]) == ["_id", "b", "$recordId"]
    assert type(shown[0]["$recordId"]) is Int64


@pytest.mark.parametrize("ordered", [True, False], ids=["ordered", "unordered"])
def test_time_series_measurements_may_share_an_id(client: Client, ordered: bool) -> None:
    db = client.status_quirks
    db.create_collection("readings", timeseries={"timeField": "t", "metaField": "m"})
    coll = db.readings
    first = [
        {"_id": 1, "t": T0, "m": "a", "v": 1},
        {"_id": 1, "t": T0, "m": "b", "v": 2},
    ]
    result = coll.insert_many(first, ordered=ordered)
    assert result.inserted_ids == [1, 1]
    # And again: an `_id` already stored is no duplicate either.
    reply = db.command(
        "insert",
        "readings",
        documents=[{"_id": 1, "t": T0, "m": "c", "v": 3}, {"_id": 2, "t": T0, "m": "c", "v": 4}],
        ordered=ordered,
    )
    assert reply == {"n": 2, "ok": 1.0}
    found = list(coll.find({"_id": 1}, {"_id": 1, "v": 1}).sort("v", 1))
    assert found == [{"_id": 1, "v": 1}, {"_id": 1, "v": 2}, {"_id": 1, "v": 3}]
    assert coll.count_documents({"_id": 1}) == 3
    assert coll.count_documents({}) == 4
    assert coll.find_one({"_id": 1, "m": "b"}, {"v": 1, "_id": 0}) == {"v": 2}
    assert [
        d["_id"] for d in coll.aggregate([{"$group": {"_id": "$_id"}}, {"$sort": {"_id": 1}}])
    ] == [
        1,
        2,
    ]
    # deleteOne takes one of them, deleteMany the rest (MongoDB 7.0 deletes by any filter).
    assert coll.delete_one({"_id": 1}).deleted_count == 1
    assert coll.count_documents({"_id": 1}) == 2
    assert coll.delete_many({"_id": 1}).deleted_count == 2
    assert [d["_id"] for d in coll.find()] == [2]
    # Its `_id` index stays hidden, as MongoDB lists none.
    assert [ix["name"] for ix in coll.list_indexes()] == ["m_1_t_1"]


def test_a_plain_collection_still_refuses_a_duplicate_id(client: Client) -> None:
    reply = client.status_quirks.command(
        "insert", "plain", documents=[{"_id": 1}, {"_id": 1}], ordered=False
    )
    assert reply["n"] == 1
    assert [e["code"] for e in reply["writeErrors"]] == [11000]


def test_shared_ids_survive_a_restart(start_server: Callable[..., ServerThread]) -> None:
    srv = start_server()
    with MongoClient(srv.uri) as client:
        client.q.create_collection("r", timeseries={"timeField": "t"})
        client.q.r.insert_many([{"_id": 7, "t": T0}, {"_id": 7, "t": T0}])
    srv.stop()
    again = start_server()
    with MongoClient(again.uri) as client:
        client.q.r.insert_one({"_id": 7, "t": T0})
        assert client.q.r.count_documents({"_id": 7}) == 3
