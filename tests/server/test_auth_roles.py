"""The authorization table and its pieces, without a network: every registered command has an
action class, the built-in roles allow what MongoDB's do, the localhost test, SCRAM credentials."""

from __future__ import annotations

import pytest

from ebbdb.server.auth import roles
from ebbdb.server.auth.roles import COMMANDS, Privileges, required
from ebbdb.server.auth.scram import Conversation, StoredKeys, client_user, make_credentials
from ebbdb.server.auth.state import is_localhost
from ebbdb.server.registry import REGISTRY


def test_every_registered_command_has_an_action_class() -> None:
    missing = [c.name for c in REGISTRY.commands() if c.name not in COMMANDS]
    assert not missing, f"classify these in server/auth/roles.py COMMANDS: {missing}"
    unknown = sorted(set(COMMANDS) - {c.name for c in REGISTRY.commands()})
    assert not unknown, f"COMMANDS names commands nobody registers: {unknown}"


@pytest.mark.parametrize(
    ("role", "granted_on", "db", "action", "allowed"),
    [
        ("read", "app", "app", roles.READ, True),
        ("read", "app", "app", roles.WRITE, False),
        ("read", "app", "other", roles.READ, False),
        ("readWrite", "app", "app", roles.DDL, True),
        ("readWrite", "app", "app", roles.DB_ADMIN, False),
        ("readWrite", "app", "app", roles.USER_ADMIN, False),
        ("dbAdmin", "app", "app", roles.DB_ADMIN, True),
        ("dbAdmin", "app", "app", roles.READ, False),
        ("userAdmin", "app", "app", roles.USER_ADMIN, True),
        ("dbOwner", "app", "app", roles.USER_ADMIN, True),
        ("dbOwner", "app", "app", roles.WRITE, True),
        ("clusterMonitor", "admin", "app", roles.CLUSTER_MONITOR, True),
        ("clusterMonitor", "admin", "app", roles.CLUSTER_ADMIN, False),
        ("clusterMonitor", "admin", "app", roles.READ, False),
        ("clusterAdmin", "admin", "app", roles.CLUSTER_ADMIN, True),
        ("readAnyDatabase", "admin", "app", roles.READ, True),
        ("readAnyDatabase", "admin", "app", roles.WRITE, False),
        ("readWriteAnyDatabase", "admin", "app", roles.WRITE, True),
        ("userAdminAnyDatabase", "admin", "app", roles.USER_ADMIN, True),
        ("dbAdminAnyDatabase", "admin", "app", roles.DB_ADMIN, True),
        ("root", "admin", "admin", roles.SYSTEM_WRITE, True),
        ("readWriteAnyDatabase", "admin", "admin", roles.SYSTEM_READ, False),
    ],
)
def test_built_in_roles(role: str, granted_on: str, db: str, action: str, allowed: bool) -> None:
    # The AnyDatabase and cluster roles (granted in admin) act on every database.
    assert Privileges.of([(role, granted_on)]).allows(db, action) is allowed


def test_any_database_roles_exist_only_in_admin() -> None:
    assert roles.role_exists("readAnyDatabase", "admin")
    assert not roles.role_exists("readAnyDatabase", "app")
    assert roles.role_exists("read", "app")
    assert not roles.role_exists("boss", "app")
    assert Privileges.of([("root", "app")]).allows("app", roles.READ) is False


def test_what_commands_need() -> None:
    assert required("find", "app", {"find": "c"}) == [("app", roles.READ)]
    assert required("find", "admin", {"find": "system.users"}) == [("admin", roles.SYSTEM_READ)]
    assert required("aggregate", "app", {"aggregate": "c", "pipeline": [{"$out": "t"}]}) == [
        ("app", roles.READ),
        ("app", roles.WRITE),
        ("app", roles.DDL),
    ]
    assert required("renameCollection", "admin", {"renameCollection": "a.x", "to": "b.y"}) == [
        ("a", roles.READ),
        ("a", roles.DDL),
        ("b", roles.DDL),
    ]
    assert required("explain", "app", {"explain": {"delete": "c"}}) == [("app", roles.READ)]
    assert required("noSuchCommand", "app", {}) == [("app", roles.SYSTEM_WRITE)]


@pytest.mark.parametrize(
    ("peer", "local"),
    [
        ("127.0.0.1:5000", True),
        ("127.1.2.3:5000", True),
        ("::1:5000", True),
        ("10.0.0.1:5000", False),
        ("fe80::1:5000", False),
        ("", False),
    ],
)
def test_localhost(peer: str, local: bool) -> None:
    assert is_localhost(peer) is local


def test_a_conversation_with_stored_keys_only() -> None:
    import scramp

    creds = make_credentials("ann", "pw", ("SCRAM-SHA-256",))
    client = scramp.ScramClient(["SCRAM-SHA-256"], "ann", "pw")
    first = client.get_client_first().encode()
    assert client_user(first) == "ann"
    conversation = Conversation("SCRAM-SHA-256", StoredKeys.of(creds["SCRAM-SHA-256"]))
    client.set_server_first(conversation.start(first).decode())
    client.set_server_final(conversation.finish(client.get_client_final().encode()).decode())
    assert conversation.finished
    assert client_user(b"n,,n=a=2Cb=3Dc,r=xyz") == "a,b=c"
