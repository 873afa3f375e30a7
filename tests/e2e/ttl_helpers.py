"""Helpers the TTL end-to-end tests share: error codes of a failing call, moving the server's
expiry clock, running a TTL pass now, and reading ids back (after moving the clock)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import BulkWriteError, OperationFailure

Client = MongoClient[dict[str, Any]]
#: Server parameters that turn the ttlClock and ttlMonitorPass test commands on.
TEST_COMMANDS = {"enableTestCommands": True}


def error_code(fn: Callable[[], Any]) -> int:
    with pytest.raises((OperationFailure, BulkWriteError)) as info:
        fn()
    return int(info.value.code)  # type: ignore[arg-type]


def advance(client: Client, seconds: float) -> None:
    """Move the server's expiry clock forward."""
    client.admin.command("ttlClock", advanceMillis=int(seconds * 1000))


def ttl_pass(client: Client) -> dict[str, Any]:
    return client.admin.command("ttlMonitorPass")


def ids_of(coll: Any, flt: dict[str, Any] | None = None) -> list[Any]:
    return sorted(d["_id"] for d in coll.find(flt or {}))


def ids_after(client: Client, coll: Any, seconds: float) -> list[Any]:
    """Move the server's expiry clock forward, then read back the ids of what is still there."""
    advance(client, seconds)
    return ids_of(coll)
