"""The WebSocket transport: wsproto over a trio stream, owned by the node.

Why not hypercorn's WebSocket path: one malformed upgrade can take the whole
trio server down there (hypercorn #225, DESIGN.md §4a), and its per-frame cost
(a lock, a shielded cancel scope and a syscall per frame) caps fan-out far
below what a chat node needs (DESIGN.md §7). Here frames to clients are
encoded once per event (server frames are unmasked, so the bytes are the same
for every subscriber) and each wake-up of a session's writer sends all queued
frames with one write.

This module does no protocol logic: it turns bytes into text messages and
text frames into bytes, answers pings, and keeps the connection alive —
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

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import Connection, ConnectionState
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
from wsproto.utilities import ProtocolError, RemoteProtocolError

__all__ = [
    "CLOSE_TIMEOUT",
    "IDLE_CLOSE_CODE",
    "ConnectionClosed",
    "FrameTooLarge",
    "WebSocket",
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


def _masked_head(length: int) -> int:
    """Where a masked frame's payload starts when its *length* is encoded
    in the fewest bytes, as RFC 6455 §5.2 requires (wsproto refuses others)."""
    return 6 if length < 126 else 8 if length < 65536 else 14


def _frame_head(buf: bytearray) -> tuple[int, int, int] | None:
    """(first byte, where the payload starts, payload length) of the frame
    at the start of *buf*, or None if its header is not all there."""
    if len(buf) < 2:
        return None
    second = buf[1]
    length = second & 0x7F
    start = 2
    if length == 126:
        if len(buf) < 4:
            return None
        length = int.from_bytes(buf[2:4], "big")
        start = 4
    elif length == 127:
        if len(buf) < 10:
            return None
        length = int.from_bytes(buf[2:10], "big")
        start = 10
    if second & 0x80:
        start += 4
    if len(buf) < start:
        return None
    return buf[0], start, length


def _unmask_text(key: bytes, payload: bytes) -> str | None:
    """A client frame's payload unmasked (RFC 6455 §5.3) and decoded, or
    None if it is not valid UTF-8 (wsproto then reports it)."""
    n = len(payload)
    if n:
        mask = int.from_bytes((key * (n // 4 + 1))[:n], "little")
        payload = (int.from_bytes(payload, "little") ^ mask).to_bytes(n, "little")
    try:
        return payload.decode("utf-8")
    except UnicodeDecodeError:
        return None


class WebSocket:
    """One server-side WebSocket connection.

    Lifecycle: :meth:`accept` (or :meth:`reject`) with the request head, then
    any number of :meth:`receive` calls in one task and :meth:`send_frames`
    calls in another, then :meth:`close`. The stream is owned by the caller,
    which closes it afterwards (unless :meth:`close` had to reset it: then it
    is closed already, and closing it again does nothing).
    """

    __slots__ = (
        "_closed",
        "_controls",
        "_discarding",
        "_drained_at",
        "_fragmented",
        "_idle_timeout",
        "_inbuf",
        "_max",
        "_parts",
        "_pending",
        "_ping_interval",
        "_ping_wanted",
        "_pong_wanted",
        "_rest",
        "_send_failed",
        "_send_lock",
        "_size",
        "_stream",
        "_to_wsproto",
        "_torn",
        "_ws",
        "_wsproto_only",
        "path",
        "request_headers",
    )

    def __init__(self, stream: trio.abc.Stream, *, max_message_bytes: int) -> None:
        self._stream = stream
        #: the handshake, then (once accepted) only its frame protocol
        self._ws: WSConnection | Connection = WSConnection(ConnectionType.SERVER)
        self._max = max_message_bytes
        self._send_lock = trio.Lock()
        self._parts: list[str] = []
        self._size = 0
        self._discarding = False
        self._pending: list[str | FrameTooLarge] = []
        #: bytes from the client not parsed yet (see _feed)
        self._inbuf = bytearray()
        #: bytes of the frame being handed to wsproto still to come
        self._to_wsproto = 0
        #: a fragmented message is under way (its frames are wsproto's)
        self._fragmented = False
        #: after the client's close frame: everything is wsproto's
        self._wsproto_only = False
        #: control frames wsproto found, not answered yet
        self._controls: list[Ping | CloseConnection] = []
        #: the stream ended (the client's close frame, EOF, a protocol error)
        #: or we closed: receiving stops after ``_pending``, sending is over
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
        await self._send_raw(accept)
        if rest:
            try:
                self._feed(rest)
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

    async def receive(self) -> str:
        """The next complete text message.

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
                or reset); or :meth:`close` was called.
        """
        while not self._pending:
            if self._closed:
                raise ConnectionClosed
            data = await self._receive_some()
            if not data:
                self._closed = True
                raise ConnectionClosed
            try:
                self._feed(data)
            except ProtocolError:  # the client's bytes, or a closed connection
                self._closed = True
                raise ConnectionClosed from None
            await self._flush_events()
        item = self._pending.pop(0)
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

    def _take_events(self) -> list[Ping | CloseConnection]:
        """Sort wsproto's events: messages to ``_pending``, controls returned."""
        controls: list[Ping | CloseConnection] = []
        for event in self._ws.events():
            if isinstance(event, TextMessage | BytesMessage):
                self._add_part(event)
            elif isinstance(event, Ping | CloseConnection):
                controls.append(event)
        return controls

    def _feed(self, data: bytes | bytearray) -> None:
        """Take bytes from the client: complete, unfragmented, masked text
        frames of at most the size limit, in valid UTF-8, are parsed here
        (the common case, several times cheaper than wsproto's parser);
        every other frame — control frames, fragments, binary, oversized,
        invalid, anything after the client's close frame — goes to wsproto
        whole and in order, and what it makes of it is taken at once, so
        messages stay in the order sent.

        Raises:
            RemoteProtocolError: wsproto's, for bytes that break the protocol.
        """
        buf = self._inbuf
        buf += data
        while buf:
            if self._ws.state is ConnectionState.CLOSED:
                buf.clear()  # both sides closed: nothing more is read
                return
            if self._to_wsproto:  # the rest of a frame wsproto is reading
                n = min(self._to_wsproto, len(buf))
                self._ws.receive_data(bytes(buf[:n]))
                del buf[:n]
                self._to_wsproto -= n
                # at once, also in the middle of a frame: wsproto passes a
                # long one on in parts (and drops what is over the limit)
                found = self._take_events()
                self._controls.extend(found)
                if any(isinstance(event, CloseConnection) for event in found):
                    # the client's close, or a protocol error: nothing after it is ours
                    self._wsproto_only = True
                continue
            if self._wsproto_only:
                self._ws.receive_data(bytes(buf))
                buf.clear()
                self._controls.extend(self._take_events())
                return
            head = _frame_head(buf)
            if head is None:
                return  # the header is not all here yet
            first, start, length = head
            end = start + length
            if (
                first == 0x81  # FIN, no RSV bits, text
                and buf[1] & 0x80  # masked, as a client's frames must be
                and not self._fragmented
                and length <= self._max
                and start == _masked_head(length)  # the length in the fewest bytes
            ):
                if len(buf) < end:
                    return  # the rest of the frame is still coming
                text = _unmask_text(bytes(buf[start - 4 : start]), bytes(buf[start:end]))
                if text is not None:
                    del buf[:end]
                    self._pending.append(text)
                    continue
            # wsproto's: whole, in order
            opcode = first & 0x0F
            if opcode in (0x1, 0x2):
                self._fragmented = not first & 0x80
            elif opcode == 0x0 and first & 0x80:
                self._fragmented = False
            elif opcode == 0x8:  # close: nothing after it is ours to parse
                self._wsproto_only = True
            self._to_wsproto = end

    async def _flush_events(self) -> None:
        self._controls.extend(self._take_events())
        controls, self._controls = self._controls, []
        for event in controls:
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

    # a timeout, not the caller's cancel scope: it is armed only when the write
    # has to wait, and setting a scope's deadline for each write costs more
    # than the write itself
    async def send_frames(
        self,
        frames: Iterable[bytes],
        *,
        timeout: float = math.inf,  # noqa: ASYNC109
    ) -> None:
        """Send already-encoded frames with one write.

        When nothing else is being written and the kernel takes all of it
        at once (the common case: a client that reads), this is one system
        call and no pass through the scheduler (:meth:`_write_now`);
        otherwise the rest is written as the socket drains, within
        *timeout* seconds.

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
        left = self.write_now(listed)
        if left is None:
            left = listed
        if left:
            with trio.fail_after(timeout):
                await self._send_frames(left)

    #: :meth:`write_now` can write (the session lets the broker use it)
    writes_now = True

    def write_now(self, frames: list[bytes]) -> list[bytes] | None:
        """Write *frames* at once, without waiting, if nothing else is being
        (or is owed to be) written: one ``os.write`` on the socket's
        descriptor (looked up for each write: a closed socket has none, and
        the write fails cleanly).

        Returns None if it wrote nothing (another write is under way, or
        owed, or the socket is full), else what is left to write, by
        :meth:`send_frames`, before anything else: nothing, or the frames
        after the one the kernel took part of, whose end is kept and sent
        first (then the list is never empty: ``[b""]`` if only that end is
        left).

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
        data = frames[0] if len(frames) == 1 else b"".join(frames)
        try:
            sent = os.write(stream.socket.fileno(), data)
        except BlockingIOError:
            return None
        except OSError:
            self._send_failed = True
            raise ConnectionClosed from None
        if sent == len(data):
            return []
        # the rest of the frame the kernel took part of is owed (sent first,
        # whatever happens); the frames after it are left to write
        end = 0
        for i, frame in enumerate(frames):
            end += len(frame)
            if end > sent:
                self._rest = frame[len(frame) - (end - sent) :]
                return frames[i + 1 :] or [b""]
        raise AssertionError("unreachable: sent < len(data)")

    async def send_text(self, text: str) -> None:
        await self.send_frames([encode_text_frame(text.encode("utf-8"))])

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
