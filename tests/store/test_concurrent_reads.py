"""Readers of positions that commit concurrently, on PostgreSQL
(``store/blocks.py``, decision 0080): a bound read again is never lower in
a process, a cursor handed out never goes back, and no cursor a reader
hands out passes a message a slower transaction still adds below it.

The bound can go back: ``mesh_reserve()`` reads the sequence (*v*), then
announces its block above *v*. A transaction paused between the two lets
later ones take *v*+1... and commit; a reader then finds everything up to
*v*+1 final, and once the paused one announces, ``mesh_final_block()``
answers *v*. Each answer is true, but a process that pairs two of them (a
subscription starting after the bus's position, and a backlog read up to a
later bound) would skip what lies between. The pause is made with a copy of
``mesh_reserve()`` that waits, between its two steps, for an advisory lock
the test holds (:data:`_PAUSED_RESERVE`), so the race happens every run.

Skipped on SQLite: one writer at a time there, every committed position is
final.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from functools import partial

import pytest
import sqlalchemy as sa
import trio
from sqlalchemy.engine import Connection

from quart_mesh.broker import Broker
from quart_mesh.events import MessagePosted
from quart_mesh.ids import new_id
from quart_mesh.records import Message, now_ms
from quart_mesh.services.bus import Bus
from quart_mesh.services.delivery import Delivery, Feed
from quart_mesh.store import Database, blocks, outbox, rooms, snapshot, state
from quart_mesh.store import messages as messages_repo
from tests import stores
from tests.store import rows

pytestmark = pytest.mark.timeout(60)

#: the advisory lock the paused reserve waits for (outside the class of
#: the blocks' announcements, which ``mesh_final_block()`` reads)
_PAUSE_CLASS, _PAUSE_ID = 0x5445_5354, 34
_PAUSE_KEY = _PAUSE_CLASS << 32 | _PAUSE_ID

#: ``mesh_reserve()`` (migration 0034), paused after it read the sequence
#: and before it announces: a backend descheduled between the two
_PAUSED_RESERVE = f"""
CREATE FUNCTION mesh_reserve_paused() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  block bigint;
  upto bigint;
BEGIN
  SELECT last_value - CASE WHEN is_called THEN 0 ELSE 1 END INTO upto FROM mesh_blocks;
  PERFORM pg_advisory_xact_lock_shared({_PAUSE_KEY});
  PERFORM pg_advisory_xact_lock_shared({0x4D00_0000_0000_0000} + upto);
  block := nextval('mesh_blocks');
  PERFORM set_config('mesh.block', block::text, true);
  PERFORM set_config('mesh.next', '0', true);
  RETURN block;
END $$;
"""

_PAUSED = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    f" AND classid = {_PAUSE_CLASS} AND objid = {_PAUSE_ID} AND objsubid = 1"
)


async def _until(check: Callable[[], bool]) -> None:
    with trio.fail_after(20):
        while not check():
            await trio.sleep(0.01)


def _raw_bound(engine: sa.Engine) -> int:
    """``mesh_final_block()`` itself, as a process that never read a bound
    before finds it (not :func:`blocks.final_block`)."""
    with engine.connect() as conn:
        return int(conn.exec_driver_sql("SELECT mesh_final_block(false)").scalar_one())


def _contents(found: list[Message]) -> list[str]:
    return [m.content for m in found]


@dataclass
class _Race:
    """Block *v*+1 committed ("fast") by one process while another's
    transaction, which read the sequence at *v*, waits to announce its
    block: :meth:`announce` lets it (it writes "slow" at *v*+2 and holds),
    :meth:`commit` ends it."""

    room: str
    alice: str
    fast: Message
    #: "slow", once announced
    slow: list[Message]
    _control: Connection
    _announced: threading.Event
    _release: threading.Event
    _done: trio.Event

    async def announce(self) -> None:
        self._control.exec_driver_sql(f"SELECT pg_advisory_unlock({_PAUSE_KEY})")
        await trio.to_thread.run_sync(self._announced.wait)

    async def commit(self) -> None:
        self._release.set()
        await self._done.wait()


@asynccontextmanager
async def _race(url: str) -> AsyncIterator[_Race]:
    """The race (:class:`_Race`) on the database at *url*, in a room alice
    is in, written by two stores (two processes' writers)."""
    # processes a and b, writing to the cluster's stream (their buses not running)
    a, b = Database(url, bus=Bus("a")), Database(url, bus=Bus("b"))
    for db in (a, b):
        await db.open()
    with a.engine.begin() as conn:
        conn.exec_driver_sql(_PAUSED_RESERVE)
        alice = rows.participant(conn, "alice")
        room = rows.room(conn, "lobby")
        rooms.add_member(conn, room, alice, now_ms())
    control = a.engine.connect().execution_options(isolation_level="AUTOCOMMIT")
    control.exec_driver_sql(f"SELECT pg_advisory_lock({_PAUSE_KEY})")
    announced, release, done = threading.Event(), threading.Event(), trio.Event()
    fast: list[Message] = []
    slow: list[Message] = []

    def write(conn: Connection, content: str, into: list[Message]) -> None:
        message = messages_repo.insert_message(conn, rows.message(room, content))
        outbox.emit(conn, MessagePosted(room, message=message))
        into.append(message)

    def paused(conn: Connection) -> None:
        conn.exec_driver_sql("SELECT mesh_reserve_paused()")  # reads v, waits, announces
        write(conn, "slow", slow)  # at the block it took (v+2)
        announced.set()
        release.wait(30)

    async def slow_write() -> None:
        await a.write(paused, quick=True)
        done.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_write)
            try:
                # it read the sequence (v), and waits to announce its block
                await _until(lambda: bool(control.exec_driver_sql(_PAUSED).scalar_one()))
                await b.write(partial(write, content="fast", into=fast), quick=True)
                yield _Race(room, alice, fast[0], slow, control, announced, release, done)
            finally:
                release.set()
                control.exec_driver_sql("SELECT pg_advisory_unlock_all()")
    finally:
        control.close()
        for db in (a, b):
            await db.close()


async def test_a_bound_read_again_in_a_process_is_never_lower(cluster: stores.Cluster) -> None:
    """Once a process found a block final, a bound it reads later is not
    below it, though ``mesh_final_block()`` then answers lower (the
    transaction that read the sequence before "fast" took its block has
    announced): what was final stays final."""
    url = cluster.url(f"reads_{new_id().lower()}")
    reader = Database(url)
    await reader.open()
    try:
        async with _race(url) as race:
            fast_block = blocks.block_of(race.fast.seq)
            before = await reader.read(blocks.final_block)
            assert before >= fast_block
            await race.announce()
            # the race happened: a process that reads the bound only now finds it lower
            assert _raw_bound(reader.engine) < fast_block
            assert await reader.read(blocks.final_block) >= before
            assert (await reader.read(blocks.final_seq) or 0) >= race.fast.seq
            assert await reader.read(messages_repo.head_seq) == race.fast.seq
            await race.commit()
            assert await reader.read(messages_repo.head_seq) == race.slow[0].seq
    finally:
        await reader.close()


async def test_a_resume_and_polls_across_a_bound_that_went_back_miss_nothing_and_repeat_nothing(
    cluster: stores.Cluster,
) -> None:
    """A reader process whose bus applied "fast" (block *v*+1) before the
    bound went back. A session resuming then subscribes after the bus's
    position and reads its backlog up to the process's bound: "fast" is in
    the backlog (the bound is not below the subscription's start), and
    "slow", committed later, arrives live. A poll's cursor never goes back,
    so nothing is delivered twice, on this process nor on another that
    never read a bound as high: ``Feed.backlog``'s cursor is at least the
    one it was given, and ``Delivery.resume_point`` clamps a cursor at the
    newest message written, not at that process's lower bound."""
    url = cluster.url(f"reads_{new_id().lower()}")
    bus = Bus("reader")
    broker = Broker(bus=bus)
    reader, other = Database(url, bus=bus), Database(url)  # other: a process with no bus
    bus.attach(reader, broker)
    for db in (reader, other):
        await db.open()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(bus.run)
            await _until(lambda: bus.listening)
            async with _race(url) as race:
                alice, fast_block = race.alice, blocks.block_of(race.fast.seq)
                broker.join(race.room, alice)
                await _until(lambda: bus.position >= fast_block)
                poller = Feed(reader, alice, broker.subscribe(alice, 100), 100)
                poll1 = await poller.backlog(0, 100)
                assert _contents(poll1.messages) == ["fast"]
                assert poll1.cursor >= race.fast.seq

                await race.announce()
                assert _raw_bound(other.engine) < fast_block  # the bound went back
                poll2 = await poller.backlog(poll1.cursor, 100)
                assert (poll2.messages, poll2.cursor >= poll1.cursor) == ([], True)

                # a session resuming now (``Delivery.follow``, then its backlog)
                session = Feed(reader, alice, broker.subscribe(alice, 100), 100)
                assert session.sub.after >= fast_block
                backlog = await session.backlog(0, 100)
                assert _contents(backlog.messages) == ["fast"]
                assert backlog.cursor >= race.fast.seq

                # the poll's cursor, brought to the other process
                elsewhere = Feed(other, alice, Broker().subscribe(alice, 100), 100)
                there = await elsewhere.backlog(poll1.cursor, 100)
                assert (there.messages, there.cursor >= poll1.cursor) == ([], True)
                # (resume_point reads the store only)
                delivery = Delivery(other, Broker(), None, max_commands=100)  # type: ignore[arg-type]
                assert await delivery.resume_point(poll1.cursor) == poll1.cursor

                await race.commit()
                slow = race.slow[0]
                await _until(lambda: bus.position >= blocks.block_of(slow.seq))
                poll3 = await poller.backlog(poll2.cursor, 100)
                assert _contents(poll3.messages) == ["slow"]
                live = [e for e, _ in session.sub.take() if isinstance(e, MessagePosted)]
                assert [e.message.content for e in live] == ["slow"]
                assert _contents((await elsewhere.backlog(there.cursor, 100)).messages) == ["slow"]
            nursery.cancel_scope.cancel()
    finally:
        for db in (reader, other):
            await db.close()


def test_cursors_handed_out_stop_below_a_message_still_to_commit(
    cluster: stores.Cluster, opened: Database
) -> None:
    """A slow send (the lower block, still open) and a fast one (the higher
    block, committed) in one room. Every cursor a reader hands out or keeps
    stops below the slow one: the snapshot's cursor (a client resumes from
    it), the newest page of the history (the service marks it read, the web
    client resumes from its last message) and the heads ``mark_all_read``
    reads. Once the slow one commits, both are unread, and both are after
    those cursors."""
    engine = opened.engine
    with engine.begin() as conn:
        alice, bob = rows.participant(conn, "alice"), rows.participant(conn, "bob")
        room = rows.room(conn, "lobby")
        for pid in (alice, bob):
            rooms.add_member(conn, room, pid, now_ms())

    def send(conn: Connection, content: str) -> Message:
        message = replace(rows.message(room, content), sender_id=bob, sender_name="bob")
        return messages_repo.insert_message(conn, message)

    with engine.begin() as conn:
        first = send(conn, "first")
    with engine.connect() as slow_conn:
        slow_tx = slow_conn.begin()
        slow = send(slow_conn, "slow")
        with engine.begin() as conn:
            fast = send(conn, "fast")
        assert first.seq < slow.seq < fast.seq
        with engine.connect() as conn:
            _, cursor = snapshot.fingerprint(conn)
            page = messages_repo.list_messages(conn, room, before=None, since=None, limit=50)
            heads = state.read_heads(conn, alice)
        assert first.seq <= cursor < slow.seq
        assert _contents(page) == ["first"]
        assert heads[room][0] == first.seq
        with engine.begin() as conn:  # as the history's service does
            state.advance_reads(conn, alice, {room: page[-1].seq})
        slow_tx.commit()
    with engine.connect() as conn:
        assert state.unread_summary(conn, alice, "alice")[room][0] == 2
        assert _contents(messages_repo.messages_after(conn, alice, None, 100)) == ["slow", "fast"]
        assert _contents(messages_repo.messages_after(conn, alice, cursor, 100)) == ["slow", "fast"]
        page = messages_repo.list_messages(conn, room, before=None, since=None, limit=50)
        assert _contents(page) == ["first", "slow", "fast"]
        assert state.read_heads(conn, alice)[room][0] == fast.seq
