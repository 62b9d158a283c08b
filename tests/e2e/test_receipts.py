"""Read receipts in DMs and one's own settings over a served node (issue 32,
``docs/decisions/0071-read-receipts.md``): ``readBy`` of ``GET /api/dms``,
the ``dm_read`` event, the ``readReceipts`` opt-out (both ways), the
``participant_updated`` event of a new display name, and the ``profile``
rate rule of ``PATCH /api/auth/me``.

Loopback only, port 0; frames are waited for, never slept for; "nothing
else arrived" is checked with :meth:`Socket.settle`. Each test covers a
whole story (the file runs on SQLite and on PostgreSQL).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from quart_mesh import MeshApp, Settings, create_app, serve
from tests.helpers import Mesh, Socket, User, assert_error, open_client

pytestmark = pytest.mark.e2e


@pytest.fixture
def node_app(settings: Settings) -> MeshApp:
    return create_app(settings)


@pytest.fixture
async def base_url(node_app: MeshApp, nursery: trio.Nursery) -> str:
    """The conftest's served node, with the app at hand (to delete a person)."""
    url: str = await nursery.start(
        lambda task_status: serve(node_app, port=0, task_status=task_status)
    )
    return url


@asynccontextmanager
async def browser_tab(base_url: str, user: User) -> AsyncIterator[Socket]:
    """A session as the web client opens it (``autoRead: false``): what it is
    sent is not read until it says so."""
    async with open_client(base_url) as ws:
        socket = Socket(ws)
        await socket.send(type="authenticate", token=user.token, autoRead=False)
        await socket.expect("auth_ok")
        await socket.expect("snapshot")
        yield socket


async def open_dm(mesh: Mesh, user: User, other: User) -> str:
    r = await mesh.http.post(
        "/api/dms", json={"participantId": other.participant_id}, headers=user.headers
    )
    assert r.status_code in (200, 201), r.text
    room_id: str = r.json()["roomId"]
    return room_id


async def read(mesh: Mesh, user: User, room_id: str, cursor: str) -> None:
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/read", json={"cursor": cursor}, headers=user.headers
    )
    assert r.status_code == 200, r.text


async def read_by(mesh: Mesh, user: User, room_id: str) -> list[dict[str, Any]]:
    r = await mesh.http.get("/api/dms", headers=user.headers)
    assert r.status_code == 200, r.text
    (dm,) = [dm for dm in r.json() if dm["roomId"] == room_id]
    found: list[dict[str, Any]] = dm["readBy"]
    return found


async def settings(mesh: Mesh, user: User, **change: Any) -> Any:
    return await mesh.http.patch("/api/auth/me", json=change, headers=user.headers)


def of_type(frames: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [frame for frame in frames if frame["type"] == kind]


async def test_read_receipts_in_a_dm_and_the_opt_out_both_ways(
    mesh: Mesh, base_url: str, node_app: MeshApp
) -> None:
    owner = await mesh.setup()
    alice, bob, carol = [await mesh.register(n) for n in ("alice", "bob", "carol")]
    dm = await open_dm(mesh, alice, bob)
    other_dm = await open_dm(mesh, alice, carol)
    room_id = (await mesh.create_room(owner, "general"))["roomId"]
    await mesh.join(alice, room_id)
    await mesh.join(bob, room_id)
    me = (await mesh.http.get("/api/auth/me", headers=bob.headers)).json()
    assert me["readReceipts"] is True  # on by default

    first = await mesh.send(alice, dm, "are you there?")
    assert await read_by(mesh, alice, dm) == []  # bob has read nothing yet
    async with browser_tab(base_url, alice) as a, browser_tab(base_url, carol) as c:
        # bob reads it: alice hears of it at once, and sees it in readBy
        await read(mesh, bob, dm, first["cursor"])
        receipt = await a.expect("dm_read", roomId=dm)
        assert receipt == {
            "type": "dm_read",
            "roomId": dm,
            "participantId": bob.participant_id,
            "cursor": first["cursor"],
        }
        assert await read_by(mesh, alice, dm) == [
            {"participantId": bob.participant_id, "cursor": first["cursor"]}
        ]
        # reading the same position again is no news; a room is no DM
        await read(mesh, bob, dm, first["cursor"])
        said = await mesh.send(owner, room_id, "hello all")
        await read(mesh, bob, room_id, said["cursor"])
        assert of_type(await a.settle(), "dm_read") == []
        # carol, in another DM of alice's, hears nothing of bob's reads
        assert of_type(await c.settle(), "dm_read") == []

        # bob turns his receipts off: his position is shown no more
        r = await settings(mesh, bob, readReceipts=False)
        assert r.status_code == 200, r.text
        assert r.json()["readReceipts"] is False
        second = await mesh.send(alice, dm, "still there?")
        await read(mesh, bob, dm, second["cursor"])
        assert of_type(await a.settle(), "dm_read") == []
        assert await read_by(mesh, alice, dm) == []
        # ... and he sees alice's no more either
        answer = await mesh.send(bob, dm, "yes")
        await read(mesh, alice, dm, answer["cursor"])
        assert await read_by(mesh, bob, dm) == []

        # bob on again, alice off: alice sees none, bob none of hers
        assert (await settings(mesh, bob, readReceipts=True)).status_code == 200
        assert await read_by(mesh, alice, dm) == [
            {"participantId": bob.participant_id, "cursor": second["cursor"]}
        ]
        assert (await settings(mesh, alice, readReceipts=False)).status_code == 200
        third = await mesh.send(alice, dm, "one more")
        await read(mesh, bob, dm, third["cursor"])
        assert of_type(await a.settle(), "dm_read") == []
        assert await read_by(mesh, alice, dm) == []
        assert await read_by(mesh, bob, dm) == []
        # carol's DM with alice shows carol's position only while alice shares
        assert await read_by(mesh, carol, other_dm) == []

    # reading history (a page of messages) moves the position too: a receipt
    assert (await settings(mesh, alice, readReceipts=True)).status_code == 200
    async with browser_tab(base_url, alice) as a:
        fourth = await mesh.send(alice, dm, "last one")
        await mesh.messages(bob, dm)
        receipt = await a.expect("dm_read", roomId=dm)
        assert receipt["cursor"] == fourth["cursor"]

    # refusals: not a boolean; a signed-out or deleted participant
    for bad in ("no", 1, None):
        assert_error(await settings(mesh, carol, readReceipts=bad), 400)
    r = await mesh.http.post("/api/auth/logout", headers=carol.headers)
    assert r.status_code == 200, r.text
    assert_error(await settings(mesh, carol, readReceipts=False), 401)
    admin = await node_app.node.accounts.authenticate(owner.token)
    await node_app.node.accounts.delete_participant(admin, bob.participant_id)
    assert_error(await settings(mesh, bob, readReceipts=False), 401)
    assert_error(await mesh.http.get("/api/dms", headers=bob.headers), 401)


async def test_a_new_display_name_reaches_those_who_share_a_room_live(
    mesh: Mesh, base_url: str
) -> None:
    owner = await mesh.setup()
    alice, bob, carol, dave = [await mesh.register(n) for n in ("alice", "bob", "carol", "dave")]
    room_id = (await mesh.create_room(owner, "plans"))["roomId"]
    await mesh.join(alice, room_id)
    await mesh.join(bob, room_id)
    dm = await open_dm(mesh, carol, alice)  # carol shares only a DM with alice
    guest = await mesh.guest()  # a guest in no room: an outsider

    async with (
        browser_tab(base_url, alice) as a,
        browser_tab(base_url, bob) as b,
        browser_tab(base_url, carol) as c,
        browser_tab(base_url, dave) as d,
        browser_tab(base_url, guest) as g,
    ):
        r = await settings(mesh, alice, displayName="Alice A")
        assert r.status_code == 200, r.text
        assert r.json()["displayName"] == "Alice A"
        # one event per room or DM alice is in, to its members
        for session, where in ((a, {room_id, dm}), (b, {room_id}), (c, {dm})):
            # (the unit's events are published together: the first, then the rest)
            first = await session.expect("participant_updated")
            events = [first, *of_type(await session.settle(), "participant_updated")]
            assert {event["roomId"] for event in events} == where
            assert len(events) == len(where)
            for event in events:
                assert event["participant"]["participantId"] == alice.participant_id
                assert event["participant"]["displayName"] == "Alice A"
                assert event["participant"]["name"] == "alice"
        # those who share nothing with alice hear nothing
        assert of_type(await d.settle(), "participant_updated") == []
        assert of_type(await g.settle(), "participant_updated") == []
        # the same name again, or a change of receipts only: no event
        assert (await settings(mesh, alice, displayName="Alice A")).status_code == 200
        assert (await settings(mesh, alice, readReceipts=False)).status_code == 200
        assert of_type(await b.settle(), "participant_updated") == []
        # cleared: null
        assert (await settings(mesh, alice, displayName=None)).status_code == 200
        event = await b.expect("participant_updated")
        assert event["participant"]["displayName"] is None


async def test_changes_of_ones_own_settings_are_rate_limited(mesh: Mesh) -> None:
    await mesh.setup()
    alice = await mesh.register("alice")
    bob = await mesh.register("bob")
    for i in range(10):  # the profile rule: 10 a minute
        r = await settings(mesh, alice, displayName=f"Alice {i}")
        assert r.status_code == 200, r.text
    r = await settings(mesh, alice, readReceipts=False)
    assert_error(r, 429, "rate_limited")
    assert int(r.headers["Retry-After"]) >= 1
    # refused before anything changed
    me = (await mesh.http.get("/api/auth/me", headers=alice.headers)).json()
    assert me["readReceipts"] is True
    assert me["displayName"] == "Alice 9"
    # one participant's budget is its own
    assert (await settings(mesh, bob, displayName="Bob")).status_code == 200
