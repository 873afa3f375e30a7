"""The pytest plugin's replica set (server/pytest_plugin.py), as a user's project meets it (pytester,
in subprocesses, as tests/test_pytest_plugin.py runs it): a test marked `ebbdb_replset` gets clients
of a one-member replica set beside the session's standalone server, `--ebbdb-replset` makes the
session's server itself a replica set, and against an `--ebbdb-uri` server the marked tests run
when it is a replica set's member and are skipped, saying why, when it is not."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ebbdb.server.embedded import ServerThread
from ebbdb.server.pytest_plugin import REPLSET_NAME
from tests.test_pytest_plugin import in_process

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "ebbdb.server.pytest_plugin"
RUN_TIMEOUT = 90.0

TESTS = """
import pytest
from pymongo import MongoClient
from pymongo.errors import OperationFailure


@pytest.mark.ebbdb_replset
def test_a_marked_test_talks_to_a_replica_set(mongo_client, ebbdb_replset_server):
    hello = mongo_client.admin.command("hello")
    assert hello["setName"] == "rs0"
    assert mongo_client.topology_description.topology_type_name == "ReplicaSetWithPrimary"
    assert ebbdb_replset_server.replica_set == "rs0"
    assert ebbdb_replset_server.uri.endswith("/?replicaSet=rs0")
    with mongo_client.start_session(causal_consistency=True) as session:
        mongo_client.orders.items.insert_one({"_id": 1}, session=session)
        assert mongo_client.orders.items.find_one({}, session=session) == {"_id": 1}


@pytest.mark.ebbdb_replset
def test_b_its_databases_were_dropped(mongo_client):
    assert "orders" not in mongo_client.list_database_names()


@pytest.mark.ebbdb_replset
@pytest.mark.asyncio
async def test_c_async_clients_too(async_mongo_db):
    hello = await async_mongo_db.client.admin.command("hello")
    assert hello["setName"] == "rs0"
    await async_mongo_db.items.insert_one({"_id": 1})
    assert await async_mongo_db.items.count_documents({}) == 1


def test_d_an_unmarked_test(mongo_client, ebbdb_uri):
    hello = mongo_client.admin.command("hello")
    assert hello.get("setName") == EXPECTED_SET_NAME


@pytest.mark.ebbdb_replset
def test_f_leaves_state_behind(mongo_client):
    admin = mongo_client.admin
    try:
        admin.command(
            "configureFailPoint",
            "failCommand",
            mode="alwaysOn",
            data={"failCommands": ["aggregate"], "errorCode": 10107},
        )
    except OperationFailure as exc:
        assert exc.code == 59  # a server without test commands
    admin.command("setParameter", 1, transactionLifetimeLimitSeconds=5)
    mongo_client.app.command("createUser", "ada", pwd="secret", roles=[])


@pytest.mark.ebbdb_replset
def test_g_finds_the_replica_set_clean(mongo_client):
    assert mongo_client.app.items.count_documents({}) == 0
    admin = mongo_client.admin
    assert admin.command("getParameter", 1, transactionLifetimeLimitSeconds=1)[
        "transactionLifetimeLimitSeconds"
    ] == 60
    assert admin.command("usersInfo", {"forAllDBs": True})["users"] == []


def test_e_the_replica_sets_uri(ebbdb_replset_uri):
    with MongoClient(ebbdb_replset_uri) as client:
        assert client.admin.command("replSetGetStatus")["members"][0]["stateStr"] == "PRIMARY"
"""

INI = """
[pytest]
asyncio_default_fixture_loop_scope = function
"""


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makeini(INI)
    monkeypatch.setenv(
        "PYTHONPATH",
        os.pathsep.join([str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(":"))]),
    )
    return pytester


def _write_tests(pytester: pytest.Pytester, set_name: str | None) -> None:
    pytester.makepyfile(test_app=f"EXPECTED_SET_NAME = {set_name!r}\n" + TESTS)


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", PLUGIN, *args, timeout=RUN_TIMEOUT
    )


def test_the_marker_gives_a_test_a_replica_set(project: pytest.Pytester) -> None:
    _write_tests(project, None)  # unmarked tests keep the standalone server
    result = _run(project, "-v")
    result.assert_outcomes(passed=7)
    help_text = project.runpytest_subprocess("-p", PLUGIN, "--markers", timeout=RUN_TIMEOUT)
    help_text.stdout.fnmatch_lines(["@pytest.mark.ebbdb_replset: the test's ebbdb clients *"])


def test_the_option_makes_the_session_server_a_replica_set(project: pytest.Pytester) -> None:
    _write_tests(project, REPLSET_NAME)  # every test's clients then talk to the set
    project.makepyfile(
        test_same="def test_same(ebbdb_server, ebbdb_replset_server, ebbdb_uri):\n"
        "    assert ebbdb_server is ebbdb_replset_server\n"
        "    assert ebbdb_uri.endswith('/?replicaSet=rs0')\n"
    )
    result = _run(project, "--ebbdb-replset")
    result.assert_outcomes(passed=8)


@pytest.mark.usefixtures(in_process.__name__)  # the servers run in this process
def test_against_external_servers(project: pytest.Pytester, tmp_path: Path) -> None:
    standalone = ServerThread(str(tmp_path / "standalone")).start()
    replset = ServerThread(str(tmp_path / "replset"), repl_set="rs0").start()
    try:
        _write_tests(project, None)
        result = _run(project, "-rs", "--ebbdb-uri", standalone.uri)
        result.assert_outcomes(passed=1, skipped=6)
        result.stdout.fnmatch_lines(
            [
                f"SKIPPED [[]*[]] *: the server at {standalone.uri} is not a replica set's "
                "member, and this test needs one (transactions, change streams): give "
                "--ebbdb-uri a replica set's URI"
            ]
        )
        _write_tests(project, REPLSET_NAME)
        result = _run(project, "--ebbdb-uri", replset.uri)
        result.assert_outcomes(passed=7)
    finally:
        standalone.stop()
        replset.stop()
