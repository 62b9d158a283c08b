"""Jumping to the first unread message (issue 32): the read position
(``lastReadCursor`` of ``GET /api/status``) and a page ``around`` it, which
moves no read position, are all a client needs; ``rest.md`` says how."""

from __future__ import annotations

import pytest

from tests.helpers import Mesh

pytestmark = pytest.mark.e2e


async def test_a_page_around_the_read_position_shows_the_first_unread(mesh: Mesh) -> None:
    await mesh.setup()
    bob = await mesh.register("bob")
    alice = await mesh.register("alice")
    room_id = (await mesh.create_room(bob, "plans"))["roomId"]
    await mesh.join(alice, room_id)
    sent = [await mesh.send(bob, room_id, f"m{i}") for i in range(12)]
    r = await mesh.http.post(
        f"/api/rooms/{room_id}/read", json={"cursor": sent[3]["cursor"]}, headers=alice.headers
    )
    assert r.status_code == 200, r.text

    def position(status: dict[str, object]) -> dict[str, object]:
        rooms = status["rooms"]
        assert isinstance(rooms, list)
        return next(r for r in rooms if r["roomId"] == room_id)

    mine = position((await mesh.http.get("/api/status", headers=alice.headers)).json())
    assert (mine["lastReadCursor"], mine["unread"]) == (sent[3]["cursor"], 8)

    r = await mesh.http.get(
        f"/api/rooms/{room_id}/messages",
        params={"around": mine["lastReadCursor"], "limit": 6},
        headers=alice.headers,
    )
    page = [m["content"] for m in r.json()]
    # the last read message with some before and after it: the first unread
    # is the one after the read position
    assert "m3" in page
    assert page[page.index("m3") + 1] == "m4"
    # the page moved no read position: a client marks read as the person reads
    again = position((await mesh.http.get("/api/status", headers=alice.headers)).json())
    assert (again["lastReadCursor"], again["unread"]) == (sent[3]["cursor"], 8)

    # nothing read yet: the first unread is the room's first message
    carol = await mesh.register("carol")
    await mesh.join(carol, room_id)
    theirs = position((await mesh.http.get("/api/status", headers=carol.headers)).json())
    assert theirs["lastReadCursor"] is None
    r = await mesh.http.get(
        f"/api/rooms/{room_id}/messages", params={"since": "0", "limit": 1}, headers=carol.headers
    )
    assert [m["content"] for m in r.json()] == ["m0"]
