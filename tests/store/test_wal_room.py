"""SQLite keeps room for its checkpoints (``store/database.py``): when the
data folder's free space falls below what the write-ahead log holds (plus a
margin), writes are refused before they run (503, the disk-full fault)
instead of filling the disk with log pages no checkpoint could then move
into the database file; once space returns, the log is checkpointed, cut
back, and writes go on, without a restart."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import sqlalchemy as sa
import trio
from sqlalchemy.engine import Connection

from quart_mesh.errors import Unavailable
from quart_mesh.faults import DISK_FULL, Faults
from quart_mesh.store import Database
from tests.small_disk import fill, free_bytes, small_disk

pytestmark = [pytest.mark.sqlite_only, pytest.mark.timeout(60)]

ROW = "x" * 4000


def _create(conn: Connection) -> None:
    conn.execute(sa.text("CREATE TABLE IF NOT EXISTS ballast_rows (body TEXT)"))


def _insert(conn: Connection) -> None:
    conn.execute(sa.text("INSERT INTO ballast_rows (body) VALUES (:b)"), [{"b": ROW}] * 50)


def _count(conn: Connection) -> int:
    return int(conn.execute(sa.text("SELECT count(*) FROM ballast_rows")).scalar_one())


async def test_writes_wait_for_room_to_checkpoint_and_go_on_once_it_returns(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "data"
    with small_disk(folder, 24):
        path = folder / "mesh.db"
        db = Database(f"sqlite:///{path}", faults=Faults())
        await db.open()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(db.run)
                await db.write(_create)
                for _ in range(6):  # ~1.2 MB through the log
                    await db.write(_insert)
                stored = await db.read(_count)
                log = Path(f"{path}-wal")
                assert log.stat().st_size > 0
                # less free than the log holds and a megabyte: refused before it runs
                ballast = fill(folder, leave=log.stat().st_size // 2)
                with pytest.raises(Unavailable) as refused:
                    await db.write(_insert)
                assert refused.value.code == "storage_unavailable"
                assert db.faults.is_active(DISK_FULL)
                assert db.disk_full()
                assert await db.read(_count) == stored  # nothing of it was written
                # space returns: the next write goes through at once; the
                # checkpointer moves the log and cuts it back
                ballast.unlink()
                await db.write(_insert)
                assert await db.read(_count) == stored + 50
                with trio.fail_after(15):
                    while db.faults.is_active(DISK_FULL):
                        await trio.sleep(0.2)
                assert not db.disk_full()
                assert free_bytes(folder) > 8 * 1024 * 1024
                nursery.cancel_scope.cancel()
        finally:
            await db.close()
        assert os.path.exists(path)


async def test_a_full_disk_cuts_the_log_back_without_new_commits(tmp_path: Path) -> None:
    """After a checkpoint the log keeps its size (up to 4 MiB) with nothing
    left to move; should free space then fall below it, the writes refused
    make no commits, and the log must still be cut back (a truncating
    checkpoint) so that they can go on: the node gets out by itself."""
    folder = tmp_path / "data"
    with small_disk(folder, 40):
        path = folder / "mesh.db"
        log = Path(f"{path}-wal")
        db = Database(f"sqlite:///{path}", faults=Faults())
        await db.open()
        try:
            async with trio.open_nursery() as nursery:
                await nursery.start(db.run)
                await db.write(_create)
                for _ in range(40):  # ~8 MB through the log
                    await db.write(_insert)
                with trio.fail_after(10):  # its pages all moved: nothing to do
                    while db._checkpointed != db._commits:
                        await trio.sleep(0.1)
                held = log.stat().st_size
                assert held > 2 * 1024 * 1024
                fill(folder, leave=held // 2)
                with pytest.raises(Unavailable):
                    await db.write(_insert)
                # no space was freed: the node cuts its own log and writes again
                with trio.fail_after(10):
                    while True:
                        try:
                            await db.write(_insert)
                            break
                        except Unavailable:
                            await trio.sleep(0.2)
                assert log.stat().st_size < held
                nursery.cancel_scope.cancel()
        finally:
            await db.close()
