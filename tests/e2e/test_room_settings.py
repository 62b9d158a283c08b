"""Editing a room's description (issue 32, decision 0069): its creator or
``rooms.permissions``; members see ``room_updated``."""

from __future__ import annotations

import pytest

from tests.helpers import Mesh, assert_error, connect

pytestmark = pytest.mark.e2e


async def test_the_creator_edits_the_description_and_members_see_it(
    mesh: Mesh, base_url: str
) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    alice = await mesh.register("alice")
    carol = await mesh.register("carol")  # not a member
    room = await mesh.create_room(bob, "plans", description="old")
    room_id = room["roomId"]
    await mesh.join(alice, room_id)

    async with connect(base_url, alice) as ws, connect(base_url, carol) as other:
        r = await mesh.http.patch(
            f"/api/rooms/{room_id}", json={"description": "what we do next"}, headers=bob.headers
        )
        assert r.status_code == 200, r.text
        assert (r.json()["description"], r.json()["joined"]) == ("what we do next", True)
        event = await ws.expect("room_updated")
        assert event == {
            "type": "room_updated",
            "roomId": room_id,
            "name": "plans",
            "description": "what we do next",
            "updatedBy": bob.participant_id,
        }
        assert not [f for f in await other.quiet() if f["type"] == "room_updated"]
    got = (await mesh.http.get(f"/api/rooms/{room_id}", headers=carol.headers)).json()
    assert got["description"] == "what we do next"
    # a snapshot made after the change shows it (the one cached before is stale)
    async with connect(base_url, alice) as ws:
        rooms = {r["roomId"]: r for r in ws.snapshot["rooms"]}  # type: ignore[attr-defined]
        assert rooms[room_id]["description"] == "what we do next"

    # an admin (the owner) may; a member who did not create it may not
    r = await mesh.http.patch(
        f"/api/rooms/{room_id}", json={"description": ""}, headers=owner.headers
    )
    assert (r.status_code, r.json()["description"], r.json()["joined"]) == (200, "", False)
    r = await mesh.http.patch(
        f"/api/rooms/{room_id}", json={"description": "mine now"}, headers=alice.headers
    )
    assert_error(r, 403, "forbidden")
    # nothing to change: the room as it is
    r = await mesh.http.patch(f"/api/rooms/{room_id}", json={}, headers=bob.headers)
    assert (r.status_code, r.json()["description"]) == (200, "")


async def test_bad_changes_are_refused(mesh: Mesh) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    carol = await mesh.register("carol")
    room_id = (await mesh.create_room(bob, "plans"))["roomId"]
    for body, status, code in [
        ({"description": "x" * 2001}, 400, "invalid_description"),
        ({"description": "nul\x00"}, 400, "invalid_description"),
        ({"description": 5}, 400, "invalid_field"),
    ]:
        r = await mesh.http.patch(f"/api/rooms/{room_id}", json=body, headers=bob.headers)
        assert_error(r, status, code)
    r = await mesh.http.patch(
        "/api/rooms/01AAAAAAAAAAAAAAAAAAAAAAAA", json={"description": "x"}, headers=bob.headers
    )
    assert_error(r, 404, "room_not_found")
    dm = await mesh.http.post(
        "/api/dms", json={"participantId": carol.participant_id}, headers=bob.headers
    )
    dm_id = dm.json()["roomId"]
    r = await mesh.http.patch(f"/api/rooms/{dm_id}", json={"description": "x"}, headers=bob.headers)
    assert_error(r, 400, "is_dm")
    assert_error(await mesh.http.patch(f"/api/rooms/{room_id}", json={"description": "x"}), 401)


async def test_description_changes_are_rate_limited(mesh: Mesh) -> None:
    """Each change is an event to every member: the ``profile`` rule (10 a
    minute) bounds them, counted per participant."""
    await mesh.setup()
    bob = await mesh.register("bob")
    carol = await mesh.register("carol")
    room_id = (await mesh.create_room(bob, "plans"))["roomId"]
    for i in range(10):
        r = await mesh.http.patch(
            f"/api/rooms/{room_id}", json={"description": f"take {i}"}, headers=bob.headers
        )
        assert r.status_code == 200, r.text
    r = await mesh.http.patch(
        f"/api/rooms/{room_id}", json={"description": "one too many"}, headers=bob.headers
    )
    assert_error(r, 429, "rate_limited")
    room = (await mesh.http.get(f"/api/rooms/{room_id}", headers=bob.headers)).json()
    assert room["description"] == "take 9"
    # another participant's budget is its own
    other = (await mesh.create_room(carol, "notes"))["roomId"]
    r = await mesh.http.patch(
        f"/api/rooms/{other}", json={"description": "fine"}, headers=carol.headers
    )
    assert r.status_code == 200, r.text
