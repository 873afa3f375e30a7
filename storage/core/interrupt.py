"""Interrupting an operation: one token per operation, checked inside every long loop.

The server gives each request an `OpToken` (a deadline from `maxTimeMS`, a kill flag that killOp
and shutdown set) and makes it the `current` one while the request runs: on the event loop
through the request's context, on a reader thread or the writer thread through the job that
carries it. Storage loops call `checkpoint()` (long-lived generators, which may be resumed by a
later request) or hold `current.get()` and call its `tick()` (a loop inside one call). A tick
is a counter: the clock is read once every CHECK_EVERY ticks, so the hot path stays a decrement.

The kill flag is one attribute assignment, atomic under the interpreter lock: a loop on any
thread sees it at its next check.
"""

from __future__ import annotations

import contextvars
import time

from ebbdb.storage.core.memory import UNLIMITED, Pool, Tracker

#: Ticks between two looks at the clock and the kill flag.
CHECK_EVERY = 128

#: MongoDB's messages for the interruptions it reports, by codeName.
MESSAGES = {
    "MaxTimeMSExpired": "operation exceeded time limit",
    "Interrupted": "operation was interrupted",
    "InterruptedAtShutdown": "interrupted at shutdown",
}


class Interrupted(BaseException):
    """An operation was stopped: its time ran out (MaxTimeMSExpired), it was killed
    (Interrupted) or the server is shutting down (InterruptedAtShutdown). A BaseException, so
    that no `except Exception` on the way (a statement's error handling, an expression's) takes
    it for an ordinary failure: it ends the whole operation, as MongoDB's interruptions do."""

    def __init__(self, code_name: str) -> None:
        super().__init__(MESSAGES[code_name])
        self.code_name = code_name
        self.message = MESSAGES[code_name]


class OpToken:
    """One operation's interruption state: `deadline` (time.monotonic(); None: no limit) and
    `killed` (the codeName it was killed with; None: not killed)."""

    __slots__ = ("_left", "_memory", "deadline", "killed", "pool", "scripting")

    def __init__(self, deadline: float | None = None, pool: Pool = UNLIMITED) -> None:
        self.deadline = deadline
        self.killed: str | None = None
        self._left = CHECK_EVERY
        #: The server's memory for operations, which this operation's memory is charged to.
        self.pool = pool
        self._memory: Tracker | None = None
        #: Whether the operation may run server-side JavaScript (mongod's --noscripting: no).
        self.scripting = True

    @property
    def memory(self) -> Tracker:
        """What this operation holds (storage/core/memory.py): its stages' trackers are made
        with `memory.child(...)`. Made at first use: most operations never hold anything."""
        memory = self._memory
        if memory is None:
            memory = self._memory = Tracker("operation", self.pool)
        return memory

    def kill(self, code_name: str = "Interrupted") -> None:
        if self.killed is None:
            self.killed = code_name

    def check(self) -> None:
        """Raise Interrupted if the operation was killed or its time is up."""
        if self.killed is not None:
            raise Interrupted(self.killed)
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise Interrupted("MaxTimeMSExpired")

    def tick(self) -> None:
        """Count one step of a loop; every CHECK_EVERY steps, `check`."""
        self._left -= 1
        if self._left <= 0:
            self._left = CHECK_EVERY
            self.check()


#: The token of work no operation owns (storage tests, start-up): never interrupted.
NEVER = OpToken()

#: The token of the operation running in this context.
current: contextvars.ContextVar[OpToken] = contextvars.ContextVar("ebbdb_op", default=NEVER)


def checkpoint() -> None:
    """A step of a loop that may outlive the request that started it (a cursor's generators):
    counts it against the token of the operation running now."""
    current.get().tick()


__all__ = ["NEVER", "Interrupted", "OpToken", "checkpoint", "current"]
