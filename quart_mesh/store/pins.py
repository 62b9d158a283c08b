"""Repository: pinned messages (migration 0030, decision 0069)."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .dialect import hold_write_lock, insert, insert_new
from .schema import pins

__all__ = ["Pin", "count_pins", "list_pins", "pin", "unpin"]


@dataclass(frozen=True, slots=True)
class Pin:
    message_id: str
    room_id: str
    pinned_by: str
    #: unix milliseconds
    pinned_at: int


def pin(conn: Connection, found: Pin, *, cap: int) -> bool | None:
    """Pin a message, unless its room has *cap* pins already.

    Returns True if pinned now, False if it was pinned already (even in a
    full room: pinning is idempotent), None if the room is full (nothing
    written). On PostgreSQL the room's pins are counted under the mesh's
    write lock (:func:`.dialect.hold_write_lock`, which the pin's batch
    takes first anyway), so pins added by several processes at once are counted one
    after another and never overshoot *cap*: without it each transaction
    saw only its own new pin and the committed ones.
    """
    hold_write_lock(conn)
    if count_pins(conn, found.room_id) >= cap:
        there = sa.select(pins.c.message_id).where(pins.c.message_id == found.message_id)
        return False if conn.execute(there).first() is not None else None
    query = insert(conn, pins).values(
        message_id=found.message_id,
        room_id=found.room_id,
        pinned_by=found.pinned_by,
        pinned_at=found.pinned_at,
    )
    return insert_new(conn, query)


def unpin(conn: Connection, message_id: str) -> bool:
    """Unpin a message; False if it was not pinned."""
    return conn.execute(pins.delete().where(pins.c.message_id == message_id)).rowcount > 0


def count_pins(conn: Connection, room_id: str) -> int:
    query = sa.select(sa.func.count()).select_from(pins).where(pins.c.room_id == room_id)
    return int(conn.execute(query).scalar_one())


def list_pins(conn: Connection, room_id: str) -> list[Pin]:
    """A room's pins, the most recently pinned first."""
    query = (
        sa.select(pins)
        .where(pins.c.room_id == room_id)
        .order_by(pins.c.pinned_at.desc(), pins.c.message_id.desc())
    )
    return [
        Pin(row.message_id, row.room_id, row.pinned_by, int(row.pinned_at))
        for row in conn.execute(query)
    ]
