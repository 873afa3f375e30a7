"""Server-side JavaScript's bounds, through pymongo: a runaway function (`while (true) {}`) in
$where, $function, $accumulator or mapReduce ends with 50 MaxTimeMSExpired under maxTimeMS and
with 11601 Interrupted under killOp, while another client's commands go on being answered; a
function that allocates without end gets mongod's "Out of memory" (139); without the `js` extra
installed each feature is refused (238) naming the extra; with scripting off (--noscripting,
security.javascriptEnabled: false) each gets mongod's own refusal."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from bson import Code
from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import OperationFailure

from tests.e2e.test_cli import ServerProcess
from tests.waiting import wait_until

RUNAWAY = "function() { while (true) {} }"
WAIT_SECONDS = 30.0
#: A bound on the test, not a measurement: a runaway the limit did not stop would hang the
#: client until its socket timeout.
SOCKET_TIMEOUT_MS = 30_000

FUNCTION = {"$function": {"body": Code(RUNAWAY), "args": [], "lang": "js"}}
ACCUMULATOR = {
    "$accumulator": {
        "init": Code("function() { return 0 }"),
        "accumulate": Code("function(s) { while (true) {} }"),
        "accumulateArgs": [],
        "merge": Code("function(a, b) { return a }"),
        "lang": "js",
    }
}


@pytest.fixture
def mongo_client(ebbdb_uri: str, ebbdb_cleanup: None) -> Iterator[MongoClient[dict[str, Any]]]:
    client: MongoClient[dict[str, Any]] = MongoClient(ebbdb_uri, socketTimeoutMS=SOCKET_TIMEOUT_MS)
    yield client
    client.close()


#: Each feature's runaway, as a call taking the collection and keyword arguments (maxTimeMS,
#: comment).
RUNAWAYS: dict[str, Callable[..., Any]] = {
    "$where": lambda c, **kw: list(c.find({"$where": Code(RUNAWAY)}, **_find(kw))),
    "$function": lambda c, **kw: list(c.aggregate([{"$project": {"x": FUNCTION}}], **kw)),
    "$accumulator": lambda c, **kw: list(
        c.aggregate([{"$group": {"_id": None, "x": ACCUMULATOR}}], **kw)
    ),
    "mapReduce": lambda c, **kw: c.database.command(
        {
            "mapReduce": c.name,
            "map": Code(RUNAWAY),
            "reduce": Code("function(k, v) { return 0 }"),
            "out": {"inline": 1},
            **kw,
        }
    ),
}


def _find(kw: dict[str, Any]) -> dict[str, Any]:
    out = dict(kw)
    if "maxTimeMS" in out:
        out["max_time_ms"] = out.pop("maxTimeMS")
    return out


def _ping_while(job: threading.Thread, client: MongoClient[dict[str, Any]]) -> None:
    """Another client is answered while the runaway runs."""
    while job.is_alive():
        assert client.admin.command("ping") == {"ok": 1.0}
        time.sleep(0.02)


class Runaway:
    """One feature's runaway, run on a thread; `ended_with` checks how it ended."""

    def __init__(self, feature: str, coll: Any, **kw: Any) -> None:
        self.outcome: list[OperationFailure] = []
        self.job = threading.Thread(target=self._run, args=(feature, coll, kw), daemon=True)
        self.job.start()

    def _run(self, feature: str, coll: Any, kw: dict[str, Any]) -> None:
        try:
            RUNAWAYS[feature](coll, **kw)
        except OperationFailure as exc:
            self.outcome.append(exc)

    def ended_with(self, code: int, code_name: str, message: str) -> None:
        self.job.join(WAIT_SECONDS)
        assert not self.job.is_alive(), "the JavaScript was not interrupted"
        (exc,) = self.outcome
        assert exc.code == code
        assert exc.details is not None
        assert exc.details["codeName"] == code_name
        assert exc.details["errmsg"] == message


@pytest.mark.parametrize("feature", sorted(RUNAWAYS))
def test_runaway_ends_at_max_time_ms(
    feature: str, mongo_db: Database[dict[str, Any]], mongo_client: MongoClient[dict[str, Any]]
) -> None:
    mongo_db.c.insert_one({"_id": 1})
    runaway = Runaway(feature, mongo_client[mongo_db.name].c, maxTimeMS=300)
    _ping_while(runaway.job, mongo_client)
    runaway.ended_with(50, "MaxTimeMSExpired", "operation exceeded time limit")


@pytest.mark.parametrize("feature", sorted(RUNAWAYS))
def test_runaway_ends_at_kill_op(
    feature: str, mongo_db: Database[dict[str, Any]], mongo_client: MongoClient[dict[str, Any]]
) -> None:
    mongo_db.c.insert_one({"_id": 1})
    coll = mongo_client[mongo_db.name].c
    comment = f"runaway {feature}"
    runaway = Runaway(feature, coll, comment=comment)
    admin = mongo_client.admin
    ops = wait_until(
        lambda: admin.command({"currentOp": 1, "command.comment": comment})["inprog"],
        f"the {feature} operation",
    )
    time.sleep(0.1)  # well inside the JavaScript
    assert admin.command("killOp", 1, op=ops[0]["opid"])["ok"] == 1.0
    runaway.ended_with(11601, "Interrupted", "operation was interrupted")
    # The context that was terminated is not reused: the next call runs.
    assert list(coll.find({"$where": "this._id == 1"})) == [{"_id": 1}]


def test_allocating_without_end_is_out_of_memory(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.c.insert_one({"_id": 1})
    hog = Code("function() { var a = []; while (true) { a.push(new Array(100000).fill(1)); } }")
    with pytest.raises(OperationFailure) as info:
        list(
            mongo_db.c.aggregate(
                [{"$project": {"x": {"$function": {"body": hog, "args": [], "lang": "js"}}}}]
            )
        )
    assert info.value.code == 139
    assert info.value.details is not None
    assert info.value.details["codeName"] == "JSInterpreterFailure"
    assert info.value.details["errmsg"] == "Out of memory"
    assert mongo_db.command("ping") == {"ok": 1.0}


def test_no_host_access(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.c.insert_one({"_id": 1})
    probe = Code(
        "function() { return [typeof require, typeof process, typeof fetch, typeof XMLHttpRequest,"
        " typeof setTimeout, typeof load, typeof db] }"
    )
    (out,) = mongo_db.c.aggregate(
        [{"$project": {"_id": 0, "x": {"$function": {"body": probe, "args": [], "lang": "js"}}}}]
    )
    assert out == {"x": ["undefined"] * 7}


def test_no_state_shared_between_operations(mongo_db: Database[dict[str, Any]]) -> None:
    mongo_db.c.insert_one({"_id": 1})
    leak = {"$where": "globalThis.leaked = (globalThis.leaked || 0) + 1; leaked == 1"}
    assert list(mongo_db.c.find(leak)) == [{"_id": 1}]
    assert list(mongo_db.c.find(leak)) == [{"_id": 1}]


# -- without the engine, with scripting off --------------------------------------------------------

#: The server, started with the engine's package hidden, as an install without the extra is.
WITHOUT_ENGINE = [
    sys.executable,
    "-c",
    "import sys; sys.modules['py_mini_racer'] = None; from ebbdb.server.cli import main; "
    "sys.exit(main())",
]


_ENGINE_OFF = "Cannot run server-side javascript without the javascript engine enabled"
#: mongod's refusal of each feature with scripting off: (code, message).
SCRIPTING_OFF = {
    "$where": (6108304, "no globalScriptEngine in $where parsing"),
    "$function": (31264, _ENGINE_OFF),
    "$accumulator": (31264, _ENGINE_OFF),
    "mapReduce": (31246, _ENGINE_OFF),
}


def _codes(client: MongoClient[dict[str, Any]]) -> dict[str, tuple[int, str]]:
    """Each feature's refusal on this server: (code, message)."""
    out = {}
    for feature, exc in _refusals(client).items():
        assert exc.details is not None
        out[feature] = (exc.code, exc.details["errmsg"])
    return out


def _refusals(client: MongoClient[dict[str, Any]]) -> dict[str, OperationFailure]:
    db = client.js_refusals
    db.c.insert_one({"_id": 1})
    out: dict[str, OperationFailure] = {}
    for feature, call in RUNAWAYS.items():
        with pytest.raises(OperationFailure) as info:
            call(db.c)
        out[feature] = info.value
    return out


#: A function that runs for a while (1.5 s) and returns 1.
BUSY = "function() { const end = Date.now() + 1500; while (Date.now() < end) {} return 1 }"


def test_two_operations_run_javascript_at_once(tmp_path: Path) -> None:
    """One operation's JavaScript context alive (a $function running for a while) while others
    make theirs ($where finds), each on a thread of the server's own. On a CPU with memory
    protection keys this crashed the server (SIGSEGV in V8's isolate set-up) until V8 ran with
    them off. The server is a process of its own here, so a crash fails this test alone."""
    srv = ServerProcess(["--port", "0", "--dbpath", str(tmp_path / "data")], tmp_path)
    try:
        srv.startup_line()
        with srv.client() as slow_client, srv.client() as client:
            client.db.c.insert_many([{"_id": i, "n": i} for i in range(3)])
            slow: list[Any] = []
            pipeline = [
                {"$project": {"x": {"$function": {"body": Code(BUSY), "args": [], "lang": "js"}}}}
            ]
            job = threading.Thread(
                target=lambda: slow.extend(slow_client.db.c.aggregate(pipeline, comment="busy"))
            )
            job.start()
            wait_until(
                lambda: any(
                    op.get("command", {}).get("comment") == "busy"
                    for op in client.admin.aggregate([{"$currentOp": {}}])
                ),
                what="the busy $function running",
            )
            finds = 0
            while job.is_alive():
                got = list(client.db.c.find({"$where": Code("this.n > 0")}, sort=[("_id", 1)]))
                assert got == [{"_id": 1, "n": 1}, {"_id": 2, "n": 2}]
                finds += 1
            job.join()
            assert slow == [{"_id": 0, "x": 1.0}, {"_id": 1, "x": 1.0}, {"_id": 2, "x": 1.0}]
            assert finds > 0
            assert client.admin.command("ping") == {"ok": 1.0}
    finally:
        srv.stop()
    assert srv.proc.returncode == 0, srv.stderr


def test_without_the_extra_each_feature_names_it(tmp_path: Path) -> None:
    srv = ServerProcess(
        ["--port", "0", "--dbpath", str(tmp_path / "data")], tmp_path, cmd=WITHOUT_ENGINE
    )
    try:
        srv.startup_line()
        with srv.client() as client:
            for feature, exc in _refusals(client).items():
                assert exc.code == 238, feature
                assert exc.details is not None
                assert exc.details["codeName"] == "NotImplemented"
                message = exc.details["errmsg"]
                assert message.startswith(f"{feature} needs server-side JavaScript"), message
                assert "pip install 'ebbdb[js]'" in message
    finally:
        srv.stop()


@pytest.mark.parametrize(
    "args",
    [["--noscripting"], ["--config", "CONFIG"]],
    ids=["--noscripting", "javascriptEnabled: false"],
)
def test_scripting_off_refuses_as_mongod(tmp_path: Path, args: list[str]) -> None:
    config = tmp_path / "mongod.conf"
    config.write_text("security:\n  javascriptEnabled: false\n")
    args = [str(config) if a == "CONFIG" else a for a in args]
    srv = ServerProcess(["--port", "0", "--dbpath", str(tmp_path / "data"), *args], tmp_path)
    try:
        srv.startup_line()
        with srv.client() as client:
            got = _codes(client)
    finally:
        srv.stop()
    assert got == SCRIPTING_OFF


def test_scripting_off_on_the_operations(
    start_server: Callable[..., Any],
) -> None:
    """What Config.scripting sets (Operations.scripting), seen by every operation's token: the
    refusals, on this process's own server."""
    srv = start_server()
    assert srv.app is not None
    srv.app.operations.scripting = False
    with MongoClient(srv.uri) as client:
        got = _codes(client)
        # An empty input runs no JavaScript: mongod's mapReduce then succeeds.
        reply = client.js_refusals.command(
            {"mapReduce": "none", "map": RUNAWAY, "reduce": RUNAWAY, "out": {"inline": 1}}
        )
        assert reply == {"results": [], "ok": 1.0}
    assert got == SCRIPTING_OFF
