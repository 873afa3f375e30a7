"""CRUD throughput benchmark for MongoDB-compatible servers, driven through pymongo.

Starts no server itself: point it at one or more running servers, each given as a
MongoDB URI, optionally labelled ``label=URI`` so the output can name it::

    python bench/crud.py ebbdb=mongodb://127.0.0.1:27017 floor=mongodb://127.0.0.1:27090
    python bench/crud.py --rounds 5 mongodb://127.0.0.1:27017
    python bench/crud.py --quick floor=mongodb://127.0.0.1:27090   # tiny smoke run

The protocol floor (a server that stores nothing) is started separately::

    python ../shared/bench/floor_server.py --port 27090 --raw

Each target gets one MongoClient with a single connection (maxPoolSize=1). Per round
and target, the ``bench_crud`` database is dropped and then these are measured:

- insert_one   N small documents, one call each (ops/s)
- find_one     N look-ups by ``_id`` over the documents just inserted (ops/s)
- insert_many  B batches of 1,000 documents (docs/s and batches/s)
- find         iterate an unfiltered find over a fresh 10,000-document collection,
               repeated a few times (docs/s)

With several targets, rounds alternate between them (A, B, A, B, ...); the table
reports the median per metric per target and each target's ratio to the first one
(higher is faster). Shared machines are noisy: compare ratios, not absolute figures.

Results are never asserted on: against the floor server nothing is stored and
reads answer canned documents, and that must still run through.
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import common
from common import Doc
from pymongo.database import Database
from pymongo.errors import PyMongoError

DB_NAME = "bench_crud"

# (key, label, unit) in display order.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("insert_one", "insert_one", "ops/s"),
    ("find_one", "find_one by _id", "ops/s"),
    ("insert_many_docs", "insert_many", "docs/s"),
    ("insert_many_batches", "insert_many", "batches/s"),
    ("find_docs", "find (iterate)", "docs/s"),
)


CLI = common.Cli(
    "CRUD throughput of MongoDB-compatible servers via pymongo.",
    ("ebbdb=mongodb://127.0.0.1:27017 floor=mongodb://127.0.0.1:27090",),
    quick_help="tiny smoke run",
)


@dataclass(frozen=True)
class Config(common.Settings):
    # insert_one / find_one operations per round
    n_single: int = common.setting("--n", 2000, 50, help="insert_one/find_one ops (2000)")
    # insert_many batches per round
    batches: int = common.setting("--batches", 20, 2, help="insert_many batches (20)")
    # documents per insert_many batch
    batch_size: int = common.setting("--batch-size", 1000, help="docs per batch (1000)")
    # documents in the collection iterated by find
    find_docs: int = common.setting("--find-docs", 10_000, 500, help="docs to iterate (10000)")
    # full iterations of that find per round
    find_reps: int = common.setting("--find-reps", 3, 1, help="find iterations (3)")
    # untimed insert_one + find_one calls before the first round
    warmup: int = common.setting("--warmup", 200, 10, help="untimed warm-up ops (200)")
    timeout_ms: int  # server selection / connect timeout (--timeout-ms)

    def invalid(self, args: argparse.Namespace) -> str | None:
        if args.rounds < 1 or min(self.n_single, self.batches, self.batch_size, self.find_reps) < 1:
            return "--rounds, --n, --batches, --batch-size and --find-reps must be >= 1"
        return None


@dataclass
class Target(common.Target):
    results: dict[str, list[float]] = field(default_factory=dict)


def make_docs(start: int, n: int) -> list[Doc]:
    """Small documents like the floor server's: name, email, age, score, group."""
    return [common.floor_doc(i) for i in range(start, start + n)]


def _timed(fn: Callable[[], int]) -> tuple[int, float]:
    """Run fn (returning a work count) on a clean heap; return (count, seconds)."""
    gc.collect()
    t0 = time.perf_counter()
    count = fn()
    return count, time.perf_counter() - t0


def _rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("nan")


def bench_single(db: Database[Doc], cfg: Config) -> tuple[dict[str, float], list[Any]]:
    coll = db["single"]
    docs = make_docs(0, cfg.n_single)

    def insert() -> int:
        for d in docs:
            coll.insert_one(d)
        return len(docs)

    n, secs = _timed(insert)
    out = {"insert_one": _rate(n, secs)}
    # insert_one sets "_id" on each dict client-side: use those, not server replies.
    ids = [d["_id"] for d in docs]
    return out, ids


def bench_find_one(db: Database[Doc], ids: Sequence[Any]) -> dict[str, float]:
    coll = db["single"]

    def lookups() -> int:
        for _id in ids:
            coll.find_one({"_id": _id})
        return len(ids)

    n, secs = _timed(lookups)
    return {"find_one": _rate(n, secs)}


def bench_insert_many(db: Database[Doc], cfg: Config) -> dict[str, float]:
    coll = db["many"]
    batches = [make_docs(b * cfg.batch_size, cfg.batch_size) for b in range(cfg.batches)]

    def insert() -> int:
        for batch in batches:
            coll.insert_many(batch, ordered=True)
        return len(batches)

    n, secs = _timed(insert)
    return {
        "insert_many_docs": _rate(n * cfg.batch_size, secs),
        "insert_many_batches": _rate(n, secs),
    }


def bench_find(db: Database[Doc], cfg: Config) -> dict[str, float]:
    coll = db["find_src"]
    coll.drop()
    step = 1000
    for start in range(0, cfg.find_docs, step):  # untimed load
        coll.insert_many(make_docs(start, min(step, cfg.find_docs - start)))

    def iterate() -> int:
        seen = 0
        for _ in range(cfg.find_reps):
            for _doc in coll.find():
                seen += 1
        return seen

    # Count what actually came back (the floor answers its own canned set).
    n, secs = _timed(iterate)
    return {"find_docs": _rate(n, secs)}


def warm_up(target: Target, cfg: Config) -> None:
    if cfg.warmup <= 0:
        return
    client = target.client
    assert client is not None
    client.drop_database(DB_NAME)
    coll = client[DB_NAME]["warmup"]
    docs = make_docs(0, cfg.warmup)
    for d in docs:
        coll.insert_one(d)
    for d in docs:
        coll.find_one({"_id": d["_id"]})


def run_round(target: Target, cfg: Config) -> dict[str, float]:
    """One round against one target; a failing step is recorded, not fatal."""
    assert target.client is not None
    client = target.client
    got: dict[str, float] = {}

    def step(name: str, fn: Callable[[], dict[str, float]]) -> None:
        try:
            got.update(fn())
        except PyMongoError as exc:
            common.record_error(target, name, exc)

    def drop() -> dict[str, float]:
        client.drop_database(DB_NAME)
        return {}

    step("drop_database", drop)
    db = client[DB_NAME]
    ids: list[Any] = []

    def single() -> dict[str, float]:
        res, new_ids = bench_single(db, cfg)
        ids.extend(new_ids)
        return res

    step("insert_one", single)
    if ids:
        step("find_one", lambda: bench_find_one(db, ids))
    step("insert_many", lambda: bench_insert_many(db, cfg))
    step("find", lambda: bench_find(db, cfg))

    for key, value in got.items():
        target.results.setdefault(key, []).append(value)
    return got


def fmt_rate(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:,.1f}"


def median_of(target: Target, key: str) -> float | None:
    return common.median(target.results.get(key, []))


def print_table(targets: Sequence[Target], rounds: int) -> None:
    base = targets[0]
    header = ["metric", "unit"] + [t.label for t in targets]
    header += [f"{t.label}/{base.label}" for t in targets[1:]]
    rows: list[list[str]] = []
    for key, label, unit in METRICS:
        meds = [median_of(t, key) for t in targets]
        row = [label, unit] + [fmt_rate(m) for m in meds]
        for m in meds[1:]:
            if m is None or meds[0] is None or meds[0] == 0:
                row.append("-")
            else:
                row.append(f"{m / meds[0]:.2f}x")
        rows.append(row)

    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [cells[0].ljust(widths[0]), cells[1].ljust(widths[1])]
        parts += [c.rjust(w) for c, w in zip(cells[2:], widths[2:], strict=True)]
        return "  ".join(parts)

    print()
    print(f"median of {rounds} round(s) per target; ratios are target / {base.label}")
    print(line(header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def main(argv: Sequence[str] | None = None) -> int:
    ap, args, cfg = common.parse_args(argv, Config, CLI)
    targets = common.parse_targets(ap, args.targets, Target)
    print(
        f"{common.versions()}; "
        f"insert_one/find_one N={cfg.n_single}, "
        f"insert_many {cfg.batches}x{cfg.batch_size}, "
        f"find {cfg.find_docs} docs x{cfg.find_reps}, rounds={args.rounds}"
    )
    for t in targets:
        print(f"  {t.label}: {t.uri}")

    with common.connected(targets, cfg.timeout_ms, lambda t: DB_NAME):
        for t in targets:
            try:
                warm_up(t, cfg)
            except PyMongoError as exc:  # the rounds will report what fails
                print(f"  ! {t.label} warm-up: {exc}", file=sys.stderr)

        width = max(len(t.label) for t in targets)
        for r in range(args.rounds):
            for t in targets:  # alternate: A, B, A, B, ...
                got = run_round(t, cfg)
                figures = "  ".join(
                    f"{key}={fmt_rate(got.get(key))}" for key, _label, _unit in METRICS
                )
                print(
                    f"round {r + 1}/{args.rounds}  {t.label:<{width}}  {figures}",
                    flush=True,
                )

        print_table(targets, args.rounds)
        return common.report_failures(targets)


if __name__ == "__main__":
    sys.exit(main())
