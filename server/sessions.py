"""Logical sessions: the server's record of each client session (the `lsid` a driver sends with
every command), what it owns (cursors, a transaction, its retryable writes' txnNumber), and when it
was last used (sessions time out after localLogicalSessionTimeoutMinutes)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from ebbdb.server.errors import CommandError, ErrorCode


def session_key(lsid: Any) -> bytes:
    """The catalog key of an lsid: its `id` (a UUID, BSON binary subtype 4) and, under auth, the
    `uid` digest of its owner. Raises for an lsid that is not a document with a UUID `id`."""
    if not isinstance(lsid, Mapping):
        raise CommandError(
            ErrorCode.TypeMismatch, "BSON field 'OperationSessionInfo.lsid' is the wrong type"
        )
    ident = lsid.get("id")
    raw = getattr(ident, "bytes", None)
    if raw is None:
        raw = bytes(ident) if isinstance(ident, bytes) else None
    if raw is None or len(raw) != 16:
        raise CommandError(
            ErrorCode.BadValue if ident is not None else ErrorCode.Location40414,
            "BSON field 'OperationSessionInfo.lsid.id' is missing but a required field"
            if ident is None
            else "lsid.id must be a UUID",
        )
    uid = lsid.get("uid")
    return bytes(raw) + (bytes(uid) if isinstance(uid, bytes) else b"")


class Session:
    """One logical session."""

    __slots__ = ("cursors", "key", "last_use", "lsid", "transaction", "txn_number")

    def __init__(self, key: bytes, lsid: Mapping[str, Any]) -> None:
        self.key = key
        self.lsid = dict(lsid)
        self.last_use = time.monotonic()
        #: The highest txnNumber the session has used (-1: none yet).
        self.txn_number = -1
        #: The multi-document transaction in progress or last ended (server/transactions.py).
        self.transaction: Any = None
        #: Ids of the cursors the session owns (they die with it).
        self.cursors: set[int] = set()


class SessionCatalog:
    """The sessions this server knows, by key. Used on the event loop only."""

    def __init__(self) -> None:
        self._sessions: dict[bytes, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, key: bytes) -> Session | None:
        return self._sessions.get(key)

    def touch(self, lsid: Any) -> Session:
        """The session of `lsid`, made if new, marked used now."""
        key = session_key(lsid)
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = Session(key, lsid)
        else:
            session.last_use = time.monotonic()
        return session

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    def remove(self, key: bytes) -> Session | None:
        return self._sessions.pop(key, None)
