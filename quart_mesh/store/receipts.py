"""Repository: read receipts in DMs (migration 0031, decision 0071).

A read receipt is a DM member's read position (``room_reads``) shown to the
DM's other members. It is shown only between members who both share theirs
(``participants.read_receipts``, on unless turned off).
"""

from __future__ import annotations

from collections.abc import Collection

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .schema import participants, room_members, room_reads, rooms

__all__ = [
    "dm_positions",
    "dm_room_ids",
    "read_by",
    "receipts_on",
    "set_receipts",
    "sharing_members",
]


def receipts_on(conn: Connection, participant_id: str) -> bool:
    """Whether *participant_id* shares its read receipts (False: unknown)."""
    query = sa.select(participants.c.read_receipts).where(
        participants.c.participant_id == participant_id
    )
    return bool(conn.execute(query).scalar())


def set_receipts(conn: Connection, participant_id: str, on: bool) -> bool:
    """Turn *participant_id*'s read receipts on or off; False if it is gone."""
    result = conn.execute(
        participants.update()
        .where(participants.c.participant_id == participant_id)
        .values(read_receipts=on)
    )
    return result.rowcount > 0


def dm_positions(
    conn: Connection, participant_id: str, room_ids: Collection[str]
) -> dict[str, int]:
    """Of *room_ids*, the DMs, each with *participant_id*'s read position
    there (0: none yet). Ordinary rooms are left out."""
    if not room_ids:
        return {}
    query = (
        sa.select(rooms.c.room_id, room_reads.c.last_read_seq)
        .select_from(rooms)
        .outerjoin(
            room_reads,
            sa.and_(
                room_reads.c.room_id == rooms.c.room_id,
                room_reads.c.participant_id == participant_id,
            ),
        )
        .where(rooms.c.kind == "dm", rooms.c.room_id.in_(list(room_ids)))
    )
    return {row.room_id: int(row.last_read_seq or 0) for row in conn.execute(query)}


def sharing_members(conn: Connection, room_id: str, participant_id: str) -> list[str]:
    """The members of *room_id* but *participant_id* who share their read
    receipts (those who may be told of its position)."""
    query = (
        sa.select(room_members.c.participant_id)
        .join(participants, participants.c.participant_id == room_members.c.participant_id)
        .where(
            room_members.c.room_id == room_id,
            room_members.c.participant_id != participant_id,
            participants.c.read_receipts.is_(True),
        )
        .order_by(room_members.c.participant_id)
    )
    return [row.participant_id for row in conn.execute(query)]


def read_by(
    conn: Connection, room_ids: Collection[str], viewer: str
) -> dict[str, list[tuple[str, int]]]:
    """For each of *room_ids*, the read positions of its members but
    *viewer* who share their receipts and have read something there:
    (participant id, position), ordered by participant id. Whether *viewer*
    may see them is the caller's to decide."""
    if not room_ids:
        return {}
    query = (
        sa.select(room_reads.c.room_id, room_reads.c.participant_id, room_reads.c.last_read_seq)
        .join(participants, participants.c.participant_id == room_reads.c.participant_id)
        .join(
            room_members,
            sa.and_(
                room_members.c.room_id == room_reads.c.room_id,
                room_members.c.participant_id == room_reads.c.participant_id,
            ),
        )
        .where(
            room_reads.c.room_id.in_(list(room_ids)),
            room_reads.c.participant_id != viewer,
            participants.c.read_receipts.is_(True),
        )
        .order_by(room_reads.c.room_id, room_reads.c.participant_id)
    )
    found: dict[str, list[tuple[str, int]]] = {}
    for row in conn.execute(query):
        found.setdefault(row.room_id, []).append((row.participant_id, int(row.last_read_seq)))
    return found


def dm_room_ids(conn: Connection, room_ids: Collection[str]) -> set[str]:
    """Which of *room_ids* are DMs."""
    if not room_ids:
        return set()
    query = sa.select(rooms.c.room_id).where(
        rooms.c.kind == "dm", rooms.c.room_id.in_(list(room_ids))
    )
    return {row.room_id for row in conn.execute(query)}
