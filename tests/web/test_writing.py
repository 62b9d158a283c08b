"""Writing in the web client (issue 32): drafts that survive, Up to edit
one's last message, the keyboard in the reaction picker and the edit form."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Route, expect

from tests.browser import Person, call, chromium, in_browser, shot, until
from tests.web.conftest import Served
from tests.web.test_chat import SEND, signed_in, two_people
from tests.web.test_tasks_ui import _drop, _droppable

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


def _drafts(person: Person) -> str | None:
    stored: str | None = person.page.evaluate(
        """() => Object.keys(localStorage).filter((k) => k.startsWith('mesh.drafts.'))
                   .map((k) => localStorage.getItem(k)).join('') || null"""
    )
    return stored


async def test_drafts_survive_switching_rooms_and_a_reload_and_go_on_sign_out(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, _bob_user, room_id = await two_people(node)
    await node.mesh.create_room(alice_user, "plans")
    root = await node.mesh.send(alice_user, room_id, "a thread starts here")

    def open_thread(alice: Person) -> None:
        root = alice.message("a thread starts here").first
        root.hover()
        root.get_by_role("button", name="Reply in thread").click()

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            # bounded: 50 drafts at most (the oldest go), 40,000 characters each
            kept = alice.page.evaluate(
                """async () => {
                  const { Drafts } = await import('/web/js/composer.js');
                  const drafts = new Drafts();
                  drafts.attach('bounds-test');
                  for (let i = 0; i < 60; i++) {
                    drafts.set(`room-${i}`, 'x'.repeat(50000));
                    drafts.all[`room-${i}`][1] = i;
                  }
                  const all = drafts.all;
                  drafts.save();
                  const stored = localStorage.getItem('mesh.drafts.bounds-test') !== null;
                  drafts.clear(true);
                  return [Object.keys(all).length, 'room-9' in all, 'room-10' in all,
                          all['room-59'][0].length, stored,
                          localStorage.getItem('mesh.drafts.bounds-test')];
                }"""
            )
            assert kept == [50, False, True, 40000, True, None]
            alice.composer.fill("half a thought in the square")
            alice.open_room("plans")
            expect(alice.composer).to_have_value("")
            alice.composer.fill("a plan not sent yet")
            alice.open_room("Town Square")
            expect(alice.composer).to_have_value("half a thought in the square")
            # the thread's box keeps its own draft
            open_thread(alice)
            thread = alice.page.get_by_role("complementary", name="Thread")
            box = thread.get_by_role("textbox", name="Reply in thread")
            expect(box).to_be_focused()
            box.fill("a reply in the making")
            alice.button("Close thread").click()
            expect(thread).to_be_hidden()
            # a reload keeps all three
            alice.page.reload()
            expect(alice.composer).to_have_value("half a thought in the square")
            alice.open_room("plans")
            expect(alice.composer).to_have_value("a plan not sent yet")
            alice.open_room("Town Square")
            open_thread(alice)
            expect(box).to_have_value("a reply in the making")
            # sent: gone from the drafts
            box.press("Enter")
            expect(box).to_have_value("")
            alice.page.reload()
            open_thread(alice)
            expect(box).to_have_value("")
            assert "a reply in the making" not in (_drafts(alice) or "")
            # signing out forgets them (a shared computer keeps nothing)
            assert "a plan not sent yet" in (_drafts(alice) or "")
            alice.button("Sign out").click()
            alice.sign_in(alice_user.name)
            expect(alice.composer).to_have_value("")
            assert _drafts(alice) in (None, "{}")
            alice.assert_clean()

    assert root["messageId"]
    await in_browser(scenario)


async def test_up_in_an_empty_box_edits_ones_last_message(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            alice.send("my first word")
            mine = alice.send("my last word")
            expect(mine).not_to_contain_text("sending…")
            call(node.mesh.send, bob_user, room_id, "bob speaks after")
            expect(alice.message("bob speaks after")).to_be_visible()
            keyboard = alice.page.keyboard
            alice.composer.focus()
            # Up with text in the box moves the caret, as always
            alice.composer.fill("typing")
            keyboard.press("ArrowUp")
            expect(alice.composer).to_be_focused()
            alice.composer.fill("")
            keyboard.press("ArrowUp")
            edit = alice.timeline.get_by_role("textbox", name="Edit message")
            expect(edit).to_be_focused()
            expect(edit).to_have_value("my last word")
            # Escape cancels and gives the box back
            keyboard.press("Escape")
            expect(edit).to_have_count(0)
            expect(alice.composer).to_be_focused()
            keyboard.press("ArrowUp")
            expect(edit).to_be_focused()
            keyboard.press("End")
            keyboard.type(", edited")
            keyboard.press("Enter")
            expect(alice.message("my last word, edited")).to_contain_text("(edited)")
            expect(alice.composer).to_be_focused()
            alice.assert_clean()

    await in_browser(scenario)


async def test_arrows_close_the_reaction_picker_and_escape_cancels_an_edit_from_its_buttons(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, _bob_user, room_id = await two_people(node)
    await node.mesh.send(alice_user, room_id, "the older one")
    await node.mesh.send(alice_user, room_id, "the newer one")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            keyboard = alice.page.keyboard
            older = alice.message("the older one")
            newer = alice.message("the newer one")
            expect(newer).to_be_visible()
            newer.focus()
            keyboard.press("Enter")
            expect(newer.get_by_role("button", name="Add reaction")).to_be_focused()
            keyboard.press("Enter")
            picker = alice.page.get_by_role("group", name="Choose a reaction")
            expect(picker).to_have_count(1)
            expect(newer.get_by_role("button", name="React with 👍")).to_be_focused()
            # leaving the message by arrow closes its picker
            keyboard.press("ArrowUp")
            expect(older).to_be_focused()
            expect(picker).to_have_count(0)
            # Escape on the edit form's buttons cancels the edit
            keyboard.press("Enter")
            older.get_by_role("button", name="Edit message").click()
            edit = alice.timeline.get_by_role("textbox", name="Edit message")
            expect(edit).to_be_focused()
            edit.fill("changed but not kept")
            alice.timeline.get_by_role("button", name="Cancel").focus()
            keyboard.press("Escape")
            expect(edit).to_have_count(0)
            expect(older).to_contain_text("the older one")
            expect(older.get_by_role("button", name="Edit message")).to_be_focused()
            keyboard.press("Enter")
            expect(edit).to_be_focused()
            alice.timeline.get_by_role("button", name="Save").focus()
            keyboard.press("Escape")
            expect(edit).to_have_count(0)
            alice.assert_clean()

    await in_browser(scenario)


def _shows(person: Person, text: str) -> Any:
    return person.page.get_by_role("dialog").filter(has_text=text)


async def test_pin_and_unpin_with_a_live_pinned_panel(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    for i in range(40):
        await node.mesh.send(bob_user, room_id, f"filler {i}")
    await node.mesh.send(bob_user, room_id, "the plan is final")
    announcements = await node.mesh.create_room(alice_user, "news")
    await node.mesh.join(bob_user, announcements["roomId"])
    r = await node.mesh.http.post(
        f"/api/rooms/{announcements['roomId']}/permissions/preset",
        json={"preset": "announcements"},
        headers=alice_user.headers,
    )
    assert r.status_code == 200, r.text
    await node.mesh.send(alice_user, announcements["roomId"], "news of the day")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            bob = signed_in(browser, node.url, bob_user)
            plan = alice.message("the plan is final")
            plan.hover()
            plan.get_by_role("button", name="Pin message").click()
            expect(plan.get_by_role("button", name="Unpin message")).to_have_count(1)
            # bob sees it live: the header's count, the message's action
            expect(bob.button("Pinned (1)")).to_be_visible()
            expect(
                bob.message("the plan is final").get_by_role("button", name="Unpin message")
            ).to_have_count(1)
            # the panel: the pin, who pinned it, a jump to it
            for i in range(30):
                bob.send(f"later {i}")
            expect(bob.message("later 29")).not_to_contain_text("sending…")
            bob.button("Pinned (1)").click()
            panel = bob.page.get_by_role("dialog", name="Pinned messages")
            expect(panel).to_be_visible()
            pin = panel.get_by_role("listitem").filter(has_text="the plan is final")
            expect(pin).to_contain_text("Pinned by alice")
            shot(bob.page, "pins")
            # alice unpins and pins again: bob's open panel follows
            plan.hover()
            plan.get_by_role("button", name="Unpin message").click()
            expect(pin).to_have_count(0)
            expect(panel).to_contain_text("Nothing is pinned here yet")
            plan.hover()
            plan.get_by_role("button", name="Pin message").click()
            expect(pin).to_have_count(1)
            pin.get_by_role("button", name="Jump to message").click()
            expect(panel).to_be_hidden()
            target = bob.message("the plan is final")
            expect(target).to_have_attribute("aria-current", "true")
            expect(target).to_be_in_viewport()
            # unpin from the panel
            bob.button("Pinned (1)").click()
            pin.get_by_role("button", name="Unpin").click()
            expect(pin).to_have_count(0)
            expect(alice.button("Pinned")).to_be_visible()
            bob.page.keyboard.press("Escape")
            expect(panel).to_be_hidden()
            # where bob may not post (announcements), no pinning either
            bob.open_room("news")
            news = bob.message("news of the day")
            expect(news).to_be_visible()
            expect(bob.button("Pinned")).to_be_visible()
            expect(news.get_by_role("button", name="Pin message")).to_have_count(0)
            alice.open_room("news")
            expect(
                alice.message("news of the day").get_by_role("button", name="Pin message")
            ).to_have_count(1)
            alice.assert_clean()
            bob.assert_clean()

    await in_browser(scenario, timeout=180)


async def test_a_room_description_edited_by_who_may_and_seen_live(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, _room_id = await two_people(node)
    carol_room = await node.mesh.create_room(bob_user, "bobs-room", description="bob's corner")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            bob = signed_in(browser, node.url, bob_user)
            # bob (a member, not the creator nor an admin) cannot change it
            expect(bob.heading("#Town Square")).to_be_visible()
            expect(bob.button("Pinned")).to_be_visible()
            expect(bob.button("Edit description")).to_be_hidden()
            # alice (the owner) can
            alice.button("Edit description").click()
            dialog = alice.page.get_by_role("dialog", name="Description of #Town Square")
            box = dialog.get_by_role("textbox", name="Description")
            expect(box).to_be_focused()
            box.fill("where everyone meets")
            shot(alice.page, "room-description")
            dialog.get_by_role("button", name="Save").click()
            expect(dialog).to_have_count(0)
            meta = alice.page.locator("#room-meta")
            expect(meta).to_contain_text("where everyone meets")
            # bob sees it change live
            expect(bob.page.locator("#room-meta")).to_contain_text("where everyone meets")
            # bob's own room: he may
            bob.open_room("bobs-room")
            bob.button("Edit description").click()
            box = bob.page.get_by_role("dialog").get_by_role("textbox", name="Description")
            expect(box).to_have_value("bob's corner")
            bob.page.keyboard.press("Escape")
            expect(box).to_have_count(0)
            alice.assert_clean()
            bob.assert_clean()

    assert carol_room["roomId"]
    await in_browser(scenario, timeout=120)


async def test_account_settings_name_password_and_sessions(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    _alice_user, bob_user, _room_id = await two_people(node)

    async def get_me() -> Any:
        return await node.mesh.http.get("/api/auth/me", headers=bob_user.headers)

    async def log_in(password: str) -> Any:
        return await node.mesh.http.post(
            "/api/auth/login", json={"name": "bob", "password": password}
        )

    def scenario() -> None:
        with chromium() as browser:
            bob = signed_in(browser, node.url, bob_user)
            other = signed_in(browser, node.url, bob_user)  # a second device
            said = bob.send("from the builder")
            expect(said).not_to_contain_text("sending…")
            bob.button("Settings").click()
            dialog = bob.page.get_by_role("dialog", name="Settings")
            # display name
            name = dialog.get_by_role("textbox", name="Display name")
            name.fill("Bob Builder")
            dialog.get_by_role("button", name="Save display name").click()
            expect(dialog).to_contain_text("Display name saved.")
            me = call(get_me)
            assert me.json()["displayName"] == "Bob Builder"
            # shown beside the name on his messages (the one before too)
            bob.page.keyboard.press("Escape")
            expect(dialog).to_be_hidden()
            expect(said.get_by_role("button", name="Bob Builder")).to_be_visible()
            expect(said).to_contain_text(f"@{bob_user.name}")
            bob.button("Settings").click()
            # read receipts, shared by default, turned off and back on
            receipts = dialog.get_by_role("checkbox", name="Share read receipts")
            expect(receipts).to_be_checked()
            receipts.uncheck()
            until(bob, lambda: call(get_me).json()["readReceipts"] is False)
            receipts.check()
            until(bob, lambda: call(get_me).json()["readReceipts"] is True)
            # sessions: the API's token, this browser, the other one
            sessions = dialog.get_by_role("list", name="Signed-in sessions")
            expect(sessions.get_by_role("listitem")).to_have_count(3)
            expect(sessions.get_by_role("listitem").first).to_contain_text("This device")
            expect(sessions).to_contain_text("Chrome on Linux")
            shot(bob.page, "account-settings")
            # one signed out by hand, then everywhere else
            sessions.get_by_role("listitem").nth(1).get_by_role("button").click()
            expect(sessions.get_by_role("listitem")).to_have_count(2)
            dialog.get_by_role("button", name="Sign out everywhere else").click()
            expect(dialog).to_contain_text("Every other session is signed out.")
            expect(sessions.get_by_role("listitem")).to_have_count(1)
            expect(other.heading("Sign in")).to_be_visible()
            r = call(get_me)
            assert r.status_code == 401
            # the password: a wrong one is refused, the right one changes it
            dialog.get_by_label("Current password").fill("not it at all")
            dialog.get_by_label("New password").fill("a brand new secret phrase")
            dialog.get_by_role("button", name="Change password").click()
            expect(dialog).to_contain_text("Not changed: the current password is not right")
            other.sign_in(bob_user.name)  # (a session for the change to end)
            dialog.get_by_label("Current password").fill("correct horse battery")
            dialog.get_by_role("button", name="Change password").click()
            expect(dialog).to_contain_text("Password changed. 1 other session was signed out.")
            expect(other.heading("Sign in")).to_be_visible()
            login = call(log_in, "a brand new secret phrase")
            assert login.status_code == 200, login.text
            # this device's own "Sign out"
            sessions.get_by_role("button", name="Sign out on this device").click()
            expect(bob.heading("Sign in")).to_be_visible()
            bob.assert_clean(console=False)  # the wrong password's 403 is logged

    await in_browser(scenario, timeout=120)


async def test_the_reaction_picker_searches_and_keeps_recent_ones_first(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    await node.mesh.send(bob_user, room_id, "pizza tonight?")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            keyboard = alice.page.keyboard
            question = alice.message("pizza tonight?")
            question.focus()
            keyboard.press("Enter")
            keyboard.press("Enter")  # Add reaction: the quick ones
            question.get_by_role("button", name="More reactions").click()
            picker = alice.page.get_by_role("dialog", name="Add a reaction")
            search = picker.get_by_role("combobox", name="Search reactions")
            expect(search).to_be_focused()
            search.fill("pi")
            expect(picker.get_by_role("option", name="slice of pizza")).to_be_visible()
            shot(alice.page, "reaction-picker")
            search.fill("pizza")
            options = picker.get_by_role("option")
            expect(options).to_have_count(1)
            expect(picker.get_by_role("option", name="slice of pizza")).to_have_attribute(
                "aria-selected", "true"
            )
            keyboard.press("Enter")
            expect(picker).to_be_hidden()
            expect(question.get_by_role("button", name="🍕 1: alice")).to_be_visible()
            expect(question.get_by_role("button", name="Add reaction")).to_be_focused()
            expect(alice.page.get_by_role("group", name="Choose a reaction")).to_have_count(0)
            # again: the recent one comes first; arrows move, Escape closes
            keyboard.press("Enter")
            question.get_by_role("button", name="More reactions").click()
            expect(options.first).to_have_accessible_name("slice of pizza")
            keyboard.press("ArrowRight")
            expect(options.nth(1)).to_have_attribute("aria-selected", "true")
            search.fill("heart eyes")
            expect(options.first).to_have_attribute("aria-selected", "true")
            keyboard.press("Escape")
            expect(picker).to_be_hidden()
            expect(question.get_by_role("button", name="Add reaction")).to_be_focused()
            alice.assert_clean()

    await in_browser(scenario, timeout=120)


async def test_a_refused_message_given_back_is_kept_as_a_draft(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, _bob_user, _room_id = await two_people(node)
    text = "too long " * 2000  # over the 16 KB limit

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            alice.composer.fill(text)
            alice.composer.press("Enter")
            form = alice.page.get_by_role("form", name="Send a message")
            expect(form.get_by_role("alert")).to_contain_text("Not sent")
            expect(alice.composer).to_have_value(text.rstrip())
            alice.page.reload()
            expect(alice.composer).to_have_value(text.rstrip())
            alice.assert_clean(console=False)  # the refused send (413) is logged

    await in_browser(scenario)


async def test_signing_out_leaves_no_unsent_message_in_the_browser(
    browser_ready: None, serve_node: Any
) -> None:
    """A deliberate sign-out drops the unsent messages from the browser's
    storage, even though the node's ``token_revoked`` on the WebSocket
    arrives while the page is still signing out (that second, ended-session
    sign-out kept them for the next sign-in)."""
    node: Served = await serve_node()
    alice_user, _bob_user, _room_id = await two_people(node)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            held: list[Route] = []
            alice.page.route(
                SEND,
                lambda route: (
                    held.append(route) if route.request.method == "POST" else route.continue_()
                ),
            )
            expect(alice.send("never to be sent")).to_contain_text("sending…")
            until(alice, lambda: bool(held))
            assert "never to be sent" in (_outbox(alice) or "")
            alice.button("Sign out").click()
            expect(alice.heading("Sign in")).to_be_visible()
            assert "never to be sent" not in (_outbox(alice) or "")
            for route in held:
                route.abort()

    await in_browser(scenario)


def _outbox(person: Person) -> str | None:
    stored: str | None = person.page.evaluate(
        """() => Object.keys(localStorage).filter((k) => k.startsWith('mesh.outbox.'))
                   .map((k) => localStorage.getItem(k)).join('') || null"""
    )
    return stored


async def test_pins_made_while_offline_show_after_the_resume(
    browser_ready: None, serve_node: Any
) -> None:
    """A gap in the live connection: the pins made meanwhile are read again
    (the header's count and the message's Pin/Unpin), not left stale."""
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    message = await node.mesh.send(bob_user, room_id, "pin me while she is away")

    async def pin() -> None:
        r = await node.mesh.http.put(
            f"/api/rooms/{room_id}/pins/{message['messageId']}", headers=bob_user.headers
        )
        assert r.status_code == 200, r.text

    def scenario() -> None:
        with chromium() as browser:
            alice = Person(browser, node.url)
            ws = _droppable(alice)
            alice.open()
            alice.sign_in(alice_user.name)
            said = alice.message("pin me while she is away")
            expect(alice.button("Pinned")).to_be_visible()
            said.hover()
            expect(said.get_by_role("button", name="Pin message")).to_have_count(1)
            _drop(ws)
            expect(alice.page.locator("#connection")).to_contain_text("Connection lost")
            call(pin)
            ws["blocked"] = False
            alice.button("Reconnect now").click()
            expect(alice.page.locator("#connection")).to_have_text("")
            expect(alice.button("Pinned (1)")).to_be_visible()
            expect(said.get_by_role("button", name="Unpin message")).to_have_count(1)

    await in_browser(scenario)
