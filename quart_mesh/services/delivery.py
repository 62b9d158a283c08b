"""Delivery: catch up from a cursor, then follow live events.

Every way a participant receives what it missed and what comes next goes
through here, once: a WebSocket session resuming with ``since``, a long
poll (``POST /api/poll``) and webhook delivery to a bot.

The race it handles: a message committed between reading the store and
subscribing to the broker would be lost, so :meth:`Delivery.follow`
subscribes *first* and only then does the caller read its backlog
(:meth:`Feed.backlog`). Whatever was published meanwhile is then both in
the backlog and on the subscription; a consumer that forwards live events
(the WebSocket) releases them with :meth:`Feed.go_live`, which drops those
the backlog already delivered; consumers that only use events as a wake-up
(polling, webhooks: :meth:`Feed.wait_for_more`) read the store again from
their cursor, so a duplicate wake-up costs one query and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from sqlalchemy.engine import Connection

from ..broker import Broker, Subscription
from ..errors import BadRequest
from ..events import CommandIssued, Event, MessagePosted, RoomAccess
from ..records import Message
from ..store import Database
from ..store import agents as agents_repo
from ..store import messages as messages_repo
from .accounts import Accounts
from .authz import Actor, Readable, readable_rooms
from .commands import command_event
from .validation import cursor_number

__all__ = ["Backlog", "Delivery", "Feed", "refuse_if_access_ended"]


@dataclass(frozen=True, slots=True)
class Backlog:
    """What waited for a participant after a cursor."""

    #: messages after the cursor in its rooms and DMs, oldest first (at most the limit)
    messages: list[Message]
    #: where to continue: the last message returned if more are waiting, else
    #: the newest cursor of the node when the backlog was read (never skips)
    cursor: int
    #: more messages than the limit were waiting
    truncated: bool
    #: commands sent to it and not delivered yet, oldest first (at most the
    #: configured maximum waiting, ``max_pending_commands``)
    commands: list[agents_repo.CommandRow] = field(default_factory=list)
    #: more commands than that were waiting (the maximum was lowered while
    #: they waited): the rest follow with :meth:`Feed.more_commands`
    commands_truncated: bool = False


def parse_since(value: object, field: str = "since", *, empty: bool = False) -> int | None:
    """The cursor a catch-up starts after, as a client gives it (a decimal
    string or a whole number; absent: none, and with *empty* an empty
    string too, as a poll's form allows): the one reading of it for every
    transport (the WebSocket's ``since``, a poll's ``cursor``).

    Raises:
        BadRequest: not a cursor (``invalid_cursor``).
    """
    if value is None or (empty and value == ""):
        return None
    cursor = cursor_number(value)
    if cursor is None:
        raise BadRequest(f"{field} must be a cursor returned by the node", "invalid_cursor")
    return cursor


class Feed:
    """A participant's subscription, opened before its backlog is read; a
    context manager that ends the subscription (see :meth:`Delivery.follow`)."""

    __slots__ = ("_db", "_max_commands", "_sent", "participant_id", "sub")

    def __init__(
        self, db: Database, participant_id: str, sub: Subscription, max_commands: int
    ) -> None:
        self._db = db
        self.participant_id = participant_id
        self.sub = sub
        self._max_commands = max_commands
        #: the commands the catch-up handed out (:meth:`replayed`): a live
        #: copy of one is dropped
        self._sent: set[str] = set()

    def __enter__(self) -> Feed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sub.close()

    async def backlog(
        self,
        after: int | None,
        limit: int,
        *,
        mentions_of: str | None = None,
        messages: bool = True,
        commands: bool = False,
    ) -> Backlog:
        """Messages after *after* (``None``: from the participant's read
        position in each room; only mentions of *mentions_of* if given) unless
        not *messages*, and with *commands* its waiting commands. A
        subscription without chat traffic (``simple`` bots) gets no messages.
        With neither messages nor commands to read, the store is not read:
        the backlog is empty and its cursor is *after* (or 0).

        Raises:
            Unavailable: the store could not be read.
        """
        participant_id, chat = self.participant_id, self.sub.chat and messages
        if not chat and not commands:
            # nothing to read (a session that is not resuming, of a participant
            # that takes no commands): where to continue is where it was
            return Backlog([], after or 0, False)

        # the rooms it may read as the broker delivers them now (a rule set
        # since it subscribed applies to its backlog as to live events)
        readable = self.sub.broker.readable_of(participant_id)
        only = readable if isinstance(readable, Readable) else None

        def read(conn: Connection) -> Backlog:
            head = messages_repo.head_seq(conn)
            found: list[Message] = []
            if chat:
                found = messages_repo.messages_after(
                    conn,
                    participant_id,
                    after,
                    limit + 1,
                    mentions_of=mentions_of,
                    readable=None if only is None else (only.everywhere, only.exceptions),
                    upto=head,
                )
            truncated = len(found) > limit
            found = found[:limit]
            # never back: a cursor handed out before (by this process or
            # another, whose bound was higher a moment ago) covers what it
            # covers; but not past the newest message written (a cursor
            # kept from before a restore of an older backup comes down)
            mine = after or 0
            if mine > head:
                mine = min(mine, messages_repo.newest_seq(conn))
            cursor = found[-1].seq if truncated else max(head, mine)
            waiting, more = self._pending(conn, None) if commands else ([], False)
            return Backlog(found, cursor, truncated, waiting, more)

        return await self._db.read(read)

    async def more_commands(
        self, after: agents_repo.CommandRow
    ) -> tuple[list[agents_repo.CommandRow], bool]:
        """The waiting commands after *after* (the last of a backlog whose
        ``commands_truncated`` is set, or of the page before), at most the
        configured maximum, and whether more wait after those. By their
        order, not by whether they are marked delivered yet: a command
        queued a moment ago is not read again.

        Raises:
            Unavailable: the store could not be read.
        """
        return await self._db.read(partial(self._pending, after=after.command_id))

    def _pending(
        self, conn: Connection, after: str | None
    ) -> tuple[list[agents_repo.CommandRow], bool]:
        limit = self._max_commands
        found = agents_repo.pending_commands(conn, self.participant_id, limit + 1, after=after)
        return found[:limit], len(found) > limit

    async def wait_for_more(self) -> bool:
        """Wait until a message or a command may be waiting (a wake-up: read
        the store again from your cursor). False if the subscription ended
        (see ``sub.failed``)."""
        while True:
            batch = await self.sub.get_batch()
            if any(isinstance(event, (MessagePosted, CommandIssued)) for event, _ in batch):
                return True
            if self.sub.failed is not None:
                return False

    async def replay(self, backlog: Backlog) -> bool:
        """Queue the backlog's messages and commands as live events would be
        (waiting for room), and every command waiting after those if they
        were not all (``commands_truncated``). False if the subscription
        ended meanwhile.

        Raises:
            Unavailable: the store could not be read (the rest of the commands).
        """
        for message in backlog.messages:
            event: Event = MessagePosted(message.room_id, message=message)
            if not await self.sub.put(event, event.frame):
                return False
        commands, more = backlog.commands, backlog.commands_truncated
        while True:
            self.replayed(commands)
            for command in commands:
                issued = command_event(command)
                if not await self.sub.put(issued, issued.frame):
                    return False
            if not (more and commands):
                return True
            commands, more = await self.more_commands(commands[-1])

    def replayed(self, commands: list[agents_repo.CommandRow]) -> None:
        """*commands* are handed out by the catch-up (:meth:`replay`, or a
        caller's own): a live copy of one is dropped by :meth:`go_live`."""
        self._sent.update(command.command_id for command in commands)

    async def go_live(self, replayed_to: int | None) -> None:
        """Deliver live events again (after :meth:`Subscription.hold`),
        dropping those held meanwhile that the catch-up already delivered:
        a message at or before *replayed_to*, a command it handed out."""
        await self.sub.release(skip=_Replayed(replayed_to, frozenset(self._sent)))


class _Replayed:
    """Whether an event was delivered by a resume's replay already: a message
    at or before *replayed_to*, a command in *sent*. The subscription keeps
    it for as long as it lives (an event may be published after the replay
    read it: a commit on a worker thread publishes when the writer task next
    runs; with several processes, when the bus applies it), so it is small."""

    __slots__ = ("replayed_to", "sent")

    def __init__(self, replayed_to: int | None, sent: frozenset[str]) -> None:
        self.replayed_to = replayed_to
        self.sent = sent

    def __call__(self, event: Event) -> bool:
        if isinstance(event, MessagePosted):
            return self.replayed_to is not None and event.message.seq <= self.replayed_to
        return isinstance(event, CommandIssued) and event.command_id in self.sent


class Delivery:
    """Opens feeds: one catch-up-then-follow for every transport, each
    giving the participant only the rooms the visibility decision lets it
    read (``authz.readable_rooms``), in its backlog as in live events."""

    def __init__(
        self, db: Database, broker: Broker, accounts: Accounts, *, max_commands: int
    ) -> None:
        self._db = db
        self._broker = broker
        self._accounts = accounts
        #: most waiting commands read at once (the configured maximum waiting)
        self._max_commands = max_commands

    async def follow(
        self,
        actor: Actor,
        *,
        capacity: int | None = None,
        chat: bool = True,
        token_id: str | None = None,
    ) -> Feed:
        """Subscribe *actor* to its events and hand out the feed to read its
        backlog from: nothing published after it returns is missed. Use the
        feed in a ``with`` block, right away: the subscription ends with
        the block (``with await delivery.follow(actor) as feed:``).
        *token_id*: the token the caller came with; signing it out ends the
        feed (``signed_out``, :func:`refuse_if_access_ended`).

        The rooms it may read are decided for the participant as it is now
        (its role may have changed since *actor* was resolved), and again
        by :meth:`refresh` whenever its role or the rules change.

        Cancellation: safe; nothing is subscribed until it returns."""
        current = await self._accounts.actor_of(actor.participant_id)
        # deleted meanwhile: it reads nothing (its subscriptions are ending)
        readable = readable_rooms(current) if current is not None else Readable(False, frozenset())
        sub = self._broker.subscribe(
            actor.participant_id,
            capacity,
            chat=chat,
            readable=None if readable.unrestricted else readable,
        )
        sub.token_id = token_id
        return Feed(self._db, actor.participant_id, sub, self._max_commands)

    async def resume_point(self, since: int | None) -> int:
        """Where a resume from the message *since* starts: *since*, or the
        node's newest message if *since* is past it (a cursor kept from
        before a restore of an older backup); ``None``: the newest, from now.
        Read it *before* :meth:`follow`: every message written after is then
        after it, and none of them is taken for one already delivered.

        Raises:
            Unavailable: the store could not be read.
        """
        if since is None:
            return await self._db.read(messages_repo.head_seq)
        # past the newest message written (not the newest final one: a
        # cursor handed out a moment ago may be past that, and is good)
        return min(since, await self._db.read(messages_repo.newest_seq))

    async def refresh(self, participant_id: str | None = None) -> None:
        """Decide again which rooms *participant_id* (``None``: everyone
        subscribed here) may read, after its role or the room rules
        changed, and apply it to its open subscriptions at once. Each room
        it stops or starts seeing is told to its sessions (``room_access``).

        Cancellation: safe; a participant not yet decided again keeps the
        decision it had."""
        subscribed = self._broker.subscribed()
        targets = subscribed if participant_id is None else subscribed & {participant_id}
        for target in sorted(targets):
            actor = await self._accounts.actor_of(target)
            if actor is None or target not in self._broker.subscribed():
                continue  # deleted (its subscriptions end) or gone meanwhile
            readable = readable_rooms(actor)
            hidden, shown = self._broker.set_readable(
                target, None if readable.unrestricted else readable
            )
            for room_id in sorted(hidden):
                self._broker.send_to(target, RoomAccess(room_id, readable=False))
            for room_id in sorted(shown):
                self._broker.send_to(target, RoomAccess(room_id, readable=True))


def refuse_if_access_ended(sub: Subscription) -> None:
    """A wait whose caller's access ended meanwhile (its feed's
    subscription ended so): its token signed out (or a guest's access
    ended), or its participant deleted, takes nothing more
    (``Ending.refusal``).

    Raises:
        Unauthorized: ``token_revoked`` or ``invalid_token``.
    """
    ending = sub.ending
    refused = None if ending is None else ending.refused()
    if refused is not None:
        raise refused
