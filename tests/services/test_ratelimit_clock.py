"""The rate limiter on its default clock, Trio's: a limit recovers when Trio's
time has passed, so tests (and the e2e tests that serve the node in-process)
wait for it with an autojump clock or a MockClock jump instead of sleeping."""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock

from quart_mesh.config import Rate, RateLimits
from quart_mesh.errors import RateLimited
from quart_mesh.services.authz import Actor
from quart_mesh.services.ratelimit import RateLimiter

pytestmark = [pytest.mark.timeout(10), pytest.mark.store_free]


def actor(participant_id: str = "p1") -> Actor:
    return Actor(participant_id, participant_id, "human", "human", "member")


async def test_a_limit_recovers_on_trios_clock(autojump_clock: MockClock) -> None:
    rates = RateLimiter(RateLimits(messages=Rate(2, 10, 3)))  # one every 5 s, bursts of 3
    for _ in range(3):
        rates.participant("messages", actor())
    with pytest.raises(RateLimited) as refused:
        rates.participant("messages", actor())
    assert refused.value.retry_after == pytest.approx(5)
    await trio.sleep(4.9)
    with pytest.raises(RateLimited) as refused:
        rates.participant("messages", actor())
    assert refused.value.retry_after == pytest.approx(0.1)
    await trio.sleep(refused.value.retry_after)
    rates.participant("messages", actor())
    # idle for a long while: the whole burst is back, no more
    await trio.sleep(3600)
    for _ in range(3):
        rates.participant("messages", actor())
    with pytest.raises(RateLimited):
        rates.participant("messages", actor())


async def wait_what_it_says(rates: RateLimiter, rule: str, seconds: float) -> int:
    """Act as fast as allowed for *seconds*, each time waiting exactly the
    ``retry_after`` of a refusal, which must then be enough; how many acted."""
    allowed = 0
    start = trio.current_time()
    while trio.current_time() - start < seconds:
        try:
            await rates.key(rule, "bob")
        except RateLimited as error:
            wait = error.retry_after
        else:
            wait = 0.0
        if wait:
            await trio.sleep(wait)
            await rates.key(rule, "bob")  # must not raise
        allowed += 1
    return allowed


async def test_retry_after_is_long_enough(autojump_clock: MockClock) -> None:
    """Waiting what ``retry_after`` says is enough, and the sustained rate is
    the rule's (plus its burst)."""
    rates = RateLimiter(RateLimits(login_name=Rate(2, 4), models=Rate(3, 6, 1)))
    for rule in ("login_name", "models"):
        rate = rates.config.rule(rule)
        assert rate is not None
        allowed = await wait_what_it_says(rates, rule, 60)
        assert allowed <= 60 * rate.count / rate.per + (rate.burst or rate.count) + 1


async def test_retry_after_is_long_enough_for_any_interval(autojump_clock: MockClock) -> None:
    rates = RateLimiter(RateLimits(reactions=Rate(3, 1)))  # one every 1/3 s
    await wait_what_it_says(rates, "reactions", 10)


async def test_forgotten_keys_follow_trios_clock(autojump_clock: MockClock) -> None:
    rates = RateLimiter(RateLimits(messages=Rate(1, 1), max_keys=1000))
    for n in range(50):
        rates.participant("messages", actor(f"p{n}"))
    assert rates.statistics()["trackedKeys"] == 50
    await trio.sleep(2)  # every bucket is full again: idle keys are dropped as others act
    for _ in range(30):
        rates.participant("messages", actor("p-new"))
        await trio.sleep(1)
    assert rates.statistics()["trackedKeys"] < 50
