"""The WebSocket transport's timing, in-process on trio's virtual clock.

Pings and the idle timeout run on ``autojump_clock``: minutes of silence take
no real time, and when things happen is exact. The client side is wsproto
over the other end of the stream, so every byte the transport writes is
parsed as a browser would (a frame cut short would fail to parse).
"""

from __future__ import annotations

import json
import math
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
import trio
import trio.testing
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Ping,
    Pong,
    Request,
    TextMessage,
)

from quart_mesh.events import RoomDeleted
from quart_mesh.realtime.transport import (
    CLOSE_TIMEOUT,
    IDLE_CLOSE_CODE,
    ConnectionClosed,
    FrameTooLarge,
    WebSocket,
    Written,
    encode_text_frame,
)

pytestmark = pytest.mark.store_free

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
    pongs: list[float] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    closed: CloseConnection | None = None
    open: trio.Event = field(default_factory=trio.Event)
    #: a slow link: read at most *chunk* bytes every *read_every* seconds
    chunk: int = 65536
    read_every: float = 0.0
    _part: str = ""

    def close_frame(self) -> CloseConnection | None:
        return self.closed

    def request(self) -> bytes:
        """The opening handshake's request head."""
        return self.ws.send(Request(host="x", target="/ws"))

    async def run(self) -> None:
        """Read until the server's close frame, EOF or a reset."""
        while self.closed is None:
            await trio.sleep(self.read_every)
            try:
                data = await self.stream.receive_some(self.chunk)
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
        elif isinstance(event, Pong):
            self.pongs.append(trio.current_time())
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


@asynccontextmanager
async def accepted_over_tcp(
    *, small_buffers: bool = False
) -> AsyncIterator[tuple[WebSocket, Client]]:
    """A WebSocket accepted over loopback TCP, and its client, which reads
    nothing until a test runs it (``client.run``)."""
    async with tcp_pair() as (server, client_end):
        if small_buffers:
            _small_buffers(server, client_end)
        ws = WebSocket(server, max_message_bytes=1024)
        client = Client(client_end, pong=False)
        assert await ws.accept(client.request())
        yield ws, client


def frames(count: int) -> list[bytes]:
    return [
        encode_text_frame(json.dumps({"n": n, "pad": "x" * 60_000}).encode()) for n in range(count)
    ]


async def test_a_write_cut_off_is_finished_before_the_close_frame(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with accepted_over_tcp() as (ws, client):
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


async def test_a_write_that_times_out_before_it_goes_on_still_owes_its_frame(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The kernel takes part of a write at once, then nothing before the
    timeout: the frame it took part of is still finished before the close
    frame, and nothing after it is sent."""
    async with accepted_over_tcp() as (ws, client):
        with pytest.raises(trio.TooSlowError):
            await ws.send_frames(frames(200), timeout=0)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.run)  # now it reads
            await ws.close(1013, "lagging")
        numbers = [json.loads(m)["n"] for m in client.messages]
        assert numbers == list(range(len(numbers)))
        assert 0 < len(numbers) < 200
        assert client.closed is not None
        assert (client.closed.code, client.closed.reason) == (1013, "lagging")


async def test_a_write_now_the_kernel_takes_in_part_owes_the_end_of_its_last_frame(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The client is not reading: ``write_now`` writes what the kernel takes
    and says how many frames are the socket's, the last of them begun. With
    nothing left to send, ``send_frames([])`` finishes that frame; the
    client reads whole frames, then the close frame."""
    async with accepted_over_tcp(small_buffers=True) as (ws, client):
        owes = [ws.owes]
        written = ws.write_now(frames(40))  # 2.4 MB: more than the buffers hold
        assert written is not None
        assert written.owed
        assert 0 < written.taken < 40
        owes.append(ws.owes)
        assert ws.write_now(frames(1)) is None  # the end owed goes first
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.run)  # now it reads
            await ws.send_frames([], timeout=30)
            owes.append(ws.owes)
            await ws.close()
        assert owes == [False, True, False]
        numbers = [json.loads(m)["n"] for m in client.messages]
        assert numbers == list(range(written.taken))
        assert client.closed is not None
        assert client.closed.code == 1000


async def test_the_frames_write_now_did_not_take_follow_the_end_it_owes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """As the session does it: what ``write_now`` did not take is sent with
    ``send_frames``, after the end of the frame it began."""
    async with accepted_over_tcp(small_buffers=True) as (ws, client):
        data = frames(40)
        written = ws.write_now(data)
        assert written is not None
        assert written.taken < 40
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.run)
            await ws.send_frames(data[written.taken :], timeout=30)
            await ws.close()
        assert [json.loads(m)["n"] for m in client.messages] == list(range(40))


async def test_a_write_now_the_kernel_takes_whole_owes_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with accepted_over_tcp() as (ws, client):
        sent = [ws.encode(None, json.dumps({"n": n})) for n in range(3)]
        assert ws.write_now(sent) == Written(taken=3, owed=False)
        assert ws.write_now([]) == Written(taken=0, owed=False)
        assert not ws.owes
        await ws.send_frames([])  # nothing owed: nothing written
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.run)
            await ws.close()
        assert [json.loads(m)["n"] for m in client.messages] == [0, 1, 2]


async def test_a_stream_other_than_a_socket_writes_nothing_now(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with accepted(pong=False) as (ws, client, _):
        assert ws.write_now([ws.encode(None, "{}")]) is None
        await ws.send_frames([ws.encode(None, "{}")])
        await ws.close()
    assert client.messages == ["{}"]


def test_encode_makes_a_text_frame_once_per_event() -> None:
    server_end, _ = trio.testing.memory_stream_pair()
    ws = WebSocket(server_end, max_message_bytes=1024)
    event = RoomDeleted(room_id="r1")
    frame = ws.encode(event, event.frame)
    assert frame == encode_text_frame(event.frame.encode("utf-8"))
    assert ws.encode(event, event.frame) is frame  # cached on the event
    assert ws.encode(None, "é") == encode_text_frame("é".encode())
    assert ws.encode(None, "é") is not ws.encode(None, "é")


async def test_a_binary_message_is_received_as_its_bytes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Undecoded, UTF-8 or not; its limit counted in bytes."""
    async with accepted(pong=False) as (ws, client, _):
        for data in (b'{"type":"x"}', b"\xff\x00", b"", b"y" * 1025, b"z" * 1024):
            await client.stream.send_all(client.ws.send(BytesMessage(data)))
        assert await ws.receive() == b'{"type":"x"}'
        assert await ws.receive() == b"\xff\x00"
        assert await ws.receive() == b""
        with pytest.raises(FrameTooLarge):
            await ws.receive()
        assert await ws.receive() == b"z" * 1024
        await ws.close()


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


class Wrapped(trio.abc.Stream):
    """A stream passing everything to *stream*; subclasses change writes."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self.stream.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self.stream.aclose()


class Stalled(Wrapped):
    """A stream whose writes wait until ``open_at`` (a client not reading
    until then) before they go through."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        super().__init__(stream)
        self.open_at = -math.inf

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.sleep_until(self.open_at)
        await self.stream.send_all(data)


async def test_a_ping_put_off_by_a_write_goes_out_when_the_write_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Ping at 45 s, idle at 60 s: the ping falls due while a write waits
    (from 40 s to 50 s) and goes out when that write ends, though no other
    write follows; the client answers it and stays."""
    server_end, client_end = trio.testing.memory_stream_pair()
    stalled = Stalled(server_end)
    ws = WebSocket(stalled, max_message_bytes=1024)
    client = Client(client_end, pong=True)
    assert await ws.accept(client.request())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        await client.open.wait()
        ws.keep_alive(45, 60)
        start = trio.current_time()

        async def write() -> None:
            await trio.sleep_until(start + 40)
            stalled.open_at = start + 50
            await ws.send_text("late")

        nursery.start_soon(write)
        with trio.move_on_after(200) as waited:
            await ws.receive()
        assert waited.cancelled_caught  # not closed as idle at 60 s
        assert client.messages == ["late"]
        assert client.pings[0] - start == pytest.approx(50)
        assert client.closed is None
        await ws.close()


def _small_buffers(server: trio.SocketStream, client: trio.SocketStream) -> None:
    """Kernel buffers of tens of KiB, so that a slow reader holds up writes."""
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32768)


async def test_a_client_taking_long_writes_is_not_idle(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A client on a slow link takes minutes to read what was written to it
    and sends nothing (our pings wait behind the frames): each write that
    goes on as it reads shows it alive. Once nothing more is written, its
    silence counts again."""
    async with tcp_pair() as (server, client_end):
        _small_buffers(server, client_end)
        ws = WebSocket(server, max_message_bytes=1024)
        client = Client(client_end, pong=False, chunk=16384, read_every=1)
        assert await ws.accept(client.request())
        data = frames(40)  # 2.4 MB at 16 KiB/s: about 150 s
        written = math.inf
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.run)
            await client.open.wait()
            ws.keep_alive(20, 60)
            start = trio.current_time()

            async def write() -> None:
                nonlocal written
                for i in range(0, len(data), 4):
                    with trio.fail_after(30):  # the session's send deadline
                        await ws.send_frames(data[i : i + 4])
                written = trio.current_time()

            nursery.start_soon(write)
            with pytest.raises(ConnectionClosed):
                await ws.receive()
            closed = trio.current_time()
        assert written - start > 120  # two idle timeouts of writing, all of it taken
        assert closed - written == pytest.approx(60, abs=1)
        assert [json.loads(m)["n"] for m in client.messages] == list(range(40))
        assert client.closed is not None
        assert (client.closed.code, client.closed.reason) == (IDLE_CLOSE_CODE, "idle_timeout")


async def test_writes_the_kernel_takes_at_once_are_not_life(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A client that reads nothing, written a small frame every 7 s (and
    pinged) that the kernel's buffers take at once, is closed as idle."""
    async with accepted_over_tcp() as (ws, _):
        ws.keep_alive(20, 60)
        start = trio.current_time()
        async with trio.open_nursery() as nursery:

            async def write() -> None:
                for n in range(100):
                    await trio.sleep(7)  # never at the idle deadline itself
                    await ws.send_text(json.dumps({"n": n}))

            nursery.start_soon(write)
            with pytest.raises(ConnectionClosed):
                await ws.receive()
            nursery.cancel_scope.cancel()
        assert trio.current_time() - start == pytest.approx(60)


async def handshake(ws: WebSocket, client: Client) -> None:
    """The opening handshake, the client reading the server's answer."""
    assert await ws.accept(client.request())
    client.ws.receive_data(bytes(await client.stream.receive_some(65536)))
    assert any(isinstance(e, AcceptConnection) for e in client.ws.events())


class Failing(Wrapped):
    """A stream whose writes fail once ``broken`` is set (a peer that reset
    its end) while what the peer sent before is still there to read."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        super().__init__(stream)
        self.broken = False

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self.broken:
            raise trio.BrokenResourceError
        await self.stream.send_all(data)


async def test_what_the_client_sent_is_read_after_a_write_fails(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A write fails (the echo of the first send); the frames the client sent
    before its close frame are still read, then the end of the stream."""
    server_end, client_end = trio.testing.memory_stream_pair()
    failing = Failing(server_end)
    ws = WebSocket(failing, max_message_bytes=1024)
    client = Client(client_end, pong=False)
    await handshake(ws, client)
    ws.keep_alive(20, 60)
    await client.stream.send_all(client.ws.send(TextMessage("m0")))
    assert await ws.receive() == "m0"
    failing.broken = True
    with pytest.raises(ConnectionClosed):
        await ws.send_text("echo of m0")
    # the rest, still unread when the write failed
    await client.stream.send_all(client.ws.send(TextMessage("m1")))
    await client.stream.send_all(client.ws.send(TextMessage("m2")))
    await client.stream.send_all(client.ws.send(CloseConnection(code=1000)))
    with trio.fail_after(1):
        assert [await ws.receive(), await ws.receive()] == ["m1", "m2"]
        with pytest.raises(ConnectionClosed):
            await ws.receive()
    with pytest.raises(ConnectionClosed):  # nothing more is sent
        await ws.send_text("late")


async def test_after_a_write_fails_a_silent_client_still_ends_at_the_idle_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    server_end, client_end = trio.testing.memory_stream_pair()
    failing = Failing(server_end)
    ws = WebSocket(failing, max_message_bytes=1024)
    client = Client(client_end, pong=False)
    await handshake(ws, client)
    ws.keep_alive(20, 60)
    failing.broken = True
    with pytest.raises(ConnectionClosed):
        await ws.send_text("lost")
    start = trio.current_time()
    with trio.fail_after(3600), pytest.raises(ConnectionClosed):
        await ws.receive()
    assert trio.current_time() - start == pytest.approx(60)


async def test_a_pong_to_a_client_that_does_not_read_is_cut_off_at_the_idle_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The client stopped reading (our writes block) and pings; nothing is
    queued for it, so no send deadline applies: the pong's own deadline
    (the idle timeout) ends the connection, which is reset."""
    server_end, client_end = trio.testing.memory_stream_pair()
    stalled = Stalled(server_end)
    ws = WebSocket(stalled, max_message_bytes=1024)
    client = Client(client_end, pong=False)
    await handshake(ws, client)
    ws.keep_alive(20, 60)
    stalled.open_at = math.inf  # from now on the client reads nothing
    start = trio.current_time()
    await client.stream.send_all(client.ws.send(Ping(b"are you there")))
    with trio.fail_after(3600), pytest.raises(ConnectionClosed):
        await ws.receive()
    assert trio.current_time() - start == pytest.approx(60)
    # reset: the stream is closed, its unsent bytes dropped
    with pytest.raises(trio.ClosedResourceError):
        await server_end.send_all(b"x")


async def test_a_ping_during_a_write_is_answered_after_it_without_holding_up_the_reader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A write waits (from 0 s to 30 s); the client pings at 5 s and sends a
    frame: the reader hands the frame over at once, and the pong follows the
    write."""
    server_end, client_end = trio.testing.memory_stream_pair()
    stalled = Stalled(server_end)
    ws = WebSocket(stalled, max_message_bytes=1024)
    client = Client(client_end, pong=False)
    assert await ws.accept(client.request())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        await client.open.wait()
        ws.keep_alive(20, 60)
        start = trio.current_time()
        stalled.open_at = start + 30
        nursery.start_soon(ws.send_text, "slow")
        await trio.sleep(5)
        data = client.ws.send(Ping(b"p")) + client.ws.send(TextMessage("frame"))
        await client.stream.send_all(data)
        assert await ws.receive() == "frame"
        assert trio.current_time() - start == pytest.approx(5)
        await trio.sleep(30)
        assert client.messages == ["slow"]
        assert [t - start for t in client.pongs] == pytest.approx([30])
        await ws.close()


async def test_a_ping_read_with_the_close_frame_is_not_answered(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A ping and then a close frame in one read: the close is answered, the
    ping not (wsproto refuses a pong once the close frame is read)."""
    server_end, client_end = trio.testing.memory_stream_pair()
    ws = WebSocket(server_end, max_message_bytes=1024)
    client = Client(client_end, pong=False)
    await handshake(ws, client)
    await client.stream.send_all(client.ws.send(Ping(b"p")) + client.ws.send(CloseConnection(1000)))
    with trio.fail_after(1), pytest.raises(ConnectionClosed):
        await ws.receive()
    await client.run()
    assert client.pongs == []
    assert client.closed is not None
    assert client.closed.code == 1000


async def test_the_answer_to_a_close_frame_is_cut_off_at_the_close_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A client that stopped reading sends a close frame: the answer gets
    :data:`CLOSE_TIMEOUT`, then the connection is reset."""
    server_end, client_end = trio.testing.memory_stream_pair()
    stalled = Stalled(server_end)
    ws = WebSocket(stalled, max_message_bytes=1024)
    client = Client(client_end, pong=False)
    await handshake(ws, client)
    stalled.open_at = math.inf
    start = trio.current_time()
    await client.stream.send_all(client.ws.send(CloseConnection(1000)))
    with trio.fail_after(3600), pytest.raises(ConnectionClosed):
        await ws.receive()
    assert trio.current_time() - start == pytest.approx(CLOSE_TIMEOUT)
    with pytest.raises(trio.ClosedResourceError):
        await server_end.send_all(b"x")
