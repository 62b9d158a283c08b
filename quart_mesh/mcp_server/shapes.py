"""What the MCP tools answer: pydantic models of the REST API's JSON.

Each model names the fields the REST reference documents (camelCase, as on
the wire) so a tool's structured output is the REST answer, field for field;
``extra="allow"`` keeps a field the REST answer gains later instead of
dropping it. The SDK derives each tool's output schema from these.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

__all__ = [
    "AgentList",
    "Command",
    "Deleted",
    "Message",
    "MessagePage",
    "ParticipantList",
    "Poll",
    "Room",
    "RoomPage",
    "SearchPage",
    "Task",
]


class _Wire(BaseModel):
    model_config = ConfigDict(extra="allow")


class Reaction(_Wire):
    emoji: str
    count: int
    participantIds: list[str]


class Message(_Wire):
    """A message, as ``GET /api/rooms/:id/messages`` gives it."""

    roomId: str
    messageId: str
    senderId: str
    senderName: str
    content: str
    timestamp: str
    #: the participant it is addressed to
    to: str | None = None
    #: the thread's first message, for a reply
    threadId: str | None = None
    editedAt: str | None = None
    reactions: list[Reaction] = []
    attachments: list[dict[str, Any]] = []
    #: pass to ``read_messages`` as ``before``/``since``
    cursor: str
    origin: str | None = None
    trustLevel: str | None = None


class MessagePage(_Wire):
    messages: list[Message]


class Room(_Wire):
    roomId: str
    kind: str
    name: str
    description: str
    createdAt: str | None = None
    createdBy: str | None = None
    memberCount: int = 0
    origin: str | None = None
    #: the caller is a member
    joined: bool


class RoomPage(_Wire):
    rooms: list[Room]
    #: pass back as ``cursor`` for the next page (null: the last page)
    nextCursor: str | None


class Command(_Wire):
    """A command for an agent (``GET /api/agents/:id/commands/:commandId``)."""

    commandId: str
    agentId: str
    command: str
    args: dict[str, Any]
    sentBy: str
    #: pending | delivered | completed | failed
    status: str
    createdAt: str
    deliveredAt: str | None = None
    completedAt: str | None = None
    ok: bool | None = None
    result: Any = None


class IssuedCommand(_Wire):
    """A command sent to the caller (an agent) to carry out (the WebSocket
    ``command`` event)."""

    type: str
    commandId: str
    command: str
    args: dict[str, Any]
    sentBy: str
    createdAt: str


class Poll(_Wire):
    """What ``wait_for_messages`` found (``POST /api/poll``'s answer)."""

    messages: list[Message]
    #: pass back as ``cursor`` next time: nothing is skipped or repeated
    cursor: str
    #: commands sent to the caller (agents), now delivered
    commands: list[IssuedCommand] = []


class Highlight(_Wire):
    start: int
    end: int


class Snippet(_Wire):
    text: str
    highlights: list[Highlight]


class Found(_Wire):
    message: Message
    roomName: str
    snippet: Snippet


class SearchPage(_Wire):
    results: list[Found]
    nextCursor: str | None


class Participant(_Wire):
    participantId: str
    name: str
    displayName: str | None = None
    type: str
    role: str
    online: bool
    lastSeen: str | None = None
    createdAt: str | None = None
    origin: str | None = None
    trustLevel: str | None = None


class ParticipantList(_Wire):
    participants: list[Participant]


class Agent(_Wire):
    agentId: str
    name: str
    type: str
    role: str
    online: bool
    description: str | None = None
    managed: bool


class AgentList(_Wire):
    agents: list[Agent]


class Deleted(_Wire):
    ok: bool
    messageId: str


class Task(_Wire):
    """A task for an agent (``GET /api/tasks/:taskId``'s ``task``)."""

    taskId: str
    roomId: str
    agentId: str
    creatorId: str
    title: str | None = None
    #: submitted | working | input-required | completed | failed | canceled | rejected
    state: str
    #: the message that asked (the task's thread)
    messageId: str
    contextId: str
    statusMessage: str | None = None
    result: str | None = None
    managed: bool
    via: str
    createdAt: str
    updatedAt: str
