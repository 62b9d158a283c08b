"""Webhook delivery when the store fails for a moment after a receiver took
an event, over a node served on a loopback port with a real receiver.

The fault is injected into the store (the unit of work that records the
delivery raises ``Unavailable`` once) or into the reply (the store's write
queue is full: ``Overloaded``). Either is retried on its own: the receiver
gets the event once, and the bot's reply is posted once — not twice (the
whole round retried, the event POSTed again) nor never (the reply dropped).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from quart_mesh import MeshApp, Settings, create_app, serve
from quart_mesh.errors import Overloaded, Unavailable
from quart_mesh.services.authz import Actor
from quart_mesh.store import agents as agents_repo
from tests.helpers import Mesh, User, wait_for
from tests.receiver import Receiver, Request

pytestmark = pytest.mark.timeout(60)


def _answer(request: Request) -> tuple[int, Any]:
    event = request.json()
    if event["type"] == "command":
        return 200, {"ok": True, "result": {"pong": True}}
    return 200, {"content": "pong"} if event["content"] == "ping" else None


def _once(original: Callable[..., Any], fault: Exception) -> Callable[..., Any]:
    """*original*, raising *fault* the first time it is called."""
    calls = 0

    def flaky(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise fault
        return original(*args, **kwargs)

    return flaky


@asynccontextmanager
async def _node(tmp_path: Path) -> AsyncIterator[tuple[MeshApp, Mesh, User]]:
    app = create_app(Settings(data_dir=tmp_path / "mesh-data"))
    async with trio.open_nursery() as nursery:
        url: str = await nursery.start(partial(serve, app, port=0))
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            mesh = Mesh(http)
            yield app, mesh, await mesh.setup()
        nursery.cancel_scope.cancel()


async def _webhook_bot(mesh: Mesh, owner: User, url: str) -> User:
    r = await mesh.http.post(
        "/api/agents/bootstrap",
        json={"name": "hook", "type": "webhook", "webhookUrl": url},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    return User(r.json()["agentId"], "hook", r.json()["token"])


async def _delivered(receiver: Receiver, delivery_id: str) -> None:
    async def arrived() -> bool:
        return delivery_id in [q.headers["x-mesh-delivery"] for q in receiver.requests]

    await wait_for(arrived)


@pytest.mark.parametrize("fault", ["cursor", "reply"])
async def test_a_store_fault_after_a_delivery_neither_repeats_it_nor_loses_the_reply(
    tmp_path: Path, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    receiver = Receiver(_answer)
    await receiver.start(nursery)
    async with _node(tmp_path) as (app, mesh, owner):
        bot = await _webhook_bot(mesh, owner, receiver.url)
        room_id = (await mesh.create_room(owner, "faults"))["roomId"]
        await mesh.join(bot, room_id)
        if fault == "cursor":
            # the cursor write after the POST fails once (store unavailable)
            unavailable = Unavailable("the storage backend is unavailable", "storage_unavailable")
            flaky = _once(agents_repo.set_delivery_cursor, unavailable)
            monkeypatch.setattr(agents_repo, "set_delivery_cursor", flaky)
        else:
            # the bot's reply meets a full write queue once
            messages = app.node.webhooks._messages
            send = messages.send
            failed = False

            async def overloaded_once(actor: Actor, *args: Any, **kwargs: Any) -> Any:
                nonlocal failed
                if actor.participant_id == bot.participant_id and not failed:
                    failed = True
                    raise Overloaded("too many writes waiting", retry_after=0)
                return await send(actor, *args, **kwargs)

            monkeypatch.setattr(messages, "send", overloaded_once)
        ping = await mesh.send(owner, room_id, "ping")
        # events go out one at a time, in order: once the marker is delivered,
        # whatever was to happen to the ping (a repeat, its reply) has
        marker = await mesh.send(owner, room_id, "marker")
        await _delivered(receiver, marker["messageId"])
        ids = [q.headers["x-mesh-delivery"] for q in receiver.requests]
        assert ids == [ping["messageId"], marker["messageId"]]
        contents = [m["content"] for m in await mesh.messages(owner, room_id)]
        assert sorted(contents) == ["marker", "ping", "pong"], contents


async def test_a_store_fault_after_a_command_is_delivered_does_not_repeat_it(
    tmp_path: Path, nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver(_answer)
    await receiver.start(nursery)
    async with _node(tmp_path) as (_, mesh, owner):
        bot = await _webhook_bot(mesh, owner, receiver.url)
        room_id = (await mesh.create_room(owner, "faults"))["roomId"]
        await mesh.join(bot, room_id)
        unavailable = Unavailable("the storage backend is unavailable", "storage_unavailable")
        monkeypatch.setattr(
            agents_repo, "mark_delivered", _once(agents_repo.mark_delivered, unavailable)
        )
        r = await mesh.http.post(
            f"/api/agents/{bot.participant_id}/command",
            json={"command": "ping", "args": {}},
            headers=owner.headers,
        )
        assert r.status_code in (200, 201, 202), r.text
        command_id = r.json()["commandId"]
        await _delivered(receiver, command_id)
        marker = await mesh.send(owner, room_id, "marker")
        await _delivered(receiver, marker["messageId"])
        events = [
            (q.headers["x-mesh-event"], q.headers["x-mesh-delivery"]) for q in receiver.requests
        ]
        assert events == [("command", command_id), ("message", marker["messageId"])]
        url = f"/api/agents/{bot.participant_id}/commands/{command_id}"
        answer = (await mesh.http.get(url, headers=owner.headers)).json()
        assert (answer["ok"], answer["result"]) == (True, {"pong": True})
