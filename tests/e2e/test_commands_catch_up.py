"""Waiting commands in the catch-up contract (issue 35): a new WebSocket
connection, a poll and the in-process stream get every command that waited
for their agent, as many as ``max_pending_commands`` lets wait (the catch-up
read at most 100 before, and the rest waited for the next connection), and
all of them when more wait than that maximum (it was lowered while they
waited): read a maximum at a time (``commands_truncated``, then the next
page after the last one read), in the order they were sent, each once.

Served nodes on loopback over one data folder, one after the other."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from quart_mesh import Settings
from quart_mesh.app import MeshApp
from quart_mesh.config import Limits
from quart_mesh.events import CommandIssued
from tests.e2e.test_commands import bootstrap, command
from tests.helpers import Mesh, User, connect
from tests.helpers import served as served_node


@asynccontextmanager
async def served(data_dir: Path, waiting: int) -> AsyncIterator[tuple[str, Mesh, MeshApp]]:
    """A node on *data_dir* letting *waiting* commands wait per agent."""
    settings = Settings(data_dir=data_dir, limits=Limits(max_pending_commands=waiting))
    async with served_node(settings) as (url, app, http):
        yield url, Mesh(http), app


async def send(mesh: Mesh, owner: User, agent: User, count: int) -> list[str]:
    ids = []
    for n in range(count):
        r = await command(mesh, owner, agent, "step", args={"n": n})
        assert r.status_code == 202, r.text
        ids.append(r.json()["commandId"])
    return ids


async def received(url: str, agent: User, count: int) -> list[str]:
    """The commands a new connection of *agent* gets, and that no more come."""
    async with connect(url, agent) as ws:
        got = [(await ws.expect("command"))["commandId"] for _ in range(count)]
        assert [f for f in await ws.settle() if f["type"] == "command"] == []
    return got


async def polled(mesh: Mesh, agent: User) -> list[list[str]]:
    """The commands of each poll of *agent* until one brings none."""
    pages = []
    while True:
        r = await mesh.http.post("/api/poll", json={}, headers=agent.headers)
        assert r.status_code == 200, r.text
        page = [c["commandId"] for c in r.json()["commands"]]
        if not page:
            return pages
        pages.append(page)


async def test_more_than_a_hundred_waiting_commands_all_reach_a_new_connection(
    tmp_path: Path,
) -> None:
    async with served(tmp_path / "data", waiting=150) as (url, mesh, _):
        owner = await mesh.setup()
        socket_bot = await bootstrap(mesh, owner, "socket-bot")
        polling_bot = await bootstrap(mesh, owner, "polling-bot")
        sent = await send(mesh, owner, socket_bot, 150)
        with trio.fail_after(60):
            assert await received(url, socket_bot, 150) == sent
        sent = await send(mesh, owner, polling_bot, 150)
        assert await polled(mesh, polling_bot) == [sent]


async def test_more_commands_waiting_than_the_maximum_come_a_maximum_at_a_time(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    async with served(data_dir, waiting=10) as (_, mesh, _):
        owner = await mesh.setup()
        bots = [await bootstrap(mesh, owner, name) for name in ("socket", "poller", "inproc")]
        sent = [await send(mesh, owner, bot, 7) for bot in bots]
    # the operator lowers the maximum to 3 while seven wait for each bot
    async with served(data_dir, waiting=3) as (url, mesh, app):
        socket_bot, poller, inproc = bots
        with trio.fail_after(60):
            assert await received(url, socket_bot, 7) == sent[0]
            # polls: a page of at most the maximum each, the next one at once
            assert await polled(mesh, poller) == [sent[1][:3], sent[1][3:6], sent[1][6:]]
            # the in-process stream (Node.events) hands them all out too, once
            node = app.node
            actor = await node.accounts.actor_of(inproc.participant_id)
            assert actor is not None
            got: list[str] = []
            async with node.events(actor, since=None) as stream:
                async for event in stream:
                    if isinstance(event, CommandIssued):
                        got.append(event.command_id)
                    if len(got) == 7:
                        break
            assert got == sent[2]
            # handed out means delivered: a new connection gets none of them
            assert await received(url, socket_bot, 0) == []
            for bot, ids in zip(bots, sent, strict=True):
                for command_id in ids:
                    path = f"/api/agents/{bot.participant_id}/commands/{command_id}"
                    r = await mesh.http.get(path, headers=owner.headers)
                    assert r.json()["status"] == "delivered", (bot.name, r.text)


async def test_one_reading_of_a_catch_up_cursor_for_the_websocket_and_polls(
    tmp_path: Path,
) -> None:
    """``parse_since``: the WebSocket's ``since`` and a poll's ``cursor`` are
    read alike; an empty string is refused as ``since`` (documented so) and
    means "none" as a poll's ``cursor``."""
    async with served(tmp_path / "data", waiting=10) as (url, mesh, _):
        owner = await mesh.setup()
        bot = await bootstrap(mesh, owner, "reader")
        for bad in ("", "-1", "abc", "9" * 19, 1.5, True, -1):
            async with connect(url) as ws:
                await ws.send(type="authenticate", token=bot.token, since=bad)
                error = await ws.expect("error")
                assert error["code"] == "invalid_cursor", (bad, error)
                assert error["message"] == "since must be a cursor returned by the node"
        for bad in ("-1", "abc", "9" * 19, -1):
            r = await mesh.http.post("/api/poll", json={"cursor": bad}, headers=bot.headers)
            assert r.status_code == 400, (bad, r.text)
            assert r.json()["code"] == "invalid_cursor", (bad, r.text)
        for good in ("", "0", 0, "12"):
            r = await mesh.http.post("/api/poll", json={"cursor": good}, headers=bot.headers)
            assert r.status_code == 200, (good, r.text)
        async with connect(url, bot, since="0") as ws:
            assert [f for f in await ws.settle() if f["type"] == "error"] == []
