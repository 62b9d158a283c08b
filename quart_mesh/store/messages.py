"""Repository: messages and reactions."""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .. import search_text
from ..records import Message, Reaction, Upload
from . import ahead, search
from .blocks import final_seq
from .dialect import Statement, insert, insert_new
from .schema import message_attachments, messages, reactions, room_members, room_reads, rooms
from .uploads import upload_from_row, uploads_table

__all__ = [
    "add_attachments",
    "add_reaction",
    "backlog_cutoff",
    "delete_message",
    "get_message",
    "get_message_by_client_id",
    "head_seq",
    "insert_message",
    "list_messages",
    "list_threads",
    "mentions",
    "messages_after",
    "messages_around",
    "messages_by_seq",
    "newest_seq",
    "post_message",
    "post_messages",
    "remove_reaction",
    "room_head_seq",
    "seq_of",
    "update_content",
]


def _message(row: Any, reacts: Sequence[Reaction] = (), attached: Sequence[Upload] = ()) -> Message:
    return Message(
        seq=row.seq,
        message_id=row.message_id,
        room_id=row.room_id,
        sender_id=row.sender_id,
        sender_name=row.sender_name,
        content=row.content,
        created_at=row.created_at,
        to_id=row.to_id,
        thread_id=row.thread_id,
        edited_at=row.edited_at,
        reactions=tuple(reacts),
        attachments=tuple(attached),
        origin=row.origin_did,
        client_id=row.client_id,
        time_replaced=bool(row.time_replaced),
    )


def _reactions_for(conn: Connection, message_ids: list[str]) -> dict[str, list[Reaction]]:
    if not message_ids:
        return {}
    rows = conn.execute(
        sa.select(reactions)
        .where(reactions.c.message_id.in_(message_ids))
        .order_by(reactions.c.created_at, reactions.c.participant_id)
    )
    grouped: dict[str, dict[str, list[str]]] = defaultdict(dict)
    for row in rows:
        grouped[row.message_id].setdefault(row.emoji, []).append(row.participant_id)
    return {
        mid: [Reaction(emoji, tuple(pids)) for emoji, pids in by_emoji.items()]
        for mid, by_emoji in grouped.items()
    }


def _attachments_for(conn: Connection, message_ids: list[str]) -> dict[str, list[Upload]]:
    if not message_ids:
        return {}
    rows = conn.execute(
        sa.select(message_attachments.c.message_id, uploads_table)
        .join(uploads_table, uploads_table.c.upload_id == message_attachments.c.upload_id)
        .where(message_attachments.c.message_id.in_(message_ids))
        .order_by(message_attachments.c.message_id, message_attachments.c.position)
    )
    grouped: dict[str, list[Upload]] = defaultdict(list)
    for row in rows:
        grouped[row.message_id].append(upload_from_row(row))
    return grouped


def _threads_for(conn: Connection, message_ids: list[str]) -> dict[str, tuple[int, int]]:
    """(how many replies, the newest reply's time) of those of these
    messages that are threads' roots: counted from the replies themselves,
    so a reply's insert or delete changes them in its own transaction."""
    if not message_ids:
        return {}
    rows = conn.execute(
        sa.select(messages.c.thread_id, sa.func.count(), sa.func.max(messages.c.created_at))
        .where(messages.c.thread_id.in_(message_ids))
        .group_by(messages.c.thread_id)
    )
    return {row[0]: (int(row[1]), int(row[2])) for row in rows}


def _messages(conn: Connection, rows: Sequence[Any]) -> list[Message]:
    ids = [row.message_id for row in rows]
    reacts = _reactions_for(conn, ids)
    attached = _attachments_for(conn, ids)
    # (a reply is no root: only top-level messages are counted)
    threads = _threads_for(conn, [row.message_id for row in rows if row.thread_id is None])
    found = [
        _message(row, reacts.get(row.message_id, ()), attached.get(row.message_id, ()))
        for row in rows
    ]
    if threads:
        found = [
            dataclasses.replace(
                m, thread_replies=threads[m.message_id][0], last_reply_at=threads[m.message_id][1]
            )
            if m.message_id in threads
            else m
            for m in found
        ]
    return found


def add_attachments(conn: Connection, message_id: str, upload_ids: Sequence[str]) -> None:
    """Attach uploads (which must exist) to a stored message, in order."""
    if upload_ids:
        conn.execute(
            message_attachments.insert(),
            [
                {"message_id": message_id, "position": i, "upload_id": upload_id}
                for i, upload_id in enumerate(upload_ids)
            ],
        )


# The hottest statements of the node: run on the driver directly (dialect.Statement).
# On PostgreSQL each also writes the message's search vector (store/search.py);
# on SQLite the index is a table of its own, written next.
_COLUMNS = (
    "message_id, room_id, sender_id, sender_name, content, to_id, thread_id, created_at,"
    " origin_did, client_id"
)
_VALUES = (
    ":message_id, :room_id, :sender_id, :sender_name, :content, :to_id, :thread_id,"
    " :created_at, :origin_did, :client_id"
)
_VECTOR = f"to_tsvector({search.CONFIG}, :body)"


def _by_dialect(sql: str, vector: str) -> tuple[Statement, Statement]:
    """(the SQLite statement, the PostgreSQL one with the search vector):
    *sql* with ``{columns}`` and ``{vector}`` to fill in."""
    return (
        Statement(sql.format(columns="", vector="")),
        Statement(sql.format(columns=", search_vector", vector=", " + vector)),
    )


_insert_message = _by_dialect(
    f"INSERT INTO messages ({_COLUMNS}{{columns}}) VALUES ({_VALUES}{{vector}}) RETURNING seq",
    _VECTOR,
)
# a relayed message whose claimed time was replaced by its time of arrival
# (rare: the column is left NULL otherwise)
_insert_redated = _by_dialect(
    f"INSERT INTO messages ({_COLUMNS}, time_replaced{{columns}}) VALUES ({_VALUES}, TRUE"
    "{vector}) RETURNING seq",
    _VECTOR,
)
# a plain post in one statement: stored only if the sender is a member of the
# room and the room is not a DM (a DM's post also unhides it), and nothing if
# the sender's clientId is taken (a retry) — any of these: no row, and the
# caller takes the full path, which says which
_post_message = _by_dialect(
    f"INSERT INTO messages ({_COLUMNS}{{columns}}) SELECT :message_id, room_members.room_id,"
    " room_members.participant_id, :sender_name, :content, NULL, NULL, :created_at, NULL,"
    " :client_id{vector} FROM room_members JOIN rooms ON rooms.room_id = room_members.room_id"
    " WHERE room_members.room_id = :room_id AND room_members.participant_id = :sender_id"
    " AND rooms.kind <> 'dm' ON CONFLICT DO NOTHING RETURNING seq",
    _VECTOR,
)
# on PostgreSQL the same statement says whether the room is shared with
# other nodes (relay.is_shared, without a round trip of its own), and keeps
# the sender's membership from being removed until it commits (sends commit
# concurrently with other writes there: decision 0080; a removal committed
# first leaves no row to insert from)
_post_message = (
    _post_message[0],
    Statement(
        _post_message[1].sql.replace(
            " ON CONFLICT DO NOTHING", " FOR KEY SHARE OF room_members ON CONFLICT DO NOTHING"
        )
        + ", EXISTS (SELECT 1 FROM shared_rooms WHERE shared_rooms.room_id = :room_id)"
    ),
)


# the same for a run of plain posts at once (PostgreSQL: ``store/ahead.py``;
# the posts are a JSON array of arrays: id, room, sender, name, content,
# time, clientId, search text), in their order: positions are taken as rows
# are inserted, in the order of the select. The run is cut at its first
# post that would take the full path and insert there (a DM's post, or one
# whose sender is no member, which fails): from it on nothing is inserted
# ahead, so that no later post takes a position before it. The cut is found
# from the membership rows as locked (``locked``: a row deleted by a
# transaction this one waited for is not there, even if that transaction
# added it again), so a post before the cut without a row is only a retried
# clientId. Each row as the one-row statement's, and the cut (the ordinal of
# that post; the largest bigint if none)
_post_messages = Statement(
    "WITH t AS MATERIALIZED (SELECT e.p->>0 AS message_id, e.p->>1 AS room_id,"
    " e.p->>2 AS sender_id, e.p->>3 AS sender_name, e.p->>4 AS content,"
    " CAST(e.p->>5 AS bigint) AS created_at, e.p->>6 AS client_id, e.p->>7 AS body, e.n"
    " FROM json_array_elements(CAST(:posts AS json)) WITH ORDINALITY AS e(p, n)),"
    " locked AS MATERIALIZED (SELECT t.n, room_members.room_id, room_members.participant_id"
    " FROM t JOIN room_members ON room_members.room_id = t.room_id"
    " AND room_members.participant_id = t.sender_id"
    " JOIN rooms ON rooms.room_id = room_members.room_id"
    " WHERE rooms.kind <> 'dm' ORDER BY t.n FOR KEY SHARE OF room_members),"
    " cut AS MATERIALIZED (SELECT coalesce(min(t.n), 9223372036854775807) AS n FROM t"
    " WHERE NOT EXISTS (SELECT 1 FROM locked WHERE locked.n = t.n))"
    f" INSERT INTO messages ({_COLUMNS}, search_vector) SELECT t.message_id,"
    " locked.room_id, locked.participant_id, t.sender_name, t.content, NULL, NULL,"
    f" t.created_at, NULL, t.client_id, to_tsvector({search.CONFIG}, t.body)"
    " FROM t JOIN locked ON locked.n = t.n"
    " WHERE t.n < (SELECT n FROM cut) ORDER BY t.n"
    " ON CONFLICT DO NOTHING RETURNING message_id, seq,"
    " EXISTS (SELECT 1 FROM shared_rooms WHERE shared_rooms.room_id = messages.room_id),"
    " (SELECT n FROM cut)"
)


def _run(conn: Connection, statements: tuple[Statement, Statement], message: Message) -> Any:
    """Run an insert of *message* on the connection's dialect."""
    params = _params(message)
    if conn.dialect.name == "postgresql":
        params["body"] = search_text.fold(message.content)
        return statements[1].run(conn, params)
    return statements[0].run(conn, params)


def _params(message: Message) -> dict[str, Any]:
    return {
        "message_id": message.message_id,
        "room_id": message.room_id,
        "sender_id": message.sender_id,
        "sender_name": message.sender_name,
        "content": message.content,
        "to_id": message.to_id,
        "thread_id": message.thread_id,
        "created_at": message.created_at,
        "origin_did": message.origin,
        "client_id": message.client_id,
    }


def insert_message(conn: Connection, message: Message) -> Message:
    """Insert *message* (its ``seq`` is ignored) and return it with its new
    ``seq`` (on PostgreSQL a position of the transaction's block, ``blocks.py``)."""
    statements = _insert_redated if message.time_replaced else _insert_message
    seq = int(_run(conn, statements, message).fetchone()[0])
    search.index(conn, seq, message.content)
    return dataclasses.replace(message, seq=seq, reactions=())


def post_message(conn: Connection, message: Message) -> tuple[Message, bool | None] | None:
    """Insert a plain local post (no ``to``, thread or attachments) in one
    statement, if its sender is a member of its room, the room is not a DM
    and the sender's ``client_id`` (if any) is unused; else nothing is
    written and None is returned (the caller checks in full to say why, or
    to find the message a retried send stored). The common send, cheaply.

    Returns the stored message, and whether its room is shared with other
    nodes (``relay.is_shared``) where the statement could tell (PostgreSQL;
    ``None``: not told)."""
    ran, row = ahead.take(conn, message.message_id)
    if not ran:
        row = _run(conn, _post_message, message).fetchone()
    if row is None:
        return None
    search.index(conn, row[0], message.content)
    shared = bool(row[1]) if len(row) > 1 else None
    return dataclasses.replace(message, seq=row[0]), shared


def post_messages(conn: Connection, posts: list[Message]) -> None:
    """:func:`post_message` for each of *posts* in one statement, ahead of
    the units that will each ask for their own (PostgreSQL; a
    ``store/ahead.py`` function): each post's outcome is kept for
    :func:`post_message` to take, the stored row or ``None``, in the order
    given, up to the first post that would take the full path and insert
    there (a DM's; one whose sender is no member): it and the posts after
    it run their own statements. PostgreSQL only: on SQLite ``Database``
    runs nothing ahead (each post's statement is cheap there)."""
    rows = _post_messages.run(
        conn,
        {
            # one JSON text, not eight arrays: the driver's array dumping
            # cost more than the rest of the statement's preparation
            "posts": json.dumps(
                [
                    [
                        m.message_id,
                        m.room_id,
                        m.sender_id,
                        m.sender_name,
                        m.content,
                        m.created_at,
                        m.client_id,
                        search_text.fold(m.content),
                    ]
                    for m in posts
                ],
                ensure_ascii=False,
                separators=(",", ":"),
            )
        },
    ).fetchall()
    if not rows:
        return  # nothing inserted ahead: each unit runs its own statement
    stored = {row[0]: (row[1], row[2]) for row in rows}
    cut = int(rows[0][3])
    # the posts before the cut: the row inserted, or None (a retried
    # clientId: the unit finds the first message); from the cut on, nothing
    # is kept: each unit runs its own statement, in order
    for m in posts[: cut - 1]:
        ahead.keep(conn, m.message_id, stored.get(m.message_id))


def get_message(conn: Connection, message_id: str) -> Message | None:
    row = conn.execute(sa.select(messages).where(messages.c.message_id == message_id)).first()
    if row is None:
        return None
    return _messages(conn, [row])[0]


def messages_by_seq(conn: Connection, seqs: Sequence[int]) -> list[Message]:
    """The messages at these cursors, in the order given (missing ones left out)."""
    if not seqs:
        return []
    rows = {
        row.seq: row for row in conn.execute(sa.select(messages).where(messages.c.seq.in_(seqs)))
    }
    return _messages(conn, [rows[seq] for seq in seqs if seq in rows])


def get_message_by_client_id(conn: Connection, sender_id: str, client_id: str) -> Message | None:
    """The message *sender_id* sent with *client_id*, if any (a retried send)."""
    row = conn.execute(
        sa.select(messages).where(
            messages.c.sender_id == sender_id, messages.c.client_id == client_id
        )
    ).first()
    if row is None:
        return None
    return _messages(conn, [row])[0]


def seq_of(conn: Connection, room_id: str, message_id: str) -> int | None:
    return conn.execute(
        sa.select(messages.c.seq).where(
            messages.c.message_id == message_id, messages.c.room_id == room_id
        )
    ).scalar_one_or_none()


def list_messages(
    conn: Connection,
    room_id: str,
    *,
    before: int | None,
    since: int | None,
    limit: int,
    thread_id: str | None = None,
) -> list[Message]:
    """A page of a room's messages, oldest first (with *thread_id*: only the
    replies to that message).

    With *since*: the first *limit* messages after it. Otherwise the last
    *limit* messages (before *before*, if given).
    """
    query = sa.select(messages).where(messages.c.room_id == room_id)
    if thread_id is not None:
        query = query.where(messages.c.thread_id == thread_id)
    if before is not None:
        query = query.where(messages.c.seq < before)
    if since is not None:
        # a cursor: never past a message a slower transaction may still add below
        final = final_seq(conn)
        if final is not None:
            query = query.where(messages.c.seq <= final)
        query = query.where(messages.c.seq > since).order_by(messages.c.seq).limit(limit)
        rows = list(conn.execute(query))
    else:
        if before is None:
            # the newest page ends at a cursor a client takes as its own
            # (to mark read, to resume from): not past a message a slower
            # transaction may still add below it
            final = final_seq(conn)
            if final is not None:
                query = query.where(messages.c.seq <= final)
        query = query.order_by(messages.c.seq.desc()).limit(limit)
        rows = list(conn.execute(query))[::-1]
    return _messages(conn, rows)


def list_threads(
    conn: Connection, room_id: str, *, before: int | None, limit: int
) -> tuple[list[Message], int | None]:
    """A page of a room's threads, the most recently replied to first: their
    roots (with ``thread_replies`` and ``last_reply_at``), and the cursor of
    the page's last newest reply (the next page's *before*; None when this
    page is the last). A thread whose root was deleted is left out.

    With *before*: the threads whose newest reply is before that cursor.
    """
    newest = sa.func.max(messages.c.seq)
    query = (
        sa.select(messages.c.thread_id, newest.label("newest"))
        .where(messages.c.room_id == room_id, messages.c.thread_id.is_not(None))
        .group_by(messages.c.thread_id)
    )
    if before is not None:
        query = query.having(newest < before)
    groups = list(conn.execute(query.order_by(newest.desc()).limit(limit)))
    ids = [group.thread_id for group in groups]
    rows = (
        {
            row.message_id: row
            for row in conn.execute(
                sa.select(messages).where(
                    messages.c.message_id.in_(ids), messages.c.room_id == room_id
                )
            )
        }
        if ids
        else {}
    )
    roots = _messages(conn, [rows[i] for i in ids if i in rows])
    after = int(groups[-1].newest) if len(groups) == limit else None
    return roots, after


def messages_around(
    conn: Connection, room_id: str, seq: int, limit: int, *, thread_id: str | None = None
) -> list[Message]:
    """*limit* messages of a room around cursor *seq*, oldest first: the
    message there (if any) and about as many before it as after it (more
    on one side where the other has too few)."""
    query = sa.select(messages).where(messages.c.room_id == room_id)
    if thread_id is not None:
        query = query.where(messages.c.thread_id == thread_id)
    older = list(
        conn.execute(query.where(messages.c.seq < seq).order_by(messages.c.seq.desc()).limit(limit))
    )
    newer_query = query.where(messages.c.seq >= seq)
    final = final_seq(conn)  # its newest is a cursor a client goes on from
    if final is not None:
        newer_query = newer_query.where(messages.c.seq <= final)
    newer = list(conn.execute(newer_query.order_by(messages.c.seq).limit(limit)))
    before = min(len(older), max((limit - 1) // 2, limit - len(newer)))
    rows = older[:before][::-1] + newer[: limit - before]
    return _messages(conn, rows)


def head_seq(conn: Connection) -> int:
    """The newest cursor on the node (0 when there are no messages): the
    newest message below which none can still commit (``blocks.py``).
    Messages read after this call up to it are all there are."""
    return _head(conn, sa.true())


def newest_seq(conn: Connection) -> int:
    """The newest message's cursor written so far (0 when there are none),
    whether or not a message below it may still commit: not a cursor to hand
    out (:func:`head_seq` is), a limit for one a client brings."""
    newest: int = conn.execute(
        sa.select(sa.func.coalesce(sa.func.max(messages.c.seq), 0))
    ).scalar_one()
    return newest


def room_head_seq(conn: Connection, room_id: str) -> int:
    """The newest cursor in *room_id* (0 when it has no messages), as :func:`head_seq`."""
    return _head(conn, messages.c.room_id == room_id)


def _head(conn: Connection, where: sa.ColumnElement[bool]) -> int:
    final = final_seq(conn)  # first: what is final is then visible to the next statement
    query = sa.select(sa.func.coalesce(sa.func.max(messages.c.seq), 0)).where(where)
    if final is not None:
        query = query.where(messages.c.seq <= final)
    head: int = conn.execute(query).scalar_one()
    return head


def backlog_cutoff(
    conn: Connection, participant_id: str, after: int, keep: int
) -> tuple[int, int] | None:
    """The cursor to skip to so that at most *keep* of the participant's
    messages remain after it, and how many it skips; ``None`` if no more than
    *keep* remain."""
    mine = (
        sa.select(messages.c.seq)
        .join(room_members, room_members.c.room_id == messages.c.room_id)
        .where(room_members.c.participant_id == participant_id, messages.c.seq > after)
    )
    seq: int | None = conn.execute(
        mine.order_by(messages.c.seq.desc()).offset(keep).limit(1)
    ).scalar()
    if seq is None:
        return None
    skipped = conn.execute(
        sa.select(sa.func.count()).select_from(mine.where(messages.c.seq <= seq).subquery())
    ).scalar_one()
    return seq, int(skipped)


def mentions(participant_id: str, name: str) -> sa.ColumnElement[bool]:
    """Whether a message mentions the participant: addressed ``to`` it, or
    containing ``@name`` (case-insensitively). What the ``mentions`` counts,
    mention-only polls and (as SQL text) the search filter ``mentions:me``
    count as a mention."""
    return sa.or_(
        messages.c.to_id == participant_id,
        sa.func.lower(messages.c.content).contains("@" + name.lower(), autoescape=True),
    )


def messages_after(
    conn: Connection,
    participant_id: str,
    after: int | None,
    limit: int,
    *,
    mentions_of: str | None = None,
    readable: tuple[bool, frozenset[str]] | None = None,
    upto: int | None = None,
) -> list[Message]:
    """Messages after cursor *after* in the participant's rooms (DMs included),
    oldest first, none past *upto* (a :func:`head_seq` read before); with
    *after* ``None``, after the participant's read position in each room.
    With *mentions_of* (the participant's name): only messages addressed to
    it, mentioning ``@name``, or in its DMs. With *readable*
    (``(everywhere, exceptions)``, the services' visibility decision): only
    in every room but the exceptions, or in none but them."""
    query = (
        sa.select(messages)
        .join(room_members, room_members.c.room_id == messages.c.room_id)
        .where(room_members.c.participant_id == participant_id)
    )
    if readable is not None:
        everywhere, exceptions = readable
        if everywhere:
            if exceptions:
                query = query.where(messages.c.room_id.not_in(sorted(exceptions)))
        elif exceptions:
            query = query.where(messages.c.room_id.in_(sorted(exceptions)))
        else:
            return []
    if upto is not None:
        query = query.where(messages.c.seq <= upto)
    if after is not None:
        query = query.where(messages.c.seq > after)
    else:
        query = query.outerjoin(
            room_reads,
            sa.and_(
                room_reads.c.room_id == messages.c.room_id,
                room_reads.c.participant_id == participant_id,
            ),
        ).where(messages.c.seq > sa.func.coalesce(room_reads.c.last_read_seq, 0))
    if mentions_of is not None:
        dm_rooms = sa.select(rooms.c.room_id).where(rooms.c.kind == "dm")
        query = query.where(
            sa.or_(mentions(participant_id, mentions_of), messages.c.room_id.in_(dm_rooms))
        )
    rows = list(conn.execute(query.order_by(messages.c.seq).limit(limit)))
    return _messages(conn, rows)


def update_content(conn: Connection, message_id: str, content: str, at: int) -> None:
    """Replace a message's content (and what the search index holds for it)."""
    seq = conn.execute(
        messages.update()
        .where(messages.c.message_id == message_id)
        .values(content=content, edited_at=at)
        .returning(messages.c.seq)
    ).scalar()
    if seq is not None:
        search.reindex(conn, seq, content)


def delete_message(conn: Connection, message_id: str) -> bool:
    # reactions and attachment links go with it (ON DELETE CASCADE); uploads stay
    seq = conn.execute(
        sa.select(messages.c.seq).where(messages.c.message_id == message_id)
    ).scalar()
    if seq is None:
        return False
    search.unindex(conn, seq)
    return conn.execute(messages.delete().where(messages.c.seq == seq)).rowcount > 0


def add_reaction(
    conn: Connection, message_id: str, participant_id: str, emoji: str, at: int
) -> bool:
    """Add a reaction; False if this participant already reacted with this emoji
    (also when another writer adds the same reaction at the same time)."""
    query = insert(conn, reactions).values(
        message_id=message_id, participant_id=participant_id, emoji=emoji, created_at=at
    )
    return insert_new(conn, query)


def remove_reaction(conn: Connection, message_id: str, participant_id: str, emoji: str) -> bool:
    result = conn.execute(
        reactions.delete().where(
            reactions.c.message_id == message_id,
            reactions.c.participant_id == participant_id,
            reactions.c.emoji == emoji,
        )
    )
    return result.rowcount > 0
