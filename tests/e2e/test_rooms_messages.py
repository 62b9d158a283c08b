"""Rooms, messages, pagination, edits, deletes and reactions over a real socket."""

from __future__ import annotations

import httpx
import pytest

from tests.helpers import Mesh, User, assert_error


@pytest.fixture
async def people(mesh: Mesh) -> tuple[User, User, User]:
    owner = await mesh.setup()
    return owner, await mesh.register("bob"), await mesh.register("carol")


async def test_room_lifecycle(
    http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    owner, bob, carol = people
    room = await mesh.create_room(bob, "general", description="talk here")
    assert room["name"] == "general"
    assert room["description"] == "talk here"
    assert room["memberCount"] == 1
    assert room["createdAt"].endswith("Z")
    room_id = room["roomId"]

    listed = (await http.get("/api/rooms", headers=carol.headers)).json()
    default_room = (await http.get("/api/setup/status")).json()["defaultRoomId"]
    assert [(r["roomId"], r["joined"]) for r in listed] == [
        (room_id, False),
        (default_room, False),  # "Town Square", made by setup
    ]

    await mesh.join(carol, room_id)
    await mesh.join(carol, room_id)  # idempotent
    details = (await http.get(f"/api/rooms/{room_id}", headers=carol.headers)).json()
    assert details["memberCount"] == 2
    assert {m["name"] for m in details["members"]} == {"bob", "carol"}

    r = await http.post(f"/api/rooms/{room_id}/leave", headers=carol.headers)
    assert r.status_code == 200
    assert r.json()["memberCount"] == 1

    # only the creator or an admin deletes
    assert_error(await http.delete(f"/api/rooms/{room_id}", headers=carol.headers), 403)
    assert (await http.delete(f"/api/rooms/{room_id}", headers=bob.headers)).status_code == 200
    assert_error(await http.get(f"/api/rooms/{room_id}", headers=bob.headers), 404)

    other = await mesh.create_room(bob, "second")
    r = await http.delete(f"/api/rooms/{other['roomId']}", headers=owner.headers)
    assert r.status_code == 200


async def test_room_names_are_unique_and_validated(
    http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    _, bob, _ = people
    await mesh.create_room(bob, "General")
    for body, status, code in [
        ({"name": "general"}, 409, "room_name_taken"),
        ({"name": ""}, 400, "invalid_name"),
        ({"name": "x" * 101}, 400, "invalid_name"),
        ({"name": "a\nb"}, 400, "invalid_name"),
        ({}, 400, "missing_field"),
        ({"name": "ok", "description": 5}, 400, "invalid_field"),
        ({"name": "ok", "description": "d" * 2001}, 400, "invalid_description"),
    ]:
        assert_error(await http.post("/api/rooms", json=body, headers=bob.headers), status, code)


async def test_only_members_read_and_post(
    http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    _, bob, carol = people
    room_id = (await mesh.create_room(bob, "private-ish"))["roomId"]
    await mesh.send(bob, room_id, "secret")
    r = await http.get(f"/api/rooms/{room_id}/messages", headers=carol.headers)
    assert_error(r, 403, "not_member")
    r = await http.post(
        f"/api/rooms/{room_id}/messages", json={"content": "x"}, headers=carol.headers
    )
    assert_error(r, 403, "not_member")
    unknown = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
    assert_error(
        await http.get(f"/api/rooms/{unknown}/messages", headers=bob.headers), 404, "room_not_found"
    )
    assert_error(await http.get("/api/rooms/not-an-id", headers=bob.headers), 404)


async def test_message_fields_and_pagination(
    http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    _, bob, carol = people
    room_id = (await mesh.create_room(bob, "busy"))["roomId"]
    await mesh.join(carol, room_id)
    sent = [await mesh.send(bob, room_id, f"m{i}") for i in range(120)]
    first = sent[0]
    assert set(first) >= {
        "roomId",
        "messageId",
        "senderId",
        "senderName",
        "content",
        "timestamp",
        "to",
        "threadId",
        "editedAt",
        "reactions",
        "cursor",
    }
    assert first["senderId"] == bob.participant_id
    assert first["senderName"] == "bob"
    assert first["timestamp"].endswith("Z")
    assert "T" in first["timestamp"]

    latest = await mesh.messages(carol, room_id)
    assert [m["content"] for m in latest] == [f"m{i}" for i in range(70, 120)]  # default 50

    page = await mesh.messages(carol, room_id, limit=10, before=latest[0]["messageId"])
    assert [m["content"] for m in page] == [f"m{i}" for i in range(60, 70)]
    page = await mesh.messages(carol, room_id, limit=10, before=latest[0]["cursor"])
    assert [m["content"] for m in page] == [f"m{i}" for i in range(60, 70)]

    after = await mesh.messages(carol, room_id, since=sent[4]["messageId"], limit=3)
    assert [m["content"] for m in after] == ["m5", "m6", "m7"]
    after = await mesh.messages(carol, room_id, since=sent[4]["cursor"], limit=200)
    assert len(after) == 115

    # walking backwards page by page sees every message exactly once
    seen: list[str] = []
    before = None
    while True:
        params = {"limit": 25} | ({"before": before} if before else {})
        page = await mesh.messages(carol, room_id, **params)
        if not page:
            break
        seen = [m["content"] for m in page] + seen
        before = page[0]["cursor"]
    assert seen == [f"m{i}" for i in range(120)]

    for params, code in [
        ({"limit": 0}, "invalid_limit"),
        ({"limit": 201}, "invalid_limit"),
        ({"limit": "ten"}, "invalid_query"),
        ({"since": "nope"}, "invalid_cursor"),
        ({"before": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, "invalid_cursor"),
        ({"since": "9" * 40}, "invalid_cursor"),
    ]:
        r = await http.get(f"/api/rooms/{room_id}/messages", params=params, headers=carol.headers)
        assert_error(r, 400, code)


async def test_send_validation(
    http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    _, bob, carol = people
    room_id = (await mesh.create_room(bob, "checks"))["roomId"]
    url = f"/api/rooms/{room_id}/messages"
    parent = await mesh.send(bob, room_id, "parent")
    reply = await mesh.send(
        bob, room_id, "child", to=carol.participant_id, threadId=parent["messageId"]
    )
    assert reply["to"] == carol.participant_id
    assert reply["threadId"] == parent["messageId"]
    assert (await mesh.send(bob, room_id, "é" * 8192))["content"] == "é" * 8192  # 16 KiB exactly

    for body, status, code in [
        ({}, 400, "missing_field"),
        ({"content": ""}, 400, "empty_content"),
        ({"content": "  \n "}, 400, "empty_content"),
        ({"content": 42}, 400, "invalid_field"),
        ({"content": None}, 400, "missing_field"),
        ({"content": "a\u0000b"}, 400, "invalid_content"),
        ({"content": "x" * (16 * 1024 + 1)}, 413, "content_too_large"),
        ({"content": "hi", "to": "bogus"}, 400, "invalid_id"),
        ({"content": "hi", "to": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, 400, "unknown_participant"),
        ({"content": "hi", "threadId": "01ARZ3NDEKTSV4RRFFQ69G5FAV"}, 400, "unknown_thread"),
        ({"content": "hi", "threadId": 7}, 400, "invalid_field"),
    ]:
        assert_error(await http.post(url, json=body, headers=bob.headers), status, code)


async def test_edit_delete_react(
    http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User, User]
) -> None:
    owner, bob, carol = people
    room_id = (await mesh.create_room(bob, "edits"))["roomId"]
    await mesh.join(carol, room_id)
    msg = await mesh.send(bob, room_id, "frist")
    url = f"/api/rooms/{room_id}/messages/{msg['messageId']}"

    assert_error(await http.patch(url, json={"content": "hack"}, headers=carol.headers), 403)
    r = await http.patch(url, json={"content": "first"}, headers=bob.headers)
    assert r.status_code == 200
    assert r.json()["content"] == "first"
    assert r.json()["editedAt"] is not None

    for user in (bob, carol, carol):  # adding twice is idempotent
        r = await http.post(f"{url}/reactions", json={"emoji": "thumbsup"}, headers=user.headers)
        assert r.status_code == 200
    reactions = r.json()["reactions"]
    assert reactions == [
        {
            "emoji": "thumbsup",
            "count": 2,
            "participantIds": [bob.participant_id, carol.participant_id],
        }
    ]
    r = await http.delete(f"{url}/reactions/thumbsup", headers=carol.headers)
    assert r.json()["reactions"][0]["participantIds"] == [bob.participant_id]
    r = await http.delete(f"{url}/reactions/thumbsup", headers=carol.headers)
    assert r.status_code == 200  # removing twice is idempotent
    assert_error(
        await http.post(f"{url}/reactions", json={"emoji": "a b"}, headers=bob.headers),
        400,
        "invalid_emoji",
    )

    # a message in another room is not reachable through this room's URL
    other_room = (await mesh.create_room(bob, "other"))["roomId"]
    assert_error(
        await http.get(f"/api/rooms/{other_room}/messages/{msg['messageId']}", headers=bob.headers),
        404,
        "message_not_found",
    )

    assert_error(await http.delete(url, headers=carol.headers), 403)
    # the owner (priority 999 >= moderator) may delete others' messages once a member
    await mesh.join(owner, room_id)
    assert (await http.delete(url, headers=owner.headers)).status_code == 200
    assert_error(await http.get(url, headers=bob.headers), 404, "message_not_found")
    assert await mesh.messages(bob, room_id) == []
