"""Client frames into messages: a pure parser, no I/O.

A :class:`FrameReader` takes the bytes a client sends after the opening
handshake and hands back, in order, the messages they hold and the control
frames a server must answer. The common frame — complete, unfragmented,
masked text of at most the size limit, in valid UTF-8 — is parsed here,
several times cheaper than wsproto's parser; every other frame (control
frames, fragments, binary, oversized, invalid, anything after the client's
close frame) goes to wsproto whole and in order, so messages come out in the
order they were sent, and what breaks the protocol is judged by wsproto
alone (its close event carries the code to answer with).

The socket (:class:`~quart_mesh.realtime.transport.WebSocket`) reads and
writes; this only parses, so it is tested on its own, against wsproto
(``tests/realtime/test_frame_parsing.py``).
"""

from __future__ import annotations

from collections import deque

from wsproto.connection import Connection, ConnectionState
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage

__all__ = ["FrameReader", "FrameTooLarge"]


class FrameTooLarge(Exception):
    """A client message exceeded the size limit; it was discarded whole."""


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


class FrameReader:
    """The parser of one connection's client frames.

    Feed it every byte read from the client (:meth:`feed`), in order and in
    pieces of any size; then take what they completed: messages one at a
    time (:meth:`next_message`) and control frames all at once
    (:meth:`take_controls`). It does no I/O and answers nothing: a ping or a
    close frame is the socket's to answer, through the same wsproto
    :class:`~wsproto.connection.Connection` (whose state this reads, and
    which parses every frame the fast path does not).

    Memory: beyond the messages completed and not taken yet, it keeps at
    most one incomplete frame of the fast path (its header and at most
    ``max_message_bytes``) and the message wsproto is passing on; a message
    over the limit is dropped as it arrives, not kept until it ends.
    """

    __slots__ = (
        "_controls",
        "_data",
        "_discarding",
        "_fragmented",
        "_inbuf",
        "_max",
        "_messages",
        "_parts",
        "_size",
        "_to_wsproto",
        "_ws",
        "_wsproto_only",
    )

    def __init__(self, connection: Connection, *, max_message_bytes: int) -> None:
        """Read frames of *connection* (the frame protocol the socket keeps
        after the handshake) with messages of at most *max_message_bytes*
        (UTF-8 bytes for text, bytes for binary)."""
        #: wsproto's frame protocol: parses every frame the fast path does not
        self._ws = connection
        self._max = max_message_bytes
        #: bytes from the client not parsed yet (see feed)
        self._inbuf = bytearray()
        #: bytes of the frame being handed to wsproto still to come
        self._to_wsproto = 0
        #: a fragmented message is under way (its frames are wsproto's)
        self._fragmented = False
        #: after the client's close frame (or a protocol error): everything is wsproto's
        self._wsproto_only = False
        #: the text of the message wsproto is passing on, so far
        self._parts: list[str] = []
        #: the payload of the binary message wsproto is passing on, so far
        self._data = bytearray()
        #: bytes of the message under way so far (UTF-8 bytes for text)
        self._size = 0
        #: the message under way is over the limit: its parts are dropped
        self._discarding = False
        #: complete messages, oldest first, not taken yet
        self._messages: deque[str | bytes | FrameTooLarge] = deque()
        #: control frames found, not taken yet
        self._controls: list[Ping | CloseConnection] = []

    def feed(self, data: bytes | bytearray) -> None:
        """Take bytes from the client, and parse what they complete.

        Once both sides' close frames are through (wsproto's state is
        ``CLOSED``), what comes is dropped: nothing more is read.

        Raises:
            wsproto.utilities.ProtocolError: wsproto's (its
                ``RemoteProtocolError`` or ``LocalProtocolError``), for bytes
                it will not take; the connection is over.
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
                # long one on in parts (and what is over the limit is dropped)
                if self._take_events():
                    # the client's close, or a protocol error: nothing after it is ours
                    self._wsproto_only = True
                continue
            if self._wsproto_only:
                self._ws.receive_data(bytes(buf))
                buf.clear()
                self._take_events()
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
                    self._messages.append(text)
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

    def next_message(self) -> str | bytes | FrameTooLarge | None:
        """The oldest complete message not taken yet, or None if there is none.

        A text message is a ``str``; a binary one its ``bytes``, undecoded;
        a message over the size limit (dropped whole) a :class:`FrameTooLarge`
        to raise or report.
        """
        return self._messages.popleft() if self._messages else None

    def take_controls(self) -> list[Ping | CloseConnection]:
        """The pings and close frames found since the last call, in order
        (a close may be wsproto's own, for bytes that break the protocol).
        Each is handed over once."""
        self._take_events()
        controls, self._controls = self._controls, []
        return controls

    def _take_events(self) -> bool:
        """Sort wsproto's events: message parts to :meth:`_add_part`,
        controls to ``_controls``. True if a close was among them."""
        closed = False
        for event in self._ws.events():
            if isinstance(event, TextMessage | BytesMessage):
                self._add_part(event)
            elif isinstance(event, Ping | CloseConnection):
                self._controls.append(event)
                closed = closed or isinstance(event, CloseConnection)
        return closed

    def _add_part(self, event: TextMessage | BytesMessage) -> None:
        """Add a part of a message wsproto passes on; the last completes it
        (or, over the limit, becomes a :class:`FrameTooLarge`)."""
        if not self._discarding:
            if isinstance(event, TextMessage):
                self._size += len(event.data.encode("utf-8", "surrogatepass"))
            else:
                self._size += len(event.data)
            if self._size > self._max:
                self._discarding = True
                self._parts.clear()
                self._data.clear()
            elif isinstance(event, TextMessage):
                self._parts.append(event.data)
            else:
                self._data += event.data
        if event.message_finished:
            if self._discarding:
                self._messages.append(FrameTooLarge())
            elif isinstance(event, TextMessage):
                self._messages.append("".join(self._parts))
            else:
                self._messages.append(bytes(self._data))
            self._parts.clear()
            self._data.clear()
            self._size = 0
            self._discarding = False
