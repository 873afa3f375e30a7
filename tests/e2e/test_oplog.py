"""The oplog of a one-member replica set, read through pymongo: local.oplog.rs is a capped
collection sized by --oplogSize, its entries have MongoDB's shape (ts, t, v, op, ns, ui, o, o2,
wall), every change to a user collection gets one, written in the same transaction as the change
(a write that fails leaves none), DDL is logged as commands, and a client reads it by `ts` and
tails it."""

from __future__ import annotations

import datetime
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from bson import Int64, Timestamp
from pymongo import CursorType, MongoClient
from pymongo.errors import BulkWriteError, OperationFailure, WriteError

from ebbdb.server.embedded import ServerThread

Doc = dict[str, Any]


@pytest.fixture
def replset(start_server: Callable[..., ServerThread]) -> ServerThread:
    """A one-member replica set of the test's own, so a fresh oplog for each test."""
    return start_server({"enableTestCommands": 1}, repl_set="rs0")


@pytest.fixture
def client(replset: ServerThread) -> Iterator[MongoClient[Doc]]:
    # No retryable writes: the entries' shapes are compared without their session fields
    # (tests/e2e/test_retryable_writes.py checks those).
    with MongoClient(replset.uri, serverSelectionTimeoutMS=5000, retryWrites=False) as c:
        yield c


def entries(client: MongoClient[Doc], **query: Any) -> list[Doc]:
    return list(client.local["oplog.rs"].find(query))


def uuid_of(client: MongoClient[Doc], db: str, name: str) -> Any:
    (info,) = client[db].list_collections(filter={"name": name})
    return info["info"]["uuid"]


def without_times(entry: Doc) -> Doc:
    """An entry without the fields that name when it was written."""
    return {k: v for k, v in entry.items() if k not in ("ts", "wall")}


def test_the_oplog_is_a_capped_collection_of_the_configured_size(tmp_path: Any) -> None:
    srv = ServerThread(str(tmp_path / "d"), repl_set="rs0", oplog_size_mb=1).start()
    try:
        with MongoClient(srv.uri) as c:
            assert c.local["oplog.rs"].options() == {"capped": True, "size": 1024 * 1024}
            # Old entries go as new ones come: the oplog stays within its size.
            c.t.big.insert_many([{"pad": "x" * 10_000} for _ in range(300)])
            stats = c.local.command("collStats", "oplog.rs")
            assert stats["size"] <= 1024 * 1024
            assert 90 <= stats["count"] < 110
            first = c.local["oplog.rs"].find_one()
            assert first is not None and first["op"] == "i" and first["ns"] == "t.big"
    finally:
        srv.stop()


def test_a_standalone_server_has_no_oplog(tmp_path: Any) -> None:
    srv = ServerThread(str(tmp_path / "d")).start()
    try:
        with MongoClient(srv.uri) as c:
            c.t.c.insert_one({"_id": 1})
            assert "oplog.rs" not in c.local.list_collection_names()
    finally:
        srv.stop()


def test_document_changes_have_mongodb_s_entry_shape(client: MongoClient[Doc]) -> None:
    coll = client.test.c
    coll.insert_one({"_id": 1, "a": 1, "arr": [1, 2, 3], "sub": {"x": 1, "y": 2}})
    ui = uuid_of(client, "test", "c")
    coll.update_one({"_id": 1}, {"$set": {"a": 2, "sub.x": 5, "n": "new"}, "$unset": {"sub.y": 1}})
    coll.update_one({"_id": 1}, {"$pop": {"arr": 1}})
    coll.update_one({"_id": 1}, {"$set": {"arr.0": 9}})
    coll.replace_one({"_id": 1}, {"b": 1})
    coll.delete_one({"_id": 1})
    got = entries(client, ns="test.c")
    assert [without_times(e) for e in got] == [
        {
            "op": "i",
            "ns": "test.c",
            "ui": ui,
            "o": {"_id": 1, "a": 1, "arr": [1, 2, 3], "sub": {"x": 1, "y": 2}},
            "o2": {"_id": 1},
            "t": 1,
            "v": 2,
        },
        {
            "op": "u",
            "ns": "test.c",
            "ui": ui,
            "o": {
                "$v": 2,
                "diff": {
                    "u": {"a": 2},
                    "i": {"n": "new"},
                    "ssub": {"d": {"y": False}, "u": {"x": 5}},
                },
            },
            "o2": {"_id": 1},
            "t": 1,
            "v": 2,
        },
        {
            "op": "u",
            "ns": "test.c",
            "ui": ui,
            "o": {"$v": 2, "diff": {"sarr": {"a": True, "l": 2}}},
            "o2": {"_id": 1},
            "t": 1,
            "v": 2,
        },
        {
            "op": "u",
            "ns": "test.c",
            "ui": ui,
            "o": {"$v": 2, "diff": {"sarr": {"a": True, "u0": 9}}},
            "o2": {"_id": 1},
            "t": 1,
            "v": 2,
        },
        {
            "op": "u",
            "ns": "test.c",
            "ui": ui,
            "o": {"_id": 1, "b": 1},
            "o2": {"_id": 1},
            "t": 1,
            "v": 2,
        },
        {"op": "d", "ns": "test.c", "ui": ui, "o": {"_id": 1}, "t": 1, "v": 2},
    ]
    for entry in got:
        assert type(entry["t"]) is Int64 and type(entry["v"]) is Int64
        assert isinstance(entry["ts"], Timestamp)
        assert isinstance(entry["wall"], datetime.datetime)
    stamps = [e["ts"] for e in got]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)


def test_ddl_is_logged_as_commands(client: MongoClient[Doc]) -> None:
    db = client.ddl
    db.create_collection("a", validator={"x": {"$type": "int"}})
    ui = uuid_of(client, "ddl", "a")
    db.a.create_index("x", name="x_1")
    db.command("collMod", "a", validationLevel="moderate")
    db.a.drop_index("x_1")
    db.a.rename("b")
    db.b.drop()
    db.c.insert_one({"_id": 1})  # created by the insert
    ui_c = uuid_of(client, "ddl", "c")
    client.drop_database("ddl")
    got = [
        (e["op"], e["ns"], e.get("ui"), e["o"], e.get("o2"))
        for e in entries(client, ns={"$regex": "^ddl\\."})
    ]
    id_index = {"v": 2, "key": {"_id": 1}, "name": "_id_"}
    assert got == [
        (
            "c",
            "ddl.$cmd",
            ui,
            {"create": "a", "validator": {"x": {"$type": "int"}}, "idIndex": id_index},
            None,
        ),
        ("c", "ddl.$cmd", ui, {"createIndexes": "a", "v": 2, "key": {"x": 1}, "name": "x_1"}, None),
        ("c", "ddl.$cmd", ui, {"collMod": "a", "validationLevel": "moderate"}, None),
        (
            "c",
            "ddl.$cmd",
            ui,
            {"dropIndexes": "a", "index": "x_1"},
            {"v": 2, "key": {"x": 1}, "name": "x_1"},
        ),
        (
            "c",
            "ddl.$cmd",
            ui,
            {"renameCollection": "ddl.a", "to": "ddl.b", "stayTemp": False},
            None,
        ),
        ("c", "ddl.$cmd", ui, {"drop": "b"}, None),
        ("c", "ddl.$cmd", ui_c, {"create": "c", "idIndex": id_index}, None),
        ("i", "ddl.c", ui_c, {"_id": 1}, {"_id": 1}),
        ("c", "ddl.$cmd", ui_c, {"drop": "c"}, None),
        ("c", "ddl.$cmd", None, {"dropDatabase": 1}, None),
    ]


def test_a_failed_write_leaves_no_entry(client: MongoClient[Doc]) -> None:
    coll = client.test.f
    coll.insert_one({"_id": 1})
    with pytest.raises(BulkWriteError):
        coll.insert_many([{"_id": 2}, {"_id": 1}, {"_id": 3}])
    client.test.create_collection("v", validator={"n": {"$type": "int"}})
    client.test.v.insert_one({"_id": 1, "n": 1})
    with pytest.raises(WriteError):
        client.test.v.update_one({"_id": 1}, {"$set": {"n": "text"}})
    got = [(e["op"], e["o"]) for e in entries(client, ns={"$in": ["test.f", "test.v"]})]
    assert got == [("i", {"_id": 1}), ("i", {"_id": 2}), ("i", {"_id": 1, "n": 1})]


def test_writes_to_local_are_not_logged(client: MongoClient[Doc]) -> None:
    client.local.mine.insert_one({"_id": 1})
    assert entries(client, ns={"$regex": "^local\\."}) == []


def test_ttl_deletes_are_delete_entries(client: MongoClient[Doc]) -> None:
    coll = client.test.ttl
    coll.create_index("at", expireAfterSeconds=60)
    coll.insert_one({"_id": 1, "at": datetime.datetime.now(datetime.UTC)})
    client.admin.command("ttlClock", advanceSeconds=120)
    client.admin.command("ttlMonitorPass")
    assert coll.count_documents({}) == 0
    got = [(e["op"], e["o"]) for e in entries(client, ns="test.ttl")]
    assert got == [("i", {"_id": 1, "at": got[0][1]["at"]}), ("d", {"_id": 1})]


def test_pre_images_are_kept_where_the_collection_asks(client: MongoClient[Doc]) -> None:
    client.test.create_collection("p", changeStreamPreAndPostImages={"enabled": True})
    client.test.p.insert_one({"_id": 1, "n": 1})
    client.test.p.update_one({"_id": 1}, {"$inc": {"n": 1}})
    client.test.p.delete_one({"_id": 1})
    client.test.q.insert_one({"_id": 1})
    client.test.q.delete_one({"_id": 1})
    ui = uuid_of(client, "test", "p")
    stamps = [e["ts"] for e in entries(client, ns="test.p", op={"$in": ["u", "d"]})]
    images = list(client.config["system.preimages"].find())
    assert [(i["_id"], i["preImage"]) for i in images] == [
        ({"nsUUID": ui, "ts": stamps[0], "applyOpsIndex": 0}, {"_id": 1, "n": 1}),
        ({"nsUUID": ui, "ts": stamps[1], "applyOpsIndex": 0}, {"_id": 1, "n": 2}),
    ]


def test_read_by_ts_and_tail(client: MongoClient[Doc]) -> None:
    coll = client.test.tail
    coll.insert_many([{"_id": i} for i in range(3)])
    middle = entries(client, ns="test.tail")[1]["ts"]
    after = entries(client, ts={"$gt": middle})
    assert [e["o"] for e in after if e["ns"] == "test.tail"] == [{"_id": 2}]
    last = entries(client)[-1]["ts"]
    cursor = (
        client.local["oplog.rs"]
        .find({"ts": {"$gt": last}}, cursor_type=CursorType.TAILABLE_AWAIT)
        .max_await_time_ms(5000)
    )
    assert next(cursor, None) is None and cursor.alive  # nothing yet: the cursor waits on
    writer = threading.Timer(0.2, lambda: coll.insert_one({"_id": "late"}))
    writer.start()
    try:
        entry = next(cursor, None)
        while entry is None and cursor.alive:
            entry = next(cursor, None)
    finally:
        writer.join()
        cursor.close()
    assert entry is not None and entry["o"] == {"_id": "late"} and entry["ts"] > last


def test_timestamps_go_on_rising_after_a_restart(tmp_path: Any) -> None:
    path = str(tmp_path / "d")
    srv = ServerThread(path, repl_set="rs0").start()
    with MongoClient(srv.uri) as c:
        c.t.c.insert_one({"_id": 1})
        before = entries(c)[-1]["ts"]
    srv.stop()
    srv = ServerThread(path, repl_set="rs0").start()
    try:
        with MongoClient(srv.uri) as c:
            c.t.c.insert_one({"_id": 2})
            got = entries(c)
            assert got[-1]["ts"] > before
            assert [e["o"] for e in got if e["ns"] == "t.c"] == [{"_id": 1}, {"_id": 2}]
    finally:
        srv.stop()


def test_the_live_oplog_is_not_dropped_or_renamed(client: MongoClient[Doc]) -> None:
    for call, message in (
        (
            lambda: client.local.drop_collection("oplog.rs"),
            "can't drop live oplog while replicating",
        ),
        (
            lambda: client.local["oplog.rs"].rename("old"),
            "can't rename live oplog while replicating",
        ),
        (
            lambda: client.drop_database("local"),
            "Cannot drop 'local' database while replication is active",
        ),
    ):
        with pytest.raises(OperationFailure) as err:
            call()
        assert (err.value.code, err.value.details["errmsg"]) == (20, message)
    client.test.c.insert_one({"_id": 1})
    assert entries(client)[-1]["o"] == {"_id": 1}


def test_pre_images_go_with_the_oplog_entries_they_belong_to(tmp_path: Any) -> None:
    srv = ServerThread(str(tmp_path / "d"), repl_set="rs0", oplog_size_mb=1).start()
    try:
        with MongoClient(srv.uri) as c:
            c.t.create_collection("p", changeStreamPreAndPostImages={"enabled": True})
            c.t.p.insert_one({"_id": 1, "n": 0, "pad": "x" * 20_000})
            for _ in range(200):
                c.t.p.update_one({"_id": 1}, {"$inc": {"n": 1}})
                c.t.p.update_one({"_id": 1}, {"$set": {"pad": "y" * 20_000}})
                c.t.p.update_one({"_id": 1}, {"$set": {"pad": "x" * 20_000}})
            oldest = c.local["oplog.rs"].find_one()
            assert oldest is not None
            kept = [i["_id"]["ts"] for i in c.config["system.preimages"].find()]
            assert kept and min(kept) >= oldest["ts"]
            updates = c.local["oplog.rs"].count_documents({"ns": "t.p", "op": "u"})
            assert len(kept) == updates
    finally:
        srv.stop()


def test_the_first_entry_initiates_the_set(tmp_path: Any) -> None:
    path = str(tmp_path / "d")
    for _ in range(2):  # a restart initiates nothing
        srv = ServerThread(path, repl_set="rs0").start()
        try:
            with MongoClient(srv.uri) as c:
                got = [without_times(e) for e in entries(c)]
                assert got == [
                    {"op": "n", "ns": "", "o": {"msg": "initiating set"}, "t": 1, "v": 2}
                ]
        finally:
            srv.stop()


def replayed(client: MongoClient[Doc], ns: str) -> dict[Any, Doc]:
    """The documents of `ns` that replaying the oplog from its start builds."""
    docs: dict[Any, Doc] = {}

    def apply_diff(doc: Doc, diff: Doc) -> None:
        for key in diff.get("d", {}):
            doc.pop(key, None)
        doc.update(diff.get("u", {}))
        doc.update(diff.get("i", {}))
        for key, sub in diff.items():
            if len(key) > 1 and key[0] == "s":
                if sub.get("a") is True:
                    items = list(doc[key[1:]])
                    if "l" in sub:
                        del items[sub["l"] :]
                    for k, v in sub.items():
                        if k[0] == "u":
                            items.extend([None] * (int(k[1:]) + 1 - len(items)))
                            items[int(k[1:])] = v
                        elif k[0] == "s" and k != "s":
                            apply_diff(items[int(k[1:])], v)
                    doc[key[1:]] = items
                else:
                    apply_diff(doc[key[1:]], sub)

    db, _, name = ns.partition(".")
    for e in entries(client):
        if e["op"] == "c" and e["ns"] == f"{db}.$cmd" and e["o"].get("drop") == name:
            docs.clear()
        elif e["ns"] != ns:
            continue
        elif e["op"] == "i":
            docs[e["o"]["_id"]] = e["o"]
        elif e["op"] == "d":
            docs.pop(e["o"]["_id"])
        elif e["op"] == "u" and "$v" in e["o"]:
            apply_diff(docs[e["o2"]["_id"]], e["o"]["diff"])
        elif e["op"] == "u":
            docs[e["o2"]["_id"]] = e["o"]
    return docs


def held(client: MongoClient[Doc], ns: str) -> dict[Any, Doc]:
    db, _, name = ns.partition(".")
    return {d["_id"]: d for d in client[db][name].find()}


def test_the_oplog_matches_the_data_through_every_write_path(client: MongoClient[Doc]) -> None:
    from bson.son import SON

    db = client.m
    db.a.create_index("u", unique=True)
    db.a.insert_many([{"_id": i, "u": i} for i in range(3)])
    with pytest.raises(WriteError):  # fails on _id 1: no entry for it
        db.a.update_many({}, {"$set": {"u": 7}})
    with pytest.raises(WriteError):
        db.a.replace_one({"_id": 2}, {"u": 7})
    db.a.insert_one(SON([("_id", 10), ("s", SON([("x", 1), ("y", 2)]))]))
    db.a.update_one({"_id": 10}, {"$set": {"s": SON([("y", 2), ("x", 1)])}})  # reordered
    db.a.update_one({"_id": 10}, [{"$replaceWith": {"s": "$s", "_id": "$_id"}}])
    db.create_collection("cap", capped=True, size=4096, max=2)
    for i in range(4):
        db.cap.insert_one({"_id": i})
    db.src.insert_many([{"_id": i} for i in range(5)])
    list(db.src.aggregate([{"$out": "outc"}]))
    list(db.src.aggregate([{"$match": {"_id": {"$lt": 2}}}, {"$out": "outc"}]))
    db.command("cloneCollectionAsCapped", "src", toCollection="cl", size=100_000)
    db.command("convertToCapped", "src", size=100_000)
    for name in ("a", "cap", "outc", "cl", "src"):
        assert replayed(client, f"m.{name}") == held(client, f"m.{name}"), name
    assert held(client, "m.cap") == {2: {"_id": 2}, 3: {"_id": 3}}
    assert list(held(client, "m.outc")) == [0, 1]


def test_clients_do_not_write_the_oplog(client: MongoClient[Doc]) -> None:
    oplog = client.local["oplog.rs"]
    before = entries(client)
    for call in (
        lambda: oplog.insert_one({"x": 1}),
        lambda: oplog.update_one({}, {"$set": {"x": 1}}),
        lambda: oplog.delete_many({}),
        lambda: oplog.create_index("x"),
    ):
        with pytest.raises(OperationFailure) as err:
            call()
        assert err.value.code == 73, err.value.details
    assert entries(client) == before


def test_oplog_replay_is_taken_and_ignored(client: MongoClient[Doc]) -> None:
    client.test.r.insert_one({"_id": 1})
    last = entries(client)[-1]["ts"]
    found = list(client.local["oplog.rs"].find({"ts": {"$gte": last}}, oplog_replay=True))
    assert [e["o"] for e in found] == [{"_id": 1}]
