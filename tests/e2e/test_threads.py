"""Threads at a glance (issue 32): a root message carries its reply count and
the time of its newest reply (``threadReplies``, ``lastReplyAt``), counted from
the replies when read; ``GET /api/rooms/:roomId/threads`` lists a room's
threads, the most recently replied to first, to those who may read it."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import Mesh, assert_error

pytestmark = pytest.mark.e2e


async def _threads(mesh: Mesh, user: Any, room_id: str, **params: Any) -> dict[str, Any]:
    r = await mesh.http.get(f"/api/rooms/{room_id}/threads", params=params, headers=user.headers)
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_roots_count_their_replies_and_the_room_lists_its_threads(mesh: Mesh) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    alice = await mesh.register("alice")
    room_id = (await mesh.create_room(bob, "plans"))["roomId"]
    await mesh.join(alice, room_id)
    first = await mesh.send(bob, room_id, "first plan")
    second = await mesh.send(bob, room_id, "second plan")
    plain = await mesh.send(bob, room_id, "no replies")
    assert "threadReplies" not in first  # (a new message has none)
    replies = [
        await mesh.send(alice, room_id, f"re first {i}", threadId=first["messageId"])
        for i in range(3)
    ]
    reply_second = await mesh.send(alice, room_id, "re second", threadId=second["messageId"])
    newest_first = await mesh.send(bob, room_id, "re first again", threadId=first["messageId"])

    page = {m["messageId"]: m for m in await mesh.messages(alice, room_id)}
    assert page[first["messageId"]]["threadReplies"] == 4
    assert page[first["messageId"]]["lastReplyAt"] == newest_first["timestamp"]
    assert page[second["messageId"]]["threadReplies"] == 1
    assert page[second["messageId"]]["lastReplyAt"] == reply_second["timestamp"]
    # neither a message without replies nor a reply carries the fields
    for message_id in (plain["messageId"], replies[0]["messageId"]):
        assert "threadReplies" not in page[message_id]
        assert "lastReplyAt" not in page[message_id]
    # a message read by id too
    r = await mesh.http.get(
        f"/api/rooms/{room_id}/messages/{first['messageId']}", headers=alice.headers
    )
    assert r.json()["threadReplies"] == 4

    listed = await _threads(mesh, alice, room_id)
    assert [(m["content"], m["threadReplies"]) for m in listed["threads"]] == [
        ("first plan", 4),
        ("second plan", 1),
    ]
    assert listed["nextBefore"] is None

    # paged: the most recently replied to first, then the next page
    one = await _threads(mesh, alice, room_id, limit=1)
    assert [m["messageId"] for m in one["threads"]] == [first["messageId"]]
    assert one["nextBefore"] == newest_first["cursor"]
    two = await _threads(mesh, alice, room_id, limit=1, before=one["nextBefore"])
    assert [m["messageId"] for m in two["threads"]] == [second["messageId"]]
    three = await _threads(mesh, alice, room_id, limit=1, before=two["nextBefore"])
    assert three == {"threads": [], "nextBefore": None}

    # a reply to the second thread moves it to the top
    await mesh.send(bob, room_id, "re second again", threadId=second["messageId"])
    listed = await _threads(mesh, alice, room_id)
    assert [m["messageId"] for m in listed["threads"]] == [
        second["messageId"],
        first["messageId"],
    ]

    # a reply deleted: counted no more (in the same write as the delete)
    r = await mesh.http.delete(
        f"/api/rooms/{room_id}/messages/{newest_first['messageId']}", headers=bob.headers
    )
    assert r.status_code == 200, r.text
    page = {m["messageId"]: m for m in await mesh.messages(alice, room_id)}
    assert page[first["messageId"]]["threadReplies"] == 3
    assert page[first["messageId"]]["lastReplyAt"] == replies[2]["timestamp"]
    # the root deleted: its thread leaves the list (its replies stay)
    r = await mesh.http.delete(
        f"/api/rooms/{room_id}/messages/{second['messageId']}", headers=bob.headers
    )
    assert r.status_code == 200, r.text
    listed = await _threads(mesh, alice, room_id)
    assert [m["messageId"] for m in listed["threads"]] == [first["messageId"]]


async def test_the_threads_list_is_refused_to_those_who_may_not_read(mesh: Mesh) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    carol = await mesh.register("carol")  # not a member
    guest = await mesh.guest()
    room_id = (await mesh.create_room(bob, "plans"))["roomId"]
    root = await mesh.send(bob, room_id, "secret plan")
    await mesh.send(bob, room_id, "secret detail", threadId=root["messageId"])

    r = await mesh.http.get(f"/api/rooms/{room_id}/threads", headers=carol.headers)
    assert_error(r, 403, "not_member")
    r = await mesh.http.get(f"/api/rooms/{room_id}/threads", headers=guest.headers)
    assert r.status_code == 403, r.text
    r = await mesh.http.get(f"/api/rooms/{room_id}/threads")
    assert r.status_code == 401, r.text
    for bad in ("nope", "01AAAAAAAAAAAAAAAAAAAAAAAA"):
        r = await mesh.http.get(f"/api/rooms/{bad}/threads", headers=bob.headers)
        assert_error(r, 404, "room_not_found")

    # a DM: its outsiders are told it does not exist
    r = await mesh.http.post(
        "/api/dms", json={"participantId": carol.participant_id}, headers=bob.headers
    )
    assert r.status_code in (200, 201), r.text
    dm_id = r.json()["roomId"]
    dm_root = await mesh.send(bob, dm_id, "between us")
    await mesh.send(carol, dm_id, "indeed", threadId=dm_root["messageId"])
    listed = await _threads(mesh, carol, dm_id)
    assert [m["content"] for m in listed["threads"]] == ["between us"]
    alice = await mesh.register("alice")
    r = await mesh.http.get(f"/api/rooms/{dm_id}/threads", headers=alice.headers)
    assert_error(r, 404, "room_not_found")

    # a token signed out: refused
    r = await mesh.http.post("/api/auth/logout", json={}, headers=carol.headers)
    assert r.status_code == 200, r.text
    r = await mesh.http.get(f"/api/rooms/{dm_id}/threads", headers=carol.headers)
    assert_error(r, 401, "token_revoked")


async def test_the_threads_query_is_validated(mesh: Mesh) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    room_id = (await mesh.create_room(bob, "plans"))["roomId"]
    for params, code in (
        ({"limit": "x"}, "invalid_query"),
        ({"limit": "0"}, "invalid_limit"),
        ({"limit": "100000"}, "invalid_limit"),
        ({"before": "not a cursor"}, "invalid_cursor"),
    ):
        r = await mesh.http.get(f"/api/rooms/{room_id}/threads", params=params, headers=bob.headers)
        assert_error(r, 400, code)
    assert await _threads(mesh, bob, room_id) == {"threads": [], "nextBefore": None}
