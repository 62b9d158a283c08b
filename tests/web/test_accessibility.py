"""Every view of the web client, as the owner sees it (the most controls),
checked by axe-core (Deque's rules engine, run in the page) for the WCAG 2
A and AA rules, on a wide screen and at 380 px, where nothing may make the
page scroll sideways."""

from __future__ import annotations

import re
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from tests.browser import Person, chromium, in_browser
from tests.web.conftest import Served
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]

#: every view's address, with the heading it shows
VIEWS = [
    ("#room", "#Town Square"),  # the chat (any unknown address opens the default room)
    ("#world", "World"),
    ("#bots", "Bots"),
    ("#apps", "Apps"),
    ("#vault", "Vault"),
    ("#playground", "Models"),
    ("#console/settings", "Console"),
    ("#console/roles", "Console"),
    ("#console/rules", "Console"),
    ("#console/models", "Console"),
    ("#console/limits", "Console"),
    ("#console/federation", "Console"),
]
WCAG = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}}


def violations(person: Person, context: str | None = None) -> list[str]:
    """axe-core's WCAG 2 A/AA findings on the page, or only within the
    element *context* selects (``"#panel-body"``: a view, not the sidebar)."""
    results = Axe().run(person.page, context=context, options=WCAG)
    return [
        f"{v['id']} ({v['impact']}): {v['help']} at "
        + ", ".join(str(n["target"]) for n in v["nodes"][:3])
        for v in results.response["violations"]
    ]


def sideways(person: Person) -> int:
    """How many pixels the page is wider than the window (0: none)."""
    extra: int = person.page.evaluate(
        "() => document.scrollingElement.scrollWidth - window.innerWidth"
    )
    return extra


async def test_every_view_passes_axe_wide_and_narrow(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, _, _ = await two_people(node)

    def scenario() -> None:
        with chromium() as browser:
            for width in (1280, 380):
                alice = signed_in(browser, node.url, alice_user, width=width)
                expect(alice.heading("#Town Square")).to_be_visible()
                found: dict[str, list[str]] = {}
                for address, heading in VIEWS:
                    alice.page.goto(f"{node.url}/{address}")
                    expect(alice.heading(heading, level=1)).to_be_visible()
                    alice.page.wait_for_load_state("networkidle")
                    problems = violations(alice)
                    if sideways(alice) > 0:
                        problems.append(f"the page scrolls sideways by {sideways(alice)} px")
                    if problems:
                        found[address] = problems
                assert found == {}, f"at {width} px: {found}"
                alice.assert_clean()
                alice.context.close()

    await in_browser(scenario, timeout=300)


def _check_dialog(person: Person, dialog: Any, name: str, found: dict[str, list[str]]) -> None:
    """axe on the page with *dialog* open (into *found*), then Escape closes it."""
    expect(dialog).to_be_visible()
    person.page.wait_for_load_state("networkidle")
    problems = violations(person)
    if sideways(person) > 0:
        problems.append(f"the page scrolls sideways by {sideways(person)} px")
    if problems:
        found[name] = problems
    person.page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()


async def test_the_writing_and_settings_dialogs_pass_axe_wide_and_narrow(
    browser_ready: None, serve_node: Any
) -> None:
    """Issue 32's dialogs: account settings, a room's description, the pinned
    messages and the reaction picker, each open, at 1280 and 390 px."""
    node: Served = await serve_node()
    alice_user, _, room_id = await two_people(node)
    message = await node.mesh.send(alice_user, room_id, "a pinned message")
    r = await node.mesh.http.put(
        f"/api/rooms/{room_id}/pins/{message['messageId']}", headers=alice_user.headers
    )
    assert r.status_code == 200, r.text

    def scenario() -> None:
        with chromium() as browser:
            for width in (1280, 390):
                alice = signed_in(browser, node.url, alice_user, width=width, height=844)
                page = alice.page
                found: dict[str, list[str]] = {}

                alice.button("Settings").click()
                settings = page.get_by_role("dialog", name="Settings")
                expect(settings.get_by_role("list", name="Signed-in sessions")).to_contain_text(
                    "This device"
                )
                _check_dialog(alice, settings, "settings", found)
                alice.button("Edit description").click()
                description = page.get_by_role("dialog", name="Description of #Town Square")
                _check_dialog(alice, description, "description", found)
                alice.button("Pinned (1)").click()
                pins = page.get_by_role("dialog", name="Pinned messages")
                expect(pins.get_by_role("listitem")).to_have_count(1)
                _check_dialog(alice, pins, "pins", found)
                pinned = alice.message("a pinned message")
                pinned.focus()
                page.keyboard.press("Enter")
                page.keyboard.press("Enter")
                pinned.get_by_role("button", name="More reactions").click()
                reactions = page.get_by_role("dialog", name="Add a reaction")
                _check_dialog(alice, reactions, "reactions", found)
                assert found == {}, f"at {width} px: {found}"
                alice.assert_clean()
                alice.context.close()

    await in_browser(scenario, timeout=300)


async def test_the_room_switcher_and_the_threads_list_pass_axe(
    browser_ready: None, serve_node: Any
) -> None:
    """Ctrl+K's switcher and a room's threads (dialogs of their own), and a
    thread's root with its reply count, at 1280 and 390 px."""
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    root = await node.mesh.send(bob_user, room_id, "the plan")
    await node.mesh.send(bob_user, room_id, "a reply", threadId=root["messageId"])

    def scenario() -> None:
        with chromium() as browser:
            for width in (1280, 390):
                alice = signed_in(browser, node.url, alice_user, width=width)
                expect(
                    alice.message("the plan").get_by_role("button", name="1 reply")
                ).to_be_visible()
                problems = violations(alice, "#conversation")
                alice.composer.focus()
                alice.page.keyboard.press("Control+k")
                switcher = alice.page.get_by_role("dialog", name="Go to a room or conversation")
                expect(switcher.get_by_role("option")).to_have_count(1)
                problems += violations(alice)
                alice.page.keyboard.press("Escape")
                alice.button("Threads").click()
                listing = alice.page.get_by_role("dialog", name="Threads in #Town Square")
                expect(listing.get_by_role("button", name=re.compile("the plan"))).to_be_visible()
                problems += violations(alice)
                if sideways(alice) > 0:
                    problems.append(f"the page scrolls sideways by {sideways(alice)} px")
                assert problems == [], f"at {width} px: {problems}"
                alice.assert_clean()
                alice.context.close()

    await in_browser(scenario, timeout=180)
