"""Defects found reviewing issue 32's node side a second time (branch rev-a)."""

from __future__ import annotations

import pytest
import trio

from tests.e2e.test_link_previews import PAGE, Site, _preview, _room, settings
from tests.helpers import Mesh

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
