"""Query benchmark for MongoDB-compatible servers, driven through pymongo.

Starts no server itself: point it at one or more running servers, each given as a
MongoDB URI, optionally labelled ``label=URI`` so the output can name it::

    python bench/query.py ebbdb=mongodb://127.0.0.1:27017 floor=mongodb://127.0.0.1:27091
    python bench/query.py --reuse --rounds 5 ebbdb=mongodb://127.0.0.1:27017
    python bench/query.py --quick ebbdb=mongodb://127.0.0.1:27017 floor=mongodb://...

The protocol floor (a server that stores nothing and answers any find with its canned
documents) is started separately, with as many documents as the scan collection here::

    python ../shared/bench/floor_server.py --port 27091 --raw --ndocs 100000

Each target gets one MongoClient with a single connection (maxPoolSize=1). A target is
taken for the floor when it answers the floor's ``{__stats: 1}`` command (or its label
starts with "floor"); the floor only runs step 3, since steps 1-2 need real storage.
What is measured, in database ``bench_query``:

1. point find by an indexed field: ``find_one({"k": x})`` for random x on a large
   collection (``--n-large``, default 1,000,000 documents ``{_id: i, k: i, g: i % 100,
   s: "user_%07d"}``, index on ``k``) and on a 10,000-document one built the same way.
   Lookups alternate between the two in blocks. Reports median and p95 latency (µs)
   and ops/s of each, and the ratio of median latencies (target: within 20 %).
2. a 1 %-selective query on the 100,000-document scan collection: median time of
   ``list(find({"group": g}))`` (1,000 documents) with an index on ``group`` (target:
   under 10 ms) and with ``hint({"$natural": 1})``, i.e. a full collection scan
   (target: under 300 ms). The winning plan from explain is printed for both.
3. iterating all documents: ``list(find())`` over the scan collection (docs/s) against
   the floor's canned documents, rounds alternating between targets; reports each
   target's ratio to the floor (target: at least 70 %). The scan collection's
   documents have the floor's exact shape (``_id`` ObjectId, name, email, age, score,
   group = i % 100), so both sides send the same number of bytes per document.

Loading uses insert_many batches of 10,000 and its time is printed. With ``--reuse`` a
collection that already holds the expected number of documents is kept as it is, and
the database is left in place at the end for the next run; without it, each collection
is dropped and reloaded, and the database is dropped at the end.

Results are never asserted on: each figure is printed next to its target with "met" or
"NOT met", wrong answers (a find_one that returns nothing, a query returning the wrong
number of documents) are counted and printed, and a failing step is reported and the
rest runs on. Shared machines are noisy: compare ratios, not absolute figures.
"""

from __future__ import annotations

import argparse
import functools
import gc
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import bson
import common
from bson import ObjectId
from common import Doc, median
from pymongo.collection import Collection
from pymongo.cursor import Cursor
from pymongo.errors import PyMongoError

DB_NAME = "bench_query"

Coll = Collection[Doc]

# Targets from the issue.
POINT_RATIO_MAX = 1.20  # large / small median latency of find_one by an indexed field
SEL_INDEXED_MS = 10.0  # 1 %-selective query with an index
SEL_NATURAL_MS = 300.0  # the same without one
ITER_RATIO_MIN = 0.70  # docs/s iterating a find, target / floor

SEL_FIELD = "group"  # the scan collection's i % 100 field (named as in the floor's documents)


CLI = common.Cli(
    "Query latency and throughput of MongoDB-compatible servers via pymongo.",
    ("ebbdb=mongodb://127.0.0.1:27017 floor=mongodb://127.0.0.1:27091",),
    quick_help="small sizes for a smoke run",
)


@dataclass(frozen=True)
class Config(common.Settings):
    reuse: bool = common.setting(
        "--reuse",
        False,
        help="keep collections that already hold the expected documents; keep the data at the end",
    )
    # documents in the large point-lookup collection
    n_large: int = common.setting(
        "--n-large", 1_000_000, 20_000, help="large collection (1,000,000)"
    )
    # documents in the small point-lookup collection
    n_small: int = common.setting("--n-small", 10_000, 2_000, help="small collection (10,000)")
    # documents in the selective-query / iteration collection
    n_scan: int = common.setting(
        "--n-scan", 100_000, 10_000, help="selective/iterate collection (100,000)"
    )
    # documents per insert_many batch while loading
    batch_size: int = common.setting("--batch-size", 10_000, help="insert_many batch (10,000)")
    # find_one calls per point collection per round
    lookups: int = common.setting(
        "--lookups", 3_000, 300, help="find_one per collection per round (3,000)"
    )
    # find_one calls per block before switching collection
    block: int = common.setting("--block", 250, help="look-ups before switching collection (250)")
    # indexed 1 % queries per round
    sel_reps: int = common.setting("--sel-reps", 20, 5, help="indexed 1 %% queries per round (20)")
    # unindexed 1 % queries per round
    natural_reps: int = common.setting(
        "--natural-reps", 5, 2, help="unindexed 1 %% queries per round (5)"
    )
    # full iterations per round and target
    iter_reps: int = common.setting("--iter-reps", 3, 1, help="full iterations per round (3)")
    # untimed find_one calls per point collection before the first round
    warmup: int = common.setting("--warmup", 300, 20, help="untimed find_one per collection (300)")
    seed: int = common.setting("--seed", 12345, help="random seed for the look-ups")
    timeout_ms: int  # server selection / connect timeout (--timeout-ms)

    def invalid(self, args: argparse.Namespace) -> str | None:
        sizes = [self.n_large, self.n_small, self.n_scan, self.batch_size, self.lookups]
        sizes += [self.block, self.sel_reps, self.natural_reps, self.iter_reps]
        if min(args.rounds, *sizes) < 1 or self.warmup < 0:
            return "sizes, repetitions and --rounds must be >= 1 (--warmup >= 0)"
        if self.n_large == self.n_small:
            return "--n-large and --n-small must differ"
        return None


@dataclass
class Target(common.Target):
    floor: bool = False
    # latencies pooled over rounds: "large"/"small" in µs, "sel_idx"/"sel_nat" in ms
    samples: dict[str, list[float]] = field(default_factory=dict)
    # per-round figures: "iter" docs/s
    rounds: dict[str, list[float]] = field(default_factory=dict)
    wrong: dict[str, int] = field(default_factory=dict)  # wrong answers per measurement
    info: dict[str, str] = field(default_factory=dict)  # plans, document sizes, ...


# -- documents ------------------------------------------------------------------------------------


def point_name(n: int) -> str:
    return f"points_{n}"


def scan_name(n: int) -> str:
    return f"scan_{n}"


def make_point_docs(start: int, n: int) -> list[Doc]:
    return [{"_id": i, "k": i, "g": i % 100, "s": f"user_{i:07d}"} for i in range(start, start + n)]


def make_scan_docs(start: int, n: int) -> list[Doc]:
    """The floor server's documents, field for field (SEL_FIELD is their "group")."""
    return [{"_id": ObjectId(), **common.floor_doc(i)} for i in range(start, start + n)]


def expected_matches(n: int, g: int) -> int:
    """How many of i in range(n) have i % 100 == g."""
    return n // 100 + (1 if g < n % 100 else 0)


# -- helpers --------------------------------------------------------------------------------------


def plan_stages(cursor: Cursor[Doc]) -> str:
    """The winning plan's stages from explain, outermost first, e.g. FETCH <- IXSCAN(k_1)."""
    ex = cursor.explain()
    plan: Any = ex.get("queryPlanner", {}).get("winningPlan", {})
    stages: list[str] = []
    while isinstance(plan, Mapping) and plan:
        stage = str(plan.get("stage", "?"))
        if "indexName" in plan:
            stage += f"({plan['indexName']})"
        stages.append(stage)
        plan = plan.get("inputStage")
    return " <- ".join(stages) or "?"


# -- loading --------------------------------------------------------------------------------------


def has_data(coll: Coll, n: int, check: Callable[[Coll], bool]) -> bool:
    try:
        return coll.estimated_document_count() == n and check(coll)
    except PyMongoError:
        return False


def ensure_collection(
    label: str,
    coll: Coll,
    n: int,
    make: Callable[[int, int], list[Doc]],
    check: Callable[[Coll], bool],
    index: str,
    cfg: Config,
) -> None:
    """Load `n` documents (unless --reuse finds them already there), then index `index`."""
    tag = f"  {label} {coll.name}"
    if cfg.reuse and has_data(coll, n, check):
        print(f"{tag}: reusing {n:,} documents", flush=True)
    else:
        common.load(tag, coll, n, make, cfg.batch_size)
    t0 = time.perf_counter()
    coll.create_index(index)
    print(f"{tag}: create_index({index!r}) {time.perf_counter() - t0:.2f} s", flush=True)


def check_points(n: int) -> Callable[[Coll], bool]:
    def check(coll: Coll) -> bool:
        first, last = coll.find_one({"_id": 0}), coll.find_one({"_id": n - 1})
        return bool(first and last and first.get("k") == 0 and last.get("k") == n - 1)

    return check


def check_scan(n: int) -> Callable[[Coll], bool]:
    def check(coll: Coll) -> bool:
        return coll.find_one({"name": f"user_{n - 1:07d}"}) is not None

    return check


# -- steps ----------------------------------------------------------------------------------------


def setup_storage(t: Target, cfg: Config) -> None:
    assert t.client is not None
    db = t.client[DB_NAME]
    ensure_collection(
        t.label,
        db[point_name(cfg.n_large)],
        cfg.n_large,
        make_point_docs,
        check_points(cfg.n_large),
        "k",
        cfg,
    )
    ensure_collection(
        t.label,
        db[point_name(cfg.n_small)],
        cfg.n_small,
        make_point_docs,
        check_points(cfg.n_small),
        "k",
        cfg,
    )
    ensure_collection(
        t.label,
        db[scan_name(cfg.n_scan)],
        cfg.n_scan,
        make_scan_docs,
        check_scan(cfg.n_scan),
        SEL_FIELD,
        cfg,
    )


def explain_storage(t: Target, cfg: Config) -> None:
    assert t.client is not None
    db = t.client[DB_NAME]
    large = db[point_name(cfg.n_large)]
    scan = db[scan_name(cfg.n_scan)]
    flt = {SEL_FIELD: 7}
    for key, cursor in (
        ("plan_point", large.find({"k": cfg.n_large // 2}).limit(-1)),
        ("plan_sel_idx", scan.find(flt)),
        ("plan_sel_nat", scan.find(flt).hint([("$natural", 1)])),
    ):
        try:
            t.info[key] = plan_stages(cursor)
        except PyMongoError as exc:
            t.info[key] = f"explain failed: {type(exc).__name__}: {str(exc)[:100]}"


def warm_up(t: Target, cfg: Config) -> None:
    assert t.client is not None
    db = t.client[DB_NAME]
    if t.floor:
        list(db["floor_iter"].find())
        return
    rng = random.Random(cfg.seed - 1)
    for n in (cfg.n_large, cfg.n_small):
        coll = db[point_name(n)]
        for _ in range(cfg.warmup):
            coll.find_one({"k": rng.randrange(n)})
    scan = db[scan_name(cfg.n_scan)]
    list(scan.find({SEL_FIELD: 7}))
    list(scan.find({SEL_FIELD: 7}).hint([("$natural", 1)]))
    list(scan.find())


def timed_lookups(coll: Coll, xs: Sequence[int]) -> tuple[list[float], int]:
    """find_one({"k": x}) for each x; (latencies in µs, wrong answers)."""
    pc = time.perf_counter_ns
    find_one = coll.find_one
    lat: list[float] = []
    wrong = 0
    for x in xs:
        t0 = pc()
        doc = find_one({"k": x})
        t1 = pc()
        lat.append((t1 - t0) / 1000)
        if doc is None or doc.get("k") != x:
            wrong += 1
    return lat, wrong


def blocks(xs: Sequence[int], size: int) -> Iterator[Sequence[int]]:
    for i in range(0, len(xs), size):
        yield xs[i : i + size]


def bench_points(t: Target, cfg: Config, rnd: int) -> dict[str, float]:
    """Step 1: find_one by the indexed `k`, alternating large/small collection in blocks."""
    assert t.client is not None
    db = t.client[DB_NAME]
    rng = random.Random(cfg.seed + rnd)
    sides = {
        "large": (
            db[point_name(cfg.n_large)],
            [rng.randrange(cfg.n_large) for _ in range(cfg.lookups)],
        ),
        "small": (
            db[point_name(cfg.n_small)],
            [rng.randrange(cfg.n_small) for _ in range(cfg.lookups)],
        ),
    }
    lat: dict[str, list[float]] = {"large": [], "small": []}
    chunks = {key: list(blocks(xs, cfg.block)) for key, (_c, xs) in sides.items()}
    gc.collect()
    for i in range(len(chunks["large"])):
        order = ("large", "small") if i % 2 == 0 else ("small", "large")
        for key in order:
            got, wrong = timed_lookups(sides[key][0], chunks[key][i])
            lat[key].extend(got)
            t.wrong[key] = t.wrong.get(key, 0) + wrong
    out: dict[str, float] = {}
    for key, values in lat.items():
        t.samples.setdefault(key, []).extend(values)
        out[f"{key}_med_us"] = statistics.median(values)
    return out


def bench_selective(t: Target, cfg: Config, rnd: int) -> dict[str, float]:
    """Step 2: list(find({group: g})) with the index and with hint $natural."""
    assert t.client is not None
    coll = t.client[DB_NAME][scan_name(cfg.n_scan)]
    got: dict[str, list[float]] = {"sel_idx": [], "sel_nat": []}
    for rep in range(max(cfg.sel_reps, cfg.natural_reps)):
        g = (7 + 11 * (rnd * 31 + rep)) % 100
        flt = {SEL_FIELD: g}
        runs: list[tuple[str, list[tuple[str, int]] | None]] = []
        if rep < cfg.sel_reps:
            runs.append(("sel_idx", None))
        if rep < cfg.natural_reps:
            runs.append(("sel_nat", [("$natural", 1)]))
        for key, hint in runs:
            gc.collect()
            t0 = time.perf_counter()
            cursor = coll.find(flt)
            if hint is not None:
                cursor = cursor.hint(hint)
            docs = list(cursor)
            ms = (time.perf_counter() - t0) * 1000
            got[key].append(ms)
            if len(docs) != expected_matches(cfg.n_scan, g):
                t.wrong[key] = t.wrong.get(key, 0) + 1
            del docs
    out: dict[str, float] = {}
    for key, values in got.items():
        t.samples.setdefault(key, []).extend(values)
        out[f"{key}_med_ms"] = statistics.median(values)
    return out


def bench_iterate(t: Target, cfg: Config) -> dict[str, float]:
    """Step 3: list(find()) over all documents (the floor: its canned ones), docs/s."""
    assert t.client is not None
    name = "floor_iter" if t.floor else scan_name(cfg.n_scan)
    coll = t.client[DB_NAME][name]
    rates: list[float] = []
    for _ in range(cfg.iter_reps):
        gc.collect()
        t0 = time.perf_counter()
        docs = list(coll.find())
        secs = time.perf_counter() - t0
        rates.append(len(docs) / secs if secs > 0 else float("nan"))
        if docs and "iter_bytes" not in t.info:
            t.info["iter_docs"] = f"{len(docs):,}"
            t.info["iter_bytes"] = f"{len(bson.encode(docs[0]))}"
        if not t.floor and len(docs) != cfg.n_scan:
            t.wrong["iter"] = t.wrong.get("iter", 0) + 1
        del docs
    value = statistics.median(rates)
    t.rounds.setdefault("iter", []).append(value)
    return {"iter_docs_s": value}


# -- driving --------------------------------------------------------------------------------------


def is_floor(target: Target) -> bool:
    """Labelled "floor..." or answering the floor server's {__stats: 1}."""
    assert target.client is not None
    return target.label.lower().startswith("floor") or common.is_floor(target.client)


def print_report(targets: Sequence[Target], cfg: Config, rounds: int) -> None:
    storage = [t for t in targets if not t.floor]
    floors = [t for t in targets if t.floor]
    print()
    print(f"==== results: median over {rounds} round(s) ====")

    print()
    print(
        f"1. find_one({{k: x}}), random x, index on k: {cfg.n_large:,} vs {cfg.n_small:,} documents "
        f"({cfg.lookups:,} look-ups per collection per round, pooled)"
    )
    for t in storage:
        rows = []
        for key, n in (("large", cfg.n_large), ("small", cfg.n_small)):
            lat = t.samples.get(key, [])
            ops = len(lat) / (sum(lat) / 1e6) if lat and sum(lat) > 0 else None
            rows.append((key, n, median(lat), common.percentile(lat, 95) if lat else None, ops))
        for key, n, med, p95, ops in rows:
            wrong = t.wrong.get(key, 0)
            print(
                f"   {t.label:<8} {n:>10,} docs   median {common.fmt_num(med, 1):>8} µs   "
                f"p95 {common.fmt_num(p95, 1):>8} µs   {common.fmt_num(ops):>7} ops/s"
                + (f"   WRONG ANSWERS: {wrong}" if wrong else "")
            )
        (_, _, med_l, p95_l, ops_l), (_, _, med_s, p95_s, ops_s) = rows
        if med_l and med_s:
            ratio = med_l / med_s
            print(
                f"   {t.label:<8} large/small median latency {ratio:.3f}x "
                f"({(ratio - 1) * 100:+.1f} %)   target: within 20 % (<= {POINT_RATIO_MAX:.2f}x)   "
                f"{common.verdict(ratio <= POINT_RATIO_MAX)}"
            )
        if p95_l and p95_s:
            print(f"   {t.label:<8} large/small p95 latency    {p95_l / p95_s:.3f}x")
        if ops_l and ops_s:
            print(f"   {t.label:<8} large/small ops/s          {ops_l / ops_s:.3f}x")
        if "plan_point" in t.info:
            print(f"   {t.label:<8} plan: {t.info['plan_point']}")

    print()
    print(
        f"2. 1 %-selective query, list(find({{{SEL_FIELD}: g}})) -> "
        f"{expected_matches(cfg.n_scan, 7):,} of {cfg.n_scan:,} documents"
    )
    for t in storage:
        for key, what, limit in (
            ("sel_idx", f"index on {SEL_FIELD}", SEL_INDEXED_MS),
            ("sel_nat", "no index (hint $natural)", SEL_NATURAL_MS),
        ):
            vals = t.samples.get(key, [])
            med = median(vals)
            wrong = t.wrong.get(key, 0)
            print(
                f"   {t.label:<8} {what:<24}  median {common.fmt_num(med, 2):>8} ms   "
                f"(min {common.fmt_num(min(vals) if vals else None, 2)}, "
                f"p95 {common.fmt_num(common.percentile(vals, 95) if vals else None, 2)}, n={len(vals)})   "
                f"target: < {limit:g} ms   {common.verdict(None if med is None else med < limit)}"
                + (f"   WRONG COUNTS: {wrong}" if wrong else "")
            )
        for key in ("plan_sel_idx", "plan_sel_nat"):
            if key in t.info:
                label = "indexed" if key == "plan_sel_idx" else "$natural"
                print(f"   {t.label:<8} plan ({label}): {t.info[key]}")

    print()
    print(
        f"3. iterate all documents, list(find()), docs/s ({cfg.iter_reps} per round, rounds alternate)"
    )
    for t in targets:
        med = median(t.rounds.get("iter", []))
        per_round = ", ".join(common.fmt_num(v) for v in t.rounds.get("iter", []))
        extra = ""
        if "iter_docs" in t.info:
            extra = f"   {t.info['iter_docs']} docs of {t.info['iter_bytes']} B"
        wrong = t.wrong.get("iter", 0)
        print(
            f"   {t.label:<8} {common.fmt_num(med):>9} docs/s   (rounds: {per_round}){extra}"
            + ("   (protocol floor)" if t.floor else "")
            + (f"   WRONG COUNTS: {wrong}" if wrong else "")
        )
    if floors:
        base = floors[0]
        fmed = median(base.rounds.get("iter", []))
        for t in storage:
            med = median(t.rounds.get("iter", []))
            if med and fmed:
                ratio = med / fmed
                print(
                    f"   {t.label}/{base.label} {ratio * 100:.1f} %   "
                    f"target: >= {ITER_RATIO_MIN * 100:.0f} %   {common.verdict(ratio >= ITER_RATIO_MIN)}"
                )
    else:
        print("   (no floor target given: no ratio)")


def main(argv: Sequence[str] | None = None) -> int:
    ap, args, cfg = common.parse_args(argv, Config, CLI)
    targets = common.parse_targets(ap, args.targets, Target)
    print(
        f"{common.versions()}; "
        f"point collections {cfg.n_large:,} / {cfg.n_small:,} docs, {cfg.lookups:,} find_one each; "
        f"scan collection {cfg.n_scan:,} docs; rounds={args.rounds}"
        + (", reuse" if cfg.reuse else "")
    )

    with common.connected(
        targets, cfg.timeout_ms, lambda t: None if t.floor or cfg.reuse else DB_NAME
    ):
        for t in targets:
            t.floor = is_floor(t)
            print(
                f"  {t.label}: {t.uri}"
                + ("  (protocol floor: step 3 only)" if t.floor else "  (steps 1-3)")
            )

        if all(t.floor for t in targets):
            print("  (only floor targets: steps 1-2 need real storage and are skipped)")

        print("\nsetup", flush=True)
        for t in targets:
            if t.floor:
                continue
            common.step(t, "load", functools.partial(setup_storage, t, cfg))
            common.step(t, "explain", functools.partial(explain_storage, t, cfg))
        for t in targets:
            common.step(t, "warm-up", functools.partial(warm_up, t, cfg))

        print("\nrounds", flush=True)
        width = max(len(t.label) for t in targets)
        for r in range(args.rounds):
            for t in targets:
                if t.floor:
                    continue
                got = common.step(t, "find_one", functools.partial(bench_points, t, cfg, r))
                got.update(
                    common.step(t, "selective", functools.partial(bench_selective, t, cfg, r))
                )
                print(
                    f"round {r + 1}/{args.rounds}  {t.label:<{width}}  "
                    f"find_one large {common.fmt_num(got.get('large_med_us'), 1)} µs  "
                    f"small {common.fmt_num(got.get('small_med_us'), 1)} µs  "
                    f"sel indexed {common.fmt_num(got.get('sel_idx_med_ms'), 2)} ms  "
                    f"$natural {common.fmt_num(got.get('sel_nat_med_ms'), 2)} ms",
                    flush=True,
                )
            for t in targets:  # step 3 back to back: A, B, A, B, ...
                got = common.step(t, "iterate", functools.partial(bench_iterate, t, cfg))
                print(
                    f"round {r + 1}/{args.rounds}  {t.label:<{width}}  "
                    f"iterate {common.fmt_num(got.get('iter_docs_s'))} docs/s",
                    flush=True,
                )

        print_report(targets, cfg, args.rounds)
        return common.report_failures(targets)


if __name__ == "__main__":
    sys.exit(main())
