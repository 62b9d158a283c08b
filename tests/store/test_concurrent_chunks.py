"""A commit's notifications, split in chunks, as the bus takes them
(``services/bus.py``, ``Bus._told``; decision 0080): a block is taken from
its notifications only with all of its chunks, heard in order; if one was
missed (dropped for lack of room, or never heard), the block is read from
the table, and applied whole, once.

The notifications are real (a store commits, a listener hears them), the
table is real, and the bus is one that is not running: the test hands it
the notifications in the order a case needs, then lets it apply what it
may (``_apply_ready``) and read the table (``_catch_up``), as its loop
would. What it applied is watched through cache invalidations, in order.

Skipped on SQLite: there is no bus there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
import trio
from sqlalchemy.engine import Connection

from quart_mesh.broker import Broker
from quart_mesh.ids import new_id
from quart_mesh.services import bus as bus_module
from quart_mesh.services.bus import Bus
from quart_mesh.store import Database, outbox
from quart_mesh.store.database import STREAM_CHANNEL
from quart_mesh.store.listen import Listener
from tests import stores

pytestmark = pytest.mark.timeout(60)

#: entries each too large to share a notification with another (a chunk
#: carries at most 7,600 bytes): one chunk each
_LARGE = [f"{n}-" + "x" * 5000 for n in ("first", "second", "third")]


def _publish(*keys: str) -> Callable[[Connection], None]:
    def unit(conn: Connection) -> None:
        for key in keys:
            outbox.change(conn, outbox.Invalidate("test", key))

    return unit


@dataclass
class _Mesh:
    writer: Database
    bus: Bus
    #: the keys the bus applied so far, in order
    applied: list[str]
    listener: Listener

    async def commit(self, unit: Callable[[Connection], None]) -> list[str]:
        """Commit *unit* (the only writer) and hear its notifications."""
        await self.writer.write(unit, quick=True)
        payloads: list[str] = []
        with trio.fail_after(10):
            while not payloads or len(payloads) < int(payloads[0].split("\n")[0].split()[3]):
                payloads += [note.payload for note in await self.listener.wait()]
        return payloads


@asynccontextmanager
async def _mesh(cluster: stores.Cluster) -> AsyncIterator[_Mesh]:
    """A writing store, and the bus of a reader of the same database,
    prepared (at the head of the stream) and not running."""
    url = cluster.url(f"chunks_{new_id().lower()}")
    # the writer's process writes to the cluster's stream (its bus not running)
    writer = Database(url, bus=Bus("writer"))
    bus = Bus("reader")
    reader = Database(url, bus=bus)
    bus.attach(reader, Broker(bus=bus))
    for db in (writer, reader):
        await db.open()
    applied: list[str] = []

    async def record(key: str) -> None:
        applied.append(key)

    bus.on_invalidate("test", record)
    try:
        await bus.prepare()
        async with Listener(url, [STREAM_CHANNEL]) as listener:
            yield _Mesh(writer, bus, applied, listener)
    finally:
        for db in (writer, reader):
            await db.close()


@pytest.mark.parametrize(
    "heard",
    [[1, 2, 3], [2, 3], [1, 3], [1, 2], [1, 3, 2], [3]],
    ids=["all-in-order", "first-missed", "middle-missed", "last-missed", "out-of-order", "last"],
)
async def test_a_commit_is_taken_from_its_notifications_only_whole_and_in_order(
    cluster: stores.Cluster, heard: list[int]
) -> None:
    """A commit of three chunks, of which the bus hears *heard* (by number).
    All three in order: applied from them, without the table. Any other
    way: nothing applied from the notifications (no block taken for whole
    from part of it), and the table's row applied whole; the chunks heard
    after it change nothing."""
    async with _mesh(cluster) as mesh:
        chunks = await mesh.commit(_publish(*_LARGE))
        assert len(chunks) == 3
        for n in heard:
            mesh.bus._told(chunks[n - 1])
        await mesh.bus._apply_ready()
        if heard == [1, 2, 3]:
            assert mesh.applied == _LARGE
            return
        assert mesh.applied == []
        await mesh.bus._catch_up()  # the table
        assert mesh.applied == _LARGE
        for n in {1, 2, 3} - set(heard):
            mesh.bus._told(chunks[n - 1])  # heard late: already applied
        await mesh.bus._catch_up()
        assert mesh.applied == _LARGE


async def test_a_commit_whose_first_notification_found_no_room_is_read_from_the_table(
    cluster: stores.Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Blocks wait behind one still open until the bus keeps no more (here
    2, ``_MAX_PENDING``); a large commit's first notification is dropped
    then. The open one ends, the bus applies what waited, and the rest of
    the large commit's notifications are heard, with room again, while
    another open block holds it back: the bus must not take its second
    chunk for all of it, but read it from the table."""
    monkeypatch.setattr(bus_module, "_MAX_PENDING", 2)
    async with _mesh(cluster) as mesh:
        engine = mesh.writer.engine
        with engine.connect() as stuck, engine.connect() as later:
            stuck_tx = stuck.begin()
            stuck.exec_driver_sql("SELECT mesh_reserve()")  # a writer stuck in a transaction
            told = await mesh.commit(_publish("one"))
            told += await mesh.commit(_publish("two"))
            later_tx = later.begin()
            later.exec_driver_sql("SELECT mesh_reserve()")  # another one, after them
            first, second = await mesh.commit(_publish(*_LARGE[:2]))
            for payload in told:
                mesh.bus._told(payload)
            mesh.bus._told(first)  # no room: dropped (the table has it)
            stuck_tx.rollback()
            await mesh.bus._catch_up()  # as far as the one still open
            assert mesh.applied == ["one", "two"]
            mesh.bus._told(second)  # room again: the rest of the large commit
            await mesh.bus._apply_ready()
            assert mesh.applied == ["one", "two"]
            later_tx.rollback()
            mesh.bus._must_read = True  # (as when a block stays unknown a while)
            await mesh.bus._catch_up()
            assert mesh.applied == ["one", "two", *_LARGE[:2]]
