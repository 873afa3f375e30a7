"""The Docker image's HEALTHCHECK: `python -m ebbdb.server.healthcheck` pings the server running
in the container, on the port, address and TLS mode it was started with. It reads the server's
command line from /proc/<pid>/cmdline (PID 1, the image's exec-form ENTRYPOINT; under `docker run
--init` the ebbdb process found in /proc), parses it as the server does (--config file included),
and exits 0 when the server answers, 1 (Docker's "unhealthy") on anything else.

/proc and PID 1 are the container's (Linux) contract; storage/core/portability.py reads them."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from pymongo import MongoClient

from ebbdb.server.config import Config, parse_args
from ebbdb.storage.core.portability import process_command_line, process_ids

#: Under Docker's --timeout (5 s), with room for the interpreter's start on a busy machine.
TIMEOUT_MS = 2000
_PROGRAMS = ("ebbdb", "ebbdb.exe")
_MODULES = ("ebbdb", "ebbdb.server.cli")


def server_arguments(cmdline: list[str]) -> list[str]:
    """The server's own arguments in a process's command line: what follows the `ebbdb` console
    script (run directly, or as `python [options] /usr/local/bin/ebbdb ...`) or `python -m ebbdb`.
    Raises ValueError when the process is not ebbdb."""
    if cmdline and os.path.basename(cmdline[0]) in _PROGRAMS:
        return cmdline[1:]
    i = 1
    while i < len(cmdline) and cmdline[i].startswith("-"):  # the interpreter's own options
        if cmdline[i] == "-m":
            if i + 1 < len(cmdline) and cmdline[i + 1] in _MODULES:
                return cmdline[i + 2 :]
            break
        i += 2 if cmdline[i] in ("-X", "-W") else 1
    else:
        if i < len(cmdline) and os.path.basename(cmdline[i]) in _PROGRAMS:
            return cmdline[i + 1 :]
    raise ValueError(f"not an ebbdb server: {' '.join(cmdline)!r}")


def find_server() -> list[str]:
    """The server's arguments: PID 1's, or (PID 1 being an init) those of the first ebbdb process
    in /proc. Raises ValueError when there is none."""
    try:
        return server_arguments(process_command_line(1))
    except (OSError, ValueError):
        pass
    for pid in process_ids():
        if pid in (1, os.getpid()):
            continue
        try:
            return server_arguments(process_command_line(pid))
        except (OSError, ValueError):
            continue
    raise ValueError("no ebbdb process found in /proc")


def _host(config: Config) -> str:
    """An address the server listens on, reachable from inside its container."""
    for address in config.bind_ip:
        if address in ("0.0.0.0", "127.0.0.1", "localhost"):
            return "127.0.0.1"
    for address in config.bind_ip:
        if address in ("::", "::1"):
            return "::1"
    return config.bind_ip[0]


def client_options(config: Config) -> dict[str, Any]:
    """pymongo options for pinging the server `config` describes. TLS when the server requires it
    (allowTLS and preferTLS take plain connections too). The certificate is not checked: the check
    asks whether this machine's server answers, not who it is. Where the server asks clients for a
    certificate (--tlsCAFile without --tlsAllowConnectionsWithoutCertificates), the check shows
    the server's own, which its CA signed (it must allow client authentication: extendedKeyUsage
    clientAuth, or none)."""
    options: dict[str, Any] = {
        "directConnection": True,
        "serverSelectionTimeoutMS": TIMEOUT_MS,
        "connectTimeoutMS": TIMEOUT_MS,
        "socketTimeoutMS": TIMEOUT_MS,
    }
    tls = config.tls
    if tls.mode == "requireTLS":
        options["tls"] = True
        options["tlsAllowInvalidCertificates"] = True
        if tls.ca_file is not None and not tls.allow_connections_without_certificates:
            options["tlsCertificateKeyFile"] = tls.certificate_key_file
            if tls.certificate_key_file_password is not None:
                options["tlsCertificateKeyFilePassword"] = tls.certificate_key_file_password
    return options


def check(pid: int | None) -> None:
    """Ping the ebbdb server whose process is `pid` (None: find it); raises on any failure."""
    args = find_server() if pid is None else server_arguments(process_command_line(pid))
    # The root user variables are the server's business, not the check's (ping needs no login).
    config = parse_args(args, environ={})
    with MongoClient(_host(config), config.port, **client_options(config)) as client:
        client.admin.command("ping")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ebbdb.server.healthcheck",
        description="Ping the ebbdb server of process PID (the container's PID 1) on its port "
        "and in its TLS mode; exit 0 if it answers, 1 if not.",
    )
    parser.add_argument(
        "--pid", type=int, default=None, help="the server's process id (default: PID 1, or found)"
    )
    ns = parser.parse_args(argv)
    try:
        check(ns.pid)
    except SystemExit as exc:  # the server's own argument parser refused its command line
        print(
            f"ebbdb health check: cannot read the server's options (exit {exc.code})",
            file=sys.stderr,
        )
        return 1
    except Exception as exc:
        print(f"ebbdb health check: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
