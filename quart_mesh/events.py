"""Server-to-client events (spec §6), immutable, each serialized once.

Every event knows where it goes (``room_id``: the members of that room;
``None``: every connected participant) and renders its frame with exactly the
spec's field names. The broker serializes an event once, however many
subscribers receive it (:attr:`Event.frame`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .records import Message, Participant, Task, iso

__all__ = [
    "CommandIssued",
    "DmRead",
    "Event",
    "MessageDeleted",
    "MessageEdited",
    "MessagePinned",
    "MessagePosted",
    "MessageUnpinned",
    "ParticipantJoined",
    "ParticipantLeft",
    "ParticipantMoved",
    "ParticipantUpdated",
    "Presence",
    "ReactionAdded",
    "ReactionRemoved",
    "Relayed",
    "RoomAccess",
    "RoomDeleted",
    "RoomMuted",
    "RoomRead",
    "RoomUpdated",
    "TaskCreated",
    "TaskUpdated",
    "Typing",
    "error_frame",
    "frame_of",
]


def frame_of(payload: dict[str, Any]) -> str:
    """Serialize one frame (compact, UTF-8 kept as is)."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"))


def error_frame(message: str, code: str) -> str:
    return frame_of({"type": "error", "message": message, "code": code})


@dataclass(frozen=True, slots=True)
class Event:
    """Base of broker events. Subclasses set ``type`` and implement ``payload``."""

    type: ClassVar[str] = ""
    #: chat traffic (messages, edits, reactions, typing): not sent to ``simple`` bots
    chat: ClassVar[bool] = False
    room_id: str | None
    _frame: list[str] = field(default_factory=list, init=False, repr=False, compare=False)
    _cache: list[dict[str, bytes]] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    #: participant that must not receive this event (typing goes to the others)
    @property
    def exclude(self) -> str | None:
        return None

    def payload(self) -> dict[str, Any]:  # pragma: no cover - abstract
        raise NotImplementedError

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, **self.payload()}

    def cached(self, key: str, factory: Callable[[], bytes]) -> bytes:
        """A transport's encoding of this event, computed once (e.g. a WebSocket frame)."""
        cache = self._cache
        if not cache:
            cache.append({})
        encodings = cache[0]
        if key not in encodings:
            encodings[key] = factory()
        return encodings[key]

    @property
    def frame(self) -> str:
        """The JSON text of this event, computed once."""
        if not self._frame:
            self._frame.append(frame_of(self.to_json()))
        return self._frame[0]

    def adopt_frame(self, frame: str) -> None:
        """Take *frame*, this event's JSON text as another process of this
        node serialized it, as :attr:`frame` instead of computing it again
        (the cluster stream carries a message's frame: ``store/outbox.py``)."""
        self._frame[:] = [frame]


@dataclass(frozen=True, slots=True)
class MessagePosted(Event):
    """A message was posted (``message``): the event a stream's cursor
    counts (``message.seq``)."""

    type: ClassVar[str] = "message"
    chat: ClassVar[bool] = True
    message: Message = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return self.message.to_json()


@dataclass(frozen=True, slots=True)
class MessageEdited(Event):
    type: ClassVar[str] = "message_edited"
    chat: ClassVar[bool] = True
    message: Message = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {
            "messageId": self.message.message_id,
            "content": self.message.content,
            "roomId": self.message.room_id,
            "editedAt": iso(self.message.edited_at),
        }


@dataclass(frozen=True, slots=True)
class MessageDeleted(Event):
    type: ClassVar[str] = "message_deleted"
    chat: ClassVar[bool] = True
    message_id: str = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {"messageId": self.message_id, "roomId": self.room_id}


@dataclass(frozen=True, slots=True)
class MessagePinned(Event):
    """Extension: a message of the room was pinned (decision 0069)."""

    type: ClassVar[str] = "message_pinned"
    message_id: str = field(kw_only=True)
    pinned_by: str = field(kw_only=True)
    pinned_at: int = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {
            "roomId": self.room_id,
            "messageId": self.message_id,
            "pinnedBy": self.pinned_by,
            "pinnedAt": iso(self.pinned_at),
        }


@dataclass(frozen=True, slots=True)
class MessageUnpinned(Event):
    """Extension: a message of the room was unpinned, or deleted while pinned."""

    type: ClassVar[str] = "message_unpinned"
    message_id: str = field(kw_only=True)
    unpinned_by: str = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {
            "roomId": self.room_id,
            "messageId": self.message_id,
            "unpinnedBy": self.unpinned_by,
        }


@dataclass(frozen=True, slots=True)
class ReactionAdded(Event):
    type: ClassVar[str] = "reaction_added"
    chat: ClassVar[bool] = True
    message_id: str = field(kw_only=True)
    emoji: str = field(kw_only=True)
    participant_id: str = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {
            "messageId": self.message_id,
            "emoji": self.emoji,
            "participantId": self.participant_id,
            "roomId": self.room_id,
        }


@dataclass(frozen=True, slots=True)
class ReactionRemoved(ReactionAdded):
    type: ClassVar[str] = "reaction_removed"


@dataclass(frozen=True, slots=True)
class ParticipantJoined(Event):
    type: ClassVar[str] = "participant_joined"
    participant: Participant = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {"roomId": self.room_id, "participant": self.participant.to_json()}


@dataclass(frozen=True, slots=True)
class ParticipantLeft(ParticipantJoined):
    type: ClassVar[str] = "participant_left"


@dataclass(frozen=True, slots=True)
class RoomDeleted(Event):
    """Extension: the room is gone; sent to its members."""

    type: ClassVar[str] = "room_deleted"

    def payload(self) -> dict[str, Any]:
        return {"roomId": self.room_id}


@dataclass(frozen=True, slots=True)
class RoomUpdated(Event):
    """Extension: a room's description changed (``PATCH /api/rooms/:roomId``);
    sent to its members."""

    type: ClassVar[str] = "room_updated"
    name: str = field(kw_only=True)
    description: str = field(kw_only=True)
    updated_by: str = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {
            "roomId": self.room_id,
            "name": self.name,
            "description": self.description,
            "updatedBy": self.updated_by,
        }


@dataclass(frozen=True, slots=True)
class RoomRead(Event):
    """Extension: the participant's read position in a room moved (``mark_read``);
    sent to that participant's own sessions only (:meth:`Broker.send_to`), so
    its other tabs and devices update their unread badges."""

    type: ClassVar[str] = "room_read"
    cursor: int = field(kw_only=True)
    unread: int = field(kw_only=True)
    mentions: int = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {
            "roomId": self.room_id,
            "cursor": str(self.cursor),
            "unread": self.unread,
            "mentions": self.mentions,
        }


@dataclass(frozen=True, slots=True)
class DmRead(Event):
    """Extension: a member's read position in a DM moved (a read receipt,
    decision 0071); sent to the DM's other members' sessions only
    (:meth:`Broker.send_to`), and only between members who both share
    their read receipts."""

    type: ClassVar[str] = "dm_read"
    participant_id: str = field(kw_only=True)
    cursor: int = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {
            "roomId": self.room_id,
            "participantId": self.participant_id,
            "cursor": str(self.cursor),
        }


@dataclass(frozen=True, slots=True)
class ParticipantUpdated(Event):
    """Extension: a participant changed how it is shown (its display name);
    one event per room or DM it is in, to that room's members (so one who
    shares several rooms with it gets it once per room)."""

    type: ClassVar[str] = "participant_updated"
    participant: Participant = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {"roomId": self.room_id, "participant": self.participant.to_json()}


@dataclass(frozen=True, slots=True)
class RoomMuted(Event):
    """Extension: the participant muted or unmuted a room or DM
    (``PUT /api/rooms/:roomId/mute``); sent to that participant's own
    sessions only (:meth:`Broker.send_to`), so its other tabs and devices
    follow."""

    type: ClassVar[str] = "room_muted"
    muted: bool = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {"roomId": self.room_id, "muted": self.muted}


@dataclass(frozen=True, slots=True)
class RoomAccess(Event):
    """Extension: whether the participant may read a room it is in changed
    (a room rule, a preset or its role changed while it was connected);
    sent to that participant's own sessions only. ``readable: false``: the
    room's events stop, and a client drops the room (and its badge) until
    ``readable: true`` comes, when it reads the room again."""

    type: ClassVar[str] = "room_access"
    readable: bool = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {"roomId": self.room_id, "readable": self.readable}


@dataclass(frozen=True, slots=True)
class Typing(Event):
    type: ClassVar[str] = "typing"
    chat: ClassVar[bool] = True
    participant_id: str = field(kw_only=True)

    @property
    def exclude(self) -> str | None:
        return self.participant_id

    def payload(self) -> dict[str, Any]:
        return {"roomId": self.room_id, "participantId": self.participant_id}


@dataclass(frozen=True, slots=True)
class Presence(Event):
    type: ClassVar[str] = "presence"
    participant_id: str = field(kw_only=True)
    online: bool = field(kw_only=True)
    last_seen: int | None = field(kw_only=True, default=None)

    def payload(self) -> dict[str, Any]:
        return {
            "participantId": self.participant_id,
            "online": self.online,
            "lastSeen": iso(self.last_seen),
        }


@dataclass(frozen=True, slots=True)
class ParticipantMoved(Event):
    """Extension: a participant's position in a room changed."""

    type: ClassVar[str] = "participant_moved"
    participant_id: str = field(kw_only=True)
    x: float = field(kw_only=True)
    y: float = field(kw_only=True)
    z: float = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {
            "roomId": self.room_id,
            "participantId": self.participant_id,
            "x": self.x,
            "y": self.y,
            "z": self.z,
        }


@dataclass(frozen=True, slots=True)
class CommandIssued(Event):
    """Extension: a structured command for one agent (``POST /api/agents/:id/command``).

    Not a room event: the broker sends it to the agent's own subscriptions
    (:meth:`Broker.send_to`), so ``room_id`` is ``None``.
    """

    type: ClassVar[str] = "command"
    command_id: str = field(kw_only=True)
    agent_id: str = field(kw_only=True)
    command: str = field(kw_only=True)
    args: dict[str, Any] = field(kw_only=True)
    sent_by: str | None = field(kw_only=True)
    created_at: int = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {
            "commandId": self.command_id,
            "command": self.command,
            "args": self.args,
            "sentBy": self.sent_by,
            "createdAt": iso(self.created_at),
        }


@dataclass(frozen=True, slots=True)
class TaskCreated(Event):
    """Extension: a task was created in the room (``services/tasks.py``); to
    everyone who may read the room, like its messages."""

    type: ClassVar[str] = "task_created"
    task: Task = field(kw_only=True)

    def payload(self) -> dict[str, Any]:
        return {"task": self.task.to_json()}


@dataclass(frozen=True, slots=True)
class TaskUpdated(TaskCreated):
    """Extension: a task changed state (its agent, its creator, a cancel,
    or the agent's first reply completing it)."""

    type: ClassVar[str] = "task_updated"


@dataclass(frozen=True, slots=True)
class Relayed(Event):
    """An event written by another process (``store/outbox.py``), carried as
    its frame: delivered as is, never looked into. :meth:`of` picks the class
    by whether it is chat traffic."""

    kind: str = field(kw_only=True)
    text: str = field(kw_only=True)
    excluded: str | None = field(kw_only=True, default=None)

    @property
    def exclude(self) -> str | None:
        return self.excluded

    @property
    def frame(self) -> str:
        return self.text

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.text)
        return data

    def payload(self) -> dict[str, Any]:
        data = self.to_json()
        data.pop("type", None)
        return data

    @staticmethod
    def of(
        kind: str, room_id: str | None, frame: str, *, chat: bool, exclude: str | None
    ) -> Relayed:
        cls = RelayedChat if chat else Relayed
        return cls(room_id, kind=kind, text=frame, excluded=exclude)


@dataclass(frozen=True, slots=True)
class RelayedChat(Relayed):
    """A relayed event that is chat traffic (not for ``simple`` bots)."""

    chat: ClassVar[bool] = True
