"""The login rules on Trio's clock (decision 0055), in memory as a limiter
without a store keeps them: attempts refused per (name, address) and per
address, failures per name turned into a bounded wait, never a refusal, and
the wait gone once the failures stop. And the setup code's comparison."""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock

from quart_mesh.config import Rate, RateLimits, Settings
from quart_mesh.errors import Forbidden, RateLimited
from quart_mesh.services.ratelimit import RateLimiter
from quart_mesh.services.setup_claim import SetupClaim, new_setup_code

pytestmark = [pytest.mark.timeout(10), pytest.mark.store_free]


def limiter() -> RateLimiter:
    return RateLimiter(
        RateLimits(
            login_name=Rate(3, 60),
            login_address=Rate(100, 60),
            login_slowdown=Rate(2, 60),  # a failure every 30 s is free, in bursts of 2
            login_max_delay=3.0,
            exempt_addresses=(),
        )
    )


async def test_failures_slow_a_name_down_up_to_the_cap_and_never_refuse_it(
    autojump_clock: MockClock,
) -> None:
    rates = limiter()
    assert await rates.login_attempt("Olivia", "203.0.113.1") == 0
    await rates.login_failed("Olivia")
    # within the burst of failures: no wait yet
    assert await rates.login_attempt("olivia", "198.51.100.1") == 0
    await rates.login_failed("olivia")  # casefolded: the same name
    # the burst is spent: the next attempt, from anywhere, waits (capped)
    assert await rates.login_attempt("olivia", "198.51.100.2") == pytest.approx(3.0)
    for _ in range(50):
        await rates.login_failed("olivia")
    # however many failures, the wait stays at the cap, and nothing is refused
    for n in range(20):
        assert await rates.login_attempt("olivia", f"192.0.2.{n}") == pytest.approx(3.0)
    # another name is not slowed
    assert await rates.login_attempt("someone", "192.0.2.1") == 0
    # once the failures stop, the slowdown ends within a window (60 s)
    await trio.sleep(60)
    assert await rates.login_attempt("olivia", "192.0.2.100") == 0


async def test_attempts_are_refused_per_name_and_address_not_per_name(
    autojump_clock: MockClock,
) -> None:
    rates = limiter()
    for _ in range(3):
        await rates.login_attempt("olivia", "203.0.113.1")
    with pytest.raises(RateLimited) as refused:
        await rates.login_attempt("olivia", "203.0.113.1")
    assert refused.value.retry_after == pytest.approx(20)
    # the same name from another address, and another name from this one
    await rates.login_attempt("olivia", "198.51.100.1")
    await rates.login_attempt("someone", "203.0.113.1")
    await trio.sleep(20)
    await rates.login_attempt("olivia", "203.0.113.1")


async def test_the_rules_can_be_turned_off() -> None:
    rates = RateLimiter(RateLimits(login_slowdown=None, login_name=None, login_address=None))
    for _ in range(100):
        await rates.login_failed("olivia")
        assert await rates.login_attempt("olivia", "203.0.113.1") == 0


def test_a_setup_code_is_compared_as_people_type_it(tmp_path: object) -> None:
    code = new_setup_code()
    assert len(code) == 19
    assert code.count("-") == 3
    assert new_setup_code() != code


async def test_the_setup_claim_asks_only_when_the_node_is_reachable(tmp_path: object) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    settings = Settings(data_dir=tmp_path / "data")
    claim = SetupClaim(settings)
    # never prepared (an in-process test client): nothing asked
    claim.check(None, None)
    assert await claim.prepare(public=False, initialized=False) is None
    claim.check(None, "127.0.0.1")
    code = await claim.prepare(public=True, initialized=False)
    assert code is not None
    # every process of the node reads the same code from the data folder
    assert await SetupClaim(settings).prepare(public=True, initialized=False) == code
    with pytest.raises(Forbidden) as refused:
        claim.check(None, "127.0.0.1")
    assert refused.value.code == "setup_code_required"
    for wrong in ("", " ", code[:-1], code + "X", "x" * 100_000):
        with pytest.raises(Forbidden) as refused:
            claim.check(wrong or None, "127.0.0.1")
        assert refused.value.code in ("setup_code_required", "invalid_setup_code")
    claim.check(code, "127.0.0.1")
    claim.check(f" {code.lower().replace('-', ' ')} ", "127.0.0.1")
    # a stock ASGI server: decided per request, by the server's address
    asgi = SetupClaim(settings)
    await asgi.prepare(public=None, initialized=False)
    asgi.check(None, "127.0.0.1")
    asgi.check(None, "::1")
    with pytest.raises(Forbidden):
        asgi.check(None, "192.0.2.10")
    # set up: the code is gone and never asked again
    assert await claim.prepare(public=True, initialized=True) is None
    assert not (settings.data_dir / "setup-code").exists()
    claim.check(None, "192.0.2.10")
