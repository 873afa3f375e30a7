"""The real server, as `python -m ebbdb`, on its POSIX facilities and without them: with
tests/e2e/without_posix/sitecustomize.py first on PYTHONPATH, `import fcntl` fails, os.posix_fallocate,
os.fork and SIGXFSZ are gone and the event loop has no signal handling (as on Windows), and the
server must still serve, expire, lock its data directory, restart and stop on SIGTERM, taking the
portable way of each seam in storage/core/portability.py. The same scenario runs on the POSIX ways."""

from __future__ import annotations

import ast
import datetime
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_cli import ROOT, SERVER_CMD, START_TIMEOUT, ServerProcess
from tests.waiting import wait_until

WITHOUT_POSIX = Path(__file__).resolve().parent / "without_posix"
#: What each seam must take (the server logs it at -v: server/cli.py).
EXPECTED = {
    "posix": {
        "lock": "flock",
        "preallocate": "posix_fallocate",
        "SIGXFSZ": "yes",
        "signals": "loop",
        "unixSocket": "yes",
    },
    "hidden": {
        "lock": "msvcrt",
        "preallocate": "zeros",
        "SIGXFSZ": "no",
        "signals": "signal",
        "unixSocket": "no",
    },
}
_FACILITIES_RE = re.compile(r"platform facilities: (\{.*?\})")


def server_env(mode: str) -> dict[str, str]:
    """The environment of a server on its POSIX ways ("posix") or without them ("hidden")."""
    env = dict(os.environ)
    env.pop("EBBDB_TEST_POSIX_HIDDEN", None)
    if mode == "hidden":
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(WITHOUT_POSIX), env.get("PYTHONPATH", "")) if p
        )
    return env


def _start(mode: str, dbpath: Path, log_dir: Path) -> ServerProcess:
    args = ["--port", "0", "--dbpath", str(dbpath), "-v"]
    srv = ServerProcess(
        [*args, "--setParameter", "enableTestCommands=1"], log_dir, env=server_env(mode)
    )
    srv.startup_line()
    return srv


def _facilities(srv: ServerProcess) -> dict[str, str]:
    """The seams' ways the server logged (the log is written by a thread: wait for it)."""
    match = wait_until(
        lambda: _FACILITIES_RE.search(srv.stderr),
        "the facilities line",
        detail=lambda: f"stderr:\n{srv.stderr}",
    )
    found: dict[str, str] = ast.literal_eval(match.group(1))
    return found


@pytest.fixture(params=["posix", "hidden"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_server_works_with_and_without_its_posix_facilities(mode: str, tmp_path: Path) -> None:
    dbpath = tmp_path / "data"
    procs: list[ServerProcess] = []
    try:
        first = _start(mode, dbpath, tmp_path)
        procs.append(first)
        facilities = _facilities(first)
        assert {k: facilities[k] for k in EXPECTED[mode]} == EXPECTED[mode], facilities
        # A Unix domain socket beside the port on POSIX; none without it, TCP serves alone.
        sock = Path(f"/tmp/ebbdb-{first.port}.sock")
        assert sock.exists() == (mode == "posix")
        assert (f" and {sock} " in first.stdout_lines[0]) == (mode == "posix")
        with first.client() as client:
            assert client.admin.command("ping")["ok"] == 1.0
            _crud(client.port.items)
            _ttl_expires(client)
            # Some megabytes, so the data file's headroom is extended more than once
            # (posix_fallocate, or zeros written past its end).
            big = client.port.big
            big.insert_many([{"_id": i, "pad": "x" * 10_000} for i in range(600)])
            assert big.count_documents({}) == 600
            # A runaway pattern goes to the regex helper process (subprocess, never os.fork).
            client.port.regex.insert_many([{"_id": 1, "s": "a" * 40 + "b"}, {"_id": 2, "s": "aa"}])
            found = list(client.port.regex.find({"s": {"$regex": "^(a+)+$"}}))
            assert found == [{"_id": 2, "s": "aa"}]

            # A second server on the same data directory is refused as ever.
            second = subprocess.run(
                [*SERVER_CMD, "--port", "0", "--dbpath", str(dbpath)],
                cwd=ROOT,
                env=server_env(mode),
                capture_output=True,
                text=True,
                timeout=START_TIMEOUT,
                stdin=subprocess.DEVNULL,
            )
            assert second.returncode == 100, second.stderr
            assert second.stdout == ""
            assert second.stderr.strip() == (
                f"ebbdb: DBPathInUse: Unable to lock the data directory {dbpath}: "
                "another ebbdb process is using it"
            )
            assert client.admin.command("ping")["ok"] == 1.0  # the first is still serving
        assert first.stop(signal.SIGTERM) == 0, first.stderr
        assert not sock.exists()  # removed at exit
        assert "regex helper" not in first.stderr, first.stderr
        size = (dbpath / "data.mdb").stat().st_size
        assert size >= 6_000_000, size  # the pages written, and the headroom allocated

        again = _start(mode, dbpath, tmp_path)
        procs.append(again)
        with again.client() as client:
            assert list(client.port.items.find({}, {"_id": 1}).sort("_id", 1)) == [
                {"_id": 2},
                {"_id": 3},
            ]
            assert client.port.items.find_one({"_id": 2}) == {"_id": 2, "v": "two", "n": 1}
            assert client.port.expiring.count_documents({}) == 1
            assert client.port.big.count_documents({}) == 600
        assert again.stop(signal.SIGINT) == 0, again.stderr
    finally:
        for p in procs:
            p.kill()


def _crud(items: Any) -> None:
    items.insert_many([{"_id": i, "v": f"v{i}"} for i in range(1, 4)])
    assert (
        items.update_one({"_id": 2}, {"$set": {"v": "two"}, "$inc": {"n": 1}}).modified_count == 1
    )
    assert items.delete_one({"_id": 1}).deleted_count == 1
    assert items.find_one({"_id": 2}) == {"_id": 2, "v": "two", "n": 1}
    assert items.count_documents({}) == 2


def _ttl_expires(client: Any) -> None:
    coll = client.port.expiring
    coll.create_index("t", expireAfterSeconds=60)
    now: datetime.datetime = client.admin.command("ttlClock")["now"]
    coll.insert_many([{"_id": "old", "t": now}, {"_id": "keeps", "k": 1}])
    client.admin.command("ttlClock", advanceSeconds=120)
    reply = client.admin.command("ttlMonitorPass")
    assert reply["deleted"] == 1, reply
    client.admin.command("ttlClock", reset=True)
    assert list(coll.find()) == [{"_id": "keeps", "k": 1}]


def test_the_hiding_takes() -> None:
    """The stand-in really hides: a Python with it has none of the facilities, and says so."""
    probe = (
        "import os, signal, asyncio\n"
        "try:\n    import fcntl\nexcept ImportError:\n    print('no fcntl')\n"
        "print(hasattr(os, 'posix_fallocate'), hasattr(os, 'fork'), hasattr(signal, 'SIGXFSZ'))\n"
        "loop = asyncio.new_event_loop()\n"
        "try:\n    loop.add_signal_handler(signal.SIGTERM, print)\n"
        "except NotImplementedError:\n    print('no signal handling')\n"
        "print(os.environ['EBBDB_TEST_POSIX_HIDDEN'])\n"
        "import socket\nprint(hasattr(socket, 'AF_UNIX'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env=server_env("hidden"),
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n") == [
        "no fcntl",
        "False False False",
        "no signal handling",
        "1",
        "False",
        "",
    ]
