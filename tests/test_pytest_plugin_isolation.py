"""The pytest plugin's clean server before each test (server/pytest_plugin.py) against servers it
did not start (--ebbdb-uri): an ebbdb with test commands (the one-command reset), an ebbdb
without them (what commands allow, as against MongoDB) and one with --auth, whose plugin user
stays; its --ebbdb-port and --ebbdb-export-uri where a port is taken and under pytest-xdist; and
the test command it sends, resetTestState, on its own.
tests/test_pytest_plugin.py has the projects, and the same checks against the server the plugin
starts (in CI's smoke run)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from ebbdb.server.embedded import ServerThread, running_server
from tests.test_pytest_plugin import (
    PLUGIN,
    ROOT,
    _free_port,
    _pythonpath,
    _run,
    in_process,
    leaks_project,
    run_leaks_both_ways,
)

pytest_plugins = ["pytester"]
# The external servers run in this process: every command module imported first.
pytestmark = pytest.mark.usefixtures(in_process.__name__)


@pytest.fixture(autouse=True)
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(_pythonpath(ROOT)))
    return pytester


def test_an_external_ebbdb_with_test_commands(pytester: pytest.Pytester, tmp_path: Path) -> None:
    srv = ServerThread(str(tmp_path / "ext"), {"enableTestCommands": True}).start()
    try:
        leaks_project(pytester, test_commands=True)
        run_leaks_both_ways(pytester, "--ebbdb-uri", srv.uri)
    finally:
        srv.stop()


def test_an_external_server_without_test_commands(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    """As against MongoDB: parameters compared with getParameter '*' at the start, users from
    usersInfo, profiling database by database."""
    srv = ServerThread(str(tmp_path / "ext")).start()
    try:
        leaks_project(pytester, test_commands=False)
        run_leaks_both_ways(pytester, "--ebbdb-uri", srv.uri)
    finally:
        srv.stop()


AUTH_TESTS = """
def test_a(mongo_client):
    users = mongo_client.admin.command("usersInfo", {"forAllDBs": True})["users"]
    assert [(u["user"], u["db"]) for u in users] == [("plugin", "admin")]
    mongo_client.app.command("createUser", "ada", pwd="secret", roles=[])


test_b = test_a
"""


def test_the_plugins_own_user_stays(pytester: pytest.Pytester, tmp_path: Path) -> None:
    srv = ServerThread(str(tmp_path / "ext"), auth=True).start()
    try:
        with MongoClient(srv.uri) as client:  # the localhost exception: the first user
            client.admin.command("createUser", "plugin", pwd="pw", roles=["root"])
        uri = f"mongodb://plugin:pw@127.0.0.1:{srv.port}/?directConnection=true"
        pytester.makepyfile(test_auth=AUTH_TESTS)
        _run(pytester, "-p", PLUGIN, "--ebbdb-uri", uri).assert_outcomes(passed=2)
    finally:
        srv.stop()


PORT_TESTS = """
import os


def test_port(ebbdb_server, ebbdb_uri):
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    assert ebbdb_server.embedded.port == {port} + int(worker[2:])
    assert os.environ["MONGODB_URI"] == ebbdb_uri


test_again = test_port
"""


def test_a_fixed_port_and_the_exported_uri_under_xdist(pytester: pytest.Pytester) -> None:
    """Each worker's server on PORT+n, each worker's URI in its own environment."""
    port = _free_port()
    pytester.makepyfile(test_port=PORT_TESTS.format(port=port))
    result = _run(
        pytester, "-p", PLUGIN, "-n", "2", "--ebbdb-port", str(port), "--ebbdb-export-uri"
    )
    result.assert_outcomes(passed=2)


def test_a_port_that_is_taken(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_port="def test_it(mongo_client):\n    pass\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run(pytester, "-p", PLUGIN, "--ebbdb-port", str(port))
        result.assert_outcomes(errors=1)
        result.stdout.fnmatch_lines([f"*ebbdb cannot start on port {port} (--ebbdb-port): *"])
        # Started with the session (to export its URI): a usage error before any test.
        result = _run(pytester, "-p", PLUGIN, "--ebbdb-port", str(port), "--ebbdb-export-uri")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"ERROR: ebbdb cannot start on port {port} (--ebbdb-port): *"])


def test_an_exported_external_server_that_does_not_answer(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_it="def test_it(mongo_client):\n    pass\n")
    uri = "mongodb://127.0.0.1:1/?serverSelectionTimeoutMS=200"
    result = _run(pytester, "-p", PLUGIN, "--ebbdb-uri", uri, "--ebbdb-export-uri")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: --ebbdb-uri {uri} does not answer: *"])


def test_reset_test_state_says_what_it_changed(tmp_path: Path) -> None:
    """The command itself: its reply, and CommandNotFound without test commands, as mongod
    answers a command it does not have."""
    with running_server(str(tmp_path / "on"), {"enableTestCommands": True}) as srv:
        with MongoClient(srv.uri) as client:
            admin = client.admin
            clean = {
                "failPoints": [],
                "ttlClockOffsetMillis": 0,
                "parameters": [],
                "droppedUsers": [],
                "profiledDatabases": [],
                "fsyncLocksReleased": 0,
                "ok": 1.0,
            }
            assert admin.command("resetTestState") == clean
            admin.command(
                "configureFailPoint", "failCommand", mode="alwaysOn", data={"failCommands": ["x"]}
            )
            admin.command("configureFailPoint", "hangIndexBuildBeforeCommit", mode="alwaysOn")
            admin.command("ttlClock", advanceSeconds=-5)
            admin.command("setParameter", 1, cursorTimeoutMillis=1000)
            client.app.command("createUser", "ada", pwd="secret", roles=[])
            client.app.command("profile", 1)
            admin.command("fsync", lock=True)
            admin.command("fsync", lock=True)
            assert admin.command("resetTestState") == {
                "failPoints": ["failCommand", "hangIndexBuildBeforeCommit"],
                "ttlClockOffsetMillis": -5000,
                "parameters": ["cursorTimeoutMillis"],
                "droppedUsers": ["app.ada"],
                "profiledDatabases": ["app"],
                "fsyncLocksReleased": 2,
                "ok": 1.0,
            }
            assert admin.command("resetTestState") == clean
            with pytest.raises(OperationFailure) as refused:
                client.app.command("resetTestState")
            assert refused.value.code == 13  # Unauthorized: the admin database's only
    with running_server(str(tmp_path / "off")) as srv, MongoClient(srv.uri) as client:
        with pytest.raises(OperationFailure) as refused:
            client.admin.command("resetTestState")
        assert refused.value.code == 59
        assert refused.value.details["errmsg"] == "no such command: 'resetTestState'"
