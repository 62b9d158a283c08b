"""Repository: mesh connections with other nodes (one row per peer DID)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from .schema import connections

__all__ = [
    "ConnectionRow",
    "PendingFrom",
    "count_pending_inbound",
    "drop_expired_requests",
    "get_by_did",
    "get_connection",
    "list_connections",
    "pending_from",
    "replace_connection",
    "set_status",
]


@dataclass(frozen=True, slots=True)
class ConnectionRow:
    connection_id: str
    peer_did: str
    peer_name: str
    peer_url: str
    direction: str
    status: str
    message: str
    created_at: int
    updated_at: int
    #: the client address an inbound request came from, as per-address limits
    #: count it (an IPv6 address by its /64, ``unknown`` when not known;
    #: ``None``: outbound, or recorded before addresses were)
    request_address: str | None = None


@dataclass(frozen=True, slots=True)
class PendingFrom:
    """The inbound requests pending from one client address."""

    count: int
    #: when the oldest of them was received (epoch ms); ``None`` if none
    oldest: int | None


def _row(r: Row[Any]) -> ConnectionRow:
    return ConnectionRow(
        r.connection_id,
        r.peer_did,
        r.peer_name,
        r.peer_url,
        r.direction,
        r.status,
        r.message,
        r.created_at,
        r.updated_at,
        r.request_address,
    )


def list_connections(conn: Connection) -> list[ConnectionRow]:
    rows = conn.execute(sa.select(connections).order_by(connections.c.connection_id))
    return [_row(r) for r in rows]


def get_connection(conn: Connection, connection_id: str) -> ConnectionRow | None:
    r = conn.execute(
        sa.select(connections).where(connections.c.connection_id == connection_id)
    ).first()
    return None if r is None else _row(r)


def get_by_did(conn: Connection, peer_did: str) -> ConnectionRow | None:
    r = conn.execute(sa.select(connections).where(connections.c.peer_did == peer_did)).first()
    return None if r is None else _row(r)


def _pending_inbound(since: int) -> sa.ColumnElement[bool]:
    """Inbound requests still pending and received at or after *since* (epoch ms)."""
    c = connections.c
    return sa.and_(c.status == "pending", c.direction == "inbound", c.created_at >= since)


def count_pending_inbound(conn: Connection, *, since: int = 0) -> int:
    """Inbound requests pending, received at or after *since* (epoch ms)."""
    query = sa.select(sa.func.count()).where(_pending_inbound(since))
    return int(conn.execute(query).scalar_one())


def pending_from(conn: Connection, address: str, *, since: int) -> PendingFrom:
    """The inbound requests pending from *address* (a ``request_address``
    key), received at or after *since*."""
    c = connections.c
    query = sa.select(sa.func.count(), sa.func.min(c.created_at)).where(
        _pending_inbound(since), c.request_address == address
    )
    count, oldest = conn.execute(query).one()
    return PendingFrom(int(count), None if oldest is None else int(oldest))


def drop_expired_requests(conn: Connection, *, before: int) -> int:
    """Delete the inbound requests still pending that were received before
    *before* (epoch ms): they expired unanswered. How many were deleted."""
    c = connections.c
    query = sa.delete(connections).where(
        c.status == "pending", c.direction == "inbound", c.created_at < before
    )
    return int(conn.execute(query).rowcount)


def replace_connection(conn: Connection, row: ConnectionRow) -> None:
    """Insert *row*, first removing any earlier row for the same peer DID."""
    conn.execute(sa.delete(connections).where(connections.c.peer_did == row.peer_did))
    conn.execute(
        sa.insert(connections).values(
            connection_id=row.connection_id,
            peer_did=row.peer_did,
            peer_name=row.peer_name,
            peer_url=row.peer_url,
            direction=row.direction,
            status=row.status,
            message=row.message,
            created_at=row.created_at,
            updated_at=row.updated_at,
            request_address=row.request_address,
        )
    )


def set_status(conn: Connection, connection_id: str, status: str, now: int) -> None:
    conn.execute(
        sa.update(connections)
        .where(connections.c.connection_id == connection_id)
        .values(status=status, updated_at=now)
    )
