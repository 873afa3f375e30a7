"""Crash safety through real clients: writers run a mix of single- and multi-document writes against
a `python -m ebbdb` process that is killed with SIGKILL at a random moment and restarted on the same
data directory, round after round. After each restart every acknowledged write is there, each write
that was in flight at the kill is applied whole or not at all, and `validate` finds every collection
valid. Reproduce a failure with the seed it prints: EBBDB_CRASH_SEED=<seed>."""

from __future__ import annotations

import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import ConnectionFailure

ROOT = Path(__file__).resolve().parents[2]
ROUNDS = 36
#: On a slow machine, stop after MIN_ROUNDS once BUDGET seconds have passed (the CI bound is 2 min).
MIN_ROUNDS = 20
BUDGET = 60.0
WRITERS = 4
#: Documents per writer that update_many rewrites together.
GROUP_SIZE = 5
#: The kill lands this many seconds (uniform) after every writer has had a write acknowledged.
KILL_DELAY = (0.0, 0.6)
#: Blob sizes: inline values, and ones that spill onto LMDB overflow pages.
BLOB_SIZES = (8, 300, 3_000, 12_000)
START_TIMEOUT = 15.0
STOP_TIMEOUT = 10.0
DB = "crash"
_LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")

Doc = dict[str, Any]
Db = Database[Doc]


def _mix(n: int) -> int:
    """The value a document's `b` must hold for its `a`: a torn write breaks the pair."""
    return (n * 2_654_435_761) % 2**32


def _make_doc(_id: str, writer: int, rng: random.Random) -> Doc:
    a = rng.randrange(2**31)
    blob = rng.randbytes(rng.choice(BLOB_SIZES))
    return {
        "_id": _id,
        "w": writer,
        "a": a,
        "b": _mix(a),
        "len": len(blob),
        "crc": zlib.crc32(blob),
        "blob": blob,
    }


def _whole(doc: Doc) -> bool:
    blob = doc.get("blob")
    return (
        isinstance(blob, bytes)
        and doc.get("b") == _mix(doc.get("a", -1))
        and doc.get("len") == len(blob)
        and doc.get("crc") == zlib.crc32(blob)
    )


def _counter_id(writer: int) -> str:
    return f"w{writer}"


def _group_ids(writer: int) -> list[str]:
    return [f"w{writer}g{k}" for k in range(GROUP_SIZE)]


def _group_doc(_id: str, writer: int, version: int) -> Doc:
    return {"_id": _id, "w": writer, "v": version, "check": _mix(version)}


# -- what the database must hold -------------------------------------------------------------------


@dataclass
class Model:
    """Everything acknowledged (or seen after a restart): the state the database must hold exactly."""

    docs: dict[str, Doc] = field(default_factory=dict)
    #: Counter document id -> the tags pushed onto its `ops`, in order (its `n` is their number).
    counters: dict[str, list[str]] = field(default_factory=dict)
    #: Group document id -> the document.
    groups: dict[str, Doc] = field(default_factory=dict)

    def owned_by(self, writer: int) -> list[str]:
        return sorted(i for i, d in self.docs.items() if d["w"] == writer)


@dataclass
class Seen:
    """What a restarted server holds."""

    docs: dict[str, Doc]
    counters: dict[str, Doc]
    groups: dict[str, Doc]

    @classmethod
    def read(cls, db: Db) -> Seen:
        return cls(
            {d["_id"]: d for d in db.docs.find()},
            {d["_id"]: d for d in db.counters.find()},
            {d["_id"]: d for d in db.groups.find()},
        )


class Op(Protocol):
    def send(self, db: Db) -> None:
        """Perform the write; returns only once it is acknowledged as expected."""

    def apply(self, model: Model) -> None:
        """Record the acknowledged write."""

    def settle(self, model: Model, seen: Seen) -> None:
        """For a write in flight at the kill: assert that it is applied whole or not at all, and
        record what happened."""


@dataclass(frozen=True)
class InsertOne:
    doc: Doc

    def send(self, db: Db) -> None:
        db.docs.insert_one(self.doc)

    def apply(self, model: Model) -> None:
        model.docs[self.doc["_id"]] = self.doc

    def settle(self, model: Model, seen: Seen) -> None:
        found = seen.docs.get(self.doc["_id"])
        if found is not None:
            assert found == self.doc, f"in-flight insert_one applied in part: {_short(found)}"
            self.apply(model)


@dataclass(frozen=True)
class InsertMany:
    docs: tuple[Doc, ...]

    def send(self, db: Db) -> None:
        result = db.docs.insert_many(list(self.docs), ordered=True)
        assert len(result.inserted_ids) == len(self.docs), result.inserted_ids

    def apply(self, model: Model) -> None:
        for doc in self.docs:
            model.docs[doc["_id"]] = doc

    def settle(self, model: Model, seen: Seen) -> None:
        # An ordered insert_many is not atomic as a whole, but each document is, and a later one is
        # never stored without the ones before it.
        present = [d["_id"] in seen.docs for d in self.docs]
        assert present == sorted(present, reverse=True), (
            f"in-flight ordered insert_many stored a non-prefix: {present}"
        )
        for doc in self.docs:
            found = seen.docs.get(doc["_id"])
            if found is not None:
                assert found == doc, (
                    f"in-flight insert_many document applied in part: {_short(found)}"
                )
                model.docs[doc["_id"]] = doc


@dataclass(frozen=True)
class Increment:
    """update_one: $inc the writer's counter and $push a tag, so `n` and `ops` must agree."""

    counter: str
    tag: str

    def send(self, db: Db) -> None:
        result = db.counters.update_one(
            {"_id": self.counter}, {"$inc": {"n": 1}, "$push": {"ops": self.tag}}
        )
        assert (result.matched_count, result.modified_count) == (1, 1), result.raw_result

    def apply(self, model: Model) -> None:
        model.counters[self.counter].append(self.tag)

    def settle(self, model: Model, seen: Seen) -> None:
        found = seen.counters.get(self.counter, {})
        assert found.get("n") == len(found.get("ops", [])), (
            f"in-flight update_one applied in part: {found}"
        )
        if found.get("ops") == [*model.counters[self.counter], self.tag]:
            self.apply(model)


@dataclass(frozen=True)
class SetVersion:
    """update_many: $set a new version on every document of the writer's group."""

    writer: int
    version: int

    def send(self, db: Db) -> None:
        result = db.groups.update_many(
            {"w": self.writer}, {"$set": {"v": self.version, "check": _mix(self.version)}}
        )
        assert (result.matched_count, result.modified_count) == (GROUP_SIZE, GROUP_SIZE), (
            result.raw_result
        )

    def apply(self, model: Model) -> None:
        for _id in _group_ids(self.writer):
            model.groups[_id] = _group_doc(_id, self.writer, self.version)

    def settle(self, model: Model, seen: Seen) -> None:
        # update_many is atomic per document only: each one has the old version or the new one.
        for _id in _group_ids(self.writer):
            found = seen.groups.get(_id)
            new = _group_doc(_id, self.writer, self.version)
            assert found in (model.groups[_id], new), (
                f"in-flight update_many left {found}: neither {model.groups[_id]} nor {new}"
            )
            model.groups[_id] = found


@dataclass(frozen=True)
class DeleteOne:
    _id: str

    def send(self, db: Db) -> None:
        result = db.docs.delete_one({"_id": self._id})
        assert result.deleted_count == 1, result.raw_result

    def apply(self, model: Model) -> None:
        del model.docs[self._id]

    def settle(self, model: Model, seen: Seen) -> None:
        if self._id not in seen.docs:
            self.apply(model)


def _short(doc: Doc) -> Doc:
    return {k: (f"<{len(v)} bytes>" if isinstance(v, bytes) else v) for k, v in doc.items()}


# -- writers ---------------------------------------------------------------------------------------


class Writer(threading.Thread):
    """One client doing a seeded random mix of writes until `stop`; every acknowledged write goes
    to `acked`. A connection error (the kill) ends it with that write in `in_flight`; anything else
    is `error`."""

    def __init__(
        self, uri: str, writer: int, round_: int, seed: int, owned: list[str], stop: threading.Event
    ) -> None:
        super().__init__(name=f"crash-writer-{writer}", daemon=True)
        self.uri = uri
        self.writer = writer
        self.round = round_
        self.rng = random.Random(f"{seed}/{round_}/{writer}")
        self.owned = owned
        self.stop = stop
        self.acked: list[Op] = []
        self.in_flight: Op | None = None
        self.error: BaseException | None = None
        self.first_ack = threading.Event()

    def next_op(self, n: int) -> Op:
        tag = f"r{self.round:02d}w{self.writer}o{n:04d}"
        kind = self.rng.choices(
            ("insert_one", "insert_many", "update_one", "update_many", "delete_one"),
            weights=(35, 15, 20, 15, 15),
        )[0]
        if kind == "insert_many":
            count = self.rng.randint(2, 5)
            return InsertMany(
                tuple(_make_doc(f"{tag}-{k}", self.writer, self.rng) for k in range(count))
            )
        if kind == "update_one":
            return Increment(_counter_id(self.writer), tag)
        if kind == "update_many":
            return SetVersion(self.writer, (self.round + 1) * 100_000 + n)
        if kind == "delete_one" and self.owned:
            return DeleteOne(self.owned.pop(self.rng.randrange(len(self.owned))))
        return InsertOne(_make_doc(tag, self.writer, self.rng))

    def run(self) -> None:
        client: MongoClient[Doc] = MongoClient(
            self.uri,
            serverSelectionTimeoutMS=2000,
            connectTimeoutMS=2000,
            socketTimeoutMS=5000,
            retryWrites=False,
        )
        try:
            db = client[DB]
            n = 0
            while not self.stop.is_set():
                op = self.next_op(n)
                n += 1
                try:
                    op.send(db)
                except ConnectionFailure:
                    self.in_flight = op
                    return
                self.acked.append(op)
                if isinstance(op, InsertOne):
                    self.owned.append(op.doc["_id"])
                elif isinstance(op, InsertMany):
                    self.owned.extend(d["_id"] for d in op.docs)
                self.first_ack.set()
        except BaseException as exc:
            self.error = exc
        finally:
            self.first_ack.set()
            client.close()


# -- the server process ----------------------------------------------------------------------------


class Server:
    """One `python -m ebbdb` process; its stderr goes to the log file `log`."""

    def __init__(self, proc: subprocess.Popen[str], log: Path) -> None:
        self.proc = proc
        self.log = log
        self.uri = ""

    @classmethod
    def start(cls, dbpath: Path, log: Path, *options: str) -> Server:
        """Start a server on `dbpath` (with more command-line `options`) and wait for its startup
        line."""
        with open(log, "a") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ebbdb", "--port", "0", "--dbpath", str(dbpath), *options],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
            )
        srv = cls(proc, log)
        lines: queue.Queue[str] = queue.Queue()
        # Read stdout on a thread so that waiting for the startup line can time out.
        threading.Thread(target=srv._pump, args=(lines,), daemon=True).start()
        try:
            line = lines.get(timeout=START_TIMEOUT)
        except queue.Empty:
            line = ""
        match = _LISTENING.search(line)
        if match is None:
            srv.kill()
            raise AssertionError(f"no startup line naming a port: {line!r}\n{srv.log_tail()}")
        srv.uri = f"mongodb://127.0.0.1:{match.group(1)}/?directConnection=true"
        return srv

    def _pump(self, lines: queue.Queue[str]) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            lines.put(line)
        lines.put("")

    def log_tail(self) -> str:
        return "server log:\n" + "".join(self.log.read_text().splitlines(keepends=True)[-30:])

    def stop(self, sig: int) -> int:
        """Send `sig` and return the exit code."""
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"server ignored {signal.Signals(sig).name}\n{self.log_tail()}"
            ) from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)


# -- one round -------------------------------------------------------------------------------------


def _write_until_signal(
    srv: Server, model: Model, round_: int, seed: int, sig: int
) -> tuple[list[Writer], float]:
    """Run the writers, send `sig` at a random moment, and return them (all finished)."""
    rng = random.Random(f"{seed}/{round_}/kill")
    stop = threading.Event()
    writers = [Writer(srv.uri, w, round_, seed, model.owned_by(w), stop) for w in range(WRITERS)]
    for w in writers:
        w.start()
    for w in writers:
        assert w.first_ack.wait(START_TIMEOUT), f"writer {w.writer} got no write acknowledged"
    delay = rng.uniform(*KILL_DELAY)
    time.sleep(delay)
    code = srv.stop(sig)
    if sig == signal.SIGTERM:
        assert code == 0, f"exit code {code} after SIGTERM\n{srv.log_tail()}"
    stop.set()
    for w in writers:
        w.join(STOP_TIMEOUT)
        assert not w.is_alive(), f"writer {w.writer} did not finish after the server stopped"
        assert w.error is None, f"writer {w.writer} failed while the server was up: {w.error!r}"
    return writers, delay


def _check_and_settle(db: Db, model: Model, in_flight: list[Op]) -> None:
    """Assert that the restarted server holds exactly what `model` says, give or take the writes in
    flight at the kill (each whole or absent), and fold those outcomes into `model`."""
    seen = Seen.read(db)
    torn = [_short(d) for d in seen.docs.values() if not _whole(d)]
    assert not torn, f"documents not whole: {torn[:3]}"
    for op in in_flight:
        op.settle(model, seen)

    lost = sorted(model.docs.keys() - seen.docs.keys())
    assert not lost, f"acknowledged inserts lost: {lost}"
    extra = sorted(seen.docs.keys() - model.docs.keys())
    assert not extra, f"documents never acknowledged, or acknowledged as deleted: {extra}"
    changed = [i for i in model.docs if seen.docs[i] != model.docs[i]]
    assert not changed, f"documents differ from what was written: {changed}"

    for _id, tags in model.counters.items():
        found = seen.counters.get(_id, {})
        assert found == {"_id": _id, "n": len(tags), "ops": tags}, (
            f"counter {_id}: n={found.get('n')}, {len(found.get('ops', []))} ops; acknowledged "
            f"{len(tags)}, missing {sorted(set(tags) - set(found.get('ops', [])))}"
        )
    for _id, want in model.groups.items():
        found = seen.groups.get(_id)
        assert found == want, f"group document {found}, acknowledged {want}"


def _validate_all(client: MongoClient[Doc]) -> None:
    for db_name in client.list_database_names():
        db = client[db_name]
        for name in db.list_collection_names():
            reply = db.command("validate", name)
            assert reply.get("valid") is True, f"validate {db_name}.{name}: {reply}"


def _check(srv: Server, model: Model, in_flight: list[Op]) -> None:
    with MongoClient(srv.uri, serverSelectionTimeoutMS=START_TIMEOUT * 1000) as client:
        _check_and_settle(client[DB], model, in_flight)
        _validate_all(client)


def _setup(srv: Server, model: Model) -> None:
    with MongoClient(srv.uri, serverSelectionTimeoutMS=START_TIMEOUT * 1000) as client:
        db = client[DB]
        db.docs.create_index("a")
        db.groups.create_index("w")
        for w in range(WRITERS):
            db.counters.insert_one({"_id": _counter_id(w), "n": 0, "ops": []})
            model.counters[_counter_id(w)] = []
            for _id in _group_ids(w):
                model.groups[_id] = _group_doc(_id, w, 0)
                db.groups.insert_one(dict(model.groups[_id]))


def _round(srv: Server, model: Model, round_: int, seed: int, sig: int) -> list[Op]:
    """One round of writes ended by `sig`: record what was acknowledged, return what was not."""
    writers, delay = _write_until_signal(srv, model, round_, seed, sig)
    for w in writers:
        for op in w.acked:
            op.apply(model)
    in_flight = [w.in_flight for w in writers if w.in_flight is not None]
    print(
        f"round {round_}: {signal.Signals(sig).name} after {delay:.3f} s, "
        f"{sum(len(w.acked) for w in writers)} acknowledged, "
        f"in flight: {[type(op).__name__ for op in in_flight]}"
    )
    return in_flight


def test_acknowledged_writes_survive_sigkill(tmp_path: Path) -> None:
    seed = int(os.environ.get("EBBDB_CRASH_SEED") or random.randrange(2**32))
    print(f"seed {seed} (rerun with EBBDB_CRASH_SEED={seed})")
    dbpath, log = tmp_path / "data", tmp_path / "server.log"
    started = time.monotonic()
    servers: list[Server] = []

    def start() -> Server:
        servers.append(Server.start(dbpath, log))
        return servers[-1]

    model = Model()
    try:
        srv = start()
        _setup(srv, model)
        kills = 0
        while kills < ROUNDS and (kills < MIN_ROUNDS or time.monotonic() - started < BUDGET):
            in_flight = _round(srv, model, kills, seed, signal.SIGKILL)
            kills += 1
            srv = start()
            _check(srv, model, in_flight)
        # A clean shutdown while the writers run, then one with nothing in flight.
        in_flight = _round(srv, model, kills, seed, signal.SIGTERM)
        srv = start()
        _check(srv, model, in_flight)
        assert srv.stop(signal.SIGTERM) == 0, srv.log_tail()
        srv = start()
        _check(srv, model, [])
        assert srv.stop(signal.SIGTERM) == 0, srv.log_tail()
    finally:
        for s in servers:
            s.kill()
    print(f"{kills} kills in {time.monotonic() - started:.1f} s; {len(model.docs)} documents")
