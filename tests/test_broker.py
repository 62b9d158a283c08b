"""Broker units: routing by membership, backpressure, hold/release, frames."""

from __future__ import annotations

import gc
import weakref

import pytest
import trio
import trio.testing

from quart_mesh.broker import Broker, Subscription
from quart_mesh.ends import EndReason
from quart_mesh.events import Event, MessageDeleted, Presence, RoomDeleted, Typing

pytestmark = pytest.mark.store_free


def msg(room: str, n: int = 0) -> MessageDeleted:
    return MessageDeleted(room, message_id=f"m{n}")


async def take(sub: Subscription) -> list[Event | None]:
    with trio.fail_after(2):
        return [event for event, _ in await sub.get_batch()]


def test_routing_follows_membership() -> None:
    broker = Broker()
    broker.load([("r1", "alice"), ("r1", "bob"), ("r2", "bob")])
    alice, bob, carol = (broker.subscribe(p) for p in ("alice", "bob", "carol"))
    assert broker.rooms_of("bob") == {"r1", "r2"}
    assert broker.members("r1") == {"alice", "bob"}
    assert broker.publish(msg("r1")) == 2
    assert broker.publish(msg("r2")) == 1
    assert (len(alice), len(bob), len(carol)) == (1, 2, 0)

    broker.join("r2", "carol")
    broker.leave("r1", "bob")
    assert broker.publish(msg("r1")) == 1  # alice only
    assert broker.publish(msg("r2")) == 2  # bob and carol

    broker.drop_room("r2")
    assert broker.members("r2") == frozenset()
    assert broker.rooms_of("carol") == frozenset()
    assert broker.publish(msg("r2")) == 0

    # load() replaces the mirror and re-routes live subscriptions
    broker.load([("r3", "carol")])
    assert broker.rooms_of("alice") == frozenset()
    assert broker.publish(msg("r1")) == 0
    assert broker.publish(msg("r3")) == 1
    assert len(carol) == 2


async def test_subscription_follows_later_join_and_leave() -> None:
    broker = Broker()
    sub = broker.subscribe("alice")
    assert broker.publish(msg("r1", 1)) == 0
    broker.join("r1", "alice")
    event = msg("r1", 2)
    broker.publish(event)
    assert await take(sub) == [event]
    broker.leave("r1", "alice")
    assert broker.publish(msg("r1", 3)) == 0
    assert len(sub) == 0


def test_mesh_wide_typing_and_multiple_subscriptions() -> None:
    broker = Broker()
    broker.load([("r1", "alice"), ("r1", "bob")])
    a1, a2, bob, loner = (broker.subscribe(p) for p in ("alice", "alice", "bob", "carol"))
    assert broker.publish(Presence(None, participant_id="bob", online=True)) == 4
    assert broker.publish(Typing("r1", participant_id="alice")) == 1
    assert broker.publish(RoomDeleted("r1")) == 3
    assert (len(a1), len(a2), len(bob), len(loner)) == (2, 2, 3, 1)


def test_drop_participant_fails_and_forgets() -> None:
    broker = Broker()
    broker.load([("r1", "alice"), ("r1", "bob")])
    alice, bob = broker.subscribe("alice"), broker.subscribe("bob")
    broker.drop_participant("alice")
    assert alice.failed is EndReason.REMOVED
    assert broker.rooms_of("alice") == frozenset()
    assert broker.members("r1") == {"bob"}
    assert broker.publish(msg("r1")) == 1
    assert (len(alice), len(bob)) == (0, 1)
    assert broker.statistics().subscribers == 1


def test_drop_participant_releases_subscription() -> None:
    """Regression: drop_participant used to leave the subscription routed."""
    broker = Broker()
    broker.load([("r1", "alice")])
    ref = weakref.ref(broker.subscribe("alice"))
    broker.drop_participant("alice")
    gc.collect()
    assert ref() is None


async def test_full_subscription_fails_lagging_without_blocking() -> None:
    broker = Broker()
    broker.load([("r1", "alice"), ("r1", "bob")])
    slow = broker.subscribe("alice", capacity=2)
    fast = broker.subscribe("bob", capacity=10)
    assert [broker.publish(msg("r1", n)) for n in range(3)] == [2, 2, 1]
    assert (slow.failed, fast.failed) == (EndReason.LAGGING, None)
    assert len(fast) == 3
    assert broker.publish(msg("r1", 3)) == 1  # a failed subscription gets no more
    stats = broker.statistics()
    assert (stats.subscribers, stats.queued, stats.drops, stats.published) == (2, 6, 1, 4)
    assert stats.to_json()["queuedEvents"] == 6
    assert await take(slow) == []  # lagging: nothing more to send
    assert len(await take(fast)) == 4
    assert broker.statistics().queued == 2


async def test_hold_and_release_in_order_with_skip() -> None:
    broker = Broker()
    broker.join("r1", "alice")
    sub = broker.subscribe("alice")
    sub.hold()
    events = [msg("r1", n) for n in range(5)]
    for event in events:
        assert broker.publish(event) == 1
    assert len(sub) == 0
    sub.push(None, "replayed")
    await sub.release(skip=lambda e: isinstance(e, MessageDeleted) and e.message_id == "m1")
    assert await take(sub) == [None, events[0], *events[2:]]
    later = msg("r1", 9)
    broker.publish(later)  # live again
    assert await take(sub) == [later]


def test_held_overflow_fails_lagging() -> None:
    broker = Broker()
    broker.join("r1", "alice")
    sub = broker.subscribe("alice", capacity=2)
    sub.hold()
    assert [broker.publish(msg("r1", n)) for n in range(3)] == [1, 1, 0]
    assert sub.failed is EndReason.LAGGING
    assert broker.statistics().drops == 1


async def test_release_larger_than_capacity_waits_for_consumer() -> None:
    broker = Broker()
    broker.join("r1", "alice")
    sub = broker.subscribe("alice", capacity=3)
    for n in range(3):
        assert sub.push(None, f"reply{n}")
    sub.hold()
    held = [msg("r1", n) for n in range(3)]
    for event in held:
        broker.publish(event)
    received: list[Event | None] = []

    async def consume() -> None:
        while len(received) < 7:
            batch = await sub.get_batch(max_items=2)
            received.extend(event for event, _ in batch)

    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sub.release)
            await trio.testing.wait_all_tasks_blocked()
            assert (len(sub), sub.failed) == (3, None)  # release waits for room
            during = msg("r1", 7)
            broker.publish(during)  # still held: goes after the held ones
            nursery.start_soon(consume)
    assert received == [None, None, None, *held, during]
    assert sub.failed is None


async def test_put_waits_for_room_and_stops_when_closed() -> None:
    broker = Broker()
    sub = broker.subscribe("alice", capacity=1)
    assert sub.push(None, "a")
    results: list[bool] = []

    async def put(frame: str) -> None:
        results.append(await sub.put(None, frame))

    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(put, "b")
            await trio.testing.wait_all_tasks_blocked()
            assert (results, sub.failed) == ([], None)
            assert [f for _, f in await sub.get_batch()] == ["a"]
        assert results == [True]
        assert [f for _, f in await sub.get_batch()] == ["b"]

        sub.push(None, "c")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(put, "d")
            await trio.testing.wait_all_tasks_blocked()
            sub.close()
    assert results == [True, False]


async def test_close_unsubscribes_and_drains_remaining() -> None:
    broker = Broker()
    broker.join("r1", "alice")
    with broker.subscribe("alice") as sub:
        events = [msg("r1", n) for n in range(3)]
        for event in events:
            broker.publish(event)
    assert sub.failed is EndReason.CLOSED
    assert broker.statistics().subscribers == 0
    assert broker.publish(msg("r1")) == 0
    assert not sub.push(None, "late")
    assert [e for e, _ in await sub.get_batch(max_items=2)] == events[:2]
    assert await take(sub) == [events[2]]
    assert await take(sub) == []
    sub.close()  # idempotent
    assert broker.statistics().drops == 0


async def test_get_batch_wakes_on_push_and_on_close() -> None:
    broker = Broker()
    sub = broker.subscribe("alice")
    got: list[list[Event | None]] = []

    async def reader() -> None:
        got.append(await take(sub))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        broker.publish(Presence(None, participant_id="bob", online=False))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        sub.close()
    assert [len(batch) for batch in got] == [1, 0]


async def test_frame_serialized_once_and_cached_computes_once() -> None:
    event = Typing("r1", participant_id="alice")
    frame = event.frame
    assert frame == '{"type":"typing","roomId":"r1","participantId":"alice"}'
    assert event.frame is frame
    calls: list[int] = []

    def encode() -> bytes:
        calls.append(1)
        return frame.encode()

    assert event.cached("ws", encode) == frame.encode()
    assert event.cached("ws", encode) is event.cached("ws", encode)
    assert len(calls) == 1
    assert event.cached("other", lambda: b"x") == b"x"

    broker = Broker()
    broker.join("r1", "bob")
    sub = broker.subscribe("bob")
    broker.publish(event)
    with trio.fail_after(2):
        [(_, delivered)] = await sub.get_batch()
    assert delivered is frame


async def test_an_event_the_replay_delivered_is_not_delivered_again_after_going_live() -> None:
    """One process too: a commit made on a worker thread is published when
    the writer task next runs, which may be after a resume's replay read it
    and the session went live; the replay's filter still drops it."""
    broker = Broker()
    assert not broker.clustered
    broker.join("r1", "p1")
    replayed = MessageDeleted("r1", message_id="m1")
    sub = broker.subscribe("p1")
    sub.hold()
    await sub.put(replayed, replayed.frame)  # the replay
    await sub.release(skip=lambda event: event is replayed)  # live again
    broker.publish(replayed)  # its commit, published late
    fresh = MessageDeleted("r1", message_id="m2")
    broker.publish(fresh)
    batch = await sub.get_batch()
    assert [event for event, _ in batch] == [replayed, fresh]


async def test_every_owner_waiting_for_room_is_woken() -> None:
    broker = Broker()
    sub = broker.subscribe("p1", capacity=1)
    sub.push(None, "x")
    done: list[str] = []

    async def put(name: str) -> None:
        await sub.put(None, name)
        done.append(name)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(put, "a")
        nursery.start_soon(put, "b")
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(3):
            await sub.get_batch()  # room, each time
            await trio.testing.wait_all_tasks_blocked()
    assert sorted(done) == ["a", "b"]
