"""TTL benchmark for ebbdb, driven through pymongo: the cost of a TTL monitor pass, purge
throughput, and what another client sees while a purge runs.

With no URI it starts ebbdb itself (a temporary dbpath, the test commands on)::

    python bench/ttl.py
    python bench/ttl.py --quick

or point it at a running ebbdb started with the test commands on (``ttlMonitorPass`` and
``ttlClock`` on admin), optionally labelled ``label=URI``::

    python -m ebbdb --port 27500 --dbpath /tmp/ebbdb-ttl-bench --quiet \\
        --setParameter enableTestCommands=1 &
    python bench/ttl.py ebbdb=mongodb://127.0.0.1:27500
    python bench/ttl.py --reuse ebbdb=mongodb://127.0.0.1:27500
    python bench/ttl.py --quick mongodb://127.0.0.1:27500          # small sizes

What is measured, in database ``bench_ttl`` (several targets are measured one after the other):

1. a TTL pass with nothing to delete: ``--n-live`` (default 1,000,000) small documents with a
   date field ``t`` = now (insert_many batches of 10,000) and a TTL index ``{t: 1}`` with
   expireAfterSeconds 3600. ``admin.command("ttlMonitorPass")`` is timed (round trip, ``--passes``
   times, default 20) interleaved with ``admin.command("ping")``; the pass cost is the median pass
   round trip minus the median ping round trip (target: under 5 ms). serverStatus
   ``metrics.ttl`` is printed before and after.
2. purge throughput: ``--n-expired`` (default 200,000) documents with ``t`` = now in another
   collection whose TTL index has expireAfterSeconds 300; the expiry clock is advanced by 360 s
   (``ttlClock`` advanceSeconds), so all of them, and none of step 1's, are expired; one
   ``ttlMonitorPass`` is timed (it deletes them all: its reply's ``deleted`` is checked) -> docs/s,
   with no other client. The clock is reset afterwards (``ttlClock`` reset: true), also when
   something fails.
3. what another client sees during a second purge of as many documents (loaded again): a thread with its own MongoClient (one connection) runs
   ``find_one({_id: x})`` for random x over a third collection (``--n-find`` documents, no TTL
   index) in a tight loop; every look-up that overlaps the purge of step 2 counts, and their max,
   p99, p50 latency are reported, beside the same figures from a ``--baseline-secs`` window just
   before, with no purge running.

The targets of steps 2-3 (issue 23), printed at the end through common.report_goals: a purge of
200,000 expired documents at >= 100,000 docs/s with no other client (the median over the rounds),
and another client's find_one p99 under 5 ms during a purge (over the look-ups of every round's
purge together); the max is printed beside them.

Steps 2-3 are repeated ``--rounds`` times (default 1; each round reloads the expired documents).

So that nothing but the benchmark deletes, the background monitor is switched off
(``setParameter ttlMonitorEnabled: false``) for the run and restored to its previous value at the
end; a ``ttlClock`` offset left over from an earlier run is reset at the start.

With ``--reuse`` the step-1 and step-3 collections are kept when they already hold the expected
documents (for step 1: young enough that the clock advance of step 2 does not expire them), and
the database is left in place at the end; without it, they are dropped and reloaded, and the
database is dropped at the end. The step-2 collection is always reloaded (the purge empties it).

Results are never asserted on: each figure is printed next to its target with "met" or "NOT met",
and a failing step is reported and the rest runs on. Shared machines are noisy.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import gc
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import common
from common import Client, Doc, median
from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.errors import OperationFailure, PyMongoError

DB_NAME = "bench_ttl"
LIVE = "live"  # step 1: nothing expired
EXPIRED = "expired"  # step 2: everything expired once the clock moves
FIND = "find"  # step 3: the other client's look-ups

Coll = Collection[Doc]

LIVE_EXPIRE_AFTER = 3600  # seconds, the step-1 TTL index
EXPIRED_EXPIRE_AFTER = 300  # seconds, the step-2 TTL index
CLOCK_ADVANCE = EXPIRED_EXPIRE_AFTER + 60  # expires all of step 2, none of step 1
REUSE_MARGIN = 300  # seconds of slack when deciding whether step-1 documents may be reused

# Targets from the issue.
PASS_NET_MS = 5.0  # a pass over the live collection, net of the round trip
PURGE_DOCS = 200_000  # the purge the target is stated for (--n-expired)
PURGE_RATE_MIN = 100_000.0  # docs/s
FIND_P99_MS = 5.0  # another client's find_one during the purge: p99 under this ...
FIND_MAX_MS = 20.0  # ... and max under this


CLI = common.Cli(
    "TTL pass cost, purge throughput and latency under purge, via pymongo "
    "(needs --setParameter enableTestCommands=1 on the server).",
    ("ebbdb=mongodb://127.0.0.1:27500",),
    quick_help="small sizes for a smoke run",
    rounds=(1, 1),
    spawn=True,
)


@dataclass(frozen=True)
class Config(common.Settings):
    reuse: bool = common.setting(
        "--reuse",
        False,
        help="keep the live and find collections when they already hold the expected "
        "documents; keep the data at the end",
    )
    # documents in the step-1 collection
    n_live: int = common.setting("--n-live", 1_000_000, 20_000, help="step-1 documents (1,000,000)")
    # documents purged per round in step 2
    n_expired: int = common.setting(
        "--n-expired", 200_000, 10_000, help="step-2 documents (200,000)"
    )
    # documents in the step-3 look-up collection
    n_find: int = common.setting(
        "--n-find", 100_000, 2_000, help="step-3 look-up collection (100,000)"
    )
    # documents per insert_many batch while loading
    batch_size: int = common.setting("--batch-size", 10_000, help="insert_many batch (10,000)")
    # timed ttlMonitorPass / ping pairs in step 1
    passes: int = common.setting("--passes", 20, 10, help="timed step-1 passes (20)")
    # length of the step-3 baseline window
    baseline_secs: float = common.setting(
        "--baseline-secs", 5.0, 1.0, help="step-3 baseline window, s (5)"
    )
    timeout_ms: int  # server selection / connect timeout (--timeout-ms)

    def invalid(self, args: argparse.Namespace) -> str | None:
        sizes = [self.n_live, self.n_expired, self.n_find, self.batch_size, self.passes]
        if min(args.rounds, *sizes) < 1 or self.baseline_secs <= 0:
            return "sizes, --passes, --baseline-secs and --rounds must be positive"
        return None


@dataclass
class Purge:
    """One round of steps 2-3."""

    expected: int
    with_finder: bool = True  # False: the rate round, no other client
    server_cpu: float | None = None  # the server's CPU seconds during the purge (when known)
    deleted: int | None = None
    seconds: float | None = None
    collections: list[Any] = field(default_factory=list)
    left: int | None = None  # documents the expired collection still counts afterwards
    live_after: int | None = None  # documents the live collection counts afterwards
    metrics_delta: dict[str, int] = field(default_factory=dict)
    during: list[float] = field(default_factory=list)  # find_one latencies (ms), purge running
    baseline: list[float] = field(default_factory=list)  # the same, no purge running
    baseline_secs: float | None = None
    wrong: int = 0  # find_one answers that were not the document asked for


@dataclass
class Target(common.Target):
    pass_ms: list[float] = field(default_factory=list)
    ping_ms: list[float] = field(default_factory=list)
    pass_deleted: int = 0  # documents the step-1 passes deleted (should stay 0)
    metrics: dict[str, dict[str, int]] = field(default_factory=dict)  # label -> metrics.ttl
    purges: list[Purge] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


# -- small helpers --------------------------------------------------------------------------------


def utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def step(t: Target, name: str, fn: Callable[[], Any]) -> Any:
    """Run one step; a failure is recorded and printed once, not fatal. None when it failed."""
    try:
        return fn()
    except PyMongoError as exc:
        common.record_error(t, name, exc)
        return None


def ok(t: Target, name: str, fn: Callable[[], Any]) -> bool:
    """Run one step like step(); True when it did not fail."""
    try:
        fn()
    except PyMongoError as exc:
        common.record_error(t, name, exc)
        return False
    return True


def ttl_metrics(client: Client) -> dict[str, int]:
    ttl = client.admin.command("serverStatus").get("metrics", {}).get("ttl", {})
    return {k: int(v) for k, v in ttl.items()}


def fmt_metrics(m: dict[str, int] | None) -> str:
    if not m:
        return "-"
    return ", ".join(f"{k} {v:,}" for k, v in m.items())


def metrics_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before.get(k, 0) for k in after}


# -- documents and loading ------------------------------------------------------------------------


def make_ttl_docs(start: int, n: int) -> list[Doc]:
    """Small documents with the date field `t` = now (one instant per batch)."""
    now = utcnow()
    return [
        {"_id": i, "t": now, "g": i % 100, "s": f"user_{i:07d}"} for i in range(start, start + n)
    ]


def make_find_docs(start: int, n: int) -> list[Doc]:
    return [{"_id": i, "k": i, "g": i % 100, "s": f"user_{i:07d}"} for i in range(start, start + n)]


def load(
    label: str, coll: Coll, n: int, make: Callable[[int, int], list[Doc]], cfg: Config
) -> None:
    common.load(f"  {label} {coll.name}", coll, n, make, cfg.batch_size)


def reusable(coll: Coll, n: int, max_age_s: float | None) -> str | None:
    """Why the collection cannot be reused as it is (None: it can)."""
    try:
        count = coll.estimated_document_count()
        if count != n:
            return f"holds {count:,} documents, not {n:,}"
        first, last = coll.find_one({"_id": 0}), coll.find_one({"_id": n - 1})
        if not first or not last:
            return "first or last document missing"
        if max_age_s is not None:
            t = first.get("t")
            if not isinstance(t, datetime.datetime):
                return "no date field t"
            if t.tzinfo is None:
                t = t.replace(tzinfo=datetime.UTC)
            age = (utcnow() - t).total_seconds()
            if age > max_age_s:
                return f"documents are {age:,.0f} s old (the clock advance would expire them)"
    except PyMongoError as exc:
        return f"cannot check it ({type(exc).__name__})"
    return None


def ensure(
    label: str,
    coll: Coll,
    n: int,
    make: Callable[[int, int], list[Doc]],
    cfg: Config,
    max_age_s: float | None = None,
) -> None:
    """Load `n` documents unless --reuse finds them already there."""
    if cfg.reuse:
        why = reusable(coll, n, max_age_s)
        if why is None:
            print(f"  {label} {coll.name}: reusing {n:,} documents", flush=True)
            return
        print(f"  {label} {coll.name}: not reused: {why}", flush=True)
    load(label, coll, n, make, cfg)


def create_ttl_index(label: str, coll: Coll, expire_after: int) -> None:
    t0 = time.perf_counter()
    coll.create_index("t", expireAfterSeconds=expire_after)
    print(
        f"  {label} {coll.name}: create_index({{t: 1}}, expireAfterSeconds={expire_after}) "
        f"{time.perf_counter() - t0:.2f} s",
        flush=True,
    )


# -- test commands and parameters -----------------------------------------------------------------


def ttl_pass(client: Client) -> dict[str, Any]:
    return client.admin.command("ttlMonitorPass")


def clock(client: Client, **kw: Any) -> dict[str, Any]:
    return client.admin.command({"ttlClock": 1, **kw})


def check_test_commands(t: Target) -> bool:
    """The server has ttlClock (and so the test commands); a leftover clock offset is reset."""
    assert t.client is not None
    try:
        reply = clock(t.client)
    except OperationFailure as exc:
        print(
            f"  {t.label}: ttlClock failed ({(exc.details or {}).get('codeName', exc.code)}): start the server with "
            "--setParameter enableTestCommands=1",
            file=sys.stderr,
        )
        common.record_error(t, "test commands", exc)
        return False
    offset = int(reply.get("offsetMillis", 0))
    if offset:
        clock(t.client, reset=True)
        t.notes.append(f"expiry clock was {offset:,} ms off real time at the start; reset")
        print(f"  {t.label}: expiry clock offset {offset:,} ms left over; reset", flush=True)
    return True


def pause_monitor(t: Target) -> Any:
    """Switch the background TTL monitor off; its previous setting (None: unknown)."""
    assert t.client is not None
    reply = t.client.admin.command({"setParameter": 1, "ttlMonitorEnabled": False})
    print(f"  {t.label}: background TTL monitor paused (was {reply.get('was')})", flush=True)
    return reply.get("was")


# -- step 1 ---------------------------------------------------------------------------------------


def bench_pass_cost(t: Target, cfg: Config) -> None:
    """Interleaved ttlMonitorPass and ping round trips over the live collection."""
    assert t.client is not None
    admin = t.client.admin
    pc = time.perf_counter
    for _ in range(3):  # warm-up
        admin.command("ping")
        t.pass_deleted += int(ttl_pass(t.client).get("deleted", 0))
    t.metrics["before step 1"] = ttl_metrics(t.client)
    gc.collect()
    gc.disable()
    try:
        for i in range(cfg.passes):
            order = ("ping", "pass") if i % 2 == 0 else ("pass", "ping")
            for what in order:
                t0 = pc()
                if what == "ping":
                    admin.command("ping")
                    t.ping_ms.append((pc() - t0) * 1000)
                else:
                    reply = ttl_pass(t.client)
                    t.pass_ms.append((pc() - t0) * 1000)
                    t.pass_deleted += int(reply.get("deleted", 0))
    finally:
        gc.enable()
    t.metrics["after step 1"] = ttl_metrics(t.client)
    print(
        f"  {t.label} step 1: ttlMonitorPass median {common.fmt_num(median(t.pass_ms), 3)} ms, "
        f"ping median {common.fmt_num(median(t.ping_ms), 3)} ms ({cfg.passes} each)",
        flush=True,
    )


# -- steps 2-3 ------------------------------------------------------------------------------------


class Finder(threading.Thread):
    """Another client: find_one({_id: x}) in a tight loop on its own connection, recording the
    start and end (perf_counter_ns) of every look-up, until told to stop."""

    def __init__(self, uri: str, n: int, timeout_ms: int, seed: int) -> None:
        super().__init__(name="finder", daemon=True)
        self.uri = uri
        self.n = n
        self.timeout_ms = timeout_ms
        self.ids = [random.Random(seed).randrange(n) for _ in range(100_000)]
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.wrong = 0
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            client: Client = MongoClient(
                self.uri,
                maxPoolSize=1,
                serverSelectionTimeoutMS=self.timeout_ms,
                connectTimeoutMS=self.timeout_ms,
            )
            try:
                self._loop(client[DB_NAME][FIND])
            finally:
                client.close()
        except BaseException as exc:  # reported by the main thread
            self.error = exc
        finally:
            self.ready.set()

    def _loop(self, coll: Coll) -> None:
        find_one = coll.find_one
        ids = self.ids
        for x in ids[:300]:  # warm-up, not recorded
            find_one({"_id": x})
        self.ready.set()
        pc = time.perf_counter_ns
        starts, ends = self.starts, self.ends
        i = 0
        stop = self.stop
        while not stop.is_set():
            x = ids[i % len(ids)]
            i += 1
            t0 = pc()
            doc = find_one({"_id": x})
            t1 = pc()
            starts.append(t0)
            ends.append(t1)
            if doc is None or doc.get("_id") != x:
                self.wrong += 1

    def window(self, t0: int, t1: int) -> list[float]:
        """Latencies (ms) of the look-ups that overlap [t0, t1] (perf_counter_ns)."""
        return [
            (e - s) / 1e6
            for s, e in zip(list(self.starts), list(self.ends), strict=False)
            if e >= t0 and s <= t1
        ]


def load_expired(t: Target, cfg: Config) -> None:
    assert t.client is not None
    coll = t.client[DB_NAME][EXPIRED]
    load(t.label, coll, cfg.n_expired, make_ttl_docs, cfg)
    create_ttl_index(t.label, coll, EXPIRED_EXPIRE_AFTER)
    count = coll.estimated_document_count()
    if count != cfg.n_expired:
        t.notes.append(f"expired collection counted {count:,} documents after loading")


def bench_purge(t: Target, cfg: Config, rnd: int, with_finder: bool = True) -> Purge:
    """One round of steps 2-3: (with the finder) a baseline window, then clock advance, one
    timed purge pass with the finder running throughout; the clock is reset afterwards whatever
    happens. Without the finder, the purge alone (its rate)."""
    assert t.client is not None
    client = t.client
    res = Purge(expected=cfg.n_expired, with_finder=with_finder)
    t.purges.append(res)
    finder = Finder(t.uri, cfg.n_find, cfg.timeout_ms, seed=12345 + rnd)
    before = ttl_metrics(client)
    gc.collect()
    if with_finder:
        finder.start()
        finder.ready.wait(cfg.timeout_ms / 1000 + 30)
    advanced = False
    b0 = b1 = 0
    try:
        if finder.error is not None:
            raise finder.error
        gc.disable()
        if with_finder:
            time.sleep(0.2)
            b0 = time.perf_counter_ns()
            time.sleep(cfg.baseline_secs)
            b1 = time.perf_counter_ns()
        clock(client, advanceSeconds=CLOCK_ADVANCE)
        advanced = True
        time.sleep(0.2)
        cpu0 = None if t.pid is None else common.cpu_seconds(t.pid)
        p0 = time.perf_counter_ns()
        reply = ttl_pass(client)
        p1 = time.perf_counter_ns()
        cpu1 = None if t.pid is None else common.cpu_seconds(t.pid)
        if cpu0 is not None and cpu1 is not None:
            res.server_cpu = cpu1 - cpu0
        time.sleep(0.05)
    finally:
        gc.enable()
        finder.stop.set()
        if with_finder:
            finder.join()
        if advanced:
            clock(client, reset=True)
    if finder.error is not None:
        raise finder.error
    res.deleted = int(reply.get("deleted", 0))
    res.seconds = (p1 - p0) / 1e9
    res.collections = list(reply.get("collections", []))
    res.baseline = finder.window(b0, b1)
    res.baseline_secs = (b1 - b0) / 1e9
    res.during = finder.window(p0, p1)
    res.wrong = finder.wrong
    res.metrics_delta = metrics_delta(before, ttl_metrics(client))
    res.left = client[DB_NAME][EXPIRED].estimated_document_count()
    res.live_after = client[DB_NAME][LIVE].estimated_document_count()
    alone = "" if with_finder else " (no other client)"
    if res.server_cpu:
        alone += (
            f", server CPU {res.server_cpu:.2f} s: "
            f"{common.fmt_num(res.deleted / res.server_cpu)} docs per CPU-second"
        )
    print(
        f"  {t.label} round {rnd + 1}: purge deleted {res.deleted:,} in {res.seconds:.2f} s "
        f"({common.fmt_num(res.deleted / res.seconds if res.seconds else float('nan'))} docs/s)"
        f"{alone}; find_one during it: {len(res.during):,} ops, max "
        f"{common.fmt_num(max(res.during, default=None), 2)} ms",
        flush=True,
    )
    return res


# -- report ---------------------------------------------------------------------------------------


def lat_line(values: Sequence[float]) -> str:
    if not values:
        return "no look-ups recorded"
    over = sum(1 for v in values if v > FIND_P99_MS)
    return (
        f"max {common.fmt_num(max(values), 2):>7} ms   p99 {common.fmt_num(common.percentile(values, 99), 3):>6} ms   "
        f"p50 {common.fmt_num(common.percentile(values, 50), 3):>6} ms   {len(values):>7,} ops   "
        f"> {FIND_P99_MS:g} ms: {over:,}"
    )


def print_report(targets: Sequence[Target], cfg: Config) -> None:
    print()
    print("==== results ====")
    for t in targets:
        print()
        print(f"[{t.label}] {t.uri}")
        print()
        print(
            f"1. ttlMonitorPass over {cfg.n_live:,} live documents, nothing expired "
            f"(TTL index {{t: 1}}, expireAfterSeconds {LIVE_EXPIRE_AFTER}; {len(t.pass_ms)} passes)"
        )
        if t.pass_ms and t.ping_ms:
            pm, gm = median(t.pass_ms), median(t.ping_ms)
            print(
                f"   ttlMonitorPass round trip  median {common.fmt_num(pm, 3):>8} ms   "
                f"min {common.fmt_num(min(t.pass_ms), 3)}   p90 {common.fmt_num(common.percentile(t.pass_ms, 90), 3)}   "
                f"max {common.fmt_num(max(t.pass_ms), 3)}"
            )
            print(
                f"   ping round trip            median {common.fmt_num(gm, 3):>8} ms   "
                f"min {common.fmt_num(min(t.ping_ms), 3)}   p90 {common.fmt_num(common.percentile(t.ping_ms, 90), 3)}   "
                f"max {common.fmt_num(max(t.ping_ms), 3)}"
            )
            if pm is not None and gm is not None:
                net = pm - gm
                print(
                    f"   pass cost net of round trip (median - median) {common.fmt_num(net, 3)} ms   "
                    f"(min - min {common.fmt_num(min(t.pass_ms) - min(t.ping_ms), 3)} ms)   "
                    f"target: < {PASS_NET_MS:g} ms   {common.verdict(net < PASS_NET_MS)}"
                )
            if t.pass_deleted:
                print(f"   NOTE: these passes deleted {t.pass_deleted:,} documents (expected 0)")
        else:
            print("   not measured")
        for when in ("before step 1", "after step 1", "end"):
            if when in t.metrics:
                print(
                    f"   serverStatus metrics.ttl {when + ':':<14} {fmt_metrics(t.metrics[when])}"
                )

        print()
        print(
            f"2. purge throughput: one ttlMonitorPass over {cfg.n_expired:,} expired documents "
            f"(clock advanced {CLOCK_ADVANCE} s past documents with expireAfterSeconds "
            f"{EXPIRED_EXPIRE_AFTER})"
        )
        done = [p for p in t.purges if p.deleted is not None and p.seconds]
        for i, p in enumerate(t.purges):
            if p.deleted is None or not p.seconds:
                print(f"   round {i + 1}: not measured")
                continue
            check = (
                "all deleted"
                if p.deleted == p.expected
                else f"MISMATCH: deleted {p.deleted:,}, expected {p.expected:,}"
            )
            per_ns = ", ".join(f"{c.get('ns')} {int(c.get('deleted', 0)):,}" for c in p.collections)
            print(
                f"   round {i + 1}: deleted {p.deleted:,} in {p.seconds:.3f} s -> "
                f"{common.fmt_num(p.deleted / p.seconds)} docs/s   ({check}; per collection: {per_ns or '-'})"
            )
            print(
                f"            afterwards: expired collection counts {common.fmt_num(p.left)}, "
                f"live collection {common.fmt_num(p.live_after)} (of {cfg.n_live:,}); "
                f"metrics.ttl change: {fmt_metrics(p.metrics_delta)}"
            )
        if len(done) > 1:
            rates = [p.deleted / p.seconds for p in done if p.deleted is not None and p.seconds]
            print(f"   median over {len(rates)} rounds: {common.fmt_num(median(rates))} docs/s")

        print()
        print(
            f"3. find_one({{_id: x}}) latency of another client (own MongoClient, one connection, "
            f"{cfg.n_find:,}-document collection)"
        )
        for i, p in enumerate(t.purges):
            if p.deleted is None:
                continue
            tag = f"round {i + 1}: " if len(t.purges) > 1 else ""
            print(
                f"   {tag}baseline, no purge ({common.fmt_num(p.baseline_secs, 1)} s) {lat_line(p.baseline)}"
            )
            print(
                f"   {tag}during the purge ({common.fmt_num(p.seconds, 1)} s)    {lat_line(p.during)}"
            )
            if p.during and p.baseline and p.seconds and p.baseline_secs:
                print(
                    f"   {tag}look-ups/s: baseline {common.fmt_num(len(p.baseline) / p.baseline_secs)}, "
                    f"during the purge {common.fmt_num(len(p.during) / p.seconds)}"
                )
            if p.wrong:
                print(f"   {tag}WRONG ANSWERS: {p.wrong:,} find_one did not return the document")
        if not t.purges:
            print("   not measured")
        for note in t.notes:
            print(f"   note: {note}")
        print_purge_targets(t, cfg)


def print_purge_targets(t: Target, cfg: Config) -> None:
    """The target of steps 2-3, one met/NOT met line per figure."""
    done = [p for p in t.purges if p.deleted is not None and p.seconds]
    alone = [p for p in done if not p.with_finder]
    rate = median([p.deleted / p.seconds for p in alone if p.deleted is not None and p.seconds])
    during = [v for p in done if p.with_finder for v in p.during]
    p99 = common.percentile(during, 99) if during else None
    worst = max(during, default=None)
    print()
    print(
        f"   target: purge of {PURGE_DOCS:,} expired documents at >= {PURGE_RATE_MIN:,.0f} docs/s, "
        f"while another client's find_one keeps p99 under {FIND_P99_MS:g} ms and max under "
        f"{FIND_MAX_MS:g} ms"
    )
    if cfg.n_expired != PURGE_DOCS:
        print(
            f"   (measured on {cfg.n_expired:,} expired documents, not {PURGE_DOCS:,}: "
            "the figures below are only indicative)"
        )
    rounds = f"{len(alone)} round{'s' if len(alone) != 1 else ''}"
    for what, value, target, ok in (
        (
            f"purge rate, no other client, median of {rounds}",
            f"{common.fmt_num(rate)} docs/s",
            f">= {PURGE_RATE_MIN:,.0f} docs/s",
            None if rate is None else rate >= PURGE_RATE_MIN,
        ),
        (
            f"find_one p99 during the purge ({len(during):,} look-ups)",
            f"{common.fmt_num(p99, 3)} ms",
            f"< {FIND_P99_MS:g} ms",
            None if p99 is None else p99 < FIND_P99_MS,
        ),
        (
            "find_one max during the purge",
            f"{common.fmt_num(worst, 2)} ms",
            f"< {FIND_MAX_MS:g} ms",
            None if worst is None else worst < FIND_MAX_MS,
        ),
    ):
        print(f"   {what:<45} {value:>16}   target {target:<20} {common.verdict(ok)}")


# -- driving --------------------------------------------------------------------------------------


def run_target(t: Target, cfg: Config, rounds: int) -> None:
    assert t.client is not None
    client = t.client
    db = client[DB_NAME]
    if not check_test_commands(t):
        return
    was_enabled = step(t, "pause monitor", lambda: pause_monitor(t))
    try:
        print(f"\nsetup ({t.label})", flush=True)
        step(t, "drop expired", lambda: db[EXPIRED].drop())
        max_age = LIVE_EXPIRE_AFTER - CLOCK_ADVANCE - REUSE_MARGIN
        loaded = ok(
            t,
            "load live",
            lambda: ensure(t.label, db[LIVE], cfg.n_live, make_ttl_docs, cfg, max_age),
        )
        if loaded:
            step(t, "index live", lambda: create_ttl_index(t.label, db[LIVE], LIVE_EXPIRE_AFTER))
        step(t, "load find", lambda: ensure(t.label, db[FIND], cfg.n_find, make_find_docs, cfg))

        print(f"\nstep 1 ({t.label})", flush=True)
        if loaded:
            step(t, "pass cost", lambda: bench_pass_cost(t, cfg))

        print(f"\nsteps 2-3 ({t.label})", flush=True)
        for r in range(rounds):
            for with_finder in (False, True):
                if ok(t, "load expired", lambda: load_expired(t, cfg)):
                    purge = functools.partial(bench_purge, t, cfg, r, with_finder)
                    step(t, "purge", purge)
        got = step(t, "serverStatus", lambda: ttl_metrics(client))
        if got is not None:
            t.metrics["end"] = got
    finally:
        if was_enabled is not None:
            step(
                t,
                "restore monitor",
                lambda: client.admin.command(
                    {"setParameter": 1, "ttlMonitorEnabled": bool(was_enabled)}
                ),
            )
        step(t, "reset clock", lambda: clock(client, reset=True))


def main(argv: Sequence[str] | None = None) -> int:
    ap, args, cfg = common.parse_args(argv, Config, CLI)
    with contextlib.ExitStack() as stack:
        pid = None
        if not args.targets:  # no URI (or --spawn): ebbdb started here
            spawned = common.spawn_ebbdb(stack)
            args.targets, pid = [f"ebbdb={spawned.uri}"], spawned.proc.pid
        elif args.spawn:
            ap.error("give either --spawn or URIs, not both")
        return run(ap, args, cfg, pid)


def run(ap: argparse.ArgumentParser, args: argparse.Namespace, cfg: Config, pid: int | None) -> int:
    targets = common.parse_targets(ap, args.targets, Target)
    if pid is not None:
        targets[0].pid = pid
    print(
        f"{common.versions()}; live {cfg.n_live:,} docs, {cfg.passes} timed passes; "
        f"expired {cfg.n_expired:,} docs x {args.rounds} round(s); find collection "
        f"{cfg.n_find:,} docs" + (", reuse" if cfg.reuse else "")
    )
    with common.connected(targets, cfg.timeout_ms, lambda t: None if cfg.reuse else DB_NAME):
        for t in targets:
            print(f"  {t.label}: {t.uri}", flush=True)
        for t in targets:
            run_target(t, cfg, args.rounds)
        print_report(targets, cfg)
        report_targets(targets)
        return common.report_failures(targets)


def report_targets(targets: Sequence[Target]) -> None:
    """Issue 23's TTL rows, through common.report_goals (bench/all.py collects them)."""
    goals = []
    for t in targets:
        done = [p for p in t.purges if p.deleted is not None and p.seconds]
        rates = [
            p.deleted / p.seconds
            for p in done
            if not p.with_finder and p.deleted is not None and p.seconds
        ]
        during = [v for p in done if p.with_finder for v in p.during]
        tag = f" ({t.label})" if len(targets) > 1 else ""
        goals.append(
            common.Goal(
                f"TTL purge, no other client{tag}", median(rates), ">=", PURGE_RATE_MIN, "docs/s"
            )
        )
        p99 = common.percentile(during, 99) if during else None
        goals.append(
            common.Goal(
                f"another client's find_one p99 during it{tag}", p99, "<=", FIND_P99_MS, "ms"
            )
        )
    common.report_goals("ttl.py", goals)


if __name__ == "__main__":
    sys.exit(main())
