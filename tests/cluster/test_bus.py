"""Two processes serve one mesh on one PostgreSQL database and behave as one
node: what is committed through one reaches the sessions of the other live
(``services/bus.py``), and what one process caches follows a change made
through the other (a demotion, a deletion, a setting, a sign-out) at once.

Each test starts real ``quart-mesh serve`` processes (``tests/cluster/nodes.py``);
they run with ``pytest --store postgresql`` only.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.cluster.nodes import set_up_through, two_nodes
from tests.helpers import Mesh, User, assert_error, connect

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


async def _eventually(check: object, what: str, timeout: float = 10) -> None:
    """Wait until ``await check()`` is true (a change on another process is
    applied within a bound: the bus reads the stream at once on NOTIFY)."""
    with trio.fail_after(timeout):
        while not await check():  # type: ignore[operator]
            await trio.sleep(0.05)


async def test_events_committed_through_one_process_reach_the_other_live_in_order(
    tmp_path: Path,
) -> None:
    async with two_nodes(tmp_path) as (a, b, nodes):
        owner = await set_up_through(a, b)
        bob = await b.register("bob")
        room_id = (await a.create_room(owner, "lobby"))["roomId"]
        async with connect(nodes[1].url, bob) as ws_b, connect(nodes[0].url, owner) as ws_a:
            # a join through B reaches the session on A, and routes to B's session
            await b.join(bob, room_id)
            joined = await ws_a.expect("participant_joined", roomId=room_id)
            assert joined["participant"]["participantId"] == bob.participant_id
            await ws_b.expect("participant_joined", roomId=room_id)
            # messages through A and B, interleaved: each session sees all, in cursor order
            sent = []
            for i in range(6):
                mesh, user = (a, owner) if i % 2 == 0 else (b, bob)
                sent.append((await mesh.send(user, room_id, f"m{i}"))["messageId"])
            for ws in (ws_a, ws_b):
                got = [await ws.expect("message", roomId=room_id) for _ in sent]
                assert [m["messageId"] for m in got] == sent
                cursors = [int(m["cursor"]) for m in got]
                assert cursors == sorted(cursors)
                assert len(set(cursors)) == len(cursors)
                # exactly once: nothing more of these
                extra = [f for f in await ws.settle() if f["type"] == "message"]
                assert extra == []
            # an edit, a reaction and typing through A reach B
            await ws_a.send(type="edit_message", messageId=sent[0], content="edited")
            edited = await ws_b.expect("message_edited", messageId=sent[0])
            assert edited["content"] == "edited"
            await ws_a.send(type="add_reaction", messageId=sent[1], emoji="👍")
            await ws_b.expect("reaction_added", messageId=sent[1], emoji="👍")
            await ws_a.send(type="typing", roomId=room_id)
            typing = await ws_b.expect("typing", roomId=room_id)
            assert typing["participantId"] == owner.participant_id
            # a leave through B: B's session hears its own participant_left, then nothing
            r = await b.http.post(f"/api/rooms/{room_id}/leave", headers=bob.headers)
            assert r.status_code == 200, r.text
            await ws_b.expect("participant_left", roomId=room_id)
            await ws_a.expect("participant_left", roomId=room_id)
            await a.send(owner, room_id, "after")
            await ws_a.expect("message", content="after")
            assert [f for f in await ws_b.settle() if f.get("roomId") == room_id] == []


async def test_a_session_resuming_on_the_other_process_misses_nothing(tmp_path: Path) -> None:
    async with two_nodes(tmp_path) as (a, b, nodes):
        owner = await set_up_through(a, b)
        room_id = (await a.create_room(owner, "lobby"))["roomId"]
        async with connect(nodes[0].url, owner) as ws:
            await a.send(owner, room_id, "one")
            last = await ws.expect("message", content="one")
        for i in range(4):
            await (a if i % 2 else b).send(owner, room_id, f"missed {i}")
        async with connect(nodes[1].url, owner, since=last["cursor"]) as ws:
            await a.send(owner, room_id, "live")
            got = [(await ws.expect("message"))["content"] for _ in range(5)]
            assert got == [f"missed {i}" for i in range(4)] + ["live"]
            assert [f for f in await ws.settle() if f["type"] == "message"] == []


async def _status(mesh: Mesh, user: User, path: str) -> int:
    return (await mesh.http.get(path, headers=user.headers)).status_code


async def test_a_demotion_through_one_process_holds_on_the_other(tmp_path: Path) -> None:
    async with two_nodes(tmp_path) as (a, b, _):
        owner = await set_up_through(a, b)
        bob = await a.register("bob")
        r = await a.http.put(
            f"/api/participants/{bob.participant_id}/role",
            json={"role": "admin"},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text
        assert await _status(b, bob, "/api/admin/stats") == 200  # B caches bob as admin
        r = await a.http.put(
            f"/api/participants/{bob.participant_id}/role",
            json={"role": "member"},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text

        async def refused() -> bool:
            return await _status(b, bob, "/api/admin/stats") == 403

        await _eventually(refused, "the demotion on B")
        r = await b.http.put(
            "/api/admin/mesh/settings", json={"name": "taken over"}, headers=bob.headers
        )
        assert_error(r, 403)


async def test_closing_registration_through_one_process_closes_it_on_the_other(
    tmp_path: Path,
) -> None:
    async with two_nodes(tmp_path) as (a, b, _):
        owner = await set_up_through(a, b)
        await b.register("early")  # B has read the mesh's settings
        r = await a.http.put(
            "/api/admin/mesh/settings", json={"registrationMode": "closed"}, headers=owner.headers
        )
        assert r.status_code == 200, r.text

        async def closed() -> bool:
            status = (await b.http.get("/api/setup/status")).json()
            return bool(status["registrationMode"] == "closed")

        await _eventually(closed, "the setting on B")
        r = await b.http.post("/api/auth/register", json={"name": "late", "password": "x" * 12})
        assert_error(r, 403, "registration_closed")


async def test_a_deleted_participant_and_a_signed_out_token_are_refused_on_the_other(
    tmp_path: Path,
) -> None:
    async with two_nodes(tmp_path) as (a, b, nodes):
        owner = await set_up_through(a, b)
        room_id = (await a.create_room(owner, "lobby"))["roomId"]
        r = await a.http.post("/api/agents/bootstrap", json={"name": "bot", "type": "nanoclaw"})
        assert r.status_code == 201, r.text
        bot = User(r.json()["agentId"], "bot", r.json()["token"])
        assert await _status(b, bot, "/api/rooms") == 200  # B caches the bot
        async with connect(nodes[1].url, bot) as ws:
            r = await a.http.delete(f"/api/agents/{bot.participant_id}", headers=owner.headers)
            assert r.status_code in (200, 204), r.text
            # its session on B ends, and its token is refused there (never a 500)
            await ws.expect("error", timeout=10)
            r = await b.http.post(f"/api/rooms/{room_id}/join", headers=bot.headers)
            assert_error(r, 401)

        # a token signed out through A is refused by B, and B's sessions with it end
        carol = await b.register("carol")
        assert await _status(b, carol, "/api/rooms") == 200
        async with connect(nodes[1].url, carol) as ws:
            r = await a.http.post("/api/auth/logout", headers=carol.headers)
            assert r.status_code in (200, 204), r.text
            await ws.expect("error", timeout=10)
        r = await b.http.get("/api/rooms", headers=carol.headers)
        assert_error(r, 401, "token_revoked")


async def test_a_long_poll_on_one_process_wakes_for_a_message_sent_through_the_other(
    tmp_path: Path,
) -> None:
    async with two_nodes(tmp_path) as (a, b, nodes):
        owner = await set_up_through(a, b)
        bob = await b.register("bob")
        room_id = (await a.create_room(owner, "lobby"))["roomId"]
        await b.join(bob, room_id)
        cursor = (await b.http.post("/api/poll", json={}, headers=bob.headers)).json()["cursor"]
        answer: dict[str, object] = {}

        async def long_poll() -> None:
            r = await b.http.post(
                "/api/poll", json={"cursor": cursor, "timeout": 20}, headers=bob.headers
            )
            assert r.status_code == 200, r.text
            answer.update(r.json())

        async with connect(nodes[0].url, owner) as watch:
            with trio.fail_after(15):  # well before the poll's own timeout
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(long_poll)
                    # the waiting poll holds bob online, as seen from A: it waits now
                    await watch.expect(
                        "presence", timeout=10, participantId=bob.participant_id, online=True
                    )
                    await a.send(owner, room_id, "wake up")
        messages = answer["messages"]
        assert isinstance(messages, list)
        assert [m["content"] for m in messages] == ["wake up"]
