"""Who may use each model, model budgets per role and participant, and the
tokens spent per participant and day (docs/decisions/0053-model-budgets.md).

Revision ID: 0024_model_budgets
Revises: 0023_registry
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024_model_budgets"
down_revision = "0023_registry"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_access",
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("min_role", sa.String(64), nullable=True),
        sa.Column("guests", sa.Boolean(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("name", name="pk_model_access"),
    )
    op.create_table(
        "model_budgets",
        sa.Column("scope", sa.String(16), nullable=False),
        sa.Column("subject", sa.String(64), nullable=False),
        sa.Column("requests_per_minute", sa.BigInteger(), nullable=True),
        sa.Column("tokens_per_day", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "subject", name="pk_model_budgets"),
    )
    op.create_table(
        "model_usage_daily",
        sa.Column("participant_id", sa.String(26), nullable=False),
        sa.Column("day", sa.Integer(), nullable=False),
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.participant_id"],
            name="fk_model_usage_daily_participant_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("participant_id", "day", name="pk_model_usage_daily"),
    )


def downgrade() -> None:
    op.drop_table("model_usage_daily")
    op.drop_table("model_budgets")
    op.drop_table("model_access")
