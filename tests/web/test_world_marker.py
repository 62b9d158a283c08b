"""The World view shows your own marker from the start: where you stand if
you have a place, else (dashed) in the middle of the room picked under
*Room*, where the first arrow key puts you. Before, a person who had never
moved saw no marker of their own until their first move."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser import Person, chromium, in_browser, shot
from tests.helpers import connect
from tests.web.conftest import Served
from tests.web.test_chat import signed_in, two_people
from tests.web.test_world import open_world, where

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]

#: how many pixels of the map near (x, z) of the room have the accent colour
#: (the "You" marker; the rest of the room is the room's soft shade)
ACCENT_NEAR = """([x, z]) => {
  const canvas = document.querySelector("canvas.world-map");
  const accent = getComputedStyle(document.documentElement).getPropertyValue("--accent").trim();
  const probe = document.createElement("canvas").getContext("2d");
  probe.fillStyle = accent;
  probe.fillRect(0, 0, 1, 1);
  const [r, g, b] = probe.getImageData(0, 0, 1, 1).data;
  const rect = canvas.getBoundingClientRect();
  const dpr = canvas.width / rect.width;
  const side = rect.height - 22 - 12;  // the region of the only room (LABEL, margins)
  const cx = rect.width / 2 + (x / 10) * (side / 2 - 4);
  const cy = 22 + side / 2 + (z / 10) * (side / 2 - 4);
  const size = Math.round(24 * dpr);
  const data = canvas.getContext("2d").getImageData(
    Math.round(cx * dpr) - size / 2, Math.round(cy * dpr) - size / 2, size, size).data;
  let n = 0;
  for (let i = 0; i < data.length; i += 4) {
    const near = (k, v) => Math.abs(data[i + k] - v) < 8;
    if (near(0, r) && near(1, g) && near(2, b)) n++;
  }
  return n;
}"""


def accent_near(person: Person, x: float, z: float) -> int:
    count: int = person.page.evaluate(ACCENT_NEAR, [x, z])
    return count


async def test_own_marker_from_the_start(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    # bob stood somewhere in an earlier visit; alice never moved
    async with connect(node.url, bob_user) as ws:
        await ws.send(type="move", roomId=room_id, x=6, y=0, z=-6)
        await ws.expect("participant_moved", participantId=bob_user.participant_id)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            the_map = open_world(alice)
            expect(where(alice)).to_have_text(
                "You have no place yet: you are shown in the middle of Town Square. "
                "Press an arrow key on the map, or click in a room, to take a place."
            )
            alice.page.wait_for_function(f"() => ({ACCENT_NEAR})([0, 0]) > 20")
            shot(alice.page, "world-start")
            # the first arrow key takes the place shown; the next ones move
            the_map.focus()
            the_map.press("ArrowRight")
            expect(where(alice)).to_have_text("You are in Town Square at x 0.0, z 0.0.")
            the_map.press("ArrowRight")
            expect(where(alice)).to_have_text("You are in Town Square at x 0.5, z 0.0.")

            bob = signed_in(browser, node.url, bob_user)
            open_world(bob)
            expect(where(bob)).to_have_text("You are in Town Square at x 6.0, z -6.0.")
            bob.page.wait_for_function(f"() => ({ACCENT_NEAR})([6, -6]) > 20")
            assert accent_near(bob, 0, 0) == 0
            for person in (alice, bob):
                person.assert_clean()

    await in_browser(scenario)
