"""Per-room and per-DM mutes and "mark all read" over a served node (issue 29,
``docs/decisions/0060-mutes-and-read-all.md``).

Loopback only, port 0; frames are waited for, never slept for; "nothing
else arrived" is checked with :meth:`Socket.settle`. Few nodes are started
(the file runs on SQLite and on PostgreSQL in CI): each test covers a whole
story.
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

#: a well-formed room id no room has
NO_ROOM = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


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
    """A session as a person's browser tab opens it: messages it is sent do
    not count as read (``autoRead: false``), so counts stay put while it is open."""
    async with open_client(base_url) as ws:
        socket = Socket(ws)
        await socket.send(type="authenticate", token=user.token, autoRead=False)
        await socket.expect("auth_ok")
        socket.snapshot = await socket.expect("snapshot")  # type: ignore[attr-defined]
        yield socket


async def mute(mesh: Mesh, user: User, room_id: str, muted: Any) -> Any:
    return await mesh.http.put(
        f"/api/rooms/{room_id}/mute", json={"muted": muted}, headers=user.headers
    )


async def read_all(mesh: Mesh, user: User, **kwargs: Any) -> Any:
    return await mesh.http.post("/api/read-all", headers=user.headers, **kwargs)


async def own_rooms(mesh: Mesh, user: User) -> dict[str, dict[str, Any]]:
    """The caller's rooms by id as ``GET /api/state`` shows them."""
    r = await mesh.http.get("/api/state", headers=user.headers)
    assert r.status_code == 200, r.text
    return {room["roomId"]: room for room in r.json()["rooms"]}


async def status(mesh: Mesh, user: User) -> dict[str, dict[str, Any]]:
    r = await mesh.http.get("/api/status", headers=user.headers)
    assert r.status_code == 200, r.text
    return {room["roomId"]: room for room in r.json()["rooms"]}


async def open_dm(mesh: Mesh, user: User, other: User) -> str:
    r = await mesh.http.post(
        "/api/dms", json={"participantId": other.participant_id}, headers=user.headers
    )
    assert r.status_code in (200, 201), r.text
    return str(r.json()["roomId"])


def of_type(frames: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [f for f in frames if f["type"] == kind]


async def test_a_mute_is_the_participants_own_and_every_session_of_it_follows(
    base_url: str, mesh: Mesh
) -> None:
    owner = await mesh.setup()
    alice, bob = await mesh.register("alice"), await mesh.register("bob")
    lobby = (await mesh.create_room(alice, "lobby"))["roomId"]
    await mesh.join(bob, lobby)
    dm = await open_dm(mesh, alice, bob)

    async with (
        browser_tab(base_url, alice) as tab1,
        browser_tab(base_url, alice) as tab2,
        browser_tab(base_url, bob) as other,
    ):
        r = await mute(mesh, alice, lobby, True)
        assert r.status_code == 200, r.text
        assert r.json() == {"roomId": lobby, "muted": True}
        for tab in (tab1, tab2):
            await tab.expect("room_muted", roomId=lobby, muted=True)
        r = await mute(mesh, alice, dm, True)
        assert r.json() == {"roomId": dm, "muted": True}
        await tab1.expect("room_muted", roomId=dm, muted=True)
        # the same again changes nothing and tells nobody; bob is never told
        assert (await mute(mesh, alice, lobby, True)).json()["muted"] is True
        assert not of_type(await tab1.settle(), "room_muted")
        assert not of_type(await other.settle(), "room_muted")

        # every object alice sees of her own rooms says so; bob's do not
        mine = await own_rooms(mesh, alice)
        assert (mine[lobby]["muted"], mine[dm]["muted"]) == (True, True)
        default = next(room_id for room_id in mine if room_id not in (lobby, dm))
        assert mine[default]["muted"] is False  # the default room, not joined
        theirs = await own_rooms(mesh, bob)
        assert (theirs[lobby]["muted"], theirs[dm]["muted"]) == (False, False)
        r = await mesh.http.get(f"/api/rooms/{lobby}", headers=alice.headers)
        assert r.json()["muted"] is True
        r = await mesh.http.get(f"/api/rooms/{lobby}", headers=bob.headers)
        assert r.json()["muted"] is False
        r = await mesh.http.get(f"/api/rooms/{default}", headers=alice.headers)
        assert r.json()["muted"] is False
        r = await mesh.http.get("/api/dms", headers=alice.headers)
        assert [(d["roomId"], d["muted"]) for d in r.json()] == [(dm, True)]
        r = await mesh.http.get("/api/dms", headers=bob.headers)
        assert [(d["roomId"], d["muted"]) for d in r.json()] == [(dm, False)]
        r = await mesh.http.post(
            "/api/dms", json={"participantId": bob.participant_id}, headers=alice.headers
        )
        assert r.json()["muted"] is True
        async with browser_tab(base_url, alice) as later:
            snapshot: dict[str, Any] = later.snapshot  # type: ignore[attr-defined]
            rooms = {room["roomId"]: room["muted"] for room in snapshot["rooms"]}
            assert rooms == {lobby: True, dm: True, default: False}

        # muted rooms still count unread (and mentions)
        await mesh.send(bob, lobby, "hello @alice")
        await mesh.send(bob, dm, "psst")
        counts = await status(mesh, alice)
        assert [counts[lobby][k] for k in ("unread", "mentions", "muted")] == [1, 1, True]
        assert [counts[dm][k] for k in ("unread", "muted")] == [1, True]

        # unmuting is told the same way
        r = await mute(mesh, alice, lobby, False)
        assert r.json() == {"roomId": lobby, "muted": False}
        for tab in (tab1, tab2):
            await tab.expect("room_muted", roomId=lobby, muted=False)
        assert (await own_rooms(mesh, alice))[lobby]["muted"] is False
        assert not of_type(await other.settle(), "room_muted")

    # leaving a room forgets its mute
    assert (await mute(mesh, bob, lobby, True)).status_code == 200
    r = await mesh.http.post(f"/api/rooms/{lobby}/leave", headers=bob.headers)
    assert r.status_code == 200, r.text
    assert_error(await mute(mesh, bob, lobby, True), 403, "not_member")
    await mesh.join(bob, lobby)
    assert (await own_rooms(mesh, bob))[lobby]["muted"] is False
    # an admin reads every room but mutes only its own
    assert_error(await mute(mesh, owner, dm, True), 404, "room_not_found")
    assert_error(await mute(mesh, owner, lobby, True), 403, "not_member")


async def test_read_all_marks_every_room_and_dm_read_and_tells_only_the_reader(
    base_url: str, mesh: Mesh
) -> None:
    await mesh.setup()
    alice, bob = await mesh.register("alice"), await mesh.register("bob")
    lobby = (await mesh.create_room(bob, "lobby"))["roomId"]
    quiet = (await mesh.create_room(bob, "quiet"))["roomId"]
    empty = (await mesh.create_room(alice, "empty"))["roomId"]
    for room_id in (lobby, quiet):
        await mesh.join(alice, room_id)
    await mesh.join(bob, empty)
    dm = await open_dm(mesh, bob, alice)
    await mesh.send(bob, lobby, "one")
    await mesh.send(bob, lobby, "two @alice")
    last_lobby = await mesh.send(bob, lobby, "three")
    last_dm = await mesh.send(bob, dm, "psst")
    await mesh.send(alice, dm, "hi bob")  # bob's unread, which alice's read-all leaves
    last_quiet = await mesh.send(alice, quiet, "only mine")
    assert (await mute(mesh, alice, dm, True)).status_code == 200
    before = await status(mesh, alice)
    assert [before[lobby]["unread"], before[lobby]["mentions"], before[dm]["unread"]] == [3, 1, 1]

    async with (
        browser_tab(base_url, alice) as tab1,
        browser_tab(base_url, alice) as tab2,
        browser_tab(base_url, bob) as other,
    ):
        r = await read_all(mesh, alice)  # no body
        assert r.status_code == 200, r.text
        rooms = {room["roomId"]: room for room in r.json()["rooms"]}
        assert set(rooms) == {lobby, quiet, empty, dm}  # not the default room: not in it
        assert rooms[lobby] == {
            "roomId": lobby,
            "cursor": last_lobby["cursor"],
            "unread": 0,
            "mentions": 0,
        }
        assert rooms[dm]["cursor"] == (await mesh.messages(alice, dm))[-1]["cursor"]
        assert rooms[dm]["cursor"] != last_dm["cursor"]  # alice's own came after
        assert rooms[quiet]["cursor"] == last_quiet["cursor"]
        assert rooms[empty] == {"roomId": empty, "cursor": "0", "unread": 0, "mentions": 0}
        # one room_read per room that moved, to each of alice's sessions (the
        # room of only her own message too; the empty room had nothing); none to bob
        for tab in (tab1, tab2):
            reads = of_type(await tab.settle(), "room_read")
            assert {f["roomId"]: f for f in reads} == {
                room_id: {"type": "room_read", **rooms[room_id]} for room_id in (lobby, quiet, dm)
            }
            assert len(reads) == 3
        assert not of_type(await other.settle(), "room_read")

        after = await status(mesh, alice)
        assert all((room["unread"], room["mentions"]) == (0, 0) for room in after.values())
        assert after[dm]["muted"] is True  # reading changes no mute
        assert (await status(mesh, bob))[dm]["unread"] == 1

        # again: nothing moves, nobody is told; an empty object, unknown fields
        for kwargs in ({"json": {}}, {"json": {"roomId": lobby, "everyone": True}}):
            r = await read_all(mesh, alice, **kwargs)
            assert r.status_code == 200, r.text
            assert {room["roomId"]: room for room in r.json()["rooms"]} == rooms
        assert not of_type(await tab1.settle(), "room_read")
        assert (await status(mesh, bob))[dm]["unread"] == 1  # never another's position

        # a message after: only that room moves next time
        newest = await mesh.send(bob, lobby, "four")
        r = await read_all(mesh, alice)
        assert {room["roomId"]: room["cursor"] for room in r.json()["rooms"]}[lobby] == newest[
            "cursor"
        ]
        reads = of_type(await tab1.settle(), "room_read")
        assert [(f["roomId"], f["cursor"]) for f in reads] == [(lobby, newest["cursor"])]


async def test_outsiders_guests_bad_bodies_and_dead_tokens_are_refused(
    base_url: str, mesh: Mesh, node_app: MeshApp
) -> None:
    owner = await mesh.setup(visibility="public")
    alice, bob, carol = [await mesh.register(n) for n in ("alice", "bob", "carol")]
    secret = (await mesh.create_room(owner, "secret"))["roomId"]
    lobby = (await mesh.create_room(owner, "lobby"))["roomId"]
    for user in (alice, bob):
        await mesh.join(user, secret)
    dm = await open_dm(mesh, alice, bob)
    await mesh.send(bob, secret, "classified")
    await mesh.send(bob, dm, "between us")

    # not a member; not the DM's party (as if there were no such room); no such room
    assert_error(await mute(mesh, carol, secret, True), 403, "not_member")
    assert_error(await mute(mesh, carol, dm, True), 404, "room_not_found")
    for room_id in (NO_ROOM, "nope", "..", "%00", "' OR 1=1 --"):
        assert_error(await mute(mesh, alice, room_id, True), 404)
    # a body that is not {"muted": true|false}
    url = f"/api/rooms/{secret}/mute"
    for raw, code in [
        (b"", "missing_field"),
        (b"{}", "missing_field"),
        (b'{"muted": null}', "missing_field"),
        (b'{"muted": "true"}', "invalid_field"),
        (b'{"muted": 1}', "invalid_field"),
        (b'{"muted": [true]}', "invalid_field"),
        (b"[true]", "invalid_json"),
        (b"true", "invalid_json"),
        (b'{"muted": tru', "invalid_json"),
    ]:
        r = await mesh.http.put(
            url, content=raw, headers={**alice.headers, "Content-Type": "application/json"}
        )
        assert_error(r, 400, code)
    assert_error(await read_all(mesh, alice, content=b"[1]"), 400, "invalid_json")
    # no token, or not a token: 401 before the body is looked at
    assert_error(await mesh.http.put(url, content=b"[1]"), 401)
    assert_error(await mesh.http.post("/api/read-all"), 401)
    bad = User(alice.participant_id, "alice", "not-a-token")
    assert_error(await mute(mesh, bad, secret, True), 401)
    # the target is the caller, whatever else the body names
    r = await mesh.http.put(
        url,
        json={"muted": True, "participantId": bob.participant_id, "roomId": lobby},
        headers=alice.headers,
    )
    assert r.json() == {"roomId": secret, "muted": True}
    assert (await own_rooms(mesh, bob))[secret]["muted"] is False
    assert lobby not in await own_rooms(mesh, alice)

    # carol's read-all touches only her own rooms: alice and bob keep their unread
    r = await read_all(mesh, carol)
    assert secret not in {room["roomId"] for room in r.json()["rooms"]}
    assert (await status(mesh, alice))[secret]["unread"] == 1

    # a guest mutes and reads only the rooms it is in
    guest = await mesh.guest()
    assert_error(await mute(mesh, guest, lobby, True), 403, "not_member")
    assert_error(await mute(mesh, guest, dm, True), 404, "room_not_found")
    await mesh.join(guest, lobby)
    assert (await mute(mesh, guest, lobby, True)).json() == {"roomId": lobby, "muted": True}
    r = await read_all(mesh, guest)
    assert r.status_code == 200, r.text
    assert lobby in {room["roomId"] for room in r.json()["rooms"]}
    assert not {secret, dm} & {room["roomId"] for room in r.json()["rooms"]}

    # a member a room rule keeps from reading the room neither mutes it nor
    # reads it through read-all (and learns nothing of it there)
    r = await mesh.http.post(
        f"/api/rooms/{secret}/permissions",
        json={
            "targetType": "participant",
            "target": alice.participant_id,
            "permission": "rooms.read",
            "effect": "deny",
        },
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    override = r.json()["overrideId"]
    assert_error(await mute(mesh, alice, secret, False), 403, "forbidden")
    async with browser_tab(base_url, alice) as session:
        r = await read_all(mesh, alice)
        assert r.status_code == 200, r.text
        assert {room["roomId"] for room in r.json()["rooms"]} >= {dm}
        assert secret not in {room["roomId"] for room in r.json()["rooms"]}
        reads = of_type(await session.settle(), "room_read")
        assert secret not in {f["roomId"] for f in reads}
    r = await mesh.http.request(
        "DELETE",
        f"/api/rooms/{secret}/permissions",
        json={"overrideId": override},
        headers=owner.headers,
    )
    assert r.status_code in (200, 204), r.text
    assert (await status(mesh, alice))[secret]["unread"] == 1  # not read behind the rule

    # a deleted participant's token no longer works, on either endpoint
    admin = await node_app.node.accounts.authenticate(owner.token)
    await node_app.node.accounts.delete_participant(admin, alice.participant_id)
    assert_error(await mute(mesh, alice, dm, True), 401)
    assert_error(await read_all(mesh, alice), 401)
