"""Start to first answer: how long after launch `python -m ebbdb` answers its first ping, beside
`python -c pass` measured the same way in the same run.

    python bench/startup.py [--runs 5] [--script]

Each run launches the server (`python -m ebbdb`, or with --script the `ebbdb` console script
beside this interpreter) with --port on a free port and a fresh temporary --dbpath, connects a
raw socket as soon as the port accepts, sends one OP_MSG ``{ping: 1, $db: "admin"}`` built by
common.op_msg, and takes the time from just before the launch to the reply's last byte; then the
server is stopped (SIGTERM) and its directory removed. `python -c pass` (the same interpreter)
is timed from launch to exit, and so are two rows that place the server's own share:
`python -c "import asyncio, bson, lmdb"` (what any server on this stack imports) and
`python -c "import ebbdb.server.cli"` (the server's code, before it opens anything). A last row
starts the server as a one-member replica set (`--replSet rs0`: the oplog created, the set
initiated) and times the same first ping, printed beside the standalone figure with the
difference (issue 22's target: at most 50 ms more).

Every launch runs with Python's bytecode cache, as an installed ebbdb does (pip compiles a regular
install; an editable one is compiled on its first import): PYTHONDONTWRITEBYTECODE is taken out of
the launches' environment, and one launch before the measured ones fills the cache. With it set,
an editable install compiles all of ebbdb's source on every start.

Every launch runs in a temporary directory, not this checkout, so that `-m ebbdb` finds the
ebbdb this interpreter has installed (editable or not), as it would anywhere else.

The figure is the median of --runs runs (default 5). Beside each row's wall-clock median is its
median CPU time (where the system tells it: the launched process's threads until the reply, from
/proc, or the child's resource usage until its exit): on a machine busy with other work the wall
clock grows with the load and the CPU time much less, which tells the two apart. Nothing is
asserted; the figures are printed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import bson
import common

try:
    import resource
except ImportError:  # not a Unix system: no CPU times for the rows timed to their exit
    resource = None  # type: ignore[assignment]

#: (wall-clock seconds, CPU seconds or None where the system does not tell them) of one launch.
Run = tuple[float, float | None]

#: The issue's target for the median, in seconds.
TARGET = 0.150
#: Issue 22's target: a replica set's start costs at most this much more than a standalone's.
REPLSET_EXTRA = 0.050
#: How long one launch may take to answer before the run counts as failed.
TIMEOUT = 30.0
#: Between connection attempts while the server is not yet listening.
POLL = 0.001


def read_reply(sock: socket.socket) -> dict[str, object]:
    """The body of the OP_MSG reply on `sock` (header, flags, kind 0, one document)."""
    data = common.read_message(sock)
    length, _rid, _to, op = struct.unpack_from("<iiii", data)
    if op != common.OP_MSG or data[20] != 0:
        raise ConnectionError(f"not an OP_MSG reply (opCode {op})")
    return dict(bson.decode(data[21:length]))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def server_command(script: bool, port: int, dbpath: Path, replset: bool = False) -> list[str]:
    if script:
        exe = Path(sys.executable).with_name("ebbdb")
        if not exe.is_file():
            raise SystemExit(f"no console script at {exe}: install ebbdb into this interpreter")
        launch = [str(exe)]
    else:
        launch = [sys.executable, "-m", "ebbdb"]
    extra = ["--replSet", "rs0"] if replset else []
    return [*launch, "--port", str(port), "--dbpath", str(dbpath), "--bind_ip", "127.0.0.1", *extra]


def cpu_of(pid: int) -> float | None:
    """CPU seconds the threads of process `pid` have run so far (Linux's schedstat, in ns);
    None where /proc does not tell."""
    total = 0
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total += int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return total / 1e9


def children_cpu() -> float | None:
    """CPU seconds of this process's children that have exited (None: not a Unix system)."""
    if resource is None:
        return None
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def first_answer(script: bool, replset: bool = False) -> Run:
    """Seconds from launching a server (a replica set's, with `replset`) on a fresh dbpath to its
    reply to one ping, and the CPU seconds the server used until then."""
    workdir = Path(tempfile.mkdtemp(prefix="ebbdb-startup-"))
    port = free_port()
    message = common.op_msg({"ping": 1, "$db": "admin"})
    log = workdir / "server.log"
    try:
        with log.open("wb") as err:
            t0 = time.perf_counter()
            proc = subprocess.Popen(
                server_command(script, port, workdir / "db", replset),
                cwd=workdir,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=launch_environment(),
            )
        try:
            while True:
                if time.perf_counter() - t0 > TIMEOUT or proc.poll() is not None:
                    tail = log.read_text(errors="replace").strip().splitlines()[-5:]
                    raise RuntimeError(
                        f"the server did not answer (status {proc.poll()}): " + " | ".join(tail)
                    )
                try:
                    sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
                except ConnectionRefusedError:
                    time.sleep(POLL)
                    continue
                with sock:
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    sock.sendall(message)
                    reply = read_reply(sock)
                    elapsed = time.perf_counter() - t0
                    cpu = cpu_of(proc.pid)
                if reply.get("ok") != 1:
                    raise RuntimeError(f"the ping was refused: {reply}")
                return elapsed, cpu
        finally:
            common.stop(proc)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def launch_environment() -> dict[str, str]:
    """This environment, with Python's bytecode cache on (see the module's docstring)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def to_exit(argv: Sequence[str]) -> Callable[[], Run]:
    """A run that times `argv` from launch to exit (it must exit with status 0)."""

    def run() -> Run:
        cpu0 = children_cpu()
        t0 = time.perf_counter()
        status = subprocess.call(
            list(argv),
            cwd=tempfile.gettempdir(),
            stdin=subprocess.DEVNULL,
            env=launch_environment(),
        )
        elapsed = time.perf_counter() - t0
        cpu1 = children_cpu()
        if status != 0:
            raise RuntimeError(f"{' '.join(argv)} exited with status {status}")
        return elapsed, None if cpu0 is None or cpu1 is None else cpu1 - cpu0

    return run


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  python bench/startup.py --runs 5",
    )
    ap.add_argument("--runs", type=int, default=5, help="launches per row (default 5)")
    ap.add_argument(
        "--script", action="store_true", help="launch the `ebbdb` console script, not -m ebbdb"
    )
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    py = sys.executable
    launch = "ebbdb (console script)" if args.script else "python -m ebbdb"
    rows: list[tuple[str, Callable[[], Run]]] = [
        ("python -c pass", to_exit([py, "-c", "pass"])),
        (
            "python -c 'import asyncio, bson, lmdb'",
            to_exit([py, "-c", "import asyncio, bson, lmdb"]),
        ),
        ("python -c 'import ebbdb.server.cli'", to_exit([py, "-c", "import ebbdb.server.cli"])),
        (f"{launch}: first ping answered", lambda: first_answer(args.script)),
        (
            f"{launch} --replSet rs0: first ping answered",
            lambda: first_answer(args.script, replset=True),
        ),
    ]
    print(
        f"Python {sys.version.split()[0]} ({py}), {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f}; median of {args.runs} runs, times in seconds"
    )
    if "PYTHONDONTWRITEBYTECODE" in os.environ:
        print("  (PYTHONDONTWRITEBYTECODE is set here: the launches run without it)")
    first_answer(args.script)  # fills the bytecode cache; not counted
    medians: dict[str, float] = {}
    # Rounds interleave the rows, so that a burst of load elsewhere on the machine falls on all
    # of them rather than on one.
    times: dict[str, list[Run]] = {name: [] for name, _run in rows}
    for _ in range(args.runs):
        for name, run in rows:
            times[name].append(run())
    width = max(len(name) for name, _run in rows)
    print(f"  {'':<{width}}  {'wall':>6}  {'cpu':>6}")
    for name, _run in rows:
        walls = [wall for wall, _cpu in times[name]]
        cpus = [cpu for _wall, cpu in times[name] if cpu is not None]
        medians[name] = statistics.median(walls)
        cpu_text = f"{statistics.median(cpus):6.3f}" if cpus else f"{'-':>6}"
        runs = " ".join(f"{t:.3f}" for t in walls)
        print(f"  {name:<{width}}  {medians[name]:6.3f}  {cpu_text}  (wall runs: {runs})")
    first = medians[f"{launch}: first ping answered"]
    base = medians["python -c pass"]
    verdict = "met" if first <= TARGET else "NOT met"
    print(
        f"start to first answer {first:.3f} s, python -c pass {base:.3f} s, "
        f"ratio {first / base:.1f}x; target <= {TARGET:.3f} s: {verdict}"
    )
    replset = medians[f"{launch} --replSet rs0: first ping answered"]
    extra = replset - first
    verdict = "met" if extra <= REPLSET_EXTRA else "NOT met"
    print(
        f"as a replica set {replset:.3f} s, {extra * 1000:+.0f} ms over standalone; target "
        f"<= {REPLSET_EXTRA * 1000:.0f} ms more: {verdict}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
