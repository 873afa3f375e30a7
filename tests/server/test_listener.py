"""The listener's bounds without sockets: failed accepts are logged at most once per LOG_INTERVAL
(the clock injected), each line counting the failures since the one before; the input budget lets
reservations in while they fit (one alone always), then serves those waiting first come, first
served."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from ebbdb.server import listener
from ebbdb.server.listener import ACCEPT_ERROR_ID, LOG_INTERVAL, RETRY_DELAY, InputBudget

EMFILE = OSError(errno.EMFILE, "Too many open files")


def test_accept_errors_are_logged_once_per_interval_with_the_count_between(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [0.0]
    monkeypatch.setattr(listener, "time", SimpleNamespace(monotonic=lambda: now[0]))
    errors = listener._RateLimitedLog()
    caplog.set_level(logging.WARNING, logger="ebbdb.network")
    # The accept loop's retries, RETRY_DELAY apart, for 2.4 s: 25 failures.
    assert (RETRY_DELAY, LOG_INTERVAL) == (0.1, 1.0)
    for tenths in range(25):
        now[0] = 1000 + tenths / 10
        errors.error(EMFILE)
    lines = [r for r in caplog.records if getattr(r, "event", None) is not None]
    assert [r.event.id for r in lines] == [ACCEPT_ERROR_ID] * 3  # at 1000.0, 1001.0 and 1002.0
    assert [r.event.attr for r in lines] == [
        {"error": "EMFILE: Too many open files"},
        {"error": "EMFILE: Too many open files", "suppressed": 9},
        {"error": "EMFILE: Too many open files", "suppressed": 9},
    ]
    assert [r.getMessage() for r in lines[:2]] == [
        "cannot accept new connections: Too many open files; retrying",
        "cannot accept new connections: Too many open files (9 more since the last report); "
        "retrying",
    ]


def _waiter(budget: InputBudget, name: str, n: int, woken: list[str]) -> Callable[[], bool]:
    """A connection waiting for `n` bytes: what it does when bytes come back."""

    def retry() -> bool:
        if budget.first_in_line(n):
            woken.append(name)
            return True
        return False

    return retry


def test_the_input_budget_lets_in_what_fits_then_first_come_first_served() -> None:
    budget = InputBudget(limit=100)
    assert budget.take(60) and budget.take(40)  # exactly the limit
    assert not budget.take(1)
    woken: list[str] = []
    budget.wait(_waiter(budget, "a", 50, woken))
    budget.wait(_waiter(budget, "b", 10, woken))
    budget.give_back(40)
    assert (woken, budget.used) == ([], 60)  # a's 50 does not fit yet, and b waits behind a
    assert not budget.take(10), "no one overtakes those waiting"
    budget.give_back(60)
    assert (woken, budget.used) == (["a", "b"], 60)
    assert budget.take(40) and not budget.take(1)


def test_one_reservation_alone_may_exceed_the_budget() -> None:
    budget = InputBudget(limit=100)
    assert budget.take(500)  # a single message larger than the budget still gets through
    assert not budget.take(1)
    budget.give_back(500)
    assert budget.used == 0 and budget.take(100)


def test_closing_while_a_connection_is_reported_logs_nothing() -> None:
    """A connection the loop has seen arrive (its accept callback queued) when the listener
    closes: the accept is called off, not run on a cancelled future (asyncio then logged
    InvalidStateError from _sock_accept at shutdown)."""

    async def scenario() -> list[dict[str, object]]:
        loop = asyncio.get_running_loop()
        reported: list[dict[str, object]] = []
        loop.set_exception_handler(lambda _loop, context: reported.append(context))
        server = await listener.listen(asyncio.Protocol, "127.0.0.1", 0, None, False)
        await asyncio.sleep(0)  # the accept loop waits in sock_accept
        port = server.sockets[0].getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        try:
            # This task's next step is queued before the loop's next select, which reports the
            # connection and queues the accept callback behind it: close runs first.
            await asyncio.sleep(0)
            server.close()
            await server.wait_closed()
            await asyncio.sleep(0)
            await asyncio.sleep(0)
        finally:
            client.close()
        return reported

    assert asyncio.run(scenario()) == []
