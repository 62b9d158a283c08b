"""The broker's direct writes (``Subscription.write_directly``, ``Broker.run``):
idle subscribers are written by the flusher, once per wake-up; what the
writer does not take goes back to the owner, first and in order; nothing is
stranded when the flusher stops; and a session notes as delivered only
what was written."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import trio
import trio.testing

from quart_mesh.broker import Broker, Left, Queued, Subscription
from quart_mesh.events import Event, MessageDeleted, MessagePosted
from quart_mesh.realtime.session import ProtocolSession
from quart_mesh.realtime.transport import Written
from quart_mesh.records import Message

pytestmark = pytest.mark.store_free


def msg(n: int) -> MessageDeleted:
    return MessageDeleted("r1", message_id=f"m{n}")


def ids(batch: list[Queued]) -> list[str]:
    return [e.message_id for e, _ in batch if isinstance(e, MessageDeleted)]


async def owner_takes(sub: Subscription, into: list[list[Queued]]) -> None:
    while batch := await sub.get_batch():
        into.append(batch)


async def test_an_idle_subscriber_is_written_directly_once_per_wake_up() -> None:
    broker = Broker()
    broker.join("r1", "p1")
    writes: list[list[Queued]] = []
    owner: list[list[Queued]] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        with broker.subscribe("p1") as sub:
            sub.write_directly(lambda batch: writes.append(batch) or Left([]))
            nursery.start_soon(owner_takes, sub, owner)
            await trio.testing.wait_all_tasks_blocked()
            for n in range(3):  # published together: one write
                broker.publish(msg(n))
            await trio.testing.wait_all_tasks_blocked()
            broker.publish(msg(3))
            await trio.testing.wait_all_tasks_blocked()
            assert [ids(batch) for batch in writes] == [["m0", "m1", "m2"], ["m3"]]
            assert owner == []  # its owner was never woken
            nursery.cancel_scope.cancel()


async def test_what_the_writer_leaves_goes_to_the_owner_first() -> None:
    broker = Broker()
    broker.join("r1", "p1")
    owner: list[list[Queued]] = []
    answers: list[Any] = [None, "some"]  # nothing written; then part of it

    def writer(batch: list[Queued]) -> Left | None:
        answer = answers.pop(0) if answers else "all"
        if answer is None:
            return None
        return Left(batch[1:] if answer == "some" else [])

    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        with broker.subscribe("p1") as sub:
            sub.write_directly(writer)
            nursery.start_soon(owner_takes, sub, owner)
            await trio.testing.wait_all_tasks_blocked()
            broker.publish(msg(0))  # the writer takes nothing: all to the owner
            await trio.testing.wait_all_tasks_blocked()
            broker.publish(msg(1))
            broker.publish(msg(2))  # the writer takes m1 only
            await trio.testing.wait_all_tasks_blocked()
            assert [ids(batch) for batch in owner] == [["m0"], ["m2"]]
            nursery.cancel_scope.cancel()


async def test_a_flusher_that_stops_leaves_no_subscriber_stranded() -> None:
    broker = Broker()
    for n in range(300):  # more than a slice
        broker.join("r1", f"p{n}")
    flusher = trio.CancelScope()
    written: list[list[Queued]] = []

    def writer(batch: list[Queued]) -> Left:
        flusher.cancel()  # stopped during its first slice
        written.append(batch)
        return Left([])

    owners: list[list[Queued]] = []
    subs = []
    async with trio.open_nursery() as nursery:

        async def run_flusher() -> None:
            with flusher:
                await broker.run()

        nursery.start_soon(run_flusher)
        await trio.testing.wait_all_tasks_blocked()
        for n in range(300):
            sub = broker.subscribe(f"p{n}")
            subs.append(sub)
            sub.write_directly(writer)
            nursery.start_soon(owner_takes, sub, owners)
        await trio.testing.wait_all_tasks_blocked()
        broker.publish(msg(0))
        await trio.testing.wait_all_tasks_blocked()
        assert not broker.flushing
        # one slice written by the flusher, the rest by their owners: all got m0
        assert len(written) == 128
        assert len(owners) == 300 - 128
        assert all(ids(batch) == ["m0"] for batch in written + owners)
        nursery.cancel_scope.cancel()
    for sub in subs:
        sub.close()


async def test_a_session_notes_only_what_was_written() -> None:
    noted: list[int] = []
    world = SimpleNamespace(note_read=lambda pid, room, seq: noted.append(seq))
    services = SimpleNamespace(world=world)
    written: list[bytes] = []

    class Socket:
        writes_now = True

        def encode(self, event: Event | None, frame: str) -> bytes:
            return frame.encode()

        def write_now(self, frames: list[bytes]) -> Written:
            written.extend(frames[:1])
            return Written(taken=1, owed=False)  # the kernel took the first frame only

    session = ProtocolSession(services, Socket())  # type: ignore[arg-type]
    session.actor = SimpleNamespace(participant_id="p1")  # type: ignore[assignment]

    def posted(seq: int) -> Event:
        message = Message(seq, f"m{seq}", "r1", "p2", "bob", "hi", 0)
        return MessagePosted("r1", message=message)

    batch: list[Queued] = [(e, e.frame) for e in (posted(1), posted(2), posted(3))]
    left = session._write_directly(batch)
    assert noted == [1]  # m2 and m3 are the writer's, noted once it writes them
    assert left is not None
    assert left == Left(batch[1:], owed=False)
    assert written == [batch[0][1].encode()]


async def test_subscribers_waiting_for_their_sends_are_written_first() -> None:
    """A pipelining sender waits for its echoes before it sends more: the
    flusher writes to it before the room's other subscribers."""
    broker = Broker()
    order: list[str] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        subs = []
        for name in ("p1", "p2", "p3", "p4"):
            broker.join("r1", name)
            sub = broker.subscribe(name)
            sub.write_directly(lambda batch, name=name: order.append(name) or Left([]))
            nursery.start_soon(owner_takes, sub, [])
            subs.append(sub)
        subs[2].sending = True  # p3 has sends waiting for their commit
        await trio.testing.wait_all_tasks_blocked()
        broker.publish(msg(0))
        await trio.testing.wait_all_tasks_blocked()
        assert order[0] == "p3"
        assert sorted(order) == ["p1", "p2", "p3", "p4"]
        for sub in subs:
            sub.close()
        nursery.cancel_scope.cancel()


async def test_a_parked_subscription_wakes_its_owner_once_when_it_is_wanted() -> None:
    """An owner that parked keeps no task: a delivery the broker cannot
    write directly, what a direct write left, and the subscription's end
    each call its waker, once per parking."""
    broker = Broker()
    broker.join("r1", "p1")
    wakes: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(broker.run)
        sub = broker.subscribe("p1")
        sub.park(lambda: wakes.append(len(sub)))
        broker.publish(msg(0))  # no direct writer: the owner is wanted at once
        broker.publish(msg(1))  # not parked again yet: no second wake
        assert wakes == [1]
        assert ids(sub.take()) == ["m0", "m1"]
        assert sub.take() == []

        left: list[Queued] = []
        sub.write_directly(lambda batch: Left(left + batch[1:] if batch[1:] else []))
        sub.park(lambda: wakes.append(len(sub)))
        broker.publish(msg(2))  # written directly: nobody woken
        await trio.testing.wait_all_tasks_blocked()
        assert wakes == [1]
        broker.publish(msg(3))
        broker.publish(msg(4))  # the writer takes m3 and leaves m4: the owner is woken
        await trio.testing.wait_all_tasks_blocked()
        assert wakes == [1, 1]
        assert ids(sub.take()) == ["m4"]

        # the writer takes all, but the socket owes the end of the last
        # frame: the owner is woken with nothing queued, to finish it
        sub.write_directly(lambda batch: Left([], owed=True))
        sub.park(lambda: wakes.append(len(sub)))
        broker.publish(msg(5))
        await trio.testing.wait_all_tasks_blocked()
        assert wakes == [1, 1, 0]
        assert sub.take() == []

        sub.park(lambda: wakes.append(-1))
        sub.close()  # the end: the owner is woken to say why
        assert wakes == [1, 1, 0, -1]
        nursery.cancel_scope.cancel()
