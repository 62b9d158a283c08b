"""The store tells its failures from a unit's own errors by the driver's
code, on a real store (``store/database.py``, issue 33's review):

- a unique violation whose value (or table) reads "malformed" is the unit's
  conflict, not a damaged store: the others of its batch commit, and no
  fault starts (PostgreSQL quotes the value: ``Key (k)=(malformed)``);
- a write that failed starts a fault that only a commit ends: reads that
  work meanwhile (SQLite's write lock held by another connection) do not
  end it, so it is one start and one end, not a pair per request;
- a read-only PostgreSQL (``default_transaction_read_only``, a standby) is
  the store unavailable: a 503 ``StoreFault``, one fault; set back, writes
  work again and the fault ends.
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
import trio
from sqlalchemy.engine import Connection

from quart_mesh.errors import Conflict, Unavailable
from quart_mesh.faults import STORE_UNAVAILABLE, Faults, KnownFault
from quart_mesh.store import Database
from quart_mesh.store import database as database_module
from tests import stores

pytestmark = pytest.mark.timeout(60)


def said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The fault lines logged: ``started`` / ``ended`` / ..."""
    return [
        r.getMessage().split(":")[0]
        for r in caplog.records
        if r.name == "quart_mesh.faults" and r.getMessage().startswith("fault")
    ]


@contextlib.asynccontextmanager
async def running(url: str) -> AsyncIterator[Database]:
    db = Database(url, faults=Faults())
    await db.open()
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(db.run)
            yield db
            nursery.cancel_scope.cancel()
    finally:
        await db.close()


async def test_a_constraint_that_says_malformed_is_the_units_own(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quart_mesh")
    async with running(store_url) as db:
        await db.write(lambda c: c.exec_driver_sql("CREATE TABLE malformed (k text UNIQUE)"))
        await db.write(insert("malformed"))
        outcomes: dict[str, object] = {}

        async def one(value: str) -> None:
            try:
                outcomes[value] = await db.write(insert(value))
            except Exception as error:
                outcomes[value] = error

        # a batch: the duplicate fails alone, the others commit
        async with trio.open_nursery() as nursery:
            for value in ("a", "malformed", "b", "file is not a database"):
                nursery.start_soon(one, value)
        assert isinstance(outcomes["malformed"], Conflict), outcomes
        assert not isinstance(outcomes["malformed"], Unavailable)
        assert [outcomes[v] for v in ("a", "b", "file is not a database")] == [None] * 3
        # and alone, on the writer's thread
        with pytest.raises(Conflict):
            await db.write(insert("malformed"))
        if db.backend == "postgresql":
            # a bad value that quotes the words, in a read
            with pytest.raises(sa.exc.DataError):
                await db.read(
                    lambda c: c.exec_driver_sql("SELECT CAST('malformed' AS integer)").scalar()
                )
        assert await db.read(count) == 4
        assert db.faults.active() == []
    assert said(caplog) == []


@pytest.mark.sqlite_only
async def test_a_held_write_lock_is_one_fault_that_a_commit_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="quart_mesh")
    monkeypatch.setattr(database_module, "_BUSY_TIMEOUT", 0.3)
    path = tmp_path / "store.db"
    async with running(f"sqlite:///{path}") as db:
        await db.write(lambda c: c.exec_driver_sql("CREATE TABLE malformed (k text UNIQUE)"))
        # an operator's sqlite3 shell holding the write lock
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("BEGIN IMMEDIATE")
            for n in range(4):
                with pytest.raises(Unavailable) as raised:
                    await db.write(insert(f"locked {n}"), quick=n % 2 == 0)
                assert isinstance(raised.value, KnownFault)
                assert await db.read(count) == 0  # reads work meanwhile
            assert db.faults.is_active(STORE_UNAVAILABLE)
            assert said(caplog) == ["fault started"]
            other.execute("ROLLBACK")
        assert db.faults.is_active(STORE_UNAVAILABLE)  # nothing committed yet
        await db.write(insert("free"))
        assert not db.faults.is_active(STORE_UNAVAILABLE)
    assert said(caplog) == ["fault started", "fault ended"]


async def test_a_read_only_postgresql_is_the_store_unavailable(
    store_url: str, cluster: stores.Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quart_mesh")
    async with running(store_url) as db:
        await db.write(lambda c: c.exec_driver_sql("CREATE TABLE malformed (k text UNIQUE)"))
        with read_only(store_url):
            # sessions open before keep the old default: a failover's are new
            db.engine.dispose()
            for n in range(3):
                with pytest.raises(Unavailable) as raised:
                    await db.write(insert(f"refused {n}"))
                assert isinstance(raised.value, KnownFault)
                assert raised.value.code == "storage_unavailable"
                assert await db.read(count) == 0  # a standby answers reads
            [fault] = db.faults.active()
            assert (fault.kind, fault.count) == (STORE_UNAVAILABLE, 3)
            assert "read-only transaction" in fault.cause
        # set back: the connections that saw it read-only are dropped, the
        # next writes work (the first may still meet one opened meanwhile)
        with trio.fail_after(10):
            while True:
                try:
                    await db.write(insert("writable"))
                    break
                except Unavailable:
                    await trio.sleep(0.05)
        assert db.faults.active() == []
        assert await db.read(count) == 1
    assert said(caplog) == ["fault started", "fault ended"]
    [started] = [r.getMessage() for r in caplog.records if "fault started" in r.getMessage()]
    assert "point the node at the primary" in started


@contextlib.contextmanager
def read_only(url: str) -> Iterator[None]:
    """The database of *url* read-only for new sessions, then writable again."""
    name = sa.make_url(url).database
    admin = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        yield
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
        admin.dispose()


def insert(value: str) -> Callable[[Connection], None]:
    def unit(conn: Connection) -> None:
        conn.execute(sa.text("INSERT INTO malformed (k) VALUES (:k)"), {"k": value})

    return unit


def count(conn: Connection) -> int:
    return int(conn.execute(sa.text("SELECT count(*) FROM malformed")).scalar_one())
