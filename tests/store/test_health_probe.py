"""The readiness probe's rows (``store/health.py``, migration
``0033_health_probe``): one per process, so that the probes of several
processes do not wait on one row's lock; rows of processes gone a day are
pruned by the next process's first probe."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
import trio

from quart_mesh.store import Database
from quart_mesh.store import health as repo
from quart_mesh.store.schema import health_probe

DAY = 24 * 3600 * 1000


def rows(db: Database) -> dict[str, int]:
    def read(conn: sa.Connection) -> dict[str, int]:
        return {row.process_id: row.probed_at for row in conn.execute(sa.select(health_probe))}

    return trio.run(db.read, read)


def probe(db: Database, process_id: str, at: int) -> None:
    trio.run(db.write, lambda conn: repo.probe_write(conn, process_id, at))


def test_each_process_writes_its_own_row_and_old_ones_are_pruned(opened: Database) -> None:
    assert rows(opened) == {}  # the migration inserts none
    probe(opened, "A" * 26, 1_000)
    probe(opened, "B" * 26, 2_000)
    probe(opened, "A" * 26, 3_000)
    assert rows(opened) == {"A" * 26: 3_000, "B" * 26: 2_000}
    # a process that starts a day after B's last probe prunes B's row, not A's
    probe(opened, "C" * 26, 2_000 + DAY + 1)
    assert rows(opened) == {"A" * 26: 3_000, "C" * 26: 2_000 + DAY + 1}
    probe(opened, "C" * 26, 10 * DAY)  # later probes only update
    assert rows(opened)["A" * 26] == 3_000


def test_probes_of_two_processes_do_not_wait_for_each_other(opened: Database) -> None:
    """One process's probe uncommitted (its write batch still open) does not
    hold another's (on PostgreSQL a lock would; SQLite has one writer)."""
    if opened.backend != "postgresql":
        pytest.skip("about PostgreSQL's row locks (run with --store postgresql)")
    probe(opened, "A" * 26, 1)
    probe(opened, "B" * 26, 1)
    engine = sa.create_engine(opened.url)
    try:
        with engine.connect() as first, engine.connect() as second:
            first.begin()
            repo.probe_write(first, "A" * 26, 2)  # not committed: its row locked
            second.begin()
            second.exec_driver_sql("SET LOCAL lock_timeout = '500ms'")
            repo.probe_write(second, "B" * 26, 2)  # would time out on a shared row
            second.commit()
            first.commit()
    finally:
        engine.dispose()
    assert rows(opened) == {"A" * 26: 2, "B" * 26: 2}
