"""A participant of another node, as the web client shows it: two real nodes
(``python -m quart_mesh serve``) share a room; a person on the other node
posts; the page marks that person and the message as federated, with the
node they come from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import trio
from playwright.sync_api import expect

from tests.browser import Person, chromium, in_browser, shot
from tests.e2e.test_relay import connect_nodes, nodes, share, wait_for_messages

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


async def test_federated_participants_are_marked_with_their_origin(
    browser_ready: None, tmp_path: Path, nursery: trio.Nursery
) -> None:
    async with nodes(tmp_path, nursery, "a", "b") as (a, b):
        connection = await connect_nodes(a, b)
        square = (await a.http.get("/api/setup/status")).json()["defaultRoomId"]
        mirror = await share(a, connection, square, b)
        bob = await b.mesh.register("bob")
        await b.mesh.join(bob, mirror)
        await b.mesh.send(bob, mirror, "hello from the other mesh")
        [relayed] = await wait_for_messages(a, a.owner, square, 1)
        assert relayed["trustLevel"] == "federated"
        remote_name = relayed["senderName"]
        assert remote_name.startswith("bob@"), remote_name

        def scenario() -> None:
            with chromium() as browser:
                owner = Person(browser, a.url)
                owner.open()
                owner.sign_in("owner")
                message = owner.message("hello from the other mesh")
                expect(message).to_be_visible()
                badge = message.get_by_text(re.compile(r"^federated · did:key:"))
                expect(badge).to_be_visible()
                expect(badge).to_have_attribute("title", f"from another mesh: {b.did}")
                people = owner.page.get_by_role("region", name="People")
                row = people.get_by_role("listitem").filter(has_text=remote_name)
                expect(row.get_by_text(re.compile(r"^federated · "))).to_be_visible()
                # no DM with a participant of another node (DMs are not relayed)
                expect(row.get_by_role("button")).to_have_count(0)
                shot(owner.page, "federated")
                owner.assert_clean()

        await in_browser(scenario)
