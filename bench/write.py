"""Write-path benchmark: ebbdb against the floor server (the ceiling), through pymongo.

Either starts both servers itself (``--spawn``: ebbdb from this checkout on a temporary
dbpath, the floor from ../shared/bench/floor_server.py with ``--raw --ndocs <find size>``,
both stopped at the end) or takes their URIs::

    python bench/write.py                                     # the same as --spawn
    python bench/write.py --spawn --quick                     # a smoke run
    python bench/write.py ebbdb=mongodb://127.0.0.1:27017 floor=mongodb://127.0.0.1:27090

A floor started by hand needs ``--raw --ndocs 10000`` (the find size, ``--find-docs``), and
``--loop uvloop`` when uvloop is installed, since ebbdb runs on it then.

Each target gets one MongoClient with a single connection (maxPoolSize=1). Every round
measures, on ebbdb and then on the floor (rounds alternate between them), in database
``bench_write``:

- insert_one   ``--n`` documents in the floor's shape, one call each (ops/s)
- update_one   by ``_id`` over those documents, ``$inc`` of one field and ``$set`` of another,
               alternately (ops/s; the floor acknowledges ``n: 1, nModified: 1``)
- find_one     by ``_id`` over the same documents (ops/s; the floor answers a document of the
               same shape with the ``_id`` asked for)
- insert_many  ``--batches`` batches of 1,000 documents (docs/s)
- find         iterating an unfiltered find over ``--find-docs`` documents (docs/s; the floor
               answers its own pre-encoded documents of the same shape)
- bare socket  insert of one document (a kind-1 document sequence, as drivers send it), then find
               by ``_id`` over those documents, as raw OP_MSG on one socket, one request at a
               time, the messages built before the clock starts: the server is the limit (ops/s)

and, the two targets that compare ebbdb with itself (the floor's figures are printed for
reference only; it stores nothing and ignores the write concern):

- bulk         a 2,000-document insert_many into an empty collection, then one bulk_write of
               2,000 UpdateOne by ``_id`` over those documents; the ratio of the median times
- j: true      insert_one from 8 threads for ``--j-seconds``, each thread with its own
               MongoClient (maxPoolSize=1), so 8 connections; once with the default write
               concern and once with ``WriteConcern(j=True)`` (ebbdb only); ops/s ratio

Ratios are of the medians over the rounds. The final table gives each target, the measured
value, and "met" or "NOT met". Shared machines are noisy: compare ratios, not absolute
figures. Results are never asserted on; wrong answers (an update that matched nothing, a
find_one that returned another document or none, a find that returned the wrong number) are
counted and printed, and a failing step is reported and the rest runs on.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import bson
import common
from bson import ObjectId
from common import Client, Doc
from pymongo import MongoClient, UpdateOne
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import PyMongoError
from pymongo.write_concern import WriteConcern

DB_NAME = "bench_write"
Coll = Collection[Doc]
Db = Database[Doc]

# Targets from issue 23.
SINGLE_RATIO_MIN = 0.75  # insert_one, update_one, find_one: ebbdb / floor ops/s
INSERT_MANY_RATIO_MIN = 0.50  # insert_many: ebbdb / floor docs/s
ITERATE_RATIO_MIN = 0.75  # find iteration: ebbdb / floor docs/s
BULK_TIME_RATIO_MAX = 2.0  # bulk_write of N UpdateOne / insert_many of N documents, time
BARE_RATIO_MIN = 0.60  # bare-socket insert and find by _id: ebbdb / floor ops/s
J_RATIO_MIN = 0.5  # j: true / default write concern, inserts/s from 8 connections

# Metric keys in display order: compared with the floor, then ebbdb with itself.
VS_FLOOR = (
    "insert_one",
    "update_one",
    "find_one",
    "insert_many",
    "find",
    "bare_insert",
    "bare_find",
)
BOUNDS = {
    "insert_one": SINGLE_RATIO_MIN,
    "update_one": SINGLE_RATIO_MIN,
    "find_one": SINGLE_RATIO_MIN,
    "insert_many": INSERT_MANY_RATIO_MIN,
    "find": ITERATE_RATIO_MIN,
    "bare_insert": BARE_RATIO_MIN,
    "bare_find": BARE_RATIO_MIN,
}
VS_SELF = ("bulk_insert_ms", "bulk_update_ms", "plain", "journaled")


CLI = common.Cli(
    "Write-path throughput of ebbdb against the floor server, via pymongo.",
    ("--spawn", "ebbdb=mongodb://127.0.0.1:27017 floor=mongodb://127.0.0.1:27090"),
    quick_help="small sizes, one round: a smoke run",
    spawn=True,
)


@dataclass(frozen=True)
class Config(common.Settings):
    # insert_one / update_one / find_one operations per round
    n_single: int = common.setting(
        "--n", 2000, 200, help="insert_one/update_one/find_one ops (2000)"
    )
    # insert_many batches per round
    batches: int = common.setting("--batches", 20, 3, help="insert_many batches (20)")
    # documents per insert_many batch
    batch_size: int = common.setting("--batch-size", 1000, help="docs per insert_many (1000)")
    # documents iterated by the find (and the floor's --ndocs)
    find_docs: int = common.setting("--find-docs", 10_000, help="docs the find iterates (10000)")
    # iterations of that find per round
    find_reps: int = common.setting("--find-reps", 3, 1, help="find iterations per round (3)")
    # UpdateOne in the bulk_write, documents in the insert_many it is compared with
    bulk_n: int = common.setting("--bulk-n", 2000, help="UpdateOne per bulk_write (2000)")
    # bulk comparisons per round
    bulk_reps: int = common.setting("--bulk-reps", 3, 1, help="bulk comparisons per round (3)")
    # connections (threads) of the j: true comparison
    j_threads: int = common.setting("--j-threads", 8, help="connections for j: true (8)")
    # length of each j / no-j window
    j_seconds: float = common.setting("--j-seconds", 3.0, 0.5, help="each j window, s (3)")
    # untimed operations per target before the first round
    warmup: int = common.setting("--warmup", 300, 20, help="untimed warm-up ops (300)")
    timeout_ms: int  # server selection / connect timeout (--timeout-ms)

    def invalid(self, args: argparse.Namespace) -> str | None:
        sizes = [self.n_single, self.batches, self.batch_size, self.find_docs, self.find_reps]
        sizes += [self.bulk_n, self.bulk_reps, self.j_threads, args.rounds]
        if min(sizes) < 1 or self.j_seconds <= 0 or self.warmup < 0:
            return "sizes, counts, --j-seconds and --rounds must be positive"
        return None


@dataclass
class Target(common.Target):
    floor: bool = False
    results: dict[str, list[float]] = field(default_factory=dict)  # metric -> one per round
    wrong: dict[str, int] = field(default_factory=dict)  # metric -> wrong answers
    notes: list[str] = field(default_factory=list)
    j_clients: list[Client] = field(default_factory=list)


def metric(key: str, cfg: Config) -> tuple[str, str]:
    """(label, unit) of a metric."""
    return {
        "insert_one": ("insert_one", "ops/s"),
        "update_one": ("update_one by _id ($set/$inc)", "ops/s"),
        "find_one": ("find_one by _id", "ops/s"),
        "insert_many": (f"insert_many, {cfg.batch_size:,}-doc batches", "docs/s"),
        "find": (f"find, iterate {cfg.find_docs:,} docs", "docs/s"),
        "bare_insert": ("bare socket: insert of one document", "ops/s"),
        "bare_find": ("bare socket: find by _id", "ops/s"),
        "bulk_insert_ms": (f"insert_many {cfg.bulk_n:,} docs", "ms"),
        "bulk_update_ms": (f"bulk_write {cfg.bulk_n:,} UpdateOne", "ms"),
        "plain": (f"insert_one, {cfg.j_threads} connections", "ops/s"),
        "journaled": (f"insert_one j:true, {cfg.j_threads} connections", "ops/s"),
    }[key]


def make_docs(start: int, n: int) -> list[Doc]:
    """Fresh documents in the floor's shape (insert_one/insert_many add ``_id`` to them)."""
    return [common.floor_doc(i) for i in range(start, start + n)]


def update_for(i: int) -> Doc:
    """The i-th one-field update: $inc and $set alternately."""
    return {"$inc": {"age": 1}} if i % 2 == 0 else {"$set": {"score": i * 0.5}}


def timed(fn: Callable[[], Any]) -> float:
    """Seconds fn takes, on a clean heap."""
    gc.collect()
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def rate(count: int, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("nan")


def add_wrong(t: Target, key: str, n: int) -> None:
    if n:
        t.wrong[key] = t.wrong.get(key, 0) + n


# -- single connection: compared with the floor ---------------------------------------------------


def bench_single(t: Target, db: Db, cfg: Config) -> dict[str, float]:
    """insert_one, then update_one and find_one by _id over the documents just inserted."""
    coll: Coll = db["single"]
    coll.drop()
    docs = make_docs(0, cfg.n_single)
    updates = [update_for(i) for i in range(cfg.n_single)]
    out: dict[str, float] = {}

    def insert() -> None:
        for d in docs:
            coll.insert_one(d)

    out["insert_one"] = rate(len(docs), timed(insert))
    ids = [d["_id"] for d in docs]  # set client-side by insert_one
    unmatched = 0

    def update() -> None:
        nonlocal unmatched
        for _id, u in zip(ids, updates, strict=True):
            if coll.update_one({"_id": _id}, u).matched_count != 1:
                unmatched += 1

    out["update_one"] = rate(len(ids), timed(update))
    add_wrong(t, "update_one", unmatched)
    missing = 0

    def find_one() -> None:
        nonlocal missing
        for _id in ids:
            doc = coll.find_one({"_id": _id})
            if doc is None or doc["_id"] != _id:
                missing += 1

    out["find_one"] = rate(len(ids), timed(find_one))
    add_wrong(t, "find_one", missing)
    return out


def bench_insert_many(db: Db, cfg: Config) -> dict[str, float]:
    coll: Coll = db["many"]
    coll.drop()
    batches = [make_docs(b * cfg.batch_size, cfg.batch_size) for b in range(cfg.batches)]

    def insert() -> None:
        for batch in batches:
            coll.insert_many(batch)

    return {"insert_many": rate(cfg.batches * cfg.batch_size, timed(insert))}


def load_find(db: Db, cfg: Config) -> None:
    """The collection the find iterates (untimed; kept over the rounds)."""
    coll: Coll = db["find_src"]
    coll.drop()
    for start in range(0, cfg.find_docs, 1000):
        coll.insert_many(make_docs(start, min(1000, cfg.find_docs - start)))


def bench_find(t: Target, db: Db, cfg: Config) -> dict[str, float]:
    coll: Coll = db["find_src"]
    seen = 0

    def iterate() -> None:
        nonlocal seen
        for _ in range(cfg.find_reps):
            for _doc in coll.find():
                seen += 1

    secs = timed(iterate)
    if seen != cfg.find_docs * cfg.find_reps:
        what = f"find returned {seen // cfg.find_reps:,} documents, not {cfg.find_docs:,}"
        note = f"{what}: start the floor with --ndocs {cfg.find_docs}"
        if t.floor:  # still a fair docs/s figure, but say so (once)
            if note not in t.notes:
                t.notes.append(note)
        else:
            add_wrong(t, "find", 1)
    return {"find": rate(seen, secs)}


# -- a bare socket: the server is the limit ------------------------------------------------------


def op_msg_sequence(command: Doc, ident: str, docs: Sequence[bytes], request_id: int) -> bytes:
    """One OP_MSG holding `command` and the kind-1 document sequence `ident` of `docs` (as
    drivers send an insert's documents)."""
    body = b"\x00" + bson.encode(command)
    payload = ident.encode() + b"\x00" + b"".join(docs)
    section = b"\x01" + struct.pack("<i", 4 + len(payload)) + payload
    msg = struct.pack("<I", 0) + body + section
    return struct.pack("<iiii", 16 + len(msg), request_id, 0, common.OP_MSG) + msg


def bench_bare(t: Target, cfg: Config) -> dict[str, float]:
    """insert of one document, then find by _id over those documents, on one raw socket, one
    request at a time (pipelined-free), the client's own work precomputed: ops/s."""
    host, port = t.client.address if t.client is not None and t.client.address else ("", 0)
    ids = [ObjectId() for _ in range(cfg.n_single)]
    inserts = [
        op_msg_sequence(
            {"insert": "bare", "ordered": True, "$db": DB_NAME},
            "documents",
            [bson.encode({"_id": _id, **common.floor_doc(i)})],
            i + 1,
        )
        for i, _id in enumerate(ids)
    ]
    finds = [
        common.op_msg(
            {
                "find": "bare",
                "filter": {"_id": _id},
                "limit": 1,
                "singleBatch": True,
                "$db": DB_NAME,
            },
            i + 1,
        )
        for i, _id in enumerate(ids)
    ]
    out: dict[str, float] = {}
    with socket.create_connection((host, port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(common.op_msg({"drop": "bare", "$db": DB_NAME}))
        common.read_message(sock)
        for key, messages in (("bare_insert", inserts), ("bare_find", finds)):

            def run(messages: list[bytes] = messages) -> None:
                for m in messages:
                    sock.sendall(m)
                    common.read_message(sock)

            out[key] = rate(len(messages), timed(run))
    return out


# -- ebbdb against itself -------------------------------------------------------------------------


def bench_bulk(t: Target, db: Db, cfg: Config) -> dict[str, float]:
    """insert_many of bulk_n documents into an empty collection, then one bulk_write of bulk_n
    UpdateOne by _id over them; the median time (ms) of each over bulk_reps."""
    coll: Coll = db["bulk"]
    inserts: list[float] = []
    updates: list[float] = []
    pc = time.perf_counter
    for _ in range(cfg.bulk_reps):
        coll.drop()
        docs = make_docs(0, cfg.bulk_n)
        gc.collect()
        t0 = pc()
        coll.insert_many(docs)
        inserts.append((pc() - t0) * 1000)
        ops = [UpdateOne({"_id": d["_id"]}, update_for(i)) for i, d in enumerate(docs)]
        gc.collect()
        t0 = pc()
        result = coll.bulk_write(ops)
        updates.append((pc() - t0) * 1000)
        add_wrong(t, "bulk_update_ms", cfg.bulk_n - result.matched_count)
    return {
        "bulk_insert_ms": common.median(inserts) or float("nan"),
        "bulk_update_ms": common.median(updates) or float("nan"),
    }


def open_j_clients(t: Target, cfg: Config) -> None:
    """One MongoClient (one connection) per thread of the j comparison, warmed up."""
    for _ in range(cfg.j_threads):
        client: Client = MongoClient(
            t.uri,
            maxPoolSize=1,
            serverSelectionTimeoutMS=cfg.timeout_ms,
            connectTimeoutMS=cfg.timeout_ms,
        )
        t.j_clients.append(client)
        client.admin.command("ping")
        for doc in make_docs(0, 5):
            client[DB_NAME]["j"].insert_one(doc)


def close_j_clients(t: Target) -> None:
    for client in t.j_clients:
        client.close()


def j_window(t: Target, cfg: Config, journaled: bool) -> float:
    """insert_one from every j client at once, each in its own thread, for j_seconds: ops/s.
    Raises the first error a thread met."""
    concern = WriteConcern(j=True) if journaled else WriteConcern()
    colls = [c[DB_NAME].get_collection("j", write_concern=concern) for c in t.j_clients]
    counts = [0] * len(colls)
    errors: list[PyMongoError] = []
    start = threading.Barrier(len(colls) + 1)
    stop = threading.Event()

    def work(k: int, coll: Coll) -> None:
        start.wait()
        i = 0
        try:
            while not stop.is_set():
                coll.insert_one({"w": k, "i": i, **common.floor_doc(i)})
                i += 1
        except PyMongoError as exc:
            errors.append(exc)
        counts[k] = i

    threads = [
        threading.Thread(target=work, args=(k, c), name=f"j{k}", daemon=True)
        for k, c in enumerate(colls)
    ]
    for th in threads:
        th.start()
    gc.collect()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(cfg.j_seconds)
    stop.set()
    for th in threads:
        th.join()
    secs = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return rate(sum(counts), secs)


# -- driving --------------------------------------------------------------------------------------


def set_up(t: Target, cfg: Config) -> None:
    """Untimed: the find collection (not on the floor), the j clients, a warm-up."""
    assert t.client is not None
    db = t.client[DB_NAME]
    t.floor = common.is_floor(t.client)
    if not t.floor:
        t.client.drop_database(DB_NAME)
        load_find(db, cfg)
    else:
        for _ in db["find_src"].find():
            pass
    coll: Coll = db["warmup"]
    for i, d in enumerate(make_docs(0, cfg.warmup)):
        coll.insert_one(d)
        coll.update_one({"_id": d["_id"]}, update_for(i))
        coll.find_one({"_id": d["_id"]})
    if not t.floor:
        open_j_clients(t, cfg)


def run_round(t: Target, cfg: Config, rnd: int) -> dict[str, float]:
    assert t.client is not None
    db = t.client[DB_NAME]
    got: dict[str, float] = {}
    got |= common.step(t, "single", lambda: bench_single(t, db, cfg))
    got |= common.step(t, "insert_many", lambda: bench_insert_many(db, cfg))
    got |= common.step(t, "find", lambda: bench_find(t, db, cfg))
    got |= common.step(t, "bulk", lambda: bench_bulk(t, db, cfg))
    got |= common.step(t, "bare", lambda: bench_bare(t, cfg))
    if t.j_clients:
        # Alternate which window goes first, so neither always follows the other.
        order = (False, True) if rnd % 2 == 0 else (True, False)
        for journaled in order:
            key = "journaled" if journaled else "plain"
            try:
                got[key] = j_window(t, cfg, journaled)
            except PyMongoError as exc:
                common.record_error(t, key, exc)
    for key, value in got.items():
        t.results.setdefault(key, []).append(value)
    return got


def med(t: Target | None, key: str) -> float | None:
    return None if t is None else common.median(t.results.get(key, []))


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def fmt_rate(value: float | None) -> str:
    if value is None:
        return "-"
    return common.fmt_num(value, 0 if value >= 100 else 1)


def print_round(t: Target, got: dict[str, float], r: int, rounds: int) -> None:
    figures = "  ".join(f"{k}={fmt_rate(got[k])}" for k in VS_FLOOR + VS_SELF if k in got)
    print(f"round {r + 1}/{rounds}  {t.label:<5}  {figures}", flush=True)


def goals(ebbdb: Target, floor: Target | None, cfg: Config) -> list[common.Goal]:
    """Each target of issue 23, measured."""
    out: list[common.Goal] = []
    for key in VS_FLOOR:
        label, unit = metric(key, cfg)
        value = ratio(med(ebbdb, key), med(floor, key))
        out.append(common.Goal(f"{label}: {unit} ebbdb/floor", value, ">=", BOUNDS[key]))
    out.append(
        common.Goal(
            f"bulk_write {cfg.bulk_n:,} UpdateOne / insert_many {cfg.bulk_n:,}: time, ebbdb",
            ratio(med(ebbdb, "bulk_update_ms"), med(ebbdb, "bulk_insert_ms")),
            "<=",
            BULK_TIME_RATIO_MAX,
        )
    )
    out.append(
        common.Goal(
            f"insert_one j:true / no j, {cfg.j_threads} connections: ops/s, ebbdb",
            ratio(med(ebbdb, "journaled"), med(ebbdb, "plain")),
            ">=",
            J_RATIO_MIN,
        )
    )
    return out


def report(ebbdb: Target, floor: Target | None, cfg: Config, rounds: int) -> None:
    print()
    print(f"==== median of {rounds} round(s); ratios are ebbdb / floor ====")
    print()
    rows = []
    for key in VS_FLOOR:
        e, f = med(ebbdb, key), med(floor, key)
        r = ratio(e, f)
        rows.append([*metric(key, cfg), fmt_rate(e), fmt_rate(f), "-" if r is None else f"{r:.2f}"])
    common.table(["compared with the floor", "unit", "ebbdb", "floor", "ebbdb/floor"], rows)
    print()
    rows = [
        [*metric(key, cfg), fmt_rate(med(ebbdb, key)), fmt_rate(med(floor, key))] for key in VS_SELF
    ]
    common.table(["ebbdb against itself", "unit", "ebbdb", "floor (reference)"], rows)
    print(
        f"(j: {cfg.j_threads} threads, each with its own MongoClient(maxPoolSize=1); "
        "not run on the floor, which ignores the write concern)"
    )
    for t in (ebbdb, floor):
        if t is None:
            continue
        for key, n in t.wrong.items():
            print(f"{t.label}: WRONG ANSWERS in {key}: {n:,}")
        for note in t.notes:
            print(f"{t.label}: note: {note}")

    common.report_goals("write.py", goals(ebbdb, floor, cfg))


def main(argv: Sequence[str] | None = None) -> int:
    ap, args, cfg = common.parse_args(argv, Config, CLI)
    if not args.targets:
        args.spawn = True  # no URI given: start both servers
    print(
        f"{common.versions()}; single ops N={cfg.n_single:,}, insert_many {cfg.batches}x"
        f"{cfg.batch_size:,}, find {cfg.find_docs:,} docs x{cfg.find_reps}, bulk {cfg.bulk_n:,} "
        f"x{cfg.bulk_reps}, j: {cfg.j_threads} connections x {cfg.j_seconds:g} s, "
        f"rounds={args.rounds}"
    )
    with contextlib.ExitStack() as stack:
        ebbdb, floor = common.ebbdb_and_floor(ap, args, Target, stack, cfg.find_docs)
        targets = [t for t in (ebbdb, floor) if t is not None]
        for t in targets:
            print(f"  {t.label}: {t.uri}", flush=True)
            stack.callback(close_j_clients, t)
        with common.connected(targets, cfg.timeout_ms, lambda t: None if t.floor else DB_NAME):
            for t in targets:
                try:
                    set_up(t, cfg)
                except PyMongoError as exc:  # the rounds will report what fails
                    common.record_error(t, "set-up", exc)
            if floor is None:
                print("  no floor given: the ratios against it are not measured")
            for r in range(args.rounds):
                for t in targets:  # alternate: ebbdb, floor, ebbdb, floor, ...
                    print_round(t, run_round(t, cfg, r), r, args.rounds)
            report(ebbdb, floor, cfg, args.rounds)
            return common.report_failures(targets)


if __name__ == "__main__":
    sys.exit(main())
