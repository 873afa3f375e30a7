"""The `ebbdb` command as an operator runs it: real subprocesses (`python -m ebbdb`, and the console
script when installed), the startup line, signals, the data directory lock, --setParameter,
--ephemeral (the data directory goes with the server) and --config (a mongod.conf; flags win).
Every wait has a timeout so that no test can hang."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from ebbdb.server.cli import EXIT_DBPATH_IN_USE
from ebbdb.server.version import EBBDB_VERSION

ROOT = Path(__file__).resolve().parents[2]
SERVER_CMD = [sys.executable, "-m", "ebbdb"]
START_TIMEOUT = 15.0
EXIT_TIMEOUT = 5.0
_STARTUP_RE = re.compile(r"\b127\.0\.0\.1:(\d+)\b")


def _run(args: list[str], cmd: list[str] = SERVER_CMD) -> subprocess.CompletedProcess[str]:
    """Run a command that must exit on its own."""
    return subprocess.run(
        [*cmd, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )


class ServerProcess:
    """One `ebbdb` subprocess. stdout is read by a thread (so reads can time out); stderr goes to a
    file so the log can never fill a pipe and block the server."""

    def __init__(
        self,
        args: list[str],
        log_dir: Path,
        cmd: list[str] = SERVER_CMD,
        preexec_fn: Callable[[], None] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.stderr_path = log_dir / f"stderr-{time.monotonic_ns()}.log"
        self._stderr = open(self.stderr_path, "w")
        self.proc = subprocess.Popen(
            [*cmd, *args],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            preexec_fn=preexec_fn,
            env=env,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read_stdout, daemon=True)
        self._reader.start()
        self.stdout_lines: list[str] = []
        self.port: int | None = None

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    @property
    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text()

    def startup_line(self, timeout: float = START_TIMEOUT) -> str:
        """The first stdout line; fails with the server's stderr if it exits or stays silent."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no startup line within {timeout} s; stderr:\n{self.stderr}")
        if line is None:
            self.proc.wait(EXIT_TIMEOUT)
            pytest.fail(
                f"server exited with {self.proc.returncode} before its startup line; "
                f"stderr:\n{self.stderr}"
            )
        self.stdout_lines.append(line)
        match = _STARTUP_RE.search(line)
        assert match, f"startup line does not name 127.0.0.1:<port>: {line!r}"
        self.port = int(match.group(1))
        return line

    def client(self) -> MongoClient[dict[str, Any]]:
        assert self.port is not None, "call startup_line() first"
        return MongoClient(
            f"mongodb://127.0.0.1:{self.port}/?directConnection=true",
            serverSelectionTimeoutMS=5000,
            socketTimeoutMS=5000,
            connectTimeoutMS=5000,
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = EXIT_TIMEOUT) -> int:
        """Send `sig` and wait for the exit code; the rest of stdout is collected."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(EXIT_TIMEOUT)
            pytest.fail(
                f"server ignored signal {signal.Signals(sig).name} for {timeout} s; "
                f"stderr:\n{self.stderr}"
            )
        self._reader.join(EXIT_TIMEOUT)
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.stdout_lines.append(line)
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(EXIT_TIMEOUT)
        self._stderr.close()


def _refuses(port: int | None) -> None:
    """Nothing listens on `port` any more: a connection is refused."""
    assert port is not None
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=EXIT_TIMEOUT).close()


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Any]:
    """launch(*args) starts `python -m ebbdb *args`; leftovers are killed at the end of the test."""
    procs: list[ServerProcess] = []

    def start(*args: str) -> ServerProcess:
        p = ServerProcess(list(args), tmp_path)
        procs.append(p)
        return p

    yield start
    for p in procs:
        p.kill()


def _console_script() -> list[list[str]]:
    script = shutil.which("ebbdb")
    return [[script]] if script else []


# -- commands that exit at once --------------------------------------------------------------------


@pytest.mark.parametrize(
    "cmd",
    [SERVER_CMD, *_console_script()],
    ids=["python_-m_ebbdb", *(["ebbdb"] * len(_console_script()))],
)
def test_version(cmd: list[str]) -> None:
    result = _run(["--version"], cmd)
    assert result.returncode == 0, result.stderr
    assert EBBDB_VERSION in result.stdout


def test_help_lists_the_options() -> None:
    result = _run(["--help"])
    assert result.returncode == 0, result.stderr
    for option in (
        "--port",
        "--bind_ip",
        "--bind_ip_all",
        "--dbpath",
        "--setParameter",
        "--quiet",
        "--config",
        "--ephemeral",
        "--logFormat",
        "--maxConns",
        "--slowms",
        "--profile",
        "--verbose",
    ):
        assert re.search(rf"{re.escape(option)}\b", result.stdout), f"{option} missing from --help"


def test_unknown_set_parameter_exits_with_a_clear_message(tmp_path: Path) -> None:
    dbpath = tmp_path / "never"
    result = _run(["--port", "0", "--dbpath", str(dbpath), "--setParameter", "foo=1"])
    assert result.returncode != 0
    assert "foo" in result.stderr
    assert "setParameter" in result.stderr
    assert result.stdout == ""


# -- a running server ------------------------------------------------------------------------------


def test_startup_line_and_connect(launch: Any, tmp_path: Path) -> None:
    dbpath = str(tmp_path / "data")
    srv = launch("--port", "0", "--dbpath", dbpath)
    line = srv.startup_line()
    assert dbpath in line
    assert EBBDB_VERSION in line
    assert srv.port and srv.port > 0
    with srv.client() as client:
        assert client.admin.command("ping")["ok"] == 1.0
        client.cli.items.insert_one({"_id": 1})
        assert client.cli.items.find_one() == {"_id": 1}
    assert srv.stop() == 0
    assert len(srv.stdout_lines) == 1, (
        f"stdout should hold only the startup line: {srv.stdout_lines}"
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_exits_cleanly_and_data_survives_restart(
    launch: Any, tmp_path: Path, sig: int
) -> None:
    dbpath = str(tmp_path / "data")
    first = launch("--port", "0", "--dbpath", dbpath)
    first.startup_line()
    with first.client() as client:
        client.cli.durable.insert_many([{"_id": i, "v": f"doc{i}"} for i in range(3)])
    port = first.port
    assert first.stop(sig) == 0, first.stderr  # stop() fails if it has not exited in EXIT_TIMEOUT
    assert "shutdown complete" in first.stderr
    _refuses(port)

    second = launch("--port", "0", "--dbpath", dbpath)
    second.startup_line()
    with second.client() as client:
        found = list(client.cli.durable.find().sort("_id", 1))
    assert found == [{"_id": i, "v": f"doc{i}"} for i in range(3)]
    assert second.stop() == 0


def test_second_server_on_same_dbpath_fails_and_first_keeps_serving(
    launch: Any, tmp_path: Path
) -> None:
    dbpath = str(tmp_path / "data")
    first = launch("--port", "0", "--dbpath", dbpath)
    first.startup_line()
    with first.client() as client:
        client.cli.shared.insert_one({"_id": "before"})

        # Exits on its own (_run fails after START_TIMEOUT), with mongod's status for it.
        result = _run(["--port", "0", "--dbpath", dbpath])
        assert result.returncode == EXIT_DBPATH_IN_USE, result.stderr
        assert result.stdout == "", "the refused server must not print a startup line"
        message = result.stderr.lower()
        assert "data directory" in message, result.stderr
        assert any(w in message for w in ("in use", "using it", "lock")), result.stderr

        client.cli.shared.insert_one({"_id": "after"})
        assert sorted(d["_id"] for d in client.cli.shared.find()) == ["after", "before"]
    assert first.stop() == 0


def test_missing_dbpath_is_created(launch: Any, tmp_path: Path) -> None:
    """The data directory is made (its parent must exist: tests/e2e/test_startup_errors.py)."""
    dbpath = tmp_path / "new"
    assert not dbpath.exists()
    srv = launch("--port", "0", "--dbpath", str(dbpath))
    srv.startup_line()
    assert dbpath.is_dir()
    with srv.client() as client:
        client.cli.created.insert_one({"_id": 1})
    assert srv.stop() == 0
    assert any(dbpath.iterdir())


def test_set_parameter_is_visible_through_get_parameter(launch: Any, tmp_path: Path) -> None:
    srv = launch(
        "--port", "0", "--dbpath", str(tmp_path / "data"), "--setParameter", "ttlMonitorSleepSecs=5"
    )
    srv.startup_line()
    with srv.client() as client:
        reply = client.admin.command({"getParameter": 1, "ttlMonitorSleepSecs": 1})
    assert reply["ttlMonitorSleepSecs"] == 5
    assert srv.stop() == 0


def test_syncdelay_and_journal_commit_interval_at_startup(launch: Any, tmp_path: Path) -> None:
    srv = launch(
        "--port",
        "0",
        "--dbpath",
        str(tmp_path / "data"),
        "--syncdelay",
        "30",
        "--setParameter",
        "journalCommitInterval=20",
    )
    srv.startup_line()
    with srv.client() as client:
        reply = client.admin.command(
            {"getParameter": 1, "syncdelay": 1, "journalCommitInterval": 1}
        )
    assert (reply["syncdelay"], reply["journalCommitInterval"]) == (30.0, 20)
    assert srv.stop() == 0


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--syncdelay", "-1"], "syncdelay must be between 0 and 9999999"),
        (["--setParameter", "journalCommitInterval=501"], "must be between 1 and 500"),
    ],
)
def test_bad_durability_options_exit_with_a_clear_message(
    tmp_path: Path, args: list[str], words: str
) -> None:
    result = _run(["--port", "0", "--dbpath", str(tmp_path / "never"), *args])
    assert result.returncode == 2
    assert words in result.stderr


def test_bind_ip(launch: Any, tmp_path: Path) -> None:
    srv = launch(
        "--bind_ip", "127.0.0.1", "--port", "0", "--quiet", "--dbpath", str(tmp_path / "data")
    )
    line = srv.startup_line()
    assert f"127.0.0.1:{srv.port}" in line
    with srv.client() as client:
        assert client.admin.command("ping")["ok"] == 1.0
    assert srv.stop() == 0


def test_version_creates_no_data_directory(tmp_path: Path) -> None:
    """--version must not create the default data directory as a side effect."""
    result = subprocess.run(
        [*SERVER_CMD, "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "ebbdb-data").exists()


# -- --ephemeral -----------------------------------------------------------------------------------

_DBPATH_RE = re.compile(r"dbpath=(\S+)")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_ephemeral_data_is_removed_at_exit(launch: Any, sig: int) -> None:
    srv = launch("--port", "0", "--ephemeral")
    line = srv.startup_line()
    assert "(ephemeral)" in line
    match = _DBPATH_RE.search(line)
    assert match, line
    dbpath = Path(match.group(1))
    assert dbpath.is_dir()
    with srv.client() as client:
        client.eph.items.insert_one({"_id": 1})
        assert client.eph.items.find_one() == {"_id": 1}
        assert client.admin.command("getCmdLineOpts")["parsed"]["storage"]["dbPath"] == str(dbpath)
    assert any(dbpath.iterdir()), "the data went to the temporary directory"
    assert srv.stop(sig) == 0, srv.stderr
    assert not dbpath.exists(), "the temporary data directory outlived the server"


def test_two_ephemeral_servers_do_not_share_data(launch: Any) -> None:
    first, second = launch("--port", "0", "--ephemeral"), launch("--port", "0", "--ephemeral")
    first.startup_line()
    second.startup_line()
    with first.client() as a, second.client() as b:
        a.eph.items.insert_one({"_id": "first"})
        assert b.eph.items.find_one() is None
    assert first.stop() == 0 and second.stop() == 0


def test_ephemeral_with_dbpath_is_refused(tmp_path: Path) -> None:
    dbpath = tmp_path / "never"
    result = _run(["--port", "0", "--ephemeral", "--dbpath", str(dbpath)])
    assert result.returncode == 2
    assert "--ephemeral keeps its data in a temporary directory: drop --dbpath" in result.stderr
    assert result.stdout == ""
    assert not dbpath.exists()


# -- --config --------------------------------------------------------------------------------------


def test_config_file_is_applied_and_flags_override_it(launch: Any, tmp_path: Path) -> None:
    from_file, from_flag = tmp_path / "from-file", tmp_path / "from-flag"
    conf = tmp_path / "mongod.conf"
    conf.write_text(
        "net:\n"
        "  port: 0\n"
        "  bindIp: 127.0.0.1\n"
        f"storage:\n  dbPath: {from_file}\n"
        "systemLog:\n  quiet: true\n"
        "setParameter:\n  ttlMonitorSleepSecs: 9\n  cursorTimeoutMillis: 1234\n"
    )
    srv = launch("--config", str(conf), "--setParameter", "cursorTimeoutMillis=4321")
    srv.startup_line()
    with srv.client() as client:
        reply = client.admin.command(
            {"getParameter": 1, "ttlMonitorSleepSecs": 1, "cursorTimeoutMillis": 1}
        )
        assert (reply["ttlMonitorSleepSecs"], reply["cursorTimeoutMillis"]) == (9, 4321)
        parsed = client.admin.command("getCmdLineOpts")["parsed"]
    assert parsed["config"] == str(conf)
    assert parsed["storage"]["dbPath"] == str(from_file)
    assert parsed["systemLog"] == {"quiet": True}
    assert srv.stop() == 0
    assert from_file.is_dir()

    srv = launch("--config", str(conf), "--dbpath", str(from_flag))
    assert str(from_flag) in srv.startup_line()
    assert srv.stop() == 0


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("net:\n  port: 0\n  bindIP: 127.0.0.1\n", "unrecognized option: net.bindIP"),
        ("net:\n  port: '0'\n", "net.port: expected an integer from 0 to 65535, got '0'"),
    ],
)
def test_bad_config_file_exits_2_naming_the_option(tmp_path: Path, text: str, words: str) -> None:
    conf = tmp_path / "mongod.conf"
    conf.write_text(text + f"storage:\n  dbPath: {tmp_path / 'never'}\n")
    result = _run(["--config", str(conf)])
    assert result.returncode == 2
    assert words in result.stderr
    assert str(conf) in result.stderr
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "never").exists()
