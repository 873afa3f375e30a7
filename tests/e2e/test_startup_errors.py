"""Start-up errors name their cause, with mongod's exit status and message shape (real `python -m
ebbdb` processes): a dbpath that is a file, a missing parent, an unwritable data directory, an
address in use, a Unix domain socket's directory the server may not write to, a stale socket file
it cannot remove. None of them is called a listen error unless it is one.

Tests run as root here, and root writes anywhere. For the "may not write" cases the server is
started with CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH dropped from its capability bounding set
(prctl, before exec): the kernel then checks a directory's mode for it as for any other user.
Each such test first proves the setup with a probe process started the same way, which must be
refused the same write; as another user no capability is dropped and the mode alone refuses."""

from __future__ import annotations

import ctypes
import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from ebbdb.storage.core import portability
from tests.e2e.test_cli import ROOT, SERVER_CMD, START_TIMEOUT

#: prctl(2)'s PR_CAPBSET_DROP, and the capabilities that let root ignore a file's mode.
_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2
_LOCK_ADVICE = (
    "Ensure the user executing ebbdb is the owner of the lock file and has the appropriate "
    "permissions. Also make sure that another ebbdb instance is not already running on the"
)
_CREATE_ADVICE = (
    "Create the missing directory or specify another path using (1) the --dbpath command line "
    "option, or (2) by adding the 'storage.dbPath' option in the configuration file."
)


def _as_a_user() -> None:
    """In the child before exec: without root's permission override (a no-op for a user)."""
    if os.name == "posix" and os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
            if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def _start(
    args: list[str], preexec: Callable[[], None] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the server, which must stop on its own (it cannot start)."""
    return subprocess.run(
        [*SERVER_CMD, "--port", "0", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        stdin=subprocess.DEVNULL,
        **({"preexec_fn": preexec} if preexec is not None else {}),
    )


#: A directory's mode refuses writes on POSIX only (Windows ignores a directory's read-only flag).
_posix_modes = pytest.mark.skipif(
    os.name != "posix", reason="a directory's mode does not refuse writes on Windows"
)


def _refused(result: subprocess.CompletedProcess[str], status: int, message: str) -> None:
    """Exit `status` with exactly `message` on stderr (after the program's name), nothing on
    stdout, no traceback, and no talk of listening unless it is a listener's error."""
    assert (result.returncode, result.stdout) == (status, ""), result.stderr
    assert result.stderr.splitlines() == [f"ebbdb: {message}"], result.stderr
    if status != 48:
        assert "listen" not in result.stderr


def _read_only_dir(path: Path) -> Path:
    """A directory the server may not write to, checked by a probe started as the server is."""
    path.mkdir(mode=0o755)
    path.chmod(0o555)
    probe = subprocess.run(
        [sys.executable, "-c", f"open({str(path / 'probe')!r}, 'w')"],
        capture_output=True,
        text=True,
        preexec_fn=_as_a_user,
        timeout=START_TIMEOUT,
    )
    assert probe.returncode == 1 and "PermissionError" in probe.stderr, (
        f"the setup does not refuse a write to {path}: {probe.stderr}"
    )
    return path


# -- the data directory ----------------------------------------------------------------------------


def test_a_dbpath_that_is_a_file(tmp_path: Path) -> None:
    # Formerly "cannot listen on 127.0.0.1:27017: File exists", exit 48.
    path = tmp_path / "f"
    path.write_text("not a directory")
    _refused(
        _start(["--dbpath", str(path)]),
        100,
        f"DBPathInUse: Unable to create/open the lock file: {path / 'ebbdb.lock'} (Not a directory: "
        f"{path} is a file). {_LOCK_ADVICE} {path} directory",
    )
    assert path.read_text() == "not a directory"


def test_a_missing_parent(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "data"
    _refused(
        _start(["--dbpath", str(path)]),
        100,
        f"NonExistentPath: Data directory {path} not found (ebbdb creates the data directory, "
        f"but not its parent, and {path.parent} does not exist). {_CREATE_ADVICE}",
    )
    assert not (tmp_path / "no").exists(), "a mistyped path is not made"


def test_a_parent_that_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    path = tmp_path / "f" / "data"
    _refused(
        _start(["--dbpath", str(path)]),
        100,
        f"NonExistentPath: Data directory {path} not found (ebbdb creates the data directory, "
        f"but not its parent, and {path.parent} is not a directory). {_CREATE_ADVICE}",
    )


@_posix_modes
def test_an_unwritable_dbpath(tmp_path: Path) -> None:
    # Formerly "cannot listen on 127.0.0.1:27017: Permission denied", exit 48.
    path = _read_only_dir(tmp_path / "ro")
    _refused(
        _start(["--dbpath", str(path)], _as_a_user),
        100,
        f"IllegalOperation: Attempted to create a lock file on a read-only directory: {path}",
    )
    assert list(path.iterdir()) == []


@_posix_modes
def test_a_dbpath_that_cannot_be_created(tmp_path: Path) -> None:
    parent = _read_only_dir(tmp_path / "ro")
    path = parent / "data"
    _refused(
        _start(["--dbpath", str(path)], _as_a_user),
        100,
        f"NonExistentPath: Data directory {path} not found, and it cannot be created in "
        f"{parent} (Permission denied). {_CREATE_ADVICE}",
    )


def test_the_error_is_in_the_log_file_too(tmp_path: Path) -> None:
    """With --logpath the terminal gets the line on stderr and the log file mongod's entry."""
    path, logpath = tmp_path / "f", tmp_path / "ebbdb.log"
    path.write_text("")
    result = _start(["--dbpath", str(path), "--logpath", str(logpath), "--logFormat", "json"])
    assert result.returncode == 100
    entries = [json.loads(line) for line in logpath.read_text().splitlines()]
    errors = [e for e in entries if e["s"] == "E"]
    assert [(e["id"], e["msg"], e["ctx"]) for e in errors] == [
        (20557, "DBException in initAndListen, terminating", "initandlisten")
    ]
    assert errors[0]["attr"]["error"].startswith("DBPathInUse: Unable to create/open the lock")
    assert result.stderr == f"ebbdb: {errors[0]['attr']['error']}\n"


# -- listening -------------------------------------------------------------------------------------


def test_an_address_in_use(tmp_path: Path) -> None:
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        with pytest.raises(OSError) as refusal:  # what this system says (Linux: "Address ...")
            socket.create_server(("127.0.0.1", port)).close()
        result = _start(["--port", str(port), "--dbpath", str(tmp_path / "d")])
    finally:
        taken.close()
    reason = str(refusal.value.strerror).split(" (while attempting to bind", 1)[0]
    _refused(result, 48, f"SocketException: 127.0.0.1:{port} :: caused by :: {reason}")


_socket_tests = pytest.mark.skipif(
    not portability.unix_sockets(), reason="no Unix domain sockets on this system"
)
_SOCKET_HINT = (
    "the Unix domain socket's directory must exist and be writable: choose another with "
    "--unixSocketPrefix or net.unixDomainSocket.pathPrefix, or turn the socket off with "
    "--nounixsocket"
)


@_posix_modes
@_socket_tests
def test_a_socket_directory_without_permission(tmp_path: Path) -> None:
    prefix = _read_only_dir(tmp_path / "sockets")
    dbpath = tmp_path / "d"
    dbpath.mkdir(mode=0o777)  # the data directory is not what stops this start
    result = _start(["--dbpath", str(dbpath), "--unixSocketPrefix", str(prefix)], _as_a_user)
    assert result.returncode == 48, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"ebbdb: SocketException: {prefix}/ebbdb-"), line
    assert line.endswith(f".sock :: caused by :: Permission denied ({_SOCKET_HINT})"), line


@_socket_tests
def test_a_stale_socket_file_that_cannot_be_removed(tmp_path: Path) -> None:
    """Where the socket's file should be there is something the server may not remove (here a
    directory): mongod's "Failed to unlink socket file", and its exit status 14."""
    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    prefix = tmp_path / "s"
    stale = prefix / f"ebbdb-{port}.sock"
    stale.mkdir(parents=True)
    with pytest.raises(OSError) as refusal:  # what this system says (Linux: "Is a directory")
        os.unlink(stale)
    result = _start(
        ["--port", str(port), "--dbpath", str(tmp_path / "d"), "--unixSocketPrefix", str(prefix)]
    )
    _refused(
        result,
        14,
        f"SocketException: Failed to unlink socket file {stale}: {refusal.value.strerror}",
    )


def test_a_pid_file_that_cannot_be_written(tmp_path: Path) -> None:
    pid_file = tmp_path / "no" / "ebbdb.pid"
    _refused(
        _start(["--dbpath", str(tmp_path / "d"), "--pidfilepath", str(pid_file)]),
        1,
        f"FileNotOpen: Can't write pid file {pid_file}: No such file or directory",
    )
