"""Start-up errors as mongod reports them: what stopped the start (the data directory, an address
or a Unix domain socket to listen on), mongod's exit status for it, and its message in mongod's
shape (`<CodeName>: <reason>`), so that an operator reads the cause and a tool that watches
mongod's output (mongodb-memory-server, for one) recognises it."""

from __future__ import annotations

import errno
import logging
import os
import stat

from ebbdb.server.log import log_event
from ebbdb.storage.core.portability import SocketFileInUse
from ebbdb.storage.engine.environment import LOCK_FILE, DataDirLocked

log = logging.getLogger("ebbdb.control")

#: mongod's exit statuses (its ExitCode): a generic failure (a pid file it cannot write), bad
#: options (a time zone database that is not there), an unrecoverable error (here: a stale socket file
#: that cannot be removed, which mongod meets with a fatal assertion), an error setting up a
#: listener, and an exception while starting (the data directory's errors).
EXIT_FAILURE = 1
EXIT_BAD_OPTIONS = 2
EXIT_ABRUPT = 14
EXIT_NET_ERROR = 48
EXIT_UNCAUGHT = 100

#: mongod's log ids for each.
_LOG_IDS = {
    EXIT_ABRUPT: (23024, "Failed to unlink socket file"),
    EXIT_NET_ERROR: (20568, "Error setting up listener"),
    EXIT_UNCAUGHT: (20557, "DBException in initAndListen, terminating"),
}

#: The advice mongod's NonExistentPath message ends with.
_CREATE_IT = (
    "Create the missing directory or specify another path using (1) the --dbpath command line "
    "option, or (2) by adding the 'storage.dbPath' option in the configuration file."
)


class StartupError(Exception):
    """The server cannot start: `code_name` is mongod's error code name for the cause, `exit`
    the status the process exits with. str() is mongod's `CodeName: reason`."""

    def __init__(self, code_name: str, reason: str, exit: int) -> None:
        super().__init__(f"{code_name}: {reason}")
        self.code_name = code_name
        self.reason = reason
        self.exit = exit

    def log(self) -> None:
        """Log it as mongod's line for it (id, message, and the error as its attribute)."""
        log_id, msg = _LOG_IDS.get(self.exit, _LOG_IDS[EXIT_UNCAUGHT])
        log_event(
            log,
            logging.ERROR,
            log_id,
            msg,
            {"error": str(self)},
            ctx="initandlisten",
            text=f"{msg}: {self}",
        )


def _reason(exc: OSError) -> str:
    # Without what asyncio adds to a bind's error: the address is said already.
    return (exc.strerror or str(exc)).split(" (while attempting to bind", 1)[0]


def prepare_dbpath(path: str) -> None:
    """Make sure `path` can be a data directory before storage opens it: an existing directory,
    or a missing one whose parent exists (ebbdb creates the data directory, never its parents:
    a mistyped path is refused, not made). Raises StartupError with mongod's message for what
    is wrong."""
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        _create(path)  # mongod finds no directory there either way
        return
    except OSError as exc:
        # mongod: the existence check itself failed (a parent that cannot be searched, ...).
        raise StartupError(
            "UnknownError",
            f"Unable to check existence of data directory {path}: {_reason(exc)}",
            EXIT_UNCAUGHT,
        ) from exc
    if not stat.S_ISDIR(st.st_mode):
        # mongod finds the path, then fails to open its lock file inside a file.
        reason = f"{os.strerror(errno.ENOTDIR)}: {path} is a file"
        raise lock_file_error(path, OSError(errno.ENOTDIR, reason))


def _create(path: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        what = "does not exist" if not os.path.lexists(parent) else "is not a directory"
        raise StartupError(
            "NonExistentPath",
            f"Data directory {path} not found (ebbdb creates the data directory, but not its "
            f"parent, and {parent} {what}). {_CREATE_IT}",
            EXIT_UNCAUGHT,
        )
    try:
        os.mkdir(path)
    except FileExistsError:
        prepare_dbpath(path)  # made meanwhile (another server starting): check it as found
    except OSError as exc:
        raise StartupError(
            "NonExistentPath",
            f"Data directory {path} not found, and it cannot be created in {parent} "
            f"({_reason(exc)}). {_CREATE_IT}",
            EXIT_UNCAUGHT,
        ) from exc


def lock_file_error(path: str, exc: OSError) -> StartupError:
    """The lock file in the data directory `path` cannot be opened: mongod's messages (a
    directory it may not write to is "read-only" to mongod)."""
    if exc.errno == errno.EACCES:
        return StartupError(
            "IllegalOperation",
            f"Attempted to create a lock file on a read-only directory: {path}",
            EXIT_UNCAUGHT,
        )
    lock = os.path.join(path, LOCK_FILE)
    return StartupError(
        "DBPathInUse",
        f"Unable to create/open the lock file: {lock} ({_reason(exc)}). Ensure the user "
        f"executing ebbdb is the owner of the lock file and has the appropriate permissions. "
        f"Also make sure that another ebbdb instance is not already running on the {path} "
        f"directory",
        EXIT_UNCAUGHT,
    )


def storage_error(path: str, exc: BaseException) -> StartupError | None:
    """What opening the data directory `path` raised, as a StartupError; None for what is not
    an error of the files (a bug, an interrupt: raised as it is)."""
    if isinstance(exc, DataDirLocked):
        return StartupError("DBPathInUse", str(exc), EXIT_UNCAUGHT)
    if isinstance(exc, OSError):
        if exc.filename is not None and os.path.basename(str(exc.filename)) == LOCK_FILE:
            return lock_file_error(path, exc)
        where = f" ({exc.filename})" if exc.filename else ""
        return StartupError(
            "UnknownError",
            f"Unable to open the data files in {path}{where}: {_reason(exc)}",
            EXIT_UNCAUGHT,
        )
    if type(exc).__module__ == "lmdb":
        # LMDB's own errors (a data file the server may not write, a damaged file) say the
        # path and the cause in their text.
        return StartupError(
            "UnknownError", f"Unable to open the data files in {path}: {exc}", EXIT_UNCAUGHT
        )
    return None


def listen_error(address: str, exc: OSError, hint: str = "") -> StartupError:
    """An address (host:port, or a Unix domain socket's path) the server cannot listen on:
    mongod's SocketException (exit 48), or, for a stale socket file it may not remove,
    mongod's "Failed to unlink socket file" (exit 14). `hint` says what the operator can
    change."""
    if isinstance(exc, SocketFileInUse):
        return StartupError(
            "SocketException",
            f"Failed to unlink socket file {address}: {_reason(exc)}",
            EXIT_ABRUPT,
        )
    reason = f"{address} :: caused by :: {_reason(exc)}"
    return StartupError("SocketException", reason + (f" ({hint})" if hint else ""), EXIT_NET_ERROR)


#: listen_error's hint for the server's own Unix domain socket, when its directory is missing or
#: may not be written to.
SOCKET_DIRECTORY_HINT = (
    "the Unix domain socket's directory must exist and be writable: choose another with "
    "--unixSocketPrefix or net.unixDomainSocket.pathPrefix, or turn the socket off with "
    "--nounixsocket"
)
#: The errors of a socket's directory (rather than of the socket).
DIRECTORY_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR, errno.EROFS})


# -- processManagement -----------------------------------------------------------------------------


def write_pid_file(path: str) -> None:
    """--pidfilepath: the server's process id, one line (the file is replaced)."""
    try:
        with open(path, "w", encoding="ascii") as f:
            f.write(f"{os.getpid()}\n")
    except OSError as exc:
        raise StartupError(
            "FileNotOpen", f"Can't write pid file {path}: {_reason(exc)}", EXIT_FAILURE
        ) from exc


def remove_pid_file(path: str) -> None:
    """At a clean exit: the pid file, if it still names this process."""
    try:
        with open(path, encoding="ascii") as f:
            if f.read().strip() != str(os.getpid()):
                return
        os.unlink(path)
    except (OSError, ValueError):
        pass  # gone, or never ours: nothing to undo


def use_time_zone_database(path: str) -> None:
    """--timeZoneInfo: time zone names are looked up in this zoneinfo directory (as mongod
    does; the tzdata package, when installed, still answers names the directory lacks)."""
    import zoneinfo

    if not os.path.isdir(path):
        raise StartupError(
            "FileNotOpen",
            f"Failed to open the time zone database directory {path} (--timeZoneInfo, "
            "processManagement.timeZoneInfo): not a directory",
            EXIT_BAD_OPTIONS,
        )
    zoneinfo.reset_tzpath(to=[os.path.abspath(path)])
    zoneinfo.ZoneInfo.clear_cache()
