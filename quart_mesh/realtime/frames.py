"""The WebSocket frames on ``/ws`` declared as msgspec ``Struct`` types, and
the JSON Schema (draft 2020-12) built from them (``docs/websocket.md``).

This module only declares: the session (``realtime/session.py``) parses
client frames as it always has, and the events (``events.py``) render
server frames. The declarations are for the documentation and the tests,
which check against :func:`frames_schema` every frame the end-to-end tests
receive, and both ways every frame of a session that uses the whole
protocol. The document is checked in as
``docs/websocket-frames.schema.json``; after changing a frame, regenerate it::

    python -m quart_mesh.realtime.frames > docs/websocket-frames.schema.json

Client frames follow the node's JSON rules: unknown fields are ignored and a
``null`` counts as absent, so their optional fields are nullable. Server
frames declare exactly the fields the node sends (no others: the tests see
an undeclared field as a mismatch); a field that is sometimes left out is
optional there, never ``null``.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final, Literal

import msgspec

__all__ = [
    "CLIENT_FRAMES",
    "CLIENT_FRAME_TYPES",
    "SERVER_FRAMES",
    "SERVER_FRAME_TYPES",
    "frames_schema",
]

_REF: Final = "#/$defs/{name}"

#: ISO 8601 UTC with milliseconds (``2026-11-21T21:04:36.123Z``)
Timestamp = Annotated[str, msgspec.Meta(extra_json_schema={"format": "date-time"})]
#: a message cursor: decimal digits (at most 18)
Cursor = Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,18}$")]
#: a message cursor as a client may give it: decimal digits, or a whole number
ClientCursor = (
    Annotated[str, msgspec.Meta(pattern=r"^[0-9]{1,18}$")]
    | Annotated[int, msgspec.Meta(ge=0, le=999_999_999_999_999_999)]
)
TrustLevel = Literal["local", "federated"]


# client frames ---------------------------------------------------------------


class _Client(msgspec.Struct, rename="camel", tag_field="type", kw_only=True):
    """A client frame: unknown fields are ignored; ``null`` counts as absent."""


class Authenticate(_Client, tag="authenticate"):
    """The first frame of every session (answered with ``auth_ok`` and
    ``snapshot``, or an ``error`` and close code 1008)."""

    #: a bearer token, as REST takes it
    token: str
    #: resume: replay the messages after this cursor
    since: ClientCursor | None = None
    #: default true: delivered messages count as read
    auto_read: bool | None = None


class _Frame(_Client):
    """A frame after ``authenticate``. Any may carry ``clientId``: an
    ``error`` the frame causes carries it back (when well formed)."""

    client_id: str | None = None


class JoinRoom(_Frame, tag="join_room", kw_only=True):
    """Join a room (``participant_joined``)."""

    room_id: str


class LeaveRoom(_Frame, tag="leave_room", kw_only=True):
    """Leave a room (``participant_left``)."""

    room_id: str


class SendMessage(_Frame, tag="send_message", kw_only=True):
    """Post a message (``message``); ``clientId`` makes retries safe."""

    room_id: str
    content: str
    #: a participant id
    to: str | None = None
    #: the id of the message this one replies to
    thread_id: str | None = None
    #: upload ids, upload URLs or ``/uploads/<name>`` paths
    attachments: list[str] | None = None


class EditMessage(_Frame, tag="edit_message", kw_only=True):
    """Replace a message's content (``message_edited``)."""

    message_id: str
    content: str


class DeleteMessage(_Frame, tag="delete_message", kw_only=True):
    """Delete a message (``message_deleted``)."""

    message_id: str


class AddReaction(_Frame, tag="add_reaction", kw_only=True):
    """React to a message (``reaction_added``)."""

    message_id: str
    emoji: str


class RemoveReaction(_Frame, tag="remove_reaction", kw_only=True):
    """Withdraw one's reaction (``reaction_removed``)."""

    message_id: str
    emoji: str


class TypingNotice(_Frame, tag="typing", kw_only=True):
    """The sender is typing in a room (``typing``, to the others)."""

    room_id: str


class MarkRead(_Frame, tag="mark_read", kw_only=True):
    """Move the sender's read position in a room (``room_read``)."""

    room_id: str
    cursor: ClientCursor


class Move(_Frame, tag="move", kw_only=True):
    """Set the sender's position in a room (``participant_moved``)."""

    room_id: str
    x: float
    y: float
    z: float


class SearchFrame(_Frame, tag="search", kw_only=True):
    """Search the messages one may read (``GET /api/search`` as a frame),
    answered with ``search_results`` carrying the frame's ``clientId``."""

    q: str | None = None
    room: str | None = None
    sender: str | None = msgspec.field(default=None, name="from")
    before: str | None = None
    after: str | None = None
    within: str | None = msgspec.field(default=None, name="in")
    has: str | None = None
    mentions: str | None = None
    sort: Literal["newest", "relevance"] | None = None
    cursor: str | None = None
    limit: int | None = None


class CommandResult(_Frame, tag="command_result", kw_only=True):
    """An agent's answer to a ``command`` sent to it."""

    command_id: str
    #: default true
    ok: bool | None = None
    #: any JSON
    result: Any = None


class TaskCreate(_Frame, tag="task_create", kw_only=True):
    """Ask a bot of a room for something (``POST /api/tasks``): seen as ``task_created``."""

    room_id: str
    agent_id: str
    content: str
    title: str | None = None


class TaskUpdate(_Frame, tag="task_update", kw_only=True):
    """The task's agent moves it (``PATCH /api/tasks/:taskId``): seen as ``task_updated``."""

    task_id: str
    state: str
    #: a status text, posted in the task's thread
    message: str | None = None
    #: the final answer
    result: str | None = None


class TaskCancel(_Frame, tag="task_cancel", kw_only=True):
    """Cancel a task (its creator, or ``agents.command``): seen as ``task_updated``."""

    task_id: str


class TaskReply(_Frame, tag="task_reply", kw_only=True):
    """The task's creator answers in its thread: seen as ``task_updated`` (working)."""

    task_id: str
    content: str


#: every frame a client sends
CLIENT_FRAMES: Final[tuple[type[msgspec.Struct], ...]] = (
    Authenticate,
    JoinRoom,
    LeaveRoom,
    SendMessage,
    EditMessage,
    DeleteMessage,
    AddReaction,
    RemoveReaction,
    TypingNotice,
    MarkRead,
    Move,
    CommandResult,
    SearchFrame,
    TaskCreate,
    TaskUpdate,
    TaskCancel,
    TaskReply,
)

ClientFrame = (
    Authenticate
    | JoinRoom
    | LeaveRoom
    | SendMessage
    | EditMessage
    | DeleteMessage
    | AddReaction
    | RemoveReaction
    | TypingNotice
    | MarkRead
    | Move
    | CommandResult
    | SearchFrame
    | TaskCreate
    | TaskUpdate
    | TaskCancel
    | TaskReply
)


# nested shapes of server frames ---------------------------------------------


class _Shape(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    """Part of a server frame: exactly these fields."""


class Participant(_Shape):
    """A participant (a person, a bot or a guest)."""

    participant_id: str
    name: str
    #: shown beside the unique name (spaces allowed); null when unset
    display_name: str | None
    type: str
    role: str
    online: bool
    last_seen: Timestamp | None
    created_at: Timestamp | None
    #: the home node's DID of a participant relayed from another node
    origin: str | None
    trust_level: TrustLevel


class Position(_Shape):
    """Where a participant is, in one of its rooms."""

    room_id: str
    x: float
    y: float
    z: float


class SnapshotParticipant(Participant):
    """A participant with its position (null: never moved)."""

    position: Position | None


class SnapshotRoom(_Shape):
    """A room the participant can see: every ordinary room, and its DMs."""

    room_id: str
    kind: Literal["room", "dm"]
    name: str
    description: str
    created_at: Timestamp | None
    created_by: str | None
    member_count: int
    origin: str | None
    joined: bool
    #: the participant muted it (false where it is not a member)
    muted: bool
    #: only on DMs: the other participant's id
    with_: str | msgspec.UnsetType = msgspec.field(default=msgspec.UNSET, name="with")


class Reaction(_Shape):
    """One emoji on a message, and who reacted with it."""

    emoji: str
    count: int
    participant_ids: list[str]


class Attachment(_Shape):
    """An uploaded file attached to a message (``url``: the path on this node)."""

    upload_id: str
    url: str
    filename: str
    content_type: str
    size: int


# server frames ---------------------------------------------------------------


class _Server(
    msgspec.Struct, rename="camel", tag_field="type", forbid_unknown_fields=True, kw_only=True
):
    """A frame the node sends: exactly these fields."""


class AuthOk(_Server, tag="auth_ok"):
    """``authenticate`` succeeded."""

    participant_id: str


class Snapshot(_Server, tag="snapshot"):
    """The world as the participant sees it (``GET /api/state`` as a frame)."""

    rooms: list[SnapshotRoom]
    participants: list[SnapshotParticipant]
    #: the node's newest message cursor when the snapshot was taken
    cursor: Cursor


class ErrorFrame(_Server, tag="error"):
    """A frame failed, or why the session ends."""

    message: str
    code: str
    #: the type of the client frame that failed (cut to 40 characters)
    frame: str | msgspec.UnsetType = msgspec.UNSET
    #: seconds until the frame would be accepted (rate limits, ``overloaded``)
    retry_after: float | msgspec.UnsetType = msgspec.UNSET
    #: the ``clientId`` of the frame that failed
    client_id: str | msgspec.UnsetType = msgspec.UNSET


class Message(_Shape):
    """A message of a room or a DM (the REST Message)."""

    room_id: str
    message_id: str
    sender_id: str
    sender_name: str
    content: str
    timestamp: Timestamp | None
    to: str | None
    thread_id: str | None
    edited_at: Timestamp | None
    reactions: list[Reaction]
    attachments: list[Attachment]
    #: the message's position on the node
    cursor: Cursor
    origin: str | None
    trust_level: TrustLevel
    #: only when the sender gave one
    client_id: str | msgspec.UnsetType = msgspec.UNSET
    #: only on a relayed message whose claimed time was outside the sane
    #: window (``timestamp`` is then when it arrived here)
    timestamp_replaced: bool | msgspec.UnsetType = msgspec.UNSET
    #: only on a thread's root read from the store (a replayed message): how
    #: many replies it has, and when the newest was posted
    thread_replies: int | msgspec.UnsetType = msgspec.UNSET
    last_reply_at: Timestamp | msgspec.UnsetType = msgspec.UNSET


class MessagePosted(_Server, Message, tag="message"):
    """A message of a room or a DM (the REST Message, as a frame)."""


class Highlight(_Shape):
    """A matched range of a snippet, in code points (end exclusive)."""

    start: int
    end: int


class Snippet(_Shape):
    """An excerpt of a message's content (plain text) and its matched ranges."""

    text: str
    highlights: list[Highlight]


class SearchResult(_Shape):
    message: Message
    #: the room's name; a DM's: the other party's name
    room_name: str
    snippet: Snippet


class SearchResults(_Server, tag="search_results"):
    """The answer to a ``search`` frame (``GET /api/search``'s body)."""

    results: list[SearchResult]
    next_cursor: str | None
    #: the ``clientId`` of the ``search`` frame, when it had one
    client_id: str | msgspec.UnsetType = msgspec.UNSET


class MessageEdited(_Server, tag="message_edited"):
    """A message's content was replaced."""

    message_id: str
    content: str
    room_id: str
    edited_at: Timestamp


class MessageDeleted(_Server, tag="message_deleted"):
    """A message was deleted (its reactions with it)."""

    message_id: str
    room_id: str


class ReactionAdded(_Server, tag="reaction_added"):
    """A participant reacted to a message."""

    message_id: str
    emoji: str
    participant_id: str
    room_id: str


class ReactionRemoved(_Server, tag="reaction_removed"):
    """A participant withdrew its reaction."""

    message_id: str
    emoji: str
    participant_id: str
    room_id: str


class ParticipantJoined(_Server, tag="participant_joined"):
    """A participant joined a room (or a DM was made)."""

    room_id: str
    participant: Participant


class ParticipantLeft(_Server, tag="participant_left"):
    """A participant left a room."""

    room_id: str
    participant: Participant


class RoomDeleted(_Server, tag="room_deleted"):
    """A room is gone."""

    room_id: str


class MessagePinned(_Server, tag="message_pinned"):
    """A message of the room was pinned."""

    room_id: str
    message_id: str
    pinned_by: str
    pinned_at: Timestamp


class MessageUnpinned(_Server, tag="message_unpinned"):
    """A message of the room was unpinned (or deleted while pinned)."""

    room_id: str
    message_id: str
    #: who unpinned or deleted it
    unpinned_by: str


class RoomUpdated(_Server, tag="room_updated"):
    """A room's description changed (its name is as before)."""

    room_id: str
    name: str
    description: str
    #: who changed it
    updated_by: str


class RoomRead(_Server, tag="room_read"):
    """The participant's read position in a room moved."""

    room_id: str
    #: the read position now
    cursor: Cursor
    unread: int
    mentions: int


class DmRead(_Server, tag="dm_read"):
    """Another member's read position in a DM moved (a read receipt; only
    between members who both share their receipts)."""

    room_id: str
    participant_id: str
    #: its read position now
    cursor: Cursor


class ParticipantUpdated(_Server, tag="participant_updated"):
    """A member of the room (this participant too) changed its display
    name: once per room it is in."""

    room_id: str
    participant: Participant


class RoomMuted(_Server, tag="room_muted"):
    """The participant muted or unmuted a room or DM (from any of its
    sessions or over REST)."""

    room_id: str
    muted: bool


class RoomAccess(_Server, tag="room_access"):
    """Whether this participant may read a room it is in changed (a room
    rule, a preset or its role changed): with ``readable`` false the room's
    events stop until it is true again."""

    room_id: str
    readable: bool


class Typing(_Server, tag="typing"):
    """Another member is typing."""

    room_id: str
    participant_id: str


class Presence(_Server, tag="presence"):
    """A participant came online or went offline."""

    participant_id: str
    online: bool
    last_seen: Timestamp | None


class ParticipantMoved(_Server, tag="participant_moved"):
    """A participant's position in a room changed."""

    room_id: str
    participant_id: str
    x: float
    y: float
    z: float


class CommandIssued(_Server, tag="command"):
    """A structured command for this agent; answer with ``command_result``."""

    command_id: str
    command: str
    #: the command's arguments, as the sender gave them
    args: dict[str, Any]
    sent_by: str | None
    created_at: Timestamp


class Task(_Shape):
    """Work asked of an agent in a room (the REST Task)."""

    task_id: str
    room_id: str
    agent_id: str
    creator_id: str
    title: str
    state: Literal[
        "submitted", "working", "input-required", "completed", "failed", "canceled", "rejected"
    ]
    #: the request, the root of the task's thread
    message_id: str
    context_id: str
    status_message: str | None
    result: str | None
    managed: bool
    via: Literal["rest", "ws", "mcp", "a2a"]
    created_at: Timestamp
    updated_at: Timestamp


class TaskCreated(_Server, tag="task_created"):
    """A task was created in a room one may read."""

    task: Task


class TaskUpdated(_Server, tag="task_updated"):
    """A task of a room one may read changed."""

    task: Task


#: every frame the node sends
SERVER_FRAMES: Final[tuple[type[msgspec.Struct], ...]] = (
    AuthOk,
    Snapshot,
    ErrorFrame,
    MessagePosted,
    MessageEdited,
    MessageDeleted,
    ReactionAdded,
    ReactionRemoved,
    ParticipantJoined,
    ParticipantLeft,
    RoomDeleted,
    RoomUpdated,
    MessagePinned,
    MessageUnpinned,
    RoomRead,
    DmRead,
    ParticipantUpdated,
    RoomMuted,
    RoomAccess,
    Typing,
    Presence,
    ParticipantMoved,
    CommandIssued,
    SearchResults,
    TaskCreated,
    TaskUpdated,
)

ServerFrame = (
    AuthOk
    | Snapshot
    | ErrorFrame
    | MessagePosted
    | MessageEdited
    | MessageDeleted
    | ReactionAdded
    | ReactionRemoved
    | ParticipantJoined
    | ParticipantLeft
    | RoomDeleted
    | RoomUpdated
    | MessagePinned
    | MessageUnpinned
    | RoomRead
    | DmRead
    | ParticipantUpdated
    | RoomMuted
    | RoomAccess
    | Typing
    | Presence
    | ParticipantMoved
    | CommandIssued
    | SearchResults
    | TaskCreated
    | TaskUpdated
)


def _tag(cls: type[msgspec.Struct]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str), cls
    return tag


#: the ``type`` of every client frame (``authenticate`` included)
CLIENT_FRAME_TYPES: Final = frozenset(_tag(cls) for cls in CLIENT_FRAMES)
#: the ``type`` of every frame the node sends
SERVER_FRAME_TYPES: Final = frozenset(_tag(cls) for cls in SERVER_FRAMES)


def frames_schema() -> dict[str, Any]:
    """One JSON Schema (draft 2020-12) document of the WebSocket protocol:
    ``clientFrames`` (what a client sends) and ``serverFrames`` (what the
    node sends), each a union of the frames under ``$defs`` told apart by
    ``type``. Validate a frame with ``{**document["serverFrames"], "$defs":
    document["$defs"]}``."""
    (client, server), components = msgspec.json.schema_components(
        [ClientFrame, ServerFrame], ref_template=_REF
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "quart-mesh WebSocket frames",
        "description": (
            "The frames of the WebSocket protocol on /ws (docs/websocket.md): "
            "clientFrames are sent by clients, serverFrames by the node. "
            "Generated by quart_mesh/realtime/frames.py."
        ),
        "clientFrames": client,
        "serverFrames": server,
        "$defs": dict(sorted(components.items())),
    }


if __name__ == "__main__":
    print(json.dumps(frames_schema(), indent=1, ensure_ascii=False))
