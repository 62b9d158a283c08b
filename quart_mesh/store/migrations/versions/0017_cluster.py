"""Several processes on one database: the event stream every process reads,
the processes' heartbeats, and where each participant holds sessions
(docs/decisions/0034-cluster.md). Created on both backends; only
PostgreSQL writes them.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "cluster_stream",
        sa.Column("position", Seq, autoincrement=True, nullable=False),
        sa.Column("origin", sa.String(40), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("position", name="pk_cluster_stream"),
    )
    op.create_index("ix_cluster_stream_created_at", "cluster_stream", ["created_at"])
    op.create_table(
        "cluster_processes",
        sa.Column("process_id", sa.String(40), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.BigInteger(), nullable=False),
        sa.Column("beat_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("process_id", name="pk_cluster_processes"),
    )
    op.create_table(
        "presence_sessions",
        sa.Column("process_id", sa.String(40), nullable=False),
        sa.Column("participant_id", sa.String(26), nullable=False),
        sa.Column("sessions", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("process_id", "participant_id", name="pk_presence_sessions"),
    )
    op.create_index("ix_presence_sessions_participant_id", "presence_sessions", ["participant_id"])


def downgrade() -> None:
    op.drop_index("ix_presence_sessions_participant_id", table_name="presence_sessions")
    op.drop_table("presence_sessions")
    op.drop_table("cluster_processes")
    op.drop_index("ix_cluster_stream_created_at", table_name="cluster_stream")
    op.drop_table("cluster_stream")
