"""Messages: send, page through, edit, delete, react.

:meth:`Messages.send` is the one way a message enters the node: REST,
WebSocket, polling bots, managed bots and federation all call it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..broker import Broker
from ..config import Limits
from ..errors import BadRequest, Conflict, Forbidden, NotFound
from ..events import (
    MessageDeleted,
    MessageEdited,
    MessagePinned,
    MessagePosted,
    MessageUnpinned,
    ReactionAdded,
    ReactionRemoved,
    Typing,
)
from ..ids import is_ulid, new_id
from ..records import Message, now_ms
from ..store import Database, outbox
from ..store import accounts as accounts_repo
from ..store import messages as repo
from ..store import pins as pins_repo
from ..store import relay as relay_repo
from ..store import rooms as rooms_repo
from .authz import Actor, RoomRef, authorize
from .ratelimit import RateLimiter
from .receipts import advance_reads
from .rooms import require_member
from .uploads import attachment_refs, resolve_attachments
from .validation import check_client_id, check_content, check_emoji, check_id, cursor_number

__all__ = ["MAX_PINS", "Messages", "RelaySource", "Relayed", "parse_cursor"]


@dataclass(frozen=True, slots=True)
class RelaySource:
    """Where a relayed change came from: the connection and the peer's outbox
    position. Stored with the change (the change is not sent back over that
    connection, and the position is marked applied in the same transaction)."""

    connection_id: str
    seq: int


@dataclass(frozen=True, slots=True)
class Relayed:
    """What a relayed message keeps from its home node (``docs/federation.md``)."""

    message_id: str
    created_at: int
    #: the sender's home node DID
    origin: str
    source: RelaySource
    #: a participant id here, or ``None``
    to: str | None = None
    thread_id: str | None = None
    #: its claimed time was outside the sane window: *created_at* is when it arrived
    time_replaced: bool = False


def _plain(
    to: str | None,
    thread_id: str | None,
    refs: tuple[tuple[str, str | None], ...],
    source: RelaySource | None,
) -> bool:
    """Whether a send is a plain local post (no ``to``, thread or
    attachments, not relayed): stored in one statement, checks included
    (``messages.post_message``), or a run of them in one (``post_messages``)."""
    return source is None and to is None and thread_id is None and not refs


async def _first(stored: Awaitable[tuple[Message, bool]]) -> Message:
    return (await stored)[0]


async def _if_new(stored: Awaitable[tuple[Message, bool]]) -> Message | None:
    message, new = await stored
    return message if new else None


def parse_cursor(conn: Connection, room_id: str, value: str, field: str) -> int:
    """A ``before``/``since`` value: a cursor (decimal) or a message id in this room.

    Raises:
        BadRequest: neither a cursor nor a message id of this room (``invalid_cursor``).
    """
    cursor = cursor_number(value)
    if cursor is not None:
        return cursor
    if is_ulid(value):
        seq = repo.seq_of(conn, room_id, value)
        if seq is not None:
            return seq
    raise BadRequest(
        f"{field} must be a cursor or the id of a message in this room", "invalid_cursor"
    )


class SharedRooms:
    """The rooms whose changes may have to be relayed to other nodes: a
    superset (the store has the last word), kept by the federation relay.

    Copy-on-write: :attr:`current` is an immutable snapshot, replaced whole
    on change, so a unit of work reads it safely in the store's worker thread.

    With several processes on one database (*everywhere*), a room shared
    through another process must be relayed from this one at once too: every
    room may be shared, and each write asks the store (one indexed lookup).
    """

    def __init__(self, *, everywhere: bool = False) -> None:
        self.current: frozenset[str] = frozenset()
        self.everywhere = everywhere

    def add(self, *room_ids: str) -> None:
        self.current = self.current.union(room_ids)

    def __contains__(self, room_id: object) -> bool:
        return self.everywhere or room_id in self.current


#: the most pinned messages a room has (decision 0069)
MAX_PINS = 50


class Messages:
    """Owns the messages of rooms and DMs: sending (the one way in: module
    docstring), paging, reading one, editing, deleting, reactions and
    typing. Used by ``GET``/``POST /api/rooms/:roomId/messages``,
    ``GET``/``PATCH``/``DELETE /api/rooms/:roomId/messages/:messageId`` and
    its ``reactions`` routes. Reached as ``node.messages``.
    """

    def __init__(
        self,
        db: Database,
        limits: Limits,
        broker: Broker,
        rate_limits: RateLimiter | None = None,
        shared_rooms: SharedRooms | None = None,
    ) -> None:
        self._db = db
        self._limits = limits
        self._broker = broker
        self._rate = rate_limits or RateLimiter()
        self._shared = shared_rooms or SharedRooms()

    def typing(self, actor: Actor, room_id: str) -> None:
        """Tell the room's other members the actor is typing (rate-limited,
        silently: by default at most one event per participant and room per
        second, the ``typing`` rule)."""
        authorize(actor, "rooms.read", RoomRef(room_id))
        authorize(actor, "messages.send", RoomRef(room_id))
        if room_id not in self._broker.rooms_of(actor.participant_id):
            raise Forbidden("you are not a member of this room", "not_member")
        if not self._rate.participant_allowed("typing", actor, room_id):
            return
        self._broker.publish_live(Typing(room_id, participant_id=actor.participant_id))

    async def send(
        self,
        actor: Actor,
        room_id: str,
        content: str,
        *,
        to: str | None = None,
        thread_id: str | None = None,
        attachments: object = None,
        client_id: str | None = None,
    ) -> Message:
        """Store a message from *actor* in *room_id*, publish it, and return it.

        *attachments* is the client's ``attachments`` value: ``None`` or a
        list of upload ids or URLs of this node (see ``docs/uploads.md``).
        *client_id* is the sender's own id for this send: if the sender
        already sent a message with it, that message is returned and nothing
        new is stored or published (a retry after a lost answer).

        Raises:
            NotFound: unknown room.
            Forbidden: not a member, or the role may not send (or attach).
            BadRequest: empty content, unknown ``to``, ``threadId`` or attachment.
            Conflict: *client_id* names the sender's message in another room.
            PayloadTooLarge: content over the limit.
        """
        return await self.submit_send(
            actor,
            room_id,
            content,
            to=to,
            thread_id=thread_id,
            attachments=attachments,
            client_id=client_id,
        )

    def submit_send(
        self,
        actor: Actor,
        room_id: str,
        content: str,
        *,
        to: str | None = None,
        thread_id: str | None = None,
        attachments: object = None,
        client_id: str | None = None,
    ) -> Awaitable[Message]:
        """:meth:`send` in two steps: check and queue now (raising at once for
        what can be checked without the store), await the stored message later.
        Messages queued by one caller are stored in the order queued.

        Raises:
            NotFound: unknown room.
            Forbidden: not a member, or the role may not send.
            BadRequest: empty content, unknown ``to``, ``threadId`` or attachment.
            PayloadTooLarge: content over the limit.
            RateLimited: the actor sends too fast (the ``messages`` rule).
        """
        refs = attachment_refs(attachments, self._limits)
        if to is not None:
            check_id(to, "to")
        if thread_id is not None:
            check_id(thread_id, "threadId")
        if client_id is not None:
            check_client_id(client_id)
        message = self._check_send(
            actor, room_id, content, refs, new_id(), now_ms(), None, client_id
        )
        stored = self._db.submit(
            self._storer(actor, message, to, thread_id, refs, source=None),
            quick=True,
            # a run of plain posts is inserted in one statement (store/ahead.py)
            ahead=(repo.post_messages, message) if _plain(to, thread_id, refs, None) else None,
        )
        return _first(stored)

    def submit_relayed(
        self, actor: Actor, room_id: str, content: str, relayed: Relayed
    ) -> Awaitable[Message | None]:
        """Store a message relayed from another node (``docs/federation.md``):
        the same checks as :meth:`send` for *actor* (a remote participant),
        keeping the message's id and time. Checks and queues now, like
        :meth:`submit_send`; the awaitable gives the stored message, or
        ``None`` if it was here already (relays are idempotent by message id).
        A ``to`` or ``threadId`` naming nothing here is dropped, not refused.

        Raises:
            as :meth:`send`; Conflict (on await) if another room's message has the id.
        """
        message = self._check_send(
            actor, room_id, content, (), relayed.message_id, relayed.created_at, relayed.origin
        )
        if relayed.time_replaced:
            message = replace(message, time_replaced=True)
        stored = self._db.submit(
            self._storer(actor, message, relayed.to, relayed.thread_id, (), source=relayed.source),
            quick=True,
        )
        return _if_new(stored)

    def _check_send(
        self,
        actor: Actor,
        room_id: str,
        content: str,
        refs: tuple[tuple[str, str | None], ...],
        message_id: str,
        created_at: int,
        origin: str | None,
        client_id: str | None = None,
    ) -> Message:
        # one may post only where one may read (its own echo is room content)
        authorize(actor, "rooms.read", RoomRef(room_id))
        authorize(actor, "messages.send", RoomRef(room_id))
        check_content(content, self._limits)
        if refs:
            authorize(actor, "files.upload", RoomRef(room_id))
        self._rate.participant("messages", actor)
        return Message(
            seq=0,
            message_id=message_id,
            room_id=room_id,
            sender_id=actor.participant_id,
            sender_name=actor.name,
            content=content,
            created_at=created_at,
            origin=origin,
            client_id=client_id,
        )

    def _storer(
        self,
        actor: Actor,
        message: Message,
        to: str | None,
        thread_id: str | None,
        refs: tuple[tuple[str, str | None], ...],
        *,
        source: RelaySource | None,
    ) -> Callable[[Connection], tuple[Message, bool]]:
        """The unit of work that stores *message* (and queues it for peers if
        its room is shared): (the message, whether it is new)."""
        room_id = message.room_id
        relayed = source is not None
        plain = _plain(to, thread_id, refs, source)

        def published(
            conn: Connection, stored: Message, shared: bool | None = None
        ) -> tuple[Message, bool]:
            self._record(
                conn,
                room_id,
                "message",
                {
                    "messageId": stored.message_id,
                    "content": stored.content,
                    "createdAt": stored.created_at,
                    "to": stored.to_id,
                    "threadId": stored.thread_id,
                },
                by=actor.participant_id,
                source=source,
                mark=False,  # relayed messages are recognized by their id
                shared=shared,
            )
            outbox.emit(conn, MessagePosted(room_id, message=stored))
            return stored, True

        def sent_before(conn: Connection) -> Message | None:
            """This message, stored already: a relayed one by its id (relays
            are idempotent), a send by its clientId (a retry: answered as the
            first time)."""
            if relayed and (existing := repo.get_message(conn, message.message_id)) is not None:
                if existing.room_id != room_id:
                    raise Conflict("that message id is taken", "message_id_taken")
                return existing
            if message.client_id is None:
                return None
            existing = repo.get_message_by_client_id(conn, actor.participant_id, message.client_id)
            if existing is not None and existing.room_id != room_id:
                raise Conflict(
                    "you sent a message with this clientId in another room", "client_id_taken"
                )
            return existing

        def insert(conn: Connection, draft: Message) -> Message:
            if not refs:
                return repo.insert_message(conn, draft)
            attached = resolve_attachments(conn, refs)
            stored = repo.insert_message(conn, replace(draft, attachments=attached))
            repo.add_attachments(conn, stored.message_id, [a.upload_id for a in attached])
            return stored

        def write(conn: Connection) -> tuple[Message, bool]:
            if plain and (posted := repo.post_message(conn, message)) is not None:
                return published(conn, *posted)
            # in full: why not (not a member, a retry), or a DM, a reply, ...
            found = rooms_repo.kind_and_membership(conn, room_id, actor.participant_id)
            if found is None or (found[0] == "dm" and not found[1]):
                raise NotFound("no such room", "room_not_found")
            kind, member = found
            if not member:
                raise Forbidden("you are not a member of this room", "not_member")
            if (existing := sent_before(conn)) is not None:
                return existing, False
            target, thread = to, thread_id
            if target is not None and accounts_repo.get_participant(conn, target) is None:
                if not relayed:
                    raise BadRequest("to names no participant", "unknown_participant")
                target = None
            if thread is not None:
                parent = repo.get_message(conn, thread)
                if parent is None or parent.room_id != room_id:
                    if not relayed:
                        raise BadRequest("threadId names no message in this room", "unknown_thread")
                    thread = None
            draft = replace(message, to_id=target, thread_id=thread)
            # (in a savepoint if it may be stored already: the same send, or
            # a copy of the same relayed message, through another process
            # may commit first, on PostgreSQL)
            again = relayed or message.client_id is not None
            try:
                with conn.begin_nested() if again else contextlib.nullcontext():
                    stored = insert(conn, draft)
            except IntegrityError:
                if (existing := sent_before(conn)) is None:
                    raise
                return existing, False
            if kind == "dm":
                rooms_repo.unhide_all(conn, room_id)
            return published(conn, stored)

        return write

    async def list_messages(
        self,
        actor: Actor,
        room_id: str,
        *,
        before: str | None = None,
        since: str | None = None,
        limit: int | None = None,
        thread_id: str | None = None,
        around: str | None = None,
    ) -> list[Message]:
        """A page of messages, oldest first (see ``docs/rest.md``); with
        *thread_id*, only the replies to that message; with *around* (a
        message id or cursor), that message and about *limit*/2 on each side.

        Raises:
            BadRequest: a bad ``before``/``since``/``around``/``limit``/``threadId``,
                or ``around`` with ``before`` or ``since``.
        """
        authorize(actor, "rooms.read", RoomRef(room_id))
        limit = self._page_size(limit)
        if thread_id is not None and not is_ulid(thread_id):
            raise BadRequest("threadId must be a message id", "invalid_query")
        if around is not None and (before is not None or since is not None):
            raise BadRequest("around goes without before and since", "invalid_query")

        def read(conn: Connection) -> list[Message]:
            require_member(conn, actor, room_id)
            if around is not None:
                at = parse_cursor(conn, room_id, around, "around")
                return repo.messages_around(conn, room_id, at, limit, thread_id=thread_id)
            before_seq = None if before is None else parse_cursor(conn, room_id, before, "before")
            since_seq = None if since is None else parse_cursor(conn, room_id, since, "since")
            return repo.list_messages(
                conn, room_id, before=before_seq, since=since_seq, limit=limit, thread_id=thread_id
            )

        page = await self._db.read(read)
        # reading advances the caller's read position; a thread's page, or a
        # page around a message one opened, need not hold the newest
        # messages before it: it does not
        if page and thread_id is None and around is None:
            newest = page[-1].seq
            await self._db.write(
                lambda conn: advance_reads(conn, actor.participant_id, {room_id: newest})
            )
        return page

    def _page_size(self, limit: int | None) -> int:
        """A page's size: *limit*, or the default when None.

        Raises:
            BadRequest: outside 1..``max_page_size`` (``invalid_limit``).
        """
        if limit is None:
            return self._limits.default_page_size
        if not 1 <= limit <= self._limits.max_page_size:
            raise BadRequest(
                f"limit must be between 1 and {self._limits.max_page_size}", "invalid_limit"
            )
        return limit

    async def threads(
        self, actor: Actor, room_id: str, *, before: str | None = None, limit: int | None = None
    ) -> tuple[list[Message], str | None]:
        """A page of the room's threads, the most recently replied to first:
        their roots (``threadReplies``, ``lastReplyAt``) and the ``before`` of
        the next page (None: the last page), for a member who may read the
        room (the one visibility decision, as the history).

        Raises:
            BadRequest: a bad ``before`` or ``limit``.
            NotFound: no such room (``room_not_found``).
            Forbidden: not a member, or may not read the room.
        """
        authorize(actor, "rooms.read", RoomRef(room_id))
        limit = self._page_size(limit)

        def read(conn: Connection) -> tuple[list[Message], str | None]:
            require_member(conn, actor, room_id)
            before_seq = None if before is None else parse_cursor(conn, room_id, before, "before")
            roots, after = repo.list_threads(conn, room_id, before=before_seq, limit=limit)
            return roots, None if after is None else str(after)

        return await self._db.read(read)

    def _load(
        self, conn: Connection, actor: Actor, message_id: str, room_id: str | None = None
    ) -> Message:
        """The message, if the actor may see it (and it is in *room_id*, if given)."""
        message = repo.get_message(conn, message_id) if is_ulid(message_id) else None
        if message is None or (room_id is not None and message.room_id != room_id):
            raise NotFound("no such message", "message_not_found")
        require_member(conn, actor, message.room_id)
        return message

    async def get(self, actor: Actor, message_id: str, *, room_id: str | None = None) -> Message:
        """One message with its reactions, for a member who may read its
        room (``rooms.read``, its rules included); with *room_id*, only if
        the message is in that room.

        Raises:
            NotFound: no such message, or not in *room_id*
                (``message_not_found``); or it is in a DM the actor is not
                in (``room_not_found``).
            Forbidden: the actor is not a member of the message's room
                (``not_member``), or may not read it (``forbidden``).
        """
        return await self._db.read(lambda conn: self._load(conn, actor, message_id, room_id))

    async def edit(
        self,
        actor: Actor,
        message_id: str,
        content: str,
        *,
        room_id: str | None = None,
        source: RelaySource | None = None,
    ) -> Message:
        """Replace a message's content: its author, or moderator and above.
        Edits count against the ``messages`` rate limit."""
        check_content(content, self._limits)
        self._rate.participant("messages", actor)

        def write(conn: Connection) -> Message:
            message = self._load(conn, actor, message_id, room_id)
            authorize(actor, "messages.edit", self._ref(conn, message))
            repo.update_content(conn, message_id, content, now_ms())
            edited = repo.get_message(conn, message_id)
            assert edited is not None
            self._record(
                conn,
                edited.room_id,
                "edit",
                {"messageId": message_id, "content": content},
                by=actor.participant_id,
                source=source,
            )
            outbox.emit(conn, MessageEdited(edited.room_id, message=edited))
            return edited

        return await self._db.write(write)

    async def delete(
        self,
        actor: Actor,
        message_id: str,
        *,
        room_id: str | None = None,
        source: RelaySource | None = None,
    ) -> Message:
        """Delete a message (and its reactions): its author, or moderator and above.

        Returns the message as it was.
        """

        def write(conn: Connection) -> Message:
            message = self._load(conn, actor, message_id, room_id)
            authorize(actor, "messages.delete", self._ref(conn, message))
            if pins_repo.unpin(conn, message_id):
                outbox.emit(
                    conn,
                    MessageUnpinned(
                        message.room_id, message_id=message_id, unpinned_by=actor.participant_id
                    ),
                )
            repo.delete_message(conn, message_id)
            body: dict[str, object] = {"messageId": message_id}
            self._record(
                conn, message.room_id, "delete", body, by=actor.participant_id, source=source
            )
            outbox.emit(conn, MessageDeleted(message.room_id, message_id=message_id))
            return message

        return await self._db.write(write)

    async def pin(self, actor: Actor, room_id: str, message_id: str) -> bool:
        """Pin a message of *room_id* (idempotent: False if it was pinned):
        whoever may post in the room (``messages.send`` there, its rules
        included; decision 0069), at most :data:`MAX_PINS` a room; its
        members get ``message_pinned``. Counts against the ``reactions`` rate.

        Raises:
            NotFound: no such message in the room (``message_not_found``).
            Forbidden: not a member, may not read or post in the room.
            Conflict: the room has :data:`MAX_PINS` pins (``too_many_pins``).
        """
        self._rate.participant("reactions", actor)

        def write(conn: Connection) -> bool:
            message = self._load(conn, actor, message_id, room_id)
            authorize(actor, "messages.send", RoomRef(message.room_id))
            at = now_ms()
            found = pins_repo.Pin(message_id, message.room_id, actor.participant_id, at)
            added = pins_repo.pin(conn, found, cap=MAX_PINS)
            if added is False:
                return False  # pinned already: idempotent, even in a full room
            if added is None:
                raise Conflict(
                    f"this room has {MAX_PINS} pinned messages, the most it may: unpin one first",
                    "too_many_pins",
                )
            outbox.emit(
                conn,
                MessagePinned(
                    message.room_id,
                    message_id=message_id,
                    pinned_by=actor.participant_id,
                    pinned_at=at,
                ),
            )
            return True

        return await self._db.write(write)

    async def unpin(self, actor: Actor, room_id: str, message_id: str) -> bool:
        """Unpin a message of *room_id* (idempotent: False if it was not
        pinned); the same permission as :meth:`pin`; its members get
        ``message_unpinned``.

        Raises:
            NotFound: no such message in the room (``message_not_found``).
            Forbidden: not a member, may not read or post in the room.
        """
        self._rate.participant("reactions", actor)

        def write(conn: Connection) -> bool:
            message = self._load(conn, actor, message_id, room_id)
            authorize(actor, "messages.send", RoomRef(message.room_id))
            if not pins_repo.unpin(conn, message_id):
                return False
            outbox.emit(
                conn,
                MessageUnpinned(
                    message.room_id, message_id=message_id, unpinned_by=actor.participant_id
                ),
            )
            return True

        return await self._db.write(write)

    async def pins(self, actor: Actor, room_id: str) -> list[tuple[Message, pins_repo.Pin]]:
        """A room's pinned messages, the most recently pinned first, for a
        member who may read the room (the one visibility decision).

        Raises:
            NotFound: no such room (``room_not_found``).
            Forbidden: not a member, or may not read the room.
        """

        def read(conn: Connection) -> list[tuple[Message, pins_repo.Pin]]:
            require_member(conn, actor, room_id)
            found = []
            for pin in pins_repo.list_pins(conn, room_id):
                message = repo.get_message(conn, pin.message_id)
                if message is not None:
                    found.append((message, pin))
            return found

        return await self._db.read(read)

    async def add_reaction(
        self,
        actor: Actor,
        message_id: str,
        emoji: str,
        *,
        room_id: str | None = None,
        source: RelaySource | None = None,
    ) -> Message:
        """React with *emoji* (idempotent per participant and emoji; rate-limited)."""
        check_emoji(emoji, self._limits)
        self._rate.participant("reactions", actor)

        def write(conn: Connection) -> tuple[Message, bool]:
            message = self._load(conn, actor, message_id, room_id)
            authorize(actor, "messages.react", RoomRef(message.room_id))
            emojis = {r.emoji for r in message.reactions}
            if emoji not in emojis and len(emojis) >= self._limits.max_reactions_per_message:
                raise BadRequest(
                    "this message has as many different reactions as allowed",
                    "too_many_reactions",
                )
            added = repo.add_reaction(conn, message_id, actor.participant_id, emoji, now_ms())
            if added:
                self._record_reaction(conn, actor, message, emoji, True, source)
                _reacted(conn, ReactionAdded, actor, message, emoji)
            return self._load(conn, actor, message_id), added

        message, _ = await self._db.write(write)
        return message

    async def remove_reaction(
        self,
        actor: Actor,
        message_id: str,
        emoji: str,
        *,
        room_id: str | None = None,
        source: RelaySource | None = None,
    ) -> Message:
        """Withdraw the actor's *emoji* reaction (idempotent; rate-limited)."""
        check_emoji(emoji, self._limits)
        self._rate.participant("reactions", actor)

        def write(conn: Connection) -> tuple[Message, bool]:
            message = self._load(conn, actor, message_id, room_id)
            authorize(actor, "messages.react", RoomRef(message.room_id))
            removed = repo.remove_reaction(conn, message_id, actor.participant_id, emoji)
            if removed:
                self._record_reaction(conn, actor, message, emoji, False, source)
                _reacted(conn, ReactionRemoved, actor, message, emoji)
            return self._load(conn, actor, message_id), removed

        message, _ = await self._db.write(write)
        return message

    def _record(
        self,
        conn: Connection,
        room_id: str,
        kind: str,
        body: dict[str, object],
        *,
        by: str,
        source: RelaySource | None,
        mark: bool = True,
        shared: bool | None = None,
    ) -> None:
        """Queue a change for the nodes its room is shared with, if it is, and
        (with *mark*) mark a relayed change applied, in the change's own
        transaction (``docs/federation.md``). *shared*: whether the room is
        shared, if the unit's own statement told (``None``: ask)."""
        via = None
        if source is not None:
            via = source.connection_id
            if mark:
                relay_repo.mark_applied(conn, source.connection_id, source.seq)
        if shared is not False and room_id in self._shared:
            relay_repo.record(conn, room_id, kind, body, by, via=via, shared=shared)

    def _record_reaction(
        self,
        conn: Connection,
        actor: Actor,
        message: Message,
        emoji: str,
        added: bool,
        source: RelaySource | None,
    ) -> None:
        body = {"messageId": message.message_id, "emoji": emoji, "added": added}
        self._record(
            conn, message.room_id, "reaction", body, by=actor.participant_id, source=source
        )

    @staticmethod
    def _ref(conn: Connection, message: Message) -> RoomRef:
        room = rooms_repo.get_room(conn, message.room_id)
        kind = room.kind if room else "room"
        return RoomRef(message.room_id, kind, owner_id=message.sender_id)


def _reacted(
    conn: Connection, event: type[ReactionAdded], actor: Actor, message: Message, emoji: str
) -> None:
    """Publish a reaction change once it commits."""
    outbox.emit(
        conn,
        event(
            message.room_id,
            message_id=message.message_id,
            emoji=emoji,
            participant_id=actor.participant_id,
        ),
    )
