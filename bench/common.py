"""What the bench/ scripts share: naming targets, starting servers, talking to them, reporting.

This module owns the command-line plumbing common to every benchmark: the ``[LABEL=]URI``
target syntax and its checks (well-formed URI, unique labels), the ``targets``/``--rounds``/
``--quick`` (and, for the scripts that can start their own servers, ``--spawn``) arguments, each
script's own options declared once as the fields of its Config (``setting``) and its help texts
(``Cli``), the base ``Target`` record (label, URI, client, server pid, failed steps), starting
ebbdb and the floor server and stopping them again, the single-connection client and connecting
every target for a run (``connected``), recording a failing step once, the floor server's
document shape, a raw OP_MSG and reading one reply off a socket, a server's peak resident memory over a block (``PeakRss``), the NaN-aware median
and percentile, and the lines every script prints the same way (the version banner, "cannot
reach", "steps that failed", "met"/"NOT met"). Each script keeps its own measurements and report
layout.

The scripts are run as ``python bench/<name>.py ...``, so Python puts this folder first on
``sys.path`` and they import this module as plain ``common``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import math
import os
import platform
import queue
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, TypeVar

import bson
import pymongo
from pymongo import MongoClient
from pymongo.errors import PyMongoError

Doc = dict[str, Any]
Client = MongoClient[Doc]

_LABELLED = re.compile(r"^(?P<label>[A-Za-z0-9_.\-]+)=(?P<uri>mongodb(?:\+srv)?://.*)$")

REPO = Path(__file__).resolve().parent.parent
#: The ceiling server, a sibling of the checkout (see its README there).
FLOOR_SERVER = REPO.parent / "shared" / "bench" / "floor_server.py"


@dataclass
class Target:
    """One server under test; the scripts subclass it to add their measurements."""

    label: str
    uri: str
    client: Client | None = None
    pid: int | None = None  # the server's process id, when known (a server started here)
    errors: dict[str, str] = field(default_factory=dict)  # failed step -> first line of error


T = TypeVar("T", bound=Target)


def parse_target(arg: str, index: int) -> tuple[str, str]:
    """``label=mongodb://...`` or a bare URI (labelled by position): (label, URI)."""
    m = _LABELLED.match(arg)
    if m:
        return m["label"], m["uri"]
    if not arg.startswith(("mongodb://", "mongodb+srv://")):
        raise argparse.ArgumentTypeError(f"not a MongoDB URI: {arg!r}")
    return f"t{index + 1}", arg


def make_parser(
    description: str, epilog: str, quick_help: str, spawn: bool = False
) -> argparse.ArgumentParser:
    """A parser with the arguments every script takes: targets, --rounds, --quick, --timeout-ms;
    with `spawn`, also --spawn (start ebbdb and the floor here), and the targets become optional
    (see ebbdb_and_floor)."""
    ap = argparse.ArgumentParser(
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=epilog,
    )
    if spawn:
        ap.add_argument(
            "targets",
            nargs="*",
            metavar="[LABEL=]URI",
            help="ebbdb=URI [floor=URI] (bare URIs: ebbdb first, then the floor)",
        )
        ap.add_argument(
            "--spawn",
            action="store_true",
            help="start ebbdb (temporary dbpath, test commands on) and the floor server "
            "here, and stop them at the end, instead of taking URIs",
        )
    else:
        ap.add_argument("targets", nargs="+", metavar="[LABEL=]URI", help="MongoDB URI(s)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per target (default 3)")
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--timeout-ms", type=int, default=5000, help="connect timeout (5000)")
    return ap


# -- settings ------------------------------------------------------------------------------------

_SETTING = "bench.setting"


class Settings:
    """The base of a script's Config, a frozen dataclass: each field declared with `setting` is a
    command-line option of its own; any other field takes make_parser's argument of that name
    (timeout_ms)."""

    def invalid(self, args: argparse.Namespace) -> str | None:
        """The command-line error for settings the script cannot run with (`args` holds the
        rest of the command line, --rounds resolved), else None."""
        return None


C = TypeVar("C", bound=Settings)


@dataclass(frozen=True)
class Setting:
    """How one field of a script's Config is set from the command line: its option, its default
    in a full and in a --quick run, the option's type (an int, a float, or a bool for a flag that
    takes no value) and its help."""

    option: str
    full: Any
    quick: Any
    kind: type
    help: str


def setting(
    option: str, full: Any, quick: Any = None, *, help: str, kind: type | None = None
) -> Any:
    """A Config dataclass field set by `option`: the value given, else `full`, or `quick` in a
    --quick run (`quick` defaults to `full`); `kind` defaults to the type of `full`."""
    kind = kind if kind is not None else type(full)
    quick = quick if quick is not None else full
    return field(metadata={_SETTING: Setting(option, full, quick, kind, help)})


@dataclass(frozen=True)
class Cli:
    """What a script's --help says besides its options: what it measures, the arguments of its
    examples (each shown as ``python bench/<script>.py <arguments>``) and what --quick does; and
    its rounds by default (full, quick: 3 and 1 unless it says otherwise). With `spawn` it can
    start its own servers (see make_parser)."""

    description: str
    examples: tuple[str, ...]
    quick_help: str
    rounds: tuple[int, int] = (3, 1)
    spawn: bool = False

    def epilog(self, script: str) -> str:
        heading = "example:" if len(self.examples) == 1 else "examples:"
        return heading + "".join(f"\n  python bench/{script} {ex}" for ex in self.examples)


def parse_args(
    argv: Sequence[str] | None, config: type[C], cli: Cli
) -> tuple[argparse.ArgumentParser, argparse.Namespace, C]:
    """A script's command line: make_parser's arguments, then an option for each setting of
    `config` (in field order). Returns the parser (for later errors), the arguments, and the
    config built from them: each setting from its option, else its default for the run (see
    setting), each other field from make_parser's argument of that name. `args.rounds` becomes
    the --rounds given, else cli.rounds[0], or cli.rounds[1] with --quick. What `config.invalid`
    reports is a parser error."""
    script = Path(sys.modules[config.__module__].__file__ or "").name
    ap = make_parser(cli.description, cli.epilog(script), cli.quick_help, cli.spawn)
    declared = [(f.name, f.metadata.get(_SETTING)) for f in fields(config)]
    for _name, s in declared:
        if s is None:
            continue
        if s.kind is bool:
            ap.add_argument(s.option, action="store_true", help=s.help)
        else:
            ap.add_argument(s.option, type=s.kind, default=None, help=s.help)
    args = ap.parse_args(argv)

    def pick(given: Any, full: Any, quick: Any) -> Any:
        return given if given is not None else (quick if args.quick else full)

    values = {
        name: getattr(args, name)
        if s is None
        else pick(getattr(args, _dest(s.option)), s.full, s.quick)
        for name, s in declared
    }
    args.rounds = pick(args.rounds, *cli.rounds)
    cfg = config(**values)
    problem = cfg.invalid(args)
    if problem is not None:
        ap.error(problem)
    return ap, args, cfg


def _dest(option: str) -> str:
    """The attribute argparse stores an option under: --batch-size -> batch_size."""
    return option.lstrip("-").replace("-", "_")


def parse_targets(
    ap: argparse.ArgumentParser, args: Sequence[str], make: Callable[[str, str], T]
) -> list[T]:
    """Targets from the command line, built by make(label, uri); a parser error for a
    malformed URI or a label given twice."""
    try:
        targets = [make(*parse_target(a, i)) for i, a in enumerate(args)]
    except argparse.ArgumentTypeError as exc:
        ap.error(str(exc))
    labels = [t.label for t in targets]
    if len(set(labels)) != len(labels):
        ap.error(f"duplicate target labels: {labels}")
    return targets


def ebbdb_and_floor(
    ap: argparse.ArgumentParser,
    args: argparse.Namespace,
    make: Callable[[str, str], T],
    stack: contextlib.ExitStack,
    floor_ndocs: int,
) -> tuple[T, T | None]:
    """The ebbdb target and the floor target (None: not given) of a parser made with `spawn`:
    servers started here with --spawn (stopped when `stack` closes; the floor with --raw and
    `floor_ndocs` documents), else ``ebbdb=URI [floor=URI]`` or two bare URIs in that order.
    A parser error for anything else; a server that cannot be started is said on stderr and
    ends the script with status 2 (SystemExit)."""
    if args.spawn:
        if args.targets:
            ap.error("give either --spawn or URIs, not both")
        signal.signal(signal.SIGTERM, _exit_on_sigterm)  # so that `stack` still stops them
        try:
            ebbdb = spawn_ebbdb(stack)
            floor = spawn_floor(stack, floor_ndocs)
        except RuntimeError as exc:
            print(f"cannot start the servers: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
        e, f = make("ebbdb", ebbdb.uri), make("floor", floor.uri)
        e.pid, f.pid = ebbdb.proc.pid, floor.proc.pid
        return e, f
    if not args.targets:
        ap.error("give the servers' URIs (ebbdb=mongodb://... [floor=mongodb://...]) or --spawn")
    try:
        pairs = [parse_target(a, i) for i, a in enumerate(args.targets)]
    except argparse.ArgumentTypeError as exc:
        ap.error(str(exc))
    labels = [label for label, _uri in pairs]
    if all(_LABELLED.match(a) is None for a in args.targets) and len(pairs) <= 2:
        labels = ["ebbdb", "floor"][: len(pairs)]
    if len(set(labels)) != len(labels) or "ebbdb" not in labels or set(labels) - {"ebbdb", "floor"}:
        ap.error(f"label the targets ebbdb=URI [floor=URI], got labels {labels}")
    by_label = {label: make(label, uri) for label, (_l, uri) in zip(labels, pairs, strict=True)}
    return by_label["ebbdb"], by_label.get("floor")


def is_floor(client: Client) -> bool:
    """The floor server answers {__stats: 1} with its CPU seconds; real servers refuse it."""
    try:
        reply = client.admin.command({"__stats": 1})
    except PyMongoError:
        return False
    return "cpu" in reply


# -- starting servers -----------------------------------------------------------------------------

_EBBDB_LISTENING = re.compile(r"listening on (?P<host>\[[^\]]*\]|[^\s:]+):(?P<port>\d+)")
_FLOOR_LISTENING = re.compile(r"^listening (?P<port>\d+)")


def has_uvloop() -> bool:
    """ebbdb runs on uvloop when it is installed; the floor is started on the same loop."""
    return importlib.util.find_spec("uvloop") is not None


@dataclass
class Spawned:
    """A server process started by this script."""

    name: str
    proc: subprocess.Popen[bytes]
    uri: str
    log: Path  # its stderr (removed with its temporary directory at the end)


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _log_tail(log: Path, lines: int = 15) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (ebbdb shuts down cleanly on it), then SIGKILL if it lingers."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _start(
    name: str,
    cmd: Sequence[str],
    workdir: Path,
    ready: re.Pattern[str],
    timeout: float,
    stack: contextlib.ExitStack,
    unread_stderr: bool = False,
) -> tuple[Spawned, re.Match[str]]:
    """Start `cmd` (stderr to a log in `workdir`, or with `unread_stderr` to a pipe nobody reads)
    and wait for the stdout line matching `ready`; the process is stopped when `stack` closes.
    RuntimeError if it exits or stays silent."""
    log = workdir / f"{name}.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            list(cmd),
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if unread_stderr else err,
        )
    spawned = Spawned(name, proc, "", log)
    stack.callback(stop, proc)
    lines: queue.Queue[str | None] = queue.Queue()
    listening = threading.Event()

    def drain() -> None:  # keeps reading so the child never blocks on a full pipe
        assert proc.stdout is not None
        for raw in proc.stdout:
            if not listening.is_set():
                lines.put(raw.decode(errors="replace"))
        lines.put(None)

    threading.Thread(target=drain, name=f"{name}-stdout", daemon=True).start()
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            stop(proc)
            raise RuntimeError(
                f"{name} did not report listening within {timeout:g} s\n{_log_tail(log)}"
            ) from None
        if line is None:
            proc.wait()
            raise RuntimeError(
                f"{name} exited with status {proc.returncode} before listening\n{_log_tail(log)}"
            )
        m = ready.search(line)
        if m is not None:
            listening.set()
            return spawned, m


def _workdir(stack: contextlib.ExitStack, prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    stack.callback(shutil.rmtree, path, ignore_errors=True)  # after the server is stopped
    return path


def spawn_ebbdb(
    stack: contextlib.ExitStack,
    timeout: float = 60.0,
    *,
    quiet: bool = True,
    unread_stderr: bool = False,
    repl_set: str | None = None,
    test_commands: bool = True,
) -> Spawned:
    """ebbdb from this checkout on a free port, a temporary dbpath and the test commands on,
    stopped (and its files removed) when `stack` closes. `quiet` (the default) leaves connection
    events out of its log; with `unread_stderr` the log goes to a pipe nobody reads (its writer
    is stuck once the pipe is full) instead of a file. With `repl_set`, a one-member replica set
    of that name (`--replSet`), and a URI that names it; `test_commands=False` leaves them off."""
    workdir = _workdir(stack, "ebbdb-bench-")
    cmd = [
        sys.executable,
        "-m",
        "ebbdb",
        "--port",
        "0",
        "--dbpath",
        str(workdir / "db"),
        *(["--quiet"] if quiet else []),
        *(["--setParameter", "enableTestCommands=1"] if test_commands else []),
        *(["--replSet", repl_set] if repl_set else []),
    ]
    spawned, m = _start("ebbdb", cmd, workdir, _EBBDB_LISTENING, timeout, stack, unread_stderr)
    spawned.uri = f"mongodb://{m['host']}:{m['port']}"
    if repl_set:
        spawned.uri += f"/?replicaSet={repl_set}"
    how = (" (not --quiet)" if not quiet else "") + (
        ", stderr to a pipe nobody reads" if unread_stderr else ""
    )
    print(f"  started ebbdb: pid {spawned.proc.pid}, {spawned.uri}, dbpath {workdir / 'db'}{how}")
    return spawned


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def spawn_floor(stack: contextlib.ExitStack, ndocs: int, timeout: float = 30.0) -> Spawned:
    """The floor server (--raw, `ndocs` documents for an unfiltered find, uvloop when ebbdb
    has it too) on a free port, stopped when `stack` closes."""
    if not FLOOR_SERVER.is_file():
        raise RuntimeError(f"floor server not found at {FLOOR_SERVER}")
    workdir = _workdir(stack, "ebbdb-bench-floor-")
    loop = ["--loop", "uvloop"] if has_uvloop() else []
    for attempt in range(3):  # the free port may be taken before the floor binds it
        port = _free_port()
        cmd = [sys.executable, str(FLOOR_SERVER), "--port", str(port), "--raw"]
        cmd += ["--ndocs", str(ndocs), *loop]
        try:
            spawned, _m = _start("floor", cmd, workdir, _FLOOR_LISTENING, timeout, stack)
        except RuntimeError:
            if attempt == 2:
                raise
            continue
        spawned.uri = f"mongodb://127.0.0.1:{port}"
        print(
            f"  started floor: pid {spawned.proc.pid}, {spawned.uri}, --raw --ndocs {ndocs} "
            f"{' '.join(loop)}".rstrip()
        )
        return spawned
    raise AssertionError("unreachable")


class PeakRss:
    """The peak resident memory (VmRSS of /proc/<pid>/status) of a process over a `with` block,
    read every `every` seconds by a thread (so that a busy client does not delay the samples):
    `growth_mb` is the peak less the value at the start, None where /proc does not tell."""

    def __init__(self, pid: int | None, every: float = 0.01) -> None:
        self.pid = pid
        self.every = every
        self.growth_mb: float | None = None
        self._start: int | None = None
        self._peak = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss", daemon=True)

    def _read(self) -> int | None:
        """VmRSS in kB, None when it cannot be read."""
        if self.pid is None:
            return None
        try:
            with open(f"/proc/{self.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except (OSError, ValueError):
            return None
        return None

    def _run(self) -> None:
        while not self._halt.wait(self.every):
            kb = self._read()
            if kb is not None:
                self._peak = max(self._peak, kb)

    def __enter__(self) -> PeakRss:
        self._start = self._read()
        if self._start is not None:
            self._peak = self._start
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._start is None:
            return
        self._halt.set()
        self._thread.join()
        last = self._read()
        self._peak = max(self._peak, last if last is not None else 0)
        self.growth_mb = (self._peak - self._start) / 1024


# -- raw wire messages (for the scripts that time a socket without a driver) ---------------------

OP_MSG = 2013


def op_msg(command: Doc, request_id: int = 1) -> bytes:
    """One OP_MSG (no flags, one kind-0 section) holding `command`."""
    payload = struct.pack("<I", 0) + b"\x00" + bson.encode(command)
    return struct.pack("<iiii", 16 + len(payload), request_id, 0, OP_MSG) + payload


def read_message(sock: socket.socket) -> bytes:
    """One whole message off `sock`, header included."""
    data = b""
    while len(data) < 4 or len(data) < struct.unpack_from("<i", data)[0]:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("the server closed the connection before replying")
        data += chunk
    return data


def cpu_seconds(pid: int) -> float | None:
    """A process's CPU time so far (utime + stime of /proc/<pid>/stat); None where there is no
    /proc or no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def versions() -> str:
    """The start of each script's banner line."""
    return f"pymongo {pymongo.version}, Python {platform.python_version()}"


def connect(target: Target, timeout_ms: int) -> Client | None:
    """A single-connection client to the target that has answered a ping; None (said on
    stderr) when it cannot be reached."""
    try:
        client: Client = MongoClient(
            target.uri,
            maxPoolSize=1,
            serverSelectionTimeoutMS=timeout_ms,
            connectTimeoutMS=timeout_ms,
        )
        client.admin.command("ping")
    except PyMongoError as exc:
        print(f"cannot reach {target.label} ({target.uri}): {exc}", file=sys.stderr)
        return None
    return client


def connect_all(targets: Sequence[Target], timeout_ms: int) -> bool:
    """Give each target, in order, its client (see connect); False once one cannot be reached
    (the ones before it keep theirs, for close)."""
    for t in targets:
        t.client = connect(t, timeout_ms)
        if t.client is None:
            return False
    return True


@contextlib.contextmanager
def connected(
    targets: Sequence[T], timeout_ms: int, drop_db: Callable[[T], str | None]
) -> Iterator[None]:
    """Give each target its client for the block (see connect_all); when one cannot be reached,
    the script ends there with status 2 (SystemExit, as for a command-line error). At the end,
    whatever happened, each client is closed, first dropping the database drop_db(target) when
    that is not None (see close)."""
    try:
        if not connect_all(targets, timeout_ms):
            raise SystemExit(2)
        yield
    finally:
        for t in targets:
            close(t, drop_db=drop_db(t))


def record_error(target: Target, name: str, exc: PyMongoError) -> None:
    """Note that step `name` failed; print it the first time only."""
    msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    if name not in target.errors:
        print(f"  ! {target.label} {name}: {msg}", file=sys.stderr, flush=True)
    target.errors[name] = msg


def step(t: Target, name: str, fn: Callable[[], dict[str, float] | None]) -> dict[str, float]:
    """Run one step; a failure is recorded and printed once, not fatal."""
    try:
        return fn() or {}
    except PyMongoError as exc:
        record_error(t, name, exc)
        return {}


def report_failures(targets: Sequence[Target]) -> int:
    """Print the steps that failed, if any; the exit status: 1 if some did, else 0."""
    failed = [f"{t.label}: {name}" for t in targets for name in t.errors]
    if failed:
        print("\nsteps that failed: " + ", ".join(failed))
    return 1 if failed else 0


def close(target: Target, drop_db: str | None) -> None:
    """Close the target's client, first dropping database `drop_db` (if given) when it can."""
    if target.client is None:
        return
    if drop_db is not None:
        with contextlib.suppress(PyMongoError):
            target.client.drop_database(drop_db)
    target.client.close()


def floor_doc(i: int) -> Doc:
    """Document number i in the floor server's shape (without ``_id``): name, email, age, score,
    group = i % 100."""
    return {
        "name": f"user_{i:07d}",
        "email": f"u{i:07d}@example.com",
        "age": i % 90,
        "score": i / 7.0,
        "group": i % 100,
    }


def load(
    tag: str, coll: Any, n: int, make: Callable[[int, int], list[Doc]], batch_size: int
) -> None:
    """Drop the collection and insert `n` documents in insert_many batches of `batch_size`
    (`make(start, count)` builds one), printing progress for large loads and the rate at the end."""
    coll.drop()
    gc.collect()
    report_every = max(1, n // 10)
    next_report = report_every
    t0 = time.perf_counter()
    for start in range(0, n, batch_size):
        coll.insert_many(make(start, min(batch_size, n - start)), ordered=True)
        done = min(n, start + batch_size)
        if n >= 200_000 and done >= next_report and done < n:
            print(f"{tag}: {done:,}/{n:,} loaded, {time.perf_counter() - t0:.1f} s", flush=True)
            next_report += report_every
    secs = time.perf_counter() - t0
    print(
        f"{tag}: loaded {n:,} documents in {secs:.1f} s "
        f"({fmt_num(n / secs if secs else float('nan'))} docs/s, "
        f"insert_many batches of {batch_size:,})",
        flush=True,
    )


def median(values: Sequence[float]) -> float | None:
    """Median of the values that are not NaN; None when there are none."""
    vals = [v for v in values if not math.isnan(v)]
    return statistics.median(vals) if vals else None


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def fmt_num(value: float | None, digits: int = 0) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:,.{digits}f}"


def table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 2) -> None:
    """Print rows under a header and a rule: the first `left` columns left-aligned, the rest
    right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < left else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    print(line(header))
    print("  ".join("-" * w for w in widths))
    for row in rows:
        print(line(row))


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "NOT met")


#: bench/all.py sets this to a file: every script's target rows are appended to it as JSON lines,
#: so that one command can print every figure of the issue in one table.
TARGETS_FILE_ENV = "EBBDB_BENCH_TARGETS"


@dataclass(frozen=True)
class Goal:
    """One target of an issue: `what` was measured (`value` in `unit`; None: not measured),
    against `op` (">=" or "<=") `bound`."""

    what: str
    value: float | None
    op: str
    bound: float
    unit: str = ""

    @property
    def ok(self) -> bool | None:
        if self.value is None:
            return None
        return self.value >= self.bound if self.op == ">=" else self.value <= self.bound


def fmt_goal(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    digits = 2 if abs(value) < 100 else 0
    return f"{value:,.{digits}f}{' ' + unit if unit else ''}"


def report_goals(script: str, goals: Sequence[Goal]) -> None:
    """Print the "==== targets ====" table of `script` (its file name, e.g. "write.py") and, when
    bench/all.py asks (TARGETS_FILE_ENV), append each goal to its file as one JSON line."""
    print()
    print("==== targets ====")
    print()
    rows = [
        [g.what, fmt_goal(g.value, g.unit), f"{g.op} {fmt_goal(g.bound, g.unit)}", verdict(g.ok)]
        for g in goals
    ]
    table(["target", "measured", "target", "verdict"], rows, left=1)
    path = os.environ.get(TARGETS_FILE_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as out:
            for g in goals:
                row = {"script": script, "what": g.what, "value": g.value, "op": g.op}
                row.update(bound=g.bound, unit=g.unit, verdict=verdict(g.ok))
                out.write(json.dumps(row) + "\n")
