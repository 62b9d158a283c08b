"""What every managed bot program shares (see ``runner.py``)."""

from __future__ import annotations

import json
from typing import Any

import trio

__all__ = ["EX_CONFIG", "EX_TEMPFAIL", "Bot", "Restart"]

EX_CONFIG = 78
EX_TEMPFAIL = 75


class Restart(Exception):
    """The ``restart`` command: leave with EX_TEMPFAIL, the supervisor starts us again."""


class Bot:
    """What every managed bot does: track its rooms and the other bots, obey
    commands. Subclasses answer messages (:meth:`on_message`)."""

    def __init__(self, ws: Any, me: str, bot_type: str = "echo") -> None:
        self.ws = ws
        self.me = me
        self.name = ""
        self.bot_type = bot_type
        self.bots: set[str] = set()
        self.rooms: set[str] = set()
        self.handled = 0
        self._send_lock = trio.Lock()

    async def send(self, frame: dict[str, Any]) -> None:
        async with self._send_lock:
            await self.ws.send_message(json.dumps(frame))

    def learn(self, participants: list[dict[str, Any]]) -> None:
        for participant in participants:
            if participant.get("participantId") == self.me:
                self.name = str(participant.get("name", ""))
            if participant.get("type") not in ("human", "guest"):
                self.bots.add(participant["participantId"])

    async def on_message(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def thread_of_answer(self, event: dict[str, Any]) -> str | None:
        """Where an answer to message *event* goes: a message addressed to
        this bot (``to``: a task's request, ``docs/agents-mcp-a2a.md``) is
        answered in its thread, so the answer stays beside the question in a
        busy room; anything else at the top of the room."""
        if event.get("to") != self.me:
            return None
        thread = event.get("threadId") or event.get("messageId")
        return thread if isinstance(thread, str) else None

    async def close(self) -> None:
        """Release what the bot holds (its HTTP client)."""

    def status(self) -> dict[str, Any]:
        return {
            "status": "running",
            "type": self.bot_type,
            "rooms": sorted(self.rooms),
            "handled": self.handled,
        }

    async def handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "participant_joined":
            self.learn([event["participant"]])
            if event["participant"]["participantId"] == self.me:
                self.rooms.add(event["roomId"])
        elif kind == "participant_left":
            if event["participant"]["participantId"] == self.me:
                self.rooms.discard(event["roomId"])
        elif kind == "command":
            await self.command(event)
        elif kind == "message" and event.get("senderId") != self.me:
            await self.on_message(event)

    async def command(self, event: dict[str, Any]) -> None:
        name, args = event.get("command"), event.get("args") or {}
        answer: dict[str, Any] = {"type": "command_result", "commandId": event["commandId"]}
        room_id = args.get("roomId")
        if name == "status":
            answer["result"] = self.status()
        elif name in ("join_room", "leave_room") and isinstance(room_id, str):
            await self.send({"type": name, "roomId": room_id})
            answer["result"] = {"requested": name, "roomId": room_id}
        elif name in ("join_room", "leave_room"):
            answer.update(ok=False, result={"error": "args.roomId is required"})
        elif name == "restart":
            answer["result"] = {"restarting": True}
            await self.send(answer)
            raise Restart
        else:
            answer.update(ok=False, result={"error": f"unknown command {str(name)[:64]!r}"})
        await self.send(answer)
