"""The adapter over an ASGI server's WebSocket, against a fake of Quart's
``websocket``, on trio's virtual clock."""

from __future__ import annotations

import math

import pytest
import trio
import trio.testing

from quart_mesh.realtime.quart_ws import END_OF_STREAM, QuartWebSocket
from quart_mesh.realtime.transport import ConnectionClosed, encode_text_frame

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
    await ws.send_frames([encode_text_frame(b"echo m0")])
    fake.failing = True
    with pytest.raises(ConnectionClosed):
        await ws.send_frames([encode_text_frame(b"echo m1")])
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
