"""Operator chores: the tokens the node issued (so they can be listed and
revoked) and a participant's "tokens not before" time (sign out everywhere,
tokens issued before this table included) (docs/decisions/0046-operator-chores.md).

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a nullable column: a plain ALTER TABLE on SQLite too (no table rebuild)
    op.add_column("participants", sa.Column("tokens_not_before", sa.BigInteger(), nullable=True))
    op.create_table(
        "issued_tokens",
        sa.Column("token_id", sa.String(64), nullable=False),
        sa.Column("participant_id", sa.String(26), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("issued_at", sa.BigInteger(), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.participant_id"],
            name="fk_issued_tokens_participant_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("token_id", name="pk_issued_tokens"),
    )
    op.create_index("ix_issued_tokens_participant_id", "issued_tokens", ["participant_id"])
    op.create_index("ix_issued_tokens_expires_at", "issued_tokens", ["expires_at"])


def downgrade() -> None:
    op.drop_table("issued_tokens")
    with op.batch_alter_table("participants") as batch:
        batch.drop_column("tokens_not_before")
