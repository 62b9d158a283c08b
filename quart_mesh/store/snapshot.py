"""Repository: lean reads for the snapshot's mesh-wide parts (``services/world.py``).

The snapshot lists every participant and every room to every session that
opens. The world keeps those parts rendered in memory and, on each
snapshot, checks them against the store with :func:`fingerprint` (one row
of aggregates, computed by the database); only when that changes does it
read the rows again (:func:`participant_rows`, as plain tuples) and render
the ones that differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..records import Room
from .blocks import final_seq
from .dialect import Statement
from .rooms import memberships, room_from_row

__all__ = ["ActorParts", "ParticipantRow", "actor_parts", "fingerprint", "participant_rows"]

#: (participant_id, name, type, role, last_seen_at, created_at, origin_did, display_name)
ParticipantRow = tuple[str, str, str, str, int | None, int, str | None, str | None]

# every column of participants the snapshot shows can change only by an
# insert, a delete, a new role, a new display name or a new lastSeen (names
# are fixed): the aggregates below change with each of those. Rooms change
# by insert, delete or a new description (its revision); member counts and
# positions by the events that change them
_SQLITE = Statement(
    "SELECT (SELECT count(*) FROM participants),"
    " (SELECT max(rowid) FROM participants),"
    " (SELECT total(last_seen_at) FROM participants),"
    " (SELECT group_concat(role, ',') FROM participants),"
    " (SELECT group_concat(coalesce(display_name, ''), char(31)) FROM participants),"
    " (SELECT count(*) FROM rooms), (SELECT max(room_id) FROM rooms),"
    " (SELECT total(revision) FROM rooms),"
    " (SELECT count(*) FROM positions), (SELECT max(updated_at) FROM positions),"
    " (SELECT coalesce(max(seq), 0) FROM messages)"
)
# on PostgreSQL a row's xmin is the transaction that wrote it: an insert or
# an update raises the sum, a delete lowers the count
_POSTGRESQL = Statement(
    "SELECT (SELECT count(*) FROM participants),"
    " (SELECT coalesce(sum(xmin::text::bigint), 0) FROM participants),"
    " (SELECT count(*) FROM rooms),"
    " (SELECT coalesce(sum(xmin::text::bigint), 0) FROM rooms),"
    " (SELECT count(*) FROM positions),"
    " (SELECT coalesce(sum(xmin::text::bigint), 0) FROM positions),"
    " (SELECT coalesce(max(seq), 0) FROM messages)"
)

_PARTICIPANTS = sa.text(
    "SELECT participant_id, name, type, role, last_seen_at, created_at, origin_did,"
    " display_name FROM participants ORDER BY name_key"
)


def fingerprint(conn: Connection) -> tuple[tuple[Any, ...], int]:
    """A value that changes whenever a participant, a room or a position is
    added or removed, or a participant's role, display name or ``lastSeen``
    changes; and
    the node's newest message cursor (0 without messages), read with it."""
    query = _POSTGRESQL if conn.dialect.name == "postgresql" else _SQLITE
    final = final_seq(conn)  # a cursor handed out: not past one still to commit
    row = tuple(query.run(conn, {}).fetchone())
    cursor = int(row[-1]) if final is None else min(int(row[-1]), final)
    return row[:-1], cursor


def participant_rows(conn: Connection) -> list[ParticipantRow]:
    """Every participant as a plain tuple (:data:`ParticipantRow`), ordered by
    name (case-insensitive), as ``accounts.list_participants`` orders them."""
    return [tuple(row) for row in conn.execute(_PARTICIPANTS)]


# what each snapshot reads for its actor, written once as SQL (the same
# query as rooms.list_dms; its memberships: rooms.memberships)
_DMS = sa.text(
    "SELECT rooms.room_id, rooms.kind, rooms.name, rooms.description, rooms.created_by,"
    " rooms.created_at, rooms.origin_did,"
    " (SELECT count(*) FROM room_members AS m WHERE m.room_id = rooms.room_id) AS member_count,"
    " other.participant_id AS other_id"
    " FROM room_members AS me"
    " JOIN rooms ON rooms.room_id = me.room_id"
    " JOIN room_members AS other"
    " ON other.room_id = rooms.room_id AND other.participant_id != :me"
    " JOIN participants ON participants.participant_id = other.participant_id"
    " WHERE me.participant_id = :me AND rooms.kind = 'dm' AND NOT me.hidden"
    " ORDER BY coalesce((SELECT max(messages.created_at) FROM messages"
    " WHERE messages.room_id = rooms.room_id), rooms.created_at) DESC, rooms.room_id"
)


@dataclass(frozen=True, slots=True)
class ActorParts:
    """What a snapshot shows of one participant's own."""

    #: the rooms and DMs it is a member of
    member_of: set[str]
    #: those of them it muted
    muted: set[str]
    #: its DMs that are not hidden, most recently active first, with the
    #: other's id (None for a group DM: it is named by its ``name``)
    dms: list[tuple[Room, str | None]]


def actor_parts(
    conn: Connection, participant_id: str, ordinary: frozenset[str] | None = None
) -> ActorParts:
    """The actor's memberships and its visible DMs. *ordinary*: ids of
    ordinary rooms, if known; an actor in none but those has no DM, and the
    DMs are not looked for."""
    mine = memberships(conn, participant_id)
    member_of = set(mine)
    muted = {room_id for room_id, on in mine.items() if on}
    if ordinary is not None and member_of <= ordinary:
        return ActorParts(member_of, muted, [])
    dms: dict[str, tuple[Room, str | None]] = {}
    for row in conn.execute(_DMS, {"me": participant_id}):  # a row per other member
        if row.room_id not in dms:
            room = room_from_row(row)
            dms[row.room_id] = (room, row.other_id if room.member_count <= 2 else None)
    return ActorParts(member_of, muted, list(dms.values()))
