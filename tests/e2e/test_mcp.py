"""The MCP server at ``/mcp`` over a served node, driven by the official
``mcp`` SDK client (decision 0061, ``docs/agents-mcp-a2a.md``).

Loopback only, port 0, a time cap on every test; waits are short real
timeouts (the node is served by hypercorn in this process, but the client's
HTTP stack keeps its own time), except where marked.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import mcp_types
import pytest
import trio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from tests.helpers import Mesh, User, assert_error

pytestmark = [
    pytest.mark.timeout(60),
    # the SDK client's HTTP stack (httpx2) leaves a response stream's generator
    # to the garbage collector when its SSE stream is cut at the session's end
    pytest.mark.filterwarnings(
        "ignore:Exception ignored in. <async_generator object "
        "(PoolByteStream|Response|EventSource)[.]"
        ":pytest.PytestUnraisableExceptionWarning"
    ),
]

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
    base_url: str, http: httpx.AsyncClient, mesh: Mesh, people: tuple[User, User]
) -> None:
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
    # the metadata points at the node
    r = await http.get("/.well-known/oauth-protected-resource/mcp")
    assert r.status_code == 200
    document = r.json()
    assert document["resource"] == f"{base_url}/mcp"
    assert document["authorization_servers"] == [f"{base_url}/"] or document[
        "authorization_servers"
    ] == [base_url]
    assert document["bearer_methods_supported"] == ["header"]

    # the official client: refused without a token
    with pytest.raises(Exception):  # noqa: B017,PT011 (the transport's HTTP error, in a group)
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
        with pytest.raises(Exception):  # noqa: B017,PT011
            await session.call_tool("list_rooms", {})
    r = await http.post(
        "/mcp", json=init, headers={**accept, "Authorization": f"Bearer {bot_token}"}
    )
    assert_error(r, 401, "invalid_token")
