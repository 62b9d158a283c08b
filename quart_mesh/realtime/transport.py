"""The WebSocket transport: wsproto over a trio stream, owned by the node.

Why not hypercorn's WebSocket path: one malformed upgrade can take the whole
trio server down there (hypercorn #225, DESIGN.md §4a), and its per-frame cost
(a lock, a shielded cancel scope and a syscall per frame) caps fan-out far
below what a chat node needs (DESIGN.md §7). Here frames to clients are
encoded once per event (server frames are unmasked, so the bytes are the same
for every subscriber) and each wake-up of a session's writer sends all queued
frames with one ``send_all``.

This module does no protocol logic: it turns bytes into text messages and
text frames into bytes. :mod:`quart_mesh.realtime.session` speaks the mesh
protocol over it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import RemoteProtocolError

__all__ = ["ConnectionClosed", "FrameTooLarge", "WebSocket", "encode_text_frame"]

log = logging.getLogger(__name__)

_MAX_RECV = 65536
_MAX_HEAD = 16 * 1024


class ConnectionClosed(Exception):
    """The peer closed the connection, or it broke."""


class FrameTooLarge(Exception):
    """A client message exceeded the size limit; it was discarded whole."""


def encode_text_frame(payload: bytes) -> bytes:
    """An unmasked, final text frame (RFC 6455 §5.2), as a server sends it."""
    n = len(payload)
    if n < 126:
        header = bytes((0x81, n))
    elif n < 65536:
        header = bytes((0x81, 126)) + n.to_bytes(2, "big")
    else:
        header = bytes((0x81, 127)) + n.to_bytes(8, "big")
    return header + payload


class WebSocket:
    """One server-side WebSocket connection.

    Lifecycle: :meth:`accept` (or :meth:`reject`) with the request bytes read
    so far, then any number of :meth:`receive` calls in one task and
    :meth:`send_frames` calls in another, then :meth:`close`. The stream is
    owned by the caller, which closes it afterwards.
    """

    def __init__(self, stream: trio.abc.Stream, *, max_message_bytes: int) -> None:
        self._stream = stream
        self._ws = WSConnection(ConnectionType.SERVER)
        self._max = max_message_bytes
        self._send_lock = trio.Lock()
        self._parts: list[str] = []
        self._size = 0
        self._discarding = False
        self._pending: list[str | FrameTooLarge] = []
        self._closed = False
        self.path: str = ""

    async def accept(self, head: bytes) -> bool:
        """Complete the opening handshake from the bytes read so far.

        Returns False (after answering 400 or 404 and closing) if the request
        is not a usable upgrade to ``/ws``. Frames that arrived in the same
        packets as the request are kept (wsproto's server handshake would
        drop them).
        """
        buffer = head
        while b"\r\n\r\n" not in buffer:
            if len(buffer) > _MAX_HEAD:
                await self._reject(400)
                return False
            data = await self._stream.receive_some(_MAX_RECV)
            if not data:
                return False
            buffer += data
        end = buffer.index(b"\r\n\r\n") + 4
        request_bytes, rest = buffer[:end], buffer[end:]
        try:
            self._ws.receive_data(request_bytes)
            request = next((e for e in self._ws.events() if isinstance(e, Request)), None)
        except RemoteProtocolError:
            request = None
        if request is None:
            await self._reject(400)
            return False
        self.path = request.target.split("?", 1)[0]
        if self.path != "/ws":
            await self._reject(404)
            return False
        await self._send_raw(self._ws.send(AcceptConnection()))
        if rest:
            try:
                self._ws.receive_data(bytes(rest))
            except RemoteProtocolError:
                self._closed = True
            await self._flush_events()
        return True

    async def _reject(self, status: int) -> None:
        try:
            data = self._ws.send(
                RejectConnection(
                    status_code=status,
                    headers=[(b"content-length", b"0"), (b"connection", b"close")],
                )
            )
            await self._send_raw(data)
        except (RemoteProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        except Exception:  # wsproto refuses to reject in some broken states
            log.debug("could not send a rejection", exc_info=True)
        self._closed = True

    async def receive(self) -> str:
        """The next complete text message.

        Raises:
            FrameTooLarge: a message over the limit arrived (and was dropped);
                the connection stays usable.
            ConnectionClosed: the peer closed or broke the connection, or sent
                something wsproto cannot parse (answered with a close frame).
        """
        while not self._pending:
            if self._closed:
                raise ConnectionClosed
            try:
                data = await self._stream.receive_some(_MAX_RECV)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._closed = True
                raise ConnectionClosed from None
            if not data:
                self._closed = True
                raise ConnectionClosed
            try:
                self._ws.receive_data(bytes(data))
            except RemoteProtocolError:
                self._closed = True
                raise ConnectionClosed from None
            await self._flush_events()
        item = self._pending.pop(0)
        if isinstance(item, FrameTooLarge):
            raise item
        return item

    def _take_events(self) -> list[Ping | CloseConnection]:
        """Sort wsproto's events: messages to ``_pending``, controls returned."""
        controls: list[Ping | CloseConnection] = []
        for event in self._ws.events():
            if isinstance(event, TextMessage | BytesMessage):
                self._add_part(event)
            elif isinstance(event, Ping | CloseConnection):
                controls.append(event)
        return controls

    async def _flush_events(self) -> None:
        for event in self._take_events():
            if isinstance(event, Ping):
                await self._send_raw(self._ws.send(event.response()))
            else:  # CloseConnection: answer it, then we are done
                with contextlib.suppress(RemoteProtocolError, ConnectionClosed):
                    await self._send_raw(self._ws.send(event.response()))
                self._closed = True

    def _add_part(self, event: TextMessage | BytesMessage) -> None:
        if isinstance(event, BytesMessage):
            # binary frames carry no protocol here; treated as text if UTF-8
            try:
                chunk = bytes(event.data).decode("utf-8")
            except UnicodeDecodeError:
                chunk = "\x00invalid"  # rejected as invalid JSON by the session
        else:
            chunk = event.data
        if not self._discarding:
            self._size += len(chunk.encode("utf-8", "surrogatepass"))
            if self._size > self._max:
                self._discarding = True
                self._parts.clear()
            else:
                self._parts.append(chunk)
        if event.message_finished:
            if self._discarding:
                self._pending.append(FrameTooLarge())
            else:
                self._pending.append("".join(self._parts))
            self._parts.clear()
            self._size = 0
            self._discarding = False

    async def send_frames(self, frames: Iterable[bytes]) -> None:
        """Send already-encoded frames with one write.

        Raises:
            ConnectionClosed: the connection is gone.
        """
        await self._send_raw(b"".join(frames))

    async def send_text(self, text: str) -> None:
        await self.send_frames([encode_text_frame(text.encode("utf-8"))])

    async def _send_raw(self, data: bytes) -> None:
        if not data:
            return
        try:
            async with self._send_lock:
                await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
            self._closed = True
            raise ConnectionClosed from None

    async def close(self, code: int = CloseReason.NORMAL_CLOSURE, reason: str = "") -> None:
        """Send a close frame (best effort) and stop; the caller closes the stream."""
        if not self._closed:
            self._closed = True
            try:
                data = self._ws.send(CloseConnection(code=code, reason=reason[:120]))
                with trio.move_on_after(2):
                    async with self._send_lock:
                        await self._stream.send_all(data)
            except (
                RemoteProtocolError,
                trio.BrokenResourceError,
                trio.ClosedResourceError,
                trio.BusyResourceError,
            ):
                pass
            except Exception:  # wsproto in a state where it cannot close
                log.debug("could not send a close frame", exc_info=True)
