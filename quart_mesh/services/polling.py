"""REST polling for bots: ``POST /api/poll``, with optional long-poll.

The cursor is the node-wide message cursor. A poll returns the messages after
it in the caller's rooms and DMs (or only mentions and DMs), oldest first, and
the cursor to pass next time: the last message returned when the page is
full, else the newest cursor at the time of the query, so passing it back
never skips or repeats a message, across restarts too. Without a cursor, a
poll starts at the caller's read position in each room.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import trio

from ..broker import Subscription
from ..config import Settings
from ..ends import EndReason
from ..errors import BadRequest
from ..records import Message
from ..store.agents import CommandRow
from .authz import Actor, authorize
from .commands import Commands, command_event
from .delivery import Delivery, Feed, parse_since, refuse_if_access_ended
from .presence import Presence
from .seats import Seats
from .world import World

__all__ = ["PollResult", "Polling"]


@dataclass(frozen=True, slots=True)
class PollResult:
    messages: list[Message]
    cursor: int
    #: commands sent to the caller (agents), now marked delivered
    commands: tuple[CommandRow, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "messages": [m.to_json() for m in self.messages],
            "cursor": str(self.cursor),
            "commands": [command_event(c).to_json() for c in self.commands],
        }


class Polling:
    def __init__(
        self,
        settings: Settings,
        delivery: Delivery,
        presence: Presence,
        world: World,
        commands: Commands,
        seats: Seats,
    ) -> None:
        self._settings = settings
        self._seats = seats
        self._delivery = delivery
        self._presence = presence
        self._world = world
        self._commands = commands
        #: the subscriptions of the polls waiting now (:meth:`shut_down`)
        self._waiting: set[Subscription] = set()
        self._closing = False

    def shut_down(self) -> None:
        """The node is stopping: polls waiting now are answered at once with
        what they have (as WebSocket sessions get 1001), and polls that come
        later do not wait, instead of each holding the stop for the whole
        grace and then being cut without an answer."""
        self._closing = True
        for sub in list(self._waiting):
            sub.fail(EndReason.CLOSED)

    async def poll(
        self,
        actor: Actor,
        *,
        cursor: str | int | None = None,
        mentions_only: bool = False,
        wait_seconds: float = 0.0,
        limit: int | None = None,
        token_id: str | None = None,
        address: str | None = None,
    ) -> PollResult:
        """Messages after *cursor* and commands not yet delivered; with
        *wait_seconds*, wait up to that many seconds for one of either to
        arrive. Counts the caller online while waiting. ``simple`` bots are
        sent commands only (no chat traffic). *token_id*: the caller's token,
        so that signing it out ends a waiting poll. A poll that waits takes
        one of the caller's (and *address*'s) long-poll seats while it waits
        (:class:`~quart_mesh.services.seats.Seats`).

        Raises:
            BadRequest: a malformed cursor, timeout or limit.
            RateLimited: the caller or *address* has as many long polls
                waiting as allowed (``too_many_polls``).
            Unauthorized: the caller was signed out (its token, or
                everywhere) or deleted while it waited; it takes nothing.
        """
        authorize(actor, "rooms.read")
        after = parse_since(cursor, "cursor", empty=True)
        limits = self._settings.limits
        if limit is None:
            limit = limits.default_page_size
        if not 1 <= limit <= limits.max_page_size:
            raise BadRequest(f"limit must be between 1 and {limits.max_page_size}", "invalid_limit")
        if not 0 <= wait_seconds <= self._settings.max_poll_timeout:
            raise BadRequest(
                f"timeout must be between 0 and {self._settings.max_poll_timeout:g} seconds",
                "invalid_timeout",
            )
        mentions_of = actor.name if mentions_only else None
        # tool-only ``simple`` bots are sent commands only (no chat traffic)
        chat = actor.type != "simple"
        # a poll that waits holds a seat while it waits (taken before anything else)
        seat: contextlib.AbstractContextManager[None] = (
            self._seats.hold("poll", actor.participant_id, address)
            if wait_seconds > 0
            else contextlib.nullcontext()
        )
        with (
            seat,
            await self._delivery.follow(actor, capacity=64, chat=chat, token_id=token_id) as feed,
        ):
            if wait_seconds == 0 or self._closing:
                return await self._take(actor, feed, after, limit, mentions_of)
            self._waiting.add(feed.sub)
            try:
                async with self._presence.attached(actor.participant_id):
                    with trio.move_on_after(wait_seconds):
                        while True:
                            result = await self._take(actor, feed, after, limit, mentions_of)
                            if result.messages or result.commands:
                                return result
                            after = result.cursor
                            if not await feed.wait_for_more():
                                break
            finally:
                self._waiting.discard(feed.sub)
            # signed out everywhere, or deleted, while it waited: the messages
            # and commands stay for whoever signs in next
            refuse_if_access_ended(feed.sub)
            return await self._take(actor, feed, after, limit, mentions_of)

    async def _take(
        self, actor: Actor, feed: Feed, after: int | None, limit: int, mentions_of: str | None
    ) -> PollResult:
        """The backlog after *after*; its messages count as read and its
        commands as delivered."""
        backlog = await feed.backlog(
            after, limit, mentions_of=mentions_of, commands=actor.kind == "bot"
        )
        reads: dict[str, int] = {}
        for message in backlog.messages:
            reads[message.room_id] = max(reads.get(message.room_id, 0), message.seq)
        await self._world.mark_read(actor, reads)
        if backlog.commands:
            await self._commands.mark_delivered([c.command_id for c in backlog.commands])
        return PollResult(backlog.messages, backlog.cursor, tuple(backlog.commands))
