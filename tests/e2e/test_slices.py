"""Writes that commit in slices (server/gateway.py's write_sliced): another client's insert goes
in while an update_many is still running; a killed statement stops between two slices, with the
slices before it applied; an ordered insert_many stops at its first error across slices and an
unordered one goes on; many one-document statements go in pieces; a statement of a
multi-document transaction is not sliced."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from bson.int64 import Int64
from pymongo import MongoClient, UpdateOne
from pymongo.errors import BulkWriteError, OperationFailure

from ebbdb.server.embedded import ServerThread
from ebbdb.server.gateway import Gateway
from ebbdb.storage.core import interrupt
from ebbdb.storage.execution import writes

Doc = dict[str, Any]


def _client(uri: str) -> MongoClient[Doc]:
    return MongoClient(uri)


@pytest.fixture
def slices(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Every slice a statement commits, counted (one entry per slice), in small slices."""
    monkeypatch.setattr(writes, "SLICE_DOCUMENTS", 50)
    monkeypatch.setattr(writes, "INSERT_SLICE_DOCUMENTS", 10)
    counted: list[int] = []
    original = Gateway.write_slice

    def counting(self: Gateway, job: Callable[[], Any]) -> Any:
        counted.append(1)
        return original(self, job)

    monkeypatch.setattr(Gateway, "write_slice", counting)
    yield counted


def test_an_insert_goes_in_while_update_many_runs(
    client: MongoClient[Doc], uri: str, slices: list[int]
) -> None:
    n = 5_000
    coll = client.slices.docs
    coll.drop()
    coll.insert_many([{"_id": i, "n": 0} for i in range(n)])
    updated: list[int] = []
    updater = threading.Thread(
        target=lambda: updated.append(coll.update_many({}, {"$inc": {"n": 1}}).modified_count)
    )
    partly: list[int] = []
    with _client(uri) as inserter, _client(uri) as reader:
        updater.start()
        i = 0
        while updater.is_alive() and not partly:
            inserter.slices.others.insert_one({"i": i})
            i += 1
            # Acknowledged: the update_many is applied in part (so still running) right after.
            done = reader.slices.docs.count_documents({"n": 1})
            if 0 < done < n:
                partly.append(done)
        updater.join()
    assert updated == [n]
    assert partly, "no insert was acknowledged while the update_many was applied in part"
    assert len(slices) >= n // 50


def test_a_killed_update_many_stops_between_slices(
    client: MongoClient[Doc], monkeypatch: pytest.MonkeyPatch, slices: list[int]
) -> None:
    coll = client.slices.killed
    coll.drop()
    coll.insert_many([{"_id": i, "n": 0} for i in range(500)])
    original = Gateway.write_slice

    def kill_after_first(self: Gateway, job: Callable[[], Any]) -> Any:
        result = original(self, job)
        interrupt.current.get().kill()  # as killOp would, once the first slice is committed
        return result

    monkeypatch.setattr(Gateway, "write_slice", kill_after_first)
    with pytest.raises(OperationFailure) as failed:
        coll.update_many({}, {"$inc": {"n": 1}})
    assert failed.value.code == 11601  # Interrupted
    # The first slice stays applied: the first 50 documents in the order the update visits them.
    assert sorted(d["_id"] for d in coll.find({"n": 1})) == list(range(50))


def test_update_many_with_max_time_ms_leaves_a_prefix(
    client: MongoClient[Doc], slices: list[int]
) -> None:
    coll = client.slices.timed
    coll.drop()
    coll.insert_many([{"_id": i, "n": 0} for i in range(3_000)])
    try:
        coll.database.command(
            "update",
            "timed",
            updates=[{"q": {}, "u": {"$inc": {"n": 1}}, "multi": True}],
            maxTimeMS=1,
        )
    except OperationFailure as exc:
        assert exc.code == 50  # MaxTimeMSExpired
    counts = sorted({d["n"] for d in coll.find()})
    changed = [d["_id"] for d in coll.find({"n": counts[-1]})]
    assert changed == list(range(len(changed)))  # a prefix of the collection's order


def test_ordered_insert_many_stops_at_the_first_error_across_slices(
    client: MongoClient[Doc], slices: list[int]
) -> None:
    coll = client.slices.ordered
    coll.drop()
    docs: list[Doc] = [{"_id": i} for i in range(50)]
    docs[25] = {"_id": 3}
    with pytest.raises(BulkWriteError) as failed:
        coll.insert_many(docs)
    details = failed.value.details
    assert details["nInserted"] == 25
    assert [e["index"] for e in details["writeErrors"]] == [25]
    assert sorted(d["_id"] for d in coll.find()) == list(range(25))
    assert len(slices) >= 3


def test_unordered_insert_many_goes_on_across_slices(
    client: MongoClient[Doc], slices: list[int]
) -> None:
    coll = client.slices.unordered
    coll.drop()
    docs: list[Doc] = [{"_id": i} for i in range(50)]
    docs[25] = {"_id": 3}
    docs[41] = {"_id": 7}
    with pytest.raises(BulkWriteError) as failed:
        coll.insert_many(docs, ordered=False)
    details = failed.value.details
    assert details["nInserted"] == 48
    assert [(e["index"], e["code"]) for e in details["writeErrors"]] == [(25, 11000), (41, 11000)]
    assert coll.count_documents({}) == 48
    assert len(slices) == 5


def test_delete_many_in_slices(client: MongoClient[Doc], slices: list[int]) -> None:
    coll = client.slices.deleted
    coll.drop()
    coll.insert_many([{"_id": i, "even": i % 2 == 0} for i in range(400)])
    assert coll.delete_many({"even": True}).deleted_count == 200
    assert coll.count_documents({}) == 200
    assert len(slices) >= 4


def test_a_statement_of_a_transaction_is_not_sliced(
    replset: ServerThread, slices: list[int]
) -> None:
    with _client(replset.uri) as c, _client(replset.uri) as other:
        coll = c.slices.txn
        coll.drop()
        coll.insert_many([{"_id": i, "n": 0} for i in range(300)])
        before = len(slices)
        with c.start_session() as s, s.start_transaction():
            assert coll.update_many({}, {"$inc": {"n": 1}}, session=s).modified_count == 300
            assert other.slices.txn.count_documents({"n": 1}) == 0
        assert other.slices.txn.count_documents({"n": 1}) == 300
        assert len(slices) == before  # it committed with the transaction, in no slice


def test_a_retryable_insert_many_commits_in_slices_and_runs_once(
    replset: ServerThread, slices: list[int]
) -> None:
    with _client(replset.uri) as c, c.start_session() as s:
        db = c.slices
        db.retried.drop()
        docs: list[Doc] = [{"_id": i} for i in range(50)]
        docs[33] = {"_id": 2}
        cmd = {"insert": "retried", "documents": docs, "ordered": False, "txnNumber": Int64(10**6)}
        first = db.command(cmd, session=s)
        assert first["n"] == 49 and [e["index"] for e in first["writeErrors"]] == [33]
        assert len(slices) == 5
        # Sent again (a driver's retry): each slice recorded its statements with them.
        again = db.command(cmd, session=s)
        assert again["n"] == 49 and [e["index"] for e in again["writeErrors"]] == [33]
        assert db.retried.count_documents({}) == 49


def test_a_sliced_update_many_logs_every_document_once(
    replset: ServerThread, slices: list[int]
) -> None:
    with _client(replset.uri) as c:
        coll = c.slices.logged
        coll.drop()
        coll.insert_many([{"_id": i, "n": 0} for i in range(120)])
        before = len(slices)
        assert coll.update_many({}, {"$inc": {"n": 1}}).modified_count == 120
        assert len(slices) - before >= 3
        entries = list(c.local["oplog.rs"].find({"ns": "slices.logged", "op": "u"}))
        assert sorted(e["o2"]["_id"] for e in entries) == list(range(120))


@pytest.mark.parametrize("ordered", [True, False])
def test_many_one_document_statements_commit_in_pieces(
    client: MongoClient[Doc], slices: list[int], ordered: bool
) -> None:
    coll = client.slices.pieces
    coll.drop()
    coll.insert_many([{"_id": i, "n": 0} for i in range(200)])
    coll.update_one({"_id": 120}, {"$set": {"n": "text"}})
    before = len(slices)
    with pytest.raises(BulkWriteError) as failed:
        coll.bulk_write([UpdateOne({"_id": i}, {"$inc": {"n": 1}}) for i in range(200)], ordered)
    details = failed.value.details
    assert [e["index"] for e in details["writeErrors"]] == [120]
    reached = 120 if ordered else 199
    assert details["nModified"] == reached
    assert coll.count_documents({"n": 1}) == reached
    assert len(slices) - before >= (3 if ordered else 4)  # 50 statements a piece


def test_a_retryable_command_in_pieces_runs_once(replset: ServerThread, slices: list[int]) -> None:
    with _client(replset.uri) as c, c.start_session() as s:
        db = c.slices
        db.retried_updates.drop()
        db.retried_updates.insert_many([{"_id": i, "n": 0} for i in range(120)])
        updates = [{"q": {"_id": i}, "u": {"$inc": {"n": 1}}} for i in range(120)]
        cmd = {"update": "retried_updates", "updates": updates, "txnNumber": Int64(10**6 + 1)}
        before = len(slices)
        first = db.command(cmd, session=s)
        assert (first["n"], first["nModified"]) == (120, 120)
        assert len(slices) - before >= 3
        again = db.command(cmd, session=s)  # a driver's retry: replayed, not run again
        assert (again["n"], again["nModified"]) == (120, 120)
        assert db.retried_updates.count_documents({"n": 1}) == 120
