"""Names that are not strings, over raw sockets against the real server: a BSON value of another
type (JavaScript code above all, which pymongo decodes as a str subclass) where a database,
collection, index or field name is expected gets MongoDB's type error, never InternalError, and
nothing is stored. Every registered command is tried, each with its own fields."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from bson import Code
from pymongo import MongoClient

from ebbdb.server.arguments import COMMAND_VALUE
from ebbdb.server.embedded import ServerThread
from ebbdb.server.registry import REGISTRY
from ebbdb.storage.catalog.info import IndexInfo
from tests.e2e.rawwire import connect, op_msg

Client = MongoClient[dict[str, Any]]
DB = "oddnames"
#: Not sent: shutdown ends the server, fsync's lock stops every write.
_SKIPPED = {"shutdown", "fsync"}
COMMANDS = sorted(c.name for c in REGISTRY.commands() if c.name not in _SKIPPED)
ODD = [Code("c"), Code("c", {"x": 1}), 5, None, {"c": 1}, ["c"], True]

#: The commands that name a collection as their value, and mongod's answer to another type:
#: 2 BadValue where its IDL parses the name, 73 InvalidNamespace where the command parses it by
#: hand (CommandHelpers::parseNsCollectionRequired), 14 for aggregate (its own parseNs).
BAD_VALUE = (2, "collection name has invalid type {}")
BY_HAND = (73, "collection name has invalid type {}")
COLLECTION_COMMANDS = {
    **dict.fromkeys(
        ["find", "insert", "update", "delete", "findAndModify", "create", "drop", "collMod"],
        BAD_VALUE,
    ),
    **dict.fromkeys(
        ["createIndexes", "listIndexes", "dropIndexes", "killCursors", "ttlStatus"], BAD_VALUE
    ),
    **dict.fromkeys(["count", "distinct", "validate", "collStats", "convertToCapped"], BY_HAND),
    "cloneCollectionAsCapped": BY_HAND,
    "aggregate": (14, "collection name has invalid type: {}"),
}
#: Fields a command checks before the collection it names.
_REQUIRED = {"aggregate": {"pipeline": [], "cursor": {}}}
_TYPE_NAMES = {0: "javascript", 1: "javascriptWithScope", 4: "object", 5: "array", 6: "bool"}


@pytest.fixture
def sock(server: ServerThread) -> Iterator[socket.socket]:
    with connect(server) as s:
        yield s


def _own_fields(params: type) -> list[str]:
    return [
        f.metadata["arg"].name
        for f in dataclasses.fields(params)
        if "arg" in f.metadata and f.metadata["arg"].name not in (COMMAND_VALUE, "*")
    ]


def _db_for(name: str) -> str:
    cmd = REGISTRY.lookup(name)
    assert cmd is not None
    return "admin" if cmd.admin_only else DB


def _assert_not_internal(reply: dict[str, Any], sent: dict[str, Any]) -> None:
    assert reply.get("code") != 1, f"InternalError for {sent!r}: {reply}"
    if reply["ok"] != 1:
        assert type(reply["code"]) is int and isinstance(reply["errmsg"], str), reply


def test_the_table_names_every_collection_command() -> None:
    assert set(COLLECTION_COMMANDS) <= set(COMMANDS)


@pytest.mark.parametrize("name", COMMANDS)
def test_an_odd_command_value_is_never_an_internal_error(
    sock: socket.socket, client: Client, name: str
) -> None:
    for i, value in enumerate(ODD):
        body = {name: value, **_REQUIRED.get(name, {}), "$db": _db_for(name)}
        reply = op_msg(sock, body)
        _assert_not_internal(reply, body)
        expected = COLLECTION_COMMANDS.get(name)
        if expected is not None and i in _TYPE_NAMES:
            code, message = expected
            assert (reply["code"], reply["errmsg"]) == (code, message.format(_TYPE_NAMES[i]))
    assert DB not in client.list_database_names()


@pytest.mark.parametrize("name", COMMANDS)
def test_code_in_every_field_of_every_command_is_never_an_internal_error(
    sock: socket.socket, client: Client, name: str
) -> None:
    cmd = REGISTRY.lookup(name)
    assert cmd is not None
    for field in _own_fields(cmd.params):
        for value in (Code("c"), [Code("c")], {"a": Code("c")}):
            body = {name: "c", field: value, "$db": _db_for(name)}
            _assert_not_internal(op_msg(sock, body), body)
    assert DB not in client.list_database_names()


@pytest.mark.parametrize("name", COMMANDS)
def test_a_database_name_of_code_is_mongods_type_error(sock: socket.socket, name: str) -> None:
    for db, found in ((Code("admin"), 13), (Code("admin", {}), 15), (5, 16), ({}, 3)):
        reply = op_msg(sock, {name: "c", "$db": db})
        assert reply["ok"] == 0
        if reply["code"] != 59:  # a test command without enableTestCommands: no such command
            assert (reply["code"], reply["codeName"], reply["errmsg"]) == (
                13111,
                "Location13111",
                f"wrong type for field ($db) {found} != 2",
            )


def test_ping_with_a_db_of_code(sock: socket.socket) -> None:
    reply = op_msg(sock, {"ping": 1, "$db": Code("admin")})
    assert (reply["code"], reply["errmsg"]) == (13111, "wrong type for field ($db) 13 != 2")
    assert op_msg(sock, {"ping": 1, "$db": "admin"}) == {"ok": 1.0}


def test_an_index_named_by_code_is_refused_and_not_kept(
    sock: socket.socket, client: Client
) -> None:
    client[DB].c.insert_one({"a": 1})
    for name in (Code("a_1"), Code("a_1", {"x": 1}), 5):
        reply = op_msg(
            sock,
            {"createIndexes": "c", "indexes": [{"key": {"a": 1}, "name": name}], "$db": DB},
        )
        assert (reply["code"], reply["errmsg"]) == (14, "The field 'name' must be a string")
    assert [ix["name"] for ix in client[DB].c.list_indexes()] == ["_id_"]
    assert client[DB].command("validate", "c")["valid"] is True
    assert client[DB].command("collStats", "c")["nindexes"] == 1
    # Dropping by a name of code is a type error too, not a search for it.
    reply = op_msg(sock, {"dropIndexes": "c", "index": Code("a_1"), "$db": DB})
    assert reply["code"] == 14, reply
    client.drop_database(DB)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"distinct": "c", "key": Code("a")},
            (
                14,
                "BSON field 'distinct.key' is the wrong type 'javascript', expected type 'string'",
            ),
        ),
        (
            {"find": "c", "hint": Code("a_1")},
            (
                14,
                "BSON field 'find.hint' is the wrong type 'javascript', "
                "expected types '[string, object]'",
            ),
        ),
        (
            {"create": "v", "viewOn": Code("c"), "pipeline": []},
            (
                14,
                "BSON field 'create.viewOn' is the wrong type 'javascript', expected type 'string'",
            ),
        ),
    ],
)
def test_a_field_name_of_code_is_a_type_mismatch(
    sock: socket.socket, client: Client, body: dict[str, Any], expected: tuple[int, str]
) -> None:
    reply = op_msg(sock, {**body, "$db": DB})
    assert (reply["code"], reply["errmsg"]) == expected
    assert DB not in client.list_database_names()


_C = Code("a")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            {"aggregate": "c", "pipeline": [{"$count": _C}], "cursor": {}},
            (40156, "the count field must be a non-empty string"),
        ),
        (
            {"aggregate": "c", "pipeline": [{"$lookup": {"from": _C, "as": "x", "pipeline": []}}]},
            (9, "$lookup 'from' field must be a string, but found javascript"),
        ),
        (
            {"aggregate": "c", "pipeline": [{"$unionWith": _C}]},
            (
                9,
                "the $unionWith stage specification must be an object or string, but found "
                "javascript",
            ),
        ),
        (
            {"aggregate": "c", "pipeline": [{"$out": {"db": _C, "coll": "x"}}]},
            (14, "BSON field '$out.db' is the wrong type 'javascript', expected type 'string'"),
        ),
        ({"aggregate": "c", "pipeline": [{"$out": _C}]}, (73, None)),
        ({"aggregate": "c", "pipeline": [{"$merge": _C}]}, (73, None)),
        (
            {"find": "c", "filter": {"a": {"$type": _C}}},
            (14, "type must be represented as a number or a string"),
        ),
        ({"find": "c", "filter": {"a": {"$regex": _C}}}, (2, "$regex has to be a string")),
        (
            {"createIndexes": "c", "indexes": [{"key": {"a": _C}, "name": "x"}]},
            (
                67,
                "Values in v:2 index key pattern cannot be of type Code. Only numbers > 0, "
                "numbers < 0, and strings are allowed.",
            ),
        ),
    ],
)
def test_code_where_a_stage_filter_or_key_names_something(
    sock: socket.socket, client: Client, body: dict[str, Any], expected: tuple[int, str | None]
) -> None:
    body = {**body, "$db": DB}
    if body.get("aggregate"):
        body.setdefault("cursor", {})
    reply = op_msg(sock, body)
    code, message = expected
    assert reply["code"] == code, reply
    if message is not None:
        assert reply["errmsg"] == message
    assert DB not in client.list_database_names()


def test_a_fail_point_naming_code_is_refused(sock: socket.socket) -> None:
    body = {
        "configureFailPoint": "failCommand",
        "mode": "alwaysOn",
        "data": {"failCommands": [_C], "errorCode": 2},
        "$db": "admin",
    }
    reply = op_msg(sock, body)
    assert (reply["code"], reply["errmsg"]) == (
        2,
        "failCommand fail point requires 'failCommands', an array of command names",
    )


def test_an_index_named_by_code_before_the_fix_loads_with_a_string_name() -> None:
    # What the catalog of a data directory written before such names were refused holds.
    info = IndexInfo.from_doc({"id": 7, "name": Code("n_1"), "key": {"n": 1}, "options": {}})
    assert type(info.name) is str and info.name == "n_1"
