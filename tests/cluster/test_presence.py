"""Presence is the union over the processes of a mesh (docs/decisions/
0038-presence-across-processes.md): a participant is online while any
process holds a session for it, each transition is announced once to the
whole mesh, and the sessions of a process that dies (``kill -9``) go
offline within a bound, announced by a survivor.

Each test starts real ``quart-mesh serve`` processes (``tests/cluster/nodes.py``);
they run with ``pytest --store postgresql`` only. Every wait is bounded;
"nothing more" is checked with :meth:`Socket.settle`, never by sleeping.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
import trio

from tests.cluster.nodes import database_url, open_nodes, two_nodes
from tests.helpers import Mesh, Socket, User, connect

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

#: a dead process's sessions are announced offline within this (beat 2 s,
#: timeout 8 s, grace 1 s, plus the bus)
OFFLINE_BOUND = 15


async def _setup(a: Mesh, b: Mesh) -> tuple[User, User]:
    """The mesh set up through *a*, with the owner and *alice*; once *b*
    knows them (within a bound)."""
    owner = await a.setup()
    alice = await a.register("alice")
    with trio.fail_after(10):
        while (await b.http.get("/api/participants", headers=alice.headers)).status_code != 200:
            await trio.sleep(0.05)
    return owner, alice


async def _online(mesh: Mesh, viewer: User, who: User) -> bool:
    state = (await mesh.http.get("/api/state", headers=viewer.headers)).json()
    flags = {p["participantId"]: p["online"] for p in state["participants"]}
    return bool(flags[who.participant_id])


def _presence_of(frames: list[dict[str, Any]], who: User) -> list[dict[str, Any]]:
    return [
        f for f in frames if f["type"] == "presence" and f["participantId"] == who.participant_id
    ]


async def _no_more_presence(socket: Socket, who: User) -> None:
    assert _presence_of(await socket.settle(), who) == []


def _rows(tmp_path: Path, who: User) -> int:
    """How many processes hold a presence row for *who* (in the shared database)."""
    engine = sa.create_engine(database_url(tmp_path / "mesh-data"))
    try:
        with engine.connect() as conn:
            return int(
                conn.execute(
                    sa.text("SELECT count(*) FROM presence_sessions WHERE participant_id = :p"),
                    {"p": who.participant_id},
                ).scalar_one()
            )
    finally:
        engine.dispose()


async def _until_rows(tmp_path: Path, who: User, count: int) -> None:
    with trio.fail_after(10):
        while await trio.to_thread.run_sync(_rows, tmp_path, who) != count:
            await trio.sleep(0.1)


async def test_online_anywhere_is_online_everywhere_and_announced_once(tmp_path: Path) -> None:
    async with two_nodes(tmp_path) as (a, b, nodes):
        owner, alice = await _setup(a, b)
        async with (
            connect(nodes[1].url, owner) as watcher,  # on B
            connect(nodes[0].url, alice) as first,  # on A
        ):
            online = await watcher.expect(
                "presence", participantId=alice.participant_id, timeout=10
            )
            assert online["online"] is True
            assert await _online(b, owner, alice)
            assert await _online(a, owner, alice)
            # a second session, on B: she was online already, nothing is announced
            async with connect(nodes[1].url, alice):
                await _until_rows(tmp_path, alice, 2)
                await _no_more_presence(watcher, alice)
                await first.ws.aclose()
                # A's grace period ends (its row goes): she is still online through B
                await _until_rows(tmp_path, alice, 1)
                assert await _online(b, owner, alice)
                assert await _online(a, owner, alice)
            # her last session closed: offline, announced once, after one online
            frames = await watcher.until(
                "presence", participantId=alice.participant_id, online=False, timeout=10
            )
            assert [f["online"] for f in _presence_of(watcher.seen, alice)] == [True, False]
            assert _presence_of(frames, alice)[-1]["lastSeen"] is not None
            await _no_more_presence(watcher, alice)
            assert not await _online(b, owner, alice)
            with trio.fail_after(10):  # A applies the same event from the stream
                while await _online(a, owner, alice):
                    await trio.sleep(0.05)


async def test_the_sessions_of_a_killed_process_go_offline_announced_by_a_survivor(
    tmp_path: Path,
) -> None:
    async with two_nodes(tmp_path) as (a, b, nodes):
        owner, alice = await _setup(a, b)
        async with (
            connect(nodes[1].url, owner) as watcher,  # on B, which survives
            connect(nodes[0].url, alice),  # her only session, on A
        ):
            await watcher.expect(
                "presence", participantId=alice.participant_id, online=True, timeout=10
            )
            nodes[0].kill()
            with trio.fail_after(OFFLINE_BOUND):
                await nodes[0].exited.wait()
                offline = await watcher.expect(
                    "presence", participantId=alice.participant_id, timeout=OFFLINE_BOUND
                )
            assert offline["online"] is False
            assert offline["lastSeen"] is not None
            await _no_more_presence(watcher, alice)
            assert not await _online(b, owner, alice)


async def test_a_burst_of_sessions_ending_goes_offline_in_a_few_writes(tmp_path: Path) -> None:
    """Many sessions ending at once (a proxy restarted, a class left) are
    released in a few writes, not one each: a send queued behind them waits
    for a few. (bench_cluster.py's latency, measured after 100 guests of its
    fan-out left: p99 230 ms with a write each, 12 ms together.) Each
    write stamps its participants' ``lastSeen`` with one time: the stamps
    the offline events carry count the writes."""
    count = 40
    async with (
        open_nodes(tmp_path, 1, env={"MESH_RATE_LIMITS": "off"}) as nodes,
        httpx.AsyncClient(base_url=nodes[0].url) as http,
    ):
        mesh = Mesh(http)
        owner = await mesh.setup()
        guests = [await mesh.guest() for _ in range(count)]
        ids = {g.participant_id for g in guests}
        async with connect(nodes[0].url, owner) as watcher:
            async with trio.open_nursery() as nursery:
                left = trio.Event()

                async def online(guest: User) -> None:
                    async with connect(nodes[0].url, guest):
                        await left.wait()

                for guest in guests:
                    nursery.start_soon(online, guest)
                with trio.fail_after(30):
                    while not ids <= {
                        f["participantId"]
                        for f in watcher.seen
                        if f["type"] == "presence" and f["online"]
                    }:
                        await watcher.recv(30)
                left.set()  # every session ends at once
            with trio.fail_after(30):
                while len(offline := _offline_of(watcher.seen, ids)) < count:
                    await watcher.recv(30)
            assert len(offline) == count
            # (the sessions end over some milliseconds, and each grace period
            # ends on its own: the first write takes whoever is due, the next
            # whoever came due meanwhile)
            stamps = {f["lastSeen"] for f in offline}
            assert len(stamps) <= count // 2, sorted(stamps)


def _offline_of(frames: list[dict[str, Any]], ids: set[str]) -> list[dict[str, Any]]:
    return [
        f
        for f in frames
        if f["type"] == "presence" and not f["online"] and f["participantId"] in ids
    ]
