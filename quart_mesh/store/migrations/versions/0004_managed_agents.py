"""Managed agents: what the node needs to start them again after a restart.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("model", sa.Text(), nullable=True))
        batch.add_column(sa.Column("rooms", sa.Text(), nullable=True))
        batch.add_column(
            sa.Column("needs_key", sa.Boolean(), nullable=False, server_default=sa.false())
        )


def downgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("needs_key")
        batch.drop_column("rooms")
        batch.drop_column("model")
