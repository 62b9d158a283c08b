"""A WebSocket session's lifecycle in process, on trio's clock.

A real :class:`ProtocolSession` with the real broker, feed and tokens, over
a fake :class:`SessionSocket` (whole frames in and out, no bytes) and a
store without messages: no threads, so ``autojump_clock`` moves time only
when every task waits. What these pin down: the session ends when its
token expires (and says so at once, not after its sends), the sends it
queued are awaited past its end until ``SETTLE_TIMEOUT`` and no longer,
and each reason a subscription ends for is told to the client as the one
table (``ends.ENDINGS``) says.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing
from trio.testing import MockClock

from quart_mesh.broker import Broker
from quart_mesh.config import Settings
from quart_mesh.ends import EndReason
from quart_mesh.errors import RateLimited
from quart_mesh.events import Event
from quart_mesh.realtime._sends import Sends
from quart_mesh.realtime.session import SETTLE_TIMEOUT, ProtocolSession, SessionServices
from quart_mesh.realtime.transport import ConnectionClosed, Written
from quart_mesh.security import Tokens
from quart_mesh.services.authz import Actor
from quart_mesh.services.delivery import Backlog, Delivery

pytestmark = pytest.mark.store_free

#: the token's lifetime: the session's deadline
TTL = 3600
ROOM = "room"


class FakeSocket:
    """A session's socket that hands over whole messages: what the client
    sends is put in :attr:`inbox`; what the session writes is kept, as JSON,
    with the time it was written."""

    writes_now = False
    owes = False

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[str](16)
        #: (trio time, frame) of everything written
        self.sent: list[tuple[float, dict[str, Any]]] = []
        #: (trio time, code, reason) once the session closed
        self.closed: tuple[float, int, str] | None = None
        self._reading: trio.CancelScope | None = None

    async def client_sends(self, frame: dict[str, Any]) -> None:
        await self._send.send(json.dumps(frame))

    async def client_goes(self) -> None:
        await self._send.aclose()

    def keep_alive(self, ping_interval: float, idle_timeout: float) -> None:
        pass

    def encode(self, event: Event | None, frame: str) -> bytes:
        return frame.encode()

    def write_now(self, frames: list[bytes]) -> Written | None:
        return None

    async def receive(self) -> str:
        if self.closed is not None:
            raise ConnectionClosed
        with trio.CancelScope() as self._reading:
            try:
                return await self._receive.receive()
            except trio.EndOfChannel:
                raise ConnectionClosed from None
        raise ConnectionClosed  # closed while waiting

    async def send_frames(self, frames: Iterable[bytes], *, timeout: float = math.inf) -> None:
        for frame in frames:
            await self.send_text(frame.decode())

    async def send_text(self, text: str) -> None:
        if self.closed is not None:
            raise ConnectionClosed
        await trio.lowlevel.checkpoint()
        self.sent.append((trio.current_time(), json.loads(text)))

    async def close(self, code: int, reason: str = "") -> None:
        if self.closed is None:
            self.closed = (trio.current_time(), code, reason)
        if self._reading is not None:
            self._reading.cancel()

    def errors(self) -> list[tuple[str, str]]:
        return [(f["code"], f["message"]) for _, f in self.sent if f["type"] == "error"]


class _EmptyStore:
    """A store without messages (no threads: trio's clock stays in charge)."""

    async def read(self, fn: Callable[..., object]) -> object:
        return Backlog([], 0, False)


@dataclass
class _Accounts:
    actor: Actor

    async def authenticate(self, token: str) -> Actor:
        return self.actor

    async def actor_of(self, participant_id: str) -> Actor:
        return self.actor


@dataclass
class _Messages:
    """``submit_send``: each send is stored once *stored* returns."""

    stored: Callable[[], Awaitable[object]]
    sent: list[str] = field(default_factory=list)

    def submit_send(self, actor: Actor, room_id: str, content: str, **_: Any) -> Awaitable[object]:
        self.sent.append(content)
        return self.stored()


class _Presence:
    @contextlib.asynccontextmanager
    async def attached(self, participant_id: str) -> AsyncIterator[None]:
        yield


class _Seats:
    @contextlib.contextmanager
    def hold(self, kind: str, participant_id: str, address: str | None) -> Iterator[None]:
        yield


@dataclass
class Harness:
    broker: Broker
    tokens: Tokens
    messages: _Messages
    services: SessionServices
    actor: Actor

    def token(self) -> str:
        return self.tokens.issue(self.actor.participant_id, "human", TTL)


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    actor = Actor("alice", "alice", "human", "human", "member")
    broker = Broker()
    broker.join(ROOM, actor.participant_id)
    accounts = _Accounts(actor)
    tokens = Tokens(b"k" * 32)
    messages = _Messages(trio.sleep_forever)
    world = SimpleNamespace(
        snapshot_frame=_snapshot, note_read=lambda participant_id, room_id, seq: None
    )
    services = SessionServices(
        settings=Settings(data_dir=tmp_path),
        delivery=Delivery(_EmptyStore(), broker, accounts, max_commands=100),  # type: ignore[arg-type]
        tokens=tokens,
        accounts=accounts,  # type: ignore[arg-type]
        presence=_Presence(),  # type: ignore[arg-type]
        world=world,  # type: ignore[arg-type]
        rooms=None,  # type: ignore[arg-type]
        messages=messages,  # type: ignore[arg-type]
        commands=None,  # type: ignore[arg-type]
        seats=_Seats(),  # type: ignore[arg-type]
        search=None,  # type: ignore[arg-type]
        tasks=None,  # type: ignore[arg-type]
    )
    return Harness(broker, tokens, messages, services, actor)


async def _snapshot(actor: Actor) -> str:
    return json.dumps({"type": "snapshot"})


async def _run(harness: Harness, ws: FakeSocket) -> None:
    """Run a session whose client authenticates first."""
    await ws.client_sends({"type": "authenticate", "token": harness.token()})
    await ProtocolSession(harness.services, ws).run()


async def _start(harness: Harness, ws: FakeSocket, nursery: trio.Nursery) -> None:
    """Start a session whose client authenticates first; what the test sends comes after."""
    await ws.client_sends({"type": "authenticate", "token": harness.token()})
    nursery.start_soon(ProtocolSession(harness.services, ws).run)


def _types(ws: FakeSocket) -> list[str]:
    return [frame["type"] for _, frame in ws.sent]


async def test_the_session_ends_when_its_token_expires(
    harness: Harness, autojump_clock: MockClock
) -> None:
    ws = FakeSocket()
    await _run(harness, ws)  # returns only once the session is over
    assert _types(ws) == ["auth_ok", "snapshot", "error"]
    assert ws.errors() == [
        ("token_expired", "the token has expired; authenticate again with a new one")
    ]
    assert ws.closed is not None
    at, code, reason = ws.closed
    assert (code, reason) == (1008, "token_expired")
    # the token's lifetime, in whole seconds of the wall clock it was issued by
    assert TTL - 2 <= at <= TTL
    assert harness.broker.statistics().subscribers == 0


async def test_a_token_that_expires_is_told_at_once_while_sends_are_still_stored(
    harness: Harness, autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    # a send the store never finishes: the session's deadline passes while
    # it waits. The client hears why at the expiry, not SETTLE_TIMEOUT later;
    # the send is awaited until then, and given up with a warning
    ws = FakeSocket()
    async with trio.open_nursery() as nursery:
        await _start(harness, ws, nursery)
        await ws.client_sends({"type": "send_message", "roomId": ROOM, "content": "hi"})
    assert harness.messages.sent == ["hi"]
    assert ws.closed is not None
    expired_at, code, reason = ws.closed
    assert (code, reason) == (1008, "token_expired")
    assert TTL - 2 <= expired_at <= TTL
    assert trio.current_time() == pytest.approx(expired_at + SETTLE_TIMEOUT)
    assert "not stored in time" in caplog.text


async def test_sends_queued_when_the_client_goes_are_awaited_until_the_settle_deadline(
    harness: Harness, autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    ws = FakeSocket()
    async with trio.open_nursery() as nursery:
        await _start(harness, ws, nursery)
        await ws.client_sends({"type": "send_message", "roomId": ROOM, "content": "one"})
        await ws.client_sends({"type": "send_message", "roomId": ROOM, "content": "two"})
        await ws.client_goes()
        went = trio.current_time()
    # both were queued; the first is awaited until the deadline, and the
    # second has no time left
    assert harness.messages.sent == ["one", "two"]
    assert trio.current_time() == pytest.approx(went + SETTLE_TIMEOUT)
    assert caplog.text.count("not stored in time") == 2
    assert ws.closed is None  # the client went: nothing more to say (the caller closes)


async def test_a_send_stored_after_the_client_went_ends_the_session_then(
    harness: Harness, autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    harness.messages.stored = lambda: trio.sleep(2)
    ws = FakeSocket()
    async with trio.open_nursery() as nursery:
        await _start(harness, ws, nursery)
        await ws.client_sends({"type": "send_message", "roomId": ROOM, "content": "one"})
        await ws.client_goes()
    assert harness.messages.sent == ["one"]
    assert trio.current_time() == pytest.approx(2)
    assert "not stored in time" not in caplog.text


async def test_a_send_refused_by_the_store_is_answered_with_its_client_id(
    harness: Harness, autojump_clock: MockClock
) -> None:
    async def refused() -> None:
        await trio.sleep(1)
        raise RateLimited("slow down", 3.0)

    harness.messages.stored = refused
    ws = FakeSocket()
    async with trio.open_nursery() as nursery:
        await _start(harness, ws, nursery)
        frame = {"type": "send_message", "roomId": ROOM, "content": "x", "clientId": "c-1"}
        await ws.client_sends(frame)
        await trio.sleep(2)
        nursery.cancel_scope.cancel()
    errors = [f for _, f in ws.sent if f["type"] == "error"]
    assert errors == [
        {
            "type": "error",
            "message": "slow down",
            "code": "rate_limited",
            "frame": "send_message",
            "retryAfter": 3.0,
            "clientId": "c-1",
        }
    ]


#: what the client is told when its subscription ends for each reason:
#: (error code, error text) or None, then the close code and reason (None:
#: the session ends without closing; its caller closes with 1000)
FAREWELLS: dict[EndReason, tuple[tuple[str, str] | None, tuple[int, str] | None]] = {
    EndReason.LAGGING: (
        (
            "lagging",
            "this connection fell too far behind; reconnect with since=<last cursor>",
        ),
        (1013, "lagging"),
    ),
    EndReason.REMOVED: (("removed", "this participant was removed"), (1008, "removed")),
    EndReason.EXPIRED: (
        ("token_expired", "the token has expired; authenticate again with a new one"),
        (1008, "token_expired"),
    ),
    EndReason.REVOKED: (
        ("token_revoked", "guest access to this mesh has ended"),
        (1008, "token_revoked"),
    ),
    EndReason.SIGNED_OUT: (
        ("token_revoked", "this token was signed out"),
        (1008, "token_revoked"),
    ),
    EndReason.UNAVAILABLE: (None, (1013, "unavailable")),
    EndReason.CLOSED: (None, None),
}


@pytest.mark.parametrize("reason", list(EndReason))
async def test_each_end_is_told_to_the_client_as_the_table_says(
    harness: Harness, autojump_clock: MockClock, reason: EndReason
) -> None:
    ws = FakeSocket()
    async with trio.open_nursery() as nursery:
        await _start(harness, ws, nursery)
        await trio.sleep(1)  # live
        assert _types(ws) == ["auth_ok", "snapshot"]
        assert harness.broker.disconnect(harness.actor.participant_id, reason) == 1
    error, close = FAREWELLS[reason]
    assert ws.errors() == ([] if error is None else [error])
    assert (ws.closed and ws.closed[1:]) == close
    assert trio.current_time() == pytest.approx(1)  # at once


async def test_the_send_window_waits_for_a_slot_and_a_refused_send_gives_its_slot_back(
    autojump_clock: MockClock,
) -> None:
    # the pipeline of one session, alone: at most max_in_flight sends wait
    # for the store; the next waits for a slot, and a send refused before
    # it is queued gives its slot back at once
    broker = Broker()
    stored: list[trio.Event] = []

    def submit() -> Awaitable[object]:
        done = trio.Event()
        stored.append(done)
        return done.wait()

    def refused() -> Awaitable[object]:
        raise RateLimited("slow down", 1.0)

    with broker.subscribe("alice") as sub:
        async with trio.open_nursery() as nursery:
            sends = Sends(nursery, sub, max_in_flight=2)
            with pytest.raises(RateLimited):
                await sends.queue(refused, None)
            await sends.queue(submit, "a")
            await sends.queue(submit, "b")  # the window is full now
            assert sub.sending
            with trio.move_on_after(60) as waited:
                await sends.queue(submit, "c")
            assert waited.cancelled_caught  # no slot for a minute
            stored[0].set()  # "a" is stored: its slot is free
            with trio.fail_after(1):
                await sends.queue(submit, "c")
            for done in stored[1:]:
                done.set()
            await trio.testing.wait_all_tasks_blocked()
            assert not sub.sending  # nothing waits for the store
            nursery.cancel_scope.cancel()
