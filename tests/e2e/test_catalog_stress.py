"""Catalog stress through real clients: four clients create and drop databases, collections and
indexes (TTL ones among them) while four others list databases and collections, read from
collections that may or may not exist and run TTL passes, for DURATION seconds. A race may end only
in the error MongoDB itself gives for it; anything else counts as an error, and there must be none."""

from __future__ import annotations

import datetime
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from pymongo import MongoClient
from pymongo.collection import Collection
from pymongo.database import Database
from pymongo.errors import OperationFailure

from ebbdb.server.embedded import ServerThread

StartServer = Callable[..., ServerThread]
Client = MongoClient[dict[str, Any]]

#: The acceptance asks for 30 seconds of stress.
DURATION = 30.0
MUTATORS = 4
READERS = 4
DATABASES = ("stress0", "stress1", "stress2")
COLLECTIONS = ("c0", "c1", "c2", "c3")
#: Collections that stay for the whole run, so that every listing and every TTL pass walks a
#: catalog big enough for a create or drop on another thread to land in the middle of the walk.
BALLAST = 2000
#: name -> (keys, options). One spec per name and per key pattern, so that two clients creating
#: the same index never conflict (IndexOptionsConflict would be a test bug, not a race).
INDEXES: dict[str, tuple[list[tuple[str, int]], dict[str, Any]]] = {
    "x_1": ([("x", 1)], {}),
    "y_-1_x_1": ([("y", -1), ("x", 1)], {}),
    "at_1": ([("at", 1)], {"expireAfterSeconds": 30}),
    "born_1": ([("born", 1)], {"expireAfterSeconds": 0}),
}

#: Operation -> weight. Creates and drops dominate: each one that changes the catalog's size is a
#: chance to catch a reader walking it.
MUTATIONS = {
    "create_collection": 30,
    "insert_many": 15,
    "create_index": 15,
    "drop_index": 10,
    "drop": 27,
    "drop_database": 3,
}
#: Most of these walk the whole catalog (ttlClock gives the TTL passes expired documents).
READS = {
    "list_collection_names": 15,
    "list_collections": 15,
    "list_database_names": 12,
    "listDatabases": 12,
    "list_indexes": 8,
    "find": 20,
    "ttlMonitorPass": 15,
    "ttlClock": 3,
}

NAMESPACE_NOT_FOUND = 26
INDEX_NOT_FOUND = 27
NAMESPACE_EXISTS = 48
QUERY_PLAN_KILLED = 175
#: The codes MongoDB gives when an operation loses a race with another client's create or drop.
#: Every other failure is an error.
ALLOWED: dict[str, frozenset[int]] = {
    # Another client created it first.
    "create_collection": frozenset({NAMESPACE_EXISTS}),
    # The collection, or just the index, was dropped first.
    "drop_index": frozenset({NAMESPACE_NOT_FOUND, INDEX_NOT_FOUND}),
    # listIndexes of a collection that does not exist (yet, or any more).
    "list_indexes": frozenset({NAMESPACE_NOT_FOUND}),
    # MongoDB kills a cursor whose collection or index is dropped between batches.
    "find": frozenset({QUERY_PLAN_KILLED}),
}


class Tally:
    """Outcomes per operation, shared by all the client threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.ok: Counter[str] = Counter()
        self.allowed: Counter[tuple[str, int]] = Counter()
        self.errors: defaultdict[str, list[str]] = defaultdict(list)

    @contextmanager
    def outcome(self, op: str) -> Iterator[None]:
        """Count how the operation in the with-block ended."""
        try:
            yield
        except OperationFailure as exc:
            if exc.code in ALLOWED.get(op, ()):
                with self._lock:
                    self.allowed[op, int(exc.code)] += 1
                return
            self._error(op, exc)
        except Exception as exc:  # connection errors, client-side surprises: all are errors
            self._error(op, exc)
        else:
            with self._lock:
                self.ok[op] += 1

    def _error(self, op: str, exc: Exception) -> None:
        with self._lock:
            self.errors[op].append(f"{type(exc).__name__}: {exc}"[:300])

    def error_count(self) -> int:
        return sum(len(v) for v in self.errors.values())

    def report(self) -> str:
        ops = sorted(set(self.ok) | {op for op, _ in self.allowed} | set(self.errors))
        lines = [f"{'operation':<22} {'ok':>7} {'errors':>7}  expected race outcomes (code: n)"]
        for op in ops:
            raced = ", ".join(
                f"{code}: {n}" for (o, code), n in sorted(self.allowed.items()) if o == op
            )
            lines.append(f"{op:<22} {self.ok[op]:>7} {len(self.errors.get(op, [])):>7}  {raced}")
        for op, messages in sorted(self.errors.items()):
            distinct = Counter(messages)
            lines.append(f"errors in {op}:")
            lines.extend(f"  {n} x {msg}" for msg, n in distinct.most_common(5))
        return "\n".join(lines)


def _client(uri: str) -> Client:
    return MongoClient(uri, serverSelectionTimeoutMS=10_000, socketTimeoutMS=30_000)


def _docs(rng: random.Random) -> list[dict[str, Any]]:
    """A few documents for the indexes to cover; `at` and `born` give TTL passes work."""
    now = datetime.datetime.now(datetime.UTC)
    return [
        {
            "x": rng.randrange(100),
            "y": rng.randrange(10),
            "at": now - datetime.timedelta(seconds=rng.randrange(60)),
            "born": now + datetime.timedelta(seconds=rng.randrange(-5, 30)),
        }
        for _ in range(rng.randint(1, 20))
    ]


#: (the random generator, the client, a database, a collection, the operation to run on them)
Draw = tuple[random.Random, Client, Database[dict[str, Any]], Collection[dict[str, Any]], str]


def _operations(uri: str, seed: int, deadline: float, weights: dict[str, int]) -> Iterator[Draw]:
    """Until the deadline, on a client of its own: a database and a collection of the stress set
    and an operation drawn by `weights`, each picked at random from `seed`."""
    rng = random.Random(seed)
    with _client(uri) as client:
        while time.monotonic() < deadline:
            db = client[rng.choice(DATABASES)]
            coll = db[rng.choice(COLLECTIONS)]
            op = rng.choices(list(weights), weights=list(weights.values()))[0]
            yield rng, client, db, coll, op


def _mutator(uri: str, seed: int, deadline: float, tally: Tally) -> None:
    for rng, client, db, coll, op in _operations(uri, seed, deadline, MUTATIONS):
        index = rng.choice(list(INDEXES))
        with tally.outcome(op):
            if op == "create_collection":
                # check_exists=False: the server, not a listCollections first, decides.
                db.create_collection(coll.name, check_exists=False)
            elif op == "insert_many":
                coll.insert_many(_docs(rng))
            elif op == "create_index":
                keys, options = INDEXES[index]
                coll.create_index(keys, name=index, **options)
            elif op == "drop_index":
                coll.drop_index(index)
            elif op == "drop":
                coll.drop()
            else:
                client.drop_database(db.name)


def _reader(uri: str, seed: int, deadline: float, tally: Tally) -> None:
    for rng, client, db, coll, op in _operations(uri, seed, deadline, READS):
        flt = rng.choice(({}, {"x": {"$gte": 50}}, {"y": 3, "x": {"$lt": 90}}))
        with tally.outcome(op):
            if op == "list_collection_names":
                db.list_collection_names()
            elif op == "list_collections":
                list(db.list_collections())
            elif op == "list_database_names":
                client.list_database_names()
            elif op == "listDatabases":
                client.admin.command("listDatabases")
            elif op == "list_indexes":
                list(coll.list_indexes())
            elif op == "find":
                # Small batches, so that a drop can land between a find and its getMores.
                list(coll.find(flt).batch_size(3))
            elif op == "ttlMonitorPass":
                client.admin.command("ttlMonitorPass")
            else:
                client.admin.command("ttlClock", advanceSeconds=20)


def test_catalog_changes_race_with_readers_without_errors(start_server: StartServer) -> None:
    srv = start_server(parameters={"enableTestCommands": 1})
    with _client(srv.uri) as client:
        for i in range(BALLAST):
            client.ballast[f"b{i}"].insert_one({"_id": i})
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    tally = Tally()
    deadline = time.monotonic() + DURATION
    threads = [
        threading.Thread(
            target=_mutator, args=(srv.uri, seed + i, deadline, tally), name=f"mutator-{i}"
        )
        for i in range(MUTATORS)
    ] + [
        threading.Thread(
            target=_reader, args=(srv.uri, seed + 100 + i, deadline, tally), name=f"reader-{i}"
        )
        for i in range(READERS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DURATION + 30)
    assert not any(t.is_alive() for t in threads), "client threads still running after the run"
    print(tally.report())

    assert tally.error_count() == 0, f"{tally.error_count()} errors\n{tally.report()}"
    # The run did what it says: every kind of operation succeeded at least once.
    assert all(tally.ok[op] > 0 for op in [*MUTATIONS, *READS]), tally.report()

    with _client(srv.uri) as client:
        assert client.admin.command("ping")["ok"] == 1.0
        for db_name in client.list_database_names():
            db = client[db_name]
            for name in db.list_collection_names():
                reply = db.command("validate", name)
                assert reply.get("valid") is True, f"validate {db_name}.{name}: {reply}"
