"""Webhook bots over real sockets: signed deliveries to a real HTTP receiver,
replies, commands, retries while the receiver is down, a node restart in the
middle, the backlog bound and the private-address rule."""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh import Settings
from tests.helpers import Mesh, User, assert_error, wait_for
from tests.receiver import Receiver, Request, free_port


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "mesh-data", webhook_max_backoff=0.3, webhook_max_backlog=5)


async def webhook_bot(mesh: Mesh, admin: User, name: str, url: str) -> tuple[User, str]:
    r = await mesh.http.post(
        "/api/agents/bootstrap",
        json={"name": name, "type": "webhook", "webhookUrl": url},
        headers=admin.headers,
    )
    assert r.status_code == 201, r.text
    body = r.json()
    return User(body["agentId"], name, body["token"]), body["webhookSecret"]


def verified(request: Request, secret: str) -> bool:
    expected = "sha256=" + hmac.new(secret.encode(), request.body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(request.headers["x-mesh-signature"], expected)


async def webhook_state(mesh: Mesh, admin: User, agent_id: str) -> dict[str, Any]:
    agents = (await mesh.http.get("/api/agents", headers=admin.headers)).json()
    return dict(next(a for a in agents if a["agentId"] == agent_id)["webhook"])


async def delivered(receiver: Receiver, message: dict[str, Any]) -> None:
    """Wait until *message* reached the receiver. A bot's events go out one at a
    time in order, so whatever was to be delivered before it has been by then."""

    async def arrived() -> bool:
        ids = [q.headers["x-mesh-delivery"] for q in receiver.requests]
        return message["messageId"] in ids

    await wait_for(arrived)


async def settled_state(mesh: Mesh, admin: User, agent_id: str, count: int) -> dict[str, Any]:
    """The bot's webhook state once it is idle with at least *count* delivered."""
    state: dict[str, Any] = {}

    async def idle() -> bool:
        state.update(await webhook_state(mesh, admin, agent_id))
        return bool(state["status"] == "idle" and state["delivered"] >= count)

    await wait_for(idle)
    return state


async def test_signed_deliveries_replies_and_commands(
    base_url: str, mesh: Mesh, nursery: trio.Nursery
) -> None:
    owner = await mesh.setup()

    def answer(request: Request) -> tuple[int, Any]:
        event = request.json()
        if event["type"] == "command":
            return 200, {"ok": True, "result": {"pong": event["args"]["n"]}}
        return 200, {"content": f"got {event['content']}"}

    receiver = Receiver(answer)
    await receiver.start(nursery)
    bot, secret = await webhook_bot(mesh, owner, "hooky", receiver.url)
    room_id = (await mesh.create_room(owner, "hooks"))["roomId"]
    await mesh.join(bot, room_id)
    sent = await mesh.send(owner, room_id, "ping")

    async def replied() -> bool:
        return [m["content"] for m in await mesh.messages(owner, room_id)] == ["ping", "got ping"]

    await wait_for(replied)
    [request] = receiver.requests
    assert request.method == "POST"
    assert verified(request, secret)
    assert request.headers["x-mesh-event"] == "message"
    assert request.headers["x-mesh-delivery"] == sent["messageId"]
    event = request.json()
    assert event["type"] == "message"
    assert (event["messageId"], event["senderId"]) == (sent["messageId"], owner.participant_id)
    # a tampered body would not verify
    assert not verified(Request("POST", "/", request.headers, request.body + b" "), secret)

    r = await mesh.http.post(
        f"/api/agents/{bot.participant_id}/command",
        json={"command": "ping", "args": {"n": 7}},
        headers=owner.headers,
    )
    url = f"/api/agents/{bot.participant_id}/commands/{r.json()['commandId']}"

    async def answered() -> bool:
        return bool((await mesh.http.get(url, headers=owner.headers)).json()["ok"])

    await wait_for(answered)
    assert (await mesh.http.get(url, headers=owner.headers)).json()["result"] == {"pong": 7}
    # its own reply was never delivered back to it: one message, one command,
    # then the next message
    marker = await mesh.send(owner, room_id, "marker")
    await delivered(receiver, marker)
    events = [(q.headers["x-mesh-event"], q.headers["x-mesh-delivery"]) for q in receiver.requests]
    assert events == [
        ("message", sent["messageId"]),
        ("command", r.json()["commandId"]),
        ("message", marker["messageId"]),
    ]
    state = await settled_state(mesh, owner, bot.participant_id, 3)
    assert (state["delivered"], state["status"]) == (3, "idle")


async def test_a_receiver_that_is_down_then_up_gets_every_event_once_in_order(
    base_url: str, mesh: Mesh, nursery: trio.Nursery
) -> None:
    owner = await mesh.setup()
    port = free_port()
    receiver = Receiver()
    bot, secret = await webhook_bot(mesh, owner, "patient", f"http://127.0.0.1:{port}/hook")
    room_id = (await mesh.create_room(owner, "queue"))["roomId"]
    await mesh.join(bot, room_id)
    for n in range(4):
        await mesh.send(owner, room_id, f"m{n}")

    async def retrying() -> bool:
        state = await webhook_state(mesh, owner, bot.participant_id)
        return bool(state["status"] == "retrying" and state["failedAttempts"] >= 2)

    await wait_for(retrying)
    assert receiver.requests == []
    await receiver.start(nursery, port)

    async def all_in() -> bool:
        return len(receiver.requests) >= 4

    await wait_for(all_in)
    # nothing is delivered twice: a repeat would come before the next message
    marker = await mesh.send(owner, room_id, "marker")
    await delivered(receiver, marker)
    assert [q.json()["content"] for q in receiver.requests] == ["m0", "m1", "m2", "m3", "marker"]
    assert all(verified(q, secret) for q in receiver.requests)
    state = await settled_state(mesh, owner, bot.participant_id, 5)
    assert (state["delivered"], state["skipped"], state["status"]) == (5, 0, "idle")


async def test_refused_events_are_dropped_and_the_backlog_is_bounded(
    base_url: str, mesh: Mesh, nursery: trio.Nursery
) -> None:
    owner = await mesh.setup()
    port = free_port()
    bot, _ = await webhook_bot(mesh, owner, "overflow", f"http://127.0.0.1:{port}/hook")
    room_id = (await mesh.create_room(owner, "flood"))["roomId"]
    await mesh.join(bot, room_id)
    # m0 is in flight (being retried) before the rest arrive; of those, the
    # backlog keeps 5 (settings)
    await mesh.send(owner, room_id, "m0")

    async def retrying() -> bool:
        state = await webhook_state(mesh, owner, bot.participant_id)
        return bool(state["status"] == "retrying")

    await wait_for(retrying)
    for n in range(1, 9):
        await mesh.send(owner, room_id, f"m{n}")

    def refuse_m4(request: Request) -> tuple[int, Any]:
        return (422, {"error": "no"}) if request.json()["content"] == "m4" else (200, None)

    receiver = Receiver(refuse_m4)
    await receiver.start(nursery, port)

    async def drained() -> bool:
        state = await webhook_state(mesh, owner, bot.participant_id)
        return bool(state["status"] == "idle" and state["delivered"] >= 4)

    await wait_for(drained)
    contents = [q.json()["content"] for q in receiver.requests]
    # the first message was in flight when the receiver was down; the oldest
    # beyond the bound were skipped; m4 was refused once and not retried
    assert contents == ["m0", "m4", "m5", "m6", "m7", "m8"]
    assert contents.count("m4") == 1
    state = await webhook_state(mesh, owner, bot.participant_id)
    assert state["rejected"] == 1
    # every message was delivered once or counted as skipped
    assert len(contents) == len(set(contents))
    assert state["skipped"] == 3
    assert len(contents) + state["skipped"] == 9


async def test_only_admins_register_webhooks_on_private_addresses(
    base_url: str, mesh: Mesh
) -> None:
    await mesh.setup()  # open registration: anyone may bootstrap bots
    for url in (
        "http://127.0.0.1:9/x",
        "http://localhost:9/x",
        "http://10.1.2.3/x",
        "http://[::1]:9/x",
        "http://169.254.169.254/latest/meta-data",
    ):
        r = await mesh.http.post(
            "/api/agents/bootstrap", json={"name": "sneaky", "type": "webhook", "webhookUrl": url}
        )
        assert_error(r, 403, "private_webhook_url")
    for url in ("http://user:pw@example.com/x", "http://example.com:99999/x", "http:///x"):
        r = await mesh.http.post(
            "/api/agents/bootstrap", json={"name": "sneaky", "type": "webhook", "webhookUrl": url}
        )
        assert_error(r, 400, "invalid_url")


async def test_deliveries_survive_a_node_restart(tmp_path: Path, nursery: trio.Nursery) -> None:
    from tests.e2e.test_cli_restart import ServerProcess

    data_dir = tmp_path / "mesh-data"
    env = {"MESH_WEBHOOK_MAX_BACKOFF": "0.3"}
    port = free_port()
    first = ServerProcess(data_dir, env=env)
    url = await first.start(nursery)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        bot, secret = await webhook_bot(mesh, owner, "durable", f"http://127.0.0.1:{port}/h")
        room_id = (await mesh.create_room(owner, "log"))["roomId"]
        await mesh.join(bot, room_id)
        for n in range(3):
            await mesh.send(owner, room_id, f"before {n}")
    assert await first.stop() == 0

    receiver = Receiver(lambda request: (200, {"content": "ack " + request.json()["content"]}))
    await receiver.start(nursery, port)
    second = ServerProcess(data_dir, env=env)
    url = await second.start(nursery)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        await mesh.send(owner, room_id, "after")

        async def all_in() -> bool:
            return len(receiver.requests) >= 4

        await wait_for(all_in)
        # nothing is delivered twice: a repeat would come before the next message
        marker = await mesh.send(owner, room_id, "marker")
        await delivered(receiver, marker)
        contents = [q.json()["content"] for q in receiver.requests]
        assert contents == ["before 0", "before 1", "before 2", "after", "marker"]
        assert all(verified(q, secret) for q in receiver.requests)

        async def acked() -> bool:
            messages = await mesh.messages(owner, room_id)
            return sum(m["content"].startswith("ack ") for m in messages) == 5

        await wait_for(acked)
    assert await second.stop() == 0
