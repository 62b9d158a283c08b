"""The WebSocket transport: wsproto over a trio stream, owned by the node.

Why not hypercorn's WebSocket path: one malformed upgrade can take the whole
trio server down there (hypercorn #225, DESIGN.md §4a), and its per-frame cost
(a lock, a shielded cancel scope and a syscall per frame) caps fan-out far
below what a chat node needs (DESIGN.md §7). Here frames to clients are
encoded once per event (server frames are unmasked, so the bytes are the same
for every subscriber) and each wake-up of a session's writer sends all queued
frames with one write.

This module does no protocol logic and no parsing: it reads bytes and hands
them to a :class:`~quart_mesh.realtime.reader.FrameReader` (which turns them
into messages), encodes the session's frames (:meth:`WebSocket.encode`) and
writes them, answers pings, and keeps the connection alive —
once :meth:`WebSocket.keep_alive` is called, it pings a client that has gone
quiet and closes one that shows no life (no pong, no frame, and none of our
writes taken) for the idle timeout. :mod:`quart_mesh.realtime.session`
speaks the mesh protocol over it.

Reading ends only at the end of the client's stream (its close frame, EOF,
a reset) or after our own :meth:`~WebSocket.close`: a write that fails
stops sending, but what the client sent before is still read. Every write
the reader makes has a deadline: a pong (sent after the write under way, if
any, else within the idle timeout) and the answer to a close frame (within
:data:`CLOSE_TIMEOUT`), so a client that stopped reading cannot hold the
reader, and with it the session, for ever.

Writes are never left half done: a write cut off by cancellation (a send
deadline) keeps the unsent rest of the frame it was in, and the next write
(or the close frame) sends that rest first, so a client always sees whole
frames and then a close frame. The close frame itself has a short deadline
(:data:`CLOSE_TIMEOUT`); a client that does not read it in time is reset.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection, ConnectionState
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
)
from wsproto.frame_protocol import CloseReason
from wsproto.utilities import ProtocolError, RemoteProtocolError

from ..events import Event
from .reader import FrameReader, FrameTooLarge

__all__ = [
    "CLOSE_TIMEOUT",
    "IDLE_CLOSE_CODE",
    "ConnectionClosed",
    "FrameTooLarge",
    "WebSocket",
    "Written",
    "encode_text_frame",
]

log = logging.getLogger(__name__)

_MAX_RECV = 65536
_MAX_HEAD = 16 * 1024

#: seconds a close frame (with the rest of a frame cut off before it) may take
#: to be written; a client that does not read it in time is reset
CLOSE_TIMEOUT = 2.0
#: the close code for a client silent past the idle timeout (RFC 6455: the
#: server "encountered an unexpected condition"; the ``websockets`` library
#: closes a keepalive timeout the same way); the reason is ``idle_timeout``
IDLE_CLOSE_CODE = 1011
#: an unmasked ping with no payload, as a server sends it (built here: wsproto
#: refuses to make one once the client's close frame has been read)
_PING = bytes((0x89, 0))


class ConnectionClosed(Exception):
    """The peer closed the connection, or it broke."""


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


@dataclass(frozen=True, slots=True)
class Written:
    """What :meth:`WebSocket.write_now` wrote of the frames it was given."""

    #: how many of the frames, from the first, are the socket's now: written
    #: whole, or (the last of them) begun, with its end owed
    taken: int
    #: the end of the last taken frame is still to be written: the socket
    #: sends it before anything else (:meth:`WebSocket.send_frames`, even
    #: of no frames, or :meth:`WebSocket.close`)
    owed: bool


class WebSocket:
    """One server-side WebSocket connection.

    Lifecycle: :meth:`accept` (or :meth:`reject`) with the request head, then
    any number of :meth:`receive` calls in one task and :meth:`send_frames`
    calls in another, then :meth:`close`. The stream is owned by the caller,
    which closes it afterwards (unless :meth:`close` had to reset it: then it
    is closed already, and closing it again does nothing).

    Parsing is the :class:`~quart_mesh.realtime.reader.FrameReader`'s (made
    when the handshake is accepted); this reads, writes and keeps time.
    """

    __slots__ = (
        "_closed",
        "_drained_at",
        "_idle_timeout",
        "_max",
        "_ping_interval",
        "_ping_wanted",
        "_pong_wanted",
        "_reader",
        "_rest",
        "_send_failed",
        "_send_lock",
        "_stream",
        "_torn",
        "_ws",
        "path",
        "request_headers",
    )

    def __init__(self, stream: trio.abc.Stream, *, max_message_bytes: int) -> None:
        self._stream = stream
        #: the handshake, then (once accepted) only its frame protocol
        self._ws: WSConnection | Connection = WSConnection(ConnectionType.SERVER)
        self._max = max_message_bytes
        self._send_lock = trio.Lock()
        #: the client's frames into messages, once the handshake is accepted
        self._reader: FrameReader | None = None
        #: the stream ended (the client's close frame, EOF, a protocol error)
        #: or we closed: receiving stops after the messages the reader holds,
        #: sending is over
        self._closed = False
        #: a write failed: nothing more is sent, but what the client sent is read
        self._send_failed = False
        #: the unsent rest of a frame whose write was cut off (sent first next time)
        self._rest = b""
        #: a write to a stream other than a socket was cut off: where it stopped is unknown
        self._torn = False
        self._ping_interval = math.inf
        self._idle_timeout = math.inf
        self._ping_wanted = False
        #: the pong to the latest ping that came during a write (RFC 6455
        #: §5.5.3: only the latest needs one); the writer sends it after
        self._pong_wanted: bytes | None = None
        #: when a write that had to wait for room last went on: the client is
        #: taking our frames (a slow link draining a replay), which is life too
        self._drained_at = -math.inf
        self.path: str = ""
        #: the upgrade request's headers not part of the handshake (names
        #: lowercase): a forwarding proxy's ``X-Forwarded-For`` is here
        self.request_headers: list[tuple[str, str]] = []

    async def accept(self, head: bytes) -> bool:
        """Complete the opening handshake from the request head.

        *head* must hold the whole request head (the server reads it under
        its deadline); this reads nothing more from the client, so the
        handshake takes no longer than that deadline. Returns False (after
        answering 400 or 404) if the request is not a usable upgrade to
        ``/ws``: a head that does not end within the first 16 KiB is a 400.
        Frames that arrived in the same packets as the request are kept
        (wsproto's server handshake would drop them).
        """
        if b"\r\n\r\n" not in head[: _MAX_HEAD + 4]:
            await self._reject(400)
            return False
        end = head.index(b"\r\n\r\n") + 4
        request_bytes, rest = head[:end], head[end:]
        try:
            self._ws.receive_data(request_bytes)
            request = next((e for e in self._ws.events() if isinstance(e, Request)), None)
        except RemoteProtocolError:
            request = None
        if request is None:
            await self._reject(400)
            return False
        self.path = request.target.split("?", 1)[0]
        self.request_headers = [
            (bytes(name).decode("latin-1").lower(), bytes(value).decode("latin-1"))
            for name, value in request.extra_headers
        ]
        if self.path != "/ws":
            await self._reject(404)
            return False
        handshake = self._ws
        assert isinstance(handshake, WSConnection)
        accept = handshake.send(AcceptConnection())
        # from here on only frames: keep wsproto's frame protocol and let the
        # handshake's parser state (h11's) go, a few KiB per idle connection
        assert handshake.connection is not None
        self._ws = handshake.connection
        self._reader = FrameReader(self._ws, max_message_bytes=self._max)
        await self._send_raw(accept)
        if rest:
            try:
                self._reader.feed(rest)
            except ProtocolError:
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
        except (RemoteProtocolError, ConnectionClosed):
            pass
        except Exception:  # wsproto refuses to reject in some broken states
            log.debug("could not send a rejection", exc_info=True)
        self._closed = True

    def keep_alive(self, ping_interval: float, idle_timeout: float) -> None:
        """From now on, while :meth:`receive` waits: ping the client after
        *ping_interval* seconds without anything from it (and again every
        *ping_interval*), and once *idle_timeout* seconds pass without a sign
        of life, close the connection with :data:`IDLE_CLOSE_CODE` (reason
        ``idle_timeout``) and raise :class:`ConnectionClosed`.

        Life is a byte from the client (a pong, a frame), or the client taking
        our writes: a write to the socket that found the kernel's buffer full
        and then went on. A write the kernel takes at once shows nothing (the
        client may be gone), and one that does not go on is cut off by the
        sender's deadline. Time the reader spends handling a frame does not
        count: only silence while waiting for the client does.
        """
        self._ping_interval = ping_interval
        self._idle_timeout = idle_timeout

    async def receive(self) -> str | bytes:
        """The next complete message: a text message as ``str``, a binary one
        as its ``bytes`` (undecoded: binary frames carry no protocol here,
        and the session judges them). The size limit counts UTF-8 bytes of
        text and bytes of binary.

        Cancelling it loses nothing: bytes already read stay buffered. A
        failed write does not end it: messages the client sent before are
        still returned, until the end of its stream.

        Raises:
            FrameTooLarge: a message over the limit arrived (and was dropped);
                the connection stays usable.
            ConnectionClosed: the peer closed or broke the connection, sent
                something wsproto cannot parse (answered with a close frame),
                stayed silent past the idle timeout (closed, see
                :meth:`keep_alive`), or did not take a pong within it (closed,
                or reset); or :meth:`close` was called, or the handshake was
                not accepted.
        """
        reader = self._reader
        if reader is None:
            raise ConnectionClosed
        while (item := reader.next_message()) is None:
            if self._closed:
                raise ConnectionClosed
            data = await self._receive_some()
            if not data:
                self._closed = True
                raise ConnectionClosed
            try:
                reader.feed(data)
            except ProtocolError:  # the client's bytes, or a closed connection
                self._closed = True
                raise ConnectionClosed from None
            await self._flush_events()
        if isinstance(item, FrameTooLarge):
            raise item
        return item

    async def _receive_some(self) -> bytes | bytearray:
        """Bytes from the client, pinging it while it is quiet (see :meth:`keep_alive`)."""
        quiet_since = trio.current_time()
        ping_at = quiet_since + self._ping_interval
        while True:
            # a write going on meanwhile moves the deadline: looked at again each time
            idle_at = max(quiet_since, self._drained_at) + self._idle_timeout
            with trio.move_on_at(min(ping_at, idle_at)):
                try:
                    return await self._stream.receive_some(_MAX_RECV)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    self._closed = True
                    raise ConnectionClosed from None
            now = trio.current_time()
            idle_at = max(quiet_since, self._drained_at) + self._idle_timeout
            if now >= idle_at:
                await self.close(IDLE_CLOSE_CODE, "idle_timeout")
                raise ConnectionClosed
            if now >= ping_at:
                await self._ping(idle_at)
                ping_at = trio.current_time() + self._ping_interval

    async def _ping(self, deadline: float) -> None:
        """Ping the client now, or right after the write under way (the
        reader does not wait behind a writer; the writer's own deadline
        covers a client that stopped reading)."""
        if self._closed or self._send_failed:
            return
        if self._send_lock.locked():
            self._ping_wanted = True  # the writer sends it when its write is done
            return
        with trio.move_on_at(deadline):
            await self._send_frames([_PING])

    async def _flush_events(self) -> None:
        """Answer the control frames the reader found: pings (see :meth:`_pong`)
        and the client's close frame (or wsproto's, for a protocol error)."""
        assert self._reader is not None
        for event in self._reader.take_controls():
            if isinstance(event, Ping):
                await self._pong(event)
            elif not self._closed:  # CloseConnection: answer it, then we are done
                self._closed = True
                try:
                    data = self._ws.send(event.response())
                except ProtocolError:
                    continue
                if not self._send_failed:
                    await self._send_close(data)

    async def _pong(self, ping: Ping) -> None:
        """Answer a ping: after the write under way (the writer sends it, under
        its deadline), or now, within the idle timeout.

        Raises:
            ConnectionClosed: the client did not take the pong in time (the
                connection is closed as idle, or reset).
        """
        # nothing follows our close frame; none is wanted after the client's
        if self._closed or self._send_failed or self._ws.state is not ConnectionState.OPEN:
            return
        frame = self._ws.send(ping.response())
        if self._send_lock.locked():
            self._pong_wanted = frame
            return
        with trio.move_on_after(self._idle_timeout) as cut:
            # a failed write stops sending, not reading
            with contextlib.suppress(ConnectionClosed):
                await self._send_frames([frame])
        if cut.cancelled_caught:
            await self.close(IDLE_CLOSE_CODE, "idle_timeout")
            raise ConnectionClosed

    # a timeout, not the caller's cancel scope: it is armed only when the write
    # has to wait, and setting a scope's deadline for each write costs more
    # than the write itself
    async def send_frames(
        self,
        frames: Iterable[bytes],
        *,
        timeout: float = math.inf,  # noqa: ASYNC109
    ) -> None:
        """Send frames made by :meth:`encode` with one write.

        When nothing else is being written and the kernel takes all of it
        at once (the common case: a client that reads), this is one system
        call and no pass through the scheduler (:meth:`write_now`);
        otherwise the rest is written as the socket drains, within
        *timeout* seconds. The end of a frame owed by an earlier write (see
        :attr:`owes`) goes first; ``send_frames([])`` writes just that end,
        if any.

        Cancelled partway (a send deadline), the frames after the one being
        written are dropped and the rest of that one is sent before anything
        else: the client never sees a frame cut short.

        Raises:
            ConnectionClosed: the connection is gone, or closing, or a write
                failed before.
            trio.TooSlowError: the client did not take them within *timeout*.
        """
        if self._closed or self._send_failed:
            raise ConnectionClosed
        listed = list(frames)
        written = self.write_now(listed)
        left = listed if written is None else listed[written.taken :]
        if left or self._rest:
            with trio.fail_after(timeout):
                await self._send_frames(left)

    def encode(self, event: Event | None, frame: str) -> bytes:
        """The text frame carrying *frame* (JSON text), as :meth:`send_frames`
        and :meth:`write_now` take it: unmasked, so the same bytes for every
        subscriber, and made once per *event* (cached on it; not cached when
        *event* is None)."""
        if event is None:
            return encode_text_frame(frame.encode("utf-8"))
        return event.cached("ws", lambda: encode_text_frame(frame.encode("utf-8")))

    @property
    def owes(self) -> bool:
        """The end of a frame begun by a write (cut off, or taken in part by
        :meth:`write_now`) is still to be written; it goes before anything
        else, with the next :meth:`send_frames` (``send_frames([])`` writes
        only that end) or before the close frame."""
        return bool(self._rest)

    #: :meth:`write_now` can write (the session lets the broker use it)
    writes_now = True

    def write_now(self, frames: list[bytes]) -> Written | None:
        """Write *frames* (made by :meth:`encode`) at once, without waiting,
        if nothing else is being (or is owed to be) written: one ``os.write``
        on the socket's descriptor (looked up for each write: a closed socket
        has none, and the write fails cleanly).

        Returns None if it wrote nothing (another write is under way, or
        owed, or the socket is full, or the stream is not a socket): all of
        *frames* are still the caller's. Otherwise what the socket took
        (:class:`Written`): the first ``taken`` frames, the last of them
        maybe only begun (``owed``: its end is kept, and sent before
        anything else, see :attr:`owes`). The frames after those are the
        caller's, to send with :meth:`send_frames`; if none are left but an
        end is owed, ``send_frames([])`` finishes the frame.

        Raises:
            ConnectionClosed: the connection is gone, or closing, or a write failed.
        """
        if self._closed or self._send_failed:
            raise ConnectionClosed
        stream = self._stream
        if (
            self._send_lock.locked()
            or self._rest
            or self._torn
            or self._pong_wanted is not None
            or self._ping_wanted
            or not isinstance(stream, trio.SocketStream)
        ):
            return None
        if not frames:
            return Written(taken=0, owed=False)
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        try:
            sent = os.write(stream.socket.fileno(), data)
        except BlockingIOError:
            return None
        except OSError:
            self._send_failed = True
            raise ConnectionClosed from None
        if sent == len(data):
            return Written(taken=len(frames), owed=False)
        # the rest of the frame the kernel took part of is owed (sent first,
        # whatever happens); the frames after it are the caller's
        end = 0
        for i, frame in enumerate(frames):
            end += len(frame)
            if end == sent:  # stopped right after this frame: nothing owed
                return Written(taken=i + 1, owed=False)
            if end > sent:
                self._rest = frame[len(frame) - (end - sent) :]
                return Written(taken=i + 1, owed=True)
        raise AssertionError("unreachable: sent < len(data)")

    async def send_text(self, text: str) -> None:
        """Send *text* as one text frame (not cached: see :meth:`encode`)."""
        await self.send_frames([self.encode(None, text)])

    async def _send_raw(self, data: bytes) -> None:
        if data:
            await self._send_frames([data])

    async def _send_frames(self, frames: list[bytes]) -> None:
        if self._torn or self._send_failed:
            raise ConnectionClosed
        async with self._send_lock:
            owed = bool(self._rest)
            if owed:
                frames.insert(0, self._rest)
                self._rest = b""
            await self._write(frames + self._take_controls(), owed_first=owed)
            # controls wanted during that write go now, not with some later
            # write: there may be none before the idle timeout
            while not self._closed and (controls := self._take_controls()):
                await self._write(controls)

    def _take_controls(self) -> list[bytes]:
        """The pong and ping put off by a write under way, if any."""
        controls = [] if self._pong_wanted is None else [self._pong_wanted]
        if self._ping_wanted:
            controls.append(_PING)
        self._pong_wanted = None
        self._ping_wanted = False
        return controls

    async def _write(self, frames: list[bytes], *, owed_first: bool = False) -> None:
        """Write *frames* in order (the caller holds the send lock). With
        *owed_first*, the first is the end of a frame begun earlier: cut off
        before any of it is written, it is still owed."""
        data = memoryview(frames[0] if len(frames) == 1 else b"".join(frames))
        sent = 0
        try:
            if isinstance(self._stream, trio.SocketStream):
                # the socket's send is all or nothing under cancellation, so
                # the count of bytes written is exact (send_all's is lost)
                sock = self._stream.socket
                while sent < len(data):
                    n = await sock.send(data[sent:])
                    if sent:  # the kernel's buffer was full and has room again
                        self._drained_at = trio.current_time()
                    sent += n
            else:
                try:
                    await self._stream.send_all(data)
                except trio.Cancelled:
                    self._torn = True
                    raise
        except trio.Cancelled:
            if not self._torn and sent > 0:
                end = 0
                for frame in frames:
                    end += len(frame)
                    if end > sent:
                        self._rest = bytes(data[sent:end])
                        break
            elif not self._torn and owed_first:
                self._rest = bytes(frames[0])
            raise
        except (
            OSError,
            trio.BrokenResourceError,
            trio.ClosedResourceError,
            trio.BusyResourceError,
        ):
            self._send_failed = True
            raise ConnectionClosed from None

    async def close(self, code: int = CloseReason.NORMAL_CLOSURE, reason: str = "") -> None:
        """Send a close frame and stop; the caller closes the stream.

        The close frame (after the rest of a frame cut off earlier) must be
        written within :data:`CLOSE_TIMEOUT` seconds; if it cannot be (a
        client that does not read), the connection is reset instead: the
        stream is closed with a TCP reset, which also frees what the kernel
        still buffers for that client. Nothing is sent if the connection is
        already closed or a write failed. Either way :meth:`receive` returns
        only what is buffered from then on.
        """
        if self._closed:
            return
        self._closed = True
        if self._send_failed:
            return
        try:
            data = self._ws.send(CloseConnection(code=code, reason=reason[:120]))
        except Exception:  # wsproto in a state where it cannot close
            log.debug("could not send a close frame", exc_info=True)
            return
        await self._send_close(data)

    async def _send_close(self, data: bytes) -> None:
        """Write a close frame (ours, or the answer to the client's) within
        :data:`CLOSE_TIMEOUT`, or reset the connection."""
        self._ping_wanted = False  # nothing follows a close frame
        self._pong_wanted = None
        written = False
        try:
            with trio.move_on_after(CLOSE_TIMEOUT):
                await self._send_frames([data])
                written = True
        except ConnectionClosed:
            written = not self._torn  # broken: nothing more to do
        finally:
            if not written:  # not in time, or cut off: reset rather than wait
                await self._reset()

    async def _reset(self) -> None:
        """Abort the connection: RST instead of FIN, and unsent data dropped."""
        if isinstance(self._stream, trio.SocketStream):
            with contextlib.suppress(OSError):
                self._stream.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                )
        with trio.CancelScope(shield=True):
            await self._stream.aclose()
