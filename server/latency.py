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
#: Namespaces kept at most: a client naming ever new collections cannot grow the table for ever.
MAX_NAMESPACES = 10_000


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

    def record(self, name: str, db: str, body: Mapping[str, Any], started_ns: int) -> None:
        """Count command `name` (its canonical name), sent as `body` to `db`, that started at
        `started_ns` (time.perf_counter_ns) and has just ended. Runs for every command: the
        common cases cost a few dictionary look-ups."""
        kind = _KINDS.get(name)
        if kind is None:
            if name in _FORGET:
                self._forget(name, db, body)
            return
        coll = body.get("collection") if name == "getMore" else next(iter(body.values()), None)
        if type(coll) is not str or not coll:
            return  # {aggregate: 1}, or a malformed command
        micros = (time.perf_counter_ns() - started_ns) // 1000
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
