"""The adapter over an ASGI server's WebSocket, against a fake of Quart's
``websocket``, on trio's virtual clock."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from quart_mesh.events import RoomDeleted
from quart_mesh.realtime.quart_ws import END_OF_STREAM, QuartWebSocket
from quart_mesh.realtime.transport import ConnectionClosed, FrameTooLarge

pytestmark = pytest.mark.store_free


class FakeWebSocket:
    """Quart's ``websocket``: what the client sent, queued; sends fail once
    ``failing`` is set (an ASGI server may raise on a send to a client that
    is going)."""

    def __init__(self) -> None:
        self.incoming, self._queued = trio.open_memory_channel[str | bytes](math.inf)
        self.sent: list[str] = []
        self.closed: tuple[int, str] | None = None
        self.failing = False

    async def accept(self) -> None:
        pass

    async def receive(self) -> str | bytes:
        return await self._queued.receive()

    async def send(self, data: str) -> None:
        if self.failing:
            raise OSError("the client is gone")
        self.sent.append(data)

    async def close(self, code: int, reason: str = "") -> None:
        if self.failing:
            raise OSError("the client is gone")
        self.closed = (code, reason)


async def test_what_the_client_sent_is_read_after_a_send_fails(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Sends m0..m4 then a close: the echo of m1 fails; m2..m4, already
    buffered, are still handed over, then the end of the stream."""
    fake = FakeWebSocket()
    ws = QuartWebSocket(fake, max_message_bytes=1024)
    ws.keep_alive(20, 60)
    for n in range(5):
        fake.incoming.send_nowait(f"m{n}")
    fake.incoming.send_nowait(END_OF_STREAM)
    received = [await ws.receive(), await ws.receive()]
    await ws.send_frames([ws.encode(None, "echo m0")])
    fake.failing = True
    with pytest.raises(ConnectionClosed):
        await ws.send_frames([ws.encode(None, "echo m1")])
    with trio.fail_after(1):
        received += [await ws.receive() for _ in range(3)]
        with pytest.raises(ConnectionClosed):
            await ws.receive()
    assert received == [f"m{n}" for n in range(5)]
    assert fake.sent == ["echo m0"]
    with pytest.raises(ConnectionClosed):  # nothing more is sent
        await ws.send_text("late")
    await ws.close(1000)
    assert fake.closed is None


async def test_after_a_send_fails_a_silent_client_ends_at_the_idle_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No end of the stream ever comes (a server that does not report the
    client gone): once sending has failed, silence for the idle timeout ends
    the reading."""
    fake = FakeWebSocket()
    ws = QuartWebSocket(fake, max_message_bytes=1024)
    ws.keep_alive(20, 60)
    fake.failing = True
    with pytest.raises(ConnectionClosed):
        await ws.send_text("lost")
    fake.incoming.send_nowait("m0")
    assert await ws.receive() == "m0"
    start = trio.current_time()
    with trio.fail_after(3600), pytest.raises(ConnectionClosed):
        await ws.receive()
    assert trio.current_time() - start == pytest.approx(60)
    with pytest.raises(ConnectionClosed):
        await ws.receive()


async def test_receiving_stops_after_our_close(autojump_clock: trio.testing.MockClock) -> None:
    fake = FakeWebSocket()
    ws = QuartWebSocket(fake, max_message_bytes=1024)
    fake.incoming.send_nowait("m0")
    await ws.close(1013, "lagging")
    assert fake.closed == (1013, "lagging")
    with pytest.raises(ConnectionClosed):
        await ws.receive()


async def test_without_a_failed_send_silence_is_the_servers_business(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """ASGI has no pings: a quiet client is left to the server's own timeouts."""
    fake = FakeWebSocket()
    ws = QuartWebSocket(fake, max_message_bytes=1024)
    ws.keep_alive(20, 60)
    with trio.move_on_after(3600) as waited:
        await ws.receive()
    assert waited.cancelled_caught
    assert fake.sent == []


async def test_a_binary_message_is_received_as_its_bytes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Undecoded, UTF-8 or not (Quart hands over None for an empty one); its
    limit counted in bytes, a text message's in UTF-8 bytes."""
    fake = FakeWebSocket()
    ws = QuartWebSocket(fake, max_message_bytes=8)
    for data in (b"\xff\x00", b"{}", None, b"y" * 9, b"z" * 8, "é" * 5, "é" * 4):
        fake.incoming.send_nowait(data)  # type: ignore[arg-type]  # None, as Quart does
    assert await ws.receive() == b"\xff\x00"
    assert await ws.receive() == b"{}"
    assert await ws.receive() == b""
    with pytest.raises(FrameTooLarge):
        await ws.receive()
    assert await ws.receive() == b"z" * 8
    with pytest.raises(FrameTooLarge):
        await ws.receive()
    assert await ws.receive() == "é" * 4


async def test_frames_are_encoded_as_their_payload_and_sent_as_text(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The server frames each message: a frame here is its UTF-8 payload
    (once per event), sent as text; nothing is written without waiting, and
    nothing is ever owed."""
    fake = FakeWebSocket()
    ws = QuartWebSocket(fake, max_message_bytes=1024)
    event = RoomDeleted(room_id="r1")
    frame = ws.encode(event, event.frame)
    assert frame == event.frame.encode("utf-8")
    assert ws.encode(event, event.frame) is frame  # cached on the event
    assert ws.encode(None, "é") == "é".encode()
    assert ws.write_now([frame]) is None
    assert not ws.owes
    await ws.send_frames([frame, ws.encode(None, "é")])
    await ws.send_frames([])
    await ws.send_text("text")
    assert fake.sent == [event.frame, "é", "text"]
