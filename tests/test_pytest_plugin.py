"""ebbdb's pytest plugin (server/pytest_plugin.py) as a user meets it: pytest runs (pytester, in
subprocesses) on a small project whose tests use every fixture, alone, under pytest-xdist with
`-n 2`, against an external server with `--ebbdb-uri`, and with `--ebbdb-dbpath` for a post-mortem.

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
    pytester: pytest.Pytester, project: Path, tmp_path: Path
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
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
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
