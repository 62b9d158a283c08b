"""The mesh's bots as A2A agents (issue 30, decision 0062) over a served node,
driven by the official ``a2a-sdk`` client under Trio: the cards, a message
that becomes a DM with the bot and completes with its reply, streaming, a
bot that asks back, cancel, GetTask and SubscribeToTask across a restart,
and who may do what."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from a2a.client import (
    A2ACardResolver,
    A2AClientError,
    AuthInterceptor,
    Client,
    ClientConfig,
    ClientFactory,
    CredentialService,
)
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskNotCancelableError,
    TaskNotFoundError,
    TaskState,
    UnsupportedOperationError,
)
from a2a.utils.errors import A2AError, InternalError, InvalidParamsError, InvalidRequestError

from quart_mesh import Settings, create_app, serve
from quart_mesh.a2a_server import handler
from quart_mesh.config import Limits
from quart_mesh.errors import Unavailable
from quart_mesh.services.agents import Agents
from quart_mesh.services.tasks import Tasks
from tests.e2e.test_stock_hypercorn import served
from tests.helpers import Mesh, User, assert_error, connect, wait_for

# a2a-sdk 1.3.0's client, given a JSON-RPC error where it asked for a stream,
# raises it while iterating its inner SSE generator and leaves that generator
# to the garbage collector (Trio warns; asyncio closes it quietly)
# (and so its SSE parser, given an error event that ends a stream)
pytestmark = [
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <async_generator object send_http_stream_request"
        ":pytest.PytestUnraisableExceptionWarning"
    ),
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <async_generator object parse_sse_stream"
        ":pytest.PytestUnraisableExceptionWarning"
    ),
]


async def bootstrap(mesh: Mesh, name: str, *, a2a: bool | None = None) -> User:
    body: dict[str, Any] = {"name": name, "type": "nanoclaw"}
    if a2a is not None:
        body["a2a"] = a2a
    r = await mesh.http.post("/api/agents/bootstrap", json=body)
    assert r.status_code == 201, r.text
    return User(r.json()["agentId"], name, r.json()["token"])


async def spawn_echo(mesh: Mesh, owner: User, name: str = "echo") -> str:
    body = {"name": name, "type": "echo", "model": "none", "rooms": []}
    r = await mesh.http.post("/api/agents/spawn", json=body, headers=owner.headers)
    assert r.status_code == 201, r.text
    agent_id = str(r.json()["agentId"])

    async def running() -> bool:
        agents = (await mesh.http.get("/api/agents", headers=owner.headers)).json()
        return any(a["agentId"] == agent_id and a["status"] == "running" for a in agents)

    await wait_for(running, 30)
    return agent_id


@asynccontextmanager
async def a2a_client(
    url: str, user: User | None, *, streaming: bool = False, token: str | None = None
) -> AsyncIterator[Client]:
    """The official client for the agent at *url* (its card is fetched
    from ``<url>/.well-known/agent-card.json``), with *user*'s token."""
    headers = {}
    if user is not None or token is not None:
        headers["Authorization"] = f"Bearer {token if token is not None else user.token}"  # type: ignore[union-attr]
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
        client = await factory.create_from_url(url)
        yield client


def ask(
    text: str, *, task_id: str = "", metadata: dict[str, Any] | None = None, **config: Any
) -> SendMessageRequest:
    message = new_text_message(text)
    if task_id:
        message.task_id = task_id
    if metadata:
        message.metadata.update(metadata)
    return SendMessageRequest(
        message=message, configuration=SendMessageConfiguration(**config) if config else None
    )


async def send(client: Client, request: SendMessageRequest) -> list[StreamResponse]:
    with trio.fail_after(60):
        return [event async for event in client.send_message(request)]


def final_task(events: list[StreamResponse]) -> Task:
    [event] = events
    assert event.HasField("task"), event
    return event.task


def text(task: Task) -> list[str]:
    return [part.text for artifact in task.artifacts for part in artifact.parts]


@pytest.fixture
async def owner(mesh: Mesh) -> User:
    return await mesh.setup()


async def test_the_cards_list_the_bots_that_opted_in(
    base_url: str, mesh: Mesh, owner: User
) -> None:
    # no A2A bot yet: no card (A2A 1.0 requires skills), and a clear answer
    r = await mesh.http.get("/.well-known/agent-card.json")
    assert_error(r, 404, "no_a2a_agents")
    echo = await spawn_echo(mesh, owner)
    quiet = await bootstrap(mesh, "quiet")  # external: not an agent unless it says so
    loud = await bootstrap(mesh, "loud", a2a=True)

    r = await mesh.http.get("/.well-known/agent-card.json")
    assert r.status_code == 200, r.text
    card = r.json()
    assert card["name"] == "Test Mesh"
    assert {s["id"] for s in card["skills"]} == {echo, loud.participant_id}
    [interface] = card["supportedInterfaces"]
    assert interface == {
        "url": f"{base_url}/a2a",
        "protocolBinding": "JSONRPC",
        "protocolVersion": "1.0",
    }
    scheme = card["securitySchemes"]["meshToken"]["httpAuthSecurityScheme"]
    assert scheme["scheme"] == "Bearer"
    assert card["securityRequirements"] == [{"schemes": {"meshToken": {}}}]
    assert card["capabilities"]["streaming"] is True

    # each agent's own card, where the client looks for it
    async with httpx.AsyncClient() as http:
        bot_card = await A2ACardResolver(http, f"{base_url}/a2a/agents/{echo}").get_agent_card()
    assert bot_card.name == "echo"
    assert bot_card.supported_interfaces[0].url == f"{base_url}/a2a/agents/{echo}"
    assert "meshToken" in bot_card.security_schemes

    # one that did not opt in has no card and no interface
    r = await mesh.http.get(f"/a2a/agents/{quiet.participant_id}/.well-known/agent-card.json")
    assert r.status_code == 404
    r = await mesh.http.post(
        f"/a2a/agents/{quiet.participant_id}",
        json={"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}},
        headers={**owner.headers, "A2A-Version": "1.0"},
    )
    assert r.status_code == 404
    assert r.json()["error"]["data"]["code"] == "agent_not_found"

    # it opts in (PATCH by itself; its registrant or an admin may too), then out
    r = await mesh.http.patch(
        f"/api/agents/{quiet.participant_id}", json={"a2a": True}, headers=quiet.headers
    )
    assert r.status_code == 200, r.text
    assert r.json() == {"agentId": quiet.participant_id, "a2a": True}
    card = (await mesh.http.get("/.well-known/agent-card.json")).json()
    assert quiet.participant_id in {s["id"] for s in card["skills"]}
    agents = (await mesh.http.get("/api/agents", headers=owner.headers)).json()
    assert {a["name"]: a["a2a"] for a in agents} == {"echo": True, "quiet": True, "loud": True}
    bob = await mesh.register("bob")
    r = await mesh.http.patch(
        f"/api/agents/{quiet.participant_id}", json={"a2a": False}, headers=bob.headers
    )
    assert_error(r, 403, "forbidden")
    r = await mesh.http.patch(
        f"/api/agents/{quiet.participant_id}", json={"a2a": False}, headers=owner.headers
    )
    assert r.status_code == 200, r.text
    card = (await mesh.http.get("/.well-known/agent-card.json")).json()
    assert quiet.participant_id not in {s["id"] for s in card["skills"]}
    r = await mesh.http.patch(
        f"/api/agents/{owner.participant_id}", json={"a2a": True}, headers=owner.headers
    )
    assert_error(r, 404, "agent_not_found")


async def test_a_message_becomes_a_dm_and_the_reply_completes_it(
    base_url: str, mesh: Mesh, owner: User
) -> None:
    echo = await spawn_echo(mesh, owner)
    bob = await mesh.register("bob")
    async with a2a_client(f"{base_url}/a2a/agents/{echo}", bob) as client:
        task = final_task(await send(client, ask("hello bot")))
        assert task.status.state == TaskState.TASK_STATE_COMPLETED, task
        assert text(task) == ["echo: hello bot"]
        assert [(m.role, m.parts[0].text) for m in task.history] == [
            (Role.ROLE_USER, "hello bot"),
            (Role.ROLE_AGENT, "echo: hello bot"),
        ]
        assert task.context_id == task.id

        # the conversation is a DM the caller reads over REST
        room_id = task.metadata["roomId"]
        said = [(m["senderId"], m["content"]) for m in await mesh.messages(bob, room_id)]
        assert said == [(bob.participant_id, "hello bot"), (echo, "echo: hello bot")]
        r = await mesh.http.get(f"/api/tasks/{task.id}", headers=bob.headers)
        if r.status_code != 404:  # the REST route (tasks branch) may not be merged yet
            assert r.json()["task"]["state"] == "completed"

        # GetTask gives the same
        again = await client.get_task(GetTaskRequest(id=task.id))
        assert again.status.state == TaskState.TASK_STATE_COMPLETED
        assert text(again) == ["echo: hello bot"]
        short = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
        assert [m.parts[0].text for m in short.history] == ["echo: hello bot"]

        # a closed task takes no follow-up and cannot be canceled
        with pytest.raises(InvalidParamsError, match="completed"):
            await send(client, ask("more", task_id=task.id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id))
        listed = await client.list_tasks(ListTasksRequest())
        assert [t.id for t in listed.tasks] == [task.id]

    # the node's own interface takes the bot's id in the message's metadata
    async with a2a_client(base_url, bob) as client:
        task = final_task(await send(client, ask("via the node", metadata={"agentId": echo})))
        assert text(task) == ["echo: via the node"]
        task = final_task(await send(client, ask("by skill", metadata={"skillId": echo})))
        assert text(task) == ["echo: by skill"]
        # the node's only agent needs no name; with two, one must be named
        task = final_task(await send(client, ask("to the only one")))
        assert text(task) == ["echo: to the only one"]
        await spawn_echo(mesh, owner, "echo-2")
        with pytest.raises(InvalidParamsError, match="agentId"):
            await send(client, ask("to whom?"))
    card = (await mesh.http.get("/.well-known/agent-card.json")).json()
    [skill] = [s for s in card["skills"] if s["id"] == echo]
    assert f"{base_url}/a2a/agents/{echo}/.well-known/agent-card.json" in skill["description"]


async def test_streaming_shows_the_task_move(base_url: str, mesh: Mesh, owner: User) -> None:
    echo = await spawn_echo(mesh, owner)
    async with a2a_client(f"{base_url}/a2a/agents/{echo}", owner, streaming=True) as client:
        events = await send(client, ask("stream me"))
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds[0] == "task"
    assert events[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
    assert events[-1].WhichOneof("payload") == "status_update"
    assert events[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    [artifact] = [e.artifact_update.artifact for e in events if e.HasField("artifact_update")]
    assert artifact.parts[0].text == "echo: stream me"


async def next_frame(socket: Any, type: str, **match: Any) -> dict[str, Any]:
    """The bot's next frame of *type* (fields *match*), read raw."""
    with trio.fail_after(20):
        while True:
            frame = json.loads(await socket.ws.get_message())
            if frame["type"] == type and all(frame.get(k) == v for k, v in match.items()):
                return dict(frame)
            assert frame["type"] != "error", frame


async def test_a_bot_that_asks_back_and_the_follow_up(
    base_url: str, mesh: Mesh, owner: User
) -> None:
    bot = await bootstrap(mesh, "maitre-d", a2a=True)
    bob = await mesh.register("bob")
    url = f"{base_url}/a2a/agents/{bot.participant_id}"
    events: list[StreamResponse] = []
    async with connect(base_url, bot) as ws, a2a_client(url, bob, streaming=True) as client:

        async def converse() -> None:
            events.extend(await send(client, ask("book a table")))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(converse)
            # the request is posted first, then the task opened on it
            request = await next_frame(ws, "message", content="book a table")
            created = await next_frame(ws, "task_created")
            task_id = created["task"]["taskId"]
            assert created["task"]["messageId"] == request["messageId"]
            await ws.send(
                type="task_update", taskId=task_id, state="input-required", message="for how many?"
            )
        # the stream ends when the bot asks back
        assert events[0].task.status.state == TaskState.TASK_STATE_SUBMITTED
        last = events[-1].status_update.status
        assert last.state == TaskState.TASK_STATE_INPUT_REQUIRED
        assert last.message.parts[0].text == "for how many?"
        assert last.message.role == Role.ROLE_AGENT

    # the caller answers (blocking this time); the bot completes with a result
    answered: list[StreamResponse] = []
    async with connect(base_url, bot) as ws, a2a_client(url, bob) as client:

        async def follow_up() -> None:
            answered.extend(await send(client, ask("four", task_id=task_id)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow_up)
            reply = await next_frame(ws, "message", content="four")
            assert reply["threadId"] == created["task"]["messageId"]
            await ws.send(
                type="task_update", taskId=task_id, state="completed", result="a table for 4 at 8"
            )
    task = final_task(answered)
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert text(task) == ["a table for 4 at 8"]
    assert [(m.role, m.parts[0].text) for m in task.history] == [
        (Role.ROLE_USER, "book a table"),
        (Role.ROLE_AGENT, "for how many?"),
        (Role.ROLE_USER, "four"),
    ]


async def test_cancel_and_whose_tasks(base_url: str, mesh: Mesh, owner: User) -> None:
    bot = await bootstrap(mesh, "slow", a2a=True)
    bob = await mesh.register("bob")
    carol = await mesh.register("carol")
    url = f"{base_url}/a2a/agents/{bot.participant_id}"
    async with a2a_client(url, bob) as client:
        task = final_task(await send(client, ask("take your time", return_immediately=True)))
        assert task.status.state == TaskState.TASK_STATE_SUBMITTED

    # someone else cannot see, cancel or follow it, nor continue it
    async with a2a_client(url, carol, streaming=True) as other:
        with pytest.raises(TaskNotFoundError):
            await other.get_task(GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await other.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            async for _ in other.subscribe(SubscribeToTaskRequest(id=task.id)):
                pass
        with pytest.raises(TaskNotFoundError):
            await send(other, ask("me too", task_id=task.id))
        assert list((await other.list_tasks(ListTasksRequest())).tasks) == []
    # nor through another bot's interface
    echo = await spawn_echo(mesh, owner)
    async with a2a_client(f"{base_url}/a2a/agents/{echo}", bob) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id=task.id))

    async with a2a_client(url, bob, streaming=True) as client:
        canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
        assert canceled.status.state == TaskState.TASK_STATE_CANCELED
        assert (await client.get_task(GetTaskRequest(id=task.id))).status.state == (
            TaskState.TASK_STATE_CANCELED
        )
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id))
        with pytest.raises(UnsupportedOperationError, match="canceled"):
            async for _ in client.subscribe(SubscribeToTaskRequest(id=task.id)):
                pass
        with pytest.raises(TaskNotFoundError):
            await client.get_task(GetTaskRequest(id="01ARZ3NDEKTSV4RRFFQ69G5FAV"))


async def test_who_may_call(base_url: str, mesh: Mesh, owner: User) -> None:
    echo = await spawn_echo(mesh, owner)
    quiet = await bootstrap(mesh, "quiet")
    url = f"{base_url}/a2a/agents/{echo}"
    for token in (None, "not-a-token", owner.token[:-4] + "AAAA"):
        async with a2a_client(url, None, token=token) as client:
            with pytest.raises(A2AClientError, match="401"):
                await send(client, ask("hi"))
    r = await mesh.http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"})
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert r.json()["error"]["message"].startswith("a bearer token is required")
    assert "Traceback" not in r.text

    # a caller that is deleted is refused at once
    caller = await bootstrap(mesh, "caller")
    async with a2a_client(url, caller) as client:
        # (the echo bot does not answer bots: it would talk to itself)
        first = final_task(await send(client, ask("first", return_immediately=True)))
        assert first.status.state == TaskState.TASK_STATE_SUBMITTED
        r = await mesh.http.delete(f"/api/agents/{caller.participant_id}", headers=owner.headers)
        assert r.status_code == 200, r.text
        with pytest.raises(A2AClientError, match="401"):
            await send(client, ask("second"))
        with pytest.raises(A2AClientError, match="401"):
            await client.get_task(GetTaskRequest(id=first.id))

    # a bot that did not opt in is not reachable through the node's interface either
    async with a2a_client(base_url, owner) as client:
        for agent_id in (quiet.participant_id, owner.participant_id, "nobody"):
            with pytest.raises(InvalidParamsError, match="no such A2A agent"):
                await send(client, ask("hi", metadata={"agentId": agent_id}))

    # bad requests are JSON-RPC errors with clear messages, never a traceback
    headers = {**owner.headers, "A2A-Version": "1.0"}
    for body, code in [
        ("not json", -32700),
        ({"jsonrpc": "2.0", "id": 1, "method": "Nope"}, -32601),
        ({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": 3}}, -32602),
        (
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "SendMessage",
                "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}},
            },
            -32602,
        ),
        (
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "CreateTaskPushNotificationConfig",
                "params": {"taskId": "t", "url": "http://example.com"},
            },
            -32003,
        ),
    ]:
        content = body if isinstance(body, str) else json.dumps(body)
        r = await mesh.http.post(url, content=content, headers=headers)
        assert r.status_code == 200, r.text
        error = r.json()["error"]
        assert error["code"] == code, error
        assert error["message"]
        assert "Traceback" not in r.text
    r = await mesh.http.post(url, content=b"x" * 2_000_000, headers=headers)
    assert r.status_code == 413
    assert r.json()["error"]["data"]["code"] == "too_large"
    # the routes' own refusals are JSON, like the REST API's
    assert_error(await mesh.http.get(url), 405, "method_not_allowed")
    assert_error(await mesh.http.get(f"{url}/more"), 404, "not_found")
    assert_error(await mesh.http.post("/.well-known/agent-card.json"), 405)


@asynccontextmanager
async def node_on(data_dir: Path) -> AsyncIterator[str]:
    """A node on *data_dir* served on loopback for the block, then stopped."""
    async with trio.open_nursery() as nursery:
        app = create_app(Settings(data_dir=data_dir))
        url: str = await nursery.start(
            lambda task_status: serve(app, port=0, task_status=task_status)
        )
        yield url
        nursery.cancel_scope.cancel()


async def test_tasks_survive_a_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "mesh-data"
    async with node_on(data_dir) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        bot = await bootstrap(mesh, "steady", a2a=True)
        bob = await mesh.register("bob")
        async with a2a_client(f"{url}/a2a/agents/{bot.participant_id}", bob) as client:
            task = final_task(await send(client, ask("remember me", return_immediately=True)))

    async with node_on(data_dir) as url:
        agent_url = f"{url}/a2a/agents/{bot.participant_id}"
        async with a2a_client(agent_url, bob) as client:
            stored = await client.get_task(GetTaskRequest(id=task.id))
            assert stored.status.state == TaskState.TASK_STATE_SUBMITTED
            assert [m.parts[0].text for m in stored.history] == ["remember me"]
        seen: list[StreamResponse] = []
        async with (
            connect(url, bot) as ws,
            a2a_client(agent_url, bob, streaming=True) as client,
        ):

            async def follow() -> None:
                with trio.fail_after(30):
                    async for event in client.subscribe(SubscribeToTaskRequest(id=task.id)):
                        seen.append(event)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(follow)
                await wait_for(lambda: _true(bool(seen)))
                await ws.send(type="task_update", taskId=task.id, state="working", message="on it")
                await ws.send(type="task_update", taskId=task.id, state="completed", result="done")
    assert seen[0].task.id == task.id
    states = [e.status_update.status.state for e in seen if e.HasField("status_update")]
    assert states == [TaskState.TASK_STATE_WORKING, TaskState.TASK_STATE_COMPLETED]
    [artifact] = [e.artifact_update.artifact for e in seen if e.HasField("artifact_update")]
    assert artifact.parts[0].text == "done"
    del owner


async def _true(value: bool) -> bool:
    return value


async def test_a_dropped_stream_leaves_nothing_behind(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path / "mesh-data"))
    serving = trio.CancelScope()

    async def run(task_status: trio.TaskStatus[str]) -> None:
        with serving:
            await serve(app, port=0, task_status=task_status)

    async with trio.open_nursery() as nursery:
        url: str = await nursery.start(run)
        async with httpx.AsyncClient(base_url=url, timeout=10) as http:
            mesh = Mesh(http)
            await mesh.setup()
            bot = await bootstrap(mesh, "mute", a2a=True)
            bob = await mesh.register("bob")
        subscribers = app.node.broker.statistics().subscribers
        agent_url = f"{url}/a2a/agents/{bot.participant_id}"
        # the caller goes away while the stream waits for the bot
        async with a2a_client(agent_url, bob, streaming=True) as client:
            with trio.move_on_after(1):
                async for _ in client.send_message(ask("anyone there?")):
                    pass

        async def released() -> bool:
            return app.node.broker.statistics().subscribers == subscribers

        await wait_for(released)

        # a node that stops with a stream open ends the stream, and stops
        async with a2a_client(agent_url, bob, streaming=True) as client:
            first: list[StreamResponse] = []
            ended = trio.Event()

            async def listen() -> None:
                try:
                    async for event in client.send_message(ask("still there?")):
                        first.append(event)
                except A2AClientError:
                    pass
                ended.set()

            nursery.start_soon(listen)
            await wait_for(lambda: _true(bool(first)))
            with trio.fail_after(15):
                serving.cancel()
                await ended.wait()
            assert [e.WhichOneof("payload") for e in first] == ["task"]


async def test_a_blocking_send_waits_a_bounded_time(
    base_url: str, mesh: Mesh, owner: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(handler, "BLOCKING_SECONDS", 0.5)
    bot = await bootstrap(mesh, "mute", a2a=True)
    async with a2a_client(f"{base_url}/a2a/agents/{bot.participant_id}", owner) as client:
        with trio.fail_after(10):
            task = final_task(await send(client, ask("no answer comes")))
    # the task as it is: the caller polls (GetTask) or subscribes
    assert task.status.state == TaskState.TASK_STATE_SUBMITTED
    assert [m.parts[0].text for m in task.history] == ["no answer comes"]


class TestSeats:
    @pytest.fixture
    def settings(self, tmp_path: Path) -> Settings:
        return Settings(data_dir=tmp_path / "mesh-data", limits=Limits(max_polls_per_participant=1))

    async def test_waits_hold_the_callers_long_poll_seats(
        self, base_url: str, mesh: Mesh, owner: User, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setattr(handler, "BLOCKING_SECONDS", 0.5)
        bot = await bootstrap(mesh, "mute", a2a=True)
        url = f"{base_url}/a2a/agents/{bot.participant_id}"
        async with (
            a2a_client(url, owner, streaming=True) as streaming,
            a2a_client(url, owner) as blocking,
            trio.open_nursery() as nursery,
        ):
            first: list[StreamResponse] = []

            async def hold() -> None:
                async for event in streaming.send_message(ask("waiting")):
                    first.append(event)

            nursery.start_soon(hold)
            await wait_for(lambda: _true(bool(first)))
            with pytest.raises(InvalidRequestError, match="long polls") as refused:
                await send(blocking, ask("and this one?"))
            assert refused.value.data is not None
            # asking without waiting takes no seat
            task = final_task(await send(blocking, ask("later", return_immediately=True)))
            assert task.status.state == TaskState.TASK_STATE_SUBMITTED
            nursery.cancel_scope.cancel()
        # the dropped stream gives its seat back
        async with a2a_client(url, owner) as blocking:

            async def seated() -> bool:
                try:
                    task = final_task(await send(blocking, ask("now?")))
                except InvalidRequestError:
                    return False
                return task.status.state == TaskState.TASK_STATE_SUBMITTED

            await wait_for(seated)


async def test_an_unexpected_error_shows_no_internals(
    base_url: str, mesh: Mesh, owner: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    echo = await spawn_echo(mesh, owner)

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("SELECT secret FROM internals")

    monkeypatch.setattr(Tasks, "get", broken)
    async with a2a_client(f"{base_url}/a2a/agents/{echo}", owner, streaming=True) as client:
        with pytest.raises(InternalError, match=r"internal error \(request id \w+\)") as failed:
            await client.get_task(GetTaskRequest(id="01ARZ3NDEKTSV4RRFFQ69G5FAV"))
        assert "secret" not in str(failed.value)
        with pytest.raises(InternalError, match="request id") as failed:
            async for _ in client.subscribe(
                SubscribeToTaskRequest(id="01ARZ3NDEKTSV4RRFFQ69G5FAV")
            ):
                pass
        assert "secret" not in str(failed.value)

    # a refusal outside a call (the store away while a card is read): as REST answers it
    async def away(*args: Any, **kwargs: Any) -> None:
        raise Unavailable("the store is not answering", "unavailable")

    monkeypatch.setattr(Agents, "a2a_agents", away)
    assert_error(await mesh.http.get("/.well-known/agent-card.json"), 503, "unavailable")


async def test_under_stock_hypercorn(tmp_path: Path) -> None:
    """``quart_mesh.asgi`` under hypercorn's own trio worker: the same routes,
    a stream included."""
    async with (
        served(tmp_path / "mesh-data") as url,
        httpx.AsyncClient(base_url=url, timeout=10) as http,
    ):
        mesh = Mesh(http)
        owner = await mesh.setup()
        bot = await bootstrap(mesh, "hyper", a2a=True)
        card = (await http.get("/.well-known/agent-card.json")).json()
        assert [s["id"] for s in card["skills"]] == [bot.participant_id]
        agent_url = f"{url}/a2a/agents/{bot.participant_id}"
        async with connect(url, bot) as ws, a2a_client(agent_url, owner, streaming=True) as client:
            seen: list[StreamResponse] = []

            async def converse() -> None:
                seen.extend(await send(client, ask("over stock hypercorn")))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(converse)
                created = await next_frame(ws, "task_created")
                await ws.send(
                    type="task_update",
                    taskId=created["task"]["taskId"],
                    state="completed",
                    result="fine",
                )
        assert seen[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
        [artifact] = [e.artifact_update.artifact for e in seen if e.HasField("artifact_update")]
        assert artifact.parts[0].text == "fine"


async def test_the_clients_auth_interceptor_follows_the_card(
    base_url: str, mesh: Mesh, owner: User
) -> None:
    """The card's security scheme is enough for the SDK's ``AuthInterceptor``
    to send the token: no header set by hand."""
    echo = await spawn_echo(mesh, owner)

    class Tokens(CredentialService):
        async def get_credentials(self, security_scheme_name: str, context: Any) -> str | None:
            return owner.token if security_scheme_name == "meshToken" else None

    async with httpx.AsyncClient(timeout=30) as http:
        factory = ClientFactory(ClientConfig(streaming=False, httpx_client=http))
        client = await factory.create_from_url(
            f"{base_url}/a2a/agents/{echo}", interceptors=[AuthInterceptor(Tokens())]
        )
        task = final_task(await send(client, ask("with the interceptor")))
    assert text(task) == ["echo: with the interceptor"]


async def _stream_after(
    base_url: str, mesh: Mesh, revoke: Callable[[User], Awaitable[None]]
) -> list[str]:
    """Alice streams a task of a bot's; *revoke* takes her access away; the
    bot then moves the task with secret texts. What her stream got (and how
    it ended)."""
    bot = await bootstrap(mesh, "worker", a2a=True)
    alice = await mesh.register("alice")
    url = f"{base_url}/a2a/agents/{bot.participant_id}"
    got: list[str] = []
    async with connect(base_url, bot) as ws, a2a_client(url, alice, streaming=True) as client:

        async def listen() -> None:
            try:
                async for event in client.send_message(ask("do it")):
                    got.append(str(event))
            except A2AError as error:
                got.append(f"ended: {error}")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(listen)
            task_id = (await next_frame(ws, "task_created"))["task"]["taskId"]
            await wait_for(lambda: _true(bool(got)))
            await revoke(alice)
            await ws.send(type="task_update", taskId=task_id, state="working", message="SECRET-1")
            await ws.send(type="task_update", taskId=task_id, state="completed", result="SECRET-2")
            with trio.fail_after(15):
                while not got[-1].startswith("ended"):
                    await trio.sleep(0.05)
    return got


async def test_a_stream_ends_at_a_demotion(base_url: str, mesh: Mesh, owner: User) -> None:
    """A role without ``rooms.read`` reads nothing from then on: an open
    stream ends (the task is no longer the caller's to see)."""
    r = await mesh.http.post(
        "/api/roles",
        json={"name": "blind", "priority": 100, "permissions": ["participants.read"]},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text

    async def demote(alice: User) -> None:
        r = await mesh.http.put(
            f"/api/participants/{alice.participant_id}/role",
            json={"role": "blind"},
            headers=owner.headers,
        )
        assert r.status_code == 200, r.text

    got = await _stream_after(base_url, mesh, demote)
    assert not [g for g in got if "SECRET" in g], got
    assert "no such task" in got[-1], got


async def test_a_stream_ends_at_sign_out(base_url: str, mesh: Mesh, owner: User) -> None:
    """Signing the stream's token out ends it, as it ends the token's
    WebSocket sessions, long polls and MCP subscriptions."""

    async def sign_out(alice: User) -> None:
        r = await mesh.http.post("/api/auth/logout", headers=alice.headers)
        assert r.status_code in (200, 204), r.text

    got = await _stream_after(base_url, mesh, sign_out)
    assert not [g for g in got if "SECRET" in g], got
    assert "signed out" in got[-1], got


async def test_a_blocking_send_ends_at_sign_out(base_url: str, mesh: Mesh, owner: User) -> None:
    bot = await bootstrap(mesh, "worker", a2a=True)
    alice = await mesh.register("alice")
    url = f"{base_url}/a2a/agents/{bot.participant_id}"
    async with connect(base_url, bot) as ws, a2a_client(url, alice) as client:

        async def sign_out() -> None:
            await next_frame(ws, "task_created")
            r = await mesh.http.post("/api/auth/logout", headers=alice.headers)
            assert r.status_code in (200, 204), r.text

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sign_out)
            with trio.fail_after(10), pytest.raises(InvalidRequestError, match="signed out"):
                await send(client, ask("waiting"))


async def test_a_stream_shows_the_final_result(base_url: str, mesh: Mesh, owner: User) -> None:
    """A result given with ``working`` (a draft) and then another: the
    stream replaces the artifact each time (same id, not appended), so the
    SDK's client ends with the final one."""
    bot = await bootstrap(mesh, "worker", a2a=True)
    url = f"{base_url}/a2a/agents/{bot.participant_id}"
    events: list[StreamResponse] = []
    async with connect(base_url, bot) as ws, a2a_client(url, owner, streaming=True) as client:

        async def converse() -> None:
            with trio.fail_after(30):
                async for event in client.send_message(ask("do it")):
                    events.append(event)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(converse)
            task_id = (await next_frame(ws, "task_created"))["task"]["taskId"]
            await ws.send(type="task_update", taskId=task_id, state="working", result="draft")
            await wait_for(lambda: _true(any(e.HasField("artifact_update") for e in events)))
            await ws.send(type="task_update", taskId=task_id, state="completed", result="final")
    updates = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [(u.artifact.parts[0].text, u.append) for u in updates] == [
        ("draft", False),
        ("final", False),
    ]
    assert len({u.artifact.artifact_id for u in updates}) == 1
    async with a2a_client(url, owner) as client:
        assert text(await client.get_task(GetTaskRequest(id=task_id))) == ["final"]


async def test_a_follow_up_on_the_node_interface_goes_to_the_tasks_agent(
    base_url: str, mesh: Mesh, owner: User
) -> None:
    """The node's interface with two agents: a follow-up names its task
    (``message.taskId``), whose agent is known; the SDK's client does not
    repeat ``metadata.agentId``. A task the caller cannot see stays unknown."""
    first = await bootstrap(mesh, "first", a2a=True)
    await bootstrap(mesh, "second", a2a=True)
    async with a2a_client(base_url, owner) as client:
        asked = ask("hi", metadata={"agentId": first.participant_id}, return_immediately=True)
        task = final_task(await send(client, asked))
        r = await mesh.http.patch(
            f"/api/tasks/{task.id}",
            json={"state": "input-required", "message": "which one?"},
            headers=first.headers,
        )
        assert r.status_code == 200, r.text
        answered = final_task(
            await send(client, ask("the blue one", task_id=task.id, return_immediately=True))
        )
    assert answered.id == task.id
    assert answered.status.state == TaskState.TASK_STATE_WORKING
    carol = await mesh.register("carol")
    async with a2a_client(base_url, carol) as client:
        for task_id in (task.id, "01ARZ3NDEKTSV4RRFFQ69G5FAV"):
            with pytest.raises(TaskNotFoundError):
                await send(client, ask("me too", task_id=task_id))


async def test_list_tasks_filters_before_paging(base_url: str, mesh: Mesh, owner: User) -> None:
    """ListTasks' filters (agent, context, state) apply before the page is
    cut: full pages, a next token only when more match, and a total of all
    that match."""
    one = await bootstrap(mesh, "one", a2a=True)
    two = await bootstrap(mesh, "two", a2a=True)
    ids: dict[str, list[str]] = {one.participant_id: [], two.participant_id: []}
    async with a2a_client(base_url, owner) as client:
        for i in range(5):
            for bot in (one, two):
                asked = ask(
                    f"ask {i}",
                    metadata={"agentId": bot.participant_id},
                    return_immediately=True,
                )
                if i == 4:
                    asked.message.context_id = "ctx-4"
                ids[bot.participant_id].append(final_task(await send(client, asked)).id)
    r = await mesh.http.post(
        f"/api/tasks/{ids[one.participant_id][0]}/cancel", headers=owner.headers
    )
    assert r.status_code == 200, r.text

    async with a2a_client(f"{base_url}/a2a/agents/{one.participant_id}", owner) as client:
        newest_first = ids[one.participant_id][::-1]
        page = await client.list_tasks(ListTasksRequest(page_size=2))
        assert ([t.id for t in page.tasks], page.total_size) == (newest_first[:2], 5)
        seen = [t.id for t in page.tasks]
        while page.next_page_token:
            page = await client.list_tasks(
                ListTasksRequest(page_size=2, page_token=page.next_page_token)
            )
            assert page.tasks
            seen += [t.id for t in page.tasks]
        assert seen == newest_first
        canceled = await client.list_tasks(
            ListTasksRequest(status=TaskState.TASK_STATE_CANCELED, page_size=1)
        )
        assert ([t.id for t in canceled.tasks], canceled.total_size) == (newest_first[-1:], 1)
        assert not canceled.next_page_token
        in_context = await client.list_tasks(ListTasksRequest(context_id="ctx-4"))
        assert [t.id for t in in_context.tasks] == newest_first[:1]
        with pytest.raises(InvalidParamsError, match="page"):
            await client.list_tasks(ListTasksRequest(page_token="nonsense"))


async def test_calls_have_access_records(
    base_url: str, mesh: Mesh, owner: User, caplog: pytest.LogCaptureFixture
) -> None:
    """Each A2A request has its access record (the route, not the path), as
    the app's routes do; an agent id echoed in an error is bounded."""
    caplog.set_level(logging.INFO, "quart_mesh.access")
    echo = await spawn_echo(mesh, owner)
    async with a2a_client(f"{base_url}/a2a/agents/{echo}", owner) as client:
        await client.list_tasks(ListTasksRequest())
    async with a2a_client(base_url, owner) as client:
        with pytest.raises(InvalidParamsError) as refused:
            await send(client, ask("hi", metadata={"agentId": "x" * 10_000}))
    assert len(refused.value.message or "") < 200, refused.value.message
    r = await mesh.http.post("/a2a", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"})
    assert r.status_code == 401
    expected = [
        ["POST", "/a2a/agents/<agent_id>", "200"],
        ["GET", "/a2a/agents/<agent_id>/.well-known/agent-card.json", "200"],
        ["POST", "/a2a", "200"],
        ["POST", "/a2a", "401"],
        ["GET", "/.well-known/agent-card.json", "200"],
    ]

    async def recorded() -> bool:  # written once the answer has gone
        records = [m.split()[:3] for m in caplog.messages]
        return all(record in records for record in expected)

    await wait_for(recorded, 5)
