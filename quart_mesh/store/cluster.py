"""The cluster's tables: the event stream every process reads, the processes'
heartbeats, and where participants hold sessions (``docs/decisions/0034-cluster.md``).

Only used on PostgreSQL, where several processes may share the database.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..events import MessagePosted
from . import outbox
from .messages import get_messages
from .schema import cluster_stream

__all__ = ["StreamRow", "head_position", "prune_stream", "read_stream"]


@dataclass(frozen=True, slots=True)
class StreamRow:
    position: int
    origin: str
    entries: list[outbox.Entry]


def head_position(conn: Connection) -> int:
    """The newest position written so far (0 for none)."""
    found = conn.execute(sa.select(sa.func.max(cluster_stream.c.position))).scalar_one()
    return int(found or 0)


def read_stream(conn: Connection, after: int, limit: int) -> list[StreamRow]:
    """Up to *limit* rows after position *after*, oldest first, each with its
    entries; a posted message is read from the store as it is now (one
    deleted since is left out: its deletion follows in the stream)."""
    rows = conn.execute(
        sa.select(cluster_stream.c.position, cluster_stream.c.origin, cluster_stream.c.body)
        .where(cluster_stream.c.position > after)
        .order_by(cluster_stream.c.position)
        .limit(limit)
    ).all()
    decoded = [(row.position, row.origin, outbox.decode(row.body)) for row in rows]
    wanted = [
        e.message_id for _, _, found in decoded for e in found if isinstance(e, outbox.Pending)
    ]
    stored = get_messages(conn, wanted)
    out: list[StreamRow] = []
    for position, origin, found in decoded:
        entries: list[outbox.Entry] = []
        for entry in found:
            if not isinstance(entry, outbox.Pending):
                entries.append(entry)
            elif (message := stored.get(entry.message_id)) is not None:
                event = MessagePosted(message.room_id, message=message)
                if entry.participant_id is None:
                    entries.append(outbox.Publish(event))
                else:
                    entries.append(outbox.SendTo(entry.participant_id, event))
        out.append(StreamRow(int(position), origin, entries))
    return out


def prune_stream(conn: Connection, before: int) -> int:
    """Delete rows written before *before* (unix ms); how many went."""
    result = conn.execute(sa.delete(cluster_stream).where(cluster_stream.c.created_at < before))
    return int(result.rowcount or 0)
