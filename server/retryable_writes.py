"""Retryable writes (replica-set mode): a write command with an lsid and a txnNumber (and no
`autocommit`) is applied once, however often a driver sends it again. As mongod: each statement
has a stmtId (its index in the batch); a statement already executed for the session's txnNumber is
not run again, its first result is replayed, and the statements a cut-off batch had not reached
run. The record is mongod's `config.transactions` ({_id: lsid, txnNum, lastWriteOpTime,
lastWriteDate}), written in the same LMDB transaction as the write; the oplog entries of the write
carry lsid, txnNumber and stmtId (storage/engine/oplog.py), and findAndModify's returned document
goes to `config.image_collection` as mongod's retry images do. A session's executed statements are
kept in memory; after a restart they are read back from the oplog and those two collections."""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import bson
from bson.int64 import Int64
from bson.timestamp import Timestamp

from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.sessions import Session, describe, txn_fields
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.engine.oplog import WriteSession, optime
from ebbdb.storage.engine.records import CollectionWrites
from ebbdb.storage.engine.store import Engine
from ebbdb.storage.execution import writes
from ebbdb.storage.execution.execute import QueryRun, QuerySpec

#: mongod's session transaction table and its findAndModify retry images.
TXN_DB, TXN_COLL, IMAGE_COLL = "config", "transactions", "image_collection"

S = TypeVar("S")
T = TypeVar("T")


@dataclass
class Executed:
    """What one executed statement added to its command's reply: counts, an upserted _id, or
    (findAndModify) the reply's lastErrorObject and value."""

    n: int = 0
    n_modified: int = 0
    upserted: Any = None
    has_upserted: bool = False
    reply: dict[str, Any] | None = None


@dataclass
class RetryState:
    """A session's retryable write of `txn_number`: its executed statements (by stmtId) and the
    optime of its last oplog entry."""

    txn_number: int
    executed: dict[int, Executed] = field(default_factory=dict)
    last_op_time: dict[str, Any] | None = None


class Retry:
    """One retryable write command in progress: which of its statements ran before, and the
    bookkeeping its storage job does: `start` when the job begins (again, if its group is
    redone), per statement `executed` (ran before: replay it) or `begin_statement` then `done`,
    and `record` at the job's end, in the job's transaction; `commit` once the job committed."""

    def __init__(self, session: Session, state: RetryState, engine: Engine) -> None:
        self.session = session
        self.state = state
        self.engine = engine
        self.write_session = WriteSession(dict(session.lsid), state.txn_number)
        #: Statements executed by this command's job (committed to `state` after it commits).
        self.pending: dict[int, Executed] = {}

    def start(self) -> None:
        """The job begins (again, if its group was redone): forget what a failed try did."""
        self.pending = {}
        self.write_session.written.clear()
        self.write_session.stmt_id = None
        self.write_session.prev_op_time = self.state.last_op_time

    def executed(self, stmt_id: int) -> Executed | None:
        return self.state.executed.get(stmt_id)

    def unexecuted(self, count: int) -> list[tuple[int, int]]:
        """The runs [start, stop) of statements 0..count-1 not executed before, in order."""
        runs: list[tuple[int, int]] = []
        executed = self.state.executed
        start = None
        for i in range(count):
            if i in executed:
                if start is not None:
                    runs.append((start, i))
                    start = None
            elif start is None:
                start = i
        if start is not None:
            runs.append((start, count))
        return runs

    def begin_statement(self, stmt_id: int) -> None:
        self.write_session.stmt_id = self.write_session.first_stmt = stmt_id

    def done(self, stmt_id: int, result: Executed) -> None:
        self.pending[stmt_id] = result

    def record(self, now_ms: int, image: tuple[str, Any] | None = None) -> None:
        """Write config.transactions (and findAndModify's image) in the job's transaction, if
        the job wrote anything."""
        if not self.pending:
            return
        written = self.write_session.written
        op_time = written[-1][1] if written else self.state.last_op_time
        lsid = self.session.lsid
        doc: dict[str, Any] = {
            "txnNum": Int64(self.state.txn_number),
            "lastWriteOpTime": op_time or {"ts": _null_ts(), "t": Int64(-1)},
            "lastWriteDate": _date(now_ms),
        }
        _upsert(self.engine, TXN_COLL, lsid, doc, now_ms)
        if image is not None:
            kind, value = image
            _upsert(
                self.engine,
                IMAGE_COLL,
                lsid,
                {
                    "txnNum": Int64(self.state.txn_number),
                    "ts": (op_time or {}).get("ts", _null_ts()),
                    "imageKind": kind,
                    "image": value,
                    "invalidated": False,
                },
                now_ms,
            )

    def wrap(
        self,
        run: Callable[[dict[str, Any], int, S, int], None],
        recorded: Callable[[S], bool],
    ) -> Callable[[dict[str, Any], int, S, int], None]:
        """An update or delete statement runner that replays an executed statement's counts
        and records a new one's (a statement on many documents, `recorded` False, is not
        retryable: run again, as mongod runs a multi write again)."""

        def each(reply: dict[str, Any], i: int, s: S, now_ms: int) -> None:
            done = self.executed(i)
            if done is not None:
                replay(reply, i, done)
                return
            if not recorded(s):
                # Its oplog entries carry no stmtId, as mongod's of a multi write: they must
                # not pass for another statement's after a restart.
                self.write_session.stmt_id = None
                run(reply, i, s, now_ms)
                return
            n, modified = reply["n"], reply.get("nModified", 0)
            upserts = len(reply.get("upserted", ()))
            self.begin_statement(i)
            run(reply, i, s, now_ms)
            done = Executed(reply["n"] - n, reply.get("nModified", 0) - modified)
            if len(reply.get("upserted", ())) > upserts:
                done.upserted, done.has_upserted = reply["upserted"][-1]["_id"], True
                done.n -= 1  # counted by replay from the upsert
            if done.n or done.n_modified or done.has_upserted:
                self.done(i, done)

        return each

    def commit(self) -> None:
        """The job committed: its statements are executed for good."""
        self.state.executed.update(self.pending)
        written = self.write_session.written
        if written:
            self.state.last_op_time = written[-1][1]
        self.pending = {}


def replay(reply: dict[str, Any], i: int, done: Executed) -> None:
    """Add an executed update or delete statement's first result to the reply."""
    reply["n"] += done.n
    if "nModified" in reply:
        reply["nModified"] += done.n_modified
        if done.has_upserted:
            reply["n"] += 1
            reply.setdefault("upserted", []).append({"index": i, "_id": done.upserted})


def _null_ts() -> Timestamp:
    return Timestamp(0, 0)


def _date(ms: int) -> datetime.datetime:
    return datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=ms)


def _upsert(
    engine: Engine, coll: str, lsid: dict[str, Any], fields: dict[str, Any], now: int
) -> None:
    """Store {_id: lsid, **fields} as the record of `lsid` in config.`coll` (made if missing):
    one look-up in the `_id` index and a replacement, the least a write can add to every
    retryable write. Unlogged: these tables are derived state, as mongod's are."""
    doc = {"_id": lsid, **fields}
    raw = bson.encode(doc, codec_options=CODEC)

    def put(view: CollectionWrites) -> None:
        info = view.info
        rid = None
        if info is not None and info.id_index is not None:
            with engine.read() as reader:
                rid = reader.find_unique(info.id_index, lsid)
        value = None if rid is None else view.get(rid)
        if rid is None or value is None:
            view.insert(raw)
        else:
            view.replace(rid, value, raw, doc, replacement=True)

    engine.modify(TXN_DB, coll, put, now)


async def begin(
    session: Session | None,
    body: Mapping[str, Any],
    engine: Engine,
    read: Callable[..., Any],
    abort_transaction: Callable[[Session], None] = lambda s: None,
) -> Retry | None:
    """The retry bookkeeping of a write command, or None when it is not a retryable write (no
    txnNumber, a transaction's statement, or no session). Loads the session's history from
    storage on its first retryable write since the server started; raises 225
    TransactionTooOld for a txnNumber older than the session's newest."""
    if session is None:
        return None
    number = txn_fields(body)
    if number is None:
        return None
    txn = session.transaction
    if txn is not None and getattr(txn, "txn_number", None) == number:
        # The number of the session's multi-document transaction: a write of it that forgot
        # autocommit would otherwise run outside it.
        raise _without_autocommit()
    state = session.retryable
    if state is None and session.txn_number < number:
        # First retryable write of this session since start: what storage remembers of it.
        state = await read(_load, engine, session.lsid, number)
        if state is not None:
            session.retryable = state
            session.txn_number = max(session.txn_number, state.txn_number)
    newest = max(session.txn_number, state.txn_number if state is not None else -1)
    if number < newest:
        what = "transaction" if _in_transaction(session, newest) else "retryable write"
        raise CommandError(
            ErrorCode.TransactionTooOld,
            f"Retryable write with txnNumber {number} is prohibited on session "
            f"{describe(session.key)} because a newer {what} with txnNumber {newest} has "
            "already started on this session.",
        )
    if state is None or state.txn_number != number:
        if number > session.txn_number and session.transaction is not None:
            abort_transaction(session)  # a newer txnNumber ends the session's transaction
        state = session.retryable = RetryState(number)
        session.txn_number = number
    return Retry(session, state, engine)


def record_commit(
    engine: Engine, lsid: dict[str, Any], number: int, ts: Timestamp | None, now_ms: int
) -> None:
    """Write the config.transactions record of a committed multi-document transaction (inside
    its commit's storage write): mongod's `{_id: lsid, txnNum, lastWriteOpTime, lastWriteDate,
    state: "committed"}`, by which a commit retried after a restart is answered ok again."""
    op_time = optime(ts) if ts is not None else {"ts": _null_ts(), "t": Int64(-1)}
    doc = {
        "txnNum": Int64(number),
        "lastWriteOpTime": op_time,
        "lastWriteDate": _date(now_ms),
        "state": "committed",
    }
    _upsert(engine, TXN_COLL, lsid, doc, now_ms)


def find_record(engine: Engine, lsid: dict[str, Any]) -> dict[str, Any] | None:
    """The config.transactions record of a session (None: it has none)."""
    return _find_one(engine, TXN_COLL, {"_id": lsid})


def load(engine: Engine, lsid: dict[str, Any], number: int) -> RetryState | None:
    """The session's retryable write history at `number` or later (see _load)."""
    return _load(engine, lsid, number)


def _without_autocommit() -> CommandError:
    return CommandError(
        ErrorCode.InvalidOptions,
        "Must specify autocommit=false on all operations of a multi-statement transaction.",
    )


def _in_transaction(session: Session, number: int) -> bool:
    txn = session.transaction
    return txn is not None and getattr(txn, "txn_number", None) == number


def _load(engine: Engine, lsid: dict[str, Any], number: int) -> RetryState | None:
    """The session's retryable write history from config.transactions, the oplog and
    config.image_collection (None: it has none at or past `number`)."""
    record = _find_one(engine, TXN_COLL, {"_id": lsid})
    if record is None:
        return None
    txn_num = int(record.get("txnNum", -1))
    if txn_num < number:
        return None
    if txn_num == number and record.get("state") == "committed":
        raise _without_autocommit()  # the number of a committed multi-document transaction
    state = RetryState(txn_num, last_op_time=record.get("lastWriteOpTime"))
    if txn_num > number:
        return state  # the caller refuses the older number
    image = _find_one(engine, IMAGE_COLL, {"_id": lsid, "txnNum": Int64(number)})
    for entry in _chain(engine, state.last_op_time, number):
        stmt = entry.get("stmtId")
        if isinstance(stmt, int):
            state.executed.setdefault(stmt, _from_entry(entry, image))
    return state


def _chain(engine: Engine, op_time: Any, number: int) -> list[dict[str, Any]]:
    """The oplog entries of the session's retryable write `number`, newest first: from its last
    (`op_time`) back along their prevOpTime links, each a binary search of the oplog by ts (an
    entry the capped oplog has dropped ends the walk early, as mongod's history would be
    incomplete)."""
    out: list[dict[str, Any]] = []
    ts = op_time.get("ts") if isinstance(op_time, Mapping) else None
    while isinstance(ts, Timestamp) and (ts.time or ts.inc):
        before = Timestamp(ts.time, ts.inc - 1) if ts.inc else Timestamp(ts.time - 1, 0xFFFFFFFF)
        found = engine.oplog.read_after(before, 1)
        if not found or found[0][0] != ts:
            break
        entry = bson.decode(found[0][1], CODEC)
        if entry.get("txnNumber") != number:
            break
        out.append(entry)
        prev = entry.get("prevOpTime")
        ts = prev.get("ts") if isinstance(prev, Mapping) else None
    return out


def _from_entry(entry: Mapping[str, Any], image: Mapping[str, Any] | None) -> Executed:
    """An executed statement as its oplog entry tells it: an insert or an upsert ('i'), an
    update ('u'), a delete ('d'). A findAndModify's reply is rebuilt with its image."""
    op = entry.get("op")
    o = entry.get("o") or {}
    if op == "i":
        executed = Executed(n=1, upserted=o.get("_id"), has_upserted=True)
    elif op == "u":
        executed = Executed(n=1, n_modified=1)
    else:
        executed = Executed(n=1)
    if image is not None:
        last: dict[str, Any] = {"n": 1}
        if op == "i":
            last.update(updatedExisting=False, upserted=o.get("_id"))
        elif op == "u":
            last["updatedExisting"] = True
        executed.reply = {"lastErrorObject": last, "value": image.get("image")}
    return executed


def _find_all(engine: Engine, db: str, coll: str, query: dict[str, Any]) -> list[dict[str, Any]]:
    info = engine.collection(db, coll)
    if info is None:
        return []
    run = QueryRun(info, QuerySpec.parse(query))
    out: list[dict[str, Any]] = []
    while not run.exhausted:
        out += [bson.decode(raw, CODEC) for raw in run.next_chunk(engine, 1 << 20, 1 << 40)]
    return out


def _find_one(engine: Engine, coll: str, query: dict[str, Any]) -> dict[str, Any] | None:
    found = _find_all(engine, TXN_DB, coll, query)
    return found[0] if found else None


def reap(engine: Engine, live: set[bytes], cutoff_ms: int, now_ms: int) -> int:
    """Delete the config.transactions records (and retry images) of sessions the server no
    longer knows whose last write is older than `cutoff_ms`, as mongod's session reaper does:
    their retries can no longer come. Runs inside a storage write; returns how many."""
    stale = _find_all(engine, TXN_DB, TXN_COLL, {"lastWriteDate": {"$lt": _date(cutoff_ms)}})
    n = 0
    for record in stale:
        lsid = record.get("_id")
        if not isinstance(lsid, Mapping):
            continue
        key = bytes(lsid.get("id") or b"") + bytes(lsid.get("uid") or b"")
        if key in live:
            continue
        spec = QuerySpec.parse({"_id": lsid})
        n += writes.delete(engine, TXN_DB, TXN_COLL, spec, True, now_ms).deleted
        writes.delete(engine, TXN_DB, IMAGE_COLL, spec, True, now_ms)
    return n
