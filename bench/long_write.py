"""Writes behind a long write: 4 clients insert_one while a fifth loops update_many over
20,000 documents (issue 23, acceptance 3).

    python bench/long_write.py                  # starts ebbdb from this checkout itself
    python bench/long_write.py --quick          # a smoke run
    python bench/long_write.py --uri mongodb://127.0.0.1:27017

Steps, in database ``bench_long_write``:

- alone        update_many ``{$inc: {age: 1}}`` over ``--docs`` documents in the floor's shape,
               ``--alone`` times with no other client: its median (and best) time and µs a
               document, and the server's CPU µs a document (utime + stime of
               /proc/<pid>/stat, when the server was started here)
- together     for ``--seconds``, 4 threads (each its own MongoClient, maxPoolSize=1) insert_one
               in a loop while a fifth loops the same update_many: insert p50/p99/max and
               inserts/s; update_many calls, median time and µs a document

The targets (via common.report_goals): insert p99 < 50 ms while the long writes run, and
update_many <= 15 µs a document (alone). Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import common
from pymongo import MongoClient
from pymongo.collection import Collection

INSERTERS = 4


def _cpu_seconds(pid: int | None) -> float | None:
    """The process's user + system CPU seconds (Linux /proc), or None."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fill(coll: Collection[dict[str, object]], docs: int) -> None:
    coll.drop()
    batch = 1000
    for start in range(0, docs, batch):
        coll.insert_many([common.floor_doc(i) for i in range(start, min(docs, start + batch))])


def _alone(
    coll: Collection[dict[str, object]], docs: int, times: int, pid: int | None
) -> tuple[list[float], float | None]:
    """The seconds of each update_many, and the server's CPU µs a document (or None)."""
    took: list[float] = []
    cpu0 = _cpu_seconds(pid)
    for _ in range(times):
        started = time.perf_counter()
        result = coll.update_many({}, {"$inc": {"age": 1}})
        took.append(time.perf_counter() - started)
        if result.modified_count != docs:
            print(f"  WRONG: update_many modified {result.modified_count} of {docs}")
    cpu1 = _cpu_seconds(pid)
    cpu = None if cpu0 is None or cpu1 is None else (cpu1 - cpu0) / (times * docs) * 1e6
    return took, cpu


def _together(uri: str, docs: int, seconds: float) -> dict[str, float]:
    stop = threading.Event()
    latencies: list[list[float]] = [[] for _ in range(INSERTERS)]
    updates: list[float] = []
    errors: list[str] = []

    def inserter(k: int) -> None:
        client: MongoClient[dict[str, object]] = MongoClient(uri, maxPoolSize=1)
        try:
            coll = client.bench_long_write.inserts
            i = 0
            while not stop.is_set():
                started = time.perf_counter()
                coll.insert_one({"k": k, "i": i})
                latencies[k].append(time.perf_counter() - started)
                i += 1
        except Exception as exc:  # noqa: BLE001 - reported, the bench goes on
            errors.append(f"inserter {k}: {exc!r}")
        finally:
            client.close()

    def updater() -> None:
        client: MongoClient[dict[str, object]] = MongoClient(uri, maxPoolSize=1)
        try:
            coll = client.bench_long_write.docs
            while not stop.is_set():
                started = time.perf_counter()
                coll.update_many({}, {"$inc": {"age": 1}})
                updates.append(time.perf_counter() - started)
        except Exception as exc:  # noqa: BLE001
            errors.append(f"updater: {exc!r}")
        finally:
            client.close()

    threads = [threading.Thread(target=inserter, args=(k,)) for k in range(INSERTERS)]
    threads.append(threading.Thread(target=updater))
    for t in threads:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    for e in errors:
        print(f"  ERROR {e}")
    every = sorted(x for lat in latencies for x in lat)
    if not every:
        return {}
    return {
        "p50": common.percentile(every, 50) * 1e3,
        "p99": common.percentile(every, 99) * 1e3,
        "max": every[-1] * 1e3,
        "rate": len(every) / seconds,
        "updates": float(len(updates)),
        "update_s": statistics.median(updates) if updates else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--uri", help="a running server (default: start ebbdb from this checkout)")
    ap.add_argument("--quick", action="store_true", help="a smoke run (shorter)")
    ap.add_argument("--docs", type=int, default=20_000, help="documents update_many changes")
    ap.add_argument("--seconds", type=float, default=None, help="the together step's length")
    ap.add_argument("--alone", type=int, default=None, help="update_many runs with no other client")
    args = ap.parse_args(argv)
    seconds = args.seconds if args.seconds is not None else (3.0 if args.quick else 15.0)
    alone_runs = args.alone if args.alone is not None else (2 if args.quick else 5)
    with contextlib.ExitStack() as stack:
        pid = None
        uri = args.uri
        if uri is None:
            spawned = common.spawn_ebbdb(stack)
            uri, pid = spawned.uri, spawned.proc.pid
        client: MongoClient[dict[str, object]] = MongoClient(uri, maxPoolSize=1)
        stack.callback(client.close)
        client.drop_database("bench_long_write")
        coll = client.bench_long_write.docs
        _fill(coll, args.docs)
        print(f"\n{args.docs:,} documents; update_many {{$inc: {{age: 1}}}} over all of them\n")
        took, cpu = _alone(coll, args.docs, alone_runs, pid)
        alone_s = statistics.median(took)
        per_doc = alone_s / args.docs * 1e6
        best = min(took) / args.docs * 1e6
        cpu_text = "-" if cpu is None else f"{cpu:.1f}"
        print(
            f"  alone: update_many median {alone_s * 1e3:,.0f} ms, {per_doc:.1f} us/doc (best "
            f"{best:.1f}; the server's CPU {cpu_text} us/doc)"
        )
        got = _together(uri, args.docs, seconds)
        rows = []
        if got:
            rows = [
                ["insert_one p50", f"{got['p50']:.2f} ms"],
                ["insert_one p99", f"{got['p99']:.2f} ms"],
                ["insert_one max", f"{got['max']:.2f} ms"],
                ["inserts/s (4 clients)", f"{got['rate']:,.0f}"],
                ["update_many calls", f"{got['updates']:.0f}"],
                ["update_many median", f"{got['update_s'] * 1e3:,.0f} ms"],
                ["update_many us/doc", f"{got['update_s'] / args.docs * 1e6:.1f}"],
            ]
        print(
            f"\n  together ({INSERTERS} insert_one clients + 1 update_many loop, {seconds:g} s):\n"
        )
        common.table(["figure", "value"], rows, left=1)
        common.report_goals(
            "long_write.py",
            [
                common.Goal("insert_one p99 behind update_many", got.get("p99"), "<=", 50.0, "ms"),
                common.Goal("update_many per document (alone)", per_doc, "<=", 15.0, "us"),
            ],
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
