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
- Before each test that uses the server, the plugin puts it back as it started (`resetTestState`,
  one round trip; against a server without it, what commands allow): fail points off, the TTL
  clock at real time, parameters at their start values, users but the plugin's own dropped,
  profiling off.
- The log of the server the plugin starts goes to a file, and what it logged during a failed test
  to that test's report, as a section of its own ("Captured ebbdb log call"), not among the
  test's captured lines.
- `--ebbdb-export-uri[=NAME]` (ini `ebbdb_export_uri = NAME`): the server starts with the session
  and its URI is in `os.environ[NAME]` (MONGODB_URI) before collection. `--ebbdb-port PORT`: the
  server listens on PORT (PORT+n for pytest-xdist's worker gwn).

Only pytest is imported up front: the server and pymongo load when a test first asks for them, so
a session that never does pays nothing.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import hashlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
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
#: The environment variable --ebbdb-export-uri sets when given no name (jest-mongodb's is MONGO_URL).
EXPORT_NAME = "MONGODB_URI"
#: The test command that puts an ebbdb server back as it started (server/commands/testing.py).
RESET_COMMAND = "resetTestState"
#: The most lines of the server's log a failed test's report shows, per phase (the last ones).
LOG_LINES = 400
_COMMAND_NOT_FOUND = 59
#: Fixtures through which a test reaches a server: a test that uses none gets no reset.
_SERVER_FIXTURES = frozenset({"ebbdb_server", "_ebbdb_target", "ebbdb_replset_server"})

_failed = pytest.StashKey[bool]()
#: The server started with the session (--ebbdb-export-uri), and what stops it.
_eager = pytest.StashKey[tuple["EbbdbServer", contextlib.ExitStack]]()
#: The server's log lines of each phase of a test so far: (phase, text).
_phase_logs = pytest.StashKey[list[tuple[str, str]]]()


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
    group.addoption(
        "--ebbdb-export-uri",
        metavar="NAME",
        nargs="?",
        const=EXPORT_NAME,
        default=None,
        help=f"start the server with the session and put its URI in the environment variable "
        f"NAME (default {EXPORT_NAME}) before tests are collected, for an app that reads it there",
    )
    group.addoption(
        "--ebbdb-port",
        metavar="PORT",
        type=int,
        default=None,
        help="the server the plugin starts listens on PORT (pytest-xdist's worker gwN on PORT+N) "
        "instead of a free port",
    )
    parser.addini(
        "ebbdb_export_uri",
        "the environment variable to put the server's URI in (as --ebbdb-export-uri=NAME)",
        default="",
    )
    parser.addini("ebbdb_port", "the port of the server the plugin starts (as --ebbdb-port)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{REPLSET_MARKER}: the test's ebbdb clients (mongo_client, mongo_db, async_mongo_client, "
        "async_mongo_db) talk to a one-member replica set (transactions, change streams)",
    )
    uri, dbpath, port = _uri_option(config), _dbpath_option(config), _port_option(config)
    if uri is not None and dbpath is not None:
        raise pytest.UsageError(
            "--ebbdb-dbpath is the data path of the server the plugin starts; with --ebbdb-uri "
            "it starts none"
        )
    if uri is not None and port is not None:
        raise pytest.UsageError(
            "--ebbdb-port is the port of the server the plugin starts; with --ebbdb-uri it "
            "starts none"
        )
    if port is not None and not 1 <= port <= 65535:
        raise pytest.UsageError(f"--ebbdb-port {port}: not a TCP port (1 to 65535)")
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


def pytest_sessionstart(session: pytest.Session) -> None:
    """Keep the server's log records out of pytest's capture. With --ebbdb-export-uri, start the
    server now and export its URI, so that an app that reads it when imported (during
    collection) finds it; not in pytest-xdist's controller, which runs no tests: each worker
    starts its own."""
    config = session.config
    # pytest's capture of log records: its report sections and caplog (attributes of its
    # logging plugin since pytest 6; a pytest without them just shows the server's lines too).
    capture = config.pluginmanager.get_plugin("logging-plugin")
    for attribute in ("report_handler", "caplog_handler"):
        handler = getattr(capture, attribute, None)
        if isinstance(handler, logging.Handler):
            handler.addFilter(_ServerLog.unmarked)
    name = _export_option(config)
    if name is None or _xdist_controller(config):
        return
    stack = contextlib.ExitStack()
    try:
        server = stack.enter_context(_session_server(config, _temporary_path(stack)))
    except (_StartError, pytest.fail.Exception) as exc:  # the latter: --ebbdb-uri's server
        stack.close()
        raise pytest.UsageError(str(exc)) from None
    before = os.environ.get(name)
    os.environ[name] = server.uri
    stack.callback(_restore_environ, name, before)
    config.stash[_eager] = (server, stack)


def pytest_sessionfinish(session: pytest.Session) -> None:
    eager = session.config.stash.get(_eager, None)
    if eager is not None:
        del session.config.stash[_eager]
        eager[1].close()


def _restore_environ(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _temporary_path(stack: contextlib.ExitStack) -> Callable[[], Path]:
    """A data path made when asked for and removed with `stack` (pytest's tmp_path_factory is a
    fixture, and the session's server may start before fixtures do)."""

    def make() -> Path:
        path = Path(tempfile.mkdtemp(prefix="ebbdb-"))
        stack.callback(shutil.rmtree, path, ignore_errors=True)
        return path / "data"

    return make


def pytest_runtest_logstart() -> None:
    """What the server logged between two tests belongs to neither."""
    _SERVER_LOG.take()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Any:
    """Remember a failed setup or call, so that --ebbdb-dbpath can keep that test's databases;
    give a failed phase's report what the server logged during the test so far, a section per
    phase ("Captured ebbdb log setup", "... call", as pytest names its own)."""
    report = yield
    if report.failed and report.when in ("setup", "call"):
        item.stash[_failed] = True
    text = _SERVER_LOG.take()
    phases = item.stash.setdefault(_phase_logs, [])
    if text:
        phases.append((report.when, text))
    if report.failed:
        report.sections.extend((f"Captured ebbdb log {when}", t) for when, t in phases)
    return report


def _uri_option(config: pytest.Config) -> str | None:
    value = config.getoption("ebbdb_uri")
    return str(value) if value else None


def _dbpath_option(config: pytest.Config) -> str | None:
    value = config.getoption("ebbdb_dbpath")
    return str(value) if value else None


def _replset_option(config: pytest.Config) -> bool:
    return bool(config.getoption("ebbdb_replset", False))


def _export_option(config: pytest.Config) -> str | None:
    """The environment variable to export the URI in (None: none)."""
    value = config.getoption("ebbdb_export_uri") or config.getini("ebbdb_export_uri")
    return str(value) if value else None


def _port_option(config: pytest.Config) -> int | None:
    value = config.getoption("ebbdb_port")
    if value is None:
        text = config.getini("ebbdb_port")
        if not text:
            return None
        try:
            value = int(str(text))
        except ValueError:
            raise pytest.UsageError(f"ebbdb_port = {text}: not a TCP port") from None
    return int(value)


def _xdist_worker() -> str | None:
    """This process's pytest-xdist worker name (gw0, gw1, ...), or None outside xdist."""
    return os.environ.get("PYTEST_XDIST_WORKER") or None


def _xdist_controller(config: pytest.Config) -> bool:
    """Whether this process hands the tests to pytest-xdist's workers and runs none itself."""
    return config.pluginmanager.has_plugin("dsession")


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
    eager = request.config.stash.get(_eager, None)
    if eager is not None:
        yield eager[0]
        return
    try:
        with _session_server(
            request.config, lambda: tmp_path_factory.mktemp("ebbdb") / "data"
        ) as server:
            yield server
    except _StartError as exc:
        pytest.fail(str(exc), pytrace=False)


class _StartError(Exception):
    """The session's server cannot be had; the message says why."""


@contextlib.contextmanager
def _session_server(config: pytest.Config, make_path: Callable[[], Path]) -> Iterator[EbbdbServer]:
    """The --ebbdb-uri server once it answers, else one started on `make_path()` (or
    --ebbdb-dbpath's) and --ebbdb-port's port."""
    uri = _uri_option(config)
    if uri is not None:
        yield EbbdbServer(uri, replica_set=_ping(uri))
        return
    kept = _dbpath_option(config)
    worker = _xdist_worker()
    if kept is None:
        path = make_path()
    else:
        path = Path(kept, worker) if worker else Path(kept)
        path.mkdir(parents=True, exist_ok=True)
    port = _port_option(config)
    if port is not None and worker is not None:
        port += int(worker.removeprefix("gw") or 0)
    repl_set = REPLSET_NAME if _replset_option(config) else None
    with _embedded(path, repl_set, port or 0) as server:
        yield server


@contextlib.contextmanager
def _embedded(path: Path, repl_set: str | None, port: int = 0) -> Iterator[EbbdbServer]:
    from ebbdb.server.embedded import ServerThread
    from ebbdb.server.startup import StartupError

    srv = ServerThread(str(path), SERVER_PARAMETERS, port, repl_set=repl_set)
    # Its log goes to a file in the data path, not to stderr, where it would be the test's
    # captured output; _SERVER_LOG gives a failed test what it logged.
    path.mkdir(parents=True, exist_ok=True)
    srv.config = dataclasses.replace(srv.config, logpath=str(path / "ebbdb.log"))
    with _SERVER_LOG.attached():
        try:
            srv.start()
        except (StartupError, OSError) as exc:  # the port is taken, say
            where = f"port {port} (--ebbdb-port)" if port else "a free port"
            raise _StartError(f"ebbdb cannot start on {where}: {exc}") from None
        try:
            # The Unix domain socket where there is one (a standalone on POSIX): the same
            # server, without TCP's cost on every round trip.
            yield EbbdbServer(srv.socket_uri or srv.uri, str(path), srv, repl_set)
        finally:
            srv.stop()


class _ServerLog(logging.Handler):
    """The log of the servers the plugin starts, for a failed test's report. While one runs, this
    is on the `ebbdb` logger: what ebbdb's server threads (all named ebbdb-...) log, it keeps
    (but the connection lines mongod's --quiet leaves out) and marks, and pytest's own capture
    (the "Captured log" sections, caplog) leaves the marked records out (`unmarked`). What a
    test logs through `ebbdb` itself (calling ebbdb's functions in its own thread) stays the
    test's."""

    MARK = "_ebbdb_server_log"

    def __init__(self) -> None:
        super().__init__()  # every level the server logs at (-v), each marked
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname).1s %(name)s %(message)s"))
        self._lines: collections.deque[str] = collections.deque(maxlen=LOG_LINES)
        self._users = 0
        self._quiet: frozenset[int] = frozenset()

    @contextlib.contextmanager
    def attached(self) -> Iterator[None]:
        """On the `ebbdb` logger, first of its handlers, while any server the plugin started
        runs."""
        logger = logging.getLogger("ebbdb")
        if self._users == 0:
            from ebbdb.server.log import QUIET_IDS

            self._quiet = QUIET_IDS
            logger.handlers.insert(0, self)  # before the root's, pytest's among them, see it
        self._users += 1
        try:
            yield
        finally:
            self._users -= 1
            if self._users == 0:
                logger.removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        if not (record.threadName or "").startswith("ebbdb-"):
            return
        record.__dict__[self.MARK] = True
        event = record.__dict__.get("event")
        if getattr(event, "id", None) not in self._quiet:
            self._lines.append(self.format(record))

    @classmethod
    def unmarked(cls, record: logging.LogRecord) -> bool:
        """A filter for pytest's capture handlers."""
        return not record.__dict__.get(cls.MARK, False)

    def take(self) -> str:
        """The lines kept since the last take, and forget them."""
        lines = []
        with contextlib.suppress(IndexError):
            while True:
                lines.append(self._lines.popleft())
        return "\n".join(lines)


_SERVER_LOG = _ServerLog()


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
    with _embedded(tmp_path_factory.mktemp("ebbdb-replset") / "data", REPLSET_NAME) as server:
        yield server


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
def _ebbdb_replset_admin(
    request: pytest.FixtureRequest, ebbdb_server: EbbdbServer, ebbdb_replset_server: EbbdbServer
) -> Iterator[MongoClient[Document]]:
    """The plugin's own client of the replica set, for clean-up: _ebbdb_admin when the session's
    server is the replica set."""
    if ebbdb_replset_server is ebbdb_server:
        yield request.getfixturevalue("_ebbdb_admin")
        return
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


# -- a clean server before each test ----------------------------------------------------------------


@dataclass
class _Reset:
    """Puts a server back as it started, before each test that uses it: an ebbdb with test
    commands in one round trip (resetTestState), any other server (MongoDB, ebbdb without test
    commands, through --ebbdb-uri) as far as commands allow it: fail points off (failCommand, the
    one tests set), parameters that differ from what getParameter '*' said at the start set back
    (those the server refuses to set are left), users and roles dropped but the plugin's own,
    profiling off on every database. A part the server refuses (Unauthorized, say) is not tried
    again. Nothing is done to a server pytest-xdist's workers share (--ebbdb-uri with -n): it
    would be done under another worker's running test."""

    admin: MongoClient[Document]
    shared: bool
    #: None until the first reset; then whether the server has resetTestState.
    one_command: bool | None = None
    parameters: Document = field(default_factory=dict)
    refused: set[str] = field(default_factory=set)
    own_users: set[tuple[str, str]] = field(default_factory=set)

    def __call__(self) -> None:
        if self.shared:
            return
        if self.one_command is not False:
            self.one_command = self._try(RESET_COMMAND, lambda: self._admin(RESET_COMMAND))
            if self.one_command:
                return
            self._start()
        for part, reset in (
            ("failpoints", self._fail_points),
            ("parameters", self._parameters),
            ("users", self._users),
            ("roles", self._roles),
            ("profile", self._profiling),
        ):
            if part not in self.refused:
                self._try(part, reset)

    def _admin(self, name: str, value: Any = 1, **fields: Any) -> Document:
        reply: Document = self.admin.admin.command(name, value, **fields)
        return reply

    def _try(self, part: str, run: Callable[[], object]) -> bool:
        from pymongo.errors import OperationFailure

        try:
            run()
        except OperationFailure:
            self.refused.add(part)
            return False
        return True

    def _start(self) -> None:
        """What the commands' way compares with: the parameters, and who the plugin is."""
        if self._try(
            "parameters", lambda: self.parameters.update(self._admin("getParameter", "*"))
        ):
            for key in ("ok", "featureCompatibilityVersion", "operationTime", "$clusterTime"):
                self.parameters.pop(key, None)
        status = self._admin("connectionStatus")
        self.own_users = {
            (u["user"], u["db"]) for u in status.get("authInfo", {}).get("authenticatedUsers", [])
        }

    def _fail_points(self) -> None:
        self._admin("configureFailPoint", "failCommand", mode="off")

    def _parameters(self) -> None:
        from pymongo.errors import OperationFailure

        now = self._admin("getParameter", "*")
        for name, start in self.parameters.items():
            if name in now and now[name] != start and name not in self.refused:
                try:
                    self._admin("setParameter", 1, **{name: start})
                except OperationFailure:
                    self.refused.add(name)  # read-only, or not ours to set: left as it is

    def _users(self) -> None:
        for user in self._admin("usersInfo", {"forAllDBs": True})["users"]:
            if (user["user"], user["db"]) not in self.own_users:
                self.admin[user["db"]].command("dropUser", user["user"])

    def _roles(self) -> None:
        for role in self.admin.admin["system.roles"].find({}, {"role": 1, "db": 1}):
            self.admin[role["db"]].command("dropRole", role["role"])

    def _profiling(self) -> None:
        from pymongo.errors import OperationFailure

        for name in self.admin.list_database_names():
            with contextlib.suppress(OperationFailure):  # a database it may not profile
                if self.admin[name].command("profile", -1).get("was", 0) != 0:
                    self.admin[name].command("profile", 0)


def _shared(server: EbbdbServer) -> bool:
    """Whether other processes' tests use the server too (--ebbdb-uri under pytest-xdist)."""
    return server.external and _xdist_worker() is not None


def _resetting(server: EbbdbServer, admin: MongoClient[Document]) -> Iterator[_Reset]:
    """The server's reset; a server the plugin did not start is reset once more at the end of
    the session, so that the last test's state does not stay (nor become the next session's
    start values)."""
    reset = _Reset(admin, _shared(server))
    yield reset
    if server.external:
        reset()


@pytest.fixture(scope="session")
def _ebbdb_reset(
    ebbdb_server: EbbdbServer, _ebbdb_admin: MongoClient[Document]
) -> Iterator[_Reset]:
    yield from _resetting(ebbdb_server, _ebbdb_admin)


@pytest.fixture(scope="session")
def _ebbdb_replset_reset(
    request: pytest.FixtureRequest,
    ebbdb_server: EbbdbServer,
    ebbdb_replset_server: EbbdbServer,
    _ebbdb_replset_admin: MongoClient[Document],
) -> Iterator[_Reset]:
    if ebbdb_replset_server is ebbdb_server:
        yield request.getfixturevalue("_ebbdb_reset")
        return
    yield from _resetting(ebbdb_replset_server, _ebbdb_replset_admin)


@pytest.fixture(autouse=True)
def _ebbdb_clean_start(request: pytest.FixtureRequest) -> None:
    """Before a test that uses a server of the plugin's (through any of its fixtures), put that
    server back as it started (see _Reset). At setup, so that what a test leaves behind (a fail
    point on, the clock moved, a user) never reaches the next, whatever fixtures either uses;
    the other fixtures of the test (session fixtures aside) set up after it."""
    names = set(request.fixturenames)
    if not names & _SERVER_FIXTURES:
        return
    marked = request.node.get_closest_marker(REPLSET_MARKER) is not None
    resets: list[_Reset] = []
    if "ebbdb_server" in names or ("_ebbdb_target" in names and not marked):
        resets.append(request.getfixturevalue("_ebbdb_reset"))
    if "ebbdb_replset_server" in names or ("_ebbdb_target" in names and marked):
        resets.append(request.getfixturevalue("_ebbdb_replset_reset"))
    for reset in {id(r): r for r in resets}.values():  # the replica set may be the session's
        reset()


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
    """The server's TTL clock: `advance(seconds)`, `run_ttl_pass()`, `now()`; at real time when
    the test starts (the reset before every test) and reset to it after. A server without the test commands (MongoDB, or an ebbdb started without
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
