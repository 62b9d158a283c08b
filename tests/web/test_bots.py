"""The Bots view (``js/bots.js``) in a real browser: the list kept live, an
admin spawns a managed bot that answers in the chat, sends it a command and
reads the answer, kills it; an ``llm`` bot gets its API key from the vault,
decrypted in the page and sent once (the fake upstream receives it); an
external bot is bootstrapped and its token works; a member is offered no
spawn form and no kill buttons."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import trio
from playwright.sync_api import expect

from quart_mesh.config import ModelConfig
from quart_mesh.vault_client import encrypt
from tests.browser import Person, call, chromium, in_browser, shot
from tests.upstream import Upstream
from tests.web.conftest import Served
from tests.web.test_accessibility import violations
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]

API_KEY = "sk-vault-held-key-7f6e5d4c3b2a1908"
PHRASE = "a passphrase for the bots test"


def open_bots(person: Person) -> None:
    nav = person.page.get_by_role("navigation", name="Rooms and people")
    nav.get_by_role("link", name=re.compile("^Bots$")).click()
    expect(person.heading("Bots", level=1)).to_be_visible()


def bot_row(person: Person, name: str) -> Any:
    return person.page.get_by_role("table", name=re.compile(r"^\d+ bots?$")).get_by_role(
        "row", name=re.compile(f"^{name} ")
    )


async def agents(node: Served, token_headers: dict[str, str]) -> list[dict[str, Any]]:
    r = await node.mesh.http.get("/api/agents", headers=token_headers)
    assert r.status_code == 200, r.text
    return list(r.json())


async def test_an_admin_spawns_commands_and_kills_an_echo_bot(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, _ = await two_people(node)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            expect(alice.heading("#Town Square")).to_be_visible()
            open_bots(alice)
            expect(alice.page.get_by_text("No bots yet.")).to_be_visible()

            spawn = alice.page.get_by_role("region", name="Spawn a managed bot")
            spawn.get_by_role("textbox", name="Name").fill("parrot")
            spawn.get_by_role("combobox", name="Type").select_option("echo")
            expect(spawn.get_by_role("combobox", name="Model")).to_be_hidden()
            spawn.get_by_role("checkbox", name="Town Square").check()
            spawn.get_by_role("button", name="Spawn").click()
            expect(spawn.get_by_role("status")).to_have_text("Spawned parrot: starting.")
            row = bot_row(alice, "parrot")
            expect(row).to_contain_text("running")
            expect(row).to_contain_text("online")
            expect(row).to_contain_text("Town Square")
            expect(row.get_by_role("cell").nth(1)).to_have_text("echo")
            expect(row.get_by_role("cell").nth(3)).to_have_text("0")

            # it answers in the room
            alice.open_room("Town Square")
            alice.send("hello parrot")
            expect(alice.message("echo: hello parrot")).to_be_visible()

            # a command, and its answer
            open_bots(alice)
            commands = alice.page.get_by_role("region", name="Send a command")
            alice.button("Send a command to parrot").click()
            expect(commands.get_by_role("combobox", name="Bot")).to_be_focused()
            expect(commands.get_by_role("combobox", name="Command")).to_have_value("status")
            commands.get_by_role("button", name="Send command").click()
            result = commands.get_by_role("listitem").first
            expect(result).to_contain_text("parrot: status — completed")
            expect(result).to_contain_text('"status": "running"')
            expect(result).to_contain_text('"type": "echo"')
            # an unknown command fails, and says why
            commands.get_by_role("combobox", name="Command").fill("dance")
            commands.get_by_role("button", name="Send command").click()
            expect(result).to_contain_text("parrot: dance — failed")
            expect(result).to_contain_text("unknown command")
            alice.heading("Bots", level=1).scroll_into_view_if_needed()
            shot(alice.page, "bots")
            assert violations(alice) == []

            # a member sees the list, but nothing to spawn, command or kill
            bob = signed_in(browser, node.url, bob_user)
            expect(bob.heading("#Town Square")).to_be_visible()
            open_bots(bob)
            expect(bot_row(bob, "parrot")).to_contain_text("online")
            assert violations(bob) == []
            expect(bob.page.get_by_role("region", name="Spawn a managed bot")).to_have_count(0)
            expect(bob.page.get_by_role("region", name="Send a command")).to_have_count(0)
            expect(bob.button("Kill parrot")).to_have_count(0)

            # 380 px wide: the table scrolls in its own box, the page does not
            narrow = signed_in(browser, node.url, alice_user, width=380, height=800)
            expect(narrow.heading("#Town Square")).to_be_visible()
            narrow.page.goto(node.url + "/#bots")
            expect(bot_row(narrow, "parrot")).to_contain_text("running")
            wide = narrow.page.evaluate(
                "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert wide <= 0, wide
            shot(narrow.page, "bots-narrow")
            assert violations(narrow) == []

            # killed: gone from the list, for the member too, and from the node
            alice.button("Kill parrot").click()
            alice.button("Kill for good").click()
            expect(alice.page.get_by_text("Killed parrot.")).to_be_visible()
            expect(alice.page.get_by_text("No bots yet.")).to_be_visible()
            assert call(agents, node, alice_user.headers) == []
            expect(bob.page.get_by_text("No bots yet.")).to_be_visible(timeout=20_000)
            for person in (alice, bob, narrow):
                person.assert_clean(console=person is not alice)

    await in_browser(scenario, timeout=180)


async def test_a_vault_key_for_an_llm_bot_and_a_bootstrapped_bot(
    browser_ready: None, serve_node: Any, upstream: Upstream
) -> None:
    node: Served = await serve_node(
        models=(ModelConfig("smart", f"http://127.0.0.1:{upstream.port}/v1", "echo-model"),)
    )
    alice_user, _, _ = await two_people(node)
    blob = await trio.to_thread.run_sync(lambda: encrypt(API_KEY, PHRASE, label="openai-main"))
    r = await node.mesh.http.post(
        "/api/vault/entries",
        json={"label": "openai-main", "provider": "openai", "blob": blob},
        headers=alice_user.headers,
    )
    assert r.status_code == 201, r.text

    async def me(token: str) -> tuple[int, dict[str, Any]]:
        r = await node.mesh.http.get("/api/auth/me", headers={"Authorization": f"Bearer {token}"})
        return r.status_code, r.json()

    sent: list[str] = []

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            alice.page.on(
                "request", lambda r: sent.append(f"{r.method} {r.url} {r.post_data or ''}")
            )
            expect(alice.heading("#Town Square")).to_be_visible()
            open_bots(alice)
            spawn = alice.page.get_by_role("region", name="Spawn a managed bot")
            spawn.get_by_role("textbox", name="Name").fill("helper")
            spawn.get_by_role("combobox", name="Type").select_option("llm")
            expect(spawn.get_by_role("combobox", name="Model")).to_have_value("smart")
            spawn.get_by_role("checkbox", name="Town Square").check()
            key = spawn.get_by_role("combobox", name="API key")
            key.select_option(label="From the vault: openai-main (openai)")
            passphrase = spawn.get_by_role("textbox", name="Vault passphrase")
            passphrase.fill("not it")
            spawn.scroll_into_view_if_needed()
            shot(alice.page, "bots-spawn")
            spawn.get_by_role("button", name="Spawn").click()
            expect(spawn.get_by_role("alert")).to_contain_text("Wrong passphrase")
            expect(passphrase).to_have_value("")
            assert call(agents, node, alice_user.headers) == []
            passphrase.fill(PHRASE)
            spawn.get_by_role("button", name="Spawn").click()
            expect(spawn.get_by_role("status")).to_have_text("Spawned helper: starting.")
            expect(passphrase).to_be_hidden()  # the key choice is back to "No key"
            assert spawn.locator("input[type=password]").input_value() == ""
            expect(bot_row(alice, "helper")).to_contain_text("running")
            # it has joined the room (it hears what is said there from then on)
            expect(bot_row(alice, "helper")).to_contain_text("Town Square")

            # the bot answers through the model, paying with the vault's key
            alice.open_room("Town Square")
            alice.send("@helper hello there")
            expect(alice.message("echo: alice: @helper hello there")).to_be_visible(timeout=30_000)
            asked = [s for s in upstream.requests if s.path.endswith("/chat/completions")]
            assert asked
            assert asked[0].headers["authorization"] == f"Bearer {API_KEY}"

            # bootstrap an external bot: its token, addresses and command line
            open_bots(alice)
            boot = alice.page.get_by_role("region", name="Bootstrap an external bot")
            boot.get_by_role("textbox", name="Name").fill("outside")
            boot.get_by_role("combobox", name="Type").select_option("nanoclaw")
            boot.get_by_role("button", name="Bootstrap").click()
            expect(boot.get_by_role("heading", name="Bootstrapped outside")).to_be_visible()
            token = boot.get_by_role("textbox", name="Token", exact=True).input_value()
            ws_url = node.url.replace("http://", "ws://") + "/ws"
            expect(boot.get_by_role("textbox", name="WebSocket address")).to_have_value(ws_url)
            expect(boot.get_by_role("textbox", name="Model address")).to_have_value(
                node.url + "/api/models/v1"
            )
            line = boot.get_by_role("textbox", name="mesh-bridge command line").input_value()
            assert f"mesh-bridge --mesh {ws_url} --exec ./reply.sh --state outside.state" in line
            assert "MESH_TOKEN" in line
            assert token not in line
            expect(boot.get_by_role("button", name="Copy the token")).to_be_visible()
            assert violations(alice) == []
            status, who = call(me, token)
            assert status == 200, who
            assert (who["name"], who["role"]) == ("outside", "agent")
            expect(bot_row(alice, "outside")).to_contain_text("nanoclaw")
            # left and opened again: the token is not shown any more
            alice.open_room("Town Square")
            open_bots(alice)
            expect(alice.page.get_by_role("heading", name="Bootstrapped outside")).to_have_count(0)

            # the key went once, in the spawn request; the passphrase never
            kept = alice.page.evaluate(
                "() => JSON.stringify([{...localStorage}, {...sessionStorage}])"
            )
            for secret in (API_KEY, PHRASE, token):
                assert secret not in kept
            assert not [r for r in sent if PHRASE in r or json.dumps(PHRASE)[1:-1] in r]
            carrying = [r for r in sent if API_KEY in r]
            assert len(carrying) == 1
            assert carrying[0].startswith(f"POST {node.url}/api/agents/spawn ")
            alice.assert_clean(console=False)  # the wrong passphrase: no request, but

    await in_browser(scenario, timeout=180)
