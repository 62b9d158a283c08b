"""Search in the web client (``js/search.js``) over a served node: `/` and
Ctrl+Shift+F reach the field, the filters are chips, results come grouped by room
with the matched words marked (as text, never markup), and Enter or a click
opens the message in its room, scrolled to and highlighted, with the older
and newer pages loading around it; ``#room/<id>/message/<id>`` does the same.
Checked by axe with the results open, wide and at 380 px."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from quart_mesh.config import RateLimits
from tests.browser import Person, call, chromium, in_browser, shot
from tests.web.conftest import Served
from tests.web.test_accessibility import sideways, violations
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]

OLD_NOTE = "the note about the database migration from last week"
HOSTILE = '<img src=x onerror="alert(1)"> database <b>café</b>'


def searchbox(person: Person) -> Any:
    return person.page.get_by_role("searchbox", name="Search messages")


def results(person: Person) -> Any:
    return person.page.get_by_role("region", name="Search")


def hit(person: Person, text: str) -> Any:
    return results(person).get_by_role("link").filter(has_text=text)


async def test_search_filters_and_jump_to_message(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node(rate_limits=RateLimits(enabled=False))
    alice_user, bob_user, town = await two_people(node)
    ops = (await node.mesh.create_room(alice_user, "Ops"))["roomId"]
    await node.mesh.join(bob_user, ops)
    plan = await node.mesh.send(alice_user, ops, "Database backup plan for Friday")
    await node.mesh.send(
        bob_user, ops, "I can run the DATABASE restore drill", threadId=plan["messageId"]
    )
    note: dict[str, Any] = {}
    for i in range(130):
        content = OLD_NOTE if i == 20 else HOSTILE if i == 60 else f"filler {i}"
        sent = await node.mesh.send(bob_user, town, content)
        if i == 20:
            note = sent

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            expect(alice.heading("#Town Square")).to_be_visible()
            # `/` from the message list (not while typing) reaches the field
            alice.timeline.focus()
            alice.page.keyboard.press("/")
            box = searchbox(alice)
            expect(box).to_be_focused()
            box.fill("database")
            panel = results(alice)
            expect(panel.get_by_role("status")).to_have_text(
                re.compile(r"^4 messages found in 2 conversations")
            )
            # grouped by room, matches marked, whatever the case or accents
            expect(panel.get_by_role("heading", name="#Town Square", level=3)).to_be_visible()
            expect(panel.get_by_role("heading", name="#Ops", level=3)).to_be_visible()
            expect(hit(alice, "DATABASE restore").locator("mark")).to_have_text("DATABASE")
            expect(hit(alice, "in a thread")).to_contain_text(
                "I can run the DATABASE restore drill"
            )
            # markup in a message is text in its snippet
            hostile = hit(alice, "onerror")
            expect(hostile).to_contain_text('<img src=x onerror="alert(1)">')
            assert panel.locator("img, b").count() == 0
            shot(alice.page, "search")
            assert violations(alice) == []

            # chips: a room, a toggle; then cleared
            panel.get_by_role("combobox", name="Room").select_option(label="#Ops")
            expect(panel.get_by_role("heading", level=3)).to_have_count(1)
            expect(panel.get_by_role("heading", name="#Ops", level=3)).to_be_visible()
            threads = panel.get_by_role("button", name="In threads")
            threads.click()
            expect(threads).to_have_attribute("aria-pressed", "true")
            expect(panel.get_by_role("link")).to_have_count(2)  # the root and its reply
            panel.get_by_role("button", name="Clear filters").click()
            expect(panel.get_by_role("link")).to_have_count(4)
            box.fill('"migration from last week"')
            expect(panel.get_by_role("link")).to_have_count(1)
            expect(hit(alice, OLD_NOTE).locator("mark")).to_have_text(
                re.compile("migration.*week", re.IGNORECASE)
            )

            # the keyboard: Down to the result, Enter opens it in its room,
            # older than the newest page: loaded around it, highlighted, focused
            box.press("ArrowDown")
            expect(hit(alice, OLD_NOTE)).to_be_focused()
            alice.page.keyboard.press("Enter")
            expect(panel).to_be_hidden()
            target = alice.message(OLD_NOTE)
            expect(target).to_be_focused()
            expect(target).to_have_attribute("aria-current", "true")
            expect(target).to_be_in_viewport()
            assert re.search(rf"#room/{town}/message/{note['messageId']}$", alice.page.url)
            expect(alice.message("filler 19")).to_have_count(1)
            expect(alice.message("filler 21")).to_have_count(1)
            shot(alice.page, "jump")
            # scrolling down loads the newer pages up to the newest, then live
            # messages follow; scrolling up loads the older ones
            for _ in range(10):
                alice.timeline.evaluate("el => { el.scrollTop = el.scrollHeight; }")
                if alice.message("filler 129").count():
                    break
                alice.page.wait_for_timeout(150)
            expect(alice.message("filler 129")).to_have_count(1)
            expect(alice.timeline.get_by_role("article")).to_have_count(130)
            alice.timeline.evaluate("el => { el.scrollTop = el.scrollHeight; }")
            expect(alice.send("a live one after the jump")).to_be_visible()
            for _ in range(10):
                alice.timeline.evaluate("el => { el.scrollTop = 0; }")
                if alice.message("filler 0").count():
                    break
                alice.page.wait_for_timeout(150)
            expect(alice.message("filler 0")).to_have_count(1)

            # Ctrl+Shift+F from the message box; a click opens a result too
            alice.composer.focus()
            alice.page.keyboard.press("Control+Shift+F")
            expect(box).to_be_focused()
            box.fill("backup")
            hit(alice, "backup plan").click()
            expect(alice.heading("#Ops")).to_be_visible()
            current = alice.timeline.locator('article[aria-current="true"]')
            expect(current).to_have_count(1)
            expect(current.locator(".msg-body")).to_have_text("Database backup plan for Friday")
            expect(current).to_be_focused()
            alice.assert_clean()

            # a link to a message opens it in context, on a phone too; the
            # search there is checked by axe and does not scroll sideways
            phone = Person(browser, node.url, width=380, height=760)
            phone.page.goto(f"{node.url}/#room/{town}/message/{note['messageId']}")
            phone.sign_in(bob_user.name)
            expect(phone.message(OLD_NOTE)).to_be_focused()
            expect(phone.message(OLD_NOTE)).to_have_attribute("aria-current", "true")
            phone.page.keyboard.press("Control+Shift+F")
            searchbox(phone).fill("database")
            expect(results(phone).get_by_role("link")).to_have_count(4)
            assert violations(phone, "#search-panel") == []
            assert sideways(phone) == 0
            shot(phone.page, "search-phone")
            phone.assert_clean()

    await in_browser(scenario)


async def test_a_message_opened_away_from_the_newest(browser_ready: None, serve_node: Any) -> None:
    """Shown around an older message, a room marks read only what is seen,
    keeps the live messages (edited and deleted as they change) for when the
    newest is reached, shows live replies in an open thread, and goes back to
    the newest for one's own message; a deleted message's link opens the room
    at its newest; a result in a hidden DM opens it. The search's panel
    follows its field for the keyboard."""
    node: Served = await serve_node(rate_limits=RateLimits(enabled=False))
    alice_user, bob_user, _ = await two_people(node)
    http = node.mesh.http
    ops = (await node.mesh.create_room(alice_user, "Ops"))["roomId"]
    await node.mesh.join(bob_user, ops)
    note: dict[str, Any] = {}
    for i in range(130):
        sent = await node.mesh.send(bob_user, ops, OLD_NOTE if i == 20 else f"filler {i}")
        if i == 20:
            note = sent
    r = await http.post(
        "/api/dms", json={"participantId": alice_user.participant_id}, headers=bob_user.headers
    )
    dm = r.json()["roomId"]
    await node.mesh.send(bob_user, dm, "the vault key is in the drawer")
    assert (await http.delete(f"/api/dms/{dm}", headers=alice_user.headers)).status_code == 200

    async def bob(content: str, thread: str | None = None) -> str:
        extra = {"threadId": thread} if thread else {}
        return str((await node.mesh.send(bob_user, ops, content, **extra))["messageId"])

    async def change(method: str, message_id: str, content: str = "") -> None:
        r = await http.request(
            method,
            f"/api/rooms/{ops}/messages/{message_id}",
            json={"content": content} if content else None,
            headers=bob_user.headers,
        )
        assert r.status_code in (200, 204), r.text

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            alice.open_room("Ops")
            expect(alice.message("filler 129")).to_have_count(1)
            alice.open_room("Town Square")
            for i in range(3):
                call(bob, f"new {i}")
            ops_link = alice.room_link("Ops")
            expect(ops_link).to_have_accessible_name("Ops, 3 unread messages")
            alice.page.evaluate(
                "(hash) => { location.hash = hash; }", f"#room/{ops}/message/{note['messageId']}"
            )
            target = alice.message(OLD_NOTE)
            expect(target).to_be_focused()
            # the newest messages were not seen: still unread
            expect(ops_link).to_have_accessible_name("Ops, 3 unread messages")

            target.hover()
            target.get_by_role("button", name="Reply in thread").click()
            thread = alice.page.get_by_role("complementary", name="Thread")
            call(bob, "a live reply", note["messageId"])
            expect(thread.get_by_role("article").filter(has_text="a live reply")).to_have_count(1)
            alice.button("Close thread").click()
            first = call(bob, "live v1")
            call(change, "PATCH", first, "live v2")
            oops = call(bob, "oops")
            call(change, "DELETE", oops)
            call(bob, "last live")
            expect(ops_link).to_have_accessible_name("Ops, 7 unread messages")  # all came
            for _ in range(20):
                alice.timeline.evaluate("el => { el.scrollTop = el.scrollHeight; }")
                if alice.message("last live").count():
                    break
                alice.page.wait_for_timeout(150)
            expect(alice.message("last live")).to_have_count(1)
            alice.timeline.evaluate("el => { el.scrollTop = el.scrollHeight; }")
            expect(alice.message("live v2")).to_have_count(1)
            expect(alice.message("live v1")).to_have_count(0)
            expect(alice.message("oops")).to_have_count(0)
            expect(ops_link).to_have_accessible_name("Ops")

            # a deleted message's link: said so, and the room at its newest
            alice.page.evaluate(
                "(hash) => { location.hash = hash; }", f"#room/{ops}/message/{oops}"
            )
            toast = alice.page.get_by_role("alert").filter(has_text="could not be found")
            expect(toast).to_have_text("This message could not be found; it may have been deleted.")
            expect(alice.page).to_have_url(re.compile(rf"#room/{ops}$"))
            expect(alice.message("last live")).to_be_visible()

            # one's own message, sent while shown around an older one: back
            # to the newest, where it shows
            alice.page.evaluate(
                "(hash) => { location.hash = hash; }", f"#room/{ops}/message/{note['messageId']}"
            )
            expect(target).to_be_focused()
            expect(alice.send("my own, after the jump")).to_be_visible()
            expect(alice.page).to_have_url(re.compile(rf"#room/{ops}$"))

            # the keyboard goes from the field to the panel (Ctrl+Shift+F on
            # any layout), even with no result
            box = searchbox(alice)
            alice.composer.focus()
            alice.page.evaluate(
                """() => document.activeElement.dispatchEvent(new KeyboardEvent("keydown",
                    {key: "ф", code: "KeyF", ctrlKey: true, shiftKey: true, bubbles: true,
                     cancelable: true}))"""
            )
            expect(box).to_be_focused()
            box.fill("nothing matches this")
            expect(results(alice).get_by_role("status")).to_have_text("No messages found.")
            box.press("Tab")
            expect(results(alice).get_by_role("button", name="Close search")).to_be_focused()
            alice.page.keyboard.press("Tab")
            expect(results(alice).get_by_role("combobox", name="Room")).to_be_focused()
            alice.page.keyboard.press("Escape")
            expect(results(alice)).to_be_hidden()

            # a result in a hidden DM: named so, and opened
            box.fill("vault")
            expect(results(alice).get_by_role("heading", level=3)).to_have_text(
                "Direct messages with bob"
            )
            hit(alice, "vault key").click()
            expect(alice.heading("Direct messages with bob")).to_be_visible()
            expect(alice.message("the vault key")).to_be_focused()
            # (the deleted message's page was refused: 400)
            assert all("status of 400" in e for e in alice.console_errors), alice.console_errors
            alice.assert_clean(console=False)

    await in_browser(scenario)
