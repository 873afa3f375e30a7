"""Crash safety of a replica set's transactions and retryable writes: a `python -m ebbdb --replSet`
process is killed with SIGKILL while clients commit transactions and send retryable writes, and
restarted on the same data directory, round after round. After each restart:
- a committed transaction is there whole, and one in flight at the kill is there whole or not at
  all (never in part);
- a retryable write acknowledged before the kill is there exactly once, and one in flight, sent
  again after the restart with the same lsid and txnNumber (as a driver retries it), is applied
  exactly once, whichever side of the kill it had reached;
- the oplog matches the data: replaying it from the start gives every collection's contents;
- `validate` finds every collection valid.
Reproduce a failure with the seed it prints: EBBDB_CRASH_SEED=<seed>."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import bson
from bson.binary import Binary, UuidRepresentation
from pymongo import MongoClient
from pymongo.errors import ConnectionFailure, OperationFailure

from tests.e2e import rawwire
from tests.e2e.test_crash import START_TIMEOUT, STOP_TIMEOUT, Server

ROUNDS = 10
#: On a slow machine, stop after MIN_ROUNDS once BUDGET seconds have passed.
MIN_ROUNDS = 6
BUDGET = 40.0
TXN_WRITERS = 2
RETRY_WRITERS = 2
#: Documents each transaction inserts (beside its counter's update).
TXN_DOCS = 3
KILL_DELAY = (0.0, 0.5)
DB = "crash"
REPL_SET = ("--replSet", "rs0", "--oplogSize", "64")

Doc = dict[str, Any]


# -- what was acknowledged ---------------------------------------------------------------------------


@dataclass
class Model:
    #: Transaction writer -> the transaction numbers committed (acknowledged), in order.
    committed: dict[int, list[int]] = field(default_factory=dict)
    #: Retry writer -> the tags its acknowledged updates pushed, and the ids it inserted.
    pushed: dict[int, list[str]] = field(default_factory=dict)
    inserted: dict[int, list[str]] = field(default_factory=dict)


class TxnWriter(threading.Thread):
    """Commits transactions until the server dies: each inserts TXN_DOCS documents and pushes
    its number onto the writer's counter. The one in flight at the kill is `in_flight`."""

    def __init__(self, uri: str, writer: int, first: int, stop: threading.Event) -> None:
        super().__init__(name=f"txn-writer-{writer}", daemon=True)
        self.uri, self.writer, self.next, self.stop = uri, writer, first, stop
        self.acked: list[int] = []
        self.in_flight: int | None = None
        self.error: BaseException | None = None
        self.first_ack = threading.Event()

    def run(self) -> None:
        client: MongoClient[Doc] = MongoClient(
            self.uri, serverSelectionTimeoutMS=2000, socketTimeoutMS=5000, retryWrites=False
        )
        try:
            db = client[DB]
            while not self.stop.is_set():
                n = self.next
                self.next += 1
                try:
                    with client.start_session() as session:
                        session.start_transaction()
                        db.tdocs.insert_many(
                            [{"_id": f"t{self.writer}-{n}-{k}", "n": n} for k in range(TXN_DOCS)],
                            session=session,
                        )
                        db.tcounters.update_one(
                            {"_id": self.writer},
                            {"$inc": {"count": 1}, "$push": {"ops": n}},
                            session=session,
                        )
                        session.commit_transaction()
                except ConnectionFailure:
                    self.in_flight = n
                    return
                except OperationFailure as exc:
                    if not _down(exc):
                        raise
                    if exc.has_error_label("TransientTransactionError") and not self.stop.is_set():
                        # A conflict with the other writer (both creating a collection at first):
                        # the transaction left nothing; run it again, as with_transaction would.
                        self.next = n
                        continue
                    self.in_flight = n
                    return
                self.acked.append(n)
                self.first_ack.set()
        except BaseException as exc:
            self.error = exc
        finally:
            self.first_ack.set()
            client.close()


def _down(exc: OperationFailure) -> bool:
    """An error of a server that is going away (a commit cut off by the kill)."""
    return exc.has_error_label("TransientTransactionError") or exc.has_error_label(
        "UnknownTransactionCommitResult"
    )


@dataclass
class RetryWrite:
    """One retryable write as a driver sends it: a fixed lsid and txnNumber, sent again as it is."""

    body: Doc
    tag: str
    ids: list[str]


class RetryWriter(threading.Thread):
    """Retryable writes over a raw connection, alternating an update (push a tag) and an insert of
    two documents, each with the writer's lsid and the next txnNumber."""

    def __init__(
        self, port: int, writer: int, lsid: Doc, txn_number: int, stop: threading.Event
    ) -> None:
        super().__init__(name=f"retry-writer-{writer}", daemon=True)
        self.port, self.writer, self.lsid, self.txn_number = port, writer, lsid, txn_number
        self.stop = stop
        self.acked: list[RetryWrite] = []
        self.in_flight: RetryWrite | None = None
        self.error: BaseException | None = None
        self.first_ack = threading.Event()

    def make(self) -> RetryWrite:
        self.txn_number += 1
        n = self.txn_number
        tag = f"r{self.writer}-{n}"
        common = {"lsid": self.lsid, "txnNumber": bson.Int64(n), "$db": DB}
        if n % 2:
            body = {
                "update": "rcounters",
                "updates": [{"q": {"_id": self.writer}, "u": {"$push": {"ops": tag}}}],
                **common,
            }
            return RetryWrite(body, tag, [])
        ids = [f"{tag}-a", f"{tag}-b"]
        body = {"insert": "rdocs", "documents": [{"_id": i} for i in ids], **common}
        return RetryWrite(body, tag, ids)

    def run(self) -> None:
        try:
            sock = rawwire.connect(self.port)
        except OSError as exc:
            self.error = exc
            self.first_ack.set()
            return
        try:
            while not self.stop.is_set():
                write = self.make()
                try:
                    reply = rawwire.op_msg(sock, write.body)
                except (OSError, AssertionError):
                    self.in_flight = write
                    return
                assert reply.get("ok") == 1 and "writeErrors" not in reply, reply
                self.acked.append(write)
                self.first_ack.set()
        except BaseException as exc:
            self.error = exc
        finally:
            self.first_ack.set()
            sock.close()


# -- the oplog, replayed -----------------------------------------------------------------------------


def _apply_diff(doc: Doc, diff: Doc) -> None:
    for key in diff.get("d", {}):
        doc.pop(key, None)
    for part in ("u", "i"):
        doc.update(diff.get(part, {}))
    for key, sub in diff.items():
        if len(key) > 1 and key[0] == "s":
            name = key[1:]
            if sub.get("a") is True:
                doc[name] = _apply_array_diff(list(doc[name]), sub)
            else:
                _apply_diff(doc[name], sub)


def _apply_array_diff(items: list[Any], diff: Doc) -> list[Any]:
    if "l" in diff:
        del items[diff["l"] :]
    for key, value in diff.items():
        if key in ("a", "l"):
            continue
        index = int(key[1:])
        if key[0] == "u":
            items.extend([None] * (index + 1 - len(items)))
            items[index] = value
        else:
            _apply_diff(items[index], value)
    return items


def _replay(entries: list[Doc]) -> dict[str, dict[Any, Doc]]:
    """The contents of every collection of DB that the oplog's entries build, by namespace."""
    colls: dict[str, dict[Any, Doc]] = {}

    def apply(entry: Doc) -> None:
        op, ns = entry["op"], entry["ns"]
        if op == "c":
            if "applyOps" in entry["o"]:
                for inner in entry["o"]["applyOps"]:
                    apply(inner)
            return
        if not ns.startswith(DB + "."):
            return
        docs = colls.setdefault(ns, {})
        if op == "i":
            docs[entry["o"]["_id"]] = entry["o"]
        elif op == "d":
            docs.pop(entry["o"]["_id"], None)
        elif op == "u":
            _id = entry["o2"]["_id"]
            if "$v" in entry["o"]:
                _apply_diff(docs[_id], entry["o"]["diff"])
            else:
                docs[_id] = entry["o"]

    for entry in entries:
        apply(entry)
    return colls


# -- rounds ------------------------------------------------------------------------------------------


def _port(srv: Server) -> int:
    return int(srv.uri.split(":")[2].split("/")[0])


def _client(srv: Server) -> MongoClient[Doc]:
    return MongoClient(srv.uri, serverSelectionTimeoutMS=START_TIMEOUT * 1000)


def _check(srv: Server, model: Model, resend: list[tuple[int, RetryWrite]]) -> None:
    """Send the retryable writes again (in flight, and the last acknowledged), then check what the
    restarted server holds against what was acknowledged."""
    sock = rawwire.connect(_port(srv))
    try:
        for writer, write in resend:
            reply = rawwire.op_msg(sock, write.body)
            assert reply.get("ok") == 1 and "writeErrors" not in reply, (write.body, reply)
            if write.tag not in model.pushed[writer] and write.tag not in model.inserted[writer]:
                if write.ids:
                    model.inserted[writer].extend([write.tag])
                else:
                    model.pushed[writer].append(write.tag)
    finally:
        sock.close()
    with _client(srv) as client:
        db = client[DB]
        counters = {d["_id"]: d for d in db.tcounters.find()}
        docs: dict[int, dict[int, int]] = {}
        for d in db.tdocs.find():
            writer, n, _k = d["_id"][1:].split("-")
            per = docs.setdefault(int(writer), {})
            per[int(n)] = per.get(int(n), 0) + 1
        for writer, numbers in model.committed.items():
            ops = counters[writer]["ops"]
            assert ops == numbers, f"transactions of writer {writer}: {ops}, committed {numbers}"
            assert counters[writer]["count"] == len(numbers)
            assert docs.get(writer, {}) == dict.fromkeys(numbers, TXN_DOCS), (
                f"documents of writer {writer}'s transactions: {docs.get(writer)}"
            )
        rcounters = {d["_id"]: d for d in db.rcounters.find()}
        rdocs = {d["_id"] for d in db.rdocs.find()}
        for writer, tags in model.pushed.items():
            assert rcounters[writer]["ops"] == tags, (
                f"retryable updates of writer {writer}: {rcounters[writer]['ops']}, acked {tags}"
            )
        want = {f"{tag}-{s}" for tags in model.inserted.values() for tag in tags for s in "ab"}
        assert rdocs == want, f"retryable inserts: extra {rdocs - want}, lost {want - rdocs}"
        entries = list(client.local["oplog.rs"].find())
        replayed = _replay(entries)
        for name in db.list_collection_names():
            held = {d["_id"]: d for d in db[name].find()}
            assert replayed.get(f"{DB}.{name}", {}) == held, f"the oplog does not match {name}"
        for db_name in client.list_database_names():
            for name in client[db_name].list_collection_names():
                reply = client[db_name].command("validate", name)
                assert reply.get("valid") is True, f"validate {db_name}.{name}: {reply}"


def _settle_transactions(srv: Server, model: Model, in_flight: dict[int, int]) -> None:
    """A transaction in flight at the kill is there whole or not at all: fold it in."""
    with _client(srv) as client:
        db = client[DB]
        for writer, n in in_flight.items():
            found = db.tdocs.count_documents({"n": n, "_id": {"$regex": f"^t{writer}-"}})
            counter = db.tcounters.find_one({"_id": writer}) or {}
            pushed = n in counter.get("ops", [])
            assert found in (0, TXN_DOCS) and pushed == (found == TXN_DOCS), (
                f"transaction {n} of writer {writer} applied in part: {found} documents, "
                f"counter {'has' if pushed else 'lacks'} it"
            )
            if pushed:
                model.committed[writer].append(n)


def test_transactions_and_retryable_writes_survive_sigkill(tmp_path: Path) -> None:
    seed = int(os.environ.get("EBBDB_CRASH_SEED") or random.randrange(2**32))
    print(f"seed {seed} (rerun with EBBDB_CRASH_SEED={seed})")
    rng = random.Random(seed)
    dbpath, log = tmp_path / "data", tmp_path / "server.log"
    servers: list[Server] = []

    def start() -> Server:
        servers.append(Server.start(dbpath, log, *REPL_SET))
        return servers[-1]

    model = Model()
    lsids = {
        w: {
            "id": Binary.from_uuid(uuid.UUID(int=rng.getrandbits(128)), UuidRepresentation.STANDARD)
        }
        for w in range(RETRY_WRITERS)
    }
    txn_numbers = dict.fromkeys(range(RETRY_WRITERS), 0)
    next_txn = dict.fromkeys(range(TXN_WRITERS), 0)
    started = time.monotonic()
    try:
        srv = start()
        with _client(srv) as client:
            for w in range(TXN_WRITERS):
                client[DB].tcounters.insert_one({"_id": w, "count": 0, "ops": []})
                model.committed[w] = []
            for w in range(RETRY_WRITERS):
                client[DB].rcounters.insert_one({"_id": w, "ops": []})
                model.pushed[w], model.inserted[w] = [], []
        kills = 0
        while kills < ROUNDS and (kills < MIN_ROUNDS or time.monotonic() - started < BUDGET):
            stop = threading.Event()
            txn_writers = [TxnWriter(srv.uri, w, next_txn[w], stop) for w in range(TXN_WRITERS)]
            retry_writers = [
                RetryWriter(_port(srv), w, lsids[w], txn_numbers[w], stop)
                for w in range(RETRY_WRITERS)
            ]
            writers: list[TxnWriter | RetryWriter] = [*txn_writers, *retry_writers]
            for t in writers:
                t.start()
            for t in writers:
                assert t.first_ack.wait(START_TIMEOUT), f"{t.name} got nothing acknowledged"
            time.sleep(rng.uniform(*KILL_DELAY))
            srv.stop(signal.SIGKILL)
            stop.set()
            for t in writers:
                t.join(STOP_TIMEOUT)
                assert not t.is_alive() and t.error is None, f"{t.name}: {t.error!r}"
            in_flight: dict[int, int] = {}
            for t in txn_writers:
                model.committed[t.writer].extend(t.acked)
                next_txn[t.writer] = t.next
                if t.in_flight is not None:
                    in_flight[t.writer] = t.in_flight
            resend: list[tuple[int, RetryWrite]] = []
            for r in retry_writers:
                for write in r.acked:
                    (model.inserted if write.ids else model.pushed)[r.writer].append(write.tag)
                txn_numbers[r.writer] = r.txn_number
                # The write in flight, or else the last acknowledged (applied: it must not apply
                # again). Only the newest: an older txnNumber is refused (225) once a newer one
                # has started.
                if r.in_flight is not None:
                    resend.append((r.writer, r.in_flight))
                elif r.acked:
                    resend.append((r.writer, r.acked[-1]))
            print(
                f"round {kills}: committed {sum(len(t.acked) for t in txn_writers)}, retryable "
                f"{sum(len(r.acked) for r in retry_writers)}, in flight {in_flight}"
            )
            kills += 1
            srv = start()
            _settle_transactions(srv, model, in_flight)
            _check(srv, model, resend)
        assert srv.stop(signal.SIGTERM) == 0, srv.log_tail()
    finally:
        for s in servers:
            s.kill()
