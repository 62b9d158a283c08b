"""The snapshot's mesh-wide parts are kept rendered between sessions
(``services/world.py``, decision 0039): every change to a participant, a
room, a member count, a position or who is online shows in the next
snapshot, which stays equal to ``GET /api/state`` read at the same time.

Rules: loopback only, port 0, every wait bounded, no sleeps to wait for state.
"""

from __future__ import annotations

from typing import Any

from tests.helpers import Mesh, User, connect


async def _snapshot(base_url: str, user: User) -> dict[str, Any]:
    async with connect(base_url, user) as ws:
        snapshot: dict[str, Any] = ws.snapshot  # type: ignore[attr-defined]
        return snapshot


def _people(snapshot: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in snapshot["participants"]}


async def _state(mesh: Mesh, user: User) -> dict[str, Any]:
    r = await mesh.http.get("/api/state", headers=user.headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_new_participants_and_rooms_show(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    first = await _snapshot(base_url, owner)  # renders and keeps the parts
    assert set(_people(first)) == {"owner"}
    bob = await mesh.register("bob")
    guest = await mesh.guest()
    room = await mesh.create_room(bob, "lobby")
    second = await _snapshot(base_url, owner)
    assert set(_people(second)) == {"owner", "bob", guest.name}
    # the rooms one is in (and the default room): not bob's lobby
    assert [(r["name"], r["memberCount"], r["joined"]) for r in second["rooms"]] == [
        ("Town Square", 1, True),
    ]
    # the same parts, another actor's flags
    mine = await _snapshot(base_url, bob)
    assert (mine["rooms"][0]["roomId"], mine["rooms"][0]["joined"]) == (room["roomId"], True)
    assert _people(mine)["bob"]["online"] is True  # yourself, online


async def test_roles_deletions_and_member_counts_show(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    carol = await mesh.register("carol")
    room = await mesh.create_room(owner, "work")
    before = await _snapshot(base_url, owner)
    assert _people(before)["bob"]["role"] == "member"
    r = await mesh.http.put(
        f"/api/participants/{bob.participant_id}/role",
        json={"role": "admin"},
        headers=owner.headers,
    )
    assert r.status_code == 200, r.text
    await mesh.join(carol, room["roomId"])
    after = await _snapshot(base_url, owner)
    assert _people(after)["bob"]["role"] == "admin"
    counts = {r["name"]: r["memberCount"] for r in after["rooms"]}
    assert counts["work"] == 2
    # a bot, then deleted: gone from the next snapshot
    r = await mesh.http.post(
        "/api/agents/bootstrap", json={"name": "helper", "type": "nanoclaw"}, headers=owner.headers
    )
    assert r.status_code == 201, r.text
    agent_id = r.json()["agentId"]
    assert "helper" in _people(await _snapshot(base_url, owner))
    r = await mesh.http.delete(f"/api/agents/{agent_id}", headers=owner.headers)
    assert r.status_code in (200, 204), r.text
    assert "helper" not in _people(await _snapshot(base_url, owner))
    # and a room deleted
    r = await mesh.http.delete(f"/api/rooms/{room['roomId']}", headers=owner.headers)
    assert r.status_code in (200, 204), r.text
    assert "work" not in {r["name"] for r in (await _snapshot(base_url, owner))["rooms"]}


async def test_positions_presence_and_last_seen_show(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    room = await mesh.create_room(owner, "plaza")
    await mesh.join(bob, room["roomId"])
    await _snapshot(base_url, owner)
    async with connect(base_url, owner) as watcher:
        async with connect(base_url, bob) as b:
            await watcher.expect("presence", participantId=bob.participant_id, online=True)
            seen = _people(await _snapshot(base_url, owner))["bob"]
            assert seen["online"] is True
            assert seen["position"] is None
            await b.send(type="move", roomId=room["roomId"], x=1.5, y=0, z=-2)
            await watcher.expect("participant_moved", participantId=bob.participant_id)
            moved = _people(await _snapshot(base_url, owner))["bob"]
            assert moved["position"] == {"roomId": room["roomId"], "x": 1.5, "y": 0.0, "z": -2.0}
        offline = await watcher.expect(
            "presence", participantId=bob.participant_id, online=False, timeout=10
        )
        gone = _people(await _snapshot(base_url, owner))["bob"]
        assert gone["online"] is False
        assert gone["lastSeen"] == offline["lastSeen"]
        state = await _state(mesh, owner)
        # the WebSocket and REST views are one rendering
        snapshot = await _snapshot(base_url, owner)
        assert snapshot["participants"] == state["participants"]
        assert snapshot["rooms"] == state["rooms"]


async def test_dms_stay_per_actor(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    carol = await mesh.register("carol")
    r = await mesh.http.post(
        "/api/dms", json={"participantId": carol.participant_id}, headers=bob.headers
    )
    assert r.status_code in (200, 201), r.text
    dm_id = r.json()["roomId"]
    for user, sees in ((bob, True), (carol, True), (owner, False)):
        rooms = {r["roomId"]: r for r in (await _snapshot(base_url, user))["rooms"]}
        assert (dm_id in rooms) is sees
        if sees:
            other = carol if user is bob else bob
            assert rooms[dm_id]["with"] == other.participant_id
            assert rooms[dm_id]["joined"] is True
