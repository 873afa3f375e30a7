"""The express path answers exactly as the general path: the same requests go to a server with it
on and to one with `ebbdbExpressPath` false, over raw sockets, and the replies are compared byte
for byte (tests/e2e/express_pair.py says what is normalised: the header ids and a random cursor
id). Each test also checks, through serverStatus' `ebbdb.expressPath`, that the express server did
take the express path where it should (and that the other never did), and where it must not."""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bson
import pytest
from bson import Int64, ObjectId
from pymongo import MongoClient, UpdateOne

from tests.e2e.express_pair import Pair, server_pair

DB = "xp"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[Pair]:
    with server_pair(tmp_path) as p:
        yield p


def _insert(pair: Pair, coll: str, *docs: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """An insert as drivers send it: the documents as a kind-1 sequence."""
    return pair.same({"insert": coll, "ordered": True, **fields, "$db": DB}, [("documents", docs)])


def _find_one(pair: Pair, coll: str, _id: Any, **fields: Any) -> dict[str, Any]:
    body = {"find": coll, "filter": {"_id": _id}, "limit": 1, "singleBatch": True}
    return pair.same({**body, **fields, "$db": DB})


def _update(pair: Pair, coll: str, *statements: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return pair.same(
        {"update": coll, "ordered": True, **fields, "$db": DB}, [("updates", statements)]
    )


def _delete(pair: Pair, coll: str, _id: Any, limit: int = 1) -> dict[str, Any]:
    return pair.same(
        {"delete": coll, "ordered": True, "$db": DB},
        [("deletes", [{"q": {"_id": _id}, "limit": limit}])],
    )


def _taken(pair: Pair) -> dict[str, int]:
    on, off = pair.opcounters()  # first: each server has had the same requests until now
    assert on == off, (on, off)  # counted alike (the handshakes of this look included)
    assert pair.general_taken() == {}, (
        "the server with ebbdbExpressPath false took the express path"
    )
    return pair.express_taken()


def test_insert_find_update_delete_by_id(pair: Pair) -> None:
    pair.both({"create": "c", "$db": DB})
    oid = ObjectId()
    assert _insert(pair, "c", {"_id": oid, "a": 1, "s": "x"})["n"] == 1
    dup = _insert(pair, "c", {"_id": oid, "a": 2})
    assert dup["writeErrors"][0]["code"] == 11000
    _insert(pair, "c", {"_id": 7, "a": 1}, {"_id": 7})  # two documents: the general path
    _insert(pair, "c", {"_id": "str", "n": Int64(5)}, ordered=False)
    _insert(pair, "c", {"_id": 1.5, "d": datetime.datetime(2020, 1, 2)})
    assert _find_one(pair, "c", oid)["cursor"]["firstBatch"][0]["a"] == 1
    assert _find_one(pair, "c", ObjectId())["cursor"]["firstBatch"] == []
    _find_one(pair, "c", "str")
    _find_one(pair, "c", 7.0)  # a number: equal to 7 by value
    _find_one(pair, "c", Int64(7))
    _find_one(pair, "c", 1.5)
    long_id = "é" * 200  # past the express path's string length: the general path's
    _insert(pair, "c", {"_id": long_id})
    _find_one(pair, "c", long_id)
    _update(pair, "c", {"q": {"_id": long_id}, "u": {"$set": {"a": 1}}})
    pair.same({"find": "c", "filter": {"_id": oid}, "$db": DB})  # find, not findOne
    pair.same({"find": "c", "filter": {"_id": oid}, "limit": 5, "$db": DB})
    pair.same({"find": "c", "filter": {"_id": oid}, "limit": -1, "$db": DB})
    pair.same({"find": "c", "filter": {"_id": oid}, "projection": {"a": 1}, "$db": DB})
    pair.same({"find": "c", "filter": {"_id": oid}, "batchSize": 0, "$db": DB})
    pair.same({"find": "c", "filter": {"_id": {"$eq": oid}}, "$db": DB})
    pair.same({"find": "c", "filter": {"_id": oid}, "bogus": 1, "$db": DB})  # 40415 both
    pair.same({"find": "nothere", "filter": {"_id": oid}, "$db": DB})
    # update by _id: $set, $inc, nothing matched, a failing operator, an immutable _id, upsert
    assert _update(pair, "c", {"q": {"_id": oid}, "u": {"$set": {"b": [1, 2]}}})["nModified"] == 1
    _update(pair, "c", {"q": {"_id": oid}, "u": {"$inc": {"a": 1}}})
    _update(pair, "c", {"q": {"_id": oid}, "u": {"$set": {"a": 2}}})  # unchanged: nModified 0
    _update(pair, "c", {"q": {"_id": ObjectId()}, "u": {"$inc": {"a": 1}}})
    failed = _update(pair, "c", {"q": {"_id": oid}, "u": {"$inc": {"s": 1}}})
    assert failed["writeErrors"][0]["code"] == 14
    _update(pair, "c", {"q": {"_id": oid}, "u": {"$set": {"_id": 5}}})
    _update(pair, "c", {"q": {"_id": 99}, "u": {"$set": {"a": 1}}, "upsert": True})
    _update(pair, "c", {"q": {"_id": oid}, "u": {"$bogus": {"a": 1}}})
    _update(pair, "c", {"q": {"_id": oid}, "u": {"a": 5}})  # a replacement: the general path
    # several statements, ordered and not, one failing in the middle
    statements = [
        {"q": {"_id": oid}, "u": {"$inc": {"a": 1}}},
        {"q": {"_id": "str"}, "u": {"$inc": {"n": "x"}}},
        {"q": {"_id": 7}, "u": {"$set": {"z": 1}}},
    ]
    _update(pair, "c", *statements)
    _update(pair, "c", *statements, ordered=False)
    _find_one(pair, "c", oid)
    _find_one(pair, "c", 7)
    # delete by _id
    assert _delete(pair, "c", oid)["n"] == 1
    assert _delete(pair, "c", oid)["n"] == 0
    _delete(pair, "c", 7, limit=0)
    # findAndModify by _id (answered by the general path on both)
    pair.same(
        {
            "findAndModify": "c",
            "query": {"_id": "str"},
            "update": {"$inc": {"n": 1}},
            "new": True,
            "$db": DB,
        }
    )
    pair.same({"findAndModify": "c", "query": {"_id": "nope"}, "remove": True, "$db": DB})
    fam = {"findAndModify": "c", "$db": DB}
    for _id in ("str", 7, "nope"):
        pair.same({**fam, "query": {"_id": _id}, "update": {"$inc": {"n": 1}}})
        pair.same({**fam, "query": {"_id": _id}, "update": {"$set": {"m": 1}}, "new": True})
    pair.same({**fam, "query": {"_id": "str"}, "update": {"$inc": {"s": 1}}, "new": True})
    pair.same({**fam, "query": {"_id": "str"}, "update": {"$inc": {"m": "x"}}})  # fails
    pair.same({**fam, "query": {"_id": "str"}, "update": {"$bogus": {"m": 1}}})
    pair.same({**fam, "query": {"_id": "str"}, "update": {"$set": {"_id": 1}}})
    pair.same({**fam, "query": {"_id": "str"}, "update": {"m": 1}})  # replacement: general
    pair.same({**fam, "query": {"_id": "str"}, "remove": True, "new": True})
    pair.same({**fam, "query": {"_id": "str"}, "remove": True, "update": {"$set": {"a": 1}}})
    pair.same({**fam, "query": {"_id": "x"}, "update": {"$set": {"a": 1}}, "upsert": True})
    pair.same({**fam, "query": {"_id": "str"}, "update": {"$set": {"a": 1}}, "fields": {"a": 1}})
    pair.same({**fam, "query": {"_id": "str"}, "remove": True})
    pair.same({**fam, "query": {"_id": "str"}, "remove": True})  # gone
    pair.same({"findandmodify": "c", "query": {"_id": 7}, "remove": True, "$db": DB})
    taken = _taken(pair)
    for name in ("insert", "find", "update", "delete", "findAndModify"):
        assert taken.get(name, 0) > 0, taken


def test_insert_without_id_too_large_and_refused_by_validator(pair: Pair) -> None:
    pair.both({"create": "v", "validator": {"a": {"$type": "int"}}, "$db": DB})
    _insert(pair, "v", {"a": 1, "b": "no _id"})  # the ids differ: only the reply is compared
    refused = _insert(pair, "v", {"_id": 1, "a": "not an int"})
    assert refused["writeErrors"][0]["code"] == 121
    _insert(pair, "v", {"_id": 2, "a": "x"}, bypassDocumentValidation=True)
    _update(pair, "v", {"q": {"_id": 2}, "u": {"$set": {"b": 1}}})  # still refused: a is a string
    _update(pair, "v", {"q": {"_id": 2}, "u": {"$set": {"a": 3}}}, bypassDocumentValidation=True)
    _insert(pair, "v", {"_id": 3, "a": 1, "big": "x" * (16 * 1024 * 1024)})
    _insert(pair, "v", {"_id": 4, "a": 1, "big": "x" * (300 * 1024)})  # past a small write
    _update(pair, "v", {"q": {"_id": 4}, "u": {"$set": {"more": "y" * (16 * 1024 * 1024)}}})
    _find_one(pair, "v", 4)
    assert _taken(pair).get("insert", 0) >= 2


def test_ttl_hidden_documents(pair: Pair) -> None:
    pair.both({"create": "t", "$db": DB})
    index = {"key": {"at": 1}, "name": "at_1", "expireAfterSeconds": 60}
    pair.both({"createIndexes": "t", "indexes": [index], "$db": DB})
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    _insert(pair, "t", {"_id": 1, "at": now}, {"_id": 2, "at": "never"})
    _insert(pair, "t", {"_id": 3, "at": now})
    _find_one(pair, "t", 1)
    pair.both({"ttlClock": 1, "advanceSeconds": 120, "$db": "admin"})
    assert _find_one(pair, "t", 1)["cursor"]["firstBatch"] == []  # expired: hidden
    _find_one(pair, "t", 2)
    assert _update(pair, "t", {"q": {"_id": 1}, "u": {"$set": {"x": 1}}})["n"] == 0
    _update(pair, "t", {"q": {"_id": 2}, "u": {"$set": {"x": 1}}})
    assert _delete(pair, "t", 3)["n"] == 0
    fam = {"findAndModify": "t", "query": {"_id": 3}, "$db": DB}
    assert pair.same({**fam, "update": {"$set": {"y": 1}}, "new": True})["value"] is None
    pair.same({**fam, "remove": True})
    _insert(pair, "t", {"_id": 1})  # hidden, not gone: still a duplicate
    pair.same({"find": "t", "filter": {}, "$db": DB})
    pair.both({"ttlClock": 1, "reset": True, "$db": "admin"})
    taken = _taken(pair)
    assert taken.get("find", 0) >= 3 and taken.get("delete", 0) >= 1


def test_default_collation_leaves_the_express_path(pair: Pair) -> None:
    collation = {"locale": "en", "strength": 2}
    pair.both({"create": "co", "collation": collation, "$db": DB})
    _insert(pair, "co", {"_id": "abc", "n": 1})
    assert _find_one(pair, "co", "ABC")["cursor"]["firstBatch"] != []  # equal under the collation
    _update(pair, "co", {"q": {"_id": "ABC"}, "u": {"$inc": {"n": 1}}})
    _insert(pair, "co", {"_id": "ABC"})  # a duplicate under the collation
    _delete(pair, "co", "aBc")
    assert _taken(pair) == {}


def test_views_capped_clustered_and_time_series(pair: Pair) -> None:
    pair.both({"create": "base", "$db": DB})
    pair.both({"create": "view", "viewOn": "base", "pipeline": [], "$db": DB})
    pair.both({"create": "capped", "capped": True, "size": 4096, "max": 3, "$db": DB})
    pair.both({"create": "clus", "clusteredIndex": {"key": {"_id": 1}, "unique": True}, "$db": DB})
    pair.both({"create": "ts", "timeseries": {"timeField": "t", "metaField": "m"}, "$db": DB})
    _insert(pair, "base", {"_id": 1, "a": 1})
    _find_one(pair, "view", 1)
    _insert(pair, "view", {"_id": 2})
    _update(pair, "view", {"q": {"_id": 1}, "u": {"$set": {"a": 2}}})
    _delete(pair, "view", 1)
    for i in range(5):
        _insert(pair, "capped", {"_id": i, "a": "x"})
    _find_one(pair, "capped", 4)
    _find_one(pair, "capped", 0)  # rolled out
    _update(pair, "capped", {"q": {"_id": 4}, "u": {"$set": {"a": "y"}}})
    _update(pair, "capped", {"q": {"_id": 4}, "u": {"$set": {"a": "longer"}}})
    _delete(pair, "capped", 4)
    _insert(pair, "clus", {"_id": 1, "a": 1})
    _insert(pair, "clus", {"_id": 1})
    _find_one(pair, "clus", 1)
    _update(pair, "clus", {"q": {"_id": 1}, "u": {"$set": {"a": 2}}})
    _delete(pair, "clus", 1)
    when = datetime.datetime(2024, 1, 1)
    _insert(pair, "ts", {"_id": 1, "t": when, "m": 1, "v": 1})
    _insert(pair, "ts", {"_id": 2, "m": 1})  # no time field
    _find_one(pair, "ts", 1)
    _update(pair, "ts", {"q": {"_id": 1}, "u": {"$set": {"v": 2}}})
    _delete(pair, "ts", 1)
    for coll in ("view", "capped", "clus", "ts", "co"):
        fam = {"findAndModify": coll, "query": {"_id": 1}, "$db": DB}
        pair.same({**fam, "update": {"$set": {"a": 9}}, "new": True})
        pair.same({**fam, "remove": True})
    taken = _taken(pair)
    assert taken == {"insert": 1}, taken  # only the plain collection's insert


def test_max_time_ms_and_other_options_leave_it(pair: Pair) -> None:
    pair.both({"create": "m", "$db": DB})
    _insert(pair, "m", {"_id": 1})
    _find_one(pair, "m", 1, maxTimeMS=1000)
    _find_one(pair, "m", 1, maxTimeMS="x")
    _find_one(pair, "m", 1, hint={"_id": 1})
    _find_one(pair, "m", 1, collation={"locale": "fr"})
    _find_one(pair, "m", 1, let={"a": 1})
    _find_one(pair, "m", 1, sort={"a": 1})
    _find_one(pair, "m", 1, skip=1)
    _find_one(pair, "m", 1, txnNumber=Int64(1))
    _find_one(pair, "m", {"$gt": 0})
    _find_one(pair, "m", None)
    _find_one(pair, "m", [1])
    _update(pair, "m", {"q": {"_id": 1}, "u": {"$set": {"a": 1}}}, maxTimeMS=1000)
    _update(pair, "m", {"q": {"_id": 1}, "u": {"$set": {"a": 1}}}, writeConcern={"w": 1})
    _update(pair, "m", {"q": {"_id": 1}, "u": {"$set": {"a.$": 1}}})
    _update(pair, "m", {"q": {"_id": 1}, "u": {"$set": {"b": 1}}, "multi": True})
    _insert(pair, "m", {"_id": 2}, maxTimeMS=1000)
    _insert(pair, "m", {"_id": 3}, writeConcern={"w": 0})
    _insert(pair, "m", {"_id": 4}, lsid={"id": "not a uuid"})
    _delete(pair, "m", 2)
    fam = {"findAndModify": "m", "query": {"_id": 1}, "update": {"$set": {"a": 2}}, "$db": DB}
    pair.same({**fam, "maxTimeMS": 1000})
    pair.same({**fam, "sort": {"a": 1}})
    pair.same({**fam, "let": {"x": 1}})
    pair.same({**fam, "writeConcern": {"w": 1}})
    assert _taken(pair) == {"insert": 1, "delete": 1}


def test_get_more(pair: Pair) -> None:
    pair.both({"create": "g", "$db": DB})
    _insert(pair, "g", *({"_id": i, "v": "x" * i} for i in range(250)))
    first = pair.same({"find": "g", "filter": {}, "batchSize": 2, "$db": DB})
    assert first["cursor"]["id"] != 0
    pair.get_more(DB, "g", batchSize=100)
    pair.get_more(DB, "g", batchSize=0)
    pair.get_more(DB, "g")  # to the end
    pair.same({"getMore": Int64(12345), "collection": "g", "$db": DB})  # not found
    pair.same({"find": "g", "filter": {"v": {"$regex": "^x"}}, "batchSize": 3, "$db": DB})
    pair.get_more(DB, "g", batchSize=5)
    pair.get_more(DB, "other", batchSize=5)  # another namespace: refused
    pair.get_more(DB, "g", batchSize=5, maxTimeMS=10)  # not an awaitData cursor: refused
    pair.same({"find": "g", "filter": {"_id": {"$gte": 240}}, "batchSize": 1, "$db": DB})
    pair.get_more(DB, "g", batchSize=2)
    pair.get_more(DB, "g", batchSize=200)
    assert _taken(pair).get("getMore", 0) >= 3


def test_get_more_in_a_session(pair: Pair) -> None:
    pair.both({"create": "gs", "$db": DB})
    _insert(pair, "gs", *({"_id": i} for i in range(10)))
    lsid = {"id": bson.Binary(bytes(range(16)), 4)}
    other = {"id": bson.Binary(bytes(range(1, 17)), 4)}
    pair.same({"find": "gs", "filter": {}, "batchSize": 2, "lsid": lsid, "$db": DB})
    pair.get_more(DB, "gs", batchSize=2, lsid=lsid)
    pair.get_more(DB, "gs", batchSize=2, lsid=other)  # another session: refused, cursor kept
    pair.get_more(DB, "gs", batchSize=2)  # no session: refused
    assert _taken(pair).get("getMore", 0) >= 1


def test_auth_leaves_the_express_path(tmp_path: Path) -> None:
    with server_pair(tmp_path, auth=True) as pair:
        _find_one(pair, "c", 1)  # unauthorized, alike
        _insert(pair, "c", {"_id": 1})
        _update(pair, "c", {"q": {"_id": 1}, "u": {"$set": {"a": 1}}})
        _delete(pair, "c", 1)
        pair.same({"getMore": Int64(1), "collection": "c", "$db": DB})


def test_pymongo_sees_the_same(pair: Pair) -> None:
    """The same operations through pymongo (sanity: what an application sees)."""
    seen = []
    for server in (pair.on, pair.off):
        with MongoClient(server.uri) as client:
            coll = client[DB]["p"]
            coll.insert_many([{"_id": i, "n": i} for i in range(300)])
            out: list[Any] = [coll.insert_one({"_id": "one"}).inserted_id]
            out.append(coll.find_one({"_id": 5}))
            out.append(coll.update_one({"_id": 5}, {"$inc": {"n": 10}}).raw_result)
            out.append(coll.find_one({"_id": 5}))
            result = coll.bulk_write(
                [UpdateOne({"_id": i}, {"$set": {"b": i}}) for i in range(200)]
            )
            out.append(result.bulk_api_result)
            out.append(coll.delete_one({"_id": 6}).raw_result)
            out.append(list(coll.find()))
            out.append(coll.find_one_and_update({"_id": 7}, {"$set": {"c": 1}}))
            seen.append(out)
    assert seen[0] == seen[1]
    taken = pair.express_taken()
    assert taken.get("getMore", 0) >= 1 and taken.get("update", 0) >= 2, taken


def test_profiling_and_fail_points_leave_it(pair: Pair) -> None:
    pair.both({"create": "pf", "$db": DB})
    _insert(pair, "pf", {"_id": 1})
    pair.both({"profile": 2, "$db": DB})
    _find_one(pair, "pf", 1)
    _update(pair, "pf", {"q": {"_id": 1}, "u": {"$set": {"a": 1}}})
    pair.both({"profile": 0, "$db": DB})
    fail = {"times": 1}, {"failCommands": ["find"], "errorCode": 2}
    pair.both(
        {"configureFailPoint": "failCommand", "mode": fail[0], "data": fail[1], "$db": "admin"}
    )
    _find_one(pair, "pf", 1)  # failed by the fail point, alike
    _find_one(pair, "pf", 1)  # its one time used up: the fail point is off, the path taken
    pair.both({"configureFailPoint": "failCommand", "mode": "off", "$db": "admin"})
    assert _taken(pair) == {"insert": 1, "find": 1}


def test_sessions_keep_the_express_path(pair: Pair) -> None:
    """A driver's implicit session (its `lsid` on every command) keeps a request on the express
    path; the connection's cached session key never hides a changed or malformed lsid."""
    pair.both({"create": "ls", "$db": DB})
    a = {"id": bson.Binary(bytes(range(16)), 4)}
    b = {"id": bson.Binary(bytes(range(1, 17)), 4)}
    with_uid = {"id": a["id"], "uid": bson.Binary(bytes(32), 0)}
    for i, lsid in enumerate((a, a, b, a, with_uid, with_uid, a)):
        _insert(pair, "ls", {"_id": i, "v": 0}, lsid=lsid)
        _find_one(pair, "ls", i, lsid=lsid)
        _update(pair, "ls", {"q": {"_id": i}, "u": {"$inc": {"v": 1}}}, lsid=lsid)
    # Malformed lsids right after a good one (the cache must not answer for them): the general
    # path words each error.
    for bad in (
        {"id": a["id"], "x": 1},
        {"id": bson.Binary(bytes(range(16)), 3)},
        {"id": bson.Binary(bytes(15), 4)},
        {"id": a["id"], "uid": bson.Binary(bytes(31), 0)},
        {},
        "a",
    ):
        _find_one(pair, "ls", 0, lsid=a)
        _find_one(pair, "ls", 0, lsid=bad)
        _insert(pair, "ls", {"_id": f"bad {bad!r}"}, lsid=bad)
    # Both servers know the same sessions (their ids and owners), used as often.
    pair.same(
        {
            "aggregate": 1,
            "pipeline": [
                {"$listLocalSessions": {}},
                {"$project": {"_id": 1}},
                {"$sort": {"_id.id": 1, "_id.uid": 1}},
            ],
            "cursor": {},
            "$db": "admin",
        }
    )
    assert _taken(pair) == {"insert": 7, "find": 13, "update": 7}
