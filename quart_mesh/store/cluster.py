"""The cluster's tables: the event stream every process reads, the processes'
heartbeats, and where participants hold sessions (``docs/decisions/0034-cluster.md``).

Only used on PostgreSQL, where several processes may share the database.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import outbox
from .schema import cluster_stream

__all__ = ["StreamRow", "head_position", "prune_stream", "read_stream"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StreamRow:
    position: int
    origin: str
    entries: list[outbox.Entry]
    #: the row could not be decoded (another version of the node wrote it?)
    unreadable: bool = False


def head_position(conn: Connection) -> int:
    """The newest position written so far (0 for none)."""
    found = conn.execute(sa.select(sa.func.max(cluster_stream.c.position))).scalar_one()
    return int(found or 0)


def read_stream(conn: Connection, after: int, limit: int) -> list[StreamRow]:
    """Up to *limit* rows after position *after*, oldest first, each with its entries."""
    rows = conn.execute(
        sa.select(cluster_stream.c.position, cluster_stream.c.origin, cluster_stream.c.body)
        .where(cluster_stream.c.position > after)
        .order_by(cluster_stream.c.position)
        .limit(limit)
    ).all()
    return [_row(int(row.position), row.origin, row.body) for row in rows]


def _row(position: int, origin: str, body: str) -> StreamRow:
    try:
        return StreamRow(position, origin, outbox.decode(body))
    except (ValueError, KeyError, TypeError, AttributeError):
        log.exception("stream row %d from %s is not readable", position, origin)
        return StreamRow(position, origin, [], unreadable=True)


def prune_stream(conn: Connection, before: int) -> int:
    """Delete rows written before *before* (unix ms); how many went."""
    result = conn.execute(sa.delete(cluster_stream).where(cluster_stream.c.created_at < before))
    return int(result.rowcount or 0)
