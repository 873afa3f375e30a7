"""SIGTERM ends the process within its 10 s grace whatever runs: a command that spins ignoring
its interruption (the ebbdbSpinIgnoringInterrupts fail point), on a reader thread (whose pool
closing storage would wait for forever) or on the event loop itself. The shutdown watchdog
(server/shutdown.py) exits with its own status and says so in the log; a restart on the data
directory finds every acknowledged write and validates. The shutdown command's timeoutSecs sets
the watchdog's time when longer. (A clean SIGTERM's exit 0 is tests/e2e/test_cli.py's.)"""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient
from pymongo.errors import AutoReconnect, PyMongoError

from ebbdb.server.app import SHUTDOWN_GRACE_SECONDS
from ebbdb.server.shutdown import EXIT_SHUTDOWN_TIMEOUT, LAST_WORDS_SECONDS, Watchdog
from tests.e2e.test_cli import ServerProcess
from tests.waiting import wait_until

#: A margin for a busy machine over the time the process may take.
MARGIN_SECONDS = 3.0
SPIN = "ebbdbSpinIgnoringInterrupts"
TIMED_OUT = "did not finish within"


def _args(dbpath: Path) -> list[str]:
    return ["--port", "0", "--dbpath", str(dbpath), "--setParameter", "enableTestCommands=1"]


def _load(client: MongoClient[dict[str, Any]]) -> None:
    """Acknowledged writes, none of them journaled: the default write concern."""
    acked = client.app.acked
    acked.insert_many([{"_id": i, "v": "x" * 100} for i in range(100)])
    acked.insert_one({"_id": "last"})


def _spin(port: int) -> threading.Thread:
    """A client running `count` under the fail point (it never gets an answer)."""

    def run() -> None:
        client: MongoClient[dict[str, Any]] = MongoClient(
            f"mongodb://127.0.0.1:{port}/?directConnection=true",
            socketTimeoutMS=60_000,
            serverSelectionTimeoutMS=5000,
        )
        try:
            client.app.command("count", "acked")
        except PyMongoError:
            pass  # its connection closed, or the server went away
        finally:
            client.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _spinning(client: MongoClient[dict[str, Any]]) -> bool:
    ops = client.admin.command({"currentOp": 1, "ns": {"$regex": "^app\\."}})["inprog"]
    return any("count" in op.get("command", {}) for op in ops)


def _unresponsive(port: int) -> bool:
    client: MongoClient[dict[str, Any]] = MongoClient(
        f"mongodb://127.0.0.1:{port}/?directConnection=true",
        socketTimeoutMS=300,
        connectTimeoutMS=300,
        serverSelectionTimeoutMS=300,
    )
    try:
        client.admin.command("ping")
    except PyMongoError:
        return True
    finally:
        client.close()
    return False


def _wait_exit(server: ServerProcess, limit: float) -> tuple[int, float]:
    """The exit status, and the seconds it took from now; fails past `limit`."""
    started = time.monotonic()
    try:
        code = server.proc.wait(limit)
    except subprocess.TimeoutExpired:
        server.kill()
        pytest.fail(f"the server was still running {limit} s later; stderr:\n{server.stderr}")
    return code, time.monotonic() - started


def _restart_finds_every_write(dbpath: Path, tmp_path: Path) -> None:
    again = ServerProcess(_args(dbpath), tmp_path)
    try:
        again.startup_line()
        client = again.client()
        assert client.app.acked.count_documents({}) == 101
        assert client.app.acked.find_one({"_id": "last"}) == {"_id": "last"}
        assert client.app.command("validate", "acked")["valid"] is True
        client.close()
        assert again.stop() == 0, again.stderr
    finally:
        again.kill()


@pytest.mark.parametrize("where", ["reader thread", "event loop"])
def test_sigterm_ends_a_server_whose_command_ignores_interrupts(tmp_path: Path, where: str) -> None:
    dbpath = tmp_path / "data"
    dbpath.mkdir()
    server = ServerProcess(_args(dbpath), tmp_path)
    try:
        server.startup_line()
        assert server.port is not None
        client = server.client()
        _load(client)
        client.admin.command(
            "configureFailPoint",
            SPIN,
            mode="alwaysOn",
            data={"failCommands": ["count"], "onEventLoop": where == "event loop"},
        )
        spinner = _spin(server.port)
        if where == "event loop":
            wait_until(lambda: _unresponsive(server.port or 0), "the event loop stuck")
        else:
            wait_until(lambda: _spinning(client), "count spinning in currentOp")
        client.close()

        server.proc.send_signal(signal.SIGTERM)
        code, took = _wait_exit(server, SHUTDOWN_GRACE_SECONDS + MARGIN_SECONDS)
        log = server.stderr
        assert code == EXIT_SHUTDOWN_TIMEOUT, log
        # The watchdog waits out the grace (but its last words) before it ends the process.
        assert took >= SHUTDOWN_GRACE_SECONDS - LAST_WORDS_SECONDS - 0.5, (took, log)
        assert f"shutdown (signal) {TIMED_OUT} 10 s" in log, log
        assert f"exiting with status {EXIT_SHUTDOWN_TIMEOUT}" in log, log
        if where == "reader thread":
            # The stop went its way: it interrupted the command, which went on regardless.
            assert "interrupting 1 operations still running" in log, log
            assert "ebbdb-reader" in log.split(TIMED_OUT, 1)[1], log
        assert "shutdown complete" not in log
        spinner.join(5)
    finally:
        server.kill()
    _restart_finds_every_write(dbpath, tmp_path)


def test_shutdown_command_waits_its_timeout_secs_then_the_watchdog_ends_it(
    tmp_path: Path,
) -> None:
    dbpath = tmp_path / "data"
    dbpath.mkdir()
    server = ServerProcess(_args(dbpath), tmp_path)
    timeout_secs = 15
    try:
        server.startup_line()
        assert server.port is not None
        client = server.client()
        _load(client)
        client.admin.command(
            "configureFailPoint", SPIN, mode="alwaysOn", data={"failCommands": ["count"]}
        )
        spinner = _spin(server.port)
        wait_until(lambda: _spinning(client), "count spinning in currentOp")
        started = time.monotonic()
        with pytest.raises(AutoReconnect):  # no reply: the connection closes, or times out
            client.admin.command("shutdown", timeoutSecs=timeout_secs)
        client.close()
        code, _ = _wait_exit(server, timeout_secs + MARGIN_SECONDS)
        took = time.monotonic() - started
        log = server.stderr
        assert code == EXIT_SHUTDOWN_TIMEOUT, log
        assert timeout_secs - LAST_WORDS_SECONDS - 0.5 <= took <= timeout_secs + MARGIN_SECONDS
        assert f"shutdown (shutdown command) {TIMED_OUT} 15 s" in log, log
        # The count, and the shutdown command itself.
        assert re.search(r"interrupting \d+ operations still running", log), log
        spinner.join(5)
    finally:
        server.kill()
    _restart_finds_every_write(dbpath, tmp_path)


def test_a_disarmed_watchdog_never_ends_the_process() -> None:
    """In this process (no backstop, and an exit that records): a stop that finishes in time
    disarms it; an arm after that changes nothing."""
    exits: list[int] = []

    def record(code: int) -> Any:
        exits.append(code)

    watchdog = Watchdog(exit=record, backstop=False)
    watchdog.start()
    watchdog.arm(LAST_WORDS_SECONDS + 0.2, "signal")
    assert watchdog.armed
    watchdog.disarm()
    assert not watchdog.armed
    watchdog.arm(0.0, "signal")
    time.sleep(0.5)
    assert exits == []
    assert not watchdog.armed
