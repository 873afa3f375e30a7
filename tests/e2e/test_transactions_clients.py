"""Transactions through every client's helper against a one-member replica set: pymongo's
AsyncMongoClient and motor (`with_transaction`), the Node.js driver (`withTransaction`) and
mongosh (`session.withTransaction`); and a commit whose connection is cut, which pymongo retries
(UnknownTransactionCommitResult) and which is applied once."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from motor.motor_asyncio import AsyncIOMotorClient
from pymongo import AsyncMongoClient, MongoClient

from ebbdb.server.embedded import ServerThread
from tests.e2e.node_tools import run_js, run_mongosh

Doc = dict[str, Any]


@pytest.fixture
def client(replset: ServerThread) -> Iterator[MongoClient[Doc]]:
    with MongoClient(replset.uri, serverSelectionTimeoutMS=5000) as c:
        c.drop_database("bank")
        c.bank.accounts.insert_many([{"_id": "a", "balance": 100}, {"_id": "b", "balance": 0}])
        yield c


@contextlib.contextmanager
def _failing_once(client: MongoClient[Doc], **data: Any) -> Iterator[None]:
    """The failCommand fail point set to act once with `data`, and turned off after the block."""
    client.admin.command("configureFailPoint", "failCommand", mode={"times": 1}, data=data)
    try:
        yield
    finally:
        client.admin.command("configureFailPoint", "failCommand", mode="off")


def _balances(client: MongoClient[Doc]) -> dict[str, int]:
    return {d["_id"]: d["balance"] for d in client.bank.accounts.find()}


@pytest.mark.asyncio
async def test_async_mongo_client_with_transaction(
    replset: ServerThread, client: MongoClient[Doc]
) -> None:
    async with AsyncMongoClient(replset.uri, serverSelectionTimeoutMS=5000) as ac:
        accounts = ac.bank.accounts

        async def transfer(session: Any) -> str:
            await accounts.update_one({"_id": "a"}, {"$inc": {"balance": -10}}, session=session)
            await accounts.update_one({"_id": "b"}, {"$inc": {"balance": 10}}, session=session)
            assert await accounts.find_one({"_id": "b"}) == {"_id": "b", "balance": 0}
            return "ok"

        async with ac.start_session() as s:
            assert await s.with_transaction(transfer) == "ok"
    assert _balances(client) == {"a": 90, "b": 10}


@pytest.mark.asyncio
async def test_motor_with_transaction(replset: ServerThread, client: MongoClient[Doc]) -> None:
    mc: AsyncIOMotorClient[Doc] = AsyncIOMotorClient(replset.uri, serverSelectionTimeoutMS=5000)
    try:
        accounts = mc.bank.accounts

        async def transfer(session: Any) -> None:
            await accounts.update_one({"_id": "a"}, {"$inc": {"balance": -25}}, session=session)
            await accounts.update_one({"_id": "b"}, {"$inc": {"balance": 25}}, session=session)

        async with await mc.start_session() as s:
            await s.with_transaction(transfer)
    finally:
        mc.close()
    assert _balances(client) == {"a": 75, "b": 25}


def test_node_driver_with_transaction(replset: ServerThread, client: MongoClient[Doc]) -> None:
    out = run_js("node_transactions.js", replset.uri)
    assert out == {
        "result": "moved",
        "inside": [{"_id": "a", "balance": 60}, {"_id": "b", "balance": 40}],
        "outside": [{"_id": "a", "balance": 100}, {"_id": "b", "balance": 0}],
        "thrown": "changed my mind",
        "after": [{"_id": "a", "balance": 60}, {"_id": "b", "balance": 40}],
    }


MONGOSH_SCRIPT = """
const session = db.getMongo().startSession();
const accounts = session.getDatabase('bank').accounts;
session.withTransaction(() => {
  accounts.updateOne({ _id: 'a' }, { $inc: { balance: -5 } });
  accounts.updateOne({ _id: 'b' }, { $inc: { balance: 5 } });
});
session.endSession();
print(EJSON.stringify(db.getSiblingDB('bank').accounts.find().sort({ _id: 1 }).toArray()));
"""


def test_mongosh_session_with_transaction(
    replset: ServerThread, client: MongoClient[Doc], tmp_path: Path
) -> None:
    lines = run_mongosh(replset.uri, MONGOSH_SCRIPT, tmp_path)
    assert json.loads(lines[-1]) == [{"_id": "a", "balance": 95}, {"_id": "b", "balance": 5}]


def test_a_commit_whose_connection_is_cut_is_retried_and_applied_once(
    client: MongoClient[Doc],
) -> None:

    def transfer(session: Any) -> None:
        client.bank.accounts.update_one({"_id": "a"}, {"$inc": {"balance": -1}}, session=session)
        client.bank.log.insert_one({"moved": 1}, session=session)

    with _failing_once(client, failCommands=["commitTransaction"], closeConnection=True):
        with client.start_session() as s:
            s.with_transaction(transfer)
    assert _balances(client) == {"a": 99, "b": 0}
    assert client.bank.log.count_documents({}) == 1


def test_a_failed_statement_gets_the_transient_label_and_is_retried(
    client: MongoClient[Doc],
) -> None:
    attempts = []

    def body(session: Any) -> None:
        attempts.append(1)
        client.bank.accounts.update_one({"_id": "a"}, {"$inc": {"balance": -1}}, session=session)
        client.bank.log.insert_one({"n": len(attempts)}, session=session)

    with _failing_once(client, failCommands=["insert"], errorCode=112):
        with client.start_session() as s:
            s.with_transaction(body)
    # The first attempt's insert failed with WriteConflict, labelled transient: the whole
    # transaction ran again, and only the second attempt's writes are there.
    assert len(attempts) == 2
    assert _balances(client) == {"a": 99, "b": 0}
    assert [d["n"] for d in client.bank.log.find()] == [2]
