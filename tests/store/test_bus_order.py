"""The bus, in one process on a real PostgreSQL database, against writers
that commit out of order (``services/bus.py``, ``store/blocks.py``,
decision 0080): it applies blocks in block order, never past one still
open, passes a block whose transaction rolled back, and reads a commit too
large for notifications from the table.

What the bus applies is watched through cache invalidations
(``outbox.change(conn, outbox.Invalidate(cache, key))``), which it awaits in
order: the keys' order is its order.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio
from sqlalchemy.engine import Connection

from quart_mesh.broker import Broker
from quart_mesh.services.bus import Bus
from quart_mesh.store import Database, outbox
from tests import stores

pytestmark = pytest.mark.timeout(60)


@asynccontextmanager
async def _mesh(
    cluster: stores.Cluster,
) -> AsyncIterator[tuple[Database, Database, Bus, list[str]]]:
    """Two writing stores (two processes' writers) and a reader's bus,
    running, with the keys it applied so far."""
    url = cluster.url(f"bus_{uuid.uuid4().hex[:12]}")
    # processes a and b write to the cluster's stream (their buses not running)
    a, b = Database(url, bus=Bus("a")), Database(url, bus=Bus("b"))
    bus = Bus("reader")
    reader = Database(url, bus=bus)
    bus.attach(reader, Broker(bus=bus))
    for db in (a, b, reader):
        await db.open()
    applied: list[str] = []

    async def record(key: str) -> None:
        applied.append(key)

    bus.on_invalidate("test", record)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(bus.run)
            await _until(lambda: bus.listening)
            yield a, b, bus, applied
            nursery.cancel_scope.cancel()
    finally:
        for db in (a, b, reader):
            await db.close()


def _publish(key: str) -> Callable[[Connection], None]:
    def unit(conn: Connection) -> None:
        outbox.change(conn, outbox.Invalidate("test", key))

    return unit


async def _until(check: Callable[[], bool]) -> None:
    with trio.fail_after(20):
        while not check():
            await trio.sleep(0.01)


async def test_blocks_apply_in_order_and_none_past_one_still_open(
    cluster: stores.Cluster,
) -> None:
    async with _mesh(cluster) as (a, b, bus, applied):
        holding, release = threading.Event(), threading.Event()
        block_of_a: list[int] = []

        def slow(conn: Connection) -> None:
            block_of_a.append(conn.exec_driver_sql("SELECT mesh_reserve()").scalar_one())
            outbox.change(conn, outbox.Invalidate("test", "a"))
            holding.set()
            release.wait(30)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(partial(a.write, slow, quick=True))
            await trio.to_thread.run_sync(holding.wait)
            await b.write(_publish("b"), quick=True)  # commits while A is open
            # the bus heard B's commit, went over what it may apply, and
            # found B waiting behind A (its hole timer running)
            await _until(lambda: bus.known > block_of_a[0] and bus._hole_since is not None)
            assert applied == []
            assert bus.position < block_of_a[0]
            release.set()
        await _until(lambda: len(applied) == 2)
        assert applied == ["a", "b"]


async def test_a_block_rolled_back_after_a_later_commit_is_passed(
    cluster: stores.Cluster,
) -> None:
    """A transaction takes a block, a later one commits, the first rolls
    back: nobody will tell of the first, so the bus learns from the table
    that it is final, and applies the later one."""
    async with _mesh(cluster) as (a, b, bus, applied):
        with a.engine.connect() as conn:
            doomed = conn.begin()
            block = conn.exec_driver_sql("SELECT mesh_reserve()").scalar_one()
            await b.write(_publish("after"), quick=True)
            await _until(lambda: bus.known > block)
            assert applied == []
            doomed.rollback()
        await _until(lambda: applied == ["after"])
        assert bus.position > block


async def test_a_commit_too_large_for_notifications_is_read_from_the_table(
    cluster: stores.Cluster,
) -> None:
    big = "x" * 9000  # one entry larger than a notification can carry

    def unit(conn: Connection) -> None:
        outbox.change(conn, outbox.Invalidate("test", big))
        outbox.change(conn, outbox.Invalidate("test", "small"))

    async with _mesh(cluster) as (a, b, _bus, applied):
        await a.write(_publish("first"), quick=True)
        await b.write(unit, quick=True)
        await a.write(_publish("last"), quick=True)
        await _until(lambda: len(applied) == 4)
        assert applied == ["first", big, "small", "last"]
