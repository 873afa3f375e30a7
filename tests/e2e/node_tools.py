"""Running the JavaScript clients (mongosh, the Node.js `mongodb` driver) against the test server.

Both are npm packages pinned in `.ci/node/package.json` and its lockfile. `.ci/run` installs them
with `npm ci`; a developer who runs pytest without it gets the same install on first use (into the
same folder, once, under a lock), and a clear failure if node or npm is missing. Never a skip:
these tests must not pass by not running.

mongosh runs with a throwaway HOME and a global config that turns telemetry and the update check
off, so it neither writes into the user's ~/.mongodb nor tries to reach the network."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import shutil
import struct
import subprocess
import termios
import time
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / ".ci" / "node"
MODULES = NODE_DIR / "node_modules"
MONGOSH = MODULES / ".bin" / "mongosh"
JS_DIR = Path(__file__).resolve().parent / "js"

_INSTALL_HINT = (
    "mongosh and the Node.js driver are pinned in .ci/node/package.json; `bash .ci/run` installs "
    "them, or run `npm ci --prefix .ci/node --ignore-scripts` (needs node >= 20 and npm)."
)


def _pinned_versions_installed() -> bool:
    wanted = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]
    for name, version in wanted.items():
        installed = MODULES / name / "package.json"
        if not installed.is_file() or json.loads(installed.read_text())["version"] != version:
            return False
    return True


def node_tools() -> str:
    """The path of `node`, once the pinned packages are in .ci/node/node_modules (installing them
    on first use); fails the test with the way to install them when that cannot be done."""
    node = shutil.which("node")
    if node is None:
        pytest.fail(f"node is not on PATH. {_INSTALL_HINT}", pytrace=False)
    if _pinned_versions_installed():
        return node
    npm = shutil.which("npm")
    if npm is None:
        pytest.fail(f"npm is not on PATH. {_INSTALL_HINT}", pytrace=False)
    # One install at a time (pytest-xdist workers, two checkouts' runs): the others wait, then see it.
    with open(NODE_DIR / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not _pinned_versions_installed():
            done = subprocess.run(
                [npm, "ci", "--prefix", str(NODE_DIR), "--ignore-scripts", "--no-audit"]
                + ["--no-fund", "--prefer-offline"],
                capture_output=True,
                text=True,
                timeout=900,
            )
            if done.returncode != 0 or not _pinned_versions_installed():
                pytest.fail(
                    f"installing the pinned JavaScript clients failed:\n{done.stderr}\n{_INSTALL_HINT}",
                    pytrace=False,
                )
    return node


def mongosh_env(home: Path) -> dict[str, str]:
    """The environment mongosh runs in: its own HOME, no telemetry, no update check, no colours."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "mongosh-global.conf"
    config.write_text(
        json.dumps(
            {
                "forceDisableTelemetry": True,
                "updateURL": "",
                "telemetryEndpoint": "",
                "disableGreetingMessage": True,
            }
        )
    )
    return {
        **os.environ,
        "HOME": str(home),
        "MONGOSH_GLOBAL_CONFIG_FILE_FOR_TESTING": str(config),
        "MONGOSH_FORCE_DISABLE_TELEMETRY_FOR_TESTING": "1",
        "NO_COLOR": "1",
    }


def run_mongosh(uri: str, script: str, home: Path, timeout: float = 60) -> list[str]:
    """Run `mongosh URI --quiet --file script.js` and return the lines it printed; a non-zero exit
    fails the test with mongosh's output."""
    node_tools()
    path = home / "script.js"
    home.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    done = subprocess.run(
        [str(MONGOSH), uri, "--quiet", "--file", str(path)],
        capture_output=True,
        text=True,
        env=mongosh_env(home),
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )
    assert done.returncode == 0, f"mongosh exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout.splitlines()


def run_js(script: str, *args: str, timeout: float = 60) -> Any:
    """Run `node tests/e2e/js/SCRIPT ARGS...` and return the JSON (relaxed Extended JSON) it printed
    as its last line; a non-zero exit fails the test with node's output."""
    node = node_tools()
    done = subprocess.run(
        [node, str(JS_DIR / script), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "NODE_PATH": str(MODULES)},
        stdin=subprocess.DEVNULL,
        timeout=timeout,
    )
    assert done.returncode == 0, f"node exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout.splitlines()[-1])


def run_node(uri: str, scenario: str, timeout: float = 60) -> Any:
    """Run one scenario of tests/e2e/js/node_driver.js against `uri` (see run_js)."""
    return run_js("node_driver.js", uri, scenario, timeout=timeout)


def mongosh_bytes(n: int) -> str:
    """A size as mongosh's `show dbs` prints it: numeral's '0 ib' format up to 1000 bytes, '0.00 ib'
    above, in the largest binary unit not above the size, rounding half up."""
    power = 0
    while power < 4 and n >= 1024 ** (power + 1):
        power += 1
    unit = ("B", "KiB", "MiB", "GiB", "TiB")[power]
    value = Decimal(n) / Decimal(1024**power)  # exact: a power of two divides
    places = Decimal(1) if n <= 1000 else Decimal("0.01")
    return f"{value.quantize(places, ROUND_HALF_UP)} {unit}"


def assert_db_stats(stats: dict[str, Any], data_size: int) -> None:
    """dbStats' reply (MongoDB 7.0's fields) for database `shelf` holding two documents of
    `data_size` bytes in all, in `items` (indexes _id_ and name_1) and an empty collection."""
    assert sorted(stats) == sorted(
        ["db", "collections", "views", "objects", "avgObjSize", "dataSize", "storageSize"]
        + ["indexes", "indexSize", "totalSize", "scaleFactor", "fsUsedSize", "fsTotalSize", "ok"]
    )
    assert {k: stats[k] for k in ("db", "collections", "views", "objects", "indexes")} == {
        "db": "shelf",
        "collections": 2,
        "views": 0,
        "objects": 2,
        "indexes": 3,
    }
    assert stats["dataSize"] == data_size
    assert stats["avgObjSize"] == data_size / 2
    assert stats["totalSize"] == stats["storageSize"] + stats["indexSize"]
    assert stats["storageSize"] > 0 and stats["indexSize"] > 0
    assert 0 < stats["fsUsedSize"] <= stats["fsTotalSize"]
    assert (stats["scaleFactor"], stats["ok"]) == (1, 1)


_ESCAPES = re.compile(r"\x1b\][^\x07]*\x07|\x1b\[[0-9;?]*[ -/]*[@-~]|\r")


class Terminal:
    """A program on a pseudo-terminal: `expect` reads until a pattern shows in the text (escape
    sequences and carriage returns removed), `send` types a line."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.fd, tty = os.openpty()
        # 50 rows of 200 columns, so that no command or answer wraps.
        fcntl.ioctl(tty, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.proc = subprocess.Popen(
            argv, stdin=tty, stdout=tty, stderr=tty, env=env, start_new_session=True
        )
        os.close(tty)
        self.raw = b""
        self.seen = 0  # how much of the text earlier `expect` calls consumed

    @property
    def text(self) -> str:
        return _ESCAPES.sub("", self.raw.decode(errors="replace"))

    def expect(self, pattern: str, timeout: float = 30) -> str:
        """Wait for `pattern` (a regex) after what was already consumed; return the text before it."""
        deadline = time.monotonic() + timeout
        regex = re.compile(pattern)
        while True:
            found = regex.search(self.text, self.seen)
            if found:
                before = self.text[self.seen : found.start()]
                self.seen = found.end()
                return before
            left = deadline - time.monotonic()
            if left <= 0 or not self._read(left):
                raise AssertionError(f"no {pattern!r} in the terminal; it shows:\n{self.text}")

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return False
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: the program closed the terminal
            return False
        self.raw += data
        return bool(data)

    def send(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\r")

    def close(self) -> int:
        """Wait for the program to end (killing it after 10 s) and return its exit status."""
        try:
            while self._read(0.1):
                pass
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()
        finally:
            os.close(self.fd)
