"""First run and accounts in a real browser: setup, sign in, register, guests,
sign out, and sessions that end (expired, signed out elsewhere)."""

from __future__ import annotations

import json
import re
import time

import jwt
import pytest
from playwright.sync_api import expect

from quart_mesh.services.setup_claim import SETUP_CODE_FILE
from tests.browser import PASSWORD, Person, call, chromium, in_browser, shot
from tests.helpers import User
from tests.web.conftest import Served
from tests.web.test_accessibility import violations

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


async def test_first_run_sets_up_the_mesh_and_signs_the_owner_in(
    browser_ready: None, serve_node: object
) -> None:
    node: Served = await serve_node()  # type: ignore[operator]

    def scenario() -> dict[str, object]:
        with chromium() as browser:
            alice = Person(browser, node.url)
            page = alice.page
            alice.open()
            expect(alice.heading("Set up your mesh")).to_be_visible()
            assert page.title() == "Set up your mesh"
            # a missing field is said plainly, next to the form
            alice.button("Create mesh").click()
            expect(page.get_by_role("alert")).to_have_text("Your name is required.")
            alice.textbox("Your name").fill("alice")
            alice.textbox("Password").fill("password")
            alice.textbox("Mesh name").fill("Acme")
            alice.page.get_by_role("radio", name="Closed: no new accounts").check()
            shot(page, "setup")
            alice.button("Create mesh").click()
            expect(page.get_by_role("alert")).to_contain_text("password")
            expect(alice.textbox("Password")).to_have_attribute("aria-invalid", "true")
            alice.textbox("Password").fill(PASSWORD)
            alice.button("Create mesh").click()

            # signed in, in the mesh's default room
            expect(alice.heading("#Town Square")).to_be_visible()
            expect(alice.room_link("Town Square")).to_have_attribute("aria-current", "page")
            expect(page).to_have_title("#Town Square · Acme")
            expect(page.get_by_text("Signed in as alice")).to_be_visible()
            alice.send("Hello, **world**")
            expect(alice.message("Hello, world").locator("strong")).to_have_text("world")
            shot(page, "first-room")
            token = alice.token()
            assert token

            # a reload keeps the session
            page.reload()
            expect(alice.heading("#Town Square")).to_be_visible()
            expect(alice.message("Hello, world")).to_be_visible()
            assert alice.token() == token

            # signing out revokes the token and shows the sign-in form
            alice.button("Sign out").click()
            expect(alice.heading("Sign in")).to_be_visible()
            assert alice.token() is None
            # registration is closed here, and the page says so
            expect(page.get_by_text("Registration is closed on this mesh")).to_be_visible()
            expect(alice.button("Create an account")).to_have_count(0)
            # the mesh is public: guests may look in
            expect(alice.button("Continue as a guest")).to_be_visible()
            alice.textbox("Name").fill("alice")
            alice.textbox("Password").fill("not the password")
            alice.button("Sign in").click()
            expect(page.get_by_role("alert")).to_have_text("Wrong name or password.")
            alice.sign_in("alice")
            expect(alice.heading("#Town Square")).to_be_visible()
            alice_token = alice.token()
            alice.assert_clean(console=False)  # the failed sign-in logged a 401
            assert all(url.startswith(node.url + "/") for url in alice.requests), alice.requests
            assert not any(token in url for url in alice.requests)
            alice.close()

            # a signed-in person's first visit, cold (nothing cached): small,
            # from this node only, quick to the room list
            fresh = Person(browser, node.url)
            fresh.context.add_init_script(
                f"localStorage.setItem('mesh.token', {json.dumps(alice_token)})"
            )
            fresh.open()
            expect(fresh.room_link("Town Square")).to_be_visible()
            sizes = fresh.page.evaluate(
                """() => performance.getEntriesByType("navigation").concat(
                       performance.getEntriesByType("resource"))
                   .map((e) => [e.name, e.decodedBodySize])"""
            )
            rendered = fresh.page.evaluate(
                "() => performance.getEntriesByName('mesh:rooms-rendered')[0].startTime"
            )
            assert all(url.startswith(node.url + "/") for url in fresh.requests), fresh.requests
            fresh.assert_clean()
            return {"sizes": sizes, "rendered": rendered, "token": token}

    seen = await in_browser(scenario)
    # the old token was revoked on the node, not only forgotten by the page
    r = await node.mesh.http.get(
        "/api/auth/me", headers={"Authorization": f"Bearer {seen['token']}"}
    )
    assert (r.status_code, r.json()["code"]) == (401, "token_revoked")
    # HTML + JS + CSS of the first load (docs/benchmarks.md)
    sizes = seen["sizes"]
    assert isinstance(sizes, list)
    code = [s for s in sizes if re.search(r"(/|\.js|\.css)$", s[0])]
    total = sum(int(size) for _, size in code)
    print(
        f"first load: {len(code)} files, {total} bytes; room list after {seen['rendered']:.0f} ms"
    )
    assert 0 < total < 200_000, code
    # the room list on screen after navigating (loopback, cold cache): the
    # time is printed and measured by bench/bench_web.py; here only a hang
    # fails (a one-second bound failed on a loaded CI machine, 1.4 s, during
    # the PostgreSQL pass: speed is the benchmarks' to judge, not a timed test)
    rendered = seen["rendered"]
    assert isinstance(rendered, float | int)
    assert 0 < rendered < 10_000, rendered


async def test_registration_and_guests_follow_the_mesh_settings(
    browser_ready: None, serve_node: object
) -> None:
    open_node: Served = await serve_node()  # type: ignore[operator]
    await open_node.mesh.setup()
    closed_node: Served = await serve_node()  # type: ignore[operator]
    await closed_node.mesh.setup(visibility="private", registrationMode="closed")

    def scenario() -> None:
        with chromium() as browser:
            # a private, closed mesh: sign in only
            visitor = Person(browser, closed_node.url)
            visitor.open()
            expect(visitor.heading("Sign in")).to_be_visible()
            expect(visitor.page.get_by_text("Registration is closed on this mesh")).to_be_visible()
            expect(visitor.button("Create an account")).to_have_count(0)
            expect(visitor.button("Continue as a guest")).to_have_count(0)
            visitor.assert_clean()

            # an open mesh: register; newcomers are offered the default room
            bob = Person(browser, open_node.url)
            bob.open()
            bob.button("Create an account").click()
            bob.textbox("Choose a name").fill("owner")  # taken
            bob.textbox("Choose a password").fill(PASSWORD)
            bob.button("Create account").click()
            expect(bob.page.get_by_role("alert")).to_have_text("that name is taken.")
            bob.textbox("Choose a name").fill("bob")
            bob.button("Create account").click()
            expect(bob.heading("Welcome to Test Mesh, bob")).to_be_visible()
            expect(bob.page.get_by_text("Everyone starts in Town Square")).to_be_visible()
            shot(bob.page, "welcome")
            bob.join_default_room()
            expect(bob.room_link("Town Square")).to_be_visible()
            bob.send("bob is here")
            expect(bob.message("bob is here")).to_be_visible()
            bob.assert_clean(console=False)  # the taken name was a 409

            # a guest: reads, and is told plainly what it may not do
            guest = Person(browser, open_node.url)
            guest.open()
            guest.button("Continue as a guest").click()
            banner = guest.page.get_by_text("You are a guest")
            expect(banner).to_contain_text("cannot post messages, react, share files, create rooms")
            expect(guest.button("New direct message")).to_have_count(0)
            guest.join_default_room()
            expect(guest.message("bob is here")).to_be_visible()
            expect(guest.page.get_by_text("Guests cannot post on this mesh")).to_be_visible()
            expect(guest.page.get_by_role("textbox", name=re.compile("^Message"))).to_have_count(0)
            expect(
                guest.message("bob is here").get_by_role("button", name="Add reaction")
            ).to_have_count(0)
            shot(guest.page, "guest")
            guest.assert_clean()

    await in_browser(scenario)


async def test_an_ended_session_brings_back_the_sign_in_form(
    browser_ready: None, serve_node: object
) -> None:
    node: Served = await serve_node()  # type: ignore[operator]
    await node.mesh.setup()
    bob: User = await node.mesh.register("bob")
    secret = bytes.fromhex((node.settings.data_dir / "secret.key").read_text().strip())
    now = int(time.time())
    expired = jwt.encode(
        {"sub": bob.participant_id, "kind": "human", "iat": now - 100, "exp": now - 10, "jti": "x"},
        secret,
        algorithm="HS256",
    )

    async def logout(token: str) -> None:
        r = await node.mesh.http.post(
            "/api/auth/logout", headers={"Authorization": f"Bearer {token}"}
        )
        assert r.status_code == 200, r.text

    def scenario() -> None:
        with chromium() as browser:
            person = Person(browser, node.url)
            person.open()
            # a token that has expired (kept from an earlier visit)
            person.page.evaluate(
                "token => localStorage.setItem('mesh.token', token)",
                json.loads(json.dumps(expired)),
            )
            person.page.reload()
            expect(person.heading("Sign in")).to_be_visible()
            expect(
                person.page.get_by_text("Your session has expired. Please sign in again.")
            ).to_be_visible()
            assert person.token() is None

            # signed in, then signed out from elsewhere: the open page notices
            person.sign_in("bob")
            token = person.token()
            assert token
            expect(person.page.get_by_role("button", name="Join Town Square")).to_be_visible()
            call(logout, token)
            expect(person.heading("Sign in")).to_be_visible()
            expect(
                person.page.get_by_text("You were signed out. Please sign in again.")
            ).to_be_visible()
            assert person.token() is None
            person.assert_clean(console=False)  # the expired token's 401

    await in_browser(scenario)


async def test_the_setup_form_asks_for_the_setup_code_of_a_node_reachable_from_the_network(
    browser_ready: None, serve_node: object
) -> None:
    """``MESH_SETUP_CODE=always`` (as a node bound to a public address): the
    form has a "Setup code" field; a wrong code is said next to it; the code
    the node wrote in its log (and data folder) sets the mesh up."""
    node: Served = await serve_node(setup_code="always")  # type: ignore[operator]
    code = (node.settings.data_dir / SETUP_CODE_FILE).read_text()

    def scenario() -> None:
        with chromium() as browser:
            alice = Person(browser, node.url)
            page = alice.page
            alice.open()
            expect(alice.heading("Set up your mesh")).to_be_visible()
            alice.textbox("Your name").fill("alice")
            alice.textbox("Password").fill(PASSWORD)
            alice.textbox("Mesh name").fill("Acme")
            field = alice.textbox("Setup code")
            expect(field).to_be_visible()
            expect(field).to_have_accessible_description(re.compile("setup code:"))
            assert violations(alice, "#setup-form") == []
            alice.button("Create mesh").click()
            expect(page.get_by_role("alert")).to_have_text("Setup code is required.")
            field.fill("AAAA-BBBB-CCCC-DDDD")
            alice.button("Create mesh").click()
            expect(page.get_by_role("alert")).to_contain_text("Wrong setup code")
            expect(field).to_have_attribute("aria-invalid", "true")
            expect(field).to_be_focused()
            field.fill(code)
            alice.button("Create mesh").click()
            expect(alice.heading("#Town Square")).to_be_visible()
            alice.assert_clean(console=False)  # the refused setups logged a 403

    await in_browser(scenario)
    r = await node.mesh.http.get("/api/setup/status")
    assert (r.json()["initialized"], r.json()["codeRequired"]) == (True, False)


async def test_the_setup_form_has_no_code_field_on_loopback(
    browser_ready: None, serve_node: object
) -> None:
    node: Served = await serve_node()  # type: ignore[operator]

    def scenario() -> None:
        with chromium() as browser:
            alice = Person(browser, node.url)
            alice.open()
            expect(alice.heading("Set up your mesh")).to_be_visible()
            expect(alice.textbox("Your name")).to_be_visible()
            expect(alice.textbox("Setup code")).to_have_count(0)

    await in_browser(scenario)
