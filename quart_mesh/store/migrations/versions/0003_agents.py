"""Agents: how each bot participant connects (managed or external, webhook).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "agents",
        sa.Column("agent_id", sa.String(26), nullable=False),
        sa.Column("managed", sa.Boolean(), nullable=False),
        sa.Column("webhook_url", sa.Text(), nullable=True),
        sa.Column("webhook_secret", sa.String(64), nullable=True),
        sa.Column("created_by", sa.String(26), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["participants.participant_id"],
            name="fk_agents_agent_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("agent_id", name="pk_agents"),
    )


def downgrade() -> None:
    op.drop_table("agents")
