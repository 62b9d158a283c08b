"""The readiness probe's row: ``/api/health/ready`` writes it (at most once a
second per process) to learn that the store still accepts writes
(docs/decisions/0076-health-and-the-disk-floor.md).

Revision ID: 0033_health_probe
Revises: 0032_link_preview_switch
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0033_health_probe"
down_revision = "0032_link_preview_switch"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "health_probe",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("process_id", sa.String(26), nullable=False),
        sa.Column("probed_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_health_probe"),
    )
    # its one row, so that probes only update it (no race to insert it)
    op.execute("INSERT INTO health_probe (id, process_id, probed_at) VALUES (1, '', 0)")


def downgrade() -> None:
    op.drop_table("health_probe")
