"""Agent commands over real sockets: ``POST /api/agents/:id/command``, the
WebSocket ``command`` event and ``command_result`` frame, polling, managed bots,
and tool-only ``simple`` bots."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh import Settings
from quart_mesh.config import Limits
from tests.helpers import Mesh, User, assert_error, connect, wait_for


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "mesh-data", limits=Limits(max_pending_commands=3))


async def bootstrap(mesh: Mesh, by: User | None, name: str, type: str = "nanoclaw") -> User:
    headers = by.headers if by else {}
    r = await mesh.http.post(
        "/api/agents/bootstrap", json={"name": name, "type": type}, headers=headers
    )
    assert r.status_code == 201, r.text
    return User(r.json()["agentId"], name, r.json()["token"])


async def command(mesh: Mesh, by: User, agent: User | str, name: str, **body: Any) -> Any:
    agent_id = agent if isinstance(agent, str) else agent.participant_id
    return await mesh.http.post(
        f"/api/agents/{agent_id}/command", json={"command": name, **body}, headers=by.headers
    )


async def test_a_connected_agent_gets_the_command_live_and_answers(
    base_url: str, mesh: Mesh
) -> None:
    owner = await mesh.setup()
    carol = await mesh.register("carol")
    bot = await bootstrap(mesh, carol, "carols-bot")  # carol registered it: she may command it
    other = await bootstrap(mesh, None, "stray-bot")
    async with connect(base_url, bot) as ws:
        r = await command(mesh, carol, bot, "summarize", args={"roomId": "x", "n": 3})
        assert r.status_code == 202, r.text
        sent = r.json()
        assert sent["status"] == "pending"
        assert sent["sentBy"] == carol.participant_id
        event = await ws.expect("command")
        assert event == {
            "type": "command",
            "commandId": sent["commandId"],
            "command": "summarize",
            "args": {"roomId": "x", "n": 3},
            "sentBy": carol.participant_id,
            "createdAt": sent["createdAt"],
        }
        url = f"/api/agents/{bot.participant_id}/commands/{sent['commandId']}"

        async def delivered() -> bool:
            return bool((await mesh.http.get(url, headers=carol.headers)).json()["deliveredAt"])

        await wait_for(delivered)
        await ws.send(type="command_result", commandId=sent["commandId"], result={"summary": "hi"})
        await ws.send(type="command_result", commandId=sent["commandId"])
        assert (await ws.expect("error", frame="command_result"))["code"] == "already_answered"
        wrong_id = event["commandId"][:-1] + ("1" if event["commandId"].endswith("0") else "0")
        await ws.send(type="command_result", commandId=wrong_id)
        assert (await ws.expect("error"))["code"] == "command_not_found"
    answered = (await mesh.http.get(url, headers=owner.headers)).json()
    assert (answered["status"], answered["ok"], answered["result"]) == (
        "completed",
        True,
        {"summary": "hi"},
    )
    # who may command whom: admins any agent, members only bots they registered
    assert_error(await command(mesh, carol, other, "status"), 403, "forbidden")
    assert_error(await mesh.http.get(url, headers=other.headers), 403, "forbidden")
    assert (await command(mesh, owner, other, "status")).status_code == 202
    assert_error(await command(mesh, owner, carol.participant_id, "status"), 404)
    assert_error(await command(mesh, owner, "not-an-id", "status"), 404, "agent_not_found")
    for body, status, code in [
        ({"command": "Bad Name"}, 400, "invalid_command"),
        ({"command": ""}, 400, "invalid_command"),
        ({"command": "x" * 65}, 400, "invalid_command"),
        ({"command": 5}, 400, "invalid_field"),
        ({}, 400, "missing_field"),
        ({"command": "go", "args": [1, 2]}, 400, "invalid_field"),
        ({"command": "go", "args": {"blob": "x" * 9000}}, 413, "too_large"),
    ]:
        r = await mesh.http.post(
            f"/api/agents/{bot.participant_id}/command", json=body, headers=owner.headers
        )
        assert_error(r, status, code)
    assert_error(await mesh.http.post(f"/api/agents/{bot.participant_id}/command"), 401)


async def test_waiting_commands_reach_polls_and_new_connections_once(
    base_url: str, mesh: Mesh
) -> None:
    owner = await mesh.setup()
    bot = await bootstrap(mesh, owner, "poller")
    ids = []
    for n in range(3):
        r = await command(mesh, owner, bot, "step", args={"n": n})
        assert r.status_code == 202
        ids.append(r.json()["commandId"])
    # a bounded queue: the fourth waiting command is refused
    assert_error(await command(mesh, owner, bot, "step"), 429, "too_many_commands")

    # the first WebSocket connection gets all three, after its snapshot, once
    async with connect(base_url, bot) as ws:
        got = [(await ws.expect("command"))["commandId"] for _ in ids]
        assert got == ids
        assert [f for f in await ws.settle() if f["type"] == "command"] == []

    async def all_delivered() -> bool:
        for command_id in ids:
            url = f"/api/agents/{bot.participant_id}/commands/{command_id}"
            if (await mesh.http.get(url, headers=owner.headers)).json()["status"] != "delivered":
                return False
        return True

    await wait_for(all_delivered)
    async with connect(base_url, bot) as ws:
        assert [f for f in await ws.settle() if f["type"] == "command"] == []

    # polling: a waiting command comes with the next poll, and only once
    r = await command(mesh, owner, bot, "poll-me")
    r = await mesh.http.post("/api/poll", json={}, headers=bot.headers)
    [polled] = r.json()["commands"]
    assert polled["command"] == "poll-me"
    assert polled["type"] == "command"
    r = await mesh.http.post("/api/poll", json={}, headers=bot.headers)
    assert r.json()["commands"] == []
    # a long-poll wakes up for a command (a bot that never had a session: it
    # comes online when its long-poll is waiting)
    sleeper = await bootstrap(mesh, owner, "sleeper")
    result: dict[str, Any] = {}
    answered = trio.Event()

    async def long_poll() -> None:
        r = await mesh.http.post("/api/poll", json={"timeout": 10}, headers=sleeper.headers)
        result.update(r.json())
        answered.set()

    async with connect(base_url, owner) as watch, trio.open_nursery() as nursery:
        nursery.start_soon(long_poll)
        await watch.expect("presence", participantId=sleeper.participant_id, online=True)
        with trio.fail_after(5):
            await command(mesh, owner, sleeper, "wake")
            await answered.wait()
    assert [c["command"] for c in result["commands"]] == ["wake"]
    # a polling bot answers over REST
    r = await mesh.http.post(
        f"/api/commands/{polled['commandId']}/result",
        json={"ok": False, "result": {"error": "cannot"}},
        headers=bot.headers,
    )
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["ok"]) == ("failed", False)
    # only the agent the command was for can answer it
    r = await mesh.http.post(
        f"/api/commands/{polled['commandId']}/result", json={}, headers=owner.headers
    )
    assert_error(r, 404, "command_not_found")


async def test_simple_bots_get_commands_but_no_chat_traffic(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    tool = await bootstrap(mesh, owner, "tool-bot", type="simple")
    room_id = (await mesh.create_room(owner, "ops"))["roomId"]
    await mesh.join(tool, room_id)
    async with connect(base_url, tool) as ws, connect(base_url, owner) as watch:
        await mesh.send(owner, room_id, "chatter the tool never sees")
        await command(mesh, owner, tool, "reindex")
        frames = await ws.settle()
        assert [f["type"] for f in frames if f["type"] in ("message", "command")] == ["command"]
        # it still acts: it can post into its room
        await ws.send(type="send_message", roomId=room_id, content="reindexed")
        await watch.expect("message", content="reindexed")
    messages = await mesh.messages(owner, room_id)
    assert [m["content"] for m in messages] == ["chatter the tool never sees", "reindexed"]
    r = await mesh.http.post("/api/poll", json={"cursor": "0"}, headers=tool.headers)
    assert r.json()["messages"] == []


async def test_managed_bots_obey_status_join_leave_and_restart(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    lobby = (await mesh.create_room(owner, "lobby"))["roomId"]
    annex = (await mesh.create_room(owner, "annex"))["roomId"]
    spawn = {"name": "echo-cmd", "type": "echo", "rooms": [lobby]}
    r = await mesh.http.post("/api/agents/spawn", json=spawn, headers=owner.headers)
    assert r.status_code == 201, r.text
    agent_id = r.json()["agentId"]

    async def members(room_id: str) -> set[str]:
        room = (await mesh.http.get(f"/api/rooms/{room_id}", headers=owner.headers)).json()
        return {m["participantId"] for m in room["members"]}

    async def run(name: str, **args: Any) -> dict[str, Any]:
        r = await command(mesh, owner, agent_id, name, args=args)
        assert r.status_code == 202, r.text
        url = f"/api/agents/{agent_id}/commands/{r.json()['commandId']}"
        answer: dict[str, Any] = {}

        async def answered() -> bool:
            answer.update((await mesh.http.get(url, headers=owner.headers)).json())
            return answer["completedAt"] is not None

        await wait_for(answered)
        return answer

    async def lobby_joined() -> bool:
        return agent_id in await members(lobby)

    await wait_for(lobby_joined)
    status = await run("status")
    assert status["ok"] is True
    assert status["result"]["status"] == "running"
    assert status["result"]["rooms"] == [lobby]

    assert (await run("join_room", roomId=annex))["ok"] is True

    async def annex_joined() -> bool:
        return agent_id in await members(annex)

    await wait_for(annex_joined)
    assert (await run("leave_room", roomId=lobby))["ok"] is True

    async def lobby_left() -> bool:
        return agent_id not in await members(lobby)

    await wait_for(lobby_left)
    unknown = await run("dance")
    assert unknown["ok"] is False
    assert "unknown command" in unknown["result"]["error"]

    assert (await run("restart"))["result"] == {"restarting": True}

    async def restarted() -> bool:
        agents = (await mesh.http.get("/api/agents", headers=owner.headers)).json()
        bot = next(a for a in agents if a["agentId"] == agent_id)
        return bool(bot["restarts"] == 1 and bot["status"] == "running")

    await wait_for(restarted)
    # after the restart it keeps the rooms it was told to be in, and answers there
    assert (await run("status"))["result"]["rooms"] == [annex]
    async with connect(base_url, owner) as ws:
        await mesh.join(owner, annex)
        await mesh.send(owner, annex, "still there?")
        await ws.expect("message", timeout=20, content="echo: still there?")
    await mesh.http.delete(f"/api/agents/{agent_id}", headers=owner.headers)


async def test_commands_over_http_client_errors(base_url: str) -> None:
    # the command endpoint's errors are JSON, never a stack trace
    async with httpx.AsyncClient(base_url=base_url) as http:
        r = await http.post("/api/agents/x/command", content=b"{", headers={"Authorization": "x"})
        assert_error(r, 401)
