"""Daily use (issue 32): a participant's display name beside its unique
name, what the list of one's sessions shows of each token (the user agent
that signed it in, when it was last used), a room's revision (bumped by
each change to its description, so that a cached snapshot sees it), and
pinned messages.

Every new column but the revision (0) is nullable: the rows that exist have no display name, and
tokens issued before this migration show neither a user agent nor a last
use until they are used again.

Revision ID: 0030_daily_use
Revises: 0029_a2a_opt_in
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0030_daily_use"
down_revision = "0029_a2a_opt_in"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # nullable columns: a plain ALTER TABLE on SQLite too
    op.add_column("participants", sa.Column("display_name", sa.String(200), nullable=True))
    op.add_column("issued_tokens", sa.Column("user_agent", sa.String(300), nullable=True))
    op.add_column("issued_tokens", sa.Column("last_used_at", sa.BigInteger(), nullable=True))
    op.add_column("rooms", sa.Column("revision", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "pins",
        sa.Column(
            "message_id",
            sa.String(26),
            sa.ForeignKey("messages.message_id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column(
            "room_id",
            sa.String(26),
            sa.ForeignKey("rooms.room_id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("pinned_by", sa.String(26), nullable=False),
        sa.Column("pinned_at", sa.BigInteger(), nullable=False),
    )
    op.create_index("ix_pins_room_id", "pins", ["room_id"])


def downgrade() -> None:
    op.drop_index("ix_pins_room_id", table_name="pins")
    op.drop_table("pins")
    with op.batch_alter_table("rooms") as batch:
        batch.drop_column("revision")
    with op.batch_alter_table("issued_tokens") as batch:
        batch.drop_column("last_used_at")
        batch.drop_column("user_agent")
    with op.batch_alter_table("participants") as batch:
        batch.drop_column("display_name")
