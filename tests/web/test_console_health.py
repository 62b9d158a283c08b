"""The console's statistics show the data folder's free space against the
disk floor, and the faults the node is riding out (issue 33): read from
``GET /api/admin/stats`` of a served node, found by role and name."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from quart_mesh.faults import PEER_DOWN
from tests.browser import Person, chromium, in_browser, shot
from tests.web.conftest import Served
from tests.web.test_chat import signed_in, two_people
from tests.web.test_console import console, stat, top

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


def faults(person: Person) -> Any:
    """The definition terms of the "Active faults" group."""
    return (
        person.page.locator(".console-stat-group")
        .filter(has=person.page.get_by_role("heading", name="Active faults", exact=True))
        .locator("dt")
    )


async def test_the_console_shows_disk_space_against_the_floor_and_active_faults(
    browser_ready: None, serve_node: Any
) -> None:
    # a floor of 99% of the filesystem: the node is below it
    node: Served = await serve_node(disk_floor=0.99)
    alice_user, _, _ = await two_people(node)
    node_faults = node.app.node.faults
    node_faults.failed(PEER_DOWN, "connection refused", key="01PEER")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            expect(alice.heading("#Town Square")).to_be_visible()
            console(alice, "settings")
            expect(alice.page.get_by_role("heading", name="Disk", exact=True)).to_be_visible()
            expect(stat(alice, "Disk", "Status")).to_have_text(
                "Below the floor: uploads and app sources are refused"
            )
            expect(stat(alice, "Disk", "Free space")).to_have_text(re.compile(r"^\d.* of \d"))
            expect(stat(alice, "Disk", "Floor")).to_have_text(re.compile(r"^\d.*B$"))
            expect(faults(alice)).to_have_text(["Federation peer down (01PEER)"])
            expect(stat(alice, "Active faults", "Federation peer down (01PEER)")).to_contain_text(
                "1 failure: connection refused"
            )
            top(alice)
            shot(alice.page, "console-disk-and-faults")

            # the floor lifted and the peer back: a refresh says so
            node.app.node.disk.floor_setting = 0
            node_faults.cleared(PEER_DOWN, key="01PEER")
            alice.button("Refresh statistics").click()
            expect(stat(alice, "Disk", "Status")).to_have_text("Above the floor")
            expect(stat(alice, "Disk", "Floor")).to_have_text("none")
            expect(stat(alice, "Active faults", "Faults")).to_have_text("none")

    await in_browser(scenario)
