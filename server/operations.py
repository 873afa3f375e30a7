"""Operations in progress: one Operation per running request (its opid, what it runs, for whom,
since when, and its interruption token), the registry currentOp reads and killOp and shutdown
kill through, and maxTimeMS as MongoDB parses it.

An Operation is the request's storage.core.interrupt.OpToken: the dispatcher makes it the current
token while the handler runs, so every storage loop the request drives (on the loop, a reader
thread or the writer thread) checks its deadline and kill flag."""

from __future__ import annotations

import datetime
import decimal
import itertools
import time
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from bson import Decimal128, Int64

from ebbdb.server.errors import CommandError, ErrorCode
from ebbdb.server.profiler import MAX_LOGGED_COMMAND, app_name, loggable_command
from ebbdb.storage.core.interrupt import CHECK_EVERY, OpToken
from ebbdb.storage.core.memory import UNLIMITED, Pool
from ebbdb.storage.core.values import is_number


class Client(Protocol):
    """The connection an operation came on (server.context.Client), as currentOp shows it."""

    id: int
    peer: str
    metadata: dict[str, Any] | None


#: The `op` currentOp shows for a command (others are "command").
_OP_TYPES = {
    "find": "query",
    "getMore": "getmore",
    "insert": "insert",
    "update": "update",
    "delete": "remove",
}
_INT_MAX = 2**31 - 1


def parse_max_time_ms(value: Any) -> int:
    """maxTimeMS as MongoDB's parseMaxTimeMS takes it: a number in [0, 2^31-1], integral (0: no
    limit). BadValue otherwise, in MongoDB's words."""
    if not is_number(value) or isinstance(value, bool):
        raise CommandError(ErrorCode.BadValue, "maxTimeMS must be a number")
    if type(value) is Decimal128:
        value = value.to_decimal()  # compared and truncated as a number, as mongod's
    try:
        whole = int(value)
    except (ValueError, OverflowError, decimal.InvalidOperation):  # NaN, infinities
        whole = 0 if value != value else (2**63 - 1 if value > 0 else -(2**63))
    whole = max(-(2**63), min(2**63 - 1, whole))  # mongod's safeNumberLong saturates
    if whole < 0 or whole > _INT_MAX:
        raise CommandError(
            ErrorCode.BadValue,
            f"{whole} value for maxTimeMS is out of range [0, {_INT_MAX}]",
        )
    if isinstance(value, float) and value != whole:
        raise CommandError(ErrorCode.BadValue, "maxTimeMS has non-integral value")
    return whole


class Operation(OpToken):
    """A request being run, and its token."""

    __slots__ = ("body", "client", "command", "db", "opid", "progress", "started")

    def __init__(
        self,
        opid: int,
        client: Client | None,
        db: str,
        command: str,
        body: Mapping[str, Any],
        deadline: float | None,
        pool: Pool = UNLIMITED,
        scripting: bool = True,
    ) -> None:
        # OpToken's fields, set here rather than through its __init__ (every request pays this).
        self.opid, self.client, self.db, self.command, self.body = opid, client, db, command, body
        self.started = time.monotonic()
        self.deadline, self.killed, self._left = deadline, None, CHECK_EVERY
        self.pool, self._memory, self.scripting = pool, None, scripting
        #: (meter name, done, total) of a long operation (an index build), or None.
        self.progress: tuple[str, int, int] | None = None

    @property
    def peak_memory(self) -> int:
        """The most memory this operation's stages held at once, tracked (0: none)."""
        memory = self._memory
        return 0 if memory is None else memory.peak

    def release_memory(self) -> None:
        """Give back to the server's pool all this operation's stages still hold (it failed: its
        stages' generators may be closed only later, when collected)."""
        if self._memory is not None:
            self._memory.close()

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None: no limit); what a cursor keeps for its next
        getMore, as MongoDB's leftover maxTime."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    @property
    def ns(self) -> str:
        if self.command == "getMore":
            return f"{self.db}.{self.body.get('collection', '')}"
        target = self.body.get(self.command) if self.command in self.body else None
        if isinstance(target, str) and target:
            return f"{self.db}.{target}"
        if self.command == "aggregate":
            return f"{self.db}.$cmd.aggregate"
        return f"{self.db}.$cmd"

    def report(self, host: str, now: float) -> dict[str, Any]:
        """This operation as currentOp shows it (MongoDB 7.0's fields, in its order)."""
        micros = int((now - self.started) * 1_000_000)
        client = self.client
        doc: dict[str, Any] = {"type": "op", "host": host}
        if client is not None:
            doc["desc"] = f"conn{client.id}"
            doc["connectionId"] = client.id
            doc["client"] = client.peer
            app = app_name(client.metadata)
            if app is not None:
                doc["appName"] = app
            if client.metadata is not None:
                doc["clientMetadata"] = client.metadata
        else:
            doc["desc"] = self.command
        doc["active"] = True
        doc["currentOpTime"] = (
            datetime.datetime.now().astimezone().isoformat(timespec="milliseconds")
        )
        doc["threaded"] = True
        doc["opid"] = self.opid
        if "lsid" in self.body:
            doc["lsid"] = self.body["lsid"]
        doc["secs_running"] = Int64(micros // 1_000_000)
        doc["microsecs_running"] = Int64(micros)
        doc["op"] = _OP_TYPES.get(self.command, "command")
        doc["ns"] = self.ns
        doc["redacted"] = False
        doc["command"] = loggable_command(self.body, MAX_LOGGED_COMMAND)
        progress = self.progress
        if progress is not None:  # mongod's CurOp message and its progress meter
            name, done, total = progress
            percent = done * 100 // total if total else 0
            doc["msg"] = f"{name} {name}: {done}/{total} {percent}%"
            doc["progress"] = {"done": done, "total": total}
        if self.killed is not None:
            doc["killPending"] = True
        doc["numYields"] = 0
        doc["locks"] = {}
        doc["waitingForLock"] = False
        doc["lockStats"] = {}
        doc["waitingForFlowControl"] = False
        doc["flowControlStats"] = {}
        return doc


class Operations:
    """The operations in progress. Used on the event loop only (tokens are read on any thread)."""

    def __init__(self, scripting: bool = True) -> None:
        self._ops: dict[int, Operation] = {}
        #: Whether operations may run server-side JavaScript (Config.scripting).
        self.scripting = scripting
        #: Tokens of the server's own work (the TTL monitor), interrupted at shutdown.
        self._internal: list[OpToken] = []
        self._ids = itertools.count(1)
        #: The server's memory for operations (its cap: ebbdbMaxTrackedMemoryBytes).
        self.pool = Pool()
        #: Set once shutdown interrupts everything: operations that start later are born killed.
        self.closing: str | None = None

    def __len__(self) -> int:
        return len(self._ops)

    def __iter__(self) -> Iterator[Operation]:
        return iter(list(self._ops.values()))

    def start(
        self,
        client: Client | None,
        db: str,
        command: str,
        body: Mapping[str, Any],
        max_time_ms: int = 0,
    ) -> Operation:
        deadline = time.monotonic() + max_time_ms / 1000 if max_time_ms else None
        op = Operation(
            next(self._ids), client, db, command, body, deadline, self.pool, self.scripting
        )
        if self.closing is not None:
            op.kill(self.closing)
        self._ops[op.opid] = op
        return op

    def ran(self) -> None:
        """An operation that began and ended in one turn of the loop, unseen by currentOp and
        killOp (the express path's, server/express.py): it takes its id, as `start` would."""
        next(self._ids)

    def finish(self, op: Operation) -> None:
        self._ops.pop(op.opid, None)

    def kill(self, opid: int) -> bool:
        op = self._ops.get(opid)
        if op is None:
            return False
        op.kill("Interrupted")
        return True

    def internal_token(self) -> OpToken:
        """A token for the server's own work, which only shutdown interrupts."""
        token = OpToken(pool=self.pool)
        self._internal.append(token)
        return token

    def kill_all(self, code_name: str = "InterruptedAtShutdown") -> int:
        """Interrupt every operation, and every one that starts from now on (shutdown);
        returns how many were running."""
        self.closing = code_name
        for token in self._internal:
            token.kill(code_name)
        for op in self._ops.values():
            op.kill(code_name)
        return len(self._ops)


__all__ = ["Operation", "Operations", "parse_max_time_ms"]
