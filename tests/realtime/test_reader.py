"""The frame reader (:class:`~quart_mesh.realtime.reader.FrameReader`), by
example: which frames its fast path parses, which go to wsproto, and what
comes out. No I/O and no trio: the reader is fed bytes directly. The
property test against wsproto is ``test_frame_parsing.py``."""

from __future__ import annotations

import pytest
from wsproto import ConnectionType
from wsproto.connection import Connection
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage
from wsproto.frame_protocol import CloseReason

from quart_mesh.realtime.reader import FrameReader
from quart_mesh.realtime.transport import FrameTooLarge
from quart_mesh.wire import parse_json_object

pytestmark = pytest.mark.store_free

LIMIT = 16
KEY = b"\x37\xfa\x21\x3d"


class Spy(Connection):
    """wsproto's server connection, keeping every byte it is fed."""

    def __init__(self) -> None:
        self.fed = bytearray()
        super().__init__(ConnectionType.SERVER)

    def receive_data(self, data: bytes | None) -> None:
        if data:
            self.fed += data
        super().receive_data(data)


def masked(first: int, payload: bytes, *, length: bytes | None = None) -> bytes:
    """A client frame: *first* byte, then the payload's length (in the
    fewest bytes, unless *length* gives its encoding), then *payload*
    masked with :data:`KEY`."""
    if length is None:
        n = len(payload)
        if n < 126:
            length = bytes((n,))
        elif n < 65536:
            length = bytes((126,)) + n.to_bytes(2, "big")
        else:
            length = bytes((127,)) + n.to_bytes(8, "big")
    body = bytes(b ^ KEY[i % 4] for i, b in enumerate(payload))
    return bytes((first, 0x80 | length[0])) + length[1:] + KEY + body


def text(payload: str) -> bytes:
    return masked(0x81, payload.encode())


def reader_with_spy(limit: int = LIMIT) -> tuple[FrameReader, Spy]:
    spy = Spy()
    return FrameReader(spy, max_message_bytes=limit), spy


def messages(reader: FrameReader) -> list[str | bytes | FrameTooLarge]:
    out = []
    while (item := reader.next_message()) is not None:
        out.append(item)
    return out


def test_a_simple_masked_text_frame_is_parsed_without_wsproto() -> None:
    reader, spy = reader_with_spy()
    reader.feed(text("héllo"))
    assert reader.next_message() == "héllo"
    assert reader.next_message() is None
    assert reader.take_controls() == []
    assert spy.fed == b""  # the fast path's


def test_a_frame_split_at_every_byte_comes_out_whole() -> None:
    """Three frames (text, binary, text) cut once at every position, and fed
    a byte at a time: the same messages, in order."""
    data = text("one") + masked(0x82, b"\x00two") + text("x" * LIMIT)
    for cut in range(len(data) + 1):
        reader = FrameReader(Connection(ConnectionType.SERVER), max_message_bytes=LIMIT)
        reader.feed(data[:cut])
        reader.feed(data[cut:])
        assert messages(reader) == ["one", b"\x00two", "x" * LIMIT], cut
    reader = FrameReader(Connection(ConnectionType.SERVER), max_message_bytes=LIMIT)
    for i in range(len(data)):
        reader.feed(data[i : i + 1])
    assert messages(reader) == ["one", b"\x00two", "x" * LIMIT]


def test_a_ping_between_fragments_comes_out_first_and_the_message_whole() -> None:
    client = Connection(ConnectionType.CLIENT)
    first = client.send(TextMessage("hel", message_finished=False))
    ping = client.send(Ping(b"p"))
    last = client.send(TextMessage("lo"))
    reader, spy = reader_with_spy()
    reader.feed(text("before") + first + ping)
    assert reader.take_controls() == [Ping(b"p")]
    assert messages(reader) == ["before"]  # the message is not complete yet
    reader.feed(last + text("after"))
    assert messages(reader) == ["hello", "after"]
    assert reader.take_controls() == []
    assert spy.fed == first + ping + last  # the fragments and the ping are wsproto's


def test_a_binary_message_comes_out_as_its_bytes() -> None:
    """Undecoded, valid UTF-8 or not; fragmented too."""
    client = Connection(ConnectionType.CLIENT)
    reader = FrameReader(Connection(ConnectionType.SERVER), max_message_bytes=LIMIT)
    reader.feed(client.send(BytesMessage(b'{"type":"x"}')))
    reader.feed(client.send(BytesMessage(b"\xff\xfe")))
    reader.feed(client.send(BytesMessage(b"ab", message_finished=False)))
    reader.feed(client.send(BytesMessage(b"cd")))
    reader.feed(client.send(BytesMessage(b"")))
    got = messages(reader)
    assert got == [b'{"type":"x"}', b"\xff\xfe", b"abcd", b""]
    assert all(type(item) is bytes for item in got)


def test_a_character_split_between_binary_fragments_is_whole_in_the_message() -> None:
    """The parts of a binary message are joined before anything decodes
    them: a character cut between two fragments (or two reads) parses."""
    client = Connection(ConnectionType.CLIENT)
    reader = FrameReader(Connection(ConnectionType.SERVER), max_message_bytes=LIMIT)
    whole = '{"a":"é"}'.encode()
    cut = whole.index(b"\xa9")  # between the two bytes of é
    reader.feed(client.send(BytesMessage(whole[:cut], message_finished=False)))
    reader.feed(client.send(BytesMessage(whole[cut:])))
    (message,) = messages(reader)
    assert message == whole
    assert isinstance(message, bytes)
    assert parse_json_object(message) == {"a": "é"}


@pytest.mark.parametrize(
    "too_large",
    [
        pytest.param(text("x" * (LIMIT + 1)), id="text"),
        pytest.param(text("é" * (LIMIT // 2) + "x"), id="text-counted-in-utf8-bytes"),
        pytest.param(masked(0x82, b"\xff" * (LIMIT + 1)), id="binary"),
        pytest.param(
            masked(0x01, b"x" * (LIMIT - 1)) + masked(0x80, b"xx"), id="text-in-fragments"
        ),
        pytest.param(masked(0x02, b"x" * LIMIT) + masked(0x80, b"x"), id="binary-in-fragments"),
    ],
)
def test_a_message_over_the_limit_is_dropped_whole_and_the_next_is_fine(
    too_large: bytes,
) -> None:
    reader = FrameReader(Connection(ConnectionType.SERVER), max_message_bytes=LIMIT)
    reader.feed(too_large + text("x" * LIMIT) + masked(0x82, b"y" * LIMIT))
    got = messages(reader)
    assert isinstance(got[0], FrameTooLarge)
    assert got[1:] == ["x" * LIMIT, b"y" * LIMIT]
    assert reader.take_controls() == []


def test_a_length_not_in_the_fewest_bytes_goes_to_wsproto_which_refuses_it() -> None:
    reader, spy = reader_with_spy()
    frame = masked(0x81, b"short", length=bytes((126,)) + (5).to_bytes(2, "big"))
    reader.feed(frame)
    assert spy.fed == frame
    assert reader.next_message() is None
    [close] = reader.take_controls()
    assert isinstance(close, CloseConnection)
    assert close.code == CloseReason.PROTOCOL_ERROR


def test_invalid_utf8_in_a_text_frame_is_wsprotos_to_refuse() -> None:
    reader, spy = reader_with_spy()
    frame = masked(0x81, b"ok \xff")
    reader.feed(frame)
    assert spy.fed == frame
    assert reader.next_message() is None
    [close] = reader.take_controls()
    assert isinstance(close, CloseConnection)
    assert close.code == CloseReason.INVALID_FRAME_PAYLOAD_DATA


def test_bytes_after_the_clients_close_frame_are_wsprotos() -> None:
    """A simple text frame after the close frame is not parsed by the fast
    path (wsproto drops it: nothing follows a close frame), in the same
    read or a later one."""
    reader, spy = reader_with_spy()
    close = masked(0x88, (1000).to_bytes(2, "big"))
    reader.feed(text("last") + close + text("in the same read"))
    reader.feed(text("in a later read"))
    assert messages(reader) == ["last"]
    assert reader.take_controls() == [CloseConnection(1000, "")]
    assert spy.fed == close + text("in the same read") + text("in a later read")


def test_controls_are_handed_over_once_in_order() -> None:
    client = Connection(ConnectionType.CLIENT)
    reader = FrameReader(Connection(ConnectionType.SERVER), max_message_bytes=LIMIT)
    reader.feed(client.send(Ping(b"1")) + text("m") + client.send(Ping(b"2")))
    reader.feed(client.send(CloseConnection(1000, "bye")))
    assert reader.take_controls() == [Ping(b"1"), Ping(b"2"), CloseConnection(1000, "bye")]
    assert reader.take_controls() == []
    assert messages(reader) == ["m"]
