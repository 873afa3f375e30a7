"""The JavaScript clients against a one-member replica set: the Node.js driver connects with
`?replicaSet=rs0` (tests/e2e/js/node_replica_set.js), and mongosh shows the set's prompt
(`rs0 [direct: primary] test>`), rs.status(), rs.conf() and rs.initiate()'s refusal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ebbdb.server.embedded import ServerThread
from tests.e2e.node_tools import (
    MONGOSH,
    Terminal,
    mongosh_env,
    node_tools,
    run_js,
    run_mongosh,
)

#: The shared `replset` fixture starts this module's set without the test commands, as an
#: application's server is.
REPLSET_PARAMETERS: dict[str, Any] = {}


def run_node(uri: str, scenario: str) -> Any:
    """One scenario of tests/e2e/js/node_replica_set.js: the JSON it printed last."""
    return run_js("node_replica_set.js", uri, scenario)


def test_node_driver_discovers_the_primary(replset: ServerThread) -> None:
    host = f"127.0.0.1:{replset.port}"
    assert run_node(replset.uri, "discovery") == {
        "found": [{"_id": 1, "name": "pen"}],
        "topologyType": "ReplicaSetWithPrimary",
        "setName": "rs0",
        "servers": [{"address": host, "type": "RSPrimary"}],
        "hello": {"setName": "rs0", "hosts": [host], "isWritablePrimary": True},
        "member": {"name": host, "stateStr": "PRIMARY"},
        "configHost": host,
        "hasClusterTime": True,
    }


def test_node_driver_concerns_and_causal_sessions(replset: ServerThread) -> None:
    out = run_node(replset.uri, "concerns")
    assert out == {
        "majority": True,
        "w2": {
            "name": "MongoWriteConcernError",
            "code": 100,
            "message": "Not enough data-bearing nodes",
        },
        "count": 2,  # the w: 2 insert is done all the same, as with mongod
        "majorityRead": [{"_id": 1}, {"_id": 2}],
        "linearizable": [{"_id": 1}],
        "causal": {"_id": 3},
        "operationTimeIsTimestamp": True,
        "initiate": {
            "name": "MongoServerError",
            "code": 23,
            "codeName": "AlreadyInitialized",
            "message": "already initialized",
        },
    }


RS_SCRIPT = """
const status = rs.status();
const conf = rs.conf();
let initiate = null;
try { rs.initiate(); } catch (e) { initiate = { code: e.code, codeName: e.codeName, message: e.message }; }
const hello = db.hello();
rs.printSecondaryReplicationInfo();  // reads local.system.replset: throws if it is empty
print(EJSON.stringify({
  set: status.set, myState: status.myState,
  members: status.members.map((m) => ({ name: m.name, stateStr: m.stateStr, self: m.self })),
  confId: conf._id, confHosts: conf.members.map((m) => m.host), version: conf.version,
  initiate, isWritablePrimary: hello.isWritablePrimary, setName: hello.setName,
}, { relaxed: true }));
"""


def test_mongosh_rs_helpers(replset: ServerThread, tmp_path: Path) -> None:
    host = f"127.0.0.1:{replset.port}"
    out = json.loads(run_mongosh(replset.uri, RS_SCRIPT, tmp_path)[-1])
    assert out == {
        "set": "rs0",
        "myState": 1,
        "members": [{"name": host, "stateStr": "PRIMARY", "self": True}],
        "confId": "rs0",
        "confHosts": [host],
        "version": 1,
        "initiate": {
            "code": 23,
            "codeName": "AlreadyInitialized",
            "message": "already initialized",
        },
        "isWritablePrimary": True,
        "setName": "rs0",
    }


@pytest.mark.parametrize(
    ("query", "prompt"),
    [("", "rs0 [direct: primary] test> "), ("?replicaSet=rs0", "rs0 [primary] test> ")],
    ids=["direct", "replicaSet"],
)
def test_mongosh_prompt_names_the_set(
    replset: ServerThread, tmp_path: Path, query: str, prompt: str
) -> None:
    node_tools()
    uri = f"mongodb://127.0.0.1:{replset.port}/{query}"
    term = Terminal([str(MONGOSH), uri], mongosh_env(tmp_path))
    escaped = prompt.replace("[", r"\[").replace("]", r"\]")
    try:
        term.expect(escaped)
        term.send("rs.status().members[0].stateStr")
        echo, _, answer = term.expect(escaped).partition("\n")
        assert answer == "PRIMARY\n"
        term.send("db.items.insertOne({ _id: 1 }).acknowledged")
        echo, _, answer = term.expect(escaped).partition("\n")
        assert answer == "true\n"
        term.send("db.items.drop()")
        term.expect(escaped)
        term.send("exit")
    finally:
        status = term.close()
    assert status == 0, term.text
