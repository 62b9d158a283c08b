"""The program a managed bot runs: ``python -m quart_mesh.bots.runner``.

Configuration comes from the environment the supervisor sets:
``MESH_WS_URL``, ``MESH_TOKEN``, ``MESH_BOT_TYPE``, ``MESH_ROOMS`` (JSON list),
and for model bots ``MESH_MODEL``, ``MESH_MODEL_URL`` and ``MESH_API_KEY``.
It uses only the public protocol (trio-websocket), so it is also an example of
a WebSocket bot. Exit status 78 (EX_CONFIG) means "cannot run as configured";
the supervisor then does not restart it. Exit status 75 (EX_TEMPFAIL) asks
for an immediate restart (the ``restart`` command).

Every managed bot answers the commands of ``POST /api/agents/:id/command``
(``command`` events) with a ``command_result`` frame: ``status``,
``join_room`` and ``leave_room`` (``args.roomId``) and ``restart``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import trio
from trio_websocket import ConnectionClosed, open_websocket_url

EX_CONFIG = 78
EX_TEMPFAIL = 75


class Restart(Exception):
    """The ``restart`` command: leave with EX_TEMPFAIL, the supervisor starts us again."""


class EchoBot:
    """Replies ``echo: <content>`` to messages from others in the same room;
    never to itself or to other bots (so two bots cannot loop)."""

    def __init__(self, ws: Any, me: str, bot_type: str = "echo") -> None:
        self.ws = ws
        self.me = me
        self.bot_type = bot_type
        self.bots: set[str] = set()
        self.rooms: set[str] = set()
        self.handled = 0

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send_message(json.dumps(frame))

    def learn(self, participants: list[dict[str, Any]]) -> None:
        for participant in participants:
            if participant.get("type") not in ("human", "guest"):
                self.bots.add(participant["participantId"])

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
        elif kind == "message":
            sender = event.get("senderId")
            if sender == self.me or sender in self.bots:
                return
            self.handled += 1
            await self.send(
                {
                    "type": "send_message",
                    "roomId": event["roomId"],
                    "content": f"echo: {event['content']}"[:16000],
                }
            )

    async def command(self, event: dict[str, Any]) -> None:
        name, args = event.get("command"), event.get("args") or {}
        answer: dict[str, Any] = {"type": "command_result", "commandId": event["commandId"]}
        room_id = args.get("roomId")
        if name == "status":
            answer["result"] = {
                "status": "running",
                "type": self.bot_type,
                "rooms": sorted(self.rooms),
                "handled": self.handled,
            }
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


async def run() -> int:
    env = os.environ
    bot_type = env.get("MESH_BOT_TYPE", "")
    if bot_type != "echo":
        print(
            f"{bot_type} bots need the model proxy, which this node does not have yet",
            file=sys.stderr,
        )
        return EX_CONFIG
    rooms = json.loads(env.get("MESH_ROOMS", "[]"))
    since = env.get("MESH_SINCE") or None
    async with open_websocket_url(env["MESH_WS_URL"]) as ws:
        frame: dict[str, Any] = {"type": "authenticate", "token": env["MESH_TOKEN"]}
        if since is not None:
            frame["since"] = since  # the server replays what this bot has not handled
        await ws.send_message(json.dumps(frame))
        ok = json.loads(await ws.get_message())
        if ok.get("type") != "auth_ok":
            print(f"authentication failed: {ok}", file=sys.stderr)
            return EX_CONFIG
        bot = EchoBot(ws, ok["participantId"], bot_type)
        snapshot = json.loads(await ws.get_message())
        bot.learn(snapshot.get("participants", []))
        bot.rooms = {r["roomId"] for r in snapshot.get("rooms", []) if r.get("joined")}
        if since is None:
            acknowledge(snapshot["cursor"])  # first start: from now on
        try:
            if rooms:
                await join_rooms(bot, [r for r in rooms if r not in bot.rooms])
                print("joined", flush=True)  # the supervisor stops asking us to
            while True:
                await step(bot, json.loads(await ws.get_message()))
        except ConnectionClosed:
            return 1
        except Restart:
            return EX_TEMPFAIL


async def step(bot: EchoBot, event: dict[str, Any]) -> None:
    await bot.handle(event)
    if event.get("type") == "message":
        acknowledge(event["cursor"])


async def join_rooms(bot: EchoBot, rooms: list[str]) -> None:
    """Join *rooms* and wait until each join is answered (joined, or refused:
    a room deleted since the spawn), handling other events meanwhile."""
    for room_id in rooms:
        await bot.send({"type": "join_room", "roomId": room_id})
    waiting = set(rooms)
    refused = 0
    while len(waiting) > refused:
        event = json.loads(await bot.ws.get_message())
        await step(bot, event)
        if event.get("type") == "error" and event.get("frame") == "join_room":
            print(f"could not join a room: {event.get('message')}", file=sys.stderr)
            refused += 1
        waiting -= bot.rooms


def acknowledge(cursor: str) -> None:
    """Tell the supervisor (stdout) how far this bot has handled messages; a
    restart resumes after it."""
    print(f"cursor {cursor}", flush=True)


def main() -> None:
    raise SystemExit(trio.run(run))


if __name__ == "__main__":
    main()
