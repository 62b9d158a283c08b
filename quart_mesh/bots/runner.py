"""The program a managed bot runs: ``python -m quart_mesh.bots.runner``.

Configuration comes from the environment the supervisor sets:
``MESH_WS_URL``, ``MESH_TOKEN``, ``MESH_BOT_TYPE``, ``MESH_ROOMS`` (JSON list),
and for model bots ``MESH_MODEL``, ``MESH_MODEL_URL`` and ``MESH_API_KEY``.
It uses only the public protocol (trio-websocket), so it is also an example of
a WebSocket bot. Exit status 78 (EX_CONFIG) means "cannot run as configured";
the supervisor then does not restart it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import trio
from trio_websocket import ConnectionClosed, open_websocket_url

EX_CONFIG = 78


class EchoBot:
    """Replies ``echo: <content>`` to messages from others in the same room;
    never to itself or to other bots (so two bots cannot loop)."""

    def __init__(self, ws: Any, me: str) -> None:
        self.ws = ws
        self.me = me
        self.bots: set[str] = set()

    def learn(self, participants: list[dict[str, Any]]) -> None:
        for participant in participants:
            if participant.get("type") not in ("human", "guest"):
                self.bots.add(participant["participantId"])

    async def handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "participant_joined":
            self.learn([event["participant"]])
        elif kind == "message":
            sender = event.get("senderId")
            if sender == self.me or sender in self.bots:
                return
            await self.ws.send_message(
                json.dumps(
                    {
                        "type": "send_message",
                        "roomId": event["roomId"],
                        "content": f"echo: {event['content']}"[:16000],
                    }
                )
            )


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
        bot = EchoBot(ws, ok["participantId"])
        snapshot = json.loads(await ws.get_message())
        bot.learn(snapshot.get("participants", []))
        if since is None:
            acknowledge(snapshot["cursor"])  # first start: from now on
        joined = {r["roomId"] for r in snapshot.get("rooms", []) if r.get("joined")}
        for room_id in rooms:
            if room_id not in joined:
                await ws.send_message(json.dumps({"type": "join_room", "roomId": room_id}))
        try:
            while True:
                event = json.loads(await ws.get_message())
                await bot.handle(event)
                if event.get("type") == "message":
                    acknowledge(event["cursor"])
        except ConnectionClosed:
            return 1


def acknowledge(cursor: str) -> None:
    """Tell the supervisor (stdout) how far this bot has handled messages; a
    restart resumes after it."""
    print(f"cursor {cursor}", flush=True)


def main() -> None:
    raise SystemExit(trio.run(run))


if __name__ == "__main__":
    main()
