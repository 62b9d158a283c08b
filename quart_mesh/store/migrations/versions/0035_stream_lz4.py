"""The cluster stream's entries compressed with LZ4 (PostgreSQL only).

A commit's stream row (``cluster_stream.body``) is a few kilobytes of JSON
for a batch of sends, and since each message's entry carries its frame too
(``store/outbox.py``), often more than 2 kB: PostgreSQL compresses such a
value before storing it, with ``pglz`` unless told otherwise. Measured on a
PostgreSQL 15 backend (a row of 19 message entries, 17 kB): 193 µs of
backend CPU per insert with ``pglz``, 107 µs with ``lz4`` (8.8 kB without the
frames: 140 and 87). Every commit of every process writes one row.

A server built without LZ4 (or older than PostgreSQL 14) keeps ``pglz``:
the change is an optimization, nothing depends on it. Rows written before
keep the method they were written with; PostgreSQL reads both.

Revision ID: 0035_stream_lz4
Revises: 0034_stream_blocks
Create Date: 2026-11-29
"""

from __future__ import annotations

from alembic import op

revision = "0035_stream_lz4"
down_revision = "0034_stream_blocks"
branch_labels = None
depends_on = None

# feature_not_supported: built without LZ4; syntax_error: before PostgreSQL 14
_SET = """
DO $$ BEGIN
  EXECUTE 'ALTER TABLE cluster_stream ALTER COLUMN body SET COMPRESSION {method}';
EXCEPTION WHEN feature_not_supported OR syntax_error THEN
  RAISE NOTICE 'cluster_stream.body keeps its compression: %', SQLERRM;
END $$
"""


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(_SET.format(method="lz4"))


def downgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(_SET.format(method="default"))
