"""Nothing lost across a restart: two people chat in real browsers while the
node (a real ``python -m quart_mesh serve`` process) is stopped and started
again on the same port and data folder. Each page says it is reconnecting,
reconnects with ``since`` (its ``authenticate`` frame says so), sends what
was typed meanwhile, and ends with every message exactly once, in the node's
order; a room not open in the page counts what it missed exactly."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from playwright.sync_api import expect

from tests.browser import Person, call, chromium, in_browser, shot, until
from tests.e2e.test_cli_restart import ServerProcess
from tests.helpers import Mesh, User
from tests.receiver import free_port

pytestmark = pytest.mark.e2e


#: what the pages may report in the console while the node is down
DOWN_NOISE = re.compile(r"ERR_CONNECTION_REFUSED|WebSocket|status of 50\d")


# the browser part alone may take 180 s (in_browser below), over the global 120
@pytest.mark.timeout(300)
async def test_a_restart_in_the_middle_loses_and_repeats_nothing(
    browser_ready: None, tmp_path: Path, nursery: trio.Nursery
) -> None:
    port = free_port()
    data_dir = tmp_path / "mesh-data"
    process = ServerProcess(data_dir, "--port", str(port), "--log-level", "DEBUG")
    url = await process.start(nursery)
    async with httpx.AsyncClient(base_url=url, timeout=15) as http:
        mesh = Mesh(http)
        alice_user = await mesh.setup("alice")
        bob_user = await mesh.register("bob")
        room_id = (await http.get("/api/setup/status")).json()["defaultRoomId"]
        await mesh.join(bob_user, room_id)
        r = await http.post("/api/agents/bootstrap", json={"name": "ticker", "type": "nanoclaw"})
        ticker = User(r.json()["agentId"], "ticker", r.json()["token"])
        await mesh.join(ticker, room_id)
        # a second room, never opened in the pages: it only counts
        other_id = (await mesh.create_room(alice_user, "random"))["roomId"]
        for user in (bob_user, ticker):
            await mesh.join(user, other_id)

    async def stop() -> None:
        assert await process.stop() == 0

    logs: list[bytes] = []

    async def start_and_post() -> None:
        """Start the node again, and at once post from a bot: the pages are
        still waiting to reconnect, so they get these by ``since`` (in the
        open room, and in one the pages only count)."""
        nonlocal process
        logs.append(process.output)
        process = ServerProcess(data_dir, "--port", str(port), "--log-level", "DEBUG")
        assert await process.start(nursery) == url
        async with httpx.AsyncClient(base_url=url, timeout=15) as http:
            for i in range(3):
                await Mesh(http).send(ticker, room_id, f"tick {i}")
                await Mesh(http).send(ticker, other_id, f"elsewhere {i}")

    async def post_elsewhere() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=15) as http:
            await Mesh(http).send(ticker, other_id, "elsewhere, live")

    async def stored() -> list[dict[str, Any]]:
        async with httpx.AsyncClient(base_url=url, timeout=15) as http:
            return await Mesh(http).messages(alice_user, room_id, limit=200)

    def scenario() -> tuple[list[str], list[str]]:
        with chromium() as browser:
            people: dict[str, Person] = {}
            #: the ``authenticate`` frames each page sent, in order
            authenticated: dict[str, list[dict[str, Any]]] = {}
            for user in (alice_user, bob_user):
                person = Person(browser, url)
                frames = authenticated[user.name] = []

                def record(payload: str | bytes, frames: list[dict[str, Any]] = frames) -> None:
                    frame = json.loads(payload)
                    if frame.get("type") == "authenticate":
                        frames.append(frame)

                person.page.on("websocket", lambda ws, record=record: ws.on("framesent", record))
                person.open()
                person.sign_in(user.name)
                expect(person.heading("#Town Square")).to_be_visible()
                people[user.name] = person
            alice, bob = people["alice"], people["bob"]

            def both_see(text: str) -> None:
                for person in (alice, bob):
                    expect(person.message(text)).not_to_contain_text("sending…")

            for i in range(3):
                alice.send(f"alice before {i}")
                bob.send(f"bob before {i}")
            both_see("alice before 2")
            both_see("bob before 2")
            # the newest message each page has been given: where it resumes
            # (the two pages' last sends may reach the node in either order)
            last_seen = call(stored)[-1]
            assert last_seen["content"] in ("alice before 2", "bob before 2"), last_seen
            for frames in authenticated.values():
                assert len(frames) == 1, frames
                assert "since" not in frames[0], frames

            # the node stops: both pages say so, and keep what is typed
            call(stop)
            for person in (alice, bob):
                expect(
                    person.page.get_by_role("status").filter(has_text="Reconnecting")
                ).to_be_visible()
            shot(alice.page, "reconnecting")
            for i in range(2):
                alice.send(f"alice while down {i}")
                bob.send(f"bob while down {i}")
            for person in (alice, bob):
                expect(person.message("while down 1")).to_contain_text("sending…")

            call(start_and_post)
            for person in (alice, bob):
                expect(
                    person.page.get_by_role("status").filter(has_text="Reconnecting")
                ).to_have_count(0, timeout=30_000)
            both_see("alice while down 1")
            both_see("bob while down 1")
            both_see("tick 2")
            # each page resumed once, from the last message it had before the stop
            for name, frames in authenticated.items():
                assert len(frames) == 2, (name, frames)
                assert str(frames[1]["since"]) == last_seen["cursor"], (name, frames)
            # the room not open missed three messages: counted once each,
            # and a live one after the reconnect adds one
            for person in (alice, bob):
                expect(person.room_link("random")).to_have_accessible_name(
                    "random, 3 unread messages"
                )
            call(post_elsewhere)
            for person in (alice, bob):
                expect(person.room_link("random")).to_have_accessible_name(
                    "random, 4 unread messages"
                )
            for i in range(3):
                alice.send(f"alice after {i}")
                bob.send(f"bob after {i}")
            both_see("alice after 2")
            both_see("bob after 2")

            # each page shows every message once, in the node's order
            expected = [m["content"] for m in call(stored)]
            for person in (alice, bob):
                shown = (
                    person.timeline.get_by_role("article").locator(".msg-body").all_inner_texts()
                )
                assert shown == expected, (person, shown, expected)
                person.assert_clean(console=False)  # refused connections while down
                assert all(DOWN_NOISE.search(e) for e in person.console_errors), (
                    person.console_errors
                )
            tokens = [person.token() or "" for person in (alice, bob)]
            return expected, tokens

    contents, tokens = await in_browser(scenario, timeout=180)
    assert len(contents) == len(set(contents)) == 6 + 4 + 3 + 6, contents
    await stop()
    logs.append(process.output)
    for log in logs:
        assert b"Traceback" not in log, log.decode()
        # the pages' tokens never reach the node's log, even at DEBUG
        for token in tokens:
            assert token
            assert token.encode() not in log


async def test_messages_unsent_at_a_reload_are_sent_after_it_once(
    browser_ready: None, serve_node: Any
) -> None:
    from playwright.sync_api import Route

    from tests.web.conftest import Served
    from tests.web.test_chat import SEND, signed_in, two_people

    node: Served = await serve_node()
    alice_user, _, room_id = await two_people(node)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            expect(alice.heading("#Town Square")).to_be_visible()
            # one send never leaves the page; the next reaches the node, but
            # its answer is lost
            held: list[Route] = []
            alice.page.route(
                SEND,
                lambda route: (
                    held.append(route) if route.request.method == "POST" else route.continue_()
                ),
            )
            alice.send("typed before the reload")
            expect(alice.message("typed before the reload")).to_contain_text("sending…")
            until(alice, lambda: bool(held))
            held.pop().abort()  # the connection failed: it is tried again…
            until(alice, lambda: bool(held))
            route = held.pop()
            response = route.fetch()  # …and this time the node stores it
            assert response.status == 201
            route.abort()  # but the page never hears the answer
            alice.page.unroute(SEND)
            alice.page.reload()
            expect(alice.heading("#Town Square")).to_be_visible()
            shown = alice.message("typed before the reload")
            expect(shown).to_have_count(1)
            expect(shown).not_to_contain_text("sending…")
            alice.assert_clean(console=False)  # the aborted requests

    await in_browser(scenario)
    contents = [m["content"] for m in await node.mesh.messages(alice_user, room_id)]
    assert contents == ["typed before the reload"], contents
