"""The store reports its failures as known faults (``store/database.py``):
a SQLite file that is no longer a database fails reads and writes with a
503 ``storage_unavailable`` (not a 500), reported once as the damaged
store's fault with what to do; a store that cannot be reached is the store
unavailable, ended by a read that works again."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Connection

from quart_mesh.errors import Unavailable
from quart_mesh.faults import STORE_CORRUPT, STORE_UNAVAILABLE, Faults, KnownFault
from quart_mesh.store import Database

pytestmark = [pytest.mark.sqlite_only, pytest.mark.timeout(30)]

SELECT = sa.text("SELECT count(*) FROM participants")


async def test_a_damaged_file_is_one_fault_and_a_503(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quart_mesh")
    path = tmp_path / "store.db"
    db = Database(f"sqlite:///{path}", faults=Faults())
    await db.open()
    try:
        await db.read(count)
        # the header overwritten under the running store (its log moved into
        # the file first), whose next connections find no database there
        db.engine.dispose()
        with contextlib.closing(sqlite3.connect(path)) as raw:
            raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        with path.open("r+b") as file:
            file.write(b"\xff" * 100)
        for _ in range(5):
            with pytest.raises(Unavailable) as raised:
                await db.read(count)
            assert isinstance(raised.value, KnownFault)
            assert raised.value.code == "storage_unavailable"
        # known damaged: writes are refused at once, not run (what they would
        # acknowledge, the restore the fault asks for would lose)
        with pytest.raises(Unavailable, match="damaged"):
            await db.write(count)
    finally:
        await db.close()
    assert db.faults.is_active(STORE_CORRUPT)
    assert db.faults.active()[0].count == 5
    said = [r.getMessage() for r in caplog.records]
    assert len([s for s in said if s.startswith("fault started")]) == 1, said
    assert "quart-mesh check" in said[0]
    assert "quart-mesh restore" in said[0]


async def test_an_unreachable_store_ends_with_a_read_that_works(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="quart_mesh")
    folder = tmp_path / "store"
    away = tmp_path / "away"
    db = Database(f"sqlite:///{folder / 'store.db'}", faults=Faults())
    await db.open()
    try:
        await db.read(count)
        db.engine.dispose()
        folder.rename(away)  # its folder gone: SQLite cannot open the file
        for _ in range(3):
            with pytest.raises(Unavailable):
                await db.read(count)
        assert db.faults.is_active(STORE_UNAVAILABLE)
        away.rename(folder)
        await db.read(count)
        assert not db.faults.is_active(STORE_UNAVAILABLE)
    finally:
        await db.close()
    said = [r.getMessage() for r in caplog.records]
    assert [s.split(":")[0] for s in said if s.startswith("fault")] == [
        "fault started",
        "fault ended",
    ], said


def count(conn: Connection) -> int:
    return int(conn.execute(SELECT).scalar_one())
