"""The `ebbdb` command: parse the command line (and --config), run the server until SIGINT,
SIGTERM or the shutdown command. An --ephemeral server's data directory goes with it, whichever
way it stops. Once a stop begins, the shutdown watchdog (server/shutdown.py) sees that the process
ends within the grace: with 0 after a clean shutdown, else with EXIT_SHUTDOWN_TIMEOUT (14)."""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import sys
from collections.abc import Callable

from ebbdb.server.app import SHUTDOWN_GRACE_SECONDS, App
from ebbdb.server.config import Config, parse_args
from ebbdb.server.log import LogFileError
from ebbdb.server.shutdown import Watchdog
from ebbdb.server.startup import EXIT_UNCAUGHT, StartupError
from ebbdb.server.tls import TLSConfigError
from ebbdb.server.version import EBBDB_VERSION
from ebbdb.storage.core import portability

log = logging.getLogger("ebbdb.control")

#: mongod's exit codes for a --logpath it cannot open (its generic EXIT_FAILURE) and for bad
#: options (EXIT_BADOPTIONS: TLS files it cannot use, too); the others are server/startup.py's.
EXIT_LOGPATH_FAILURE = 1
EXIT_BAD_OPTIONS = 2
#: A data directory another server has (mongod's DBPathInUse ends the start with 100).
EXIT_DBPATH_IN_USE = EXIT_UNCAUGHT


#: Seconds (see serve()); Python's default is 0.005.
SWITCH_INTERVAL = 0.001


async def serve(
    config: Config, ready: Callable[[], None] | None = None, watchdog: Watchdog | None = None
) -> int:
    """Run the server until it is asked to stop; `ready` (with --fork) is called once it
    listens and has said so. `watchdog` (the CLI's) is armed when a stop begins."""
    app = App(config)
    loop = asyncio.get_running_loop()
    # Armed in the signal's handler itself, which runs even while the loop is stuck.
    at_once = (
        None
        if watchdog is None
        else functools.partial(watchdog.arm, SHUTDOWN_GRACE_SECONDS, "signal")
    )
    signals = portability.on_stop_signals(loop, app.stop_requested.set, at_once)
    try:
        await app.start()
    except StartupError as exc:
        print(f"ebbdb: {exc}", file=sys.stderr)
        return exc.exit
    except LogFileError as exc:
        print(f"ebbdb: {exc}", file=sys.stderr)
        return EXIT_LOGPATH_FAILURE
    except TLSConfigError as exc:
        print(f"ebbdb: {exc}", file=sys.stderr)
        return EXIT_BAD_OPTIONS
    except OSError as exc:
        # Anything else of the system's while starting (no longer called a listen error):
        # mongod ends a start that throws with 100.
        print(f"ebbdb: UnknownError: {exc}", file=sys.stderr)
        return EXIT_UNCAUGHT
    assert app.address is not None
    if watchdog is not None:
        watchdog.sync = app.engine.sync  # its last words make every commit durable
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
    if ready is not None:
        ready()  # --fork: the foreground process exits now
    await app.stop_requested.wait()  # a signal, or the shutdown command
    if watchdog is not None:
        # The shutdown command's (a signal armed it already): at least the signals' grace, so
        # that even {force: true} leaves storage time to close.
        watchdog.arm(max(SHUTDOWN_GRACE_SECONDS, app.shutdown_grace), "shutdown command")
    await app.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    config = parse_args(sys.argv[1:] if argv is None else argv)
    # --fork before anything starts a thread or a loop (the foreground process never returns).
    ready = portability.daemonize() if config.fork else None
    portability.ignore_file_size_signal()  # a write past `ulimit -f` fails (EFBIG), not kills
    watchdog = Watchdog()
    watchdog.start()
    try:
        try:
            import uvloop
        except ImportError:
            return asyncio.run(serve(config, ready, watchdog))
        return int(uvloop.run(serve(config, ready, watchdog)))
    finally:
        # After the loop's own end (it joins its executor's threads): a stop that got this far
        # finished, and the process ends as it always has.
        watchdog.disarm()


if __name__ == "__main__":
    sys.exit(main())
