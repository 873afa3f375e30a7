"""One portability module: what POSIX and Windows do differently (file locks, preallocation,
signals, fork, /proc, sysconf, statvfs, sessions, Unix domain sockets) is used in storage/core/portability.py only, and no
module reaches into asyncio's private task bookkeeping. This parses every source file of
protocol/, storage/ and server/ and fails on such a use anywhere else; tests/e2e/test_portability.py
then runs the server with those facilities hidden."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("protocol", "storage", "server")
HOME = ROOT / "storage" / "core" / "portability.py"

#: Modules that exist on one family of systems only.
PLATFORM_MODULES = frozenset(
    {"fcntl", "msvcrt", "resource", "termios", "pwd", "grp", "posix", "nt", "winreg", "_winapi"}
)
#: os's calls that exist on some systems only (os.X).
OS_NAMES = frozenset(
    {
        "fork",
        "forkpty",
        "posix_fallocate",
        "posix_fadvise",
        "statvfs",
        "sysconf",
        "getuid",
        "geteuid",
        "getgid",
        "setsid",
        "killpg",
        "sync",
        "pread",
        "pwrite",
        "O_BINARY",
    }
)
#: Names that mean a platform's facility whatever they are read from: the loop's signal
#: handling, one system's signals, and asyncio's private task bookkeeping.
PLATFORM_NAMES = frozenset(
    {
        "add_signal_handler",
        "remove_signal_handler",
        "SIGXFSZ",
        "SIGBREAK",
        "_enter_task",
        "_leave_task",
        "AF_UNIX",
        "create_unix_server",
        "open_unix_connection",
    }
)
#: Modules whose `signal`/`set_wakeup_fd` and the like are platform facilities.
PLATFORM_CALLERS = frozenset({"signal"})
#: Popen's POSIX-only arguments.
PLATFORM_KEYWORDS = frozenset({"start_new_session", "preexec_fn", "process_group"})


def uses(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, what) for every platform facility `source` uses."""
    tree = ast.parse(source, filename=filename)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if _platform(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if _platform(node.module):
                found.append((node.lineno, f"from {node.module} import"))
            elif node.module in {"os", "signal", "asyncio.tasks", "asyncio"}:
                found += [
                    (node.lineno, f"from {node.module} import {a.name}")
                    for a in node.names
                    if a.name in PLATFORM_NAMES | OS_NAMES or node.module == "signal"
                ]
        elif isinstance(node, ast.Attribute):
            base = node.value.id if isinstance(node.value, ast.Name) else None
            if node.attr in PLATFORM_NAMES:
                found.append((node.lineno, f".{node.attr}"))
            elif base == "os" and node.attr in OS_NAMES:
                found.append((node.lineno, f"os.{node.attr}"))
            elif base in PLATFORM_CALLERS:
                found.append((node.lineno, f"{base}.{node.attr}"))
        elif isinstance(node, ast.keyword) and node.arg in PLATFORM_KEYWORDS:
            found.append((getattr(node.value, "lineno", 0), f"{node.arg}="))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.startswith("/proc") or node.value in {"fork", "forkserver"}:
                found.append((node.lineno, repr(node.value)))
    return found


def _platform(module: str) -> bool:
    return module.split(".")[0] in PLATFORM_MODULES


def sources() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_platform_facilities_are_used_in_the_portability_module_only() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line} uses {what}"
        for path in sources()
        if path != HOME
        for line, what in uses(path.read_text(encoding="utf-8"), str(path))
    ]
    assert not wrong, "\n".join(wrong)


def test_the_portability_module_imports_no_asyncio_and_nothing_of_ebbdb() -> None:
    tree = ast.parse(HOME.read_text(encoding="utf-8"))
    imported = {
        name.split(".")[0]
        for node in ast.walk(tree)
        for name in (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
    }
    assert not imported & {"asyncio", "ebbdb"}, imported


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ("import fcntl", "import fcntl"),
        ("import msvcrt as m", "import msvcrt"),
        ("from resource import getrusage", "from resource import"),
        ("os.posix_fallocate(fd, 0, 1)", "os.posix_fallocate"),
        ("pid = os.fork()", "os.fork"),
        ("from os import fork", "from os import fork"),
        ("signal.signal(h)", "signal.signal"),
        ("signal.SIGTERM", "signal.SIGTERM"),
        ("os.kill(pid, s.SIGXFSZ)", ".SIGXFSZ"),
        ("os.sync()", "os.sync"),
        ("from signal import SIGTERM", "from signal import SIGTERM"),
        ("loop.add_signal_handler(2, stop)", ".add_signal_handler"),
        ("tasks._enter_task(loop, task)", "._enter_task"),
        ("open('/proc/self/statm')", "'/proc/self/statm'"),
        ("multiprocessing.get_context('fork')", "'fork'"),
        ("subprocess.Popen(a, start_new_session=True)", "start_new_session="),
        ("os.statvfs(path)", "os.statvfs"),
        ("os.sysconf('SC_PAGE_SIZE')", "os.sysconf"),
        ("socket.socket(socket.AF_UNIX)", ".AF_UNIX"),
        ("await loop.create_unix_server(f, p)", ".create_unix_server"),
    ],
)
def test_the_checker_sees_each_form(source: str, what: str) -> None:
    assert [w for _, w in uses(source)] == [what]


def test_the_checker_leaves_portable_code_alone() -> None:
    source = (
        "import os, shutil, subprocess\n"
        "os.open(p, os.O_RDWR | os.O_CREAT)\n"
        "shutil.disk_usage(p)\n"
        "subprocess.Popen([sys.executable, f], close_fds=True)\n"
        "os.getpid()\n"
        "env.sync(True)\n"
        "portability.preallocate(fd, 0, 1)\n"
        "pwd = 'secret'\n"
    )
    assert uses(source) == []
