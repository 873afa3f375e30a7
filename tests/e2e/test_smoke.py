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
async def test_async_mongo_client_insert_and_find(uri: str) -> None:
    client: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    try:
        coll = client.smoke.items
        await coll.insert_one({"_id": 2, "name": "b"})
        assert await coll.find_one({"name": "b"}) == {"_id": 2, "name": "b"}
    finally:
        await client.close()


@pytest.mark.asyncio
async def test_motor_insert_and_find(uri: str) -> None:
    from motor.motor_asyncio import AsyncIOMotorClient

    client: Any = AsyncIOMotorClient(uri)
    try:
        coll = client.smoke.items
        await coll.insert_one({"_id": 3, "name": "c"})
        assert await coll.find_one({"_id": 3}) == {"_id": 3, "name": "c"}
    finally:
        client.close()
