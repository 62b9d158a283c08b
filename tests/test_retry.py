"""retry.retrying and Backoff on an autojump clock: the waits between attempts
are the backoff's (or longer, when the other side asks), reset after a
success, never taken for a bug, and cancellable. No real time passes."""

from __future__ import annotations

import logging
from functools import partial

import pytest
import trio
from trio.testing import MockClock

from quart_mesh.errors import Transient, Unavailable
from quart_mesh.faults import PEER_DOWN, STORE_UNAVAILABLE, Faults, KnownFault
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


class Reported(Unavailable, KnownFault):
    """A failure the store reported already (as ``database.StoreFault``)."""

    fault_kind = STORE_UNAVAILABLE


async def test_a_loop_with_a_fault_reports_it_once_and_ends_it_on_success(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    faults = Faults(clock=trio.current_time, logger=logging.getLogger("tests.retry.faults"))
    caplog.set_level(logging.DEBUG)
    attempt = Flaky(*[Transient("the peer answered 502")] * 6)
    failures: list[str] = []
    await retrying(
        "relay link c1",
        attempt,
        backoff=Backoff(0.5, 4, jitter=0),
        on_failure=lambda error, _wait: failures.append(str(error)),
        fault=(faults, PEER_DOWN, "c1"),
    )
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]
    assert said == [
        "fault started: a federation peer is down (c1): relay link c1: the peer answered 502",
        "fault ended: a federation peer is down (c1), after 15.5 s and 6 failure(s)",
    ]
    assert len(failures) == 6  # the loop's own status still counts each one
    assert faults.failures()[PEER_DOWN] == 6
    assert faults.active() == []


async def test_a_loop_that_never_returns_ends_its_fault_when_it_resets(
    autojump_clock: MockClock,
) -> None:
    """A link never returns: its progress (``Backoff.reset``) ends the fault."""
    faults = Faults(clock=trio.current_time)
    backoff = Backoff(1, 1, jitter=0)
    progress = trio.Event()

    async def link() -> None:
        if backoff.failures < 2:
            raise Transient("down")
        backoff.reset()
        progress.set()
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(retrying, "link", link, backoff=backoff, fault=(faults, PEER_DOWN, "c1"))
        )
        await trio.sleep(1.5)
        assert faults.is_active(PEER_DOWN, "c1")
        await progress.wait()
        assert not faults.is_active(PEER_DOWN, "c1")
        nursery.cancel_scope.cancel()


async def test_what_the_store_reported_is_not_logged_again(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    faults = Faults(clock=trio.current_time)
    caplog.set_level(logging.DEBUG)
    attempt = Flaky(Reported("the storage backend is unavailable"), Transient("the peer is down"))
    await retrying(
        "relay link c1", attempt, backoff=Backoff(1, 1, jitter=0), fault=(faults, PEER_DOWN, "c1")
    )
    # the store's failure is the store's fault, not the peer's: only the second counts
    assert faults.failures()[PEER_DOWN] == 1
    # a loop without a fault: the store's failures at debug only, no "recovered"
    caplog.clear()
    quick = Backoff(0.5, 1, jitter=0)
    await retrying("saving read positions", Flaky(Reported("unavailable")), backoff=quick)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []
    # and any other transient failure as ever: a warning each, then "recovered"
    await retrying("saving read positions", Flaky(Unavailable("busy")), backoff=quick)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == [
        "saving read positions failed (busy); retrying in 0.5 s",
        "saving read positions recovered after 1 failed attempt(s)",
    ]
