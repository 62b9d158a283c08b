"""DID identities with their encrypted keys, and the zero-knowledge vault.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "identity_keys",
        sa.Column("participant_id", sa.String(26), nullable=False),
        sa.Column("did", sa.String(128), nullable=False),
        sa.Column("encrypted_key", sa.Text(), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.participant_id"],
            name="fk_identity_keys_participant_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("participant_id", name="pk_identity_keys"),
        sa.UniqueConstraint("did", name="uq_identity_keys_did"),
    )
    op.create_table(
        "vault_entries",
        sa.Column("entry_id", sa.String(26), nullable=False),
        sa.Column("participant_id", sa.String(26), nullable=False),
        sa.Column("label", sa.String(100), nullable=False),
        sa.Column("provider", sa.String(64), nullable=True),
        sa.Column("blob", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.participant_id"],
            name="fk_vault_entries_participant_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("entry_id", name="pk_vault_entries"),
    )
    op.create_index("ix_vault_entries_participant_id", "vault_entries", ["participant_id"])


def downgrade() -> None:
    op.drop_index("ix_vault_entries_participant_id", table_name="vault_entries")
    op.drop_table("vault_entries")
    op.drop_table("identity_keys")
