"""The oplog of a replica set: `local.oplog.rs`, a capped collection with one entry per change to
a user collection, written in the same LMDB write transaction as the change it records (so the
oplog always matches the data). Entries have MongoDB's shape (ts, t, v, op, ns, ui, o, o2, wall,
and for a session's writes lsid, txnNumber, stmtId, prevOpTime).

A standalone server has no oplog: `OpLog.enabled` is False and nothing is written."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass, field
from typing import Any

from bson.timestamp import Timestamp

#: The oplog's namespace.
OPLOG_DB, OPLOG_NAME = "local", "oplog.rs"
#: The term of the one member's one election.
TERM = 1


@dataclass
class WriteSession:
    """The session a write runs for (set by the server in WRITE_SESSION around the write; the
    gateway carries it into the writer thread). The observer stamps its fields on each entry and
    appends (stmt_id, optime) to `written`; with `collect` set (a transaction's statement), the
    ops go there instead of into the oplog."""

    lsid: dict[str, Any]
    txn_number: int | None = None
    #: The statement id of the write in progress (the caller sets it per statement).
    stmt_id: int | None = None
    #: The optime of the session's previous entry for this txnNumber (chained by the observer).
    prev_op_time: dict[str, Any] | None = None
    collect: list[dict[str, Any]] | None = None
    written: list[tuple[int | None, dict[str, Any]]] = field(default_factory=list)


#: The session of the write running in this context (None: not a session's write).
WRITE_SESSION: contextvars.ContextVar[WriteSession | None] = contextvars.ContextVar(
    "ebbdb_write_session", default=None
)


def optime(ts: Timestamp) -> dict[str, Any]:
    """An optime document, as oplog entries and replSetGetStatus show one."""
    from bson.int64 import Int64

    return {"ts": ts, "t": Int64(TERM)}
