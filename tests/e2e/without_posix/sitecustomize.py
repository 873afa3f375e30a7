"""Put first on PYTHONPATH, this makes a Linux Python look like one without the POSIX facilities
ebbdb can do without (storage/core/portability.py): `import fcntl` fails, os.posix_fallocate, os.fork,
signal.SIGXFSZ and socket.AF_UNIX are gone, uvloop is not there, and the event loop has no signal handling
(add_signal_handler raises NotImplementedError, as on Windows). File locking is then Windows'
msvcrt.locking, played here by POSIX record locks taken through the fcntl module held before it
was hidden. Every process started with it (the server, its regex helper) checks the hiding took."""

from __future__ import annotations

import asyncio.unix_events
import fcntl as _fcntl  # kept for the msvcrt stand-in only, then hidden
import importlib.abc
import os
import signal
import socket
import subprocess  # noqa: F401 - before the msvcrt stand-in: it reads "msvcrt there" as Windows
import sys
import types

_HIDDEN = {"fcntl", "uvloop"}


class _Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: object = None, target: object = None) -> None:
        if name in _HIDDEN or name.startswith("uvloop."):
            raise ImportError(f"{name} is hidden (tests/e2e/without_posix)")
        return None


for _name in list(sys.modules):
    if _name in _HIDDEN:
        del sys.modules[_name]
sys.meta_path.insert(0, _Hide())

# socket.AF_UNIX too: Windows' Python has none. socket.socketpair (the event loop's self-pipe)
# names AF_UNIX as its default family; Windows' makes a pair of its own, played here by the C
# function given the family it would have read.
_socketpair = socket.socketpair
_AF_UNIX = socket.AF_UNIX


def _pair(family: int | None = None, type: int = socket.SOCK_STREAM, proto: int = 0) -> object:
    return _socketpair(_AF_UNIX if family is None else family, type, proto)


socket.socketpair = _pair  # type: ignore[assignment]
for _owner, _attr in (
    (os, "posix_fallocate"),
    (os, "fork"),
    (os, "forkpty"),
    (signal, "SIGXFSZ"),
    (socket, "AF_UNIX"),
):
    if hasattr(_owner, _attr):
        delattr(_owner, _attr)


def _locking(fd: int, mode: int, nbytes: int) -> None:
    """msvcrt.locking: lock (or unlock) `nbytes` from the file's current position; LK_NBLCK
    fails at once with OSError when another process holds them."""
    start = os.lseek(fd, 0, os.SEEK_CUR)
    if mode == msvcrt.LK_UNLCK:
        _fcntl.lockf(fd, _fcntl.LOCK_UN, nbytes, start)
        return
    try:
        _fcntl.lockf(fd, _fcntl.LOCK_EX | _fcntl.LOCK_NB, nbytes, start)
    except OSError:
        raise PermissionError(13, "Permission denied") from None


msvcrt = types.ModuleType("msvcrt", "A stand-in for Windows' msvcrt: locking() only.")
msvcrt.LK_UNLCK = 0  # type: ignore[attr-defined]
msvcrt.LK_LOCK = 1  # type: ignore[attr-defined]
msvcrt.LK_NBLCK = 2  # type: ignore[attr-defined]
msvcrt.locking = _locking  # type: ignore[attr-defined]
sys.modules["msvcrt"] = msvcrt


def _no_signal_handling(self: object, sig: int, callback: object, *args: object) -> None:
    raise NotImplementedError


asyncio.unix_events._UnixSelectorEventLoop.add_signal_handler = _no_signal_handling  # type: ignore[method-assign,assignment]

# The hiding took (a later import of any of these would find the real thing otherwise).
try:
    import fcntl  # noqa: F401
except ImportError:
    pass
else:
    raise AssertionError("fcntl is still importable")
assert not hasattr(os, "posix_fallocate") and not hasattr(os, "fork")
assert not hasattr(signal, "SIGXFSZ")
assert not hasattr(socket, "AF_UNIX")
os.environ["EBBDB_TEST_POSIX_HIDDEN"] = "1"
