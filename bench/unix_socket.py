"""The Unix domain socket against TCP, on the same server in the same run.

    python bench/unix_socket.py [--quick] [--rounds N] [--ops N]

Starts ebbdb (a free port, a temporary dbpath; its socket is /tmp/ebbdb-<port>.sock) and measures,
on one connection each, over TCP (`mongodb://127.0.0.1:<port>`) and over the socket
(`mongodb://%2Ftmp%2Febbdb-<port>.sock`), alternating the two in every round:

- pymongo insert_one, and find_one by `_id`: operations a second;
- a bare client (raw OP_MSG `{ping: 1}` on a plain socket, one at a time, as bench/write.py's
  bare-socket rows do), where the transport is most of what is left;

and beside each the server's CPU time an operation (user + system, from /proc/<pid>/stat, Linux),
which a machine busy with other work disturbs less than the wall clock. Both paths are warmed up
before anything is timed.

Each figure is the median of --rounds rounds (default 3; --quick: 1 round of fewer operations).
The targets table (common.report_goals) gives socket / TCP for each: the socket must be at least
as fast (>= 1.00). The script is named unix_socket.py, not socket.py: run as a file, its folder
comes first on sys.path and a socket.py there would stand in for the standard library's.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import common
from bson import ObjectId
from pymongo import MongoClient

Doc = dict[str, Any]


#: The server process whose CPU time is read (/proc/<pid>/stat; Linux), set by main.
_server_pid = 0
#: Server CPU microseconds an operation, per (row, transport), filled by _ops_per_second.
_cpu: dict[str, list[float]] = {}


def _server_cpu_seconds() -> float | None:
    """The server's user + system CPU time, where /proc tells it."""
    try:
        with open(f"/proc/{_server_pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _ops_per_second(n: int, fn: Callable[[int], object], key: str = "") -> float:
    cpu = _server_cpu_seconds()
    start = time.perf_counter()
    for i in range(n):
        fn(i)
    rate = n / (time.perf_counter() - start)
    after = _server_cpu_seconds()
    if key and cpu is not None and after is not None:
        _cpu.setdefault(key, []).append((after - cpu) / n * 1e6)
    return rate


def _pymongo_rounds(client: MongoClient[Doc], label: str, n: int) -> dict[str, float]:
    coll = client.bench[f"socket_{label}"]
    coll.drop()
    ids = [ObjectId() for _ in range(n)]
    insert = _ops_per_second(
        n,
        lambda i: coll.insert_one({"_id": ids[i], "i": i, "pad": "x" * 64}),
        f"insert_one {label}",
    )
    find = _ops_per_second(n, lambda i: coll.find_one({"_id": ids[i]}), f"find_one by _id {label}")
    coll.drop()
    return {"insert_one": insert, "find_one by _id": find}


def _bare_pings(sock: socket.socket, n: int, label: str = "") -> float:
    ping = common.op_msg({"ping": 1, "$db": "admin"})

    def one(_i: int) -> None:
        sock.sendall(ping)
        common.read_message(sock)

    return _ops_per_second(n, one, f"bare ping {label}" if label else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round, fewer ops")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--ops", type=int, default=None, help="operations a row and round")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    n = args.ops or (300 if args.quick else 3000)
    if not hasattr(socket, "AF_UNIX"):
        print("no Unix domain sockets on this system: nothing to compare")
        return 0
    print(f"unix_socket.py: {common.versions()}; {rounds} rounds of {n:,} operations a row")
    with contextlib.ExitStack() as stack:
        spawned = common.spawn_ebbdb(stack)
        port = int(spawned.uri.rsplit(":", 1)[1])
        path = f"/tmp/ebbdb-{port}.sock"
        if not os.path.exists(path):
            print(f"ebbdb made no socket at {path}", file=sys.stderr)
            return 1
        uris = {
            "TCP": f"mongodb://127.0.0.1:{port}/?directConnection=true",
            "socket": f"mongodb://{path.replace('/', '%2F')}/?directConnection=true",
        }
        clients: dict[str, MongoClient[Doc]] = {
            k: MongoClient(u, maxPoolSize=1) for k, u in uris.items()
        }
        for c in clients.values():
            stack.callback(c.close)
            c.admin.command("ping")
        raw = {
            "TCP": socket.create_connection(("127.0.0.1", port)),
            "socket": socket.socket(socket.AF_UNIX, socket.SOCK_STREAM),
        }
        raw["socket"].connect(path)
        raw["TCP"].setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for s in raw.values():
            stack.callback(s.close)
        global _server_pid
        _server_pid = spawned.proc.pid
        for how in ("TCP", "socket"):  # warm up both paths before anything is timed
            _pymongo_rounds(clients[how], how, max(100, n // 10))
            _bare_pings(raw[how], max(100, n // 10))
        _cpu.clear()
        results: dict[tuple[str, str], list[float]] = {}
        for r in range(rounds):
            order = ("TCP", "socket") if r % 2 == 0 else ("socket", "TCP")
            for how in order:
                for row, value in _pymongo_rounds(clients[how], how, n).items():
                    results.setdefault((row, how), []).append(value)
                results.setdefault(("bare ping", how), []).append(_bare_pings(raw[how], n, how))
        rows = []
        goals = []
        for row in ("insert_one", "find_one by _id", "bare ping"):
            tcp = statistics.median(results[(row, "TCP")])
            unix = statistics.median(results[(row, "socket")])
            ratio = unix / tcp
            cpu = [
                common.fmt_num(statistics.median(_cpu[k]), 1) if _cpu.get(k) else "-"
                for k in (f"{row} TCP", f"{row} socket")
            ]
            rows.append([row, common.fmt_num(tcp), common.fmt_num(unix), f"{ratio:.2f}", *cpu])
            goals.append(common.Goal(f"{row}: socket / TCP", ratio, ">=", 1.0, "x"))
        print()
        header = ["ops/s, one connection", "TCP", "socket", "socket / TCP"]
        header += ["server CPU us/op, TCP", "socket"]
        common.table(header, rows, left=1)
        common.report_goals("unix_socket.py", goals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
