"""Change streams on a one-member replica set, through pymongo (sync and AsyncMongoClient) and
motor: events of MongoDB 7.0's shape on a collection, a database and the deployment, resume tokens
(across a restart too), fullDocument and fullDocumentBeforeChange, the stages after
$changeStream, awaitData getMores bounded by maxAwaitTimeMS, TTL deletions as delete events, and
mongod's errors (40573 on a standalone server, 9/280/286/260 for bad tokens)."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from bson import Timestamp
from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import OperationFailure

from ebbdb.server.embedded import ServerThread

Doc = dict[str, Any]
Client = MongoClient[Doc]


@pytest.fixture
def client(replset: ServerThread) -> Iterator[Client]:
    with MongoClient(replset.uri, serverSelectionTimeoutMS=5000) as c:
        yield c


@pytest.fixture
def db(client: Client, request: pytest.FixtureRequest) -> Any:
    name = re.sub(r"\W", "_", request.node.name)[:60]
    client.drop_database(name)
    return client[name]


def plain(event: Doc) -> Doc:
    """An event without the fields that depend on when it happened."""
    assert isinstance(event["clusterTime"], Timestamp)
    assert event["_id"].keys() == {"_data"} and re.fullmatch("82[0-9A-F]+", event["_id"]["_data"])
    return {k: v for k, v in event.items() if k not in ("_id", "clusterTime", "wallTime")}


def code_of(fn: Any) -> tuple[int, str]:
    with pytest.raises(OperationFailure) as err:
        fn()
    return int(err.value.code or 0), str(err.value.details and err.value.details.get("errmsg"))


def test_standalone_watch_is_40573(tmp_path: Any) -> None:
    srv = ServerThread(str(tmp_path / "d")).start()
    try:
        with MongoClient(srv.uri) as c:
            assert code_of(lambda: c.test.c.watch()) == (
                40573,
                "The $changeStream stage is only supported on replica sets",
            )
    finally:
        srv.stop()


def test_collection_events_have_mongodb_s_shape(db: Any) -> None:
    coll = db.c
    with coll.watch() as stream:
        coll.insert_one({"_id": 1, "a": 1, "arr": [1, 2, 3], "sub": {"x": 1}})
        coll.update_one(
            {"_id": 1}, {"$set": {"a": 2, "sub.y": 1, "arr": [1]}, "$unset": {"gone": 1}}
        )
        coll.update_one({"_id": 1}, {"$unset": {"a": 1}, "$set": {"arr.0": 9}})
        coll.replace_one({"_id": 1}, {"b": 1})
        coll.delete_one({"_id": 1})
        db.other.insert_one({"_id": 2})  # another collection: not this stream's
        events = [stream.next() for _ in range(5)]
        assert stream.try_next() is None
    ns = {"db": db.name, "coll": "c"}
    assert [list(e) for e in events][0] == [
        "_id",
        "operationType",
        "clusterTime",
        "wallTime",
        "fullDocument",
        "ns",
        "documentKey",
    ]
    assert [plain(e) for e in events] == [
        {
            "operationType": "insert",
            "fullDocument": {"_id": 1, "a": 1, "arr": [1, 2, 3], "sub": {"x": 1}},
            "ns": ns,
            "documentKey": {"_id": 1},
        },
        {
            "operationType": "update",
            "ns": ns,
            "documentKey": {"_id": 1},
            "updateDescription": {
                "updatedFields": {"a": 2, "sub.y": 1},
                "removedFields": [],
                "truncatedArrays": [{"field": "arr", "newSize": 1}],
            },
        },
        {
            "operationType": "update",
            "ns": ns,
            "documentKey": {"_id": 1},
            "updateDescription": {
                "updatedFields": {"arr.0": 9},
                "removedFields": ["a"],
                "truncatedArrays": [],
            },
        },
        {
            "operationType": "replace",
            "fullDocument": {"_id": 1, "b": 1},
            "ns": ns,
            "documentKey": {"_id": 1},
        },
        {"operationType": "delete", "ns": ns, "documentKey": {"_id": 1}},
    ]
    times = [e["clusterTime"] for e in events]
    assert times == sorted(times) and len(set(times)) == 5


def test_drop_invalidates_and_start_after_goes_on(db: Any) -> None:
    coll = db.c
    coll.insert_one({"_id": 0})
    with coll.watch() as stream:
        coll.insert_one({"_id": 1})
        coll.drop()
        insert, drop, invalidate = stream.next(), stream.next(), stream.next()
        assert not stream.alive
    assert plain(drop) == {"operationType": "drop", "ns": {"db": db.name, "coll": "c"}}
    assert plain(invalidate) == {"operationType": "invalidate"}
    assert invalidate["clusterTime"] == drop["clusterTime"]
    # resumeAfter an invalidate: mongod's 260; startAfter it: the stream goes on.
    assert code_of(lambda: coll.watch(resume_after=invalidate["_id"]))[0] == 260
    coll.insert_one({"_id": 5})
    with coll.watch(start_after=invalidate["_id"]) as again:
        assert plain(again.next())["fullDocument"] == {"_id": 5}
    # resumeAfter the drop: its invalidate comes again.
    with coll.watch(resume_after=drop["_id"]) as again:
        assert again.next()["operationType"] == "invalidate"
    with coll.watch(resume_after=insert["_id"]) as again:
        assert [again.next()["operationType"] for _ in range(2)] == ["drop", "invalidate"]


def test_rename_invalidates_the_source_s_stream(db: Any) -> None:
    db.a.insert_one({"_id": 1})
    with db.a.watch() as stream, db.watch() as whole:
        db.a.rename("b")
        rename, invalidate = stream.next(), stream.next()
        assert plain(rename) == {
            "operationType": "rename",
            "ns": {"db": db.name, "coll": "a"},
            "to": {"db": db.name, "coll": "b"},
        }
        assert invalidate["operationType"] == "invalidate"
        db.b.insert_one({"_id": 2})
        assert [whole.next()["operationType"] for _ in range(2)] == ["rename", "insert"]


def test_a_rename_onto_a_watched_collection_ends_its_stream(db: Any) -> None:
    db.a.insert_one({"_id": 1})
    db.b.insert_one({"_id": 2})
    with db.b.watch() as stream:
        db.a.rename("b", dropTarget=True)
        rename, invalidate = stream.next(), stream.next()
    assert plain(rename)["ns"] == {"db": db.name, "coll": "a"}
    assert plain(rename)["to"] == {"db": db.name, "coll": "b"}
    assert invalidate["operationType"] == "invalidate"


def test_database_stream_and_drop_database(db: Any) -> None:
    db.x.insert_one({"_id": 0})
    with db.watch() as stream:
        db.x.insert_one({"_id": 1})
        db.y.insert_one({"_id": 2})
        db.client.drop_database(db.name)
        got = [plain(stream.next()) for _ in range(6)]
        assert not stream.alive
    assert [(e["operationType"], e.get("ns")) for e in got] == [
        ("insert", {"db": db.name, "coll": "x"}),
        ("insert", {"db": db.name, "coll": "y"}),
        ("drop", {"db": db.name, "coll": "x"}),
        ("drop", {"db": db.name, "coll": "y"}),
        ("dropDatabase", {"db": db.name}),
        ("invalidate", None),
    ]


def test_whole_deployment_stream(client: Client, db: Any) -> None:
    with client.watch() as stream:
        db.c.insert_one({"_id": 1})
        client.config.things.insert_one({"_id": 1})  # internal databases are not watched
        client[db.name + "_2"].d.insert_one({"_id": 2})
        first, second = stream.next(), stream.next()
    assert (first["ns"], second["ns"]) == (
        {"db": db.name, "coll": "c"},
        {"db": db.name + "_2", "coll": "d"},
    )
    client.drop_database(db.name + "_2")
    client.config.things.drop()
    assert (
        code_of(
            lambda: client.admin.command(
                "aggregate", 1, pipeline=[{"$changeStream": {}}], cursor={}
            )
        )[0]
        == 73
    )


def test_show_expanded_events(db: Any) -> None:
    with db.watch(show_expanded_events=True) as stream:
        db.create_collection("c")
        db.c.create_index("a")
        db.command("collMod", "c", validator={"a": {"$exists": True}})
        db.c.drop_index("a_1")
        db.c.insert_one({"_id": 1, "a": 1, "s": {"x": 0}})
        db.c.update_one({"_id": 1}, {"$set": {"s.1": 2, "a": 3}})
        events = [stream.next() for _ in range(6)]
    uuid = db.c.options() and next(db.list_collections(filter={"name": "c"}))["info"]["uuid"]
    assert [e["operationType"] for e in events] == [
        "create",
        "createIndexes",
        "modify",
        "dropIndexes",
        "insert",
        "update",
    ]
    assert all(e["collectionUUID"] == uuid for e in events)
    assert events[0]["operationDescription"]["idIndex"] == {
        "v": 2,
        "key": {"_id": 1},
        "name": "_id_",
    }
    assert events[1]["operationDescription"] == {
        "indexes": [{"v": 2, "key": {"a": 1}, "name": "a_1"}]
    }
    assert events[2]["operationDescription"]["validator"] == {"a": {"$exists": True}}
    assert events[3]["operationDescription"] == {
        "indexes": [{"v": 2, "key": {"a": 1}, "name": "a_1"}]
    }
    assert events[5]["updateDescription"] == {
        "updatedFields": {"a": 3, "s.1": 2},
        "removedFields": [],
        "truncatedArrays": [],
        "disambiguatedPaths": {"s.1": ["s", "1"]},
    }


def test_resume_tokens_resume_after_start_at_and_post_batch(db: Any) -> None:
    coll = db.c
    reply = db.command("aggregate", "c", pipeline=[{"$changeStream": {}}], cursor={})
    cursor = reply["cursor"]
    assert cursor["firstBatch"] == [] and cursor["id"] != 0
    assert list(cursor) == ["firstBatch", "postBatchResumeToken", "id", "ns"]
    start = cursor["postBatchResumeToken"]
    coll.insert_many([{"_id": i} for i in range(4)])
    more = db.command("getMore", cursor["id"], collection="c", batchSize=2)["cursor"]
    assert [d["documentKey"]["_id"] for d in more["nextBatch"]] == [0, 1]
    assert more["postBatchResumeToken"] == more["nextBatch"][-1]["_id"]
    rest = db.command("getMore", cursor["id"], collection="c")["cursor"]
    assert [d["documentKey"]["_id"] for d in rest["nextBatch"]] == [2, 3]
    idle = db.command("getMore", cursor["id"], collection="c", maxTimeMS=50)["cursor"]
    # Nothing newer scanned: the postBatchResumeToken stays the last event's.
    assert idle["nextBatch"] == [] and idle["postBatchResumeToken"] == rest["nextBatch"][-1]["_id"]
    db.other.insert_one({"_id": 1})  # an entry this stream passes over: a high-water mark
    idle = db.command("getMore", cursor["id"], collection="c", maxTimeMS=50)["cursor"]
    assert idle["postBatchResumeToken"]["_data"] > rest["nextBatch"][-1]["_id"]["_data"][:18]
    assert idle["postBatchResumeToken"]["_data"].endswith("2B0429296E1404")
    db.command("killCursors", "c", cursors=[cursor["id"]])
    # From the high-water mark before the inserts, after the second event, and at its time.
    with coll.watch(resume_after=start) as s:
        assert [s.next()["documentKey"]["_id"] for _ in range(4)] == [0, 1, 2, 3]
    with coll.watch(resume_after=more["nextBatch"][1]["_id"]) as s:
        assert [s.next()["documentKey"]["_id"] for _ in range(2)] == [2, 3]
    second = more["nextBatch"][1]["clusterTime"]
    with coll.watch(start_at_operation_time=second) as s:
        assert [s.next()["documentKey"]["_id"] for _ in range(3)] == [1, 2, 3]
    # The high-water mark after the last event: nothing more until a new write.
    with coll.watch(resume_after=idle["postBatchResumeToken"], max_await_time_ms=50) as s:
        assert s.try_next() is None
        coll.insert_one({"_id": 9})
        assert s.next()["documentKey"] == {"_id": 9}


def test_bad_and_foreign_tokens_get_mongod_s_codes(db: Any) -> None:
    coll = db.c
    coll.insert_one({"_id": 1})
    assert code_of(lambda: coll.watch(resume_after={"_data": "zz"})) == (
        9,
        "resume token string was not a valid hex string",
    )
    assert code_of(lambda: coll.watch(resume_after={"_data": ""}))[0] == 40649
    assert code_of(lambda: coll.watch(resume_after={"x": 1}))[0] == 40647
    assert code_of(lambda: coll.watch(resume_after={"_data": "C0FFEE"}))[0] == 50811
    # A token of mongod's own layout for an event this oplog does not hold: 280.
    with coll.watch() as s:
        coll.insert_one({"_id": 2})
        token = s.next()["_id"]["_data"]
    foreign = token[:-30] + ("0" if token[-30] != "0" else "1") + token[-29:]
    with pytest.raises(OperationFailure) as err:
        coll.watch(resume_after={"_data": foreign})
    # mongod names the event that came where the token's should have been.
    assert err.value.code == 280
    assert err.value.details is not None
    assert err.value.details["errmsg"] == (
        f'cannot resume stream; the resume token was not found. {{_data: "{token}"}}'
    )
    assert err.value.has_error_label("NonResumableChangeStreamError")
    # A token past the oplog's end: the stream waits for it; what comes before it is not its.
    future = "82" + "7FFFFFFF00000001" + token[18:]
    reply = db.command(
        "aggregate",
        "c",
        pipeline=[{"$changeStream": {"resumeAfter": {"_data": future}}}],
        cursor={},
    )
    assert reply["cursor"]["firstBatch"] == []
    assert reply["cursor"]["postBatchResumeToken"] == {"_data": future}
    coll.insert_one({"_id": 3})
    more = db.command("getMore", reply["cursor"]["id"], collection="c", maxTimeMS=100)
    assert more["cursor"]["nextBatch"] == []
    db.command("killCursors", "c", cursors=[reply["cursor"]["id"]])
    # A point older than the oplog's first entry: 286 ChangeStreamHistoryLost.
    assert code_of(lambda: coll.watch(start_at_operation_time=Timestamp(1, 1)))[0] == 286
    old = "82" + "0000000100000001" + token[18:]
    assert code_of(lambda: coll.watch(resume_after={"_data": old}))[0] == 286
    assert code_of(lambda: coll.watch(full_document="nope"))[0] == 2
    db.create_collection("v", viewOn="c", pipeline=[])
    assert code_of(lambda: db.v.watch()) == (
        166,
        f"Namespace {db.name}.v is a view, not a collection",
    )
    assert code_of(lambda: coll.watch([{"$changeStreamSplitLargeEvent": {}}]))[0] == 238
    assert code_of(lambda: coll.watch([{"$group": {"_id": 1}}])) == (
        20,
        "$group is not permitted in a $changeStream pipeline",
    )


def test_tokens_survive_a_restart(tmp_path: Any) -> None:
    path = str(tmp_path / "data")
    srv = ServerThread(path, repl_set="rs0").start()
    try:
        with MongoClient(srv.uri) as c, c.t.c.watch() as s:
            c.t.c.insert_many([{"_id": 1}, {"_id": 2}])
            token = s.next()["_id"]
    finally:
        srv.stop()
    srv = ServerThread(path, repl_set="rs0").start()
    try:
        with MongoClient(srv.uri) as c:
            c.t.c.insert_one({"_id": 3})
            with c.t.c.watch(resume_after=token) as s:
                assert [s.next()["documentKey"]["_id"] for _ in range(2)] == [2, 3]
    finally:
        srv.stop()


def test_full_document_modes(db: Any) -> None:
    db.create_collection("p", changeStreamPreAndPostImages={"enabled": True})
    db.p.insert_one({"_id": 1, "n": 0})
    db.q.insert_one({"_id": 1, "n": 0})
    with (
        db.p.watch(full_document="updateLookup") as look,
        db.p.watch(
            full_document="whenAvailable", full_document_before_change="whenAvailable"
        ) as when,
        db.p.watch(full_document="required", full_document_before_change="required") as req,
    ):
        db.p.update_one({"_id": 1}, {"$inc": {"n": 1}})
        db.p.update_one({"_id": 1}, {"$inc": {"n": 1}})
        db.p.delete_one({"_id": 1})
        # updateLookup: the document as it is when the event is read (deleted by then).
        got = [look.next() for _ in range(3)]
        assert [e.get("fullDocument", "-") for e in got] == [None, None, "-"]
        assert list(got[0]) == [
            "_id",
            "operationType",
            "clusterTime",
            "wallTime",
            "fullDocument",
            "ns",
            "documentKey",
            "updateDescription",
        ]
        # whenAvailable: the post-image from the pre-image kept for the change.
        got = [when.next() for _ in range(3)]
        assert [(e.get("fullDocument", "-"), e["fullDocumentBeforeChange"]) for e in got] == [
            ({"_id": 1, "n": 1}, {"_id": 1, "n": 0}),
            ({"_id": 1, "n": 2}, {"_id": 1, "n": 1}),
            ("-", {"_id": 1, "n": 2}),
        ]
        assert [req.next()["fullDocument"] for _ in range(2)] == [
            {"_id": 1, "n": 1},
            {"_id": 1, "n": 2},
        ]
    with (
        db.q.watch(full_document="updateLookup") as look,
        db.q.watch(full_document_before_change="whenAvailable") as when,
        db.q.watch(full_document="required") as req,
        db.q.watch(full_document_before_change="required") as req_pre,
    ):
        db.q.update_one({"_id": 1}, {"$inc": {"n": 1}})
        assert look.next()["fullDocument"] == {"_id": 1, "n": 1}
        event = when.next()
        assert event["fullDocumentBeforeChange"] is None
        named = (
            f'{{operationType: "update", ns: {{db: "{db.name}", coll: "q"}}, '
            f"clusterTime: Timestamp({event['clusterTime'].time}, {event['clusterTime'].inc})}}"
        )
        with pytest.raises(OperationFailure) as err:
            req.next()
        assert (err.value.code, err.value.details and err.value.details["errmsg"]) == (
            47,
            "Change stream was configured to require a post-image for all update events, but "
            f"the post-image was not found for event: {named}",
        )
        with pytest.raises(OperationFailure) as err:
            req_pre.next()
        assert (err.value.code, err.value.details and err.value.details["errmsg"]) == (
            47,
            "Change stream was configured to require a pre-image for all update, delete and "
            f"replace events, but the pre-image was not found for event: {named}",
        )


def test_match_and_project(db: Any) -> None:
    coll = db.c
    pipeline = [
        {"$match": {"operationType": "insert", "fullDocument.keep": True}},
        {"$project": {"fullDocument.keep": 0, "wallTime": 0}},
    ]
    with coll.watch(pipeline) as s:
        coll.insert_many([{"_id": 1, "keep": True, "v": 1}, {"_id": 2, "keep": False}])
        coll.delete_one({"_id": 1})
        coll.insert_one({"_id": 3, "keep": True})
        got = [s.next() for _ in range(2)]
    assert [e["fullDocument"] for e in got] == [{"_id": 1, "v": 1}, {"_id": 3}]
    assert "wallTime" not in got[0]
    with coll.watch([{"$project": {"_id": 0}}]) as s:
        coll.insert_one({"_id": 4})
        with pytest.raises(OperationFailure) as err:
            s.next()
    assert err.value.code == 280


def test_await_data_waits_without_holding_the_loop(client: Client, db: Any) -> None:
    coll = db.c
    # One session for the stream's commands: its cursor is the session's (mongod: 50738 for a
    # getMore in another).
    with client.start_session() as session:

        def run(*args: Any, **kwargs: Any) -> Any:
            return db.command(*args, session=session, **kwargs)

        reply = run("aggregate", "c", pipeline=[{"$changeStream": {}}], cursor={})
        cid = reply["cursor"]["id"]
        # An idle getMore takes its maxTimeMS, then answers an empty batch.
        t0 = time.perf_counter()
        empty = run("getMore", cid, collection="c", maxTimeMS=300)["cursor"]
        assert empty["nextBatch"] == [] and 0.25 < time.perf_counter() - t0 < 2
        # Meanwhile other clients are served, and a write wakes the waiting getMore at once.
        got: list[Any] = []
        waiter = threading.Thread(
            target=lambda: got.append(
                (
                    run("getMore", cid, collection="c", maxTimeMS=5000)["cursor"],
                    time.perf_counter(),
                )
            )
        )
        waiter.start()
        time.sleep(0.2)
        t1 = time.perf_counter()
        assert client.admin.command("ping")["ok"] == 1.0
        assert time.perf_counter() - t1 < 0.2
        coll.insert_one({"_id": 1})
        written = time.perf_counter()
        waiter.join(5)
        (batch, at) = got[0]
        assert [d["documentKey"] for d in batch["nextBatch"]] == [{"_id": 1}]
        assert at - written < 0.5
        # The stream's own default wait is mongod's 1 s.
        t0 = time.perf_counter()
        run("getMore", cid, collection="c")
        assert 0.9 < time.perf_counter() - t0 < 3


def test_ttl_deletions_are_delete_events(db: Any) -> None:
    import datetime

    coll = db.ttl
    coll.create_index("at", expireAfterSeconds=60)
    coll.insert_one({"_id": 1, "at": datetime.datetime.now(datetime.UTC)})
    with coll.watch() as stream:
        db.client.admin.command("ttlClock", advanceSeconds=120)
        db.client.admin.command("ttlMonitorPass")
        event = stream.next()
    assert plain(event) == {
        "operationType": "delete",
        "ns": {"db": db.name, "coll": "ttl"},
        "documentKey": {"_id": 1},
    }


def test_async_mongo_client_and_motor(replset: ServerThread) -> None:
    async def main() -> list[Any]:
        out: list[Any] = []
        async with AsyncMongoClient(replset.uri) as c:
            coll = c.asyncdb.c
            async with await coll.watch() as stream:
                await coll.insert_one({"_id": 1})
                out.append((await stream.next())["fullDocument"])
        from motor.motor_asyncio import AsyncIOMotorClient

        m: Any = AsyncIOMotorClient(replset.uri)
        try:
            coll = m.motordb.c
            async with coll.watch(max_await_time_ms=100) as stream:
                await coll.insert_one({"_id": 2})
                async for change in stream:
                    out.append(change["fullDocument"])
                    break
        finally:
            m.close()
        return out

    assert asyncio.run(main()) == [{"_id": 1}, {"_id": 2}]


def test_a_transaction_s_writes_are_one_event_each_with_its_session(
    client: Client, db: Any
) -> None:
    db.create_collection("c", changeStreamPreAndPostImages={"enabled": True})
    db.c.insert_one({"_id": 0, "n": 0})
    with (
        db.c.watch(full_document="required", full_document_before_change="whenAvailable") as stream,
        client.start_session() as session,
    ):

        def work(s: Any) -> None:
            db.c.insert_one({"_id": 1}, session=s)
            db.c.update_one({"_id": 0}, {"$inc": {"n": 1}}, session=s)
            db.other.insert_one({"_id": 2}, session=s)  # another collection's op
            db.c.delete_one({"_id": 1}, session=s)

        session.with_transaction(work)
        lsid = session.session_id
        events = [stream.next() for _ in range(3)]
    assert [e["operationType"] for e in events] == ["insert", "update", "delete"]
    assert len({e["clusterTime"] for e in events}) == 1
    assert all(e["lsid"]["id"] == lsid["id"] for e in events)
    assert all(e["txnNumber"] == 1 for e in events)
    assert events[1]["fullDocument"] == {"_id": 0, "n": 1}
    assert events[1]["fullDocumentBeforeChange"] == {"_id": 0, "n": 0}
    assert events[2]["fullDocumentBeforeChange"] == {"_id": 1}
    # Resuming after an op of the transaction gives the ops after it.
    with db.c.watch(resume_after=events[0]["_id"]) as again:
        assert [again.next()["operationType"] for _ in range(2)] == ["update", "delete"]


def test_a_stream_the_oplog_rolled_past_gets_286(tmp_path: Any) -> None:
    srv = ServerThread(str(tmp_path / "d"), repl_set="rs0", oplog_size_mb=1).start()
    try:
        with MongoClient(srv.uri) as c:
            reply = c.t.command("aggregate", "c", pipeline=[{"$changeStream": {}}], cursor={})
            cid = reply["cursor"]["id"]
            c.t.c.insert_one({"_id": 0})
            first = c.t.command("getMore", cid, collection="c")["cursor"]["nextBatch"]
            assert [e["documentKey"] for e in first] == [{"_id": 0}]
            # More than the oplog holds, before the stream reads on.
            c.t.c.insert_many([{"_id": i, "pad": "x" * 10_000} for i in range(1, 300)])
            with pytest.raises(OperationFailure) as err:
                c.t.command("getMore", cid, collection="c")
            assert err.value.code == 286
            assert err.value.has_error_label("NonResumableChangeStreamError")
            token = first[0]["_id"]
            assert code_of(lambda: c.t.c.watch(resume_after=token))[0] == 286
    finally:
        srv.stop()


def test_an_event_past_16_mb_is_10334(db: Any) -> None:
    db.create_collection("big", changeStreamPreAndPostImages={"enabled": True})
    db.big.insert_one({"_id": 1, "pad": "x" * (9 * 1024 * 1024), "n": 0})
    with db.big.watch(
        full_document="updateLookup", full_document_before_change="required"
    ) as stream:
        db.big.update_one({"_id": 1}, {"$inc": {"n": 1}})
        with pytest.raises(OperationFailure) as err:
            stream.next()
    assert err.value.code == 10334
    assert str(err.value).startswith("BSONObj size: ")


def test_drivers_resume_on_their_own_after_a_lost_cursor(client: Client, db: Any) -> None:
    coll = db.c
    with coll.watch(max_await_time_ms=100) as stream:
        coll.insert_one({"_id": 1})
        assert stream.next()["documentKey"] == {"_id": 1}
        cid = stream._cursor.cursor_id  # the server cursor behind the stream
        db.command("killCursors", "c", cursors=[cid])
        coll.insert_one({"_id": 2})
        # getMore: 43 CursorNotFound, a resumable error: pymongo resumes from its token.
        assert stream.next()["documentKey"] == {"_id": 2}
        assert stream._cursor.cursor_id != cid


def test_a_stream_s_cursor_dies_with_its_session(client: Client, db: Any) -> None:
    with client.start_session() as session:
        reply = db.command(
            "aggregate", "c", pipeline=[{"$changeStream": {}}], cursor={}, session=session
        )
        cid = reply["cursor"]["id"]
        client.admin.command("killSessions", [session.session_id])
        with pytest.raises(OperationFailure) as err:
            db.command("getMore", cid, collection="c", session=session)
    assert err.value.code == 43
