"""Positions of participants in rooms, and read positions for unread counts.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "positions",
        sa.Column("participant_id", sa.String(26), nullable=False),
        sa.Column("room_id", sa.String(26), nullable=False),
        sa.Column("x", sa.Float(), nullable=False),
        sa.Column("y", sa.Float(), nullable=False),
        sa.Column("z", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.participant_id"],
            name="fk_positions_participant_id_participants",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["room_id"],
            ["rooms.room_id"],
            name="fk_positions_room_id_rooms",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("participant_id", name="pk_positions"),
    )
    op.create_table(
        "room_reads",
        sa.Column("participant_id", sa.String(26), nullable=False),
        sa.Column("room_id", sa.String(26), nullable=False),
        sa.Column("last_read_seq", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.participant_id"],
            name="fk_room_reads_participant_id_participants",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["room_id"],
            ["rooms.room_id"],
            name="fk_room_reads_room_id_rooms",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("participant_id", "room_id", name="pk_room_reads"),
    )


def downgrade() -> None:
    op.drop_table("room_reads")
    op.drop_table("positions")
