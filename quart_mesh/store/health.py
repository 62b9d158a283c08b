"""What readiness asks of the store: which migrations it is at, and whether
it still accepts a write (``api/health.py``,
``docs/decisions/0076-health-and-the-disk-floor.md``)."""

from __future__ import annotations

import functools
from pathlib import Path

import sqlalchemy as sa
from alembic.config import Config as AlembicConfig
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

from .schema import health_probe

__all__ = ["code_heads", "migration_heads", "probe_write"]

_MIGRATIONS = Path(__file__).parent / "migrations"
#: the probe's one row (migration 0033 inserts it)
_ROW = 1


@functools.cache
def code_heads() -> frozenset[str]:
    """The migrations this code's store is at once migrated (its head)."""
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return frozenset(ScriptDirectory.from_config(cfg).get_heads())


def migration_heads(conn: Connection) -> frozenset[str]:
    """The migrations the store is at (alembic's ``alembic_version`` rows):
    a read that also says the store answers."""
    rows = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars()
    return frozenset(str(row) for row in rows)


def probe_write(conn: Connection, process_id: str, at: int) -> None:
    """Write the probe's row (its process and time): a write the store must
    accept for the node to be ready."""
    updated = conn.execute(
        health_probe.update()
        .where(health_probe.c.id == _ROW)
        .values(process_id=process_id, probed_at=at)
    )
    if updated.rowcount == 0:  # deleted by hand: put it back
        conn.execute(health_probe.insert().values(id=_ROW, process_id=process_id, probed_at=at))
