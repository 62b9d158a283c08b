"""What the web client needs: the mesh's default room, idempotent sends
(``clientId``), thread lookups and signed-out tokens.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("mesh_config", sa.Column("default_room_id", sa.String(26), nullable=True))
    op.add_column("messages", sa.Column("client_id", sa.String(64), nullable=True))
    # one message per (sender, clientId): a retried send finds the first one
    op.create_index(
        "ix_messages_sender_id_client_id", "messages", ["sender_id", "client_id"], unique=True
    )
    op.create_index("ix_messages_thread_id", "messages", ["thread_id"])
    op.create_table(
        "revoked_tokens",
        sa.Column("token_id", sa.String(64), nullable=False),
        sa.Column("participant_id", sa.String(26), nullable=False),
        sa.Column("expires_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("token_id", name="pk_revoked_tokens"),
    )
    op.create_index("ix_revoked_tokens_expires_at", "revoked_tokens", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_revoked_tokens_expires_at", table_name="revoked_tokens")
    op.drop_table("revoked_tokens")
    op.drop_index("ix_messages_thread_id", table_name="messages")
    op.drop_index("ix_messages_sender_id_client_id", table_name="messages")
    op.drop_column("messages", "client_id")
    op.drop_column("mesh_config", "default_room_id")
