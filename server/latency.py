"""Operation latency per namespace, as MongoDB's Top keeps it for $collStats' `latencyStats`: reads,
writes and other commands on each collection, with their total time, count and a histogram in
MongoDB's buckets. The dispatcher records every command it runs; `Facts` hands the figures (and
the server's address) to the aggregation stages that report them."""

from __future__ import annotations

import bisect
import time
from collections.abc import Mapping
from typing import Any, Protocol

from bson import Int64

#: The kinds of operation latencyStats reports, in its order.
_ORDER = ("reads", "writes", "commands", "transactions")
_READ, _WRITE, _COMMAND = 0, 1, 2
#: What MongoDB counts as a read or a write (its commands' ReadWriteType); the other commands on
#: a collection that count are `commands`.
_KINDS = {
    **dict.fromkeys(("find", "getMore", "aggregate", "count", "distinct"), _READ),
    **dict.fromkeys(("insert", "update", "delete", "findAndModify"), _WRITE),
    **dict.fromkeys(
        (
            "create",
            "createIndexes",
            "dropIndexes",
            "listIndexes",
            "collMod",
            "collStats",
            "validate",
        ),
        _COMMAND,
    ),
}
#: Commands after which figures start again (MongoDB's Top forgets a dropped collection, and a
#: renamed one under its old name).
_FORGET = frozenset({"drop", "renameCollection", "dropDatabase"})
#: The handshake commands a client may ask to wait (maxAwaitTimeMS) for a topology change.
_AWAITABLE = frozenset({"hello", "isMaster", "ismaster"})
#: Namespaces kept at most: a client naming ever new collections cannot grow the table for ever.
MAX_NAMESPACES = 10_000


def is_read(name: str) -> bool:
    """Command `name` reads (MongoDB's ReadWriteType kRead)."""
    return _KINDS.get(name) == _READ


def is_write(name: str) -> bool:
    """Command `name` writes (MongoDB's ReadWriteType kWrite)."""
    return _KINDS.get(name) == _WRITE


def _bucket_bounds() -> tuple[int, ...]:
    """MongoDB's histogram buckets (inclusive lower bounds, microseconds): 0, then powers of two,
    with half steps between 2^11 and 2^21, up to 2^40."""
    bounds = [0, *(1 << k for k in range(1, 11))]
    for k in range(11, 21):
        bounds += [1 << k, 3 << (k - 1)]
    bounds += [1 << k for k in range(21, 41)]
    return tuple(bounds)


BUCKETS = _bucket_bounds()


def bucket(micros: int) -> int:
    """The histogram bucket of a latency: the last whose lower bound it reaches."""
    return bisect.bisect_right(BUCKETS, micros) - 1


class _Histogram:
    __slots__ = ("counts", "micros", "ops")

    def __init__(self) -> None:
        self.micros = 0
        self.ops = 0
        self.counts = [0] * len(BUCKETS)

    def add(self, micros: int) -> None:
        self.micros += micros
        self.ops += 1
        self.counts[bisect.bisect_right(BUCKETS, micros) - 1] += 1

    def document(self, histograms: bool) -> dict[str, Any]:
        doc: dict[str, Any] = {}
        if histograms:
            doc["histogram"] = [
                {"micros": Int64(BUCKETS[i]), "count": Int64(n)}
                for i, n in enumerate(self.counts)
                if n
            ]
        doc["latency"] = Int64(self.micros)
        doc["ops"] = Int64(self.ops)
        return doc


_Row = list["_Histogram | None"]


class NamespaceLatency:
    """The latency table, written on the event loop. The aggregation stages read it from reader
    threads: one namespace's figures at a time, which may be one operation behind."""

    def __init__(self) -> None:
        #: (database, collection) -> one histogram per kind (None until an operation of it ran).
        self._table: dict[tuple[str, str], _Row] = {}
        #: The whole server's [microseconds, operations] per kind (transactions: ServerStats
        #: counts those that end).
        self.totals: list[list[int]] = [[0, 0] for _ in _ORDER]

    def record(self, name: str, db: str, body: Mapping[str, Any], started_ns: int) -> None:
        """Count command `name` (its canonical name), sent as `body` to `db`, that started at
        `started_ns` (time.perf_counter_ns) and has just ended: in the server's totals
        (serverStatus' opLatencies) and, for a command on a collection, in its namespace's
        figures. Runs for every command: the common cases cost a few dictionary look-ups."""
        micros = (time.perf_counter_ns() - started_ns) // 1000
        kind = _KINDS.get(name)
        total = self.totals[_COMMAND if kind is None else kind]
        total[1] += 1
        if kind is None:
            # An awaitable hello waits for a topology change by design: mongod pauses the
            # operation's timer meanwhile, so it counts as an operation of no time at all.
            if name not in _AWAITABLE or "maxAwaitTimeMS" not in body:
                total[0] += micros
            if name in _FORGET:
                self._forget(name, db, body)
            return
        total[0] += micros
        coll = body.get("collection") if name == "getMore" else next(iter(body.values()), None)
        if type(coll) is not str or not coll:
            return  # {aggregate: 1}, or a malformed command
        row = self._table.get((db, coll))
        if row is None:
            if len(self._table) >= MAX_NAMESPACES:
                return
            row = self._table[db, coll] = [None] * len(_ORDER)
        histogram = row[kind]
        if histogram is None:
            histogram = row[kind] = _Histogram()
        histogram.add(micros)

    def _forget(self, name: str, db: str, body: Mapping[str, Any]) -> None:
        target = next(iter(body.values()), None)
        if name == "dropDatabase":
            for key in [key for key in self._table if key[0] == db]:
                del self._table[key]
        elif name == "renameCollection" and isinstance(target, str):
            source_db, _, source = target.partition(".")
            self._table.pop((source_db, source), None)
        elif name == "drop" and isinstance(target, str):
            self._table.pop((db, target), None)

    def server_document(self) -> dict[str, Any]:
        """serverStatus' `opLatencies`: each kind's total microseconds and operations (and
        queryableEncryptionLatencyMicros, always 0: ebbdb has no Queryable Encryption)."""
        return {
            kind: {
                "latency": Int64(micros),
                "ops": Int64(ops),
                "queryableEncryptionLatencyMicros": Int64(0),
            }
            for kind, (micros, ops) in zip(_ORDER, self.totals)
        }

    def document(self, ns: str, histograms: bool) -> dict[str, Any]:
        """MongoDB's `latencyStats` for a namespace: reads, writes, commands and transactions
        (ebbdb has none), each {histogram?, latency, ops}."""
        db, _, coll = ns.partition(".")
        row = self._table.get((db, coll)) or [None] * len(_ORDER)
        return {
            kind: (histogram or _Histogram()).document(histograms)
            for kind, histogram in zip(_ORDER, row)
        }


class _Addressed(Protocol):
    @property
    def host(self) -> str: ...


class Facts:
    """What the server tells $collStats and $indexStats (storage.aggregate.ServerFacts): its
    `host:port` (from the listener) and the latency table."""

    __slots__ = ("_latency", "_listener")

    def __init__(self, listener: _Addressed, latency: NamespaceLatency) -> None:
        self._listener = listener
        self._latency = latency

    @property
    def host(self) -> str:
        return self._listener.host

    def latency_stats(self, ns: str, histograms: bool) -> dict[str, Any]:
        return self._latency.document(ns, histograms)
