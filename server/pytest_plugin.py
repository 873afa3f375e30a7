"""The pytest plugin ebbdb ships (the `pytest11` entry point): a real ebbdb server for the test
session and clients connected to it, each test isolated. README, "Testing your app with ebbdb",
is the user's guide; in short:

- `ebbdb_server` (session): the server, started in a background thread on 127.0.0.1, a free port and
  a temporary data path, test commands on; one per pytest-xdist worker. `ebbdb_uri` is its URI:
  through its Unix domain socket where there is one (POSIX; the faster way), else TCP.
- `mongo_client`, `async_mongo_client` (function): pymongo clients; after the test, every database
  that appeared during it is dropped (`ebbdb_cleanup`, which a test whose app opens its own
  connection can request alone). `mongo_db`, `async_mongo_db`: a database of the test's own.
- `ebbdb_clock`: moves the server's TTL clock and runs a TTL pass; reset after the test.
- `--ebbdb-uri URI`: the same fixtures against a running server (a real MongoDB, say); `ebbdb_clock`
  then skips the tests that use it unless that server is ebbdb with test commands on.
- `--ebbdb-dbpath PATH`: the data stays in PATH, and so do the databases of a test that failed.
- `--ebbdb-replset`: the session's server is a one-member replica set (rs0): transactions, change
  streams. Without it, a test marked `@pytest.mark.ebbdb_replset` gets its clients from a replica
  set of its own (one per session, started when first asked for: `ebbdb_replset_server`).

Only pytest is imported up front: the server and pymongo load when a test first asks for them, so
a session that never does pays nothing.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pymongo import AsyncMongoClient, MongoClient
    from pymongo.asynchronous.database import AsyncDatabase
    from pymongo.synchronous.database import Database

    from ebbdb.server.embedded import ServerThread

Document = dict[str, Any]

#: Parameters of the session's own server: test commands on (ttlClock, ttlMonitorPass).
SERVER_PARAMETERS: dict[str, Any] = {"enableTestCommands": True}
#: Databases every server has; the clean-up never drops them.
SYSTEM_DATABASES = frozenset({"admin", "config", "local"})
#: The name of the replica set the plugin starts (--ebbdb-replset, the ebbdb_replset marker).
REPLSET_NAME = "rs0"
#: The marker that gives a test's clients a replica set.
REPLSET_MARKER = "ebbdb_replset"
#: How long to wait for an --ebbdb-uri server before giving up, in milliseconds.
CONNECT_TIMEOUT_MS = 10_000
_COMMAND_NOT_FOUND = 59

_failed = pytest.StashKey[bool]()


# -- options ----------------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("ebbdb", "ebbdb server for tests (ebbdb's pytest plugin)")
    group.addoption(
        "--ebbdb-uri",
        metavar="URI",
        default=None,
        help="run the ebbdb fixtures against this running server (ebbdb or MongoDB) instead of "
        "starting one",
    )
    group.addoption(
        "--ebbdb-dbpath",
        metavar="PATH",
        default=None,
        help="keep the session server's data in PATH (empty or new; PATH/<worker> under "
        "pytest-xdist), with the databases of failed tests left in place for a post-mortem",
    )
    group.addoption(
        "--ebbdb-replset",
        action="store_true",
        default=False,
        help=f"start the session's server as a one-member replica set ({REPLSET_NAME}) for "
        "transactions and change streams; its URI then names the set",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{REPLSET_MARKER}: the test's ebbdb clients (mongo_client, mongo_db, async_mongo_client, "
        "async_mongo_db) talk to a one-member replica set (transactions, change streams)",
    )
    uri, dbpath = _uri_option(config), _dbpath_option(config)
    if uri is not None and dbpath is not None:
        raise pytest.UsageError(
            "--ebbdb-dbpath is the data path of the server the plugin starts; with --ebbdb-uri "
            "it starts none"
        )
    # The workers of pytest-xdist each make their own PATH/<worker> inside; only the process that
    # starts them (or a run without xdist) checks PATH itself.
    if dbpath is not None and not hasattr(config, "workerinput"):
        path = Path(dbpath)
        if path.exists() and not path.is_dir():
            raise pytest.UsageError(f"--ebbdb-dbpath {dbpath}: not a directory")
        if path.is_dir() and any(path.iterdir()):
            raise pytest.UsageError(
                f"--ebbdb-dbpath {dbpath} already holds data (an earlier run's?): remove it or "
                "give a new or empty directory"
            )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Any:
    """Remember a failed setup or call, so that --ebbdb-dbpath can keep that test's databases."""
    report = yield
    if report.failed and report.when in ("setup", "call"):
        item.stash[_failed] = True
    return report


def _uri_option(config: pytest.Config) -> str | None:
    value = config.getoption("ebbdb_uri")
    return str(value) if value else None


def _dbpath_option(config: pytest.Config) -> str | None:
    value = config.getoption("ebbdb_dbpath")
    return str(value) if value else None


def _replset_option(config: pytest.Config) -> bool:
    return bool(config.getoption("ebbdb_replset", False))


def _xdist_worker() -> str | None:
    """This process's pytest-xdist worker name (gw0, gw1, ...), or None outside xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER") or None


def redact(uri: str) -> str:
    """The URI without its user name and password, for messages."""
    scheme, sep, rest = uri.partition("://")
    hosts, slash, tail = rest.partition("/")
    if not sep or "@" not in hosts:
        return uri
    return f"{scheme}://***@{hosts.rpartition('@')[2]}{slash}{tail}"


# -- the server -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EbbdbServer:
    """The server the session's tests talk to. `embedded` is the server thread the plugin started
    (None with --ebbdb-uri); `dbpath` its data path."""

    uri: str
    dbpath: str | None = None
    embedded: ServerThread | None = None
    #: The replica set's name, when the server is a replica set's member (None: standalone).
    replica_set: str | None = None

    @property
    def external(self) -> bool:
        return self.embedded is None


@pytest.fixture(scope="session")
def ebbdb_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EbbdbServer]:
    """A real ebbdb server for the session (each xdist worker's session has its own): 127.0.0.1,
    a free port, a temporary data path (or --ebbdb-dbpath's), enableTestCommands=1. With
    --ebbdb-uri, that server instead, once it answers a ping."""
    uri = _uri_option(request.config)
    if uri is not None:
        yield EbbdbServer(uri, replica_set=_ping(uri))
        return
    kept = _dbpath_option(request.config)
    if kept is None:
        path = tmp_path_factory.mktemp("ebbdb") / "data"
    else:
        worker = _xdist_worker()
        path = Path(kept, worker) if worker else Path(kept)
        path.mkdir(parents=True, exist_ok=True)
    repl_set = REPLSET_NAME if _replset_option(request.config) else None
    yield from _embedded(path, repl_set)


def _embedded(path: Path, repl_set: str | None) -> Iterator[EbbdbServer]:
    from ebbdb.server.embedded import ServerThread

    srv = ServerThread(str(path), SERVER_PARAMETERS, repl_set=repl_set).start()
    try:
        # The Unix domain socket where there is one (a standalone on POSIX): the same server,
        # without TCP's cost on every round trip.
        yield EbbdbServer(srv.socket_uri or srv.uri, str(path), srv, repl_set)
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def ebbdb_replset_server(
    request: pytest.FixtureRequest,
    ebbdb_server: EbbdbServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[EbbdbServer]:
    """A one-member replica set for the session (`.uri` names the set: drivers find its
    primary): the session's server itself when it is one (--ebbdb-replset, or an --ebbdb-uri
    server that is a replica set's member), else one started when first asked for, beside it, on
    a temporary data path. Against an --ebbdb-uri server that is not a replica set, the tests
    that need one are skipped, saying why."""
    if ebbdb_server.replica_set is not None:
        yield ebbdb_server
        return
    if ebbdb_server.external:
        pytest.skip(
            f"the server at {redact(ebbdb_server.uri)} is not a replica set's member, and this "
            "test needs one (transactions, change streams): give --ebbdb-uri a replica set's URI"
        )
    yield from _embedded(tmp_path_factory.mktemp("ebbdb-replset") / "data", REPLSET_NAME)


@pytest.fixture(scope="session")
def ebbdb_replset_uri(ebbdb_replset_server: EbbdbServer) -> str:
    """The replica set's URI (`mongodb://127.0.0.1:PORT/?replicaSet=rs0`)."""
    return ebbdb_replset_server.uri


def _ping(uri: str) -> str | None:
    """Check that the server at `uri` answers; the name of its replica set (None: none)."""
    from pymongo import MongoClient
    from pymongo.errors import PyMongoError

    # The URI's own serverSelectionTimeoutMS, if it has one, wins.
    timeout: dict[str, Any] = {}
    if "serverselectiontimeoutms=" not in uri.lower():
        timeout["serverSelectionTimeoutMS"] = CONNECT_TIMEOUT_MS
    client: MongoClient[Document] = MongoClient(uri, **timeout)
    try:
        hello = client.admin.command("hello")
    except PyMongoError as exc:
        pytest.fail(f"--ebbdb-uri {redact(uri)} does not answer: {exc}", pytrace=False)
    finally:
        client.close()
    name = hello.get("setName")
    return name if isinstance(name, str) else None


@pytest.fixture(scope="session")
def ebbdb_uri(ebbdb_server: EbbdbServer) -> str:
    """The URI of the session's server: through its Unix domain socket on POSIX
    (`mongodb://%2Ftmp%2Febbdb-PORT.sock/?directConnection=true`), else
    `mongodb://127.0.0.1:PORT/?directConnection=true`; with --ebbdb-replset
    `mongodb://127.0.0.1:PORT/?replicaSet=rs0` (drivers go on to the member's TCP address)."""
    return ebbdb_server.uri


def _admin_client(uri: str) -> MongoClient[Document]:
    from pymongo import MongoClient

    return MongoClient(uri, serverSelectionTimeoutMS=CONNECT_TIMEOUT_MS)


@pytest.fixture(scope="session")
def _ebbdb_admin(ebbdb_uri: str) -> Iterator[MongoClient[Document]]:
    """The plugin's own client, for clean-up and the clock."""
    client = _admin_client(ebbdb_uri)
    yield client
    client.close()


@pytest.fixture(scope="session")
def _ebbdb_replset_admin(ebbdb_replset_server: EbbdbServer) -> Iterator[MongoClient[Document]]:
    """The plugin's own client of the replica set, for clean-up."""
    client = _admin_client(ebbdb_replset_server.uri)
    yield client
    client.close()


@dataclass(frozen=True)
class _Target:
    """The server a test's clients talk to, and the plugin's admin client of it."""

    server: EbbdbServer
    admin: MongoClient[Document]


@pytest.fixture
def _ebbdb_target(request: pytest.FixtureRequest) -> _Target:
    """The session's server, or for a test marked ebbdb_replset the replica set."""
    if request.node.get_closest_marker(REPLSET_MARKER) is not None:
        return _Target(
            request.getfixturevalue("ebbdb_replset_server"),
            request.getfixturevalue("_ebbdb_replset_admin"),
        )
    return _Target(request.getfixturevalue("ebbdb_server"), request.getfixturevalue("_ebbdb_admin"))


# -- isolation --------------------------------------------------------------------------------------


def database_name(request: pytest.FixtureRequest) -> str:
    """The test's own database: its name made safe for MongoDB (at most 40 characters of letters,
    digits and _) and 8 hex digits of its node id, so that two tests never share one."""
    node = request.node
    base = re.sub(r"\W+", "_", node.name, flags=re.ASCII).strip("_")[:40]
    digest = hashlib.sha1(node.nodeid.encode(), usedforsecurity=False).hexdigest()[:8]
    return f"{base}_{digest}"


def _database_names(admin: MongoClient[Document]) -> set[str]:
    return set(admin.list_database_names())


@pytest.fixture
def ebbdb_cleanup(request: pytest.FixtureRequest, _ebbdb_target: _Target) -> Iterator[None]:
    """After the test, drop every database that appeared during it (the test's own `mongo_db`
    among them). Databases that were there before it (seeded by a session fixture, say) are left
    as they are. Exceptions: with --ebbdb-dbpath, a failed test's databases stay for a
    post-mortem; with --ebbdb-uri under pytest-xdist, the workers share that server and a database
    that appeared may be another worker's, so only the test's own database is dropped."""
    ebbdb_server, admin = _ebbdb_target.server, _ebbdb_target.admin
    own = database_name(request)
    shared = ebbdb_server.external and _xdist_worker() is not None
    before = set() if shared else _database_names(admin)
    yield
    if request.node.stash.get(_failed, False) and _dbpath_option(request.config) is not None:
        return
    # Not shared, the test's own database is among those that appeared, if it was made at all.
    created = {own} if shared else _database_names(admin) - before
    for name in sorted(created - SYSTEM_DATABASES):
        admin.drop_database(name)


# -- clients ----------------------------------------------------------------------------------------


@pytest.fixture
def mongo_client(_ebbdb_target: _Target, ebbdb_cleanup: None) -> Iterator[MongoClient[Document]]:
    """A pymongo MongoClient connected to the session's server (the replica set, for a test
    marked ebbdb_replset), closed after the test; the databases the test created are dropped
    then (see ebbdb_cleanup)."""
    from pymongo import MongoClient

    client: MongoClient[Document] = MongoClient(_ebbdb_target.server.uri)
    yield client
    client.close()


@pytest.fixture
def mongo_db(
    request: pytest.FixtureRequest, mongo_client: MongoClient[Document]
) -> Database[Document]:
    """A database of the test's own, named after it, dropped after the test."""
    return mongo_client[database_name(request)]


def _async_fixture(fn: Callable[..., Any]) -> Any:
    """pytest-asyncio's fixture decorator, or, where it is not installed, a fixture that says so."""
    try:
        import pytest_asyncio
    except ImportError:

        def missing() -> None:
            pytest.fail(f"{fn.__name__} needs pytest-asyncio (pip install pytest-asyncio)")

        missing.__doc__ = fn.__doc__
        return pytest.fixture(name=fn.__name__)(missing)
    return pytest_asyncio.fixture(fn)


@_async_fixture
async def async_mongo_client(
    _ebbdb_target: _Target, ebbdb_cleanup: None
) -> AsyncIterator[AsyncMongoClient[Document]]:
    """A pymongo AsyncMongoClient connected to the session's server (the replica set, for a test
    marked ebbdb_replset), on the test's event loop (pytest-asyncio), closed after the test; the
    databases the test created are dropped then."""
    from pymongo import AsyncMongoClient

    client: AsyncMongoClient[Document] = AsyncMongoClient(_ebbdb_target.server.uri)
    yield client
    await client.close()


@_async_fixture
async def async_mongo_db(
    request: pytest.FixtureRequest, async_mongo_client: AsyncMongoClient[Document]
) -> AsyncIterator[AsyncDatabase[Document]]:
    """`mongo_db` for async tests: the test's own database, on async_mongo_client."""
    yield async_mongo_client[database_name(request)]


# -- the TTL clock ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class TtlPass:
    """What one TTL pass deleted: in all, and by namespace (`db.collection`)."""

    deleted: int
    by_namespace: dict[str, int]
    now: datetime.datetime


class TtlClock:
    """The server's expiry clock (the ttlClock and ttlMonitorPass test commands). Times are naive
    UTC datetimes, as pymongo decodes dates by default."""

    def __init__(self, admin: MongoClient[Document]) -> None:
        self._admin = admin

    def now(self) -> datetime.datetime:
        """The clock's time: real time plus what the test has advanced it by."""
        now: datetime.datetime = self._admin.admin.command("ttlClock")["now"]
        return now

    def advance(self, seconds: float) -> datetime.datetime:
        """Move the clock forward by `seconds` (back, if negative); returns the new time. Expiry
        and Cosmos-style last-modified times follow it; nothing is deleted until a TTL pass runs
        (run_ttl_pass, or the monitor's own every ttlMonitorSleepSecs), but expired documents are
        hidden from reads at once."""
        reply = self._admin.admin.command("ttlClock", advanceMillis=round(seconds * 1000))
        now: datetime.datetime = reply["now"]
        return now

    def run_ttl_pass(self) -> TtlPass:
        """Run a TTL monitor pass now, at the clock's time, and wait for it."""
        reply = self._admin.admin.command("ttlMonitorPass")
        return TtlPass(
            deleted=int(reply["deleted"]),
            by_namespace={c["ns"]: int(c["deleted"]) for c in reply["collections"]},
            now=reply["now"],
        )

    def reset(self) -> None:
        """Back to real time (done after every test that used the clock)."""
        self._admin.admin.command("ttlClock", reset=True)


@pytest.fixture
def ebbdb_clock(
    ebbdb_server: EbbdbServer, _ebbdb_admin: MongoClient[Document]
) -> Iterator[TtlClock]:
    """The server's TTL clock: `advance(seconds)`, `run_ttl_pass()`, `now()`; reset to real time
    after the test. A server without the test commands (MongoDB, or an ebbdb started without
    enableTestCommands, through --ebbdb-uri) cannot move its clock: the test is skipped, saying so."""
    from pymongo.errors import OperationFailure

    clock = TtlClock(_ebbdb_admin)
    try:
        clock.now()
    except OperationFailure as exc:
        if exc.code != _COMMAND_NOT_FOUND:
            raise
        pytest.skip(
            f"ebbdb_clock: the server at {redact(ebbdb_server.uri)} has no ttlClock command (it "
            "is not ebbdb, or ebbdb without --setParameter enableTestCommands=1), so this test, "
            "which moves the TTL clock, runs only against ebbdb"
        )
    yield clock
    clock.reset()
