"""mongosh (pinned in .ci/node) against the real server: a script that prints what it saw as Extended
JSON, compared here exactly; an interactive session on a pseudo-terminal; and one test per helper
that tools call (db.stats(), db.coll.stats(), .totalSize(), .renameCollection(), the profiler,
db.shutdownServer())."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from ebbdb.server.embedded import ServerThread
from tests.e2e.node_tools import (
    MONGOSH,
    Terminal,
    assert_db_stats,
    mongosh_bytes,
    mongosh_env,
    node_tools,
    run_mongosh,
)
from tests.waiting import wait_until

Client = MongoClient[dict[str, Any]]


def shell_json(uri: str, script: str, home: Path) -> Any:
    """Run `script` in mongosh; its last printed line is relaxed Extended JSON."""
    return json.loads(run_mongosh(uri, script, home)[-1])


def show_dbs_table(databases: list[dict[str, Any]]) -> list[str]:
    """`show dbs` as mongosh prints it: names left, sizes right, two spaces between."""
    rows = [(d["name"], mongosh_bytes(d["sizeOnDisk"])) for d in databases]
    name_width = max(len(name) for name, _ in rows)
    size_width = max(len(size) for _, size in rows)
    return [f"{name.ljust(name_width)}  {size.rjust(size_width)}" for name, size in rows]


CRUD_SCRIPT = """
const shelf = db.getSiblingDB('shelf');
const items = shelf.items;
const out = {};
out.insertOne = items.insertOne({ _id: 1, name: 'pen', qty: 5, tags: ['blue'] });
out.insertMany = items.insertMany([
  { _id: 2, name: 'ink', qty: 10 },
  { _id: 3, name: 'pad', qty: 0 },
  { _id: 4, name: 'cap', qty: 3 },
]);
out.find = items.find({ qty: { $gte: 3 } }, { name: 1 }).sort({ name: 1 }).toArray();
out.findOne = items.findOne({ _id: 1 });
out.updateOne = items.updateOne({ _id: 1 }, { $inc: { qty: 2 }, $push: { tags: 'red' } });
out.updateMany = items.updateMany({ qty: { $lt: 5 } }, { $set: { low: true } });
out.upsert = items.updateOne({ _id: 5 }, { $setOnInsert: { name: 'clip', qty: 1 } }, { upsert: true });
out.replaceOne = items.replaceOne({ _id: 3 }, { name: 'pad', qty: 8 });
out.findOneAndUpdate = items.findOneAndUpdate(
  { _id: 2 }, { $inc: { qty: -4 } }, { returnDocument: 'after' });
out.countDocuments = items.countDocuments({ low: true });
out.distinct = items.distinct('qty');
out.deleteOne = items.deleteOne({ _id: 5 });
out.deleteMany = items.deleteMany({ low: true });
out.left = items.find().sort({ _id: 1 }).toArray();
out.aggregate = items.aggregate([
  { $match: { qty: { $gt: 0 } } },
  { $group: {
      _id: { $cond: [{ $gte: ['$qty', 7] }, 'many', 'few'] },
      n: { $sum: 1 }, qty: { $sum: '$qty' }, names: { $push: '$name' } } },
  { $sort: { _id: 1 } },
]).toArray();
out.createIndex = shelf.sessions.createIndex({ t: 1 }, { expireAfterSeconds: 60 });
out.getIndexes = shelf.sessions.getIndexes();
out.collections = shelf.getCollectionNames().sort();
print(show('dbs'));  // what the `show dbs` command prints
print(EJSON.stringify(db.adminCommand({ listDatabases: 1 }).databases));
print(EJSON.stringify(out));
"""


def test_script_crud_aggregation_ttl_index_and_show_dbs(uri: str, tmp_path: Path) -> None:
    lines = run_mongosh(uri, CRUD_SCRIPT, tmp_path)
    out = json.loads(lines[-1])
    databases = json.loads(lines[-2])
    assert "shelf" in [d["name"] for d in databases]
    assert lines[:-2] == show_dbs_table(databases)

    ack = {"acknowledged": True}

    def updated(matched: int, modified: int, upserted: int | None = None) -> dict[str, Any]:
        """mongosh's UpdateResult: the upserted _id shows as insertedId."""
        counts = {"matchedCount": matched, "modifiedCount": modified}
        return {**ack, "insertedId": upserted, **counts, "upsertedCount": int(upserted is not None)}

    assert out == {
        "insertOne": {**ack, "insertedId": 1},
        "insertMany": {**ack, "insertedIds": {"0": 2, "1": 3, "2": 4}},
        "find": [{"_id": 4, "name": "cap"}, {"_id": 2, "name": "ink"}, {"_id": 1, "name": "pen"}],
        "findOne": {"_id": 1, "name": "pen", "qty": 5, "tags": ["blue"]},
        "updateOne": updated(1, 1),
        "updateMany": updated(2, 2),
        "upsert": updated(0, 0, upserted=5),
        "replaceOne": updated(1, 1),
        "findOneAndUpdate": {"_id": 2, "name": "ink", "qty": 6},
        "countDocuments": 1,
        "distinct": [1, 3, 6, 7, 8],
        "deleteOne": {**ack, "deletedCount": 1},
        "deleteMany": {**ack, "deletedCount": 1},
        "left": [
            {"_id": 1, "name": "pen", "qty": 7, "tags": ["blue", "red"]},
            {"_id": 2, "name": "ink", "qty": 6},
            {"_id": 3, "name": "pad", "qty": 8},
        ],
        "aggregate": [
            {"_id": "few", "n": 1, "qty": 6, "names": ["ink"]},
            {"_id": "many", "n": 2, "qty": 15, "names": ["pen", "pad"]},
        ],
        "createIndex": "t_1",
        "getIndexes": [
            {"v": 2, "key": {"_id": 1}, "name": "_id_"},
            {"v": 2, "key": {"t": 1}, "name": "t_1", "expireAfterSeconds": 60},
        ],
        "collections": ["items", "sessions"],
    }


def test_interactive_session_on_a_pseudo_terminal(uri: str, client: Client, tmp_path: Path) -> None:
    node_tools()
    term = Terminal([str(MONGOSH), uri], mongosh_env(tmp_path))
    try:
        greeting = term.expect(r"test> ")
        assert f"Using MongoDB:\t\t{client.server_info()['version']}\n" in greeting
        assert "Using Mongosh:\t\t2.12.0\n" in greeting

        def ask(line: str, prompt: str = "test> ") -> str:
            term.send(line)
            echo, _, answer = term.expect(prompt).partition("\n")
            assert echo == line
            return answer

        assert ask("db.items.insertOne({ _id: 1, name: 'pen' })") == (
            "{ acknowledged: true, insertedId: 1 }\n"
        )
        assert ask("db.items.countDocuments()") == "1\n"
        table = show_dbs_table(client.admin.command("listDatabases")["databases"])
        assert ask("show dbs") == "".join(f"{row}\n" for row in table)
        assert ask("use shelf", prompt="shelf> ") == "switched to db shelf\n"
        assert ask("db.getSiblingDB('test').items.find()", prompt="shelf> ") == (
            "[ { _id: 1, name: 'pen' } ]\n"
        )
        term.send("exit")
    finally:
        status = term.close()
    assert status == 0, term.text


# -- the helpers tools call (issue 10, item 7) ----------------------------------------------------

# Two documents of one size, so that an average is exact whether a server divides as integers
# (collStats' avgObjSize) or as doubles (dbStats').
TWO_ITEMS = """
const shelf = db.getSiblingDB('shelf');
const docs = [{ _id: 1, name: 'pen', qty: 5 }, { _id: 2, name: 'ink', qty: 6 }];
shelf.items.insertMany(docs);
shelf.items.createIndex({ name: 1 });
const dataSize = bsonsize(docs[0]) + bsonsize(docs[1]);
"""


def test_db_stats(uri: str, tmp_path: Path) -> None:
    script = TWO_ITEMS + (
        "shelf.createCollection('empty');\n"
        "print(EJSON.stringify({ stats: shelf.stats(), dataSize }));\n"
    )
    out = shell_json(uri, script, tmp_path)
    assert_db_stats(out["stats"], out["dataSize"])


def test_collection_stats(uri: str, tmp_path: Path) -> None:
    script = TWO_ITEMS + "print(EJSON.stringify({ stats: shelf.items.stats(), dataSize }));\n"
    out = shell_json(uri, script, tmp_path)
    stats, data_size = out["stats"], out["dataSize"]
    index_sizes = stats["indexSizes"]
    assert sorted(index_sizes) == ["_id_", "name_1"]
    assert {k: stats[k] for k in ("ns", "count", "size", "avgObjSize", "nindexes")} == {
        "ns": "shelf.items",
        "count": 2,
        "size": data_size,
        "avgObjSize": data_size // 2,
        "nindexes": 2,
    }
    assert stats["totalIndexSize"] == sum(index_sizes.values())
    assert stats["totalSize"] == stats["storageSize"] + stats["totalIndexSize"]
    assert stats["storageSize"] > 0 and all(size > 0 for size in index_sizes.values())
    assert (stats["capped"], stats["sharded"], stats["ok"]) == (False, False, 1)


def test_collection_total_size(uri: str, tmp_path: Path) -> None:
    script = TWO_ITEMS + (
        "const c = shelf.items;\n"
        "print(EJSON.stringify({ total: c.totalSize(), data: c.dataSize(), storage: c.storageSize(),"
        " indexes: c.totalIndexSize(), stats: c.stats(), dataSize }));\n"
    )
    out = shell_json(uri, script, tmp_path)
    assert out["total"] == out["storage"] + out["indexes"] == out["stats"]["totalSize"]
    assert out["data"] == out["dataSize"]
    assert out["storage"] == out["stats"]["storageSize"]
    assert out["indexes"] == out["stats"]["totalIndexSize"]


RENAME_SCRIPT = """
const shelf = db.getSiblingDB('shelf');
shelf.a.insertMany([{ _id: 1, x: 'one' }, { _id: 2, x: 'two' }]);
shelf.a.createIndex({ x: 1 });
shelf.b.insertOne({ _id: 9 });
const out = {};
out.renamed = shelf.a.renameCollection('c');
out.names = shelf.getCollectionNames().sort();
out.moved = shelf.c.find().sort({ _id: 1 }).toArray();
out.indexes = shelf.c.getIndexes().map((i) => i.name);
try {
  shelf.c.renameCollection('b');
  out.onto = 'no error';
} catch (e) {
  out.onto = { name: e.name, code: e.code, codeName: e.codeName, message: e.message };
}
out.dropTarget = shelf.c.renameCollection('b', true);
out.replaced = shelf.b.find().sort({ _id: 1 }).toArray();
out.otherDb = db.adminCommand({ renameCollection: 'shelf.b', to: 'attic.items' });
out.after = {
  shelf: shelf.getCollectionNames(),
  attic: db.getSiblingDB('attic').getCollectionNames(),
  items: db.getSiblingDB('attic').items.find().sort({ _id: 1 }).toArray(),
};
print(EJSON.stringify(out));
"""


def test_rename_collection(uri: str, tmp_path: Path) -> None:
    moved = [{"_id": 1, "x": "one"}, {"_id": 2, "x": "two"}]
    assert shell_json(uri, RENAME_SCRIPT, tmp_path) == {
        "renamed": {"ok": 1},
        "names": ["b", "c"],
        "moved": moved,
        "indexes": ["_id_", "x_1"],
        "onto": {
            "name": "MongoServerError",
            "code": 48,
            "codeName": "NamespaceExists",
            "message": "target namespace exists",
        },
        "dropTarget": {"ok": 1},
        "replaced": moved,
        "otherDb": {"ok": 1},
        "after": {"shelf": [], "attic": ["items"], "items": moved},
    }


def test_get_profiling_status(uri: str, tmp_path: Path) -> None:
    script = "print(EJSON.stringify(db.getProfilingStatus()));\n"
    assert shell_json(uri, script, tmp_path) == {"was": 0, "slowms": 100, "sampleRate": 1, "ok": 1}


PROFILING_SCRIPT = """
const shelf = db.getSiblingDB('shelf');
shelf.items.insertMany([{ _id: 1, qty: 5 }, { _id: 2, qty: 6 }]);
const out = {};
out.toSlow = shelf.setProfilingLevel(1, { slowms: 20 });
out.slowStatus = shelf.getProfilingStatus();
out.otherDb = db.getSiblingDB('attic').getProfilingStatus();  // the level is per database
out.toAll = shelf.setProfilingLevel(2);
shelf.items.find({ qty: { $gt: 5 } }).toArray();
out.profiled = shelf.system.profile
  .find({ op: 'query', ns: 'shelf.items' })
  .toArray()
  .map((p) => ({ op: p.op, ns: p.ns, find: p.command.find, filter: p.command.filter, nreturned: p.nreturned }));
out.off = shelf.setProfilingLevel(0);
out.offStatus = shelf.getProfilingStatus();
print(EJSON.stringify(out));
"""


def test_set_profiling_level(uri: str, client: Client, tmp_path: Path) -> None:
    def settings(was: int, slowms: int) -> dict[str, Any]:
        return {"was": was, "slowms": slowms, "sampleRate": 1, "ok": 1}

    try:
        got = shell_json(uri, PROFILING_SCRIPT, tmp_path)
    finally:  # slowms is the whole server's: back to the default for the tests that follow
        client.admin.command("profile", -1, slowms=100)
    assert got == {
        "toSlow": settings(0, 100),  # the reply shows the settings before the change
        "slowStatus": settings(1, 20),
        "otherDb": settings(0, 20),  # slowms is the server's, the level the database's
        "toAll": settings(1, 20),
        "profiled": [
            {
                "op": "query",
                "ns": "shelf.items",
                "find": "items",
                "filter": {"qty": {"$gt": 5}},
                "nreturned": 1,
            }
        ],
        "off": settings(2, 20),
        "offStatus": settings(0, 20),
    }


SHUTDOWN_SCRIPT = """
let reply;
try {
  reply = db.shutdownServer();
} catch (e) {
  // A network error's message names a connection number; any other error's says what failed.
  reply = e.name === 'MongoNetworkError' ? { error: e.name } : { error: e.name, message: e.message };
}
print(EJSON.stringify(reply));
"""


def test_shutdown_server(start_server: Callable[..., ServerThread], tmp_path: Path) -> None:
    # mongod closes the connection without a reply, which mongosh shows as a network error; a
    # server that answers first says ok. Either way the server is gone afterwards. A server of its
    # own: the session's is shared with the tests that follow.
    server = start_server()
    port = server.port
    reply = shell_json(server.uri, SHUTDOWN_SCRIPT, tmp_path)
    assert reply in ({"ok": 1}, {"error": "MongoNetworkError"})
    # A bounded wait on the server's own event, then what a stopped server does: refuse.
    assert server.app is not None
    wait_until(server.app.stopped.is_set, "the server stopped after shutdownServer()")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
