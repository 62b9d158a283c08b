"""Tasks (issue 30, decision 0063) over a served node: who may create them,
how an agent moves them, how a bot that knows nothing of tasks completes
one by replying, cancel and reply by the creator, their events, and that
they survive a restart."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from quart_mesh import Settings, create_app, serve
from quart_mesh.app import MeshApp
from quart_mesh.records import TaskState
from tests.helpers import Mesh, User


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
        json={"name": name, "type": "nanoclaw"},
        headers=by.headers if by else None,
    )
    assert r.status_code == 201, r.text
    return User(r.json()["agentId"], name, r.json()["token"])


async def test_the_service_creates_and_the_reply_completes(
    base_url: str, mesh: Mesh, served_app: MeshApp, tmp_path: Path
) -> None:
    owner = await mesh.setup()
    bot = await bootstrap(mesh, "echo-bot")
    room = (await mesh.create_room(owner, "work"))["roomId"]
    await mesh.join(bot, room)
    node = served_app.node
    actor = await node.accounts.actor_of(owner.participant_id)
    assert actor is not None
    task = await node.tasks.create(
        actor, room_id=room, agent_id=bot.participant_id, content="say hi"
    )
    assert task.state is TaskState.SUBMITTED
    assert task.title == "say hi"
    assert task.context_id == task.task_id
    await mesh.send(bot, room, "hi", threadId=task.message_id)
    done = await node.tasks.get(actor, task.task_id)
    assert done.state is TaskState.COMPLETED
    assert done.result == "hi"
    history = await node.tasks.history(actor, task.task_id)
    assert [m.content for m in history] == ["say hi", "hi"]
