"""Meshes listed by this node as a registry (federation: registry heartbeat).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "registry_entries",
        sa.Column("did", sa.String(128), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("description", sa.Text(), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("members", sa.BigInteger(), nullable=False),
        sa.Column("bots", sa.BigInteger(), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("last_seen", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("did", name="pk_registry_entries"),
    )
    op.create_index("ix_registry_entries_last_seen", "registry_entries", ["last_seen"])


def downgrade() -> None:
    op.drop_index("ix_registry_entries_last_seen", table_name="registry_entries")
    op.drop_table("registry_entries")
