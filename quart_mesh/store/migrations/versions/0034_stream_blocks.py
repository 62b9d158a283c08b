"""Positions in blocks, and how far every one is final (PostgreSQL only).

Write transactions of different processes no longer queue on one lock to
commit their cursor positions in order (decision 0080). Each transaction
that needs positions takes a *block* from the ``mesh_blocks`` sequence
(:func:`mesh_reserve`), after announcing, with a shared advisory lock, the
block number every block it may take is above; its message and outbox
positions are ``block << 20 | n`` (:func:`mesh_position`, the columns'
default), its stream row is at the block (the column's default too). :func:`mesh_final_block` is the
newest block below which every block is final (committed or rolled back):
the sequence's value, or one below the lowest announcement still held.
Readers deliver and hand out cursors only up to it.

The sequence starts above every position written so far, so the new
positions follow the old ones.

Revision ID: 0034_stream_blocks
Revises: 0033_health_probe
Create Date: 2026-11-28
"""

from __future__ import annotations

from alembic import op

revision = "0034_stream_blocks"
down_revision = "0033_health_probe"
branch_labels = None
depends_on = None

# Kept in step with quart_mesh/store/blocks.py (a migration is frozen: it
# does not import the code it migrates for).
_SHIFT = 20
_BASE = 0x4D00_0000_0000_0000
_CLASS_LO, _CLASS_HI = 0x4D00_0000, 0x4E00_0000

_FUNCTIONS = f"""
CREATE FUNCTION mesh_reserve() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  block bigint := nullif(current_setting('mesh.block', true), '')::bigint;
  upto bigint;
BEGIN
  IF block IS NOT NULL THEN
    RETURN block;
  END IF;
  -- first announce that this transaction's block is above upto, then take it:
  -- a reader that saw the sequence at or past it sees the announcement
  SELECT last_value - CASE WHEN is_called THEN 0 ELSE 1 END INTO upto FROM mesh_blocks;
  PERFORM pg_advisory_xact_lock_shared({_BASE} + upto);
  block := nextval('mesh_blocks');
  PERFORM set_config('mesh.block', block::text, true);
  PERFORM set_config('mesh.next', '0', true);
  RETURN block;
END $$;

CREATE FUNCTION mesh_position() RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  block bigint := mesh_reserve();
  n bigint := current_setting('mesh.next')::bigint;
BEGIN
  IF n >= {1 << _SHIFT} THEN
    RAISE EXCEPTION 'more than % positions in one transaction', {1 << _SHIFT};
  END IF;
  PERFORM set_config('mesh.next', (n + 1)::text, true);
  RETURN (block << {_SHIFT}) | n;
END $$;

CREATE FUNCTION mesh_final_block(exclude_self boolean) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  upto bigint;
  held bigint;
BEGIN
  -- the sequence first, the announcements after (see mesh_reserve)
  SELECT last_value - CASE WHEN is_called THEN 0 ELSE 1 END INTO upto FROM mesh_blocks;
  SELECT min(((l.classid::bigint << 32) | l.objid::bigint) - {_BASE}) INTO held
    FROM pg_locks l
   WHERE l.locktype = 'advisory' AND l.objsubid = 1
     AND l.classid::bigint >= {_CLASS_LO} AND l.classid::bigint < {_CLASS_HI}
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
     AND (NOT exclude_self OR l.pid <> pg_backend_pid());
  IF held IS NULL OR held > upto THEN
    RETURN upto;
  END IF;
  RETURN held;
END $$;
"""


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute("CREATE SEQUENCE mesh_blocks AS bigint MINVALUE 1")
    op.execute(
        "SELECT setval('mesh_blocks', greatest("
        f" (SELECT coalesce(max(seq), 0) FROM messages) >> {_SHIFT},"
        f" (SELECT coalesce(max(seq), 0) FROM relay_outbox) >> {_SHIFT},"
        " (SELECT coalesce(max(position), 0) FROM cluster_stream)) + 1, false)"
    )
    op.execute(_FUNCTIONS)
    op.execute("ALTER TABLE messages ALTER COLUMN seq SET DEFAULT mesh_position()")
    op.execute("ALTER TABLE relay_outbox ALTER COLUMN seq SET DEFAULT mesh_position()")
    op.execute("ALTER TABLE cluster_stream ALTER COLUMN position SET DEFAULT mesh_reserve()")


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    for table in ("messages", "relay_outbox"):
        sequence = f"{table}_seq_seq"
        op.execute(
            f"SELECT setval('{sequence}', (SELECT coalesce(max(seq), 0) FROM {table}) + 1, false)"
        )
        op.execute(f"ALTER TABLE {table} ALTER COLUMN seq SET DEFAULT nextval('{sequence}')")
    op.execute(
        "SELECT setval('cluster_stream_position_seq',"
        " (SELECT coalesce(max(position), 0) FROM cluster_stream) + 1, false)"
    )
    op.execute(
        "ALTER TABLE cluster_stream ALTER COLUMN position"
        " SET DEFAULT nextval('cluster_stream_position_seq')"
    )
    op.execute("DROP FUNCTION mesh_final_block(boolean)")
    op.execute("DROP FUNCTION mesh_position()")
    op.execute("DROP FUNCTION mesh_reserve()")
    op.execute("DROP SEQUENCE mesh_blocks")
