"""Federation that trusts only what a peer may say (decision 0058):

- ``remote_participants.introduced_by``: the DID of the node that relayed
  the participant here; only that node speaks as it, and each node's are its
  own (unique per introducer, home node and id). Filled with the home node
  when this node has a connection with it, else the node whose connection
  its events last came over (``unknown`` if that connection was replaced).
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
    # a participant of a node this node is (or was) connected with is that
    # node's own; else the node whose connection it came over (a hub)
    op.execute(
        "UPDATE remote_participants SET introduced_by = node_did WHERE EXISTS"
        " (SELECT 1 FROM connections WHERE connections.peer_did = remote_participants.node_did)"
    )
    op.execute(
        "UPDATE remote_participants SET introduced_by = (SELECT connections.peer_did"
        " FROM connections WHERE connections.connection_id = remote_participants.connection_id)"
        " WHERE introduced_by IS NULL"
    )
    # the connection it came over was replaced since: which node brought it
    # is not known, so no node speaks as it again (a new relay of the person
    # makes a new participant) rather than handing a hub's words to its home
    op.execute(
        "UPDATE remote_participants SET introduced_by = 'unknown' WHERE introduced_by IS NULL"
    )
    # each introducer's participants are its own: unique per introducer
    with op.batch_alter_table("remote_participants") as batch:
        batch.alter_column("introduced_by", existing_type=sa.String(128), nullable=False)
        batch.drop_constraint("uq_remote_participants_node_did_remote_id", type_="unique")
        batch.create_unique_constraint(
            "uq_remote_participants_introduced_by_node_did_remote_id",
            ["introduced_by", "node_did", "remote_id"],
        )
    op.add_column("connections", sa.Column("request_address", sa.String(64), nullable=True))
    op.add_column("messages", sa.Column("time_replaced", sa.Boolean(), nullable=True))


def downgrade() -> None:
    # plain ALTER TABLE ... DROP COLUMN (SQLite 3.35+): rebuilding ``messages``
    # on SQLite would cascade to the rows that refer to it (reactions,
    # attachments) while foreign keys are on
    op.drop_column("messages", "time_replaced")
    op.drop_column("connections", "request_address")
    # a person several nodes introduced keeps one of its rows: the home
    # node's, else the first made; the others stay as participants without
    # a remote row (their messages stay)
    op.execute(
        "DELETE FROM remote_participants WHERE EXISTS (SELECT 1 FROM remote_participants"
        " AS other WHERE other.node_did = remote_participants.node_did"
        " AND other.remote_id = remote_participants.remote_id"
        " AND other.participant_id != remote_participants.participant_id"
        " AND remote_participants.introduced_by != remote_participants.node_did"
        " AND (other.introduced_by = other.node_did"
        " OR other.participant_id < remote_participants.participant_id))"
    )
    with op.batch_alter_table("remote_participants") as batch:
        batch.drop_constraint(
            "uq_remote_participants_introduced_by_node_did_remote_id", type_="unique"
        )
        batch.create_unique_constraint(
            "uq_remote_participants_node_did_remote_id", ["node_did", "remote_id"]
        )
        batch.drop_column("introduced_by")
