"""The owner's link-preview switch: whether the node fetches link previews
(``mesh_config.link_previews``; NULL follows ``MESH_LINK_PREVIEWS``)
(docs/decisions/0072-link-previews.md).

Revision ID: 0032_link_preview_switch
Revises: 0031_group_dms_receipts
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0032_link_preview_switch"
down_revision = "0031_group_dms_receipts"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a nullable column: a plain ALTER TABLE on SQLite too (no table rebuild)
    op.add_column("mesh_config", sa.Column("link_previews", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("mesh_config") as batch:
        batch.drop_column("link_previews")
