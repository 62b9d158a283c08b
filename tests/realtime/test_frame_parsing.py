"""The transport's own parser of client frames (``WebSocket._feed``) gives
exactly what wsproto alone gives, for any mix of frames cut at any point:
simple text frames, fragmented messages, binary, pings, oversized and
invalid UTF-8 payloads."""

from __future__ import annotations

import pytest
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.utilities import RemoteProtocolError

from quart_mesh.realtime.transport import FrameTooLarge, WebSocket

pytestmark = pytest.mark.store_free

LIMIT = 64

texts = (
    st.text(max_size=40) | st.text(min_size=60, max_size=90) | st.text(min_size=126, max_size=200)
)
frames = st.one_of(
    st.tuples(st.just("text"), texts),
    st.tuples(st.just("parts"), st.lists(st.text(max_size=30), min_size=2, max_size=4)),
    st.tuples(st.just("binary"), st.binary(max_size=80)),
    st.tuples(st.just("ping"), st.binary(max_size=10)),
    st.tuples(st.just("bad"), st.binary(min_size=1, max_size=10)),
    st.tuples(st.just("unmasked"), st.text(max_size=10)),
    st.tuples(st.just("rsv"), st.text(max_size=10)),
    st.tuples(st.just("close"), st.just(b"")),
    st.tuples(st.just("long_length"), st.text(max_size=10)),
)


def client_bytes(items: list[tuple[str, object]]) -> bytes:
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


def parse(data: bytes, cuts: list[int], *, fast: bool) -> tuple[list[object], bool]:
    server, _ = trio.testing.memory_stream_pair()
    ws = WebSocket(server, max_message_bytes=LIMIT)
    ws._ws = Connection(ConnectionType.SERVER)  # past the handshake
    ws._wsproto_only = not fast
    broken = False
    start = 0
    for end in [*sorted(set(cuts)), len(data)]:
        try:
            ws._feed(data[start:end])
        except RemoteProtocolError:
            broken = True
            break
        start = end
    ws._controls.extend(ws._take_events())
    closed = any(isinstance(c, CloseConnection) for c in ws._controls)
    pending = ["too large" if isinstance(item, FrameTooLarge) else item for item in ws._pending]
    return pending, broken or closed


@settings(max_examples=400, deadline=None)
@given(
    st.lists(frames, max_size=8),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=6),
)
def test_the_fast_parser_agrees_with_wsproto(
    items: list[tuple[str, object]], cuts: list[int]
) -> None:
    data = client_bytes(items)
    cuts = [c for c in cuts if c < len(data)]
    assert parse(data, cuts, fast=True) == parse(data, cuts, fast=False)


def test_bytes_after_both_close_frames_are_dropped() -> None:
    """The node closed first; the client's close frame and more bytes come
    in one read: the rest is dropped, not an error out of wsproto."""
    server, _ = trio.testing.memory_stream_pair()
    ws = WebSocket(server, max_message_bytes=LIMIT)
    ws._ws = Connection(ConnectionType.SERVER)
    ws._ws.send(CloseConnection(1011, "idle_timeout"))  # ours, first
    data = client_bytes([("close", b""), ("text", "after the close")])
    ws._feed(data)
    assert ws._pending == []
    assert any(isinstance(event, CloseConnection) for event in ws._controls)
