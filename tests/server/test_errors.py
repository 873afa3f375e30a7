"""Error replies from the one mapping function, and values rendered as MongoDB renders them inside
error messages."""

from __future__ import annotations

import logging

import pytest
from bson import Binary, Decimal128, Int64, MaxKey, MinKey, ObjectId, Regex, Timestamp
from bson.datetime_ms import DatetimeMS

import ebbdb.storage.core.errors as storage_errors
from ebbdb.server.errors import CommandError, ErrorCode, error_reply, write_error
from ebbdb.storage.core.errors import DuplicateKey, QueryError, StorageError
from ebbdb.storage.engine.store import DataDirLocked


def dup(value: object, ns: str = "db.c", index: str = "_id_", field: str = "_id") -> DuplicateKey:
    return DuplicateKey(ns, index, {field: 1}, {field: value})


# -- error_reply -----------------------------------------------------------------------------------


def test_command_error_reply() -> None:
    reply = error_reply(CommandError(ErrorCode.BadValue, "nope"))
    assert reply == {"ok": 0.0, "errmsg": "nope", "code": 2, "codeName": "BadValue"}
    assert type(reply["ok"]) is float
    assert type(reply["code"]) is int
    assert list(reply)[0] == "ok"


def test_command_error_extra_fields() -> None:
    reply = error_reply(CommandError(ErrorCode.CursorNotFound, "gone", cursorId=Int64(5)))
    assert reply["code"] == 43 and reply["codeName"] == "CursorNotFound"
    assert reply["cursorId"] == 5


def test_duplicate_key_reply() -> None:
    reply = error_reply(dup(1))
    assert reply["ok"] == 0.0 and type(reply["ok"]) is float
    assert reply["code"] == 11000
    assert reply["codeName"] == "DuplicateKey"
    assert reply["errmsg"] == (
        "E11000 duplicate key error collection: db.c index: _id_ dup key: { _id: 1 }"
    )
    assert reply["keyPattern"] == {"_id": 1}
    assert reply["keyValue"] == {"_id": 1}


def test_duplicate_key_message_renders_values_like_the_shell() -> None:
    oid = ObjectId("5f0c1a2b3c4d5e6f70819203")
    assert error_reply(dup(oid))["errmsg"].endswith(
        "dup key: { _id: ObjectId('5f0c1a2b3c4d5e6f70819203') }"
    )
    assert error_reply(dup("abc"))["errmsg"].endswith('dup key: { _id: "abc" }')
    assert error_reply(dup({"a": 1, "b": [1, 2]}))["errmsg"].endswith(
        "dup key: { _id: { a: 1, b: [ 1, 2 ] } }"
    )


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_duplicate_key_reply_for_non_finite_doubles(value: float) -> None:
    # {_id: Infinity} inserted twice must give a DuplicateKey write error, not a crash.
    reply = error_reply(dup(value))
    assert reply["code"] == 11000
    assert reply["errmsg"].startswith(
        "E11000 duplicate key error collection: db.c index: _id_ dup key: { _id: "
    )
    entry = write_error(0, dup(value))
    assert entry["code"] == 11000


def test_write_error_entry() -> None:
    entry = write_error(3, dup(Int64(7)))
    assert entry == {
        "index": 3,
        "code": 11000,
        "errmsg": "E11000 duplicate key error collection: db.c index: _id_ dup key: { _id: 7 }",
        "keyPattern": {"_id": 1},
        "keyValue": {"_id": 7},
    }
    assert write_error(0, CommandError(ErrorCode.BadValue, "bad")) == {
        "index": 0,
        "code": 2,
        "errmsg": "bad",
    }


@pytest.mark.parametrize(
    ("exc", "code", "code_name"),
    [
        (storage_errors.InvalidNamespace("x"), 73, "InvalidNamespace"),
        (storage_errors.NamespaceNotFound("x"), 26, "NamespaceNotFound"),
        (storage_errors.NamespaceExists("x"), 48, "NamespaceExists"),
        (storage_errors.InvalidIdField("x"), 53, "InvalidIdField"),
        (storage_errors.InvalidBSON("x"), 22, "InvalidBSON"),
        (storage_errors.DocumentTooLarge("x"), 2, "BadValue"),
        (DataDirLocked("x"), 98, "DBPathInUse"),
        (QueryError("BadValue", "x"), 2, "BadValue"),
        (QueryError("Location31254", "x"), 31254, "Location31254"),
        (QueryError("Location31253", "x"), 31253, "Location31253"),
        (QueryError("NotImplemented", "x"), 238, "NotImplemented"),
    ],
)
def test_storage_errors_map_by_code_name(exc: StorageError, code: int, code_name: str) -> None:
    reply = error_reply(exc)
    assert reply == {"ok": 0.0, "errmsg": "x", "code": code, "codeName": code_name}


def _storage_error_classes() -> list[type[StorageError]]:
    found = [DataDirLocked]
    for obj in vars(storage_errors).values():
        if (
            isinstance(obj, type)
            and issubclass(obj, StorageError)
            and obj
            not in (
                StorageError,
                QueryError,
            )
        ):
            found.append(obj)
    return found


@pytest.mark.parametrize("cls", _storage_error_classes(), ids=lambda c: c.__name__)
def test_every_storage_error_has_a_mongodb_code(cls: type[StorageError]) -> None:
    assert cls.code_name in ErrorCode.__members__, cls.code_name


def test_unmapped_code_name_becomes_internal_error(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="ebbdb.command"):
        reply = error_reply(QueryError("NoSuchCodeName", "odd"))
    assert reply["code"] == 1 and reply["codeName"] == "InternalError"
    assert "NoSuchCodeName" in caplog.text


def test_generic_exception_becomes_internal_error() -> None:
    reply = error_reply(ValueError("secret detail"))
    assert reply == {
        "ok": 0.0,
        "errmsg": "internal error: ValueError",
        "code": 1,
        "codeName": "InternalError",
    }
    assert "secret" not in reply["errmsg"]


def test_error_codes_are_mongodb_numbers() -> None:
    expected = {
        "InternalError": 1,
        "BadValue": 2,
        "TypeMismatch": 14,
        "NamespaceNotFound": 26,
        "CursorNotFound": 43,
        "CommandNotFound": 59,
        "InvalidNamespace": 73,
        "NotImplemented": 238,
        "DuplicateKey": 11000,
        "Location40414": 40414,
        "Location40415": 40415,
    }
    for name, code in expected.items():
        assert ErrorCode[name] == code


# -- the key value in a duplicate key's message -----------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1, "1"),
        (Int64(2**40), "1099511627776"),
        (1.0, "1.0"),
        (1.5, "1.5"),
        (-3.0, "-3.0"),
        (True, "true"),
        (False, "false"),
        (None, "null"),
        ("abc", '"abc"'),
        ('a"b', '"a\\"b"'),
        ("é", '"é"'),
        ("", '""'),
        (ObjectId("5f0c1a2b3c4d5e6f70819203"), "ObjectId('5f0c1a2b3c4d5e6f70819203')"),
        ({}, "{}"),
        ([], "[]"),
        ({"a": 1}, "{ a: 1 }"),
        ({"a": {"b": [1, "x", None]}, "c": True}, '{ a: { b: [ 1, "x", null ] }, c: true }'),
        ([{"a": 1}, []], "[ { a: 1 }, [] ]"),
        (Decimal128("1.50"), 'NumberDecimal("1.50")'),
        (Timestamp(5, 6), "Timestamp(5, 6)"),
        (DatetimeMS(1500), "new Date(1500)"),
        (Regex("^a"), "/^a/"),
        (Binary(b"\x01\xab", 4), "BinData(4, 01AB)"),
        (b"\x00", "BinData(0, 00)"),
        (MinKey(), "MinKey"),
        (MaxKey(), "MaxKey"),
    ],
)
def test_duplicate_key_value_text(value: object, text: str) -> None:
    assert error_reply(dup(value))["errmsg"] == (
        f"E11000 duplicate key error collection: db.c index: _id_ dup key: {{ _id: {text} }}"
    )


@pytest.mark.parametrize("value", [float("inf"), float("-inf"), float("nan")])
def test_duplicate_key_value_text_of_non_finite_doubles(value: float) -> None:
    text = error_reply(dup(value))["errmsg"].partition("dup key: { _id: ")[2]
    assert ("inf" in text) if value == value else ("nan" in text.lower())


@pytest.mark.parametrize(
    ("value", "text"),
    [
        # Doubles and regexes as BSONObj::toString prints them: 16 significant digits, flags.
        (0.1 + 0.2, "0.3"),
        (Regex("^a", "im"), "/^a/im"),
        # Strings keep their escapes, wherever they are in the key.
        ({"a": ['x"y', "\\"]}, '{ a: [ "x\\"y", "\\\\" ] }'),
    ],
)
def test_duplicate_key_value_text_follows_mongodb(value: object, text: str) -> None:
    assert error_reply(dup(value))["errmsg"].endswith(f"dup key: {{ _id: {text} }}")


def _storage_code_names() -> set[str]:
    """Every codeName storage/ raises by literal: the first argument of QueryError(...) and of its
    local wrappers (_fail, _error), and every `code_name = "..."` class attribute."""
    import ast
    from pathlib import Path

    names: set[str] = set()
    for path in (Path(__file__).resolve().parents[2] / "storage").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                first = node.args[0]
                if called in ("QueryError", "_fail", "_error") and isinstance(first, ast.Constant):
                    if isinstance(first.value, str):
                        names.add(first.value)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
                if targets == ["code_name"] and isinstance(node.value.value, str):
                    names.add(node.value.value)
    return names


def test_every_storage_code_name_has_a_code() -> None:
    names = _storage_code_names()
    assert len(names) > 20
    for name in sorted(names):
        member = ErrorCode.__members__.get(name)
        assert member is not None or (name.startswith("Location") and name[8:].isdigit()), name
