"""Regular expressions under load: another client's ping latency while one client runs heavy regex
scans, and the server's CPU time per find with a simple regex.

    python bench/regex_scan.py                   # starts ebbdb from this checkout
    python bench/regex_scan.py --uri mongodb://127.0.0.1:27017 --pid 1234   # a running server

What is measured, in database ``bench_regex``:

1. ping latency (p50, p99, max, in ms) of a second client pinging every 10 ms: idle, then while
   the first client runs (a) a find and a count with a costly but bounded regex
   (``(a|b)*(aaaaaaaa|bbbbbbbb)$`` over random 60-character strings of a and b: about 160 µs of
   backtracking each) over ``--docs`` documents (default 100,000), and (b) the
   catastrophic ``^(a+)+$`` over ``--runaway`` documents of ``"a" * 40 + "b"`` (default 2,000:
   each gives up at PCRE2's match limit). Each scan's own time is printed.
2. server CPU per find (µs, from /proc/<pid>/stat): ``find({s: {$regex: "^user_00012"}})`` over
   10,000 documents, ``find({s: /^user_0001234$/})`` with ``limit(1)``, and the same filter by
   equality for comparison, ``--rounds`` times each (total CPU / rounds) (default 500).

Nothing is asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import threading
import time
from typing import Any

from common import percentile, spawn_ebbdb
from pymongo import MongoClient

Doc = dict[str, Any]
HEAVY = "(a|b)*(aaaaaaaa|bbbbbbbb)$"


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


class Pinger(threading.Thread):
    """A second client pinging every 10 ms; `take()` returns the latencies since the last take."""

    def __init__(self, uri: str) -> None:
        super().__init__(daemon=True)
        self.client: MongoClient[Doc] = MongoClient(uri, maxPoolSize=1)
        self.client.admin.command("ping")
        self.times: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.perf_counter()
            self.client.admin.command("ping")
            self.times.append(time.perf_counter() - t)
            time.sleep(0.01)

    def take(self) -> list[float]:
        out, self.times = self.times, []
        return out


def _report(name: str, times: list[float], took: float | None = None) -> None:
    ms = [t * 1000 for t in times]
    own = f", the scan took {took:.2f} s" if took is not None else ""
    print(
        f"  {name:<44} pings {len(ms):>5}  p50 {statistics.median(ms):6.2f} ms  "
        f"p99 {percentile(ms, 99):6.2f} ms  max {max(ms):7.2f} ms{own}"
    )


def run(uri: str, pid: int, docs: int, runaway: int, rounds: int) -> None:
    client: MongoClient[Doc] = MongoClient(uri)
    db = client.bench_regex
    client.drop_database(db.name)
    rng = random.Random(7)
    for start in range(0, docs, 10_000):
        db.heavy.insert_many(
            [
                {"_id": i, "s": "".join(rng.choice("ab") for _ in range(60))}
                for i in range(start, min(docs, start + 10_000))
            ]
        )
    if runaway:
        db.runaway.insert_many([{"_id": i, "s": "a" * 40 + "b"} for i in range(runaway)])
    db.users.insert_many([{"_id": i, "s": f"user_{i:07d}"} for i in range(10_000)])

    print("1. another client's ping latency")
    pinger = Pinger(uri)
    pinger.start()
    time.sleep(2)
    _report("idle", pinger.take())
    t = time.perf_counter()
    n = len(list(db.heavy.find({"s": {"$regex": HEAVY}})))
    took = time.perf_counter() - t
    _report(f"find heavy regex over {docs:,} docs ({n} found)", pinger.take(), took)
    if runaway:  # 0: for a server that would never finish it
        t = time.perf_counter()
        n = len(list(db.runaway.find({"s": {"$regex": "^(a+)+$"}})))
        took = time.perf_counter() - t
        _report(f"find ^(a+)+$ over {runaway:,} docs ({n} found)", pinger.take(), took)
    t = time.perf_counter()
    n = db.heavy.count_documents({"s": {"$regex": HEAVY}})
    took = time.perf_counter() - t
    _report(f"count heavy regex over {docs:,} docs ({n})", pinger.take(), took)
    pinger.stop.set()
    pinger.join()

    print(f"2. server CPU per find (over {rounds} finds each)")
    cases: list[tuple[str, Any, int]] = [
        ("$regex ^user_00012 (10,000 scanned, 100 back)", {"s": {"$regex": "^user_00012"}}, 0),
        ("/^user_0001234$/ limit 1", {"s": {"$regex": "^user_0001234$"}}, 1),
        ("equality user_0001234 limit 1", {"s": "user_0001234"}, 1),
    ]
    for name, flt, limit in cases:
        list(db.users.find(flt).limit(limit))
        c0 = _cpu_seconds(pid)
        for _ in range(rounds):
            list(db.users.find(flt).limit(limit))
        per = (_cpu_seconds(pid) - c0) / rounds
        print(f"  {name:<48} {per * 1e6:8.0f} µs")
    client.drop_database(db.name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--uri", help="a running server (with --pid); default: start ebbdb")
    parser.add_argument("--pid", type=int, help="the running server's process id")
    parser.add_argument("--docs", type=int, default=100_000)
    parser.add_argument("--runaway", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=500)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.uri:
            if args.pid is None:
                parser.error("--uri needs --pid")
            uri, pid = args.uri, args.pid
        else:
            spawned = spawn_ebbdb(stack)
            uri, pid = spawned.uri, spawned.proc.pid
        run(uri, pid, args.docs, args.runaway, args.rounds)


if __name__ == "__main__":
    main()
