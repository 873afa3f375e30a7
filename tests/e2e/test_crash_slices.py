"""A crash in the middle of a statement that commits in slices: a `python -m ebbdb` process is
killed with SIGKILL while an update_many (then an insert_many) is partly applied, and restarted on
the same data directory. The documents the statement changed form a prefix of the order it visits
them in (whole slices), never a torn document or index entry: every document is whole, and
`validate` finds the collection valid."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.errors import PyMongoError

from tests.e2e.test_crash import START_TIMEOUT, Server

Doc = dict[str, Any]
DOCS = 40_000
#: How long to wait for the statement to be applied in part before giving up.
WAIT = 60.0


def _client(srv: Server) -> MongoClient[Doc]:
    return MongoClient(srv.uri, serverSelectionTimeoutMS=START_TIMEOUT * 1000)


def _doc(i: int, v: int) -> Doc:
    return {"_id": i, "v": v, "w": v * 7, "pad": "x" * 64}


def _in_background(fn: Any) -> threading.Thread:
    def run() -> None:
        try:
            fn()
        except PyMongoError:
            pass  # the server was killed under it

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _kill_once(srv: Server, applied: Any) -> int:
    """SIGKILL the server as soon as `applied()` (read by another client) is above 0; returns
    what it was."""
    with _client(srv) as watcher:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            seen = applied(watcher)
            if seen > 0:
                srv.stop(signal.SIGKILL)
                return int(seen)
        srv.kill()
    raise AssertionError("the statement was never seen applied in part")


def _validate(client: MongoClient[Doc], name: str) -> None:
    reply = client.slices.command("validate", name)
    assert reply.get("valid") is True, reply


def test_a_crash_during_update_many_leaves_a_prefix(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    srv = Server.start(tmp_path / "data", log)
    try:
        with _client(srv) as c:
            coll = c.slices.docs
            coll.create_index("v")
            for start in range(0, DOCS, 5_000):
                coll.insert_many([_doc(i, 0) for i in range(start, start + 5_000)])
            _in_background(lambda: coll.update_many({}, {"$set": {"v": 1, "w": 7}}))
            _kill_once(srv, lambda w: w.slices.docs.count_documents({"v": 1}, hint="v_1"))
    finally:
        srv.kill()
    srv = Server.start(tmp_path / "data", log)
    try:
        with _client(srv) as c:
            docs = list(c.slices.docs.find())
            assert len(docs) == DOCS
            assert all(d["w"] == d["v"] * 7 and d["v"] in (0, 1) for d in docs)
            changed = [d["_id"] for d in docs if d["v"] == 1]
            # A prefix of the collection's natural order, which the update visits.
            assert changed == list(range(len(changed)))
            assert 0 < len(changed) < DOCS  # killed in the middle
            assert c.slices.docs.count_documents({"v": 1}, hint="v_1") == len(changed)
            _validate(c, "docs")
    finally:
        srv.stop(signal.SIGTERM)


def test_a_crash_during_insert_many_leaves_a_prefix(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    srv = Server.start(tmp_path / "data", log)
    try:
        with _client(srv) as c:
            coll = c.slices.inserted
            coll.create_index("v")
            docs = [_doc(i, i % 3) for i in range(DOCS)]
            _in_background(lambda: coll.insert_many(docs))
            _kill_once(srv, lambda w: w.slices.inserted.estimated_document_count())
    finally:
        srv.kill()
    srv = Server.start(tmp_path / "data", log)
    try:
        with _client(srv) as c:
            found = list(c.slices.inserted.find())
            assert [d["_id"] for d in found] == list(range(len(found)))
            assert 0 < len(found) < DOCS  # killed in the middle
            assert all(d == _doc(d["_id"], d["_id"] % 3) for d in found)
            assert c.slices.inserted.count_documents({"v": {"$gte": 0}}, hint="v_1") == len(found)
            _validate(c, "inserted")
    finally:
        srv.stop(signal.SIGTERM)
