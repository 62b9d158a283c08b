"""A room rule set while a person has the page open takes effect at once
(issue 27): the room, its badge and its messages go from the page without a
reload, and come back when the rule goes."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser import call, chromium, in_browser
from tests.web.conftest import Served
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


async def test_a_denied_room_leaves_the_page_and_comes_back(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, _ = await two_people(node)
    secret = (await node.mesh.create_room(alice_user, "secret"))["roomId"]
    await node.mesh.join(bob_user, secret)
    rule: dict[str, str] = {}

    async def deny() -> None:
        r = await node.mesh.http.post(
            f"/api/rooms/{secret}/permissions",
            json={
                "targetType": "participant",
                "target": bob_user.participant_id,
                "permission": "rooms.read",
                "effect": "deny",
            },
            headers=alice_user.headers,
        )
        assert r.status_code == 201, r.text
        rule["id"] = r.json()["overrideId"]

    async def allow_again() -> None:
        r = await node.mesh.http.request(
            "DELETE",
            f"/api/rooms/{secret}/permissions",
            json={"overrideId": rule["id"]},
            headers=alice_user.headers,
        )
        assert r.is_success, r.text

    async def post(text: str) -> None:
        await node.mesh.send(alice_user, secret, text)

    def scenario() -> None:
        with chromium() as browser:
            bob = signed_in(browser, node.url, bob_user)
            bob.open_room("secret")
            call(post, "before the rule")
            expect(bob.message("before the rule")).to_be_visible()
            bob.open_room("Town Square")
            call(post, "an unread one")
            expect(bob.room_link("secret")).to_have_accessible_name(re.compile(r"1 unread"))
            expect(bob.page).to_have_title(re.compile(r"^\(1\) "))

            call(deny)
            # the room and its badge go at once, without a reload
            expect(bob.room_link("secret")).to_have_count(0)
            expect(bob.page).to_have_title(re.compile(r"^(?!\(\d)"))
            call(post, "while denied")

            call(allow_again)
            expect(bob.room_link("secret")).to_be_visible()
            bob.open_room("secret")
            expect(bob.message("while denied")).to_be_visible()
            bob.assert_clean()

    await in_browser(scenario)


async def test_a_click_on_a_room_survives_the_list_being_drawn_again(
    browser_ready: None, serve_node: Any
) -> None:
    """The rooms list is drawn again whenever a count changes (a message in
    another room). A click pressed on a room before such a redraw and
    released after it still opens that room: links the redraw did not
    change stay in place (a replaced link gets no click). Seen in CI as a
    room that did not open on a click right after sign-in."""
    node: Served = await serve_node()
    alice_user, bob_user, _ = await two_people(node)
    rooms = {}
    for name in ("secret", "third"):
        rooms[name] = (await node.mesh.create_room(alice_user, name))["roomId"]
        await node.mesh.join(bob_user, rooms[name])

    async def post(text: str) -> None:
        await node.mesh.send(alice_user, rooms["third"], text)

    def scenario() -> None:
        with chromium() as browser:
            bob = signed_in(browser, node.url, bob_user)
            expect(bob.heading("#Town Square")).to_be_visible()
            box = bob.room_link("secret").bounding_box()
            assert box is not None
            bob.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
            bob.page.mouse.down()
            # a message in "third": its count changes, and the list is drawn again
            call(post, "while the button is down")
            expect(bob.room_link("third")).to_have_accessible_name(re.compile(r"1 unread"))
            bob.page.mouse.up()
            expect(bob.heading("#secret")).to_be_visible()
            bob.assert_clean()

    await in_browser(scenario)
