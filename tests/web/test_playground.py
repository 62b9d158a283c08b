"""The Models view (``js/playground.js``): a person picks a configured model
and chats with it through the node's OpenAI-compatible proxy; the answer is
streamed token by token (the first chunk shows while the fake upstream still
holds the rest), Stop hangs up (the upstream hears it) and keeps what
arrived, the conversation is sent whole and kept only in the page, errors
are shown, and someone without ``models.use`` is not offered the view."""

from __future__ import annotations

import re
from typing import Any

import pytest
import trio
from playwright.sync_api import expect

from quart_mesh.config import ModelConfig
from tests.browser import Person, call, chromium, in_browser, shot
from tests.upstream import Upstream
from tests.web.conftest import Served
from tests.web.test_accessibility import violations
from tests.web.test_chat import signed_in, two_people
from tests.web.test_panels import mesh_links

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


async def test_chat_streams_stops_and_shows_errors(
    browser_ready: None, serve_node: Any, upstream: Upstream
) -> None:
    url = f"http://127.0.0.1:{upstream.port}/v1"
    node: Served = await serve_node(
        models=(
            ModelConfig("gated", url, "gated-model"),
            ModelConfig("echo", url, "echo-model"),
            ModelConfig("broken", url, "broken-model"),
        ),
    )
    alice_user, _, _ = await two_people(node)

    async def open_gate() -> None:
        upstream.gate.set()

    async def new_gate(*, opened: bool = False) -> None:
        upstream.gate = trio.Event()
        if opened:
            upstream.gate.set()

    async def open_new_gate() -> None:
        # (the upstream ends any stream once it has seen a hang-up: a new event)
        upstream.hung_up = trio.Event()
        await new_gate(opened=True)

    async def close_new_gate() -> None:
        upstream.hung_up = trio.Event()
        await new_gate()

    async def hung_up() -> None:
        with trio.fail_after(10):
            await upstream.hung_up.wait()

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            expect(alice.heading("#Town Square")).to_be_visible()
            mesh_links(alice).filter(has_text=re.compile("^Models$")).click()
            expect(alice.heading("Models", level=1)).to_be_visible()
            page = alice.page
            model = page.get_by_role("combobox", name="Model")
            expect(model.get_by_role("option")).to_have_count(3)
            model.select_option("gated")
            log = page.get_by_role("log", name="Conversation with the model")
            expect(log).to_contain_text("Ask gated anything.")
            message = alice.textbox("Message")
            answers = log.get_by_role("article", name="gated")
            said = page.get_by_role("form", name="Message the model").get_by_role("status")

            # streamed: the first chunk shows while the upstream holds the rest
            message.fill("one two three")
            message.press("Enter")
            expect(log.get_by_role("article", name="You")).to_have_text("Youone two three")
            expect(answers.locator(".pg-text")).to_have_text("echo:")
            assert upstream.chunks_sent == 1
            expect(log).to_have_attribute("aria-busy", "true")
            expect(alice.button("Send")).to_be_disabled()
            expect(alice.button("Stop")).to_be_enabled()
            call(open_gate)
            expect(answers.locator(".pg-text")).to_have_text("echo: one two three")
            expect(log).to_have_attribute("aria-busy", "false")
            expect(said).to_have_text("gated answered.")
            expect(alice.button("Stop")).to_be_disabled()

            # Stop: the upstream hears the hang-up, what arrived is kept
            call(new_gate)
            message.fill("four five")
            alice.button("Send").click()
            expect(answers.nth(1).locator(".pg-text")).to_have_text("echo:")
            alice.button("Stop").click()
            call(hung_up)
            expect(said).to_have_text("Stopped: what arrived is kept.")
            expect(answers.nth(1).locator(".pg-text")).to_have_text("echo:")
            expect(log).to_have_attribute("aria-busy", "false")

            # the whole conversation goes with the next message
            call(open_new_gate)
            message.fill("six")
            message.press("Enter")
            expect(answers.nth(2).locator(".pg-text")).to_have_text("echo: six")
            assert upstream.requests[-1].body["messages"] == [
                {"role": "user", "content": "one two three"},
                {"role": "assistant", "content": "echo: one two three"},
                {"role": "user", "content": "four five"},
                {"role": "assistant", "content": "echo:"},
                {"role": "user", "content": "six"},
            ]
            assert upstream.requests[-1].body["stream"] is True
            shot(page, "playground")
            assert violations(alice) == []

            # New chat while an answer streams: the stream is dropped, and
            # nothing of it reaches the new conversation
            call(close_new_gate)
            message.fill("seven")
            message.press("Enter")
            expect(answers.nth(3).locator(".pg-text")).to_have_text("echo:")
            alice.button("New chat").click()
            call(hung_up)
            expect(log.get_by_role("article")).to_have_count(0)
            call(open_new_gate)
            message.fill("eight")
            message.press("Enter")
            expect(answers.locator(".pg-text")).to_have_text(["echo: eight"])
            assert upstream.requests[-1].body["messages"] == [{"role": "user", "content": "eight"}]

            # New chat forgets it
            alice.button("New chat").click()
            expect(log.get_by_role("article")).to_have_count(0)
            expect(log).to_contain_text("Ask gated anything.")

            # an upstream failure: its message, and the question back in the box
            model.select_option("broken")
            message.fill("hi")
            message.press("Enter")
            expect(page.get_by_role("alert").filter(has_text="GPU")).to_be_visible()
            expect(message).to_have_value("hi")
            expect(log.get_by_role("article")).to_have_count(0)

            # a second model, chosen: its own chat
            model.select_option("echo")
            message.fill("hello there")
            message.press("Enter")
            expect(log.get_by_role("article", name="echo")).to_have_text("echoecho: hello there")
            alice.assert_clean(console=False)  # the broken model's 502

            # signing out ends a stream under way (the upstream hears it)
            model.select_option("gated")
            call(close_new_gate)
            message.fill("nine")
            message.press("Enter")
            expect(answers.locator(".pg-text")).to_have_text(["echo:"])
            alice.button("Sign out").click()
            call(hung_up)
            expect(alice.heading("Sign in")).to_be_visible()

            # at 380 px it fits
            narrow = Person(browser, node.url, width=380, height=800)
            narrow.open()
            narrow.sign_in(alice_user.name)
            narrow.page.goto(f"{node.url}/#playground")
            narrow_model = narrow.page.get_by_role("combobox", name="Model")
            expect(narrow_model).to_be_visible()
            narrow_model.select_option("echo")
            narrow.textbox("Message").fill("a long question that wraps on a phone screen")
            narrow.button("Send").click()
            expect(
                narrow.page.get_by_role("log").get_by_role("article", name="echo")
            ).to_contain_text("a long question that wraps")
            assert narrow.page.evaluate(
                "() => document.documentElement.scrollWidth <= window.innerWidth"
            )
            shot(narrow.page, "playground-narrow")
            assert violations(narrow) == []
            narrow.assert_clean()

    await in_browser(scenario)


async def test_without_models_use_no_playground(browser_ready: None, serve_node: Any) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, _ = await two_people(node)
    # a custom role that may read and talk, but not use models nor make apps
    r = await node.mesh.http.post(
        "/api/roles",
        json={
            "name": "reader",
            "priority": 300,
            "permissions": [
                "participants.read",
                "rooms.read",
                "rooms.join",
                "messages.send",
                "apps.read",
            ],
        },
        headers=alice_user.headers,
    )
    assert r.status_code == 201, r.text
    r = await node.mesh.http.put(
        f"/api/participants/{bob_user.participant_id}/role",
        json={"role": "reader"},
        headers=alice_user.headers,
    )
    assert r.status_code == 200, r.text

    def scenario() -> None:
        with chromium() as browser:
            bob = signed_in(browser, node.url, bob_user)
            expect(bob.heading("#Town Square")).to_be_visible()
            expect(mesh_links(bob)).to_have_text(["World", "Bots", "Apps"])
            bob.page.goto(f"{node.url}/#playground")
            expect(bob.heading("#Town Square")).to_be_visible()
            expect(bob.heading("Models", level=1)).to_have_count(0)
            # the app store, yes; making apps, no
            mesh_links(bob).filter(has_text="Apps").click()
            expect(bob.heading("App store")).to_be_visible()
            expect(bob.page.get_by_text("No app is deployed yet.")).to_be_visible()
            expect(bob.page.get_by_text("You have no app.")).to_be_visible()
            expect(bob.button("New app")).to_have_count(0)
            expect(bob.heading("Generate from a prompt")).to_have_count(0)
            bob.assert_clean()

    await in_browser(scenario)


async def test_a_stream_that_stalls_ends_with_the_nodes_error(
    browser_ready: None, serve_node: Any, upstream: Upstream
) -> None:
    """The proxy ends a stream whose upstream goes quiet for ``model_timeout``
    with a ``data: {"error": …}`` event: its message is shown, what arrived
    is kept."""
    url = f"http://127.0.0.1:{upstream.port}/v1"
    node: Served = await serve_node(
        models=(ModelConfig("gated", url, "gated-model"),), model_timeout=1.0
    )
    alice_user, _, _ = await two_people(node)

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user, color_scheme="dark")
            expect(alice.heading("#Town Square")).to_be_visible()
            alice.page.goto(f"{node.url}/#playground")
            message = alice.textbox("Message")
            message.fill("one two")
            message.press("Enter")
            log = alice.page.get_by_role("log", name="Conversation with the model")
            answer = log.get_by_role("article", name="gated").locator(".pg-text")
            expect(answer).to_have_text("echo:")
            expect(alice.page.get_by_role("alert")).to_have_text("the upstream stopped sending")
            expect(answer).to_have_text("echo:")
            expect(log).to_have_attribute("aria-busy", "false")
            expect(alice.button("Send")).to_be_enabled()
            assert violations(alice) == []  # the dark theme too
            alice.assert_clean()

    await in_browser(scenario)
