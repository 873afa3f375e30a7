"""Bounded waits for an event a test cannot be told of (a log line, an operation in currentOp, a
server stopped): poll a probe until it reports the event, and fail if it never does. Imported as
``tests.waiting``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

T = TypeVar("T")

#: How long a wait lasts before it fails. Generous, for a loaded machine: a passing test never
#: waits it out, so it says nothing about how fast the server is.
WAIT_SECONDS = 30.0
#: The pause between two calls of a probe.
EVERY = 0.01


def wait_until(
    probe: Callable[[], T | None],
    what: str,
    *,
    detail: Callable[[], str] | None = None,
    timeout: float = WAIT_SECONDS,
    every: float = EVERY,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], object] = time.sleep,
) -> T:
    """Call `probe` every `every` seconds until it returns something truthy, and return that.

    A bounded wait for an event, not a measurement: it fails only when the event never comes, and
    `timeout` is far longer than the event ever takes. The clock is read before each call, and the
    first call begun at or past the deadline is the last: so the probe always runs once more after
    the deadline, and an event that came while the test was stalled (a loaded machine) counts.
    Raises AssertionError("{what}: not within {timeout} s"), with `detail()` on a line of its own
    after that (state worth showing, such as recent log lines) when it is given. `clock` and
    `sleep` are there for the helper's own tests.
    """
    for last in _tries(timeout, clock):
        if value := probe():
            return value
        if not last:
            sleep(every)
    raise _timed_out(what, timeout, detail)


async def wait_until_async(
    probe: Callable[[], Awaitable[T | None]],
    what: str,
    *,
    detail: Callable[[], str] | None = None,
    timeout: float = WAIT_SECONDS,
    every: float = EVERY,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
) -> T:
    """`wait_until` for a probe that is awaited, such as an AsyncMongoClient's command: the same
    tries, the pauses awaited so the loop runs meanwhile."""
    for last in _tries(timeout, clock):
        if value := await probe():
            return value
        if not last:
            await sleep(every)
    raise _timed_out(what, timeout, detail)


def _tries(timeout: float, clock: Callable[[], float]) -> Iterator[bool]:
    """One item before each call of the probe, whether it is the last one: the clock is read
    before the call, and the first call begun at or past the deadline is the last."""
    deadline = clock() + timeout
    while clock() < deadline:
        yield False
    yield True


def _timed_out(what: str, timeout: float, detail: Callable[[], str] | None) -> AssertionError:
    message = f"{what}: not within {timeout} s"
    return AssertionError(message if detail is None else f"{message}\n{detail()}")
