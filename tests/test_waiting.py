"""tests/waiting.py's bounded waits, sync and async alike, on a fake clock that moves only when the
wait sleeps (or a probe says it took time): what they return, when they call the probe, and how they
fail."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import pytest

from tests.waiting import EVERY, WAIT_SECONDS, wait_until, wait_until_async


class FakeClock:
    """A monotonic clock that moves only when told to; `sleep` records its pause and moves it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class Probe:
    """A probe that answers from a list, one item a call, and keeps the clock's reading at each."""

    def __init__(self, clock: FakeClock, answers: list[Any], took: float = 0.0) -> None:
        self.clock = clock
        self.answers = answers
        self.took = took
        self.called_at: list[float] = []

    def __call__(self) -> Any:
        self.called_at.append(self.clock.now)
        self.clock.now += self.took
        return self.answers[min(len(self.called_at), len(self.answers)) - 1]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["sync", "async"])
def wait(request: pytest.FixtureRequest, clock: FakeClock) -> Callable[..., Any]:
    """wait_until, or wait_until_async run to its end with the probe and the sleep made awaitable:
    either on the fake clock."""
    if request.param == "sync":
        return functools.partial(wait_until, clock=clock, sleep=clock.sleep)

    def run(probe: Callable[[], Any], what: str, **options: Any) -> Any:
        async def awaited() -> Any:
            return probe()

        async def sleep(seconds: float) -> None:
            clock.sleep(seconds)

        return asyncio.run(wait_until_async(awaited, what, clock=clock, sleep=sleep, **options))

    return run


def test_returns_the_first_truthy_answer_and_calls_no_more(
    wait: Callable[..., Any], clock: FakeClock
) -> None:
    probe = Probe(clock, [None, [], 0, ["found"], ["later"]])
    assert wait(probe, "it", timeout=10, every=1) == ["found"]
    assert probe.called_at == [0, 1, 2, 3]
    assert clock.slept == [1, 1, 1]


def test_an_answer_at_once_does_not_sleep(wait: Callable[..., Any], clock: FakeClock) -> None:
    assert wait(Probe(clock, [7]), "it") == 7
    assert clock.slept == []


def test_never_raises_what_it_waited_for_after_one_call_past_the_deadline(
    wait: Callable[..., Any], clock: FakeClock
) -> None:
    probe = Probe(clock, [False])
    with pytest.raises(AssertionError) as exc:
        wait(probe, "the server stopped", timeout=3, every=1)
    assert str(exc.value) == "the server stopped: not within 3 s"
    # Calls at 0, 1 and 2 are before the deadline; the one at 3 is the last, with no sleep after it.
    assert probe.called_at == [0, 1, 2, 3]
    assert clock.slept == [1, 1, 1]


def test_an_answer_at_the_last_call_past_the_deadline_passes(
    wait: Callable[..., Any], clock: FakeClock
) -> None:
    probe = Probe(clock, [None, None, None, "late"])
    assert wait(probe, "it", timeout=3, every=1) == "late"
    assert probe.called_at == [0, 1, 2, 3]


def test_a_probe_that_outlasts_the_deadline_is_called_once_more(
    wait: Callable[..., Any], clock: FakeClock
) -> None:
    # The first call began before the deadline and ended past it (a stalled test): the call after
    # it is begun past the deadline, so it is the last, and its answer counts.
    probe = Probe(clock, [None, "came meanwhile"], took=5)
    assert wait(probe, "it", timeout=3, every=1) == "came meanwhile"
    assert probe.called_at == [0, 6]
    probe = Probe(clock, [None], took=5)
    with pytest.raises(AssertionError, match="^it: not within 3 s$"):
        wait(probe, "it", timeout=3, every=1)
    assert len(probe.called_at) == 2


def test_a_zero_timeout_calls_the_probe_once(wait: Callable[..., Any], clock: FakeClock) -> None:
    probe = Probe(clock, [None])
    with pytest.raises(AssertionError, match="^it: not within 0 s$"):
        wait(probe, "it", timeout=0)
    assert probe.called_at == [0] and clock.slept == []


def test_detail_follows_the_message_and_is_read_only_on_failure(
    wait: Callable[..., Any], clock: FakeClock
) -> None:
    reads: list[float] = []

    def detail() -> str:
        reads.append(clock.now)
        return "recent lines:\na\nb"

    assert wait(Probe(clock, [None, 1]), "it", detail=detail, every=1) == 1
    assert reads == []
    with pytest.raises(AssertionError) as exc:
        wait(Probe(clock, [None]), "a log line", detail=detail, timeout=2, every=1)
    assert str(exc.value) == "a log line: not within 2 s\nrecent lines:\na\nb"
    assert len(reads) == 1


def test_the_defaults(wait: Callable[..., Any], clock: FakeClock) -> None:
    with pytest.raises(AssertionError) as exc:
        wait(Probe(clock, [None]), "it")
    assert str(exc.value) == f"it: not within {WAIT_SECONDS} s"
    assert set(clock.slept) == {EVERY}
    assert clock.now >= WAIT_SECONDS


def test_the_real_clock_and_sleep_by_default() -> None:
    answers = iter([None, "ok"])
    assert wait_until(lambda: next(answers), "it") == "ok"

    async def probe() -> str | None:
        return next(async_answers)

    async_answers = iter([None, "ok"])
    assert asyncio.run(wait_until_async(probe, "it")) == "ok"
