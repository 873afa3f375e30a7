"""storage/core/portability.py, each seam on its POSIX way and its portable one (the portable way is
forced by hiding the POSIX facility, as tests/e2e/test_portability.py does for the whole server)."""

from __future__ import annotations

import errno
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ebbdb.storage.core import portability
from ebbdb.storage.engine.environment import DataDirLocked, Environment


@pytest.fixture
def no_fallocate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(os, "posix_fallocate", raising=False)


def _open(path: Path, data: bytes = b"") -> int:
    path.write_bytes(data)
    return os.open(path, os.O_RDWR | portability.O_BINARY)


@pytest.mark.parametrize("hidden", [False, True], ids=["posix_fallocate", "zeros"])
def test_preallocate_keeps_what_the_file_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hidden: bool
) -> None:
    if hidden:
        monkeypatch.delattr(os, "posix_fallocate", raising=False)
    assert portability.preallocate_method() == ("zeros" if hidden else "posix_fallocate")
    path = tmp_path / "f"
    fd = _open(path, b"pages")
    try:
        portability.preallocate(fd, 3, 3_000_000)
        assert path.stat().st_size == 3_000_003
        portability.preallocate(fd, 0, 100)  # inside the file: nothing to do
        portability.preallocate(fd, 3_000_000, 10)  # across its end
    finally:
        os.close(fd)
    data = path.read_bytes()
    assert data[:5] == b"pages"
    assert len(data) == 3_000_010
    assert data[5:] == bytes(len(data) - 5)
    assert os.stat(path).st_blocks * 512 >= 3_000_000  # really allocated, not a hole


_FILE_LIMIT_CHILD = """
import errno, os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
del os.posix_fallocate
from ebbdb.storage.core import portability
path = sys.argv[1]
fd = os.open(path, os.O_RDWR | os.O_CREAT)
os.write(fd, b"x" * 1000)
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))
try:
    portability.preallocate(fd, 1000, 4 << 20)
except OSError as exc:
    print(errno.errorcode[exc.errno], os.fstat(fd).st_size)
"""


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs RLIMIT_FSIZE (POSIX)")
def test_zeros_find_the_limit_and_give_back_what_they_took(tmp_path: Path) -> None:
    """A file that cannot grow is found by the zeros as by posix_fallocate (EFBIG here, ENOSPC
    on a full disk), and the file is left as it was."""
    result = subprocess.run(
        [sys.executable, "-c", _FILE_LIMIT_CHILD, str(tmp_path / "f")],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [errno.errorcode[errno.EFBIG], "1000"]


def test_lock_is_exclusive_across_open_files(tmp_path: Path) -> None:
    assert portability.lock_method() == ("msvcrt" if sys.platform == "win32" else "flock")
    path = tmp_path / "lock"
    first, second = _open(path), _open(path)
    try:
        assert portability.lock_exclusive(first)
        assert not portability.lock_exclusive(second)
    finally:
        os.close(first)
    assert portability.lock_exclusive(second)  # let go when its holder closed it
    os.close(second)


def test_a_platform_without_locks_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(portability, "lock_method", lambda: "none")
    fd = _open(tmp_path / "lock")
    try:
        with caplog.at_level(logging.WARNING, "ebbdb.storage"):
            assert portability.lock_exclusive(fd)
    finally:
        os.close(fd)
    assert "no file locking here" in caplog.text


def test_a_locked_data_directory_is_refused(tmp_path: Path) -> None:
    env = Environment.open(str(tmp_path), map_size=1 << 20)
    try:
        with pytest.raises(DataDirLocked, match="another ebbdb process is using it"):
            Environment.open(str(tmp_path), map_size=1 << 20)
    finally:
        env.close()


def test_the_first_map_is_small_where_the_file_is_as_large_as_the_map() -> None:
    if sys.platform == "win32":
        assert portability.MAP_SIZED_FILE and portability.INITIAL_MAP_SIZE == 64 << 20
    else:
        assert not portability.MAP_SIZED_FILE and portability.INITIAL_MAP_SIZE == 1 << 30


class _Loop:
    def __init__(self, has_signals: bool) -> None:
        self.has_signals = has_signals
        self.added: list[int] = []
        self.soon: list[Callable[[], None]] = []

    def add_signal_handler(self, sig: int, callback: Callable[[], None]) -> None:
        if not self.has_signals:
            raise NotImplementedError
        self.added.append(sig)

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> Any:
        self.soon.append(callback)


@pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(), reason="signals: main thread"
)
def test_stop_signals_without_the_loops_handling() -> None:
    saved = {sig: signal.getsignal(sig) for sig in portability.stop_signals()}
    loop = _Loop(has_signals=False)
    stopped: list[bool] = []
    try:
        assert portability.on_stop_signals(loop, lambda: stopped.append(True)) == "signal"
        signal.raise_signal(signal.SIGTERM)
        assert len(loop.soon) == 1  # handed over, not run in the handler
        loop.soon[0]()
        assert stopped == [True]
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_stop_signals_with_the_loops_handling() -> None:
    loop = _Loop(has_signals=True)
    assert portability.on_stop_signals(loop, lambda: None) == "loop"
    assert set(loop.added) >= {signal.SIGINT, signal.SIGTERM}


def test_file_size_signal_only_where_it_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(signal, "SIGXFSZ", raising=False)
    assert portability.ignore_file_size_signal() is False


def test_physical_memory_and_facilities() -> None:
    memory = portability.physical_memory()
    assert memory is None or memory > 1 << 20
    if sys.platform.startswith("linux"):
        assert memory is not None
    assert set(portability.facilities()) == {
        "lock",
        "preallocate",
        "SIGXFSZ",
        "initialMapSize",
        "unixSocket",
    }
    assert portability.facilities()["unixSocket"] == ("yes" if portability.unix_sockets() else "no")
    assert "start_new_session" in portability.own_session() or sys.platform == "win32"
