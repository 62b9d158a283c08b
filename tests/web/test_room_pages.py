"""The room browser pages through ``GET /api/rooms`` (decision 0054): the
snapshot carries only the rooms one is in, so the rooms one may join come
page by page, with a "More rooms" button while there are more; creating
one over the quota shows the node's refusal."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from quart_mesh.config import DEFAULT_ROOM_QUOTAS
from tests.browser import chromium, in_browser
from tests.web.conftest import Served
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]

#: rooms per page the web client asks for (js/api.js ROOM_PAGE)
PAGE = 100


async def test_the_room_browser_pages(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node(room_quotas={**DEFAULT_ROOM_QUOTAS, "member": 1})
    alice_user, bob_user, _ = await two_people(node)
    await node.mesh.create_room(bob_user, "zz bob")  # bob's quota: one room
    # "room-000"… sort before "Town Square": the second page holds 5 of them and it
    for i in range(PAGE + 5):
        await node.mesh.create_room(alice_user, f"room-{i:03d}")
    r = await node.mesh.http.get("/api/state", headers=bob_user.headers)
    assert [room["name"] for room in r.json()["rooms"]] == ["Town Square", "zz bob"]

    def scenario() -> None:
        with chromium() as browser:
            bob = signed_in(browser, node.url, bob_user)
            page = bob.page
            expect(bob.heading("#Town Square")).to_be_visible()
            bob.button("Browse rooms").click()
            dialog = page.get_by_role("dialog", name="Rooms")
            expect(dialog.get_by_role("button", name="Join room-000")).to_be_visible()
            expect(dialog.get_by_role("button", name="Join room-099")).to_be_attached()
            expect(dialog.get_by_role("button", name="Join room-100")).to_have_count(0)
            more = dialog.get_by_role("button", name="More rooms")
            more.click()
            # the next page, focus on its first room; no more pages after it
            expect(dialog.get_by_role("button", name="Join room-100")).to_be_focused()
            expect(dialog.get_by_role("button", name="Open Town Square")).to_be_attached()
            expect(more).to_have_count(0)
            # over the quota: the node's refusal, in the dialog
            dialog.get_by_label("Room name").fill("one more")
            dialog.get_by_role("button", name="Create room").click()
            expect(dialog.get_by_text("you have created 1 rooms")).to_be_visible()
            dialog.get_by_role("button", name="Join room-104").click()
            expect(bob.heading("#room-104")).to_be_visible()
            expect(bob.room_link("room-104")).to_be_visible()
            # the refused create is the one failed request the browser reports
            assert len(bob.console_errors) == 1, bob.console_errors
            assert "409" in bob.console_errors[0], bob.console_errors
            bob.assert_clean(console=False)

    await in_browser(scenario)
    r = await node.mesh.http.get("/api/state", headers=bob_user.headers)
    assert [room["name"] for room in r.json()["rooms"]] == ["room-104", "Town Square", "zz bob"]
