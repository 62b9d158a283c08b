"""Federation that trusts only what a peer may say (decision 0058):

- ``remote_participants.introduced_by``: the DID of the node that first
  relayed the participant here; only that node (or the participant's home
  node) speaks as it. Filled from the connection its events last arrived
  over (else its home node).
- ``connections.request_address``: the client address an inbound
  connection request came from, as per-address limits count it (an IPv6
  address by its /64; pending requests are limited per address).
- ``messages.time_replaced``: a relayed message whose claimed time was
  outside the sane window, dated when it arrived instead.

Revision ID: 0026_federation_trust
Revises: 0025_preset_set_by
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026_federation_trust"
down_revision = "0025_preset_set_by"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # nullable columns: plain ALTER TABLEs on SQLite too (no table rebuild)
    op.add_column("remote_participants", sa.Column("introduced_by", sa.String(128), nullable=True))
    op.execute(
        "UPDATE remote_participants SET introduced_by = (SELECT connections.peer_did"
        " FROM connections WHERE connections.connection_id = remote_participants.connection_id)"
    )
    op.execute(
        "UPDATE remote_participants SET introduced_by = node_did WHERE introduced_by IS NULL"
    )
    op.create_index(
        "ix_remote_participants_introduced_by", "remote_participants", ["introduced_by"]
    )
    op.add_column("connections", sa.Column("request_address", sa.String(64), nullable=True))
    op.add_column("messages", sa.Column("time_replaced", sa.Boolean(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("time_replaced")
    with op.batch_alter_table("connections") as batch:
        batch.drop_column("request_address")
    op.drop_index("ix_remote_participants_introduced_by", "remote_participants")
    with op.batch_alter_table("remote_participants") as batch:
        batch.drop_column("introduced_by")
