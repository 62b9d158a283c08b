"""Models behind the proxy, and usage per participant.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("base_url", sa.Text(), nullable=False),
        sa.Column("upstream_model", sa.Text(), nullable=True),
        sa.Column("api_key", sa.Text(), nullable=True),
        sa.Column("created_by", sa.String(26), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_models"),
    )
    op.create_table(
        "model_usage",
        sa.Column("participant_id", sa.String(26), nullable=False),
        sa.Column("model", sa.String(100), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("errors", sa.BigInteger(), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.participant_id"],
            name="fk_model_usage_participant_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("participant_id", "model", name="pk_model_usage"),
    )


def downgrade() -> None:
    op.drop_table("model_usage")
    op.drop_table("models")
