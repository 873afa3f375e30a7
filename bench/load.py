"""Load benchmark: many connections doing mixed reads and writes at once, through pymongo's
AsyncMongoClient; checks afterwards that every acknowledged write is there, and watches the
server's resident memory meanwhile.

Either starts both servers itself (``--spawn``: ebbdb from this checkout on a temporary dbpath,
the floor from ../shared/bench/floor_server.py, both stopped at the end) or takes their URIs::

    python bench/load.py --spawn
    python bench/load.py --spawn --quick                      # a smoke run
    python bench/load.py ebbdb=mongodb://127.0.0.1:27017 floor=mongodb://127.0.0.1:27090 --pid 1234

Each round, on ebbdb and then on the floor (rounds alternate between them): one
AsyncMongoClient with ``maxPoolSize = --connections`` (default 200) and as many tasks, so that
many sockets, on one event loop (uvloop when installed). A round first loads ``--preload``
shared documents ``{_id: i, ...}`` (floor's shape) and gives every task ``--owned`` documents
of its own, waits until the pool holds all its connections (``minPoolSize``, counted by a pool
listener), runs the tasks ``--warmup`` seconds untimed, then measures the operations that start
in the next ``--seconds`` (default 60). Each task draws every operation at random:

- read    (1 - ``--writes``; default half): find_one by ``_id``, half the time of a shared
          document, half of one of the task's own acknowledged documents (read-your-writes); a
          document not found counts as a wrong answer
- insert  (``--writes`` / 2): insert_one of a new document; acknowledged -> recorded
- update  (``--writes`` / 2): update_one ``{$inc: {n: 1}}`` by ``_id`` of one of the task's
          own acknowledged documents; acknowledged -> counted for that document

It prints ops/s, p50/p99/max latency for reads and for writes separately, and errors (any
exception, plus wrong answers). Afterwards every acknowledged insert (warm-up ones included)
must be found and every document's ``n`` must equal its acknowledged increments (a write that
failed may or may not have happened, and is allowed either way). The floor stores nothing, so it
is not verified: it gives the ceiling for ops/s.

The server's memory is read from /proc/<pid>/status (VmRSS, and its anonymous part RssAnon:
the heap, without the LMDB file pages mapped in) every ``--sample-every`` seconds; the server's
pid is known with --spawn, given with ``--pid``, or taken from serverStatus when the server is on
this host. Memory counts as flat when, past the first sixth of the measured window, the last
third's average is within 10 % of the first third's.

Targets (ebbdb): 0 errors, every acknowledged write present, write p99 <= 5x read p99, memory
flat. Figures are per round; the summary gives the median of the rounds (max: the largest).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import math
import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import common
from bson import ObjectId
from common import Doc
from pymongo import AsyncMongoClient, MongoClient, monitoring
from pymongo.asynchronous.collection import AsyncCollection
from pymongo.errors import PyMongoError

DB_NAME = "bench_load"
COLL = "load"
AsyncColl = AsyncCollection[Doc]

# Targets from the issue.
WRITE_READ_P99_MAX = 5.0  # write p99 / read p99
MEMORY_DRIFT_MAX = 0.10  # last third against first third of the samples
MEMORY_SKIP = 1 / 6  # of the measured window, not judged (still warming up)
POOL_WAIT_MAX = 60.0  # seconds the warm-up waits for the pool to fill

MEM_FIELDS = ("VmRSS", "RssAnon", "RssFile")


CLI = common.Cli(
    "Many connections of mixed reads and writes against ebbdb and the floor, "
    "with write verification and memory samples.",
    ("--spawn", "ebbdb=mongodb://127.0.0.1:27017 floor=mongodb://127.0.0.1:27090 --pid 1234"),
    quick_help="one short round: a smoke run",
    spawn=True,
)


@dataclass(frozen=True)
class Config(common.Settings):
    # measured window per round
    seconds: float = common.setting("--seconds", 60.0, 6.0, help="measured window per round (60)")
    # sockets = tasks
    connections: int = common.setting("--connections", 200, help="sockets and tasks (200)")
    # minimum untimed seconds before measuring
    warmup: float = common.setting("--warmup", 5.0, 1.0, help="min. untimed seconds per round (5)")
    # shared documents every task reads
    preload: int = common.setting("--preload", 10_000, help="shared documents (10000)")
    # documents each task owns at the start (it updates these and its inserts)
    owned: int = common.setting("--owned", 5, help="documents each task starts with (5)")
    # fraction of operations that write (half inserts, half updates)
    writes: float = common.setting("--writes", 0.5, help="fraction of writes (0.5)")
    # seconds between memory samples
    sample_every: float = common.setting(
        "--sample-every", 3.0, 0.5, help="memory sample period, s (3)"
    )
    # ebbdb's pid (None: the spawned server's, or serverStatus's when it is on this host)
    pid: int | None = common.setting("--pid", None, kind=int, help="ebbdb's pid, for its memory")
    timeout_ms: int  # server selection / connect timeout (--timeout-ms)

    def invalid(self, args: argparse.Namespace) -> str | None:
        sizes = [self.seconds, self.connections, self.preload, self.owned, self.sample_every]
        if min(*sizes, args.rounds) <= 0:
            return (
                "--seconds, --connections, --preload, --owned, --sample-every, --rounds must be > 0"
            )
        if not 0 <= self.writes <= 1 or self.warmup < 0:
            return "--writes must be within [0, 1] and --warmup >= 0"
        if self.pid is not None and args.spawn:
            return "--pid is for a server given by URI"
        return None


@dataclass
class Sample:
    t: float  # perf_counter when taken; once the round is over, seconds since the measured
    # window began (negative: warm-up)
    kb: dict[str, int]


@dataclass
class Round:
    """One round on one target."""

    seconds: float = 0.0
    connections: int = 0  # pool connections open when measuring began
    server_connections: int | None = None  # serverStatus connections.current then (ebbdb)
    reads: list[float] = field(default_factory=list)  # latencies, ms
    writes: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)  # exception type -> count
    first_errors: list[str] = field(default_factory=list)
    wrong: int = 0  # reads of an acknowledged document that found nothing, updates matching none
    # verification (None: not verified)
    inserts_acked: int | None = None
    inserts_missing: int | None = None
    updates_acked: int | None = None
    counters_wrong: int | None = None
    samples: list[Sample] = field(default_factory=list)
    mem_pid: int | None = None

    @property
    def ops(self) -> float:
        return (len(self.reads) + len(self.writes)) / self.seconds if self.seconds else math.nan

    def error_count(self) -> int:
        return sum(self.errors.values()) + self.wrong


@dataclass
class Target(common.Target):
    floor: bool = False
    rounds: list[Round] = field(default_factory=list)
    mem_note: str = ""


# -- the load -------------------------------------------------------------------------------------


class PoolCount(monitoring.ConnectionPoolListener):
    """How many pool connections are open (ready), whatever the server tells."""

    def __init__(self) -> None:
        self.open = 0

    def connection_ready(self, event: Any) -> None:
        self.open += 1

    def connection_closed(self, event: Any) -> None:
        self.open -= 1

    def pool_created(self, event: Any) -> None: ...
    def pool_ready(self, event: Any) -> None: ...
    def pool_cleared(self, event: Any) -> None: ...
    def pool_closed(self, event: Any) -> None: ...
    def connection_created(self, event: Any) -> None: ...
    def connection_check_out_started(self, event: Any) -> None: ...
    def connection_check_out_failed(self, event: Any) -> None: ...
    def connection_checked_out(self, event: Any) -> None: ...
    def connection_checked_in(self, event: Any) -> None: ...


@dataclass
class Worker:
    """One task's own documents and what the server acknowledged to it."""

    k: int
    rng: random.Random
    owned: list[ObjectId] = field(default_factory=list)  # acknowledged documents it may update
    incs: Counter[ObjectId] = field(default_factory=Counter)  # acknowledged $inc per document
    unsure: Counter[ObjectId] = field(default_factory=Counter)  # updates that failed
    seq: int = 0


class Load:
    """The tasks of one round and what they measure."""

    def __init__(self, coll: AsyncColl, cfg: Config, res: Round, seed: int) -> None:
        self.coll = coll
        self.cfg = cfg
        self.res = res
        self.workers = [
            Worker(k, random.Random(seed * 100_003 + k)) for k in range(cfg.connections)
        ]
        self.timing = False
        self.stop = False

    def error(self, exc: PyMongoError) -> None:
        self.res.errors[type(exc).__name__] += 1
        if len(self.res.first_errors) < 5:
            self.res.first_errors.append(f"{type(exc).__name__}: {exc}".splitlines()[0][:200])

    async def run(self, w: Worker) -> None:
        coll, cfg, rng = self.coll, self.cfg, w.rng
        pc = time.perf_counter_ns
        half_writes = cfg.writes / 2
        while not self.stop:
            x = rng.random()
            write = x < cfg.writes
            timed = self.timing  # counts if it starts in the measured window
            t0 = pc()
            try:
                if not write:
                    own = bool(w.owned) and rng.random() < 0.5
                    key: Any = rng.choice(w.owned) if own else rng.randrange(cfg.preload)
                    doc = await coll.find_one({"_id": key})
                    if doc is None or doc["_id"] != key:
                        self.res.wrong += 1
                elif x < half_writes:
                    w.seq += 1
                    new = {"_id": ObjectId(), "w": w.k, "n": 0, **common.floor_doc(w.seq)}
                    await coll.insert_one(new)
                    w.owned.append(new["_id"])
                else:
                    oid = rng.choice(w.owned)
                    try:
                        result = await coll.update_one({"_id": oid}, {"$inc": {"n": 1}})
                    except PyMongoError:
                        w.unsure[oid] += 1
                        raise
                    if result.matched_count == 1:
                        w.incs[oid] += 1
                    else:
                        self.res.wrong += 1
            except PyMongoError as exc:
                self.error(exc)
                await asyncio.sleep(0.01)  # not a tight loop against a failing server
                continue
            if timed:
                (self.res.writes if write else self.res.reads).append((pc() - t0) / 1e6)


class MemorySampler(threading.Thread):
    """Reads /proc/<pid>/status every `every` seconds until halted (a thread, so that a busy
    event loop does not delay the samples)."""

    def __init__(self, pid: int, every: float, samples: list[Sample]) -> None:
        super().__init__(name="memory", daemon=True)
        self.pid = pid
        self.every = every
        self.samples = samples
        self.halt = threading.Event()

    def run(self) -> None:
        while True:
            kb = read_status(self.pid)
            if kb:
                self.samples.append(Sample(time.perf_counter(), kb))
            if self.halt.wait(self.every):
                return


def read_status(pid: int) -> dict[str, int]:
    """The MEM_FIELDS of /proc/<pid>/status in kB ({} when the process is gone)."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name in MEM_FIELDS:
                    out[name] = int(rest.split()[0])
    except (OSError, ValueError):
        return {}
    return out


async def prepare(coll: AsyncColl, load: Load, cfg: Config, floor: bool) -> None:
    """Untimed: the shared documents (not on the floor) and each task's own."""
    await coll.drop()
    if not floor:
        for start in range(0, cfg.preload, 1000):
            end = min(cfg.preload, start + 1000)
            await coll.insert_many([{"_id": i, **common.floor_doc(i)} for i in range(start, end)])
    for w in load.workers:
        docs = [
            {"_id": ObjectId(), "w": w.k, "n": 0, **common.floor_doc(i)} for i in range(cfg.owned)
        ]
        if docs:
            await coll.insert_many(docs)
            w.owned.extend(d["_id"] for d in docs)


async def verify(coll: AsyncColl, load: Load, res: Round) -> None:
    """Every acknowledged insert is there, and every counter equals its acknowledged $inc
    (give or take the updates that failed)."""
    acked = [oid for w in load.workers for oid in w.owned]
    incs: Counter[ObjectId] = Counter()
    unsure: Counter[ObjectId] = Counter()
    for w in load.workers:
        incs.update(w.incs)
        unsure.update(w.unsure)
    found: dict[Any, int] = {}
    for i in range(0, len(acked), 1000):
        async for doc in coll.find({"_id": {"$in": acked[i : i + 1000]}}, {"n": 1}):
            found[doc["_id"]] = int(doc.get("n", -1))
    res.inserts_acked = len(acked)
    res.inserts_missing = sum(1 for oid in acked if oid not in found)
    res.updates_acked = sum(incs.values())
    res.counters_wrong = sum(
        1
        for oid in acked
        if oid in found and not incs[oid] <= found[oid] <= incs[oid] + unsure[oid]
    )


async def server_connections(t: Target, cfg: Config) -> int:
    """serverStatus connections.current, asked on a connection of its own: pymongo's pool
    is not fair, so a command queued behind the busy tasks could wait for ever."""
    admin: AsyncMongoClient[Doc] = AsyncMongoClient(
        t.uri, maxPoolSize=1, serverSelectionTimeoutMS=cfg.timeout_ms
    )
    try:
        status = await admin.admin.command("serverStatus")
    finally:
        await admin.close()
    return int(status.get("connections", {}).get("current", -1))


async def run_round(t: Target, cfg: Config, rnd: int) -> Round:
    res = Round()
    pool = PoolCount()
    client: AsyncMongoClient[Doc] = AsyncMongoClient(
        t.uri,
        maxPoolSize=cfg.connections,
        minPoolSize=cfg.connections,
        serverSelectionTimeoutMS=cfg.timeout_ms,
        connectTimeoutMS=cfg.timeout_ms,
        event_listeners=[pool],
    )
    sampler: MemorySampler | None = None
    try:
        coll: AsyncColl = client[DB_NAME][COLL]
        load = Load(coll, cfg, res, seed=rnd)
        await prepare(coll, load, cfg, t.floor)
        if t.pid is not None and not t.floor:
            res.mem_pid = t.pid
            sampler = MemorySampler(t.pid, cfg.sample_every, res.samples)
            sampler.start()
        # Open every connection before the load starts: pymongo's pool is not fair, and a task
        # waiting for a new connection while the others keep theirs busy can wait for seconds.
        began = time.perf_counter()
        while pool.open < cfg.connections and time.perf_counter() - began < POOL_WAIT_MAX:
            await asyncio.sleep(0.05)
        tasks = [asyncio.create_task(load.run(w)) for w in load.workers]
        try:
            await asyncio.sleep(cfg.warmup)
            res.connections = pool.open
            if not t.floor:
                res.server_connections = await server_connections(t, cfg)
            gc.collect()
            t0 = time.perf_counter()
            load.timing = True
            await asyncio.sleep(cfg.seconds)
            load.timing = False
            res.seconds = time.perf_counter() - t0
        finally:
            load.stop = True
            await asyncio.gather(*tasks)
            if sampler is not None:
                sampler.halt.set()
                sampler.join()
                for s in res.samples:
                    s.t -= t0
        if not t.floor:
            await verify(coll, load, res)
            await coll.drop()
    finally:
        await client.close()
    return res


# -- report ---------------------------------------------------------------------------------------


def pct(values: Sequence[float], p: float) -> float | None:
    return common.percentile(values, p) if values else None


def memory_flat(samples: Sequence[Sample], seconds: float, what: str) -> tuple[bool | None, str]:
    """(flat?, how it was judged) over the samples past the first sixth of the window."""
    judged = [
        s.kb[what] for s in samples if seconds * MEMORY_SKIP <= s.t <= seconds and what in s.kb
    ]
    if len(judged) < 3:
        return None, f"{len(judged)} samples in the judged window: too few"
    third = len(judged) // 3
    first = sum(judged[:third]) / third
    last = sum(judged[-third:]) / third
    drift = last / first - 1 if first else math.nan
    ok = abs(drift) <= MEMORY_DRIFT_MAX
    return ok, (
        f"{what} first third {first:,.0f} kB, last third {last:,.0f} kB "
        f"({drift * 100:+.1f} %, {len(judged)} samples past {seconds * MEMORY_SKIP:.0f} s)"
    )


def ms(value: float | None) -> str:
    return common.fmt_num(value, 2)


def print_round(t: Target, res: Round, r: int, rounds: int) -> None:
    print(
        f"round {r + 1}/{rounds}  {t.label:<5}  {res.ops:,.0f} ops/s over {res.seconds:.1f} s "
        f"({len(res.reads):,} reads, {len(res.writes):,} writes), {res.connections} connections"
        + (
            f" (server counts {res.server_connections})"
            if res.server_connections is not None
            else ""
        ),
        flush=True,
    )
    for name, lat in (("read ", res.reads), ("write", res.writes)):
        print(
            f"    {name} latency ms: p50 {ms(pct(lat, 50))}  p99 {ms(pct(lat, 99))}  "
            f"max {ms(max(lat, default=None))}"
        )
    errs = ", ".join(f"{k} {v:,}" for k, v in res.errors.items()) or "none"
    print(f"    errors: {res.error_count():,} (exceptions: {errs}; wrong answers {res.wrong:,})")
    for e in res.first_errors:
        print(f"      {e}")
    if res.inserts_acked is not None:
        print(
            f"    verified: {res.inserts_acked:,} acknowledged inserts, {res.inserts_missing:,} missing; "
            f"{res.updates_acked:,} acknowledged $inc, {res.counters_wrong:,} documents with a wrong count"
        )
    if res.samples:
        print(
            f"    memory of pid {res.mem_pid} (kB; t in s from the start of the measured window):"
        )
        for s in res.samples:
            cells = "  ".join(f"{k} {s.kb.get(k, 0):>9,}" for k in MEM_FIELDS)
            print(f"      t={s.t:7.1f}  {cells}")
        for what in ("VmRSS", "RssAnon"):
            ok, how = memory_flat(res.samples, res.seconds, what)
            print(f"    {how}: {'flat' if ok else 'not flat' if ok is not None else '-'}")


def summary(ebbdb: Target, floor: Target | None, rounds: int) -> None:
    print()
    print(f"==== median of {rounds} round(s) (max: the largest); ratio ebbdb / floor ====")
    print()

    def figures(t: Target | None) -> dict[str, float | None]:
        if t is None or not t.rounds:
            return {}
        rs = t.rounds
        return {
            "ops/s": common.median([r.ops for r in rs]),
            "reads/s": common.median([len(r.reads) / r.seconds for r in rs if r.seconds]),
            "writes/s": common.median([len(r.writes) / r.seconds for r in rs if r.seconds]),
            "read p50 ms": common.median([pct(r.reads, 50) or math.nan for r in rs]),
            "read p99 ms": common.median([pct(r.reads, 99) or math.nan for r in rs]),
            "read max ms": max((x for r in rs for x in r.reads), default=None),
            "write p50 ms": common.median([pct(r.writes, 50) or math.nan for r in rs]),
            "write p99 ms": common.median([pct(r.writes, 99) or math.nan for r in rs]),
            "write max ms": max((x for r in rs for x in r.writes), default=None),
            "errors (all rounds)": sum(r.error_count() for r in rs),
        }

    e, f = figures(ebbdb), figures(floor)
    rows = []
    for key in e:
        ev, fv = e.get(key), f.get(key)
        digits = 2 if "ms" in key else 0
        r = ev / fv if ev is not None and fv and key.endswith("/s") else None
        rows.append(
            [
                key,
                common.fmt_num(ev, digits),
                common.fmt_num(fv, digits),
                "-" if r is None else f"{r:.2f}",
            ]
        )
    common.table(["", "ebbdb", "floor", "ebbdb/floor"], rows, left=1)

    print()
    print("==== targets (ebbdb) ====")
    print()
    rs = ebbdb.rounds
    errors = sum(r.error_count() for r in rs) if rs else None
    verified = [r for r in rs if r.inserts_missing is not None]
    missing = sum((r.inserts_missing or 0) + (r.counters_wrong or 0) for r in verified)
    acked = sum((r.inserts_acked or 0) + (r.updates_acked or 0) for r in verified)
    rp99, wp99 = e.get("read p99 ms"), e.get("write p99 ms")
    p99_ratio = wp99 / rp99 if wp99 is not None and rp99 else None
    flat = [memory_flat(r.samples, r.seconds, "RssAnon")[0] for r in rs if r.samples]
    flat_rss = [memory_flat(r.samples, r.seconds, "VmRSS")[0] for r in rs if r.samples]

    def all_ok(oks: list[bool | None]) -> bool | None:
        return None if not oks or None in oks else all(oks)

    lines = [
        ("errors", common.fmt_num(errors), "0", None if errors is None else errors == 0),
        (
            "acknowledged writes present",
            f"{acked - missing:,} of {acked:,}" if verified else "-",
            "all",
            (missing == 0) if verified else None,
        ),
        (
            "write p99 / read p99",
            "-" if p99_ratio is None else f"{p99_ratio:.2f}",
            f"<= {WRITE_READ_P99_MAX:g}",
            None if p99_ratio is None else p99_ratio <= WRITE_READ_P99_MAX,
        ),
        (
            "memory flat: heap (RssAnon), every round",
            f"{sum(1 for x in flat if x)} of {len(flat)} rounds" if flat else ebbdb.mem_note or "-",
            f"within {MEMORY_DRIFT_MAX:.0%}",
            all_ok(flat),
        ),
        (
            "memory flat: VmRSS (with LMDB pages), every round",
            f"{sum(1 for x in flat_rss if x)} of {len(flat_rss)} rounds" if flat_rss else "-",
            f"within {MEMORY_DRIFT_MAX:.0%}",
            all_ok(flat_rss),
        ),
    ]
    common.table(
        ["target", "measured", "target", "verdict"],
        [[what, value, target, common.verdict(ok)] for what, value, target, ok in lines],
        left=1,
    )


# -- driving --------------------------------------------------------------------------------------


def find_pid(t: Target, cfg: Config) -> None:
    """The ebbdb pid for the memory samples: spawned, --pid, or serverStatus when local."""
    if cfg.pid is not None:
        t.pid = cfg.pid
    if t.pid is not None:
        return
    host = urlsplit(t.uri).hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1"):
        t.mem_note = "no --pid and the server is not on this host: memory not sampled"
        return
    client: common.Client = MongoClient(t.uri, serverSelectionTimeoutMS=cfg.timeout_ms)
    with client:
        pid = int(client.admin.command("serverStatus").get("pid", 0))
    if pid and read_status(pid):
        t.pid = pid
        print(f"  {t.label}: pid {pid} (from serverStatus)")
    else:
        t.mem_note = "no --pid and serverStatus gave no pid on this host: memory not sampled"


async def drive(ebbdb: Target, floor: Target | None, cfg: Config, rounds: int) -> None:
    targets = [t for t in (ebbdb, floor) if t is not None]
    for r in range(rounds):
        for t in targets:  # alternate: ebbdb, floor, ebbdb, floor, ...
            try:
                res = await run_round(t, cfg, r)
            except PyMongoError as exc:
                common.record_error(t, f"round {r + 1}", exc)
                continue
            t.rounds.append(res)
            print_round(t, res, r, rounds)


def main(argv: Sequence[str] | None = None) -> int:
    ap, args, cfg = common.parse_args(argv, Config, CLI)
    loop = "uvloop" if common.has_uvloop() else "asyncio"
    print(
        f"{common.versions()}; AsyncMongoClient on {loop}, {cfg.connections} connections, "
        f"{cfg.seconds:g} s per round after >= {cfg.warmup:g} s warm-up, writes {cfg.writes:.0%} "
        f"(half insert_one, half update_one), {cfg.preload:,} shared documents, rounds={args.rounds}"
    )
    with contextlib.ExitStack() as stack:
        ebbdb, floor = common.ebbdb_and_floor(ap, args, Target, stack, floor_ndocs=1)
        targets = [t for t in (ebbdb, floor) if t is not None]
        for t in targets:
            print(f"  {t.label}: {t.uri}", flush=True)
            client = common.connect(t, cfg.timeout_ms)
            if client is None:
                return 2
            with client:
                t.floor = common.is_floor(client)
        if floor is None:
            print("  no floor given: the ratios against it are not measured")
        try:
            find_pid(ebbdb, cfg)
        except PyMongoError as exc:
            ebbdb.mem_note = f"serverStatus failed ({type(exc).__name__}): memory not sampled"
        if ebbdb.mem_note:
            print(f"  {ebbdb.mem_note}")
        if loop == "uvloop":
            import uvloop

            uvloop.run(drive(ebbdb, floor, cfg, args.rounds))
        else:
            asyncio.run(drive(ebbdb, floor, cfg, args.rounds))
        summary(ebbdb, floor, args.rounds)
        return common.report_failures(targets)


if __name__ == "__main__":
    sys.exit(main())
