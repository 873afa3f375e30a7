"""Write concerns as a standalone MongoDB 7.0 server parses and honours them: the typed WriteConcern,
MongoDB's parse errors (9 FailedToParse, 14 TypeMismatch), and its refusals for what a standalone
cannot satisfy (2 BadValue for `w` above 1 or a tag). A one-member replica set's (--replSet) takes
them and answers after the write, as mongod does, with a writeConcernError (100
UnsatisfiableWriteConcern for more members than the one, 79 UnknownReplWriteConcern for a mode its
config does not name). `j: true`, `fsync: true` and "majority" (the one member) wait for a sync that
covers the write (the dispatcher awaits it); everything else is acknowledged after the commit."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ebbdb.server.arguments import Kind, type_mismatch
from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.storage.core.values import is_number, to_float

#: MongoDB caps a numeric `w` at the most members a replica set can have.
MAX_W = 50


@dataclass(frozen=True)
class WriteConcern:
    """`w` is a number of nodes or a mode ("majority"); `journal` says the reply waits for a sync
    (j, fsync, or majority, which implies the journal on MongoDB 7)."""

    w: int | str | dict[str, Any] = 1
    journal: bool = False
    wtimeout: int = 0
    #: Why a replica set cannot satisfy it (the code and message of the reply's
    #: writeConcernError, the write itself being done); None: it can.
    unsatisfiable: tuple[ErrorCode, str] | None = None
    #: The writeConcern document as the command gave it (what a writeConcernError shows).
    given: dict[str, Any] = field(default_factory=dict, compare=False)

    def error_document(self, code: ErrorCode, message: str, **info: Any) -> dict[str, Any]:
        """The writeConcernError a reply carries when this concern failed with `code` and
        `message` (`info`: more of errInfo, mongod's `wtimeout: true`)."""
        concern = {**self.given, "provenance": "clientSupplied"}
        return {
            "code": int(code),
            "codeName": code.name,
            "errmsg": message,
            "errInfo": {**info, "writeConcern": concern},
        }


DEFAULT = WriteConcern()


def _flag(name: str, value: Any) -> bool:
    """A safeBool field of writeConcern (j, fsync)."""
    if isinstance(value, bool):
        return value
    if is_number(value):
        f = to_float(value)
        return math.isnan(f) or f != 0
    raise type_mismatch(f"writeConcern.{name}", value, Kind.BOOL)


def _w(value: Any, replicated: bool) -> int | str | dict[str, Any] | None:
    if is_number(value):
        f = to_float(value)
        if math.isnan(f):
            raise CommandError(ErrorCode.FailedToParse, "w cannot be NaN")
        n = int(f) if math.isfinite(f) else (-1 if f < 0 else MAX_W + 1)
        if not 0 <= n <= MAX_W:
            raise CommandError(
                ErrorCode.FailedToParse,
                f"w has to be a non-negative number and not greater than {MAX_W}; found: {n}",
            )
        return n
    if isinstance(value, str):
        if "\x00" in value:
            raise CommandError(
                ErrorCode.FailedToParse, f"w has illegal embedded NUL byte, w: {value}"
            )
        return value
    if isinstance(value, Mapping):
        if not value:
            raise CommandError(ErrorCode.FailedToParse, "tagged write concern requires tags")
        for k, v in value.items():
            if not is_number(v):
                raise CommandError(
                    ErrorCode.FailedToParse,
                    "tags must be a single level document with only number values; "
                    f"found: {k}: {v!r}",
                )
        if replicated:
            return dict(value)
        # A tag set names replica-set members: nothing a standalone can satisfy.
        raise CommandError(
            ErrorCode.BadValue,
            "cannot use non-majority 'w' mode "
            f"{dict(value)} when a host is not a member of a replica set",
        )
    if value is None:
        return None
    raise CommandError(ErrorCode.FailedToParse, "w has to be a number or string")


def parse(command: str, value: Any, supported: bool, replicated: bool = False) -> WriteConcern:
    """The write concern a command carries (`value`: its `writeConcern` field, or None).
    Raises CommandError as MongoDB 7.0 does: 72 for a command that takes none, 14/9 for a
    malformed one, and on a standalone server (`replicated` False) 2 BadValue for one it cannot
    satisfy; a replica set's one member notes that in `unsatisfiable` instead."""
    if value is None:
        return DEFAULT
    if not isinstance(value, Mapping):
        raise type_mismatch(f"{command}.writeConcern", value, Kind.DOC)
    if not supported:
        raise CommandError(ErrorCode.InvalidOptions, "Command does not support writeConcern")
    if not value:
        return DEFAULT
    w = _w(value["w"], replicated) if "w" in value else None
    j = _flag("j", value["j"]) if "j" in value else False
    fsync = _flag("fsync", value["fsync"]) if "fsync" in value else False
    wtimeout = value.get("wtimeout", 0)
    if wtimeout is not None and not is_number(wtimeout):
        raise type_mismatch("writeConcern.wtimeout", wtimeout, Kind.NUMBER)
    if j and fsync:
        raise CommandError(ErrorCode.FailedToParse, "fsync and j options cannot be used together")
    unsatisfiable = None
    if replicated:
        unsatisfiable = _unsatisfiable(w)
    elif isinstance(w, int) and w > 1:
        raise CommandError(ErrorCode.BadValue, "cannot use 'w' > 1 when a host is not replicated")
    elif isinstance(w, str) and w != "majority":
        raise CommandError(
            ErrorCode.BadValue,
            f"cannot use non-majority 'w' mode {w} when a host is not a member of a replica set",
        )
    millis = (
        0
        if wtimeout is None
        else int(to_float(wtimeout))
        if math.isfinite(to_float(wtimeout))
        else 0
    )
    return WriteConcern(
        1 if w is None else w, j or fsync or w == "majority", millis, unsatisfiable, dict(value)
    )


def _unsatisfiable(w: int | str | dict[str, Any] | None) -> tuple[ErrorCode, str] | None:
    """Why the one member cannot satisfy `w` (mongod's checkIfWriteConcernCanBeSatisfied), or
    None: a number of members past the one, a mode other than majority (the config names no
    getLastErrorModes), a tag set (the member has no tags)."""
    if isinstance(w, int) and w > 1:
        return ErrorCode.UnsatisfiableWriteConcern, "Not enough data-bearing nodes"
    if isinstance(w, str) and w != "majority":
        return (
            ErrorCode.UnknownReplWriteConcern,
            f"No write concern mode named '{w}' found in replica set configuration",
        )
    if isinstance(w, dict):
        return ErrorCode.UnsatisfiableWriteConcern, "Not enough nodes match write concern tags"
    return None
