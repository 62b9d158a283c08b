"""Rooms as MCP resources (``mesh://rooms/{room_id}``), their
subscriptions, and the prompt that says how to behave in a mesh.

Reading a room's resource is ``GET /api/rooms/:id/messages`` (the newest
:data:`RESOURCE_MESSAGES`, through the same service: it counts as reading
the room). Subscribing asks the same read for nothing (after the last
cursor, so nothing is marked read) — a room the caller may not read is
refused — and then a task follows the caller's live events through the
delivery service, the feed every transport uses: it carries only the rooms
the visibility decision lets the caller read, as the policy stands at each
event, so a room whose rules change stops notifying at once. Each new,
edited or deleted message of a subscribed room becomes a
``notifications/resources/updated``:

- protocol 2025-11-25 and before: ``resources/subscribe`` adds the room to
  the session's set, followed by one task per session (in the endpoint's
  nursery) that notifies on the session's stream; it ends with the session
  (its teardown), the caller's feed (signed out, deleted) or a client that
  stopped taking notifications, and the session's next subscribe starts
  it again;
- protocol 2026-07-28: a ``subscriptions/listen`` request is the stream; it
  follows the caller's feed for as long as the request lasts, and a stream
  that cannot go on ends with an error the client sees.

Either way a feed that lags (the broker drops a subscriber that falls
behind) is followed again, and every subscribed room is notified once:
notifications only say "updated", so nothing is lost. A notification the
client does not take within ``_NOTIFY_TIMEOUT`` ends the follow (bounded:
a client not reading holds nothing for longer).

The SDK's own listen handler shares one bus among all listeners, whoever
may read the room, and buffers for a client that is not reading; here each
stream writes its caller's notifications itself (what the SDK's handler
writes: the acknowledgment first, each frame tagged with the request's id).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

import trio
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    ResourceUpdated,
    event_to_notification,
)
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    EmptyResult,
    SubscribeRequestParams,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
    UnsubscribeRequestParams,
)

from ..ends import ENDINGS, EndReason
from ..errors import MeshError, Unauthorized, Unavailable
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
#: a cursor after every message (the largest the node takes)
_AFTER_EVERYTHING = "9" * 18
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
    """One 2025-era MCP session's subscribed rooms and the task that notifies
    them: at most one runs at a time; a ``resources/subscribe`` starts it
    again if it ended (its feed ended, its client stopped reading)."""

    def __init__(self) -> None:
        self.rooms: set[str] = set()
        #: the running task's scope (None: no task runs)
        self.scope: trio.CancelScope | None = None
        #: the session was torn down: no task starts again
        self.closed = False

    def close(self) -> None:
        self.closed = True
        if self.scope is not None:
            self.scope.cancel()


class RoomSubscriptions:
    """Resource subscriptions, notified from the caller's feed (see the
    module docstring): ``resources/subscribe`` for sessions of the
    2025-11-25 revision and before, ``subscriptions/listen`` for the
    2026-07-28 one."""

    def __init__(self, node_of: Callable[[], Node], nursery_of: Callable[[], trio.Nursery]):
        self._node_of = node_of
        self._nursery_of = nursery_of

    async def _check(self, who: Caller, room_id: str) -> None:
        """The same read as the resource: refused if the caller may not read it.

        Raises:
            MCPError: the mesh's refusal (:func:`mesh_error`).
        """
        try:  # nothing after the last cursor: the check reads nothing, marks nothing read
            await self._node_of().messages.list_messages(
                who.actor, room_id, since=_AFTER_EVERYTHING, limit=1
            )
        except MeshError as error:
            raise mesh_error(error) from None

    async def subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: SubscribeRequestParams
    ) -> EmptyResult:
        room_id = _room_of(str(params.uri))
        who = request_caller(ctx)
        connection = connection_of(ctx)
        if connection.session_id is None:  # several workers: no session, no stream
            raise MCPError(
                INVALID_REQUEST,
                "this node serves no sessions (several workers): subscribe with "
                "subscriptions/listen (protocol 2026-07-28), or wait_for_messages",
            )
        await self._check(who, room_id)
        following: _Following | None = connection.state.get(_Following)
        if following is None:
            following = connection.state[_Following] = _Following()
            connection.exit_stack.callback(following.close)
        following.rooms.add(room_id)
        if following.scope is None and not following.closed:
            self._start(following, who, ctx.session)
        return EmptyResult()

    def _start(self, following: _Following, who: Caller, session: Any) -> None:
        """Start *following*'s task in the endpoint's nursery, as *who* (the
        caller of the subscribe that starts it): it notifies on *session*'s
        stream until the session's teardown cancels it, its feed ends
        (signed out, deleted, the node's event stream interrupted) or its
        client stops taking notifications; then a later subscribe starts it
        again."""
        scope = following.scope = trio.CancelScope()

        async def notify(room_id: str) -> None:
            await session.send_resource_updated(ROOM_URI.format(room_id=room_id))

        async def run() -> None:
            try:
                with scope:
                    await self._follow(who, following.rooms, notify)
            except MeshError as error:  # signed out, deleted, the store away
                log.info("an MCP subscription ended: %s", error.message)
            finally:
                if following.scope is scope:
                    following.scope = None

        self._nursery_of().start_soon(run)

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        room_id = _room_of(str(params.uri))
        following: _Following | None = connection_of(ctx).state.get(_Following)
        if following is not None:
            following.rooms.discard(room_id)
        return EmptyResult()

    async def listen(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        """``subscriptions/listen``: the stream of one request, as the SDK's
        handler serves it (the acknowledgment first, every frame tagged with
        the request's id), fed from the caller's feed alone. Its
        list-changed kinds are honored and never fire (tools, prompts and
        resources are fixed).

        Ends when the client goes (the SDK cancels it: safe, the feed ends
        with it). A stream that cannot go on ends with an error the client
        sees (its ``SubscriptionLost``): the caller's feed ended (the token
        signed out, the participant deleted, the node's event stream
        interrupted) or the client took no notification within
        ``_NOTIFY_TIMEOUT``.

        Raises:
            MCPError: a room the caller may not read, or the stream's end.
        """
        who = request_caller(ctx)
        request_id = ctx.request_id
        if request_id is None:
            raise MCPError(INVALID_REQUEST, "subscriptions/listen requires a request id")
        wanted = params.notifications
        uris = list(wanted.resource_subscriptions or [])
        rooms = {_room_of(uri) for uri in uris}
        for room_id in sorted(rooms):
            await self._check(who, room_id)
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: request_id}
        honored = SubscriptionFilter(
            tools_list_changed=True if wanted.tools_list_changed else None,
            prompts_list_changed=True if wanted.prompts_list_changed else None,
            resources_list_changed=True if wanted.resources_list_changed else None,
            resource_subscriptions=uris or None,
        )

        async def acknowledge() -> None:
            ack = SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
            await ctx.session.send_notification(
                SubscriptionsAcknowledgedNotification(params=ack), related_request_id=request_id
            )

        async def notify(room_id: str) -> None:
            event = ResourceUpdated(uri=ROOM_URI.format(room_id=room_id))
            await ctx.session.send_notification(
                event_to_notification(event, meta), related_request_id=request_id
            )

        try:
            await self._follow(who, rooms, notify, opened=acknowledge)
        except MeshError as error:
            raise mesh_error(error) from None
        raise MCPError(
            INTERNAL_ERROR,
            f"a notification was not taken within {_NOTIFY_TIMEOUT:g} s: listen again",
        )

    async def _follow(
        self,
        who: Caller,
        rooms: set[str],
        notify: Callable[[str], Awaitable[None]],
        *,
        opened: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Follow the caller's feed, calling *notify* for each change in one
        of *rooms* (read at each event), and *opened* once, when the feed
        is open (nothing after it is missed).

        A feed that lags (a burst the client's notifications could not keep
        up with: the broker drops it) is followed again from where it is:
        a notification says only that a room changed, so nothing is lost
        by notifying, after the lag, every room of *rooms* the caller may
        still read (what changed meanwhile is not known). Each feed checks
        the caller's token once it is open (signed out or deleted while no
        feed was open: not missed).

        Returns when the client stopped taking notifications: one not taken
        within ``_NOTIFY_TIMEOUT`` (a client not reading; the wait stays
        bounded), or its stream gone.

        Raises:
            MeshError: the feed ended for good: ``Unauthorized`` (the token
                signed out or expired, the participant deleted, a guest's
                access ended), ``Unavailable`` (the node's event stream was
                interrupted).

        Cancellation: safe; the feed ends with it.
        """
        node = self._node_of()
        lagged = False
        while True:
            with await node.delivery.follow(who.actor, token_id=who.token_id) as feed:
                sub = feed.sub
                await node.accounts.authenticate(who.token)
                changed: set[str] = set()
                if lagged:
                    readable = sub.broker.readable_of(who.actor.participant_id)
                    mine = sub.broker.rooms_of(who.actor.participant_id)
                    changed = {r for r in rooms if r in mine and (readable is None or readable(r))}
                elif opened is not None and not await _sent(opened):
                    return
                while sub.failed is None or changed:
                    for room_id in sorted(changed):
                        if not await _sent(partial(notify, room_id)):
                            return
                    batch = await sub.get_batch()
                    changed = {
                        event.room_id
                        for event, _ in batch
                        if isinstance(event, _CHANGES) and event.room_id in rooms
                    }
                reason = sub.failed
            if reason is not EndReason.LAGGING:
                raise _ended(reason)
            log.info("an MCP subscription's feed lagged: following it again")
            lagged = True


async def _sent(send: Callable[[], Awaitable[None]]) -> bool:
    """Whether *send* (a frame to a client) went within ``_NOTIFY_TIMEOUT``."""
    try:
        with trio.move_on_after(_NOTIFY_TIMEOUT) as waited:
            await send()
    except Exception:
        # the stream went away under it (its teardown is on the way): not
        # the node's failure
        log.info("an MCP notification could not be sent", exc_info=True)
        return False
    if waited.cancelled_caught:
        log.info("an MCP client stopped taking notifications")
        return False
    return True


def _ended(reason: EndReason | None) -> MeshError:
    """Why a feed ended (its subscription's ``failed``), as the mesh error a
    listen stream's client is told (the WebSocket's codes and texts)."""
    if reason is None:  # not reached: the loop ends only once it failed
        return Unavailable("the subscription ended: listen again")
    ending = ENDINGS[reason]
    if ending.access_ended:
        assert ending.code is not None
        return Unauthorized(ending.text, ending.code)
    if reason is EndReason.UNAVAILABLE:
        return Unavailable(ending.text)
    return Unavailable(f"the subscription ended ({reason}): listen again")


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
    lowlevel.add_request_handler(
        "subscriptions/listen", SubscriptionsListenRequestParams, subscriptions.listen
    )
