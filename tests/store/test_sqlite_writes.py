"""SQLite writes: batches of quick units commit on the event loop's thread
without ever making it wait for the write lock (``Database._run_inline``),
and the write-ahead log is checkpointed by the store's own task, outside any
commit (``Database._checkpoints``), not by the commit that fills it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import trio
from sqlalchemy.engine import Connection

from quart_mesh.errors import Conflict
from quart_mesh.store import Database

pytestmark = pytest.mark.sqlite_only


async def test_commits_do_not_checkpoint_and_the_checkpointer_does(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    db = Database(f"sqlite:///{path}")
    await db.open()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(db.run)
            await db.write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (body TEXT)"))
            # quick units (on the loop's connection): far more than SQLite's
            # 1,000 pages in the log, which it would checkpoint at commit
            for _ in range(40):
                await db.write(
                    lambda conn: conn.exec_driver_sql(
                        "INSERT INTO t (body) SELECT zeroblob(32000) FROM"
                        " (SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL"
                        " SELECT 4 UNION ALL SELECT 5)"
                    ),
                    quick=True,
                )
            # the commits left their pages in the log: the file has not grown
            assert path.stat().st_size < 1_000_000
            with trio.fail_after(10):
                while path.stat().st_size < 6_000_000:  # the checkpointer's, within a second
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        count = await db.read(lambda conn: conn.exec_driver_sql("SELECT count(*) FROM t").scalar())
        assert count == 200
    finally:
        await db.close()


async def test_quick_writes_wait_for_a_lock_held_elsewhere_without_blocking_the_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.db"
    db = Database(f"sqlite:///{path}")
    await db.open()
    other = sqlite3.connect(path, isolation_level=None)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(db.run)
            await db.write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (n INTEGER)"))
            # quick units commit (on the loop's thread, see Database._run_inline)
            await db.write(
                lambda conn: conn.exec_driver_sql("INSERT INTO t VALUES (0)"), quick=True
            )
            other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
            done = trio.Event()

            async def writes() -> None:
                waiting = [
                    db.submit(
                        lambda conn, n=n: conn.exec_driver_sql(f"INSERT INTO t VALUES ({n})"),
                        quick=True,
                    )
                    for n in range(1, 11)
                ]
                for one in waiting:
                    await one
                done.set()

            nursery.start_soon(writes)
            # the loop goes on meanwhile: this task runs, many times
            for _ in range(20):
                await trio.sleep(0.01)
            assert not done.is_set()
            other.execute("COMMIT")  # the lock is free: the waiting writes go in
            with trio.fail_after(10):
                await done.wait()
            # the loop's own connection, refused the lock before, is kept and
            # commits again (it was left with no transaction)
            for n in (11, 12):
                await db.write(
                    lambda conn, n=n: conn.exec_driver_sql(f"INSERT INTO t VALUES ({n})"),
                    quick=True,
                )
            nursery.cancel_scope.cancel()
        count = await db.read(lambda conn: conn.exec_driver_sql("SELECT count(*) FROM t").scalar())
        assert count == 13
    finally:
        other.close()
        await db.close()


@pytest.mark.parametrize("quick", [True, False])
async def test_a_unit_that_fails_alone_in_its_batch_leaves_nothing(
    tmp_path: Path, quick: bool
) -> None:
    """A batch of one unit takes no savepoint: when the unit raises, its
    transaction is rolled back whole, its caller gets its error, and the
    next write goes on (on the loop's connection, or the thread's)."""
    db = Database(f"sqlite:///{tmp_path / 'm.db'}")
    await db.open()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(db.run)
            await db.write(
                lambda conn: conn.exec_driver_sql("CREATE TABLE t (n INTEGER PRIMARY KEY)")
            )

            def half_then_fail(conn: Connection) -> None:
                conn.exec_driver_sql("INSERT INTO t VALUES (1)")
                raise ValueError("the unit's own error")

            with pytest.raises(ValueError, match="own error"):
                await db.write(half_then_fail, quick=quick)

            def duplicate(conn: Connection) -> None:
                conn.exec_driver_sql("INSERT INTO t VALUES (2)")
                conn.exec_driver_sql("INSERT INTO t VALUES (2)")

            with pytest.raises(Conflict):  # a unique violation that escapes a unit
                await db.write(duplicate, quick=quick)
            await db.write(
                lambda conn: conn.exec_driver_sql("INSERT INTO t VALUES (3)"), quick=quick
            )
            nursery.cancel_scope.cancel()
        rows = await db.read(lambda conn: conn.exec_driver_sql("SELECT n FROM t").all())
        assert [n for (n,) in rows] == [3]
    finally:
        await db.close()
