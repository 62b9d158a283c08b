"""The readiness probe's rows: ``/api/health/ready`` writes its process's row
(at most once a second per process) to learn that the store still accepts
writes; a row per process, so that processes do not wait on one row's lock
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
        sa.Column("process_id", sa.String(26), nullable=False),
        sa.Column("probed_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("process_id", name="pk_health_probe"),
    )


def downgrade() -> None:
    op.drop_table("health_probe")
