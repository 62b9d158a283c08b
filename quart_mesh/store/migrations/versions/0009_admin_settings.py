"""Rate limits an admin changed at run time (mesh settings).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("mesh_config") as batch:
        batch.add_column(sa.Column("rate_limits", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("mesh_config") as batch:
        batch.drop_column("rate_limits")
