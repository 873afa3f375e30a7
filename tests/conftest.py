"""Shared test setup: every test may rely on the project root being importable, and on ebbdb's own
pytest plugin (tests/e2e build on its fixtures). Installed, the plugin loads by its entry point
under the same name; this line makes a checkout that is not installed load it too.

Servers a test kills (SIGKILL: crash tests) leave their Unix domain socket in /tmp, as a killed
mongod does; at the end of the session the ones this session's servers left are removed."""

from __future__ import annotations

import glob
import os
import socket
import time

import pytest

pytest_plugins = ["ebbdb.server.pytest_plugin"]

_STARTED = pytest.StashKey[float]()


def pytest_sessionstart(session: pytest.Session) -> None:
    session.stash[_STARTED] = time.time()


def pytest_sessionfinish(session: pytest.Session) -> None:
    started = session.stash.get(_STARTED, None)
    if started is not None:
        remove_dead_sockets(started - 1.0)


def remove_dead_sockets(since: float) -> list[str]:
    """Remove /tmp/ebbdb-*.sock files made since `since` that no server listens on (refused
    twice, 0.2 s apart: never a server's socket between its bind and its listen). Returns them."""
    if not hasattr(socket, "AF_UNIX"):
        return []
    candidates = [p for p in glob.glob("/tmp/ebbdb-*.sock") if _made_since(p, since)]
    dead = [p for p in candidates if _refused(p)]
    if dead:
        time.sleep(0.2)
        dead = [p for p in dead if _refused(p)]
    for path in dead:
        try:
            os.unlink(path)
        except OSError:
            pass
    return dead


def _made_since(path: str, since: float) -> bool:
    try:
        return os.lstat(path).st_mtime >= since
    except OSError:
        return False


def _refused(path: str) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            return True
        except OSError:
            return False
    return False
