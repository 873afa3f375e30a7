"""Transactions survive SIGKILL: writers commit transactions (three inserts and a counter update
each) against a replica-set server in a child process that is killed at a random moment and
restarted on the same data directory, round after round. After each restart every acknowledged
transaction is there whole, the one in flight is there whole or not at all, the oplog holds one
applyOps entry for exactly the transactions that are there, and `validate` is ok. Reproduce a
failure with the seed it prints: EBBDB_TXN_CRASH_SEED=<seed>."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import OperationFailure, PyMongoError

ROUNDS = 5
WRITERS = 2
DOCS = 3
_CHILD = """
import sys, time
from ebbdb.server.embedded import ServerThread
srv = ServerThread(sys.argv[1], repl_set="rs0").start()
print(srv.uri, flush=True)
time.sleep(3600)
"""


def _start(path: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, path],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stdout is not None
    uri = proc.stdout.readline().strip()
    assert uri.startswith("mongodb://"), uri
    return proc, uri


def _writer(uri: str, w: int, first: int, acked: list[int], stop: threading.Event) -> None:
    g = first
    try:
        with MongoClient(uri, serverSelectionTimeoutMS=1000, retryWrites=False) as c:
            coll = c.crash.docs
            while not stop.is_set():

                def body(s: Any, g: int = g) -> None:
                    coll.insert_many(
                        [{"_id": f"{w}-{g}-{i}", "w": w, "g": g} for i in range(DOCS)], session=s
                    )
                    coll.update_one({"_id": f"c{w}"}, {"$set": {"g": g}}, upsert=True, session=s)

                # No with_transaction: its retries would outlive the server.
                with c.start_session() as s:
                    s.start_transaction()
                    try:
                        body(s)
                        s.commit_transaction()
                    except OperationFailure as exc:
                        # Two writers' first transactions both create the collection: one
                        # gets a transient WriteConflict, and tries again.
                        if not exc.has_error_label("TransientTransactionError"):
                            raise
                        continue
                acked.append(g)
                g += 1
    except PyMongoError:
        pass  # the server was killed


def test_transactions_survive_sigkill(tmp_path: Path) -> None:
    seed = int(os.environ.get("EBBDB_TXN_CRASH_SEED", random.randrange(2**32)))
    print(f"EBBDB_TXN_CRASH_SEED={seed}")
    rng = random.Random(seed)
    path = str(tmp_path / "data")
    acked: dict[int, list[int]] = {w: [] for w in range(WRITERS)}
    for _round in range(ROUNDS):
        proc, uri = _start(path)
        try:
            stop = threading.Event()
            first = {w: max(acked[w], default=-1) + 1000 for w in range(WRITERS)}
            threads = [
                threading.Thread(target=_writer, args=(uri, w, first[w], acked[w], stop))
                for w in range(WRITERS)
            ]
            for t in threads:
                t.start()
            # The kill lands a while after every writer has had a transaction acknowledged.
            deadline = time.monotonic() + 20
            while any(not acked[w] or acked[w][-1] < first[w] for w in range(WRITERS)):
                assert time.monotonic() < deadline, "a writer had no transaction acknowledged"
                time.sleep(0.01)
            time.sleep(rng.uniform(0.0, 0.6))
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            stop.set()
            for t in threads:
                t.join(10)
        finally:
            if proc.poll() is None:
                proc.kill()
        proc, uri = _start(path)
        try:
            with MongoClient(uri, serverSelectionTimeoutMS=5000) as c:
                _check(c, acked)
        finally:
            proc.kill()
            proc.wait(10)
    assert all(acked[w] for w in range(WRITERS)), acked


def _check(c: MongoClient[dict[str, Any]], acked: dict[int, list[int]]) -> None:
    docs = list(c.crash.docs.find({"g": {"$exists": True}, "w": {"$exists": True}}))
    groups = Counter((d["w"], d["g"]) for d in docs)
    # Every transaction that is there is there whole.
    assert all(n == DOCS for n in groups.values()), groups
    for w, gs in acked.items():
        present = {g for (ww, g) in groups if ww == w}
        assert set(gs) <= present, (w, sorted(set(gs) - present))
        # At most the one in flight at the kill beyond those acknowledged.
        assert len(present - set(gs)) <= 1
        counter = c.crash.docs.find_one({"_id": f"c{w}"})
        if present:
            assert counter is not None and counter["g"] == max(present)
    # One applyOps entry for each transaction there, none for any other.
    logged: Counter[tuple[int, int]] = Counter()
    for entry in c.local["oplog.rs"].find({"op": "c", "o.applyOps": {"$exists": True}}):
        ops = entry["o"]["applyOps"]
        inserted = [op["o"] for op in ops if op["op"] == "i" and "w" in op["o"]]
        assert len(inserted) == DOCS
        logged[(inserted[0]["w"], inserted[0]["g"])] += 1
    assert set(logged) == set(groups) and set(logged.values()) <= {1}
    assert c.crash.command("validate", "docs")["valid"] is True
