"""Who set a room's preset (``rooms.preset_set_by``): a rule set by someone
at or above a participant cannot be undone by it (decision 0052).

Revision ID: 0025_preset_set_by
Revises: 0024_model_budgets
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025_preset_set_by"
down_revision = "0024_model_budgets"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a nullable column: a plain ALTER TABLE on SQLite too (no table rebuild);
    # presets set before it count as their room creator's
    op.add_column("rooms", sa.Column("preset_set_by", sa.String(26), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rooms") as batch:
        batch.drop_column("preset_set_by")
