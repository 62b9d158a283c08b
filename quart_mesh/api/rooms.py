"""Rooms, messages and reactions (spec §4.3; edit/delete/reactions over REST are extensions)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from ..records import iso
from ._common import caller, node, reply
from .contract import Body, OneOf, Query, Shape, accepts, answers, query
from .objects import Id, Message, Ok, ParticipantView, RoomView, Timestamp

bp = Blueprint("rooms", __name__)


class CreateRoom(Body):
    #: trimmed and stored in NFKC; refused when a room has it (409
    #: `room_name_taken`) or one that looks like it (409 `name_confusable`)
    name: str
    #: null counts as ""
    description: str | None = None


class RoomChange(Body):
    #: the new description (at most ``max_description_chars``); absent or
    #: null: no change
    description: str | None = None


class RoomDetails(RoomView):
    """A room with its members and what the caller may do in it."""

    members: list[ParticipantView]
    permissions: list[str]
    #: the caller muted it (false where it is not a member)
    muted: bool


class MessagesQuery(Query):
    #: messages before this cursor (newest first is not implied: oldest first)
    before: str | None = None
    #: messages after this cursor
    since: str | None = None
    #: a message id or cursor: that message with about ``limit``/2 on each side
    around: str | None = None
    #: at most this many (the node caps it)
    limit: int | None = None
    #: only the replies of this thread
    thread_id: str | None = None


class SendMessage(Body):
    content: str
    #: a participant id: the message is addressed to them (still visible to the room)
    to: str | None = None
    thread_id: str | None = None
    #: upload ids, ``/uploads/...`` paths or this node's upload URLs
    attachments: list[str] | None = None
    #: the sender's own id for this send: a retry with the same one is not stored twice
    client_id: str | None = None

    codes = {"attachments": "invalid_attachments"}


class MarkRead(Body):
    #: the cursor of the newest message read (a decimal string or number)
    cursor: str | int

    codes = {"cursor": "invalid_cursor"}


class ReadPosition(Shape):
    """The caller's read position in the room after the move."""

    room_id: Id
    cursor: str
    unread: int
    mentions: int


class SetMute(Body):
    #: true: mute the room (unread still counts; only mentions notify)
    muted: bool


class MuteState(Shape):
    """Whether the caller has the room muted now."""

    room_id: Id
    muted: bool


class ReadAll(Body):
    """No fields (an empty body counts as ``{}``)."""


class ReadPositions(Shape):
    """The caller's read position in each of its rooms and DMs after the move."""

    rooms: list[ReadPosition]


class PinState(Shape):
    """Whether the message is pinned now."""

    room_id: Id
    message_id: Id
    pinned: bool


class PinnedMessage(Shape):
    """A pinned message, who pinned it and when."""

    message: Message
    pinned_by: Id
    pinned_at: Timestamp


class ThreadsQuery(Query):
    #: threads whose newest reply is before this cursor (a page's ``nextBefore``)
    before: str | None = None
    #: at most this many (the node caps it)
    limit: int | None = None


class ThreadPage(Shape):
    """A page of a room's threads, the most recently replied to first: each
    thread's root message (with ``threadReplies`` and ``lastReplyAt``), and
    the ``before`` of the next page (null: the last page)."""

    threads: list[Message]
    next_before: str | None


class Deleted(Ok):
    message_id: Id


class React(Body):
    emoji: str


class RoomsQuery(Query):
    #: the ``nextCursor`` of the page before (absent: the first page)
    cursor: str | None = None
    #: rooms per page (the node caps it)
    limit: int | None = None


class RoomPage(Shape):
    """A page of rooms by name, and the cursor of the next (null: the last page)."""

    rooms: list[RoomView]
    next_cursor: str | None


@bp.get("/api/rooms")
@query(RoomsQuery)
@answers(OneOf(list[RoomView], RoomPage))
async def list_rooms(args: RoomsQuery) -> tuple[Any, int] | tuple[Any, int, dict[str, str]]:
    """The mesh's rooms by name, and whether the caller is a member of each.

    With ``cursor`` or ``limit``: a page, ``{"rooms", "nextCursor"}``.
    Without: the first ``max_room_page_size`` rooms as a list (as before
    pages existed), with the next page's cursor in the ``Mesh-Next-Cursor``
    header when there are more.
    """
    actor = await caller()
    paged = args.cursor is not None or args.limit is not None
    limit = args.limit if paged else node().settings.limits.max_room_page_size
    page = await node().rooms.page_rooms(actor, args.cursor, limit)
    rooms = [{**room.to_json(), "joined": joined} for room, joined in page.rooms]
    if paged:
        return reply({"rooms": rooms, "nextCursor": page.next_cursor})
    body, status = reply(rooms)
    if page.next_cursor is None:
        return body, status
    return body, status, {"Mesh-Next-Cursor": page.next_cursor}


@bp.post("/api/rooms")
@accepts(CreateRoom)
@answers(RoomView, 201)
async def create_room(data: CreateRoom) -> tuple[Any, int]:
    """Create a room; the caller joins it.

    Each role may have created so many rooms (``room_quotas``; admin and
    owner unlimited): beyond, 409 ``too_many_rooms`` (delete one first).
    """
    actor = await caller()
    room = await node().rooms.create(actor, data.name, data.description or "")
    return reply({**room.to_json(), "joined": True}, 201)


@bp.get("/api/rooms/<room_id>")
@answers(RoomDetails)
async def get_room(room_id: str) -> tuple[Any, int]:
    """A room, its members and the caller's permissions in it."""
    actor = await caller()
    details = await node().rooms.get(actor, room_id)
    return reply(
        {
            **details.room.to_json(),
            "joined": details.joined,
            "members": [m.to_json() for m in details.members],
            "permissions": details.permissions,
            "muted": details.muted,
        }
    )


@bp.patch("/api/rooms/<room_id>")
@accepts(RoomChange)
@answers(RoomView)
async def change_room(room_id: str, data: RoomChange) -> tuple[Any, int]:
    """Change a room's description (its creator, or with
    ``rooms.permissions``); its members get ``room_updated``."""
    actor = await caller()
    room, joined = await node().rooms.update(actor, room_id, data.description)
    return reply({**room.to_json(), "joined": joined})


@bp.get("/api/rooms/<room_id>/pins")
@answers(list[PinnedMessage])
async def list_pins(room_id: str) -> tuple[Any, int]:
    """The room's pinned messages, the most recently pinned first (a member
    who may read the room)."""
    actor = await caller()
    found = await node().messages.pins(actor, room_id)
    return reply(
        [
            {
                "message": message.to_json(),
                "pinnedBy": pin.pinned_by,
                "pinnedAt": iso(pin.pinned_at),
            }
            for message, pin in found
        ]
    )


@bp.put("/api/rooms/<room_id>/pins/<message_id>")
@answers(PinState)
async def pin_message(room_id: str, message_id: str) -> tuple[Any, int]:
    """Pin a message of the room (whoever may post in it; idempotent); its
    members get ``message_pinned``."""
    actor = await caller()
    await node().messages.pin(actor, room_id, message_id)
    return reply({"roomId": room_id, "messageId": message_id, "pinned": True})


@bp.delete("/api/rooms/<room_id>/pins/<message_id>")
@answers(PinState)
async def unpin_message(room_id: str, message_id: str) -> tuple[Any, int]:
    """Unpin a message of the room (whoever may post in it; idempotent); its
    members get ``message_unpinned``."""
    actor = await caller()
    await node().messages.unpin(actor, room_id, message_id)
    return reply({"roomId": room_id, "messageId": message_id, "pinned": False})


@bp.delete("/api/rooms/<room_id>")
@answers(Ok)
async def delete_room(room_id: str) -> tuple[Any, int]:
    """Delete a room (its creator, or with ``rooms.delete``)."""
    actor = await caller()
    await node().rooms.delete(actor, room_id)
    return reply({"ok": True})


@bp.post("/api/rooms/<room_id>/join")
@answers(RoomView)
async def join_room(room_id: str) -> tuple[Any, int]:
    """Join a room."""
    actor = await caller()
    room = await node().rooms.join(actor, room_id)
    return reply({**room.to_json(), "joined": True})


@bp.post("/api/rooms/<room_id>/leave")
@answers(RoomView)
async def leave_room(room_id: str) -> tuple[Any, int]:
    """Leave a room."""
    actor = await caller()
    room = await node().rooms.leave(actor, room_id)
    return reply({**room.to_json(), "joined": False})


@bp.get("/api/rooms/<room_id>/messages")
@query(MessagesQuery)
@answers(list[Message])
async def list_messages(room_id: str, args: MessagesQuery) -> tuple[Any, int]:
    """A page of a room's messages, oldest first (``before`` or ``since`` a
    cursor, or ``around`` a message)."""
    actor = await caller()
    messages = await node().messages.list_messages(
        actor,
        room_id,
        before=args.before,
        since=args.since,
        around=args.around,
        limit=args.limit,
        thread_id=args.thread_id,
    )
    return reply([m.to_json() for m in messages])


@bp.get("/api/rooms/<room_id>/threads")
@query(ThreadsQuery)
@answers(ThreadPage)
async def list_threads(room_id: str, args: ThreadsQuery) -> tuple[Any, int]:
    """A page of the room's threads (messages with replies), the most
    recently replied to first."""
    actor = await caller()
    roots, next_before = await node().messages.threads(
        actor, room_id, before=args.before, limit=args.limit
    )
    return reply({"threads": [m.to_json() for m in roots], "nextBefore": next_before})


@bp.post("/api/rooms/<room_id>/messages")
@accepts(SendMessage)
@answers(Message, 201)
async def send_message(room_id: str, data: SendMessage) -> tuple[Any, int]:
    """Send a message to a room."""
    actor = await caller()
    message = await node().messages.send(
        actor,
        room_id,
        data.content,
        to=data.to,
        thread_id=data.thread_id,
        attachments=data.attachments,
        client_id=data.client_id,
    )
    return reply(message.to_json(), 201)


@bp.post("/api/rooms/<room_id>/read")
@accepts(MarkRead)
@answers(ReadPosition)
async def mark_read(room_id: str, data: MarkRead) -> tuple[Any, int]:
    """Record how far the caller has read a room."""
    actor = await caller()
    read = await node().world.mark_room_read(actor, room_id, data.cursor)
    return reply(read.payload())


@bp.put("/api/rooms/<room_id>/mute")
@accepts(SetMute)
@answers(MuteState)
async def set_mute(room_id: str, data: SetMute) -> tuple[Any, int]:
    """Mute or unmute a room or DM for the caller (a member, or the DM's party)."""
    actor = await caller()
    muted = await node().rooms.mute(actor, room_id, data.muted)
    return reply(muted.payload())


@bp.post("/api/read-all")
@accepts(ReadAll)
@answers(ReadPositions)
async def read_all(data: ReadAll) -> tuple[Any, int]:
    """Mark every room and DM the caller is in read, up to its newest message."""
    actor = await caller()
    reads = await node().world.mark_all_read(actor)
    return reply({"rooms": [read.payload() for read in reads]})


@bp.get("/api/rooms/<room_id>/messages/<message_id>")
@answers(Message)
async def get_message(room_id: str, message_id: str) -> tuple[Any, int]:
    """One message of a room."""
    actor = await caller()
    message = await node().messages.get(actor, message_id, room_id=room_id)
    return reply(message.to_json())


class EditMessage(Body):
    content: str


@bp.patch("/api/rooms/<room_id>/messages/<message_id>")
@accepts(EditMessage)
@answers(Message)
async def edit_message(room_id: str, message_id: str, data: EditMessage) -> tuple[Any, int]:
    """Edit a message's content (its author, or with ``messages.edit``)."""
    actor = await caller()
    message = await node().messages.edit(actor, message_id, data.content, room_id=room_id)
    return reply(message.to_json())


@bp.delete("/api/rooms/<room_id>/messages/<message_id>")
@answers(Deleted)
async def delete_message(room_id: str, message_id: str) -> tuple[Any, int]:
    """Delete a message (its author, or with ``messages.delete``)."""
    actor = await caller()
    await node().messages.delete(actor, message_id, room_id=room_id)
    return reply({"ok": True, "messageId": message_id})


@bp.post("/api/rooms/<room_id>/messages/<message_id>/reactions")
@accepts(React)
@answers(Message)
async def add_reaction(room_id: str, message_id: str, data: React) -> tuple[Any, int]:
    """React to a message with an emoji."""
    actor = await caller()
    message = await node().messages.add_reaction(actor, message_id, data.emoji, room_id=room_id)
    return reply(message.to_json())


@bp.delete("/api/rooms/<room_id>/messages/<message_id>/reactions/<path:emoji>")
@answers(Message)
async def remove_reaction(room_id: str, message_id: str, emoji: str) -> tuple[Any, int]:
    """Take back the caller's reaction."""
    actor = await caller()
    message = await node().messages.remove_reaction(actor, message_id, emoji, room_id=room_id)
    return reply(message.to_json())
