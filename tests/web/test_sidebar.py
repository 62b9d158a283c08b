"""The sidebar in real browsers: unread counts and mention badges kept live
(and the page title), a message replayed after a resume counted once, DMs
started, hidden and brought back, the room browser, and people with online
dots, last seen and badges."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import WebSocketRoute, expect

from tests.browser import Person, call, chromium, in_browser, shot, until
from tests.helpers import User
from tests.web.conftest import Served
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


async def test_unread_counts_and_mentions_stay_live(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, _ = await two_people(node)
    random = await node.mesh.create_room(alice_user, "random")
    await node.mesh.join(bob_user, random["roomId"])

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            bob = signed_in(browser, node.url, bob_user)
            expect(bob.heading("#Town Square")).to_be_visible()
            alice.open_room("random")
            alice.send("anyone?")
            expect(bob.room_link("random")).to_have_accessible_name("random, 1 unread message")
            alice.send("@bob are you there")
            link = bob.room_link("random")
            expect(link).to_have_accessible_name("random, 2 unread messages, 1 mention")
            expect(bob.page).to_have_title("(2) #Town Square · Test Mesh")
            # a message in the room bob is looking at is read at once
            alice.open_room("Town Square")
            alice.send("in the square")
            expect(bob.message("in the square")).to_be_visible()
            expect(bob.room_link("Town Square")).to_have_accessible_name("Town Square")
            shot(bob.page, "unread")

            # opening the room reads it, here and on the node (a reload keeps it)
            link.click()
            expect(bob.heading("#random")).to_be_visible()
            expect(bob.room_link("random")).to_have_accessible_name("random")
            expect(bob.page).to_have_title("#random · Test Mesh")
            bob.page.reload()
            expect(bob.heading("#random")).to_be_visible()
            expect(bob.room_link("random")).to_have_accessible_name("random")
            expect(bob.room_link("Town Square")).to_have_accessible_name("Town Square")

            # bob's other device follows what the first one read
            other_tab = signed_in(browser, node.url, bob_user)
            expect(other_tab.heading("#Town Square")).to_be_visible()
            bob.open_room("Town Square")
            alice.open_room("random")
            alice.send("one more")
            for tab in (bob, other_tab):
                expect(tab.room_link("random")).to_have_accessible_name("random, 1 unread message")
            bob.open_room("random")
            expect(bob.message("one more")).to_be_visible()
            expect(other_tab.room_link("random")).to_have_accessible_name("random")
            for person in (alice, bob, other_tab):
                person.assert_clean()

    await in_browser(scenario)


async def test_what_was_seen_stays_read_when_the_person_moves_on_at_once(
    browser_ready: None, serve_node: Any
) -> None:
    """Marks go out at most once a second. Messages seen within that second
    are marked when the person leaves the room, and the node's answer to the
    earlier mark (which counts them as unread) does not bring them back."""
    node: Served = await serve_node()
    alice_user, bob_user, square = await two_people(node)
    random = await node.mesh.create_room(alice_user, "random")
    await node.mesh.join(bob_user, random["roomId"])

    async def burst() -> None:
        for i in range(6):
            await node.mesh.send(alice_user, square, f"burst {i}")

    async def unread_on_the_node() -> int:
        r = await node.mesh.http.get("/api/status", headers=bob_user.headers)
        assert r.status_code == 200, r.text
        return sum(room["unread"] for room in r.json()["rooms"] if room["roomId"] == square)

    def scenario() -> None:
        with chromium() as browser:
            bob = Person(browser, node.url)
            #: the ``room_read`` events of Town Square the page was given
            reads: list[dict[str, Any]] = []

            def record(payload: str | bytes) -> None:
                frame = json.loads(payload)
                if frame.get("type") == "room_read" and frame.get("roomId") == square:
                    reads.append(frame)

            bob.page.on("websocket", lambda ws: ws.on("framereceived", record))
            bob.open()
            bob.sign_in(bob_user.name)
            expect(bob.heading("#Town Square")).to_be_visible()
            call(burst)
            expect(bob.message("burst 5")).to_be_visible()
            bob.open_room("random")
            # the node hears of everything bob saw ...
            until(bob, lambda: call(unread_on_the_node) == 0)
            # ... and the page, given the answer to that last mark (after the
            # answers to every earlier one), still counts nothing
            until(bob, lambda: any(frame["unread"] == 0 for frame in reads))
            # the node answers marks in order: the last answer is the last mark's
            assert reads[-1]["unread"] == 0, reads
            expect(bob.room_link("Town Square")).to_have_accessible_name("Town Square")
            expect(bob.page).to_have_title("#random · Test Mesh")
            bob.page.reload()
            expect(bob.heading("#random")).to_be_visible()
            expect(bob.room_link("Town Square")).to_have_accessible_name("Town Square")
            bob.assert_clean()

    await in_browser(scenario)


class _Link:
    """The page's ``/ws`` through Playwright: the test cuts it (both ends),
    keeps it down, and holds the node's ``message`` frames for a while (a
    slow catch-up), handing them on in order when told."""

    def __init__(self, person: Person) -> None:
        self.down = False
        self.holding = False
        self.held: list[tuple[WebSocketRoute, str | bytes]] = []
        self.open: list[tuple[WebSocketRoute, WebSocketRoute]] = []
        person.context.route_web_socket(re.compile(r"/ws$"), self._route)

    def _route(self, ws: WebSocketRoute) -> None:
        if self.down:
            ws.close(code=1011, reason="test: offline")
            return
        server = ws.connect_to_server()
        pair = (ws, server)

        def to_page(frame: str | bytes) -> None:
            if pair not in self.open:
                return  # cut: what the node still sent is lost with it
            if self.holding and json.loads(frame).get("type") == "message":
                self.held.append((ws, frame))
            else:
                ws.send(frame)

        server.on_message(to_page)
        self.open.append(pair)

    def cut(self) -> None:
        self.down = True
        for ws, server in self.open:
            ws.close(code=1011, reason="test: dropped")
            server.close(code=1001, reason="test: dropped")
        self.open.clear()

    def release(self) -> None:
        self.holding = False
        for ws, frame in self.held:
            ws.send(frame)
        self.held.clear()


async def test_a_message_replayed_after_the_status_counted_it_is_counted_once(
    browser_ready: None, serve_node: Any
) -> None:
    """On a resume the page reads ``GET /api/status`` (which counts what it
    missed) while the node replays the missed messages on the socket. When
    the status is applied first, the replayed messages are ones it counted
    already: ``Store.countUnread`` (js/state.js) must not count them again.
    The node's replay is held back until the status shows, then handed on."""
    node: Served = await serve_node()
    alice_user, bob_user, square = await two_people(node)
    random = await node.mesh.create_room(alice_user, "random")
    await node.mesh.join(bob_user, random["roomId"])

    async def post(text: str, room_id: str = random["roomId"]) -> None:
        await node.mesh.send(alice_user, room_id, text)

    def scenario() -> None:
        with chromium() as browser:
            bob = Person(browser, node.url)
            link = _Link(bob)
            bob.open()
            bob.sign_in(bob_user.name)
            expect(bob.heading("#Town Square")).to_be_visible()
            # a message the page is given: it resumes after it (``since``)
            call(post, "hello", square)
            expect(bob.message("hello")).to_be_visible()
            expect(bob.room_link("random")).to_have_accessible_name("random")
            link.cut()
            expect(bob.page.locator("#connection")).to_contain_text("Connection lost")
            for text in ("missed one", "@bob missed two", "missed three"):
                call(post, text)
            link.down = False
            link.holding = True
            bob.button("Reconnect now").click()
            # the status, read on the resume, counts the three
            expect(bob.room_link("random")).to_have_accessible_name(
                "random, 3 unread messages, 1 mention"
            )
            until(bob, lambda: len(link.held) == 3)  # the node's replay of them
            link.release()
            # a live message after the replay: the count is exact
            call(post, "@bob live")
            expect(bob.room_link("random")).to_have_accessible_name(
                "random, 4 unread messages, 2 mentions"
            )
            expect(bob.page).to_have_title("(4) #Town Square · Test Mesh")
            bob.assert_clean()

    await in_browser(scenario)


async def test_direct_messages_rooms_and_people(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, _ = await two_people(node)
    await node.mesh.register("carol")
    await node.mesh.create_room(alice_user, "alices-room")
    r = await node.mesh.http.post(
        "/api/agents/bootstrap", json={"name": "helper", "type": "nanoclaw"}
    )
    assert r.status_code == 201, r.text

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            bob = signed_in(browser, node.url, bob_user)
            people = alice.page.get_by_role("navigation", name="Rooms and people").get_by_role(
                "region", name="People"
            )

            # people: online dots, last seen, bot badges
            bob_row = people.get_by_role("listitem").filter(has_text=re.compile(r"^bob"))
            expect(bob_row.get_by_role("img", name="online")).to_be_visible()
            carol_row = people.get_by_role("listitem").filter(has_text=re.compile(r"^carol"))
            expect(carol_row.get_by_role("img", name="offline")).to_be_visible()
            expect(carol_row).to_contain_text("not seen yet")
            helper_row = people.get_by_role("listitem").filter(has_text=re.compile(r"^helper"))
            expect(helper_row.get_by_text("bot", exact=True)).to_be_visible()
            shot(alice.page, "people")

            # a DM from the people list; bob sees it arrive live
            alice.button("Send bob a direct message").click()
            expect(alice.heading("Direct messages with bob")).to_be_visible()
            alice.send("just between us")
            dm_link = bob.page.get_by_role("link", name=re.compile("^Direct messages with alice"))
            expect(dm_link).to_have_accessible_name("Direct messages with alice, 1 unread message")
            dm_link.click()
            expect(bob.message("just between us")).to_be_visible()
            # hide it; a new message brings it back
            bob.button("Hide conversation with alice").click()
            expect(dm_link).to_have_count(0)
            alice.send("still there?")
            expect(dm_link).to_have_accessible_name("Direct messages with alice, 1 unread message")
            # a DM from the picker
            bob.button("New direct message").click()
            picker = bob.page.get_by_role("dialog", name="New direct message")
            picker.get_by_role("searchbox", name="Find someone").fill("car")
            picker.get_by_role("button", name="Message carol").click()
            expect(bob.heading("Direct messages with carol")).to_be_visible()

            # the room browser: create, join, leave, delete where allowed
            bob.button("Browse rooms").click()
            browser_dialog = bob.page.get_by_role("dialog", name="Rooms")
            expect(browser_dialog.get_by_role("button", name="Join alices-room")).to_be_visible()
            # a room of alice's: bob may not delete it; the default room nobody deletes
            expect(browser_dialog.get_by_role("button", name="Delete alices-room")).to_have_count(0)
            expect(browser_dialog.get_by_role("button", name="Delete Town Square")).to_have_count(0)
            browser_dialog.get_by_role("textbox", name="Room name").fill("bobs-room")
            browser_dialog.get_by_role("textbox", name="Description (optional)").fill(
                "bob's corner"
            )
            browser_dialog.get_by_role("button", name="Create room").click()
            expect(bob.heading("#bobs-room")).to_be_visible()
            expect(bob.room_link("bobs-room")).to_be_visible()
            alice.button("Browse rooms").click()
            alice_dialog = alice.page.get_by_role("dialog", name="Rooms")
            expect(alice_dialog.get_by_text("bob's corner")).to_be_visible()
            shot(alice.page, "room-browser")
            alice_dialog.get_by_role("button", name="Join bobs-room").click()
            expect(alice.heading("#bobs-room")).to_be_visible()
            alice.button("Leave room").click()
            expect(alice.page.get_by_text("You left bobs-room.")).to_be_visible()
            expect(alice.room_link("bobs-room")).to_have_count(0)
            # bob deletes his room; alice, who is in it again, sees it go
            alice.button("Browse rooms").click()
            alice_dialog.get_by_role("button", name="Join bobs-room").click()
            expect(alice.heading("#bobs-room")).to_be_visible()
            bob.button("Browse rooms").click()
            browser_dialog.get_by_role("button", name="Delete bobs-room").click()
            confirm = bob.page.get_by_role("dialog", name="Delete bobs-room?")
            confirm.get_by_role("button", name="Delete room").click()
            expect(browser_dialog.get_by_role("button", name="Join alices-room")).to_be_visible()
            expect(browser_dialog.get_by_text("bobs-room")).to_have_count(0)
            browser_dialog.get_by_role("button", name="Close rooms").click()
            expect(alice.page.get_by_text("The room bobs-room was deleted.")).to_be_visible()
            expect(alice.room_link("bobs-room")).to_have_count(0)

            # bob leaves: alice sees him go offline, with when he was last seen
            bob.close()
            expect(bob_row.get_by_role("img", name="offline")).to_be_visible()
            expect(bob_row).to_contain_text("last seen just now")
            alice.assert_clean()

    await in_browser(scenario)


async def test_a_person_without_rooms_is_offered_the_default_room(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    await node.mesh.setup("alice")
    dave: User = await node.mesh.register("dave")

    def scenario() -> None:
        with chromium() as browser:
            person = Person(browser, node.url)
            person.open()
            person.sign_in(dave.name)
            expect(person.heading("Welcome to Test Mesh, dave")).to_be_visible()
            expect(person.page.get_by_text("You are in no room yet.")).to_be_visible()
            person.join_default_room()
            expect(person.room_link("Town Square")).to_have_attribute("aria-current", "page")
            person.assert_clean()

    await in_browser(scenario)
