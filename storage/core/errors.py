"""Errors the storage engine raises. Each names its MongoDB codeName; the server maps names to codes
in one place (server/errors.py), so storage never imports the server's enum."""

from __future__ import annotations

from typing import Any


class StorageError(Exception):
    """Base class: `code_name` is the MongoDB codeName the server reports for it."""

    code_name = "InternalError"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class QueryError(StorageError):
    """A query, projection or sort the client sent is malformed; carries any MongoDB codeName."""

    def __init__(self, code_name: str, message: str) -> None:
        super().__init__(message)
        self.code_name = code_name


class InvalidNamespace(StorageError):
    code_name = "InvalidNamespace"


class NamespaceNotFound(StorageError):
    code_name = "NamespaceNotFound"


class NamespaceExists(StorageError):
    code_name = "NamespaceExists"


class InvalidIdField(StorageError):
    code_name = "InvalidIdField"


class DocumentTooLarge(StorageError):
    # MongoDB reports an oversized insert as BadValue ("object to insert too large ...").
    code_name = "BadValue"


class OutOfDiskSpace(StorageError):
    """The data file cannot grow (a full disk, a file-size limit, a quota): the write needs new
    space and was not made (storage/engine/space.py)."""

    code_name = "OutOfDiskSpace"


class InvalidBSON(StorageError):
    code_name = "InvalidBSON"


class DuplicateKey(StorageError):
    """A unique index already holds this key. `key_value` maps each indexed field to its value."""

    code_name = "DuplicateKey"

    def __init__(
        self, ns: str, index_name: str, key_pattern: dict[str, Any], key_value: dict[str, Any]
    ) -> None:
        super().__init__(f"E11000 duplicate key error collection: {ns} index: {index_name}")
        self.ns = ns
        self.index_name = index_name
        self.key_pattern = key_pattern
        self.key_value = key_value


class DocumentValidationFailure(StorageError):
    """A document the collection's validator refuses (storage/catalog/schema.py); `err_info` is
    MongoDB's errInfo."""

    code_name = "DocumentValidationFailure"

    def __init__(self, err_info: dict[str, Any]) -> None:
        super().__init__("Document failed validation")
        self.err_info = err_info
