"""Counters that serverStatus reports (opcounters, network, asserts, opLatencies, metrics), and the
latency table $collStats reports. Every counter is a plain int bumped on the event loop: the
request path pays an attribute increment or a dictionary update, never a lock or an allocation."""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass, field
from typing import Any

from ebbdb.server.latency import NamespaceLatency

# Commands counted under their own opcounter rather than "command".
_OPCOUNTER_OF = {
    "insert": None,
    "find": "query",
    "getMore": "getmore",
    "update": None,
    "delete": None,
}

#: MaxTimeMSExpired: an operation killed by its time limit (metrics.operation).
_MAX_TIME_MS_EXPIRED = 50
_COMMAND_NOT_FOUND = 59
#: opLatencies' kinds in NamespaceLatency.totals: transactions last.
_TRANSACTIONS = 3


@dataclass
class _Scan:
    """What a query run had examined and returned when it was last counted."""

    keys: int = 0
    docs: int = 0
    returned: int = 0


@dataclass
class ServerStats:
    started_monotonic: float = field(default_factory=time.monotonic)
    started_wall: float = field(default_factory=time.time)
    connections_current: int = 0
    connections_total: int = 0
    #: Connections refused at net.maxIncomingConnections (connections.rejected).
    connections_rejected: int = 0
    opcounters: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(
            ("insert", "query", "update", "delete", "getmore", "command"), 0
        )
    )
    #: Latency per namespace ($collStats' latencyStats) and for the whole server (opLatencies).
    latency: NamespaceLatency = field(default_factory=NamespaceLatency)
    #: Requests the express path answered, by command (server/express.py; serverStatus'
    #: ebbdb.expressPath).
    express: dict[str, int] = field(default_factory=dict)
    # network: what the connections read and wrote (server/connection.py), whole frames.
    bytes_in: int = 0
    bytes_out: int = 0
    requests: int = 0
    #: Commands run, and failed, by canonical name (metrics.commands); unknown names apart.
    commands: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    unknown_commands: int = 0
    #: User assertions (asserts.user): mongod counts each error it returns to a client.
    user_asserts: int = 0
    # metrics.document
    docs_deleted: int = 0
    docs_inserted: int = 0
    docs_returned: int = 0
    docs_updated: int = 0
    # metrics.queryExecutor and metrics.operation
    keys_scanned: int = 0
    docs_scanned: int = 0
    collection_scans: int = 0
    collection_scans_tailable: int = 0
    max_time_expired: int = 0
    #: The query runs (find, getMore) seen so far, with what was counted of each.
    _scans: weakref.WeakKeyDictionary[Any, _Scan] = field(default_factory=weakref.WeakKeyDictionary)
    #: The transactions whose end was timed.
    _transactions: weakref.WeakSet[Any] = field(default_factory=weakref.WeakSet)

    def count_command(self, name: str) -> None:
        """Count one command; write commands count their documents separately (count_documents)."""
        counter = _OPCOUNTER_OF.get(name, "command")
        if counter is not None:
            self.opcounters[counter] += 1
        commands = self.commands
        commands[name] = commands.get(name, 0) + 1

    def count_failure(self, name: str, code: Any) -> None:
        """A command that answered an error: a user assertion, and a failure of a command that
        ran (an unknown name counts as `<UNKNOWN>`)."""
        self.user_asserts += 1
        if code == _COMMAND_NOT_FOUND:
            self.unknown_commands += 1
        elif name in self.commands:
            self.failed[name] = self.failed.get(name, 0) + 1
        if code == _MAX_TIME_MS_EXPIRED:
            self.max_time_expired += 1

    def count_documents(self, op: str, n: int) -> None:
        self.opcounters[op] += n
        if op == "insert":
            self.docs_inserted += n
        elif op == "update":
            self.docs_updated += n
        else:
            self.docs_deleted += n

    def count_point_read(self, found: bool) -> None:
        """A find by _id the express path answered: mongod's IDHACK examines one key and one
        document when it finds one, none otherwise."""
        if found:
            self.docs_returned += 1
            self.keys_scanned += 1
            self.docs_scanned += 1

    def count_reply(
        self, reply: object, run: object, body: dict[str, Any], session: object = None
    ) -> None:
        """What a command answered: each of its write errors is a user assertion (mongod raises
        one per failed statement); a transaction ended by commitTransaction or abortTransaction
        (of `session`), timed from its start (opLatencies' transactions); and what the query run
        a find or getMore read with (`run`, None for other commands) has examined and returned
        since it was last counted (a cursor's run counts across its batches). A run seen for the
        first time with a collection scan is a collection scan (of a tailable cursor when the
        find asked for one)."""
        if isinstance(reply, dict):
            errors = reply.get("writeErrors")
            if errors:
                self.user_asserts += len(errors)
            if "txnNumber" in body and ("commitTransaction" in body or "abortTransaction" in body):
                self._count_transaction(reply, session)
        if run is None:
            return
        # (Duck-typed: the query engine is imported with the first query, not at start-up.)
        keys = getattr(run, "keys_examined", None)
        if keys is None:
            return  # a change stream's run
        seen = self._scans.get(run)
        if seen is None:
            seen = self._scans[run] = _Scan()
            if getattr(getattr(run, "plan", None), "stage", None) == "COLLSCAN":
                self.collection_scans += 1
                if body.get("tailable") is True:
                    self.collection_scans_tailable += 1
        docs, returned = getattr(run, "docs_examined", 0), getattr(run, "returned", 0)
        self.keys_scanned += keys - seen.keys
        self.docs_scanned += docs - seen.docs
        self.docs_returned += returned - seen.returned
        seen.keys, seen.docs, seen.returned = keys, docs, returned

    def _count_transaction(self, reply: dict[str, Any], session: object) -> None:
        """A transaction that ended: its time from its first statement, once (a retried commit
        answers again, and is not counted again)."""
        txn = getattr(session, "transaction", None)
        started = getattr(txn, "started", None)
        if reply.get("ok") != 1.0 or started is None or txn in self._transactions:
            return
        self._transactions.add(txn)
        total = self.latency.totals[_TRANSACTIONS]
        total[0] += int((time.monotonic() - started) * 1_000_000)
        total[1] += 1

    @property
    def uptime(self) -> float:
        return time.monotonic() - self.started_monotonic
