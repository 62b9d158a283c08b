"""The WebSocket transport's timing, in-process on trio's virtual clock.

Pings and the idle timeout run on ``autojump_clock``: minutes of silence take
no real time, and when things happen is exact. The client side is wsproto
over the other end of the stream, so every byte the transport writes is
parsed as a browser would (a frame cut short would fail to parse).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Event,
    Ping,
    Request,
    TextMessage,
)

from quart_mesh.realtime.transport import (
    CLOSE_TIMEOUT,
    IDLE_CLOSE_CODE,
    ConnectionClosed,
    WebSocket,
    encode_text_frame,
)

HEAD = (
    b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


@dataclass
class Client:
    """The client end: parses what the server sends; pongs only if told to."""

    stream: trio.abc.Stream
    pong: bool
    ws: WSConnection = field(default_factory=lambda: WSConnection(ConnectionType.CLIENT))
    pings: list[float] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    closed: CloseConnection | None = None
    open: trio.Event = field(default_factory=trio.Event)
    _part: str = ""

    def close_frame(self) -> CloseConnection | None:
        return self.closed

    def request(self) -> bytes:
        """The opening handshake's request head."""
        return self.ws.send(Request(host="x", target="/ws"))

    async def run(self) -> None:
        """Read until the server's close frame, EOF or a reset."""
        while self.closed is None:
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                return
            if not data:
                return
            self.ws.receive_data(bytes(data))
            for event in self.ws.events():
                await self._on(event)

    async def _on(self, event: Event) -> None:
        if isinstance(event, Ping):
            self.pings.append(trio.current_time())
            if self.pong:
                await self.stream.send_all(self.ws.send(event.response()))
        elif isinstance(event, TextMessage):
            self._part += event.data
            if event.message_finished:
                self.messages.append(self._part)
                self._part = ""
        elif isinstance(event, CloseConnection):
            self.closed = event
        else:
            assert isinstance(event, AcceptConnection), event
            self.open.set()


@asynccontextmanager
async def accepted(*, pong: bool) -> AsyncIterator[tuple[WebSocket, Client, trio.Nursery]]:
    server_end, client_end = trio.testing.memory_stream_pair()
    ws = WebSocket(server_end, max_message_bytes=1024)
    client = Client(client_end, pong=pong)
    assert await ws.accept(client.request())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        await client.open.wait()
        yield ws, client, nursery


async def test_a_silent_client_is_pinged_then_closed(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with accepted(pong=False) as (ws, client, _):
        ws.keep_alive(20, 60)
        start = trio.current_time()
        with pytest.raises(ConnectionClosed):
            await ws.receive()
        assert trio.current_time() - start == pytest.approx(60)
    assert [t - start for t in client.pings] == pytest.approx([20, 40])
    assert client.closed is not None
    assert (client.closed.code, client.closed.reason) == (IDLE_CLOSE_CODE, "idle_timeout")


async def test_a_client_that_answers_pings_stays(autojump_clock: trio.testing.MockClock) -> None:
    async with accepted(pong=True) as (ws, client, _):
        ws.keep_alive(20, 60)
        with trio.move_on_after(3600) as waited:
            await ws.receive()
        assert waited.cancelled_caught  # an hour of silence but for pongs: still open
        assert len(client.pings) == 179  # at 20, 40, ... 3580 s
        assert client.closed is None
        await ws.close()
    closed = client.close_frame()  # received by the client's task meanwhile
    assert closed is not None
    assert closed.code == 1000


async def test_any_frame_counts_as_an_answer(autojump_clock: trio.testing.MockClock) -> None:
    """No pong, but a frame every 50 s: never 60 s of silence, never a ping."""
    async with accepted(pong=False) as (ws, client, _):
        ws.keep_alive(55, 60)
        for n in range(10):
            await trio.sleep(50)
            await client.stream.send_all(client.ws.send(TextMessage(json.dumps({"n": n}))))
            assert json.loads(await ws.receive()) == {"n": n}
        assert client.pings == []
        await ws.close()


async def test_time_spent_handling_a_frame_is_not_silence(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with accepted(pong=False) as (ws, client, _):
        ws.keep_alive(20, 60)
        await client.stream.send_all(client.ws.send(TextMessage("work")))
        assert await ws.receive() == "work"
        await trio.sleep(600)  # the reader is busy (a slow store, say)
        start = trio.current_time()
        with pytest.raises(ConnectionClosed):
            await ws.receive()
        assert trio.current_time() - start == pytest.approx(60)


async def test_without_keep_alive_nothing_is_sent(autojump_clock: trio.testing.MockClock) -> None:
    async with accepted(pong=False) as (ws, client, _):
        with trio.move_on_after(3600):
            await ws.receive()
        assert client.pings == []
        await ws.close()


@asynccontextmanager
async def tcp_pair() -> AsyncIterator[tuple[trio.SocketStream, trio.SocketStream]]:
    """A connected pair of loopback TCP streams (the transport's real kind)."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    await listeners[0].aclose()
    async with client, server:
        yield server, client


def frames(count: int) -> list[bytes]:
    return [
        encode_text_frame(json.dumps({"n": n, "pad": "x" * 60_000}).encode()) for n in range(count)
    ]


async def test_a_write_cut_off_is_finished_before_the_close_frame(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tcp_pair() as (server, client_end):
        ws = WebSocket(server, max_message_bytes=1024)
        client = Client(client_end, pong=False)
        assert await ws.accept(client.request())
        # the client does not read: the write stops partway, at the deadline
        with trio.move_on_after(30) as cut:
            await ws.send_frames(frames(200))  # 12 MB: more than the socket buffers hold
        assert cut.cancelled_caught
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.run)  # now it reads again
            await ws.close(1013, "lagging")
        # whole frames, in order, up to the one cut off; then the close frame
        numbers = [json.loads(m)["n"] for m in client.messages]
        assert numbers == list(range(len(numbers)))
        assert 0 < len(numbers) < 200
        assert client.closed is not None
        assert (client.closed.code, client.closed.reason) == (1013, "lagging")


async def test_a_client_that_does_not_read_the_close_frame_is_reset(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with tcp_pair() as (server, client_end):
        ws = WebSocket(server, max_message_bytes=1024)
        assert await ws.accept(HEAD)
        with trio.move_on_after(30):
            await ws.send_frames(frames(200))
        start = trio.current_time()
        await ws.close(1013, "lagging")
        assert trio.current_time() - start == pytest.approx(CLOSE_TIMEOUT)
        assert server.socket.fileno() == -1  # closed, the kernel's buffers dropped
        with pytest.raises(ConnectionClosed):
            await ws.send_text("{}")
        # the client's end sees a reset, not a clean end after a cut frame
        with pytest.raises(trio.BrokenResourceError):  # noqa: PT012
            while await client_end.receive_some(1 << 20):
                pass


async def test_a_head_without_its_end_is_refused_without_reading_more(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server_end, client_end = trio.testing.memory_stream_pair()
    ws = WebSocket(server_end, max_message_bytes=1024)
    with trio.fail_after(1):  # nothing is read: no wait on the client
        assert not await ws.accept(HEAD[:-2])
    answer = await client_end.receive_some(65536)
    assert answer.startswith(b"HTTP/1.1 400 ")
