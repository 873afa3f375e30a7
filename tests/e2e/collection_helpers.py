"""Helpers the clustered and time series collection tests share: a failing command's code, codeName
and message, a collection's listCollections entry, and create refusals checked whole."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pymongo.database import Database
from pymongo.errors import OperationFailure

Db = Database[dict[str, Any]]
#: The codes of the codeNames these tests expect (MongoDB's; `LocationNNNNN` carries its own).
CODES = {
    "BadValue": 2,
    "TypeMismatch": 14,
    "InvalidOptions": 72,
    "InvalidIndexSpecificationOption": 197,
}


def failure(fn: Callable[[], Any]) -> tuple[int, str | None, str]:
    """(code, codeName, errmsg) of the OperationFailure `fn` raises."""
    with pytest.raises(OperationFailure) as info:
        fn()
    details = info.value.details or {}
    return int(info.value.code or 0), details.get("codeName"), str(details.get("errmsg"))


def entry(db: Db, name: str) -> dict[str, Any]:
    """The collection's listCollections entry."""
    found: list[dict[str, Any]] = list(db.list_collections(filter={"name": name}))
    assert len(found) == 1
    return found[0]


def assert_create_refused(
    db: Db, name: str, options: dict[str, Any], code_name: str, message: str
) -> None:
    """create `name` with `options` fails with `code_name` and exactly `message` (in which {db} is
    the database's name), and creates nothing."""
    code = CODES.get(code_name) or int(code_name.removeprefix("Location"))
    expected = (code, code_name, message.replace("{db}", db.name))
    assert failure(lambda: db.command("create", name, **options)) == expected
    assert name not in db.list_collection_names()
