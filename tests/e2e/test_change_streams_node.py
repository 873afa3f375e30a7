"""Change streams through the Node.js driver and mongosh (pinned in .ci/node): watch with a $match
and updateLookup, resumeAfter, the driver's 'change' events up to the invalidate that closes the
stream, mongod's code for a bad token (tests/e2e/js/change_streams.js); mongosh's watch."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from ebbdb.server.embedded import ServerThread
from tests.e2e.node_tools import run_js


@pytest.fixture
def replset(start_server: Callable[..., ServerThread]) -> ServerThread:
    """A one-member replica set of the test's own."""
    return start_server(repl_set="rs0")


def test_node_driver_watch(replset: ServerThread) -> None:
    out = run_js("change_streams.js", replset.uri)
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
