"""The mesh WebSocket protocol (spec §4.17, §5.6, §6), over any transport.

A :class:`ProtocolSession` authenticates the first frame, subscribes its participant
to the broker, sends ``auth_ok`` and ``snapshot`` (and, on resume, the
missed messages), then runs two tasks in its own nursery: a reader that turns
client frames into service calls, and a writer that drains the
subscription in batches. When either ends, the other is cancelled, except
that a writer that finds the connection closed leaves the reader to hand
over the frames it had read; the sends they queued are awaited past the
session's end (for at most ``SETTLE_TIMEOUT`` seconds).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..broker import Queued, Subscription
from ..errors import BadRequest, MeshError, Overloaded, RateLimited
from ..events import CommandIssued, Event, MessagePosted, error_frame, frame_of
from ..logs import log_session
from ..services.authz import Actor
from ..services.delivery import Feed, parse_since
from ..services.validation import is_client_id
from ..wire import Fields, parse_json_object
from .transport import (
    CLOSE_TIMEOUT,
    ConnectionClosed,
    FrameTooLarge,
    encode_text_frame,
)

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

#: close codes
POLICY_VIOLATION = 1008
#: sends of one session queued but not yet stored
_MAX_IN_FLIGHT = 64
#: seconds the sends still queued when a session ends may take to be stored
#: (they are awaited past the session's cancellation); the rest are dropped
SETTLE_TIMEOUT = 5.0
GOING_AWAY = 1001
TRY_AGAIN_LATER = 1013


def _wire(event: Event | None, frame: str | bytes) -> bytes:
    """The encoded WebSocket frame, shared by every session that sends it."""
    if isinstance(frame, bytes):  # encoded already: what a direct write left
        return frame
    if event is None:
        return encode_text_frame(frame.encode("utf-8"))
    return event.cached("ws", lambda: encode_text_frame(frame.encode("utf-8")))


class SessionSocket(Protocol):
    """What a session uses of its socket: the node's own
    :class:`~quart_mesh.realtime.transport.WebSocket`, or the adapter over an
    ASGI server's (:class:`~quart_mesh.realtime.quart_ws.QuartWebSocket`).

    ``receive`` raises :class:`ConnectionClosed` once the client is gone and
    :class:`FrameTooLarge` for a message over the limit; sends raise
    :class:`ConnectionClosed`; ``send_frames`` takes frames encoded by
    :func:`encode_text_frame`.
    """

    #: whether :meth:`write_now` may write
    writes_now: bool

    def keep_alive(self, ping_interval: float, idle_timeout: float) -> None: ...

    def write_now(self, frames: list[bytes]) -> list[bytes] | None: ...

    async def receive(self) -> str: ...

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


class _Sends:
    """A session's sends queued in the store, oldest first, awaited in turn
    by its settler; made on the session's first send."""

    __slots__ = ("more", "queued", "slots")

    def __init__(self) -> None:
        #: bounds the sends queued and not yet stored
        self.slots = trio.Semaphore(_MAX_IN_FLIGHT)
        self.queued: collections.deque[tuple[Awaitable[object], str | None]] = collections.deque()
        self.more = trio.Event()


class ProtocolSession:
    """One authenticated client on one WebSocket (the protocol; the socket is
    a :class:`SessionSocket`)."""

    __slots__ = (
        "_auto_read",
        "_closing",
        "_ending",
        "_nursery",
        "_sends",
        "_settle_by",
        "_settler_started",
        "_settling",
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
        self._sends: _Sends | None = None
        self._settler_started = False
        #: the shielded wait of the send being awaited, and when such waits
        #: must end (see _settle_sends)
        self._settling: trio.CancelScope | None = None
        self._settle_by = math.inf
        #: set when a writer task has ended the session's writing (its
        #: farewell, if any, is out; or the client is gone)
        self._writer_done = trio.Event()
        #: the session's nursery is closing: no writer task starts any more
        self._closing = False
        #: the session ends itself (the client went, a farewell is under way):
        #: the token's expiry no longer applies
        self._ending = False

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
        if sub is not None and sub.failed is not None and sub.failed != "closed":
            return sub.failed
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
                        self._ending = True
                        sub.push(None, error_frame(error.message, error.code))
                        sub.fail("unavailable")
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
                        self._settle_sends()
                    self._ending = True
                    nursery.cancel_scope.cancel()  # the nursery still waits for the sends
                finally:
                    await self._closed(sub, expiry)

    async def _closed(self, sub: Subscription, expiry: float) -> None:
        """The session's nursery is closing (its tasks are cancelled; queued
        sends are still being stored): nothing more is written to the client
        but, if its token expired meanwhile, why — now, not after the sends."""
        self._closing = True  # no writer task starts any more
        sub.write_directly(None)
        sub.unpark()  # deliveries from now on wait for nobody
        if self._ending or sub.failed is not None or trio.current_time() < expiry:
            return  # ended for another reason (which the writer said, if any)
        sub.fail("expired")  # the nursery's deadline: the token expired
        timeout = min(self.services.settings.ws_send_timeout, CLOSE_TIMEOUT)
        with (
            trio.CancelScope(shield=True),  # inside the cancelled nursery
            trio.move_on_after(timeout),
            contextlib.suppress(ConnectionClosed),
        ):
            await self._ended(sub)

    def _settle_sends(self) -> None:
        """The session is ending: the sends it queued are still awaited (what
        was read off the socket is stored), for at most
        :data:`SETTLE_TIMEOUT` seconds from now."""
        self._settle_by = trio.current_time() + SETTLE_TIMEOUT
        if self._settling is not None:
            self._settling.deadline = self._settle_by

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
        writer task, unless the session is ending."""
        if not self._closing:
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
            self._ending = True
            scope.deadline = math.inf
            # the farewell (error, close frame) to a client that may have
            # stopped reading: a short deadline, then a reset
            with (
                trio.move_on_after(min(timeout, CLOSE_TIMEOUT)),
                contextlib.suppress(ConnectionClosed),
            ):
                await self._ended(sub)
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
        while batch := sub.take():
            try:
                # within the send timeout if it has to wait for the client
                await self.ws.send_frames(
                    [_wire(event, frame) for event, frame in batch], timeout=send_timeout
                )
            except ConnectionClosed:
                # the client closed or hung up: the session goes on until the
                # reader has handed over what it read before (its sends are
                # stored); nothing drains ``sub`` now
                sub.fail("closed")
                return False
            except trio.TooSlowError:
                self._ending = True
                scope.cancel()  # the session ends, with no farewell
                return False
            self._note_delivered(batch)
            # not kept while waiting: the last batch of an idle session is
            # often its snapshot (125 KiB with 500 participants)
            del batch
        return True

    def _write_directly(self, batch: list[Queued]) -> list[Queued] | None:
        """The broker's direct write of *batch* (``Subscription.write_directly``):
        None if nothing could be written now (the writer task writes it),
        else what is left for the writer task (encoded already, with their
        events, noted as delivered only once the writer has written them)."""
        try:
            left = self.ws.write_now([_wire(event, frame) for event, frame in batch])
        except ConnectionClosed:
            return None  # the writer task finds out, and ends the session
        if left is None:
            return None
        if left == [b""]:  # only the end of a frame is owed: sent first, whatever comes
            rest: list[Queued] = [(None, b"")]
            written = batch
        else:
            written = batch[: len(batch) - len(left)]
            rest = [
                (event, frame)
                for (event, _), frame in zip(batch[len(written) :], left, strict=True)
            ]
        try:
            self._note_delivered(written)
        except Exception:  # written already: never to be written again
            log.exception("noting a direct write failed")
        return rest

    async def _ended(self, sub: Subscription) -> None:
        if sub.failed == "unavailable":
            await self.ws.close(TRY_AGAIN_LATER, "unavailable")
        elif sub.failed == "lagging":
            text = "this connection fell too far behind; reconnect with since=<last cursor>"
            await self.ws.send_text(error_frame(text, "lagging"))
            await self.ws.close(TRY_AGAIN_LATER, "lagging")
        elif sub.failed == "removed":
            await self.ws.send_text(error_frame("this participant was removed", "removed"))
            await self.ws.close(POLICY_VIOLATION, "removed")
        elif sub.failed == "expired":
            text = "the token has expired; authenticate again with a new one"
            await self.ws.send_text(error_frame(text, "token_expired"))
            await self.ws.close(POLICY_VIOLATION, "token_expired")
        elif sub.failed == "revoked":  # a guest, and the mesh went private
            text = "guest access to this mesh has ended"
            await self.ws.send_text(error_frame(text, "token_revoked"))
            await self.ws.close(POLICY_VIOLATION, "token_revoked")
        elif sub.failed == "signed_out":  # POST /api/auth/logout with this token
            await self.ws.send_text(error_frame("this token was signed out", "token_revoked"))
            await self.ws.close(POLICY_VIOLATION, "token_revoked")

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

    async def _handle(self, actor: Actor, sub: Subscription, text: str) -> None:
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
            sub.push(None, _error(error.message, error.code, kind, _retry_after(error), client_id))
        except Exception:
            log.exception("frame %r failed", kind)
            text = "internal error handling this frame"
            sub.push(None, _error(text, "internal_error", kind, None, client_id))

    async def _join_room(self, actor: Actor, f: Fields) -> None:
        await self.services.rooms.join(actor, f.req_str("roomId"))

    async def _leave_room(self, actor: Actor, f: Fields) -> None:
        await self.services.rooms.leave(actor, f.req_str("roomId"))

    async def _send_message(self, actor: Actor, f: Fields) -> None:
        # queued now, awaited in the background: a client may pipeline sends
        # (they are stored in the order sent); the semaphore bounds how many
        client_id = f.opt_str("clientId")
        # a slot first: a send queued here is always awaited by _settler,
        # even if the session ends while this one waits for room. Taken
        # without a pass through the scheduler while there is room, so the
        # frames of one read are all queued before the store's writer runs
        # (one batch for them, not one each); a full window waits
        sends = self._sends
        if sends is None:
            sends = self._sends = _Sends()
        try:
            sends.slots.acquire_nowait()
        except trio.WouldBlock:
            await sends.slots.acquire()
        try:
            stored = self.services.messages.submit_send(
                actor,
                f.req_str("roomId"),
                f.req_str("content"),
                to=f.opt_str("to"),
                thread_id=f.opt_str("threadId"),
                attachments=f.data.get("attachments"),
                client_id=client_id,
            )
        except BaseException:
            sends.slots.release()
            raise
        if not self._settler_started:  # on the first send (no task for sessions that never send)
            self._settler_started = True
            self._nursery.start_soon(self._settler)
        sends.queued.append((stored, client_id))
        sends.more.set()
        self._sub.sending = True

    async def _settler(self) -> None:
        """Await the queued sends in the order queued (the order the store
        commits them) and report failures. One task for all of a session's
        sends, not one each. Each wait is shielded: cancelling the session
        would withdraw the unit from the store's queue, so what was queued is
        awaited until stored, or until :meth:`_settle_sends`'s deadline. The
        task ends (cancelled) once nothing is queued; what is queued after
        that (the reader hands over frames it had read already, passing no
        checkpoint) is awaited on the way out, or by a new one."""
        sends = self._sends
        assert sends is not None  # started by the first send
        queued = sends.queued
        try:
            while True:
                while not queued:
                    self._sub.sending = False
                    await sends.more.wait()
                    sends.more = trio.Event()
                await self._settle_first()
        finally:
            while queued:  # shielded waits: they run though this task is cancelled
                await self._settle_first()
            self._settler_started = False

    async def _settle_first(self) -> None:
        sends = self._sends
        assert sends is not None
        queued = sends.queued
        stored, client_id = queued[0]
        with trio.CancelScope(shield=True, deadline=self._settle_by) as settling:
            self._settling = settling
            try:
                await self._stored_or_error(stored, client_id)
            finally:
                self._settling = None
                queued.popleft()
                sends.slots.release()
        if settling.cancelled_caught:
            log.warning("a send queued by a session that ended was not stored in time")

    async def _stored_or_error(self, stored: Awaitable[object], client_id: str | None) -> None:
        try:
            await stored
        except MeshError as error:
            retry_after = _retry_after(error)
            self._sub.push(
                None, _error(error.message, error.code, "send_message", retry_after, client_id)
            )
        except Exception:
            log.exception("send_message failed")
            self._sub.push(
                None, _error("internal error", "internal_error", "send_message", None, client_id)
            )

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


def _error(
    message: str,
    code: str,
    frame_type: Any,
    retry_after: float | None = None,
    client_id: Any = None,
) -> str:
    payload: dict[str, Any] = {"type": "error", "message": message, "code": code}
    if isinstance(frame_type, str):
        payload["frame"] = frame_type[:40]
    if retry_after is not None:
        payload["retryAfter"] = retry_after
    if isinstance(client_id, str) and is_client_id(client_id):
        # which send failed, for a client that gave its sends ids
        payload["clientId"] = client_id
    return frame_of(payload)


def _retry_after(error: MeshError) -> float | None:
    """Seconds until a refused frame would be accepted (``retryAfter``): rate
    limits, and a store with too many writes waiting (``overloaded``)."""
    return error.retry_after if isinstance(error, (RateLimited, Overloaded)) else None
