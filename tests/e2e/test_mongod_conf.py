"""The mongod.conf MongoDB's packages install, fed verbatim to a real `python -m ebbdb` (flags move
its paths and port into the test's directory, as flags win over the file): the Debian file starts
a server, the RPM file's processManagement runs it in the background with a pid file, its time
zone directory is the one time zone names are looked up in, and wiredTiger's options are accepted
with start-up warnings that getLog shows."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from ebbdb.storage.core import portability
from tests.e2e import test_cli
from tests.e2e.test_cli import START_TIMEOUT, _run
from tests.server.test_config import DEBIAN_MONGOD_CONF, RPM_MONGOD_CONF

#: test_cli's: launch(*args) starts a server process, killed at the end of the test if need be.
launch = test_cli.launch


def _client(port: int) -> MongoClient[dict[str, Any]]:
    return MongoClient(
        f"mongodb://127.0.0.1:{port}/?directConnection=true", serverSelectionTimeoutMS=5000
    )


def _port(stdout: str) -> int:
    line = next(x for x in stdout.splitlines() if " listening on 127.0.0.1:" in x)
    return int(line.split("127.0.0.1:", 1)[1].split()[0])


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


#: The system's time zone database, where the packages' mongod.conf says it is (Windows has none).
ZONEINFO = "/usr/share/zoneinfo"


def test_the_debian_file_starts_a_server(launch: Any, tmp_path: Path) -> None:
    conf = tmp_path / "mongod.conf"
    conf.write_text(DEBIAN_MONGOD_CONF)
    log = tmp_path / "mongod.log"
    args = ["--config", str(conf), "--port", "0", "--dbpath", str(tmp_path / "d")]
    args += ["--logpath", str(log)]
    if not os.path.isdir(ZONEINFO):  # the file's time zone database is not on this system
        result = _run(args)
        assert result.returncode == 2
        assert f"FileNotOpen: Failed to open the time zone database directory {ZONEINFO}" in (
            result.stderr
        )
        return
    srv = launch(*args)
    srv.startup_line()
    with srv.client() as client:
        parsed = client.admin.command("getCmdLineOpts")["parsed"]
        assert parsed["processManagement"] == {"timeZoneInfo": ZONEINFO}
        assert parsed["systemLog"] == {"destination": "file", "logAppend": True, "path": str(log)}
        assert client.admin.command("getLog", "startupWarnings")["log"] == []
    assert srv.stop() == 0


def test_the_rpm_file_runs_the_server_in_the_background(tmp_path: Path) -> None:
    conf, pid_file = tmp_path / "mongod.conf", tmp_path / "mongod.pid"
    conf.write_text(RPM_MONGOD_CONF)
    args = ["--config", str(conf), "--port", "0", "--dbpath", str(tmp_path / "d")]
    args += ["--logpath", str(tmp_path / "mongod.log"), "--pidfilepath", str(pid_file)]
    result = _run(args)
    if not portability.can_fork():  # Windows: refused, as mongod there has no --fork
        assert (result.returncode, result.stdout) == (2, ""), result.stderr
        assert "--fork: this system cannot fork" in result.stderr
        return
    # The foreground process returns once the server listens, as mongod's does.
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("forked process: ")
    assert lines[-1] == "child process started successfully, parent exiting"
    pid = int(lines[0].split(": ")[1])
    try:
        assert pid_file.read_text() == f"{pid}\n"
        with _client(_port(result.stdout)) as client:
            client.db.c.insert_one({"_id": 1})
            assert client.admin.command("serverStatus")["pid"] == pid
            warnings = client.admin.command("getLog", "startupWarnings")["log"]
            assert len(warnings) == 1 and "storage.journal.enabled: true is ignored" in warnings[0]
    finally:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + START_TIMEOUT
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert _gone(pid)
    assert not pid_file.exists(), "a clean exit removes the pid file"


def test_a_background_server_that_cannot_start_says_so_in_the_foreground(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    conf = tmp_path / "mongod.conf"
    conf.write_text(RPM_MONGOD_CONF)
    args = ["--config", str(conf), "--port", "0", "--dbpath", str(tmp_path / "f")]
    args += ["--logpath", str(tmp_path / "log"), "--pidfilepath", str(tmp_path / "pid")]
    result = _run(args)
    assert result.returncode == (100 if portability.can_fork() else 2), result.stderr
    assert "ebbdb: DBPathInUse: Unable to create/open the lock file" in result.stderr
    assert not (tmp_path / "pid").exists()


@pytest.mark.skipif(
    not os.path.isdir(ZONEINFO), reason="no time zone database on this system to copy a zone from"
)
def test_the_time_zone_directory_is_where_zones_are_found(launch: Any, tmp_path: Path) -> None:
    """A zone only that directory has (a copy of Paris named Test/Paris) is known by name."""
    source = Path(ZONEINFO) / "Europe" / "Paris"
    zones = tmp_path / "zones"
    (zones / "Test").mkdir(parents=True)
    shutil.copy(source, zones / "Test" / "Paris")
    srv = launch("--port", "0", "--dbpath", str(tmp_path / "d"), "--timeZoneInfo", str(zones))
    srv.startup_line()
    with srv.client() as client:
        client.db.c.insert_one({"_id": 1})
        pipeline = [
            {
                "$project": {
                    "_id": 0,
                    "h": {
                        "$hour": {
                            "date": {"$toDate": "2024-01-15T12:00:00Z"},
                            "timezone": "Test/Paris",
                        }
                    },
                }
            }
        ]
        assert list(client.db.c.aggregate(pipeline)) == [{"h": 13}]
    assert srv.stop() == 0


def test_a_missing_time_zone_directory_stops_the_start(tmp_path: Path) -> None:
    result = _run(
        ["--port", "0", "--dbpath", str(tmp_path / "d"), "--timeZoneInfo", str(tmp_path / "nope")]
    )
    assert result.returncode == 2
    assert result.stderr == (
        f"ebbdb: FileNotOpen: Failed to open the time zone database directory "
        f"{tmp_path / 'nope'} (--timeZoneInfo, processManagement.timeZoneInfo): not a directory\n"
    )
