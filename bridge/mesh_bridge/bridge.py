"""The connection to the node: authenticate, resume, receive, reconnect.

One connection at a time. Each runs three tasks in its own nursery: the
receive loop (which calls the handler for each accepted message, in order, one
at a time), the outbox drain (replies to the node) and a heartbeat (ping every
``PING_INTERVAL`` seconds, because the node sends none and has no idle
timeout). When any of them ends the connection, the others are cancelled and
the bridge reconnects with backoff, resuming after the last handled cursor
(``since``), so the node replays what arrived meanwhile.

Backpressure: while a handler runs, trio-websocket buffers up to
``MESSAGE_QUEUE`` frames and then stops reading the socket; the node then holds
frames for this session until its own buffer overflows and it drops the
session as ``lagging``. Nothing is lost: the bridge resumes from its cursor.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    open_websocket_url,
)
from wsproto.utilities import LocalProtocolError

from mesh_bridge.backoff import Backoff
from mesh_bridge.config import Config
from mesh_bridge.errors import (
    BridgeError,
    Disconnected,
    NodeRefused,
    ResumeAgain,
    TokenRefused,
)
from mesh_bridge.handler import Handler, Outbox
from mesh_bridge.state import load_cursor, save_cursor

log = logging.getLogger("mesh_bridge")

#: Seconds to open the TCP connection and finish the WebSocket handshake.
CONNECT_TIMEOUT = 10.0
#: Seconds to wait for ``auth_ok`` and the snapshot after ``authenticate``.
AUTH_REPLY_TIMEOUT = 30.0
#: Seconds between pings, and to wait for each pong.
PING_INTERVAL = 20.0
PONG_TIMEOUT = 20.0
#: Seconds for the closing handshake.
CLOSE_TIMEOUT = 2.0
#: Frames trio-websocket buffers while a handler runs.
MESSAGE_QUEUE = 1024
#: Largest frame accepted from the node (a snapshot lists every room and
#: participant, so it can be large).
MAX_FRAME_CHARS = 64 << 20

#: Error codes (``error`` frame while authenticating, or close reason with
#: code 1008) that trying again with the same token cannot fix.
TOKEN_CODES = frozenset(
    {
        "auth_required",
        "invalid_json",
        "missing_field",
        "invalid_field",
        "invalid_cursor",
        "unauthorized",
        "invalid_token",
        "token_expired",
        "removed",
    }
)
#: Participant types that are people; every other type is a bot.
PEOPLE = frozenset({"human", "guest"})


class Bridge:
    """Feeds a node's messages to *handler* and its replies (from *outbox*)
    back to the node, across reconnects, until cancelled.

    The cursor (the last handled message's ``cursor``) advances only after
    ``handler.handle`` returned, and is saved to ``config.state_file`` if set.
    """

    def __init__(self, config: Config, handler: Handler, outbox: Outbox) -> None:
        self.config = config
        self.handler = handler
        self.outbox = outbox
        self.cursor: str | None = None
        self.me: str | None = None
        self.bots: set[str] = set()
        self._stopping = False
        self._run_scope: trio.CancelScope | None = None
        self._session_scope: trio.CancelScope | None = None

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self) -> None:
        """Make ``run`` return: an open session is ended gracefully (the
        handler is cancelled, the WebSocket closed with 1000 while its reader
        still runs); anything else (connecting, waiting to reconnect) is
        cancelled at once."""
        self._stopping = True
        if self._session_scope is not None:
            self._session_scope.cancel()
        elif self._run_scope is not None:
            self._run_scope.cancel()

    async def run(self) -> None:
        """Connect, handle and reconnect until ``stop()`` or cancelled.

        Raises:
            TokenRefused: the node refused the token.
            NodeRefused: the address refused the WebSocket upgrade (4xx).
            StateFileError: the state file cannot be read or written.
        """
        if self.config.state_file is not None:
            self.cursor = load_cursor(self.config.state_file, self.config.mesh_url)
            if self.cursor is not None:
                log.info("state file: resuming after cursor %s", self.cursor)
        backoff = Backoff()
        with trio.CancelScope() as self._run_scope:
            while not self._stopping:
                try:
                    await self._connect_once(backoff)
                except ResumeAgain as exc:
                    log.warning("%s", exc)
                except Disconnected as exc:
                    delay = backoff.next_delay()
                    log.warning("%s; reconnecting in %g s", exc, delay)
                    await trio.sleep(delay)
        self._run_scope = None

    async def _connect_once(self, backoff: Backoff) -> None:
        """One connection, from handshake to its end: returns only after
        ``stop()``, otherwise raises.

        Raises:
            Disconnected: the connection failed or ended; try again.
            BridgeError: trying again cannot help.
        """
        url = self.config.mesh_url
        try:
            async with open_websocket_url(
                url,
                message_queue_size=MESSAGE_QUEUE,
                max_message_size=MAX_FRAME_CHARS,
                connect_timeout=CONNECT_TIMEOUT,
                disconnect_timeout=CLOSE_TIMEOUT,
            ) as ws:
                try:
                    await self._session(ws, backoff)
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
                        await ws.aclose()
                    # trio-websocket 0.12.2 leaves the TCP socket open when the
                    # node closed first (its reader stops on EOF)
                    await trio.aclose_forcefully(ws._stream)
        except ConnectionRejected as exc:
            if 400 <= exc.status_code < 500 and exc.status_code not in (408, 429):
                raise NodeRefused(url, exc.status_code) from exc
            raise Disconnected(f"{url} refused the connection (HTTP {exc.status_code})") from exc
        except HandshakeError as exc:
            cause = exc.__cause__ or exc
            raise Disconnected(f"cannot connect to {url}: {_describe(cause)}") from exc
        except LocalProtocolError as exc:
            # trio-websocket 0.12.2 answers a ping that crosses the bridge's
            # own close frame, wsproto refuses that pong, and the reader raises
            # it (python-trio/trio-websocket#184): the connection was ending
            if self._stopping:
                return
            raise Disconnected(f"the connection to {url} ended: {exc}") from exc
        except ConnectionClosed as exc:
            code = exc.reason.code if exc.reason is not None else 1006
            reason = (exc.reason.reason if exc.reason is not None else None) or ""
            if code == 1008 and reason in TOKEN_CODES:
                raise TokenRefused(reason, "the node closed the connection") from exc
            detail = f"{code} {reason}" if reason else str(code)
            raise Disconnected(f"connection closed by the node ({detail})") from exc

    async def _session(self, ws: WebSocketConnection, backoff: Backoff) -> None:
        await self._authenticate(ws)
        backoff.reset()
        # The first task to end the connection wins; the others are cancelled.
        # Expected endings are kept out of the nursery's exception group.
        ended: list[BaseException] = []
        try:
            async with trio.open_nursery() as nursery:
                self._session_scope = nursery.cancel_scope

                async def guard(task: Callable[[], Awaitable[None]]) -> None:
                    try:
                        await task()
                    except (ConnectionClosed, Disconnected, BridgeError) as exc:
                        ended.append(exc)
                        nursery.cancel_scope.cancel()

                nursery.start_soon(guard, lambda: self._heartbeat(ws))
                nursery.start_soon(guard, lambda: self.outbox.drain(ws.send_message))
                await guard(lambda: self._receive(ws))
        finally:
            self._session_scope = None
        if self._stopping:
            return  # the caller closes the WebSocket gracefully
        if ended:
            raise ended[0]
        raise Disconnected("connection ended")  # pragma: no cover (tasks never return)

    async def _authenticate(self, ws: WebSocketConnection) -> None:
        frame: dict[str, str] = {"type": "authenticate", "token": self.config.token}
        if self.cursor is not None:
            frame["since"] = self.cursor  # the node replays every message after it
        await ws.send_message(json.dumps(frame))
        with trio.move_on_after(AUTH_REPLY_TIMEOUT) as deadline:
            answer = await _next_event(ws)
            if answer["type"] == "error":
                code = str(answer.get("code"))
                message = str(answer.get("message"))
                if code in TOKEN_CODES:
                    raise TokenRefused(code, message)
                raise Disconnected(f"authentication failed ({code}): {message}")
            if answer["type"] != "auth_ok" or not isinstance(answer.get("participantId"), str):
                raise Disconnected(f"expected auth_ok, got {answer['type']}")
            snapshot = await _next_event(ws)
            if snapshot["type"] != "snapshot":
                raise Disconnected(f"expected the snapshot, got {snapshot['type']}")
        if deadline.cancelled_caught:
            raise Disconnected(f"no answer to authenticate within {AUTH_REPLY_TIMEOUT:g} s")
        self.me = answer["participantId"]
        participants = snapshot.get("participants")
        self.bots = set()
        self._learn(participants if isinstance(participants, list) else [])
        if self.cursor is None:
            self.cursor = str(snapshot.get("cursor", "0"))
            await self._save_cursor()
            log.info(
                "connected to %s as %s; handling messages after cursor %s",
                self.config.mesh_url,
                self.me,
                self.cursor,
            )
        else:
            log.info(
                "connected to %s as %s; resuming after cursor %s",
                self.config.mesh_url,
                self.me,
                self.cursor,
            )

    def _learn(self, participants: list[Any]) -> None:
        for participant in participants:
            if not isinstance(participant, dict):
                continue
            pid = participant.get("participantId")
            if isinstance(pid, str) and participant.get("type") not in PEOPLE:
                self.bots.add(pid)

    async def _receive(self, ws: WebSocketConnection) -> None:
        while True:
            event = await _next_event(ws)
            kind = event["type"]
            if kind == "message":
                await self._on_message(event)
            elif kind == "participant_joined":
                self._learn([event.get("participant")])
            elif kind == "error":
                self._on_error(event)
            elif kind == "command":
                # handlers take messages only; the command stays unanswered
                log.warning(
                    "command %r (%s) ignored: mesh-bridge passes only messages to its handler",
                    event.get("command"),
                    event.get("commandId"),
                )

    async def _on_message(self, message: dict[str, Any]) -> None:
        sender = message.get("senderId")
        cursor = message.get("cursor")
        if sender == self.me:
            log.debug("own message %s ignored", message.get("messageId"))
        elif sender in self.bots and not self.config.include_bots:
            log.info(
                "message %s from bot %s ignored (--include-bots to handle it)",
                message.get("messageId"),
                message.get("senderName"),
            )
        elif not isinstance(message.get("roomId"), str):
            log.warning("message without a roomId ignored: %r", message)
        else:
            log.info(
                "message %s from %s in room %s",
                message.get("messageId"),
                message.get("senderName"),
                message.get("roomId"),
            )
            await self.handler.handle(message)
        if isinstance(cursor, str):
            self.cursor = cursor
            await self._save_cursor()

    def _on_error(self, event: dict[str, Any]) -> None:
        code = event.get("code")
        if code == "replay_truncated":
            # Everything replayed so far has been handled; a new connection
            # replays the next part of the gap.
            raise ResumeAgain(
                f"the node replayed only part of the missed messages; "
                f"reconnecting to resume after cursor {self.cursor}"
            )
        if code == "removed":
            raise TokenRefused(str(code), str(event.get("message")))
        frame = event.get("frame")
        log.warning(
            "the node answered %s%s: %s",
            code,
            f" to {frame}" if frame else "",
            event.get("message"),
        )

    async def _heartbeat(self, ws: WebSocketConnection) -> None:
        while True:
            await trio.sleep(PING_INTERVAL)
            with trio.move_on_after(PONG_TIMEOUT) as deadline:
                await ws.ping()
            if deadline.cancelled_caught:
                raise Disconnected(f"no pong within {PONG_TIMEOUT:g} s")

    async def _save_cursor(self) -> None:
        if self.config.state_file is not None and self.cursor is not None:
            await save_cursor(self.config.state_file, self.config.mesh_url, self.cursor)


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


async def _next_event(ws: WebSocketConnection) -> dict[str, Any]:
    """The next frame from the node as a JSON object with a string ``type``.

    Raises:
        ConnectionClosed: the connection closed.
        Disconnected: the node sent something that is not an event.
    """
    text = await ws.get_message()
    try:
        event = json.loads(text)
    except ValueError as exc:
        raise Disconnected("the node sent a frame that is not JSON") from exc
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise Disconnected("the node sent a frame that is not an event")
    return event
