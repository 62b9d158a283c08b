"""``node.events()``: the in-process event stream (decision 0065).

A real node (``open_node`` and ``node.run`` on a temporary data folder, on
the suite's store: ``--store postgresql`` too); messages are written
through the services and read back from the stream. Rules: every wait is
on an event (the broker's observer, the stream itself) under
``trio.fail_after``; ``autojump_clock`` where a test waits for nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
from trio.testing import MockClock

from quart_mesh import (
    AccessEnded,
    Actor,
    Event,
    EventStream,
    MessagePosted,
    Node,
    Settings,
    StreamLagged,
    open_node,
)
from quart_mesh.broker import Broker
from quart_mesh.ends import EndReason
from quart_mesh.events import RoomAccess, Typing
from quart_mesh.services.delivery import Backlog, Delivery
from quart_mesh.services.stream import open_event_stream
from quart_mesh.store import messages as messages_repo

PASSWORD = "a long passphrase"
#: a cap on each test's waits (a real store underneath)
CAP = 30


@dataclass
class Mesh:
    node: Node
    owner: Actor
    alice: Actor
    bob: Actor
    town: str  # the default room, everyone in it


@asynccontextmanager
async def running(data_dir: Path, **settings: int) -> AsyncIterator[Mesh]:
    """A node running on *data_dir*, set up with an owner and two members
    (alice, bob) in the default room."""
    async with (
        open_node(Settings(data_dir=data_dir, **settings)) as node,  # type: ignore[arg-type]
        trio.open_nursery() as nursery,
    ):
        await nursery.start(node.run)
        accounts = node.accounts
        owner = await accounts.init_setup(name="owner", password=PASSWORD, mesh_name="Mesh")
        town = accounts.setup_status()["defaultRoomId"]
        assert isinstance(town, str)
        actors = [accounts.actor_for(owner.participant)]
        for name in ("alice", "bob"):
            signed = await accounts.register(name, PASSWORD)
            actor = accounts.actor_for(signed.participant)
            await node.rooms.join(actor, town)
            actors.append(actor)
        yield Mesh(node, actors[0], actors[1], actors[2], town)
        nursery.cancel_scope.cancel()


def published(node: Node, content: str) -> trio.Event:
    """Set once the broker has delivered the message *content* (to every
    subscription: observers see an event just before it is delivered, in
    the same synchronous call)."""
    seen = trio.Event()

    def observe(event: Event) -> None:
        if isinstance(event, MessagePosted) and event.message.content == content:
            seen.set()

    node.broker.observe(observe)
    return seen


async def messages(
    stream: EventStream, count: int, *, until: Callable[[str], bool] | None = None
) -> list[MessagePosted]:
    """The next *count* messages of *stream* (other events skipped), or
    those up to the one whose content *until* accepts."""
    got: list[MessagePosted] = []
    with trio.fail_after(CAP):
        async for event in stream:
            if isinstance(event, MessagePosted):
                got.append(event)
                if len(got) == count or (until is not None and until(event.message.content)):
                    break
    return got


async def drain(stream: EventStream, into: list[Event] | None = None) -> list[Event]:
    """What *stream* hands out until it ends, appended to *into* as it goes
    (what it handed out before raising)."""
    got = [] if into is None else into
    async for event in stream:
        got.append(event)
    return got


def contents(got: list[MessagePosted]) -> list[str]:
    return [event.message.content for event in got]


async def test_catch_up_pages_the_whole_backlog_then_follows_live(tmp_path: Path) -> None:
    # a backlog of 23 with pages of 5: the stream reads them all (the
    # WebSocket would replay 5 and tell the client to page the rest)
    async with running(tmp_path / "data", max_replay=5) as mesh:
        node = mesh.node
        before = await node.messages.send(mesh.owner, mesh.town, "before")
        for i in range(23):
            await node.messages.send(mesh.owner, mesh.town, f"m{i}")
        async with node.events(mesh.bob, since=before.seq) as stream:
            assert stream.cursor == before.seq
            got = await messages(stream, 23)
            assert contents(got) == [f"m{i}" for i in range(23)]
            assert stream.cursor == got[-1].message.seq
            await node.messages.send(mesh.alice, mesh.town, "live")
            (live,) = await messages(stream, 1)
            assert live.message.content == "live"
            assert stream.cursor == live.message.seq


async def test_writes_during_the_catch_up_arrive_once_in_order(tmp_path: Path) -> None:
    # subscribe-then-read: what is committed while the backlog is read is
    # both read and held; each message arrives exactly once, in order
    async with running(tmp_path / "data", max_replay=4) as mesh:
        node = mesh.node
        for i in range(10):
            await node.messages.send(mesh.owner, mesh.town, f"m{i}")

        async def more() -> None:
            for i in range(10, 40):
                await node.messages.send(mesh.alice, mesh.town, f"m{i}")

        async with trio.open_nursery() as nursery, node.events(mesh.bob, since=0) as stream:
            nursery.start_soon(more)
            got = await messages(stream, 0, until=lambda c: c == "m39")
        # the default room's history before the test's messages, if any, first
        tail = contents(got)[-40:]
        assert tail == [f"m{i}" for i in range(40)]
        seqs = [event.message.seq for event in got]
        assert seqs == sorted(set(seqs))


async def test_since_none_is_from_now(tmp_path: Path) -> None:
    async with running(tmp_path / "data") as mesh:
        node = mesh.node
        old = await node.messages.send(mesh.owner, mesh.town, "old")
        async with node.events(mesh.bob) as stream:
            assert stream.cursor == old.seq  # resuming from here misses nothing
            await node.messages.send(mesh.owner, mesh.town, "new")
            assert contents(await messages(stream, 1)) == ["new"]


async def test_a_consumer_that_falls_behind_gets_the_cursor_and_loses_nothing(
    tmp_path: Path,
) -> None:
    async with running(tmp_path / "data") as mesh:
        node = mesh.node
        sent: list[str] = []
        got: list[MessagePosted] = []
        async with node.events(mesh.bob, capacity=8) as stream:
            for i in range(3):
                sent.append((await node.messages.send(mesh.alice, mesh.town, f"m{i}")).content)
            got += await messages(stream, 3)
            # it stops reading; 20 more (> capacity) are published meanwhile
            last = published(node, "m22")
            for i in range(3, 23):
                sent.append((await node.messages.send(mesh.alice, mesh.town, f"m{i}")).content)
            with trio.fail_after(CAP):
                await last.wait()
            handed: list[Event] = []
            with trio.fail_after(CAP), pytest.raises(StreamLagged) as lagged:
                await drain(stream, handed)
            got += [event for event in handed if isinstance(event, MessagePosted)]
            assert node.broker.statistics().drops >= 1
        # the cursor is the last message it handed out
        assert lagged.value.cursor == got[-1].message.seq
        async with node.events(mesh.bob, since=lagged.value.cursor) as resumed:
            got += await messages(resumed, 0, until=lambda c: c == "m22")
        assert contents(got) == sent
        seqs = [event.message.seq for event in got]
        assert seqs == sorted(set(seqs))


async def test_lagging_before_reading_anything_resumes_from_since(tmp_path: Path) -> None:
    async with running(tmp_path / "data") as mesh:
        node = mesh.node
        start = await node.messages.send(mesh.owner, mesh.town, "start")
        async with node.events(mesh.bob, since=start.seq, capacity=2) as stream:
            last = published(node, "m4")
            for i in range(5):
                await node.messages.send(mesh.alice, mesh.town, f"m{i}")
            with trio.fail_after(CAP):
                await last.wait()
            with trio.fail_after(CAP), pytest.raises(StreamLagged) as lagged:
                await anext(stream)  # it hands out nothing it dropped
        assert lagged.value.cursor == start.seq
        async with node.events(mesh.bob, since=lagged.value.cursor) as resumed:
            assert contents(await messages(resumed, 5)) == [f"m{i}" for i in range(5)]


async def test_visibility_is_the_one_decision(tmp_path: Path) -> None:
    # bob is in "secret" but its rules deny him rooms.read; alice and the
    # owner talk in a DM; none of it reaches bob, backlog or live
    async with running(tmp_path / "data") as mesh:
        node = mesh.node
        start = await node.messages.send(mesh.owner, mesh.town, "start")
        secret = await node.rooms.create(mesh.owner, "secret")
        for member in (mesh.alice, mesh.bob):
            await node.rooms.join(member, secret.room_id)
        await node.roles.set_override(
            mesh.owner,
            secret.room_id,
            target_type="participant",
            target=mesh.bob.participant_id,
            permission="rooms.read",
            effect="deny",
        )
        dm, _ = await node.dms.open(mesh.owner, mesh.alice.participant_id)
        await node.messages.send(mesh.alice, secret.room_id, "hidden before")
        await node.messages.send(mesh.owner, dm.room.room_id, "dm before")
        await node.messages.send(mesh.owner, mesh.town, "shown before")
        # alice, who may read both, gets them all: the messages are there
        async with node.events(mesh.alice, since=start.seq) as stream:
            assert contents(await messages(stream, 3)) == [
                "hidden before",
                "dm before",
                "shown before",
            ]
        async with node.events(mesh.bob, since=start.seq) as stream:
            await node.messages.send(mesh.alice, secret.room_id, "hidden live")
            await node.messages.send(mesh.alice, dm.room.room_id, "dm live")
            await node.messages.send(mesh.owner, mesh.town, "shown live")
            got = await messages(stream, 0, until=lambda c: c == "shown live")
        assert contents(got) == ["shown before", "shown live"]


async def test_a_rule_set_while_following_applies_at_once(tmp_path: Path) -> None:
    # bob follows live; the owner denies him rooms.read in the default room:
    # he is told (room_access) and nothing more of it reaches him
    async with running(tmp_path / "data") as mesh:
        node = mesh.node
        other = await node.rooms.create(mesh.owner, "other")
        await node.rooms.join(mesh.bob, other.room_id)
        async with node.events(mesh.bob) as stream:
            await node.messages.send(mesh.owner, mesh.town, "seen")
            assert contents(await messages(stream, 1)) == ["seen"]
            await node.roles.set_override(
                mesh.owner,
                mesh.town,
                target_type="participant",
                target=mesh.bob.participant_id,
                permission="rooms.read",
                effect="deny",
            )
            await node.messages.send(mesh.owner, mesh.town, "hidden")
            await node.messages.send(mesh.owner, other.room_id, "elsewhere")
            got: list[Event] = []
            with trio.fail_after(CAP):
                async for event in stream:
                    got.append(event)
                    if isinstance(event, MessagePosted):
                        break
        access = [e for e in got if isinstance(e, RoomAccess)]
        assert [(e.room_id, e.readable) for e in access] == [(mesh.town, False)]
        assert contents([e for e in got if isinstance(e, MessagePosted)]) == ["elsewhere"]


async def test_a_deleted_participant_s_stream_raises_access_ended(tmp_path: Path) -> None:
    async with running(tmp_path / "data") as mesh:
        node = mesh.node
        async with node.events(mesh.bob) as stream:
            hello = await node.messages.send(mesh.owner, mesh.town, "hello")
            assert contents(await messages(stream, 1)) == ["hello"]
            await node.accounts.delete_participant(mesh.owner, mesh.bob.participant_id)
            with trio.fail_after(CAP), pytest.raises(AccessEnded) as ended:
                await drain(stream)
        assert (ended.value.reason, ended.value.cursor) == ("removed", hello.seq)
        with pytest.raises(AccessEnded):
            async with node.events(mesh.bob):
                pytest.fail("a deleted participant opens no stream")


async def test_a_closed_stream_ends_after_what_was_queued(tmp_path: Path) -> None:
    # "closed": a subscription ended by the node (as its stop would, with
    # ``disconnect_all``); the consumer gets what was queued, then the
    # iteration ends
    async with running(tmp_path / "data") as mesh:
        node = mesh.node
        async with node.events(mesh.bob) as stream:
            last = published(node, "two")
            await node.messages.send(mesh.owner, mesh.town, "one")
            two = await node.messages.send(mesh.owner, mesh.town, "two")
            with trio.fail_after(CAP):
                await last.wait()
            node.broker.disconnect_all(EndReason.CLOSED)
            with trio.fail_after(CAP):
                rest = await drain(stream)
        assert [e.message.content for e in rest if isinstance(e, MessagePosted)] == ["one", "two"]
        assert stream.cursor == two.seq


async def test_a_stream_open_when_the_node_stops_ends_after_what_was_queued(
    tmp_path: Path,
) -> None:
    async with open_node(Settings(data_dir=tmp_path)) as node, trio.open_nursery() as outer:
        components = trio.CancelScope()

        async def run_node(*, task_status: trio.TaskStatus[None]) -> None:
            with components:
                await node.run(task_status=task_status)

        await outer.start(run_node)
        owner = await node.accounts.init_setup(name="owner", password=PASSWORD, mesh_name="M")
        actor = node.accounts.actor_for(owner.participant)
        town = node.accounts.setup_status()["defaultRoomId"]
        assert isinstance(town, str)
        got: list[str] = []
        with trio.fail_after(CAP):
            async with node.events(actor) as stream:
                await node.messages.send(actor, town, "the last one")
                async for event in stream:
                    if isinstance(event, MessagePosted):
                        got.append(event.message.content)
                        components.cancel()  # the node stops; the stream is open
        # the iteration ended (it did not wait for ever, nor raise)
        assert got == ["the last one"]
        assert not node.running


async def test_delivery_starting_over_is_a_lost_place_not_an_end(tmp_path: Path) -> None:
    # "unavailable": PostgreSQL's bus could not follow the cluster's stream
    # and started over, ending every subscription; the node goes on. The
    # stream hands out what was queued, then raises StreamLagged: a stream
    # that just ended would lose what comes next
    async with running(tmp_path / "data") as mesh:
        node = mesh.node
        got: list[Event] = []
        async with node.events(mesh.bob) as stream:
            last = published(node, "two")
            await node.messages.send(mesh.owner, mesh.town, "one")
            two = await node.messages.send(mesh.owner, mesh.town, "two")
            with trio.fail_after(CAP):
                await last.wait()
            node.broker.disconnect_all(EndReason.UNAVAILABLE)
            with trio.fail_after(CAP), pytest.raises(StreamLagged) as lagged:
                await drain(stream, got)
        assert [e.message.content for e in got if isinstance(e, MessagePosted)] == ["one", "two"]
        assert lagged.value.cursor == two.seq
        await node.messages.send(mesh.owner, mesh.town, "three")
        async with node.events(mesh.bob, since=lagged.value.cursor) as resumed:
            assert contents(await messages(resumed, 1)) == ["three"]


async def test_cancelling_between_events_loses_nothing(tmp_path: Path) -> None:
    # cancelled while catching up (pages of 3), after its 4th message: the
    # 5th is not taken; the same stream goes on, and a new one from its
    # cursor hands out the same rest
    async with running(tmp_path / "data", max_replay=3) as mesh:
        node = mesh.node
        start = await node.messages.send(mesh.owner, mesh.town, "start")
        for i in range(10):
            await node.messages.send(mesh.owner, mesh.town, f"m{i}")
        subscribers = node.broker.statistics().subscribers
        async with node.events(mesh.bob, since=start.seq) as stream:
            assert node.broker.statistics().subscribers == subscribers + 1
            got: list[Event] = []
            with trio.CancelScope() as scope:
                async for event in stream:
                    got.append(event)
                    if len(got) == 4:
                        scope.cancel()
            assert scope.cancelled_caught
            assert contents([e for e in got if isinstance(e, MessagePosted)]) == [
                f"m{i}" for i in range(4)
            ]
            cursor = stream.cursor
            assert contents(await messages(stream, 6)) == [f"m{i}" for i in range(4, 10)]
        assert node.broker.statistics().subscribers == subscribers  # the block unsubscribed
        async with node.events(mesh.bob, since=cursor) as resumed:
            assert contents(await messages(resumed, 6)) == [f"m{i}" for i in range(4, 10)]


async def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    async with running(tmp_path / "data") as mesh:
        with pytest.raises(ValueError, match="since"):
            async with mesh.node.events(mesh.bob, since=-1):
                pass
        with pytest.raises(ValueError, match="capacity"):
            async with mesh.node.events(mesh.bob, capacity=0):
                pass


class _EmptyStore:
    """A store without messages (for trio's clock: no threads)."""

    async def read(self, fn: Callable[..., object]) -> object:
        if fn is messages_repo.head_seq:
            return 7
        return Backlog([], 7, False)


class _Known:
    """Accounts that know every participant as a member."""

    async def actor_of(self, participant_id: str) -> Actor:
        return _member(participant_id)


def _member(participant_id: str) -> Actor:
    return Actor(participant_id, participant_id, "human", "human", "member")


@pytest.mark.store_free
async def test_a_quiet_wait_is_cancellable_and_backpressure_never_blocks(
    autojump_clock: MockClock,
) -> None:
    # an hour with nothing to hand out passes at once on trio's clock; the
    # cancelled wait leaves the stream usable. Then the publisher never
    # waits for a consumer that does not read: past capacity the stream
    # raises StreamLagged, with the cursor it started from
    broker = Broker()
    store, accounts = _EmptyStore(), _Known()
    delivery = Delivery(store, broker, accounts, max_commands=100)  # type: ignore[arg-type]
    opened = open_event_stream(
        delivery,
        accounts,  # type: ignore[arg-type]
        _member("bob"),
        since=None,
        capacity=4,
        page=100,
    )
    async with opened as stream:
        assert stream.cursor == 7  # the newest message when it opened
        broker.join("room", "bob")
        with trio.move_on_after(3600) as waited:
            await anext(stream)
        assert waited.cancelled_caught
        assert trio.current_time() == pytest.approx(3600)
        for n in range(5):  # never blocks, never awaits
            broker.publish(Typing("room", participant_id=f"p{n}"))
        with pytest.raises(StreamLagged) as lagged:
            await anext(stream)
        assert lagged.value.cursor == 7
    assert broker.statistics().subscribers == 0
