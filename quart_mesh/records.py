"""Domain records returned by services, each with one ``to_json()``.

Field names in ``to_json()`` are the API's (spec §2): camelCase, ids as
strings, times as ISO 8601 UTC with milliseconds and a ``Z``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = [
    "MeshConfig",
    "Message",
    "Participant",
    "Reaction",
    "Room",
    "Task",
    "TaskState",
    "Upload",
    "iso",
    "now_ms",
    "trust_level",
]


def now_ms() -> int:
    return int(time.time() * 1000)


def trust_level(origin: str | None) -> str:
    """``local`` for this node's own participants and messages; ``federated``
    for those relayed from another node (untrusted input: ``docs/federation.md``)."""
    return "local" if origin is None else "federated"


def iso(ms: int | None) -> str | None:
    """Render epoch milliseconds as ISO 8601 UTC (``2026-11-21T21:04:36.123Z``)."""
    if ms is None:
        return None
    # (time.gmtime, not datetime and strftime: twice as quick, and every
    # message event's frame has one)
    t = time.gmtime(ms // 1000)
    return (
        f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
        f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}.{ms % 1000:03d}Z"
    )


@dataclass(frozen=True, slots=True)
class MeshConfig:
    name: str
    description: str
    visibility: str  # public | private
    registration_mode: str  # open | closed
    guests_can_send: bool
    owner_id: str
    created_at: int
    #: the room new participants are offered (``docs/decisions/0030-web-client.md``)
    default_room_id: str | None = None
    #: whether this node is a registry, as the owner switched it; ``None``:
    #: as ``MESH_REGISTRY_ENABLED`` says (decision 0057)
    registry_enabled: bool | None = None
    #: whether the node fetches link previews, as the owner switched them;
    #: ``None``: as ``MESH_LINK_PREVIEWS`` says (decision 0072)
    link_previews: bool | None = None

    def public_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "visibility": self.visibility,
        }


@dataclass(frozen=True, slots=True)
class Participant:
    """A member of the mesh: a human, a guest or a bot (``kind``), with its
    role. Returned by ``node.accounts``; ``to_json()`` is the REST participant
    object."""

    participant_id: str
    name: str
    kind: str  # human | guest | bot
    type: str
    role: str
    created_at: int
    last_seen_at: int | None = None
    online: bool = False
    description: str = ""
    #: the home node's DID of a participant of another node (``name@peer``)
    origin: str | None = None
    #: its tokens issued before this time (unix seconds) are refused
    tokens_not_before: int | None = None
    #: a name to show beside the unique one (spaces allowed); None: none set
    display_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "participantId": self.participant_id,
            "name": self.name,
            "displayName": self.display_name,
            "type": self.type,
            "role": self.role,
            "online": self.online,
            "lastSeen": iso(self.last_seen_at),
            "createdAt": iso(self.created_at),
            "origin": self.origin,
            "trustLevel": trust_level(self.origin),
        }


@dataclass(frozen=True, slots=True)
class Room:
    """A room or a DM (``kind``). Returned by ``node.rooms`` and ``node.dms``;
    ``to_json()`` is the REST room object."""

    room_id: str
    kind: str  # room | dm
    name: str
    description: str
    created_by: str | None
    created_at: int
    member_count: int = 0
    #: the home node's DID of a room another node shares with this one
    origin: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "roomId": self.room_id,
            "kind": self.kind,
            "name": self.name,
            "description": self.description,
            "createdAt": iso(self.created_at),
            "createdBy": self.created_by,
            "memberCount": self.member_count,
            "origin": self.origin,
        }


@dataclass(frozen=True, slots=True)
class Reaction:
    """One emoji on a message and who added it (``participant_ids``)."""

    emoji: str
    participant_ids: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "emoji": self.emoji,
            "count": len(self.participant_ids),
            "participantIds": list(self.participant_ids),
        }


@dataclass(frozen=True, slots=True)
class Upload:
    """An uploaded file (``docs/uploads.md``), served at ``/uploads/<stored_name>``."""

    upload_id: str
    stored_name: str
    filename: str  # the client's, sanitized: metadata only
    content_type: str  # detected from the bytes
    size: int
    uploader_id: str
    created_at: int

    @property
    def path(self) -> str:
        """Where the node serves it (relative to the node's base URL)."""
        return "/uploads/" + self.stored_name

    def to_json(self, base_url: str) -> dict[str, Any]:
        """The answer to ``POST /api/upload`` (*base_url*: the node's public URL)."""
        return {
            "url": base_url.rstrip("/") + self.path,
            "filename": self.filename,
            "size": self.size,
            "contentType": self.content_type,
            "uploadId": self.upload_id,
        }

    def attachment_json(self) -> dict[str, Any]:
        """As an attachment of a message: ``url`` is the path on this node."""
        return {
            "uploadId": self.upload_id,
            "url": self.path,
            "filename": self.filename,
            "contentType": self.content_type,
            "size": self.size,
        }


@dataclass(frozen=True, slots=True)
class Message:
    """A stored message. ``seq`` is its position in the node's order of
    messages: the cursor of ``since`` (``node.events``, history, polling).
    ``to_json()`` is the REST message object."""

    seq: int
    message_id: str
    room_id: str
    sender_id: str
    sender_name: str
    content: str
    created_at: int
    to_id: str | None = None
    thread_id: str | None = None
    edited_at: int | None = None
    reactions: tuple[Reaction, ...] = field(default=())
    attachments: tuple[Upload, ...] = field(default=())
    #: the sender's home node DID, for a message relayed from another node
    origin: str | None = None
    #: the sender's own id for this send (``clientId``): retries find the message
    client_id: str | None = None
    #: relayed with a time outside the sane window: dated when it arrived
    #: instead (``timestampReplaced``, ``docs/federation.md``)
    time_replaced: bool = False
    #: a thread's root: how many replies it has and when the newest came
    #: (counted when the message is read from the store; 0 and None otherwise)
    thread_replies: int = 0
    last_reply_at: int | None = None

    @property
    def cursor(self) -> str:
        return str(self.seq)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "roomId": self.room_id,
            "messageId": self.message_id,
            "senderId": self.sender_id,
            "senderName": self.sender_name,
            "content": self.content,
            "timestamp": iso(self.created_at),
            "to": self.to_id,
            "threadId": self.thread_id,
            "editedAt": iso(self.edited_at),
            "reactions": [r.to_json() for r in self.reactions],
            "attachments": [a.attachment_json() for a in self.attachments],
            "cursor": self.cursor,
            "origin": self.origin,
            "trustLevel": trust_level(self.origin),
        }
        if self.client_id is not None:
            # only when the sender gave one: the shape stays as it was for others
            data["clientId"] = self.client_id
        if self.time_replaced:
            data["timestampReplaced"] = True  # likewise, only when it was
        if self.thread_replies:
            # a thread's root, read from the store: absent means no replies
            data["threadReplies"] = self.thread_replies
            data["lastReplyAt"] = iso(self.last_reply_at)
        return data


class TaskState(StrEnum):
    """Where a task stands (A2A's task states, ``docs/decisions/0063-tasks.md``)."""

    SUBMITTED = "submitted"
    WORKING = "working"
    INPUT_REQUIRED = "input-required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    REJECTED = "rejected"

    @property
    def terminal(self) -> bool:
        """Nothing moves a task out of this state."""
        return self not in OPEN_TASK_STATES


#: the states a task can still move from
OPEN_TASK_STATES: frozenset[TaskState] = frozenset(
    {TaskState.SUBMITTED, TaskState.WORKING, TaskState.INPUT_REQUIRED}
)


@dataclass(frozen=True, slots=True)
class Task:
    """Work asked of an agent (``agent_id``) in a room by ``creator_id``:
    the request is the creator's message ``message_id``, the root of the
    task's thread (``services/tasks.py``)."""

    task_id: str
    room_id: str
    agent_id: str
    creator_id: str
    title: str
    state: TaskState
    message_id: str
    #: the request's cursor (in a DM, the agent's later messages are replies)
    request_seq: int
    context_id: str
    status_message: str | None
    #: the agent's result: as it gave it (``PATCH``), or the current text of
    #: the reply that completed the task (``None`` once that reply is deleted)
    result: str | None
    #: the agent updated the task itself at least once
    managed: bool
    via: str  # rest | ws | mcp | a2a
    created_at: int
    updated_at: int
    #: the reply that completed the task (the reconciliation), if one did
    result_message_id: str | None = None

    @property
    def open(self) -> bool:
        return not self.state.terminal

    def to_json(self) -> dict[str, Any]:
        return {
            "taskId": self.task_id,
            "roomId": self.room_id,
            "agentId": self.agent_id,
            "creatorId": self.creator_id,
            "title": self.title,
            "state": self.state.value,
            "messageId": self.message_id,
            "contextId": self.context_id,
            "statusMessage": self.status_message,
            "result": self.result,
            "managed": self.managed,
            "via": self.via,
            "createdAt": iso(self.created_at),
            "updatedAt": iso(self.updated_at),
        }
