"""Multi-document transactions, and the refusal of their fields on a standalone server.

Standalone (no --replSet): ebbdb is not a replica-set member, so it has no transactions. A
command that carries `txnNumber` would have its writes applied at once and kept whatever the
transaction later does, so it is refused before it runs, with mongod's checks in mongod's order.

Replica-set mode: a session's transaction starts with its first statement (`startTransaction:
true, autocommit: false, txnNumber`), runs later statements (`autocommit: false`) one at a time
against its snapshot plus its own writes (storage/engine/overlay.py: the engine's code runs
unchanged, its writes going to the overlay), and ends with commitTransaction (one storage write
with its one applyOps oplog entry) or abortTransaction. Any error in a statement aborts it, as in
mongod, but the refusal of a command a transaction may not run (263), which leaves it open. Transactions open longer than transactionLifetimeLimitSeconds are aborted.

A session serves one command of its transaction at a time (the dispatcher checks it out, as
mongod does). A commit writes the session's config.transactions record in its own storage write,
read back when the session is first used after a restart (a retried commit is ok again).

Conflicts: a transaction's first write to a document fails at once with WriteConflict (112,
TransientTransactionError) when another open transaction wrote it, or a commit changed it since
the snapshot; its commit fails the same way if a write outside any transaction changed what it
wrote meanwhile. (mongod makes that outside write wait for the transaction instead; here the
writer never waits, and the transaction, which drivers retry whole, gives way.) Likewise its
commit fails with WriteConflict if the catalog entry of a collection it wrote changed meanwhile
(an index built, a drop or rename outside): mongod makes that DDL wait for the transaction."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import itertools
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import bson

from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.sessions import CURRENT_TRANSACTION
from ebbdb.storage.core.documents import CODEC
from ebbdb.storage.core.interrupt import Interrupted
from ebbdb.storage.engine.oplog import WRITE_SESSION, WriteSession
from ebbdb.storage.engine.overlay import WriteConflict

if TYPE_CHECKING:
    from ebbdb.server.gateway import Gateway
    from ebbdb.server.parameters import Parameters
    from ebbdb.storage.engine.writer import Transaction as StorageTransaction

T = TypeVar("T")
log = logging.getLogger("ebbdb.transactions")

#: mongod's answer to a transaction number on a server that is not a replica-set member or mongos.
NOT_REPLICATED = "Transaction numbers are only allowed on a replica set member or mongos"
TRANSIENT = "TransientTransactionError"
UNKNOWN_COMMIT = "UnknownTransactionCommitResult"

#: The commands a transaction may run (mongod 7.0's commands that allow transactions).
ALLOWED = frozenset(
    {
        "abortTransaction",
        "aggregate",
        "bulkWrite",
        "commitTransaction",
        "create",
        "createIndexes",
        "delete",
        "distinct",
        "find",
        "findAndModify",
        "findandmodify",
        "getMore",
        "insert",
        "killCursors",
        "update",
    }
)
_END = frozenset({"commitTransaction", "abortTransaction"})
_WRITES = frozenset({"insert", "update", "delete", "findAndModify", "findandmodify"})
_READ_CONCERN_LEVELS = frozenset({"local", "majority", "snapshot"})
#: What one transaction's oplog entry may hold (mongod 4.0's limit for its one applyOps entry:
#: 16 MB and 16 KB of headroom).
MAX_TRANSACTION_BYTES = 16 * 1024 * 1024 + 16 * 1024


def refuse_transaction_fields(body: Mapping[str, Any]) -> None:
    """Raise what a standalone mongod answers when a command carries a session's transaction
    fields. The common case, a command with none of them, costs three dictionary look-ups."""
    if "txnNumber" not in body and "autocommit" not in body and "startTransaction" not in body:
        return
    _check_field_combination(body)
    if "txnNumber" in body:
        raise CommandError(ErrorCode.IllegalOperation, NOT_REPLICATED)


def _check_field_combination(body: Mapping[str, Any]) -> None:
    if body.get("autocommit") is True:
        raise CommandError(ErrorCode.InvalidOptions, "Specifying autocommit=true is not allowed.")
    if "txnNumber" in body:
        if "lsid" not in body:
            raise CommandError(
                ErrorCode.InvalidOptions,
                "Transaction number requires a session ID to also be specified",
            )
        return
    if "autocommit" in body:
        raise CommandError(
            ErrorCode.InvalidOptions,
            "'autocommit' field requires a transaction number to also be specified",
        )
    raise CommandError(
        ErrorCode.InvalidOptions,
        "'startTransaction' field requires 'autocommit' field to also be specified",
    )


def in_transaction(body: Mapping[str, Any]) -> bool:
    """Whether a command is a transaction's statement (it says `autocommit: false`) or would
    start one: the dispatcher hands those to TransactionManager.enter."""
    return "autocommit" in body or "startTransaction" in body


class State(enum.Enum):
    IN_PROGRESS = "in progress"
    COMMITTED = "committed"
    ABORTED = "aborted"


_OWNERS = itertools.count(1)


class Transaction:
    """One session's transaction: its number, state, storage (snapshot and overlay) and the
    oplog ops its statements collected."""

    def __init__(
        self,
        manager: TransactionManager,
        session: Any,
        number: int,
        storage: StorageTransaction | None,
    ) -> None:
        self.manager = manager
        self.session = session
        self.number = number
        self.storage: StorageTransaction | None = storage
        self.state = State.IN_PROGRESS
        self.started = time.monotonic()
        #: The oplog ops of its statements, for its one applyOps entry.
        self.ops: list[dict[str, Any]] = []
        self.bytes = 0
        #: Statements (and the end) run one at a time.
        self.lock = asyncio.Lock()
        #: Held while a statement may use the snapshot; the map grows only after taking it.
        self.busy = threading.Lock()
        self.expired = False
        #: Ids of the cursors its statements opened (closed when it ends, as mongod's).
        self.cursors: set[int] = set()

    @property
    def txn_number(self) -> int:
        """Its txnNumber (the name server/sessions.py's readers use)."""
        return self.number

    def release(self) -> None:
        """End the storage side (snapshot, held keys), close its cursors and forget the
        collected ops (the session keeps the ended transaction, for a retried commit); call
        holding `busy`."""
        self.ops = []
        if self.cursors:
            cursors, self.cursors = self.cursors, set()
            self.manager.kill_cursors(cursors)
        storage, self.storage = self.storage, None
        if storage is not None:
            storage.end()


#: The transaction that the commitTransaction or abortTransaction running in this context ends.
ENDING: contextvars.ContextVar[Transaction | None] = contextvars.ContextVar(
    "ebbdb_ending_transaction", default=None
)


class Statement:
    """A statement of a transaction: `run` awaits its handler in the transaction's context."""

    def __init__(self, txn: Transaction, name: str, start: bool) -> None:
        self.txn = txn
        self.name = name
        self.start = start

    async def run(self, call: Callable[[], Awaitable[T]]) -> T:
        txn = self.txn
        if self.name in _END:
            # The end runs outside the transaction's storage; its handler finds it here.
            token = ENDING.set(txn)
            try:
                return await call()
            finally:
                ENDING.reset(token)
        manager = txn.manager
        async with txn.lock:
            if txn.state is not State.IN_PROGRESS:
                raise manager.no_such(txn)
            await _acquire(txn.busy)
            try:
                storage = txn.storage
                if storage is None:  # the snapshot was released (the data file grew)
                    manager.abort(txn, locked=True)
                    raise _write_conflict(WriteConflict())
                used = storage.use()
                session_token = manager.collecting(txn)
                statement_token = CURRENT_TRANSACTION.set(txn)
                try:
                    reply = await call()
                finally:
                    CURRENT_TRANSACTION.reset(statement_token)
                    manager.stop_collecting(session_token)
                    _reset_transaction(used)
            except WriteConflict as exc:
                manager.abort(txn, locked=True)
                raise _write_conflict(exc) from None
            except BaseException:
                manager.abort(txn, locked=True)
                raise
            else:
                if isinstance(reply, Mapping) and reply.get("writeErrors"):
                    # A write error aborts the transaction, as in mongod.
                    manager.abort(txn, locked=True)
                elif txn.bytes > MAX_TRANSACTION_BYTES:
                    manager.abort(txn, locked=True)
                    raise CommandError(
                        ErrorCode.TransactionTooLarge,
                        f"Total size of all transaction operations must be less than "
                        f"{MAX_TRANSACTION_BYTES}. Actual size is {txn.bytes}",
                    )
            finally:
                if txn.state is not State.IN_PROGRESS:
                    txn.release()  # aborted while the statement ran (killSessions, the reaper)
                txn.busy.release()
            return reply

    def failed(self, reply: dict[str, Any]) -> None:
        """A statement failed (before its handler, as by a fail point, or in it): a statement's
        error aborts the transaction, and the reply gets mongod's error labels (unless a fail
        point chose them)."""
        txn, code = self.txn, reply.get("code")
        if self.name not in _END:
            txn.manager.abort(txn)
        if "errorLabels" in reply:
            return
        transient = code in _TRANSIENT or code == ErrorCode.NoSuchTransaction
        if transient:
            reply["errorLabels"] = [TRANSIENT]
        elif self.name == "commitTransaction" and code in _UNKNOWN_COMMIT_CODES:
            reply["errorLabels"] = [UNKNOWN_COMMIT]


#: Codes whose failure lets a driver retry the whole transaction (mongod's transient errors).
_TRANSIENT = frozenset({int(ErrorCode.WriteConflict), 24})  # 24: LockTimeout
#: Codes after which a commit's outcome is unknown (retryable errors, interruptions, write
#: concern failures): the client may retry the commit.
_UNKNOWN_COMMIT_CODES = frozenset(
    {
        int(ErrorCode.MaxTimeMSExpired),
        int(ErrorCode.Interrupted),
        int(ErrorCode.InterruptedAtShutdown),
        64,  # WriteConcernFailed
        91,  # ShutdownInProgress
        189,  # PrimarySteppedDown
        10107,  # NotWritablePrimary
        11602,  # InterruptedDueToReplStateChange
    }
)


def _reset_transaction(token: Any) -> None:
    from ebbdb.storage.engine.writer import TRANSACTION

    TRANSACTION.reset(token)


async def _acquire(lock: threading.Lock) -> None:
    """Take a thread lock from the loop: at once when free (the map's growth holds it only to
    release a snapshot), else on a thread."""
    if not lock.acquire(blocking=False):
        await asyncio.to_thread(lock.acquire)


def _write_conflict(exc: WriteConflict) -> CommandError:
    return CommandError(ErrorCode.WriteConflict, exc.message, errorLabels=[TRANSIENT])


class TransactionManager:
    """The transactions of a replica-set server's sessions."""

    def __init__(self, gateway: Gateway, parameters: Parameters) -> None:
        self._gateway = gateway
        self._parameters = parameters
        self._open: dict[int, Transaction] = {}
        self._reaper: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[None]] = set()
        #: Closes cursors by id (the session catalog's, see `serve`).
        self.kill_cursors: Callable[[Iterable[int]], None] = lambda ids: None
        gateway.engine.env.before_grow.append(self._release_snapshots)

    def serve(self, sessions: Any) -> None:
        """Tell the session catalog how to abort the transaction of a session that ends, is
        killed or times out (its `abort_transaction` hook)."""
        sessions.abort_transaction = self.end_session
        self.kill_cursors = lambda ids: sessions.kill_cursors(ids)

    # -- entering ----------------------------------------------------------------------------------

    async def enter(self, session: Any, name: str, db: str, body: Mapping[str, Any]) -> Statement:
        """Check a transaction statement (or commit/abort) against the session's transaction,
        starting one for `startTransaction`; raises mongod's errors."""
        _check_field_combination(body)
        if body.get("autocommit") is not False:
            raise CommandError(
                ErrorCode.InvalidOptions,
                "'startTransaction' field requires 'autocommit' field to also be specified",
            )
        number = body["txnNumber"]
        if session is None:
            raise CommandError(
                ErrorCode.InvalidOptions,
                "Transaction number requires a session ID to also be specified",
            )
        start = body.get("startTransaction")
        if start is not None and start is not True:
            raise CommandError(
                ErrorCode.InvalidOptions, "Specifying startTransaction=false is not allowed."
            )
        if session.txn_number < 0 and session.transaction is None and session.retryable is None:
            await self._load(session)
        latest = session.txn_number
        if number < latest:
            raise CommandError(
                ErrorCode.TransactionTooOld,
                f"Cannot start transaction {number} on session {_lsid(session)} because a newer "
                f"transaction {latest} has already started.",
            )
        if name not in _END and "writeConcern" in body:
            raise CommandError(
                ErrorCode.InvalidOptions,
                "writeConcern is not allowed within a multi-statement transaction",
            )
        if start:
            if name in _END:
                raise CommandError(
                    ErrorCode.OperationNotSupportedInTransaction,
                    f"Cannot run '{name}' in a multi-document transaction.",
                )
            _check_allowed(name, db)
            self._check_statement(name, db, body)
            _check_read_concern(body.get("readConcern"), True)
            return Statement(await self._start(session, number), name, True)
        current: Transaction | None = session.transaction
        if current is None or number != latest or current.number != number:
            raise CommandError(
                ErrorCode.NoSuchTransaction,
                f"Given transaction number {number} does not match any in-progress "
                f"transactions. The active transaction number is {latest}",
                errorLabels=[TRANSIENT],
            )
        if name == "commitTransaction" and current.state is State.COMMITTED:
            return Statement(current, name, False)  # a retried commit: ok again
        if current.state is State.COMMITTED:
            if name == "abortTransaction":
                raise CommandError(
                    ErrorCode.TransactionCommitted,
                    f"Cannot abort transaction {number} on session {_lsid(session)} because it "
                    "has been committed",
                )
            raise CommandError(
                ErrorCode.TransactionCommitted,
                f"Transaction with {{ txnNumber: {number} }} has been committed.",
            )
        if current.state is State.ABORTED:
            raise self.no_such(current)
        if name not in _END:
            # A command a transaction may not run is refused before it is part of the
            # transaction: the transaction stays open (mongod's commands_not_allowed_in_txn.js).
            _check_allowed(name, db)
        try:
            if name not in _END:
                self._check_statement(name, db, body, current)
            if "readConcern" in body:
                raise CommandError(
                    ErrorCode.InvalidOptions,
                    "Only the first command in a transaction may specify a readConcern",
                )
        except CommandError:
            # An error in a transaction's statement aborts the transaction, as in mongod.
            if not current.lock.locked():
                self.abort(current)
            raise
        return Statement(current, name, False)

    def _check_statement(
        self, name: str, db: str, body: Mapping[str, Any], txn: Transaction | None = None
    ) -> None:
        """mongod's refusals of what a transaction (`txn`, None for its first statement) may not
        do with an allowed command: $out and $merge, writes to a capped collection, creating a
        capped collection, building an index on a collection that existed before it, writes to
        a system collection, a tailable find, $changeStream."""
        target = body.get(name)
        engine = self._gateway.engine
        base = txn.storage.group.base if txn is not None and txn.storage is not None else None
        if name == "aggregate":
            pipeline = body.get("pipeline")
            for stage in pipeline if isinstance(pipeline, list) else ():
                if isinstance(stage, Mapping) and stage:
                    op = next(iter(stage))
                    if op in ("$out", "$merge"):
                        raise CommandError(
                            ErrorCode.OperationNotSupportedInTransaction,
                            f"{op} cannot be used in a transaction",
                        )
                    if op == "$changeStream":
                        raise CommandError(
                            ErrorCode.OperationNotSupportedInTransaction,
                            "Operation not permitted in transaction",
                        )
        elif name == "find":
            if body.get("tailable"):
                raise CommandError(
                    ErrorCode.InvalidOptions,
                    "It is illegal to open a tailable cursor in a transaction",
                )
        elif name == "create":
            if body.get("capped"):
                raise CommandError(
                    ErrorCode.OperationNotSupportedInTransaction,
                    "Cannot create a capped collection in a multi-document transaction.",
                )
        elif name == "createIndexes" and isinstance(target, str):
            # mongod builds an index on a collection that existed before the transaction only
            # outside one; an index that exists already is no build.
            info = (base or {}).get((db, target)) if txn else engine.collection(db, target)
            specs = body.get("indexes")
            names = {ix.name for ix in info.indexes} if info is not None else set()
            wanted = (
                [x.get("name") for x in specs if isinstance(x, Mapping)]
                if isinstance(specs, list)
                else []
            )
            if info is not None and not all(n in names for n in wanted):
                raise CommandError(
                    ErrorCode.OperationNotSupportedInTransaction,
                    f"Cannot create new indexes on existing collection {db}.{target} in a "
                    "multi-document transaction.",
                )
        elif name in _WRITES and isinstance(target, str):
            if target.startswith("system."):
                raise CommandError(
                    ErrorCode.Location50791,
                    f"Cannot write to system collection {db}.{target} within a transaction.",
                )
            info = engine.collection(db, target)
            if info is not None and info.options.get("capped"):
                raise CommandError(
                    ErrorCode.OperationNotSupportedInTransaction,
                    f"Collection '{db}.{target}' is a capped collection. Writes in transactions "
                    "are not allowed on capped collections.",
                )

    async def _load(self, session: Any) -> None:
        """A session first used since the server started: what config.transactions remembers
        of it (a committed transaction, whose commit is answered ok again, or a retryable
        write), as mongod reads its session records back."""
        from ebbdb.server import retryable_writes

        engine = self._gateway.engine
        record = await self._gateway.read(retryable_writes.find_record, engine, session.lsid)
        if record is None:
            return
        number = int(record.get("txnNum", -1))
        if record.get("state") == "committed":
            txn = Transaction(self, session, number, None)
            txn.state = State.COMMITTED
            session.transaction = txn
        else:
            state = await self._gateway.read(retryable_writes.load, engine, session.lsid, number)
            if state is not None:
                session.retryable = state
        session.txn_number = max(session.txn_number, number)

    async def _start(self, session: Any, number: int) -> Transaction:
        retryable = session.retryable
        if retryable is not None and retryable.txn_number == number:
            raise _restart_refused()  # the number of an executed retryable write
        old: Transaction | None = session.transaction
        if old is not None:
            if old.number == number:
                raise _restart_refused()
            if old.state is State.IN_PROGRESS:
                async with old.lock:
                    await _acquire(old.busy)
                    try:
                        self.abort(old, locked=True)
                    finally:
                        old.busy.release()
        session.txn_number = number
        owner = next(_OWNERS)
        storage = await asyncio.to_thread(self._gateway.engine.begin_transaction, owner)
        txn = Transaction(self, session, number, storage)
        session.transaction = txn
        self._open[id(txn)] = txn
        self._ensure_reaper()
        return txn

    def no_such(self, txn: Transaction) -> CommandError:
        if txn.expired:
            return CommandError(
                ErrorCode.NoSuchTransaction,
                f"Transaction with {{ txnNumber: {txn.number} }} has been aborted because it "
                "exceeded transactionLifetimeLimitSeconds.",
                errorLabels=[TRANSIENT],
            )
        return CommandError(
            ErrorCode.NoSuchTransaction,
            f"Transaction with {{ txnNumber: {txn.number} }} has been aborted.",
            errorLabels=[TRANSIENT],
        )

    # -- the oplog ops of a statement ------------------------------------------------------------

    def collecting(self, txn: Transaction) -> Any:
        """Make the oplog observer collect the statement's ops into the transaction (see
        storage/engine/oplog.py's WRITE_SESSION); returns what stop_collecting resets."""
        collector = _Collector(txn)
        return WRITE_SESSION.set(
            WriteSession(lsid=dict(txn.session.lsid), txn_number=txn.number, collect=collector)
        )

    def stop_collecting(self, token: Any) -> None:
        WRITE_SESSION.reset(token)

    # -- ending ----------------------------------------------------------------------------------

    async def commit(self, txn: Transaction) -> None:
        """Commit (a committed transaction: nothing to do, as for a retried commit)."""
        async with txn.lock:
            if txn.state is State.COMMITTED:
                return
            if txn.state is State.ABORTED:
                raise self.no_such(txn)
            storage = txn.storage
            if storage is None:
                self.abort(txn)
                raise _write_conflict(WriteConflict())
            engine = self._gateway.engine
            try:
                if storage.overlay.written:
                    also = self._commit_writer(txn)
                    await self._gateway.write(engine.commit_transaction, storage, also)
            except WriteConflict as exc:
                self.abort(txn)
                raise _write_conflict(exc) from None
            except Interrupted as exc:
                # Cut short (maxTimeMS, killOp, shutdown): the client cannot tell whether it
                # committed, and may retry the commit (the transactions spec's label).
                code = ErrorCode[exc.code_name]
                raise CommandError(code, exc.message, errorLabels=[UNKNOWN_COMMIT]) from None
            txn.state = State.COMMITTED
            await _acquire(txn.busy)
            try:
                txn.release()
            finally:
                txn.busy.release()
            self._open.pop(id(txn), None)

    def _commit_writer(self, txn: Transaction) -> Callable[[Any], None]:
        """What writes, in the commit's LMDB transaction, the transaction's one oplog entry,
        `{op: "c", ns: "admin.$cmd", o: {applyOps: [...]}}` with its lsid, txnNumber and
        prevOpTime, the pre-images its updates and deletes keep for change streams, and its
        session's config.transactions record `{_id: lsid, txnNum, lastWriteOpTime,
        lastWriteDate, state: "committed"}` (as mongod's), read back after a restart."""
        from ebbdb.server import retryable_writes

        engine = self._gateway.engine
        oplog = engine.oplog
        lsid, number = dict(txn.session.lsid), txn.number
        if not oplog.enabled or not txn.ops:

            def record_only(lmdb_txn: Any) -> None:
                retryable_writes.record_commit(engine, lsid, number, None, _now_ms())

            return record_only
        ops: list[dict[str, Any]] = []
        images: list[tuple[int, Any, dict[str, Any]]] = []
        for index, op in enumerate(txn.ops):
            op = dict(op)
            image = op.pop("$preImage", None)
            if image is not None and op.get("ui") is not None:
                images.append((index, op["ui"], image))
            ops.append(op)
        entry = {"op": "c", "ns": "admin.$cmd", "o": {"applyOps": ops}}

        def also(lmdb_txn: Any) -> None:
            ts = oplog.append(lmdb_txn, entry, WriteSession(lsid=lsid, txn_number=number))
            for index, ui, image in images:
                oplog.store_pre_image(lmdb_txn, ui, ts, index, image)
            retryable_writes.record_commit(engine, lsid, number, ts, _now_ms())

        return also

    def abort(self, txn: Transaction, locked: bool = False) -> None:
        """Abort (nothing it wrote remains). `locked`: the caller holds `txn.busy`; else, if a
        statement holds it, that statement releases the storage when it ends."""
        if txn.state is not State.IN_PROGRESS:
            return
        txn.state = State.ABORTED
        if locked or txn.busy.acquire(blocking=False):
            try:
                txn.release()
            finally:
                if not locked:
                    txn.busy.release()
        self._open.pop(id(txn), None)

    async def abort_command(self, txn: Transaction) -> None:
        async with txn.lock:
            if txn.state is State.ABORTED:
                raise self.no_such(txn)
            await _acquire(txn.busy)
            try:
                self.abort(txn, locked=True)
            finally:
                txn.busy.release()

    def end_session(self, session: Any) -> None:
        """A session ended, was killed or timed out: its transaction in progress is aborted."""
        txn = getattr(session, "transaction", None)
        if not isinstance(txn, Transaction) or txn.state is not State.IN_PROGRESS:
            return
        if not txn.lock.locked():
            self.abort(txn)
        else:  # after the statement or commit in progress
            task = asyncio.get_running_loop().create_task(self._abort_when_idle(txn))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)

    async def _abort_when_idle(self, txn: Transaction) -> None:
        async with txn.lock:
            await _acquire(txn.busy)
            try:
                self.abort(txn, locked=True)
            finally:
                txn.busy.release()

    # -- upkeep ----------------------------------------------------------------------------------

    def _ensure_reaper(self) -> None:
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap())

    async def _reap(self) -> None:
        """Abort transactions open longer than transactionLifetimeLimitSeconds (checked about
        twice a second; ends when none is open)."""
        while self._open:
            await asyncio.sleep(0.25)
            limit = float(self._parameters.get("transactionLifetimeLimitSeconds"))
            now = time.monotonic()
            for txn in list(self._open.values()):
                if now - txn.started > limit and not txn.lock.locked():
                    txn.expired = True
                    log.info("aborting transaction %d: past its lifetime limit", txn.number)
                    self.abort(txn)

    def _release_snapshots(self) -> None:
        """Before the map grows (on the writer thread): open transactions give up their
        snapshots (their next statement fails with WriteConflict, a transient error)."""
        for txn in list(self._open.values()):
            with txn.busy:
                storage = txn.storage
                if storage is not None:
                    storage.overlay.release_snapshot()

    def close(self) -> None:
        for txn in list(self._open.values()):
            self.abort(txn)
        if self._reaper is not None:
            self._reaper.cancel()


class _Collector(list):  # type: ignore[type-arg]
    """The list a statement's oplog ops are collected into: counts their size as they come."""

    def __init__(self, txn: Transaction) -> None:
        super().__init__()
        self._txn = txn

    def append(self, op: Any) -> None:
        txn = self._txn
        txn.ops.append(op)
        with contextlib.suppress(Exception):
            txn.bytes += len(bson.encode(op, codec_options=CODEC))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _restart_refused() -> CommandError:
    """mongod's answer to startTransaction at the session's active txnNumber (a transaction's, or
    a retryable write's): only a shard may restart a transaction at its number."""
    return CommandError(
        ErrorCode.ConflictingOperationInProgress,
        "Only servers in a sharded cluster can start a new transaction at the active "
        "transaction number",
    )


def _check_allowed(name: str, db: str) -> None:
    if name == "count":
        raise CommandError(
            ErrorCode.OperationNotSupportedInTransaction,
            "Cannot run 'count' in a multi-document transaction. Please see "
            "http://dochub.mongodb.org/core/transaction-count for a recommended alternative.",
        )
    if name not in ALLOWED:
        raise CommandError(
            ErrorCode.OperationNotSupportedInTransaction,
            f"Cannot run '{name}' in a multi-document transaction.",
        )
    if db == "local":
        raise CommandError(
            ErrorCode.OperationNotSupportedInTransaction,
            "Cannot run command against the 'local' database in a transaction.",
        )
    if db == "config":
        raise CommandError(
            ErrorCode.OperationNotSupportedInTransaction,
            "Cannot run command against the config database in a transaction.",
        )


def _check_read_concern(value: Any, first: bool) -> None:
    if not isinstance(value, Mapping):
        return
    level = value.get("level")
    if level is not None and level not in _READ_CONCERN_LEVELS:
        raise CommandError(
            ErrorCode.InvalidOptions,
            "The readConcern level must be either 'local' (default), 'majority' or "
            "'snapshot' in order to run in a transaction",
        )


def _lsid(session: Any) -> str:
    lsid = getattr(session, "lsid", None)
    ident = lsid.get("id") if isinstance(lsid, Mapping) else None
    return f"{{ id: {ident!s} }}" if ident is not None else "{}"
