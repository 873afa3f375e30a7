"""Handshake and administration commands over OP_MSG, as real drivers send them, checked against
MongoDB 7.0's reply shapes, types and error codes."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

import pytest
from bson import Int64
from pymongo import AsyncMongoClient, MongoClient
from pymongo.errors import OperationFailure

from ebbdb.server.embedded import ServerThread
from tests.e2e.rawwire import connect, op_msg

Client = MongoClient[dict[str, Any]]


def assert_ok(reply: dict[str, Any]) -> None:
    assert reply["ok"] == 1.0
    assert type(reply["ok"]) is float


# --- hello and its legacy aliases ------------------------------------------------------------


def test_hello_describes_a_writable_standalone(client: Client) -> None:
    reply = client.admin.command("hello")
    assert_ok(reply)
    assert reply["isWritablePrimary"] is True
    assert reply["helloOk"] is True
    assert reply["maxBsonObjectSize"] == 16777216
    assert reply["maxMessageSizeBytes"] == 48000000
    assert reply["maxWriteBatchSize"] == 100000
    assert isinstance(reply["localTime"], datetime.datetime)
    assert reply["logicalSessionTimeoutMinutes"] == 30
    assert type(reply["connectionId"]) is int
    assert reply["minWireVersion"] == 0
    assert reply["maxWireVersion"] == 21
    assert reply["readOnly"] is False
    # No compressor was asked for; without a topologyVersion drivers do not start streaming hello.
    assert "compression" not in reply
    assert "topologyVersion" not in reply


def test_hello_works_on_any_database(client: Client) -> None:
    reply = client.some_app.command("hello")
    assert_ok(reply)
    assert reply["isWritablePrimary"] is True


@pytest.mark.parametrize("name", ["isMaster", "ismaster"])
def test_legacy_is_master_replies_ismaster_true(client: Client, name: str) -> None:
    reply = client.admin.command(name)
    assert_ok(reply)
    assert reply["ismaster"] is True
    assert "isWritablePrimary" not in reply
    assert reply["maxBsonObjectSize"] == 16777216
    assert reply["maxWireVersion"] == 21


def test_connection_ids_differ_between_connections(uri: str) -> None:
    a: Client = MongoClient(uri, maxPoolSize=1)
    b: Client = MongoClient(uri, maxPoolSize=1)
    try:
        ida = a.admin.command("hello")["connectionId"]
        idb = b.admin.command("hello")["connectionId"]
    finally:
        a.close()
        b.close()
    assert ida != idb


def test_ping(client: Client) -> None:
    assert_ok(client.admin.command("ping"))
    assert_ok(client.other.command("ping"))


# --- buildInfo ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["buildInfo", "buildinfo"])
def test_build_info(client: Client, name: str) -> None:
    reply = client.admin.command(name)
    assert_ok(reply)
    assert reply["version"] == "7.0.0"
    array = reply["versionArray"]
    assert isinstance(array, list)
    assert all(type(n) is int for n in array)
    assert array[:2] == [7, 0]
    assert reply["maxBsonObjectSize"] == 16777216
    assert isinstance(reply["ebbdb"]["version"], str)
    assert reply["ebbdb"]["version"]


def test_build_info_runs_on_a_non_admin_database(client: Client) -> None:
    assert client.app.command("buildInfo")["version"] == "7.0.0"


# --- getParameter ------------------------------------------------------------------------------


def test_get_parameter_feature_compatibility_version(client: Client) -> None:
    reply = client.admin.command({"getParameter": 1, "featureCompatibilityVersion": 1})
    assert_ok(reply)
    assert reply["featureCompatibilityVersion"] == {"version": "7.0"}


@pytest.mark.parametrize("which", ["*", {"allParameters": True}], ids=["star", "allParameters"])
def test_get_parameter_all(client: Client, which: Any) -> None:
    reply = client.admin.command({"getParameter": which})
    assert_ok(reply)
    params = {k: v for k, v in reply.items() if k != "ok"}
    assert len(params) >= 3
    assert params["featureCompatibilityVersion"] == {"version": "7.0"}


def test_get_parameter_star_and_all_parameters_agree(client: Client) -> None:
    star = client.admin.command({"getParameter": "*"})
    every = client.admin.command({"getParameter": {"allParameters": True}})
    assert set(star) == set(every)


def test_get_parameter_outside_admin_is_unauthorized(client: Client) -> None:
    with pytest.raises(OperationFailure) as info:
        client.app.command({"getParameter": 1, "featureCompatibilityVersion": 1})
    assert info.value.code == 13
    assert info.value.details is not None
    assert info.value.details["codeName"] == "Unauthorized"
    assert type(info.value.details["ok"]) is float
    assert info.value.details["ok"] == 0.0


# --- getLog, getCmdLineOpts, hostInfo -----------------------------------------------------------


def test_get_log_star_lists_log_names(client: Client) -> None:
    reply = client.admin.command("getLog", "*")
    assert_ok(reply)
    assert {"global", "startupWarnings"} <= set(reply["names"])


def test_get_log_global_lines_are_json(client: Client) -> None:
    client.admin.command("ping")
    reply = client.admin.command("getLog", "global")
    assert_ok(reply)
    lines = reply["log"]
    assert isinstance(lines, list)
    assert lines, "the server logged at least its startup"
    for line in lines:
        assert isinstance(line, str)
        entry = json.loads(line)
        assert isinstance(entry, dict)


def test_get_log_startup_warnings_is_a_list(client: Client) -> None:
    reply = client.admin.command("getLog", "startupWarnings")
    assert_ok(reply)
    assert isinstance(reply["log"], list)


def test_get_cmd_line_opts(client: Client, dbpath: str) -> None:
    reply = client.admin.command("getCmdLineOpts")
    assert_ok(reply)
    assert isinstance(reply["argv"], list)
    assert isinstance(reply["parsed"], dict)
    assert reply["parsed"]["storage"]["dbPath"] == dbpath


def test_host_info(client: Client) -> None:
    reply = client.admin.command("hostInfo")
    assert_ok(reply)
    assert isinstance(reply["system"], dict)
    assert isinstance(reply["os"], dict)
    assert isinstance(reply["system"]["hostname"], str)
    assert isinstance(reply["os"]["type"], str)


# --- connection-level commands ------------------------------------------------------------------


def test_whatsmyuri_reports_the_client_address(server: ServerThread) -> None:
    # A raw socket, because a driver hides the local address the reply must name.
    with connect(server) as sock:
        reply = op_msg(sock, {"whatsmyuri": 1, "$db": "admin"})
        local_port = sock.getsockname()[1]
    assert_ok(reply)
    assert reply["you"] == f"127.0.0.1:{local_port}"


def test_whatsmyuri_through_pymongo(client: Client) -> None:
    reply = client.admin.command("whatsmyuri")
    assert_ok(reply)
    assert re.fullmatch(r"127\.0\.0\.1:\d+", reply["you"])


def test_connection_status(client: Client) -> None:
    reply = client.admin.command("connectionStatus")
    assert_ok(reply)
    assert reply["authInfo"]["authenticatedUsers"] == []
    assert reply["authInfo"]["authenticatedUserRoles"] == []


def test_list_commands(client: Client) -> None:
    reply = client.admin.command("listCommands")
    assert_ok(reply)
    commands = reply["commands"]
    assert {"find", "insert", "hello", "getMore", "killCursors", "listCommands"} <= set(commands)
    for name, entry in commands.items():
        assert "help" in entry, name
        assert isinstance(entry["help"], str), name


def test_end_sessions(client: Client) -> None:
    with client.start_session() as session:
        session_id = session.session_id
    reply = client.admin.command("endSessions", [session_id])
    assert_ok(reply)
    assert_ok(client.admin.command("ping"))


# --- serverStatus --------------------------------------------------------------------------------


def test_server_status(client: Client) -> None:
    reply = client.admin.command("serverStatus")
    assert_ok(reply)
    assert isinstance(reply["host"], str)
    assert reply["host"]
    assert reply["version"] == "7.0.0"
    assert isinstance(reply["uptime"], (int, float))
    assert reply["uptime"] >= 0
    assert reply["connections"]["current"] >= 1
    counters = reply["opcounters"]
    assert {"insert", "query", "update", "delete", "getmore", "command"} <= set(counters)
    for name, value in counters.items():
        assert isinstance(value, Int64), (name, type(value))


def test_server_status_counts_inserts(client: Client) -> None:
    before = client.admin.command("serverStatus")["opcounters"]["insert"]
    client.app.c.insert_many([{"x": i} for i in range(3)])
    client.app.c.insert_one({"x": 3})
    after = client.admin.command("serverStatus")["opcounters"]["insert"]
    assert isinstance(after, Int64)
    assert after > before


def test_server_status_counts_queries_and_commands(client: Client) -> None:
    before = client.admin.command("serverStatus")["opcounters"]
    client.app.c.find_one({})
    client.admin.command("ping")
    after = client.admin.command("serverStatus")["opcounters"]
    assert after["query"] > before["query"]
    assert after["command"] > before["command"]


# --- ok is a double, and errors ------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        {"hello": 1},
        {"isMaster": 1},
        {"ping": 1},
        {"buildInfo": 1},
        {"getParameter": "*"},
        {"getLog": "*"},
        {"getCmdLineOpts": 1},
        {"hostInfo": 1},
        {"whatsmyuri": 1},
        {"connectionStatus": 1},
        {"listCommands": 1},
        {"serverStatus": 1},
        {"listDatabases": 1},
    ],
    ids=lambda c: next(iter(c)),
)
def test_every_reply_ok_is_a_double(client: Client, command: dict[str, Any]) -> None:
    assert_ok(client.admin.command(command))


def test_unknown_command(client: Client) -> None:
    with pytest.raises(OperationFailure) as info:
        client.app.command("fooBar")
    assert info.value.code == 59
    details = info.value.details
    assert details is not None
    assert details["codeName"] == "CommandNotFound"
    assert details["errmsg"] == "no such command: 'fooBar'"
    assert details["ok"] == 0.0
    assert type(details["ok"]) is float


def test_unknown_command_leaves_the_connection_usable(client: Client) -> None:
    with pytest.raises(OperationFailure):
        client.admin.command("fooBar")
    assert_ok(client.admin.command("ping"))


@pytest.mark.parametrize(
    ("arguments", "code", "code_name"),
    [({"foo": 1}, 40415, "Location40415"), ({"filter": 5}, 14, "TypeMismatch")],
    ids=["unknown_field", "filter_of_wrong_type"],
)
def test_find_with_bad_argument(
    client: Client, arguments: dict[str, Any], code: int, code_name: str
) -> None:
    with pytest.raises(OperationFailure) as info:
        client.app.command("find", "c", **arguments)
    assert info.value.code == code
    assert info.value.details is not None
    assert info.value.details["codeName"] == code_name


# --- async drivers -------------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_async_mongo_client_handshake_and_status(
    async_client: AsyncMongoClient[dict[str, Any]],
) -> None:
    hello = await async_client.admin.command("hello")
    assert hello["isWritablePrimary"] is True
    assert hello["maxWireVersion"] == 21
    status = await async_client.admin.command("serverStatus")
    assert_ok(status)
    assert status["connections"]["current"] >= 1
    with pytest.raises(OperationFailure) as info:
        await async_client.admin.command("fooBar")
    assert info.value.code == 59


@pytest.mark.asyncio
async def test_motor_build_info_and_list_commands(motor_client: Any) -> None:
    build = await motor_client.admin.command("buildInfo")
    assert build["version"] == "7.0.0"
    assert build["versionArray"][:2] == [7, 0]
    commands = (await motor_client.admin.command("listCommands"))["commands"]
    assert "find" in commands
    assert_ok(await motor_client.admin.command("ping"))
