"""Tasks: work asked of an agent in a room, followed through its states
(docs/decisions/0063-tasks.md).

- ``tasks``: one row per task. ``message_id`` is the request (the creator's
  message, the root of the task's thread) and ``request_seq`` its cursor
  (a DM task's replies are the agent's messages after it). ``managed``: the
  agent updated the task itself at least once; until then its first reply
  completes the task (the reconciliation, ``services/tasks.py``), and
  ``result_message_id`` names that reply: the task's result is its text as
  it is now (``result`` holds only a result the agent gave itself).
  No foreign key to the participants: a task outlives its agent or creator,
  as a message outlives its sender; it goes with its room.

Revision ID: 0028_tasks
Revises: 0027_search_and_mutes
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0028_tasks"
down_revision = "0027_search_and_mutes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
    op.create_table(
        "tasks",
        sa.Column("task_id", sa.String(26), nullable=False),
        sa.Column("room_id", sa.String(26), nullable=False),
        sa.Column("agent_id", sa.String(26), nullable=False),
        sa.Column("creator_id", sa.String(26), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("state", sa.String(20), nullable=False),
        sa.Column("message_id", sa.String(26), nullable=False),
        sa.Column("request_seq", seq, nullable=False),
        sa.Column("context_id", sa.String(64), nullable=False),
        sa.Column("status_message", sa.Text(), nullable=True),
        sa.Column("result", sa.Text(), nullable=True),
        sa.Column("managed", sa.Boolean(), nullable=False),
        sa.Column("via", sa.String(8), nullable=False),
        sa.Column("created_at", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.Column("result_message_id", sa.String(26), nullable=True),
        sa.ForeignKeyConstraint(
            ["room_id"], ["rooms.room_id"], name="fk_tasks_room_id_rooms", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("task_id", name="pk_tasks"),
    )
    op.create_index("ix_tasks_room_id_task_id", "tasks", ["room_id", "task_id"])
    op.create_index("ix_tasks_agent_id_state", "tasks", ["agent_id", "state"])
    op.create_index("ix_tasks_creator_id", "tasks", ["creator_id"])
    op.create_index("ix_tasks_context_id", "tasks", ["context_id"])


def downgrade() -> None:
    op.drop_table("tasks")
