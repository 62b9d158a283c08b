"""Usable by everyone: a phone-sized window, the keyboard alone, landmarks
and names for every control, light and dark themes; and a room with 5,000
messages that opens without loading them all."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio
from playwright.sync_api import Locator, expect

from quart_mesh.config import RateLimits
from tests.browser import PASSWORD, Person, chromium, in_browser, shot
from tests.helpers import connect
from tests.web.conftest import Served
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]

#: interactive roles that must always have a name
NAMED = ("button", "link", "textbox", "searchbox", "checkbox", "radio", "combobox", "option")


def unnamed_controls(snapshot: str) -> list[str]:
    """Lines of an ARIA snapshot naming an interactive element without a name."""
    pattern = re.compile(rf"^\s*- ({'|'.join(NAMED)})(\s*\[[^\]]*\])?\s*:?\s*$")
    return [line for line in snapshot.splitlines() if pattern.match(line)]


async def test_a_phone_sized_window(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    await node.mesh.create_room(alice_user, "random")
    await node.mesh.send(alice_user, room_id, "a long line " * 30)

    def scenario() -> None:
        with chromium() as browser:
            bob = signed_in(browser, node.url, bob_user, width=380, height=740)
            page = bob.page
            expect(bob.heading("#Town Square")).to_be_visible()
            width = page.evaluate("() => document.documentElement.scrollWidth")
            assert width <= 380, width
            # the sidebar is behind a button
            toggle = bob.button("Show rooms and people")
            expect(toggle).to_have_attribute("aria-expanded", "false")
            expect(page.get_by_role("navigation", name="Rooms and people")).to_be_hidden()
            toggle.click()
            nav = page.get_by_role("navigation", name="Rooms and people")
            expect(nav).to_be_visible()
            expect(bob.button("Hide rooms and people")).to_have_attribute("aria-expanded", "true")
            shot(page, "phone-menu")
            bob.button("Browse rooms").click()
            page.get_by_role("dialog", name="Rooms").get_by_role(
                "button", name="Join random"
            ).click()
            expect(bob.heading("#random")).to_be_visible()
            expect(nav).to_be_hidden()
            bob.send("from my phone")
            expect(bob.message("from my phone")).not_to_contain_text("sending…")
            bob.button("Show rooms and people").click()
            bob.room_link("Town Square").click()
            expect(nav).to_be_hidden()
            expect(bob.heading("#Town Square")).to_be_visible()
            # a thread covers the screen, and closes
            message = bob.message("a long line")
            message.click()
            message.get_by_role("button", name="Reply in thread").click()
            thread = page.get_by_role("complementary", name="Thread")
            expect(thread).to_be_visible()
            box = thread.bounding_box()
            assert box is not None
            assert box["width"] >= 370, box
            shot(page, "phone-thread")
            bob.button("Close thread").click()
            expect(thread).to_be_hidden()
            assert page.evaluate("() => document.documentElement.scrollWidth") <= 380
            shot(page, "phone")
            bob.assert_clean()

    await in_browser(scenario)


async def test_the_keyboard_alone_and_names_for_everything(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    await node.mesh.send(bob_user, room_id, "react to me")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            page = alice.page
            keyboard = page.keyboard
            # landmarks
            expect(page.get_by_role("banner")).to_be_visible()
            expect(page.get_by_role("navigation", name="Rooms and people")).to_be_visible()
            expect(page.get_by_role("main", name="Conversation")).to_be_visible()
            # the message box has the focus when a room opens: type, Enter sends
            expect(alice.composer).to_be_focused()
            keyboard.type("typed, not clicked")
            keyboard.press("Enter")
            expect(alice.message("typed, not clicked")).not_to_contain_text("sending…")

            # Up and Down move through messages; Tab reaches their actions
            alice.timeline.focus()
            keyboard.press("ArrowUp")
            expect(alice.message("typed, not clicked")).to_be_focused()
            keyboard.press("ArrowUp")
            target = alice.message("react to me")
            expect(target).to_be_focused()
            keyboard.press("Tab")  # the author's name (the profile card)
            expect(target.get_by_role("button", name="bob", exact=True)).to_be_focused()
            keyboard.press("Tab")
            expect(target.get_by_role("button", name="Add reaction")).to_be_focused()
            keyboard.press("Enter")
            expect(target.get_by_role("button", name="React with 👍")).to_be_focused()
            keyboard.press("Tab")
            expect(target.get_by_role("button", name="React with ❤️")).to_be_focused()
            keyboard.press("Enter")
            expect(target.get_by_role("button", name="❤️ 1: alice")).to_be_visible()
            expect(target.get_by_role("button", name="Add reaction")).to_be_focused()

            # edit one's own message from the keyboard; Escape cancels, Enter saves
            own = alice.message("typed, not clicked")
            own.focus()
            keyboard.press("Tab")  # alice (the profile card)
            keyboard.press("Tab")  # Add reaction
            keyboard.press("Tab")  # Reply in thread
            keyboard.press("Tab")  # Edit message
            expect(own.get_by_role("button", name="Edit message")).to_be_focused()
            keyboard.press("Enter")
            editor = alice.timeline.get_by_role("textbox", name="Edit message")
            expect(editor).to_be_focused()
            keyboard.press("Escape")
            expect(editor).to_have_count(0)
            expect(own.get_by_role("button", name="Edit message")).to_be_focused()
            keyboard.press("Enter")
            keyboard.press("End")
            keyboard.type(" (fixed)")
            keyboard.press("Enter")
            expect(alice.message("typed, not clicked (fixed)")).to_contain_text("(edited)")

            # a dialog from the keyboard: opens focused, Escape closes, focus returns
            browse = alice.button("Browse rooms")
            browse.focus()
            keyboard.press("Enter")
            dialog = page.get_by_role("dialog", name="Rooms")
            expect(dialog).to_be_visible()
            keyboard.press("Escape")
            expect(dialog).to_be_hidden()
            expect(browse).to_be_focused()

            # the mention list: arrows choose, Escape closes
            alice.composer.focus()
            keyboard.type("@")
            listbox = page.get_by_role("listbox", name="People to mention")
            expect(listbox).to_be_visible()
            expect(page.get_by_role("option", name="bob")).to_have_attribute(
                "aria-selected", "true"
            )
            keyboard.press("Escape")
            expect(listbox).to_be_hidden()
            expect(alice.composer).to_have_value("@")

            # every control on screen has a name that says what it does
            for snapshot in (
                page.locator("body").aria_snapshot(),
                page.get_by_role("main").aria_snapshot(),
            ):
                assert unnamed_controls(snapshot) == [], snapshot
            alice.assert_clean()

    await in_browser(scenario)


def tab_to(person: Person, target: Locator, *, key: str = "Tab", limit: int = 40) -> None:
    """Press *key* (Tab or Shift+Tab) until *target* has the focus, as a
    person without a mouse would; fail if it is not reached in *limit* presses."""
    for _ in range(limit):
        if target.evaluate("el => el === document.activeElement"):
            return
        person.page.keyboard.press(key)
    raise AssertionError(f"{key} never reached {target}")


async def test_sign_in_switch_rooms_and_reply_in_a_thread_by_keyboard(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, _ = await two_people(node)
    random = await node.mesh.create_room(alice_user, "random")
    await node.mesh.join(bob_user, random["roomId"])
    await node.mesh.send(bob_user, random["roomId"], "a question for a thread")

    def scenario() -> None:
        with chromium() as browser:
            alice = Person(browser, node.url)
            page = alice.page
            keyboard = page.keyboard
            alice.open()

            # the sign-in form: every control named; the name box has the focus
            expect(alice.heading("Sign in")).to_be_visible()
            snapshot = page.locator("body").aria_snapshot()
            assert unnamed_controls(snapshot) == [], snapshot
            expect(alice.textbox("Name")).to_be_focused()
            keyboard.type(alice_user.name)
            keyboard.press("Tab")
            expect(alice.textbox("Password")).to_be_focused()
            keyboard.type(PASSWORD)
            keyboard.press("Tab")
            expect(alice.button("Sign in")).to_be_focused()
            keyboard.press("Enter")
            expect(alice.heading("#Town Square")).to_be_visible()
            expect(alice.composer).to_be_focused()

            # the room browser and the DM picker, opened from the keyboard
            for opener, title in (("Browse rooms", "Rooms"), ("New direct message", None)):
                button = alice.button(opener)
                tab_to(alice, button, key="Shift+Tab")
                keyboard.press("Enter")
                dialog = page.get_by_role("dialog", name=title or opener)
                expect(dialog).to_be_visible()
                expect(dialog.locator(":focus")).to_have_count(1)
                snapshot = dialog.aria_snapshot()
                assert unnamed_controls(snapshot) == [], snapshot
                keyboard.press("Escape")
                expect(dialog).to_be_hidden()
                expect(button).to_be_focused()

            # another room, from the sidebar
            tab_to(alice, alice.room_link("random"))
            keyboard.press("Enter")
            expect(alice.heading("#random")).to_be_visible()
            expect(alice.room_link("random")).to_have_attribute("aria-current", "page")
            expect(alice.composer).to_be_focused()
            keyboard.type("typed in random")
            keyboard.press("Enter")
            expect(alice.message("typed in random")).not_to_contain_text("sending…")

            # reply in a thread: to the timeline, up to the message, to its action
            tab_to(alice, alice.timeline, key="Shift+Tab")
            keyboard.press("ArrowUp")
            keyboard.press("ArrowUp")
            question = alice.message("a question for a thread").first
            expect(question).to_be_focused()
            reply = question.get_by_role("button", name="Reply in thread")
            tab_to(alice, reply)
            keyboard.press("Enter")
            thread = page.get_by_role("complementary", name="Thread")
            expect(thread).to_be_visible()
            expect(thread.get_by_role("textbox", name="Reply in thread")).to_be_focused()
            keyboard.type("answered without a mouse")
            keyboard.press("Enter")
            expect(
                thread.get_by_role("article").filter(has_text="answered without a mouse")
            ).not_to_contain_text("sending…")
            keyboard.press("Escape")
            expect(thread).to_be_hidden()
            expect(question).to_be_focused()
            alice.assert_clean()

    await in_browser(scenario)
    replies = await node.mesh.messages(bob_user, random["roomId"])
    by_content = {m["content"]: m for m in replies}
    root = by_content["a question for a thread"]
    assert by_content["answered without a mouse"]["threadId"] == root["messageId"]


async def test_light_and_dark_follow_the_system(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, _, room_id = await two_people(node)
    await node.mesh.send(alice_user, room_id, "colours")

    def luminance(rgb: str) -> float:
        r, g, b = (int(x) for x in re.findall(r"\d+", rgb)[:3])
        return (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255

    def scenario() -> dict[str, float]:
        seen = {}
        with chromium() as browser:
            for scheme in ("light", "dark"):
                person = signed_in(browser, node.url, alice_user, color_scheme=scheme)
                expect(person.message("colours")).to_be_visible()
                background = person.page.evaluate(
                    "() => getComputedStyle(document.body).backgroundColor"
                )
                text = person.message("colours").evaluate("el => getComputedStyle(el).color")
                seen[scheme] = luminance(background)
                seen[f"{scheme}-text"] = luminance(text)
                shot(person.page, f"theme-{scheme}")
                person.assert_clean()
        return seen

    seen = await in_browser(scenario)
    assert seen["light"] > 0.9, seen
    assert seen["light-text"] < 0.3, seen
    assert seen["dark"] < 0.15, seen
    assert seen["dark-text"] > 0.8, seen


# seeding may take up to 120 s (the expect below) and the browser part up to
# 120 s more (in_browser): over the global 120 s
@pytest.mark.timeout(300)
async def test_a_room_of_5000_messages_opens_a_page_at_a_time(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node(rate_limits=RateLimits(enabled=False))
    alice_user, bob_user, room_id = await two_people(node)
    # 5,000 messages, pipelined over one WebSocket (its echoes read meanwhile)
    async with connect(node.url, bob_user) as ws:

        async def send_all() -> None:
            for i in range(5000):
                await ws.send(type="send_message", roomId=room_id, content=f"message {i}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_all)
            await ws.expect("message", timeout=120, content="message 4999")

    def scenario() -> dict[str, Any]:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            newest = alice.message("message 4999")
            expect(newest).to_be_in_viewport()
            articles = alice.timeline.get_by_role("article")
            expect(articles).to_have_count(50)
            expect(articles.first).to_contain_text("message 4950")
            # scrolling up loads the page before, keeping the view in place
            anchor = alice.message("message 4950")
            alice.timeline.evaluate("el => { el.scrollTop = 0; }")
            expect(articles).to_have_count(100)
            expect(articles.first).to_contain_text("message 4900")
            expect(anchor).to_be_in_viewport()
            alice.timeline.evaluate("el => { el.scrollTop = 0; }")
            expect(articles).to_have_count(150)
            pages = [
                url for url in alice.requests if re.search(rf"/api/rooms/{room_id}/messages\?", url)
            ]
            alice.assert_clean()
            return {"pages": pages}

    seen = await in_browser(scenario)
    pages = seen["pages"]
    assert len(pages) == 3, pages
    assert all("limit=50" in url for url in pages), pages
    # the newest page first, then older pages before the oldest one shown
    assert "before=" not in pages[0], pages
    assert all("before=" in url for url in pages[1:]), pages
    newest = {
        m["content"]: m["cursor"] for m in await node.mesh.messages(alice_user, room_id, limit=100)
    }
    assert f"before={newest['message 4950']}&" in pages[1] + "&", pages
    assert f"before={newest['message 4900']}&" in pages[2] + "&", pages
