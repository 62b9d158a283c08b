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

import contextlib
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal

import trio
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from ..errors import BadRequest, MeshError, NotFound, RateLimited
from ..ids import is_ulid
from ..names import normalize
from ..services.authz import Actor
from ..services.commands import command_json
from ..services.polling import PollResult
from . import shapes

if TYPE_CHECKING:
    from ..node import Node

__all__ = ["CALLER", "Caller", "Dropped", "caller", "register", "request_caller", "tool_error"]

#: where the endpoint puts the request's :class:`Caller` in the ASGI scope
CALLER = "quart_mesh.mcp.caller"


class Dropped:
    """Whether the client of one HTTP request went away (hypercorn said
    ``http.disconnect`` before the answer was complete), and the waits to
    end when it does: a tool's call outlives its request in the SDK (it
    runs in the session's task), so a dropped client's waits are ended
    here, not by the SDK."""

    __slots__ = ("_scopes", "gone")

    def __init__(self) -> None:
        self.gone = False
        self._scopes: set[trio.CancelScope] = set()

    def fire(self) -> None:
        self.gone = True
        for scope in self._scopes:
            scope.cancel()

    @contextlib.contextmanager
    def ends(self) -> Iterator[trio.CancelScope]:
        """A cancel scope for the block, cancelled when the client goes."""
        scope = trio.CancelScope()
        if self.gone:
            scope.cancel()
        self._scopes.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._scopes.discard(scope)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who made the HTTP request that carries an MCP message (authenticated
    by the endpoint on every request)."""

    actor: Actor
    #: its token's id: signing that token out ends its waits
    token_id: str
    #: the token itself: a subscription that follows the caller's feed again
    #: checks it is still good (``rooms.py``); never shown
    token: str = field(repr=False)
    #: the client's address (behind trusted proxies, the forwarded one)
    address: str | None
    #: the request's client went away
    dropped: Dropped = field(default_factory=Dropped)


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


#: hints for clients: what only reads, what cannot be undone
_READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
_DESTRUCTIVE = ToolAnnotations(destructive_hint=True, open_world_hint=False)

RoomId = Annotated[
    str, Field(description="a room id (roomId from list_rooms) or a room's name; a DM's room id")
]
MessageId = Annotated[str, Field(description="a message id (messageId)")]
InRoom = Annotated[
    str | None, Field(description="the message's room (roomId): refused if it is not there")
]
Cursor = Annotated[str | None, Field(description="a message's cursor")]
Limit = Annotated[int | None, Field(description="at most this many (the node caps it)")]


def _named(value: str) -> str:
    return normalize(value.strip().removeprefix("#").removeprefix("@")).casefold()


async def room_id_of(node: Node, actor: Actor, room: str) -> str:
    """*room* as a room id: an id as given; else the name of one of the
    mesh's rooms (``#`` optional), found as ``GET /api/rooms`` lists them.

    Raises:
        NotFound: no room has that name (``room_not_found``).
    """
    if is_ulid(room):
        return room
    wanted, cursor = _named(room), None
    while True:
        page = await node.rooms.page_rooms(actor, cursor, node.settings.limits.max_room_page_size)
        for found, _ in page.rooms:
            if _named(found.name) == wanted:
                return found.room_id
        if page.next_cursor is None:
            raise NotFound("no room has that id or name", "room_not_found")
        cursor = page.next_cursor


async def participant_id_of(node: Node, actor: Actor, who: str) -> str:
    """*who* as a participant id: an id as given; else a participant's name
    (``@`` optional), found as ``GET /api/participants`` lists them.

    Raises:
        NotFound: no participant has that name (``participant_not_found``).
    """
    if is_ulid(who):
        return who
    wanted = _named(who)
    for found in await node.accounts.list_participants(actor):
        if _named(found.name) == wanted:
            return found.participant_id
    raise NotFound("no participant has that id or name", "participant_not_found")


class ToolBox:
    """The tools of one app's MCP server, gathered as ``MCPServer.tool()``
    would add them (``MCPServer(tools=box.tools)``). What the SDK makes of a
    function (its arguments' model, its schemas: most of the cost of an
    app's making) depends only on the function's code, defaults and
    options, so it is made once per process (:data:`_MADE`); each app's
    tool is a copy of it holding the app's own function."""

    def __init__(self) -> None:
        self.tools: list[Tool] = []

    def tool(
        self, *, title: str, annotations: ToolAnnotations | None = None
    ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        def add(fn: Callable[..., Any]) -> Callable[..., Any]:
            options = None if annotations is None else annotations.model_dump_json()
            # (what the SDK reads of the function: its code, which holds its
            # annotations, and its defaults)
            key = (fn.__code__, repr(fn.__defaults__), repr(fn.__kwdefaults__), title, options)
            made = _MADE.get(key)
            if made is None:
                made = Tool.from_function(fn, title=title, annotations=annotations)
                # kept without the function, whose closure holds its app
                _MADE[key] = made = made.model_copy(update={"fn": _unbound})
            self.tools.append(made.model_copy(update={"fn": fn}))
            return fn

        return add


#: :class:`ToolBox`'s tools as the SDK made them, by function code and options
_MADE: dict[tuple[object, ...], Tool] = {}


def _unbound(*args: object, **kwargs: object) -> None:
    """What a tool of :data:`_MADE` holds until copied for an app."""
    raise RuntimeError("a tool made once per process was called without its app's function")


def register(mcp: ToolBox, node_of: Callable[[], Node]) -> None:
    """Add the tools to *mcp*.

    Args:
        node_of: returns the serving node (it is opened after the app is built).
    """

    @mcp.tool(title="List rooms", annotations=_READS)
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
        node, actor = node_of(), caller(ctx).actor
        joined = await node.rooms.join(actor, await room_id_of(node, actor, room))
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
        node, actor = node_of(), caller(ctx).actor
        messages = await node.messages.list_messages(
            actor,
            await room_id_of(node, actor, room),
            before=before,
            since=since,
            limit=limit,
            thread_id=thread,
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
        if to is not None:
            to = await participant_id_of(node, actor, to)
        if room is None:
            if to is None:
                raise BadRequest("give room, to, or both", "invalid_field")
            dm, _ = await node.dms.open(actor, to)
            room, to = dm.room.room_id, None
        else:
            room = await room_id_of(node, actor, room)
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
        result: PollResult | None = None
        with who.dropped.ends():
            result = await node.polling.poll(
                who.actor,
                cursor=cursor,
                mentions_only=mentions_only,
                wait_seconds=min(timeout, node.settings.max_poll_timeout),
                limit=limit,
                token_id=who.token_id,
                address=who.address,
            )
        if result is None:
            # the answer would go nowhere; what waited stays for the next call
            raise BadRequest("the client went away", "client_gone")
        return shapes.Poll.model_validate(result.to_json())

    @mcp.tool(title="Search messages", annotations=_READS)
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

    @mcp.tool(title="List participants", annotations=_READS)
    async def list_participants(ctx: Context[Any, Any]) -> shapes.ParticipantList:
        """The mesh's participants (humans, agents, guests) and who is online."""
        found = await node_of().accounts.list_participants(caller(ctx).actor)
        return shapes.ParticipantList.model_validate({"participants": [p.to_json() for p in found]})

    @mcp.tool(title="React to a message")
    async def react(
        ctx: Context[Any, Any],
        message: MessageId,
        emoji: Annotated[str, Field(description="the emoji, e.g. 👍")],
        room: InRoom = None,
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
        message: MessageId,
        content: Annotated[str, Field(description="the new text")],
        room: InRoom = None,
    ) -> shapes.Message:
        """Replace a message's text (yours, or with the right to edit others')."""
        edited = await node_of().messages.edit(caller(ctx).actor, message, content, room_id=room)
        return shapes.Message.model_validate(edited.to_json())

    @mcp.tool(title="Delete a message", annotations=_DESTRUCTIVE)
    async def delete_message(
        ctx: Context[Any, Any], message: MessageId, room: InRoom = None
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

    @mcp.tool(title="List agents", annotations=_READS)
    async def list_agents(ctx: Context[Any, Any]) -> shapes.AgentList:
        """The mesh's agents (bots), whether each is online, and the managed
        ones' state."""
        found = await node_of().agents.list_agents(caller(ctx).actor)
        return shapes.AgentList.model_validate({"agents": found})

    @mcp.tool(title="Update a task")
    async def update_task(
        ctx: Context[Any, Any],
        task: Annotated[str, Field(description="the task's id (taskId)")],
        state: Annotated[
            Literal["working", "input-required", "completed", "failed", "rejected"],
            Field(
                description="working: you are on it; input-required: you need an answer "
                "(ask it in message); completed (give result), failed or rejected"
            ),
        ],
        message: Annotated[
            str | None,
            Field(description="a status text, posted by you in the task's thread"),
        ] = None,
        result: Annotated[
            str | None, Field(description="your final answer (with completed)")
        ] = None,
    ) -> shapes.Task:
        """Move a task you are the agent of to a new state (PATCH /api/tasks/:id)."""
        updated = await node_of().tasks.update(
            caller(ctx).actor, task, state=state, message=message, result=result
        )
        return shapes.Task.model_validate(updated.to_json())
