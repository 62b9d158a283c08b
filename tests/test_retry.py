"""retry.retrying and Backoff on an autojump clock: the waits between attempts
are the backoff's (or longer, when the other side asks), reset after a
success, never taken for a bug, and cancellable. No real time passes."""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock

from quart_mesh.errors import Transient, Unavailable
from quart_mesh.retry import Backoff, retrying

pytestmark = [pytest.mark.timeout(10), pytest.mark.store_free]


class Flaky:
    """An attempt that fails with *faults* in turn, then returns "done";
    records the (Trio) time of every call."""

    def __init__(self, *faults: Exception) -> None:
        self.faults = list(faults)
        self.calls: list[float] = []

    async def __call__(self) -> str:
        self.calls.append(trio.current_time())
        if self.faults:
            raise self.faults.pop(0)
        return "done"

    def waits(self) -> list[float]:
        return [round(b - a, 6) for a, b in zip(self.calls, self.calls[1:], strict=False)]


async def test_the_waits_double_up_to_the_cap(autojump_clock: MockClock) -> None:
    attempt = Flaky(*[Transient("down")] * 5, Unavailable("busy"))
    backoff = Backoff(0.5, 4, jitter=0)
    assert await retrying("testing", attempt, backoff=backoff) == "done"
    assert attempt.waits() == [0.5, 1, 2, 4, 4, 4]
    # a success resets it: the next failure waits the first delay again
    attempt = Flaky(Transient("down again"))
    await retrying("testing", attempt, backoff=backoff)
    assert attempt.waits() == [0.5]


async def test_a_fault_may_ask_for_a_longer_wait(autojump_clock: MockClock) -> None:
    attempt = Flaky(Transient("429", after=7), Transient("429", after=0.1))
    failures: list[tuple[str, float]] = []
    await retrying(
        "testing",
        attempt,
        backoff=Backoff(1, 10, jitter=0),
        on_failure=lambda error, wait: failures.append((str(error), wait)),
    )
    assert attempt.waits() == [7, 2]  # the longer of the two, each time
    assert failures == [("429", 7), ("429", 2)]


async def test_jitter_stays_within_its_bounds(autojump_clock: MockClock) -> None:
    backoff = Backoff(1, 1, jitter=0.2)
    delays = [backoff.next() for _ in range(200)]
    assert all(0.8 <= d <= 1.2 for d in delays)
    assert len(set(delays)) > 1  # they do differ: loops failing together spread out


async def test_a_bug_is_raised_at_once(autojump_clock: MockClock) -> None:
    attempt = Flaky(ValueError("a bug"))
    start = trio.current_time()
    with pytest.raises(ValueError, match="a bug"):
        await retrying("testing", attempt)
    assert attempt.calls == [start]


async def test_cancelling_stops_the_retries(autojump_clock: MockClock) -> None:
    attempt = Flaky(*[Transient("down")] * 100)
    with trio.move_on_after(10) as scope:
        await retrying("testing", attempt, backoff=Backoff(1, 60, jitter=0))
    assert scope.cancelled_caught
    assert attempt.waits() == [1, 2, 4]  # at 0, 1, 3 and 7 s; the next would be at 15


def test_bad_backoffs_are_refused() -> None:
    for first, cap in ((0, 1), (2, 1), (-1, 5)):
        with pytest.raises(ValueError, match="0 < first <= cap"):
            Backoff(first, cap)
