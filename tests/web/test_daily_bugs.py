"""The six bugs of issue 32 seen in a day's use of the web client, each as
a person meets it: an over-size message, the phone's toolbar, the keyboard in
the timeline, the newest message kept in view, the toolbars, byte limits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from quart_mesh.config import Limits
from tests.browser import Person, call, chromium, in_browser, shot
from tests.web.conftest import Served
from tests.web.test_chat import signed_in, two_people
from tests.web.test_usable import tab_to

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


async def test_an_over_size_message_comes_back_to_the_composer(
    browser_ready: None, serve_node: Any
) -> None:
    """Bug 1: the text is not lost far above; it is back in the box, the
    reason next to it in human units, and no Retry that cannot succeed."""
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    for i in range(30):
        await node.mesh.send(bob_user, room_id, f"earlier {i}")
    text = "too long " * 2000  # 18000 bytes, over the 16 KB limit

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            expect(alice.message("earlier 29")).to_be_visible()
            alice.composer.fill(text)
            alice.composer.press("Enter")
            form = alice.page.get_by_role("form", name="Send a message")
            reason = form.get_by_role("alert")
            expect(reason).to_contain_text("Not sent: content is 17.6 KB; the limit is 16 KB")
            expect(alice.composer).to_have_value(text.rstrip())
            expect(alice.composer).to_be_focused()
            expect(alice.composer).to_be_in_viewport()
            expect(reason).to_be_in_viewport()
            # no failed message left behind with a Retry that can never succeed
            expect(alice.message("too long too long")).to_have_count(0)
            expect(alice.timeline.get_by_role("button", name="Retry")).to_have_count(0)
            shot(alice.page, "too-large")
            # shortened, it goes
            alice.composer.fill("the short version")
            expect(form).not_to_contain_text("Not sent")
            alice.composer.press("Enter")
            expect(alice.message("the short version")).not_to_contain_text("sending…")
            alice.assert_clean(console=False)  # the refused send (413) is logged

    await in_browser(scenario)


async def test_limits_are_said_in_human_units(
    browser_ready: None, serve_node: Any, tmp_path: Path
) -> None:
    """Bug 6: "at most 1 MB", never "at most 1048576 bytes"."""
    node: Served = await serve_node(limits=Limits(max_upload_bytes=1024 * 1024))
    alice_user, _bob_user, _room_id = await two_people(node)
    big = tmp_path / "big.bin"
    big.write_bytes(b"\0" * (1024 * 1024 + 10))

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            with alice.page.expect_file_chooser() as chooser:
                alice.button("Attach files").click()
            chooser.value.set_files(str(big))
            files = alice.page.get_by_role("list", name="Files to send")
            expect(files).to_contain_text("not uploaded")
            expect(files).to_contain_text("at most 1 MB")
            expect(files).not_to_contain_text("1048576")
            alice.assert_clean(console=False)  # the refused upload (413) is logged

    await in_browser(scenario)


#: where the toolbar of the message *el* is against its text and the log
_LAYOUT = """el => {
  const box = (e) => {
    const r = e.getBoundingClientRect();
    return [r.top, r.bottom, r.left, r.right];
  };
  return {
    toolbar: box(el.querySelector('[role=toolbar]')),
    text: box(el.querySelector('.msg-body')),
    log: box(el.closest('[role=log]')),
  };
}"""


def overlaps(a: list[float], b: list[float]) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def shown_toolbars(person: Person) -> list[str]:
    """The names of the message toolbars one can see (opacity, not clipped)."""
    names: list[str] = person.page.evaluate(
        """() => [...document.querySelectorAll('[role=toolbar]')]
          .filter((t) => getComputedStyle(t).opacity !== '0' && t.getBoundingClientRect().width > 1)
          .map((t) => t.closest('article').textContent.slice(0, 40))"""
    )
    return names


async def test_on_a_phone_the_toolbar_does_not_cover_the_message(
    browser_ready: None, serve_node: Any
) -> None:
    """Bug 2: at 390x844, tapping one's own message shows its actions under
    it, not over its text; Edit opens fully in view."""
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    for i in range(12):
        await node.mesh.send(bob_user, room_id, f"earlier {i}")
    await node.mesh.send(alice_user, room_id, "my own words, short")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user, width=390, height=844)
            own = alice.message("my own words, short")
            expect(own).to_be_visible()
            own.click()
            toolbar = own.get_by_role("toolbar", name="Actions for the message from alice")
            expect(toolbar.get_by_role("button", name="Delete message")).to_be_in_viewport()
            layout = own.evaluate(_LAYOUT)
            assert not overlaps(layout["toolbar"], layout["text"]), layout
            shot(alice.page, "phone-toolbar")
            toolbar.get_by_role("button", name="Edit message").click()
            editor = alice.timeline.get_by_role("textbox", name="Edit message")
            expect(editor).to_be_focused()
            expect(editor).to_be_in_viewport(ratio=1)
            expect(alice.timeline.get_by_role("button", name="Save")).to_be_in_viewport(ratio=1)
            alice.assert_clean()

    await in_browser(scenario)


async def test_the_topmost_toolbar_is_not_under_the_header(
    browser_ready: None, serve_node: Any
) -> None:
    """Bug 5: the topmost message's toolbar is whole (not clipped by the
    header above the log)."""
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    for i in range(40):
        await node.mesh.send(bob_user, room_id, f"message number {i:02}")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            top = alice.message("message number 20")
            expect(alice.message("message number 39")).to_be_visible()
            top.evaluate("el => el.scrollIntoView({block: 'start'})")
            top.hover()
            layout = top.evaluate(_LAYOUT)
            assert layout["toolbar"][0] >= layout["log"][0], layout
            expect(top.get_by_role("button", name="Add reaction")).to_be_in_viewport(ratio=1)
            assert shown_toolbars(alice) == [top.text_content()[:40]]
            alice.assert_clean()

    await in_browser(scenario)


async def test_one_toolbar_at_a_time(browser_ready: None, serve_node: Any) -> None:
    """Bug 5: focus on one message and the pointer on another show one
    toolbar, the pointer's."""
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    for i in range(40):
        await node.mesh.send(bob_user, room_id, f"message number {i:02}")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            expect(alice.message("message number 39")).to_be_visible()
            focused = alice.message("message number 25")
            focused.focus()
            hovered = alice.message("message number 23")
            hovered.hover()
            assert shown_toolbars(alice) == [hovered.text_content()[:40]]
            alice.assert_clean()

    await in_browser(scenario)


async def test_the_newest_stays_in_view(browser_ready: None, serve_node: Any) -> None:
    """Bug 4: the message box growing, a received edit lengthening the last
    message, the edit box of the last message: the newest stays in view;
    away from it, new messages show a pill."""
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    for i in range(30):
        await node.mesh.send(bob_user, room_id, f"earlier {i}")
    last = await node.mesh.send(bob_user, room_id, "the last word")

    async def edit(content: str) -> None:
        r = await node.mesh.http.patch(
            f"/api/rooms/{room_id}/messages/{last['messageId']}",
            json={"content": content},
            headers=bob_user.headers,
        )
        assert r.status_code == 200, r.text

    async def send(content: str) -> None:
        await node.mesh.send(bob_user, room_id, content)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            newest = alice.message("the last word")
            expect(newest).to_be_in_viewport(ratio=1)
            # the message box grows by six lines
            alice.composer.press_sequentially("a draft")
            for _ in range(6):
                alice.composer.press("Shift+Enter")
                alice.composer.press_sequentially("more")
            expect(newest).to_be_in_viewport(ratio=1)
            # a received edit makes the last message longer
            call(edit, "the last word\n" + "\n".join(f"and line {i}" for i in range(10)))
            expect(newest).to_contain_text("and line 9")
            expect(newest).to_be_in_viewport(ratio=1)
            alice.composer.fill("")
            # the edit box of one's own last message opens whole
            own = alice.send("mine, to edit")
            expect(own).not_to_contain_text("sending…")
            own.hover()
            own.get_by_role("button", name="Edit message").click()
            expect(alice.timeline.get_by_role("textbox", name="Edit message")).to_be_in_viewport(
                ratio=1
            )
            expect(alice.timeline.get_by_role("button", name="Save")).to_be_in_viewport(ratio=1)
            alice.page.keyboard.press("Escape")
            # away from the newest: a pill says there is more below
            alice.timeline.evaluate("el => { el.scrollTop = 0; }")
            call(send, "news from bob")
            pill = alice.button("New messages below")
            expect(pill).to_be_visible()
            pill.click()
            expect(alice.message("news from bob")).to_be_in_viewport(ratio=1)
            expect(pill).to_be_hidden()
            alice.assert_clean()

    await in_browser(scenario)


async def test_the_timeline_is_one_tab_stop(browser_ready: None, serve_node: Any) -> None:
    """Bug 3: a roving tabindex. Tab into the log stays at the newest, Tab
    leaves it for the message box at once; Up/Down move between messages,
    Enter or the menu key open a message's actions, Escape comes back."""
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    for i in range(20):
        await node.mesh.send(bob_user, room_id, f"message number {i:02}")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            keyboard = alice.page.keyboard
            newest = alice.message("message number 19")
            expect(newest).to_be_in_viewport(ratio=1)
            # Shift+Tab from the message box reaches the log in a press or two…
            alice.composer.focus()
            tab_to(alice, alice.timeline, key="Shift+Tab", limit=3)
            expect(newest).to_be_in_viewport(ratio=1)  # …without scrolling to the oldest
            # …and Tab from the log reaches the message box as quickly
            tab_to(alice, alice.composer, limit=3)
            alice.timeline.focus()
            keyboard.press("ArrowUp")
            expect(newest).to_be_focused()
            keyboard.press("ArrowUp")
            previous = alice.message("message number 18")
            expect(previous).to_be_focused()
            # Enter opens the message's actions; arrows move along them
            keyboard.press("Enter")
            expect(previous.get_by_role("button", name="Add reaction")).to_be_focused()
            keyboard.press("ArrowRight")
            expect(previous.get_by_role("button", name="Reply in thread")).to_be_focused()
            keyboard.press("Escape")
            expect(previous).to_be_focused()
            # the menu key too
            keyboard.press("ArrowDown")
            expect(newest).to_be_focused()
            keyboard.press("ContextMenu")
            expect(newest.get_by_role("button", name="Add reaction")).to_be_focused()
            # from a message's actions, Tab still leaves the log in a few presses
            tab_to(alice, alice.composer, limit=6)
            alice.assert_clean()

    await in_browser(scenario)
