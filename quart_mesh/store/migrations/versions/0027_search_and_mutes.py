"""Full-text search over messages and per-room mutes (decision 0059):

- SQLite: ``message_search``, an FTS5 table whose rowid is ``messages.seq``
  and whose one column is the message's folded text (``store/search.py``);
  kept by the units of work that insert, edit and delete messages.
- PostgreSQL: ``messages.search_vector`` (``tsvector`` of the folded text,
  in the configuration named by ``MESH_SEARCH_LANGUAGE``) with a GIN index.
  Neither is in ``schema.metadata`` (not portable): ``store/search.py``
  names them, and the schema check leaves them out.
- ``search_index``: one row; ``pending_below``: messages at or below that
  cursor are still to be (re)indexed, by the node's background indexer in
  small batches (``services/search.py``), so upgrading a large mesh does
  not keep the node from starting; ``config``: the PostgreSQL
  configuration the vectors were built with (a change re-indexes).
- ``room_members.muted``: the member muted the room (or DM); every tab and
  device follows it.

Revision ID: 0027_search_and_mutes
Revises: 0026_federation_trust
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027_search_and_mutes"
down_revision = "0026_federation_trust"
branch_labels = None
depends_on = None


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "postgresql":
        op.execute("ALTER TABLE messages ADD COLUMN search_vector tsvector")
        op.execute("CREATE INDEX ix_messages_search_vector ON messages USING gin (search_vector)")
    else:
        # the text is folded in Python (store/search.py): the tokenizer only splits it
        op.execute(
            "CREATE VIRTUAL TABLE message_search USING fts5(body,"
            " tokenize = 'unicode61 remove_diacritics 2')"
        )
    op.create_table(
        "search_index",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("pending_below", sa.BigInteger(), nullable=True),
        sa.Column("config", sa.String(64), nullable=True),
    )
    head = bind.execute(sa.text("SELECT max(seq) FROM messages")).scalar()
    # PostgreSQL: the language-neutral configuration until the node applies its setting
    config = "simple" if bind.dialect.name == "postgresql" else None
    op.execute(
        sa.text(
            "INSERT INTO search_index (id, pending_below, config) VALUES (1, :head, :config)"
        ).bindparams(head=head, config=config)
    )
    # a nullable column: a plain ALTER TABLE on SQLite too (no table rebuild)
    op.add_column("room_members", sa.Column("muted", sa.Boolean(), nullable=True))


def downgrade() -> None:
    op.drop_column("room_members", "muted")
    op.drop_table("search_index")
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX ix_messages_search_vector")
        op.execute("ALTER TABLE messages DROP COLUMN search_vector")
    else:
        op.execute("DROP TABLE message_search")
