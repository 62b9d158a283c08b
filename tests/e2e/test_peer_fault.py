"""A federation peer that is down is one fault, logged once (issue 33).

Two served nodes share a room; B stops while A sends. A's link keeps
counting its failed attempts (``relay.failures`` on the connection), but
A's log holds one ``fault started`` line naming the connection and no
warning per retry; once B is back and takes the relay, one ``fault ended``
line. Nothing sent meanwhile is lost."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.e2e.test_relay import connect_nodes, nodes, share, wait_for_messages
from tests.helpers import wait_for

pytestmark = pytest.mark.timeout(120)


async def test_a_peer_down_is_logged_once(tmp_path: Path, nursery: trio.Nursery) -> None:
    async with nodes(tmp_path, nursery, "a", "b") as (a, b):
        alice = await a.mesh.register("alice")
        bob = await b.mesh.register("bob")
        room = await a.mesh.create_room(a.owner, "ops")
        await a.mesh.join(alice, room["roomId"])
        connection_id = await connect_nodes(a, b)
        mirror_id = await share(a, connection_id, room["roomId"], b)
        await b.mesh.join(bob, mirror_id)

        assert await b.process.stop() == 0
        sent = [await a.mesh.send(alice, room["roomId"], f"m{i}") for i in range(5)]

        async def failing() -> bool:
            return bool((await a.connections())[0]["relay"]["failures"] >= 4)

        await wait_for(failing, 30, interval=0.1)
        await b.start(nursery)
        got = await wait_for_messages(b, bob, mirror_id, 5)
        assert [m["messageId"] for m in got] == [m["messageId"] for m in sent]

        def log() -> str:
            return a.process.output.decode(errors="replace")

        async def ended() -> bool:
            return "fault ended: a federation peer is down" in log()

        await wait_for(ended, 15, interval=0.1)
        lines = log().splitlines()
        started = [line for line in lines if "fault started: a federation peer is down" in line]
        assert len(started) == 1, log()
        assert (
            f"({connection_id}): relay link {connection_id}: cannot reach the peer" in (started[0])
        ), log()
        assert len([line for line in lines if "fault ended: a federation peer" in line]) == 1
        assert not [line for line in lines if "retrying in" in line], log()
        # the link's own status counted every attempt, and is clear again
        [link] = await a.connections()
        assert (link["relay"]["failures"], link["relay"]["lastError"]) == (0, None)
