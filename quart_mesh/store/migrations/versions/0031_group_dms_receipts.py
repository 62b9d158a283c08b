"""Read receipts in DMs (issue 32, decision 0071): whether a participant
shares its read position in DMs with the other members (and sees theirs).

On for every participant that exists (``server_default``): receipts are on
unless one turns them off, as in Signal and WhatsApp.

Revision ID: 0031_group_dms_receipts
Revises: 0030_daily_use
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031_group_dms_receipts"
down_revision = "0030_daily_use"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a NOT NULL column with a default: a plain ALTER TABLE on SQLite too
    op.add_column(
        "participants",
        sa.Column("read_receipts", sa.Boolean(), nullable=False, server_default=sa.true()),
    )


def downgrade() -> None:
    with op.batch_alter_table("participants") as batch:
        batch.drop_column("read_receipts")
