"""Command line and configuration, in mongod's spelling."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from server.parameters import parse_startup
from server.version import EBBDB_VERSION, MONGODB_VERSION

DEFAULT_PORT = 27017
DEFAULT_DBPATH = "./ebbdb-data"


@dataclass(frozen=True)
class Config:
    port: int = DEFAULT_PORT
    bind_ip: tuple[str, ...] = ("127.0.0.1",)
    dbpath: str = DEFAULT_DBPATH
    parameters: dict[str, Any] = field(default_factory=dict)
    quiet: bool = False
    argv: tuple[str, ...] = ()
    #: --logpath: the log goes to this file instead of stderr.
    logpath: str | None = None
    #: --logappend: append to an existing --logpath instead of renaming it aside.
    logappend: bool = False

    def parsed(self) -> dict[str, Any]:
        """The `parsed` section of getCmdLineOpts."""
        out: dict[str, Any] = {
            "net": {"bindIp": ",".join(self.bind_ip), "port": self.port},
            "storage": {"dbPath": self.dbpath},
        }
        if self.parameters:
            out["setParameter"] = {k: str(v) for k, v in self.parameters.items()}
        system_log: dict[str, Any] = {}
        if self.logpath is not None:
            system_log["destination"] = "file"
            if self.logappend:
                system_log["logAppend"] = True
            system_log["path"] = self.logpath
        if self.quiet:
            system_log["quiet"] = True
        if system_log:
            out["systemLog"] = system_log
        return out


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 0 and 65535, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ebbdb",
        description="ebbdb: a MongoDB-compatible database server on LMDB.",
    )
    p.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"port to listen on (default {DEFAULT_PORT}; 0 picks a free port)",
    )
    p.add_argument(
        "--bind_ip",
        default="127.0.0.1",
        help="comma-separated addresses to listen on (default 127.0.0.1)",
    )
    p.add_argument(
        "--bind_ip_all",
        action="store_true",
        help="listen on all IPv4 addresses (and all IPv6 ones with --ipv6), as mongod does",
    )
    p.add_argument("--ipv6", action="store_true", help="with --bind_ip_all, listen on :: too")
    p.add_argument(
        "--dbpath",
        default=DEFAULT_DBPATH,
        help=f"data directory, created if missing (default {DEFAULT_DBPATH})",
    )
    p.add_argument(
        "--setParameter",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="set a server parameter (repeatable)",
    )
    p.add_argument("--quiet", action="store_true", help="log less (no connection events)")
    p.add_argument(
        "--logpath",
        metavar="FILE",
        help="log to FILE instead of stderr; an existing FILE is first renamed to "
        "FILE.<UTC time> unless --logappend is given",
    )
    p.add_argument("--logappend", action="store_true", help="append to an existing --logpath file")
    p.add_argument(
        "--syncdelay",
        metavar="SECONDS",
        help="sync data to disk at least this often (mongod's; the journalCommitInterval "
        "parameter, 100 ms by default, is the usual bound)",
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"ebbdb {EBBDB_VERSION} (MongoDB {MONGODB_VERSION} compatible)",
    )
    return p


def parse_args(argv: list[str]) -> Config:
    """Parse a command line (without the program name). Exits with status 2 on bad input."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    pairs = list(ns.setParameter)
    if ns.syncdelay is not None:
        pairs.append(f"syncdelay={ns.syncdelay}")
    try:
        params = parse_startup(pairs)
    except ValueError as exc:
        parser.error(str(exc))
    if ns.bind_ip_all:
        # mongod's rule: 0.0.0.0, and :: only with --ipv6 (a host without IPv6 still starts).
        bind: tuple[str, ...] = ("0.0.0.0", "::") if ns.ipv6 else ("0.0.0.0",)
    else:
        bind = tuple(part.strip() for part in ns.bind_ip.split(",") if part.strip())
        if not bind:
            parser.error("--bind_ip needs at least one address")
    if ns.logpath is not None and not ns.logpath:
        parser.error("--logpath needs a file name")
    return Config(
        port=ns.port,
        bind_ip=bind,
        dbpath=ns.dbpath,
        parameters=params,
        quiet=ns.quiet,
        argv=("ebbdb", *argv),
        logpath=ns.logpath,
        logappend=ns.logappend,
    )
