"""What a second afternoon of daily use found (issue 32's review): the
toolbar of a message being edited, the read-receipts switch's layout."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser import Person, chromium, in_browser, until
from tests.web.conftest import Served
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


@pytest.mark.parametrize(("width", "height"), [(1280, 800), (390, 844)])
async def test_a_message_being_edited_shows_no_toolbar(
    browser_ready: None, serve_node: Any, width: int, height: int
) -> None:
    """Up opens the edit box of one's last message: its toolbar (Edit
    message again, over the box at desktop width, under it on a phone) goes
    while the box is open and comes back after."""
    node: Served = await serve_node()
    alice_user, _bob_user, _room_id = await two_people(node)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user, width=width, height=height)
            mine = alice.send("a word to edit")
            expect(mine).not_to_contain_text("sending…")
            alice.composer.focus()
            alice.page.keyboard.press("ArrowUp")
            edit = alice.timeline.get_by_role("textbox", name="Edit message")
            expect(edit).to_be_focused()
            mine = alice.timeline.get_by_role("article").filter(
                has=alice.page.get_by_role("textbox", name="Edit message")
            )
            expect(mine).to_have_count(1)
            expect(mine.get_by_role("button", name="Edit message")).to_be_hidden()
            expect(mine.get_by_role("button", name="Add reaction")).to_be_hidden()
            alice.page.keyboard.press("Escape")
            expect(edit).to_have_count(0)
            mine = alice.message("a word to edit")
            mine.hover()
            expect(mine.get_by_role("button", name="Edit message")).to_be_visible()
            alice.assert_clean()

    await in_browser(scenario)


@pytest.mark.parametrize(("width", "height"), [(1280, 800), (390, 844)])
async def test_the_read_receipts_switch_sits_beside_its_label(
    browser_ready: None, serve_node: Any, width: int, height: int
) -> None:
    """In Settings, Privacy's checkbox is on the line of "Share read
    receipts", as "Notify me in this browser" is (not alone, centred, above)."""
    node: Served = await serve_node()
    alice_user, _bob_user, _room_id = await two_people(node)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user, width=width, height=height)
            alice.button("Settings").click()
            dialog = alice.page.get_by_role("dialog", name="Settings")
            box = dialog.get_by_role("checkbox", name="Share read receipts")
            expect(box).to_be_checked()
            label = dialog.get_by_text("Share read receipts", exact=True)
            expect(label).to_be_visible()
            b, t = box.bounding_box(), label.bounding_box()
            assert b is not None
            assert t is not None
            # on one line: the box's middle within the text's height, to its left
            assert t["y"] <= b["y"] + b["height"] / 2 <= t["y"] + t["height"], (b, t)
            assert b["x"] < t["x"] + t["width"] / 2, (b, t)
            alice.assert_clean()

    await in_browser(scenario)


async def test_opening_a_dm_leaves_the_people_list_as_it_was(
    browser_ready: None, serve_node: Any
) -> None:
    """The DM's "Seen" line's style (loaded with the first DM) was a bare
    ``.seen``, the class of the People list's "online" / "last seen" lines:
    they jumped to the right, out from under the names."""
    node: Served = await serve_node()
    alice_user, bob_user, _room_id = await two_people(node)
    await node.mesh.http.post(
        "/api/dms", json={"participantId": bob_user.participant_id}, headers=alice_user.headers
    )

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            nav = alice.page.get_by_role("navigation", name="Rooms and people")
            me = nav.get_by_role("listitem").filter(has_text="alice (you)")
            name, status = me.get_by_text("alice (you)"), me.get_by_text("online", exact=True)
            expect(status).to_be_visible()

            def left(locator: Any) -> float:
                """Where the text itself begins (not its box, which may be wider)."""
                x: float = locator.evaluate(
                    """(e) => { const r = document.createRange(); r.selectNodeContents(e);
                                return r.getBoundingClientRect().x; }"""
                )
                return x

            # (once laid out: the avatar and the list's style may still be arriving)
            until(alice, lambda: abs(left(status) - left(name)) < 2)
            nav.get_by_role("link", name=re.compile(r"^Direct messages with bob")).click()
            alice.send("hello bob")
            expect(alice.message("hello bob")).not_to_contain_text("sending…")
            # the receipts' style has arrived with the DM
            until(
                alice,
                lambda: alice.page.evaluate(
                    "() => [...document.styleSheets]"
                    ".some((s) => (s.href || '').includes('receipts'))"
                ),
            )
            expect(status).to_be_visible()
            assert abs(left(status) - left(name)) < 2
            alice.assert_clean()

    await in_browser(scenario)


@pytest.mark.parametrize(("width", "height"), [(1280, 800), (390, 844)])
async def test_the_new_dm_dialogs_ticks_sit_beside_the_names(
    browser_ready: None, serve_node: Any, width: int, height: int
) -> None:
    """In "New direct message", each tick box is next to the person it adds
    (it took the row's width as every input does: ticks alone in the middle,
    the names pushed to the right edge)."""
    node: Served = await serve_node()
    alice_user, _bob_user, _room_id = await two_people(node)
    await node.mesh.register("carol")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user, width=width, height=height)
            if width < 700:
                alice.button("Show rooms and people").click()
            alice.button("New direct message").click()
            dialog = alice.page.get_by_role("dialog", name="New direct message")
            for name in ("bob", "carol"):
                tick = dialog.get_by_role("checkbox", name=f"Add {name} to a group conversation")
                person = dialog.get_by_role("button", name=f"Message {name}")
                expect(person).to_be_visible()
                t, p = tick.bounding_box(), person.bounding_box()
                assert t is not None
                assert p is not None
                assert t["width"] < 40, t
                assert 0 <= p["x"] - (t["x"] + t["width"]) < 24, (t, p)
            alice.assert_clean()

    await in_browser(scenario)


async def test_on_a_phone_a_grouped_messages_time_does_not_cover_its_text(
    browser_ready: None, serve_node: Any
) -> None:
    """A tapped message that continues its author's group shows its time in
    the gutter: on a phone the gutter is narrower and "03:12 PM" ran into the
    message's first letters."""
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    await node.mesh.send(alice_user, room_id, "the group's first")
    await node.mesh.send(alice_user, room_id, "mmm the second, tapped")

    def scenario() -> None:
        with chromium() as browser:
            bob = signed_in(browser, node.url, bob_user, width=390, height=844)
            second = bob.message("mmm the second, tapped")
            expect(second).to_be_visible()
            second.click()
            time = second.get_by_role("time")
            expect(time).to_have_css("opacity", "1")
            ends = time.evaluate(
                """(e) => { const r = document.createRange(); r.selectNodeContents(e);
                            return r.getBoundingClientRect().right; }"""
            )
            text = second.get_by_text("mmm the second, tapped")
            starts = text.evaluate(
                """(e) => { const r = document.createRange(); r.selectNodeContents(e);
                            return r.getBoundingClientRect().left; }"""
            )
            assert ends <= starts - 2, (ends, starts)
            bob.assert_clean()

    await in_browser(scenario)


async def test_the_rooms_list_opened_before_the_first_room_opens_stays_open(
    browser_ready: None, serve_node: Any
) -> None:
    """On a narrow screen one may open the rooms list as soon as one is
    signed in; the first room, which the client opens by itself once the
    read positions are in (``/api/status``), does not close it again (CI saw
    the list shut under the hand reaching for "New direct message")."""
    node: Served = await serve_node()
    alice_user, _bob_user, _room_id = await two_people(node)

    def scenario() -> None:
        with chromium() as browser:
            alice = Person(browser, node.url, width=390, height=844)
            alice.open()
            held: list[Any] = []
            alice.page.route("**/api/status", lambda route: held.append(route))  # answered below
            alice.sign_in(alice_user.name)
            alice.button("Show rooms and people").click()
            new_dm = alice.button("New direct message")
            expect(new_dm).to_be_visible()
            until(alice, lambda: bool(held))  # the client asked for its status
            for route in list(held):
                route.continue_()
            alice.page.unroute("**/api/status")  # (and lets any later one through)
            expect(alice.heading("#Town Square")).to_be_attached()
            expect(new_dm).to_be_visible()
            new_dm.click()
            expect(alice.page.get_by_role("dialog", name="New direct message")).to_be_visible()
            alice.assert_clean()

    await in_browser(scenario)
