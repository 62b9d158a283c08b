"""What every handler shares: the interface, replies and the outbox.

A handler gets each ``message`` event the bridge accepts, in order, one at a
time (``handle``), and puts its replies in the outbox. The outbox outlives
connections: a reply made while the WebSocket is down is sent after the bridge
reconnects.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import trio

log = logging.getLogger("mesh_bridge")

#: Replies waiting to be sent. A full outbox makes the handler wait.
OUTBOX_SIZE = 64


class Handler(Protocol):
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the handler's long-lived resources (an HTTP client, a child
        process) until cancelled; ``task_status.started()`` once ``handle``
        may be called."""

    async def handle(self, message: dict[str, Any]) -> None:
        """Handle one ``message`` event; return once it counts as handled (the
        bridge then moves its cursor past it). Never raises for a failure of
        the script or endpoint: those are logged."""


@dataclass(frozen=True)
class Reply:
    room_id: str
    content: str
    thread_id: str | None = None

    def to_frame(self) -> str:
        frame: dict[str, str] = {
            "type": "send_message",
            "roomId": self.room_id,
            "content": self.content,
        }
        if self.thread_id is not None:
            frame["threadId"] = self.thread_id
        return json.dumps(frame)


def clean_content(text: str, max_bytes: int) -> str | None:
    """*text* as message content: stripped, without NUL characters (the node
    refuses them), cut to *max_bytes* UTF-8 bytes on a character boundary.
    ``None`` if nothing is left."""
    text = text.replace("\x00", "").strip()
    if not text:
        return None
    encoded = text.encode("utf-8", errors="replace")
    if len(encoded) > max_bytes:
        log.warning("reply of %d bytes cut to %d", len(encoded), max_bytes)
        text = encoded[:max_bytes].decode("utf-8", errors="ignore").rstrip()
    return text or None


def reply_from_object(
    data: dict[str, Any], default_room: str | None, max_bytes: int, source: str
) -> Reply | None:
    """A reply from a JSON object ``{"content", "roomId"?, "threadId"?}`` given
    by an HTTP endpoint or a pipe process; ``None`` (logged) if it has no usable
    content or room."""
    content = data.get("content")
    if content is None:
        return None
    if not isinstance(content, str):
        log.warning("%s: ignored a reply whose content is not a string", source)
        return None
    room_id = data.get("roomId", default_room)
    if not isinstance(room_id, str) or not room_id:
        log.warning("%s: ignored a reply with no room (give roomId)", source)
        return None
    thread_id = data.get("threadId")
    if thread_id is not None and not isinstance(thread_id, str):
        log.warning("%s: ignored a reply whose threadId is not a string", source)
        return None
    cleaned = clean_content(content, max_bytes)
    if cleaned is None:
        return None
    return Reply(room_id, cleaned, thread_id)


class Outbox:
    """Replies on their way to the node, kept across reconnects.

    Handlers ``put`` replies (waiting while the outbox is full); each
    connection runs ``drain`` while it is up. A reply whose send failed stays
    first in line for the next connection.
    """

    def __init__(self, size: int = OUTBOX_SIZE) -> None:
        self._send, self._receive = trio.open_memory_channel[Reply](size)
        self._pending: Reply | None = None

    async def put(self, reply: Reply) -> None:
        await self._send.send(reply)

    async def drain(self, send: Callable[[str], Awaitable[None]]) -> None:
        """Send replies with ``await send(text)`` until cancelled or *send*
        raises (which leaves the unsent reply pending)."""
        while True:
            if self._pending is None:
                self._pending = await self._receive.receive()
            await send(self._pending.to_frame())
            log.info("replied in room %s", self._pending.room_id)
            self._pending = None
