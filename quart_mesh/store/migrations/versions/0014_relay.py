"""Federation relay: shared rooms, remote participants, the relay outbox.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("participants", sa.Column("origin_did", sa.String(128), nullable=True))
    op.add_column("rooms", sa.Column("origin_did", sa.String(128), nullable=True))
    op.add_column("messages", sa.Column("origin_did", sa.String(128), nullable=True))
    op.add_column(
        "connections",
        sa.Column("relay_cursor", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.add_column(
        "connections",
        sa.Column("relay_applied", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.create_table(
        "shared_rooms",
        sa.Column("room_id", sa.String(26), nullable=False),
        sa.Column("connection_id", sa.String(26), nullable=False),
        sa.Column("home_room_id", sa.String(26), nullable=False),
        sa.Column("direction", sa.String(3), nullable=False),
        sa.Column("from_seq", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["room_id"],
            ["rooms.room_id"],
            name="fk_shared_rooms_room_id_rooms",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("room_id", "connection_id", name="pk_shared_rooms"),
        sa.UniqueConstraint(
            "connection_id", "home_room_id", name="uq_shared_rooms_connection_id_home_room_id"
        ),
    )
    op.create_table(
        "remote_participants",
        sa.Column("participant_id", sa.String(26), nullable=False),
        sa.Column("connection_id", sa.String(26), nullable=False),
        sa.Column("node_did", sa.String(128), nullable=False),
        sa.Column("node_name", sa.String(200), nullable=False),
        sa.Column("remote_id", sa.String(26), nullable=False),
        sa.Column("remote_name", sa.String(200), nullable=False),
        sa.ForeignKeyConstraint(
            ["participant_id"],
            ["participants.participant_id"],
            name="fk_remote_participants_participant_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("participant_id", name="pk_remote_participants"),
        sa.UniqueConstraint(
            "node_did", "remote_id", name="uq_remote_participants_node_did_remote_id"
        ),
    )
    op.create_table(
        "relay_outbox",
        sa.Column("seq", sa.Integer(), nullable=False, autoincrement=True),
        sa.Column("room_id", sa.String(26), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("via_connection", sa.String(26), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name="pk_relay_outbox"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_relay_outbox_room_id", "relay_outbox", ["room_id"])


def downgrade() -> None:
    op.drop_index("ix_relay_outbox_room_id", table_name="relay_outbox")
    op.drop_table("relay_outbox")
    op.drop_table("remote_participants")
    op.drop_table("shared_rooms")
    with op.batch_alter_table("connections") as batch:
        batch.drop_column("relay_applied")
        batch.drop_column("relay_cursor")
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("origin_did")
    with op.batch_alter_table("rooms") as batch:
        batch.drop_column("origin_did")
    with op.batch_alter_table("participants") as batch:
        batch.drop_column("origin_did")
