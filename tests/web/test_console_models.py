"""The console's Models section (``js/console-models.js``): the owner adds a
model that points at a real OpenAI-compatible upstream (tests/upstream.py),
sees it listed without its key (which the page keeps nowhere), sees a
member's use of it per participant, and removes it; a model from the
node's settings says why it cannot be removed; a member is offered no
console and the node refuses the calls anyway."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from quart_mesh.config import ModelConfig
from tests.browser import Person, call, chromium, in_browser, shot
from tests.upstream import Upstream
from tests.web.conftest import Served
from tests.web.test_accessibility import violations
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]

KEY = "sk-console-secret-91c7"


def open_models(person: Person) -> None:
    person.page.goto(person.base_url + "/#console/models")
    expect(person.heading("Console", level=1)).to_be_visible()
    expect(person.heading("Models", level=2)).to_be_visible()


async def test_add_list_use_and_remove_a_model(
    browser_ready: None, serve_node: Any, upstream: Upstream
) -> None:
    upstream_url = f"http://127.0.0.1:{upstream.port}/v1"
    node: Served = await serve_node(models=(ModelConfig("configured", upstream_url, "echo-model"),))
    owner, bob, _ = await two_people(node)
    http = node.mesh.http

    async def models() -> list[dict[str, Any]]:
        r = await http.get("/api/models", headers=owner.headers)
        assert r.status_code == 200, r.text
        assert KEY not in r.text
        return list(r.json())

    async def ask_as_bob() -> None:
        r = await http.post(
            "/api/models/v1/chat/completions",
            json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
            headers=bob.headers,
        )
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == "echo: hi"

    async def refused_to_bob() -> list[int]:
        return [
            (await http.get("/api/models/usage", headers=bob.headers)).status_code,
            (
                await http.post(
                    "/api/models",
                    json={"name": "mine", "baseUrl": upstream_url},
                    headers=bob.headers,
                )
            ).status_code,
            (await http.delete("/api/models/configured", headers=bob.headers)).status_code,
        ]

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, owner)
            open_models(alice)
            page = alice.page
            listed = page.get_by_role("table", name=re.compile(r"^\d+ models?$"))
            configured = listed.get_by_role("row").filter(has_text="configured")
            expect(configured).to_contain_text("Node settings")
            expect(configured).to_contain_text("Set in the node's settings")
            # not removable here; who may use it is editable (decision 0053)
            expect(configured.get_by_role("button", name=re.compile("^Remove"))).to_have_count(0)
            expect(configured.get_by_role("button")).to_have_count(1)
            expect(page.get_by_text("Nobody has used a model yet.")).to_be_visible()

            # a refused add shows the node's reason, and the key is gone anyway
            alice.textbox("Name").fill("bad name")
            alice.textbox("Base URL").fill(upstream_url)
            page.get_by_label("API key", exact=True).fill(KEY)
            alice.button("Add model").click()
            expect(page.get_by_role("alert").filter(has_text="name")).to_be_visible()
            expect(page.get_by_label("API key", exact=True)).to_have_value("")

            alice.textbox("Name").fill("echo")
            alice.textbox("Upstream model").fill("echo-model")
            key_field = page.get_by_label("API key", exact=True)
            expect(key_field).to_have_attribute("type", "password")
            key_field.fill(KEY)
            alice.button("Add model").click()
            expect(page.get_by_role("status").filter(has_text="Added echo")).to_be_visible()
            expect(key_field).to_have_value("")
            row = (
                listed.get_by_role("row")
                .filter(has_text="echo-model")
                .filter(has=page.get_by_role("button", name="Remove echo"))
            )
            expect(row).to_contain_text(upstream_url)
            expect(row).to_contain_text("Stored")
            expect(row).to_contain_text("Added here")
            [echo] = [m for m in call(models) if m["name"] == "echo"]
            assert (echo["baseUrl"], echo["upstreamModel"], echo["hasApiKey"]) == (
                upstream_url,
                "echo-model",
                True,
            )
            # the key is nowhere in the page: not shown, not stored, not in an address
            assert KEY not in page.content()
            assert KEY not in page.evaluate("() => document.body.innerText")
            stored = page.evaluate(
                "() => JSON.stringify([Object.entries(localStorage),"
                " Object.entries(sessionStorage), location.href])"
            )
            assert KEY not in stored

            # usage per participant after bob's call through the proxy
            call(ask_as_bob)
            alice.button("Refresh usage").click()
            usage = page.get_by_role("table", name="Requests and tokens by participant and model")
            bob_row = usage.get_by_role("row").filter(has_text="bob")
            expect(bob_row.get_by_role("cell")).to_have_text(
                ["bob", "echo", "1", "0", "5", "3", re.compile(r"\d")]
            )
            alice.heading("Console", level=1).scroll_into_view_if_needed()
            shot(page, "console-models")
            assert violations(alice, "#panel-body") == []

            # removing asks first; keeping it changes nothing
            alice.button("Remove echo").click()
            dialog = page.get_by_role("dialog", name="Remove the model echo?")
            dialog.get_by_role("button", name="Cancel").click()
            expect(dialog).to_be_hidden()
            expect(alice.button("Remove echo")).to_be_focused()
            alice.button("Remove echo").click()
            dialog.get_by_role("button", name="Remove model").click()
            expect(page.get_by_role("status").filter(has_text="Removed echo")).to_be_visible()
            expect(alice.button("Remove echo")).to_have_count(0)
            assert [m["name"] for m in call(models)] == ["configured"]
            # usage stays
            expect(bob_row).to_be_visible()

            # a phone: nothing scrolls sideways
            phone = signed_in(browser, node.url, owner, width=380, height=800)
            open_models(phone)
            expect(phone.page.get_by_role("table", name="1 model")).to_be_visible()
            assert phone.page.evaluate(
                "() => document.documentElement.scrollWidth <= window.innerWidth"
            )
            shot(phone.page, "console-models-380")
            assert violations(phone, "#panel-body") == []

            # a member is offered no console; the node refuses the calls anyway
            member = signed_in(browser, node.url, bob)
            nav = member.page.get_by_role("navigation", name="Rooms and people")
            expect(nav.get_by_role("link", name="Models")).to_be_visible()
            expect(nav.get_by_role("link", name="Console")).to_have_count(0)
            member.page.goto(node.url + "/#console/models")
            expect(member.heading("#Town Square")).to_be_visible()
            expect(member.heading("Console", level=1)).to_have_count(0)
            assert call(refused_to_bob) == [403, 403, 403]

            # alice's refused add logged the node's 400 in the console
            alice.assert_clean(console=False)
            for person in (phone, member):
                person.assert_clean()

    await in_browser(scenario)


async def test_budgets_show_use_against_them_and_are_edited_in_the_console(
    browser_ready: None, serve_node: Any, upstream: Upstream
) -> None:
    upstream_url = f"http://127.0.0.1:{upstream.port}/v1"
    node: Served = await serve_node(models=(ModelConfig("echo", upstream_url, "echo-model"),))
    owner, bob, _ = await two_people(node)
    await node.mesh.register("carol")
    http = node.mesh.http

    async def ask_as_bob() -> int:
        r = await http.post(
            "/api/models/v1/chat/completions",
            json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
            headers=bob.headers,
        )
        return r.status_code

    async def refusal_to_bob() -> tuple[int, str]:
        r = await http.post(
            "/api/models/v1/chat/completions",
            json={"model": "echo", "messages": [{"role": "user", "content": "hi"}]},
            headers=bob.headers,
        )
        return r.status_code, str(r.json()["error"]["code"])

    def scenario() -> None:
        assert call(ask_as_bob) == 200
        assert call(ask_as_bob) == 200  # 16 tokens (8 each, tests/upstream.py)
        with chromium() as browser:
            alice = signed_in(browser, node.url, owner)
            open_models(alice)
            page = alice.page
            today = page.get_by_role("table", name="Use today against budgets")
            bob_row = today.get_by_role("row").filter(has_text="bob")
            expect(bob_row).to_contain_text("16 of 200,000")
            expect(bob_row.get_by_role("meter", name="Tokens bob used today")).to_have_attribute(
                "value", "16"
            )
            # members get 10 tokens a day: bob is over at once
            roles = page.get_by_role("table", name="Budgets per role")
            expect(roles.get_by_role("row").filter(has_text="owner")).to_have_count(0)
            page.get_by_role("spinbutton", name="Tokens a day for member").fill("10")
            page.get_by_role("button", name="Save the budget of member").click()
            expect(
                page.get_by_role("status").filter(has_text="Saved the budget of member")
            ).to_be_visible()
            expect(bob_row).to_contain_text("16 of 10")
            assert call(refusal_to_bob) == (429, "insufficient_quota")
            # bob's own budget wins over his role's
            page.get_by_role("spinbutton", name="Tokens a day for bob").fill("1000")
            page.get_by_role("button", name="Save the budget of bob").click()
            expect(
                page.get_by_role("status").filter(has_text="Saved the budget of bob")
            ).to_be_visible()
            expect(bob_row).to_contain_text("16 of 1,000")
            expect(page.get_by_role("spinbutton", name="Tokens a day for bob")).to_have_value(
                "1000"
            )
            assert call(ask_as_bob) == 200
            # who may use the model: moderators and above; bob is kept out
            page.get_by_role("combobox", name="Lowest role that may use echo").select_option(
                "moderator"
            )
            page.get_by_role("button", name="Save who may use echo").click()
            expect(
                page.get_by_role("status").filter(has_text="echo: moderator and above")
            ).to_be_visible()
            assert call(refusal_to_bob) == (404, "model_not_found")
            alice.button("Refresh usage").click()
            expect(bob_row).to_contain_text("24 of 1,000")
            # someone who has not used a model yet gets a budget of their own
            form = page.get_by_role("form", name="A participant's own budget")
            form.get_by_label("Participant").select_option(label="carol (member)")
            form.get_by_label("Requests a minute").fill("5")
            form.get_by_role("button", name="Set budget").click()
            expect(
                page.get_by_role("status").filter(has_text="Saved the budget of carol")
            ).to_be_visible()
            carol_row = today.get_by_role("row").filter(has_text="carol")
            expect(
                carol_row.get_by_role("spinbutton", name="Requests a minute for carol")
            ).to_have_value("5")
            expect(carol_row).to_contain_text("0 of 10")
            page.get_by_role("heading", name="Today against budgets").scroll_into_view_if_needed()
            shot(page, "console-model-budgets")
            assert violations(alice, "#panel-body") == []
            alice.assert_clean(console=False)

    await in_browser(scenario)
