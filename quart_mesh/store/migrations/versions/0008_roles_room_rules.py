"""Custom roles, room permission overrides and room presets.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "custom_roles",
        sa.Column("role_id", sa.String(26), nullable=False),
        sa.Column("name", sa.String(40), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False),
        sa.Column("permissions", sa.Text(), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("created_by", sa.String(26), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("role_id", name="pk_custom_roles"),
        sa.UniqueConstraint("name", name="uq_custom_roles_name"),
    )
    op.create_table(
        "room_overrides",
        sa.Column("override_id", sa.String(26), nullable=False),
        sa.Column("room_id", sa.String(26), nullable=False),
        sa.Column("target_type", sa.String(16), nullable=False),
        sa.Column("target", sa.String(40), nullable=False),
        sa.Column("permission", sa.String(64), nullable=False),
        sa.Column("effect", sa.String(8), nullable=False),
        sa.Column("created_by", sa.String(26), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["room_id"],
            ["rooms.room_id"],
            name="fk_room_overrides_room_id_rooms",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("override_id", name="pk_room_overrides"),
        sa.UniqueConstraint(
            "room_id",
            "target_type",
            "target",
            "permission",
            name="uq_room_overrides_room_id_target_type_target_permission",
        ),
    )
    with op.batch_alter_table("rooms") as batch:
        batch.add_column(sa.Column("preset", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rooms") as batch:
        batch.drop_column("preset")
    op.drop_table("room_overrides")
    op.drop_table("custom_roles")
