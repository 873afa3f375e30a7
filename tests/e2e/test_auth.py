"""Authentication and authorization against real servers started with --auth: pymongo logs in with
SCRAM-SHA-256 and SCRAM-SHA-1 (speculatively, in its hello), is refused without credentials (13)
and with wrong ones (18); built-in roles are enforced per command; the localhost exception; user
management and its reply shapes; the keys stored salted; the Node.js driver and mongosh log in and
are refused; the root user from the `mongo` image's variables; the start-up warning of an open
server."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import scramp
from bson import Binary
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from ebbdb.server.config import parse_args
from ebbdb.server.embedded import ServerThread
from tests.e2e.node_tools import MONGOSH, mongosh_env, node_tools, run_mongosh, run_node
from tests.e2e.test_cli import SERVER_CMD, ServerProcess
from tests.helpers import Recorder

Client = MongoClient[dict[str, Any]]
ROOT_PW = "root-pw"


@dataclasses.dataclass
class AuthServer:
    """A server with --auth and the clients a test opened on it (closed at the end)."""

    srv: ServerThread
    opened: list[Client]

    @property
    def uri(self) -> str:
        return self.srv.uri

    def connect(self, user: str | None = None, pw: str | None = None, **kw: Any) -> Client:
        if user is not None:
            kw = {"username": user, "password": pw, "authSource": "admin", **kw}
        c: Client = MongoClient(self.uri, serverSelectionTimeoutMS=5000, **kw)
        self.opened.append(c)
        return c

    def root(self) -> Client:
        return self.connect("root", ROOT_PW)


@pytest.fixture
def auth_server(tmp_path: Path) -> Iterator[AuthServer]:
    """A fresh server with --auth and a root user (made through the localhost exception)."""
    srv = ServerThread(str(tmp_path / "data"), auth=True).start()
    server = AuthServer(srv, [])
    try:
        server.connect().admin.command("createUser", "root", pwd=ROOT_PW, roles=["root"])
        yield server
    finally:
        for c in server.opened:
            c.close()
        srv.stop()


@pytest.fixture
def empty_auth_server(tmp_path: Path) -> Iterator[AuthServer]:
    """A fresh server with --auth and no user at all."""
    srv = ServerThread(str(tmp_path / "data"), auth=True).start()
    server = AuthServer(srv, [])
    try:
        yield server
    finally:
        for c in server.opened:
            c.close()
        srv.stop()


def failure(fn: Callable[[], Any]) -> dict[str, Any]:
    """The error reply of a command that must fail, without its ok field."""
    with pytest.raises(OperationFailure) as info:
        fn()
    details = dict(info.value.details or {})
    details.pop("ok", None)
    return details


def requires_authentication(name: str) -> dict[str, Any]:
    return {
        "errmsg": f"Command {name} requires authentication",
        "code": 13,
        "codeName": "Unauthorized",
    }


AUTH_FAILED = {"errmsg": "Authentication failed.", "code": 18, "codeName": "AuthenticationFailed"}


def not_authorized(reply: dict[str, Any], db: str, command: str) -> None:
    """13 Unauthorized with MongoDB's message, which shows the command document."""
    assert reply["code"] == 13 and reply["codeName"] == "Unauthorized", reply
    prefix = f"not authorized on {db} to execute command {{ {command}: "
    assert reply["errmsg"].startswith(prefix), reply["errmsg"]
    assert set(reply) == {"errmsg", "code", "codeName"}


# -- logging in ------------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-1", None])
def test_pymongo_logs_in_speculatively(auth_server: AuthServer, mechanism: str | None) -> None:
    listener = Recorder()
    kw = {"authMechanism": mechanism} if mechanism else {}
    c = auth_server.connect("root", ROOT_PW, event_listeners=[listener], **kw)
    c.shop.items.insert_one({"_id": 1, "name": "tea"})
    assert c.shop.items.find_one() == {"_id": 1, "name": "tea"}
    # The hello carried saslStart (speculativeAuthenticate): one saslContinue finishes the login
    # (skipEmptyExchange), no saslStart round trip.
    assert listener.names() == ["saslContinue", "insert", "find"]
    assert c.admin.command("connectionStatus")["authInfo"] == {
        "authenticatedUsers": [{"user": "root", "db": "admin"}],
        "authenticatedUserRoles": [{"role": "root", "db": "admin"}],
    }


def test_a_user_of_another_database_logs_in_with_its_auth_source(auth_server: AuthServer) -> None:
    auth_server.root().app.command("createUser", "ann", pwd="ann-pw", roles=["readWrite"])
    c = auth_server.connect("ann", "ann-pw", authSource="app")
    c.app.notes.insert_one({"_id": 1})
    assert c.app.notes.count_documents({}) == 1
    # Not in admin: the same name and password with authSource admin is no user.
    wrong = auth_server.connect("ann", "ann-pw")
    assert failure(lambda: wrong.app.notes.find_one()) == AUTH_FAILED


def test_refused_without_credentials_and_with_wrong_ones(auth_server: AuthServer) -> None:
    anonymous = auth_server.connect()
    assert failure(lambda: anonymous.shop.items.find_one()) == requires_authentication("find")
    assert failure(lambda: anonymous.list_database_names()) == requires_authentication(
        "listDatabases"
    )
    assert failure(lambda: anonymous.shop.items.insert_one({})) == requires_authentication("insert")
    # What needs no login still answers.
    assert anonymous.admin.command("ping") == {"ok": 1.0}
    assert anonymous.admin.command("hello")["isWritablePrimary"] is True
    assert anonymous.admin.command("connectionStatus")["authInfo"] == {
        "authenticatedUsers": [],
        "authenticatedUserRoles": [],
    }
    for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-1"):
        wrong = auth_server.connect("root", "not-it", authMechanism=mechanism)
        assert failure(lambda w=wrong: w.shop.items.find_one()) == AUTH_FAILED  # type: ignore[misc]
    nobody = auth_server.connect("nobody", "x")
    assert failure(lambda: nobody.shop.items.find_one()) == AUTH_FAILED


def _scram_client(user: str, password: str) -> Any:
    return scramp.ScramClient(["SCRAM-SHA-256"], user, password)


def test_the_sasl_conversation_step_by_step(auth_server: AuthServer) -> None:
    # One connection (maxPoolSize=1) runs the conversation by hand, as a driver does.
    c = auth_server.connect(maxPoolSize=1)
    hello = c.admin.command("hello", saslSupportedMechs="admin.root")
    assert hello["saslSupportedMechs"] == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    assert "saslSupportedMechs" not in c.admin.command("hello", saslSupportedMechs="admin.nobody")

    scram = _scram_client("root", ROOT_PW)
    start = c.admin.command(
        "saslStart",
        1,
        mechanism="SCRAM-SHA-256",
        payload=Binary(scram.get_client_first().encode()),
        autoAuthorize=1,
    )
    assert set(start) == {"conversationId", "done", "payload", "ok"}
    assert (start["conversationId"], start["done"]) == (1, False)
    scram.set_server_first(bytes(start["payload"]).decode())
    step = c.admin.command(
        "saslContinue", 1, conversationId=1, payload=Binary(scram.get_client_final().encode())
    )
    assert (step["conversationId"], step["done"]) == (1, False)
    scram.set_server_final(bytes(step["payload"]).decode())  # checks the server's signature
    # Without skipEmptyExchange the client ends with an empty message.
    last = c.admin.command("saslContinue", 1, conversationId=1, payload=Binary(b""))
    assert last == {"conversationId": 1, "done": True, "payload": b"", "ok": 1.0}
    assert c.shop.items.count_documents({}) == 0  # logged in
    assert c.admin.command("logout") == {"ok": 1.0}
    assert failure(lambda: c.shop.items.count_documents({})) == requires_authentication("aggregate")
    assert failure(
        lambda: c.admin.command("saslContinue", 1, conversationId=1, payload=Binary(b""))
    ) == {"errmsg": "No SASL session state found", "code": 17, "codeName": "ProtocolError"}
    assert failure(
        lambda: c.admin.command("saslStart", 1, mechanism="PLAIN", payload=Binary(b""))
    ) == {
        "errmsg": "Received authentication for mechanism PLAIN which is unknown or not enabled",
        "code": 334,
        "codeName": "MechanismUnavailable",
    }


def test_speculative_authentication_in_hello(auth_server: AuthServer) -> None:
    c = auth_server.connect(maxPoolSize=1)
    scram = _scram_client("root", ROOT_PW)
    first = Binary(scram.get_client_first().encode())
    spec = {"saslStart": 1, "mechanism": "SCRAM-SHA-256", "payload": first, "db": "admin"}
    reply = c.admin.command(
        "hello", speculativeAuthenticate={**spec, "options": {"skipEmptyExchange": True}}
    )
    answer = reply["speculativeAuthenticate"]
    assert set(answer) == {"conversationId", "done", "payload"}
    assert (answer["conversationId"], answer["done"]) == (1, False)
    scram.set_server_first(bytes(answer["payload"]).decode())
    final = c.admin.command(
        "saslContinue", 1, conversationId=1, payload=Binary(scram.get_client_final().encode())
    )
    assert (final["conversationId"], final["done"]) == (1, True)
    scram.set_server_final(bytes(final["payload"]).decode())
    assert c.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"] == [
        {"user": "root", "db": "admin"}
    ]
    # An unknown user: hello answers without the field; the client's own saslStart then fails.
    other = _scram_client("nobody", "x")
    spec["payload"] = Binary(other.get_client_first().encode())
    assert "speculativeAuthenticate" not in c.admin.command("hello", speculativeAuthenticate=spec)


# -- roles -----------------------------------------------------------------------------------------


def test_roles_are_enforced_per_command(auth_server: AuthServer) -> None:
    root = auth_server.root()
    root.app.items.insert_one({"_id": 1})
    for name, roles in [
        ("reader", ["read"]),
        ("writer", ["readWrite"]),
        ("admin_of_users", ["userAdmin"]),
        ("dba", ["dbAdmin"]),
        ("owner", ["dbOwner"]),
    ]:
        root.app.command("createUser", name, pwd="pw", roles=roles)
    root.admin.command("createUser", "monitor", pwd="pw", roles=["clusterMonitor"])
    root.admin.command("createUser", "anyreader", pwd="pw", roles=["readAnyDatabase"])

    def login(user: str, db: str = "app") -> Client:
        return auth_server.connect(user, "pw", authSource=db)

    reader = login("reader")
    assert reader.app.items.find_one() == {"_id": 1}
    assert reader.app.list_collection_names() == ["items"]
    not_authorized(failure(lambda: reader.app.items.insert_one({"_id": 2})), "app", "insert")
    not_authorized(failure(lambda: reader.other.items.find_one()), "other", "find")

    writer = login("writer")
    writer.app.items.insert_one({"_id": 2})
    writer.app.items.create_index("x")
    writer.app.scratch.drop()
    not_authorized(
        failure(lambda: writer.app.command("createUser", "x", pwd="pw", roles=[])),
        "app",
        "createUser",
    )
    not_authorized(failure(lambda: writer.drop_database("app")), "app", "dropDatabase")

    user_admin = login("admin_of_users")
    user_admin.app.command("createUser", "made", pwd="pw", roles=["read"])
    assert [u["user"] for u in user_admin.app.command("usersInfo", 1)["users"]] == [
        "admin_of_users",
        "dba",
        "made",
        "owner",
        "reader",
        "writer",
    ]
    not_authorized(failure(lambda: user_admin.app.items.find_one()), "app", "find")

    dba = login("dba")
    assert dba.app.command("collStats", "items")["count"] == 2
    dba.app.command("collMod", "items")
    not_authorized(failure(lambda: dba.app.items.find_one()), "app", "find")

    owner = login("owner")
    owner.app.items.insert_one({"_id": 3})
    owner.app.command("createUser", "also", pwd="pw", roles=["read"])

    monitor = login("monitor", "admin")
    assert monitor.admin.command("serverStatus")["ok"] == 1.0
    assert monitor.admin.command("getLog", "startupWarnings")["ok"] == 1.0
    not_authorized(failure(lambda: monitor.app.items.find_one()), "app", "find")
    not_authorized(
        failure(lambda: monitor.admin.command("setParameter", 1, cursorTimeoutMillis=1000)),
        "admin",
        "setParameter",
    )

    anyreader = login("anyreader", "admin")
    assert anyreader.app.items.count_documents({}) == 3
    assert "app" in anyreader.list_database_names()
    not_authorized(failure(lambda: anyreader.app.items.insert_one({})), "app", "insert")

    # listDatabases shows a user the databases its roles name.
    assert reader.list_database_names() == ["app"]

    owner.app.command("dropUser", "also")
    owner.drop_database("app")  # root can do all the above too
    assert "app" not in root.list_database_names()
    assert root.admin.command("serverStatus")["ok"] == 1.0


def test_a_refused_createUser_never_shows_the_password(auth_server: AuthServer) -> None:
    root = auth_server.root()
    root.app.command("createUser", "writer", pwd="pw", roles=["readWrite"])
    writer = auth_server.connect("writer", "pw", authSource="app")
    reply = failure(lambda: writer.app.command("createUser", "x", pwd="hunter2", roles=[]))
    assert 'pwd: "xxx"' in reply["errmsg"] and "hunter2" not in reply["errmsg"]


def test_role_changes_apply_to_open_connections(auth_server: AuthServer) -> None:
    root = auth_server.root()
    root.app.command("createUser", "eve", pwd="pw", roles=["read"])
    eve = auth_server.connect("eve", "pw", authSource="app")
    not_authorized(failure(lambda: eve.app.items.insert_one({})), "app", "insert")
    assert root.app.command("grantRolesToUser", "eve", roles=["readWrite"]) == {"ok": 1.0}
    eve.app.items.insert_one({"_id": 1})
    assert root.app.command("revokeRolesFromUser", "eve", roles=["readWrite", "read"]) == {
        "ok": 1.0
    }
    not_authorized(failure(lambda: eve.app.items.find_one()), "app", "find")
    root.app.command("grantRolesToUser", "eve", roles=[{"role": "read", "db": "app"}])
    assert eve.app.items.find_one() == {"_id": 1}
    root.app.command("dropUser", "eve")
    not_authorized(failure(lambda: eve.app.items.find_one()), "app", "find")


# -- the localhost exception -----------------------------------------------------------------------


def test_localhost_exception_creates_only_the_first_user(empty_auth_server: AuthServer) -> None:
    c = empty_auth_server.connect()
    assert failure(lambda: c.app.items.find_one()) == requires_authentication("find")
    # Only in admin.
    assert failure(
        lambda: c.app.command("createUser", "x", pwd="pw", roles=["read"])
    ) == requires_authentication("createUser")
    assert c.admin.command("createUser", "first", pwd="pw", roles=["root"]) == {"ok": 1.0}
    # Once a user exists, the exception is gone.
    assert failure(
        lambda: c.admin.command("createUser", "second", pwd="pw", roles=["root"])
    ) == requires_authentication("createUser")
    first = empty_auth_server.connect("first", "pw")
    first.admin.command("createUser", "second", pwd="pw", roles=["root"])


# -- user management -------------------------------------------------------------------------------


def test_users_info_and_connection_status_shapes(auth_server: AuthServer) -> None:
    root = auth_server.root()
    assert root.app.command(
        "createUser",
        "kari",
        pwd="pw",
        roles=["read", {"role": "readWrite", "db": "other"}],
        customData={"zip": "64157"},
    ) == {"ok": 1.0}
    root.app.command("createUser", "sha1only", pwd="pw", roles=[], mechanisms=["SCRAM-SHA-1"])
    users = root.app.command("usersInfo", "kari")["users"]
    assert isinstance(users[0].pop("userId"), Binary) and users[0]["_id"] == "app.kari"
    assert users == [
        {
            "_id": "app.kari",
            "user": "kari",
            "db": "app",
            "customData": {"zip": "64157"},
            "roles": [{"role": "read", "db": "app"}, {"role": "readWrite", "db": "other"}],
            "mechanisms": ["SCRAM-SHA-1", "SCRAM-SHA-256"],
        }
    ]
    assert list(root.app.command("usersInfo", "kari")["users"][0]) == [
        "_id",
        "userId",
        "user",
        "db",
        "customData",
        "roles",
        "mechanisms",
    ]
    both = root.app.command("usersInfo", ["kari", {"user": "root", "db": "admin"}])["users"]
    assert [u["_id"] for u in both] == ["admin.root", "app.kari"]
    everyone = root.admin.command("usersInfo", {"forAllDBs": True})["users"]
    assert [u["_id"] for u in everyone] == ["admin.root", "app.kari", "app.sha1only"]
    assert root.app.command("usersInfo", "sha1only")["users"][0]["mechanisms"] == ["SCRAM-SHA-1"]
    assert root.app.command("usersInfo", "nobody")["users"] == []

    # Credentials, when asked for, are the salted keys: nothing that logs anyone in.
    shown = root.app.command("usersInfo", "kari", showCredentials=True)["users"][0]
    assert sorted(shown["credentials"]) == ["SCRAM-SHA-1", "SCRAM-SHA-256"]
    for keys in shown["credentials"].values():
        assert sorted(keys) == ["iterationCount", "salt", "serverKey", "storedKey"]
    assert (
        "customData" not in root.app.command("usersInfo", "kari", showCustomData=False)["users"][0]
    )

    kari = auth_server.connect("kari", "pw", authSource="app")
    status = kari.admin.command("connectionStatus", showPrivileges=True)
    assert status["authInfo"]["authenticatedUsers"] == [{"user": "kari", "db": "app"}]
    assert status["authInfo"]["authenticatedUserRoles"] == [
        {"role": "read", "db": "app"},
        {"role": "readWrite", "db": "other"},
    ]
    privileges = {
        p["resource"]["db"]: p["actions"] for p in status["authInfo"]["authenticatedUserPrivileges"]
    }
    assert "find" in privileges["app"] and "insert" not in privileges["app"]
    assert {"find", "insert", "remove", "update"} <= set(privileges["other"])
    # Every user may see their own description, and no other.
    assert [u["user"] for u in kari.app.command("usersInfo", "kari")["users"]] == ["kari"]
    not_authorized(failure(lambda: kari.admin.command("usersInfo", "root")), "admin", "usersInfo")


def test_user_management_errors_and_changes(auth_server: AuthServer) -> None:
    root = auth_server.root()
    root.app.command("createUser", "ann", pwd="old-pw", roles=["read"])
    assert failure(lambda: root.app.command("createUser", "ann", pwd="x", roles=[])) == {
        "errmsg": 'User "ann@app" already exists',
        "code": 51003,
        "codeName": "Location51003",
    }
    assert failure(lambda: root.app.command("createUser", "bob", pwd="x", roles=["boss"])) == {
        "errmsg": "Could not find role: boss@app",
        "code": 31,
        "codeName": "RoleNotFound",
    }
    # The AnyDatabase roles exist only in admin.
    assert (
        failure(lambda: root.app.command("createUser", "bob", pwd="x", roles=["readAnyDatabase"]))[
            "code"
        ]
        == 31
    )
    assert failure(lambda: root.app.command("dropUser", "bob")) == {
        "errmsg": "User 'bob@app' not found",
        "code": 11,
        "codeName": "UserNotFound",
    }
    assert failure(lambda: root.app.command("updateUser", "bob", pwd="x")) == {
        "errmsg": "User 'bob@app' not found",
        "code": 11,
        "codeName": "UserNotFound",
    }
    assert failure(lambda: root.app.command("createUser", "bob", roles=[]))["code"] == 2

    assert root.app.command("updateUser", "ann", pwd="new-pw") == {"ok": 1.0}
    old = auth_server.connect("ann", "old-pw", authSource="app")
    assert failure(lambda: old.app.items.find_one()) == AUTH_FAILED
    new = auth_server.connect("ann", "new-pw", authSource="app")
    assert new.app.items.find_one() is None
    root.app.command("updateUser", "ann", customData={"team": "blue"}, roles=["readWrite"])
    info = root.app.command("usersInfo", "ann")["users"][0]
    assert info["customData"] == {"team": "blue"}
    assert info["roles"] == [{"role": "readWrite", "db": "app"}]

    root.app.command("createUser", "cat", pwd="pw", roles=[])
    assert root.app.command("dropAllUsersFromDatabase", 1) == {"n": 2, "ok": 1.0}
    assert root.app.command("usersInfo", 1)["users"] == []


def test_user_keys_are_stored_salted(auth_server: AuthServer) -> None:
    root = auth_server.root()
    root.app.command("createUser", "dan", pwd="dan-pw", roles=["read"])
    doc = root.admin["system.users"].find_one({"_id": "app.dan"})
    assert doc is not None
    assert sorted(doc) == ["_id", "credentials", "db", "roles", "user", "userId"]
    assert "dan-pw" not in json.dumps(doc, default=str)
    sha1, sha256 = doc["credentials"]["SCRAM-SHA-1"], doc["credentials"]["SCRAM-SHA-256"]
    assert (sha1["iterationCount"], sha256["iterationCount"]) == (10000, 15000)
    assert (len(base64.b64decode(sha1["salt"])), len(base64.b64decode(sha256["salt"]))) == (16, 28)

    def stored_key(algorithm: str, secret: str, keys: dict[str, Any]) -> str:
        salted = hashlib.pbkdf2_hmac(
            algorithm, secret.encode(), base64.b64decode(keys["salt"]), keys["iterationCount"]
        )
        client_key = hmac.digest(salted, b"Client Key", algorithm)
        return base64.b64encode(hashlib.new(algorithm, client_key).digest()).decode()

    # SCRAM-SHA-1 hashes MongoDB's digest of "user:mongo:password", SCRAM-SHA-256 the password.
    digest = hashlib.md5(b"dan:mongo:dan-pw").hexdigest()
    assert stored_key("sha1", digest, sha1) == sha1["storedKey"]
    assert stored_key("sha256", "dan-pw", sha256) == sha256["storedKey"]

    # The auth collections are root's: a readWrite user of admin may not read them.
    root.admin.command("createUser", "adminwriter", pwd="pw", roles=["readWrite"])
    writer = auth_server.connect("adminwriter", "pw")
    writer.admin.things.insert_one({"_id": 1})
    not_authorized(failure(lambda: writer.admin["system.users"].find_one()), "admin", "find")


# -- without --auth --------------------------------------------------------------------------------


def test_without_auth_nothing_is_checked_but_users_still_log_in(tmp_path: Path) -> None:
    srv = ServerThread(str(tmp_path / "data")).start()
    try:
        with MongoClient(srv.uri) as anonymous:
            anonymous.app.items.insert_one({"_id": 1})
            anonymous.app.command("createUser", "ann", pwd="pw", roles=["read"])
            anonymous.app.command("createUser", "bob", pwd="pw", roles=["read"])
            assert anonymous.admin.command("serverStatus")["ok"] == 1.0
        with MongoClient(srv.uri, username="ann", password="pw", authSource="app") as ann:
            ann.app.items.insert_one({"_id": 2})  # roles are not enforced
            assert ann.admin.command("connectionStatus")["authInfo"]["authenticatedUsers"] == [
                {"user": "ann", "db": "app"}
            ]
        with MongoClient(srv.uri, username="ann", password="no", authSource="app") as wrong:
            assert failure(lambda: wrong.app.items.find_one()) == AUTH_FAILED
    finally:
        srv.stop()


def test_auth_from_the_command_line_and_the_config_file(tmp_path: Path) -> None:
    assert parse_args(["--auth"], {}).auth is True
    assert parse_args([], {}).auth is False
    conf = tmp_path / "mongod.conf"
    conf.write_text("security:\n  authorization: enabled\n")
    config = parse_args(["--config", str(conf)], {})
    assert config.auth is True
    assert config.parsed()["security"] == {"authorization": "enabled"}
    conf.write_text("security:\n  authorization: disabled\n")
    assert parse_args(["--config", str(conf)], {}).auth is False
    env = {"MONGO_INITDB_ROOT_USERNAME": "admin", "MONGO_INITDB_ROOT_PASSWORD": "pw"}
    config = parse_args([], env)
    assert config.auth is True and config.root_user is not None
    assert "pw" not in repr(config) and "pw" not in json.dumps(config.parsed())


def test_startup_warning_when_listening_beyond_localhost_without_auth(tmp_path: Path) -> None:
    def warnings(bind: tuple[str, ...], auth: bool) -> list[dict[str, Any]]:
        srv = ServerThread(str(tmp_path / f"data-{len(bind)}-{auth}"), auth=auth)
        srv.config = dataclasses.replace(srv.config, bind_ip=bind)
        srv.start()
        try:
            with MongoClient(srv.uri) as c:
                if auth:
                    c.admin.command("createUser", "root", pwd="pw", roles=["root"])
                    c = MongoClient(srv.uri, username="root", password="pw")
                lines = c.admin.command("getLog", "startupWarnings")["log"]
                c.close()
        finally:
            srv.stop()
        return [json.loads(line) for line in lines]

    found = warnings(("0.0.0.0",), auth=False)
    assert [(w["id"], w["msg"], w["s"]) for w in found] == [
        (
            22120,
            "Access control is not enabled for the database. Read and write access to data "
            "and configuration is unrestricted",
            "W",
        )
    ]
    assert warnings(("0.0.0.0",), auth=True) == []
    assert warnings(("127.0.0.1",), auth=False) == []


# -- the root user of the `mongo` image's variables ------------------------------------------------


def test_root_user_from_the_mongo_image_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MONGO_INITDB_ROOT_USERNAME", "boss")
    monkeypatch.setenv("MONGO_INITDB_ROOT_PASSWORD", "very-secret-pw")
    dbpath = str(tmp_path / "data")
    for _run in range(2):  # the second start finds the user there and keeps it
        proc = ServerProcess(["--port", "0", "--dbpath", dbpath], tmp_path)
        try:
            proc.startup_line()
            uri = f"mongodb://127.0.0.1:{proc.port}/?directConnection=true"
            with MongoClient(uri, serverSelectionTimeoutMS=5000) as anonymous:
                assert failure(lambda: anonymous.app.items.find_one()) == requires_authentication(
                    "find"
                )
            with MongoClient(
                uri, username="boss", password="very-secret-pw", serverSelectionTimeoutMS=5000
            ) as boss:
                boss.app.items.insert_one({"_id": _run})
                users = boss.admin.command("usersInfo", 1)["users"]
                assert [(u["user"], u["roles"]) for u in users] == [
                    ("boss", [{"role": "root", "db": "admin"}])
                ]
                assert boss.admin.command("getCmdLineOpts")["parsed"]["security"] == {
                    "authorization": "enabled"
                }
            assert proc.stop() == 0
            log = proc.stderr + "".join(proc.stdout_lines)
            assert "very-secret-pw" not in log
        finally:
            proc.kill()
    monkeypatch.delenv("MONGO_INITDB_ROOT_PASSWORD")
    done = subprocess.run(
        [*SERVER_CMD, "--port", "0", "--dbpath", dbpath],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert "both must be specified for a user to be created" in done.stderr


# -- the Node.js driver and mongosh ----------------------------------------------------------------


def _with_credentials(uri: str, user: str, pw: str) -> str:
    return uri.replace("mongodb://", f"mongodb://{user}:{pw}@").replace(
        "?", "?authSource=admin&", 1
    )


def test_node_driver_logs_in_and_is_refused(auth_server: AuthServer) -> None:
    out = run_node(_with_credentials(auth_server.uri, "root", ROOT_PW), "login")
    assert out == {
        "found": [{"_id": 1, "secret": "kept"}],
        "authInfo": {
            "authenticatedUsers": [{"user": "root", "db": "admin"}],
            "authenticatedUserRoles": [{"role": "root", "db": "admin"}],
        },
    }
    assert run_node(auth_server.uri, "refused") == {
        "error": {
            "name": "MongoServerError",
            "code": 13,
            "codeName": "Unauthorized",
            "message": "Command find requires authentication",
        }
    }
    wrong = run_node(_with_credentials(auth_server.uri, "root", "nope"), "refused")
    assert wrong["error"]["code"] == 18 and wrong["error"]["codeName"] == "AuthenticationFailed"
    assert wrong["error"]["message"] == "Authentication failed."


MONGOSH_SCRIPT = """
const items = db.getSiblingDB('vault').items;
items.insertOne({ _id: 1, secret: 'kept' });
const status = db.getSiblingDB('admin').runCommand({ connectionStatus: 1 });
print(EJSON.stringify({ found: items.find().toArray(), users: status.authInfo.authenticatedUsers }, { relaxed: true }));
"""

MONGOSH_REFUSED = """
try {
  db.getSiblingDB('vault').items.findOne();
  print(EJSON.stringify({ error: null }));
} catch (e) {
  print(EJSON.stringify({ code: e.code, codeName: e.codeName, message: e.message }));
}
"""


def test_mongosh_logs_in_and_is_refused(auth_server: AuthServer, tmp_path: Path) -> None:
    uri = _with_credentials(auth_server.uri, "root", ROOT_PW)
    out = json.loads(run_mongosh(uri, MONGOSH_SCRIPT, tmp_path / "ok")[-1])
    assert out == {
        "found": [{"_id": 1, "secret": "kept"}],
        "users": [{"user": "root", "db": "admin"}],
    }
    refused = json.loads(run_mongosh(auth_server.uri, MONGOSH_REFUSED, tmp_path / "anon")[-1])
    assert refused == {
        "code": 13,
        "codeName": "Unauthorized",
        "message": "Command find requires authentication",
    }
    # Wrong credentials: mongosh cannot connect and says why.
    node_tools()
    home = tmp_path / "wrong"
    home.mkdir()
    done = subprocess.run(
        [
            str(MONGOSH),
            _with_credentials(auth_server.uri, "root", "nope"),
            "--quiet",
            "--eval",
            "1",
        ],
        capture_output=True,
        text=True,
        env=mongosh_env(home),
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert done.returncode != 0
    assert "Authentication failed." in done.stdout + done.stderr


def test_mongosh_creates_the_first_user_through_the_localhost_exception(
    empty_auth_server: AuthServer, tmp_path: Path
) -> None:
    script = (
        "db.getSiblingDB('admin').createUser({ user: 'admin', pwd: 'pw', roles: ['root'] });"
        "print(EJSON.stringify(db.getSiblingDB('admin').getUsers().users.map(u => u._id)));"
    )
    # getUsers after the first user exists needs a login: the script creates, then logs in.
    script = script.replace("print(", "db.getSiblingDB('admin').auth('admin', 'pw'); print(", 1)
    lines = run_mongosh(empty_auth_server.uri, script, tmp_path)
    assert json.loads(lines[-1]) == ["admin.admin"]
