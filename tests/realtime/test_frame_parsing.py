"""The frame reader (:class:`~quart_mesh.realtime.reader.FrameReader`) gives
exactly what wsproto alone gives, for any mix of frames cut at any point:
simple text frames, fragmented messages, binary, pings, oversized and
invalid UTF-8 payloads, frames a client must not send, and bytes after the
client's close frame. No I/O: the reader is fed the bytes directly."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.utilities import ProtocolError

from quart_mesh.realtime.reader import FrameReader
from quart_mesh.realtime.transport import FrameTooLarge

pytestmark = pytest.mark.store_free

LIMIT = 64

texts = (
    st.text(max_size=40) | st.text(min_size=60, max_size=90) | st.text(min_size=126, max_size=200)
)
#: around the limit, as the texts are
binaries = st.binary(max_size=40) | st.binary(min_size=60, max_size=90)
frames = st.one_of(
    st.tuples(st.just("text"), texts),
    st.tuples(st.just("parts"), st.lists(st.text(max_size=30), min_size=2, max_size=4)),
    st.tuples(st.just("binary"), binaries),
    st.tuples(st.just("binary_parts"), st.lists(st.binary(max_size=30), min_size=2, max_size=4)),
    st.tuples(st.just("interleaved"), st.text(max_size=10)),
    st.tuples(st.just("ping"), st.binary(max_size=10)),
    st.tuples(st.just("bad"), st.binary(min_size=1, max_size=10)),
    st.tuples(st.just("unmasked"), st.text(max_size=10)),
    st.tuples(st.just("rsv"), st.text(max_size=10)),
    st.tuples(st.just("close"), st.just(b"")),
    st.tuples(st.just("long_length"), st.text(max_size=10)),
)


def client_bytes(items: list[tuple[str, object]]) -> bytes:
    """What a client sends for *items* (some of it against the protocol)."""
    client = Connection(ConnectionType.CLIENT)
    out = b""
    for kind, value in items:
        if kind == "text":
            assert isinstance(value, str)
            out += client.send(TextMessage(value))
        elif kind == "parts":
            assert isinstance(value, list)
            for i, part in enumerate(value):
                out += client.send(TextMessage(part, message_finished=i == len(value) - 1))
        elif kind == "binary":
            assert isinstance(value, bytes)
            out += client.send(BytesMessage(value))
        elif kind == "binary_parts":
            assert isinstance(value, list)
            for i, chunk in enumerate(value):
                out += client.send(BytesMessage(chunk, message_finished=i == len(value) - 1))
        elif kind == "interleaved":  # a whole text frame inside a fragmented message
            assert isinstance(value, str)
            out += client.send(TextMessage("first", message_finished=False))
            out += Connection(ConnectionType.CLIENT).send(TextMessage(value))
            out += client.send(TextMessage("last"))
        elif kind == "ping":
            assert isinstance(value, bytes)
            out += client.send(Ping(value))
        elif kind == "bad":  # a text frame whose payload is not UTF-8 (a zero mask)
            assert isinstance(value, bytes)
            payload = b"\xff" + value
            out += bytes((0x81, 0x80 | len(payload))) + b"\0\0\0\0" + payload
        elif kind in ("unmasked", "rsv"):  # a client must mask; no extensions agreed
            assert isinstance(value, str)
            payload = value.encode()
            first, second = (
                (0x81, len(payload)) if kind == "unmasked" else (0xC1, 0x80 | len(payload))
            )
            out += bytes((first, second)) + (b"" if kind == "unmasked" else b"\0\0\0\0") + payload
        elif kind == "long_length":  # a short length in 16 bits: not allowed
            assert isinstance(value, str)
            payload = value.encode()
            out += bytes((0x81, 0x80 | 126)) + len(payload).to_bytes(2, "big") + b"\0\0\0\0"
            out += payload
        else:  # the client's close frame (code 1000, a zero mask), then more
            out += bytes((0x88, 0x82)) + b"\0\0\0\0" + (1000).to_bytes(2, "big")
    return out


def pieces(data: bytes, cuts: list[int]) -> list[bytes]:
    """*data* cut at *cuts*, as reads from the network might cut it."""
    bounds = [0, *sorted(set(cuts)), len(data)]
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


@dataclass
class Parsed:
    """What came out of a client's bytes: messages (``"too large"`` for one
    over the limit), controls as ``("ping", payload)`` or ``("close",
    code)``, and whether the parser refused a piece."""

    messages: list[object] = field(default_factory=list)
    controls: list[tuple[str, object]] = field(default_factory=list)
    broken: bool = False


def control(event: Ping | CloseConnection) -> tuple[str, object]:
    if isinstance(event, Ping):
        return ("ping", bytes(event.payload))
    return ("close", event.code)


def by_reader(data: bytes, cuts: list[int]) -> Parsed:
    reader = FrameReader(Connection(ConnectionType.SERVER), max_message_bytes=LIMIT)
    parsed = Parsed()
    for piece in pieces(data, cuts):
        try:
            reader.feed(piece)
        except ProtocolError:
            parsed.broken = True
            break
        # taken as the socket takes them: after each read
        parsed.controls += [control(event) for event in reader.take_controls()]
        while (item := reader.next_message()) is not None:
            parsed.messages.append("too large" if isinstance(item, FrameTooLarge) else item)
    parsed.controls += [control(event) for event in reader.take_controls()]
    return parsed


def by_wsproto(data: bytes, cuts: list[int]) -> Parsed:
    """wsproto alone, with the size limit applied to whole messages."""
    conn = Connection(ConnectionType.SERVER)
    parsed = Parsed()
    text_parts: list[str] = []
    binary = bytearray()
    for piece in pieces(data, cuts):
        try:
            conn.receive_data(piece)
        except ProtocolError:
            parsed.broken = True
            break
        for event in conn.events():
            if isinstance(event, Ping | CloseConnection):
                parsed.controls.append(control(event))
            elif isinstance(event, TextMessage | BytesMessage):
                if isinstance(event, TextMessage):
                    text_parts.append(event.data)
                else:
                    binary += event.data
                if event.message_finished:
                    message: str | bytes
                    if isinstance(event, TextMessage):
                        message = "".join(text_parts)
                        size = len(message.encode("utf-8"))
                    else:
                        message = bytes(binary)
                        size = len(message)
                    parsed.messages.append("too large" if size > LIMIT else message)
                    text_parts.clear()
                    binary.clear()
    return parsed


@settings(max_examples=400, deadline=None)
@given(
    st.lists(frames, max_size=8),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=6),
)
def test_the_reader_agrees_with_wsproto(items: list[tuple[str, object]], cuts: list[int]) -> None:
    data = client_bytes(items)
    cuts = [c for c in cuts if c < len(data)]
    assert by_reader(data, cuts) == by_wsproto(data, cuts)


def test_bytes_after_both_close_frames_are_dropped() -> None:
    """The node closed first; the client's close frame and more bytes come
    in one read: the rest is dropped, not an error out of wsproto."""
    conn = Connection(ConnectionType.SERVER)
    reader = FrameReader(conn, max_message_bytes=LIMIT)
    conn.send(CloseConnection(1011, "idle_timeout"))  # ours, first
    reader.feed(client_bytes([("close", b""), ("text", "after the close")]))
    assert reader.next_message() is None
    assert [control(event) for event in reader.take_controls()] == [("close", 1000)]
