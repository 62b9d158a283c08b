"""A room's open tasks (``js/tasks.js``) in a real browser: the *Tasks*
region of the room view lists the tasks the node holds for the room when it
opens, and follows ``task_created`` / ``task_updated`` live; a bot that
knows nothing of tasks (a WebSocket client of the test) answers in the
task's thread and the task leaves the list, completed; the creator cancels
one from the page, and answers a bot that asked back; a member sees the
list but may neither answer nor cancel."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.browser import Person, call, chromium, in_browser, shot
from tests.helpers import User, connect
from tests.web.conftest import Served
from tests.web.test_accessibility import violations
from tests.web.test_chat import signed_in, two_people

pytestmark = [pytest.mark.e2e, pytest.mark.client_only]


def tasks_of(person: Person) -> Any:
    """The room view's list of open tasks."""
    return person.page.get_by_role("region", name="Tasks").get_by_role("listitem")


async def test_a_rooms_open_tasks_live_answered_and_canceled(
    browser_ready: None, serve_node: Any
) -> None:
    node: Served = await serve_node()
    alice_user, bob_user, room_id = await two_people(node)
    r = await node.mesh.http.post(
        "/api/agents/bootstrap", json={"name": "helper", "type": "nanoclaw"}
    )
    assert r.status_code == 201, r.text
    bot = User(r.json()["agentId"], "helper", r.json()["token"])
    await node.mesh.join(bot, room_id)

    async def create(content: str, title: str | None = None) -> dict[str, Any]:
        body = {"roomId": room_id, "agentId": bot.participant_id, "content": content}
        if title is not None:
            body["title"] = title
        r = await node.mesh.http.post("/api/tasks", json=body, headers=alice_user.headers)
        assert r.status_code == 201, r.text
        return dict(r.json())

    async def state(task_id: str) -> str:
        r = await node.mesh.http.get(f"/api/tasks/{task_id}", headers=alice_user.headers)
        assert r.status_code == 200, r.text
        return str(r.json()["task"]["state"])

    async def bot_answers(thread_id: str, content: str) -> None:
        # a bot that knows nothing of tasks: it answers in the request's thread
        async with connect(node.url, bot) as ws:
            await ws.send(type="send_message", roomId=room_id, content=content, threadId=thread_id)
            await ws.expect("message", content=content, timeout=10)

    async def bot_asks(task_id: str, question: str) -> None:
        r = await node.mesh.http.patch(
            f"/api/tasks/{task_id}",
            json={"state": "input-required", "message": question},
            headers=bot.headers,
        )
        assert r.status_code == 200, r.text

    # made before anyone looks: the page reads it when the room opens
    summary = await create("@helper please summarize this week's messages", "Summarize the week")

    def scenario() -> None:
        with chromium() as browser:
            alice = signed_in(browser, node.url, alice_user)
            bob = signed_in(browser, node.url, bob_user, width=380, height=800)
            for person in (alice, bob):
                expect(person.heading("#Town Square")).to_be_visible()
                expect(tasks_of(person)).to_have_count(1)
            first = tasks_of(alice).first
            expect(first).to_contain_text("Summarize the week")
            expect(first).to_contain_text("for helper")
            expect(first).to_contain_text("submitted")
            expect(alice.page.get_by_role("region", name="Tasks")).to_contain_text("1 open")

            # a new one arrives live, for both; without a title, the request shows
            translate = call(create, "@helper translate the welcome text into French")
            for person in (alice, bob):
                expect(tasks_of(person)).to_have_count(2)
            # (said to screen readers, beside the list)
            news = (
                alice.page.get_by_role("main", name="Conversation")
                .get_by_role("status")
                .filter(has_text="New task for helper")
            )
            expect(news).to_have_text(
                "New task for helper: @helper translate the welcome text into French"
            )
            newest = tasks_of(alice).first
            expect(newest).to_contain_text("translate the welcome text into French")
            expect(newest).to_contain_text("for helper")
            # the bot asks back: the task needs an answer, and says the question
            call(bot_asks, translate["taskId"], "Into French of France or of Québec?")
            for person in (alice, bob):
                expect(tasks_of(person).first).to_contain_text("needs an answer")
                expect(tasks_of(person).first).to_contain_text(
                    "Into French of France or of Québec?"
                )
            assert violations(alice) == []
            assert violations(bob) == []
            shot(alice.page, "tasks")
            # on a phone, nothing scrolls sideways
            wide = bob.page.evaluate(
                "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert wide <= 0, wide
            shot(bob.page, "tasks-phone")

            # the creator answers from the list (a member cannot): the task works again
            expect(bob.button(re.compile("^Answer: "))).to_have_count(0)
            question = "translate the welcome text into French"
            alice.button(re.compile(f"^Answer: .*{question}")).click()
            box = alice.page.get_by_role("textbox", name=re.compile(f"^Your answer: .*{question}"))
            expect(box).to_be_focused()
            box.fill("French of France, please")
            shot(alice.page, "tasks-answer")
            box.press("Enter")
            for person in (alice, bob):
                expect(tasks_of(person).first).to_contain_text("working")
            expect(alice.message("French of France, please")).to_contain_text("in a thread")
            assert call(state, translate["taskId"]) == "working"

            # the creator may cancel; a member may not
            expect(bob.button(re.compile("^Cancel task: "))).to_have_count(0)
            expect(alice.button(re.compile("^Cancel task: "))).to_have_count(2)

            # a task's thread: its request, where the agent answers
            alice.button("Thread of Summarize the week").click()
            thread = alice.page.get_by_role("complementary", name="Thread")
            expect(thread).to_contain_text("please summarize this week's messages")

            # the bot answers in the thread: the task is completed, and leaves the list
            call(bot_answers, summary["messageId"], "Three rooms talked about the launch.")
            expect(thread).to_contain_text("Three rooms talked about the launch.")
            for person in (alice, bob):
                expect(tasks_of(person)).to_have_count(1)
            assert call(state, summary["taskId"]) == "completed"

            # cancelled from the page: gone for both, canceled on the node
            title = tasks_of(alice).first.locator(".task-title").inner_text()
            alice.button(f"Cancel task: {title}").click()
            for person in (alice, bob):
                expect(person.page.get_by_role("region", name="Tasks")).to_be_hidden()
            assert call(state, translate["taskId"]) == "canceled"
            # (the focus was on the button: it goes back to the conversation)
            expect(alice.timeline).to_be_focused()
            for person in (alice, bob):
                person.assert_clean()

    await in_browser(scenario, timeout=180)
