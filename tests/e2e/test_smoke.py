"""The shortest path through the server: connect, write, read, with each driver."""

from __future__ import annotations

from typing import Any

import pytest
from pymongo import AsyncMongoClient, MongoClient


def test_pymongo_insert_and_find(client: MongoClient[dict[str, Any]]) -> None:
    coll = client.smoke.items
    coll.insert_one({"_id": 1, "name": "a"})
    assert coll.find_one({"_id": 1}) == {"_id": 1, "name": "a"}


@pytest.mark.asyncio
async def test_async_mongo_client_insert_and_find(
    async_client: AsyncMongoClient[dict[str, Any]],
) -> None:
    coll = async_client.smoke.items
    await coll.insert_one({"_id": 2, "name": "b"})
    assert await coll.find_one({"name": "b"}) == {"_id": 2, "name": "b"}


@pytest.mark.asyncio
async def test_motor_insert_and_find(motor_client: Any) -> None:
    coll = motor_client.smoke.items
    await coll.insert_one({"_id": 3, "name": "c"})
    assert await coll.find_one({"_id": 3}) == {"_id": 3, "name": "c"}
