"""Apps of the app store and their source versions.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "apps",
        sa.Column("app_id", sa.String(26), nullable=False),
        sa.Column("owner_id", sa.String(26), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("deployed", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["owner_id"],
            ["participants.participant_id"],
            name="fk_apps_owner_id_participants",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("app_id", name="pk_apps"),
    )
    op.create_index("ix_apps_owner_id", "apps", ["owner_id"])
    op.create_index("ix_apps_deployed", "apps", ["deployed"])
    op.create_table(
        "app_versions",
        sa.Column("app_id", sa.String(26), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("html", sa.Text(), nullable=False),
        sa.Column("css", sa.Text(), nullable=False),
        sa.Column("js", sa.Text(), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("created_by", sa.String(26), nullable=True),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.ForeignKeyConstraint(
            ["app_id"], ["apps.app_id"], name="fk_app_versions_app_id_apps", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("app_id", "version", name="pk_app_versions"),
    )


def downgrade() -> None:
    op.drop_table("app_versions")
    op.drop_index("ix_apps_deployed", table_name="apps")
    op.drop_index("ix_apps_owner_id", table_name="apps")
    op.drop_table("apps")
