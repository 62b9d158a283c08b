"""Agent commands, and where each webhook bot's deliveries have got to.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.add_column(sa.Column("delivery_cursor", sa.BigInteger(), nullable=True))
        batch.add_column(
            sa.Column("webhook_private_ok", sa.Boolean(), nullable=False, server_default=sa.false())
        )
    op.create_table(
        "agent_commands",
        sa.Column("command_id", sa.String(26), nullable=False),
        sa.Column("agent_id", sa.String(26), nullable=False),
        sa.Column("command", sa.String(64), nullable=False),
        sa.Column("args", sa.Text(), nullable=False),
        sa.Column("sent_by", sa.String(26), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("delivered_at", sa.BigInteger(), nullable=True),
        sa.Column("completed_at", sa.BigInteger(), nullable=True),
        sa.Column("ok", sa.Boolean(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["participants.participant_id"],
            name="fk_agent_commands_agent_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("command_id", name="pk_agent_commands"),
    )
    op.create_index(
        "ix_agent_commands_agent_id_delivered_at", "agent_commands", ["agent_id", "delivered_at"]
    )


def downgrade() -> None:
    op.drop_index("ix_agent_commands_agent_id_delivered_at", table_name="agent_commands")
    op.drop_table("agent_commands")
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("webhook_private_ok")
        batch.drop_column("delivery_cursor")
