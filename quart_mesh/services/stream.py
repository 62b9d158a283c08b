"""The in-process event stream: a participant's events for a Trio program
that embeds the node (``node.events(actor, since=cursor)``).

It is the WebSocket resume (``realtime/session.py``) without a socket, on
the same delivery service (``services/delivery.py``): subscribe first and
hold live events, read the backlog after the cursor from the store, hand
it out, then release the held events minus those the backlog delivered
(:meth:`Feed.go_live`). The same visibility decision (``authz.readable_rooms``)
applies to the backlog and to live events, and the order is the store's,
then the broker's. Where the WebSocket replays at most ``max_replay``
messages and tells the client to page the rest over REST, the stream pages
the whole backlog itself: a stream loses nothing.

The consumer is the task iterating, so the backlog does not go through the
subscription's buffer (:meth:`Feed.replay` would wait for room that only
that same task can make): each page is handed out from the stream's own
list, while live events wait in the subscription's held buffer.

Falling behind: the subscription's buffer is bounded (``capacity``); the
broker never blocks a publisher, so a consumer that does not keep up has
its subscription failed (``lagging``) and the queued events dropped. The
stream then raises :class:`StreamLagged` with the cursor of the last
message it handed out; a new stream from that cursor delivers every message
after it. Never a silent loss.
"""

from __future__ import annotations

import collections
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import trio

from ..ends import EndReason
from ..errors import AccessEnded, MeshError, StreamLagged
from ..events import CommandIssued, Event, MessagePosted
from ..store.agents import CommandRow
from .accounts import Accounts
from .authz import Actor
from .commands import command_event
from .delivery import Delivery, Feed

__all__ = ["EventStream", "open_event_stream"]

log = logging.getLogger(__name__)

#: deliveries taken from the subscription at once (each handed out in turn)
_BATCH = 64


class EventStream:
    """A participant's events, in order: iterate with ``async for``.

    Made by :meth:`Node.events <quart_mesh.Node.events>` (not directly),
    valid inside its ``async with`` block. Yields :class:`~quart_mesh.events.Event`
    instances (``MessagePosted`` for each message, then edits, reactions,
    joins, presence, typing, ... as a WebSocket client receives them).

    Ending: after handing out what it had already taken, it raises
    :class:`StreamLagged` if it lost its place (the consumer fell behind,
    or the node's delivery started over: PostgreSQL's bus) and
    :class:`AccessEnded` if the participant lost its access; the iteration
    ends (``StopAsyncIteration``) after what was queued when the
    subscription is closed (the node stopping).

    Backpressure: at most ``capacity`` events wait in the subscription
    (plus a batch of up to 64 taken from it, and one backlog page of up to
    ``max_replay`` messages while catching up); publishers never wait for
    the consumer.

    Cancellation: iterating is safe to cancel; nothing is lost that a new
    stream from :attr:`cursor` would not deliver.
    """

    __slots__ = (
        "_catching_up",
        "_commands",
        "_commands_after",
        "_cursor",
        "_feed",
        "_mark_delivered",
        "_messages_read",
        "_page",
        "_pending",
        "_read_to",
        "_started",
    )

    def __init__(
        self,
        feed: Feed,
        cursor: int,
        page: int,
        *,
        commands: bool,
        mark_delivered: Callable[[list[str]], Awaitable[None]] | None = None,
    ) -> None:
        self._feed = feed
        #: marks a command delivered once handed out (as the WebSocket does),
        #: so that the next stream does not hand it out again
        self._mark_delivered = mark_delivered
        #: the last message handed out (or where the stream started)
        self._cursor = cursor
        #: the backlog is read up to here (its last message)
        self._read_to = cursor
        self._page = page
        self._commands = commands
        self._catching_up = True
        #: the first backlog page was read (the only one with commands)
        self._started = False
        #: every page of messages was read
        self._messages_read = False
        #: the last command handed out, if more wait after it (the first
        #: page's ``commands_truncated``): the next pages are read first
        self._commands_after: CommandRow | None = None
        self._pending: collections.deque[Event] = collections.deque()
        feed.sub.hold()  # live events wait until the backlog is handed out

    @property
    def cursor(self) -> int:
        """Where to resume now: the sequence number of the last message
        (``MessagePosted``) handed out, or the cursor the stream started
        from. ``node.events(actor, since=stream.cursor)`` delivers every
        message after it."""
        return self._cursor

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> Event:
        """The next event, waiting for one.

        Raises:
            StreamLagged: the stream lost its place (see the class docstring):
                resume from its ``cursor``.
            AccessEnded: the participant was deleted or signed out.
            Unavailable: the store could not be read while catching up.
            StopAsyncIteration: the stream was closed (the node stopping).
        """
        sub = self._feed.sub
        while True:
            if self._pending:
                # a cancellation point before an event leaves, never after
                await trio.lowlevel.checkpoint()
                event = self._pending[0]
                if isinstance(event, CommandIssued) and self._mark_delivered is not None:
                    # shielded: once marked, it is handed out (a cancel
                    # arrives at the consumer's next checkpoint)
                    with trio.CancelScope(shield=True):
                        try:
                            await self._mark_delivered([event.command_id])
                        except MeshError:  # as the WebSocket: handed out again next time
                            log.warning("could not mark command %s delivered", event.command_id)
                self._pending.popleft()
                if isinstance(event, MessagePosted):
                    self._cursor = event.message.seq
                return event
            if self._catching_up and sub.failed is None:
                await self._catch_up()
                continue
            batch = await sub.get_batch(_BATCH)
            if batch:
                self._pending.extend(event for event, _ in batch if event is not None)
                continue
            # ended, and nothing more to hand out (a lagging subscription's
            # queue is dropped: the cursor covers it)
            # it could not keep up, or the node's delivery started over (the
            # bus on PostgreSQL: the node goes on, so a stream that just
            # ended would lose what comes next): StreamLagged
            ending = sub.ending
            if ending is not None and ending.lost_place:
                raise StreamLagged(self._cursor)
            if ending is not None and ending.access_ended:
                assert sub.failed is not None
                raise AccessEnded(sub.failed.value, self._cursor)
            raise StopAsyncIteration

    async def _catch_up(self) -> None:
        """Read the next page of the backlog into the pending list; after
        the last page, release the held live events (minus those the
        backlog delivered). Cancellation: safe; a page read is not lost
        (the cursor it read from is advanced only once it is in hand)."""
        feed = self._feed
        if self._commands_after is not None:
            self._hand_out(*await feed.more_commands(self._commands_after))
        elif not self._messages_read:
            first = not self._started
            backlog = await feed.backlog(
                self._read_to, self._page, commands=first and self._commands
            )
            if first:
                self._started = True
                self._hand_out(backlog.commands, backlog.commands_truncated)
            self._pending.extend(
                MessagePosted(message.room_id, message=message) for message in backlog.messages
            )
            if backlog.messages:
                self._read_to = backlog.messages[-1].seq
            self._messages_read = not backlog.truncated
        if self._messages_read and self._commands_after is None:
            await feed.go_live(self._read_to)
            self._catching_up = False

    def _hand_out(self, commands: list[CommandRow], more: bool) -> None:
        """Queue a page of waiting commands; the next is read after its last."""
        self._pending.extend(command_event(command) for command in commands)
        self._feed.replayed(commands)
        self._commands_after = commands[-1] if more and commands else None


@contextlib.asynccontextmanager
async def open_event_stream(
    delivery: Delivery,
    accounts: Accounts,
    actor: Actor,
    *,
    since: int | None,
    capacity: int | None,
    page: int,
    mark_delivered: Callable[[list[str]], Awaitable[None]] | None = None,
) -> AsyncIterator[EventStream]:
    """The stream behind :meth:`Node.events <quart_mesh.Node.events>`:
    *actor*'s events after the message *since* (``None``: from now), read
    in pages of *page* messages while catching up.

    Raises:
        AccessEnded: the participant no longer exists, or is a guest on a
            mesh that is not public (any more).
        Unavailable: the store could not be read.
        ValueError: *since* is negative, *capacity* not positive.
    """
    if since is not None and since < 0:
        raise ValueError("since must be a message's sequence number (>= 0)")
    if capacity is not None and capacity < 1:
        raise ValueError("capacity must be at least 1")
    # before subscribing: from now (None), or from a cursor past the newest
    # message, the newest (what is committed meanwhile is then both read and
    # held; go_live drops the copies)
    since = await delivery.resume_point(since)
    # tool-only ``simple`` bots are not sent chat traffic (docs/agents.md)
    chat = actor.type != "simple"
    with await delivery.follow(actor, capacity=capacity, chat=chat) as feed:
        current = await accounts.actor_of(actor.participant_id)
        if current is None:
            raise AccessEnded(EndReason.REMOVED.value, since)
        if current.kind == "guest" and not accounts.guests_allowed:
            # the mesh went private: a guest's access ended (its tokens are
            # refused, its sessions were closed as ``revoked``)
            raise AccessEnded(EndReason.REVOKED.value, since)
        # commands wait only for agents, and every agent is a bot
        stream = EventStream(
            feed,
            since,
            max(1, page),
            commands=actor.kind == "bot",
            mark_delivered=mark_delivered,
        )
        # the first page now: a stream caught up on entering (from now, or
        # a short backlog) queues live events at once, however long its
        # owner takes to iterate
        await stream._catch_up()
        yield stream
