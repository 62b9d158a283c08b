"""``Feed.backlog`` with nothing to read does not touch the store (issue 16:
a session that is not resuming, of a participant that takes no commands,
opens without a second read)."""

from __future__ import annotations

from typing import Any

from quart_mesh.broker import Broker
from quart_mesh.ends import EndReason
from quart_mesh.services.authz import Actor
from quart_mesh.services.delivery import Delivery


def actor(participant_id: str) -> Actor:
    return Actor(participant_id, participant_id, "human", "human", "member")


class Known:
    """Accounts that know every participant as a member (no store)."""

    async def actor_of(self, participant_id: str) -> Actor:
        return actor(participant_id)


class Untouchable:
    """A store that fails the test if read."""

    async def read(self, fn: Any) -> Any:
        raise AssertionError("the store was read")


async def test_nothing_asked_nothing_read() -> None:
    delivery = Delivery(Untouchable(), Broker(), Known(), max_commands=100)  # type: ignore[arg-type]
    with await delivery.follow(actor("p1")) as feed:
        backlog = await feed.backlog(None, 100, messages=False, commands=False)
        assert (backlog.messages, backlog.cursor, backlog.truncated) == ([], 0, False)
        assert backlog.commands == []
        resumed = await feed.backlog(41, 100, messages=False)
        assert resumed.cursor == 41  # where it was: nothing skipped
    with await delivery.follow(actor("bot"), chat=False) as feed:  # no chat traffic: no messages
        assert (await feed.backlog(7, 100)).cursor == 7


async def test_the_subscription_ends_with_the_block() -> None:
    broker = Broker()
    delivery = Delivery(Untouchable(), broker, Known(), max_commands=100)  # type: ignore[arg-type]
    with await delivery.follow(actor("p1")) as feed:
        assert broker.statistics().subscribers == 1
    assert broker.statistics().subscribers == 0
    assert feed.sub.failed is EndReason.CLOSED
