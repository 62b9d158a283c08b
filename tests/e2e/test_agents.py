"""Agents over real sockets: bootstrap, connect as a bot, list, delete."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed

from tests import stores
from tests.helpers import Mesh, User, assert_error, connect, wait_for


async def bootstrap(http: httpx.AsyncClient, **body: object) -> httpx.Response:
    return await http.post("/api/agents/bootstrap", json=body)


async def test_bootstrap_then_act_like_any_participant(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    r = await bootstrap(mesh.http, name="helper-bot", type="nanoclaw", description="helps")
    assert r.status_code == 201, r.text
    bot = r.json()
    assert set(bot) >= {"agentId", "token", "wsUrl", "modelUrl"}
    assert bot["wsUrl"] == base_url.replace("http://", "ws://") + "/ws"
    assert bot["modelUrl"] == base_url + "/api/models/v1"
    assert bot["role"] == "agent"
    assert "webhookSecret" not in bot
    me = User(bot["agentId"], "helper-bot", bot["token"])
    profile = (await mesh.http.get("/api/auth/me", headers=me.headers)).json()
    assert (profile["role"], profile["type"], profile["kind"]) == ("agent", "nanoclaw", "bot")

    room_id = (await mesh.create_room(owner, "work"))["roomId"]
    await mesh.join(me, room_id)
    async with connect(base_url, me) as ws:
        await mesh.send(owner, room_id, "hello bot")
        got = await ws.expect("message", content="hello bot")
        await ws.send(type="send_message", roomId=room_id, content="hello human")
        await ws.expect("message", content="hello human")
        agents = (await mesh.http.get("/api/agents", headers=owner.headers)).json()
        assert [(a["agentId"], a["name"], a["type"], a["role"], a["online"]) for a in agents] == [
            (me.participant_id, "helper-bot", "nanoclaw", "agent", True)
        ]
        assert agents[0]["managed"] is False
    # a polling bot sees the same messages
    r = await mesh.http.post(
        "/api/poll", json={"cursor": str(int(got["cursor"]) - 1)}, headers=me.headers
    )
    assert [m["content"] for m in r.json()["messages"]] == ["hello bot", "hello human"]
    # bots have the agent role's permissions, not an admin's
    assert_error(await mesh.http.delete(f"/api/rooms/{room_id}", headers=me.headers), 403)


async def test_bootstrap_validation_and_closed_meshes(base_url: str, mesh: Mesh) -> None:
    assert_error(await bootstrap(mesh.http, name="early", type="simple"), 403, "not_initialized")
    owner = await mesh.setup(registrationMode="closed")
    r = await bootstrap(mesh.http, name="x", type="simple")
    assert_error(r, 403, "registration_closed")
    # an admin may bootstrap on a closed mesh
    r = await mesh.http.post(
        "/api/agents/bootstrap",
        json={"name": "hook", "type": "webhook", "webhookUrl": "http://127.0.0.1:9/hook"},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    assert len(r.json()["webhookSecret"]) == 64
    # a bot is not an admin: it cannot bootstrap others on a closed mesh
    bot_headers = {"Authorization": f"Bearer {r.json()['token']}"}
    r = await mesh.http.post(
        "/api/agents/bootstrap", json={"name": "other", "type": "simple"}, headers=bot_headers
    )
    assert_error(r, 403, "forbidden")
    for body, status, code in [
        ({"name": "b1", "type": "robot"}, 400, "invalid_type"),
        ({"name": "b1", "type": "echo"}, 400, "managed_type"),
        ({"name": "b1"}, 400, "missing_field"),
        ({"type": "simple"}, 400, "missing_field"),
        ({"name": "b 1", "type": "simple"}, 400, "invalid_name"),
        ({"name": "hook", "type": "simple"}, 409, "name_taken"),
        ({"name": "owner", "type": "simple"}, 409, "name_taken"),
        ({"name": "b2", "type": "webhook"}, 400, "missing_field"),
        ({"name": "b2", "type": "webhook", "webhookUrl": "ftp://x"}, 400, "invalid_url"),
        ({"name": "b2", "type": "simple", "webhookUrl": "http://x"}, 400, "invalid_field"),
        ({"name": "b2", "type": 7}, 400, "invalid_field"),
    ]:
        r = await mesh.http.post("/api/agents/bootstrap", json=body, headers=owner.headers)
        assert_error(r, status, code)
    assert_error(await mesh.http.get("/api/agents"), 401)


async def test_delete_agent_refuses_its_token_and_closes_sessions(
    base_url: str, mesh: Mesh
) -> None:
    owner = await mesh.setup()
    carol = await mesh.register("carol")
    bot = (await bootstrap(mesh.http, name="doomed", type="nanoclaw")).json()
    me = User(bot["agentId"], "doomed", bot["token"])
    url = f"/api/agents/{me.participant_id}"
    assert_error(await mesh.http.delete(url, headers=carol.headers), 403, "forbidden")
    assert_error(await mesh.http.delete(url, headers=me.headers), 403, "forbidden")
    assert_error(
        await mesh.http.delete(f"/api/agents/{carol.participant_id}", headers=owner.headers),
        404,
        "agent_not_found",
    )
    async with connect(base_url, me) as ws:
        r = await mesh.http.delete(url, headers=owner.headers)
        assert r.status_code == 200
        assert (await ws.expect("error"))["code"] == "removed"
        with pytest.raises(ConnectionClosed), trio.fail_after(5):
            await ws.recv()
    assert_error(await mesh.http.get("/api/auth/me", headers=me.headers), 401, "invalid_token")
    assert (await mesh.http.get("/api/agents", headers=owner.headers)).json() == []
    assert_error(await mesh.http.delete(url, headers=owner.headers), 404, "agent_not_found")


def bot_pids(of: str | None = None) -> list[int]:
    """Managed bot processes on this machine; with *of* (a node's base URL),
    only that node's (other test runs may share the machine)."""
    marker = None if of is None else f"MESH_API_URL={of}".encode() + b"\0"
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if b"quart_mesh.bots.runner" not in f.read():
                        continue
                if marker is not None:
                    with open(f"/proc/{entry}/environ", "rb") as f:
                        if marker not in f.read() + b"\0":
                            continue
                pids.append(int(entry))
            except OSError:
                continue
    return pids


async def test_spawned_echo_bot_answers_restarts_and_stops(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    bob = await mesh.register("bob")
    room_id = (await mesh.create_room(owner, "echoes"))["roomId"]
    await mesh.join(bob, room_id)
    spawn = {"name": "echo-bot", "type": "echo", "model": "none", "rooms": [room_id]}
    r = await mesh.http.post("/api/agents/spawn", json=spawn, headers=bob.headers)
    assert_error(r, 403, "forbidden")
    for body, code in [
        ({**spawn, "type": "nanoclaw"}, "invalid_type"),
        ({**spawn, "rooms": ["nope"]}, "invalid_rooms"),
        ({**spawn, "rooms": ["01ARZ3NDEKTSV4RRFFQ69G5FAV"]}, "unknown_room"),
        ({**spawn, "rooms": "all"}, "invalid_field"),
    ]:
        r = await mesh.http.post("/api/agents/spawn", json=body, headers=owner.headers)
        assert_error(r, 400, code)
    r = await mesh.http.post("/api/agents/spawn", json=spawn, headers=owner.headers)
    assert r.status_code == 201, r.text
    agent_id = r.json()["agentId"]
    assert r.json()["role"] == "agent"

    async def agent() -> dict[str, Any]:
        agents = (await mesh.http.get("/api/agents", headers=owner.headers)).json()
        return dict(next(a for a in agents if a["agentId"] == agent_id))

    async def in_room() -> bool:
        room = (await mesh.http.get(f"/api/rooms/{room_id}", headers=owner.headers)).json()
        return agent_id in {m["participantId"] for m in room["members"]}

    await wait_for(in_room)  # it joined as any client would
    assert (await agent())["managed"] is True
    async with connect(base_url, bob) as ws:
        await ws.send(type="send_message", roomId=room_id, content="hello there")
        reply = await ws.expect("message", timeout=20, content="echo: hello there")
        assert reply["senderId"] == agent_id
        # it never answers itself: it handles events in order, so the next
        # reply it sends comes before any answer to its own message
        await ws.send(type="send_message", roomId=room_id, content="marker")
        frames = await ws.until("message", timeout=20, content="echo: marker")
        said = [f["content"] for f in frames if f["type"] == "message"]
        assert said == ["marker", "echo: marker"]

        # kill its process: the supervisor starts it again, and a message sent
        # while it was down is still answered
        [pid] = bot_pids(base_url)
        os.kill(pid, signal.SIGKILL)
        await ws.send(type="send_message", roomId=room_id, content="while down")

        async def restarted() -> bool:
            a = await agent()
            return bool(a["restarts"] >= 1 and a["status"] == "running")

        await wait_for(restarted)
        await ws.expect("message", timeout=20, content="echo: while down")
        await ws.send(type="send_message", roomId=room_id, content="again")
        await ws.expect("message", timeout=20, content="echo: again")

    # delete: the process stops, the agent is gone
    assert (await mesh.http.delete(f"/api/agents/{agent_id}", headers=owner.headers)).is_success

    async def stopped() -> bool:
        return not bot_pids(base_url)

    await wait_for(stopped)


async def test_managed_bots_come_back_after_a_node_restart(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    from tests.e2e.test_cli_restart import ServerProcess

    data_dir = tmp_path / "mesh-data"
    first = ServerProcess(data_dir)
    url = await first.start(nursery)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        room_id = (await mesh.create_room(owner, "persist"))["roomId"]
        for name, extra in (("echo-a", {}), ("echo-keyed", {"apiKey": "sk-test-not-stored"})):
            body = {"name": name, "type": "echo", "model": "m", "rooms": [room_id], **extra}
            r = await http.post("/api/agents/spawn", json=body, headers=owner.headers)
            assert r.status_code == 201, r.text

        async def both_running_and_joined() -> bool:
            agents = (await http.get("/api/agents", headers=owner.headers)).json()
            room = (await http.get(f"/api/rooms/{room_id}", headers=owner.headers)).json()
            return [a["status"] for a in agents] == ["running", "running"] and len(
                room["members"]
            ) == 3

        await wait_for(both_running_and_joined)
    assert await first.stop() == 0
    assert bot_pids(url) == []  # the node stopped its bots
    # the key is in no file of the data folder, nor of the database (on
    # PostgreSQL it is kept sealed with the node's secret: decision 0035)
    for folder in stores.stored_folders(data_dir):
        for path in folder.rglob("*"):
            if path.is_file():
                assert b"sk-test-not-stored" not in path.read_bytes(), path

    second = ServerProcess(data_dir)
    url = await second.start(nursery)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        # sent at once, most likely before the bot is back: it resumes from the
        # cursor it acknowledged before the restart, so it still answers
        await Mesh(http).send(owner, room_id, "sent while you were away")

        async def states() -> dict[str, str]:
            agents = (await http.get("/api/agents", headers=owner.headers)).json()
            return {a["name"]: a["status"] for a in agents}

        # on SQLite the key was never stored: the bot waits for it again; on
        # PostgreSQL another process may have to run it, so it is kept sealed
        keyed = "running" if stores.backend() == "postgresql" else "needs_key"

        async def settled() -> bool:
            return await states() == {"echo-a": "running", "echo-keyed": keyed}

        await wait_for(settled)

        async def answered() -> bool:
            contents = [m["content"] for m in await Mesh(http).messages(owner, room_id)]
            return "echo: sent while you were away" in contents

        await wait_for(answered)
        async with connect(url, owner) as ws:
            await ws.send(type="send_message", roomId=room_id, content="are you back")
            await ws.expect("message", timeout=20, content="echo: are you back")
    assert await second.stop() == 0
    assert bot_pids(url) == []
