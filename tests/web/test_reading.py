"""Reading the timeline (issue 32): messages grouped by author with avatars,
day separators, the profile card, the Markdown blocks, the Copy button of
code blocks, the image viewer, which toolbar shows, and byte units."""

from __future__ import annotations

import re
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser import Person, call, chromium, in_browser, shot
from tests.helpers import User
from tests.web.conftest import Served
from tests.web.test_accessibility import violations
from tests.web.test_chat import png, signed_in, two_people
from tests.web.test_daily_bugs import shown_toolbars

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]

DAY_MS = 24 * 3600 * 1000


def backdate(node: Served, message_ids: list[str], days: int, minutes: int = 0) -> None:
    """Move stored messages *days* (and *minutes*) into the past."""
    with sqlite3.connect(node.settings.data_dir / "mesh.db") as db:
        for i, message_id in enumerate(message_ids):
            db.execute(
                "UPDATE messages SET created_at = created_at - ? WHERE message_id = ?",
                (days * DAY_MS + (minutes - i) * 60_000, message_id),
            )


def day_name(when: datetime) -> str:
    """How the page names a day of this year (en-US): "Wednesday, November 25"."""
    return f"{when:%A}, {when:%B} {when.day}"


def axe_clean(person: Person, context: str) -> None:
    for width, height in ((1280, 800), (390, 844)):
        person.page.set_viewport_size({"width": width, "height": height})
        assert violations(person, context) == [], width


async def test_messages_are_grouped_with_avatars_and_days(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    old = await node.mesh.send(bob_user, room_id, "three days back")
    yesterday = [
        (await node.mesh.send(bob_user, room_id, text))["messageId"]
        for text in ("yesterday one", "yesterday two")
    ]
    backdate(node, [old["messageId"]], 3)
    backdate(node, yesterday, 1, minutes=10)
    first_id = (await node.mesh.send(bob_user, room_id, "first today"))["messageId"]
    await node.mesh.send(bob_user, room_id, "second today")
    await node.mesh.send(alice_user, room_id, "alice speaks")
    await node.mesh.send(bob_user, room_id, "bob again")
    three_days = datetime.now() - timedelta(days=3)

    async def delete(message_id: str) -> None:
        r = await node.mesh.http.delete(
            f"/api/rooms/{room_id}/messages/{message_id}", headers=bob_user.headers
        )
        assert r.status_code in (200, 204), r.text

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            log = alice.timeline
            expect(alice.message("bob again")).to_be_visible()
            # the days, as separators with names, in order
            separators = log.get_by_role("separator")
            names = [day_name(three_days), "Yesterday", "Today"]
            if three_days.year != datetime.now().year:
                names[0] = f"{names[0]}, {three_days.year}"
            expect(separators).to_have_count(3)
            for i, name in enumerate(names):
                expect(separators.nth(i)).to_have_accessible_name(name)
            # a group: avatar and name once…
            first, second = alice.message("first today"), alice.message("second today")
            expect(first.locator(".avatar")).to_have_text("BO")
            expect(first.locator(".avatar")).to_be_visible()
            expect(second.locator(".avatar")).to_be_hidden()
            assert second.locator(".who").evaluate("el => el.getBoundingClientRect().width") <= 1
            # …but every message keeps its author and time for screen readers
            for article in (first, second, alice.message("yesterday two")):
                expect(article).to_have_accessible_name(re.compile(r"^bob\b.*\d{1,2}:\d\d"))
            # its time shows on hover
            time = second.locator("time")
            expect(time).to_have_css("opacity", "0")
            second.hover()
            expect(time).to_have_css("opacity", "1")
            # two days are two groups; another author ends a group
            expect(alice.message("yesterday two").locator(".avatar")).to_be_hidden()
            expect(alice.message("alice speaks").locator(".avatar")).to_have_text("AL")
            expect(alice.message("bob again").locator(".avatar")).to_be_visible()
            # a live message joins the group of the one before
            call(node.mesh.send, bob_user, room_id, "bob once more")
            expect(alice.message("bob once more")).to_be_visible()
            expect(alice.message("bob once more").locator(".avatar")).to_be_hidden()
            # the first of a group deleted: the next one shows avatar and name
            call(delete, first_id)
            expect(first).to_have_count(0)
            expect(second.locator(".avatar")).to_be_visible()
            assert second.locator(".who").evaluate("el => el.getBoundingClientRect().width") > 1
            # one's own message, live, starts a group of its own after bob's
            alice.send("and alice again")
            expect(alice.message("and alice again")).not_to_contain_text("sending…")
            expect(alice.message("and alice again").locator(".avatar")).to_be_visible()
            # the same avatar colour for the same person, another for another
            colours = log.locator(".avatar").evaluate_all(
                "els => els.map((el) => [el.textContent, getComputedStyle(el).backgroundColor])"
            )
            by_person = {text: {c for t, c in colours if t == text} for text, _ in colours}
            assert all(len(c) == 1 for c in by_person.values()), by_person
            assert by_person["BO"] != by_person["AL"]
            shot(alice.page, "reading-groups")
            alice.assert_clean()

    await in_browser(scenario)


async def test_the_profile_card(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    r = await node.mesh.http.post(
        "/api/agents/bootstrap", json={"name": "helper", "type": "nanoclaw"}
    )
    bot = User(r.json()["agentId"], "helper", r.json()["token"])
    await node.mesh.join(bot, room_id)
    await node.mesh.send(bot, room_id, "a word from the bot")
    await node.mesh.send(bob_user, room_id, "a word from bob")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            said = alice.message("a word from bob")
            expect(said).to_be_visible()
            # Enter on the name
            name = said.get_by_role("button", name="bob", exact=True)
            name.focus()
            alice.page.keyboard.press("Enter")
            card = alice.page.get_by_role("dialog", name="bob")
            expect(card).to_be_visible()
            expect(card).to_contain_text("@bob")
            expect(card).to_contain_text("Person")
            expect(card).to_contain_text("member")
            expect(card).to_contain_text(re.compile("not seen yet|last seen|online"))
            shot(alice.page, "profile-card")
            axe_clean(alice, ".profile")
            alice.page.set_viewport_size({"width": 1280, "height": 800})
            # Escape closes it; the focus is back on the name
            alice.page.keyboard.press("Escape")
            expect(card).to_be_hidden()
            expect(name).to_be_focused()
            # a bot, from its avatar
            bots = alice.message("a word from the bot")
            bots.locator(".avatar").click()
            card = alice.page.get_by_role("dialog", name="helper")
            expect(card).to_contain_text("Bot (nanoclaw)")
            expect(card.get_by_role("button", name="Message")).to_be_focused()
            card.get_by_role("button", name="Close").click()
            expect(card).to_be_hidden()
            # in a thread, its root too
            said.hover()
            said.get_by_role("button", name="Reply in thread").click()
            thread = alice.page.get_by_role("complementary", name="Thread")
            root = thread.get_by_role("article").filter(has_text="a word from bob")
            root.get_by_role("button", name="bob", exact=True).click()
            card = alice.page.get_by_role("dialog", name="bob")
            expect(card).to_be_visible()
            alice.page.keyboard.press("Escape")
            expect(card).to_be_hidden()
            # "Message" opens the direct messages
            said.get_by_role("button", name="bob", exact=True).click()
            alice.page.get_by_role("dialog", name="bob").get_by_role(
                "button", name="Message"
            ).click()
            expect(alice.heading("Direct messages with bob")).to_be_visible()
            expect(alice.page.get_by_role("dialog")).to_have_count(0)
            # one's own card has no "Message"
            alice.send("my own words")
            alice.message("my own words").get_by_role("button", name="alice", exact=True).click()
            mine = alice.page.get_by_role("dialog", name="alice")
            expect(mine).to_contain_text("(you)")
            expect(mine.get_by_role("button", name="Message")).to_have_count(0)
            alice.page.keyboard.press("Escape")
            alice.assert_clean()

    await in_browser(scenario)


MARKDOWN = """# A heading
## Smaller
### Smallest
- one <b>bold</b>
- **two**
3. three
4. four
> a quote with ~~struck~~ text
> - and a list in it
after the blocks
#not-a-heading"""


async def test_markdown_blocks(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    await node.mesh.send(bob_user, room_id, MARKDOWN)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            said = alice.message("after the blocks")
            expect(said).to_be_visible()
            expect(said.get_by_role("heading", level=3)).to_have_text("A heading")
            expect(said.get_by_role("heading", level=4)).to_have_text("Smaller")
            expect(said.get_by_role("heading", level=5)).to_have_text("Smallest")
            lists = said.get_by_role("list")
            expect(lists).to_have_count(3)
            expect(lists.nth(0).get_by_role("listitem")).to_have_text(["one <b>bold</b>", "two"])
            expect(lists.nth(0).locator("strong")).to_have_text("two")
            expect(lists.nth(1)).to_have_attribute("start", "3")
            expect(lists.nth(1).get_by_role("listitem")).to_have_text(["three", "four"])
            quote = said.get_by_role("blockquote")
            expect(quote).to_contain_text("a quote with struck text")
            expect(quote.locator("del")).to_have_text("struck")
            expect(quote.get_by_role("listitem")).to_have_text("and a list in it")
            expect(said.locator(".msg-body")).to_contain_text("#not-a-heading")
            assert said.locator("b").count() == 0
            shot(alice.page, "markdown")
            alice.assert_clean()

    await in_browser(scenario)


async def test_code_blocks_have_a_copy_button(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    await node.mesh.send(bob_user, room_id, "run this:\n```sh\necho 'hi there'\n```")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            alice.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=node.url)
            said = alice.message("run this")
            copy = said.get_by_role("button", name="Copy")
            copy.click()
            expect(said.get_by_role("button", name="Copied")).to_be_visible()
            assert (
                alice.page.evaluate("() => navigator.clipboard.readText()") == "echo 'hi there'\n"
            )
            expect(said.get_by_role("button", name="Copy")).to_be_visible()  # and back
            alice.assert_clean()

    await in_browser(scenario)


async def test_images_open_in_the_viewer(
    browser_ready: None, serve_node: Any, tmp_path: Path
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    for name, size in (("first.png", (40, 30)), ("second.png", (60, 20))):
        r = await node.mesh.http.post(
            "/api/upload", files={"file": (name, png(*size), "image/png")}, headers=bob_user.headers
        )
        assert r.status_code == 201, r.text
        await node.mesh.send(bob_user, room_id, f"see {name}", attachments=[r.json()["uploadId"]])

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            opener = alice.message("see first.png").get_by_role("link", name="first.png")
            expect(opener).to_be_visible()
            opener.click()
            viewer = alice.page.get_by_role("dialog", name="first.png")
            expect(viewer).to_be_visible()
            expect(viewer.get_by_role("img", name="first.png")).to_have_js_property(
                "complete", True
            )
            expect(viewer).to_contain_text("1 of 2")
            expect(viewer).to_contain_text(re.compile(r"\d+ B"))
            download = viewer.get_by_role("link", name="Download")
            expect(download).to_have_attribute("download", "first.png")
            assert (download.get_attribute("href") or "").startswith("/uploads/")
            assert len(alice.context.pages) == 1  # not the raw file in a new tab
            shot(alice.page, "image-viewer")
            axe_clean(alice, ".viewer")
            alice.page.set_viewport_size({"width": 1280, "height": 800})
            # arrows between the room's images
            first_href = download.get_attribute("href")
            alice.page.keyboard.press("ArrowRight")
            viewer = alice.page.get_by_role("dialog", name="second.png")
            expect(viewer).to_be_visible()
            expect(viewer.get_by_role("img", name="second.png")).to_have_js_property(
                "naturalWidth", 60
            )
            assert viewer.get_by_role("link", name="Download").get_attribute("href") != first_href
            alice.page.keyboard.press("ArrowRight")
            expect(alice.page.get_by_role("dialog", name="first.png")).to_be_visible()
            alice.page.keyboard.press("ArrowLeft")
            expect(alice.page.get_by_role("dialog", name="second.png")).to_be_visible()
            # Escape closes; the focus is back on the image
            alice.page.keyboard.press("Escape")
            expect(alice.page.get_by_role("dialog")).to_have_count(0)
            expect(opener).to_be_focused()
            alice.assert_clean()

    await in_browser(scenario)


async def test_the_keyboards_toolbar_wins_until_the_pointer_moves(
    browser_ready: None, serve_node: Any
) -> None:
    """From the review: the pointer resting on one message hid the toolbar
    of the message the keyboard is on."""
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    for i in range(20):
        await node.mesh.send(bob_user, room_id, f"message number {i:02}")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            rested = alice.message("message number 15")
            expect(alice.message("message number 19")).to_be_in_viewport()
            rested.hover(position={"x": 200, "y": 10})
            assert shown_toolbars(alice) == [rested.text_content()[:40]]
            alice.timeline.focus()
            alice.page.keyboard.press("ArrowUp")
            alice.page.keyboard.press("ArrowUp")
            keyed = alice.message("message number 18")
            expect(keyed).to_be_focused()
            assert shown_toolbars(alice) == [keyed.text_content()[:40]]
            # the pointer moves: its message's toolbar again
            rested.hover(position={"x": 220, "y": 12})
            assert shown_toolbars(alice) == [rested.text_content()[:40]]
            alice.assert_clean()

    await in_browser(scenario)


async def test_bytes_that_differ_never_read_the_same(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, _, _ = await two_people(node)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            said: dict[str, str] = alice.page.evaluate(
                """async () => {
                  const { formatBytes, sayBytes } = await import("/web/js/dom.js");
                  return {
                    small: formatBytes(1023), kb: formatBytes(16384), frac: formatBytes(18000),
                    edge: formatBytes(1048575), mb: formatBytes(1048576),
                    over: sayBytes("content is 16400 bytes; the limit is 16384"),
                    far: sayBytes("content is 17792 bytes; the limit is 16384"),
                    near: sayBytes("content is 1048577 bytes; the limit is 1048576"),
                    limit: sayBytes("at most 10485760 bytes"),
                  };
                }"""
            )
            assert said == {
                "small": "1023 B",
                "kb": "16 KB",
                "frac": "17.6 KB",
                "edge": "1 MB",
                "mb": "1 MB",
                "over": "content is 16.02 KB; the limit is 16 KB",
                "far": "content is 17.4 KB; the limit is 16 KB",
                "near": "content is 1,048,577 bytes; the limit is 1,048,576 bytes",
                "limit": "at most 10 MB",
            }
            alice.assert_clean()

    await in_browser(scenario)
