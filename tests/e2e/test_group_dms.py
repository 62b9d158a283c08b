"""Group DMs over a served node (issue 32, ``docs/decisions/0070-group-dms.md``):
``POST /api/dms {participantIds}`` opens (or finds) the one DM of a set of
three to nine participants, named by its members; its members, and only
they, read and write it and hear of it; each hides it for itself; 1:1 DMs
are as before beside it; read receipts name each member.

Loopback only, port 0; frames are waited for, never slept for; "nothing
else arrived" is checked with :meth:`Socket.settle`.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import Mesh, User, assert_error, connect

pytestmark = pytest.mark.e2e

#: a well-formed participant id nobody has
NOBODY = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


async def open_group(mesh: Mesh, user: User, *others: User) -> Any:
    return await mesh.http.post(
        "/api/dms",
        json={"participantIds": [o.participant_id for o in others]},
        headers=user.headers,
    )


async def dms(mesh: Mesh, user: User) -> list[dict[str, Any]]:
    r = await mesh.http.get("/api/dms", headers=user.headers)
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()
    return found


async def test_a_group_dm_for_a_set_of_people(mesh: Mesh, base_url: str) -> None:
    owner = await mesh.setup()
    alice, bob, carol, dave = [await mesh.register(n) for n in ("alice", "bob", "carol", "dave")]

    async with connect(base_url, carol) as c, connect(base_url, dave) as d:
        r = await open_group(mesh, alice, bob, carol)
        assert r.status_code == 201, r.text
        group = r.json()
        room_id = group["roomId"]
        assert group["name"] == "alice, bob, carol"
        assert [m["name"] for m in group["members"]] == ["alice", "bob", "carol"]
        assert group["participant"]["name"] == "bob"
        # each member hears of it (a join of each), an outsider nothing
        joined = [
            (await c.expect("participant_joined", roomId=room_id))["participant"]["name"]
            for _ in range(3)
        ]
        assert sorted(joined) == ["alice", "bob", "carol"]
        assert [f for f in await d.settle() if f.get("roomId") == room_id] == []

        # the same set, opened by another member in another order: the same DM
        r = await open_group(mesh, carol, bob, alice)
        assert r.status_code == 200, r.text
        assert r.json()["roomId"] == room_id
        # another set is another DM; a 1:1 DM of two of them is its own too
        r = await open_group(mesh, alice, bob, dave)
        assert r.status_code == 201, r.text
        assert r.json()["roomId"] != room_id
        r = await mesh.http.post(
            "/api/dms", json={"participantId": bob.participant_id}, headers=alice.headers
        )
        assert r.status_code == 201, r.text
        pair = r.json()
        assert pair["roomId"] != room_id
        assert pair["name"] == "dm"
        assert [m["name"] for m in pair["members"]] == ["alice", "bob"]

        # members talk; everyone of them gets it, outsiders cannot read or write
        said = await mesh.send(bob, room_id, "lunch at noon?")
        await c.expect("message", roomId=room_id, content="lunch at noon?")
        assert [m["content"] for m in await mesh.messages(carol, room_id)] == ["lunch at noon?"]
        assert [f for f in await d.settle() if f.get("roomId") == room_id] == []
        for outsider in (dave, owner):
            r = await mesh.http.get(f"/api/rooms/{room_id}/messages", headers=outsider.headers)
            assert r.status_code in (403, 404), r.text
            r = await mesh.http.post(
                f"/api/rooms/{room_id}/messages", json={"content": "hi"}, headers=outsider.headers
            )
            assert r.status_code in (403, 404), r.text
            r = await mesh.http.get(f"/api/messages/{said['messageId']}", headers=outsider.headers)
            assert r.status_code in (403, 404), r.text
            assert_error(
                await mesh.http.delete(f"/api/dms/{room_id}", headers=outsider.headers),
                404,
                "dm_not_found",
            )
        # no one joins a DM, and members leave it only by hiding it
        assert_error(
            await mesh.http.post(f"/api/rooms/{room_id}/join", headers=dave.headers),
            404,
            "room_not_found",
        )
        assert_error(
            await mesh.http.post(f"/api/rooms/{room_id}/leave", headers=bob.headers), 400, "is_dm"
        )

        # the list names it and lists its members for each member
        listed = {dm["roomId"]: dm for dm in await dms(mesh, carol)}
        assert listed[room_id]["name"] == "alice, bob, carol"
        assert [m["name"] for m in listed[room_id]["members"]] == ["carol", "alice", "bob"]
        assert listed[room_id]["lastMessageAt"] is not None
        # its snapshot entry: named by its name, no single "with"
        async with connect(base_url, carol) as again:
            entry = next(r for r in again.snapshot["rooms"] if r["roomId"] == room_id)  # type: ignore[attr-defined]
            assert entry["kind"] == "dm"
            assert entry["name"] == "alice, bob, carol"
            assert "with" not in entry
        async with connect(base_url, alice) as a:
            rooms = {r["roomId"]: r for r in a.snapshot["rooms"]}  # type: ignore[attr-defined]
            assert rooms[room_id]["name"] == "alice, bob, carol"
            assert rooms[pair["roomId"]]["with"] == bob.participant_id  # 1:1 as before

        # search names it by its name (a 1:1 DM: by the other's name)
        await mesh.send(alice, pair["roomId"], "lunch for two")
        r = await mesh.http.get("/api/search", params={"q": "lunch"}, headers=alice.headers)
        assert r.status_code == 200, r.text
        names = {hit["message"]["roomId"]: hit["roomName"] for hit in r.json()["results"]}
        assert names == {room_id: "alice, bob, carol", pair["roomId"]: "bob"}

        # read receipts name each member who read
        await mesh.messages(alice, room_id)
        await mesh.messages(carol, room_id)
        seen = {
            r["participantId"]
            for r in next(dm for dm in await dms(mesh, bob) if dm["roomId"] == room_id)["readBy"]
        }
        assert seen == {alice.participant_id, carol.participant_id}

        # carol hides it: gone from her list only, back with a new message
        assert (
            await mesh.http.delete(f"/api/dms/{room_id}", headers=carol.headers)
        ).status_code == 200
        assert room_id not in {dm["roomId"] for dm in await dms(mesh, carol)}
        assert room_id in {dm["roomId"] for dm in await dms(mesh, alice)}
        await mesh.send(alice, room_id, "still on?")
        assert room_id in {dm["roomId"] for dm in await dms(mesh, carol)}


async def test_who_may_open_a_group_dm(mesh: Mesh) -> None:
    await mesh.setup()
    alice, bob, carol = [await mesh.register(n) for n in ("alice", "bob", "carol")]
    many = [await mesh.register(f"p{i}") for i in range(8)]
    ids = [p.participant_id for p in many]
    for body, status, code in [
        ({"participantIds": [bob.participant_id]}, 400, "dm_group_size"),
        ({"participantIds": []}, 400, "dm_group_size"),
        ({"participantIds": [bob.participant_id, *ids]}, 400, "dm_group_size"),
        ({"participantIds": [bob.participant_id, bob.participant_id]}, 400, "dm_duplicate"),
        ({"participantIds": [bob.participant_id, alice.participant_id]}, 400, "dm_self"),
        ({"participantIds": [bob.participant_id, NOBODY]}, 404, "participant_not_found"),
        ({"participantIds": [bob.participant_id, "x"]}, 400, "invalid_id"),
        ({"participantIds": [bob.participant_id, 7]}, 400, None),
        ({"participantIds": "bob"}, 400, None),
        (
            {"participantId": bob.participant_id, "participantIds": [carol.participant_id]},
            400,
            "missing_field",
        ),
    ]:
        r = await mesh.http.post("/api/dms", json=body, headers=alice.headers)
        assert_error(r, status, code)
    # eight others is the most
    r = await mesh.http.post("/api/dms", json={"participantIds": ids}, headers=alice.headers)
    assert r.status_code == 201, r.text
    assert len(r.json()["members"]) == 9
    # a guest may not open DMs (no dms.create), nor may a signed-out token
    guest = await mesh.guest()
    assert_error(await open_group(mesh, guest, bob, carol), 403)
    r = await mesh.http.post("/api/auth/logout", headers=bob.headers)
    assert r.status_code == 200, r.text
    assert_error(await open_group(mesh, bob, alice, carol), 401)
    assert_error(await mesh.http.post("/api/dms", json={"participantIds": [ids[0], ids[1]]}), 401)
