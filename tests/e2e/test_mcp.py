"""The MCP server at ``/mcp`` over a served node, driven by the official
``mcp`` SDK client (decision 0061, ``docs/agents-mcp-a2a.md``).

Loopback only, port 0, a time cap on every test; waits are short real
timeouts (the node is served by hypercorn in this process, but the client's
HTTP stack keeps its own time), except where marked.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import mcp_types
import pytest
import trio
from mcp import ClientSession
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import SubscriptionLost
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from quart_mesh import Settings, create_app, serve
from quart_mesh.config import Rate, RateLimits
from quart_mesh.mcp_server import McpEndpoint
from tests.e2e.test_stock_hypercorn import served
from tests.helpers import PASSWORD, Mesh, User, assert_error

#: the SDK client's HTTP stack (httpx2) leaves a response stream's generator
#: to the garbage collector when its SSE stream is cut at the session's end
CLIENT_WARNINGS = pytest.mark.filterwarnings(
    "ignore:Exception ignored in. <async_generator object "
    "(PoolByteStream|Response|EventSource)[.]"
    ":pytest.PytestUnraisableExceptionWarning"
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(60), CLIENT_WARNINGS]

TOOLS = {
    "list_rooms",
    "join_room",
    "read_messages",
    "send_message",
    "wait_for_messages",
    "search_messages",
    "list_participants",
    "react",
    "edit_message",
    "delete_message",
    "send_command",
    "list_agents",
    "update_task",
}


@asynccontextmanager
async def mcp_session(
    base_url: str, token: str | None, **options: Any
) -> AsyncIterator[ClientSession]:
    """An initialized MCP session with *token* (the official client)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        create_mcp_http_client(headers=headers) as http,
        streamable_http_client(f"{base_url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write, **options) as session,
    ):
        await session.initialize()
        yield session


@contextmanager
def refused_by_http() -> Iterator[None]:
    """The block fails as the official client fails on an HTTP refusal (an
    ``MCPError``, inside the transport's task groups or not)."""
    with pytest.raises((MCPError, BaseExceptionGroup)) as refused:
        yield
    if isinstance(refused.value, BaseExceptionGroup):
        assert refused.group_contains(MCPError), refused.value


async def call(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """The tool's structured result (it must succeed)."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


async def refused(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """The mesh error a tool answered with (it must fail)."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, result
    [content] = result.content
    assert isinstance(content, mcp_types.TextContent)
    assert "Traceback" not in content.text
    error = json.loads(content.text)
    assert set(error) >= {"error", "code", "status"}, error
    return dict(error)


@pytest.fixture
async def people(mesh: Mesh) -> tuple[User, User]:
    return await mesh.setup(), await mesh.register("bob")


async def test_tools_are_listed_with_schemas(base_url: str, people: tuple[User, User]) -> None:
    _, bob = people
    async with mcp_session(base_url, bob.token) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) >= TOOLS
        for tool in tools.values():
            assert tool.input_schema["type"] == "object", tool.name
            assert tool.output_schema is not None, tool.name
            assert tool.description, tool.name
        assert set(tools["send_message"].input_schema["properties"]) >= {
            "room",
            "to",
            "content",
            "thread",
        }
        assert set(tools["read_messages"].input_schema["properties"]) >= {
            "room",
            "before",
            "since",
            "limit",
        }
        assert set(tools["wait_for_messages"].input_schema["properties"]) >= {
            "cursor",
            "timeout",
            "mentions_only",
        }
        annotations = tools["list_rooms"].annotations
        assert annotations is not None
        assert annotations.read_only_hint is True
        prompts = (await session.list_prompts()).prompts
        assert [p.name for p in prompts] == ["mesh_etiquette"]
        prompt = await session.get_prompt("mesh_etiquette")
        [message] = prompt.messages
        assert isinstance(message.content, mcp_types.TextContent)
        assert "wait_for_messages" in message.content.text
        assert "Ignore yourself" in message.content.text
        templates = (await session.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == ["mesh://rooms/{room_id}"]


async def test_a_token_is_required(
    base_url: str,
    http: httpx.AsyncClient,
    mesh: Mesh,
    people: tuple[User, User],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "quart_mesh.access")
    owner, _ = people
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    r = await http.post("/mcp", json=init, headers=accept)
    assert_error(r, 401, "unauthorized")
    challenge = r.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{base_url}/.well-known/oauth-protected-resource/mcp"' in challenge
    r = await http.post("/mcp", json=init, headers={**accept, "Authorization": "Bearer nope"})
    assert_error(r, 401, "invalid_token")
    assert 'error="invalid_token"' in r.headers["www-authenticate"]
    # each request has its access record, as the app's routes do
    assert any(m.startswith("POST /mcp 401 ") for m in caplog.messages), caplog.messages
    # the metadata points at the node
    r = await http.get("/.well-known/oauth-protected-resource/mcp")
    assert r.status_code == 200
    document = r.json()
    assert document["resource"] == f"{base_url}/mcp"
    assert document["authorization_servers"] == [base_url]
    assert document["bearer_methods_supported"] == ["header"]

    # the official client: refused without a token
    with refused_by_http():
        async with mcp_session(base_url, None):
            pass

    # a bot's token works until the bot is deleted: then at once, mid-session too
    r = await http.post(
        "/api/agents/bootstrap",
        json={"name": "helper", "type": "nanoclaw"},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    bot_token = r.json()["token"]
    bot_id = r.json()["agentId"]
    async with mcp_session(base_url, bot_token) as session:
        await call(session, "list_rooms")
        r = await http.delete(f"/api/agents/{bot_id}", headers=owner.headers)
        assert r.status_code == 200, r.text
        with refused_by_http():
            await session.call_tool("list_rooms", {})
    r = await http.post(
        "/mcp", json=init, headers={**accept, "Authorization": f"Bearer {bot_token}"}
    )
    assert_error(r, 401, "invalid_token")


async def test_send_read_and_wait_as_the_participant(
    base_url: str, http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User]
) -> None:
    owner, bob = people
    room = (await mesh.create_room(owner, "Planning"))["roomId"]
    async with mcp_session(base_url, bob.token) as session:
        rooms = (await call(session, "list_rooms"))["rooms"]
        assert {r["roomId"]: r["joined"] for r in rooms}[room] is False
        joined = await call(session, "join_room", room="#planning")  # a name works too
        assert joined["roomId"] == room
        assert joined["joined"] is True

        sent = await call(session, "send_message", room=room, content="hello from MCP")
        assert sent["senderId"] == bob.participant_id
        assert sent["roomId"] == room
        # REST sees what MCP sent, as the participant
        [seen] = await mesh.messages(owner, room)
        assert seen == sent
        page = await call(session, "read_messages", room=room)
        assert page["messages"] == [sent]

        # a reply in the thread, a reaction, an edit, a delete: as over REST
        reply = await call(
            session, "send_message", room=room, content="in thread", thread=sent["messageId"]
        )
        assert reply["threadId"] == sent["messageId"]
        thread = await call(session, "read_messages", room=room, thread=sent["messageId"])
        assert [m["content"] for m in thread["messages"]] == ["in thread"]
        reacted = await call(session, "react", room=room, message=sent["messageId"], emoji="👍")
        assert reacted["reactions"][0]["participantIds"] == [bob.participant_id]
        edited = await call(
            session, "edit_message", room=room, message=reply["messageId"], content="edited"
        )
        assert edited["content"] == "edited"
        assert edited["editedAt"] is not None
        deleted = await call(session, "delete_message", message=reply["messageId"])  # no room
        assert deleted == {"ok": True, "messageId": reply["messageId"]}
        # another's message: the services refuse, with the mesh's code
        theirs = await mesh.send(owner, room, "owner's words")
        error = await refused(
            session, "edit_message", room=room, message=theirs["messageId"], content="x"
        )
        assert error["status"] == 403

        # a direct message: the DM's room, which the other party reads
        dm = await call(session, "send_message", to=owner.participant_id, content="psst")
        by_name = await call(session, "send_message", to="@owner", content="psst again")
        assert by_name["roomId"] == dm["roomId"]
        in_room = await call(session, "send_message", room="Planning", to="owner", content="hey")
        assert (in_room["roomId"], in_room["to"]) == (room, owner.participant_id)
        error = await refused(session, "send_message", room="No such room", content="x")
        assert (error["status"], error["code"]) == (404, "room_not_found")
        r = await http.get("/api/dms", headers=owner.headers)
        assert [d["roomId"] for d in r.json()] == [dm["roomId"]]
        error = await refused(session, "send_message", content="to nobody")
        assert error["code"] == "invalid_field"

        # search, participants, agents
        found = await call(session, "search_messages", query="owner's")
        assert [f["message"]["messageId"] for f in found["results"]] == [theirs["messageId"]]
        names = {p["name"] for p in (await call(session, "list_participants"))["participants"]}
        assert names >= {"owner", "bob"}
        assert (await call(session, "list_agents"))["agents"] == []

        # the listening loop: nothing waiting returns at the timeout, empty
        start = (await call(session, "wait_for_messages", timeout=0))["cursor"]
        before = trio.current_time()
        empty = await call(session, "wait_for_messages", cursor=start, timeout=0.5)
        assert empty["messages"] == []
        assert 0.4 <= trio.current_time() - before < 5
        assert empty["cursor"] == start

        # a wait returns as soon as a message arrives (sent over REST)
        got: dict[str, Any] = {}

        async def waiter() -> None:
            got.update(await call(session, "wait_for_messages", cursor=start, timeout=20))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.sleep(0.3)  # the wait is under way (else it returns at once anyway)
            posted = await mesh.send(owner, room, "are you there?")
            sent_at = trio.current_time()
        assert trio.current_time() - sent_at < 5
        assert [m["messageId"] for m in got["messages"]] == [posted["messageId"]]
        # the timeout is bounded by the node's (a larger one is capped, not refused)
        assert (await call(session, "wait_for_messages", cursor=got["cursor"], timeout=0))[
            "messages"
        ] == []
        error = await refused(session, "wait_for_messages", cursor="not a cursor", timeout=0)
        assert error["code"] == "invalid_cursor"


async def test_commands_between_bots(
    base_url: str, http: httpx.AsyncClient, people: tuple[User, User]
) -> None:
    owner, bob = people
    r = await http.post(
        "/api/agents/bootstrap",
        json={"name": "worker", "type": "nanoclaw"},
        headers=owner.headers,
    )
    worker_id, worker_token = r.json()["agentId"], r.json()["token"]
    async with mcp_session(base_url, owner.token) as session:
        agents = (await call(session, "list_agents"))["agents"]
        assert [a["agentId"] for a in agents] == [worker_id]
        command = await call(
            session, "send_command", agent=worker_id, command="summarize", args={"n": 3}
        )
        assert command["status"] == "pending"
        assert command["args"] == {"n": 3}
    # the bot takes it on its listening loop
    async with mcp_session(base_url, worker_token) as session:
        polled = await call(session, "wait_for_messages", timeout=5)
        assert [c["commandId"] for c in polled["commands"]] == [command["commandId"]]
    # bob neither registered the bot nor is an admin
    async with mcp_session(base_url, bob.token) as session:
        error = await refused(session, "send_command", agent=worker_id, command="stop")
        assert error["status"] == 403


async def test_permissions_hold(
    base_url: str, http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User]
) -> None:
    owner, bob = people
    carol = await mesh.register("carol")
    room = (await mesh.create_room(owner, "Private"))["roomId"]
    await mesh.join(bob, room)
    await mesh.send(owner, room, "secret plans")

    # an outsider reads nothing of a room it is not in, on any tool
    async with mcp_session(base_url, carol.token) as session:
        error = await refused(session, "read_messages", room=room)
        assert (error["status"], error["code"]) == (403, "not_member")
        assert (await refused(session, "send_message", room=room, content="hi"))["status"] == 403
        assert (await call(session, "search_messages", query="secret"))["results"] == []
        assert (await call(session, "wait_for_messages", cursor="0", timeout=0))["messages"] == []
        with pytest.raises(MCPError):
            await session.read_resource(f"mesh://rooms/{room}")

    # a member a rule keeps from reading the room
    r = await http.post(
        f"/api/rooms/{room}/permissions",
        json={
            "targetType": "participant",
            "target": bob.participant_id,
            "permission": "rooms.read",
            "effect": "deny",
        },
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    async with mcp_session(base_url, bob.token) as session:
        error = await refused(session, "read_messages", room=room)
        assert (error["status"], error["code"]) == (403, "forbidden")
        assert (await call(session, "search_messages", query="secret"))["results"] == []
        assert (await call(session, "wait_for_messages", cursor="0", timeout=0))["messages"] == []
        with pytest.raises(MCPError):
            await session.read_resource(f"mesh://rooms/{room}")

    # a guest may not write (the mesh does not let guests post)
    guest = await mesh.guest()
    lobby = (await mesh.create_room(owner, "Lobby"))["roomId"]
    async with mcp_session(base_url, guest.token) as session:
        await call(session, "join_room", room=lobby)
        error = await refused(session, "send_message", room=lobby, content="hello")
        assert error["status"] == 403
        error = await refused(session, "read_messages", room=room)
        assert error["status"] == 403


async def test_a_session_belongs_to_its_participant(
    base_url: str, http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User]
) -> None:
    owner, bob = people
    accept = {"Accept": "application/json, text/event-stream"}
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    r = await http.post("/mcp", json=init, headers={**accept, **bob.headers})
    assert r.status_code == 200, r.text
    session_id = r.headers["mcp-session-id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    for headers, status in (
        (owner.headers, 404),  # another participant's token: as if there were no session
        ({}, 401),
        ({"Authorization": "Bearer nope"}, 401),
        (bob.headers, 200),
    ):
        r = await http.post(
            "/mcp",
            json=listing,
            headers={
                **accept,
                **headers,
                "Mcp-Session-Id": session_id,
                "Mcp-Protocol-Version": "2025-11-25",
            },
        )
        assert r.status_code == status, (headers, r.text)
    # a browser page of another site is refused (its Origin)
    r = await http.post(
        "/mcp",
        json=init,
        headers={**accept, **bob.headers, "Origin": "https://evil.example"},
    )
    assert_error(r, 403, "forbidden")


@pytest.mark.filterwarnings(
    "ignore:resources/(un)?subscribe is removed:mcp.shared.exceptions.MCPDeprecationWarning"
)
async def test_a_resource_per_room_with_subscriptions(
    base_url: str, mesh: Mesh, people: tuple[User, User]
) -> None:
    """Protocol 2025-11-25: ``resources/subscribe``, notified on the session's stream."""
    owner, bob = people
    room = (await mesh.create_room(owner, "News"))["roomId"]
    other = (await mesh.create_room(owner, "Other"))["roomId"]
    closed = (await mesh.create_room(owner, "Closed"))["roomId"]
    await mesh.join(bob, room)
    await mesh.join(bob, other)
    first = await mesh.send(owner, room, "first")
    updates: list[str] = []
    updated = trio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))
            updated.set()

    uri = f"mesh://rooms/{room}"
    async with mcp_session(base_url, bob.token, message_handler=on_message) as session:
        capabilities = session.server_capabilities
        assert capabilities is not None
        assert capabilities.resources is not None
        assert capabilities.resources.subscribe
        read = await session.read_resource(uri)
        [content] = read.contents
        assert isinstance(content, mcp_types.TextResourceContents)
        assert [m["messageId"] for m in json.loads(content.text)["messages"]] == [
            first["messageId"]
        ]
        await session.subscribe_resource(uri)
        await mesh.send(owner, other, "elsewhere")  # not subscribed: no notification
        with trio.fail_after(10):
            await mesh.send(owner, room, "second")
            await updated.wait()
        assert updates == [uri]

        # a rule that keeps bob from reading the room: its changes stop at once
        other_uri = f"mesh://rooms/{other}"
        await session.subscribe_resource(other_uri)
        r = await mesh.http.post(
            f"/api/rooms/{room}/permissions",
            json={
                "targetType": "participant",
                "target": bob.participant_id,
                "permission": "rooms.read",
                "effect": "deny",
            },
            headers=owner.headers,
        )
        assert r.status_code == 201, r.text
        updated = trio.Event()
        with trio.fail_after(10):
            await mesh.send(owner, room, "now secret")
            await mesh.send(owner, other, "marker")  # told after the room's, if it were
            while other_uri not in updates:
                await updated.wait()
                updated = trio.Event()
        assert updates == [uri, other_uri]
        await session.unsubscribe_resource(uri)
        with pytest.raises(MCPError):
            await session.subscribe_resource("mesh://rooms/not-a-room")
        with pytest.raises(MCPError):  # not a member
            await session.subscribe_resource(f"mesh://rooms/{closed}")


async def test_subscriptions_on_the_2026_revision(
    base_url: str, mesh: Mesh, people: tuple[User, User]
) -> None:
    """Protocol 2026-07-28 (the client's default): ``subscriptions/listen``
    streams only the caller's readable rooms; tools work without a session."""
    owner, bob = people
    room = (await mesh.create_room(owner, "News"))["roomId"]
    closed = (await mesh.create_room(owner, "Closed"))["roomId"]
    await mesh.join(bob, room)
    http = create_mcp_http_client(headers=bob.headers)
    async with http, Client(streamable_http_client(f"{base_url}/mcp", http_client=http)) as client:
        assert client.protocol_version == "2026-07-28"
        sent = await client.call_tool("send_message", {"room": room, "content": "modern"})
        assert not sent.is_error
        assert sent.structured_content is not None
        assert sent.structured_content["senderId"] == bob.participant_id
        # the listening loop on this revision too: it returns once a message arrives
        start = await client.call_tool("wait_for_messages", {"timeout": 0})
        assert start.structured_content is not None
        got: dict[str, Any] = {}

        async def waiter() -> None:
            assert start.structured_content is not None
            result = await client.call_tool(
                "wait_for_messages", {"cursor": start.structured_content["cursor"], "timeout": 20}
            )
            got.update(result.structured_content or {})

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(waiter)
                await trio.sleep(0.3)
                posted = await mesh.send(owner, room, "wake up")
        assert [m["messageId"] for m in got["messages"]] == [posted["messageId"]]

        uri = f"mesh://rooms/{room}"
        with pytest.raises(MCPError):  # a room bob is not in
            async with client.listen(resource_subscriptions=[f"mesh://rooms/{closed}"]):
                pass
        async with client.listen(resource_subscriptions=[uri]) as subscription:
            with trio.fail_after(10):
                await mesh.send(owner, closed, "not for bob")
                await mesh.send(owner, room, "news")
                event = await subscription.__anext__()
            assert getattr(event, "uri", None) == uri


@pytest.mark.filterwarnings(
    "ignore:resources/(un)?subscribe is removed:mcp.shared.exceptions.MCPDeprecationWarning"
)
async def test_subscriptions_survive_a_lagging_feed(tmp_path: Path, nursery: trio.Nursery) -> None:
    """A burst larger than the feed holds makes the broker drop the
    session's feed (``lagging``): the subscription follows the feed again
    (and tells each room once, what changed meanwhile being unknown), so
    the session goes on hearing of changes."""
    settings = Settings(data_dir=tmp_path / "lagging", subscriber_buffer=2)
    url = await nursery.start(partial(serve, create_app(settings), port=0))
    updates: list[str] = []
    updated = trio.Event()

    async def on_message(message: Any) -> None:
        nonlocal updated
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))
            updated.set()

    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        bob = await mesh.register("bob")
        room = (await mesh.create_room(owner, "News"))["roomId"]
        await mesh.join(bob, room)
        uri = f"mesh://rooms/{room}"
        async with mcp_session(url, bob.token, message_handler=on_message) as session:
            await session.subscribe_resource(uri)
            # a burst: more events at once than the feed holds
            async with trio.open_nursery() as burst:
                for i in range(40):
                    burst.start_soon(mesh.send, owner, room, f"burst {i}")
            with trio.fail_after(10):  # told after the lag too
                while not updates:
                    await updated.wait()
            await trio.sleep(0.5)  # the burst's notifications are in
            updated = trio.Event()
            updates.clear()
            with trio.fail_after(10):
                await mesh.send(owner, room, "after the burst")
                await updated.wait()
            assert updates == [uri]


@pytest.mark.filterwarnings(
    "ignore:resources/(un)?subscribe is removed:mcp.shared.exceptions.MCPDeprecationWarning"
)
async def test_a_signed_out_token_ends_its_subscriptions(
    base_url: str, mesh: Mesh, people: tuple[User, User]
) -> None:
    """Signing a token out ends what follows the feed with it: a session's
    notifications stop until it subscribes again (with a good token), and a
    ``subscriptions/listen`` stream ends with the error, not silently."""
    owner, bob = people
    room = (await mesh.create_room(owner, "News"))["roomId"]
    await mesh.join(bob, room)
    uri = f"mesh://rooms/{room}"

    async def login() -> User:
        r = await mesh.http.post("/api/auth/login", json={"name": "bob", "password": PASSWORD})
        assert r.status_code == 200, r.text
        return User(bob.participant_id, "bob", r.json()["token"])

    updates: list[str] = []
    updated = trio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))
            updated.set()

    first, second = await login(), await login()
    async with (
        create_mcp_http_client(headers=first.headers) as http,
        streamable_http_client(f"{base_url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write, message_handler=on_message) as session,
    ):
        await session.initialize()
        await session.subscribe_resource(uri)
        r = await mesh.http.post("/api/auth/logout", headers=first.headers)
        assert r.status_code == 200, r.text
        await mesh.send(owner, room, "not told: the token's feed ended")
        await trio.sleep(0.5)
        assert updates == []
        # the session's next subscribe, with a good token, follows again
        http.headers.update(second.headers)
        await session.subscribe_resource(uri)
        with trio.fail_after(10):
            await mesh.send(owner, room, "told again")
            await updated.wait()
        assert updates == [uri]

    listening = await login()
    client_http = create_mcp_http_client(headers=listening.headers)
    async with (
        client_http,
        Client(streamable_http_client(f"{base_url}/mcp", http_client=client_http)) as client,
        client.listen(resource_subscriptions=[uri]) as subscription,
    ):
        r = await mesh.http.post("/api/auth/logout", headers=listening.headers)
        assert r.status_code == 200, r.text
        with trio.fail_after(10), pytest.raises(SubscriptionLost) as lost:
            await subscription.__anext__()
    error = lost.value.__cause__
    assert isinstance(error, MCPError), lost.value
    assert error.error.data == {"code": "token_revoked", "status": 401}


async def test_a_deleted_participants_listen_stream_ends(
    base_url: str, http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User]
) -> None:
    """A ``subscriptions/listen`` stream of a participant that is deleted
    ends with the error its client sees."""
    owner, _ = people
    r = await http.post(
        "/api/agents/bootstrap", json={"name": "doomed", "type": "nanoclaw"}, headers=owner.headers
    )
    bot = User(r.json()["agentId"], "doomed", r.json()["token"])
    room = (await mesh.create_room(owner, "work"))["roomId"]
    await mesh.join(bot, room)
    client_http = create_mcp_http_client(headers=bot.headers)
    async with (
        client_http,
        Client(streamable_http_client(f"{base_url}/mcp", http_client=client_http)) as client,
        client.listen(resource_subscriptions=[f"mesh://rooms/{room}"]) as subscription,
    ):
        r = await http.delete(f"/api/agents/{bot.participant_id}", headers=owner.headers)
        assert r.status_code in (200, 204), r.text
        with trio.fail_after(10), pytest.raises(SubscriptionLost) as lost:
            await subscription.__anext__()
    error = lost.value.__cause__
    assert isinstance(error, MCPError), lost.value
    assert error.error.data == {"code": "removed", "status": 401}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    base = Settings(data_dir=tmp_path / "mesh-data")
    limits = replace(base.limits, max_mcp_sessions_per_participant=2, max_polls_per_participant=1)
    return replace(base, limits=limits)


async def test_sessions_per_participant_are_capped(
    base_url: str, http: httpx.AsyncClient, people: tuple[User, User]
) -> None:
    owner, bob = people
    async with mcp_session(base_url, bob.token), mcp_session(base_url, bob.token):
        r = await http.post("/mcp", json=INIT, headers={**ACCEPT, **bob.headers})
        assert_error(r, 429, "too_many_sessions")
        assert r.headers["retry-after"] == "1"
        with refused_by_http():
            async with mcp_session(base_url, bob.token):
                pass
        # another participant is not held back by bob's sessions
        async with mcp_session(base_url, owner.token) as session:
            await call(session, "list_rooms")
    # closed sessions give their seats back; as many as allowed open at once
    async with trio.open_nursery() as nursery:
        for _ in range(2):
            nursery.start_soon(partial(_open_and_list, base_url, bob.token))


async def _open_and_list(base_url: str, token: str) -> None:
    async with mcp_session(base_url, token) as session:
        await call(session, "list_rooms")


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = {"Accept": "application/json, text/event-stream"}


async def test_a_dropped_clients_wait_ends(
    base_url: str, http: httpx.AsyncClient, people: tuple[User, User]
) -> None:
    """A client that goes away mid-wait frees what its wait held (a long-poll
    seat: one per participant here) at once, not at the wait's timeout."""
    _, bob = people
    r = await http.post("/mcp", json=INIT, headers={**ACCEPT, **bob.headers})
    headers = {
        **ACCEPT,
        **bob.headers,
        "Mcp-Session-Id": r.headers["mcp-session-id"],
        "Mcp-Protocol-Version": "2025-11-25",
    }
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert (await http.post("/mcp", json=initialized, headers=headers)).status_code == 202
    wait = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {"name": "wait_for_messages", "arguments": {"timeout": 30}},
    }
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as dropping:
        with trio.move_on_after(0.5) as waited:
            await dropping.post("/mcp", json=wait, headers=headers)
        assert waited.cancelled_caught  # still waiting: the client drops it
    async with mcp_session(base_url, bob.token) as session:
        with trio.fail_after(10):
            while True:  # the seat comes back as soon as the node sees the drop
                result = await session.call_tool("wait_for_messages", {"timeout": 0.1})
                if not result.is_error:
                    break
                [content] = result.content
                assert isinstance(content, mcp_types.TextContent)
                assert json.loads(content.text)["code"] == "too_many_polls"
                await trio.sleep(0.1)


async def test_an_agent_updates_its_task(
    base_url: str, http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User]
) -> None:
    owner, bob = people
    r = await http.post(
        "/api/agents/bootstrap", json={"name": "thinker", "type": "nanoclaw"}, headers=owner.headers
    )
    bot = User(r.json()["agentId"], "thinker", r.json()["token"])
    room = (await mesh.create_room(owner, "work"))["roomId"]
    await mesh.join(bot, room)
    await mesh.join(bob, room)
    r = await http.post(
        "/api/tasks",
        json={"roomId": room, "agentId": bot.participant_id, "content": "plan it"},
        headers=owner.headers,
    )
    assert r.status_code == 201, r.text
    task_id = r.json()["taskId"]
    async with mcp_session(base_url, bob.token) as session:  # not its agent
        error = await refused(session, "update_task", task=task_id, state="working")
        assert (error["status"], error["code"]) == (403, "not_task_agent")
    async with mcp_session(base_url, bot.token) as session:
        working = await call(session, "update_task", task=task_id, state="working", message="on it")
        assert (working["state"], working["managed"]) == ("working", True)
        assert working["statusMessage"] == "on it"
        done = await call(session, "update_task", task=task_id, state="completed", result="42")
        assert (done["state"], done["result"]) == ("completed", "42")
        error = await refused(session, "update_task", task=task_id, state="working")
        assert error["status"] == 409
        # the status message is the agent's reply in the task's thread
        thread = await call(session, "read_messages", room=room, thread=done["messageId"])
        assert [m["content"] for m in thread["messages"]] == ["on it"]
    r = await http.get(f"/api/tasks/{task_id}", headers=owner.headers)
    assert r.json()["task"]["result"] == "42"


async def test_under_stock_hypercorn(tmp_path: Path) -> None:
    """``hypercorn -k trio 'quart_mesh.asgi:create_asgi_app()'`` serves ``/mcp``
    too (in-process here), its sessions run by the app's lifespan."""
    with trio.fail_after(30):
        async with served(tmp_path) as url, httpx.AsyncClient(base_url=url, timeout=10) as http:
            mesh = Mesh(http)
            owner = await mesh.setup()
            room = (await mesh.create_room(owner, "stock"))["roomId"]
            async with mcp_session(url, owner.token) as session:
                start = (await call(session, "wait_for_messages", timeout=0))["cursor"]
                sent = await call(session, "send_message", room=room, content="via stock")
                got = await call(session, "wait_for_messages", cursor=start, timeout=5)
                assert [m["messageId"] for m in got["messages"]] == [sent["messageId"]]


async def test_a_failing_session_manager_ends_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The MCP sessions run in the node's one tree: when what runs them dies,
    the server stops (its supervisor restarts it) instead of serving on."""

    async def broken(self: McpEndpoint, *, task_status: Any) -> None:
        task_status.started()
        await trio.lowlevel.checkpoint()
        raise RuntimeError("injected MCP failure")

    monkeypatch.setattr(McpEndpoint, "run", broken)
    app = create_app(Settings(data_dir=tmp_path / "mesh-data"))

    async def serve_for_ever() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(serve, app, port=0))
            await trio.sleep_forever()

    with trio.fail_after(30), pytest.raises(BaseExceptionGroup) as failed:
        await serve_for_ever()
    assert failed.group_contains(RuntimeError)


async def test_the_participants_rate_limits_apply(tmp_path: Path, nursery: trio.Nursery) -> None:
    settings = Settings(
        data_dir=tmp_path / "limited",
        rate_limits=RateLimits(messages=Rate(2, 60), exempt_addresses=()),
    )
    url = await nursery.start(partial(serve, create_app(settings), port=0))
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        bob = await mesh.register("bob")
        room = (await mesh.create_room(owner, "busy"))["roomId"]
        await mesh.join(bob, room)
        async with mcp_session(url, bob.token) as session:
            for i in range(2):
                await call(session, "send_message", room=room, content=f"message {i}")
            error = await refused(session, "send_message", room=room, content="one too many")
            assert (error["status"], error["code"]) == (429, "rate_limited")
            assert error["retryAfter"] >= 1
        # the same bucket as REST: the REST send is refused too
        r = await http.post(
            f"/api/rooms/{room}/messages", json={"content": "rest"}, headers=bob.headers
        )
        assert_error(r, 429, "rate_limited")


@pytest.mark.filterwarnings(
    "ignore:resources/(un)?subscribe is removed:mcp.shared.exceptions.MCPDeprecationWarning"
)
async def test_several_workers_serve_without_sessions(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """With ``--workers N`` the next request may reach another process: the
    handshake revisions are served without sessions, and still work."""
    settings = Settings(data_dir=tmp_path / "workers", workers=2)
    url = await nursery.start(partial(serve, create_app(settings), port=0))
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        room = (await mesh.create_room(owner, "anywhere"))["roomId"]
        r = await http.post("/mcp", json=INIT, headers={**ACCEPT, **owner.headers})
        assert r.status_code == 200, r.text
        assert "mcp-session-id" not in r.headers
        async with mcp_session(url, owner.token) as session:
            sent = await call(session, "send_message", room=room, content="from any worker")
            assert sent["senderId"] == owner.participant_id
            with pytest.raises(MCPError, match="no sessions"):
                await session.subscribe_resource(f"mesh://rooms/{room}")
