"""MongoDB error codes, the CommandError handlers raise, and the one function that turns any exception
into an error reply (and a write error entry)."""

from __future__ import annotations

import enum
import json
import logging
from collections.abc import Mapping
from typing import Any

from ebbdb.storage.core.errors import DocumentValidationFailure, DuplicateKey, StorageError
from ebbdb.storage.core.interrupt import Interrupted
from ebbdb.storage.core.values import render

log = logging.getLogger("ebbdb.command")


class ErrorCode(enum.IntEnum):
    """MongoDB's error codes under their codeNames (never invented; `LocationNNNNN` is how MongoDB
    names codes that have no name of their own)."""

    InternalError = 1
    BadValue = 2
    GraphContainsCycle = 5
    NoSuchKey = 4
    FailedToParse = 9
    UserNotFound = 11
    Unauthorized = 13
    TypeMismatch = 14
    Overflow = 15
    InvalidLength = 16
    ProtocolError = 17
    AuthenticationFailed = 18
    IllegalOperation = 20
    InvalidBSON = 22
    NamespaceNotFound = 26
    IndexNotFound = 27
    PathNotViable = 28
    RoleNotFound = 31
    CannotBackfillArray = 34
    ConflictingUpdateOperators = 40
    CursorNotFound = 43
    MaxTimeMSExpired = 50
    NamespaceExists = 48
    DollarPrefixedFieldName = 52
    InvalidIdField = 53
    NotSingleValueField = 54
    EmptyFieldName = 56
    CommandNotFound = 59
    ImmutableField = 66
    CannotCreateIndex = 67
    InvalidOptions = 72
    # A replica set's (server/replication.py, read and write concerns).
    AlreadyInitialized = 23
    WriteConcernFailed = 64
    NoReplicationEnabled = 76
    UnknownReplWriteConcern = 79
    UnsatisfiableWriteConcern = 100
    NotAReplicaSet = 123
    SnapshotTooOld = 239
    ExceededTimeLimit = 262
    InvalidNamespace = 73
    IndexOptionsConflict = 85
    IndexKeySpecsConflict = 86
    DBPathInUse = 98
    CannotIndexParallelArrays = 171
    NotExactValueField = 111
    CommandFailed = 125
    WriteConflict = 112
    ConflictingOperationInProgress = 117
    DocumentValidationFailure = 121
    CursorInUse = 143
    JSInterpreterFailure = 139
    ExceededMemoryLimit = 146
    IncompatibleCollationVersion = 161
    ViewDepthLimitExceeded = 165
    CommandNotSupportedOnView = 166
    OptionNotSupportedOnView = 167
    InvalidPipelineOperator = 168
    AmbiguousIndexKeyPattern = 181
    InvalidIndexSpecificationOption = 197
    # A driver's handshake metadata (server/commands/handshake.py).
    ClientMetadataMissingField = 183
    ClientMetadataAppNameTooLarge = 184
    ClientMetadataDocumentTooLarge = 185
    CursorKilled = 237
    # Change streams (server/change_streams.py).
    NoMatchingDocument = 47
    InvalidResumeToken = 260
    IndexBuildAborted = 276
    ChangeStreamFatalError = 280
    ChangeStreamHistoryLost = 286
    NotImplemented = 238
    QueryFeatureNotAllowed = 224
    TransactionTooOld = 225
    NoSuchTransaction = 251
    TransactionCommitted = 256
    TransactionTooLarge = 257
    OperationNotSupportedInTransaction = 263
    ConversionFailure = 241
    NoQueryExecutionPlans = 291
    QueryExceededMemoryLimitNoDiskUseAllowed = 292
    MechanismUnavailable = 334
    UnsupportedOpQueryCommand = 352
    DuplicateKey = 11000
    MergeStageNoMatchingDocument = 13113
    InterruptedAtShutdown = 11600
    Interrupted = 11601
    BSONObjectTooLarge = 10334
    OutOfDiskSpace = 14031
    Location13111 = 13111
    Location31253 = 31253
    Location31254 = 31254
    Location40414 = 40414
    Location40415 = 40415
    Location40571 = 40571
    Location50791 = 50791
    Location51003 = 51003
    Location51024 = 51024


class CommandError(Exception):
    """Raised by extractors and handlers; the dispatcher turns it into {ok: 0, errmsg, code, codeName}."""

    def __init__(self, code: ErrorCode, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extra = extra


class CodedError(Exception):
    """An error with any MongoDB code and its codeName (one a test asked a fail point for)."""

    def __init__(self, code: int, code_name: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.code_name = code_name
        self.message = message
        self.extra = extra


def _code_of(code_name: str) -> tuple[int, str]:
    """(code, codeName) for a MongoDB codeName; `LocationNNNNN` names carry their own number."""
    member = ErrorCode.__members__.get(code_name)
    if member is not None:
        return int(member), member.name
    if code_name.startswith("Location") and code_name[8:].isdigit():
        return int(code_name[8:]), code_name
    log.error("storage error with unmapped codeName %s", code_name)
    return int(ErrorCode.InternalError), ErrorCode.InternalError.name


def _key_text(value: Any) -> str:
    """A duplicate key's value in its message: BSONObj::toString (`values.render`), except that
    strings are quoted with their escapes (`"a\\"b"`), as ebbdb has always shown them."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{k}: {_key_text(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list):
        return "[ " + ", ".join(map(_key_text, value)) + " ]" if value else "[]"
    return render(value)


def _describe(exc: BaseException) -> tuple[int, str, str, dict[str, Any]]:
    if isinstance(exc, CommandError):
        return int(exc.code), exc.code.name, exc.message, dict(exc.extra)
    if isinstance(exc, CodedError):
        return exc.code, exc.code_name, exc.message, dict(exc.extra)
    if isinstance(exc, DuplicateKey):
        msg = f"{exc.message} dup key: {_key_text(exc.key_value)}"
        extra = {"keyPattern": exc.key_pattern, "keyValue": exc.key_value}
        return int(ErrorCode.DuplicateKey), ErrorCode.DuplicateKey.name, msg, extra
    if isinstance(exc, DocumentValidationFailure):
        failure = ErrorCode.DocumentValidationFailure
        return int(failure), failure.name, exc.message, {"errInfo": exc.err_info}
    if isinstance(exc, StorageError | Interrupted):
        code, name = _code_of(exc.code_name)
        return code, name, exc.message, {}
    if isinstance(exc, RecursionError):
        # A value nested too deeply for ebbdb to walk (see storage/core/limits.py): MongoDB's
        # Overflow, never an InternalError.
        overflow = ErrorCode.Overflow
        return int(overflow), overflow.name, "exceeded maximum nesting depth", {}
    internal = ErrorCode.InternalError
    return int(internal), internal.name, f"internal error: {type(exc).__name__}", {}


def error_reply(exc: BaseException) -> dict[str, Any]:
    """The reply document for a failed command."""
    code, name, message, extra = _describe(exc)
    return {"ok": 0.0, "errmsg": message, "code": code, "codeName": name, **extra}


def write_error(index: int, exc: BaseException) -> dict[str, Any]:
    """One entry of a write command's `writeErrors`."""
    code, _name, message, extra = _describe(exc)
    return {"index": index, "code": code, "errmsg": message, **extra}
