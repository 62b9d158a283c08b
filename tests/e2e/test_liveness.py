"""Liveness over a served node: pings and the idle timeout, the deadline on
every request head, and the close frame owed to a client that is dropped.

Rules: loopback only, port 0, every wait bounded, no sleep standing for
"nothing happened". Timing is configured short (fractions of a second); what
the tests wait for is an event: a close frame, a presence event, a count of
pings answered (the clock of "several idle timeouts passed").

Clients: trio-websocket where a well-behaved client is wanted (its reader
answers pings by itself, given a queue long enough that it never blocks), and
:class:`RawClient` — wsproto on a plain TCP socket — where the test must see
each control frame, answer pings or not, or stop reading.
"""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Ping,
    Request,
    TextMessage,
)

from quart_mesh import MeshApp, Settings, create_app, serve
from tests.helpers import Changes, Mesh, Socket, User, open_client

#: the node's timing in these tests (seconds)
PING = 0.2
IDLE = 0.8
HEAD = 0.5

UPGRADE_LINES = (
    b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)


async def served(tmp_path: Path, nursery: trio.Nursery, **settings: Any) -> tuple[str, MeshApp]:
    app = create_app(Settings(data_dir=tmp_path, **settings))
    url: str = await nursery.start(lambda task_status: serve(app, port=0, task_status=task_status))
    return url, app


def address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


@asynccontextmanager
async def keeping_up(url: str, user: User) -> AsyncIterator[Socket]:
    """A trio-websocket client whose reader never blocks on its queue, so it
    answers every ping (as a client that reads its messages does)."""
    async with open_client(url, message_queue_size=4096) as ws:
        socket_ = Socket(ws)
        await socket_.send(type="authenticate", token=user.token)
        assert (await socket_.recv())["type"] == "auth_ok"
        assert (await socket_.recv())["type"] == "snapshot"
        yield socket_


class RawClient:
    """wsproto over a TCP socket: every frame seen, pings answered only if
    ``pong``, reading paused and resumed at will."""

    def __init__(self, stream: trio.SocketStream, *, pong: bool) -> None:
        self.stream = stream
        self.pong = pong
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.frames: list[dict[str, Any]] = []
        self.pings = 0
        self.opened = False
        self.close: CloseConnection | None = None
        #: how the TCP connection ended: "eof", "reset", or None while open
        self.ended: str | None = None
        self.reading = trio.Event()
        self.reading.set()
        self._part = ""
        self._changes = Changes()

    async def run(self) -> None:
        while self.ended is None:
            await self.reading.wait()
            try:
                data = await self.stream.receive_some(65536)
            except trio.BrokenResourceError:
                self._note(ended="reset")
                return
            if not data:
                self._note(ended="eof")
                return
            self.ws.receive_data(data)  # a frame cut short would raise here
            for event in self.ws.events():
                await self._on(event)
            self._note()

    def _note(self, ended: str | None = None) -> None:
        if ended is not None:
            self.ended = ended
        self._changes.note()

    async def _on(self, event: object) -> None:
        if isinstance(event, AcceptConnection):
            self.opened = True
        elif isinstance(event, Ping):
            self.pings += 1
            if self.pong:
                await self.stream.send_all(self.ws.send(event.response()))
        elif isinstance(event, TextMessage):
            self._part += event.data
            if event.message_finished:
                self.frames.append(json.loads(self._part))
                self._part = ""
        elif isinstance(event, CloseConnection):
            self.close = event

    async def until(self, predicate: Callable[[], bool], timeout: float = 10) -> None:
        await self._changes.until(predicate, timeout)

    async def send(self, **frame: Any) -> None:
        await self.stream.send_all(self.ws.send(TextMessage(json.dumps(frame))))

    async def expect(self, type: str, timeout: float = 10, **match: Any) -> dict[str, Any]:
        def found() -> dict[str, Any] | None:
            for frame in self.frames:
                if frame["type"] == type and all(frame.get(k) == v for k, v in match.items()):
                    return frame
            return None

        await self.until(lambda: found() is not None, timeout)
        frame = found()
        assert frame is not None
        return frame


@asynccontextmanager
async def raw_client(
    url: str, user: User, *, pong: bool, receive_buffer: int | None = None
) -> AsyncIterator[RawClient]:
    """A :class:`RawClient`, authenticated (``auth_ok`` and ``snapshot`` read)."""
    host, port = address(url)
    sock = trio.socket.socket()
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    await sock.connect((host, port))
    stream = trio.SocketStream(sock)
    client = RawClient(stream, pong=pong)
    async with stream, trio.open_nursery() as nursery:
        nursery.start_soon(client.run)
        await stream.send_all(client.ws.send(Request(host=host, target="/ws")))
        await client.until(lambda: client.opened)
        await client.send(type="authenticate", token=user.token)
        await client.expect("snapshot")
        yield client
        nursery.cancel_scope.cancel()


# pings and the idle timeout ----------------------------------------------------


async def test_a_client_that_stops_answering_pings_is_closed_and_goes_offline(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    url, app = await served(tmp_path, nursery, ws_ping_interval=PING, ws_idle_timeout=IDLE)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        bob = await mesh.register("bob")
        async with keeping_up(url, owner) as o, raw_client(url, bob, pong=False) as b:
            await o.expect("presence", participantId=bob.participant_id, online=True)
            # bob reads everything and answers nothing: pinged, then closed
            silent_from = trio.current_time()
            await b.until(lambda: b.close is not None)
            assert trio.current_time() - silent_from >= IDLE * 0.9
            assert b.close is not None
            assert (b.close.code, b.close.reason) == (1011, "idle_timeout")
            assert b.pings >= 2
            # then the node closes the TCP connection (a clean end, not a reset)
            await b.until(lambda: b.ended is not None, timeout=5)
            assert b.ended == "eof"
            # and bob goes offline, as when any session ends
            offline = await o.expect(
                "presence", participantId=bob.participant_id, online=False, timeout=10
            )
            assert offline["lastSeen"].endswith("Z")
            # the owner answered every ping meanwhile, and is still served
            await o.settle()
            assert app.node.realtime.sessions == 1  # the owner's
        people = (await http.get("/api/participants", headers=owner.headers)).json()
        assert {p["name"]: p["online"] for p in people}["bob"] is False


async def test_a_client_whose_reader_is_stuck_is_closed_and_goes_offline(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """trio-websocket answers pings from its reader task; with a queue of one
    message that nobody takes, that reader blocks, and the pongs stop."""
    url, app = await served(tmp_path, nursery, ws_ping_interval=PING, ws_idle_timeout=IDLE)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        bob = await mesh.register("bob")
        room_id = (await mesh.create_room(owner, "stuck"))["roomId"]
        await mesh.join(bob, room_id)
        async with keeping_up(url, owner) as o, open_client(url, message_queue_size=0) as ws:
            await ws.send_message(json.dumps({"type": "authenticate", "token": bob.token}))
            assert json.loads(await ws.get_message())["type"] == "auth_ok"
            assert json.loads(await ws.get_message())["type"] == "snapshot"
            await o.expect("presence", participantId=bob.participant_id, online=True)
            await mesh.send(owner, room_id, "nobody takes this one")  # bob's reader blocks on it
            await o.expect("presence", participantId=bob.participant_id, online=False, timeout=10)
            assert app.node.realtime.sessions == 1  # the owner's


async def test_clients_that_answer_pings_stay_connected(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    url, _ = await served(tmp_path, nursery, ws_ping_interval=PING, ws_idle_timeout=IDLE)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        bob = await mesh.register("bob")
        carol = await mesh.register("carol")
        async with (
            keeping_up(url, owner) as o,
            keeping_up(url, carol) as c,
            raw_client(url, bob, pong=True) as b,
        ):
            # bob's answered pings are the clock: wait out four idle timeouts
            # (carol and the owner, trio-websocket clients, say nothing at all)
            await b.until(lambda: b.pings >= 4 * IDLE / PING, timeout=30)
            assert b.close is None
            assert b.ended is None
            # all three are still served...
            await b.send(type="marker")
            assert (await b.expect("error", frame="marker"))["code"] == "unknown_type"
            await c.settle()
            await o.settle()
            # ...and nobody went offline
            offline = [f for f in o.seen if f["type"] == "presence" and not f["online"]]
            assert offline == []


# the deadline on request heads -----------------------------------------------------


async def dropped_within(stream: trio.SocketStream, seconds: float) -> bytes:
    """Whatever arrives until the node closes the connection (fails after *seconds*)."""
    received = b""
    with trio.fail_after(seconds):
        try:
            while chunk := await stream.receive_some(65536):
                received += chunk
        except trio.BrokenResourceError:
            pass
    return received


async def test_a_half_sent_upgrade_is_dropped_at_the_head_deadline(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    url, _ = await served(tmp_path, nursery, request_head_timeout=HEAD)
    host, port = address(url)
    for partial in (
        UPGRADE_LINES,  # all but the blank line that ends the head
        UPGRADE_LINES[:40],
        b"GET /api/health HTTP/1.1\r\nHost: x\r\n",  # not an upgrade: the same deadline
    ):
        stream = await trio.open_tcp_stream(host, port)
        async with stream:
            start = trio.current_time()
            await stream.send_all(partial)
            assert await dropped_within(stream, 5 + HEAD) == b""  # no 101, no answer at all
            assert trio.current_time() - start >= HEAD * 0.9


async def test_a_trickled_head_is_dropped_at_the_deadline_not_per_read(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """One more header line every tenth of a second: each read is quick, the
    head never ends; the deadline is for the whole head."""
    url, _ = await served(tmp_path, nursery, request_head_timeout=HEAD)
    stream = await trio.open_tcp_stream(*address(url))

    async def trickle() -> None:
        await stream.send_all(UPGRADE_LINES)
        try:
            for i in range(1000):
                await trio.sleep(HEAD / 5)
                await stream.send_all(b"X-%d: y\r\n" % i)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass

    async with stream, trio.open_nursery() as trickling:
        trickling.start_soon(trickle)
        assert await dropped_within(stream, 5 + HEAD) == b""
        trickling.cancel_scope.cancel()


async def test_a_later_head_on_a_kept_alive_connection_has_a_deadline(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    url, _ = await served(tmp_path, nursery, request_head_timeout=HEAD)
    stream = await trio.open_tcp_stream(*address(url))
    async with stream:
        await stream.send_all(b"GET /api/health HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        with trio.fail_after(5):
            while b'"ok"' not in answer:
                answer += await stream.receive_some(65536)
        assert answer.startswith(b"HTTP/1.1 200")
        await stream.send_all(UPGRADE_LINES)  # a second request, never finished
        assert await dropped_within(stream, 5 + HEAD) == b""


async def test_heads_that_arrive_in_time_are_served(tmp_path: Path, nursery: trio.Nursery) -> None:
    url, _ = await served(tmp_path, nursery, request_head_timeout=HEAD)
    stream = await trio.open_tcp_stream(*address(url))
    async with stream:
        await stream.send_all(UPGRADE_LINES[:30])
        await trio.sleep(HEAD / 5)  # split across packets, but within the deadline
        await stream.send_all(UPGRADE_LINES[30:] + b"\r\n")
        with trio.fail_after(5):
            answer = await stream.receive_some(65536)
        assert answer.startswith(b"HTTP/1.1 101")
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        owner = await Mesh(http).setup()
        async with keeping_up(url, owner) as o:
            await o.settle()


# clients dropped for not reading ---------------------------------------------------


async def test_a_lagging_client_gets_the_error_and_a_close_frame(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    url, app = await served(tmp_path, nursery, subscriber_buffer=8)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        room_id = (await mesh.create_room(owner, "firehose"))["roomId"]
        async with raw_client(url, owner, pong=True, receive_buffer=4096) as client:
            client.reading = trio.Event()  # stop reading
            for i in range(300):
                await mesh.send(owner, room_id, f"m{i} " + "x" * 2000)
                if app.node.broker.statistics().drops:
                    break
            assert app.node.broker.statistics().drops == 1
            client.reading.set()  # read again: what was queued, then the farewell
            await client.until(lambda: client.ended is not None)
        assert client.frames[-1]["code"] == "lagging"
        assert client.close is not None
        assert (client.close.code, client.close.reason) == (1013, "lagging")
        assert client.ended == "eof"
        contents = [f["content"].split()[0] for f in client.frames if f["type"] == "message"]
        assert contents == [f"m{i}" for i in range(len(contents))]


async def test_a_client_that_never_reads_again_is_let_go(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """After the send timeout, the node finishes the frame it was writing and
    sends a close frame if the socket takes it within a short deadline, else
    resets the connection; either way the client goes offline at once and
    never sees a frame cut short."""
    url, app = await served(tmp_path, nursery, subscriber_buffer=8, ws_send_timeout=1)
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        mesh = Mesh(http)
        owner = await mesh.setup()
        carol = await mesh.register("carol")
        room_id = (await mesh.create_room(carol, "firehose"))["roomId"]
        async with (
            keeping_up(url, owner) as o,
            raw_client(url, carol, pong=True, receive_buffer=4096) as client,
        ):
            await o.expect("presence", participantId=carol.participant_id, online=True)
            client.reading = trio.Event()  # and not again until the node has let go
            for i in range(300):
                await mesh.send(carol, room_id, f"m{i} " + "x" * 2000)
                if app.node.broker.statistics().drops:
                    break
            await o.expect("presence", participantId=carol.participant_id, online=False, timeout=15)
            assert app.node.realtime.sessions == 1  # the owner's
            client.reading.set()
            await client.until(lambda: client.ended is not None)
        # whole frames, then the node's close frame or a reset (wsproto reports
        # bytes that do not parse, such as a frame cut short, as a close 1002/1007)
        assert client.ended in ("eof", "reset")
        if client.ended == "eof":
            assert client.close is not None
            assert client.close.code == 1000, client.close
        else:
            assert client.close is None
        contents = [f["content"].split()[0] for f in client.frames if f["type"] == "message"]
        assert contents == [f"m{i}" for i in range(len(contents))]
