"""A crash in the middle of a statement that commits in slices: a `python -m ebbdb` process is
killed with SIGKILL while an update_many (then an insert_many) is partly applied, and restarted on
the same data directory. The documents the statement changed form a prefix of the order it visits
them in (whole slices), never a torn document or index entry: every document is whole, and
`validate` finds the collection valid."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.collection import Collection
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


def _in_background(fn: Callable[[], object]) -> None:
    def run() -> None:
        try:
            fn()
        except PyMongoError:
            pass  # the server was killed under it

    threading.Thread(target=run, daemon=True).start()


@contextlib.contextmanager
def _killed_during(
    tmp_path: Path,
    statement: Callable[[Collection[Doc]], object],
    applied: Callable[[Collection[Doc]], int],
    prepare: Callable[[Collection[Doc]], object] = lambda coll: None,
) -> Iterator[Collection[Doc]]:
    """Start a server, `prepare` collection slices.c (indexed on `v`), start `statement` on it,
    SIGKILL the server as soon as another client sees `applied` above 0, restart it on the same
    data directory and yield the collection there; then check that `validate` finds it valid."""
    log = tmp_path / "server.log"
    srv = Server.start(tmp_path / "data", log)
    try:
        with _client(srv) as c, _client(srv) as watcher:
            c.slices.c.create_index("v")
            prepare(c.slices.c)
            _in_background(lambda: statement(c.slices.c))
            deadline = time.monotonic() + WAIT
            while applied(watcher.slices.c) == 0:
                assert time.monotonic() < deadline, "the statement was never seen applied in part"
            srv.stop(signal.SIGKILL)
    finally:
        srv.kill()
    srv = Server.start(tmp_path / "data", log)
    try:
        with _client(srv) as c:
            yield c.slices.c
            reply = c.slices.command("validate", "c")
            assert reply.get("valid") is True, reply
    finally:
        srv.stop(signal.SIGTERM)


def _fill(coll: Collection[Doc]) -> None:
    for start in range(0, DOCS, 5_000):
        coll.insert_many([_doc(i, 0) for i in range(start, start + 5_000)])


def test_a_crash_during_update_many_leaves_a_prefix(tmp_path: Path) -> None:
    with _killed_during(
        tmp_path,
        lambda coll: coll.update_many({}, {"$set": {"v": 1, "w": 7}}),
        lambda coll: coll.count_documents({"v": 1}, hint="v_1"),
        _fill,
    ) as coll:
        docs = list(coll.find())
        assert len(docs) == DOCS
        assert all(d["w"] == d["v"] * 7 and d["v"] in (0, 1) for d in docs)
        changed = [d["_id"] for d in docs if d["v"] == 1]
        # A prefix of the collection's natural order, which the update visits.
        assert changed == list(range(len(changed)))
        assert 0 < len(changed) < DOCS  # killed in the middle
        assert coll.count_documents({"v": 1}, hint="v_1") == len(changed)


def test_a_crash_during_insert_many_leaves_a_prefix(tmp_path: Path) -> None:
    docs = [_doc(i, i % 3) for i in range(DOCS)]
    with _killed_during(
        tmp_path,
        lambda coll: coll.insert_many(docs),
        lambda coll: coll.estimated_document_count(),
    ) as coll:
        found = list(coll.find())
        assert [d["_id"] for d in found] == list(range(len(found)))
        assert 0 < len(found) < DOCS  # killed in the middle
        assert all(d == _doc(d["_id"], d["_id"] % 3) for d in found)
        assert coll.count_documents({"v": {"$gte": 0}}, hint="v_1") == len(found)
