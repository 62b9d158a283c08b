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

__all__ = [
    "PRUNE_AFTER_MS",
    "alembic_config",
    "code_heads",
    "code_revisions",
    "migration_heads",
    "probe_write",
]

_MIGRATIONS = Path(__file__).parent / "migrations"
#: a process's probe row untouched this long (ms) is a process gone: pruned
#: when another process writes its first probe
PRUNE_AFTER_MS = 24 * 3600 * 1000


def alembic_config() -> AlembicConfig:
    """alembic's configuration for this release's migrations (a new one
    each call: a caller may attach its connection)."""
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    return cfg


@functools.cache
def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config())


@functools.cache
def code_heads() -> frozenset[str]:
    """The migrations this code's store is at once migrated (its head)."""
    return frozenset(_scripts().get_heads())


@functools.cache
def code_revisions() -> frozenset[str]:
    """Every migration this code knows: a store at one it does not know was
    migrated by a newer release."""
    return frozenset(script.revision for script in _scripts().walk_revisions())


def migration_heads(conn: Connection) -> frozenset[str]:
    """The migrations the store is at (alembic's ``alembic_version`` rows):
    a read that also says the store answers."""
    rows = conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalars()
    return frozenset(str(row) for row in rows)


def probe_write(conn: Connection, process_id: str, at: int) -> None:
    """Write *process_id*'s probe row (the time of its probe): a write the
    store must accept for the node to be ready.

    Each process has its own row, so that probes of several processes do not
    wait on one row's lock (on PostgreSQL a write batch holds its locks until
    it commits). Only the process's own checks write its row, one at a time
    (``StoreCheck``), so updating and inserting if there was none does not
    race. Its first probe also prunes the rows of processes gone for
    :data:`PRUNE_AFTER_MS`.
    """
    updated = conn.execute(
        health_probe.update().where(health_probe.c.process_id == process_id).values(probed_at=at)
    )
    if updated.rowcount == 0:  # this process's first probe (or its row deleted by hand)
        conn.execute(health_probe.delete().where(health_probe.c.probed_at < at - PRUNE_AFTER_MS))
        conn.execute(health_probe.insert().values(process_id=process_id, probed_at=at))
