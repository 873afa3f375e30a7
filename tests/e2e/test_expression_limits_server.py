"""Expressions that build large values, through a real server with a 256 MB cap (issue 24): three
concurrent runaway `$map`s each end with a MongoDB error within seconds while another client's
query gets its answer; maxTimeMS and killOp stop an expression's loop."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo.errors import OperationFailure

from tests.e2e.test_cli import ServerProcess
from tests.waiting import wait_until

Doc = dict[str, Any]
CAP = 256 * 1024 * 1024

RUNAWAY: list[Doc] = [
    {
        "$project": {
            "x": {
                "$map": {
                    "input": {"$range": [0, 5_000_000]},
                    "in": {"$concat": ["item-", {"$toString": "$$this"}]},
                }
            }
        }
    },
    {"$project": {"n": {"$size": "$x"}}},
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("expression_limits")
    (root / "data").mkdir()
    srv = ServerProcess(
        [
            "--port",
            "0",
            "--dbpath",
            str(root / "data"),
            "--quiet",
            f"--setParameter=ebbdbMaxTrackedMemoryBytes={CAP}",
        ],
        root,
    )
    try:
        srv.startup_line()
        with srv.client() as c:
            c.t.one.insert_one({"_id": 1, "k": "v"})
        yield srv
    finally:
        srv.kill()


def test_three_runaway_maps_fail_and_a_fourth_client_is_answered(server: ServerProcess) -> None:
    errors: dict[int, tuple[int | None, float]] = {}
    answers: list[list[Doc]] = []
    done = threading.Event()

    def runaway(i: int) -> None:
        start = time.monotonic()
        with server.client() as c:
            try:
                list(c.t.one.aggregate(RUNAWAY))
            except OperationFailure as exc:
                errors[i] = (exc.code, time.monotonic() - start)

    def small() -> None:
        with server.client() as c:
            while not done.is_set():
                answers.append(list(c.t.one.find({}, {"k": 1})))

    threads = [threading.Thread(target=runaway, args=(i,)) for i in range(3)]
    other = threading.Thread(target=small)
    other.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    done.set()
    other.join(10)
    assert sorted(errors) == [0, 1, 2]
    assert all(code == 146 for code, _ in errors.values()), errors
    assert all(seconds < 20 for _, seconds in errors.values()), errors
    assert answers and all(a == [{"_id": 1, "k": "v"}] for a in answers)
    with server.client() as c:

        def memory() -> Doc:
            got: Doc = c.admin.command("serverStatus")["ebbdb"]["memory"]
            return got

        wait_until(lambda: memory()["usedBytes"] == 0, "the runaways' memory given back")
        assert memory()["peakBytes"] <= CAP


def test_max_time_ms_stops_a_reduce(server: ServerProcess) -> None:
    pipeline: list[Doc] = [
        {
            "$project": {
                "s": {
                    "$reduce": {
                        "input": {"$range": [0, 5_000_000]},
                        "initialValue": 0,
                        "in": {"$add": ["$$value", "$$this"]},
                    }
                }
            }
        }
    ]
    with server.client() as c:
        start = time.monotonic()
        with pytest.raises(OperationFailure) as exc:
            list(c.t.one.aggregate(pipeline, maxTimeMS=200))
        assert exc.value.code == 50
        assert time.monotonic() - start < 2
        # $range [0, 1e7] is refused before anything runs, as mongod refuses it.
        pipeline[0]["$project"]["s"]["$reduce"]["input"]["$range"][1] = 10_000_000
        with pytest.raises(OperationFailure) as exc:
            list(c.t.one.aggregate(pipeline, maxTimeMS=200))
        assert exc.value.code == 146


def test_kill_op_stops_a_map(server: ServerProcess) -> None:
    pipeline: list[Doc] = [
        {
            "$project": {
                "x": {
                    "$map": {
                        "input": {"$range": [0, 2_000_000]},
                        "in": {"$multiply": ["$$this", 2]},
                    }
                }
            }
        },
        {"$project": {"n": {"$size": "$x"}}},
    ]
    codes: list[int | None] = []

    def run() -> None:
        with server.client() as c:
            try:
                list(c.t.one.aggregate(pipeline, comment="killme"))
            except OperationFailure as exc:
                codes.append(exc.code)

    thread = threading.Thread(target=run)
    thread.start()
    with server.client() as c:

        def running() -> list[Doc]:
            ops: list[Doc] = c.admin.command({"currentOp": 1, "command.comment": "killme"})[
                "inprog"
            ]
            return ops

        wait_until(lambda: bool(running()), "the $map running")
        c.admin.command("killOp", op=running()[0]["opid"])
    thread.join(30)
    assert codes == [11601]
