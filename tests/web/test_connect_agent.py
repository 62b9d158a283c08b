"""*Connect an AI agent* (the Bots view, ``js/connect.js``) in a real browser:
a person bootstraps a bot identity for an agent in the dialog and is shown,
filled in, the Claude Code command, the VS Code and Cursor ``mcp.json``, the
MCP address and header and the A2A agent card; the token works; the copy
buttons copy; the dialog is a named, keyboard-usable modal that forgets the
token when it closes; a person may give the agent their own account instead
(a token of its own, from their password)."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import pytest
from playwright.sync_api import Route, expect

from tests.browser import PASSWORD, Person, call, chromium, in_browser, shot, until
from tests.e2e.test_mcp import mcp_session
from tests.web.conftest import Served
from tests.web.test_accessibility import violations
from tests.web.test_bots import bot_row, open_bots
from tests.web.test_chat import signed_in, two_people

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.client_only,
    # the MCP SDK client's HTTP stack leaves a response stream's generator to
    # the garbage collector when its SSE stream is cut (as in tests/e2e/test_mcp.py)
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <async_generator object "
        "(PoolByteStream|Response|EventSource)[.]"
        ":pytest.PytestUnraisableExceptionWarning"
    ),
]

#: what ``claude mcp add`` is given: the transport, the address and the
#: header, each one shell word (single-quoted)
CLAUDE = re.compile(
    r"^claude mcp add --transport http mesh '(?P<url>[^']+)/mcp' "
    r"--header 'Authorization: Bearer (?P<token>[^']+)'$"
)


def field_values(person: Person) -> list[str]:
    """What the page's fields hold (``page.content()`` has no input's value)."""
    values: list[str] = person.page.evaluate(
        "() => [...document.querySelectorAll('input, textarea')].map((e) => e.value)"
    )
    return values


def open_connect(person: Person) -> Any:
    open_bots(person)
    person.button("Connect an AI agent").click()
    dialog = person.page.get_by_role("dialog", name="Connect an AI agent")
    expect(dialog).to_be_visible()
    return dialog


async def test_an_agent_gets_a_bot_identity_and_its_commands(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, _, room_id = await two_people(node)
    mcp_url = f"{node.url}/mcp"

    async def me(token: str) -> tuple[int, dict[str, Any]]:
        r = await node.mesh.http.get("/api/auth/me", headers={"Authorization": f"Bearer {token}"})
        return r.status_code, r.json()

    async def over_mcp(base_url: str, token: str) -> dict[str, Any]:
        # the official MCP client, given what the command gives Claude Code
        async with mcp_session(base_url, token) as session:
            tools = {tool.name for tool in (await session.list_tools()).tools}
            assert {"list_rooms", "join_room", "send_message", "wait_for_messages"} <= tools
            result = await session.call_tool("join_room", {"room": room_id})
            assert not result.is_error, result.content
            result = await session.call_tool(
                "send_message", {"room": room_id, "content": "hello from an MCP agent"}
            )
            assert not result.is_error, result.content
            return dict(result.structured_content or {})

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            alice.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=node.url)
            expect(alice.heading("#Town Square")).to_be_visible()
            dialog = open_connect(alice)
            # a bot of its own is the first choice, and has the focus
            mine = dialog.get_by_role("radio", name="A bot of its own")
            expect(mine).to_be_checked()
            expect(mine).to_be_focused()
            assert violations(alice) == []
            shot(alice.page, "connect-agent-choose")

            # the keyboard alone: the name, then Enter
            alice.page.keyboard.press("Tab")
            expect(dialog.get_by_role("textbox", name="Bot name")).to_be_focused()
            alice.page.keyboard.type("claude-helper")
            alice.page.keyboard.press("Enter")
            expect(dialog.get_by_role("heading", name="A token for claude-helper")).to_be_focused()
            token = dialog.get_by_role("textbox", name="Token", exact=True).input_value()
            assert token.count(".") == 2  # a JWT

            claude = dialog.get_by_role("textbox", name="Claude Code command").input_value()
            assert claude == (
                f"claude mcp add --transport http mesh '{mcp_url}' "
                f"--header 'Authorization: Bearer {token}'"
            )
            # (what a shell makes of it: the same three words)
            words = shlex.split(claude)
            assert words[-3:] == [mcp_url, "--header", f"Authorization: Bearer {token}"]
            vscode = json.loads(
                dialog.get_by_role("textbox", name="VS Code .vscode/mcp.json").input_value()
            )
            assert vscode == {
                "servers": {
                    "mesh": {
                        "type": "http",
                        "url": mcp_url,
                        "headers": {"Authorization": f"Bearer {token}"},
                    }
                }
            }
            cursor = json.loads(
                dialog.get_by_role("textbox", name="Cursor ~/.cursor/mcp.json").input_value()
            )
            assert cursor == {
                "mcpServers": {
                    "mesh": {"url": mcp_url, "headers": {"Authorization": f"Bearer {token}"}}
                }
            }
            expect(
                dialog.get_by_role("textbox", name="MCP address (Streamable HTTP)")
            ).to_have_value(mcp_url)
            expect(dialog.get_by_role("textbox", name="Authorization header")).to_have_value(
                f"Authorization: Bearer {token}"
            )
            expect(dialog.get_by_role("textbox", name="Agent card")).to_have_value(
                f"{node.url}/.well-known/agent-card.json"
            )
            # each copy button is named for what it copies, and copies it
            dialog.get_by_role("button", name="Copy the Claude Code command").click()
            expect(dialog.get_by_role("status")).to_have_text("Copied.")
            assert alice.page.evaluate("() => navigator.clipboard.readText()") == claude
            dialog.get_by_role("button", name="Copy the token").click()
            assert alice.page.evaluate("() => navigator.clipboard.readText()") == token
            for name in (
                "Copy the VS Code configuration",
                "Copy the Cursor configuration",
                "Copy the MCP address",
                "Copy the Authorization header",
                "Copy the agent card address",
            ):
                expect(dialog.get_by_role("button", name=name)).to_be_visible()
            assert violations(alice) == []
            shot(alice.page, "connect-agent")

            # the token works, as the bot: over REST, and over MCP as the command says
            status, who = call(me, token)
            assert status == 200, who
            assert (who["name"], who["role"], who["type"]) == ("claude-helper", "agent", "nanoclaw")
            given = CLAUDE.match(claude)
            assert given is not None, claude
            assert (given["url"], given["token"]) == (node.url, token)
            call(over_mcp, given["url"], given["token"])
            # the bot is in the list, and may be commanded from this page
            alice.page.keyboard.press("Escape")
            expect(dialog).to_be_hidden()
            expect(alice.button("Connect an AI agent")).to_be_focused()
            expect(bot_row(alice, "claude-helper")).to_contain_text("nanoclaw")
            expect(alice.button("Send a command to claude-helper")).to_be_visible()

            # opened again: the token is not shown any more, nor kept anywhere
            alice.button("Connect an AI agent").click()
            expect(dialog.get_by_role("textbox", name="Bot name")).to_have_value("")
            expect(dialog.get_by_role("textbox", name="Token", exact=True)).to_have_count(0)
            kept = alice.page.evaluate(
                "() => JSON.stringify([{...localStorage}, {...sessionStorage}])"
            )
            assert token not in kept
            assert not any(token in value for value in field_values(alice))

            # no name: said, nothing made
            dialog.get_by_role("button", name="Create the token").click()
            expect(dialog.get_by_role("alert")).to_have_text("The bot needs a name.")
            expect(dialog.get_by_role("textbox", name="Bot name")).to_be_focused()
            dialog.get_by_role("button", name="Close connect an AI agent").click()
            expect(dialog).to_be_hidden()
            # what the agent said over MCP, in the room
            alice.open_room("Town Square")
            expect(alice.message("hello from an MCP agent")).to_contain_text("claude-helper")
            alice.assert_clean()

    await in_browser(scenario, timeout=180)


async def test_an_agent_uses_the_persons_own_account(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    _, bob_user, _ = await two_people(node)

    async def me(token: str) -> tuple[int, dict[str, Any]]:
        r = await node.mesh.http.get("/api/auth/me", headers={"Authorization": f"Bearer {token}"})
        return r.status_code, r.json()

    async def sign_out(token: str) -> int:
        r = await node.mesh.http.post(
            "/api/auth/logout", headers={"Authorization": f"Bearer {token}"}
        )
        return r.status_code

    def scenario() -> None:
        with chromium() as browser:
            # bob is a member: on this open mesh, he may bootstrap bots too
            bob = signed_in(browser, node.url, bob_user, width=380, height=800)
            expect(bob.heading("#Town Square")).to_be_visible()
            bob.page.goto(node.url + "/#bots")
            expect(bob.heading("Bots", level=1)).to_be_visible()
            bob.button("Connect an AI agent").click()
            dialog = bob.page.get_by_role("dialog", name="Connect an AI agent")
            dialog.get_by_role("radio", name="Me: it uses my account").check()
            expect(dialog.get_by_role("textbox", name="Bot name")).to_be_hidden()
            password = dialog.get_by_role("textbox", name="Your password")
            password.fill("not my password")
            dialog.get_by_role("button", name="Create the token").click()
            expect(dialog.get_by_role("alert")).to_have_text("wrong name or password")
            expect(password).to_have_value("")
            password.fill(PASSWORD)
            password.press("Enter")
            expect(dialog.get_by_role("heading", name="A token for you, bob")).to_be_visible()
            token = dialog.get_by_role("textbox", name="Token", exact=True).input_value()
            assert token != bob.token()
            claude = dialog.get_by_role("textbox", name="Claude Code command").input_value()
            assert f"Bearer {token}" in claude
            assert f" '{node.url}/mcp' " in claude
            # nothing makes the narrow page scroll sideways
            wide = bob.page.evaluate(
                "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert wide <= 0, wide
            assert violations(bob) == []
            shot(bob.page, "connect-agent-narrow")
            status, who = call(me, token)
            assert (status, who["name"]) == (200, "bob")
            # the agent's token is its own: signing it out leaves the page signed in
            assert call(sign_out, token) == 200
            dialog.get_by_role("button", name="Done").click()
            expect(dialog).to_be_hidden()
            bob.page.goto(node.url + "/#room")  # (the sidebar is folded at 380 px)
            expect(bob.heading("#Town Square")).to_be_visible()
            bob.send("still here")
            expect(bob.message("still here")).to_be_visible()
            bob.assert_clean(console=False)  # the wrong password: a 401 in the console

    await in_browser(scenario, timeout=180)


async def test_the_connect_dialog_closed_while_the_token_is_made_keeps_no_token(
    browser_ready: None, serve_node: Any
) -> None:
    """An answer that comes after the dialog was closed (Escape) is dropped:
    the token is drawn nowhere, the bot made is listed and the person told."""
    node: Served = await serve_node()
    alice_user, _, _ = await two_people(node)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            expect(alice.heading("#Town Square")).to_be_visible()
            held: list[Route] = []
            alice.page.route("**/api/agents/bootstrap", lambda route: held.append(route))
            open_bots(alice)
            alice.button("Connect an AI agent").click()
            dialog = alice.page.get_by_role("dialog", name="Connect an AI agent")
            dialog.get_by_role("textbox", name="Bot name").fill("late-bot")
            dialog.get_by_role("button", name="Create the token").click()
            until(alice, lambda: bool(held))
            alice.page.keyboard.press("Escape")
            expect(dialog).to_be_hidden()
            with alice.page.expect_response("**/api/agents/bootstrap") as answer:
                held[0].continue_()
            token = answer.value.json()["token"]
            # the bot was made all the same: the person is told, the list has it,
            # and the token the closed dialog would have shown is nowhere
            expect(alice.page.locator("#toast")).to_contain_text("The bot late-bot was made")
            assert not any(token in value for value in field_values(alice))
            expect(bot_row(alice, "late-bot")).to_be_visible()

    await in_browser(scenario, timeout=120)
