"""The MCP tools, the room resources and the prompt: thin adapters.

Each tool is the REST route of the same name in another wire format: it
takes the caller the request authenticated (:func:`caller`), calls the one
service the REST route calls, and answers what that route answers, typed
(:mod:`.shapes`). No tool reads the store or decides access: the services
do, through ``authorize()`` and the visibility decision, exactly as for
REST — so nothing an agent can do here is beyond what its token can do
over REST. A :class:`~quart_mesh.errors.MeshError` becomes an MCP tool
error carrying the mesh's code and message (:func:`tool_error`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from ..errors import BadRequest, MeshError, RateLimited
from ..services.authz import Actor
from ..services.commands import command_json
from . import shapes

if TYPE_CHECKING:
    from ..node import Node

__all__ = ["CALLER", "Caller", "caller", "register", "request_caller", "tool_error"]

#: where the endpoint puts the request's :class:`Caller` in the ASGI scope
CALLER = "quart_mesh.mcp.caller"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made the HTTP request that carries an MCP message (authenticated
    by the endpoint on every request)."""

    actor: Actor
    #: its token's id: signing that token out ends its waits
    token_id: str
    #: the client's address (behind trusted proxies, the forwarded one)
    address: str | None


def caller(ctx: Context[Any, Any]) -> Caller:
    """The authenticated caller of the MCP request *ctx* belongs to."""
    return request_caller(ctx.request_context)


def request_caller(request_context: ServerRequestContext[Any, Any]) -> Caller:
    """The authenticated caller of the HTTP request that carried an MCP message.

    Raises:
        RuntimeError: the request did not come through the endpoint (a bug:
            the endpoint authenticates every request before the SDK sees it).
    """
    found = getattr(request_context.request, "scope", {}).get(CALLER)
    if not isinstance(found, Caller):
        raise RuntimeError("an MCP request reached the node without an authenticated caller")
    return found


def tool_error(error: MeshError) -> CallToolResult:
    """A mesh error as the tool's result: ``isError`` with the REST error
    body (``{"error", "code"}``, plus ``status`` and, when rate limited,
    ``retryAfter``) as its text."""
    body: dict[str, Any] = {**error.to_json(), "status": error.status}
    if isinstance(error, RateLimited):
        body["retryAfter"] = max(1, math.ceil(error.retry_after))
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(body, ensure_ascii=False))],
        is_error=True,
    )


RoomId = Annotated[str, Field(description="a room id (roomId from list_rooms), or a DM's room id")]
MessageId = Annotated[str, Field(description="a message id (messageId)")]
Cursor = Annotated[str | None, Field(description="a message's cursor")]
Limit = Annotated[int | None, Field(description="at most this many (the node caps it)")]


def register(mcp: MCPServer[Any], node_of: Callable[[], Node]) -> None:
    """Add the tools, the room resource and the prompt to *mcp*.

    Args:
        node_of: returns the serving node (it is opened after the app is built).
    """

    @mcp.tool(title="List rooms")
    async def list_rooms(
        ctx: Context[Any, Any],
        cursor: Annotated[
            str | None, Field(description="nextCursor of the page before (absent: the first)")
        ] = None,
        limit: Limit = None,
    ) -> shapes.RoomPage:
        """The mesh's rooms by name, and whether you are a member of each
        (join one to read and write in it)."""
        node = node_of()
        page = await node.rooms.page_rooms(caller(ctx).actor, cursor, limit)
        rooms = [{**room.to_json(), "joined": joined} for room, joined in page.rooms]
        return shapes.RoomPage.model_validate({"rooms": rooms, "nextCursor": page.next_cursor})

    @mcp.tool(title="Join a room")
    async def join_room(ctx: Context[Any, Any], room: RoomId) -> shapes.Room:
        """Join a room: from now on you read it and may write in it."""
        joined = await node_of().rooms.join(caller(ctx).actor, room)
        return shapes.Room.model_validate({**joined.to_json(), "joined": True})

    @mcp.tool(title="Read messages")
    async def read_messages(
        ctx: Context[Any, Any],
        room: RoomId,
        before: Annotated[
            str | None, Field(description="only messages before this cursor (older)")
        ] = None,
        since: Annotated[
            str | None, Field(description="only messages after this cursor (newer)")
        ] = None,
        limit: Limit = None,
        thread: Annotated[
            str | None, Field(description="only the replies of this thread (its first message)")
        ] = None,
    ) -> shapes.MessagePage:
        """A page of a room's messages, oldest first: the newest ones, or
        those before or since a cursor. Reading marks the room read."""
        messages = await node_of().messages.list_messages(
            caller(ctx).actor, room, before=before, since=since, limit=limit, thread_id=thread
        )
        return shapes.MessagePage.model_validate({"messages": [m.to_json() for m in messages]})

    @mcp.tool(title="Send a message")
    async def send_message(
        ctx: Context[Any, Any],
        content: Annotated[str, Field(description="the text (Markdown)")],
        room: Annotated[str | None, Field(description="the room to send in (a room id)")] = None,
        to: Annotated[
            str | None,
            Field(
                description="a participant id: without room, a direct message to them; "
                "with room, a message in the room addressed to them"
            ),
        ] = None,
        thread: Annotated[
            str | None, Field(description="reply in the thread of this message id")
        ] = None,
    ) -> shapes.Message:
        """Send a message to a room, or a direct message to a participant."""
        node, actor = node_of(), caller(ctx).actor
        if room is None:
            if to is None:
                raise BadRequest("give room, to, or both", "invalid_field")
            dm, _ = await node.dms.open(actor, to)
            room, to = dm.room.room_id, None
        message = await node.messages.send(actor, room, content, to=to, thread_id=thread)
        return shapes.Message.model_validate(message.to_json())

    @mcp.tool(title="Wait for messages")
    async def wait_for_messages(
        ctx: Context[Any, Any],
        cursor: Annotated[
            str | None,
            Field(
                description="the cursor the last call returned (absent: from where you "
                "last read each room)"
            ),
        ] = None,
        timeout: Annotated[  # noqa: ASYNC109 (the tool's argument, bounded below)
            float,
            Field(
                description="seconds to wait for something to arrive (0: do not wait; "
                "the node caps it, 30 by default)",
                ge=0,
            ),
        ] = 25.0,
        mentions_only: Annotated[
            bool, Field(description="only messages addressed to you or mentioning @you")
        ] = False,
        limit: Limit = None,
    ) -> shapes.Poll:
        """Your listening loop: the messages after the cursor in your rooms and
        DMs (and commands for you), returned as soon as anything is there or
        arrives, else empty once the timeout has passed. Pass the returned
        cursor to the next call: nothing is skipped or repeated."""
        node, who = node_of(), caller(ctx)
        if not math.isfinite(timeout):
            raise BadRequest("timeout must be a finite number", "invalid_field")
        result = await node.polling.poll(
            who.actor,
            cursor=cursor,
            mentions_only=mentions_only,
            wait_seconds=min(timeout, node.settings.max_poll_timeout),
            limit=limit,
            token_id=who.token_id,
            address=who.address,
        )
        return shapes.Poll.model_validate(result.to_json())

    @mcp.tool(title="Search messages")
    async def search_messages(
        ctx: Context[Any, Any],
        query: Annotated[
            str | None,
            Field(
                description='words (all must match), "a phrase", prefix*, -excluded, and '
                "filters such as from:@bob in:thread has:file mentions:me"
            ),
        ] = None,
        room: Annotated[str | None, Field(description="a room id or name")] = None,
        sender: Annotated[str | None, Field(description="a participant id or @name")] = None,
        before: Annotated[
            str | None, Field(description="a date (YYYY-MM-DD), ISO 8601 time or cursor")
        ] = None,
        after: Annotated[
            str | None, Field(description="a date (YYYY-MM-DD), ISO 8601 time or cursor")
        ] = None,
        sort: Annotated[Literal["newest", "relevance"] | None, Field()] = None,
        cursor: Annotated[str | None, Field(description="nextCursor of the page before")] = None,
        limit: Limit = None,
    ) -> shapes.SearchPage:
        """Search the messages of the rooms and DMs you may read."""
        page = await node_of().search.search(
            caller(ctx).actor,
            query,
            room=room,
            sender=sender,
            before=before,
            after=after,
            sort=sort,
            cursor=cursor,
            limit=limit,
        )
        return shapes.SearchPage.model_validate(page.to_json())

    @mcp.tool(title="List participants")
    async def list_participants(ctx: Context[Any, Any]) -> shapes.ParticipantList:
        """The mesh's participants (humans, agents, guests) and who is online."""
        found = await node_of().accounts.list_participants(caller(ctx).actor)
        return shapes.ParticipantList.model_validate({"participants": [p.to_json() for p in found]})

    @mcp.tool(title="React to a message")
    async def react(
        ctx: Context[Any, Any],
        room: RoomId,
        message: MessageId,
        emoji: Annotated[str, Field(description="the emoji, e.g. 👍")],
        remove: Annotated[bool, Field(description="take your reaction back")] = False,
    ) -> shapes.Message:
        """React to a message with an emoji (or take the reaction back)."""
        node, actor = node_of(), caller(ctx).actor
        if remove:
            found = await node.messages.remove_reaction(actor, message, emoji, room_id=room)
        else:
            found = await node.messages.add_reaction(actor, message, emoji, room_id=room)
        return shapes.Message.model_validate(found.to_json())

    @mcp.tool(title="Edit a message")
    async def edit_message(
        ctx: Context[Any, Any],
        room: RoomId,
        message: MessageId,
        content: Annotated[str, Field(description="the new text")],
    ) -> shapes.Message:
        """Replace a message's text (yours, or with the right to edit others')."""
        edited = await node_of().messages.edit(caller(ctx).actor, message, content, room_id=room)
        return shapes.Message.model_validate(edited.to_json())

    @mcp.tool(title="Delete a message")
    async def delete_message(
        ctx: Context[Any, Any], room: RoomId, message: MessageId
    ) -> shapes.Deleted:
        """Delete a message (yours, or with the right to delete others')."""
        await node_of().messages.delete(caller(ctx).actor, message, room_id=room)
        return shapes.Deleted(ok=True, messageId=message)

    @mcp.tool(title="Send a command to an agent")
    async def send_command(
        ctx: Context[Any, Any],
        agent: Annotated[str, Field(description="the agent's id (agentId from list_agents)")],
        command: Annotated[
            str, Field(description="1 to 64 characters: a-z first, then a-z 0-9 _ . -")
        ],
        args: Annotated[dict[str, Any] | None, Field(description="the command's arguments")] = None,
    ) -> shapes.Command:
        """Send a structured command to an agent you registered (or any, as an
        admin); it receives it live or on its next poll."""
        row = await node_of().commands.send_command(caller(ctx).actor, agent, command, args)
        return shapes.Command.model_validate(command_json(row))

    @mcp.tool(title="List agents")
    async def list_agents(ctx: Context[Any, Any]) -> shapes.AgentList:
        """The mesh's agents (bots), whether each is online, and the managed
        ones' state."""
        found = await node_of().agents.list_agents(caller(ctx).actor)
        return shapes.AgentList.model_validate({"agents": found})
