"""What the bench/ scripts (crud.py, query.py) share: naming targets, talking to them, reporting.

This module owns the command-line plumbing common to every benchmark: the ``[LABEL=]URI``
target syntax and its checks (well-formed URI, unique labels), the ``targets``/``--rounds``/
``--quick`` arguments, the base ``Target`` record (label, URI, client, failed steps), the
single-connection client, recording a failing step once, the floor server's document shape,
the NaN-aware median, and the lines every script prints the same way (the version banner,
"cannot reach", "steps that failed"). Each script keeps its own configuration, measurements
and report layout.

The scripts are run as ``python bench/<name>.py ...``, so Python puts this folder first on
``sys.path`` and they import this module as plain ``common``.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import platform
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pymongo
from pymongo import MongoClient
from pymongo.errors import PyMongoError

Doc = dict[str, Any]
Client = MongoClient[Doc]

_LABELLED = re.compile(r"^(?P<label>[A-Za-z0-9_.\-]+)=(?P<uri>mongodb(?:\+srv)?://.*)$")


@dataclass
class Target:
    """One server under test; the scripts subclass it to add their measurements."""

    label: str
    uri: str
    client: Client | None = None
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


def make_parser(description: str, epilog: str, quick_help: str) -> argparse.ArgumentParser:
    """A parser with the arguments every script takes: targets, --rounds, --quick, --timeout-ms."""
    ap = argparse.ArgumentParser(
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=epilog,
    )
    ap.add_argument("targets", nargs="+", metavar="[LABEL=]URI", help="MongoDB URI(s)")
    ap.add_argument("--rounds", type=int, default=None, help="rounds per target (default 3)")
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--timeout-ms", type=int, default=5000, help="connect timeout (5000)")
    return ap


def picker(quick: bool) -> Callable[[int | None, int, int], int]:
    """pick(value, full, quick): the value given on the command line, else the default for
    a full or a --quick run."""

    def pick(value: int | None, full: int, quick_value: int) -> int:
        return value if value is not None else (quick_value if quick else full)

    return pick


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


def record_error(target: Target, name: str, exc: PyMongoError) -> None:
    """Note that step `name` failed; print it the first time only."""
    msg = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    if name not in target.errors:
        print(f"  ! {target.label} {name}: {msg}", file=sys.stderr, flush=True)
    target.errors[name] = msg


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


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("met" if ok else "MISSED")
