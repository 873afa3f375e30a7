"""Fixtures that start the real ebbdb server on 127.0.0.1:0 in a background thread, with a
temporary data directory, and hand out its URI to real drivers; `watched` is a client whose
commands and replies the `recorder` (tests.helpers.Recorder) sees."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
from pymongo import AsyncMongoClient, MongoClient

from server.embedded import ServerThread
from tests.helpers import Recorder


@pytest.fixture
def dbpath(tmp_path: Any) -> str:
    return str(tmp_path / "data")


@pytest.fixture
def start_server(dbpath: str) -> Iterator[Callable[..., ServerThread]]:
    """Start servers on demand: start_server(parameters=None, dbpath=None). All are stopped at the
    end of the test (a test may stop one earlier with .stop())."""
    started: list[ServerThread] = []

    def start(parameters: dict[str, Any] | None = None, path: str | None = None) -> ServerThread:
        srv = ServerThread(path or dbpath, parameters).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
def server(start_server: Callable[..., ServerThread]) -> ServerThread:
    return start_server()


@pytest.fixture
def uri(server: ServerThread) -> str:
    return server.uri


@pytest.fixture
def client(uri: str) -> Iterator[MongoClient[dict[str, Any]]]:
    c: MongoClient[dict[str, Any]] = MongoClient(uri, serverSelectionTimeoutMS=5000)
    yield c
    c.close()


@pytest_asyncio.fixture
async def async_client(uri: str) -> AsyncIterator[AsyncMongoClient[dict[str, Any]]]:
    c: AsyncMongoClient[dict[str, Any]] = AsyncMongoClient(uri)
    yield c
    await c.close()


@pytest_asyncio.fixture
async def motor_client(uri: str) -> AsyncIterator[Any]:
    """Motor's AsyncIOMotorClient, created on the test's event loop."""
    from motor.motor_asyncio import AsyncIOMotorClient

    c: Any = AsyncIOMotorClient(uri)
    yield c
    c.close()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def watched(uri: str, recorder: Recorder) -> Iterator[MongoClient[dict[str, Any]]]:
    """A client whose commands the `recorder` sees."""
    c: MongoClient[dict[str, Any]] = MongoClient(
        uri, event_listeners=[recorder], serverSelectionTimeoutMS=5000
    )
    yield c
    c.close()
