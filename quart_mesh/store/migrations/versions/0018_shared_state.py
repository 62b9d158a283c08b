"""Shared security state: rate-limit buckets, DID challenges and federation
nonces in the store, so that every process of a mesh sees the same ones
(docs/decisions/0036-shared-security-state.md).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rate_counters",
        sa.Column("rule", sa.String(40), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("full_at", sa.BigInteger(), nullable=False),
        sa.Column("allowed", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("rule", "key", name="pk_rate_counters"),
    )
    op.create_index("ix_rate_counters_full_at", "rate_counters", ["full_at"])
    op.create_table(
        "did_challenges",
        sa.Column("challenge", sa.String(255), nullable=False),
        sa.Column("did", sa.String(255), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.Column("used", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("challenge", name="pk_did_challenges"),
    )
    op.create_index("ix_did_challenges_expires_at", "did_challenges", ["expires_at"])
    op.create_table(
        "federation_nonces",
        sa.Column("did", sa.String(255), nullable=False),
        sa.Column("nonce", sa.String(128), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("did", "nonce", name="pk_federation_nonces"),
    )
    op.create_index("ix_federation_nonces_expires_at", "federation_nonces", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_federation_nonces_expires_at", table_name="federation_nonces")
    op.drop_table("federation_nonces")
    op.drop_index("ix_did_challenges_expires_at", table_name="did_challenges")
    op.drop_table("did_challenges")
    op.drop_index("ix_rate_counters_full_at", table_name="rate_counters")
    op.drop_table("rate_counters")
