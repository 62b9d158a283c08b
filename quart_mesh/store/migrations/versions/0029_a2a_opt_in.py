"""Which bots are A2A agents (``agents.a2a``, decision 0062): reachable over
A2A at ``/a2a/agents/<id>`` and listed as skills of the node's agent card.

Managed bots are agents by default (the node runs them and knows what they
do); external bots opt in at bootstrap (``a2a: true``) or later
(``PATCH /api/agents/<id>``). The upgrade turns it on for the managed bots
that exist.

Revision ID: 0029_a2a_opt_in
Revises: 0028_tasks
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0029_a2a_opt_in"
down_revision = "0028_tasks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # a NOT NULL column with a default: a plain ALTER TABLE on SQLite too
    op.add_column(
        "agents", sa.Column("a2a", sa.Boolean(), nullable=False, server_default=sa.false())
    )
    agents = sa.table("agents", sa.column("a2a", sa.Boolean()), sa.column("managed", sa.Boolean()))
    op.execute(agents.update().where(agents.c.managed == sa.true()).values(a2a=True))


def downgrade() -> None:
    with op.batch_alter_table("agents") as batch:
        batch.drop_column("a2a")
