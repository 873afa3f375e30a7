"""Shutdown always finishes: with runaway requests in flight (aggregations that loop, with and
without maxTimeMS, a $lookup cross product, unindexed sorts), SIGTERM interrupts them, the server
exits 0 within its 10 s grace, releases the data directory, and a restart on it finds every
acknowledged write. The shutdown command does the same within its timeoutSecs."""

from __future__ import annotations

import re
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import AutoReconnect, PyMongoError

from tests.e2e.test_cli import ServerProcess
from tests.helpers import minutes_of_work
from tests.waiting import wait_until

#: SIGTERM's grace (server/app.py SHUTDOWN_GRACE_SECONDS), and a margin for a busy machine.
GRACE_SECONDS = 10.0
MARGIN_SECONDS = 3.0

#: Minutes of work per document.
_LOOP = minutes_of_work()

Work = Callable[[Database[dict[str, Any]]], Any]


def _limited_loops(db: Database[dict[str, Any]]) -> None:
    for _ in range(1000):
        try:
            list(db.c.aggregate([{"$project": {"x": _LOOP}}], maxTimeMS=50))
        except PyMongoError as exc:
            if isinstance(exc, AutoReconnect):
                return
            if getattr(exc, "code", None) != 50:
                return


_CROSS_PRODUCT = [
    {"$lookup": {"from": "big", "pipeline": [], "as": "all"}},
    {"$unwind": "$all"},
    {"$lookup": {"from": "big", "pipeline": [], "as": "again"}},
    {"$unwind": "$again"},
    {"$count": "n"},
]

RUNAWAYS: dict[str, Work] = {
    "loop": lambda db: list(db.c.aggregate([{"$project": {"x": _LOOP}}])),
    "loop in a filter": lambda db: list(db.c.find({"$expr": {"$lt": [_LOOP, 0]}})),
    "loops with maxTimeMS 50": _limited_loops,
    "another with maxTimeMS 50": _limited_loops,
    "cross product": lambda db: list(db.big.aggregate(_CROSS_PRODUCT)),
    "unindexed sorts": lambda db: [
        list(db.big.find({}, sort=[("s", 1), ("k", -1)])) for _ in range(1000)
    ],
}


def _start(port: int, work: Work) -> threading.Thread:
    def run() -> None:
        client: MongoClient[dict[str, Any]] = MongoClient(
            f"mongodb://127.0.0.1:{port}/?directConnection=true",
            socketTimeoutMS=60_000,
            serverSelectionTimeoutMS=2000,
        )
        try:
            work(client.app)
        except PyMongoError:
            pass  # interrupted, or its connection closed: what a shutdown does
        finally:
            client.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _running(client: MongoClient[dict[str, Any]]) -> int:
    """How many requests on the app database currentOp lists."""
    return len(client.admin.command({"currentOp": 1, "ns": {"$regex": "^app\\."}})["inprog"])


def _load(client: MongoClient[dict[str, Any]]) -> None:
    db = client.app
    db.c.insert_many([{"_id": i} for i in range(3)])
    db.big.insert_many([{"k": (i * 7919) % 3001, "s": "z" * 200} for i in range(3000)])
    # Acknowledged writes, the last of them journaled.
    db.acked.insert_many([{"_id": i} for i in range(100)])
    db.acked.insert_one({"_id": "last"})


@pytest.mark.parametrize("how", ["SIGTERM", "shutdown"])
def test_shutdown_finishes_with_runaway_requests(tmp_path: Path, how: str) -> None:
    dbpath = tmp_path / "data"
    dbpath.mkdir()
    args = ["--port", "0", "--dbpath", str(dbpath)]
    first = ServerProcess(args, tmp_path)
    try:
        first.startup_line()
        assert first.port is not None
        client = first.client()
        _load(client)
        threads = [_start(first.port, work) for work in RUNAWAYS.values()]
        wait_until(lambda: _running(client) >= 4, "four runaway requests running")
        # The runaways would take minutes: a stop() bounded by the grace (fails past it) that
        # sees status 0 is a shutdown that interrupted them, and the log says so.
        if how == "SIGTERM":
            code = first.stop(signal.SIGTERM, timeout=GRACE_SECONDS + MARGIN_SECONDS)
        else:
            with pytest.raises(AutoReconnect):
                client.admin.command("shutdown", timeoutSecs=4)
            code = first.stop(signal.SIGTERM, timeout=4 + MARGIN_SECONDS)
        client.close()
        assert code == 0, first.stderr
        interrupted = re.findall(r"interrupting (\d+) operations still running", first.stderr)
        assert len(interrupted) == 1 and int(interrupted[0]) >= 3, first.stderr
        assert "shutdown complete" in first.stderr
        for thread in threads:
            thread.join(5)
    finally:
        first.kill()

    again = ServerProcess(args, tmp_path)
    try:
        again.startup_line()
        client = again.client()
        assert client.app.acked.count_documents({}) == 101
        assert client.app.acked.find_one({"_id": "last"}) == {"_id": "last"}
        assert client.app.big.count_documents({}) == 3000
        client.close()
        assert again.stop() == 0
    finally:
        again.kill()
