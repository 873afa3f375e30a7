"""ebbdb's pytest plugin (server/pytest_plugin.py) as a user meets it: pytest runs (pytester, in
subprocesses) on a small project whose tests use every fixture, alone, under pytest-xdist with
`-n 2`, against an external server with `--ebbdb-uri`, and with `--ebbdb-dbpath` for a post-mortem;
a project whose tests each leave every kind of server state behind (fail point, TTL clock,
parameters, users, profiling) and find none of the others', in both orders; a failed test's
section of the server's log; `--ebbdb-export-uri` and `--ebbdb-port`.

The plugin loads the way an installed ebbdb loads it, by its pytest11 entry point: a distribution's
metadata with the entry point copied from pyproject.toml is put on the subprocess's path (an
editable install of another checkout would not register this one's). The other runs name it with
`-p ebbdb.server.pytest_plugin`, as a checkout that is not installed does; one run does both at once."""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from ebbdb.server.embedded import running_server
from ebbdb.server.pytest_plugin import redact
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.core import portability

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "ebbdb.server.pytest_plugin"
RUN_TIMEOUT = 90.0

# -- the user's project ----------------------------------------------------------------------------

CONFTEST = """
import json
import os

import pytest
from pymongo import MongoClient

RECORD = {record!r}


@pytest.fixture(autouse=True)
def record_server(request):
    # Which server each test of each worker talked to.
    if "ebbdb_server" in request.fixturenames:
        srv = request.getfixturevalue("ebbdb_server")
        line = {{
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            "uri": srv.uri,
            "dbpath": srv.dbpath,
            "external": srv.external,
        }}
        with open(RECORD, "a") as f:
            f.write(json.dumps(line) + "\\n")
    yield


@pytest.fixture(scope="session")
def catalog(ebbdb_uri):
    # Data seeded once for the session: there before every test, so never dropped.
    client = MongoClient(ebbdb_uri)
    client.shop.products.replace_one({{"_id": 1}}, {{"_id": 1, "name": "tea"}}, upsert=True)
    yield client.shop.products
    client.close()
"""

TESTS = """
import datetime
import re

import pytest
from pymongo import MongoClient


def test_server_and_uri(ebbdb_server, ebbdb_uri):
    assert ebbdb_server.uri == ebbdb_uri
    with MongoClient(ebbdb_uri) as client:
        assert client.admin.command("ping")["ok"] == 1.0


def test_a_writes_a_database(mongo_client, catalog):
    mongo_client.app.users.insert_one({"_id": 1, "name": "ada"})
    assert mongo_client.shop.products.count_documents({}) == 1


def test_b_sees_nothing_the_test_before_wrote(mongo_client, catalog):
    assert "app" not in mongo_client.list_database_names()
    assert mongo_client.shop.products.find_one() == {"_id": 1, "name": "tea"}


@pytest.mark.usefixtures("ebbdb_cleanup")
def test_c_an_app_with_its_own_connection(ebbdb_uri):
    with MongoClient(ebbdb_uri) as client:
        client.appdb.events.insert_one({"kind": "start"})


def test_d_its_database_was_dropped_too(mongo_client):
    assert "appdb" not in mongo_client.list_database_names()


@pytest.mark.parametrize("label", ["a/b c.d$e"])
def test_own_database(mongo_db, mongo_client, label):
    assert re.fullmatch(r"test_own_database_a_b_c_d_e_[0-9a-f]{8}", mongo_db.name), mongo_db.name
    mongo_db.things.insert_one({"_id": label})
    assert mongo_db.name in mongo_client.list_database_names()


@pytest.mark.asyncio
async def test_async_client(async_mongo_client, async_mongo_db):
    await async_mongo_db.things.insert_one({"_id": 2})
    assert await async_mongo_db.things.count_documents({}) == 1
    await async_mongo_client.other.things.insert_one({"_id": 3})
    assert {"other", async_mongo_db.name} <= set(await async_mongo_client.list_database_names())


@pytest.mark.asyncio
async def test_async_client_after(async_mongo_client):
    assert "other" not in await async_mongo_client.list_database_names()


def utc_now_ms():
    # Real time as the server's clock reads it: UTC, naive, whole milliseconds.
    now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def test_clock_expires_and_deletes(mongo_db, ebbdb_clock):
    sessions = mongo_db.sessions
    sessions.create_index("at", expireAfterSeconds=60)
    sessions.insert_one({"_id": 1, "at": ebbdb_clock.now()})
    ebbdb_clock.run_ttl_pass()
    assert sessions.count_documents({}) == 1
    minute = datetime.timedelta(seconds=61)
    before = utc_now_ms()
    moved = ebbdb_clock.advance(61)
    assert before + minute <= moved <= utc_now_ms() + minute  # real time then, plus 61 s
    assert sessions.count_documents({}) == 0  # expired: hidden at once
    done = ebbdb_clock.run_ttl_pass()
    assert done.deleted == 1
    assert done.by_namespace == {f"{mongo_db.name}.sessions": 1}


def test_clock_is_real_time_again(ebbdb_clock):
    before = utc_now_ms()
    assert before <= ebbdb_clock.now() <= utc_now_ms()
"""

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""

#: The project's tests that move the TTL clock, and the others.
CLOCK_TESTS = 2
ALL_TESTS = 10


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's project; returns the file its tests record their server in. The subprocesses
    import this checkout's ebbdb first."""
    record = pytester.path / "servers.jsonl"
    pytester.makeconftest(CONFTEST.format(record=str(record)))
    pytester.makepyfile(test_app=TESTS)
    pytester.makeini(INI)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(_pythonpath(ROOT)))
    return record


def _pythonpath(*first: Path) -> list[str]:
    return [*map(str, first), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]


def _installed_entry_point(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the subprocesses see the pytest11 entry point as an installed ebbdb declares it."""
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    site = pytester.path / "site"
    dist = site / "ebbdb_plugin_probe-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: ebbdb-plugin-probe\nVersion: 0.0\n"
    )
    lines = ["[pytest11]", *(f"{k} = {v}" for k, v in entry_points["pytest11"].items())]
    (dist / "entry_points.txt").write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(_pythonpath(ROOT, site)))


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=RUN_TIMEOUT)


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def in_process() -> None:
    """For a test that starts a server in this process: every command module imported first.
    pytester takes the modules imported during its test out of sys.modules again, and a command
    module imported there by another (catalog imports capped) would run a second time later and
    register its commands twice (tests/test_compat_table.py after this file failed so)."""
    REGISTRY.commands()


# -- the entry point -------------------------------------------------------------------------------


def test_the_entry_point_names_the_plugin_module_by_its_own_name() -> None:
    """pyproject's pytest11 entry point loads the plugin module, under that module's own name, so
    that `-p ebbdb.server.pytest_plugin` (or a conftest's pytest_plugins) with ebbdb installed is the
    same plugin and not a second registration."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {PLUGIN: PLUGIN}
    assert (
        Path(sys.modules[PLUGIN].__file__ or "").resolve() == ROOT / "server" / "pytest_plugin.py"
    )


# -- runs ------------------------------------------------------------------------------------------


def test_every_fixture_through_the_installed_entry_point(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _installed_entry_point(pytester, monkeypatch)
    result = _run(pytester, "-v")  # no -p: the entry point alone loads the plugin
    result.assert_outcomes(passed=ALL_TESTS)
    servers = {(r["worker"], r["uri"], r["dbpath"], r["external"]) for r in _records(project)}
    assert len(servers) == 1, "one server for the session"
    [(worker, uri, dbpath, is_external)] = servers
    assert worker == "main" and not is_external
    # Through the server's Unix domain socket where there is one (POSIX), else TCP.
    if portability.unix_sockets():
        assert re.fullmatch(r"mongodb://%2Ftmp%2Febbdb-\d+\.sock/\?directConnection=true", uri)
    else:
        assert re.fullmatch(r"mongodb://127\.0\.0\.1:\d+/\?directConnection=true", uri)
    assert dbpath.startswith(str(pytester.path))  # under the run's temporary directory


def test_one_server_per_xdist_worker_and_their_kept_data(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """-n 2: each worker's session starts its own server (with --ebbdb-dbpath, in PATH/<worker>);
    the plugin named by -p and by the entry point at once is loaded once."""
    _installed_entry_point(pytester, monkeypatch)
    kept = tmp_path / "kept"
    result = _run(pytester, "-p", PLUGIN, "-n", "2", "--ebbdb-dbpath", str(kept))
    result.assert_outcomes(passed=ALL_TESTS)
    servers = {r["worker"]: (r["uri"], r["dbpath"]) for r in _records(project)}
    assert set(servers) == {"gw0", "gw1"}
    assert servers["gw0"][0] != servers["gw1"][0]
    assert {w: d for w, (_, d) in servers.items()} == {w: str(kept / w) for w in ("gw0", "gw1")}
    for worker in ("gw0", "gw1"):
        assert any((kept / worker).iterdir()), "the data files stay"


def test_against_an_external_server(
    in_process: None, pytester: pytest.Pytester, project: Path, tmp_path: Path
) -> None:
    """--ebbdb-uri: the same fixtures against a server the plugin did not start. This one has no
    test commands, as MongoDB has none: the tests that use ebbdb_clock are skipped with the
    reason, the rest pass, and the server is left as it was found."""
    with running_server(str(tmp_path / "external")) as srv:
        with MongoClient(srv.uri) as client:
            client.seed.kept.insert_one({"_id": 1})
            result = _run(pytester, "-p", PLUGIN, "-rs", "--ebbdb-uri", srv.uri)
            result.assert_outcomes(passed=ALL_TESTS - CLOCK_TESTS, skipped=CLOCK_TESTS)
            reason = (
                f"ebbdb_clock: the server at {srv.uri} has no ttlClock command (it is not ebbdb, "
                "or ebbdb without --setParameter enableTestCommands=1), so this test, which "
                "moves the TTL clock, runs only against ebbdb"
            )
            result.stdout.fnmatch_lines([f"SKIPPED [[]1[]] test_app.py:*: {reason}"] * CLOCK_TESTS)
            assert sorted(client.list_database_names()) == ["seed", "shop"]
            assert list(client.seed.kept.find()) == [{"_id": 1}]
    assert {(r["uri"], r["dbpath"], r["external"]) for r in _records(project)} == {
        (srv.uri, None, True)
    }


def test_an_external_server_that_does_not_answer(pytester: pytest.Pytester, project: Path) -> None:
    pytester.makepyfile(test_app="def test_it(mongo_client):\n    pass\n")
    uri = "mongodb://someone:secret@127.0.0.1:1/?serverSelectionTimeoutMS=200"
    result = _run(pytester, "-p", PLUGIN, "--ebbdb-uri", uri)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*--ebbdb-uri mongodb://***@127.0.0.1:1/* does not answer*"])
    assert "secret" not in result.stdout.str()


def test_async_fixtures_without_pytest_asyncio_say_what_is_missing(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where pytest-asyncio is not installed (here: a package of that name that cannot be imported
    comes first), the plugin still loads and the async fixtures fail saying what to install."""
    hidden = pytester.mkpydir("pytest_asyncio")  # found before the installed one
    (hidden / "__init__.py").write_text("raise ImportError('pytest-asyncio is hidden here')\n")
    pytester.makepyfile(test_app="def test_it(async_mongo_client):\n    pass\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(_pythonpath(pytester.path, ROOT)))
    result = _run(pytester, "-p", "no:asyncio", "-p", PLUGIN)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*async_mongo_client needs pytest-asyncio (pip install *)*"])


# -- a post-mortem ---------------------------------------------------------------------------------

POSTMORTEM = """
def test_fails(mongo_client):
    mongo_client.broken.orders.insert_one({"_id": 1, "state": "half-written"})
    assert False, "the app did something wrong"


def test_passes(mongo_client):
    mongo_client.fine.orders.insert_one({"_id": 1})
"""


def test_dbpath_keeps_what_a_failed_test_left(
    in_process: None, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    pytester.makepyfile(test_app=POSTMORTEM)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(_pythonpath(ROOT)))
    kept = tmp_path / "kept"
    result = _run(pytester, "-p", PLUGIN, "--ebbdb-dbpath", str(kept))
    result.assert_outcomes(passed=1, failed=1)
    with running_server(str(kept)) as srv, MongoClient(srv.uri) as client:
        assert "fine" not in client.list_database_names()
        assert list(client.broken.orders.find()) == [{"_id": 1, "state": "half-written"}]
    # A second run would mix its data with the first's: refused.
    again = _run(pytester, "-p", PLUGIN, "--ebbdb-dbpath", str(kept))
    assert again.ret == pytest.ExitCode.USAGE_ERROR
    again.stderr.fnmatch_lines(
        [f"ERROR: --ebbdb-dbpath {kept} already holds data (an earlier run's?): remove it or *"]
    )


def test_dbpath_and_uri_together_are_refused(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_app="def test_it():\n    pass\n")
    result = _run(
        pytester, "-p", PLUGIN, "--ebbdb-uri", "mongodb://127.0.0.1:1", "--ebbdb-dbpath", "x"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --ebbdb-dbpath is the data path of the server *"])


# -- a clean server before each test ---------------------------------------------------------------

#: A project whose every test first checks that the server is as it started, then leaves behind
#: every kind of state a test can: whichever runs second proves the first's undone at its setup.
#: The tests reach the server through different fixtures (clients, the URI alone, the clock).
LEAKS_CONFTEST = """
import pytest
from pymongo.errors import OperationFailure

TEST_COMMANDS = {test_commands!r}


def assert_clean(client):
    admin = client.admin
    if TEST_COMMANDS:
        assert client.shop.items.count_documents({{}}) == 0  # no fail point
        assert admin.command("ttlClock")["offsetMillis"] == 0
    assert admin.command("getParameter", 1, ttlMonitorSleepSecs=1)["ttlMonitorSleepSecs"] == 60
    assert admin.command("getParameter", 1, syncdelay=1)["syncdelay"] == 60.0
    assert admin.command("usersInfo", {{"forAllDBs": True}})["users"] == []
    assert client.shop.command("profile", -1)["was"] == 0
    assert client.other.command("profile", -1)["was"] == 0


def leak(client):
    admin = client.admin
    if TEST_COMMANDS:
        admin.command(
            "configureFailPoint",
            "failCommand",
            mode="alwaysOn",
            # Not NotWritablePrimary, which would cost the driver a rediscovery.
            data={{"failCommands": ["aggregate", "count"], "errorCode": 2}},
        )
        with pytest.raises(OperationFailure) as failed:
            client.shop.items.count_documents({{}})
        assert failed.value.code == 2
        assert admin.command("ttlClock", advanceSeconds=86400)["offsetMillis"] == 86_400_000
    admin.command("setParameter", 1, ttlMonitorSleepSecs=5)
    admin.command("setParameter", 1, syncdelay=7)
    client.shop.command("createUser", "ada", pwd="secret", roles=[])
    admin.command("createUser", "boss", pwd="secret", roles=["root"])
    client.shop.command("profile", 2)
    client.other.command("profile", 1, slowms=0)
    assert len(admin.command("usersInfo", {{"forAllDBs": True}})["users"]) == 2
"""

LEAKS_TESTS = """
import datetime

from pymongo import MongoClient

from conftest import TEST_COMMANDS, assert_clean, leak


def test_with_a_client(mongo_client):
    assert_clean(mongo_client)
    leak(mongo_client)


def test_with_the_uri_alone(ebbdb_uri):
    with MongoClient(ebbdb_uri) as client:
        assert_clean(client)
        leak(client)


def test_with_the_clock(request, ebbdb_uri):
    if TEST_COMMANDS:  # ebbdb_clock; its own reset after the test comes too late for this one
        clock = request.getfixturevalue("ebbdb_clock")
        now = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        assert abs(clock.now() - now) < datetime.timedelta(seconds=60)
    with MongoClient(ebbdb_uri) as client:
        assert_clean(client)
        leak(client)
"""

LEAKS = ("test_with_a_client", "test_with_the_uri_alone", "test_with_the_clock")


def leaks_project(pytester: pytest.Pytester, test_commands: bool) -> None:
    pytester.makeconftest(LEAKS_CONFTEST.format(test_commands=test_commands))
    pytester.makepyfile(test_leaks=LEAKS_TESTS)


def run_leaks_both_ways(pytester: pytest.Pytester, *args: str) -> None:
    """The project's tests in file order, then in the reverse order: all pass both times."""
    for order in (LEAKS, LEAKS[::-1]):
        result = _run(pytester, "-p", PLUGIN, "-v", *args, *(f"test_leaks.py::{t}" for t in order))
        result.assert_outcomes(passed=len(LEAKS))
        result.stdout.fnmatch_lines([f"test_leaks.py::{t} PASSED*" for t in order])


def test_each_test_starts_from_a_clean_server(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(conftest="")
    leaks_project(pytester, test_commands=True)
    run_leaks_both_ways(pytester)


FAILING = """
import logging
import os

URI_AT_IMPORT = os.environ.get({name!r})


def test_the_uri_is_exported(ebbdb_server, ebbdb_uri):
    assert URI_AT_IMPORT == ebbdb_uri == os.environ[{name!r}]
    assert ebbdb_server.embedded.port == {port}


def test_fails(mongo_client):
    mongo_client.shop.command("profile", 0, slowms=250)
    logging.getLogger("ebbdb.command").warning("logged by the test itself")
    assert False, "the app did something wrong"
"""


def test_a_failed_test_gets_the_servers_log_and_the_uri_is_exported(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """--ebbdb-export-uri: the URI is in MONGODB_URI when test modules are imported; --ebbdb-port
    fixes the port. A failed test's report has what the server logged in a section of its own;
    connection lines are nowhere, and the server writes nothing on stderr."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(_pythonpath(ROOT)))
    monkeypatch.delenv("MONGODB_URI", raising=False)
    port = _free_port()
    pytester.makepyfile(test_app=FAILING.format(name="MONGODB_URI", port=port))
    result = _run(pytester, "-p", PLUGIN, "--ebbdb-export-uri", "--ebbdb-port", str(port), "-rA")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    section = out.split("Captured ebbdb log call", 1)[1].split("\n", 1)[1]
    assert "Profiler settings changed on shop: level 0 -> 0, slowms 100 -> 250" in section
    assert "connection accepted" not in out and "client metadata" not in out
    # pytest's own capture has the test's own line through ebbdb's logger, and none of the
    # server's; the server wrote nothing on stderr.
    captured = out.split("Captured log call", 1)[1].split("Captured ebbdb log", 1)[0]
    assert "logged by the test itself" in captured and "Profiler" not in captured
    assert "Captured log setup" not in out and "Captured stderr" not in out
    # With a name, and from the ini file: the same.
    # A port free now, not port + 1: the other smoke run, beside this one, takes ports too.
    port = _free_port()
    pytester.makepyfile(test_app=FAILING.format(name="APP_DB_URL", port=port))
    pytester.makeini(f"[pytest]\nebbdb_export_uri = APP_DB_URL\nebbdb_port = {port}\n")
    _run(pytester, "-p", PLUGIN).assert_outcomes(passed=1, failed=1)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# -- helpers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "shown"),
    [
        ("mongodb://127.0.0.1:27017/", "mongodb://127.0.0.1:27017/"),
        ("mongodb://ci:p%40ss@db:27017/app?tls=true", "mongodb://***@db:27017/app?tls=true"),
        ("mongodb+srv://ci:pw@cluster.example.net", "mongodb+srv://***@cluster.example.net"),
        ("mongodb://h/?authSource=a@b", "mongodb://h/?authSource=a@b"),
    ],
)
def test_messages_never_show_a_password(uri: str, shown: str) -> None:
    assert redact(uri) == shown
