"""The one visibility decision on every path (issue 27, DESIGN.md §2).

A member whom a room rule keeps from reading a room (``rooms.read`` denied
to it there) must get nothing of that room on any path that hands out room
content; when the rule goes, it reads the room again. The table :data:`PATHS`
names each such path with a probe that returns the texts it hands out; each
probe is run before the rule (it must see the room: a probe that sees
nothing proves nothing), under it (it must see none of the room) and after
the rule is removed.

A new path cannot skip this: :func:`test_every_route_is_classified` fails
for any route of the app that is neither probed here nor listed, with its
reason, among the routes that hand out no room content.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp.shared.exceptions import MCPError

from quart_mesh import Settings, create_app
from quart_mesh.a2a_server import a2a_app
from quart_mesh.mcp_server import METADATA_PATH as MCP_METADATA_PATH
from quart_mesh.mcp_server import PATH as MCP_PATH
from tests.e2e.test_mcp import CLIENT_WARNINGS, mcp_session
from tests.e2e.test_webhooks import webhook_bot
from tests.helpers import Mesh, User, assert_error, connect, wait_for
from tests.receiver import Receiver


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(data_dir=tmp_path / "mesh-data", webhook_max_backoff=0.3)


@dataclass
class World:
    base_url: str
    mesh: Mesh
    owner: User
    alice: User  # the member the rule is about
    bob: User  # another member, who posts
    hook: User  # a webhook bot the rule is about too
    receiver: Receiver
    secret: str  # the room with the rule
    open_room: str  # a room everyone reads: markers that come after
    round: str = "before"

    async def post_round(self) -> tuple[str, str]:
        """Bob posts this round's text in the secret room, then a marker in
        the open room: whatever would deliver the first delivers it before
        the second (one commit order for every path)."""
        text = f"secret {self.round}"
        await self.mesh.send(self.bob, self.secret, text)
        marker = await self.mesh.send(self.bob, self.open_room, f"marker {self.round}")
        return text, str(marker["messageId"])


#: a probe: the texts (and room ids) a path hands out to alice (or the bot)
Probe = Callable[[World], Awaitable[set[str]]]


def _texts(messages: list[dict[str, Any]]) -> set[str]:
    return {str(m["content"]) for m in messages} | {str(m["roomId"]) for m in messages}


async def history(w: World) -> set[str]:
    r = await w.mesh.http.get(f"/api/rooms/{w.secret}/messages", headers=w.alice.headers)
    if r.status_code == 403:
        return set()
    assert r.status_code == 200, r.text
    return _texts(r.json())


async def message_by_id(w: World) -> set[str]:
    r = await w.mesh.http.get(f"/api/rooms/{w.secret}/messages", headers=w.owner.headers)
    seen: set[str] = set()
    for message in r.json():
        one = await w.mesh.http.get(
            f"/api/rooms/{w.secret}/messages/{message['messageId']}", headers=w.alice.headers
        )
        if one.status_code == 200:
            seen |= _texts([one.json()])
        else:
            assert_error(one, 403)
    return seen


async def link_preview(w: World) -> set[str]:
    """Alice asks for the preview of each of the room's messages (none has a
    link: the room's id is what an answer would hand out)."""
    r = await w.mesh.http.get(f"/api/rooms/{w.secret}/messages", headers=w.owner.headers)
    seen: set[str] = set()
    for message in r.json():
        one = await w.mesh.http.get(
            f"/api/rooms/{w.secret}/messages/{message['messageId']}/preview",
            headers=w.alice.headers,
        )
        if one.status_code == 200:
            seen.add(one.json()["roomId"])
        else:
            assert_error(one, 403)
    return seen


async def pins(w: World) -> set[str]:
    """The owner (whom no rule stops) pins the room's messages; alice lists the pins."""
    for message in await w.mesh.messages(w.owner, w.secret):
        r = await w.mesh.http.put(
            f"/api/rooms/{w.secret}/pins/{message['messageId']}", headers=w.owner.headers
        )
        assert r.status_code == 200, r.text
    r = await w.mesh.http.get(f"/api/rooms/{w.secret}/pins", headers=w.alice.headers)
    if r.status_code == 403:
        return set()
    assert r.status_code == 200, r.text
    return _texts([pin["message"] for pin in r.json()])


async def threads(w: World) -> set[str]:
    """The owner (whom no rule stops) replies to the room's newest message;
    alice lists the room's threads (their roots)."""
    roots = [m for m in await w.mesh.messages(w.owner, w.secret) if m["threadId"] is None]
    await w.mesh.send(w.owner, w.secret, "a reply", threadId=roots[-1]["messageId"])
    r = await w.mesh.http.get(f"/api/rooms/{w.secret}/threads", headers=w.alice.headers)
    if r.status_code == 403:
        return set()
    assert r.status_code == 200, r.text
    return _texts(r.json()["threads"])


async def search(w: World) -> set[str]:
    r = await w.mesh.http.get("/api/search", params={"q": "secret"}, headers=w.alice.headers)
    assert r.status_code == 200, r.text
    return _texts([result["message"] for result in r.json()["results"]])


async def room_details(w: World) -> set[str]:
    r = await w.mesh.http.get(f"/api/rooms/{w.secret}", headers=w.alice.headers)
    if r.status_code == 403:
        return set()
    assert r.status_code == 200, r.text
    return {r.json()["roomId"]}


async def room_list(w: World) -> set[str]:
    r = await w.mesh.http.get("/api/rooms", headers=w.alice.headers)
    assert r.status_code == 200, r.text
    body = r.json()
    rooms = body["rooms"] if isinstance(body, dict) else body
    return {room["roomId"] for room in rooms}


async def short_poll(w: World) -> set[str]:
    r = await w.mesh.http.post("/api/poll", json={"cursor": "0"}, headers=w.alice.headers)
    assert r.status_code == 200, r.text
    return _texts(r.json()["messages"])


async def long_poll(w: World) -> set[str]:
    """A long poll waiting when this round's messages are posted."""
    r = await w.mesh.http.get("/api/status", headers=w.alice.headers)
    head = r.json()["cursor"]
    found: set[str] = set()
    async with trio.open_nursery() as nursery:

        async def waiting() -> None:
            cursor = head
            while True:
                r = await w.mesh.http.post(
                    "/api/poll", json={"cursor": cursor, "timeout": 10}, headers=w.alice.headers
                )
                assert r.status_code == 200, r.text
                found.update(_texts(r.json()["messages"]))
                cursor = r.json()["cursor"]
                if f"marker {w.round}-long" in found:
                    return

        nursery.start_soon(waiting)
        await trio.testing.wait_all_tasks_blocked(0.05)
        await w.mesh.send(w.bob, w.secret, f"secret {w.round}-long")
        await w.mesh.send(w.bob, w.open_room, f"marker {w.round}-long")
    return found


async def status(w: World) -> set[str]:
    r = await w.mesh.http.get("/api/status", headers=w.alice.headers)
    assert r.status_code == 200, r.text
    return {room["roomId"] for room in r.json()["rooms"]}


async def state(w: World) -> set[str]:
    seen: set[str] = set()
    for path in ("/api/state", "/api/snapshot"):
        r = await w.mesh.http.get(path, headers=w.alice.headers)
        assert r.status_code == 200, r.text
        seen |= {room["roomId"] for room in r.json()["rooms"]}
    return seen


async def mark_read(w: World) -> set[str]:
    r = await w.mesh.http.post(
        f"/api/rooms/{w.secret}/read", json={"cursor": "1"}, headers=w.alice.headers
    )
    if r.status_code == 403:
        return set()
    assert r.status_code == 200, r.text
    return {w.secret}


async def mute(w: World) -> set[str]:
    r = await w.mesh.http.put(
        f"/api/rooms/{w.secret}/mute", json={"muted": True}, headers=w.alice.headers
    )
    if r.status_code == 403:
        return set()
    assert r.status_code == 200, r.text
    return {r.json()["roomId"]}


async def read_all(w: World) -> set[str]:
    r = await w.mesh.http.post("/api/read-all", headers=w.alice.headers)
    assert r.status_code == 200, r.text
    return {room["roomId"] for room in r.json()["rooms"]}


async def ws_snapshot(w: World) -> set[str]:
    async with connect(w.base_url, w.alice) as ws:
        return {room["roomId"] for room in ws.snapshot["rooms"]}  # type: ignore[attr-defined]


async def ws_resume(w: World) -> set[str]:
    async with connect(w.base_url, w.alice, since="0") as ws:
        frames = await ws.settle()
    return _texts([f for f in frames if f["type"] == "message"])


async def ws_live(w: World) -> set[str]:
    """A session open before the rule changed (the session is opened by
    the test and kept in ``LIVE``): what it is sent of this round."""
    ws = LIVE[0]
    _, marker = await w.post_round()
    frames = await ws.until("message", messageId=marker)
    return _texts([f for f in frames if f["type"] == "message"])


async def webhook(w: World) -> set[str]:
    """What the webhook bot's receiver is sent of this round."""
    already = len(w.receiver.requests)
    _, marker = await w.post_round()

    async def arrived() -> bool:
        return any(q.headers.get("x-mesh-delivery") == marker for q in w.receiver.requests)

    await wait_for(arrived)
    sent = w.receiver.requests[already:]
    return _texts([q.json() for q in sent if q.json().get("type") == "message"])


# tasks (issue 30): a task of the secret room is that room's content -------------


async def _secret_task(w: World) -> dict[str, Any]:
    """The owner asks the webhook bot for something in the secret room."""
    r = await w.mesh.http.post(
        "/api/tasks",
        json={"roomId": w.secret, "agentId": w.hook.participant_id, "content": f"secret {w.round}"},
        headers=w.owner.headers,
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


def _task_texts(tasks: list[dict[str, Any]]) -> set[str]:
    return {str(t["roomId"]) for t in tasks} | {str(t["title"]) for t in tasks}


async def task_list(w: World) -> set[str]:
    """The room's tasks (alice), and the tasks the bot is the agent of."""
    await _secret_task(w)
    seen: set[str] = set()
    r = await w.mesh.http.get("/api/tasks", params={"roomId": w.secret}, headers=w.alice.headers)
    if r.status_code != 403:
        assert r.status_code == 200, r.text
        seen |= _task_texts(r.json()["tasks"])
    r = await w.mesh.http.get("/api/tasks", headers=w.hook.headers)
    assert r.status_code == 200, r.text
    return seen | _task_texts(r.json()["tasks"])


async def task_by_id(w: World) -> set[str]:
    task = await _secret_task(w)
    seen: set[str] = set()
    for who in (w.alice, w.hook):
        r = await w.mesh.http.get(f"/api/tasks/{task['taskId']}", headers=who.headers)
        if r.status_code == 404:
            continue
        assert r.status_code == 200, r.text
        seen |= _task_texts([r.json()["task"]]) | _texts(r.json()["messages"])
    return seen


async def task_update(w: World) -> set[str]:
    """The bot (the task's agent) moves a task of the secret room."""
    task = await _secret_task(w)
    r = await w.mesh.http.patch(
        f"/api/tasks/{task['taskId']}", json={"state": "working"}, headers=w.hook.headers
    )
    if r.status_code == 404:
        return set()
    assert r.status_code == 200, r.text
    return _task_texts([r.json()])


async def ws_task_events(w: World) -> set[str]:
    """The session open before the rule changed: the task events it is sent."""
    ws = LIVE[0]
    await _secret_task(w)
    marker = await w.mesh.send(w.bob, w.open_room, f"marker {w.round}-task")
    frames = await ws.until("message", messageId=marker["messageId"])
    return _task_texts([f["task"] for f in frames if f["type"].startswith("task_")])


# A2A (issue 30, decision 0062): the same tasks through the JSON-RPC interfaces --


async def _rpc(w: World, who: User, path: str, method: str, **params: Any) -> dict[str, Any]:
    """One JSON-RPC call; its result, or ``{}`` for an A2A error."""
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    headers = {**who.headers, "A2A-Version": "1.0"}
    if method == "SubscribeToTask":  # a stream: its first event, or its upfront error
        async with w.mesh.http.stream("POST", path, json=body, headers=headers) as r:
            assert r.status_code == 200, await r.aread()
            if r.headers["content-type"].startswith("application/json"):
                assert "error" in json.loads(await r.aread())
                return {}
            async for line in r.aiter_lines():
                if line.startswith("data:"):
                    return dict(json.loads(line[5:])["result"])
            return {}
    r = await w.mesh.http.post(path, json=body, headers=headers)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert "error" in answer or "result" in answer, answer
    return dict(answer.get("result", {}))


def _a2a_texts(tasks: list[dict[str, Any]]) -> set[str]:
    seen: set[str] = set()
    for task in tasks:
        metadata = task.get("metadata", {})
        seen |= {str(metadata.get("roomId")), str(metadata.get("title"))}
        seen |= {p["text"] for m in task.get("history", []) for p in m["parts"]}
        seen |= {str(m.get("metadata", {}).get("roomId")) for m in task.get("history", [])}
    return seen


async def a2a_tasks(w: World) -> set[str]:
    """The task's agent (the webhook bot, an A2A agent for this) reads a task
    of the secret room over A2A: GetTask, ListTasks and SubscribeToTask, on
    the node's interface and on its own."""
    r = await w.mesh.http.patch(
        f"/api/agents/{w.hook.participant_id}", json={"a2a": True}, headers=w.owner.headers
    )
    assert r.status_code == 200, r.text
    task = await _secret_task(w)
    seen: set[str] = set()
    for path in ("/a2a", f"/a2a/agents/{w.hook.participant_id}"):
        found = await _rpc(w, w.hook, path, "GetTask", id=task["taskId"])
        seen |= _a2a_texts([found] if found else [])
        listed = await _rpc(w, w.hook, path, "ListTasks", historyLength=10)
        seen |= _a2a_texts(listed.get("tasks", []))
        first = await _rpc(w, w.hook, path, "SubscribeToTask", id=task["taskId"])
        seen |= _a2a_texts([first["task"]] if first else [])
    return seen


LIVE: list[Any] = []

# MCP (issue 30): the tools and resources of /mcp, as alice over the official client -----


async def _mcp_texts(result: Any, key: str) -> set[str]:
    if result.is_error:
        assert '"status": 403' in result.content[0].text, result.content
        return set()
    found = result.structured_content[key]
    return _texts([f.get("message", f) for f in found])


async def mcp_reads(w: World) -> set[str]:
    """read_messages, search_messages, wait_for_messages from the start,
    list_rooms, and the room's resource."""
    seen: set[str] = set()
    async with mcp_session(w.base_url, w.alice.token) as session:
        history = await session.call_tool("read_messages", {"room": w.secret})
        seen |= await _mcp_texts(history, "messages")
        found = await session.call_tool("search_messages", {"query": "secret"})
        seen |= await _mcp_texts(found, "results")
        polled = await session.call_tool("wait_for_messages", {"cursor": "0", "timeout": 0})
        seen |= await _mcp_texts(polled, "messages")
        rooms = await session.call_tool("list_rooms", {})
        seen |= {r["roomId"] for r in (rooms.structured_content or {})["rooms"]}
        try:
            read = await session.read_resource(f"mesh://rooms/{w.secret}")
        except MCPError:
            pass
        else:
            text = getattr(read.contents[0], "text", "{}")
            seen |= _texts(json.loads(text)["messages"])
    return seen


async def mcp_wait(w: World) -> set[str]:
    """A wait_for_messages waiting when this round's messages are posted."""
    found: set[str] = set()
    async with mcp_session(w.base_url, w.alice.token) as session:
        head = await session.call_tool("wait_for_messages", {"timeout": 0})
        cursor = (head.structured_content or {})["cursor"]
        async with trio.open_nursery() as nursery:

            async def waiting() -> None:
                nonlocal cursor
                while f"marker {w.round}-mcp" not in found:
                    polled = await session.call_tool(
                        "wait_for_messages", {"cursor": cursor, "timeout": 10}
                    )
                    found.update(await _mcp_texts(polled, "messages"))
                    cursor = (polled.structured_content or {})["cursor"]

            nursery.start_soon(waiting)
            await trio.sleep(0.3)  # the client's HTTP stack is not the test's to watch
            await w.mesh.send(w.bob, w.secret, f"secret {w.round}-mcp")
            await w.mesh.send(w.bob, w.open_room, f"marker {w.round}-mcp")
    return found


#: every path that hands out a room's content, with its probe; the routes
#: each covers (for :func:`test_every_route_is_classified`)
PATHS: dict[str, tuple[Probe, tuple[str, ...]]] = {
    "REST history": (history, ("GET /api/rooms/<room_id>/messages",)),
    "message by id": (message_by_id, ("GET /api/rooms/<room_id>/messages/<message_id>",)),
    "room details": (room_details, ("GET /api/rooms/<room_id>",)),
    "search": (search, ("GET /api/search",)),
    "pins": (pins, ("GET /api/rooms/<room_id>/pins",)),
    "threads": (threads, ("GET /api/rooms/<room_id>/threads",)),
    "link preview": (link_preview, ("GET /api/rooms/<room_id>/messages/<message_id>/preview",)),
    "room list": (room_list, ("GET /api/rooms",)),
    "short poll": (short_poll, ("POST /api/poll",)),
    "long poll": (long_poll, ("POST /api/poll",)),
    "status": (status, ("GET /api/status",)),
    "state and snapshot": (state, ("GET /api/state", "GET /api/snapshot")),
    "mark read": (mark_read, ("POST /api/rooms/<room_id>/read",)),
    "mute": (mute, ("PUT /api/rooms/<room_id>/mute",)),
    "read all": (read_all, ("POST /api/read-all",)),
    "WebSocket snapshot": (ws_snapshot, ("WS /ws",)),
    "WebSocket resume": (ws_resume, ("WS /ws",)),
    "WebSocket live": (ws_live, ("WS /ws",)),
    "webhook": (webhook, ()),
    "task list": (task_list, ("GET /api/tasks",)),
    "task by id": (task_by_id, ("GET /api/tasks/<task_id>",)),
    "task update": (task_update, ("PATCH /api/tasks/<task_id>",)),
    "WebSocket task events": (ws_task_events, ("WS /ws",)),
    "A2A tasks": (a2a_tasks, ("A2A POST /a2a", "A2A POST /a2a/agents/{agent_id}")),
    # /mcp is served in front of the app too (decision 0061)
    "MCP tools and resource": (mcp_reads, ("MCP POST /mcp",)),
    "MCP wait_for_messages": (mcp_wait, ("MCP POST /mcp",)),
}

#: routes that hand out no room's content, and why
NO_ROOM_CONTENT: dict[str, str] = {
    "GET /": "the web client's page",
    "GET /.well-known/mesh-manifest.json": "the node's public description",
    "GET /skill.md": "instructions for agents",
    "GET /static/<path:filename>": "the web client's files",
    "GET /web/<path:name>": "the web client's files",
    "GET /api/openapi.json": "the API's description",
    "GET /api/reference": "the API's description",
    "GET /metrics": "counters, no content",
    "GET /api/health": "readiness, no content",
    "GET /api/health/live": "liveness, no content",
    "GET /api/health/ready": "readiness and its reasons, no content",
    "GET /api/setup/status": "whether the node is set up",
    "POST /api/setup/init": "setup",
    "GET /api/mesh/settings": "the mesh's public settings",
    "GET /api/admin/mesh/settings": "settings (admins)",
    "PUT /api/admin/mesh/settings": "settings (admins)",
    "GET /api/admin/setup-status": "a checklist (admins)",
    "GET /api/admin/stats": "counts (admins, who read every room)",
    "POST /api/auth/guest": "accounts",
    "POST /api/auth/login": "accounts",
    "POST /api/auth/logout": "accounts",
    "GET /api/auth/me": "accounts",
    "PATCH /api/auth/me": "accounts",
    "POST /api/auth/password": "accounts",
    "GET /api/auth/sessions": "accounts: the caller's own tokens",
    "DELETE /api/auth/sessions/<token_id>": "accounts: the caller's own tokens",
    "POST /api/auth/register": "accounts",
    "A2A GET /.well-known/agent-card.json": "the node's agent card: bots' names, public",
    "A2A GET /a2a/agents/{agent_id}/.well-known/agent-card.json": "a bot's agent card, public",
    "MCP GET /mcp": "a session's notification stream: resource URIs of rooms the caller's feed "
    "carries (the tools' answers are probed as MCP POST /mcp)",
    "MCP DELETE /mcp": "ends the caller's own session",
    "MCP GET /.well-known/oauth-protected-resource/mcp": "the endpoint's public metadata",
    "GET /api/agents": "bots and their state, no messages",
    "DELETE /api/agents/<agent_id>": "bots",
    "PATCH /api/agents/<agent_id>": "bots (the A2A opt-in)",
    "POST /api/agents/<agent_id>/command": "commands, not room content",
    "GET /api/agents/<agent_id>/commands/<command_id>": "commands, not room content",
    "POST /api/agents/bootstrap": "bots",
    "POST /api/agents/spawn": "bots",
    "POST /api/commands/<command_id>/result": "commands",
    "GET /api/apps": "apps",
    "POST /api/apps": "apps",
    "DELETE /api/apps/<app_id>": "apps",
    "GET /api/apps/<app_id>": "apps",
    "POST /api/apps/<app_id>/deploy": "apps",
    "GET /api/apps/<app_id>/run": "apps",
    "PUT /api/apps/<app_id>/source": "apps",
    "POST /api/apps/<app_id>/undeploy": "apps",
    "GET /api/apps/<app_id>/versions": "apps",
    "GET /api/apps/<app_id>/versions/<version>": "apps",
    "GET /api/apps/deployed": "apps",
    "POST /api/apps/generate": "apps",
    "GET /api/connections": "federation (admins)",
    "DELETE /api/connections/<connection_id>": "federation (admins)",
    "POST /api/connections/<connection_id>/accept": "federation (admins)",
    "POST /api/connections/<connection_id>/decline": "federation (admins)",
    "POST /api/connections/<connection_id>/rooms": "federation (admins)",
    "DELETE /api/connections/<connection_id>/rooms/<room_id>": "federation (admins)",
    "POST /api/connections/accepted": "between nodes, signed",
    "POST /api/connections/declined": "between nodes, signed",
    "POST /api/connections/disconnected": "between nodes, signed",
    "POST /api/connections/request": "between nodes, signed",
    "POST /api/federation/relay": "inbound from a peer, signed",
    "POST /api/federation/rooms": "between nodes, signed",
    "POST /api/federation/rooms/unshared": "between nodes, signed",
    "GET /api/dms": "one's own DMs, which only their two parties are in",
    "POST /api/dms": "opens a DM",
    "DELETE /api/dms/<room_id>": "hides a DM",
    "POST /api/identity/challenge": "identity",
    "GET /api/identity/retrieve-key": "identity",
    "POST /api/identity/store-key": "identity",
    "POST /api/identity/verify": "identity",
    "POST /api/meshes/heartbeat": "the registry",
    "GET /api/meshes/public": "the registry",
    "GET /api/models": "models",
    "POST /api/models": "models",
    "DELETE /api/models/<name>": "models",
    "GET /api/models/usage": "models",
    "POST /api/models/v1/chat/completions": "models",
    "GET /api/models/v1/models": "models",
    "GET /api/models/budget": "models",
    "GET /api/models/budgets": "models",
    "PATCH /api/models/<name>": "models",
    "PUT /api/models/budgets/participants/<participant_id>": "models",
    "PUT /api/models/budgets/roles/<role>": "models",
    "GET /api/participants": "people, not rooms",
    "GET /api/participants/<participant_id>": "people, not rooms",
    "PUT /api/participants/<participant_id>/role": "roles",
    "GET /api/permissions": "the permission catalog",
    "GET /api/roles": "roles",
    "POST /api/roles": "roles",
    "DELETE /api/roles/<role_id>": "roles",
    "PUT /api/roles/<role_id>": "roles",
    "POST /api/roles/from-template": "roles",
    "GET /api/roles/templates": "roles",
    "POST /api/rooms": "creates a room",
    "DELETE /api/rooms/<room_id>": "deletes a room",
    "PUT /api/rooms/<room_id>/pins/<message_id>": (
        "pins a message: answers its ids only; refused (403) to one who may not read the room"
    ),
    "DELETE /api/rooms/<room_id>/pins/<message_id>": (
        "unpins a message: answers its ids only; refused (403) to one who may not read the room"
    ),
    "PATCH /api/rooms/<room_id>": (
        "changes a room's description; refused (403) to one who may not read the room"
    ),
    "POST /api/rooms/<room_id>/join": "membership",
    "POST /api/rooms/<room_id>/leave": "membership",
    "POST /api/rooms/<room_id>/messages": "posting: refused where one may not read (tested)",
    "DELETE /api/rooms/<room_id>/messages/<message_id>": (
        "finds the message through the decision (403), as editing does"
    ),
    "PATCH /api/rooms/<room_id>/messages/<message_id>": (
        "finds the message through the decision (403), tested below"
    ),
    "POST /api/rooms/<room_id>/messages/<message_id>/reactions": (
        "finds the message through the decision (403)"
    ),
    "DELETE /api/rooms/<room_id>/messages/<message_id>/reactions/<path:emoji>": (
        "finds the message through the decision (403)"
    ),
    "GET /api/rooms/<room_id>/permissions": "the room's rules (what one may do), no content",
    "POST /api/rooms/<room_id>/permissions": "rules",
    "DELETE /api/rooms/<room_id>/permissions": "rules",
    "POST /api/rooms/<room_id>/permissions/preset": "rules",
    "POST /api/upload": "stores a file",
    "GET /uploads/<name>": (
        "a file by its unguessable name, to anyone with the URL (spec §4.16, decision 0052);"
        " the message that carries it is room content and goes through the decision"
    ),
    "GET /api/link-preview/image": (
        "an image of the web, only at an address the node signed in a preview it handed out"
        " through the decision (decision 0072); no room content"
    ),
    "POST /api/tasks": "creates a task: refused where one may not read (through the decision)",
    "POST /api/tasks/<task_id>/cancel": "finds the task through the decision (404)",
    "POST /api/tasks/<task_id>/reply": "finds the task through the decision (404)",
    "GET /api/vault/entries": "one's own vault",
    "POST /api/vault/entries": "one's own vault",
    "DELETE /api/vault/entries/<entry_id>": "one's own vault",
}


def test_every_route_is_classified() -> None:
    """Every route the app serves is either probed by :data:`PATHS` or
    listed in :data:`NO_ROOM_CONTENT`: a new route must say which."""
    app = create_app(Settings(data_dir=Path(tempfile.mkdtemp()) / "mesh-data"))
    served = {
        f"{method} {rule.rule}"
        for rule in app.url_map.iter_rules()
        for method in rule.methods or ()
        if method not in ("HEAD", "OPTIONS")
    }
    # the A2A routes, served in front of Quart (decision 0062)
    served |= {
        f"A2A {method} {route.path}"
        for route in a2a_app(lambda: app.node).routes
        for method in getattr(route, "methods", None) or ()
        if method not in ("HEAD", "OPTIONS")
    }
    # the MCP endpoint, in front of Quart (decision 0061)
    served |= {f"MCP {method} {MCP_PATH}" for method in ("GET", "POST", "DELETE")}
    served.add(f"MCP GET {MCP_METADATA_PATH}")
    probed = {route for _, routes in PATHS.values() for route in routes}
    unclassified = served - probed - set(NO_ROOM_CONTENT)
    assert not unclassified, f"say whether these hand out room content: {sorted(unclassified)}"
    stale = (probed | set(NO_ROOM_CONTENT)) - served - {"WS /ws"}
    assert not stale, f"routes the app no longer serves: {sorted(stale)}"


async def _world(base_url: str, mesh: Mesh, nursery: trio.Nursery) -> World:
    owner = await mesh.setup()
    alice = await mesh.register("alice")
    bob = await mesh.register("bob")
    receiver = Receiver()
    await receiver.start(nursery)
    hook, _ = await webhook_bot(mesh, owner, "hook", receiver.url)
    secret = (await mesh.create_room(owner, "secret"))["roomId"]
    open_room = (await mesh.create_room(owner, "open"))["roomId"]
    for user in (alice, bob, hook):
        await mesh.join(user, secret)
        await mesh.join(user, open_room)
    return World(base_url, mesh, owner, alice, bob, hook, receiver, secret, open_room)


async def _rule(w: World, who: User) -> str:
    r = await w.mesh.http.post(
        f"/api/rooms/{w.secret}/permissions",
        json={
            "targetType": "participant",
            "target": who.participant_id,
            "permission": "rooms.read",
            "effect": "deny",
        },
        headers=w.owner.headers,
    )
    assert r.status_code == 201, r.text
    return str(r.json()["overrideId"])


@CLIENT_WARNINGS  # the MCP probes
async def test_a_rooms_read_deny_holds_on_every_path(
    base_url: str, mesh: Mesh, nursery: trio.Nursery
) -> None:
    w = await _world(base_url, mesh, nursery)
    async with connect(base_url, w.alice) as live:
        LIVE[:] = [live]
        try:
            # before: every probe sees the room (or it would prove nothing)
            await w.post_round()
            for name, (probe, _) in PATHS.items():
                seen = await probe(w)
                assert w.secret in seen or "secret before" in seen, (name, seen)

            # the rule, while alice's session is open: it is told at once
            w.round = "denied"
            overrides = [await _rule(w, w.alice), await _rule(w, w.hook)]
            await live.expect("room_access", roomId=w.secret, readable=False)
            await w.post_round()
            for name, (probe, _) in PATHS.items():
                seen = await probe(w)
                leaked = {s for s in seen if s == w.secret or s.startswith("secret")}
                assert not leaked, (name, leaked)
            # writes that find a message go through the decision too
            [first] = [
                m
                for m in await mesh.messages(w.owner, w.secret)
                if m["senderId"] == w.bob.participant_id
            ][:1]
            r = await mesh.http.post(
                f"/api/rooms/{w.secret}/messages/{first['messageId']}/reactions",
                json={"emoji": "eyes"},
                headers=w.alice.headers,
            )
            assert_error(r, 403)
            # nor may one post where one may not read (its echo is room content)
            r = await mesh.http.post(
                f"/api/rooms/{w.secret}/messages",
                json={"content": "blind post"},
                headers=w.alice.headers,
            )
            assert_error(r, 403, "forbidden")

            # the rule goes: the room comes back everywhere
            w.round = "again"
            for override_id in overrides:
                r = await mesh.http.request(
                    "DELETE",
                    f"/api/rooms/{w.secret}/permissions",
                    json={"overrideId": override_id},
                    headers=w.owner.headers,
                )
                assert r.status_code in (200, 204), r.text
            await live.expect("room_access", roomId=w.secret, readable=True)
            await w.post_round()
            for name, (probe, _) in PATHS.items():
                seen = await probe(w)
                assert w.secret in seen or "secret again" in seen, (name, seen)
        finally:
            LIVE.clear()


async def test_a_role_without_rooms_read_reads_nothing_at_once(
    base_url: str, mesh: Mesh, nursery: trio.Nursery
) -> None:
    """A demotion to a role that may not read rooms applies to open sessions
    at once, on every path."""
    w = await _world(base_url, mesh, nursery)
    r = await mesh.http.post(
        "/api/roles",
        json={"name": "blind", "priority": 100, "permissions": ["participants.read"]},
        headers=w.owner.headers,
    )
    assert r.status_code == 201, r.text
    async with connect(base_url, w.alice) as live:
        r = await mesh.http.put(
            f"/api/participants/{w.alice.participant_id}/role",
            json={"role": "blind"},
            headers=w.owner.headers,
        )
        assert r.status_code == 200, r.text
        told = {
            (await live.expect("room_access", readable=False))["roomId"],
            (await live.expect("room_access", readable=False))["roomId"],
        }
        assert told == {w.secret, w.open_room}
        await mesh.send(w.bob, w.secret, "after the demotion")
        # bob's session is the marker: it gets the message after alice's would
        async with connect(base_url, w.bob) as marker:
            await mesh.send(w.bob, w.open_room, "marker")
            await marker.settle()
        frames = await live.settle()
        assert not [f for f in frames if f["type"] == "message"], frames
    assert_error(
        await mesh.http.get(f"/api/rooms/{w.secret}/messages", headers=w.alice.headers), 403
    )
    polled = await mesh.http.post("/api/poll", json={"cursor": "0"}, headers=w.alice.headers)
    assert polled.status_code in (200, 403), polled.text
    if polled.status_code == 200:
        assert polled.json()["messages"] == []
