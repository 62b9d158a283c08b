"""Writes of several processes commit concurrently, and every reader still
sees one order it can trust (``store/blocks.py``, ``services/bus.py``,
decision 0080): sends through two processes at once reach every session in
cursor order, exactly once; a resume from any cursor delivers exactly the
rest; a writer that holds a block and dies holds delivery back only while
it lives, and loses nothing acknowledged.

Real ``quart-mesh serve`` processes on the suite's PostgreSQL
(``tests/cluster/nodes.py``); skipped on the SQLite run.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.cluster.nodes import database_url, set_up_through, two_nodes
from tests.helpers import Socket, connect

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]

#: messages each sender pipelines through its own process
_EACH = 40


async def _messages(ws: Socket, count: int) -> list[dict[str, Any]]:
    return [await ws.expect("message", timeout=20) for _ in range(count)]


async def test_sends_through_two_processes_at_once_reach_every_session_in_one_order(
    tmp_path: Path,
) -> None:
    async with two_nodes(tmp_path) as (a, b, nodes):
        owner = await set_up_through(a, b)
        bob = await b.register("bob")
        room_id = (await a.create_room(owner, "lobby"))["roomId"]
        await b.join(bob, room_id)
        async with (
            connect(nodes[0].url, owner) as send_a,
            connect(nodes[1].url, bob) as send_b,
            connect(nodes[0].url, owner) as watch_a,
            connect(nodes[1].url, bob) as watch_b,
        ):
            # both senders pipeline their sends at once, each through its
            # own process: the two processes' writes commit concurrently
            async def pipeline(ws: Socket, who: str) -> None:
                for i in range(_EACH):
                    await ws.send(
                        type="send_message",
                        roomId=room_id,
                        content=f"{who}{i}",
                        clientId=f"{who}-{i}",
                    )

            async with trio.open_nursery() as nursery:
                nursery.start_soon(pipeline, send_a, "a")
                nursery.start_soon(pipeline, send_b, "b")
            seen = []
            for ws in (watch_a, watch_b, send_a, send_b):
                got = await _messages(ws, 2 * _EACH)
                cursors = [int(m["cursor"]) for m in got]
                # one order everywhere: the cursors', each message once
                assert cursors == sorted(cursors)
                assert len(set(cursors)) == len(cursors)
                contents = [m["content"] for m in got]
                # each sender's messages in the order it sent them
                for who in "ab":
                    mine = [c for c in contents if c.startswith(who)]
                    assert mine == [f"{who}{i}" for i in range(_EACH)]
                assert [f for f in await ws.settle() if f["type"] == "message"] == []
                seen.append(contents)
            assert seen[0] == seen[1] == seen[2] == seen[3]
            middle = got[_EACH - 1]
        # a resume from any cursor, on either process, delivers exactly the rest
        for node, user in ((nodes[0], owner), (nodes[1], bob)):
            async with connect(node.url, user, since=middle["cursor"]) as ws:
                rest = await _messages(ws, _EACH)
                assert [m["content"] for m in rest] == seen[0][_EACH:]
                assert [f for f in await ws.settle() if f["type"] == "message"] == []


_HOLD_A_BLOCK = """
import sys, time, sqlalchemy as sa
engine = sa.create_engine(sys.argv[1])
with engine.connect() as conn:
    conn.begin()
    print(conn.exec_driver_sql("SELECT mesh_reserve()").scalar_one(), flush=True)
    time.sleep(600)
"""


async def test_a_writer_that_dies_with_a_block_in_flight_holds_delivery_back_only_while_alive(
    tmp_path: Path,
) -> None:
    """A writer process takes a block (its transaction open) and is killed
    with ``kill -9``: while it lives, no process delivers a commit of a later
    block (it might still commit a position below); once it is dead,
    PostgreSQL rolls it back, and everything acknowledged arrives, once."""
    async with two_nodes(tmp_path) as (a, b, nodes):
        owner = await set_up_through(a, b)
        room_id = (await a.create_room(owner, "lobby"))["roomId"]
        async with connect(nodes[1].url, owner) as watch:
            await a.send(owner, room_id, "before")
            await watch.expect("message", content="before")
            writer = subprocess.Popen(
                [sys.executable, "-c", _HOLD_A_BLOCK, database_url(tmp_path / "mesh-data")],
                stdout=subprocess.PIPE,
                text=True,
            )
            try:
                assert writer.stdout is not None
                line = await trio.to_thread.run_sync(writer.stdout.readline)
                assert line.strip().isdigit(), line
                acknowledged = trio.Event()

                async def send() -> None:
                    await a.send(owner, room_id, "held")
                    acknowledged.set()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(send)
                    # committed above the open block: not delivered, and
                    # (delivered here first) not acknowledged, while it lives
                    assert [f for f in await watch.quiet(0.5) if f["type"] == "message"] == []
                    assert not acknowledged.is_set()
                    writer.kill()  # kill -9: no clean-up; PostgreSQL rolls it back
                    await watch.expect("message", content="held", timeout=10)
                    with trio.fail_after(10):
                        await acknowledged.wait()
                await a.send(owner, room_id, "after")
                await watch.expect("message", content="after")
                assert [f for f in await watch.settle() if f["type"] == "message"] == []
            finally:
                writer.kill()
                writer.wait(10)
                if writer.stdout is not None:
                    writer.stdout.close()
