"""The `ebbdb` process's shutdown watchdog: once a stop begins (SIGTERM, SIGINT, the shutdown
command), the process ends within its grace, whatever still runs: an operation that ignores its
interruption, a stuck event loop, a thread that cannot be joined.

Only the CLI arms one (server/cli.py). An embedded server (ServerThread, the pytest plugin) shares
its process with its host, which nothing of the server's may end."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from ebbdb.server import log as logsetup
from ebbdb.server.startup import EXIT_ABRUPT
from ebbdb.storage.core import portability

log = logging.getLogger("ebbdb.control")

#: The exit status of a shutdown the watchdog ended: mongod's 14, an exit "without performing a
#: clean shutdown" (what its fatal assertions exit with). A stop either ends with 0 or with
#: this; ebbdb's other 14 (server/startup.py) ends a start, before the server listens. Where
#: even the watchdog's thread cannot run (a C call holding the interpreter), the backstop ends
#: the process instead: killed by SIGALRM (status -14, 142 in a shell), on Windows exit status 1.
EXIT_SHUTDOWN_TIMEOUT = EXIT_ABRUPT
#: What the watchdog says when it ends the process (ebbdb's own id), then mongod's last line.
TIMED_OUT_ID = 9_250_002
SHUTTING_DOWN_ID = 23138
#: The end of the grace the watchdog keeps for its last words: a last sync (a commit is safe
#: from a killed process at once, in the page cache; the sync makes it safe from a machine
#: crash too) and the log written out. The process ends at the grace.
LAST_WORDS_SECONDS = 1.0
#: How long after the grace the backstop (storage/core/portability.py) ends the process if the
#: watchdog's own thread never got to run.
BACKSTOP_SECONDS = 1.0


class Watchdog:
    """`start()` it with the server; `arm(seconds)` when a stop begins: from then the process
    lives at most `seconds`, unless `disarm()` (the stop finished) comes first. The first arm
    sets the time; later ones, and any after a disarm, change nothing. Arm and disarm from the
    main thread; arm may be called in a signal handler: it never blocks, logs or starts a thread
    (the main thread may have been stopped holding the lock that starting one takes)."""

    def __init__(
        self,
        exit: Callable[[int], NoReturn] = os._exit,
        backstop: bool = True,
    ) -> None:
        #: Makes every commit so far durable (the engine's sync), once storage is open.
        self.sync: Callable[[], object] | None = None
        self._exit = exit
        self._backstop = backstop
        # A lock taken without waiting is an atomic once-flag: a signal's arm that interrupts
        # another arm on the main thread finds it taken, where a plain flag could be read twice.
        self._once = threading.Lock()
        self._armed = threading.Event()
        self._cancelled = threading.Event()
        self._deadline = 0.0
        self._seconds = 0.0
        self._reason = ""
        self._thread: threading.Thread | None = None

    @property
    def armed(self) -> bool:
        return self._armed.is_set() and not self._cancelled.is_set()

    def start(self) -> None:
        """Start the watchdog's thread, which waits to be armed."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="ebbdb-shutdown-watchdog", daemon=True
            )
            self._thread.start()

    def arm(self, seconds: float, reason: str) -> None:
        """End the process `seconds` from now (with EXIT_SHUTDOWN_TIMEOUT) unless disarmed;
        `reason` (what began the stop) goes in the log line."""
        if not self._once.acquire(blocking=False):
            return
        self._deadline = time.monotonic() + seconds
        self._seconds, self._reason = seconds, reason
        if self._backstop:
            portability.end_process_later(seconds + BACKSTOP_SECONDS)
        self._armed.set()

    def disarm(self) -> None:
        """The stop finished: the process ends as it would have (with its own status)."""
        self._once.acquire(blocking=False)  # no arm from now on
        if self._cancelled.is_set():
            return
        self._cancelled.set()
        if self._armed.is_set() and self._backstop:
            portability.cancel_end_process_later()
        self._armed.set()  # the thread waiting to be armed ends

    def _run(self) -> None:
        # A thread, not the event loop (which may be what is stuck): it gets the interpreter
        # within the switch interval even while another thread spins in Python.
        self._armed.wait()
        left = self._deadline - LAST_WORDS_SECONDS - time.monotonic()
        if self._cancelled.wait(max(0.0, left)):
            return
        words = threading.Thread(
            target=self._last_words,
            args=(self._seconds, self._reason),
            name="ebbdb-shutdown-last-words",
            daemon=True,
        )
        words.start()
        words.join(LAST_WORDS_SECONDS)  # a sync or a log that hangs does not keep the process
        if not self._cancelled.is_set():
            self._exit(EXIT_SHUTDOWN_TIMEOUT)

    def _last_words(self, seconds: float, reason: str) -> None:
        running = _running_threads()
        logsetup.log_event(
            log,
            logging.ERROR,
            TIMED_OUT_ID,
            "Shutdown did not finish in time, exiting without a clean shutdown",
            {"reason": reason, "timeoutSecs": seconds, "threads": running},
            ctx="shutdownWatchdog",
            text=f"shutdown ({reason}) did not finish within {seconds:g} s: exiting without a "
            f"clean shutdown, status {EXIT_SHUTDOWN_TIMEOUT}; still running: "
            + ", ".join(f"{t['name']} at {t['at']}" for t in running),
        )
        if self.sync is not None:
            try:
                self.sync()  # the engine's own lock makes it wait for a sync in progress only
            except Exception as exc:  # closed, or the disk failed: committed data is on its way
                log.warning("the watchdog's last sync failed: %s", exc)
        logsetup.log_event(
            log,
            logging.ERROR,
            SHUTTING_DOWN_ID,
            "Shutting down",
            {"exitCode": EXIT_SHUTDOWN_TIMEOUT},
            ctx="shutdownWatchdog",
            text=f"exiting with status {EXIT_SHUTDOWN_TIMEOUT}",
        )
        _flush_log()


def _running_threads() -> list[dict[str, str]]:
    """Every other thread and where it is (its innermost frame): what the stop waited for."""
    frames = sys._current_frames()
    me = threading.get_ident()
    out = []
    for thread in threading.enumerate():
        if thread.ident is None or thread.ident == me or thread.name.startswith("ebbdb-shutdown"):
            continue
        frame = frames.get(thread.ident)
        at = "?" if frame is None else _where(frame)
        out.append({"name": thread.name, "at": at})
    return out


def _where(frame: Any) -> str:
    code = frame.f_code
    return f"{os.path.basename(code.co_filename)}:{frame.f_lineno} {code.co_name}"


def _flush_log() -> None:
    """Write out what the log's writer threads hold (each waits at most its stop timeout)."""
    for name in ("ebbdb", "asyncio"):
        for handler in list(logging.getLogger(name).handlers):
            if isinstance(handler, logsetup.QueuedHandler):
                handler.stop_timeout = min(handler.stop_timeout, LAST_WORDS_SECONDS / 2)
                handler.close()
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            pass
