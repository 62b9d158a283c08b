"""Initial schema: mesh configuration, participants, rooms, members, messages, reactions.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mesh_config",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("visibility", sa.String(16), nullable=False),
        sa.Column("registration_mode", sa.String(16), nullable=False),
        sa.Column("guests_can_send", sa.Boolean(), nullable=False),
        sa.Column("owner_id", sa.String(26), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_mesh_config"),
    )
    op.create_table(
        "participants",
        sa.Column("participant_id", sa.String(26), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("name_key", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("role", sa.String(64), nullable=False),
        sa.Column("password_hash", sa.Text(), nullable=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("last_seen_at", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("participant_id", name="pk_participants"),
        sa.UniqueConstraint("name_key", name="uq_participants_name_key"),
    )
    op.create_table(
        "rooms",
        sa.Column("room_id", sa.String(26), nullable=False),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("name_key", sa.String(200), nullable=True),
        sa.Column("dm_key", sa.String(64), nullable=True),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(26), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("room_id", name="pk_rooms"),
        sa.UniqueConstraint("name_key", name="uq_rooms_name_key"),
        sa.UniqueConstraint("dm_key", name="uq_rooms_dm_key"),
    )
    op.create_table(
        "room_members",
        sa.Column("room_id", sa.String(26), nullable=False),
        sa.Column("participant_id", sa.String(26), nullable=False),
        sa.Column("joined_at", sa.BigInteger(), nullable=False),
        sa.Column("hidden", sa.Boolean(), nullable=False),
        sa.ForeignKeyConstraint(
            ["room_id"],
            ["rooms.room_id"],
            name="fk_room_members_room_id_rooms",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.participant_id"],
            name="fk_room_members_participant_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("room_id", "participant_id", name="pk_room_members"),
    )
    op.create_index("ix_room_members_participant_id", "room_members", ["participant_id"])
    op.create_table(
        "messages",
        sa.Column("seq", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("message_id", sa.String(26), nullable=False),
        sa.Column("room_id", sa.String(26), nullable=False),
        sa.Column("sender_id", sa.String(26), nullable=False),
        sa.Column("sender_name", sa.String(200), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("to_id", sa.String(26), nullable=True),
        sa.Column("thread_id", sa.String(26), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("edited_at", sa.BigInteger(), nullable=True),
        sa.ForeignKeyConstraint(
            ["room_id"],
            ["rooms.room_id"],
            name="fk_messages_room_id_rooms",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("seq", name="pk_messages"),
        sa.UniqueConstraint("message_id", name="uq_messages_message_id"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_messages_room_id_seq", "messages", ["room_id", "seq"])
    op.create_table(
        "reactions",
        sa.Column("message_id", sa.String(26), nullable=False),
        sa.Column("participant_id", sa.String(26), nullable=False),
        sa.Column("emoji", sa.String(64), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.message_id"],
            name="fk_reactions_message_id_messages",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("message_id", "participant_id", "emoji", name="pk_reactions"),
    )


def downgrade() -> None:
    op.drop_table("reactions")
    op.drop_index("ix_messages_room_id_seq", table_name="messages")
    op.drop_table("messages")
    op.drop_index("ix_room_members_participant_id", table_name="room_members")
    op.drop_table("room_members")
    op.drop_table("rooms")
    op.drop_table("participants")
    op.drop_table("mesh_config")
