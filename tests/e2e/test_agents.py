"""Agents over real sockets: bootstrap, connect as a bot, list, delete."""

from __future__ import annotations

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed

from tests.helpers import Mesh, User, assert_error, connect


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
