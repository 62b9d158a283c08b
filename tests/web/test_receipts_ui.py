"""Read receipts in a DM in the web client over a served node (issue 32,
``docs/decisions/0071-read-receipts.md``): "Seen" shows under the newest
message of a DM when it is one's own and the other person has read it
(``readBy`` of ``GET /api/dms``, then live ``dm_read``), goes when a newer
message comes, and shows nothing once either side turns receipts off (the
``readReceiptsToggle`` checkbox of ``js/receipts.js``, for the account
settings). Axe clean at 1280 and 390 px."""

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


def dm_link(person: Person, name: str) -> Any:
    nav = person.page.get_by_role("navigation", name="Rooms and people")
    return nav.get_by_role("link", name=re.compile(rf"^Direct messages with {re.escape(name)}"))


def seen(person: Person) -> Any:
    return person.timeline.get_by_text(re.compile(r"^Seen"))


# mounts the exported checkbox on the page, as the account settings will
MOUNT = """async () => {
  const { readReceiptsToggle } = await import("/web/js/receipts.js");
  const token = localStorage.getItem("mesh.token");
  const call = (method, body) => fetch("/api/auth/me", {
    method, body: body && JSON.stringify(body),
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
  }).then((r) => r.json());
  const api = { patch: (_, body) => call("PATCH", body) };
  const app = { store: { me: await call("GET") }, api };
  document.getElementById("room-view").append(readReceiptsToggle(app));
}"""


async def test_seen_under_ones_newest_dm_message(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, _ = await two_people(node)
    r = await node.mesh.http.post(
        "/api/dms", json={"participantId": bob_user.participant_id}, headers=alice_user.headers
    )
    assert r.status_code == 201, r.text

    async def receipts(user: Any) -> bool:
        r = await node.mesh.http.get("/api/auth/me", headers=user.headers)
        return bool(r.json()["readReceipts"])

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            bob = signed_in(browser, node.url, bob_user, width=390, height=844)
            dm_link(alice, "bob").click()
            alice.send("are you there?")
            expect(alice.message("are you there?")).to_be_visible()
            expect(seen(alice)).to_have_count(0)
            # bob opens the DM and reads it: "Seen" under alice's message, live
            bob.button("Show rooms and people").click()
            dm_link(bob, "alice").click()
            expect(bob.message("are you there?")).to_be_visible()
            expect(seen(alice)).to_have_text("Seen")
            expect(seen(alice)).to_be_visible()
            shot(alice.page, "dm-seen")
            assert violations(alice) == []
            # none on bob's side: the newest is not his
            expect(seen(bob)).to_have_count(0)
            # a newer message that is not hers: gone; her answer read: back
            bob.send("yes, here")
            expect(alice.message("yes, here")).to_be_visible()
            expect(seen(alice)).to_have_count(0)
            expect(seen(bob)).to_have_text("Seen")  # alice has it open
            assert violations(bob) == []
            alice.send("good")
            expect(bob.message("good")).to_be_visible()
            expect(seen(alice)).to_have_text("Seen")
            # a reload keeps it (readBy)
            alice.page.reload()
            expect(alice.message("good")).to_be_visible()
            expect(seen(alice)).to_have_text("Seen")

            # bob turns his receipts off with the settings' checkbox
            bob.page.evaluate(MOUNT)
            box = bob.page.get_by_role("checkbox", name="Share read receipts")
            expect(box).to_be_checked()
            assert violations(bob) == []
            box.uncheck()
            expect(box).not_to_be_checked()
            expect(box).to_be_enabled()
            assert call(receipts, bob_user) is False
            # alice sees nothing now, after a reload too
            alice.page.reload()
            expect(alice.message("good")).to_be_visible()
            expect(alice.timeline.get_by_role("article")).to_have_count(3)
            expect(seen(alice)).to_have_count(0)
            box.check()
            expect(box).to_be_checked()
            expect(box).to_be_enabled()
            assert call(receipts, bob_user) is True
            alice.page.reload()
            expect(seen(alice)).to_have_text("Seen")
            alice.assert_clean()
            bob.assert_clean()

    await in_browser(scenario)


async def test_a_group_conversation_from_the_new_dm_dialog(
    browser_ready: None, serve_node: Any
) -> None:
    """Several people ticked in "New direct message": one conversation with
    all of them (POST /api/dms {participantIds}), named by its members in
    every member's sidebar, with "Seen by" and the names of those who read."""
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    carol_user = await node.mesh.register("carol")
    await node.mesh.join(carol_user, room_id)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            bob = signed_in(browser, node.url, bob_user)
            carol = signed_in(browser, node.url, carol_user, width=390, height=844)
            alice.button("New direct message").click()
            dialog = alice.page.get_by_role("dialog", name="New direct message")
            start = dialog.get_by_role("button", name=re.compile("^Start a conversation"))
            dialog.get_by_role("checkbox", name="Add bob to a group conversation").check()
            expect(start).to_be_hidden()  # one ticked: a plain DM is the person's button
            dialog.get_by_role("checkbox", name="Add carol to a group conversation").check()
            expect(start).to_have_text("Start a conversation with bob, carol")
            assert violations(alice, "#dm-picker") == []
            shot(alice.page, "group-dm-picker")
            start.click()
            expect(dialog).to_be_hidden()
            expect(alice.heading("Direct messages with bob, carol")).to_be_visible()
            expect(dm_link(alice, "bob, carol")).to_be_visible()
            # the others see it at once, named by its other members
            expect(dm_link(bob, "alice, carol")).to_be_visible()
            alice.send("lunch at noon?")
            dm_link(bob, "alice, carol").click()
            expect(bob.message("lunch at noon?")).to_be_visible()
            expect(seen(alice)).to_have_text("Seen by bob")
            carol.button("Show rooms and people").click()
            dm_link(carol, "alice, bob").click()
            expect(carol.message("lunch at noon?")).to_be_visible()
            expect(seen(alice)).to_have_text(re.compile(r"^Seen by (bob, carol|carol, bob)$"))
            assert violations(carol) == []
            # the same people again: the same conversation, not a second one
            carol.button("Show rooms and people").click()
            carol.button("New direct message").click()
            picker = carol.page.get_by_role("dialog", name="New direct message")
            picker.get_by_role("checkbox", name="Add alice to a group conversation").check()
            picker.get_by_role("checkbox", name="Add bob to a group conversation").check()
            assert violations(carol, "#dm-picker") == []
            picker.get_by_role("button", name="Start a conversation with alice, bob").click()
            expect(carol.message("lunch at noon?")).to_be_visible()
            nav = alice.page.get_by_role("navigation", name="Rooms and people")
            expect(nav.get_by_role("link", name=re.compile("^Direct messages with"))).to_have_count(
                1
            )
            for person in (alice, bob, carol):
                person.assert_clean()

    await in_browser(scenario)
