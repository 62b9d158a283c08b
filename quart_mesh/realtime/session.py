"""The mesh WebSocket protocol (spec §4.17, §5.6, §6), over any transport.

A :class:`ProtocolSession` authenticates the first frame, subscribes its participant
to the broker, sends ``auth_ok`` and ``snapshot`` (and, on resume, the
missed messages), then runs two tasks in its own nursery: a reader that turns
client frames into service calls, and a writer that drains the
subscription in batches. When either ends, the other is cancelled, except
that a writer that finds the connection closed leaves the reader to hand
over the frames it had read; the sends they queued are awaited past the
session's end (for at most ``SETTLE_TIMEOUT`` seconds: ``_sends.py``).

The socket owns the bytes (:class:`SessionSocket`): the session hands it
frames' text and reads whole messages. Why a session ends is its
subscription's :class:`~quart_mesh.ends.EndReason`, and what the client is
told then (an ``error`` frame, a close code) is ``ends.ENDINGS``'s, said by
one farewell (:meth:`ProtocolSession._farewell`).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..broker import Left, Queued, Subscription
from ..ends import POLICY_VIOLATION, EndReason
from ..errors import BadRequest, MeshError
from ..events import CommandIssued, Event, MessagePosted, error_frame, frame_of
from ..logs import log_session
from ..services.authz import Actor
from ..services.delivery import Feed, parse_since
from ..services.validation import is_client_id
from ..wire import Fields, parse_json_object
from ._sends import Sends
from .replies import error_reply, retry_after
from .transport import CLOSE_TIMEOUT, ConnectionClosed, FrameTooLarge, Written

if TYPE_CHECKING:
    from ..config import Settings
    from ..security import Tokens
    from ..services.accounts import Accounts
    from ..services.commands import Commands
    from ..services.delivery import Delivery
    from ..services.messages import Messages
    from ..services.presence import Presence
    from ..services.rooms import Rooms
    from ..services.search import Search
    from ..services.seats import Seats
    from ..services.tasks import Tasks
    from ..services.world import World

__all__ = ["FRAME_TYPES", "SETTLE_TIMEOUT", "ProtocolSession", "SessionServices", "SessionSocket"]

log = logging.getLogger(__name__)

#: seconds the sends still queued when a session ends may take to be stored
#: (they are awaited past the session's cancellation); the rest are dropped
SETTLE_TIMEOUT = 5.0
#: the close code for a node going away (RFC 6455 §7.4.1)
GOING_AWAY = 1001


class SessionSocket(Protocol):
    """What a session uses of its socket: the node's own
    :class:`~quart_mesh.realtime.transport.WebSocket`, or the adapter over an
    ASGI server's (:class:`~quart_mesh.realtime.quart_ws.QuartWebSocket`).
    The socket owns the bytes: the session hands it frames' text (through
    :meth:`encode`) and reads whole messages.

    ``receive`` returns a text message as ``str`` and a binary one as
    ``bytes`` (parsed as UTF-8 JSON all the same), raises
    :class:`ConnectionClosed` once the client is gone and
    :class:`FrameTooLarge` for a message over the limit; sends raise
    :class:`ConnectionClosed`.
    """

    #: whether :meth:`write_now` may write
    writes_now: bool

    #: the end of a frame begun by :meth:`write_now` is still to be written
    #: (:meth:`send_frames`, even with no frames, writes it first)
    @property
    def owes(self) -> bool: ...

    def keep_alive(self, ping_interval: float, idle_timeout: float) -> None: ...

    def encode(self, event: Event | None, frame: str) -> bytes:
        """*frame*'s bytes as this socket sends them (for an event, made
        once and shared by every session that sends it)."""
        ...

    def write_now(self, frames: list[bytes]) -> Written | None: ...

    async def receive(self) -> str | bytes: ...

    # armed only when the write has to wait (transport.WebSocket.send_frames)
    async def send_frames(
        self,
        frames: Iterable[bytes],
        *,
        timeout: float = ...,  # noqa: ASYNC109
    ) -> None: ...

    async def send_text(self, text: str) -> None: ...

    async def close(self, code: int, reason: str = "") -> None: ...


@dataclass(frozen=True, slots=True)
class SessionServices:
    """What a WebSocket session uses: the same services the REST handlers call."""

    settings: Settings
    delivery: Delivery
    tokens: Tokens
    accounts: Accounts
    presence: Presence
    world: World
    rooms: Rooms
    messages: Messages
    commands: Commands
    seats: Seats
    search: Search
    tasks: Tasks


@dataclass(frozen=True, slots=True)
class _Auth:
    """What ``authenticate`` established."""

    actor: Actor
    since: int | None
    #: the token's expiry (unix seconds): the session ends then
    expires_at: int
    token_id: str
    #: whether delivered messages move read positions (``autoRead``, default true)
    auto_read: bool


class _State(enum.Enum):
    """Where an authenticated session is in its life."""

    #: auth_ok, the snapshot and the catch-up go out; then frames are read
    LIVE = enum.auto()
    #: the session ends itself (the client went, a farewell is under way,
    #: the store failed at the start): the token's expiry no longer applies
    ENDING = enum.auto()
    #: its nursery is closing (its tasks cancelled, queued sends still being
    #: stored): no writer task starts any more; nothing more is written but
    #: the farewell of a token that expired meanwhile
    CLOSING = enum.auto()


class ProtocolSession:
    """One authenticated client on one WebSocket (the protocol; the socket is
    a :class:`SessionSocket`)."""

    __slots__ = (
        "_auto_read",
        "_nursery",
        "_sends",
        "_state",
        "_sub",
        "_writer_done",
        "actor",
        "client",
        "services",
        "ws",
    )

    def __init__(
        self, services: SessionServices, ws: SessionSocket, *, client: str | None = None
    ) -> None:
        self.services = services
        self.ws = ws
        #: the client's address (behind trusted proxies, the forwarded one)
        self.client = client
        self.actor: Actor | None = None
        self._auto_read = True
        self._nursery: trio.Nursery
        self._sub: Subscription
        #: made on the first send: most sessions never send
        self._sends: Sends | None = None
        self._state = _State.LIVE
        #: set when a writer task has ended the session's writing (its
        #: farewell, if any, is out; or the client is gone)
        self._writer_done = trio.Event()

    # lifecycle ---------------------------------------------------------------

    async def run(self) -> None:
        auth = await self._authenticate()
        if auth is None:
            return
        # the session holds a seat of its participant and address while it lasts
        with contextlib.ExitStack() as seat:
            try:
                seat.enter_context(
                    self.services.seats.hold("session", auth.actor.participant_id, self.client)
                )
            except MeshError as error:  # too_many_sessions: 1008, as other refusals
                await self._refuse(error.message, error.code)
                return
            await self._run_authenticated(auth)

    async def _run_authenticated(self, auth: _Auth) -> None:
        settings = self.services.settings
        # pings and the idle timeout: a silent client ends its session (offline)
        self.ws.keep_alive(settings.ws_ping_interval, settings.ws_idle_timeout)
        actor = auth.actor
        self.actor = actor
        self._auto_read = auth.auto_read
        session_id = secrets.token_hex(6)
        started = time.monotonic()
        log_session("session_start", session_id, actor.participant_id, client=self.client)
        failed = False
        try:
            await self._serve(auth)
        except Exception:
            failed = True
            raise
        finally:
            log_session(
                "session_end",
                session_id,
                actor.participant_id,
                duration=time.monotonic() - started,
                reason="error" if failed else self._end_reason(),
                client=self.client,
            )

    def _end_reason(self) -> str:
        """Why the session ended, for the log: the subscription's failure
        (``lagging``, ``expired``, ``signed_out``, ``revoked``, ``removed``,
        ``unavailable``), ``shutdown`` when it was cancelled from outside
        (the node shutting down), else ``closed``."""
        sub: Subscription | None = getattr(self, "_sub", None)
        if sub is not None and sub.failed is not None and sub.failed is not EndReason.CLOSED:
            return sub.failed.value
        if trio.current_effective_deadline() == -math.inf:
            return "shutdown"
        return "closed"

    async def _serve(self, auth: _Auth) -> None:
        """The authenticated session, until it ends."""
        actor = auth.actor
        services = self.services
        # tool-only ``simple`` bots are not sent chat traffic (docs/agents.md)
        chat = actor.type != "simple"
        # a cursor past the newest message (from before a restore) resumes from it
        since = None if auth.since is None else await services.delivery.resume_point(auth.since)
        with await services.delivery.follow(actor, chat=chat, token_id=auth.token_id) as feed:
            sub = feed.sub
            self._sub = sub
            sub.hold()  # live events wait until auth_ok, snapshot and replay are out
            # the token's expiry (unix seconds) on trio's clock: the session
            # ends then, and the client authenticates again with a new one
            # (``token_expired``, as REST answers then)
            expiry = trio.current_time() + max(0.0, auth.expires_at - time.time())
            async with (
                services.presence.attached(actor.participant_id),
                trio.open_nursery() as nursery,
            ):
                self._nursery = nursery
                # no task and no scope of its own for the expiry: the nursery's
                nursery.cancel_scope.deadline = expiry
                # the writer task runs only while there is something to write
                # (this start's frames, what a direct write did not take, a
                # farewell): the subscription starts it (_wake_writer)
                sub.park(self._wake_writer)
                try:
                    try:
                        await self._start(actor, since, feed)
                    except MeshError as error:  # e.g. the store is unavailable
                        self._end_itself()
                        sub.push(None, error_frame(error.message, error.code))
                        sub.fail(EndReason.UNAVAILABLE)
                        # the writer says so (its farewell is bounded), or finds
                        # the client gone; either way the session ends then
                        await self._writer_done.wait()
                        nursery.cancel_scope.cancel()
                        return
                    if self.ws.writes_now:  # live: the broker may write to the client
                        sub.write_directly(self._write_directly)
                    try:
                        await self._reader(actor, sub)
                    finally:  # the client is gone, or the session is cancelled
                        if self._sends is not None:  # what it read is still stored, for a while
                            self._sends.settle_by(trio.current_time() + SETTLE_TIMEOUT)
                    self._end_itself()
                    nursery.cancel_scope.cancel()  # the nursery still waits for the sends
                finally:
                    await self._closed(sub, expiry)

    def _end_itself(self) -> None:
        """The session ends itself: its token's expiry no longer applies.
        The state only moves on (a writer that runs while the nursery is
        closing leaves it closing)."""
        if self._state is _State.LIVE:
            self._state = _State.ENDING

    async def _closed(self, sub: Subscription, expiry: float) -> None:
        """The session's nursery is closing (its tasks are cancelled; queued
        sends are still being stored): nothing more is written to the client
        but, if its token expired meanwhile, why — now, not after the sends."""
        ended_itself = self._state is _State.ENDING
        self._state = _State.CLOSING  # no writer task starts any more
        sub.write_directly(None)
        sub.unpark()  # deliveries from now on wait for nobody
        if ended_itself or sub.failed is not None or trio.current_time() < expiry:
            return  # ended for another reason (which the writer said, if any)
        sub.fail(EndReason.EXPIRED)  # the nursery's deadline: the token expired
        with trio.CancelScope(shield=True):  # inside the cancelled nursery
            await self._farewell(sub)

    async def _authenticate(self) -> _Auth | None:
        timeout = self.services.settings.auth_timeout
        try:
            with trio.fail_after(timeout):
                text = await self.ws.receive()
        except trio.TooSlowError:
            await self._refuse(f"authenticate within {timeout:g} seconds", "auth_timeout")
            return None
        except FrameTooLarge:
            await self._refuse("the first frame must be authenticate", "auth_required")
            return None
        except ConnectionClosed:
            return None
        try:
            fields = Fields(parse_json_object(text))
            if fields.data.get("type") != "authenticate":
                raise BadRequest("the first frame must be authenticate", "auth_required")
            token = fields.req_str("token")
            since = parse_since(fields.data.get("since"))
            auto_read = fields.opt_bool("autoRead") is not False
            actor = await self.services.accounts.authenticate(token)
            claims = self.services.tokens.check(token)
        except MeshError as error:
            await self._refuse(error.message, error.code)
            return None
        return _Auth(actor, since, claims.expires_at, claims.token_id, auto_read)

    async def _refuse(self, message: str, code: str) -> None:
        with trio.move_on_after(self.services.settings.ws_send_timeout):
            try:
                await self.ws.send_text(error_frame(message, code))
            except ConnectionClosed:
                return
        await self.ws.close(POLICY_VIOLATION, code)

    async def _start(self, actor: Actor, since: int | None, feed: Feed) -> None:
        sub = feed.sub
        sub.push(None, frame_of({"type": "auth_ok", "participantId": actor.participant_id}))
        sub.push(None, await self.services.world.snapshot_frame(actor))
        # missed messages (on resume) and the commands that waited for this agent
        limit = self.services.settings.max_replay
        # commands wait only for agents, and every agent is a bot
        backlog = await feed.backlog(
            since, limit, messages=since is not None, commands=actor.kind == "bot"
        )
        if not await feed.replay(backlog):
            return
        if backlog.truncated:
            await sub.put(
                None,
                error_frame(
                    f"more than {limit} messages were missed; page the rest with "
                    "GET /api/rooms/:roomId/messages?since=<cursor>",
                    "replay_truncated",
                ),
            )
        replayed_to = backlog.messages[-1].seq if backlog.messages else since
        await feed.go_live(replayed_to)

    # writer ------------------------------------------------------------------

    def _wake_writer(self) -> None:
        """The subscription's waker (:meth:`Subscription.park`): start the
        writer task, unless the session is closing."""
        if self._state is not _State.CLOSING:
            self._nursery.start_soon(self._writer, self._sub)

    async def _writer(self, sub: Subscription) -> None:
        """Write what the subscription holds, then park it and end while it
        is live; once it has ended, say why (the farewell) and end the session."""
        scope = self._nursery.cancel_scope
        timeout = self.services.settings.ws_send_timeout
        parked = False
        try:
            farewell = await self._deliver(sub, scope, timeout)
            if farewell and sub.failed is None:
                sub.park(self._wake_writer)  # nothing to write: no task until there is
                parked = True
                return
            if not farewell:
                return
            # the session ends with this farewell, whatever the token's expiry
            self._end_itself()
            scope.deadline = math.inf
            await self._farewell(sub)
        except BaseException:
            scope.cancel()
            raise
        finally:
            if not parked:
                self._writer_done.set()
        scope.cancel()

    async def _deliver(
        self, sub: Subscription, scope: trio.CancelScope, send_timeout: float
    ) -> bool:
        """Write what the subscription holds now; whether the client is still
        there (to be told why, if the subscription ended): not if it went
        (``closed``: the session goes on until the reader has handed over
        what it read) or stopped reading for *send_timeout* seconds (*scope*
        is cancelled)."""
        ws = self.ws
        # a frame a direct write began is finished even if nothing follows it
        while (batch := sub.take()) or ws.owes:
            try:
                # within the send timeout if it has to wait for the client
                await ws.send_frames(
                    [ws.encode(event, frame) for event, frame in batch], timeout=send_timeout
                )
            except ConnectionClosed:
                # the client closed or hung up: the session goes on until the
                # reader has handed over what it read before (its sends are
                # stored); nothing drains ``sub`` now
                sub.fail(EndReason.CLOSED)
                return False
            except trio.TooSlowError:
                self._end_itself()
                scope.cancel()  # the session ends, with no farewell
                return False
            self._note_delivered(batch)
            # not kept while waiting: the last batch of an idle session is
            # often its snapshot (125 KiB with 500 participants)
            del batch
        return True

    def _write_directly(self, batch: list[Queued]) -> Left | None:
        """The broker's direct write of *batch* (``Subscription.write_directly``):
        None if nothing could be written now (the writer task writes it),
        else what is left for the writer task (noted as delivered only once
        the writer has written it), and whether the socket owes the end of a
        frame it began (the writer task finishes it)."""
        ws = self.ws
        try:
            written = ws.write_now([ws.encode(event, frame) for event, frame in batch])
        except ConnectionClosed:
            return None  # the writer task finds out, and ends the session
        if written is None:
            return None
        try:  # a frame begun is the client's: the socket sends its end first
            self._note_delivered(batch[: written.taken])
        except Exception:  # written already: never to be written again
            log.exception("noting a direct write failed")
        return Left(batch[written.taken :], written.owed)

    async def _farewell(self, sub: Subscription) -> None:
        """Tell the client why its subscription ended (``ends.ENDINGS``: an
        ``error`` frame, then the close code) — to a client that may have
        stopped reading, so within a short deadline (then the socket resets
        it); a client that is gone is not told."""
        ending = sub.ending
        if ending is None or not ending.farewell:
            return
        timeout = min(self.services.settings.ws_send_timeout, CLOSE_TIMEOUT)
        with trio.move_on_after(timeout), contextlib.suppress(ConnectionClosed):
            if ending.code is not None:
                await self.ws.send_text(error_frame(ending.text, ending.code))
            await self.ws.close(ending.close_code, ending.close_reason)

    def _note_delivered(self, batch: list[Queued]) -> None:
        """Delivered messages count as read (written in batches by the world),
        unless the client marks what was read itself (``autoRead: false``);
        delivered commands are marked so (in the background)."""
        assert self.actor is not None
        commands: list[str] = []
        for event, _ in batch:
            if isinstance(event, MessagePosted) and self._auto_read:
                message = event.message
                self.services.world.note_read(
                    self.actor.participant_id, message.room_id, message.seq
                )
            elif isinstance(event, CommandIssued):
                commands.append(event.command_id)
        if commands:
            self._nursery.start_soon(self._mark_delivered, commands)

    async def _mark_delivered(self, command_ids: list[str]) -> None:
        # shielded (for a while): written to the socket, they are delivered
        # even if the session ends now; unmarked, the next connection would
        # get them again
        with trio.CancelScope(shield=True), trio.move_on_after(SETTLE_TIMEOUT) as waited:
            try:
                await self.services.commands.mark_delivered(command_ids)
            except MeshError:  # the store is unavailable: they are delivered again next time
                log.warning("could not mark commands %s delivered", command_ids)
        if waited.cancelled_caught:
            log.warning(
                "marking commands %s delivered took too long: they may be sent again", command_ids
            )

    # reader ------------------------------------------------------------------

    async def _reader(self, actor: Actor, sub: Subscription) -> None:
        while True:
            try:
                text = await self.ws.receive()
            except ConnectionClosed:
                return
            except FrameTooLarge:
                limit = self.services.settings.max_frame_bytes
                sub.push(
                    None, error_frame(f"frames may be at most {limit} bytes", "frame_too_large")
                )
                continue
            await self._handle(actor, sub, text)

    async def _handle(self, actor: Actor, sub: Subscription, text: str | bytes) -> None:
        kind: Any = None
        client_id: Any = None
        try:
            fields = Fields(parse_json_object(text))
            kind = fields.data.get("type")
            client_id = fields.data.get("clientId")
            if not isinstance(kind, str):
                raise BadRequest("every frame needs a string type", "missing_type")
            handler = _HANDLERS.get(kind)
            if handler is None:
                if kind == "authenticate":
                    raise BadRequest("already authenticated", "already_authenticated")
                raise BadRequest(f"unknown frame type {kind[:40]!r}", "unknown_type")
            # as it is now: a role changed since authenticating applies at once
            current = await self.services.accounts.actor_of(actor.participant_id)
            await handler(self, current or actor, fields)
        except MeshError as error:
            sub.push(
                None, error_reply(error.message, error.code, kind, retry_after(error), client_id)
            )
        except Exception:
            log.exception("frame %r failed", kind)
            message = "internal error handling this frame"
            sub.push(None, error_reply(message, "internal_error", kind, None, client_id))

    async def _join_room(self, actor: Actor, f: Fields) -> None:
        await self.services.rooms.join(actor, f.req_str("roomId"))

    async def _leave_room(self, actor: Actor, f: Fields) -> None:
        await self.services.rooms.leave(actor, f.req_str("roomId"))

    async def _send_message(self, actor: Actor, f: Fields) -> None:
        # queued now, awaited in the background (``_sends.py``): a client may
        # pipeline sends (they are stored in the order sent)
        client_id = f.opt_str("clientId")

        def submit() -> Awaitable[object]:  # once it has a slot
            return self.services.messages.submit_send(
                actor,
                f.req_str("roomId"),
                f.req_str("content"),
                to=f.opt_str("to"),
                thread_id=f.opt_str("threadId"),
                attachments=f.data.get("attachments"),
                client_id=client_id,
            )

        sends = self._sends
        if sends is None:
            sends = self._sends = Sends(self._nursery, self._sub)
        await sends.queue(submit, client_id)

    async def _edit_message(self, actor: Actor, f: Fields) -> None:
        await self.services.messages.edit(actor, f.req_str("messageId"), f.req_str("content"))

    async def _delete_message(self, actor: Actor, f: Fields) -> None:
        await self.services.messages.delete(actor, f.req_str("messageId"))

    async def _add_reaction(self, actor: Actor, f: Fields) -> None:
        await self.services.messages.add_reaction(actor, f.req_str("messageId"), f.req_str("emoji"))

    async def _remove_reaction(self, actor: Actor, f: Fields) -> None:
        await self.services.messages.remove_reaction(
            actor, f.req_str("messageId"), f.req_str("emoji")
        )

    async def _typing(self, actor: Actor, f: Fields) -> None:
        self.services.messages.typing(actor, f.req_str("roomId"))

    async def _mark_read(self, actor: Actor, f: Fields) -> None:
        cursor = f.data.get("cursor")
        if cursor is None:
            raise BadRequest("cursor is required", "missing_field")
        await self.services.world.mark_room_read(actor, f.req_str("roomId"), cursor)

    async def _command_result(self, actor: Actor, f: Fields) -> None:
        await self.services.commands.complete_command(
            actor,
            f.req_str("commandId"),
            ok=f.opt_bool("ok") is not False,
            result=f.data.get("result"),
        )

    async def _search(self, actor: Actor, f: Fields) -> None:
        limit = f.opt_number("limit")
        if limit is not None and not limit.is_integer():
            raise BadRequest("limit must be a whole number", "invalid_limit")
        page = await self.services.search.search(
            actor,
            f.opt_str("q"),
            room=f.opt_str("room"),
            sender=f.opt_str("from"),
            before=f.opt_str("before"),
            after=f.opt_str("after"),
            within=f.opt_str("in"),
            has=f.opt_str("has"),
            mentions=f.opt_str("mentions"),
            sort=f.opt_str("sort"),
            cursor=f.opt_str("cursor"),
            limit=None if limit is None else int(limit),
        )
        payload: dict[str, Any] = {"type": "search_results", **page.to_json()}
        client_id = f.data.get("clientId")
        if isinstance(client_id, str) and is_client_id(client_id):
            payload["clientId"] = client_id
        self._sub.push(None, frame_of(payload))

    # tasks: success is seen as the task_created / task_updated event

    async def _task_create(self, actor: Actor, f: Fields) -> None:
        await self.services.tasks.create(
            actor,
            room_id=f.req_str("roomId"),
            agent_id=f.req_str("agentId"),
            content=f.req_str("content"),
            title=f.opt_str("title"),
            via="ws",
        )

    async def _task_update(self, actor: Actor, f: Fields) -> None:
        await self.services.tasks.update(
            actor,
            f.req_str("taskId"),
            state=f.req_str("state"),
            message=f.opt_str("message"),
            result=f.opt_str("result"),
        )

    async def _task_cancel(self, actor: Actor, f: Fields) -> None:
        await self.services.tasks.cancel(actor, f.req_str("taskId"))

    async def _task_reply(self, actor: Actor, f: Fields) -> None:
        await self.services.tasks.reply(actor, f.req_str("taskId"), f.req_str("content"))

    async def _move(self, actor: Actor, f: Fields) -> None:
        room_id = f.req_str("roomId")
        x, y, z = f.req_number("x"), f.req_number("y"), f.req_number("z")
        await self.services.world.move(actor, room_id, x, y, z)


#: the handler of each frame type (one table for every session)
_HANDLERS: dict[str, Callable[[ProtocolSession, Actor, Fields], Awaitable[None]]] = {
    "join_room": ProtocolSession._join_room,
    "leave_room": ProtocolSession._leave_room,
    "send_message": ProtocolSession._send_message,
    "edit_message": ProtocolSession._edit_message,
    "delete_message": ProtocolSession._delete_message,
    "add_reaction": ProtocolSession._add_reaction,
    "remove_reaction": ProtocolSession._remove_reaction,
    "typing": ProtocolSession._typing,
    "mark_read": ProtocolSession._mark_read,
    "move": ProtocolSession._move,
    "command_result": ProtocolSession._command_result,
    "search": ProtocolSession._search,
    "task_create": ProtocolSession._task_create,
    "task_update": ProtocolSession._task_update,
    "task_cancel": ProtocolSession._task_cancel,
    "task_reply": ProtocolSession._task_reply,
}


#: the frame types a client may send once authenticated
FRAME_TYPES = frozenset(_HANDLERS)
