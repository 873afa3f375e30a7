"""What ebbdb needs from the operating system that POSIX and Windows do differently, in one place:
locking the data directory, preallocating disk space, the LMDB map's first size, the signals that
stop the server, a helper process's own session, the machine's memory, and Unix domain sockets
(none on Windows). Each seam takes the POSIX way where the platform has it and a portable way
where it does not; nothing else in ebbdb imports fcntl or msvcrt, uses AF_UNIX or assumes Linux
(tests/test_portability_seams.py holds that). Plain functions, no asyncio: the signal seam is
handed the loop's two methods it calls."""

from __future__ import annotations

import logging
import os
import signal
import socket
import stat
import sys
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("ebbdb.storage")

#: os.open's flag for a file whose bytes are written as given (0 where every file is binary):
#: Windows opens a file in text mode by default and would write "\n" as "\r\n".
O_BINARY: int = getattr(os, "O_BINARY", 0)

# -- locking the data directory --------------------------------------------------------------------

#: Where msvcrt locks its one byte: past anything written to the lock file. Windows locks are
#: mandatory (a locked byte cannot be written, even by a truncation), and the file holds the pid.
_MSVCRT_LOCK_OFFSET = 1 << 20


def lock_method() -> str:
    """How `lock_exclusive` locks here: "flock" (POSIX), "msvcrt" (Windows) or "none"."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        pass
    else:
        return "flock"
    try:
        import msvcrt  # noqa: F401
    except ImportError:
        return "none"
    return "msvcrt"


def lock_exclusive(fd: int) -> bool:
    """Take the exclusive lock of the open file `fd` without waiting: False if another process
    holds it. The operating system lets go of it when the file is closed or the process dies,
    so a killed server leaves no stale lock."""
    method = lock_method()
    try:
        if method == "flock":
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        elif method == "msvcrt":
            import msvcrt

            os.lseek(fd, _MSVCRT_LOCK_OFFSET, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined,unused-ignore]
            os.lseek(fd, 0, os.SEEK_SET)  # the pid is written from the start
        else:
            # No platform Python runs a server on lacks both; say so rather than refuse to start.
            log.warning(
                "no file locking here: a second server on this data directory is not refused"
            )
    except OSError:
        return False
    return True


# -- preallocating disk space ----------------------------------------------------------------------

_ZEROS = bytes(1 << 20)


def preallocate_method() -> str:
    """How `preallocate` allocates here: "posix_fallocate", or "zeros" (macOS, Windows)."""
    return "posix_fallocate" if hasattr(os, "posix_fallocate") else "zeros"


def preallocate(fd: int, offset: int, length: int) -> None:
    """Make sure the disk has given the bytes [offset, offset + length) of the file to it, so a
    full disk shows here, not in a later write. Never changes a byte the file already holds.
    Raises OSError (ENOSPC, EFBIG, EDQUOT, ...) when the disk cannot give them."""
    if hasattr(os, "posix_fallocate"):
        os.posix_fallocate(fd, offset, length)
        return
    # Zeros written past the file's end: the same blocks taken, only slower. Nothing below the
    # end is written (LMDB's pages are there; on Windows the file is as large as the map).
    # A file system that stores runs of zeros as holes (compression) would not take them.
    end = offset + length
    size = os.fstat(fd).st_size
    position = max(size, offset)
    if position >= end:
        return
    try:
        os.lseek(fd, position, os.SEEK_SET)
        while position < end:
            position += os.write(fd, _ZEROS[: min(len(_ZEROS), end - position)])
    except OSError:
        try:  # give back what was taken, as a failed posix_fallocate may not
            os.ftruncate(fd, size)
        except OSError:
            pass
        raise


# -- the LMDB map ----------------------------------------------------------------------------------

#: On Windows LMDB makes the data file as large as its map at once, so a fresh data directory
#: takes the whole first map on disk: start there at 64 MiB (the map doubles as it fills, see
#: storage/engine/environment.py). Elsewhere the file grows with its pages and the map is only
#: address space: start at 1 GiB, which most databases never outgrow.
MAP_SIZED_FILE = sys.platform == "win32"
INITIAL_MAP_SIZE = (64 << 20) if MAP_SIZED_FILE else (1 << 30)

# -- signals ---------------------------------------------------------------------------------------


class SignalLoop(Protocol):
    """The two methods of an event loop the signal seam calls."""

    def add_signal_handler(self, sig: int, callback: Callable[[], None]) -> None: ...

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> Any: ...


def stop_signals() -> tuple[signal.Signals, ...]:
    """The signals that stop the server: SIGINT and SIGTERM, and Windows' Ctrl+Break."""
    names = ("SIGINT", "SIGTERM", "SIGBREAK")
    return tuple(getattr(signal, name) for name in names if hasattr(signal, name))


def on_stop_signals(loop: SignalLoop, stop: Callable[[], None]) -> str:
    """Have `stop` called on the loop's thread when a stop signal arrives; returns how:
    "loop" (the loop's own signal handling, POSIX) or "signal" (a plain handler that hands the
    call to the loop thread-safely: Windows, where the loop has none). Call from the main
    thread, with the loop running."""
    how = "loop"
    for sig in stop_signals():
        try:
            loop.add_signal_handler(sig, stop)
        except (NotImplementedError, RuntimeError):
            how = "signal"

            def handler(signum: int, frame: Any) -> None:
                try:
                    loop.call_soon_threadsafe(stop)
                except RuntimeError:
                    pass  # the loop is closed: the server is stopping already

            signal.signal(sig, handler)
    return how


def ignore_file_size_signal() -> bool:
    """Ignore SIGXFSZ where it exists (POSIX): past a file-size limit (ulimit -f) the kernel would
    kill the process; ignored, the write fails with EFBIG and the storage engine answers
    OutOfDiskSpace. Returns whether there was such a signal."""
    sig = getattr(signal, "SIGXFSZ", None)
    if sig is None:
        return False
    signal.signal(sig, signal.SIG_IGN)
    return True


# -- helper processes ------------------------------------------------------------------------------


def own_session() -> dict[str, Any]:
    """subprocess.Popen's arguments that keep a helper process out of the terminal's Ctrl+C (the
    server's to handle): a session of its own on POSIX, a process group of its own on Windows.
    subprocess starts a fresh interpreter everywhere (no fork of the server)."""
    if sys.platform == "win32":
        import subprocess

        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


# -- memory ----------------------------------------------------------------------------------------


def physical_memory() -> int | None:
    """The machine's memory in bytes, or None where it cannot be read."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        pass  # no sysconf (Windows), or not this name
    if sys.platform == "win32":
        return _windows_physical_memory()
    return None


def _windows_physical_memory() -> int | None:
    import ctypes

    class MemoryStatusEx(ctypes.Structure):
        _fields_ = [  # noqa: RUF012 - ctypes reads it from the class
            ("dwLength", ctypes.c_ulong),
            ("dwMemoryLoad", ctypes.c_ulong),
            ("ullTotalPhys", ctypes.c_ulonglong),
            ("ullAvailPhys", ctypes.c_ulonglong),
            ("ullTotalPageFile", ctypes.c_ulonglong),
            ("ullAvailPageFile", ctypes.c_ulonglong),
            ("ullTotalVirtual", ctypes.c_ulonglong),
            ("ullAvailVirtual", ctypes.c_ulonglong),
            ("ullAvailExtendedVirtual", ctypes.c_ulonglong),
        ]

    status = MemoryStatusEx()
    status.dwLength = ctypes.sizeof(status)
    kernel32 = ctypes.WinDLL("kernel32")  # type: ignore[attr-defined,unused-ignore]
    if not kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):
        return None
    return int(status.ullTotalPhys)


# -- other processes ---------------------------------------------------------------------------


def process_command_line(pid: int) -> list[str]:
    """Process `pid`'s command line, from Linux's /proc (the Docker image's health check reads the
    server's, server/healthcheck.py). Raises OSError where it cannot be read: no such process, or
    a system without /proc."""
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        raw = f.read()
    return [os.fsdecode(part) for part in raw.split(b"\0") if part]


def process_ids() -> list[int]:
    """The ids of this system's processes, in order, from Linux's /proc; OSError without it."""
    return sorted(int(name) for name in os.listdir("/proc") if name.isdigit())


# -- Unix domain sockets ---------------------------------------------------------------------------


def unix_sockets() -> bool:
    """Whether this system gives the server Unix domain sockets to listen on: POSIX does;
    Windows' Python has no AF_UNIX (and mongod has none there either)."""
    return hasattr(socket, "AF_UNIX") and sys.platform != "win32"


def listen_unix(path: str, mode: int, backlog: int) -> tuple[socket.socket, int]:
    """A listening Unix domain socket at `path` with permissions `mode` (chmod after the bind,
    as mongod does), and the inode of its file (see remove_unix_socket). Whatever is at `path`
    is removed first, as mongod does: the socket a killed server left there. Raises OSError
    (no such directory, a path too long for a socket, a directory there, ...)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(path)
        os.chmod(path, mode)
        sock.listen(backlog)
        inode = os.stat(path).st_ino
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, exc.strerror, path) from exc  # the error names the path
    except BaseException:
        sock.close()
        raise
    return sock, inode


def remove_unix_socket(path: str, inode: int) -> bool:
    """Remove the socket file at `path` if it is still the one listen_unix made (`inode`): a
    server started since on the same path has replaced it, and keeps its own. Returns whether
    it was removed; OSError if it cannot be."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if st.st_ino != inode or not stat.S_ISSOCK(st.st_mode):
        return False
    os.unlink(path)
    return True


def facilities() -> dict[str, str]:
    """Which way each seam goes in this process (logged at startup; the portability test reads
    it)."""
    return {
        "lock": lock_method(),
        "preallocate": preallocate_method(),
        "SIGXFSZ": "yes" if hasattr(signal, "SIGXFSZ") else "no",
        "initialMapSize": str(INITIAL_MAP_SIZE),
        "unixSocket": "yes" if unix_sockets() else "no",
    }
