"""Uploaded files and the attachments of messages.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "uploads",
        sa.Column("upload_id", sa.String(26), nullable=False),
        sa.Column("stored_name", sa.String(40), nullable=False),
        sa.Column("filename", sa.String(255), nullable=False),
        sa.Column("content_type", sa.String(100), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("uploader_id", sa.String(26), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("upload_id", name="pk_uploads"),
        sa.UniqueConstraint("stored_name", name="uq_uploads_stored_name"),
    )
    op.create_index("ix_uploads_uploader_id", "uploads", ["uploader_id"])
    op.create_table(
        "message_attachments",
        sa.Column("message_id", sa.String(26), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("upload_id", sa.String(26), nullable=False),
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.message_id"],
            name="fk_message_attachments_message_id_messages",
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["upload_id"],
            ["uploads.upload_id"],
            name="fk_message_attachments_upload_id_uploads",
        ),
        sa.PrimaryKeyConstraint("message_id", "position", name="pk_message_attachments"),
    )
    op.create_index("ix_message_attachments_upload_id", "message_attachments", ["upload_id"])


def downgrade() -> None:
    op.drop_index("ix_message_attachments_upload_id", table_name="message_attachments")
    op.drop_table("message_attachments")
    op.drop_index("ix_uploads_uploader_id", table_name="uploads")
    op.drop_table("uploads")
