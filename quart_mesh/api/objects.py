"""The shapes of the objects many endpoints answer with (``docs/rest.md``,
*Objects*): declared for the OpenAPI document; the records render them."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from .contract import Shape

__all__ = [
    "Attachment",
    "ErrorBody",
    "Id",
    "Message",
    "Ok",
    "ParticipantView",
    "Reaction",
    "RoomView",
    "Session",
    "Timestamp",
    "TrustLevel",
]

#: ISO 8601 UTC with milliseconds (``2026-11-21T21:04:36.123Z``)
Timestamp = Annotated[str, msgspec.Meta(extra_json_schema={"format": "date-time"})]
#: a node-made id (a ULID: 26 characters of Crockford base 32)
Id = Annotated[str, msgspec.Meta(description="a ULID")]
TrustLevel = Literal["local", "federated"]


class ErrorBody(Shape):
    """Every error: a message for people and a stable code for programs."""

    error: str
    code: str
    #: only on 500s: the id of the request in the node's log
    request_id: str | msgspec.UnsetType = msgspec.UNSET


class Ok(Shape):
    """The operation was done."""

    ok: bool


class ParticipantView(Shape):
    """A participant (a person, a bot or a guest)."""

    participant_id: Id
    name: str
    #: shown beside the unique name (spaces allowed); null when unset
    display_name: str | None
    type: str
    role: str
    online: bool
    last_seen: Timestamp | None
    created_at: Timestamp | None
    origin: str | None
    trust_level: TrustLevel


class RoomView(Shape):
    """A room, and whether the caller is a member."""

    room_id: Id
    kind: Literal["room", "dm"]
    name: str
    description: str
    created_at: Timestamp | None
    created_by: str | None
    member_count: int
    origin: str | None
    joined: bool


class Reaction(Shape):
    emoji: str
    count: int
    participant_ids: list[str]


class Attachment(Shape):
    """An uploaded file attached to a message (``url``: the path on this node)."""

    upload_id: Id
    url: str
    filename: str
    content_type: str
    size: int


class Message(Shape):
    """A message of a room or a DM."""

    room_id: Id
    message_id: Id
    sender_id: str
    sender_name: str
    content: str
    timestamp: Timestamp | None
    to: str | None
    thread_id: str | None
    edited_at: Timestamp | None
    reactions: list[Reaction]
    attachments: list[Attachment]
    #: the message's position in its room (a decimal string)
    cursor: str
    origin: str | None
    trust_level: TrustLevel
    #: only when the sender gave one
    client_id: str | msgspec.UnsetType = msgspec.UNSET
    #: only on a relayed message whose claimed time was outside the sane
    #: window (``timestamp`` is then when it arrived here)
    timestamp_replaced: bool | msgspec.UnsetType = msgspec.UNSET
    #: only on a thread's root read from the node (history, threads…): how
    #: many replies it has
    thread_replies: int | msgspec.UnsetType = msgspec.UNSET
    #: with ``threadReplies``: when its newest reply was posted
    last_reply_at: Timestamp | msgspec.UnsetType = msgspec.UNSET


class Session(Shape):
    """A participant and a fresh bearer token for it."""

    participant_id: Id
    token: str
    name: str
