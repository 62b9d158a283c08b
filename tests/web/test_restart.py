"""Nothing lost across a restart: two people chat in real browsers while the
node (a real ``python -m quart_mesh serve`` process) is stopped and started
again on the same port and data folder. Each page says it is reconnecting,
reconnects with ``since``, sends what was typed meanwhile, and ends with
every message exactly once, in the node's order."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from playwright.sync_api import expect

from tests.browser import Person, call, chromium, in_browser, shot
from tests.e2e.test_cli_restart import ServerProcess
from tests.helpers import Mesh, User
from tests.receiver import free_port

pytestmark = pytest.mark.e2e


async def test_a_restart_in_the_middle_loses_and_repeats_nothing(
    browser_ready: None, tmp_path: Path, nursery: trio.Nursery
) -> None:
    port = free_port()
    data_dir = tmp_path / "mesh-data"
    process = ServerProcess(data_dir, "--port", str(port))
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

    async def stop() -> None:
        assert await process.stop() == 0

    async def start_and_post() -> None:
        """Start the node again, and at once post from a bot: the pages are
        still waiting to reconnect, so they get these by ``since``."""
        nonlocal process
        process = ServerProcess(data_dir, "--port", str(port))
        assert await process.start(nursery) == url
        async with httpx.AsyncClient(base_url=url, timeout=15) as http:
            for i in range(3):
                await Mesh(http).send(ticker, room_id, f"tick {i}")

    async def stored() -> list[str]:
        async with httpx.AsyncClient(base_url=url, timeout=15) as http:
            page = await Mesh(http).messages(alice_user, room_id, limit=200)
        return [m["content"] for m in page]

    def scenario() -> list[str]:
        with chromium() as browser:
            people: dict[str, Person] = {}
            for user in (alice_user, bob_user):
                person = Person(browser, url)
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
            both_see("bob before 2")

            # the node stops: both pages say so, and keep what is typed
            call(stop)
            for person in (alice, bob):
                expect(person.page.get_by_role("status").filter(has_text="Reconnecting")).to_be_visible()
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
            for i in range(3):
                alice.send(f"alice after {i}")
                bob.send(f"bob after {i}")
            both_see("alice after 2")
            both_see("bob after 2")

            # each page shows every message once, in the node's order
            expected = call(stored)
            for person in (alice, bob):
                shown = person.timeline.get_by_role("article").locator(".msg-body").all_inner_texts()
                assert shown == expected, (person, shown, expected)
                person.assert_clean(console=False)  # refused connections while down
                assert all(
                    re.search(r"ERR_CONNECTION_REFUSED|WebSocket|status of 50\d", e)
                    for e in person.console_errors
                ), person.console_errors
            return expected

    contents = await in_browser(scenario, timeout=180)
    assert len(contents) == len(set(contents)) == 6 + 4 + 3 + 6, contents
    assert b"Traceback" not in process.output, process.output.decode()
    await stop()
