"""Mesh connections between nodes (federation step 1).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-22
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "connections",
        sa.Column("connection_id", sa.String(26), nullable=False),
        sa.Column("peer_did", sa.String(128), nullable=False),
        sa.Column("peer_name", sa.String(200), nullable=False),
        sa.Column("peer_url", sa.String(2048), nullable=False),
        sa.Column("direction", sa.String(10), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("connection_id", name="pk_connections"),
        sa.UniqueConstraint("peer_did", name="uq_connections_peer_did"),
    )
    op.create_index("ix_connections_status", "connections", ["status"])


def downgrade() -> None:
    op.drop_index("ix_connections_status", table_name="connections")
    op.drop_table("connections")
