"""64-bit cursors on PostgreSQL: ``messages.seq``, ``relay_outbox.seq`` and
``room_reads.last_read_seq`` become BIGINT, and the sequences behind the two
serial columns BIGINT sequences (a SERIAL's sequence is ``AS integer`` and
would stop at 2**31 - 1 even in a BIGINT column).

Nothing to do on SQLite, whose INTEGER is already 64-bit. On PostgreSQL the
two tables are rewritten under an exclusive lock: on a large database, take
the node down for the upgrade (docs/decisions/0032-postgresql-store.md).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

_SERIALS = (("messages", "seq"), ("relay_outbox", "seq"))
_COLUMNS = (*_SERIALS, ("room_reads", "last_read_seq"))


def _retype(old: type[sa.Integer], new: type[sa.Integer], as_type: str) -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    for table, column in _COLUMNS:
        op.alter_column(table, column, type_=new(), existing_type=old(), existing_nullable=False)
    for table, column in _SERIALS:
        sequence = bind.execute(
            sa.text("SELECT pg_get_serial_sequence(:table, :column)"),
            {"table": table, "column": column},
        ).scalar_one()
        # already quoted and qualified by PostgreSQL
        op.execute(f"ALTER SEQUENCE {sequence} AS {as_type}")


def upgrade() -> None:
    _retype(sa.Integer, sa.BigInteger, "bigint")


def downgrade() -> None:
    _retype(sa.BigInteger, sa.Integer, "integer")
