"""serverStatus for monitoring tools (issue 25 item 4): mongod 7.0's sections, fields and BSON types
(asserts, connections, network, opLatencies, opcounters, mem, metrics), counted exactly for the
operations a test makes, the same on the express path as on the general one; mongostat's rates
from two samples over a raw socket, to the byte; hostInfo and buildInfo complete."""

from __future__ import annotations

import dataclasses
import datetime
import json
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import bson
import pytest
from bson import Int64
from pymongo import MongoClient
from pymongo.errors import ExecutionTimeout, OperationFailure

from ebbdb.protocol import encode_msg
from ebbdb.server.embedded import ServerThread
from ebbdb.storage.core import portability
from tests.e2e import rawwire
from tests.e2e.node_tools import run_mongosh
from tests.helpers import slow_filter
from tests.waiting import wait_until

Client = MongoClient[dict[str, Any]]

CONNECTION_FIELDS = [
    "current",
    "available",
    "totalCreated",
    "rejected",
    "active",
    "threaded",
    "exhaustIsMaster",
    "exhaustHello",
    "awaitingTopologyChanges",
    "loadBalanced",
]
NETWORK_COUNTERS = [
    "bytesIn",
    "bytesOut",
    "physicalBytesIn",
    "physicalBytesOut",
    "numSlowDNSOperations",
    "numSlowSSLOperations",
    "numRequests",
]


def test_sections_fields_and_bson_types(client: Client) -> None:
    s = client.admin.command("serverStatus")
    assert type(s["host"]) is str and s["host"].endswith(f":{client.address[1]}")
    assert (s["version"], s["process"]) == ("7.0.0", "mongod")
    assert type(s["pid"]) is Int64
    assert type(s["uptime"]) is float and s["uptime"] == int(s["uptime"])  # whole seconds
    assert type(s["uptimeMillis"]) is Int64 and type(s["uptimeEstimate"]) is Int64
    assert s["uptimeMillis"] // 1000 in (int(s["uptime"]), int(s["uptime"]) + 1)
    assert type(s["localTime"]) is datetime.datetime
    # Int32 counters, as mongod appends them.
    assert list(s["asserts"]) == ["regular", "warning", "msg", "user", "tripwire", "rollovers"]
    assert {type(v) for v in s["asserts"].values()} == {int}
    assert list(s["connections"]) == CONNECTION_FIELDS
    assert {type(v) for v in s["connections"].values()} == {int}
    lock = s["globalLock"]
    assert type(lock["totalTime"]) is Int64
    assert lock["currentQueue"] == {"total": 0, "readers": 0, "writers": 0}
    assert lock["activeClients"] == {"total": 0, "readers": 0, "writers": 0}  # none but this
    assert list(s["network"]) == [*NETWORK_COUNTERS, "tcpFastOpen", "serviceExecutors"]
    assert {type(s["network"][k]) for k in NETWORK_COUNTERS} == {Int64}
    assert s["network"]["tcpFastOpen"] == {
        "serverSupported": False,
        "clientSupported": False,
        "accepted": Int64(0),
    }
    executor = s["network"]["serviceExecutors"]["passthrough"]
    assert list(executor) == [
        "threadsRunning",
        "clientsInTotal",
        "clientsRunning",
        "clientsWaitingForData",
    ]
    assert list(s["opLatencies"]) == ["reads", "writes", "commands", "transactions"]
    for kind in s["opLatencies"].values():
        assert list(kind) == ["latency", "ops", "queryableEncryptionLatencyMicros"]
        assert {type(v) for v in kind.values()} == {Int64}
    assert {type(v) for v in s["opcounters"].values()} == {Int64}
    assert s["opcountersRepl"] == dict.fromkeys(
        ["insert", "query", "update", "delete", "getmore", "command"], Int64(0)
    )
    mem = s["mem"]
    assert list(mem) == ["bits", "resident", "virtual", "supported"]
    assert (mem["bits"], mem["supported"]) == (64, True)
    assert type(mem["resident"]) is int and 0 < mem["resident"] <= mem["virtual"]
    metrics = s["metrics"]
    assert list(metrics) == ["commands", "cursor", "document", "operation", "queryExecutor", "ttl"]
    assert list(metrics["document"]) == ["deleted", "inserted", "returned", "updated"]
    assert list(metrics["queryExecutor"]) == ["collectionScans", "scanned", "scannedObjects"]
    assert list(metrics["queryExecutor"]["collectionScans"]) == ["nonTailable", "total"]
    assert "killedDueToMaxTimeMSExpired" in metrics["operation"]
    assert {type(v) for v in metrics["operation"].values()} == {Int64}
    commands = metrics["commands"]
    # Every command the server has, those never run too, in name order, `<UNKNOWN>` first.
    assert list(commands) == sorted(commands) and next(iter(commands)) == "<UNKNOWN>"
    assert type(commands["<UNKNOWN>"]) is Int64
    # Every command is listed, run or not (the session's server is shared: other tests' runs
    # count), and a failure is a run that failed.
    entry = commands["dropIndexes"]
    assert list(entry) == ["failed", "total"] and all(type(v) is Int64 for v in entry.values())
    over = {n: c for n, c in commands.items() if isinstance(c, dict) and c["failed"] > c["total"]}
    assert over == {}
    assert commands["serverStatus"]["total"] >= 1
    # What others add to ebbdb's own sub-document stays there.
    assert {"version", "writes", "expressPath"} <= set(s["ebbdb"])


def test_a_section_given_as_zero_is_left_out(client: Client) -> None:
    s = client.admin.command({"serverStatus": 1, "metrics": 0, "mem": False, "repl": 0})
    assert "metrics" not in s and "mem" not in s
    assert {"asserts", "connections", "network", "opcounters"} <= set(s)


def _sample(client: Client) -> dict[str, Any]:
    s = client.admin.command("serverStatus")
    m = s["metrics"]
    return {
        "user": s["asserts"]["user"],
        "document": dict(m["document"]),
        "scanned": m["queryExecutor"]["scanned"],
        "scannedObjects": m["queryExecutor"]["scannedObjects"],
        "collectionScans": m["queryExecutor"]["collectionScans"]["total"],
        "find": dict(m["commands"]["find"]),
        "insert": dict(m["commands"]["insert"]),
        "unknown": m["commands"]["<UNKNOWN>"],
        "reads": s["opLatencies"]["reads"]["ops"],
        "writes": s["opLatencies"]["writes"]["ops"],
        "maxTime": m["operation"]["killedDueToMaxTimeMSExpired"],
    }


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in after.items():
        if isinstance(value, dict):
            out[key] = {k: value[k] - before[key][k] for k in value}
        else:
            out[key] = value - before[key]
    return out


@pytest.mark.parametrize("express", [True, False], ids=["express", "general"])
def test_counts_are_exact_on_either_path(client: Client, express: bool) -> None:
    client.admin.command("setParameter", 1, ebbdbExpressPath=express)
    coll = client.stats_counts.items
    coll.insert_one({"_id": 0, "a": 0})  # the collection exists: the express path may take it
    before = _sample(client)
    coll.insert_many([{"_id": 1, "a": 1}, {"_id": 2, "a": 2}, {"_id": 3, "a": 3}])
    assert len(list(coll.find({"a": {"$gt": 1}}))) == 2  # a collection scan of 4 documents
    assert coll.find_one({"_id": 2}) == {"_id": 2, "a": 2}  # one key, one document
    assert coll.find_one({"_id": 99}) is None  # nothing examined
    assert coll.update_one({"_id": 1}, {"$set": {"b": 1}}).modified_count == 1
    assert coll.delete_many({"a": {"$gte": 2}}).deleted_count == 2
    with pytest.raises(OperationFailure) as unknown:
        client.stats_counts.command("noSuchCommand")
    assert unknown.value.code == 59
    with pytest.raises(OperationFailure) as bad:
        list(coll.find({"$bad": 1}))
    assert bad.value.code == 2
    duplicate = client.stats_counts.command("insert", "items", documents=[{"_id": 1}, {"_id": 1}])
    assert [e["code"] for e in duplicate["writeErrors"]] == [11000]
    after = _sample(client)
    assert _delta(before, after) == {
        # The unknown command, the bad filter, the duplicate key: errors answered, a command's or
        # a statement's.
        "user": 3,
        "document": {"deleted": 2, "inserted": 3, "returned": 3, "updated": 1},
        "scanned": 1,
        "scannedObjects": 5,
        "collectionScans": 1,
        "find": {"failed": 1, "total": 4},
        "insert": {"failed": 0, "total": 2},
        "unknown": 1,
        "reads": 4,
        "writes": 4,
        "maxTime": 0,
    }


def test_operations_killed_by_max_time_ms_are_counted(client: Client) -> None:
    coll = client.stats_counts.slow
    coll.insert_one({"n": 1})
    before = client.admin.command("serverStatus")
    with pytest.raises(ExecutionTimeout) as info:
        list(coll.find(slow_filter()).max_time_ms(50))
    assert info.value.code == 50
    after = client.admin.command("serverStatus")
    killed = "killedDueToMaxTimeMSExpired"
    assert after["metrics"]["operation"][killed] - before["metrics"]["operation"][killed] == 1
    assert after["asserts"]["user"] - before["asserts"]["user"] == 1


# --- mongostat's rates from two samples, on a server no other client talks to -------------------


def _request(sock: socket.socket, body: dict[str, Any]) -> tuple[int, int, dict[str, Any]]:
    """Send `body` as one OP_MSG; (request bytes, reply bytes, reply body)."""
    rid = rawwire.next_request_id()
    frame = encode_msg(rid, 0, bson.encode(body))
    sock.sendall(frame)
    reply = rawwire.read_frame(sock)
    message = rawwire.decode_message(reply)
    return len(frame), len(reply), bson.decode(message.body)  # type: ignore[union-attr]


@dataclasses.dataclass
class Stat:
    """One mongostat line's raw figures: counters, bytes and when."""

    opcounters: dict[str, int]
    net_in: int
    net_out: int
    requests: int
    conn: int
    res_mb: int
    millis: int
    reads: int
    writes: int
    commands: int


def _stat(s: dict[str, Any]) -> Stat:
    return Stat(
        dict(s["opcounters"]),
        s["network"]["bytesIn"],
        s["network"]["bytesOut"],
        s["network"]["numRequests"],
        s["connections"]["current"],
        s["mem"]["resident"],
        s["uptimeMillis"],
        s["opLatencies"]["reads"]["ops"],
        s["opLatencies"]["writes"]["ops"],
        s["opLatencies"]["commands"]["ops"],
    )


def test_mongostat_rates_from_two_samples(start_server: Callable[..., ServerThread]) -> None:
    srv = start_server()
    sock = rawwire.connect(srv)
    db = {"$db": "stat"}
    _request(sock, {"insert": "c", "documents": [{"_id": 0}], **db})  # creates the collection
    sent_first, got_first, first = _request(sock, {"serverStatus": 1, "$db": "admin"})
    sent = got = 0
    inserts = [{"insert": "c", "documents": [{"_id": i, "x": "y" * i}], **db} for i in (1, 2, 3)]
    inserts.append({"insert": "c", "documents": [{"_id": 10 + i} for i in range(5)], **db})
    finds = [{"find": "c", "filter": {"_id": i}, **db} for i in (1, 2)]
    finds.append({"find": "c", "filter": {}, "batchSize": 2, **db})
    commands = [{"ping": 1, **db}]
    for body in [*inserts, *finds, *commands]:
        n_in, n_out, reply = _request(sock, body)
        assert reply["ok"] == 1.0
        sent += n_in
        got += n_out
    n_in, n_out, reply = _request(sock, finds[-1])  # a cursor, for a getMore
    sent, got = sent + n_in, got + n_out
    cursor_id = reply["cursor"]["id"]
    n_in, n_out, reply = _request(sock, {"getMore": cursor_id, "collection": "c", **db})
    sent, got = sent + n_in, got + n_out
    sent_second, _, second = _request(sock, {"serverStatus": 1, "$db": "admin"})
    a, b = _stat(first), _stat(second)
    # What mongostat prints per second: each counter's change over the time between the samples.
    seconds = (b.millis - a.millis) / 1000
    assert seconds > 0
    rates = {
        "insert": (b.opcounters["insert"] - a.opcounters["insert"]) / seconds,
        "query": (b.opcounters["query"] - a.opcounters["query"]) / seconds,
        "getmore": (b.opcounters["getmore"] - a.opcounters["getmore"]) / seconds,
        "command": (b.opcounters["command"] - a.opcounters["command"]) / seconds,
        "netIn": (b.net_in - a.net_in) / seconds,
        "netOut": (b.net_out - a.net_out) / seconds,
    }
    # Exactly what this socket did between them: 8 documents inserted, 4 queries, 1 getMore, the
    # ping and the second serverStatus (counted as it starts); bytes to the byte: every request
    # after the first sample and the second sample's own, every reply from the first sample's on.
    assert rates == {
        "insert": 8 / seconds,
        "query": 4 / seconds,
        "getmore": 1 / seconds,
        "command": 2 / seconds,
        "netIn": (sent + sent_second) / seconds,
        "netOut": (got_first + got) / seconds,
    }
    assert b.requests - a.requests == len(inserts) + len(finds) + len(commands) + 2 + 1
    # opLatencies: a command is timed once it answers, so the first sample's serverStatus is in
    # the second sample, and the second's is not yet.
    assert (b.reads - a.reads, b.writes - a.writes, b.commands - a.commands) == (5, 4, 2)
    assert (a.conn, b.conn) == (1, 1)
    assert a.res_mb > 0 and b.res_mb > 0
    sock.close()


def test_connections_refused_at_the_limit_are_rejected(tmp_path: Any) -> None:
    srv = ServerThread(str(tmp_path / "data"))
    srv.config = dataclasses.replace(srv.config, max_connections=1)
    srv.start()
    try:
        first = rawwire.connect(srv)
        refused = rawwire.connect(srv)
        with pytest.raises((ConnectionError, AssertionError, OSError)):
            rawwire.op_msg(refused, {"ping": 1, "$db": "admin"})
        refused.close()
        status = rawwire.op_msg(first, {"serverStatus": 1, "$db": "admin"})
        connections = status["connections"]
        assert (connections["current"], connections["rejected"]) == (1, 1)
        assert connections["totalCreated"] == 1
        assert connections["available"] == 0
        first.close()
    finally:
        srv.stop()


# --- hostInfo and buildInfo ---------------------------------------------------------------------


def test_host_info_is_complete(client: Client) -> None:
    info = client.admin.command("hostInfo")
    system = info["system"]
    assert list(system) == [
        "currentTime",
        "hostname",
        "cpuAddrSize",
        "memSizeMB",
        "memLimitMB",
        "numCores",
        "numPhysicalCores",
        "numCpuSockets",
        "cpuArch",
        "numaEnabled",
        "numNumaNodes",
    ]
    assert type(system["currentTime"]) is datetime.datetime
    assert system["hostname"].endswith(f":{client.address[1]}")  # mongod's name:port
    assert system["cpuAddrSize"] == 64
    assert type(system["memSizeMB"]) is Int64 and system["memSizeMB"] > 0
    assert {type(system[k]) for k in ("numCores", "numPhysicalCores", "numCpuSockets")} == {int}
    assert 1 <= system["numPhysicalCores"] <= system["numCores"]
    assert list(info["os"]) == ["type", "name", "version"]
    extra = info["extra"]
    assert type(extra["pageSize"]) is Int64 and type(extra["numPages"]) is int
    assert extra["numPages"] * extra["pageSize"] // (1024 * 1024) == system["memSizeMB"]
    assert {"versionString", "kernelVersion", "maxOpenFiles", "physicalCores"} <= set(extra)


def test_build_info_is_complete(client: Client) -> None:
    info = client.admin.command("buildInfo")
    assert list(info)[:9] == [
        "version",
        "gitVersion",
        "modules",
        "allocator",
        "javascriptEngine",
        "sysInfo",
        "versionArray",
        "openssl",
        "buildEnvironment",
    ]
    assert info["versionArray"] == [7, 0, 0, 0]
    assert set(info["openssl"]) == {"running", "compiled"}
    assert list(info["buildEnvironment"]) == [
        "distmod",
        "distarch",
        "cc",
        "ccflags",
        "cxx",
        "cxxflags",
        "linkflags",
        "target_arch",
        "target_os",
        "cppdefines",
    ]
    assert (info["bits"], info["debug"], info["maxBsonObjectSize"]) == (64, False, 16 * 1024**2)


# --- mongosh ------------------------------------------------------------------------------------

SHELL_STATUS = """
const s = db.serverStatus();
const shown = {};
for (const k of ['host', 'version', 'process', 'pid', 'uptime', 'uptimeMillis', 'localTime',
                 'asserts', 'connections', 'network', 'opLatencies', 'opcounters', 'mem']) {
  shown[k] = s[k];
}
shown.metrics = {
  document: s.metrics.document, queryExecutor: s.metrics.queryExecutor,
  find: s.metrics.commands.find, cursor: s.metrics.cursor, ttl: s.metrics.ttl,
  operation: Object.keys(s.metrics.operation),
};
print(EJSON.stringify(shown, { relaxed: false }));
"""


def _bson_type(value: Any) -> Any:
    """Canonical Extended JSON's type of each value (its wrapper's key), the same shape."""
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)).startswith("$"):
            return next(iter(value))
        return {k: _bson_type(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_bson_type(v) for v in value]
    return type(value).__name__


def test_mongosh_server_status_shows_the_sections(client: Client, uri: str, tmp_path: Any) -> None:
    client.stats_shell.c.insert_many([{"_id": i} for i in range(3)])
    assert len(list(client.stats_shell.c.find())) == 3
    shown = json.loads(run_mongosh(uri, SHELL_STATUS, tmp_path)[-1])
    types = _bson_type(shown)
    assert types["host"] == "str" and types["process"] == "str"
    # (mongosh turns a double and an int32 alike into a JavaScript number: EJSON writes a whole
    # one as $numberInt. Longs keep their type; test_sections_fields_and_bson_types has the rest.)
    assert (types["pid"], types["uptime"], types["uptimeMillis"]) == (
        "$numberLong",
        "$numberInt",
        "$numberLong",
    )
    assert types["localTime"] == "$date"
    assert types["asserts"] == dict.fromkeys(
        ["regular", "warning", "msg", "user", "tripwire", "rollovers"], "$numberInt"
    )
    assert types["connections"] == dict.fromkeys(CONNECTION_FIELDS, "$numberInt")
    network = types["network"]
    assert {network[k] for k in NETWORK_COUNTERS} == {"$numberLong"}
    assert types["opLatencies"]["reads"] == {
        "latency": "$numberLong",
        "ops": "$numberLong",
        "queryableEncryptionLatencyMicros": "$numberLong",
    }
    assert set(types["opcounters"].values()) == {"$numberLong"}
    assert types["mem"] == {
        "bits": "$numberInt",
        "resident": "$numberInt",
        "virtual": "$numberInt",
        "supported": "bool",
    }
    metrics = shown["metrics"]
    assert int(metrics["document"]["returned"]["$numberLong"]) >= 3
    assert types["metrics"]["find"] == {"failed": "$numberLong", "total": "$numberLong"}
    assert "killedDueToMaxTimeMSExpired" in metrics["operation"]
    assert set(types["metrics"]["queryExecutor"]) == {
        "collectionScans",
        "scanned",
        "scannedObjects",
    }


def test_mem_where_the_process_memory_is_unknown(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A system where storage/core/portability.py cannot read it: `supported: false`, as mongod."""
    monkeypatch.setattr(portability, "process_memory", lambda: None)
    assert client.admin.command("serverStatus")["mem"] == {
        "bits": 64,
        "note": "not all mem info support on this platform",
        "supported": False,
    }


def test_transactions_are_timed_when_they_end(start_server: Callable[..., ServerThread]) -> None:
    srv = start_server(repl_set="rs0")
    with MongoClient(srv.uri) as client:
        coll = client.stat_txn.items
        coll.insert_one({"_id": 0})

        def transactions() -> dict[str, Any]:
            status = client.admin.command("serverStatus")
            commits = status["metrics"]["commands"]["commitTransaction"]["total"]
            return {**status["opLatencies"]["transactions"], "commits": commits}

        before = transactions()
        with client.start_session() as session:
            session.start_transaction()
            coll.insert_one({"_id": 1}, session=session)
            time.sleep(0.05)
            session.commit_transaction()
            # The commit again (as a driver's retry sends it): answered, not counted twice.
            session.commit_transaction()
            session.start_transaction()
            coll.insert_one({"_id": 2}, session=session)
            session.abort_transaction()
        after = transactions()
        assert after["commits"] - before["commits"] == 2
        assert after["ops"] - before["ops"] == 2
        assert after["latency"] - before["latency"] >= 50_000  # the first one's sleep, at least
        assert coll.count_documents({}) == 2


def _active_readers(client: Client) -> Callable[[], dict[str, Any] | None]:
    def probe() -> dict[str, Any] | None:
        active: dict[str, Any] = client.admin.command("serverStatus")["globalLock"]["activeClients"]
        return active if active["readers"] else None

    return probe


def test_a_running_read_is_an_active_client(client: Client) -> None:
    coll = client.stats_counts.active
    coll.insert_one({"n": 1})
    failures: list[BaseException] = []

    def slow_read() -> None:
        try:
            list(coll.find(slow_filter()).comment("status-active"))
        except OperationFailure as exc:
            failures.append(exc)

    reader = threading.Thread(target=slow_read)
    reader.start()
    try:
        active = wait_until(_active_readers(client), "the slow find among the active clients")
        assert active == {"total": 1, "readers": 1, "writers": 0}
    finally:
        ops = client.admin.aggregate(
            [{"$currentOp": {}}, {"$match": {"command.comment": "status-active"}}]
        )
        for op in ops:
            client.admin.command("killOp", op=op["opid"])
        reader.join()
    assert [getattr(f, "code", None) for f in failures] == [11601]  # Interrupted
