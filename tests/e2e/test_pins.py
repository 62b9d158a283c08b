"""Pinned messages (issue 32, decision 0069): whoever may post in a room pins
and unpins, at most MAX_PINS a room; members see message_pinned and
message_unpinned; a deleted message is unpinned."""

from __future__ import annotations

import pytest

from quart_mesh.services.messages import MAX_PINS
from tests.helpers import Mesh, assert_error, connect

pytestmark = pytest.mark.e2e


async def test_members_pin_and_unpin_and_see_it(mesh: Mesh, base_url: str) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    alice = await mesh.register("alice")
    carol = await mesh.register("carol")  # not a member
    room_id = (await mesh.create_room(bob, "plans"))["roomId"]
    await mesh.join(alice, room_id)
    first = await mesh.send(bob, room_id, "the plan")
    second = await mesh.send(alice, room_id, "the other plan")

    async with connect(base_url, bob) as ws:
        r = await mesh.http.put(
            f"/api/rooms/{room_id}/pins/{first['messageId']}", headers=alice.headers
        )
        assert r.json() == {"roomId": room_id, "messageId": first["messageId"], "pinned": True}
        event = await ws.expect("message_pinned")
        assert (event["roomId"], event["messageId"], event["pinnedBy"]) == (
            room_id,
            first["messageId"],
            alice.participant_id,
        )
        # idempotent: no second event
        r = await mesh.http.put(
            f"/api/rooms/{room_id}/pins/{first['messageId']}", headers=bob.headers
        )
        assert r.status_code == 200, r.text
        r = await mesh.http.put(
            f"/api/rooms/{room_id}/pins/{second['messageId']}", headers=bob.headers
        )
        assert (await ws.expect("message_pinned"))["messageId"] == second["messageId"]

        listed = (await mesh.http.get(f"/api/rooms/{room_id}/pins", headers=alice.headers)).json()
        assert [p["message"]["content"] for p in listed] == ["the other plan", "the plan"]
        assert [p["pinnedBy"] for p in listed] == [bob.participant_id, alice.participant_id]

        r = await mesh.http.delete(
            f"/api/rooms/{room_id}/pins/{first['messageId']}", headers=bob.headers
        )
        assert r.json()["pinned"] is False
        event = await ws.expect("message_unpinned")
        assert (event["messageId"], event["unpinnedBy"]) == (first["messageId"], bob.participant_id)

        # a deleted message is unpinned (and its members told)
        r = await mesh.http.delete(
            f"/api/rooms/{room_id}/messages/{second['messageId']}", headers=alice.headers
        )
        assert r.status_code == 200, r.text
        event = await ws.expect("message_unpinned")
        assert event["messageId"] == second["messageId"]
    assert (await mesh.http.get(f"/api/rooms/{room_id}/pins", headers=bob.headers)).json() == []

    # not a member: nothing
    r = await mesh.http.get(f"/api/rooms/{room_id}/pins", headers=carol.headers)
    assert_error(r, 403, "not_member")
    r = await mesh.http.put(
        f"/api/rooms/{room_id}/pins/{first['messageId']}", headers=carol.headers
    )
    assert_error(r, 403, "not_member")
    # no such message (or one of another room)
    other = (await mesh.create_room(bob, "elsewhere"))["roomId"]
    elsewhere = await mesh.send(bob, other, "elsewhere")
    for message_id in ("nope", "01AAAAAAAAAAAAAAAAAAAAAAAA", elsewhere["messageId"]):
        r = await mesh.http.put(f"/api/rooms/{room_id}/pins/{message_id}", headers=bob.headers)
        assert_error(r, 404, "message_not_found")


async def test_a_guest_may_not_pin_and_a_room_has_a_cap(mesh: Mesh) -> None:
    owner = await mesh.setup()
    guest = await mesh.guest()
    room_id = (await mesh.http.get("/api/setup/status")).json()["defaultRoomId"]
    await mesh.join(guest, room_id)
    sent = [await mesh.send(owner, room_id, f"m{i}") for i in range(MAX_PINS + 1)]
    r = await mesh.http.put(
        f"/api/rooms/{room_id}/pins/{sent[0]['messageId']}", headers=guest.headers
    )
    assert_error(r, 403, "forbidden")
    for message in sent[:MAX_PINS]:
        r = await mesh.http.put(
            f"/api/rooms/{room_id}/pins/{message['messageId']}", headers=owner.headers
        )
        assert r.status_code == 200, r.text
    r = await mesh.http.put(
        f"/api/rooms/{room_id}/pins/{sent[-1]['messageId']}", headers=owner.headers
    )
    assert_error(r, 409, "too_many_pins")
    listed = (await mesh.http.get(f"/api/rooms/{room_id}/pins", headers=guest.headers)).json()
    assert len(listed) == MAX_PINS
