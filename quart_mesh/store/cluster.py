"""The cluster's tables: the event stream every process follows, the processes'
heartbeats, and where participants hold sessions (``docs/decisions/0034-cluster.md``,
``0080-concurrent-writers.md``).

Only used on PostgreSQL, where several processes may share the database.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from . import outbox
from .blocks import final_block
from .schema import cluster_stream

__all__ = [
    "StreamRow",
    "final_rows",
    "head_position",
    "last_block",
    "prune_stream",
    "read_rows",
    "read_stream",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class StreamRow:
    position: int
    origin: str
    entries: list[outbox.Entry]
    #: the row could not be decoded (another version of the node wrote it?)
    unreadable: bool = False


def head_position(conn: Connection) -> int:
    """The block at or below which every block is final (``blocks.py``): a
    process that starts following there misses nothing committed later."""
    return final_block(conn)


def read_stream(conn: Connection, after: int, limit: int) -> list[StreamRow]:
    """Up to *limit* rows after position *after*, oldest first, each with its
    entries (whether or not every block below them is final)."""
    rows = conn.execute(
        sa.select(cluster_stream.c.position, cluster_stream.c.origin, cluster_stream.c.body)
        .where(cluster_stream.c.position > after)
        .order_by(cluster_stream.c.position)
        .limit(limit)
    ).all()
    return [_row(int(row.position), row.origin, row.body) for row in rows]


def final_rows(conn: Connection, after: int, limit: int) -> tuple[list[StreamRow], int]:
    """The rows after *after* up to where every block is final, at most
    *limit* of them, and how far that read is complete: every block after
    *after* up to it that is not among the rows published nothing (or was
    rolled back). The final block is read first, the rows after it, so that
    every final row is visible to the read."""
    final = final_block(conn)
    rows = conn.execute(
        sa.select(cluster_stream.c.position, cluster_stream.c.origin, cluster_stream.c.body)
        .where(cluster_stream.c.position > after, cluster_stream.c.position <= final)
        .order_by(cluster_stream.c.position)
        .limit(limit)
    ).all()
    found = [_row(int(row.position), row.origin, row.body) for row in rows]
    if len(found) == limit:
        final = found[-1].position
    return found, max(final, after)


def read_rows(conn: Connection, positions: list[int]) -> list[StreamRow]:
    """The rows at *positions* (committed ones: their notifications came)."""
    rows = conn.execute(
        sa.select(cluster_stream.c.position, cluster_stream.c.origin, cluster_stream.c.body)
        .where(cluster_stream.c.position.in_(positions))
        .order_by(cluster_stream.c.position)
    ).all()
    return [_row(int(row.position), row.origin, row.body) for row in rows]


def last_block(conn: Connection) -> int:
    """The newest block taken so far (committed or not): a transaction that
    takes one after this call takes a higher one."""
    found = conn.exec_driver_sql(
        "SELECT last_value - CASE WHEN is_called THEN 0 ELSE 1 END FROM mesh_blocks"
    ).scalar_one()
    return int(found)


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
