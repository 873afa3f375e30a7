"""The `ebbdb` command: parse the command line (and --config), run the server until SIGINT,
SIGTERM or the shutdown command. An --ephemeral server's data directory goes with it, whichever
way it stops."""

from __future__ import annotations

import asyncio
import gc
import logging
import sys

from ebbdb.server.app import App
from ebbdb.server.config import Config, parse_args
from ebbdb.server.log import LogFileError
from ebbdb.server.tls import TLSConfigError
from ebbdb.server.version import EBBDB_VERSION
from ebbdb.storage.core import portability
from ebbdb.storage.engine.store import DataDirLocked

log = logging.getLogger("ebbdb.control")

#: mongod's exit codes for a data directory in use, an address in use, and a --logpath it cannot
#: open (its generic EXIT_FAILURE).
EXIT_DBPATH_IN_USE = 100
EXIT_ADDRESS_IN_USE = 48
EXIT_LOGPATH_FAILURE = 1
#: mongod's EXIT_BADOPTIONS, for TLS files it cannot use.
EXIT_BAD_OPTIONS = 2


#: Seconds (see serve()); Python's default is 0.005.
SWITCH_INTERVAL = 0.001


async def serve(config: Config) -> int:
    app = App(config)
    loop = asyncio.get_running_loop()
    signals = portability.on_stop_signals(loop, app.stop_requested.set)
    try:
        await app.start()
    except DataDirLocked as exc:
        print(f"ebbdb: {exc}", file=sys.stderr)
        return EXIT_DBPATH_IN_USE
    except LogFileError as exc:
        print(f"ebbdb: {exc}", file=sys.stderr)
        return EXIT_LOGPATH_FAILURE
    except TLSConfigError as exc:
        print(f"ebbdb: {exc}", file=sys.stderr)
        return EXIT_BAD_OPTIONS
    except OSError as exc:
        # A socket's path when the Unix domain socket failed, else the TCP addresses.
        where = exc.filename or f"{','.join(config.hosts)}:{config.port}"
        print(
            f"ebbdb: cannot listen on {where}: {exc.strerror or exc}",
            file=sys.stderr,
        )
        return EXIT_ADDRESS_IN_USE
    assert app.address is not None
    log.debug("platform facilities: %s", {**portability.facilities(), "signals": signals})
    # Everything made so far (modules, the command registry, the catalog: some 40,000 objects)
    # lives as long as the process: out of the cyclic collector's reach, a full collection no
    # longer walks it, which took ~50 ms holding the interpreter (every client waited).
    gc.freeze()
    # The event loop shares the interpreter with the reader and writer threads. A thread that
    # wants the interpreter waits up to this interval before the running one must hand it over:
    # at Python's default 5 ms, a ping needing a few handovers while a reader thread scans waits
    # 10-20 ms; at 1 ms the loop gets its turn within about a millisecond each time.
    sys.setswitchinterval(SWITCH_INTERVAL)
    replica_set = app.services.replica_set
    print(
        f"ebbdb {EBBDB_VERSION} listening on {app.address[0]}:{app.address[1]} "
        + (f"and {app.unix_socket} " if app.unix_socket is not None else "")
        + f"dbpath={app.config.dbpath}"
        + (" (ephemeral)" if config.ephemeral else "")
        + (
            ""
            if replica_set is None
            else f" replSet={replica_set.name} (primary, member {replica_set.host})"
        ),
        flush=True,
    )
    await app.stop_requested.wait()  # a signal, or the shutdown command
    await app.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    config = parse_args(sys.argv[1:] if argv is None else argv)
    portability.ignore_file_size_signal()  # a write past `ulimit -f` fails (EFBIG), not kills
    try:
        import uvloop
    except ImportError:
        return asyncio.run(serve(config))
    return int(uvloop.run(serve(config)))


if __name__ == "__main__":
    sys.exit(main())
