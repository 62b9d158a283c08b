"""The console's Federation section (``js/console-federation.js``): two real
nodes served on loopback, each owner at their own browser. A's owner asks
B by its address; B's owner sees the request and accepts it; both see the
connection; A shares a room, B joins it from the console and the two talk
across; the relay link shows per peer; A disconnects (after a
confirmation); A asks again from the list of public meshes (B announces
itself to A, which acts as its registry; B, not one, says so) and B
declines. A member is
offered no console and the node refuses the calls anyway."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from quart_mesh.config import Rate, RateLimits
from tests.browser import Person, call, chromium, in_browser, shot
from tests.helpers import User, wait_for
from tests.web.conftest import Served
from tests.web.test_accessibility import sideways, violations
from tests.web.test_chat import signed_in

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


#: the section polls every 5 s; here every quarter second (docs/web.md)
POLL_MS = 250


def open_federation(person: Person) -> None:
    person.page.evaluate(f"localStorage.setItem('mesh.consolePollMs', '{POLL_MS}')")
    person.page.goto(person.base_url + "/#console/federation")
    expect(person.heading("Console", level=1)).to_be_visible()
    expect(person.heading("Connections", level=2)).to_be_visible()


def connection_row(person: Person, name: str) -> Any:
    table = person.page.get_by_role("table", name="Connections with other nodes")
    return table.get_by_role("row").filter(has_text=name)


async def test_two_nodes_connect_share_talk_and_part_from_their_consoles(
    browser_ready: None, serve_node: Any
) -> None:
    # A is a registry (its operator turned it on; loopback addresses allowed in a lab)
    a: Served = await serve_node(
        registry_enabled=True,
        outbound_allow_private=True,
        # B beats twice a second here, not every 300 s
        rate_limits=RateLimits(registry_did=Rate(1000, 60)),
    )
    alice = await a.mesh.setup("alice", meshName="Mesh A")
    # B announces itself to A (A is its registry) twice a second
    # (and connects to A, on loopback: a lab)
    b: Served = await serve_node(
        registry_url=a.url, heartbeat_interval=0.5, outbound_allow_private=True
    )
    bea = await b.mesh.setup("bea", meshName="Mesh B")
    carl = await b.mesh.register("carl")
    square_a = (await a.mesh.http.get("/api/setup/status")).json()["defaultRoomId"]
    did_b = (await b.mesh.http.get("/.well-known/mesh-manifest.json")).json()["did"]

    async def connections(node: Served, owner: User) -> list[dict[str, Any]]:
        r = await node.mesh.http.get("/api/connections", headers=owner.headers)
        assert r.status_code == 200, r.text
        return list(r.json())

    async def listed_on_a() -> None:
        async def there() -> bool:
            r = await a.mesh.http.get("/api/meshes/public")
            return any(m["did"] == did_b for m in r.json())

        await wait_for(there, 10, interval=0.1)

    async def message_reached_a(text: str) -> dict[str, Any]:
        found: list[dict[str, Any]] = []

        async def arrived() -> bool:
            found[:] = [m for m in await a.mesh.messages(alice, square_a) if m["content"] == text]
            return bool(found)

        await wait_for(arrived, 15, interval=0.1)
        return found[0]

    async def alice_says(text: str) -> None:
        await a.mesh.send(alice, square_a, text)

    async def refused_to_carl() -> list[int]:
        http = b.mesh.http
        return [
            (await http.get("/api/connections", headers=carl.headers)).status_code,
            (
                await http.post(
                    "/api/connections/request", json={"url": a.url}, headers=carl.headers
                )
            ).status_code,
        ]

    def scenario() -> None:
        with chromium() as browser:
            owner_a = signed_in(browser, a.url, alice)
            owner_b = signed_in(browser, b.url, bea, width=380, height=800)
            open_federation(owner_a)
            open_federation(owner_b)
            page_a, page_b = owner_a.page, owner_b.page

            # this node's identity, as its manifest says
            facts = page_a.get_by_role("region", name="This node")
            expect(facts).to_contain_text("Mesh A")
            expect(facts).to_contain_text(a.url)
            expect(facts.locator("code")).to_have_text(re.compile(r"^did:key:z6Mk"))
            expect(page_a.get_by_text("No connections yet.")).to_be_visible()
            # B is not a registry (the default): its console says so, as no error
            public_b = page_b.get_by_role("region", name="Public meshes")
            expect(public_b).to_contain_text("This node is not a registry")
            expect(public_b.get_by_role("alert")).to_have_count(0)

            # A asks B by its address
            owner_a.page.get_by_role("textbox", name="Node address").fill(b.url)
            owner_a.page.get_by_role("textbox", name="Message (optional)").fill(
                "Hello from A <b>not bold</b>"
            )
            owner_a.button("Send request").click()
            expect(
                page_a.get_by_role("status").filter(has_text="Request sent to Mesh B")
            ).to_be_visible()
            expect(connection_row(owner_a, "Mesh B")).to_contain_text("Waiting for their answer")
            expect(owner_a.textbox("Node address")).to_have_value("")

            # B's owner sees it (the section asks again every POLL_MS) and accepts
            incoming = connection_row(owner_b, "Mesh A")
            expect(incoming).to_contain_text("Asks to connect")
            expect(incoming).to_contain_text("Hello from A <b>not bold</b>")
            owner_b.button("Accept the request of Mesh A").click()
            expect(incoming).to_contain_text("Connected")
            expect(connection_row(owner_a, "Mesh B")).to_contain_text("Connected")
            [on_a] = call(connections, a, alice)
            [on_b] = call(connections, b, bea)
            assert (on_a["status"], on_a["direction"]) == ("accepted", "outbound")
            assert (on_b["status"], on_b["direction"], on_b["id"]) == (
                "accepted",
                "inbound",
                on_a["id"],
            )

            # A shares its Town Square
            shares_a = page_a.get_by_role("group", name="With Mesh B")
            expect(
                shares_a.get_by_role("combobox", name="Room to share with Mesh B")
            ).to_have_value(square_a)
            shares_a.get_by_role("button", name="Share the room with Mesh B").click()
            expect(
                shares_a.get_by_role("table", name="Rooms of this node shared with Mesh B")
            ).to_contain_text("Town Square")

            # B sees it offered, joins it from the console and talks in it
            shares_b = page_b.get_by_role("group", name="With Mesh A")
            join = shares_b.get_by_role("button", name=re.compile(r"^Join Town Square@mesh-a"))
            expect(join).to_be_visible()
            shot(page_b, "console-federation-380")
            assert violations(owner_b, "#panel-body") == []
            assert sideways(owner_b) == 0
            join.click()
            expect(owner_b.heading(re.compile(r"^#Town Square@mesh-a"))).to_be_visible()
            call(alice_says, "welcome over there")
            expect(owner_b.message("welcome over there")).to_be_visible()
            owner_b.send("hello from B")
            relayed = call(message_reached_a, "hello from B")
            assert relayed["trustLevel"] == "federated"
            assert relayed["senderName"].startswith("bea@")

            # the relay link per peer, on both sides
            relay_a = page_a.get_by_role("table", name="Relay link per connected peer")
            row_a = relay_a.get_by_role("row").filter(has_text="Mesh B")
            expect(row_a.get_by_role("cell").nth(1)).to_have_text("Running")
            expect(row_a.get_by_role("cell").nth(3)).to_have_text(re.compile(r"^[1-9]"))
            open_federation(owner_b)
            relay_b = page_b.get_by_role("table", name="Relay link per connected peer")
            expect(relay_b.get_by_role("row").filter(has_text="Mesh A")).to_contain_text("Running")
            expect(
                page_b.get_by_role("group", name="With Mesh A").get_by_role(
                    "link", name=re.compile(r"^Open Town Square@mesh-a")
                )
            ).to_be_visible()
            owner_a.heading("Connections", level=2).evaluate(
                "(el) => el.scrollIntoView({block: 'start'})"
            )
            shot(page_a, "console-federation")
            assert violations(owner_a, "#panel-body") == []

            # A disconnects, after saying so
            owner_a.button("Disconnect from Mesh B").click()
            dialog = page_a.get_by_role("dialog", name="Disconnect from Mesh B?")
            dialog.get_by_role("button", name="Disconnect").click()
            expect(
                page_a.get_by_role("status").filter(has_text="Disconnected from Mesh B")
            ).to_be_visible()
            expect(connection_row(owner_a, "Mesh B")).to_contain_text("Disconnected")
            expect(connection_row(owner_b, "Mesh A")).to_contain_text("Disconnected")
            expect(page_b.get_by_text("No connected peer.")).to_be_visible()

            # the public meshes A hears of: B, with a button that fills the request
            call(listed_on_a)
            listed = page_a.get_by_role("table", name=re.compile(r"^\d+ public mesh"))
            expect(listed.get_by_role("row").filter(has_text="Mesh B")).to_contain_text(b.url)
            owner_a.button("Request connection to Mesh B").click()
            expect(owner_a.textbox("Node address")).to_have_value(b.url)
            expect(owner_a.textbox("Node address")).to_be_focused()
            owner_a.button("Send request").click()
            expect(connection_row(owner_a, "Mesh B")).to_contain_text("Waiting for their answer")

            # B declines it
            expect(connection_row(owner_b, "Mesh A")).to_contain_text("Asks to connect")
            owner_b.button("Decline the request of Mesh A").click()
            expect(connection_row(owner_b, "Mesh A")).to_contain_text("Declined")
            expect(connection_row(owner_a, "Mesh B")).to_contain_text("Declined")
            assert [c["status"] for c in call(connections, a, alice)] == ["declined"]

            # a member of B is offered no console; the node refuses anyway
            member = signed_in(browser, b.url, carl)
            nav = member.page.get_by_role("navigation", name="Rooms and people")
            expect(nav.get_by_role("link", name="World")).to_be_visible()
            expect(nav.get_by_role("link", name="Console")).to_have_count(0)
            assert call(refused_to_carl) == [403, 403]

            for person in (owner_a, owner_b, member):
                person.assert_clean()

    await in_browser(scenario, timeout=180)
