"""Mutes and "Mark all read" in the web client over a served node: a room or
a DM muted from its header (``PUT /api/rooms/:id/mute``) is dimmed in the
sidebar and still counts its unread messages, but the page's title and icon
count it only when it mentions you; another tab of the same person follows
(``room_muted``), and a reload keeps it (the state's ``muted``). *Mark all
read* (``POST /api/read-all``) clears every count."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser import Person, call, chromium, in_browser, shot
from tests.web.conftest import Served
from tests.web.test_accessibility import violations
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


def favicon(person: Person) -> str:
    href: str = person.page.evaluate(
        "() => document.getElementById('favicon').getAttribute('href')"
    )
    return href


def dm_link(person: Person, name: str) -> Any:
    nav = person.page.get_by_role("navigation", name="Rooms and people")
    return nav.get_by_role("link", name=re.compile(rf"^Direct messages with {re.escape(name)}"))


async def test_mute_rooms_and_dms_and_mark_all_read(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, _ = await two_people(node)
    ops = (await node.mesh.create_room(alice_user, "Ops"))["roomId"]
    await node.mesh.join(bob_user, ops)
    r = await node.mesh.http.post(
        "/api/dms", json={"participantId": alice_user.participant_id}, headers=bob_user.headers
    )
    assert r.status_code in (200, 201), r.text
    dm = r.json()["roomId"]
    await node.mesh.send(bob_user, dm, "hello alice")

    async def bob_says(room_id: str, content: str) -> None:
        await node.mesh.send(bob_user, room_id, content)

    async def join(room_id: str) -> None:
        await node.mesh.join(alice_user, room_id)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            other_tab = signed_in(browser, node.url, alice_user)
            alice.open_room("Ops")
            mute = alice.button("Mute room")
            expect(mute).to_have_attribute("aria-pressed", "false")
            mute.click()
            expect(mute).to_have_attribute("aria-pressed", "true")
            # every tab of hers follows
            expect(other_tab.room_link("Ops")).to_have_accessible_name("Ops, muted")

            # a muted room counts unread, but not in the title or the icon
            alice.open_room("Town Square")
            expect(alice.page).to_have_title(re.compile(r"^\(1\) #Town Square"))  # the DM
            call(bob_says, ops, "deploy notes")
            call(bob_says, ops, "more deploy notes")
            expect(alice.room_link("Ops")).to_have_accessible_name("Ops, muted, 2 unread messages")
            expect(alice.page).to_have_title(re.compile(r"^\(1\) #Town Square"))
            # the DM, muted from its header too
            dm_link(alice, "bob").click()
            alice.button("Mute conversation").click()
            expect(alice.button("Mute conversation")).to_have_attribute("aria-pressed", "true")
            alice.open_room("Town Square")
            call(bob_says, dm, "are you there?")
            expect(dm_link(alice, "bob")).to_have_accessible_name(
                "Direct messages with bob, muted, 1 unread message"
            )
            expect(alice.page).to_have_title(re.compile(r"^#Town Square"))
            assert favicon(alice) == "/web/icon.svg"
            # ... unless it mentions her
            call(bob_says, ops, "@alice please look at the deploy")
            expect(alice.room_link("Ops")).to_have_accessible_name(
                "Ops, muted, 3 unread messages, 1 mention"
            )
            expect(alice.page).to_have_title(re.compile(r"^\(1\) #Town Square"))
            assert favicon(alice) == "/web/icon-unread.svg"
            shot(alice.page, "mutes")
            assert violations(alice, "#sidebar") == []

            # a reload keeps the mutes (the node's state)
            alice.page.reload()
            expect(alice.room_link("Ops")).to_have_accessible_name(
                re.compile(r"^Ops, muted, 3 unread messages")
            )

            # Mark all read: every count goes, in every tab
            alice.button("Mark all read").click()
            expect(alice.room_link("Ops")).to_have_accessible_name("Ops, muted")
            expect(dm_link(alice, "bob")).to_have_accessible_name("Direct messages with bob, muted")
            expect(alice.page).to_have_title(re.compile(r"^#Town Square"))
            expect(other_tab.room_link("Ops")).to_have_accessible_name("Ops, muted")
            assert favicon(alice) == "/web/icon.svg"

            # unmuted: counted in the title again
            alice.open_room("Ops")
            alice.button("Mute room").click()
            expect(alice.button("Mute room")).to_have_attribute("aria-pressed", "false")
            expect(other_tab.room_link("Ops")).to_have_accessible_name("Ops")
            alice.open_room("Town Square")
            call(bob_says, ops, "back to normal")
            expect(alice.page).to_have_title(re.compile(r"^\(1\) #Town Square"))

            # leaving forgets a mute (the node's rule): back in, not muted
            alice.open_room("Ops")
            alice.button("Mute room").click()
            expect(other_tab.room_link("Ops")).to_have_accessible_name(re.compile("^Ops, muted"))
            alice.button("Leave room").click()
            expect(other_tab.room_link("Ops")).to_have_count(0)
            call(join, ops)
            for person in (alice, other_tab):
                expect(person.room_link("Ops")).to_have_accessible_name(re.compile(r"^Ops(, \d|$)"))
            for person in (alice, other_tab):
                person.assert_clean()

    await in_browser(scenario)
