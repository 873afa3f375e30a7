"""Change streams through the Node.js driver and mongosh (pinned in .ci/node): watch with a $match
and updateLookup, resumeAfter, the driver's 'change' events up to the invalidate that closes the
stream, mongod's code for a bad token (tests/e2e/js/change_streams.js); mongosh's watch."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from ebbdb.server.embedded import ServerThread
from tests.e2e.node_tools import JS_DIR, MODULES, node_tools


@pytest.fixture
def replset(tmp_path: Any) -> Iterator[ServerThread]:
    srv = ServerThread(str(tmp_path / "data"), repl_set="rs0").start()
    yield srv
    srv.stop()


def test_node_driver_watch(replset: ServerThread) -> None:
    node = node_tools()
    done = subprocess.run(
        [node, str(JS_DIR / "change_streams.js"), replset.uri],
        capture_output=True,
        text=True,
        env={**os.environ, "NODE_PATH": str(MODULES)},
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert done.returncode == 0, f"node exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    out = json.loads(done.stdout.splitlines()[-1])
    ns = {"db": "nodestreams", "coll": "c"}
    assert out == {
        "events": [
            {
                "operationType": "insert",
                "fullDocument": {"_id": 1, "a": 1},
                "ns": ns,
                "documentKey": {"_id": 1},
            },
            {
                "operationType": "update",
                "fullDocument": {"_id": 1, "a": 2},
                "ns": ns,
                "documentKey": {"_id": 1},
                "updateDescription": {
                    "updatedFields": {"a": 2},
                    "removedFields": [],
                    "truncatedArrays": [],
                },
            },
            {
                "operationType": "insert",
                "fullDocument": {"_id": 2},
                "ns": ns,
                "documentKey": {"_id": 2},
            },
        ],
        "tokenIsHex": True,
        "resumed": ["update", "delete"],
        "listened": ["insert", "drop", "invalidate"],
        "badToken": 9,
    }


MONGOSH_WATCH = """
const coll = db.getSiblingDB('shwatch').c;
const stream = coll.watch([], { fullDocument: 'updateLookup' });
stream.tryNext();
coll.insertOne({ _id: 1, a: 1 });
coll.updateOne({ _id: 1 }, { $set: { a: 2 } });
const seen = [];
while (seen.length < 2) {
  const change = stream.tryNext();
  if (change !== null) seen.push({ op: change.operationType, doc: change.fullDocument });
}
stream.close();
const standalone = db.getSiblingDB('admin').runCommand({ hello: 1 }).setName;
print(JSON.stringify({ seen, setName: standalone }));
"""


def test_mongosh_watch(replset: ServerThread, tmp_path: Any) -> None:
    from tests.e2e.node_tools import run_mongosh

    out = json.loads(run_mongosh(replset.uri, MONGOSH_WATCH, tmp_path / "home")[-1])
    assert out == {
        "seen": [
            {"op": "insert", "doc": {"_id": 1, "a": 1}},
            {"op": "update", "doc": {"_id": 1, "a": 2}},
        ],
        "setName": "rs0",
    }
