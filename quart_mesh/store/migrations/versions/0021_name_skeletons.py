"""Names people can trust: the confusable skeletons of each participant's
and ordinary room's name (as written, and of its lower case), each unique, so
that a lookalike name is refused by the store itself, race-free across
processes (docs/decisions/0056-trusted-names-and-inert-uploads.md).

Existing names are kept as they are. Where two already share a skeleton
(``owner`` and a Cyrillic-o ``owner`` registered before this), the older keeps
it and the newer gets NULL for that key: nobody is renamed or refused by the
upgrade, and a new name like either is still refused (it meets the older's).

Revision ID: 0021_names
Revises: 0020
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from quart_mesh.names import name_skeletons

revision = "0021_names"
down_revision = "0020"
branch_labels = None
depends_on = None


def _backfill(table: str, where: str) -> None:
    conn = op.get_bind()
    key = f"{table[:-1]}_id"
    rows = conn.execute(
        sa.text(f"SELECT {key}, name FROM {table} WHERE {where} ORDER BY created_at, {key}")
    ).all()
    seen: tuple[set[str], set[str]] = (set(), set())
    update = sa.text(
        f"UPDATE {table} SET name_skeleton = :written, folded_skeleton = :folded WHERE {key} = :id"
    )
    for row_id, name in rows:
        keys = name_skeletons(name)
        written, folded = (None if k in taken else k for k, taken in zip(keys, seen, strict=True))
        for k, taken in zip(keys, seen, strict=True):
            taken.add(k)
        conn.execute(update, {"written": written, "folded": folded, "id": row_id})


def upgrade() -> None:
    # nullable columns and plain indexes: no table rebuild on SQLite
    for table in ("participants", "rooms"):
        op.add_column(table, sa.Column("name_skeleton", sa.String(400), nullable=True))
        op.add_column(table, sa.Column("folded_skeleton", sa.String(400), nullable=True))
    _backfill("participants", "1 = 1")
    _backfill("rooms", "kind = 'room'")
    for table in ("participants", "rooms"):
        for column in ("name_skeleton", "folded_skeleton"):
            op.create_index(f"ix_{table}_{column}", table, [column], unique=True)


def downgrade() -> None:
    for table in ("participants", "rooms"):
        for column in ("name_skeleton", "folded_skeleton"):
            op.drop_index(f"ix_{table}_{column}", table_name=table)
        with op.batch_alter_table(table) as batch:
            batch.drop_column("folded_skeleton")
            batch.drop_column("name_skeleton")
