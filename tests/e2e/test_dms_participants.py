"""DMs, participants and health over a real socket."""

from __future__ import annotations

import httpx

import quart_mesh
from tests import stores
from tests.helpers import Mesh, assert_error


async def test_dm_rooms(http: httpx.AsyncClient, mesh: Mesh) -> None:
    await mesh.setup()
    bob, carol, dave = [await mesh.register(n) for n in ("bob", "carol", "dave")]

    r = await http.post(
        "/api/dms", json={"participantId": carol.participant_id}, headers=bob.headers
    )
    assert r.status_code == 201
    dm = r.json()
    assert dm["participant"]["participantId"] == carol.participant_id
    room_id = dm["roomId"]
    # idempotent, from either side
    r = await http.post(
        "/api/dms", json={"participantId": bob.participant_id}, headers=carol.headers
    )
    assert r.status_code == 200
    assert r.json()["roomId"] == room_id
    assert r.json()["participant"]["name"] == "bob"

    await mesh.send(bob, room_id, "psst")
    assert [m["content"] for m in await mesh.messages(carol, room_id)] == ["psst"]

    # DMs never appear in the room list; only the two can see them
    listed = (await http.get("/api/rooms", headers=bob.headers)).json()
    assert [(r["name"], r["kind"]) for r in listed] == [("Town Square", "room")]
    assert_error(await http.get(f"/api/rooms/{room_id}/messages", headers=dave.headers), 404)
    assert_error(await http.get(f"/api/rooms/{room_id}", headers=dave.headers), 404)
    assert_error(await http.post(f"/api/rooms/{room_id}/join", headers=dave.headers), 404)
    assert_error(await http.post(f"/api/rooms/{room_id}/join", headers=bob.headers), 400, "is_dm")

    listed = (await http.get("/api/dms", headers=carol.headers)).json()
    assert [(d["roomId"], d["participant"]["name"]) for d in listed] == [(room_id, "bob")]
    assert listed[0]["lastMessageAt"] is not None

    # hiding removes it from the caller's list until a new message arrives
    assert (await http.delete(f"/api/dms/{room_id}", headers=carol.headers)).status_code == 200
    assert (await http.get("/api/dms", headers=carol.headers)).json() == []
    assert len((await http.get("/api/dms", headers=bob.headers)).json()) == 1
    await mesh.send(bob, room_id, "still there?")
    assert len((await http.get("/api/dms", headers=carol.headers)).json()) == 1

    assert_error(
        await http.delete(f"/api/dms/{room_id}", headers=dave.headers), 404, "dm_not_found"
    )
    ordinary = await mesh.create_room(bob, "ordinary")
    assert ordinary["kind"] == "room"
    r = await http.delete(f"/api/dms/{ordinary['roomId']}", headers=bob.headers)
    assert_error(r, 404, "dm_not_found")
    r = await http.get(f"/api/rooms/{room_id}", headers=bob.headers)
    assert r.json()["kind"] == "dm"
    for body, status, code in [
        ({"participantId": bob.participant_id}, 400, "dm_self"),
        ({"participantId": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, 404, "participant_not_found"),
        ({"participantId": "x"}, 400, "invalid_id"),
        ({}, 400, "missing_field"),
    ]:
        assert_error(await http.post("/api/dms", json=body, headers=bob.headers), status, code)


async def test_participants_list(http: httpx.AsyncClient, mesh: Mesh) -> None:
    owner = await mesh.setup()
    await mesh.register("bob")
    assert_error(await http.get("/api/participants"), 401)
    people = (await http.get("/api/participants", headers=owner.headers)).json()
    assert [p["name"] for p in people] == ["bob", "owner"]
    for p in people:
        assert set(p) >= {"participantId", "name", "type", "role", "online", "lastSeen"}
        assert p["online"] is False  # no realtime session is open
    by_name = {p["name"]: p for p in people}
    assert by_name["owner"]["role"] == "owner"
    assert by_name["bob"]["role"] == "member"
    # the owner made requests, so lastSeen is set
    assert by_name["owner"]["lastSeen"].endswith("Z")


async def test_health(http: httpx.AsyncClient) -> None:
    r = await http.get("/api/health")
    assert r.status_code == 200
    body = r.json()
    assert body["ok"] is True
    assert body["version"] == quart_mesh.__version__
    assert isinstance(body["uptime"], float | int)
    assert body["uptime"] >= 0
    assert body["storage"] == {"ok": True, "writable": True, "backend": stores.backend()}
    assert body["reasons"] == []
