"""Repository: positions in rooms and read positions (unread counts)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from .blocks import final_seq
from .dialect import Statement, insert
from .messages import mentions
from .schema import messages, positions, room_members, room_reads

__all__ = [
    "Position",
    "advance_reads",
    "list_positions",
    "read_heads",
    "set_position",
    "unread_summary",
]


@dataclass(frozen=True, slots=True)
class Position:
    participant_id: str
    room_id: str
    x: float
    y: float
    z: float

    def to_json(self) -> dict[str, Any]:
        return {"roomId": self.room_id, "x": self.x, "y": self.y, "z": self.z}


def set_position(conn: Connection, position: Position, at: int) -> None:
    values = {
        "room_id": position.room_id,
        "x": position.x,
        "y": position.y,
        "z": position.z,
        "updated_at": at,
    }
    query = insert(conn, positions).values(participant_id=position.participant_id, **values)
    conn.execute(query.on_conflict_do_update(index_elements=["participant_id"], set_=values))


def list_positions(conn: Connection) -> dict[str, Position]:
    rows = conn.execute(sa.select(positions))
    return {
        row.participant_id: Position(row.participant_id, row.room_id, row.x, row.y, row.z)
        for row in rows
    }


def advance_reads(conn: Connection, participant_id: str, reads: dict[str, int]) -> None:
    """Move read positions forward (never back), for rooms the participant is in.

    On PostgreSQL another process may delete the room or the participant
    between the membership check and the write: that row is then skipped
    (in a savepoint of its own) and the others are written. SQLite has one
    writer, so there is no such race there and no savepoint is needed."""
    racy = conn.dialect.name == "postgresql"
    for room_id, seq in reads.items():
        if not racy:
            _advance_read(conn, participant_id, room_id, seq)
            continue
        try:
            with conn.begin_nested():
                _advance_read(conn, participant_id, room_id, seq)
        except IntegrityError:
            continue  # deleted meanwhile: nothing to keep


# written for every live session's deliveries, every flush: one statement,
# on the driver directly (dialect.Statement); nothing for a non-member
_advance_read_sql = Statement(
    "INSERT INTO room_reads (participant_id, room_id, last_read_seq)"
    " SELECT participant_id, room_id, :seq FROM room_members"
    " WHERE room_id = :room_id AND participant_id = :participant_id"
    " ON CONFLICT (participant_id, room_id) DO UPDATE SET last_read_seq ="
    " excluded.last_read_seq WHERE room_reads.last_read_seq < excluded.last_read_seq"
)


def _advance_read(conn: Connection, participant_id: str, room_id: str, seq: int) -> None:
    _advance_read_sql.run(conn, {"participant_id": participant_id, "room_id": room_id, "seq": seq})


def read_heads(conn: Connection, participant_id: str) -> dict[str, tuple[int, int]]:
    """Per room and DM of the participant: (the room's newest message cursor,
    the participant's read position), each 0 when there is none."""
    newest = sa.select(sa.func.coalesce(sa.func.max(messages.c.seq), 0)).where(
        messages.c.room_id == room_members.c.room_id
    )
    final = final_seq(conn)  # first: a head not past a message still to commit below it
    if final is not None:
        newest = newest.where(messages.c.seq <= final)
    head = newest.correlate(room_members).scalar_subquery()
    query = (
        sa.select(
            room_members.c.room_id,
            head.label("head"),
            sa.func.coalesce(room_reads.c.last_read_seq, 0).label("last_read"),
        )
        .select_from(room_members)
        .outerjoin(
            room_reads,
            sa.and_(
                room_reads.c.room_id == room_members.c.room_id,
                room_reads.c.participant_id == participant_id,
            ),
        )
        .where(room_members.c.participant_id == participant_id)
    )
    return {row.room_id: (int(row.head), int(row.last_read)) for row in conn.execute(query)}


def unread_summary(
    conn: Connection, participant_id: str, name: str, *, room_id: str | None = None
) -> dict[str, tuple[int, int, int | None]]:
    """Per room of the participant (or only *room_id*): (unread, mentions,
    last_read_seq).

    Unread messages are others' messages after the read position; mentions
    are those addressed ``to`` the participant or containing ``@name``.
    """
    last_read = sa.func.coalesce(room_reads.c.last_read_seq, 0)
    mention = mentions(participant_id, name)
    query = (
        sa.select(
            room_members.c.room_id,
            room_reads.c.last_read_seq,
            sa.func.count(messages.c.seq).label("unread"),
            sa.func.count(sa.case((mention, messages.c.seq))).label("mentions"),
        )
        .select_from(room_members)
        .outerjoin(
            room_reads,
            sa.and_(
                room_reads.c.room_id == room_members.c.room_id,
                room_reads.c.participant_id == participant_id,
            ),
        )
        .outerjoin(
            messages,
            sa.and_(
                messages.c.room_id == room_members.c.room_id,
                messages.c.seq > last_read,
                messages.c.sender_id != participant_id,
            ),
        )
        .where(room_members.c.participant_id == participant_id)
        .group_by(room_members.c.room_id, room_reads.c.last_read_seq)
    )
    if room_id is not None:
        query = query.where(room_members.c.room_id == room_id)
    return {
        row.room_id: (row.unread, row.mentions, row.last_read_seq) for row in conn.execute(query)
    }
