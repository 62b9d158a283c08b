"""Presence's grace period on an autojump clock: a participant whose last
session closes is announced offline only after ``grace`` seconds, and not
at all if it comes back meanwhile (a bot polling in a loop does not flap).
The store is stood in for (it runs in threads, which autojump cannot see)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio
from trio.testing import MockClock

from quart_mesh.broker import Broker
from quart_mesh.events import Event
from quart_mesh.events import Presence as PresenceEvent
from quart_mesh.services.presence import Presence

pytestmark = [pytest.mark.timeout(10), pytest.mark.store_free]


class Store:
    """Writes nothing; runs the write's ``then`` as the real store does after a commit."""

    def __init__(self) -> None:
        self.writes = 0

    async def write(
        self, fn: Callable[..., Any], *, then: Callable[[Any], Any] | None = None
    ) -> Any:
        self.writes += 1
        await trio.lowlevel.checkpoint()
        if then is not None:
            then(None)


def record(broker: Broker) -> list[tuple[str, bool, float]]:
    """Every presence event the broker publishes: (who, online, Trio time)."""
    seen: list[tuple[str, bool, float]] = []

    def note(event: Event) -> None:
        if isinstance(event, PresenceEvent):
            seen.append((event.participant_id, event.online, trio.current_time()))

    broker.observe(note)
    return seen


async def test_offline_only_after_the_grace_period(autojump_clock: MockClock) -> None:
    broker, store = Broker(), Store()
    seen = record(broker)
    presence = Presence(store, broker, grace=2.0)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(presence.run)
        start = trio.current_time()
        async with presence.attached("p1"):
            assert presence.is_online("p1")
            await trio.sleep(5)
        # closed at start + 5: still online for the grace period
        await trio.sleep(1.9)
        assert presence.is_online("p1")
        await trio.sleep(0.2)
        assert not presence.is_online("p1")
        assert [(p, online, round(t - start, 6)) for p, online, t in seen] == [
            ("p1", True, 0),
            ("p1", False, 7),
        ]
        assert store.writes == 1  # lastSeen
        nursery.cancel_scope.cancel()


async def test_coming_back_within_the_grace_period_does_not_flap(
    autojump_clock: MockClock,
) -> None:
    broker, store = Broker(), Store()
    seen = record(broker)
    presence = Presence(store, broker, grace=1.0)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(presence.run)
        for _ in range(10):  # a bot long-polling in a loop, 0.5 s between polls
            async with presence.attached("bot"):
                await trio.sleep(3)
            await trio.sleep(0.5)
        assert presence.is_online("bot")
        assert [(p, online) for p, online, _ in seen] == [("bot", True)]
        await trio.sleep(1)
        assert [(p, online) for p, online, _ in seen] == [("bot", True), ("bot", False)]
        assert store.writes == 1
        nursery.cancel_scope.cancel()


async def test_two_sessions_count_as_one(autojump_clock: MockClock) -> None:
    broker, store = Broker(), Store()
    seen = record(broker)
    presence = Presence(store, broker, grace=1.0)  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(presence.run)
        first = presence.attached("p1")
        await first.__aenter__()
        async with presence.attached("p1"):
            await trio.sleep(1)
        await trio.sleep(5)  # the first session is still open
        assert presence.is_online("p1")
        await first.__aexit__(None, None, None)
        await trio.sleep(1.5)
        assert [online for _, online, _ in seen] == [True, False]
        nursery.cancel_scope.cancel()


# -- claims and releases written together (services/presence.py, _Together) --


async def test_keys_joined_during_a_write_go_together_in_the_next() -> None:
    from quart_mesh.services.presence import _Together

    writes: list[list[str]] = []
    gates = [trio.Event(), trio.Event()]
    returned: list[str] = []

    async def write(keys: list[str]) -> None:
        writes.append(list(keys))
        await gates[len(writes) - 1].wait()

    together = _Together(write)

    async def join(key: str) -> None:
        await together.join(key)
        returned.append(key)

    async with trio.open_nursery() as nursery:
        for key in "abcd":
            nursery.start_soon(join, key)
            await trio.testing.wait_all_tasks_blocked()
        gates[0].set()
        await trio.testing.wait_all_tasks_blocked()
        # the first caller wrote its own batch only: it is not kept writing the next
        assert returned == ["a"]
        gates[1].set()
    assert writes == [["a"], ["b", "c", "d"]]
    assert sorted(returned) == ["a", "b", "c", "d"]


async def test_a_failed_write_fails_its_keys_and_a_cancelled_writers_batch_goes_on() -> None:
    from quart_mesh.errors import Unavailable
    from quart_mesh.services.presence import _Together

    writes: list[list[str]] = []
    gate = trio.Event()

    async def write(keys: list[str]) -> None:
        writes.append(list(keys))
        if keys == ["fails"]:
            raise Unavailable("the store is away", "storage_unavailable")
        await gate.wait()

    together = _Together(write)
    with pytest.raises(Unavailable):
        await together.join("fails")
    done: list[str] = []

    async def follower() -> None:
        await together.join("c")
        done.append("c")

    async with trio.open_nursery() as nursery:
        second = trio.CancelScope()

        async def second_writer() -> None:
            with second:
                await together.join("b")

        nursery.start_soon(together.join, "a")
        await trio.testing.wait_all_tasks_blocked()  # "a" is being written
        nursery.start_soon(second_writer)
        await trio.testing.wait_all_tasks_blocked()  # "b" waits for its turn
        nursery.start_soon(follower)
        await trio.testing.wait_all_tasks_blocked()  # "c" goes with "b"
        second.cancel()  # "b" leaves: "c" joins again, and writes itself
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert done == ["c"]
    assert writes == [["fails"], ["a"], ["c"]]


async def test_a_caller_cancelled_before_its_batch_began_is_left_out_of_it() -> None:
    """Its participant's lock goes with it: written later, its claim could
    come after a release made meanwhile."""
    from quart_mesh.services.presence import _Together

    writes: list[list[str]] = []
    gate = trio.Event()

    async def write(keys: list[str]) -> None:
        writes.append(list(keys))
        await gate.wait()

    together = _Together(write)
    leaving = trio.CancelScope()

    async def leaves() -> None:
        with leaving:
            await together.join("c")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(together.join, "a")  # being written
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(together.join, "b")  # the next batch, waiting for its turn
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(leaves)  # joins "b"'s batch
        await trio.testing.wait_all_tasks_blocked()
        leaving.cancel()
        await trio.testing.wait_all_tasks_blocked()
        gate.set()
    assert writes == [["a"], ["b"]]
