"""``Bus.behind_for`` (readiness reads it): 0.0 while the process has
applied every stream position it knows of; while it has not, the seconds
since it last had. On the session's PostgreSQL (``--store postgresql``):
a real store, a real bus, and a cache of the test's own that reloads
slowly, which holds the bus at a commit until it is done (as a reload
with the store slow would)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
from sqlalchemy.engine import Connection

from quart_mesh.broker import Broker
from quart_mesh.services.bus import Bus
from quart_mesh.store import Database, outbox
from tests import stores

pytestmark = pytest.mark.timeout(60)


async def test_behind_for_counts_from_when_the_bus_fell_behind(tmp_path: Path) -> None:
    if stores.cluster is None:
        pytest.skip("the bus runs on PostgreSQL only (--store postgresql)")
    url = stores.cluster.url_for(tmp_path / "mesh-data")
    bus = Bus("here", poll_interval=0.2)
    # this process, and another one (its bus not running) writing to the stream
    here, there = Database(url, bus=bus), Database(url, bus=Bus("there"))
    bus.attach(here, Broker(64, bus=bus))
    await here.open()
    await there.open()
    reloading = trio.Event()
    reloaded = trio.Event()

    async def reload(_key: str) -> None:
        reloading.set()
        await reloaded.wait()

    bus.on_invalidate("slow", reload)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(bus.run)
            assert bus.behind_for() == 0.0

            def change(conn: Connection) -> None:
                outbox.change(conn, outbox.Invalidate("slow", "key"))

            await there.write(change)  # another process's commit
            with trio.fail_after(10):
                await reloading.wait()
            with trio.fail_after(10):
                while bus.behind_for() < 0.5:
                    await trio.sleep(0.05)
            reloaded.set()
            with trio.fail_after(10):
                while bus.behind_for() > 0.0:
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    finally:
        await here.close()
        await there.close()
