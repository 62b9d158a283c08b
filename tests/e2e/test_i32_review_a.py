"""Defects found reviewing issue 32's node side a second time (branch rev-a)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.e2e.test_link_previews import PAGE, Site, _preview, _room, settings
from tests.e2e.test_receipts import browser_tab, of_type, open_dm, read
from tests.helpers import Mesh, User

pytestmark = pytest.mark.e2e

__all__ = ["settings"]  # the link preview tests' settings (loopback allowed)


async def test_a_link_httpx_cannot_parse_is_no_preview_not_a_500(
    mesh: Mesh, nursery: trio.Nursery
) -> None:
    # a host that is no valid IDNA name passes urlsplit but not httpx
    # (httpx.InvalidURL is no httpx.HTTPError): in a message, in a redirect,
    # and as a page's image (signed, then fetched by the public image route)
    site = await Site().start(nursery)
    site.routes["/moved"] = lambda: (302, [("Location", "http://xn--zz.com/p")], b"")
    site.page("/p", PAGE.replace(b"/img.png", "http://\u2603\u2603.com/i.png".encode()))
    alice, _, room_id = await _room(mesh)

    assert await _preview(mesh, alice, room_id, "see http://\u2603\u2603.com/x") is None
    assert await _preview(mesh, alice, room_id, "see http://\u00ad.com/x") is None
    assert await _preview(mesh, alice, room_id, site.url("/moved")) is None
    preview = await _preview(mesh, alice, room_id, site.url("/p"))
    assert preview["title"] == "The & plan for 2027"
    assert preview["image"] is None  # an address it could not fetch is never signed


# the stalls hold their slots for 3 s: bob asks well within that
@pytest.mark.parametrize("settings", [{"link_preview_timeout": 3.0}], indirect=True)
async def test_a_busy_node_does_not_remember_a_page_it_never_asked_for(
    mesh: Mesh, nursery: trio.Nursery
) -> None:
    # with every fetch slot held by links that stall (one member's, within
    # its rate rule), another member's link waited for a slot within the time
    # bound, timed out and was remembered as a page with nothing to show, for
    # every reader, for five minutes: without the page ever being asked
    site = await Site().start(nursery)
    site.page("/p", PAGE)
    site.gates["/p"] = gate = trio.Event()
    for n in range(8):
        site.routes[f"/stall{n}"] = lambda: None
    alice, bob, room_id = await _room(mesh)
    stalls = [await mesh.send(alice, room_id, site.url(f"/stall{n}")) for n in range(8)]
    sent = await mesh.send(bob, room_id, site.url("/p"))

    async def preview(user: User, message: dict[str, Any]) -> Any:
        r = await mesh.http.get(
            f"/api/rooms/{room_id}/messages/{message['messageId']}/preview",
            headers=user.headers,
        )
        assert r.status_code == 200, r.text
        return r.json()["preview"]

    async def stall(message: dict[str, Any]) -> None:
        assert await preview(alice, message) is None

    async with trio.open_nursery() as holding:
        for message in stalls:
            holding.start_soon(stall, message)
        with trio.fail_after(5):
            while len(site.hits) < 8:
                await trio.sleep(0.01)
        # every slot is held: no card now
        assert await preview(bob, sent) is None
        gate.set()
    # the slots are free again: the page is fetched, its card shown
    found = await preview(bob, sent)
    assert found is not None
    assert found["title"] == "The & plan for 2027"
    assert site.hits.count("/p") == 1


async def test_a_read_receipt_reaches_no_one_who_may_not_read_the_dm(
    mesh: Mesh, base_url: str
) -> None:
    # dm_read went to each other member's sessions directly (Broker.send_to),
    # past the visibility decision every other event of the DM passes: one
    # whose role no longer reads rooms still heard who read what there
    owner = await mesh.setup()
    alice, bob = await mesh.register("alice"), await mesh.register("bob")
    dm = await open_dm(mesh, alice, bob)
    first = await mesh.send(alice, dm, "are you there?")
    r = await mesh.http.post(
        "/api/roles",
        json={"name": "blind", "priority": 120, "permissions": ["participants.read"]},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    async with browser_tab(base_url, alice) as tab:
        r = await mesh.http.put(
            f"/api/participants/{alice.participant_id}/role",
            json={"role": "blind"},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text
        await tab.expect("room_access", roomId=dm, readable=False)  # her session knows
        await read(mesh, bob, dm, first["cursor"])
        await mesh.send(bob, dm, "yes")
        frames = await tab.settle()
        assert of_type(frames, "message") == []  # the DM's messages do not reach her
        assert of_type(frames, "dm_read") == []  # nor does bob's read position
