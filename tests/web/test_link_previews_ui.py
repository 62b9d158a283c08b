"""Link previews in the browser (decision 0072): a card under a message
with a link, its text as text, its image from the node's proxy, its link
reachable by keyboard, axe clean wide and narrow; the owner turns previews
off in the console and the cards stop."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio
from playwright.sync_api import expect

from tests.browser import call, chromium, in_browser, shot
from tests.e2e.test_link_previews import PAGE, Site
from tests.web.conftest import Served
from tests.web.test_accessibility import sideways, violations
from tests.web.test_chat import png, signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]

TITLE = "The & plan for 2027"
CARD = f"Link preview: {TITLE}"


async def test_a_link_shows_a_card_and_the_owner_can_turn_them_off(
    browser_ready: None, serve_node: Any, nursery: trio.Nursery
) -> None:
    site = await Site().start(nursery)
    image = png(120, 80)
    site.page("/plan", PAGE.replace(b"</script>", b"</script><img src=x onerror=alert(2)>"))
    site.routes["/img.png"] = lambda: (200, [("Content-Type", "image/png")], image)
    site.page("/later", PAGE)
    node: Served = await serve_node(link_preview_allow_networks=("127.0.0.1/32",))
    alice_user, bob_user, room_id = await two_people(node)
    await node.mesh.send(bob_user, room_id, f"the plan is at {site.url('/plan')} — have a look")

    async def send(text: str) -> None:
        await node.mesh.send(bob_user, room_id, text)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            message = alice.message("the plan is at")
            card = message.get_by_role("group", name=CARD)
            expect(card).to_be_visible()
            expect(card).to_contain_text("Plans")
            expect(card).to_contain_text("What we will build, and why.")
            title = card.get_by_role("link", name=TITLE)
            expect(title).to_have_attribute("href", site.url("/plan"))
            expect(title).to_have_attribute("rel", re.compile("noopener"))
            picture = card.locator("img")
            expect(picture).to_have_attribute("src", re.compile(r"^/api/link-preview/image\?"))
            alice.page.wait_for_function(
                "img => img.complete && img.naturalWidth === 120", arg=picture.element_handle()
            )
            assert not alice.dialogs  # the page's markup is never markup here
            assert not any(site.url("") in url for url in alice.requests)  # never hot-linked

            # by keyboard: the message, then its links, the card's among them
            alice.timeline.focus()
            alice.page.keyboard.press("ArrowUp")
            expect(message).to_be_focused()
            alice.page.keyboard.press("Tab")  # the author's name (the profile card)
            expect(message.get_by_role("button", name=bob_user.name)).to_be_focused()
            alice.page.keyboard.press("Tab")
            expect(message.get_by_role("link", name=site.url("/plan"))).to_be_focused()
            alice.page.keyboard.press("Tab")
            expect(title).to_be_focused()

            assert violations(alice, ".link-card") == []
            shot(alice.page, "link-preview")
            alice.page.set_viewport_size({"width": 390, "height": 844})
            expect(card).to_be_visible()
            assert violations(alice, ".link-card") == []
            assert sideways(alice) == 0
            shot(alice.page, "link-preview-narrow")
            alice.page.set_viewport_size({"width": 1280, "height": 800})

            # the owner turns them off in the console's settings
            alice.page.goto(node.url + "/#console/settings")
            switch = alice.page.get_by_role("checkbox", name="Show previews of links in messages")
            expect(switch).to_be_checked()
            switch.uncheck()
            alice.button("Save settings").click()
            expect(alice.page.get_by_text("Saved: link previews.")).to_be_visible()
            alice.page.goto(node.url + "/#room")
            with alice.page.expect_response(
                lambda r: r.url.endswith("/preview") and r.status == 404
            ):
                call(send, f"and later: {site.url('/later')}")
            expect(alice.message("and later")).to_be_visible()
            expect(alice.message("and later").get_by_role("group", name=CARD)).to_have_count(0)
            assert "/later" not in site.hits
            alice.assert_clean(console=False)  # the refused preview is a 404 in the console
            assert all("404" in error for error in alice.console_errors), alice.console_errors

    await in_browser(scenario)
