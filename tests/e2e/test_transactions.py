"""Transactions on a standalone server are refused as a standalone mongod refuses them, through
pymongo, AsyncMongoClient, motor and the Node driver: the first command of a transaction gets 20
IllegalOperation, and nothing it asked to write is written."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import OperationFailure

from ebbdb.server.transactions import NOT_REPLICATED
from tests.e2e.node_tools import run_node

Client = MongoClient[dict[str, Any]]


def _refused(info: pytest.ExceptionInfo[OperationFailure]) -> None:
    assert info.value.code == 20
    assert info.value.details is not None
    assert info.value.details["codeName"] == "IllegalOperation"
    assert info.value.details["errmsg"] == NOT_REPLICATED


def test_pymongo_transaction_writes_nothing(client: Client) -> None:
    orders = client.shop.orders
    with client.start_session() as session:
        session.start_transaction()
        with pytest.raises(OperationFailure) as info:
            orders.insert_one({"_id": 1, "item": "tea"}, session=session)
        _refused(info)
        session.abort_transaction()
    assert orders.count_documents({}) == 0


def test_pymongo_with_transaction_writes_nothing(client: Client) -> None:
    orders = client.shop.orders

    def work(session: Any) -> None:
        orders.insert_one({"_id": 1}, session=session)
        orders.update_one({"_id": 1}, {"$set": {"paid": True}}, session=session)

    with client.start_session() as session, pytest.raises(OperationFailure) as info:
        session.with_transaction(work)
    _refused(info)
    assert orders.count_documents({}) == 0


@pytest.mark.asyncio
async def test_async_client_transaction_writes_nothing(uri: str) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    try:
        orders = client.shop.orders
        async with client.start_session() as session:
            await session.start_transaction()
            with pytest.raises(OperationFailure) as info:
                await orders.insert_one({"_id": 1}, session=session)
            _refused(info)
            await session.abort_transaction()
        assert await orders.count_documents({}) == 0
    finally:
        await client.close()


@pytest.mark.asyncio
async def test_motor_transaction_writes_nothing(motor_client: Any) -> None:
    orders = motor_client.shop.orders
    async with await motor_client.start_session() as session:
        session.start_transaction()
        with pytest.raises(OperationFailure) as info:
            await orders.insert_one({"_id": 1}, session=session)
        _refused(info)
        await session.abort_transaction()
    assert await orders.count_documents({}) == 0


def test_node_with_transaction_writes_nothing(uri: str) -> None:
    # The Node driver turns a write's code 20 with this message into its retryable-writes advice,
    # as it does against a standalone mongod.
    assert run_node(uri, "transaction") == {
        "error": {
            "code": None,
            "codeName": None,
            "message": "This MongoDB deployment does not support retryable writes. Please add "
            "retryWrites=false to your connection string.",
        },
        "count": 0,
    }


@pytest.mark.parametrize(
    ("fields", "code", "message"),
    [
        ({"txnNumber": 1}, 20, NOT_REPLICATED),
        ({"txnNumber": 1, "autocommit": False, "startTransaction": True}, 20, NOT_REPLICATED),
        ({"autocommit": True}, 72, "Specifying autocommit=true is not allowed."),
        (
            {"autocommit": False},
            72,
            "'autocommit' field requires a transaction number to also be specified",
        ),
        (
            {"startTransaction": True},
            72,
            "'startTransaction' field requires 'autocommit' field to also be specified",
        ),
    ],
)
def test_transaction_fields_are_refused(
    client: Client, fields: dict[str, Any], code: int, message: str
) -> None:
    with client.start_session() as session:
        lsid = session.session_id
    with pytest.raises(OperationFailure) as info:
        client.shop.command({"insert": "orders", "documents": [{"_id": 1}], "lsid": lsid, **fields})
    assert (info.value.code, info.value.details and info.value.details["errmsg"]) == (code, message)
    assert client.shop.orders.count_documents({}) == 0


@pytest.mark.parametrize("command", ["commitTransaction", "abortTransaction"])
def test_ending_a_transaction_is_refused(client: Client, command: str) -> None:
    with pytest.raises(OperationFailure) as info:
        client.admin.command(command)
    _refused(info)
