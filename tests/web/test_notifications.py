"""Browser notifications (``js/notify.js``) in a real browser over a served
node: asked for only once the person turns them on in Settings (kept in
localStorage), then shown while the tab is hidden for mentions, direct
messages and replies in threads the person took part in; never for other
messages, nor while the tab is seen, nor for a muted room unless mentioned.
A click on one opens the message.

The browser's boundary is replaced by an init script: it records each
``new Notification(...)`` and each permission request (the permission is
"default" until the page asks; the answer is the browser's, granted through
the Playwright context), and says the tab is hidden or
visible when the test asks, with a ``visibilitychange`` event, as a browser
does when one switches tabs."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser import Person, call, chromium, in_browser, shot
from tests.helpers import User
from tests.web.conftest import Served
from tests.web.test_chat import two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]

BOUNDARY = """
(() => {
  window.__notes = [];
  window.__asked = 0;
  const Real = window.Notification;
  class Recorded extends EventTarget {
    constructor(title, options = {}) {
      super();
      this.title = title;
      this.body = options.body;
      window.__notes.push(this);
    }
    close() {}
    // "default" (never asked) until the page asks: then the browser's answer
    // (the test granted it through the context)
    static get permission() { return window.__asked ? Real.permission : "default"; }
    static requestPermission() { window.__asked += 1; return Real.requestPermission(); }
  }
  window.Notification = Recorded;
  let hidden = false;
  Object.defineProperty(Document.prototype, "visibilityState", {
    configurable: true, get: () => (hidden ? "hidden" : "visible") });
  Object.defineProperty(Document.prototype, "hidden", { configurable: true, get: () => hidden });
  window.__setHidden = (value) => {
    hidden = value;
    document.dispatchEvent(new Event("visibilitychange"));
  };
})();
"""


def notes(person: Person) -> list[dict[str, str]]:
    shown: list[dict[str, str]] = person.page.evaluate(
        "() => window.__notes.map((n) => ({title: n.title, body: n.body}))"
    )
    return shown


def hidden(person: Person, value: bool) -> None:
    person.page.evaluate("(value) => window.__setHidden(value)", value)


async def test_notifications_when_hidden_for_what_needs_you(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, town = await two_people(node)
    http = node.mesh.http
    r = await http.post(
        "/api/dms", json={"participantId": alice_user.participant_id}, headers=bob_user.headers
    )
    assert r.status_code in (200, 201), r.text
    dm = r.json()["roomId"]
    carol = await node.mesh.register("carol")
    r = await http.post(
        "/api/dms",
        json={"participantIds": [alice_user.participant_id, carol.participant_id]},
        headers=bob_user.headers,
    )
    assert r.status_code == 201, r.text
    group = r.json()["roomId"]
    mine = await node.mesh.send(alice_user, town, "Shall we move the standup?")
    theirs = await node.mesh.send(bob_user, town, "Lunch at noon?")

    async def bob_says(room_id: str, content: str, thread: str | None = None) -> str:
        extra = {"threadId": thread} if thread else {}
        return str((await node.mesh.send(bob_user, room_id, content, **extra))["messageId"])

    async def mute(user: User, room_id: str, muted: bool) -> None:
        r = await http.put(
            f"/api/rooms/{room_id}/mute", json={"muted": muted}, headers=user.headers
        )
        assert r.status_code == 200, r.text

    def scenario() -> None:
        with chromium() as browser:
            alice = Person(browser, node.url)
            alice.context.grant_permissions(["notifications"], origin=node.url)
            alice.context.add_init_script(BOUNDARY)
            alice.open()
            alice.sign_in(alice_user.name)
            expect(alice.heading("#Town Square")).to_be_visible()
            hidden(alice, True)
            call(bob_says, town, "@alice before you turned them on")
            expect(alice.room_link("Town Square")).to_have_accessible_name(re.compile("1 mention"))
            hidden(alice, False)
            assert notes(alice) == []
            assert alice.page.evaluate("() => window.__asked") == 0

            # Settings: turning them on asks the browser, once
            alice.page.get_by_role("button", name="Settings").click()
            dialog = alice.page.get_by_role("dialog", name="Settings")
            toggle = dialog.get_by_role("checkbox", name="Notify me in this browser")
            expect(toggle).not_to_be_checked()
            toggle.check()
            # (the dialog's account settings have statuses of their own)
            status = dialog.get_by_role("group", name="Notifications").get_by_role("status")
            expect(status).to_have_text("Notifications are on.")
            assert alice.page.evaluate("() => window.__asked") == 1
            shot(alice.page, "notifications-settings")
            dialog.get_by_role("button", name="Close settings").click()

            # seen: nothing; hidden: a mention, a DM, a reply in her thread
            mention = alice.message("@alice while you look")
            call(bob_says, town, "@alice while you look")
            expect(mention).to_be_visible()
            hidden(alice, True)
            call(bob_says, town, "Just chatting, nothing for alice")
            call(bob_says, town, "A reply in bob's own thread", theirs["messageId"])
            call(bob_says, town, "@alice the deploy is done")
            call(bob_says, dm, "Got a minute?")
            reply = call(bob_says, town, "Tuesday works", mine["messageId"])
            call(bob_says, group, "All three of us?")
            alice.page.wait_for_function("() => window.__notes.length >= 4")
            alice.page.wait_for_timeout(300)  # nothing else on its way
            assert notes(alice) == [
                {"title": "bob mentioned you in #Town Square", "body": "@alice the deploy is done"},
                {"title": "bob (direct message)", "body": "Got a minute?"},
                {"title": "bob replied in a thread in #Town Square", "body": "Tuesday works"},
                # a group DM: named by its other members
                {"title": "bob (bob, carol)", "body": "All three of us?"},
            ]

            # a click on one opens the message
            alice.page.evaluate("() => window.__notes[2].dispatchEvent(new Event('click'))")
            hidden(alice, False)
            expect(alice.page).to_have_url(re.compile(rf"#room/{town}/message/{reply}$"))
            expect(alice.timeline.locator('article[aria-current="true"]')).to_contain_text(
                "Tuesday works"
            )
            # again, at the address the page shows already: opened again
            alice.composer.focus()
            alice.page.evaluate("() => window.__notes[2].dispatchEvent(new Event('click'))")
            expect(alice.timeline.locator('article[aria-current="true"]')).to_be_focused()

            # muted: her thread and the DM stay quiet, a mention still speaks
            call(mute, alice_user, town, True)
            call(mute, alice_user, dm, True)
            expect(alice.page.get_by_role("button", name="Mute room")).to_have_attribute(
                "aria-pressed", "true"
            )
            hidden(alice, True)
            call(bob_says, town, "Or Wednesday?", mine["messageId"])
            call(bob_says, dm, "Still there?")
            call(bob_says, town, "@alice muted, but you are mentioned")
            alice.page.wait_for_function("() => window.__notes.length >= 5")
            alice.page.wait_for_timeout(300)
            assert [n["body"] for n in notes(alice)][4:] == ["@alice muted, but you are mentioned"]

            # turned off: kept across a reload, and nothing is shown
            hidden(alice, False)
            alice.page.reload()
            expect(alice.heading("#Town Square")).to_be_visible()
            alice.page.get_by_role("button", name="Settings").click()
            expect(toggle).to_be_checked()
            toggle.uncheck()
            expect(status).to_have_text("Notifications are off.")
            alice.page.keyboard.press("Escape")
            hidden(alice, True)
            call(bob_says, town, "@alice are you there?")
            expect(alice.room_link("Town Square")).to_have_accessible_name(re.compile("mention"))
            alice.page.wait_for_timeout(300)
            assert notes(alice) == []
            alice.assert_clean()

    await in_browser(scenario)
