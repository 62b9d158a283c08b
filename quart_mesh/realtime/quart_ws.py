"""The session's socket over an ASGI server's WebSocket (Quart's ``websocket``).

Under a stock ASGI server (``hypercorn -k trio 'quart_mesh.asgi:create_asgi_app()'``)
the node's own transport is not in front: the server speaks the WebSocket
protocol and hands the app whole messages, and ``/ws`` is a Quart websocket
route. :class:`QuartWebSocket` gives a
:class:`~quart_mesh.realtime.session.ProtocolSession` what it uses of
:class:`~quart_mesh.realtime.transport.WebSocket` (receive messages, encode
and send frames or text, close with a code), so the protocol code is the
same. What ASGI does not allow differs (``docs/operations.md``):

- no pings and no idle timeout from the node: ASGI has neither pings nor
  pongs. The server pings if told to (hypercorn's
  ``websocket_ping_interval``); a dead client is noticed when the server's
  reads or writes fail (hypercorn's ``read_timeout``, TCP). Only once a send
  has failed does the idle timeout (:meth:`QuartWebSocket.keep_alive`) bound
  the wait for what the client sent before: a server that never reports the
  client gone cannot keep the session.
- no send deadline: hypercorn writes to the socket shielded from
  cancellation, so ``ws_send_timeout`` cannot cut a write to a client that
  stopped reading. Such a session holds no more than its bounded buffer
  (it fails as ``lagging`` when that fills) and ends when the write goes
  through or the connection breaks.
- frames are sent one message at a time: the server frames them, so a
  "frame" here (:meth:`QuartWebSocket.encode`) is only its UTF-8 payload,
  and nothing is written without waiting (``write_now`` writes nothing,
  nothing is ever owed). A message over the server's own limit (hypercorn's
  ``websocket_max_message_size``, 16 MiB) closes the connection with 1009
  instead of being answered with ``frame_too_large``.
- Quart cancels the route as soon as the server reports the client gone,
  which would drop messages the client sent just before it went (up to the
  ten Quart buffers) and the sends still being stored. So the app's ASGI
  wrapper hands the route the end of the stream in band instead
  (:func:`end_in_band`): after every message, :data:`END_OF_STREAM`, on
  which :meth:`QuartWebSocket.receive` raises :class:`ConnectionClosed` and
  the session winds down as on the node's own transport; the disconnect
  itself follows once the route is done (or after ``ASGI_WIND_DOWN``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from typing import Protocol

import trio
from hypercorn.typing import ASGIReceiveCallable, ASGIReceiveEvent
from werkzeug.datastructures import Headers

from ..events import Event
from .session import SETTLE_TIMEOUT
from .transport import CLOSE_TIMEOUT, ConnectionClosed, FrameTooLarge, Written

__all__ = ["ASGI_WIND_DOWN", "END_OF_STREAM", "AsgiWebSocket", "QuartWebSocket", "end_in_band"]

log = logging.getLogger(__name__)

#: seconds a session may take to wind down once its client is gone (its
#: queued sends are stored for up to SETTLE_TIMEOUT, then its farewell has
#: CLOSE_TIMEOUT) before the route is cancelled
ASGI_WIND_DOWN = SETTLE_TIMEOUT + CLOSE_TIMEOUT + 1


class _EndOfStream(bytes):
    """The one object that stands for the end of a client's stream."""


#: what the route receives, after the client's last message, when it is gone
END_OF_STREAM = _EndOfStream(b"end of stream")


def end_in_band(receive: ASGIReceiveCallable) -> ASGIReceiveCallable:
    """Wrap a WebSocket scope's ``receive`` so that the server's
    ``websocket.disconnect`` reaches the app first as a message,
    :data:`END_OF_STREAM`, behind the client's last ones, and itself only
    when the app asks again after ``ASGI_WIND_DOWN`` seconds (Quart asks at
    once, and stops asking when the route returns)."""
    held: ASGIReceiveEvent | None = None

    async def wrapped() -> ASGIReceiveEvent:
        nonlocal held
        if held is not None:
            await trio.sleep(ASGI_WIND_DOWN)  # cancelled once the route is done
            return held
        event = await receive()
        if event["type"] == "websocket.disconnect":
            held = event
            return {"type": "websocket.receive", "bytes": END_OF_STREAM, "text": None}
        return event

    return wrapped


class AsgiWebSocket(Protocol):
    """What the adapter uses of Quart's ``websocket`` object."""

    @property
    def remote_addr(self) -> str | None: ...

    @property
    def headers(self) -> Headers: ...

    async def accept(self) -> None: ...

    async def receive(self) -> str | bytes: ...

    async def send(self, data: str) -> None: ...

    async def close(self, code: int, reason: str = "") -> None: ...


class QuartWebSocket:
    """A :class:`~quart_mesh.realtime.session.SessionSocket` over an ASGI
    server's WebSocket connection.

    Lifecycle: :meth:`accept`, then :meth:`receive` in one task and sends in
    another, then :meth:`close`. The server's ``receive`` must be wrapped by
    :func:`end_in_band`.
    """

    def __init__(self, websocket: AsgiWebSocket, *, max_message_bytes: int) -> None:
        self._ws = websocket
        self._max = max_message_bytes
        #: we closed, or the client's stream ended: nothing more is sent or received
        self._closed = False
        #: a send failed: nothing more is sent, but what the client sent is read
        self._send_failed = False
        self._idle_timeout = math.inf

    async def accept(self) -> None:
        """Complete the opening handshake (the server answers 101)."""
        await self._ws.accept()

    def keep_alive(self, ping_interval: float, idle_timeout: float) -> None:
        """No pings: ASGI carries none (see the module docstring). Once a
        send has failed, a client silent for *idle_timeout* seconds is gone."""
        self._idle_timeout = idle_timeout

    async def receive(self) -> str | bytes:
        """The next complete message: a text message as ``str``, a binary one
        as its ``bytes`` (undecoded, as the node's own transport hands them
        over). The size limit counts UTF-8 bytes of text and bytes of binary.

        A failed send does not end it: messages the client sent before are
        still returned, until the end of its stream (or, from then on, until
        it is silent for the idle timeout).

        Raises:
            FrameTooLarge: the message was over the limit (and was dropped);
                the connection stays usable.
            ConnectionClosed: the client is gone, or this side closed.
        """
        if self._closed:
            raise ConnectionClosed
        timeout = self._idle_timeout if self._send_failed else math.inf
        data: str | bytes = END_OF_STREAM  # silent that long: taken as gone
        with trio.move_on_after(timeout):
            data = await self._ws.receive()
        if data is END_OF_STREAM:
            self._closed = True  # nothing more can be sent either
            raise ConnectionClosed
        if not isinstance(data, str):  # binary (Quart hands over None for an empty one)
            if data and len(data) > self._max:
                raise FrameTooLarge
            return data or b""
        # a character is at most 4 bytes: count bytes only when it may matter
        if len(data) * 4 > self._max and len(data.encode("utf-8", "surrogatepass")) > self._max:
            raise FrameTooLarge
        return data

    #: no writes without waiting here (hypercorn's own send path)
    writes_now = False

    def write_now(self, frames: list[bytes]) -> Written | None:
        """Nothing is written without waiting here: None."""
        return None

    @property
    def owes(self) -> bool:
        """Never: each message is sent whole (the server frames it)."""
        return False

    def encode(self, event: Event | None, frame: str) -> bytes:
        """What :meth:`send_frames` takes for *frame* (JSON text): its UTF-8
        payload only, since the server frames it; made once per *event*
        (cached on it; not cached when *event* is None)."""
        if event is None:
            return frame.encode("utf-8")
        return event.cached("asgi", lambda: frame.encode("utf-8"))

    async def send_frames(
        self,
        frames: Iterable[bytes],
        *,
        timeout: float = math.inf,  # noqa: ASYNC109
    ) -> None:
        """Send frames made by :meth:`encode`, each as one text message,
        within *timeout* seconds (``send_frames([])`` sends nothing).

        Raises:
            ConnectionClosed: the connection is gone, or closing.
            trio.TooSlowError: not sent within *timeout*.
        """
        with trio.fail_after(timeout):
            for frame in frames:
                await self._send(frame.decode("utf-8"))

    async def send_text(self, text: str) -> None:
        """Send *text* as one text message."""
        await self._send(text)

    async def _send(self, text: str) -> None:
        if self._closed or self._send_failed:
            raise ConnectionClosed
        try:
            await self._ws.send(text)
        except Exception as exc:  # the server's own state errors: the connection is gone
            log.debug("WebSocket send failed", exc_info=exc)
            self._send_failed = True  # what the client sent before is still read
            raise ConnectionClosed from None

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """Send a close frame (within ``CLOSE_TIMEOUT``), unless the
        connection is closed or gone already, or a send failed; receiving
        stops either way."""
        if self._closed:
            return
        self._closed = True
        if self._send_failed:
            return
        with trio.move_on_after(CLOSE_TIMEOUT):
            try:
                await self._ws.close(code, reason[:120])
            except Exception as exc:  # the server's own state errors
                log.debug("WebSocket close failed", exc_info=exc)
