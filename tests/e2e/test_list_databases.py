"""listDatabases as mongod answers it (issue 25 item 8): admin, config and local are listed when they
exist, with sizeOnDisk (a long) and empty; nameOnly, filter, totalSize; authorizedDatabases under
--auth.

When each internal database exists is what ebbdb's catalog holds, which differs from mongod's in
two ways, on purpose: mongod creates admin.system.version (the feature compatibility version) and
local.startup_log at its first start, so a fresh mongod lists admin and local at once; ebbdb keeps
the feature compatibility version outside the catalog and writes no start-up log, so a fresh
standalone ebbdb lists nothing. Then, as mongod:
- admin exists once it holds a collection: admin.system.users with the first user;
- config exists once the logical session cache wrote config.system.sessions (its refresh, or
  refreshLogicalSessionCacheNow, after a client used a session); on a replica set member it exists
  from the start (config.system.preimages);
- local exists on a replica set member from the start (local.oplog.rs, local.system.replset)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from bson import Int64
from pymongo import MongoClient
from pymongo.errors import OperationFailure

from ebbdb.server.embedded import ServerThread

Client = MongoClient[dict[str, Any]]


def _names(client: Client, **options: Any) -> list[str]:
    reply = client.admin.command("listDatabases", nameOnly=True, **options)
    return [d["name"] for d in reply["databases"]]


def test_internal_databases_are_listed_once_they_exist(
    start_server: Callable[..., ServerThread],
) -> None:
    srv = start_server({"enableTestCommands": 1})  # for refreshLogicalSessionCacheNow
    with MongoClient(srv.uri) as client:
        assert _names(client) == []  # nothing yet (see the module's note)
        client.app.items.insert_one({"_id": 1})
        assert _names(client) == ["app"]
        client.admin.command("createUser", "ann", pwd="pw", roles=[])
        assert _names(client) == ["admin", "app"]
        with client.start_session() as session:
            client.app.items.find_one({}, session=session)
        client.admin.command("refreshLogicalSessionCacheNow")
        assert _names(client) == ["admin", "app", "config"]
        client.local.notes.insert_one({})
        assert _names(client) == ["admin", "app", "config", "local"]
        full = client.admin.command("listDatabases")
        for entry in full["databases"]:
            assert list(entry) == ["name", "sizeOnDisk", "empty"]
            assert type(entry["sizeOnDisk"]) is Int64 and entry["sizeOnDisk"] > 0
            assert entry["empty"] is False
        assert type(full["totalSize"]) is Int64
        assert full["totalSize"] == sum(d["sizeOnDisk"] for d in full["databases"])
        assert full["totalSizeMb"] == full["totalSize"] // (1024 * 1024)


def test_a_replica_set_member_lists_config_and_local_from_the_start(
    start_server: Callable[..., ServerThread],
) -> None:
    srv = start_server(repl_set="rs0")
    with MongoClient(srv.uri) as client:
        assert _names(client) == ["config", "local"]
        local = client.local.list_collection_names()
        assert {"oplog.rs", "system.replset"} <= set(local)


def test_name_only_and_filter(client: Client) -> None:
    client.list_alpha.c.insert_one({"x": "y" * 10_000})
    client.list_beta.c.insert_one({})
    reply = client.admin.command("listDatabases", filter={"name": {"$regex": "^list_"}})
    assert [d["name"] for d in reply["databases"]] == ["list_alpha", "list_beta"]
    assert reply["totalSize"] == sum(d["sizeOnDisk"] for d in reply["databases"])
    alpha = reply["databases"][0]["sizeOnDisk"]
    big = client.admin.command(
        "listDatabases", filter={"name": {"$regex": "^list_"}, "sizeOnDisk": {"$gte": alpha}}
    )
    assert [d["name"] for d in big["databases"]] == ["list_alpha"]
    names = client.admin.command("listDatabases", nameOnly=True, filter={"name": "list_beta"})
    assert names == {"databases": [{"name": "list_beta"}], "ok": 1.0}
    # With nameOnly a document has its name alone: a filter on its size matches nothing.
    sized = client.admin.command("listDatabases", nameOnly=True, filter={"sizeOnDisk": {"$gt": 0}})
    assert sized["databases"] == []


def test_authorized_databases_under_auth(tmp_path: Any) -> None:
    srv = ServerThread(str(tmp_path / "data"), auth=True).start()
    try:
        with MongoClient(srv.uri) as anyone:
            anyone.admin.command("createUser", "root", pwd="pw", roles=["root"])
        with MongoClient(srv.uri, username="root", password="pw") as root:
            root.app.items.insert_one({})
            root.other.items.insert_one({})
            root.admin.command(
                "createUser", "reader", pwd="pw", roles=[{"role": "read", "db": "app"}]
            )
            assert _names(root) == ["admin", "app", "other"]
            assert _names(root, authorizedDatabases=True) == ["admin", "app", "other"]
            assert _names(root, authorizedDatabases=False) == ["admin", "app", "other"]
        with MongoClient(srv.uri, username="reader", password="pw") as reader:
            assert _names(reader) == ["app"]
            assert _names(reader, authorizedDatabases=True) == ["app"]
            with pytest.raises(OperationFailure) as info:
                reader.admin.command("listDatabases", authorizedDatabases=False)
            assert (info.value.code, info.value.details["errmsg"]) == (
                13,
                "Insufficient permissions to list all databases",
            )
    finally:
        srv.stop()
