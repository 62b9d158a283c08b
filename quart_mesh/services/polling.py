"""REST polling for bots: ``POST /api/poll``, with optional long-poll.

The cursor is the node-wide message cursor. A poll returns the messages after
it in the caller's rooms and DMs (or only mentions and DMs), oldest first, and
the cursor to pass next time: the last message returned when the page is
full, else the newest cursor at the time of the query, so passing it back
never skips or repeats a message, across restarts too. Without a cursor, a
poll starts at the caller's read position in each room.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio
from sqlalchemy.engine import Connection

from ..broker import Broker
from ..config import Settings
from ..errors import BadRequest
from ..events import CommandIssued, MessagePosted
from ..models import Message
from ..store import Database
from ..store import messages as messages_repo
from ..store.agents import CommandRow
from .authz import Actor, authorize
from .commands import Commands, command_event
from .presence import Presence
from .validation import cursor_number
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
        db: Database,
        broker: Broker,
        presence: Presence,
        world: World,
        commands: Commands,
    ) -> None:
        self._settings = settings
        self._db = db
        self._broker = broker
        self._presence = presence
        self._world = world
        self._commands = commands

    async def poll(
        self,
        actor: Actor,
        *,
        cursor: str | int | None = None,
        mentions_only: bool = False,
        wait_seconds: float = 0.0,
        limit: int | None = None,
    ) -> PollResult:
        """Messages after *cursor* and commands not yet delivered; with
        *wait_seconds*, wait up to that many seconds for one of either to
        arrive. Counts the caller online while waiting. ``simple`` bots are
        sent commands only (no chat traffic).

        Raises:
            BadRequest: a malformed cursor, timeout or limit.
        """
        authorize(actor, "rooms.read")
        after = _parse_cursor(cursor)
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
        if wait_seconds == 0:
            return await self._fetch(actor, after, limit, mentions_of)
        # subscribe before the first query, so nothing slips between the two
        chat = actor.type != "simple"
        with self._broker.subscribe(actor.participant_id, capacity=64, chat=chat) as sub:
            async with self._presence.attached(actor.participant_id):
                with trio.move_on_after(wait_seconds):
                    while True:
                        result = await self._fetch(actor, after, limit, mentions_of)
                        if result.messages or result.commands:
                            return result
                        after = result.cursor
                        while not any(
                            isinstance(event, (MessagePosted, CommandIssued))
                            for event, _ in await sub.get_batch()
                        ):
                            if sub.failed is not None:
                                break
                        if sub.failed is not None:
                            break
        return await self._fetch(actor, after, limit, mentions_of)

    async def _fetch(
        self, actor: Actor, after: int | None, limit: int, mentions_of: str | None
    ) -> PollResult:
        chat = actor.type != "simple"

        def read(conn: Connection) -> PollResult:
            head = messages_repo.head_seq(conn)
            if not chat:
                return PollResult([], head)
            found = messages_repo.messages_after(
                conn, actor.participant_id, after, limit, mentions_of=mentions_of
            )
            cursor = found[-1].seq if len(found) == limit else head
            return PollResult(found, cursor)

        result = await self._db.read(read)
        reads: dict[str, int] = {}
        for message in result.messages:
            reads[message.room_id] = max(reads.get(message.room_id, 0), message.seq)
        await self._world.mark_read(actor, reads)
        commands = await self._commands.take_commands(actor) if actor.kind == "bot" else []
        return PollResult(result.messages, result.cursor, tuple(commands))


def _parse_cursor(value: str | int | None) -> int | None:
    if value is None or value == "":
        return None
    cursor = cursor_number(value)
    if cursor is None:
        raise BadRequest("cursor must be a cursor returned by the node", "invalid_cursor")
    return cursor
