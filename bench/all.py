"""Every benchmark of issue 23 in one command, and one table of every target they report.

    python bench/all.py [--quick] [--only SCRIPT ...] [--timeout SECONDS]

Runs, one after another, each script of SCRIPTS (each starts what it needs: ebbdb, the floor),
passing --quick down, with EBBDB_BENCH_TARGETS naming a temporary file: each script's
common.report_goals appends its target rows there. Their own output goes by as they run. Then it
prints the machine (CPU model, cores, operating system, Python) and one table of every row:
script, what was measured, the figure, the target, met / NOT met. A script that is not in this
checkout is "not run"; one that fails or outlasts --timeout says so, with the rows it reported
before. Nothing is asserted; the exit status is 1 only when a script failed to run to its end.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import common

HERE = Path(__file__).resolve().parent
#: The benchmarks of issue 23, in the order they run, with what each measures.
SCRIPTS: tuple[tuple[str, str], ...] = (
    ("write.py", "one-document commands, insert_many, iterate, bulk_write against the floor"),
    ("long_write.py", "insert_one from 4 clients while a fifth loops update_many"),
    ("fairness.py", "another client's pings while one client sends heavy requests"),
    ("ttl.py", "TTL purge throughput, another client's find_one latency during it"),
    ("index_build.py", "createIndex over 1,000,000 documents"),
    ("unix_socket.py", "the Unix domain socket against TCP"),
)


@dataclass
class Outcome:
    """How one script's run went: "ran", "failed (exit N)", "timed out", "not run"."""

    script: str
    status: str
    seconds: float = 0.0


def machine() -> dict[str, str]:
    """The machine the figures were taken on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass  # not Linux: platform's word for it
    return {
        "CPU": cpu,
        "cores": str(os.cpu_count() or "?"),
        "OS": platform.platform(),
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
    }


def commit() -> str:
    """The checkout's commit (with "+ changes" when the work tree differs), or "?"."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=HERE,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "?"
    return (head or "?") + (" + changes" if dirty else "")


def run(script: str, quick: bool, timeout: float | None, env: dict[str, str]) -> Outcome:
    path = HERE / script
    if not path.is_file():
        return Outcome(script, "not run (not in this checkout)")
    cmd = [sys.executable, str(path), *(["--quick"] if quick else [])]
    print(f"\n######## {' '.join([Path(cmd[0]).name, *cmd[1:]])}\n", flush=True)
    start = time.monotonic()
    try:
        code = subprocess.run(cmd, cwd=HERE.parent, env=env, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return Outcome(script, f"timed out after {timeout:g} s", time.monotonic() - start)
    status = "ran" if code == 0 else f"failed (exit {code})"
    return Outcome(script, status, time.monotonic() - start)


def read_rows(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))
    return rows


def report(outcomes: list[Outcome], rows: list[dict[str, Any]], quick: bool) -> None:
    print()
    print(f"==== all targets{' (--quick: smoke figures)' if quick else ''} ====")
    print()
    for key, value in machine().items():
        print(f"{key + ':':8} {value}")
    print(f"{'date:':8} {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"{'commit:':8} {commit()}")
    print()
    table: list[list[str]] = []
    for outcome in outcomes:
        mine = [r for r in rows if r["script"] == outcome.script]
        for r in mine:
            unit = r.get("unit", "")
            table.append(
                [
                    outcome.script,
                    r["what"],
                    common.fmt_goal(r["value"], unit),
                    f"{r['op']} {common.fmt_goal(r['bound'], unit)}",
                    r["verdict"],
                ]
            )
        if outcome.status != "ran" or not mine:
            status = outcome.status if outcome.status != "ran" else "ran (no targets reported)"
            table.append([outcome.script, status, "-", "-", "-"])
    common.table(["script", "what", "measured", "target", "verdict"], table, left=2)
    met = sum(r["verdict"] == "met" for r in rows)
    print()
    print(
        f"{met} of {len(rows)} targets met; "
        + ", ".join(f"{o.script} {o.status} ({o.seconds:.0f} s)" for o in outcomes if o.seconds)
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="pass --quick to every script")
    parser.add_argument(
        "--only",
        action="append",
        choices=[s for s, _ in SCRIPTS],
        metavar="SCRIPT",
        help="run this script only (repeatable)",
    )
    parser.add_argument(
        "--timeout", type=float, default=None, help="stop a script after this many seconds"
    )
    args = parser.parse_args(argv)
    chosen = [s for s, _ in SCRIPTS if not args.only or s in args.only]
    print(f"all.py: {common.versions()}; {', '.join(chosen)}{' --quick' if args.quick else ''}")
    with tempfile.TemporaryDirectory(prefix="ebbdb-bench-all-") as tmp:
        targets = Path(tmp) / "targets.jsonl"
        targets.touch()
        env = {**os.environ, common.TARGETS_FILE_ENV: str(targets)}
        outcomes = [run(script, args.quick, args.timeout, env) for script in chosen]
        rows = read_rows(targets)
    report(outcomes, rows, args.quick)
    return 1 if any(o.status.startswith(("failed", "timed out")) for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
