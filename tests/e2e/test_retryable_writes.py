"""Retryable writes in replica-set mode: a write sent again with the same lsid and txnNumber is
applied once and answered with its first result (insert, update, upsert, delete, findAndModify),
a batch cut off halfway runs only the statements it had not reached, config.transactions records
it, a restart keeps it, an older txnNumber is 225 TransactionTooOld; pymongo's own retries under
the failCommand fail point (closeConnection, RetryableWriteError labels, a write concern error
after the write) apply each write exactly once; a retryable read is retried."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from bson.binary import Binary
from bson.int64 import Int64
from pymongo import MongoClient, ReturnDocument
from pymongo.client_session import ClientSession
from pymongo.errors import OperationFailure

from ebbdb.server.embedded import ServerThread
from tests.e2e import rawwire
from tests.e2e.node_tools import run_js

Client = MongoClient[dict[str, Any]]


def _start(path: str) -> ServerThread:
    return ServerThread(path, {"enableTestCommands": True}, repl_set="rs0").start()


@pytest.fixture
def srv(tmp_path: Any) -> Iterator[ServerThread]:
    server = _start(str(tmp_path / "rs"))
    yield server
    server.stop()


@pytest.fixture
def client(srv: ServerThread) -> Iterator[Client]:
    # pymongo marks the server unknown on a "shutting down" write concern error (it reads no
    # topologyVersion there) until its next heartbeat: a short one keeps those tests quick.
    with MongoClient(srv.uri, heartbeatFrequencyMS=500) as c:
        yield c
        c.admin.command("configureFailPoint", "failCommand", mode="off")


#: Added to the tests' txnNumbers: pymongo's pooled sessions carry on from the numbers its own
#: retryable writes (insert_one and the like) used.
TXN_BASE = 1000


def _send(client: Client, s: ClientSession, txn: int, cmd: dict[str, Any]) -> dict[str, Any]:
    """`cmd` on database t in session `s` with txnNumber `txn` (as a driver's retryable write)."""
    return client.t.command({**cmd, "txnNumber": Int64(TXN_BASE + txn)}, session=s)


def _strip(reply: dict[str, Any]) -> dict[str, Any]:
    gossip = ("$clusterTime", "operationTime", "opTime", "electionId")
    return {k: v for k, v in reply.items() if k not in gossip}


def test_a_retried_insert_is_applied_once(client: Client) -> None:
    with client.start_session() as s:
        cmd = {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}]}
        first = _strip(_send(client, s, 1, cmd))
        again = _strip(_send(client, s, 1, cmd))
        assert first == again == {"n": 2, "ok": 1.0}
        assert client.t.c.count_documents({}) == 2
        # A new txnNumber is a new write: the same documents are now duplicates.
        third = _send(client, s, 2, cmd)
        assert [e["code"] for e in third["writeErrors"]] == [11000]


def test_a_retried_update_and_upsert_answer_their_first_result(client: Client) -> None:
    client.t.c.insert_one({"_id": 1, "x": 0})
    with client.start_session() as s:
        cmd = {
            "update": "c",
            "updates": [
                {"q": {"_id": 1}, "u": {"$inc": {"x": 1}}},
                {"q": {"_id": 2}, "u": {"$inc": {"x": 1}}, "upsert": True},
            ],
        }
        first = _strip(_send(client, s, 1, cmd))
        again = _strip(_send(client, s, 1, cmd))
        assert first == again
        assert first == {"n": 2, "nModified": 1, "upserted": [{"index": 1, "_id": 2}], "ok": 1.0}
        assert list(client.t.c.find().sort("_id")) == [{"_id": 1, "x": 1}, {"_id": 2, "x": 1}]


def test_a_retried_delete_answers_n(client: Client) -> None:
    client.t.c.insert_many([{"_id": 1}, {"_id": 2}])
    with client.start_session() as s:
        cmd = {"delete": "c", "deletes": [{"q": {"_id": 1}, "limit": 1}]}
        assert _strip(_send(client, s, 7, cmd)) == {"n": 1, "ok": 1.0}
        assert _strip(_send(client, s, 7, cmd)) == {"n": 1, "ok": 1.0}
        assert client.t.c.count_documents({}) == 1


@pytest.mark.parametrize("new", [False, True])
def test_a_retried_find_and_modify_returns_its_first_value(client: Client, new: bool) -> None:
    client.t.c.insert_one({"_id": 1, "x": 0})
    with client.start_session() as s:
        cmd = {"findAndModify": "c", "query": {"_id": 1}, "update": {"$inc": {"x": 1}}, "new": new}
        first = _strip(_send(client, s, 3, cmd))
        again = _strip(_send(client, s, 3, cmd))
        assert first == again
        assert first["value"] == {"_id": 1, "x": 1 if new else 0}
        assert first["lastErrorObject"] == {"n": 1, "updatedExisting": True}
        assert client.t.c.find_one() == {"_id": 1, "x": 1}


def test_a_batch_cut_off_halfway_runs_the_rest_when_retried(client: Client) -> None:
    client.t.c.insert_one({"_id": 3})  # statement 2 will fail on it
    with client.start_session() as s:
        cmd = {"insert": "c", "documents": [{"_id": i, "try": 1} for i in range(1, 6)]}
        cmd["documents"][2] = {"_id": 3, "try": 1}
        cmd["documents"][0] = {"_id": 0, "try": 1}
        first = _send(client, s, 1, cmd)
        assert first["n"] == 2 and [e["index"] for e in first["writeErrors"]] == [2]
        client.t.c.delete_one({"_id": 3})
        # Sent again: statements 0 and 1 were executed and are not run again.
        cmd["documents"] = [{**d, "try": 2} for d in cmd["documents"]]
        again = _strip(_send(client, s, 1, cmd))
        assert again == {"n": 5, "ok": 1.0}
        docs = list(client.t.c.find().sort("_id"))
        assert [(d["_id"], d["try"]) for d in docs] == [(0, 1), (2, 1), (3, 2), (4, 2), (5, 2)]


def test_config_transactions_records_the_write(client: Client) -> None:
    with client.start_session() as s:
        _send(client, s, 4, {"insert": "c", "documents": [{"_id": 1}]})
        record = client.config.transactions.find_one()
        assert record is not None
        assert set(record) == {"_id", "txnNum", "lastWriteOpTime", "lastWriteDate"}
        assert record["_id"]["id"] == s.session_id["id"]
        assert record["txnNum"] == TXN_BASE + 4
        entry = client.local.oplog.rs.find_one({"op": "i", "ns": "t.c"})
        assert entry is not None
        assert record["lastWriteOpTime"] == {"ts": entry["ts"], "t": entry["t"]}
        assert (entry["txnNumber"], entry["stmtId"]) == (TXN_BASE + 4, 0)
        assert entry["lsid"]["id"] == s.session_id["id"]


def test_a_write_is_remembered_across_a_restart(tmp_path: Any) -> None:
    path = str(tmp_path / "rs")
    srv = _start(path)
    lsid = {"id": Binary(b"0123456789abcdef", 4)}
    other = {"id": Binary(b"fedcba9876543210", 4)}
    insert = {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}], "lsid": lsid, "$db": "t"}
    fam = {
        "findAndModify": "c",
        "query": {"_id": 1},
        "update": {"$inc": {"x": 1}},
        "new": True,
        "lsid": lsid,
        "$db": "t",
    }
    batch = {"insert": "c", "documents": [{"_id": i} for i in (3, 4, 5)], "$db": "t"}
    batch["lsid"] = other
    try:
        with rawwire.connect(srv) as sock:
            assert rawwire.op_msg(sock, {**insert, "txnNumber": Int64(1)})["n"] == 2
            first = rawwire.op_msg(sock, {**fam, "txnNumber": Int64(2)})
            rawwire.op_msg(sock, {"insert": "c", "documents": [{"_id": 4}], "$db": "t"})
            cut = rawwire.op_msg(sock, {**batch, "txnNumber": Int64(9)})
            assert (cut["n"], [e["index"] for e in cut["writeErrors"]]) == (1, [1])
            rawwire.op_msg(
                sock, {"delete": "c", "deletes": [{"q": {"_id": 4}, "limit": 1}], "$db": "t"}
            )
    finally:
        srv.stop()
    srv = _start(path)
    try:
        with rawwire.connect(srv) as sock:
            again = rawwire.op_msg(sock, {**fam, "txnNumber": Int64(2)})
            assert (again["value"], again["lastErrorObject"]) == (
                first["value"],
                first["lastErrorObject"],
            )
            old = rawwire.op_msg(sock, {**insert, "txnNumber": Int64(1)})
            assert (old["ok"], old["code"], old["codeName"]) == (0.0, 225, "TransactionTooOld")
            # The cut-off batch, sent again after the restart: statement 0 is not run again.
            rest = rawwire.op_msg(sock, {**batch, "txnNumber": Int64(9)})
            assert (rest["ok"], rest["n"], "writeErrors" in rest) == (1.0, 3, False)
            found = rawwire.op_msg(sock, {"find": "c", "$db": "t"})["cursor"]["firstBatch"]
            assert sorted(found, key=lambda d: d["_id"]) == [
                {"_id": 1, "x": 1},
                {"_id": 2},
                {"_id": 3},
                {"_id": 4},
                {"_id": 5},
            ]
    finally:
        srv.stop()


def test_an_older_txn_number_is_transaction_too_old(client: Client) -> None:
    with client.start_session() as s:
        _send(client, s, 5, {"insert": "c", "documents": [{}]})
        with pytest.raises(OperationFailure) as info:
            _send(client, s, 4, {"insert": "c", "documents": [{}]})
        assert info.value.code == 225
        ident = s.session_id["id"].as_uuid()
        assert info.value.details is not None
        assert info.value.details["errmsg"] == (
            f"Retryable write with txnNumber {TXN_BASE + 4} is prohibited on session {ident} - "
            "47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU= -  -  because a newer retryable "
            f"write with txnNumber {TXN_BASE + 5} has already started on this session."
        )
        assert client.t.c.count_documents({}) == 1


@pytest.mark.parametrize(
    ("body", "code", "message"),
    [
        (
            {"insert": "c", "documents": [{}], "txnNumber": Int64(1)},
            72,
            "Transaction number requires a session ID to also be specified",
        ),
        (
            {"find": "c", "txnNumber": Int64(1), "lsid": {"id": Binary(b"x" * 16, 4)}},
            50768,
            "txnNumber may only be provided for multi-document transactions and retryable "
            "write commands. autocommit:false was not provided, and find is not a retryable "
            "write command.",
        ),
        (
            {
                "insert": "c",
                "documents": [{}],
                "txnNumber": 1,
                "lsid": {"id": Binary(b"x" * 16, 4)},
            },
            14,
            "BSON field 'OperationSessionInfo.txnNumber' is the wrong type 'int', expected type "
            "'long'",
        ),
        (
            {
                "insert": "c",
                "documents": [{}],
                "txnNumber": Int64(-1),
                "lsid": {"id": Binary(b"x" * 16, 4)},
            },
            2,
            "Transaction number cannot be negative",
        ),
    ],
    ids=["no-lsid", "not-a-write", "int32", "negative"],
)
def test_bad_transaction_fields(
    srv: ServerThread, body: dict[str, Any], code: int, message: str
) -> None:
    with rawwire.connect(srv) as sock:
        reply = rawwire.op_msg(sock, {**body, "$db": "t"})
        assert (reply["ok"], reply["code"], reply["errmsg"]) == (0.0, code, message)
        assert rawwire.op_msg(sock, {"count": "c", "$db": "t"})["n"] == 0  # nothing written


def _fail(client: Client, commands: list[str], **data: Any) -> None:
    client.admin.command(
        "configureFailPoint",
        "failCommand",
        mode={"times": 1},
        data={"failCommands": commands, **data},
    )


RETRY_CASES = {
    "closeConnection": {"closeConnection": True},
    "errorLabels": {"errorCode": 91, "errorLabels": ["RetryableWriteError"]},
    "serverLabel": {"errorCode": 11600},
    # The write is applied, then the reply says its write concern failed: pymongo retries a
    # write that was done, which must not be done twice.
    "writeConcernError": {
        "writeConcernError": {"code": 91, "errmsg": "Replication is being shut down"},
        "errorLabels": ["RetryableWriteError"],
    },
}


@pytest.mark.parametrize("how", list(RETRY_CASES))
def test_pymongo_retries_each_write_once(client: Client, how: str) -> None:
    data = RETRY_CASES[how]
    items = client.t.items
    items.insert_one({"_id": 0, "x": 0})

    _fail(client, ["insert"], **data)
    assert items.insert_one({"_id": 1, "x": 0}).inserted_id == 1
    _fail(client, ["insert"], **data)
    assert items.insert_many([{"_id": 2}, {"_id": 3}]).inserted_ids == [2, 3]
    _fail(client, ["update"], **data)
    assert items.update_one({"_id": 0}, {"$inc": {"x": 1}}).modified_count == 1
    _fail(client, ["update"], **data)
    result = items.update_one({"_id": 9}, {"$inc": {"x": 1}}, upsert=True)
    assert result.upserted_id == 9
    _fail(client, ["findAndModify"], **data)
    doc = items.find_one_and_update(
        {"_id": 0}, {"$inc": {"x": 10}}, return_document=ReturnDocument.AFTER
    )
    assert doc == {"_id": 0, "x": 11}
    _fail(client, ["delete"], **data)
    assert items.delete_one({"_id": 3}).deleted_count == 1

    assert list(items.find().sort("_id")) == [
        {"_id": 0, "x": 11},
        {"_id": 1, "x": 0},
        {"_id": 2},
        {"_id": 9, "x": 1},
    ]


def test_a_retryable_error_carries_the_label(srv: ServerThread, client: Client) -> None:
    lsid = {"id": Binary(b"L" * 16, 4)}
    insert = {"insert": "c", "documents": [{}], "$db": "t"}
    with rawwire.connect(srv) as sock:
        _fail(client, ["insert"], errorCode=91)
        reply = rawwire.op_msg(sock, {**insert, "lsid": lsid, "txnNumber": Int64(1)})
        assert (reply["code"], reply["errorLabels"]) == (91, ["RetryableWriteError"])
        # A shutdown or "not primary" error says the topologyVersion, as mongod's: drivers see
        # no news in it and retry at once.
        hello = rawwire.op_msg(sock, {"hello": 1, "$db": "admin"})
        assert reply["topologyVersion"] == hello["topologyVersion"]
        # Not a retryable write (no txnNumber): no label.
        _fail(client, ["insert"], errorCode=91)
        reply = rawwire.op_msg(sock, {**insert, "lsid": lsid})
        assert reply["code"] == 91 and "errorLabels" not in reply
        # Not a retryable code: no label.
        _fail(client, ["insert"], errorCode=2)
        reply = rawwire.op_msg(sock, {**insert, "lsid": lsid, "txnNumber": Int64(2)})
        assert reply["code"] == 2 and "errorLabels" not in reply
        # A write concern error with a retryable code: the label too.
        _fail(client, ["insert"], writeConcernError={"code": 91, "errmsg": "shutting down"})
        reply = rawwire.op_msg(sock, {**insert, "lsid": lsid, "txnNumber": Int64(3)})
        assert (reply["n"], reply["errorLabels"]) == (1, ["RetryableWriteError"])


def test_a_retryable_read_is_retried(client: Client) -> None:
    client.t.c.insert_one({"_id": 1})
    _fail(client, ["find"], closeConnection=True)
    assert client.t.c.find_one() == {"_id": 1}
    _fail(client, ["aggregate"], errorCode=10107)
    assert list(client.t.c.aggregate([{"$match": {}}])) == [{"_id": 1}]


def test_the_node_driver_retries_each_write_once(srv: ServerThread) -> None:
    out = run_js("retryable_writes.js", srv.uri, timeout=120)
    for how in ("closeConnection", "errorLabels", "writeConcernError"):
        assert out[how] == {
            "insertOne": 1,
            "insertMany": 2,
            "updateOne": 1,
            "upsert": 9,
            "findOneAndUpdate": {"_id": 0, "x": 11},
            "deleteOne": 1,
            "left": [{"_id": 0, "x": 11}, {"_id": 1, "x": 0}, {"_id": 2}, {"_id": 9, "x": 1}],
        }, how


def test_records_of_sessions_gone_for_a_timeout_are_reaped(
    srv: ServerThread, client: Client
) -> None:
    lsid = {"id": Binary(b"R" * 16, 4)}
    with rawwire.connect(srv) as sock:
        body = {"insert": "c", "documents": [{}], "lsid": lsid, "txnNumber": Int64(1), "$db": "t"}
        assert rawwire.op_msg(sock, body)["n"] == 1
    assert client.config.transactions.count_documents({"_id.id": lsid["id"]}) == 1
    try:
        client.admin.command("ttlClock", advanceSeconds=31 * 60)
        # The first refresh forgets the idle session; its record goes once a timeout has passed.
        client.admin.command("refreshLogicalSessionCacheNow")
        assert client.config.transactions.count_documents({"_id.id": lsid["id"]}) == 0
    finally:
        client.admin.command("ttlClock", reset=True)


def test_a_multi_statement_runs_again_and_the_others_do_not(tmp_path: Any) -> None:
    path = str(tmp_path / "rs")
    lsid = {"id": Binary(b"M" * 16, 4)}
    cmd = {
        "update": "c",
        "updates": [
            {"q": {"_id": 1}, "u": {"$inc": {"x": 1}}},
            {"q": {}, "u": {"$inc": {"m": 1}}, "multi": True},
        ],
        "lsid": lsid,
        "txnNumber": Int64(1),
        "$db": "t",
    }
    srv = _start(path)
    try:
        with rawwire.connect(srv) as sock:
            rawwire.op_msg(sock, {"insert": "c", "documents": [{"_id": 1}, {"_id": 2}], "$db": "t"})
            first = rawwire.op_msg(sock, cmd)
            assert (first["n"], first["nModified"]) == (3, 3)
            query = {"op": "u", "lsid.id": lsid["id"]}
            found = rawwire.op_msg(sock, {"find": "oplog.rs", "filter": query, "$db": "local"})
            stmt_ids = [e.get("stmtId") for e in found["cursor"]["firstBatch"]]
            assert stmt_ids == [0, None, None]  # the multi statement's entries have none
    finally:
        srv.stop()
    srv = _start(path)
    try:
        with rawwire.connect(srv) as sock:
            again = rawwire.op_msg(sock, cmd)
            assert (again["n"], again["nModified"]) == (3, 3)
            docs = rawwire.op_msg(sock, {"find": "c", "$db": "t"})["cursor"]["firstBatch"]
            # Statement 0 once; the multi statement, not retryable, twice (as with mongod).
            assert docs == [{"_id": 1, "x": 1, "m": 2}, {"_id": 2, "m": 2}]
    finally:
        srv.stop()


def test_a_newer_retryable_write_aborts_the_sessions_transaction(srv: ServerThread) -> None:
    lsid = {"id": Binary(b"T" * 16, 4)}
    with rawwire.connect(srv) as sock:
        rawwire.op_msg(sock, {"create": "c", "$db": "t"})
        started = rawwire.op_msg(
            sock,
            {
                "insert": "c",
                "documents": [{"_id": "in the transaction"}],
                "lsid": lsid,
                "txnNumber": Int64(1),
                "autocommit": False,
                "startTransaction": True,
                "$db": "t",
            },
        )
        assert started["ok"] == 1.0
        written = rawwire.op_msg(
            sock,
            {
                "insert": "c",
                "documents": [{"_id": "retryable"}],
                "lsid": lsid,
                "txnNumber": Int64(2),
                "$db": "t",
            },
        )
        assert written["n"] == 1
        commit = rawwire.op_msg(
            sock,
            {
                "commitTransaction": 1,
                "lsid": lsid,
                "txnNumber": Int64(1),
                "autocommit": False,
                "$db": "admin",
            },
        )
        assert commit["ok"] == 0.0 and commit["code"] == 225
        found = rawwire.op_msg(sock, {"find": "c", "$db": "t"})["cursor"]["firstBatch"]
        assert found == [{"_id": "retryable"}]
