"""The Unix domain socket against TCP, on the same server in the same run.

    python bench/unix_socket.py [--quick] [--rounds N] [--ops N]

Starts ebbdb (a free port, a temporary dbpath; its socket is /tmp/ebbdb-<port>.sock) and measures,
on one connection each, over TCP (`mongodb://127.0.0.1:<port>`) and over the socket
(`mongodb://%2Ftmp%2Febbdb-<port>.sock`), alternating the two in every round:

- pymongo insert_one, and find_one by `_id`: operations a second;
- a bare client (raw OP_MSG `{ping: 1}` on a plain socket, one at a time, as bench/write.py's
  bare-socket rows do), where the transport is most of what is left;

and beside each the server's CPU time an operation (all its threads, from Linux's /proc),
which a machine busy with other work disturbs less than the wall clock. Both paths are warmed up
before anything is timed.

The two transports take turns every 50 operations within each row, so that both see the same
noise of a busy machine. Each figure is the median of --rounds rounds (default 3; --quick: 1
round of fewer operations).
The targets table (common.report_goals) gives socket / TCP for each row: ops/s (the socket at
least as fast, >= 1.00) and the server's CPU an operation (no more than over TCP, <= 1.00; the
steadier figure on a busy machine). Bare pings run 5 times as many operations as the others
(they are that much shorter). The script is named unix_socket.py, not socket.py: run as a file,
its folder comes first on sys.path and a socket.py there would stand in for the standard
library's.
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
from dataclasses import dataclass
from typing import Any

import common
from bson import ObjectId
from pymongo import MongoClient

Doc = dict[str, Any]


#: Operations run on one transport before the other takes its turn: both see the same noise of
#: a busy machine, chunk by chunk.
CHUNK = 50
TRANSPORTS = ("TCP", "socket")


@dataclass
class Tally:
    """One transport's timed operations on one row: wall-clock and server CPU seconds."""

    ops: int = 0
    seconds: float = 0.0
    cpu: float = 0.0


def _server_cpu_seconds(pid: int) -> float:
    """The server's CPU time over all its threads, in nanoseconds' detail where Linux gives it
    (/proc/<pid>/task/*/schedstat: a chunk of 50 pings takes less than one clock tick), else
    user + system from /proc/<pid>/stat; 0 where neither can be read."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue  # a thread that ended meanwhile
        if total:
            return total / 1e9
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _interleaved(
    pid: int, n: int, ops: dict[str, Callable[[int], object]], flip: bool
) -> dict[str, Tally]:
    """Run ops[transport](i) for i in range(n) on each transport, CHUNK at a time, the two taking
    turns (`flip`: the socket first), and tally each one's time and the server's CPU."""
    tallies = {how: Tally() for how in ops}
    order = TRANSPORTS[::-1] if flip else TRANSPORTS
    for base in range(0, n, CHUNK):
        for how in order:
            fn = ops[how]
            cpu = _server_cpu_seconds(pid)
            start = time.perf_counter()
            for i in range(base, min(n, base + CHUNK)):
                fn(i)
            tally = tallies[how]
            tally.seconds += time.perf_counter() - start
            tally.cpu += _server_cpu_seconds(pid) - cpu
            tally.ops += min(n, base + CHUNK) - base
    return tallies


def _rows(
    pid: int,
    n: int,
    clients: dict[str, MongoClient[Doc]],
    raw: dict[str, socket.socket],
    flip: bool,
) -> dict[str, dict[str, Tally]]:
    """One round: insert_one, find_one by _id and bare pings, each interleaved."""
    colls = {how: clients[how].bench[f"socket_{how}"] for how in TRANSPORTS}
    ids = {how: [ObjectId() for _ in range(n)] for how in TRANSPORTS}
    for coll in colls.values():
        coll.drop()
    ping = common.op_msg({"ping": 1, "$db": "admin"})

    def insert(how: str) -> Callable[[int], object]:
        return lambda i: colls[how].insert_one({"_id": ids[how][i], "i": i, "pad": "x" * 64})

    def find(how: str) -> Callable[[int], object]:
        return lambda i: colls[how].find_one({"_id": ids[how][i]})

    def bare(how: str) -> Callable[[int], object]:
        sock = raw[how]

        def one(_i: int) -> None:
            sock.sendall(ping)
            common.read_message(sock)

        return one

    out = {
        row: _interleaved(pid, count, {how: make(how) for how in TRANSPORTS}, flip)
        for row, make, count in (
            ("insert_one", insert, n),
            ("find_one by _id", find, n),
            ("bare ping", bare, 5 * n),
        )
    }
    for coll in colls.values():
        coll.drop()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 round, fewer ops")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--ops", type=int, default=None, help="operations a row and round")
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 3)
    n = args.ops or (1000 if args.quick else 3000)
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
        pid = spawned.proc.pid
        _rows(pid, max(100, n // 10), clients, raw, False)  # warm both paths up, untimed
        rates: dict[tuple[str, str], list[float]] = {}
        cpus: dict[tuple[str, str], list[float]] = {}
        for r in range(rounds):
            for row, tallies in _rows(pid, n, clients, raw, r % 2 == 1).items():
                for how, t in tallies.items():
                    rates.setdefault((row, how), []).append(t.ops / t.seconds)
                    cpus.setdefault((row, how), []).append(t.cpu / t.ops * 1e6)
        rows = []
        goals = []
        for row in ("insert_one", "find_one by _id", "bare ping"):
            tcp = statistics.median(rates[(row, "TCP")])
            unix = statistics.median(rates[(row, "socket")])
            ratio = unix / tcp
            cpu = [common.fmt_num(statistics.median(cpus[(row, how)]), 1) for how in TRANSPORTS]
            rows.append([row, common.fmt_num(tcp), common.fmt_num(unix), f"{ratio:.2f}", *cpu])
            goals.append(common.Goal(f"{row}: ops/s, socket / TCP", ratio, ">=", 1.0, "x"))
            tcp_cpu, unix_cpu = (statistics.median(cpus[(row, how)]) for how in TRANSPORTS)
            cpu_ratio = unix_cpu / tcp_cpu if tcp_cpu > 0 else None
            goals.append(
                common.Goal(f"{row}: server CPU/op, socket / TCP", cpu_ratio, "<=", 1.0, "x")
            )
        print()
        header = ["ops/s, one connection", "TCP", "socket", "socket / TCP"]
        header += ["server CPU us/op, TCP", "socket"]
        common.table(header, rows, left=1)
        common.report_goals("unix_socket.py", goals)
    return 0


if __name__ == "__main__":
    sys.exit(main())
