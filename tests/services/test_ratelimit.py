"""The rate limiter alone, on a clock the test moves: the bucket's arithmetic,
multipliers, exempt addresses and bounded memory."""

from __future__ import annotations

import pytest

from quart_mesh.config import Rate, RateLimits
from quart_mesh.errors import RateLimited
from quart_mesh.services.authz import Actor
from quart_mesh.services.ratelimit import RateLimiter

pytestmark = pytest.mark.store_free


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def actor(participant_id: str = "p1", role: str = "member") -> Actor:
    return Actor(participant_id, participant_id, "human", "human", role)


def limiter(clock: Clock, **rules: object) -> RateLimiter:
    config = RateLimits(**rules)  # type: ignore[arg-type]
    return RateLimiter(config, clock=clock)


def test_a_burst_then_one_per_interval() -> None:
    clock = Clock()
    rates = limiter(clock, messages=Rate(2, 10, 3))  # one every 5 s, bursts of 3
    for _ in range(3):
        rates.participant("messages", actor())
    with pytest.raises(RateLimited) as refused:
        rates.participant("messages", actor())
    assert refused.value.retry_after == pytest.approx(5)
    assert refused.value.code == "rate_limited"
    clock.now += 4.9
    with pytest.raises(RateLimited):
        rates.participant("messages", actor())
    clock.now += 0.1
    rates.participant("messages", actor())
    with pytest.raises(RateLimited):
        rates.participant("messages", actor())
    # idle long enough, the whole burst is back (and no more)
    clock.now += 60
    for _ in range(3):
        rates.participant("messages", actor())
    with pytest.raises(RateLimited):
        rates.participant("messages", actor())
    # someone else has their own bucket
    rates.participant("messages", actor("p2"))
    assert rates.statistics()["refused"] == {"messages": 4}


def test_multipliers_the_owner_and_typing() -> None:
    clock = Clock()
    rates = limiter(
        clock,
        messages=Rate(1, 10),
        typing=Rate(1, 1),
        role_multipliers={"admin": 3, "spectator": 0.5},
    )
    for _ in range(3):
        rates.participant("messages", actor("a", "admin"))
    with pytest.raises(RateLimited) as refused:
        rates.participant("messages", actor("a", "admin"))
    assert refused.value.retry_after == pytest.approx(10 / 3, abs=1e-3)
    # below one: a burst of one, and half the rate
    rates.participant("messages", actor("g", "spectator"))
    with pytest.raises(RateLimited) as refused:
        rates.participant("messages", actor("g", "spectator"))
    assert refused.value.retry_after == pytest.approx(20)
    for _ in range(100):
        rates.participant("messages", actor("o", "owner"))
    # typing is per room and the same for every role, the owner included
    assert rates.participant_allowed("typing", actor("o", "owner"), "room1")
    assert not rates.participant_allowed("typing", actor("o", "owner"), "room1")
    assert rates.participant_allowed("typing", actor("o", "owner"), "room2")


def test_rules_off_and_all_off() -> None:
    clock = Clock()
    rates = limiter(clock, messages=None)
    for _ in range(1000):
        rates.participant("messages", actor())
    rates.configure(RateLimits(enabled=False, reactions=Rate(1, 60)))
    for _ in range(10):
        rates.participant("reactions", actor())
    rates.configure(RateLimits(reactions=Rate(1, 60)))
    rates.participant("reactions", actor())
    with pytest.raises(RateLimited):
        rates.participant("reactions", actor())


async def test_addresses_and_exemptions() -> None:
    clock = Clock()
    rates = limiter(clock, login_address=Rate(1, 60), exempt_addresses=("127.0.0.0/8", "::1"))
    for address in ("127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1", None):
        for _ in range(5):
            await rates.address("login_address", address)
    await rates.address("login_address", "192.0.2.1")
    with pytest.raises(RateLimited):
        await rates.address("login_address", "192.0.2.1")
    await rates.address("login_address", "192.0.2.2")
    # something that is not an address (a Unix socket) is still limited
    await rates.address("login_address", "unix-socket")
    with pytest.raises(RateLimited):
        await rates.address("login_address", "unix-socket")


async def test_memory_stays_bounded() -> None:
    clock = Clock()
    rates = limiter(clock, login_name=Rate(1, 1), max_keys=1000)
    # keys that go idle are forgotten as new ones arrive
    for i in range(50_000):
        clock.now += 0.01
        await rates.key("login_name", f"name{i}")
    assert rates.statistics()["trackedKeys"] <= 200
    # under a flood of fresh keys the least recently used go first
    for i in range(5000):
        await rates.key("login_name", f"flood{i}")
    assert rates.statistics()["trackedKeys"] == 1000
    with pytest.raises(RateLimited):
        await rates.key("login_name", "flood4999")


def test_ipv6_clients_are_counted_by_their_64() -> None:
    """Anyone with an IPv6 /64 holds 2^64 addresses: per-address rules count
    the network, so rotating through it gives no fresh budget."""
    from quart_mesh.services.ratelimit import address_key

    assert address_key("2001:db8:1:2:aaaa::1") == address_key("2001:db8:1:2:ffff::9")
    assert address_key("2001:db8:1:2::1") != address_key("2001:db8:1:3::1")
    assert address_key("203.0.113.7") == "203.0.113.7"
    assert address_key("::ffff:203.0.113.7") == "203.0.113.7"
    assert address_key("not an address") == "not an address"
