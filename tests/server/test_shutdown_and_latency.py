"""The server side of the commands tools call, without sockets: shutdown asks the listener to stop
(and only from this machine), and the latency table behind $collStats' latencyStats counts as
MongoDB's Top does, in MongoDB's histogram buckets."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest
from bson import Int64

from ebbdb.server.context import Client, Services
from ebbdb.server.dispatch import Dispatcher
from ebbdb.server.latency import BUCKETS, MAX_NAMESPACES, NamespaceLatency, bucket


class StoppingListener:
    """A listener that records shutdown requests."""

    host = "test:0"
    port = 0

    def __init__(self) -> None:
        self.requests: list[tuple[int, bool, float]] = []

    def active_connections(self) -> int:
        return 0

    def shutdown(self, requester: int, force: bool, timeout_secs: float) -> None:
        self.requests.append((requester, force, timeout_secs))


def _shutdown(services: Services, peer: str, body: dict[str, Any]) -> tuple[Any, StoppingListener]:
    listener = StoppingListener()
    services = dataclasses.replace(services, listener=listener)

    async def main() -> Any:
        run = Dispatcher(services).run(Client(5, peer), {**body, "$db": "admin"})
        try:
            return await asyncio.wait_for(run, 0.5)
        except TimeoutError:
            return "no reply"

    return asyncio.run(main()), listener


@pytest.mark.parametrize("peer", ["127.0.0.1:50000", "127.8.9.10:1", "::1:50000", ""])
def test_shutdown_from_this_machine_asks_the_listener_and_never_replies(
    services: Services, peer: str
) -> None:
    reply, listener = _shutdown(services, peer, {"shutdown": 1, "timeoutSecs": 3.7})
    assert reply == "no reply"
    assert listener.requests == [(5, False, 3.0)]
    reply, listener = _shutdown(services, peer, {"shutdown": 1, "force": True})
    assert listener.requests == [(5, True, 15.0)]


@pytest.mark.parametrize("peer", ["192.0.2.7:50000", "2001:db8::1:50000", "somehost:1"])
def test_shutdown_from_another_machine_is_unauthorized(services: Services, peer: str) -> None:
    reply, listener = _shutdown(services, peer, {"shutdown": 1})
    assert reply == {
        "ok": 0.0,
        "errmsg": "shutdown must run from localhost when running db without auth",
        "code": 13,
        "codeName": "Unauthorized",
    }
    assert listener.requests == []


def _bucket(micros: int) -> int:
    """MongoDB's OperationLatencyHistogram::_getBucket."""
    if micros == 0:
        return 0
    log2 = micros.bit_length() - 1
    if log2 < 11:
        return log2
    if log2 < 21:
        return log2 + (log2 - 11) + (1 if micros >= 3 << (log2 - 1) else 0)
    return min(log2 + 10, 50)


def test_histogram_buckets_are_mongodbs() -> None:
    assert len(BUCKETS) == 51
    assert BUCKETS[:14] == (0, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 3072, 4096)
    assert BUCKETS[-1] == 1 << 40
    edges = {b + d for b in BUCKETS for d in (-1, 0, 1)} | {1 << 42, 10**15}
    for micros in sorted(e for e in edges if e >= 0):
        assert bucket(micros) == _bucket(micros), micros


def _zero(histograms: bool = False) -> dict[str, Any]:
    return {**({"histogram": []} if histograms else {}), "latency": Int64(0), "ops": Int64(0)}


def test_latency_is_counted_per_namespace_and_kind() -> None:
    table = NamespaceLatency()
    start = time.perf_counter_ns()
    for name, body in [
        ("find", {"find": "c"}),
        ("getMore", {"getMore": Int64(1), "collection": "c"}),
        ("insert", {"insert": "c"}),
        ("createIndexes", {"createIndexes": "c"}),
        ("aggregate", {"aggregate": 1}),  # no collection
        ("ping", {"ping": 1}),  # not a collection's command
        ("find", {"find": "other"}),
    ]:
        table.record(name, "d", body, start)
    doc = table.document("d.c", False)
    assert list(doc) == ["reads", "writes", "commands", "transactions"]
    assert [doc[k]["ops"] for k in doc] == [2, 1, 1, 0]
    assert doc["transactions"] == _zero()
    assert table.document("d.other", False)["reads"]["ops"] == 1
    assert table.document("d.none", True) == {k: _zero(True) for k in doc}


def test_drop_rename_and_drop_database_forget_namespaces() -> None:
    table = NamespaceLatency()
    start = time.perf_counter_ns()
    for coll in ("a", "b", "c"):
        table.record("find", "d", {"find": coll}, start)
    table.record("find", "e", {"find": "a"}, start)
    table.record("drop", "d", {"drop": "a"}, start)
    table.record("renameCollection", "admin", {"renameCollection": "d.b", "to": "d.z"}, start)
    assert [table.document(f"d.{c}", False)["reads"]["ops"] for c in "abc"] == [0, 0, 1]
    table.record("dropDatabase", "d", {"dropDatabase": 1}, start)
    assert table.document("d.c", False)["reads"]["ops"] == 0
    assert table.document("e.a", False)["reads"]["ops"] == 1


def test_the_table_keeps_at_most_max_namespaces() -> None:
    table = NamespaceLatency()
    start = time.perf_counter_ns()
    for i in range(MAX_NAMESPACES + 5):
        table.record("find", "d", {"find": f"c{i}"}, start)
    assert table.document(f"d.c{MAX_NAMESPACES - 1}", False)["reads"]["ops"] == 1
    assert table.document(f"d.c{MAX_NAMESPACES}", False)["reads"]["ops"] == 0
