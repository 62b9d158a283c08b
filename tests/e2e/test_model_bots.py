"""The llm and coder managed bots: real child processes answering through the
node's model proxy, which calls a real OpenAI-compatible upstream on loopback."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from quart_mesh import Settings
from quart_mesh.config import ModelConfig
from tests.helpers import Mesh, User, connect, wait_for
from tests.upstream import Upstream


@pytest.fixture
def settings(tmp_path: Path, upstream: Upstream) -> Settings:
    url = f"http://127.0.0.1:{upstream.port}/v1"
    return Settings(
        data_dir=tmp_path / "mesh-data",
        models=(
            ModelConfig("smart", url, "echo-model"),
            ModelConfig("broken", url, "broken-model"),
            ModelConfig("builder", url, "coder-model"),
            ModelConfig("apps", url, "app-model"),
        ),
    )


async def spawn(mesh: Mesh, owner: User, **body: Any) -> str:
    r = await mesh.http.post("/api/agents/spawn", json=body, headers=owner.headers)
    assert r.status_code == 201, r.text
    agent_id = str(r.json()["agentId"])

    async def running() -> bool:
        agents = (await mesh.http.get("/api/agents", headers=owner.headers)).json()
        return any(a["agentId"] == agent_id and a["status"] == "running" for a in agents)

    await wait_for(running)
    return agent_id


async def in_room(mesh: Mesh, owner: User, room_id: str, *agent_ids: str) -> None:
    async def joined() -> bool:
        room = (await mesh.http.get(f"/api/rooms/{room_id}", headers=owner.headers)).json()
        return set(agent_ids) <= {m["participantId"] for m in room["members"]}

    await wait_for(joined)


async def status(mesh: Mesh, owner: User, agent_id: str) -> dict[str, Any]:
    """The bot's answer to a ``status`` command (sent after every event before it)."""
    r = await mesh.http.post(
        f"/api/agents/{agent_id}/command", json={"command": "status"}, headers=owner.headers
    )
    assert r.status_code == 202, r.text
    url = f"/api/agents/{agent_id}/commands/{r.json()['commandId']}"

    async def answered() -> bool:
        return (await mesh.http.get(url, headers=owner.headers)).json()["completedAt"] is not None

    await wait_for(answered)
    answer = (await mesh.http.get(url, headers=owner.headers)).json()
    assert answer["ok"] is True, answer
    return dict(answer["result"])


async def test_the_llm_bot_answers_when_addressed_with_the_room_as_context(
    base_url: str, mesh: Mesh, upstream: Upstream
) -> None:
    owner = await mesh.setup()
    room_id = (await mesh.create_room(owner, "lounge"))["roomId"]
    helper = await spawn(
        mesh, owner, name="helper", type="llm", model="smart", rooms=[room_id], apiKey="sk-bot-own"
    )
    echo = await spawn(mesh, owner, name="parrot", type="echo", rooms=[room_id])
    await in_room(mesh, owner, room_id, helper, echo)
    async with connect(base_url, owner) as ws:
        await ws.send(type="send_message", roomId=room_id, content="hello everyone")
        await ws.expect("message", timeout=20, content="echo: hello everyone")  # the parrot
        await ws.send(type="send_message", roomId=room_id, content="@helper what is up?")
        typing = await ws.expect("typing", timeout=20, participantId=helper)
        assert typing["roomId"] == room_id
        answer = await ws.expect("message", timeout=20, senderId=helper)
        assert answer["content"] == "echo: owner: @helper what is up?"

    async def settled() -> bool:
        return len(await mesh.messages(owner, room_id)) >= 6

    await wait_for(settled)
    # and then nothing more, no loop: each bot handles events in order, so once
    # it has answered a status command issued now, it has decided about every
    # message above; the helper chose to answer two, the parrot to echo two
    assert (await status(mesh, owner, helper))["handled"] == 2
    assert (await status(mesh, owner, echo))["handled"] == 2
    said = [(m["senderName"], m["content"]) for m in await mesh.messages(owner, room_id)]
    assert sorted(said) == sorted(
        [
            ("owner", "hello everyone"),
            ("parrot", "echo: hello everyone"),
            ("owner", "@helper what is up?"),
            ("helper", "echo: owner: @helper what is up?"),
            # the parrot repeats the mention; the helper answers a bot that
            # addresses it (at most 3 times a minute), the parrot ignores bots
            ("parrot", "echo: @helper what is up?"),
            ("helper", "echo: parrot: echo: @helper what is up?"),
        ]
    )
    asked = next(s for s in upstream.requests if s.path.endswith("/chat/completions"))
    # the room's messages as context, its own key forwarded by the proxy
    assert asked.body["model"] == "echo-model"
    assert asked.body["messages"][0]["role"] == "system"
    contents = [m["content"] for m in asked.body["messages"][1:]]
    assert contents[0] == "owner: hello everyone"
    assert contents[-1] == "owner: @helper what is up?"
    assert asked.headers["authorization"] == "Bearer sk-bot-own"

    # a DM needs no mention
    dm = (
        await mesh.http.post("/api/dms", json={"participantId": helper}, headers=owner.headers)
    ).json()
    async with connect(base_url, owner) as ws:
        await mesh.send(owner, dm["roomId"], "just between us")
        reply = await ws.expect("message", timeout=20, senderId=helper)
        assert reply["content"] == "echo: owner: just between us"


async def test_model_errors_become_a_short_reply(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    room_id = (await mesh.create_room(owner, "errors"))["roomId"]
    sorry = await spawn(mesh, owner, name="sorry", type="llm", model="broken", rooms=[room_id])
    await in_room(mesh, owner, room_id, sorry)
    async with connect(base_url, owner) as ws:
        await ws.send(type="send_message", roomId=room_id, content="@sorry are you there")
        reply = await ws.expect("message", timeout=20, senderId=sorry)
    assert reply["content"].startswith("(I could not answer:")
    assert "the GPU caught fire" in reply["content"]
    agents = (await mesh.http.get("/api/agents", headers=owner.headers)).json()
    assert next(a for a in agents if a["agentId"] == sorry)["status"] == "running"


async def test_the_coder_bot_builds_deploys_and_changes_apps(
    base_url: str, mesh: Mesh, upstream: Upstream
) -> None:
    owner = await mesh.setup()
    room_id = (await mesh.create_room(owner, "workshop"))["roomId"]
    coder = await spawn(mesh, owner, name="coder", type="coder", model="apps", rooms=[room_id])
    await in_room(mesh, owner, room_id, coder)
    agents = (await mesh.http.get("/api/agents", headers=owner.headers)).json()
    assert next(a for a in agents if a["agentId"] == coder)["role"] == "super_agent"
    async with connect(base_url, owner) as ws:
        await ws.send(type="send_message", roomId=room_id, content="@coder build a counter app")
        reply = await ws.expect("message", timeout=20, senderId=coder)
    # it generated the app through the node (and its model proxy), deployed
    # it, and answered with the run URL; the app store lists it
    run_url = reply["content"].split(": ")[-1]
    assert reply["content"].startswith("Built **counter app**")
    deployed = (await mesh.http.get("/api/apps/deployed")).json()
    assert [(a["name"], a["author"], a["runUrl"]) for a in deployed] == [
        ("counter app", "coder", run_url)
    ]
    page = await mesh.http.get(run_url)
    assert page.status_code == 200
    assert "<button" in page.text
    assert "sandbox" in page.headers["content-security-policy"]
    asked = [s for s in upstream.requests if s.path.endswith("/chat/completions")]
    assert asked[-1].body["model"] == "app-model"

    # "change the last app" makes a new version of that app
    async with connect(base_url, owner) as ws:
        await ws.send(
            type="send_message",
            roomId=room_id,
            content="@coder change the last app into a json counter",
        )
        changed = await ws.expect("message", timeout=20, senderId=coder)
    assert changed["content"].startswith("Updated **counter app** to version 2")
    app_id = deployed[0]["appId"]
    app = (await mesh.http.get(f"/api/apps/{app_id}", headers=owner.headers)).json()
    assert app["version"] == 2
    assert "font-size: 2em" in app["css"]
    r = await mesh.http.post(
        f"/api/agents/{coder}/command", json={"command": "status"}, headers=owner.headers
    )
    url = f"/api/agents/{coder}/commands/{r.json()['commandId']}"

    async def answered() -> bool:
        return (await mesh.http.get(url, headers=owner.headers)).json()["ok"] is True

    await wait_for(answered)
    status = (await mesh.http.get(url, headers=owner.headers)).json()["result"]
    assert (status["appsPosted"], status["lastApp"], status["model"]) == (1, app_id, "apps")


async def test_a_model_bot_without_a_model_fails_clearly(base_url: str, mesh: Mesh) -> None:
    owner = await mesh.setup()
    r = await mesh.http.post(
        "/api/agents/spawn", json={"name": "blank", "type": "llm"}, headers=owner.headers
    )
    agent_id = r.json()["agentId"]

    async def failed() -> bool:
        agents = (await mesh.http.get("/api/agents", headers=owner.headers)).json()
        bot = next(a for a in agents if a["agentId"] == agent_id)
        return bool(bot["status"] == "failed")

    await wait_for(failed)
    agents = (await mesh.http.get("/api/agents", headers=owner.headers)).json()
    detail = next(a for a in agents if a["agentId"] == agent_id)["detail"]
    assert detail == "llm bots need a model: spawn it with one"
