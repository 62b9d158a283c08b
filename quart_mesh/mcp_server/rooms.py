"""Rooms as MCP resources (``mesh://rooms/{room_id}``), their
subscriptions, and the prompt that says how to behave in a mesh.

Reading a room's resource is ``GET /api/rooms/:id/messages`` (the newest
:data:`RESOURCE_MESSAGES`, through the same service: it counts as reading
the room). Subscribing (``resources/subscribe``, protocol 2025-11-25 and
before) reads it first — a room the caller may not read is refused — and
then one task per MCP session follows the caller's live events through the
delivery service, the feed every transport uses: it carries only the rooms
the visibility decision lets the caller read, as the policy stands at each
event, so a room whose rules change stops notifying at once. Each new,
edited or deleted message of a subscribed room becomes a
``notifications/resources/updated`` on the session's stream. The task ends
with the session (its teardown), or when the caller's feed ends (signed
out, deleted).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import trio
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.session import ServerSession
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    EmptyResult,
    SubscribeRequestParams,
    UnsubscribeRequestParams,
)

from ..errors import MeshError
from ..events import MessageDeleted, MessageEdited, MessagePosted
from ..ids import is_ulid
from ..services.discovery import skill_template
from .tools import Caller, request_caller

if TYPE_CHECKING:
    from ..config import Settings
    from ..node import Node

__all__ = ["ROOM_URI", "RoomSubscriptions", "mesh_error", "register_rooms"]

log = logging.getLogger(__name__)

ROOM_URI = "mesh://rooms/{room_id}"
_PREFIX = "mesh://rooms/"
#: how many messages a room's resource holds (its newest)
RESOURCE_MESSAGES = 50
#: seconds a notification may take to be queued on a session's stream
_NOTIFY_TIMEOUT = 10.0
#: events that change what a room's resource shows
_CHANGES = (MessagePosted, MessageEdited, MessageDeleted)


def mesh_error(error: MeshError) -> MCPError:
    """A mesh error as an MCP protocol error (for resources and
    subscriptions; tools answer errors as results): its message, with the
    mesh's code and status as data."""
    return MCPError(INVALID_PARAMS, error.message, {"code": error.code, "status": error.status})


def connection_of(ctx: ServerRequestContext[Any, Any]) -> Any:
    """The SDK connection (one per MCP session) the request arrived on.

    ``ServerRequestContext`` does not carry it in mcp 2.3 (the SDK's own
    ``Context.connection`` is not what handlers are given yet, its TODO
    L54); its session object holds it. Its ``exit_stack`` is the SDK's
    documented place for per-connection teardown.
    """
    return ctx.session._connection


class _Following:
    """One MCP session's subscribed rooms and the task that notifies them."""

    def __init__(self) -> None:
        self.rooms: set[str] = set()
        self.scope = trio.CancelScope()


class RoomSubscriptions:
    """Resource subscriptions of every MCP session, notified from the
    caller's feed (see the module docstring)."""

    def __init__(self, node_of: Callable[[], Node], nursery_of: Callable[[], trio.Nursery]):
        self._node_of = node_of
        self._nursery_of = nursery_of

    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams
    ) -> EmptyResult:
        room_id = _room_of(str(params.uri))
        who = request_caller(ctx)
        try:  # the same read as the resource: refused if the caller may not read it
            await self._node_of().messages.list_messages(who.actor, room_id, limit=1)
        except MeshError as error:
            raise mesh_error(error) from None
        connection = connection_of(ctx)
        following: _Following | None = connection.state.get(_Following)
        if following is None:
            following = connection.state[_Following] = _Following()
            connection.exit_stack.callback(following.scope.cancel)
            self._nursery_of().start_soon(self._notify, ctx.session, who, following)
        following.rooms.add(room_id)
        return EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        room_id = _room_of(str(params.uri))
        following: _Following | None = connection_of(ctx).state.get(_Following)
        if following is not None:
            following.rooms.discard(room_id)
        return EmptyResult()

    async def _notify(self, session: ServerSession, who: Caller, following: _Following) -> None:
        """Follow the caller's feed until the session ends or the feed does,
        telling the session of each change in a subscribed room. A session
        that does not take a notification within ``_NOTIFY_TIMEOUT`` is not
        told any more (its client has stopped reading)."""
        with following.scope, await self._node_of().delivery.follow(who.actor) as feed:
            feed.sub.token_id = who.token_id
            while True:
                batch = await feed.sub.get_batch()
                if not batch and feed.sub.failed is not None:
                    return
                changed = {
                    event.room_id
                    for event, _ in batch
                    if isinstance(event, _CHANGES) and event.room_id in following.rooms
                }
                for room_id in sorted(r for r in changed if r is not None):
                    with trio.move_on_after(_NOTIFY_TIMEOUT) as waited:
                        await session.send_resource_updated(ROOM_URI.format(room_id=room_id))
                    if waited.cancelled_caught:
                        log.info("an MCP session stopped taking notifications")
                        return


def _room_of(uri: str) -> str:
    room_id = uri.removeprefix(_PREFIX)
    if not uri.startswith(_PREFIX) or not is_ulid(room_id):
        raise MCPError(INVALID_PARAMS, f"not a room of this mesh: {uri} (mesh://rooms/<roomId>)")
    return room_id


class _Values(Mapping[str, str]):
    """The skill template's values a prompt needs: the node's limits."""

    def __init__(self, settings: Settings) -> None:
        self._values = {
            **{k: str(v) for k, v in dataclasses.asdict(settings.limits).items()},
            "max_poll_timeout": f"{settings.max_poll_timeout:g}",
        }

    def __getitem__(self, key: str) -> str:
        return self._values.get(key, "")

    def __iter__(self) -> Any:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def _section(template: str, heading: str) -> str:
    """The text of the ``## heading`` section of *template* (without its heading)."""
    lines = template.splitlines()
    with contextlib.suppress(ValueError):
        start = lines.index(f"## {heading}") + 1
        end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
        return "\n".join(lines[start:end]).strip()
    return ""


def behaviour(settings: Settings) -> str:
    """The prompt: how an agent joined over MCP takes part (the loop), then
    ``/skill.md``'s etiquette with the node's limits."""
    etiquette = _section(skill_template(), "Etiquette")
    for name, value in _Values(settings).items():
        etiquette = etiquette.replace("{{" + name + "}}", value)
    return (
        "You are a participant of a quart-mesh chat mesh, connected over MCP with your own "
        "token: humans and other AI agents read what you write, and the room's rules apply "
        "to you as to them.\n\n"
        "How to take part:\n"
        "1. `list_rooms`, then `join_room` the rooms you are asked to work in.\n"
        "2. Loop on `wait_for_messages`, passing back the `cursor` it returned each time; it "
        "returns as soon as something arrives (or empty at its timeout).\n"
        "3. Answer with `send_message` (in the `room`, in a `thread`, or `to` a participant "
        "for a direct message). Use `read_messages` for context and `search_messages` to "
        "find what was said.\n"
        "4. A tool error's text is the mesh's error as JSON (`code`, `error`, `status`); on "
        "`rate_limited` wait `retryAfter` seconds.\n\n"
        "Etiquette:\n\n" + etiquette
    )


def register_rooms(
    mcp: MCPServer[Any],
    node_of: Callable[[], Node],
    settings: Settings,
    subscriptions: RoomSubscriptions,
) -> None:
    """Add the room resource, its subscription handlers and the prompt to *mcp*."""

    @mcp.resource(
        ROOM_URI,
        name="room",
        title="A room's recent messages",
        description=f"The newest {RESOURCE_MESSAGES} messages of a room you may read, "
        "oldest first (JSON, as read_messages answers); subscribe to hear of new ones.",
        mime_type="application/json",
    )
    async def room(room_id: str, ctx: Context[Any, Any]) -> str:
        request = ctx.request_context
        who = request_caller(request)
        try:
            messages = await node_of().messages.list_messages(
                who.actor, room_id, limit=RESOURCE_MESSAGES
            )
        except MeshError as error:
            raise mesh_error(error) from None
        return json.dumps({"messages": [m.to_json() for m in messages]}, ensure_ascii=False)

    @mcp.prompt(
        name="mesh_etiquette",
        title="How to behave in a mesh",
        description="How an agent takes part in this mesh over MCP, and its etiquette.",
    )
    def mesh_etiquette() -> str:
        return behaviour(settings)

    # the SDK's decorator-free way in for the 2025-era subscription methods
    lowlevel = mcp._lowlevel_server
    lowlevel.add_request_handler(
        "resources/subscribe", SubscribeRequestParams, subscriptions.subscribe
    )
    lowlevel.add_request_handler(
        "resources/unsubscribe", UnsubscribeRequestParams, subscriptions.unsubscribe
    )
