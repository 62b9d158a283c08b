"""The owner's registry switch: whether this node lists public meshes
(``mesh_config.registry_enabled``; NULL follows ``MESH_REGISTRY_ENABLED``)
(docs/decisions/0057-registry-lists-real-meshes.md).

Revision ID: 0023_registry
Revises: 0022_inert_uploads
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0023_registry"
down_revision = "0022_inert_uploads"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a nullable column: a plain ALTER TABLE on SQLite too (no table rebuild)
    op.add_column("mesh_config", sa.Column("registry_enabled", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("mesh_config") as batch:
        batch.drop_column("registry_enabled")
