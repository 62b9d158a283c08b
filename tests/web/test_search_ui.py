"""Search in the web client (``js/search.js``) over a served node: `/` and
Ctrl+K reach the field, the filters are chips, results come grouped by room
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
from tests.browser import Person, chromium, in_browser, shot
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

            # Ctrl+K from the message box; a click opens a result too
            alice.composer.focus()
            alice.page.keyboard.press("Control+k")
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
            phone.page.keyboard.press("Control+k")
            searchbox(phone).fill("database")
            expect(results(phone).get_by_role("link")).to_have_count(4)
            assert violations(phone, "#search-panel") == []
            assert sideways(phone) == 0
            shot(phone.page, "search-phone")
            phone.assert_clean()

    await in_browser(scenario)
