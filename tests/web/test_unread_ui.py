"""Unread messages and where one was (issue 32, helper U): a room opened
with unread messages shows a "New messages" divider above the first one and
starts there (the page around the read position: docs/rest.md's recipe),
"Jump to first unread" while it is above the fold, the read position moving
as one scrolls; switching rooms and back keeps one's place."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser import call, chromium, in_browser, shot, until
from tests.web.conftest import Served
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


async def test_a_room_opens_at_its_first_unread_message(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    read = [await node.mesh.send(bob_user, room_id, f"read {i}") for i in range(30)]
    r = await node.mesh.http.post(
        f"/api/rooms/{room_id}/read",
        json={"cursor": read[-1]["cursor"]},
        headers=alice_user.headers,
    )
    assert r.status_code == 200, r.text
    fresh = [await node.mesh.send(bob_user, room_id, f"new {i}") for i in range(80)]
    newest = int(fresh[-1]["cursor"])

    async def read_position() -> int:
        r = await node.mesh.http.get("/api/status", headers=alice_user.headers)
        [room] = [room for room in r.json()["rooms"] if room["roomId"] == room_id]
        return int(room["lastReadCursor"] or 0)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            divider = alice.timeline.get_by_role("separator", name="New messages")
            expect(divider).to_be_visible()
            expect(divider).to_be_in_viewport()
            first = alice.message("new 0").first
            expect(first).to_be_in_viewport()
            expect(alice.message("read 29").first).to_be_attached()
            # the divider goes right before the first unread message
            assert alice.page.evaluate(
                """() => document.querySelector('.unread-divider').nextElementSibling
                       .textContent.includes('new 0')"""
            )
            expect(alice.message("new 30")).to_have_count(0)  # (not loaded yet)
            shot(alice.page, "first-unread")
            # opening read only what is in view: the position is not at the newest
            until(alice, lambda: call(read_position) >= int(fresh[0]["cursor"]))
            assert call(read_position) < int(fresh[30]["cursor"])

            # scrolling down loads the newer pages; the divider goes above the
            # fold and "Jump to first unread" appears
            jump = alice.button("Jump to first unread")
            for _ in range(40):
                alice.timeline.evaluate("el => { el.scrollTop = el.scrollHeight; }")
                if alice.message("new 79").count():
                    break
                alice.page.wait_for_timeout(150)
            expect(alice.message("new 79")).to_be_visible()
            alice.timeline.evaluate("el => { el.scrollTop = el.scrollHeight; }")
            expect(jump).to_be_visible()
            # at the bottom, everything is read
            until(alice, lambda: call(read_position) == newest)
            jump.click()
            expect(divider).to_be_in_viewport()
            expect(first).to_be_focused()
            expect(jump).to_be_hidden()
            alice.assert_clean()

    await in_browser(scenario)


async def test_a_few_unread_messages_start_at_the_bottom_and_are_read(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    seen = [await node.mesh.send(bob_user, room_id, f"seen {i}") for i in range(3)]
    r = await node.mesh.http.post(
        f"/api/rooms/{room_id}/read",
        json={"cursor": seen[-1]["cursor"]},
        headers=alice_user.headers,
    )
    assert r.status_code == 200, r.text
    last = [await node.mesh.send(bob_user, room_id, f"unseen {i}") for i in range(2)][-1]

    async def read_position() -> str | None:
        r = await node.mesh.http.get("/api/status", headers=alice_user.headers)
        [room] = [room for room in r.json()["rooms"] if room["roomId"] == room_id]
        return room["lastReadCursor"]

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            divider = alice.timeline.get_by_role("separator", name="New messages")
            expect(divider).to_be_in_viewport()
            expect(alice.message("unseen 1")).to_be_in_viewport()
            expect(alice.button("Jump to first unread")).to_be_hidden()
            until(alice, lambda: call(read_position) == last["cursor"])
            expect(alice.room_link("Town Square")).to_have_accessible_name("Town Square")
            # a live message is shown (not held) and read
            call(node.mesh.send, bob_user, room_id, "live one")
            expect(alice.message("live one")).to_be_in_viewport()
            alice.assert_clean()

    await in_browser(scenario)


async def test_switching_rooms_and_back_keeps_ones_place(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    sent = [await node.mesh.send(bob_user, room_id, f"filler {i}") for i in range(60)]
    r = await node.mesh.http.post(
        f"/api/rooms/{room_id}/read",
        json={"cursor": sent[-1]["cursor"]},
        headers=alice_user.headers,
    )
    assert r.status_code == 200, r.text
    await node.mesh.create_room(alice_user, "Elsewhere")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            expect(alice.message("filler 59")).to_be_visible()
            for _ in range(20):
                alice.timeline.evaluate("el => { el.scrollTop = 0; }")
                if alice.message("filler 0").count():
                    break
                alice.page.wait_for_timeout(150)
            spot = alice.message("filler 20").first
            spot.scroll_into_view_if_needed()
            expect(spot).to_be_in_viewport()
            expect(alice.message("filler 59")).not_to_be_in_viewport()
            alice.room_link("Elsewhere").click()
            expect(alice.heading("#Elsewhere")).to_be_visible()
            alice.room_link("Town Square").click()
            expect(alice.heading("#Town Square")).to_be_visible()
            expect(spot).to_be_in_viewport()
            expect(alice.message("filler 59")).not_to_be_in_viewport()
            alice.assert_clean()

    await in_browser(scenario)
