"""The store: migrations match the schema, SQLite runs in WAL, writes serialize.

On the suite's store (``--store sqlite`` or ``--store postgresql``) except
where a test is about SQLite itself."""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable
from pathlib import Path

import pytest
import sqlalchemy as sa
import trio
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from quart_mesh.errors import Conflict
from quart_mesh.store import Database, search
from quart_mesh.store.health import code_heads
from quart_mesh.store.schema import metadata


async def test_migrations_build_exactly_the_schema(store_url: str) -> None:
    db = Database(store_url)
    await db.open()
    try:
        diff = await db.read(
            lambda conn: compare_metadata(
                MigrationContext.configure(conn, opts={"include_name": search.in_metadata}),
                metadata,
            )
        )
        assert diff == []
    finally:
        await db.close()
    # opening again applies nothing and keeps the version
    again = Database(store_url)
    await again.open()
    version = await again.read(
        lambda conn: conn.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    )
    (head,) = code_heads()  # (one: the migrations are a line)
    assert version == head
    await again.close()


@pytest.mark.sqlite_only
async def test_sqlite_runs_in_wal_with_foreign_keys(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'm.db'}")
    await db.open()
    try:
        mode = await db.read(lambda conn: conn.exec_driver_sql("PRAGMA journal_mode").scalar())
        assert mode == "wal"
        fks = await db.read(lambda conn: conn.exec_driver_sql("PRAGMA foreign_keys").scalar())
        assert fks == 1
    finally:
        await db.close()


async def test_concurrent_writes_are_serialized_and_all_commit(store_url: str) -> None:
    db = Database(store_url)
    await db.open()
    await db.write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (n INTEGER)"))

    def add(n: int) -> Callable[[sa.Connection], None]:
        def write(conn: sa.Connection) -> None:
            conn.execute(_INSERT, {"n": n})

        return write

    async with trio.open_nursery() as nursery:
        for n in range(50):
            nursery.start_soon(db.write, add(n))
            nursery.start_soon(
                db.read, lambda conn: conn.exec_driver_sql("SELECT count(*) FROM t").scalar()
            )
    total = await db.read(lambda conn: conn.exec_driver_sql("SELECT count(*) FROM t").scalar())
    assert total == 50
    await db.close()


async def test_failed_write_rolls_back(store_url: str) -> None:
    db = Database(store_url)
    await db.open()
    await db.write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (n INTEGER)"))

    def boom(conn: sa.Connection) -> None:
        conn.execute(_INSERT, {"n": 1})
        raise ValueError("stop")

    with contextlib.suppress(ValueError):
        await db.write(boom)
    assert await db.read(lambda conn: conn.exec_driver_sql("SELECT count(*) FROM t").scalar()) == 0
    await db.close()


async def test_group_commit_isolates_failures_and_keeps_order(store_url: str) -> None:
    db = Database(store_url)
    await db.open()
    await db.write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (n INTEGER UNIQUE)"))
    published: list[int] = []
    async with trio.open_nursery() as nursery:
        await nursery.start(db.run)

        def insert(n: int) -> Callable[[sa.Connection], int]:
            def write(conn: sa.Connection) -> int:
                conn.execute(_INSERT, {"n": n})
                return n

            return write

        # queued together: one batch; unit 3 collides and must fail alone
        waits = [db.submit(insert(n), then=published.append) for n in (1, 2, 3, 3, 4)]
        results: list[object] = []
        for wait in waits:
            try:
                results.append(await wait)
            except Conflict:  # a unique violation that escaped the unit
                results.append("conflict")
        assert results == [1, 2, 3, "conflict", 4]
        assert published == [1, 2, 3, 4]  # in commit order, failures not published
        rows = await db.read(lambda conn: conn.exec_driver_sql("SELECT n FROM t").scalars().all())
        assert sorted(rows) == [1, 2, 3, 4]
        nursery.cancel_scope.cancel()
    await db.close()


async def test_a_cancelled_write_still_queued_is_withdrawn(store_url: str) -> None:
    db = Database(store_url)
    await db.open()
    await db.write(lambda conn: conn.exec_driver_sql("CREATE TABLE t (n INTEGER)"))
    # no writer running yet: queue by hand, then cancel the waiter before it runs
    db._queue = collections.deque()  # what Database.run sets up
    with trio.CancelScope() as scope:
        scope.cancel()  # the unit is queued, then its waiter is cancelled at once
        await db.write(lambda conn: conn.execute(_INSERT, {"n": 1}))
    assert scope.cancelled_caught
    assert len(db._queue) == 0
    db._queue = None
    count = await db.read(lambda conn: conn.exec_driver_sql("SELECT count(*) FROM t").scalar())
    assert count == 0
    await db.close()


_INSERT = sa.text("INSERT INTO t VALUES (:n)")
