"""Repository: mesh connections with other nodes (one row per peer DID)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from .schema import connections

__all__ = [
    "ConnectionRow",
    "count_pending_inbound",
    "get_by_did",
    "get_connection",
    "list_connections",
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


def count_pending_inbound(conn: Connection) -> int:
    c = connections.c
    query = sa.select(sa.func.count()).where(c.status == "pending", c.direction == "inbound")
    return int(conn.execute(query).scalar_one())


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
        )
    )


def set_status(conn: Connection, connection_id: str, status: str, now: int) -> None:
    conn.execute(
        sa.update(connections)
        .where(connections.c.connection_id == connection_id)
        .values(status=status, updated_at=now)
    )
