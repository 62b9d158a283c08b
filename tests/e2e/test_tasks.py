"""Tasks (issue 30, decision 0063) over a served node: who may create them,
how an agent moves them, how a bot that knows nothing of tasks completes
one by replying, cancel and reply by the creator, who sees their events,
and that they survive a restart."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh import Settings, create_app, serve
from quart_mesh.app import MeshApp
from quart_mesh.config import Rate
from quart_mesh.errors import BadRequest, Conflict, NotFound
from quart_mesh.events import TaskCreated, TaskUpdated
from quart_mesh.records import Task, TaskState
from quart_mesh.services.tasks import MOVES
from quart_mesh.store import outbox
from tests.helpers import Mesh, Socket, User, assert_error, connect, serve_on

pytestmark = pytest.mark.e2e


@pytest.fixture
def served_app(settings: Settings) -> MeshApp:
    return create_app(settings)


@pytest.fixture
async def base_url(served_app: MeshApp, nursery: trio.Nursery) -> str:
    """The node served on loopback; the test may also reach it (``served_app.node``)."""
    url: str = await nursery.start(
        lambda task_status: serve(served_app, port=0, task_status=task_status)
    )
    return url


async def bootstrap(mesh: Mesh, name: str, by: User | None = None) -> User:
    r = await mesh.http.post(
        "/api/agents/bootstrap",
        # an A2A agent too: Tasks.ask takes only those (decision 0062)
        json={"name": name, "type": "nanoclaw", "a2a": True},
        headers=by.headers if by else None,
    )
    assert r.status_code == 201, r.text
    return User(r.json()["agentId"], name, r.json()["token"])


async def assign(mesh: Mesh, by: User, who: User, role: str) -> None:
    r = await mesh.http.put(
        f"/api/participants/{who.participant_id}/role", json={"role": role}, headers=by.headers
    )
    assert r.status_code == 200, r.text


async def create(mesh: Mesh, who: User, room_id: str, agent: User, **extra: Any) -> httpx.Response:
    body = {"roomId": room_id, "agentId": agent.participant_id, "content": "do it", **extra}
    return await mesh.http.post("/api/tasks", json=body, headers=who.headers)


async def created(mesh: Mesh, who: User, room_id: str, agent: User, **extra: Any) -> dict[str, Any]:
    r = await create(mesh, who, room_id, agent, **extra)
    assert r.status_code == 201, r.text
    return dict(r.json())


async def moved(ws: Socket, state: str) -> dict[str, Any]:
    """The task of the next ``task_updated`` that says *state*."""
    while True:
        task: dict[str, Any] = (await ws.expect("task_updated"))["task"]
        if task["state"] == state:
            return task


async def get(mesh: Mesh, who: User, task_id: str) -> httpx.Response:
    return await mesh.http.get(f"/api/tasks/{task_id}", headers=who.headers)


async def patch(mesh: Mesh, who: User, task_id: str, **body: Any) -> httpx.Response:
    return await mesh.http.patch(f"/api/tasks/{task_id}", json=body, headers=who.headers)


async def test_who_may_create_a_task(mesh: Mesh) -> None:
    owner = await mesh.setup()
    boss = await mesh.register("boss")  # a super_agent
    member = await mesh.register("member")
    outsider = await mesh.register("outsider")  # a super_agent, not in the room
    watched = await mesh.register("watched")  # a super_agent the room's rule denies
    bot = await bootstrap(mesh, "worker")
    lead_bot = await bootstrap(mesh, "lead-bot", owner)  # a bot that is a super_agent
    stray = await bootstrap(mesh, "stray")  # not in the room
    for who in (boss, outsider, watched, lead_bot):
        await assign(mesh, owner, who, "super_agent")
    room = (await mesh.create_room(owner, "work"))["roomId"]
    for who in (boss, member, watched, bot, lead_bot):
        await mesh.join(who, room)
    guest = await mesh.guest()
    await mesh.join(guest, room)
    r = await mesh.http.post(
        f"/api/rooms/{room}/permissions",
        json={
            "targetType": "participant",
            "target": watched.participant_id,
            "permission": "rooms.read",
            "effect": "deny",
        },
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text

    task = await created(mesh, boss, room, bot, content="Summarize the week\nin three lines")
    assert task["state"] == "submitted"
    assert task["title"] == "Summarize the week"  # the request's first line
    assert task["creatorId"] == boss.participant_id
    assert task["agentId"] == bot.participant_id
    assert task["contextId"] == task["taskId"]
    assert task["via"] == "rest"
    assert task["managed"] is False
    assert task["statusMessage"] is None
    assert task["result"] is None
    # the request is the creator's message in the room
    [request] = [m for m in await mesh.messages(owner, room) if m["messageId"] == task["messageId"]]
    assert request["senderId"] == boss.participant_id
    assert request["content"] == "Summarize the week\nin three lines"
    titled = await created(mesh, owner, room, bot, title="  weekly  ")
    assert titled["title"] == "weekly"
    assert (await created(mesh, lead_bot, room, bot))["creatorId"] == lead_bot.participant_id

    # the permission, the room, the agent
    assert_error(await create(mesh, member, room, bot), 403, "forbidden")
    assert_error(await create(mesh, guest, room, bot), 403, "forbidden")
    assert_error(await create(mesh, outsider, room, bot), 403, "not_member")
    assert_error(await create(mesh, watched, room, bot), 403, "forbidden")
    assert_error(await create(mesh, boss, room, member), 400, "not_an_agent")
    assert_error(await create(mesh, boss, room, stray), 400, "agent_not_in_room")
    ghost = User("01ARZ3NDEKTSV4RRFFQ69G5FAV", "ghost", "")
    assert_error(await create(mesh, boss, room, ghost), 404, "participant_not_found")
    assert_error(await create(mesh, boss, "01ARZ3NDEKTSV4RRFFQ69G5FAV", bot), 404)
    assert_error(await create(mesh, boss, room, bot, title="x" * 201), 400, "invalid_title")
    assert_error(await create(mesh, boss, room, bot, content="  "), 400, "empty_content")
    r = await mesh.http.post("/api/tasks", json={"roomId": room}, headers=boss.headers)
    assert_error(r, 400, "missing_field")
    assert_error(await mesh.http.post("/api/tasks", json={}), 401)
    # a deleted bot's token is refused at once
    r = await mesh.http.delete(f"/api/agents/{lead_bot.participant_id}", headers=owner.headers)
    assert r.status_code == 200, r.text
    assert_error(await create(mesh, lead_bot, room, bot), 401)

    # who sees it: whoever may read the room
    assert (await get(mesh, member, task["taskId"])).status_code == 200
    for who in (outsider, watched):
        assert_error(await get(mesh, who, task["taskId"]), 404, "task_not_found")
        r = await mesh.http.get("/api/tasks", params={"roomId": room}, headers=who.headers)
        assert_error(r, 403)
    assert_error(await get(mesh, boss, "nope"), 404, "task_not_found")
    r = await mesh.http.get("/api/tasks", params={"roomId": room}, headers=member.headers)
    assert r.status_code == 200, r.text
    assert [t["taskId"] for t in r.json()["tasks"]][-1] == task["taskId"]  # newest first
    assert len(r.json()["tasks"]) == 3
    # one's own: as creator, or as agent
    r = await mesh.http.get("/api/tasks", headers=boss.headers)
    assert [t["taskId"] for t in r.json()["tasks"]] == [task["taskId"]]
    r = await mesh.http.get("/api/tasks", params={"limit": 2}, headers=bot.headers)
    page = r.json()["tasks"]
    assert len(page) == 2
    r = await mesh.http.get(
        "/api/tasks", params={"before": page[-1]["taskId"]}, headers=bot.headers
    )
    assert [t["taskId"] for t in r.json()["tasks"]] == [task["taskId"]]
    r = await mesh.http.get("/api/tasks", params={"limit": 0}, headers=bot.headers)
    assert_error(r, 400, "invalid_limit")


async def test_a_bot_that_knows_nothing_of_tasks_completes_one_by_replying(
    base_url: str, mesh: Mesh
) -> None:
    owner = await mesh.setup()
    member = await mesh.register("member")
    outsider = await mesh.register("outsider")
    bot = await bootstrap(mesh, "echo-like")
    room = (await mesh.create_room(owner, "work"))["roomId"]
    for who in (member, bot):
        await mesh.join(who, room)
    async with (
        connect(base_url, bot) as bot_ws,
        connect(base_url, member) as member_ws,
        connect(base_url, outsider) as outsider_ws,
    ):
        task = await created(mesh, owner, room, bot, content="ping")
        # the bot sees the request as a message (and the task, addressed to it)
        request = await bot_ws.expect("message", messageId=task["messageId"])
        seen = await bot_ws.expect("task_created")
        assert seen["task"] == task
        # an unrelated message of the bot (not in the thread) is not a reply
        await bot_ws.send(type="send_message", roomId=room, content="hello, room")
        await bot_ws.expect("message", content="hello, room")
        r = await get(mesh, owner, task["taskId"])
        assert r.json()["task"]["state"] == "submitted"
        # an echo, in the request's thread: the task's result
        await bot_ws.send(
            type="send_message", roomId=room, content="echo: ping", threadId=request["messageId"]
        )
        updated = await member_ws.expect("task_updated")
        assert updated["task"]["state"] == "completed"
        assert updated["task"]["result"] == "echo: ping"
        assert updated["task"]["managed"] is False
        assert updated["task"]["taskId"] == task["taskId"]
        r = await get(mesh, member, task["taskId"])
        body = r.json()
        assert body["task"] == updated["task"]
        assert [m["content"] for m in body["messages"]] == ["ping", "echo: ping"]
        # later replies are history; the task stays as it ended
        await bot_ws.send(
            type="send_message", roomId=room, content="more", threadId=request["messageId"]
        )
        await member_ws.expect("message", content="more")
        r = await get(mesh, member, task["taskId"])
        assert r.json()["task"]["result"] == "echo: ping"
        # the outsider saw nothing of it
        frames = await outsider_ws.settle()
        assert not [f for f in frames if f["type"].startswith("task_") or f.get("roomId") == room]
        r = await mesh.http.get("/api/tasks", params={"open": "true"}, headers=bot.headers)
        assert r.json()["tasks"] == []


async def test_the_reply_is_found_when_the_task_is_read(
    mesh: Mesh, served_app: MeshApp, base_url: str
) -> None:
    """The lazy half: the reconciler stopped, reading the task completes it."""
    owner = await mesh.setup()
    bot = await bootstrap(mesh, "echo-like")
    room = (await mesh.create_room(owner, "work"))["roomId"]
    await mesh.join(bot, room)
    node = served_app.node
    node.task_reconciler._running = False  # it follows no messages now
    task = await created(mesh, owner, room, bot, content="ping")
    await mesh.send(bot, room, "pong", threadId=task["messageId"])
    r = await mesh.http.get("/api/tasks", params={"roomId": room}, headers=owner.headers)
    [listed] = r.json()["tasks"]
    assert (listed["state"], listed["result"]) == ("completed", "pong")
    actor = await node.accounts.actor_of(owner.participant_id)
    assert actor is not None
    assert (await node.tasks.get(actor, task["taskId"])).state is TaskState.COMPLETED


async def test_a_managed_task_asks_back_and_completes(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    member = await mesh.register("member")
    bot = await bootstrap(mesh, "thinker")
    other_bot = await bootstrap(mesh, "other")
    room = (await mesh.create_room(owner, "work"))["roomId"]
    for who in (member, bot, other_bot):
        await mesh.join(who, room)
    async with connect(base_url, bot) as bot_ws, connect(base_url, owner) as owner_ws:
        await bot_ws.send(
            type="task_create", roomId=room, agentId=bot.participant_id, content="plan it"
        )
        # only super_agents and above: the bot's error names the frame
        error = await bot_ws.expect("error", frame="task_create")
        assert error["code"] == "forbidden"
        await owner_ws.send(
            type="task_create", roomId=room, agentId=bot.participant_id, content="plan it"
        )
        task = (await bot_ws.expect("task_created"))["task"]
        assert task["via"] == "ws"
        task_id = task["taskId"]

        # only its agent moves it, and only as the states allow
        assert_error(await patch(mesh, member, task_id, state="working"), 403, "not_task_agent")
        assert_error(await patch(mesh, other_bot, task_id, state="working"), 403)
        assert_error(await patch(mesh, bot, task_id, state="done"), 400, "invalid_state")
        assert_error(await patch(mesh, bot, task_id, state="canceled"), 409, "invalid_transition")
        r = await patch(mesh, bot, task_id, state="working", message="on it")
        assert r.status_code == 200, r.text
        assert r.json()["managed"] is True
        assert r.json()["statusMessage"] == "on it"
        # its status message is a reply in the thread, posted before the task
        # moves, and completes nothing
        await owner_ws.expect("message", content="on it", threadId=task["messageId"])
        assert (await owner_ws.expect("task_updated"))["task"]["state"] == "working"
        assert_error(await patch(mesh, bot, task_id, state="rejected"), 409, "invalid_transition")

        # it asks back (over the WebSocket); the creator answers
        await bot_ws.send(
            type="task_update", taskId=task_id, state="input-required", message="which plan?"
        )
        asked = await moved(owner_ws, "input-required")
        assert asked["statusMessage"] == "which plan?"
        r = await mesh.http.post(
            f"/api/tasks/{task_id}/reply", json={"content": "the launch"}, headers=member.headers
        )
        assert_error(r, 403, "not_task_creator")
        await owner_ws.send(type="task_reply", taskId=task_id, content="the launch")
        # (the owner's session has seen every update before this one)
        answered = await moved(owner_ws, "working")
        assert answered["statusMessage"] == "which plan?"
        await bot_ws.send(
            type="task_update", taskId=task_id, state="completed", result="launch on Friday"
        )
        done = await moved(owner_ws, "completed")
        assert done["result"] == "launch on Friday"

        # closed: nothing moves it again
        assert_error(await patch(mesh, bot, task_id, state="working"), 409, "task_closed")
        r = await mesh.http.post(f"/api/tasks/{task_id}/cancel", headers=owner.headers)
        assert_error(r, 409, "task_closed")
        await owner_ws.send(type="task_reply", taskId=task_id, content="thanks")
        error = await owner_ws.expect("error", frame="task_reply")
        assert error["code"] == "task_closed"
        r = await get(mesh, owner, task_id)
        assert [m["content"] for m in r.json()["messages"]] == [
            "plan it",
            "on it",
            "which plan?",
            "the launch",
        ]


async def test_cancel(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    boss = await mesh.register("boss")
    member = await mesh.register("member")
    await assign(mesh, owner, boss, "super_agent")
    bot = await bootstrap(mesh, "worker")
    room = (await mesh.create_room(owner, "work"))["roomId"]
    for who in (boss, member, bot):
        await mesh.join(who, room)
    task = await created(mesh, boss, room, bot)
    async with connect(base_url, member) as member_ws:
        r = await mesh.http.post(f"/api/tasks/{task['taskId']}/cancel", headers=member.headers)
        assert_error(r, 403, "forbidden")
        r = await mesh.http.post(f"/api/tasks/{task['taskId']}/cancel", headers=boss.headers)
        assert r.status_code == 200, r.text
        assert r.json()["state"] == "canceled"
        assert (await member_ws.expect("task_updated"))["task"]["state"] == "canceled"
    # a reply after the cancel changes nothing
    await mesh.send(bot, room, "done anyway", threadId=task["messageId"])
    assert (await get(mesh, boss, task["taskId"])).json()["task"]["state"] == "canceled"
    # an admin cancels anyone's task (agents.command)
    other = await created(mesh, boss, room, bot)
    r = await mesh.http.post(f"/api/tasks/{other['taskId']}/cancel", headers=owner.headers)
    assert r.status_code == 200, r.text
    r = await mesh.http.get(
        "/api/tasks", params={"roomId": room, "open": "1"}, headers=boss.headers
    )
    assert r.json()["tasks"] == []


async def test_tasks_survive_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "mesh-data"
    async with trio.open_nursery() as nursery:
        url = await serve_on(data_dir, nursery)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            mesh = Mesh(http)
            owner = await mesh.setup()
            bot = await bootstrap(mesh, "worker")
            room = (await mesh.create_room(owner, "work"))["roomId"]
            await mesh.join(bot, room)
            managed = await created(mesh, owner, room, bot, content="first")
            r = await patch(mesh, bot, managed["taskId"], state="input-required", message="?")
            assert r.status_code == 200, r.text
            plain = await created(mesh, owner, room, bot, content="second")
        nursery.cancel_scope.cancel()
    async with trio.open_nursery() as nursery:
        url = await serve_on(data_dir, nursery)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            mesh = Mesh(http)
            r = await get(mesh, owner, managed["taskId"])
            assert r.status_code == 200, r.text
            assert r.json()["task"]["state"] == "input-required"
            assert r.json()["task"]["statusMessage"] == "?"
            # the reconciler follows replies again after the restart
            async with connect(url, owner) as ws:
                await mesh.send(bot, room, "answer", threadId=plain["messageId"])
                done = (await ws.expect("task_updated"))["task"]
                assert (done["taskId"], done["state"]) == (plain["taskId"], "completed")
        nursery.cancel_scope.cancel()


async def test_asking_a_bot_in_a_dm(base_url: str, mesh: Mesh, served_app: MeshApp) -> None:
    """A2A's way in (``Tasks.ask``): what a DM needs; a spawned echo bot,
    which knows nothing of tasks, completes the task by answering in the DM;
    a follow-up goes in the task's thread."""
    owner = await mesh.setup()
    member = await mesh.register("member")
    stranger = await mesh.register("stranger")
    r = await mesh.http.post(
        "/api/agents/spawn",
        json={"name": "echo-bot", "type": "echo", "model": "none", "rooms": []},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    echo = r.json()["agentId"]
    thinker = await bootstrap(mesh, "thinker")
    node = served_app.node
    actor = await node.accounts.actor_of(member.participant_id)
    assert actor is not None
    async with connect(base_url, member) as ws:
        task = await node.tasks.ask(actor, agent_id=echo, content="hello", context_id="ctx-1")
        assert (task.state, task.via, task.context_id) == (TaskState.SUBMITTED, "a2a", "ctx-1")
        assert (await ws.expect("task_created"))["task"]["taskId"] == task.task_id
        done = (await ws.expect("task_updated", timeout=30))["task"]
        assert (done["state"], done["result"]) == ("completed", "echo: hello")
        # the DM is the task's room; the echo is its history
        history = await node.tasks.history(actor, task.task_id)
        assert [m.content for m in history] == ["hello", "echo: hello"]
        again = await node.tasks.ask(actor, agent_id=echo, content="and again")
        assert again.room_id == task.room_id  # the same DM
        assert again.context_id == again.task_id

    # a follow-up of an open task: in its thread, back to working
    first = await node.tasks.ask(actor, agent_id=thinker.participant_id, content="think")
    thinker_actor = await node.accounts.actor_of(thinker.participant_id)
    assert thinker_actor is not None
    asked = await node.tasks.update(
        thinker_actor, first.task_id, state="input-required", message="about what?"
    )
    assert asked.state is TaskState.INPUT_REQUIRED
    followed = await node.tasks.ask(
        actor, agent_id=thinker.participant_id, content="the plan", task_id=first.task_id
    )
    assert followed.state is TaskState.WORKING
    history = await node.tasks.history(actor, first.task_id)
    assert [(m.content, m.thread_id) for m in history] == [
        ("think", None),
        ("about what?", first.message_id),
        ("the plan", first.message_id),
    ]
    # only one's own task, with that agent; a closed one refuses
    other = await node.accounts.actor_of(stranger.participant_id)
    assert other is not None
    with pytest.raises(NotFound):
        await node.tasks.ask(
            other, agent_id=thinker.participant_id, content="x", task_id=first.task_id
        )
    await node.tasks.cancel(actor, first.task_id)
    with pytest.raises(Conflict):
        await node.tasks.ask(
            actor, agent_id=thinker.participant_id, content="x", task_id=first.task_id
        )
    with pytest.raises(BadRequest):
        await node.tasks.ask(actor, agent_id=owner.participant_id, content="x")


async def test_a_dms_tasks_take_the_agents_answers_first_in_first_out(
    base_url: str, mesh: Mesh, served_app: MeshApp
) -> None:
    """Several tasks asked of one bot share one DM: an answer in a task's
    thread is that task's; answers at the top of the DM go to the open
    tasks in the order they were asked, one each."""
    await mesh.setup()
    member = await mesh.register("member")
    bot = await bootstrap(mesh, "thinker")
    node = served_app.node
    actor = await node.accounts.actor_of(member.participant_id)
    assert actor is not None

    async def state(task: Task) -> tuple[str, str | None]:
        now = await node.tasks.get(actor, task.task_id)
        return now.state.value, now.result

    first = await node.tasks.ask(actor, agent_id=bot.participant_id, content="what is 1+1?")
    second = await node.tasks.ask(actor, agent_id=bot.participant_id, content="capital of France?")
    assert first.room_id == second.room_id
    request = await mesh.http.get(
        f"/api/rooms/{first.room_id}/messages/{first.message_id}", headers=member.headers
    )
    assert request.json()["to"] == bot.participant_id  # addressed to the agent
    # an answer in the first task's thread is the first's, not the second's
    await mesh.send(bot, first.room_id, "2", threadId=first.message_id)
    assert await state(first) == ("completed", "2")
    assert await state(second) == ("submitted", None)
    # at the top of the DM: the oldest open task's, then the next one's
    third = await node.tasks.ask(actor, agent_id=bot.participant_id, content="and 2+2?")
    await mesh.send(bot, first.room_id, "Paris")
    await mesh.send(bot, first.room_id, "4")
    assert await state(second) == ("completed", "Paris")
    assert await state(third) == ("completed", "4")
    history = await node.tasks.history(actor, third.task_id)
    assert [m.content for m in history] == ["and 2+2?", "Paris", "4"]


async def test_a_sequential_bot_answers_each_dm_task(
    base_url: str, mesh: Mesh, served_app: MeshApp
) -> None:
    """Two tasks asked at once of a built-in bot, which answers one message
    after another (in the thread of what is addressed to it), each get their
    own answer."""
    owner = await mesh.setup()
    r = await mesh.http.post(
        "/api/agents/spawn",
        json={"name": "echo-bot", "type": "echo", "model": "none", "rooms": []},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    echo = r.json()["agentId"]
    member = await mesh.register("member")
    node = served_app.node
    actor = await node.accounts.actor_of(member.participant_id)
    assert actor is not None
    async with connect(base_url, member) as ws:
        first = await node.tasks.ask(actor, agent_id=echo, content="1")
        second = await node.tasks.ask(actor, agent_id=echo, content="2")
        results = {}
        while len(results) < 2:
            done = (await ws.expect("task_updated", timeout=30))["task"]
            results[done["taskId"]] = (done["state"], done["result"])
    assert results == {
        first.task_id: ("completed", "echo: 1"),
        second.task_id: ("completed", "echo: 2"),
    }


async def test_a_refused_status_message_leaves_the_task_as_it_was(
    base_url: str, mesh: Mesh
) -> None:
    """An update's message is posted before the task moves, and what
    posting needs (a result too is published to the room) is checked first:
    a refused update leaves the task as it was, and it still completes by
    its agent's reply."""
    owner = await mesh.setup()
    bot = await bootstrap(mesh, "worker")
    room = (await mesh.create_room(owner, "work"))["roomId"]
    await mesh.join(bot, room)
    task = await created(mesh, owner, room, bot)
    r = await mesh.http.post(
        f"/api/rooms/{room}/permissions",
        json={
            "targetType": "participant",
            "target": bot.participant_id,
            "permission": "messages.send",
            "effect": "deny",
        },
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    task_id = task["taskId"]
    assert_error(await patch(mesh, bot, task_id, state="input-required", message="MUTED"), 403)
    assert_error(await patch(mesh, bot, task_id, state="completed", result="MUTED"), 403)
    got = (await get(mesh, owner, task_id)).json()
    assert got["task"] == task
    assert [m["content"] for m in got["messages"]] == ["do it"]
    # a move without text needs no send
    r = await patch(mesh, bot, task_id, state="working")
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["statusMessage"], r.json()["result"]) == (
        "working",
        None,
        None,
    )


async def test_task_changes_count_against_the_messages_rate(
    base_url: str, mesh: Mesh, served_app: MeshApp
) -> None:
    """Each update publishes its texts to the room: it counts against the
    agent's ``messages`` rule, once (an update that posts a message too),
    in the same budget as its messages."""
    owner = await mesh.setup()
    bot = await bootstrap(mesh, "worker")
    room = (await mesh.create_room(owner, "work"))["roomId"]
    await mesh.join(bot, room)
    task_id = (await created(mesh, owner, room, bot))["taskId"]
    limiter = served_app.node.rate_limits
    limiter.configure(
        dataclasses.replace(limiter.config, messages=Rate(4, 3600), role_multipliers={})
    )
    for state, message in (("working", None), ("input-required", "which?"), ("working", "ok")):
        body = {"state": state} if message is None else {"state": state, "message": message}
        r = await patch(mesh, bot, task_id, **body)
        assert r.status_code == 200, r.text
    await mesh.send(bot, room, "the fourth")
    assert_error(await patch(mesh, bot, task_id, state="input-required", result="x"), 429)
    r = await mesh.http.post(
        f"/api/rooms/{room}/messages", json={"content": "fifth"}, headers=bot.headers
    )
    assert_error(r, 429)
    task = (await get(mesh, owner, task_id)).json()["task"]
    assert (task["state"], task["result"]) == ("working", None)


async def test_a_tasks_result_is_its_reply_as_it_is_now(base_url: str, mesh: Mesh) -> None:
    """A task completed by its agent's reply shows that reply's text as it
    is now: an edit shows, a delete (a leaked secret, moderation) clears it.
    A result the agent gave stays as given."""
    owner = await mesh.setup()
    bot = await bootstrap(mesh, "worker")
    room = (await mesh.create_room(owner, "work"))["roomId"]
    await mesh.join(bot, room)
    task = await created(mesh, owner, room, bot, content="the key?")
    reply = await mesh.send(bot, room, "sk-SECRET", threadId=task["messageId"])
    assert (await get(mesh, owner, task["taskId"])).json()["task"]["result"] == "sk-SECRET"
    r = await mesh.http.patch(
        f"/api/rooms/{room}/messages/{reply['messageId']}",
        json={"content": "ask the admin"},
        headers=bot.headers,
    )
    assert r.status_code == 200, r.text
    got = (await get(mesh, owner, task["taskId"])).json()["task"]
    assert (got["state"], got["result"]) == ("completed", "ask the admin")
    r = await mesh.http.delete(
        f"/api/rooms/{room}/messages/{reply['messageId']}", headers=owner.headers
    )
    assert r.status_code == 200, r.text
    got = (await get(mesh, owner, task["taskId"])).json()
    assert (got["task"]["state"], got["task"]["result"]) == ("completed", None)
    assert "sk-SECRET" not in str(got)
    r = await mesh.http.get("/api/tasks", params={"roomId": room}, headers=owner.headers)
    assert [t["result"] for t in r.json()["tasks"]] == [None]
    # given by the agent: kept as given, whatever becomes of its messages
    given = await created(mesh, owner, room, bot)
    r = await patch(mesh, bot, given["taskId"], state="completed", result="42", message="done")
    assert r.status_code == 200, r.text
    [done] = [
        m
        for m in (await get(mesh, owner, given["taskId"])).json()["messages"]
        if m["content"] == "done"
    ]
    r = await mesh.http.delete(
        f"/api/rooms/{room}/messages/{done['messageId']}", headers=owner.headers
    )
    assert r.status_code == 200, r.text
    assert (await get(mesh, owner, given["taskId"])).json()["task"]["result"] == "42"


async def test_a_tasks_history_is_its_newest_messages(
    base_url: str, mesh: Mesh, served_app: MeshApp
) -> None:
    """History keeps the newest messages (at most the page size), oldest first."""
    owner = await mesh.setup()
    bot = await bootstrap(mesh, "worker")
    room = (await mesh.create_room(owner, "work"))["roomId"]
    await mesh.join(bot, room)
    task = await created(mesh, owner, room, bot, content="0")
    node = served_app.node
    actor = await node.accounts.actor_of(owner.participant_id)
    assert actor is not None
    for n in range(1, 205):
        await node.messages.send(actor, room, str(n), thread_id=task["messageId"])
    history = await node.tasks.history(actor, task["taskId"])
    assert [m.content for m in history] == [str(n) for n in range(5, 205)]
    latest = await node.tasks.history(actor, task["taskId"], limit=10)
    assert [m.content for m in latest] == [str(n) for n in range(195, 205)]
    for limit in (0, 201):
        with pytest.raises(BadRequest):
            await node.tasks.history(actor, task["taskId"], limit=limit)


def test_task_events_cross_processes_as_the_task() -> None:
    """On PostgreSQL the outbox carries a task event as the task itself:
    another process rebuilds the same event (an A2A stream reads its fields)."""
    task = Task(
        task_id="01ARZ3NDEKTSV4RRFFQ69G5FAV",
        room_id="01ARZ3NDEKTSV4RRFFQ69G5FAW",
        agent_id="01ARZ3NDEKTSV4RRFFQ69G5FAX",
        creator_id="01ARZ3NDEKTSV4RRFFQ69G5FAY",
        title="t",
        state=TaskState.INPUT_REQUIRED,
        message_id="01ARZ3NDEKTSV4RRFFQ69G5FAZ",
        request_seq=7,
        context_id="ctx",
        status_message="which?",
        result=None,
        managed=True,
        via="mcp",
        created_at=1,
        updated_at=2,
        result_message_id="01ARZ3NDEKTSV4RRFFQ69G5FB0",
    )
    for kind in (TaskCreated, TaskUpdated):
        [entry] = outbox.decode(outbox.encode([outbox.Publish(kind(task.room_id, task=task))]))
        assert isinstance(entry, outbox.Publish)
        assert type(entry.event) is kind
        assert isinstance(entry.event, TaskCreated)
        assert entry.event.task == task
        assert entry.event.frame == kind(task.room_id, task=task).frame


#: the moves an agent may make (the contract's table, written out)
ALLOWED = {
    ("submitted", "working"),
    ("submitted", "input-required"),
    ("submitted", "completed"),
    ("submitted", "failed"),
    ("submitted", "rejected"),
    ("working", "input-required"),
    ("working", "completed"),
    ("working", "failed"),
    ("input-required", "working"),
    ("input-required", "completed"),
    ("input-required", "failed"),
}


@pytest.mark.parametrize("source", list(TaskState))
@pytest.mark.parametrize("target", list(TaskState))
def test_the_moves_an_agent_may_make(source: TaskState, target: TaskState) -> None:
    allowed = target in MOVES.get(source, frozenset())
    assert allowed == ((source.value, target.value) in ALLOWED)
    if source.terminal:
        assert source not in MOVES  # nothing moves a closed task


async def test_a_built_in_bot_completes_a_room_task_in_its_thread(
    base_url: str, mesh: Mesh
) -> None:
    """A task's request is addressed to its agent (``to``); the built-in bots
    answer what is addressed to them in its thread, so a room task given to a
    managed echo bot completes, while its answers to the room's other talk
    stay at the top of the room."""
    owner = await mesh.setup()
    room = (await mesh.create_room(owner, "workshop"))["roomId"]
    r = await mesh.http.post(
        "/api/agents/spawn",
        json={"name": "room-echo", "type": "echo", "model": "none", "rooms": [room]},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    echo = r.json()["agentId"]
    async with connect(base_url, owner) as ws:
        await ws.expect("participant_joined", timeout=30, roomId=room)
        await mesh.send(owner, room, "small talk")
        top = await ws.expect("message", timeout=30, senderId=echo)
        assert (top["content"], top["threadId"]) == ("echo: small talk", None)
        r = await mesh.http.post(
            "/api/tasks",
            json={"roomId": room, "agentId": echo, "content": "count the chairs"},
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        task = r.json()
        request = await ws.expect("message", content="count the chairs")
        assert request["to"] == echo
        answer = await ws.expect("message", timeout=30, senderId=echo)
        assert (answer["content"], answer["threadId"]) == (
            "echo: count the chairs",
            task["messageId"],
        )
        done = (await ws.expect("task_updated", timeout=30))["task"]
        assert (done["taskId"], done["state"], done["result"]) == (
            task["taskId"],
            "completed",
            "echo: count the chairs",
        )
