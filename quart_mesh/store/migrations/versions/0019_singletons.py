"""Elected singletons: what the process running the bot supervisor reports
of each managed bot, and a spawn's API key sealed for the process that runs
it (docs/decisions/0035-elected-singletons.md).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "managed_bots",
        sa.Column("agent_id", sa.String(26), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("restarts", sa.Integer(), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("sealed_key", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["participants.participant_id"],
            name="fk_managed_bots_agent_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("agent_id", name="pk_managed_bots"),
    )
    # bots spawned before: a row each (the supervisor reports by updating it)
    op.execute(
        "INSERT INTO managed_bots (agent_id, status, restarts, detail, sealed_key, updated_at)"
        " SELECT agent_id, 'starting', 0, NULL, NULL, created_at FROM agents WHERE managed"
    )


def downgrade() -> None:
    op.drop_table("managed_bots")
