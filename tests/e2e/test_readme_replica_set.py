"""README's "Transactions and change streams" examples, run as printed there against a one-member
replica set: the pymongo script, the Node.js script and the mongosh script (each block follows a
`<!-- README example: NAME` comment), with only the connection string's address changed to the test
server's. What each prints is compared exactly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from ebbdb.server.embedded import ServerThread
from tests.e2e.node_tools import MODULES, node_tools, run_mongosh

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
README_URI = "mongodb://127.0.0.1:27017/?replicaSet=rs0"
RUN_TIMEOUT = 60

#: The shared `replset` fixture starts this module's set without the test commands, as a user
#: starts it (`python -m ebbdb --replSet rs0`).
REPLSET_PARAMETERS: dict[str, Any] = {}


def example(name: str) -> str:
    """The code block that follows README's `<!-- README example: name` comment."""
    text = README.read_text(encoding="utf-8")
    found = re.search(
        rf"<!-- README example: {re.escape(name)}\b[^\n]*-->\n```\w*\n(.*?)\n```", text, re.S
    )
    assert found, f"README has no example named {name!r}"
    code = found.group(1)
    if name in ("pymongo", "node"):
        assert README_URI in code, f"the {name} example names no {README_URI}"
    return code


@pytest.fixture
def uri(replset: ServerThread) -> Iterator[str]:
    yield replset.uri
    with MongoClient(replset.uri) as client:
        client.drop_database("bank")


def test_the_pymongo_example(uri: str, tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(example("pymongo").replace(README_URI, uri))
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=RUN_TIMEOUT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[{'_id': 'alice', 'balance': 70}, {'_id': 'bob', 'balance': 30}]",
        "update {'_id': 'bob'}",
    ]


def test_the_node_example(uri: str, tmp_path: Path) -> None:
    node = node_tools()
    script = tmp_path / "example.js"
    script.write_text(example("node").replace(README_URI, uri))
    done = subprocess.run(
        [node, str(script)],
        capture_output=True,
        text=True,
        env={**os.environ, "NODE_PATH": str(MODULES)},
        stdin=subprocess.DEVNULL,
        timeout=RUN_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[ { _id: 'alice', balance: 70 }, { _id: 'bob', balance: 30 } ]",
        "update { _id: 'bob' }",
    ]


def test_the_mongosh_example(uri: str, tmp_path: Path) -> None:
    lines = run_mongosh(uri, example("mongosh"), tmp_path)
    assert lines == [
        "[",
        "  {",
        "    _id: 'alice',",
        "    balance: 70",
        "  },",
        "  {",
        "    _id: 'bob',",
        "    balance: 30",
        "  }",
        "]",
        'update {"_id":"bob"}',
    ]


def test_the_pytest_plugin_example(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_app=example("plugin"))
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), path])))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "ebbdb.server.pytest_plugin", timeout=RUN_TIMEOUT
    )
    result.assert_outcomes(passed=1)
