"""What ebbdb needs from the operating system that POSIX and Windows do differently, in one place:
locking the data directory, preallocating disk space, the LMDB map's first size, the signals that
stop the server, the shutdown watchdog's backstop, a helper process's own session, the machine's
memory, and Unix domain sockets (none on Windows). Each seam takes the POSIX way where the platform has it and a portable way
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


def on_stop_signals(
    loop: SignalLoop, stop: Callable[[], None], at_once: Callable[[], None] | None = None
) -> str:
    """Have `stop` called on the loop's thread when a stop signal arrives, and `at_once` (if
    given) in the signal handler itself, on the main thread, even while the loop is stuck in a
    long call (Python runs a signal's handler between two bytecodes of whatever the main thread
    runs); `at_once` must not block. Returns how `stop` is called: "loop" (the loop's own signal
    handling, POSIX) or "signal" (a plain handler that hands the call to the loop
    thread-safely: Windows, where the loop has none). Call from the main thread, with the loop
    running."""
    how = "loop"

    def first(signum: int, frame: Any) -> None:
        if at_once is not None:
            try:
                at_once()
            except Exception:  # a signal handler that raised would raise in whatever runs
                pass

    for sig in stop_signals():
        try:
            loop.add_signal_handler(sig, stop)
        except (NotImplementedError, RuntimeError):
            how = "signal"

            def handler(signum: int, frame: Any) -> None:
                first(signum, frame)
                try:
                    loop.call_soon_threadsafe(stop)
                except RuntimeError:
                    pass  # the loop is closed: the server is stopping already

            signal.signal(sig, handler)
        else:
            if at_once is not None:
                # The loop learns of the signal from the wakeup fd it set, not from the Python
                # handler (its own does nothing): this one takes its place. signal.signal drops
                # SA_RESTART, which the loop had set.
                signal.signal(sig, first)
                if hasattr(signal, "siginterrupt"):
                    signal.siginterrupt(sig, False)
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


# -- the shutdown watchdog's backstop ----------------------------------------------------------------


def backstop_method() -> str:
    """How `end_process_later` ends the process here: "alarm" (POSIX: SIGALRM) or "faulthandler"
    (Windows: faulthandler's watchdog thread)."""
    return (
        "alarm" if hasattr(signal, "SIGALRM") and hasattr(signal, "setitimer") else "faulthandler"
    )


def end_process_later(seconds: float) -> str:
    """Have the process ended `seconds` from now, however stuck it is: no Python code has to run
    for it, so neither a loop that never yields nor a C call holding the interpreter can hold it
    up (the shutdown watchdog's backstop, server/shutdown.py). POSIX: SIGALRM with its default
    action, the kernel ends the process (status -SIGALRM: 142 in a shell). Windows:
    faulthandler's watchdog thread, in C, writes every thread's stack to stderr and exits with
    status 1. A later call replaces the earlier one; `cancel_end_process_later` cancels it.
    Returns how, or "none" where neither can be set up (no stderr for faulthandler)."""
    seconds = max(seconds, 0.001)
    if backstop_method() == "alarm":
        try:
            signal.signal(signal.SIGALRM, signal.SIG_DFL)  # a Python handler would need the GIL
        except ValueError:
            pass  # not the main thread: only the handler in place can be read
        if signal.getsignal(signal.SIGALRM) == signal.SIG_DFL:
            signal.setitimer(signal.ITIMER_REAL, seconds)
            return "alarm"
    import faulthandler

    try:
        faulthandler.dump_traceback_later(seconds, exit=True)
    except (AttributeError, ValueError, RuntimeError, OSError):
        return "none"  # no stderr with a file descriptor (pythonw)
    return "faulthandler"


def cancel_end_process_later() -> None:
    """Cancel what `end_process_later` set up (nothing happens where it set up nothing)."""
    if backstop_method() == "alarm":
        signal.setitimer(signal.ITIMER_REAL, 0)
    import faulthandler

    faulthandler.cancel_dump_traceback_later()


# -- helper processes ------------------------------------------------------------------------------


def own_session() -> dict[str, Any]:
    """subprocess.Popen's arguments that keep a helper process out of the terminal's Ctrl+C (the
    server's to handle): a session of its own on POSIX, a process group of its own on Windows.
    subprocess starts a fresh interpreter everywhere (no fork of the server)."""
    if sys.platform == "win32":
        import subprocess

        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def can_fork() -> bool:
    """Whether --fork can run the server in the background here (not on Windows)."""
    return hasattr(os, "fork") and hasattr(os, "setsid")


def daemonize() -> Callable[[], None]:
    """--fork, as mongod does it: call before any thread or event loop exists. The process
    forks; the foreground one prints the child's pid, waits, and exits 0 once the child calls
    the returned `ready()` (it listens), or with the child's exit status if it ends first (it
    could not start). The child runs in a session of its own with stdin from the null device;
    ready() points its stdout and stderr there too (the log is in --logpath)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_fd)
        print(f"forked process: {pid}", flush=True)
        signalled = os.read(read_fd, 1)
        if signalled:
            print("child process started successfully, parent exiting", flush=True)
            os._exit(0)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        os._exit(status if status >= 0 else 14)  # killed by a signal: mongod's abrupt exit
    os.close(read_fd)
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)

    def ready() -> None:
        nonlocal write_fd
        if write_fd < 0:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.write(write_fd, b"\0")
        os.close(write_fd)
        write_fd = -1

    return ready


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


def process_memory() -> tuple[int, int] | None:
    """This process's resident and virtual memory in bytes (serverStatus' `mem`): Linux's
    /proc/self/statm, Windows' working set and commit charge, elsewhere the peak resident size
    getrusage reports for both; None where none of them can be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            size, resident = f.read().split()[:2]
        page = os.sysconf("SC_PAGE_SIZE")
        return int(resident) * page, int(size) * page
    except (OSError, ValueError, AttributeError):
        pass  # no /proc (macOS, Windows, a container without it)
    if sys.platform == "win32":
        return _windows_process_memory()
    try:
        import resource
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # ru_maxrss is in bytes on macOS, in kilobytes on the other systems.
    peak = peak if sys.platform == "darwin" else peak * 1024
    return (peak, peak) if peak else None


#: PROCESS_MEMORY_COUNTERS' sizes (SIZE_T each), in their order after cb and PageFaultCount.
_PROCESS_MEMORY_COUNTERS = (
    "PeakWorkingSetSize",
    "WorkingSetSize",
    "QuotaPeakPagedPoolUsage",
    "QuotaPagedPoolUsage",
    "QuotaPeakNonPagedPoolUsage",
    "QuotaNonPagedPoolUsage",
    "PagefileUsage",
    "PeakPagefileUsage",
)


def _windows_process_memory() -> tuple[int, int] | None:
    import ctypes
    from ctypes import wintypes

    class ProcessMemoryCounters(ctypes.Structure):
        _fields_ = [  # noqa: RUF012 - ctypes reads it from the class
            ("cb", wintypes.DWORD),
            ("PageFaultCount", wintypes.DWORD),
            *((name, ctypes.c_size_t) for name in _PROCESS_MEMORY_COUNTERS),
        ]

    counters = ProcessMemoryCounters()
    counters.cb = ctypes.sizeof(counters)
    kernel32 = ctypes.WinDLL("kernel32")  # type: ignore[attr-defined,unused-ignore]
    process = kernel32.GetCurrentProcess()
    psapi = ctypes.WinDLL("psapi")  # type: ignore[attr-defined,unused-ignore]
    if not psapi.GetProcessMemoryInfo(process, ctypes.byref(counters), counters.cb):
        return None
    return int(counters.WorkingSetSize), int(counters.PagefileUsage)


def cpu_details() -> dict[str, str] | None:
    """Linux's /proc/cpuinfo, what hostInfo reports of the processor: `physicalCores`,
    `sockets`, `frequencyMHz`, `features` (None where it cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    cores: set[tuple[str, str]] = set()
    sockets: set[str] = set()
    out = {"frequencyMHz": "", "features": ""}
    socket_id = "0"
    for line in text.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "physical id":
            socket_id = value
            sockets.add(value)
        elif key == "core id":
            cores.add((socket_id, value))
        elif key == "cpu MHz" and not out["frequencyMHz"]:
            out["frequencyMHz"] = value
        elif key in ("flags", "Features") and not out["features"]:
            out["features"] = value
    out["physicalCores"] = str(len(cores) or os.cpu_count() or 1)
    out["sockets"] = str(len(sockets) or 1)
    return out


def kernel_version() -> str:
    """The kernel's version line as hostInfo's `extra.versionString` gives it: Linux's
    /proc/version, elsewhere what platform reports."""
    try:
        with open("/proc/version", encoding="utf-8", errors="replace") as f:
            return f.readline().strip()
    except OSError:
        import platform

        return f"{platform.system()} {platform.release()} {platform.version()}"


def max_open_files() -> int | None:
    """The most files this process may open (RLIMIT_NOFILE's soft limit), None where unknown."""
    try:
        import resource
    except ImportError:
        return None  # Windows: no such limit to read
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


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


class SocketFileInUse(OSError):
    """The file at a Unix domain socket's path is there and cannot be removed (mongod: "Failed
    to unlink socket file")."""


def listen_unix(path: str, mode: int, backlog: int) -> tuple[socket.socket, int]:
    """A listening Unix domain socket at `path` with permissions `mode` (chmod after the bind,
    as mongod does), and the inode of its file (see remove_unix_socket). Whatever is at `path`
    is removed first, as mongod does: the socket a killed server left there. Raises OSError
    (no such directory, a path too long for a socket, a directory there, ...)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise SocketFileInUse(exc.errno, exc.strerror, path) from exc
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
