"""Logical sessions: the server's record of each client session (the `lsid` a driver sends with
every command), what it owns (cursors, a transaction, its retryable writes' txnNumber), and when it
was last used. As mongod's logical session cache: sessions used since the last refresh are written
to `config.system.sessions` ({_id: {id, uid}, lastUse}, a TTL index expiring them), ended ones are
removed from it, and a session idle past localLogicalSessionTimeoutMinutes is forgotten with its
cursors and its transaction."""

from __future__ import annotations

import asyncio
import base64
import contextvars
import datetime
import hashlib
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from bson.binary import Binary
from bson.int64 import Int64

from ebbdb.server.errors import CodedError, CommandError, ErrorCode
from ebbdb.storage.core import interrupt
from ebbdb.storage.core.values import type_name

log = logging.getLogger("ebbdb.control")

#: The sessions collection: one record per session, refreshed by the periodic refresh.
SESSIONS_DB, SESSIONS_COLL = "config", "system.sessions"
#: mongod's name for the TTL index on lastUse.
TTL_INDEX_NAME = "lsidTTLIndex"
#: The `uid` of a session started with nobody logged in: SHA-256 of nothing, as mongod's.
NO_AUTH_DIGEST = hashlib.sha256(b"").digest()
#: Fields an lsid may have (LogicalSessionFromClient; txnNumber and txnUUID name internal ones).
_LSID_FIELDS = frozenset({"id", "uid", "txnNumber", "txnUUID"})
_CONTEXT = "OperationSessionInfo.lsid"


#: Write commands a txnNumber makes retryable.
RETRYABLE_COMMANDS = frozenset({"insert", "update", "delete", "findAndModify"})
#: Codes a driver retries a write on: a reply with one carries the RetryableWriteError label
#: (the retryable writes specification; mongod 4.4+ adds it).
RETRYABLE_CODES = frozenset({6, 7, 89, 91, 189, 262, 9001, 10107, 11600, 11602, 13435, 13436})
RETRYABLE_LABEL = "RetryableWriteError"
#: mongod's NotPrimaryError and ShutdownError categories.
STATE_CHANGE_CODES = frozenset({91, 189, 10107, 11600, 11602, 13435, 13436})


def _wrong_type(field: str, value: Any, expected: str) -> CommandError:
    return CommandError(
        ErrorCode.TypeMismatch,
        f"BSON field '{field}' is the wrong type '{type_name(value)}', expected type '{expected}'",
    )


def parse_lsid(lsid: Any, field: str = _CONTEXT) -> tuple[bytes, bytes | None]:
    """(id, uid or None) of an lsid as mongod's parser checks it: a document with a UUID `id`
    (binData subtype 4), an optional 32-byte `uid`, and no other field. Raises CommandError with
    mongod's codes (14 wrong type, 40414 missing, 40415 unknown field, 2 bad value)."""
    if not isinstance(lsid, Mapping):
        raise _wrong_type(field, lsid, "object")
    for name in lsid:
        if name not in _LSID_FIELDS:
            raise CommandError(
                ErrorCode.Location40415, f"BSON field '{field}.{name}' is an unknown field."
            )
    ident = lsid.get("id")
    if ident is None:
        raise CommandError(
            ErrorCode.Location40414, f"BSON field '{field}.id' is missing but a required field"
        )
    if isinstance(ident, uuid.UUID):
        ident = Binary(ident.bytes, 4)
    elif isinstance(ident, bytes) and not isinstance(ident, Binary):
        ident = Binary(ident, 0)  # subtype 0 decodes as bytes
    if not isinstance(ident, Binary):
        raise _wrong_type(f"{field}.id", ident, "binData")
    if ident.subtype != 4:
        raise CommandError(
            ErrorCode.TypeMismatch,
            f"BSON field '{field}.id' is the wrong binData type '{_subtype_name(ident.subtype)}', "
            "expected type 'UUID'",
        )
    if len(ident) != 16:
        raise CommandError(ErrorCode.BadValue, f"Invalid UUID length in '{field}.id'")
    uid = lsid.get("uid")
    if uid is None:
        return bytes(ident), None
    if not isinstance(uid, bytes):
        raise _wrong_type(f"{field}.uid", uid, "binData")
    if len(uid) != 32:
        raise CommandError(
            ErrorCode.BadValue,
            f"Unsupported SHA256Block hash length: {len(uid)}",
        )
    return bytes(ident), bytes(uid)


def _subtype_name(subtype: int) -> str:
    return {0: "general", 1: "function", 2: "binary", 3: "uuid_old", 5: "MD5"}.get(
        subtype, "user-defined" if subtype >= 0x80 else f"{subtype}"
    )


def user_digest(user: tuple[str, str] | None) -> bytes:
    """The `uid` of a session of `user` ((name, db); None: nobody logged in): SHA-256 of
    `name@db`, as mongod digests a user's name (an empty name and db: nobody)."""
    if user is None or user == ("", ""):
        return NO_AUTH_DIGEST
    return hashlib.sha256(f"{user[0]}@{user[1]}".encode()).digest()


def session_key(lsid: Any, uid: bytes = NO_AUTH_DIGEST) -> bytes:
    """The catalog key of an lsid: its `id` and the `uid` of its owner (the lsid's own `uid` if
    it names one, else `uid`, the digest of the user running the command). Raises CommandError
    for an lsid mongod would refuse."""
    ident, given = parse_lsid(lsid)
    return ident + (given if given is not None else uid)


def lsid_document(key: bytes) -> dict[str, Any]:
    """The full lsid of a catalog key: {id: UUID, uid: digest}, as the server shows it."""
    return {"id": Binary(key[:16], 4), "uid": Binary(key[16:], 0)}


def describe(key: bytes) -> str:
    """A session as mongod's messages name it: `<uuid> - <base64 uid> -  - `."""
    return f"{uuid.UUID(bytes=key[:16])} - {base64.b64encode(key[16:]).decode()} -  - "


class Session:
    """One logical session."""

    __slots__ = (
        "cursors",
        "key",
        "last_use",
        "lock",
        "lsid",
        "retryable",
        "transaction",
        "txn_number",
        "user",
    )

    def __init__(
        self,
        key: bytes,
        lsid: Mapping[str, Any],
        now_ms: int = 0,
        user: tuple[str, str] | None = None,
    ) -> None:
        self.key = key
        #: The full lsid: {id, uid}.
        self.lsid = dict(lsid)
        #: When the session was last used (ms, the expiry clock's).
        self.last_use = now_ms
        #: The user who started it ((name, db); None without auth).
        self.user = user
        #: The highest txnNumber the session has used (-1: none yet).
        self.txn_number = -1
        #: The multi-document transaction in progress or last ended (server/transactions.py).
        self.transaction: Any = None
        #: What the session's retryable write of `txn_number` has executed
        #: (server/retryable_writes.py; None until it writes).
        self.retryable: Any = None
        #: Ids of the cursors the session owns (they die with it).
        self.cursors: set[int] = set()
        #: Held by a command that must have the session to itself (a retryable write), as
        #: mongod checks a session out.
        self.lock = asyncio.Lock()

    @property
    def id(self) -> bytes:
        return self.key[:16]

    @property
    def uid(self) -> bytes:
        return self.key[16:]


class SessionCatalog:
    """The sessions this server knows, by key, and what the next refresh of config.system.sessions
    must write (used since the last one) and remove (ended). Used on the event loop only.
    `now_ms` is the expiry clock (tests move it to time sessions out)."""

    def __init__(self, now_ms: Callable[[], int] | None = None) -> None:
        self._sessions: dict[bytes, Session] = {}
        self._now_ms = now_ms or _wall_ms
        #: Keys used since the last refresh, and keys ended since then.
        self._used: set[bytes] = set()
        self._ended: set[bytes] = set()
        #: Called with the cursor ids of a session that ends, is killed or times out.
        self.kill_cursors: Callable[[Iterable[int]], None] = lambda ids: None
        #: Called with a session whose transaction must be aborted (TXN sets it).
        self.abort_transaction: Callable[[Session], None] = lambda s: None
        #: Called with a session whose operations in progress must be interrupted.
        self.kill_operations: Callable[[Session], None] = lambda s: None

    def __len__(self) -> int:
        return len(self._sessions)

    def now_ms(self) -> int:
        return self._now_ms()

    def get(self, key: bytes) -> Session | None:
        return self._sessions.get(key)

    def touch(
        self, lsid: Any, uid: bytes = NO_AUTH_DIGEST, user: tuple[str, str] | None = None
    ) -> Session:
        """The session of `lsid` (owned by the user whose digest is `uid`), made if new, marked
        used now. Raises CommandError for a malformed lsid."""
        key = session_key(lsid, uid)
        return self.vivify(key, user)

    def touch_for(self, client: Any, lsid: Any) -> Session:
        """The session of a command's `lsid` from `client` (a server/context.py Client): owned
        by the user logged in on it."""
        users = client.auth.users
        user = next(iter(users.values()), None) if users else None
        # The key of the lsid this connection sent last, unless it or the user changed: an
        # equal lsid (an equal document) parses to the same key.
        cached = client.lsid_key
        if cached is not None and cached[1] == user and cached[0] == lsid:
            key: bytes = cached[2]
        else:
            key = session_key(lsid, user_digest(user))
            client.lsid_key = (lsid, user, key)
        return self.vivify(key, user)

    def vivify(self, key: bytes, user: tuple[str, str] | None = None) -> Session:
        """The session of `key`, made if new, marked used now."""
        now = self._now_ms()
        session = self._sessions.get(key)
        if session is None:
            session = self._sessions[key] = Session(key, lsid_document(key), now, user)
        else:
            session.last_use = now
        self._used.add(key)
        self._ended.discard(key)
        return session

    def start(self, uid: bytes, user: tuple[str, str] | None) -> Session:
        """A new session with a random id (the startSession command)."""
        return self.vivify(uuid.uuid4().bytes + uid, user)

    def sessions(self) -> list[Session]:
        return list(self._sessions.values())

    def remove(self, key: bytes) -> Session | None:
        return self._sessions.pop(key, None)

    def end(self, keys: Iterable[bytes]) -> int:
        """End sessions (endSessions): forgotten with their cursors and transaction, and their
        records removed at the next refresh. Returns how many were known."""
        n = 0
        for key in keys:
            session = self._sessions.pop(key, None)
            self._used.discard(key)
            self._ended.add(key)
            if session is not None:
                self._release(session)
                n += 1
        return n

    def kill(self, match: Callable[[Session], bool]) -> list[Session]:
        """Kill the sessions `match` picks (killSessions and the like): their cursors closed,
        their transaction aborted. The sessions stay usable, as mongod's do."""
        killed = [s for s in self._sessions.values() if match(s)]
        for session in killed:
            self._release(session)
        return killed

    def _release(self, session: Session) -> None:
        self.kill_operations(session)
        if session.cursors:
            cursors, session.cursors = session.cursors, set()
            self.kill_cursors(cursors)
        if session.transaction is not None:
            self.abort_transaction(session)

    def take_refresh(self) -> tuple[list[Session], set[bytes]]:
        """What a refresh must write (sessions used since the last one) and remove (ended
        sessions), forgotten here: a refresh that fails hands them back with `give_back`."""
        used = [s for k in self._used if (s := self._sessions.get(k)) is not None]
        ended = self._ended
        self._used, self._ended = set(), set()
        return used, ended

    def give_back(self, used: Iterable[Session], ended: set[bytes]) -> None:
        for s in used:
            if s.key in self._sessions:
                self._used.add(s.key)
        self._ended |= ended - self._sessions.keys()

    def expire(self, timeout_ms: int, now_ms: int | None = None) -> list[Session]:
        """Forget sessions idle for `timeout_ms` or longer, with their cursors and transaction.
        A session whose cursor a getMore uses is not idle: every command with its lsid touches
        it."""
        now = self._now_ms() if now_ms is None else now_ms
        stale = [s for s in self._sessions.values() if now - s.last_use >= timeout_ms]
        for session in stale:
            del self._sessions[session.key]
            self._used.discard(session.key)
            self._release(session)
        return stale


def operations_killer(operations: Iterable[Any]) -> Callable[[Session], None]:
    """A SessionCatalog.kill_operations for the server's operations (server/operations.py):
    each one running for the session is interrupted, but the one asking (a killSessions of the
    session that runs it would only interrupt itself)."""

    def kill(session: Session) -> None:
        me = interrupt.current.get()
        for op in operations:
            if op is not me and op.client is not None and op.client.session is session:
                op.kill("Interrupted")

    return kill


def check_get_more(cursor_id: int, owner: Session | None, session: Session | None) -> None:
    """A getMore runs in the session its cursor was opened in, or neither has one: mongod's
    50736, 50737 and 50738 otherwise."""
    if owner is None:
        if session is not None:
            raise CodedError(
                50736,
                "Location50736",
                f"Cannot run getMore on cursor {cursor_id}, which was not created in a session, "
                f"in session {describe(session.key)}",
            )
    elif session is None:
        raise CodedError(
            50737,
            "Location50737",
            f"Cannot run getMore on cursor {cursor_id}, which was created in session "
            f"{describe(owner.key)}, without an lsid",
        )
    elif session.key != owner.key:
        raise CodedError(
            50738,
            "Location50738",
            f"Cannot run getMore on cursor {cursor_id}, which was created in session "
            f"{describe(owner.key)}, in session {describe(session.key)}",
        )


def _wall_ms() -> int:
    return int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)


def as_datetime(ms: int) -> datetime.datetime:
    """A BSON date (naive UTC, as the server's codec stores dates) of `ms` since the epoch."""
    return datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=ms)


#: The session of the command running in this context (the dispatcher sets it per request): the
#: cursors it opens are the session's.
CURRENT_SESSION: contextvars.ContextVar[Session | None] = contextvars.ContextVar(
    "ebbdb_session", default=None
)


#: The multi-document transaction whose statement runs in this context (server/transactions.py
#: sets it): the cursors its statements open are the transaction's, and die with it.
CURRENT_TRANSACTION: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "ebbdb_transaction_statement", default=None
)


def check_transaction_get_more(
    cursor_id: int, created_in: int | None, body: Mapping[str, Any]
) -> None:
    """A getMore runs in the transaction its cursor was opened in, or neither is in one:
    mongod's 50740, 50741 and 50739 otherwise (`body`: the getMore's command document)."""
    number = body.get("txnNumber") if "autocommit" in body else None
    if created_in is not None:
        if number is None:
            raise CodedError(
                50740,
                "Location50740",
                f"Cannot run getMore on cursor {cursor_id}, which was created in transaction "
                f"{created_in}, without a txnNumber",
            )
        if int(number) != created_in:
            raise CodedError(
                50741,
                "Location50741",
                f"Cannot run getMore on cursor {cursor_id}, which was created in transaction "
                f"{created_in}, in transaction {int(number)}",
            )
    elif number is not None:
        raise CodedError(
            50739,
            "Location50739",
            f"Cannot run getMore on cursor {cursor_id}, which was not created in a "
            f"transaction, in transaction {int(number)}",
        )


# -- a session's transaction fields in replica-set mode ----------------------------------------


def txn_fields(body: Mapping[str, Any]) -> int | None:
    """The txnNumber of a command that is a retryable write (None: it is not one), checked as
    mongod checks a session's fields. Raises CommandError: a txnNumber without an lsid, of the
    wrong type or negative, or on a command that is not a retryable write."""
    if "txnNumber" not in body:
        return None
    number = body["txnNumber"]
    if "lsid" not in body:
        raise CommandError(
            ErrorCode.InvalidOptions,
            "Transaction number requires a session ID to also be specified",
        )
    if not isinstance(number, Int64):  # a long, as mongod's parser insists
        raise CommandError(
            ErrorCode.TypeMismatch,
            "BSON field 'OperationSessionInfo.txnNumber' is the wrong type "
            f"'{type_name(number)}', expected type 'long'",
        )
    if number < 0:
        raise CommandError(ErrorCode.BadValue, "Transaction number cannot be negative")
    if "autocommit" in body:
        return None  # a transaction's statement: server/transactions.py
    name = next(iter(body), "")
    if name == "findandmodify":
        name = "findAndModify"
    if name not in RETRYABLE_COMMANDS:
        raise CodedError(
            50768,
            "Location50768",
            "txnNumber may only be provided for multi-document transactions and retryable "
            f"write commands. autocommit:false was not provided, and {name} is not a retryable "
            "write command.",
        )
    return int(number)


def label_reply(
    reply: dict[str, Any],
    body: Mapping[str, Any],
    topology_version: Callable[[], dict[str, Any]] | None = None,
) -> None:
    """mongod's error labels and topologyVersion on a replica-set member's reply: a "not
    primary" or shutdown error says the member's topologyVersion (a driver then sees the error
    is no news of a topology change and retries at once), and a retryable write that failed with
    a code a driver retries on (or whose write concern failed with one) gets RetryableWriteError,
    unless it has labels already."""
    if topology_version is not None and reply.get("code") in STATE_CHANGE_CODES:
        reply.setdefault("topologyVersion", topology_version())
    if "txnNumber" not in body or "autocommit" in body or "errorLabels" in reply:
        return
    code = reply.get("code") if not reply.get("ok") else None
    wce = reply.get("writeConcernError")
    wce_code = wce.get("code") if isinstance(wce, Mapping) else None
    if code in RETRYABLE_CODES or wce_code in RETRYABLE_CODES:
        reply["errorLabels"] = [RETRYABLE_LABEL]
