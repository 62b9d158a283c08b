"""Repository: the full-text index of messages (decision 0059).

The index holds each message's folded text (:func:`.search_text.fold`) and
is kept by the units of work that insert, edit and delete messages, in
their own transaction (``store/messages.py`` calls :func:`index`,
:func:`unindex`; ``store/rooms.py`` :func:`unindex_room`):

- SQLite: ``message_search``, an FTS5 table whose rowid is ``messages.seq``;
- PostgreSQL: ``messages.search_vector``, a ``tsvector`` with a GIN index,
  in the text search configuration ``search_index.config`` names
  (``MESH_SEARCH_LANGUAGE``, ``simple`` by default: no stemming, no stop
  words, any language). It goes with its row, so only edits write it here.

Messages stored before the index existed (or before the configuration
changed) are indexed by :func:`backfill`, in batches from the newest down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..errors import ConfigError
from ..search_text import Term, fold
from .dialect import Statement
from .schema import messages, search_index

__all__ = [
    "CONFIG",
    "Filters",
    "backfill",
    "in_metadata",
    "index",
    "pending_count",
    "reindex",
    "search",
    "unindex",
    "unindex_room",
    "use_config",
]

#: the configuration of the PostgreSQL index, as SQL (read with each statement
#: that builds a vector or a query, so a change applies to every process at once)
CONFIG = "CAST((SELECT config FROM search_index WHERE id = 1) AS regconfig)"

#: the index's objects, outside ``schema.metadata`` (one per backend, not portable)
_OUTSIDE = frozenset({"message_search", "search_vector", "ix_messages_search_vector"})


def in_metadata(name: str | None, kind: str, parent: Any) -> bool:
    """Whether *name* is described by ``schema.metadata`` (Alembic's
    ``include_name`` hook): the index's table (and FTS5's shadow tables),
    column and GIN index are not."""
    if name is None:
        return True
    return name not in _OUTSIDE and not name.startswith("message_search_")


def _postgresql(conn: Connection) -> bool:
    return conn.dialect.name == "postgresql"


_insert_sqlite = Statement("INSERT INTO message_search (rowid, body) VALUES (:seq, :body)")
_replace_sqlite = Statement(
    "INSERT OR REPLACE INTO message_search (rowid, body) VALUES (:seq, :body)"
)
_delete_sqlite = Statement("DELETE FROM message_search WHERE rowid = :seq")
_update_postgresql = Statement(
    f"UPDATE messages SET search_vector = to_tsvector({CONFIG}, :body) WHERE seq = :seq"
)


def index(conn: Connection, seq: int, content: str) -> None:
    """Index a new message (SQLite; on PostgreSQL its insert wrote the vector)."""
    if not _postgresql(conn):
        _insert_sqlite.run(conn, {"seq": seq, "body": fold(content)})


def reindex(conn: Connection, seq: int, content: str) -> None:
    """Index an edited message's new content in place of its old."""
    if _postgresql(conn):
        _update_postgresql.run(conn, {"seq": seq, "body": fold(content)})
    else:
        _replace_sqlite.run(conn, {"seq": seq, "body": fold(content)})


def unindex(conn: Connection, seq: int) -> None:
    """Forget a message about to be deleted (PostgreSQL: it goes with its row)."""
    if not _postgresql(conn):
        _delete_sqlite.run(conn, {"seq": seq})


def unindex_room(conn: Connection, room_id: str) -> None:
    """Forget a room's messages, about to be deleted with it."""
    if not _postgresql(conn):
        conn.execute(
            sa.text(
                "DELETE FROM message_search WHERE rowid IN"
                " (SELECT seq FROM messages WHERE room_id = :room_id)"
            ),
            {"room_id": room_id},
        )


# -- searching ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Filters:
    """What a search is narrowed to besides its words (all optional)."""

    room_ids: tuple[str, ...] | None = None
    sender_id: str | None = None
    #: cursors: only messages before / after them
    before_seq: int | None = None
    after_seq: int | None = None
    #: times (ms): only messages sent before / at or after them
    before_at: int | None = None
    after_at: int | None = None
    #: replies in threads, and messages that have replies
    in_thread: bool = False
    has_file: bool = False
    #: ``(participant id, name)``: addressed to it or mentioning ``@name``
    mentions: tuple[str, str] | None = None


def _fts_phrase(term: Term) -> str:
    # folded tokens are letters, digits and marks only: nothing to quote
    return '"' + " ".join(term.tokens) + '"' + (" *" if term.prefix else "")


def _fts_match(positive: Sequence[Term], negative: Sequence[Term]) -> str:
    """An FTS5 query: every positive term, none of the negative ones."""
    text = " AND ".join(_fts_phrase(t) for t in positive)
    for term in negative:
        text += " NOT " + _fts_phrase(term)
    return text


def _web_word(token: str) -> str:
    # websearch_to_tsquery reads a bare "or" as the operator
    return '"or"' if token == "or" else token


def _tsquery(terms: Sequence[Term], params: dict[str, Any], name: str, *, any_of: bool) -> str:
    """SQL for a ``tsquery`` of *terms* (with their negations unless
    *any_of*: then matching any of them): ``websearch_to_tsquery`` for words
    and phrases, ``to_tsquery`` for prefixes (the former has none)."""
    web: list[str] = []
    prefixes: list[str] = []
    for term in terms:
        negate = term.negated and not any_of
        if term.prefix:
            lexemes = " <-> ".join(f"'{t}'" for t in term.tokens) + ":*"
            prefixes.append(("!" if negate else "") + f"({lexemes})")
        else:
            # inside quotes "or" is a word already
            text = (
                f'"{" ".join(term.tokens)}"' if len(term.tokens) > 1 else _web_word(term.tokens[0])
            )
            web.append(("-" if negate else "") + text)
    parts = []
    if web:
        params[name + "_web"] = (" or " if any_of else " ").join(web)
        parts.append(f"websearch_to_tsquery({CONFIG}, :{name}_web)")
    if prefixes:
        params[name + "_prefix"] = (" | " if any_of else " & ").join(prefixes)
        parts.append(f"to_tsquery({CONFIG}, :{name}_prefix)")
    return "(" + (" || " if any_of else " && ").join(parts) + ")"


def _in(column: str, values: Sequence[str], params: dict[str, Any], name: str) -> str:
    names = []
    for i, value in enumerate(values):
        params[f"{name}{i}"] = value
        names.append(f":{name}{i}")
    return f"{column} IN ({', '.join(names)})"


def _like_escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def search(
    conn: Connection,
    participant_id: str,
    readable: tuple[bool, frozenset[str]],
    terms: Sequence[Term],
    filters: Filters,
    *,
    relevance: bool,
    below: int | None,
    offset: int,
    limit: int,
) -> list[int]:
    """The cursors of the messages that match, in the rooms the participant
    is in (DMs included) and may read (*readable*: ``(everywhere,
    exceptions)``, the services' visibility decision): newest first (from
    below cursor *below*), or with *relevance* best first (from *offset*).
    """
    everywhere, exceptions = readable
    if not everywhere and not exceptions:
        return []
    postgresql = _postgresql(conn)
    positive = [t for t in terms if not t.negated]
    negative = [t for t in terms if t.negated]
    params: dict[str, Any] = {"me": participant_id, "limit": limit}
    where: list[str] = []
    rank = None
    if positive:
        if postgresql:
            tsquery = _tsquery(terms, params, "q", any_of=False)
            where.append(f"m.search_vector @@ {tsquery}")
            rank = f"ts_rank(m.search_vector, {tsquery}) DESC"
            source = "messages AS m"
        else:
            params["match"] = _fts_match(positive, negative)
            where.append("message_search MATCH :match")
            rank = "bm25(message_search)"
            source = "message_search JOIN messages AS m ON m.seq = message_search.rowid"
    else:
        source = "messages AS m"
        if negative:
            if postgresql:
                tsquery = _tsquery(negative, params, "n", any_of=True)
                where.append(f"NOT coalesce(m.search_vector @@ {tsquery}, FALSE)")
            else:
                params["match"] = " OR ".join(_fts_phrase(t) for t in negative)
                where.append(
                    "m.seq NOT IN (SELECT rowid FROM message_search"
                    " WHERE message_search MATCH :match)"
                )
    source += " JOIN room_members AS rm ON rm.room_id = m.room_id AND rm.participant_id = :me"
    if exceptions:
        clause = _in("m.room_id", sorted(exceptions), params, "x")
        where.append(("NOT " if everywhere else "") + clause)
    if filters.room_ids is not None:
        if not filters.room_ids:
            return []
        where.append(_in("m.room_id", filters.room_ids, params, "r"))
    if filters.sender_id is not None:
        params["sender"] = filters.sender_id
        where.append("m.sender_id = :sender")
    for value, clause, key in (
        (filters.before_seq, "m.seq < :before_seq", "before_seq"),
        (filters.after_seq, "m.seq > :after_seq", "after_seq"),
        (filters.before_at, "m.created_at < :before_at", "before_at"),
        (filters.after_at, "m.created_at >= :after_at", "after_at"),
        (below, "m.seq < :below", "below"),
    ):
        if value is not None:
            params[key] = value
            where.append(clause)
    if filters.in_thread:
        where.append(
            "(m.thread_id IS NOT NULL OR EXISTS"
            " (SELECT 1 FROM messages AS r WHERE r.thread_id = m.message_id))"
        )
    if filters.has_file:
        where.append(
            "EXISTS (SELECT 1 FROM message_attachments AS a WHERE a.message_id = m.message_id)"
        )
    if filters.mentions is not None:
        mentioned_id, name = filters.mentions
        params["mentioned"] = mentioned_id
        params["mention"] = "%" + _like_escaped("@" + name.lower()) + "%"
        # store.messages.mentions, written for this query's text
        where.append("(m.to_id = :mentioned OR lower(m.content) LIKE :mention ESCAPE '\\')")
    # newest first by the index's own order (FTS5 walks its rowids backwards)
    newest = "m.seq DESC" if postgresql or not positive else "message_search.rowid DESC"
    if relevance and rank is not None:
        order = f"{rank}, {newest} LIMIT :limit OFFSET :offset"
        params["offset"] = offset
    else:
        order = f"{newest} LIMIT :limit"
    sql = f"SELECT m.seq FROM {source} WHERE {' AND '.join(where) or 'TRUE'} ORDER BY {order}"
    return [row[0] for row in conn.execute(sa.text(sql), params)]


# -- the index's upkeep ----------------------------------------------------------


def use_config(conn: Connection, config: str) -> bool:
    """Make *config* the PostgreSQL index's configuration; if it was another,
    every message is to be indexed again (True). SQLite: nothing.

    Raises:
        ConfigError: PostgreSQL has no such configuration.
    """
    if not _postgresql(conn):
        return False
    known = sa.text("SELECT oid FROM pg_ts_config WHERE cfgname = :config")
    if conn.execute(known, {"config": config}).scalar() is None:
        raise ConfigError(
            f"MESH_SEARCH_LANGUAGE: PostgreSQL has no text search configuration {config!r}"
            " (see SELECT cfgname FROM pg_ts_config)"
        )
    current = conn.execute(sa.select(search_index.c.config).where(search_index.c.id == 1)).scalar()
    if current == config:
        return False
    head = conn.execute(sa.select(sa.func.max(messages.c.seq))).scalar()
    conn.execute(
        search_index.update()
        .where(search_index.c.id == 1)
        .values(config=config, pending_below=head)
    )
    return True


def pending_count(conn: Connection) -> int:
    """How many messages are still to be indexed."""
    below = conn.execute(
        sa.select(search_index.c.pending_below).where(search_index.c.id == 1)
    ).scalar()
    if below is None:
        return 0
    count: int = conn.execute(
        sa.select(sa.func.count()).select_from(messages).where(messages.c.seq <= below)
    ).scalar_one()
    return count


def backfill(conn: Connection, batch: int) -> tuple[int, bool]:
    """Index the newest *batch* of the messages still to be indexed: (how
    many it indexed, whether any are left)."""
    below = conn.execute(
        sa.select(search_index.c.pending_below).where(search_index.c.id == 1)
    ).scalar()
    if below is None:
        return 0, False
    rows = list(
        conn.execute(
            sa.select(messages.c.seq, messages.c.content)
            .where(messages.c.seq <= below)
            .order_by(messages.c.seq.desc())
            .limit(batch)
        )
    )
    if rows:
        if _postgresql(conn):
            # an edit that committed meanwhile wrote its own vector: keep it
            conn.execute(
                sa.text(
                    f"UPDATE messages SET search_vector = to_tsvector({CONFIG}, :body)"
                    " WHERE seq = :seq AND content = :content"
                ),
                [{"seq": r.seq, "content": r.content, "body": fold(r.content)} for r in rows],
            )
        else:
            # in ascending order: FTS5 starts a new segment whenever a rowid
            # comes lower than the one before (each row its own segment,
            # merged again and again: measured 20x slower at 1M messages)
            conn.execute(
                sa.text("INSERT OR REPLACE INTO message_search (rowid, body) VALUES (:seq, :body)"),
                [{"seq": r.seq, "body": fold(r.content)} for r in reversed(rows)],
            )
    left = len(rows) == batch
    conn.execute(
        search_index.update()
        .where(search_index.c.id == 1)
        .values(pending_below=rows[-1].seq - 1 if left else None)
    )
    return len(rows), left
