"""Multi-document transactions on a one-member replica set, through pymongo: snapshot isolation,
commit as one write (with its one applyOps oplog entry), write conflicts, the end commands' rules,
DDL inside, and mongod's refusals (251, 225, 256, 263, 72, 112)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import bson
import pytest
from bson import Int64
from pymongo import MongoClient, ReadPreference
from pymongo.errors import InvalidOperation, OperationFailure
from pymongo.read_concern import ReadConcern
from pymongo.write_concern import WriteConcern

from ebbdb.protocol import encode_msg
from ebbdb.server.embedded import ServerThread
from tests.e2e import rawwire

Doc = dict[str, Any]


@pytest.fixture
def client(replset: ServerThread) -> Iterator[MongoClient[Doc]]:
    with MongoClient(replset.uri, serverSelectionTimeoutMS=5000) as c:
        for name in c.list_database_names():
            if name not in ("admin", "config", "local"):
                c.drop_database(name)
        yield c


def _error(exc: pytest.ExceptionInfo[OperationFailure]) -> tuple[int, list[str]]:
    details = exc.value.details or {}
    return exc.value.code or 0, list(details.get("errorLabels", []))


def test_with_transaction_commits_everything_at_once(client: MongoClient[Doc]) -> None:
    coll = client.app.accounts
    coll.insert_many([{"_id": "a", "balance": 100}, {"_id": "b", "balance": 0}])
    other = client.app.accounts

    def transfer(session: Any) -> str:
        coll.update_one({"_id": "a"}, {"$inc": {"balance": -30}}, session=session)
        coll.update_one({"_id": "b"}, {"$inc": {"balance": 30}}, session=session)
        coll.insert_one({"_id": "log", "moved": 30}, session=session)
        # The transaction sees its own writes ...
        mine = {d["_id"]: d.get("balance") for d in coll.find({}, session=session)}
        assert mine == {"a": 70, "b": 30, "log": None}
        assert coll.count_documents({}, session=session) == 3
        # ... and nobody else does, yet.
        assert {d["_id"]: d["balance"] for d in other.find()} == {"a": 100, "b": 0}
        return "done"

    with client.start_session() as s:
        assert s.with_transaction(transfer) == "done"
    assert sorted(other.find(), key=lambda d: d["_id"]) == [
        {"_id": "a", "balance": 70},
        {"_id": "b", "balance": 30},
        {"_id": "log", "moved": 30},
    ]


def test_one_oplog_entry_for_a_commit(client: MongoClient[Doc]) -> None:
    client.app.c.insert_one({"_id": 0})
    with client.start_session() as s:
        with s.start_transaction():
            client.app.c.insert_one({"_id": 1}, session=s)
            client.app.c.update_one({"_id": 0}, {"$set": {"x": 1}}, session=s)
            client.app.c.delete_one({"_id": 1}, session=s)
        lsid = s.session_id
    # (The session's earlier retryable writes, if pymongo reused it, have entries of their own.)
    query = {"lsid.id": lsid["id"], "o.applyOps": {"$exists": True}}
    (entry,) = list(client.local["oplog.rs"].find(query))
    assert entry["op"] == "c" and entry["ns"] == "admin.$cmd"
    assert isinstance(entry["txnNumber"], Int64)
    assert entry["prevOpTime"] == {"ts": entry["prevOpTime"]["ts"], "t": Int64(-1)}
    ops = entry["o"]["applyOps"]
    assert [(op["op"], op["ns"]) for op in ops] == [
        ("i", "app.c"),
        ("u", "app.c"),
        ("d", "app.c"),
    ]
    assert ops[0]["o"] == {"_id": 1}
    assert ops[1]["o2"] == {"_id": 0}
    # No entry of the transaction's writes outside its applyOps.
    assert client.local["oplog.rs"].count_documents({"ns": "app.c", "o._id": 1}) == 0


def test_snapshot_isolation(client: MongoClient[Doc]) -> None:
    coll = client.app.c
    coll.insert_many([{"_id": 1}, {"_id": 2}])
    with client.start_session() as s:
        s.start_transaction()
        assert coll.find_one({"_id": 1}, session=s) == {"_id": 1}  # the snapshot is taken
        coll.insert_one({"_id": 3})  # committed by another client after the snapshot
        coll.delete_one({"_id": 2})
        assert sorted(d["_id"] for d in coll.find({}, session=s)) == [1, 2]
        s.commit_transaction()
    assert sorted(d["_id"] for d in coll.find()) == [1, 3]


def test_abort_leaves_nothing(client: MongoClient[Doc]) -> None:
    coll = client.app.c
    with client.start_session() as s:
        s.start_transaction()
        coll.insert_one({"_id": 1}, session=s)
        client.app.create_collection("made", session=s)
        s.abort_transaction()
    assert list(coll.find()) == []
    assert "made" not in client.app.list_collection_names()


def test_ddl_inside_a_transaction(client: MongoClient[Doc]) -> None:
    with client.start_session() as s:
        with s.start_transaction():
            client.app.create_collection("created", session=s)
            client.app.created.create_index("a", session=s)
            client.app.implicit.insert_one({"_id": 1, "a": 1}, session=s)
            assert client.app.implicit.find_one({}, session=s) == {"_id": 1, "a": 1}
            assert "created" not in client.app.list_collection_names()
    assert {"created", "implicit"} <= set(client.app.list_collection_names())
    assert "a_1" in client.app.created.index_information()
    assert client.app.implicit.find_one() == {"_id": 1, "a": 1}


def test_two_transactions_writing_one_document(client: MongoClient[Doc]) -> None:
    coll = client.app.c
    coll.insert_one({"_id": 1, "n": 0})
    with client.start_session() as s1, client.start_session() as s2:
        s1.start_transaction()
        s2.start_transaction()
        coll.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=s1)
        with pytest.raises(OperationFailure) as exc:
            coll.update_one({"_id": 1}, {"$inc": {"n": 10}}, session=s2)
        assert _error(exc) == (112, ["TransientTransactionError"])
        # The second transaction is aborted by its error.
        with pytest.raises(OperationFailure) as exc:
            s2.commit_transaction()
        assert _error(exc) == (251, ["TransientTransactionError"])
        s1.commit_transaction()
    assert coll.find_one() == {"_id": 1, "n": 1}


def test_write_to_a_document_changed_since_the_snapshot(client: MongoClient[Doc]) -> None:
    coll = client.app.c
    coll.insert_many([{"_id": 1, "n": 0}, {"_id": 2}])
    with client.start_session() as s:
        s.start_transaction()
        coll.find_one({"_id": 2}, session=s)
        coll.update_one({"_id": 1}, {"$set": {"n": 5}})  # outside, after the snapshot
        with pytest.raises(OperationFailure) as exc:
            coll.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=s)
        assert _error(exc) == (112, ["TransientTransactionError"])
        s.abort_transaction()
    assert coll.find_one({"_id": 1}) == {"_id": 1, "n": 5}


def test_concurrent_inserts_into_one_collection_both_commit(client: MongoClient[Doc]) -> None:
    coll = client.app.c
    coll.insert_one({"_id": 0})
    with client.start_session() as s1, client.start_session() as s2:
        s1.start_transaction()
        s2.start_transaction()
        coll.insert_one({"_id": 1}, session=s1)
        coll.insert_one({"_id": 2}, session=s2)
        coll.insert_one({"_id": 3})
        s2.commit_transaction()
        s1.commit_transaction()
    assert sorted(d["_id"] for d in coll.find()) == [0, 1, 2, 3]
    assert client.app.command("collStats", "c")["count"] == 4
    assert client.app.command("validate", "c")["valid"] is True


def test_retried_commit_is_ok_and_abort_after_commit_is_refused(client: MongoClient[Doc]) -> None:
    with client.start_session() as s:
        s.start_transaction()
        client.app.c.insert_one({"_id": 1}, session=s)
        s.commit_transaction()
        s.commit_transaction()  # pymongo sends commitTransaction again: ok
        with pytest.raises(InvalidOperation):  # pymongo refuses abort after commit itself
            s.abort_transaction()
    assert client.app.c.count_documents({}) == 1


def test_raw_commands_get_mongods_answers(client: MongoClient[Doc]) -> None:
    admin = client.admin
    with client.start_session() as s:
        lsid = s.session_id

        def run(db: str, cmd: Doc) -> Doc:
            return client[db].command({**cmd, "lsid": lsid}, check=False)

        # A commit of a transaction that never started.
        r = run("admin", {"commitTransaction": 1, "txnNumber": Int64(5), "autocommit": False})
        assert (r["code"], r["errorLabels"]) == (251, ["TransientTransactionError"])
        # Start transaction 5, then 263 for a command a transaction may not run.
        r = run(
            "app",
            {
                "insert": "c",
                "documents": [{"_id": 1}],
                "txnNumber": Int64(5),
                "autocommit": False,
                "startTransaction": True,
            },
        )
        assert r["ok"] == 1.0
        r = run("app", {"count": "c", "txnNumber": Int64(5), "autocommit": False})
        assert r["code"] == 263 and r["codeName"] == "OperationNotSupportedInTransaction"
        assert "transaction-count" in r["errmsg"]
        # That left the transaction open, as mongod's refusals of such commands do.
        for cmd in ({"explain": {"find": "c"}}, {"ping": 1}, {"drop": "c"}):
            r = run("app", {**cmd, "txnNumber": Int64(5), "autocommit": False})
            assert r["code"] == 263, cmd
        r = run("admin", {"commitTransaction": 1, "txnNumber": Int64(5), "autocommit": False})
        assert r["ok"] == 1.0
        client.app.c.delete_many({})
        # An older number: 225.
        r = run(
            "app",
            {"find": "c", "txnNumber": Int64(4), "autocommit": False, "startTransaction": True},
        )
        assert (r["code"], r["codeName"]) == (225, "TransactionTooOld")
        # 6: listCollections not allowed; readConcern only on the first statement.
        r = run(
            "app",
            {
                "find": "c",
                "txnNumber": Int64(6),
                "autocommit": False,
                "startTransaction": True,
                "readConcern": {"level": "snapshot"},
            },
        )
        assert r["ok"] == 1.0 and r["cursor"]["firstBatch"] == []
        r = run(
            "app",
            {
                "find": "c",
                "txnNumber": Int64(6),
                "autocommit": False,
                "readConcern": {"level": "snapshot"},
            },
        )
        assert r["code"] == 72
        r = run(
            "app",
            {
                "find": "c",
                "txnNumber": Int64(7),
                "autocommit": False,
                "startTransaction": True,
                "writeConcern": {"w": 1},
            },
        )
        assert r["code"] == 72
        assert r["errmsg"] == "writeConcern is not allowed within a multi-statement transaction"
        r = run(
            "app",
            {
                "listCollections": 1,
                "txnNumber": Int64(8),
                "autocommit": False,
                "startTransaction": True,
            },
        )
        assert r["code"] == 263
        assert r["errmsg"] == "Cannot run 'listCollections' in a multi-document transaction."
        r = run(
            "app", {"insert": "c", "documents": [{}], "txnNumber": Int64(9), "autocommit": True}
        )
        assert r["code"] == 72
        r = run(
            "app",
            {"find": "c", "txnNumber": Int64(10), "autocommit": False, "startTransaction": True},
        )
        assert r["ok"] == 1.0
        r = run("admin", {"commitTransaction": 1, "txnNumber": Int64(10), "autocommit": False})
        assert r["ok"] == 1.0
        r = run("admin", {"abortTransaction": 1, "txnNumber": Int64(10), "autocommit": False})
        assert (r["code"], r["codeName"]) == (256, "TransactionCommitted")
        r = run("admin", {"commitTransaction": 1, "txnNumber": Int64(10), "autocommit": False})
        assert r["ok"] == 1.0  # a retried commit
        r = admin.command({"commitTransaction": 1}, check=False)
        assert (r["code"], r["errmsg"]) == (
            125,
            "commitTransaction must be run within a transaction",
        )
    assert client.app.c.count_documents({}) == 0  # no refused statement wrote anything


def test_lifetime_limit_aborts_old_transactions(client: MongoClient[Doc]) -> None:
    client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=1)
    try:
        with client.start_session() as s:
            s.start_transaction()
            client.app.c.insert_one({"_id": 1}, session=s)
            time.sleep(1.8)
            with pytest.raises(OperationFailure) as exc:
                client.app.c.insert_one({"_id": 2}, session=s)
            assert _error(exc) == (251, ["TransientTransactionError"])
            s.abort_transaction()
    finally:
        client.admin.command("setParameter", 1, transactionLifetimeLimitSeconds=60)
    assert client.app.c.count_documents({}) == 0


def test_a_transaction_past_16_mb_is_refused(client: MongoClient[Doc]) -> None:
    big = "x" * (4 * 1024 * 1024)
    with client.start_session() as s:
        s.start_transaction()
        for i in range(4):  # 16 MB and a little
            client.app.c.insert_one({"_id": i, "pad": big}, session=s)
        with pytest.raises(OperationFailure) as exc:
            client.app.c.insert_one({"_id": 4, "pad": big}, session=s)
        assert exc.value.code == 257
        s.abort_transaction()
    assert client.app.c.count_documents({}) == 0


def test_read_concern_snapshot_and_majority_write_concern(client: MongoClient[Doc]) -> None:
    with client.start_session() as s:
        with s.start_transaction(
            read_concern=ReadConcern("snapshot"),
            write_concern=WriteConcern("majority"),
            read_preference=ReadPreference.PRIMARY,
        ):
            client.app.c.insert_one({"_id": 1}, session=s)
    assert client.app.c.count_documents({}) == 1


def test_ttl_hiding_applies_inside(client: MongoClient[Doc], replset: ServerThread) -> None:
    import datetime

    coll = client.app.t
    coll.create_index("at", expireAfterSeconds=0)
    past = datetime.datetime(2000, 1, 1)
    coll.insert_many([{"_id": 1, "at": past}, {"_id": 2}])
    with client.start_session() as s:
        with s.start_transaction():
            assert [d["_id"] for d in coll.find({}, session=s)] == [2]
            coll.insert_one({"_id": 3, "at": past}, session=s)
            assert [d["_id"] for d in coll.find({}, session=s)] == [2]


def test_map_growth_ends_open_snapshots_with_a_transient_error(
    client: MongoClient[Doc], replset: ServerThread
) -> None:
    coll = client.app.c
    coll.insert_one({"_id": 0})
    attempts = []

    def body(session: Any) -> None:
        attempts.append(1)
        coll.insert_one({"_id": len(attempts)}, session=session)
        if len(attempts) == 1:
            # The data file's map grows (LMDB resizes only with no transaction open).
            replset.call(lambda app: app.services.gateway.engine.env.grow(), replset.app)
        coll.find_one({"_id": 0}, session=session)

    with client.start_session() as s:
        s.with_transaction(body)
    assert len(attempts) == 2  # the first attempt got WriteConflict, labelled transient
    assert sorted(d["_id"] for d in coll.find()) == [0, 2]


def test_ending_a_session_aborts_its_transaction(client: MongoClient[Doc]) -> None:
    with client.start_session() as s:
        s.start_transaction()
        client.app.c.insert_one({"_id": 1}, session=s)
        client.admin.command("endSessions", [s.session_id])
        with pytest.raises(OperationFailure) as exc:
            client.app.c.insert_one({"_id": 2}, session=s)
        assert exc.value.code == 251
    assert client.app.c.count_documents({}) == 0


def test_what_a_transaction_may_not_do(client: MongoClient[Doc]) -> None:
    client.app.create_collection("capped", capped=True, size=4096)
    cases = [
        ({"aggregate": "c", "pipeline": [{"$out": "o"}], "cursor": {}}, "$out cannot be used"),
        ({"aggregate": "c", "pipeline": [{"$merge": "o"}], "cursor": {}}, "$merge cannot be"),
        ({"insert": "capped", "documents": [{}]}, "is a capped collection"),
        ({"create": "newcapped", "capped": True, "size": 4096}, "Cannot create a capped"),
        ({"listIndexes": "c"}, "Cannot run 'listIndexes'"),
        (
            {"createIndexes": "capped", "indexes": [{"key": {"a": 1}, "name": "a_1"}]},
            "Cannot create new indexes on existing collection app.capped in a multi-document",
        ),
        ({"insert": "c", "documents": [{}], "$db": "local"}, "against the 'local' database"),
    ]
    with client.start_session() as s:
        for number, (cmd, message) in enumerate(cases, start=1):
            db = cmd.pop("$db", "app")
            r = client[db].command(
                {
                    **cmd,
                    "lsid": s.session_id,
                    "txnNumber": Int64(number),
                    "autocommit": False,
                    "startTransaction": True,
                },
                check=False,
            )
            assert (r["code"], r["codeName"]) == (263, "OperationNotSupportedInTransaction"), r
            assert message in r["errmsg"]
    assert client.app.capped.count_documents({}) == 0


def test_every_allowed_command_sees_the_transaction(client: MongoClient[Doc]) -> None:
    from pymongo import DeleteOne, InsertOne, ReturnDocument, UpdateOne

    coll = client.app.c
    coll.insert_many([{"_id": i, "k": i % 2} for i in range(6)])
    client.app.other.insert_one({"_id": 1, "name": "one"})
    with client.start_session() as s:
        with s.start_transaction():
            coll.insert_one({"_id": 6, "k": 0}, session=s)
            coll.delete_one({"_id": 0}, session=s)
            # find over several batches: its getMores are statements too.
            assert [d["_id"] for d in coll.find({}, batch_size=2, session=s).sort("_id", 1)] == [
                1,
                2,
                3,
                4,
                5,
                6,
            ]
            assert sorted(coll.distinct("_id", {"k": 0}, session=s)) == [2, 4, 6]
            pipeline = [
                {"$match": {"_id": 1}},
                {
                    "$lookup": {
                        "from": "other",
                        "localField": "_id",
                        "foreignField": "_id",
                        "as": "o",
                    }
                },
            ]
            (joined,) = coll.aggregate(pipeline, session=s)
            assert joined["o"] == [{"_id": 1, "name": "one"}]
            after = coll.find_one_and_update(
                {"_id": 6}, {"$set": {"f": 1}}, return_document=ReturnDocument.AFTER, session=s
            )
            assert after == {"_id": 6, "k": 0, "f": 1}
            result = coll.bulk_write(
                [
                    InsertOne({"_id": 7}),
                    UpdateOne({"_id": 1}, {"$set": {"b": 1}}),
                    DeleteOne({"_id": 2}),
                ],
                session=s,
            )
            assert (result.inserted_count, result.modified_count, result.deleted_count) == (1, 1, 1)
            assert coll.count_documents({}, session=s) == 6  # an aggregate, allowed
            assert coll.delete_many({"k": 1}, session=s).deleted_count == 3
            assert coll.count_documents({}, session=s) == 3
            assert coll.count_documents({}) == 6  # outside: nothing yet
    assert sorted(d["_id"] for d in coll.find()) == [4, 6, 7]
    assert client.app.command("collStats", "c")["count"] == 3


def test_a_write_outside_after_the_transactions_write_fails_its_commit(
    client: MongoClient[Doc],
) -> None:
    coll = client.app.c
    coll.insert_one({"_id": 1, "n": 0})
    with client.start_session() as s:
        s.start_transaction()
        coll.update_one({"_id": 1}, {"$inc": {"n": 1}}, session=s)
        coll.update_one({"_id": 1}, {"$set": {"n": 100}})  # outside, not blocked
        with pytest.raises(OperationFailure) as exc:
            s.commit_transaction()
        assert _error(exc) == (112, ["TransientTransactionError"])
    assert coll.find_one() == {"_id": 1, "n": 100}


def test_many_open_transactions_inserting_into_one_collection(replset: ServerThread) -> None:
    with MongoClient(replset.uri, maxPoolSize=200) as c:
        c.drop_database("many")
        c.many.c.insert_one({"_id": -1})
        sessions = [c.start_session() for _ in range(150)]
        for i, s in enumerate(sessions):
            s.start_transaction()
            c.many.c.insert_one({"_id": i}, session=s)
        c.many.c.insert_one({"_id": "outside"})
        for s in reversed(sessions):
            s.commit_transaction()
            s.end_session()
        assert c.many.c.count_documents({}) == 152
        assert c.many.command("validate", "c")["valid"] is True


@pytest.mark.parametrize("ddl", ["unique index", "drop", "rename"])
def test_ddl_outside_during_a_transaction_fails_its_commit(
    client: MongoClient[Doc], ddl: str
) -> None:
    # A collection the transaction wrote whose catalog entry changed meanwhile: its commit
    # would miss the new index, or write into a collection that is gone.
    coll = client.app.c
    coll.insert_one({"_id": 1, "a": 1})
    with client.start_session() as s:
        s.start_transaction()
        coll.insert_one({"_id": 2, "a": 1}, session=s)
        if ddl == "unique index":
            coll.create_index("a", unique=True)
        elif ddl == "drop":
            coll.drop()
        else:
            coll.rename("d")
        with pytest.raises(OperationFailure) as exc:
            s.commit_transaction()
        assert _error(exc) == (112, ["TransientTransactionError"])
    if ddl == "unique index":
        assert list(coll.find()) == [{"_id": 1, "a": 1}]
        assert client.app.command("validate", "c")["valid"] is True
    elif ddl == "drop":
        assert "c" not in client.app.list_collection_names()
    else:
        assert list(client.app.d.find()) == [{"_id": 1, "a": 1}]
        assert "c" not in client.app.list_collection_names()


def _send(sock: Any, body: Doc) -> int:
    rid = rawwire.next_request_id()
    sock.sendall(encode_msg(rid, 0, bson.encode(body)))
    return rid


def _answer(sock: Any, rid: int) -> Doc:
    reply = rawwire.read_msg(sock)
    assert reply.response_to == rid
    return bson.decode(reply.body)


def test_two_commands_at_once_on_one_session(replset: ServerThread) -> None:
    # Two connections start one session's transaction 1 at the same moment (as a driver's
    # concurrent statements can): the session serves one at a time, and the second start at
    # the active number gets mongod's 117.
    lsid = {"id": bson.Binary.from_uuid(uuid.uuid4())}
    body = {
        "insert": "c",
        "txnNumber": Int64(1),
        "autocommit": False,
        "startTransaction": True,
        "lsid": lsid,
        "$db": "two",
    }
    with rawwire.connect(replset) as a, rawwire.connect(replset) as b:
        ra = _send(a, {**body, "documents": [{"_id": "a"}]})
        rb = _send(b, {**body, "documents": [{"_id": "b"}]})
        replies = [_answer(a, ra), _answer(b, rb)]
        oks = [r for r in replies if r["ok"] == 1.0]
        refused = [r for r in replies if r["ok"] != 1.0]
        assert len(oks) == 1 and len(refused) == 1
        assert (refused[0]["code"], refused[0]["errmsg"]) == (
            117,
            "Only servers in a sharded cluster can start a new transaction at the active "
            "transaction number",
        )
        commit = {
            "commitTransaction": 1,
            "txnNumber": Int64(1),
            "autocommit": False,
            "lsid": lsid,
            "$db": "admin",
        }
        assert rawwire.op_msg(a, commit)["ok"] == 1.0
    with MongoClient(replset.uri) as c:
        assert len(list(c.two.c.find())) == 1
        c.drop_database("two")


def test_a_committed_transaction_is_remembered_across_a_restart(tmp_path: Any) -> None:
    path = str(tmp_path / "data")
    lsid = {"id": bson.Binary.from_uuid(uuid.uuid4())}
    other_lsid = {"id": bson.Binary.from_uuid(uuid.uuid4())}

    def txn(number: int, cmd: Doc, db: str = "admin") -> Doc:
        return {**cmd, "txnNumber": Int64(number), "autocommit": False, "lsid": lsid, "$db": db}

    commit = {"commitTransaction": 1}
    srv = ServerThread(path, repl_set="rs0").start()
    try:
        with rawwire.connect(srv) as sock:
            start = {"insert": "c", "documents": [{"_id": 1}], "startTransaction": True}
            assert rawwire.op_msg(sock, txn(3, start, "r"))["ok"] == 1.0
            assert rawwire.op_msg(sock, txn(3, commit))["ok"] == 1.0
            other = {**txn(1, start, "r"), "lsid": other_lsid, "documents": [{"_id": 5}]}
            assert rawwire.op_msg(sock, other)["ok"] == 1.0
            assert rawwire.op_msg(sock, {**txn(1, commit), "lsid": other_lsid})["ok"] == 1.0
    finally:
        srv.stop()
    srv = ServerThread(path, repl_set="rs0").start()
    try:
        with rawwire.connect(srv) as sock:
            # A write of the committed transaction's number without autocommit: 72, not a
            # retryable write.
            write = {"insert": "c", "documents": [{"_id": 6}], "lsid": other_lsid, "$db": "r"}
            r = rawwire.op_msg(sock, {**write, "txnNumber": Int64(1)})
            assert (r["code"], r["codeName"]) == (72, "InvalidOptions")
            # A commit retried after the restart: ok again (not 251, which would have the
            # driver run the whole transaction again).
            assert rawwire.op_msg(sock, txn(3, commit))["ok"] == 1.0
            r = rawwire.op_msg(sock, txn(3, {"abortTransaction": 1}))
            assert (r["code"], r["codeName"]) == (256, "TransactionCommitted")
            r = rawwire.op_msg(sock, txn(2, {"find": "c", "startTransaction": True}, "r"))
            assert (r["code"], r["codeName"]) == (225, "TransactionTooOld")
            r = rawwire.op_msg(sock, txn(3, {"find": "c", "startTransaction": True}, "r"))
            assert (r["code"], r["codeName"]) == (117, "ConflictingOperationInProgress")
            found = rawwire.op_msg(sock, {"find": "c", "$db": "r"})["cursor"]["firstBatch"]
            assert found == [{"_id": 1}, {"_id": 5}]
            # The next number starts a new transaction.
            r = rawwire.op_msg(sock, txn(4, {"find": "c", "startTransaction": True}, "r"))
            assert r["ok"] == 1.0
    finally:
        srv.stop()


def test_a_write_of_the_transactions_number_without_autocommit(replset: ServerThread) -> None:
    lsid = {"id": bson.Binary.from_uuid(uuid.uuid4())}
    base = {"lsid": lsid, "$db": "noauto"}
    with rawwire.connect(replset) as sock:
        start = {"insert": "c", "documents": [{"_id": 1}], "startTransaction": True}
        r = rawwire.op_msg(sock, {**start, **base, "txnNumber": Int64(1), "autocommit": False})
        assert r["ok"] == 1.0
        # The transaction's number without autocommit: 72, not a write outside it.
        r = rawwire.op_msg(
            sock, {"insert": "c", "documents": [{"_id": 2}], **base, "txnNumber": Int64(1)}
        )
        assert (r["code"], r["errmsg"]) == (
            72,
            "Must specify autocommit=false on all operations of a multi-statement transaction.",
        )
        commit = {"commitTransaction": 1, "lsid": lsid, "$db": "admin"}
        r = rawwire.op_msg(sock, {**commit, "txnNumber": Int64(1), "autocommit": False})
        assert r["ok"] == 1.0
        found = rawwire.op_msg(sock, {"find": "c", "$db": "noauto"})["cursor"]["firstBatch"]
        assert found == [{"_id": 1}]
        # startTransaction at the number of an executed retryable write: 117.
        r = rawwire.op_msg(
            sock, {"insert": "c", "documents": [{"_id": 3}], **base, "txnNumber": Int64(2)}
        )
        assert r["n"] == 1
        r = rawwire.op_msg(sock, {**start, **base, "txnNumber": Int64(2), "autocommit": False})
        assert (r["code"], r["codeName"]) == (117, "ConflictingOperationInProgress")
        rawwire.op_msg(sock, {"dropDatabase": 1, "$db": "noauto"})


def test_get_more_runs_in_the_transaction_of_its_cursor(replset: ServerThread) -> None:
    lsid = {"id": bson.Binary.from_uuid(uuid.uuid4())}
    with rawwire.connect(replset) as sock:

        def run(cmd: Doc, number: int | None = None, db: str = "gm", **more: Any) -> Doc:
            body = {**cmd, "lsid": lsid, "$db": db, **more}
            if number is not None:
                body.update(txnNumber=Int64(number), autocommit=False)
            return rawwire.op_msg(sock, body)

        run({"insert": "c", "documents": [{"_id": i} for i in range(5)]})
        outside = run({"find": "c", "batchSize": 1})["cursor"]["id"]
        r = run({"find": "c", "batchSize": 1}, 1, startTransaction=True)
        inside = r["cursor"]["id"]
        more = {"collection": "c", "batchSize": 1}
        r = run({"getMore": inside, **more})
        assert (r["code"], r["errmsg"]) == (
            50740,
            f"Cannot run getMore on cursor {inside}, which was created in transaction 1, "
            "without a txnNumber",
        )
        assert run({"getMore": inside, **more}, 1)["cursor"]["nextBatch"] == [{"_id": 1}]
        r = run({"getMore": outside, **more}, 1)
        assert (r["code"], r["errmsg"]) == (
            50739,
            f"Cannot run getMore on cursor {outside}, which was not created in a "
            "transaction, in transaction 1",
        )
        # (That failed statement aborted transaction 1, and its cursor with it.)
        r = run({"getMore": inside, **more}, 1)
        assert r["code"] == 251
        r = run({"find": "c", "batchSize": 1}, 2, startTransaction=True)
        second = r["cursor"]["id"]
        assert run({"commitTransaction": 1}, 2, db="admin")["ok"] == 1.0
        # The transaction's cursor died with it; killCursors still answers.
        r = run({"getMore": second, **more})
        assert r["code"] == 43
        r = run({"killCursors": "c", "cursors": [second]})
        assert (r["ok"], r["cursorsNotFound"]) == (1.0, [second])
        rawwire.op_msg(sock, {"dropDatabase": 1, "$db": "gm"})


@pytest.mark.parametrize("command", ["insert", "update", "delete"])
def test_an_unordered_batch_in_a_transaction_stops_at_its_first_error(
    client: MongoClient[Doc], command: str
) -> None:
    # mongod: "If we are in a transaction, we must fail the whole batch".
    client.app.c.insert_many([{"_id": 1, "a": 1}, {"_id": 2, "a": 2}, {"_id": 3, "a": 3}])
    client.app.c.create_index("a", unique=True)
    statements: dict[str, Doc] = {
        "insert": {"documents": [{"_id": 10}, {"_id": 1}, {"_id": 11}]},
        "update": {
            "updates": [
                {"q": {"_id": 1}, "u": {"$set": {"x": 1}}},
                {"q": {"_id": 2}, "u": {"$set": {"a": 3}}},
                {"q": {"_id": 3}, "u": {"$set": {"x": 1}}},
            ]
        },
        "delete": {
            "deletes": [
                {"q": {"_id": 1}, "limit": 1},
                {"q": {"$bad": 1}, "limit": 1},
                {"q": {"_id": 3}, "limit": 1},
            ]
        },
    }
    with client.start_session() as s:
        s.start_transaction()
        r = client.app.command(
            {command: "c", **statements[command], "ordered": False}, session=s, check=False
        )
        assert r["n"] == 1
        assert [e["index"] for e in r["writeErrors"]] == [1]
        s.abort_transaction()


def test_system_collections_tailable_finds_and_change_streams_in_a_transaction(
    client: MongoClient[Doc],
) -> None:
    client.app.create_collection("capped", capped=True, size=4096)
    cases: list[tuple[Doc, int, str | None]] = [
        (
            {"insert": "system.views", "documents": [{"_id": "app.v"}]},
            50791,
            "Cannot write to system collection app.system.views within a transaction.",
        ),
        (
            {"delete": "system.js", "deletes": [{"q": {}, "limit": 0}]},
            50791,
            "Cannot write to system collection app.system.js within a transaction.",
        ),
        ({"find": "capped", "tailable": True}, 72, None),
        ({"aggregate": "c", "pipeline": [{"$changeStream": {}}], "cursor": {}}, 263, None),
    ]
    for cmd, code, message in cases:
        with client.start_session() as s:
            s.start_transaction()
            client.app.c.insert_one({}, session=s)
            with pytest.raises(OperationFailure) as exc:
                client.app.command(cmd, session=s)
            assert exc.value.code == code, cmd
            if message is not None:
                assert (exc.value.details or {})["errmsg"] == message
            # The refusal aborted the transaction, as mongod's.
            with pytest.raises(OperationFailure) as exc:
                s.commit_transaction()
            assert exc.value.code == 251
    assert "system.views" not in client.app.list_collection_names()
    assert client.app.c.count_documents({}) == 0


def test_statement_ids_are_accepted(replset: ServerThread) -> None:
    lsid = {"id": bson.Binary.from_uuid(uuid.uuid4())}
    txn = {"lsid": lsid, "txnNumber": Int64(1), "autocommit": False}
    with rawwire.connect(replset) as sock:
        r = rawwire.op_msg(
            sock,
            {
                "insert": "c",
                "documents": [{"_id": 1}, {"_id": 2}],
                "stmtIds": [0, 1],
                "stmtId": 0,
                "startTransaction": True,
                "$db": "stmt",
                **txn,
            },
        )
        assert (r["ok"], r["n"]) == (1.0, 2)
        r = rawwire.op_msg(sock, {"commitTransaction": 1, "stmtId": 1, "$db": "admin", **txn})
        assert r["ok"] == 1.0
        retryable = {"lsid": lsid, "txnNumber": Int64(2), "$db": "stmt"}
        r = rawwire.op_msg(
            sock, {"insert": "c", "documents": [{"_id": 3}], "stmtIds": [0], **retryable}
        )
        assert (r["ok"], r["n"]) == (1.0, 1)
        rawwire.op_msg(sock, {"dropDatabase": 1, "$db": "stmt"})
