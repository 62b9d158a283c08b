"""Issue 28, finding 6: one silent peer delays only its own outbox rows; a
peer whose backlog passes ``MESH_FEDERATION_MAX_BACKLOG`` is reported in the
log at once, and disconnected once it has also taken nothing for ten of the
longest retry waits (here 0.3 s each) — three real nodes on loopback; the
outbox is read from A's own store."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
import trio

from tests.e2e.test_relay import Node, connect_nodes, nodes, share, wait_for_message
from tests.helpers import wait_for
from tests.stores import node_env

pytestmark = pytest.mark.timeout(120)

#: the most events that may wait for one peer on A (C's backlog passes it)
BOUND = 8


def outbox_rooms(node: Node) -> list[str]:
    """The room of each row in *node*'s relay outbox, read from its store."""
    url = node_env(node.data_dir).get("MESH_DATABASE_URL") or (
        f"sqlite:///{(node.data_dir / 'mesh.db').resolve()}"
    )
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return [row[0] for row in conn.execute(sa.text("SELECT room_id FROM relay_outbox"))]
    finally:
        engine.dispose()


async def test_a_silent_peer_holds_only_its_own_rows_and_is_ended_past_the_bound(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    # retries at most 0.3 s apart: C is given up on after 3 s of taking nothing
    env = {
        "MESH_FEDERATION_MAX_BACKLOG": str(BOUND),
        "MESH_FEDERATION_RETRY_MAX": "0.3",
        "MESH_OUTBOUND_ALLOW_PRIVATE": "true",
    }
    async with nodes(tmp_path, nursery, "a", "b", "c", env=env) as (a, b, c):
        bob = await b.mesh.register("bob")
        to_b, to_c = await connect_nodes(a, b), await connect_nodes(a, c)
        chat = await a.mesh.create_room(a.owner, "chat")
        quiet = await a.mesh.create_room(a.owner, "quiet")
        on_b = await share(a, to_b, chat["roomId"], b)
        await share(a, to_c, quiet["roomId"], c)
        await b.mesh.join(bob, on_b)

        # C goes silent: what A writes for it waits
        assert await c.process.stop() == 0
        for i in range(3):
            await a.mesh.send(a.owner, quiet["roomId"], f"for C {i}")
        # B takes its rows: they leave A's outbox, C's rows stay
        last = None
        for i in range(3):
            last = await a.mesh.send(a.owner, chat["roomId"], f"for B {i}")
        assert last is not None
        await wait_for_message(b, bob, on_b, last["messageId"])

        async def only_c_rows_left() -> bool:
            return await trio.to_thread.run_sync(outbox_rooms, a) == [quiet["roomId"]] * 3

        await wait_for(only_c_rows_left, 15, interval=0.1)

        # C's backlog passes the bound: the admin is told in the log, and as C
        # takes nothing, A ends the connection with C and its rows go; B's
        # connection goes on
        for i in range(3, BOUND + 1):
            await a.mesh.send(a.owner, quiet["roomId"], f"for C {i}")

        async def c_ended() -> bool:
            listed = {conn["id"]: conn for conn in await a.connections()}
            return bool(listed[to_c]["status"] == "disconnected")

        async def alerted() -> bool:  # stdout is read by a background task: wait for it
            return b"relayed events wait for the peer (MESH_FEDERATION_MAX_BACKLOG)" in (
                a.process.output
            )

        await wait_for(alerted, 20, interval=0.1)
        await wait_for(c_ended, 45, interval=0.1)
        listed = {conn["id"]: conn for conn in await a.connections()}
        assert (listed[to_c]["sharedRooms"], listed[to_c]["relay"]) == ([], None)
        assert listed[to_b]["status"] == "accepted"

        async def logged() -> bool:
            return b"relayed events waited for the peer (MESH_FEDERATION_MAX_BACKLOG" in (
                a.process.output
            )

        await wait_for(logged, 10, interval=0.1)
        assert await trio.to_thread.run_sync(outbox_rooms, a) == []
        after = await a.mesh.send(a.owner, chat["roomId"], "still for B")
        await wait_for_message(b, bob, on_b, after["messageId"])
