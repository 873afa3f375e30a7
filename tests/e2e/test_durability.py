"""The write path through real clients: write concerns as a standalone MongoDB 7.0 answers them,
j/fsync/majority waiting for a shared sync, the background sync, the fsync command and its lock,
journalCommitInterval, and many statements or clients sharing one commit."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from pymongo import MongoClient, UpdateOne, WriteConcern
from pymongo.errors import OperationFailure

from ebbdb.storage.execution import writes
from tests.waiting import wait_until

Client = MongoClient[dict[str, Any]]


def writes_status(client: Client) -> dict[str, int]:
    return {k: int(v) for k, v in client.admin.command("serverStatus")["ebbdb"]["writes"].items()}


def command_error(client: Client, cmd: dict[str, Any], db: str = "t") -> OperationFailure:
    with pytest.raises(OperationFailure) as info:
        client[db].command(cmd)
    return info.value


@pytest.mark.parametrize(
    ("wc", "code", "message"),
    [
        ({"w": 2}, 2, "cannot use 'w' > 1 when a host is not replicated"),
        (
            {"w": "bogusTag"},
            2,
            "cannot use non-majority 'w' mode bogusTag when a host is not a member of a replica set",
        ),
        ({"w": 51}, 9, "w has to be a non-negative number and not greater than 50; found: 51"),
        ({"w": -1}, 9, "w has to be a non-negative number and not greater than 50; found: -1"),
        ({"w": True}, 9, "w has to be a number or string"),
        ({"w": {}}, 9, "tagged write concern requires tags"),
        ({"w": {"dc": 1}}, 2, "when a host is not a member of a replica set"),
        (
            {"j": "yes"},
            14,
            "BSON field 'writeConcern.j' is the wrong type 'string', expected types "
            "'[bool, long, int, decimal, double]'",
        ),
        ({"j": True, "fsync": True}, 9, "fsync and j options cannot be used together"),
        (
            {"wtimeout": "soon"},
            14,
            "BSON field 'writeConcern.wtimeout' is the wrong type 'string'",
        ),
    ],
)
def test_write_concerns_a_standalone_cannot_honour_are_refused(
    client: Client, wc: dict[str, Any], code: int, message: str
) -> None:
    err = command_error(client, {"insert": "c", "documents": [{"_id": 1}], "writeConcern": wc})
    assert err.code == code
    assert message in str(err.details["errmsg"])
    assert client.t.c.count_documents({}) == 0  # refused before anything was written


def test_write_concern_must_be_a_document(client: Client) -> None:
    err = command_error(client, {"insert": "c", "documents": [{}], "writeConcern": "majority"})
    assert err.code == 14
    assert err.details["errmsg"] == (
        "BSON field 'insert.writeConcern' is the wrong type 'string', expected type 'object'"
    )


def test_a_read_refuses_a_write_concern(client: Client) -> None:
    err = command_error(client, {"find": "c", "writeConcern": {"w": 1}})
    assert (err.code, err.details["codeName"]) == (72, "InvalidOptions")


@pytest.mark.parametrize(
    "wc", [{"w": 1}, {"w": "majority"}, {"j": True}, {"fsync": True}, {"w": 1, "wtimeout": 100}, {}]
)
def test_write_concerns_a_standalone_honours(client: Client, wc: dict[str, Any]) -> None:
    reply = client.t.command({"insert": "c", "documents": [{"_id": 1}], "writeConcern": wc})
    assert reply == {"n": 1, "ok": 1.0}
    assert client.t.c.find_one() == {"_id": 1}


@pytest.mark.parametrize("wc", [{"j": True}, {"fsync": True}, {"w": "majority"}])
def test_journaled_writes_are_synced_before_the_reply(client: Client, wc: dict[str, Any]) -> None:
    client.admin.command("setParameter", 1, journalCommitInterval=500)
    for i in range(5):
        client.t.command({"insert": "c", "documents": [{"_id": i}], "writeConcern": wc})
        status = writes_status(client)
        assert status["durableCommits"] >= status["commits"] - 1  # the ping of serverStatus
    with_driver = client.t.get_collection("d", write_concern=WriteConcern(**wc))
    with_driver.insert_one({"_id": "x"})
    with_driver.update_one({"_id": "x"}, {"$set": {"a": 1}})
    with_driver.delete_one({"_id": "x"})


def test_default_writes_are_acknowledged_before_the_sync_and_synced_soon(client: Client) -> None:
    client.admin.command("setParameter", 1, journalCommitInterval=500)
    time.sleep(0.6)
    client.t.c.insert_one({"_id": 1})
    status = writes_status(client)
    assert status["durableCommits"] < status["commits"]  # acknowledged without waiting
    client.admin.command("setParameter", 1, journalCommitInterval=20)
    wait_until(
        lambda: (now := writes_status(client))["durableCommits"] >= now["commits"],
        "every commit durable",
    )


def test_journal_commit_interval_parameter(client: Client) -> None:
    assert (
        client.admin.command("getParameter", 1, journalCommitInterval=1)["journalCommitInterval"]
        == 100
    )
    for bad in (0, 501, "x"):
        err = command_error(client, {"setParameter": 1, "journalCommitInterval": bad}, db="admin")
        assert err.code == 2
    assert client.admin.command("setParameter", 1, journalCommitInterval=250)["was"] == 100
    assert client.admin.command("getParameter", 1, syncdelay=1)["syncdelay"] == 60.0


def test_fsync_command(client: Client) -> None:
    client.t.c.insert_one({"_id": 1})
    assert client.admin.command("fsync") == {"numFiles": 1, "ok": 1.0}
    status = writes_status(client)
    assert status["durableCommits"] >= status["commits"] - 1
    err = command_error(client, {"fsync": 1}, db="t")
    assert err.code == 13


def test_fsync_lock_blocks_writes_not_reads(client: Client, uri: str) -> None:
    client.t.c.insert_one({"_id": 0})
    reply = client.admin.command("fsync", lock=True)
    assert reply["info"] == "now locked against writes, use db.fsyncUnlock() to unlock"
    assert reply["lockCount"] == 1 and reply["ok"] == 1.0
    assert client.admin.command("fsync", lock=True)["lockCount"] == 2
    other: Client = MongoClient(uri)
    done = threading.Event()

    def write() -> None:
        other.t.c.insert_one({"_id": 1})
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert not done.wait(0.5)  # the write waits for the unlock
        assert client.t.c.find_one({"_id": 0}) == {"_id": 0}  # reads go on
        assert client.admin.command("fsyncUnlock") == {
            "info": "fsyncUnlock completed",
            "lockCount": 1,
            "ok": 1.0,
        }
        assert not done.wait(0.3)
        assert client.admin.command("fsyncUnlock")["lockCount"] == 0
        assert done.wait(5)
    finally:
        writer.join(10)
        other.close()
    assert client.t.c.count_documents({}) == 2
    err = command_error(client, {"fsyncUnlock": 1}, db="admin")
    assert (err.code, err.details["errmsg"]) == (20, "fsyncUnlock called when not locked")


def test_bulk_updates_share_commits(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    client.t.c.insert_many([{"_id": i, "n": 0} for i in range(2000)])
    # A command of many statements commits in slices of SLICE_DOCUMENTS statements or
    # SLICE_SECONDS; without the time bound, which a loaded machine would make cut more often,
    # two slices.
    monkeypatch.setattr(writes, "SLICE_SECONDS", 60.0)
    before = writes_status(client)["commits"]
    result = client.t.c.bulk_write([UpdateOne({"_id": i}, {"$inc": {"n": 1}}) for i in range(2000)])
    assert (result.matched_count, result.modified_count) == (2000, 2000)
    # pymongo sends at most 100,000 statements a command: one command, one commit a slice; the
    # serverStatus reads in between commit nothing.
    assert writes_status(client)["commits"] - before <= 2000 // writes.SLICE_DOCUMENTS
    assert client.t.c.count_documents({"n": 1}) == 2000


def test_concurrent_journaled_writers_share_syncs(uri: str, client: Client) -> None:
    per_client, clients = 100, 8
    before = writes_status(client)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        c: Client = MongoClient(uri, w=1, journal=True)
        try:
            coll = c.t.get_collection("j")
            for i in range(per_client):
                coll.insert_one({"_id": k * 1000 + i})
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            c.close()

    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert client.t.j.count_documents({}) == per_client * clients
    after = writes_status(client)
    # Every journaled write waited for a sync; waiters that arrived together shared one
    # (tests/server/test_gateway.py shows the sharing deterministically).
    assert after["durableCommits"] >= before["commits"] + per_client * clients
    assert after["syncs"] - before["syncs"] < per_client * clients


def test_an_ordered_bulk_stops_at_its_failing_statement(client: Client) -> None:
    client.t.c.insert_many([{"_id": 1, "s": "text"}, {"_id": 2, "n": 1}])
    reply = client.t.command(
        {
            "update": "c",
            "updates": [
                {"q": {"_id": 2}, "u": {"$inc": {"n": 1}}},
                {"q": {"_id": 1}, "u": {"$inc": {"s": 1}}},
                {"q": {"_id": 2}, "u": {"$inc": {"n": 1}}},
            ],
        }
    )
    assert (reply["n"], reply["nModified"]) == (1, 1)
    assert [(e["index"], e["code"]) for e in reply["writeErrors"]] == [(1, 14)]
    assert client.t.c.find_one({"_id": 2}) == {"_id": 2, "n": 2}
