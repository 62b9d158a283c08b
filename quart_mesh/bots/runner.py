"""The program a managed bot runs: ``python -m quart_mesh.bots.runner``.

Configuration comes from the environment the supervisor sets:
``MESH_WS_URL``, ``MESH_API_URL``, ``MESH_TOKEN``, ``MESH_BOT_TYPE``,
``MESH_ROOMS`` (JSON list), and for model bots ``MESH_MODEL``,
``MESH_MODEL_URL`` and ``MESH_API_KEY`` (see ``model_bots.py``).
It uses only the public protocol (trio-websocket), so it is also an example of
a WebSocket bot. Exit status 78 (EX_CONFIG) means "cannot run as configured";
the supervisor then does not restart it. Exit status 75 (EX_TEMPFAIL) asks
for an immediate restart (the ``restart`` command).

With ``MESH_EXIT_WITH_PARENT=1`` (the supervisor sets it) the bot exits as
soon as its stdin reaches end of file: stdin is a pipe whose other end only
the node process holds, so the bot ends with the node even when the node is
killed with SIGKILL (``prctl(PR_SET_PDEATHSIG)`` would not do: Trio starts
processes from a worker thread, and that signal follows the thread).

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

from .base import EX_CONFIG, EX_TEMPFAIL, Bot, Restart
from .model_bots import ModelBot


class EchoBot(Bot):
    """Replies ``echo: <content>`` to messages from others in the same room;
    never to other bots (so two bots cannot loop)."""

    async def on_message(self, event: dict[str, Any]) -> None:
        if event.get("senderId") in self.bots:
            return
        self.handled += 1
        answer = {
            "type": "send_message",
            "roomId": event["roomId"],
            "content": f"echo: {event['content']}"[:16000],
        }
        if (thread := self.thread_of_answer(event)) is not None:
            answer["threadId"] = thread
        await self.send(answer)


async def run() -> int:
    env = os.environ
    bot_type = env.get("MESH_BOT_TYPE", "")
    if bot_type not in ("echo", "llm", "coder"):
        print(f"unknown bot type {bot_type!r}", file=sys.stderr)
        return EX_CONFIG
    if bot_type != "echo" and not env.get("MESH_MODEL"):
        print(f"{bot_type} bots need a model: spawn it with one", file=sys.stderr)
        return EX_CONFIG
    rooms = json.loads(env.get("MESH_ROOMS", "[]"))
    since = env.get("MESH_SINCE") or None
    code = 1
    async with trio.open_nursery() as outer:
        if env.get("MESH_EXIT_WITH_PARENT") == "1":
            outer.start_soon(_exit_with_parent)
        # the nursery (model bots answer in it) ends before the connection does
        async with open_websocket_url(env["MESH_WS_URL"]) as ws, trio.open_nursery() as nursery:
            try:
                code = await _session(ws, env, bot_type, rooms, since, nursery)
            finally:
                nursery.cancel_scope.cancel()
                outer.cancel_scope.cancel()
    return code


async def _exit_with_parent() -> None:
    """Exit at once when stdin ends: the node that started this bot is gone
    (killed, perhaps), and another node process may be starting its copy."""
    stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
    async with stdin:
        while await stdin.receive_some(1024):
            pass
    print("the node that started this bot is gone: exiting", file=sys.stderr, flush=True)
    os._exit(EX_TEMPFAIL)  # no clean-up: nobody is left to talk to


async def _session(
    ws: Any,
    env: Any,
    bot_type: str,
    rooms: list[str],
    since: str | None,
    nursery: trio.Nursery,
) -> int:
    frame: dict[str, Any] = {"type": "authenticate", "token": env["MESH_TOKEN"]}
    if since is not None:
        frame["since"] = since  # the server replays what this bot has not handled
    await ws.send_message(json.dumps(frame))
    ok = json.loads(await ws.get_message())
    if ok.get("type") != "auth_ok":
        print(f"authentication failed: {ok}", file=sys.stderr)
        return EX_CONFIG
    bot: Bot
    if bot_type == "echo":
        bot = EchoBot(ws, ok["participantId"], bot_type)
    else:
        bot = ModelBot.from_env(ws, ok["participantId"], bot_type, env, nursery)
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
    finally:
        with trio.CancelScope(shield=True):
            await bot.close()


async def step(bot: Bot, event: dict[str, Any]) -> None:
    await bot.handle(event)
    if event.get("type") == "message":
        acknowledge(event["cursor"])


async def join_rooms(bot: Bot, rooms: list[str]) -> None:
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
