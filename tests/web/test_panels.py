"""The views beyond the chat (``js/panels.js``): each has a link under
*Mesh* in the sidebar and its own address; the console is offered only to
those who may run the mesh, and its address does nothing for the others."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser import Person, call, chromium, in_browser
from tests.web.conftest import Served
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


def mesh_links(person: Person) -> Any:
    nav = person.page.get_by_role("navigation", name="Rooms and people")
    return nav.get_by_role("list").first.get_by_role("link")


async def test_views_have_links_and_addresses(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, _ = await two_people(node)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            bob = signed_in(browser, node.url, bob_user)
            expect(alice.heading("#Town Square")).to_be_visible()
            expect(mesh_links(alice)).to_have_text(
                ["World", "Bots", "Apps", "Vault", "Models", "Console"]
            )
            expect(mesh_links(bob)).to_have_text(["World", "Bots", "Apps", "Vault", "Models"])

            for name in ("World", "Bots", "Apps", "Vault", "Models", "Console"):
                link = mesh_links(alice).filter(has_text=re.compile(f"^{name}$"))
                link.click()
                expect(alice.heading(name, level=1)).to_be_visible()
                expect(link).to_have_attribute("aria-current", "page")
                expect(alice.page).to_have_title(f"{name} · Test Mesh")
            # back to a room: the view is left
            alice.open_room("Town Square")
            expect(alice.heading("Console", level=1)).to_be_hidden()

            # an address opens its view after a reload too
            alice.page.goto(node.url + "/#world")
            expect(alice.heading("World", level=1)).to_be_visible()

            # the console's address is only a room for bob
            bob.page.goto(node.url + "/#console")
            expect(bob.heading("#Town Square")).to_be_visible()
            expect(bob.heading("Console", level=1)).to_have_count(0)
            for person in (alice, bob):
                person.assert_clean()

    await in_browser(scenario)


async def test_a_new_role_is_followed_without_a_reload(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, _ = await two_people(node)

    async def assign(role: str) -> None:
        r = await node.mesh.http.put(
            f"/api/participants/{bob_user.participant_id}/role",
            json={"role": role},
            headers=alice_user.headers,
        )
        assert r.status_code == 200, r.text

    def focus(person: Person) -> None:
        person.page.evaluate("() => window.dispatchEvent(new Event('focus'))")

    def scenario() -> None:
        with chromium() as browser:
            bob = signed_in(browser, node.url, bob_user)
            expect(bob.heading("#Town Square")).to_be_visible()
            expect(mesh_links(bob)).to_have_count(5)
            # made an admin: the console is offered when the window is back
            call(assign, "admin")
            focus(bob)
            expect(mesh_links(bob).filter(has_text="Console")).to_be_visible()
            expect(bob.page.locator("#me-role")).to_have_text("admin")
            mesh_links(bob).filter(has_text="Console").click()
            expect(bob.heading("Console", level=1)).to_be_visible()
            # (the console has read the settings before the demotion)
            expect(bob.textbox("Mesh name")).to_have_value("Test Mesh")
            expect(bob.page.get_by_text("4 of 6 steps done.")).to_be_visible()
            expect(bob.page.get_by_role("definition").first).to_be_visible()
            # made a member again while in the console: it is left
            call(assign, "member")
            focus(bob)
            expect(bob.heading("#Town Square")).to_be_visible()
            expect(mesh_links(bob)).to_have_count(5)
            expect(bob.page.locator("#me-role")).to_have_text("member")
            bob.assert_clean()

    await in_browser(scenario)
