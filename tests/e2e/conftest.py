"""Real ebbdb servers on 127.0.0.1:0 in background threads, and real drivers connected to them.

`server` (and so `uri`, `client`, `async_client`, `motor_client`, `watched`) is the session's server
from ebbdb's own pytest plugin (server/pytest_plugin.py: enableTestCommands=1, a temporary data
path), shared by the tests that need no server of their own, and put back after each as a fresh
one would be: the plugin drops the databases the test created, and `server` restores the runtime
parameters, the TTL clock, open cursors and fsync locks. A test that needs particular start-up
parameters, a restart or a data path of its own starts its servers with `start_server` (a module
may override `server` with one of those, and its clients follow). `watched` is a client whose
commands and replies the `recorder` (tests.helpers.Recorder) sees. `replset` is a one-member
replica set (set name rs0) shared by one module's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import pytest_asyncio
from pymongo import AsyncMongoClient, MongoClient

from ebbdb.server.app import App
from ebbdb.server.embedded import ServerThread
from ebbdb.server.parameters import Parameters
from ebbdb.server.pytest_plugin import EbbdbServer
from tests.helpers import Recorder


@pytest.fixture
def dbpath(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """The data path of the test's server: a new one for the servers a test starts itself, or the
    session server's, for a test that talks to that one and starts none."""
    if "server" in request.fixturenames and "start_server" not in request.fixturenames:
        shared: EbbdbServer = request.getfixturevalue("ebbdb_server")
        assert shared.dbpath is not None
        return shared.dbpath
    return str(tmp_path / "data")


@pytest.fixture
def start_server(dbpath: str) -> Iterator[Callable[..., ServerThread]]:
    """Start servers on demand: start_server(parameters=None, dbpath=None, repl_set=None). All are
    stopped at the end of the test (a test may stop one earlier with .stop())."""
    started: list[ServerThread] = []

    def start(
        parameters: dict[str, Any] | None = None,
        path: str | None = None,
        repl_set: str | None = None,
    ) -> ServerThread:
        srv = ServerThread(path or dbpath, parameters, repl_set=repl_set).start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture(scope="module")
def replset(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerThread]:
    """A one-member replica set, set name rs0, on a data path of its own, shared by the module's
    tests; started with the module's REPLSET_PARAMETERS, enableTestCommands=1 when it has none."""
    parameters = getattr(request.module, "REPLSET_PARAMETERS", {"enableTestCommands": 1})
    path = tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2]) / "data"
    srv = ServerThread(str(path), parameters, repl_set="rs0").start()
    yield srv
    srv.stop()


@pytest.fixture
def server(ebbdb_server: EbbdbServer, ebbdb_cleanup: None) -> Iterator[ServerThread]:
    """The plugin's session server; after the test, as a fresh server would be again."""
    srv = ebbdb_server.embedded
    if srv is None:
        pytest.fail(
            "tests/e2e look inside the server they test: run them without --ebbdb-uri",
            pytrace=False,
        )
    yield srv
    assert srv.app is not None
    srv.call(_as_started, srv.app)


def _as_started(app: App) -> None:
    """Undo what a test may have changed beyond its databases (on the server's loop thread):
    runtime parameters back to their start-up values (through Parameters.set, so that the TTL
    monitor hears of its own), the TTL clock to real time, cursors closed, fsync locks released."""
    started = Parameters(app.config.parameters)
    for name in app.parameters.names():
        if name != "featureCompatibilityVersion" and app.parameters.get(name) != started.get(name):
            app.parameters.set(name, started.get(name))
    app.clock.reset()
    app.cursors.reap(idle_seconds=-1.0)
    while app.services.gateway.fsync_unlock():
        pass


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
