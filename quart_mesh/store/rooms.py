"""Repository: rooms, DM rooms and memberships."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..names import name_skeletons, normalize
from ..records import Participant, Room
from . import search
from .accounts import participant_from_row
from .dialect import Statement, insert, insert_new
from .schema import messages, participants, room_members, rooms

__all__ = [
    "add_member",
    "all_memberships",
    "count_created",
    "delete_room",
    "dm_key",
    "get_dm_by_key",
    "get_room",
    "group_key",
    "insert_room",
    "is_member",
    "kind_and_membership",
    "list_dms",
    "list_members",
    "list_rooms",
    "member_room_ids",
    "memberships",
    "page_rooms",
    "remove_member",
    "room_from_row",
    "room_name_conflict",
    "set_description",
    "set_hidden",
    "set_muted",
    "unhide_all",
]

_member_count = (
    sa.select(sa.func.count())
    .where(room_members.c.room_id == rooms.c.room_id)
    .correlate(rooms)
    .scalar_subquery()
    .label("member_count")
)


def room_from_row(row: Any) -> Room:
    return Room(
        room_id=row.room_id,
        kind=row.kind,
        name=row.name,
        description=row.description,
        created_by=row.created_by,
        created_at=row.created_at,
        member_count=row.member_count,
        origin=row.origin_did,
    )


def dm_key(a: str, b: str) -> str:
    return ":".join(sorted((a, b)))


def group_key(members: Iterable[str]) -> str:
    """The key of the one group DM of a set of participants (decision 0070):
    the SHA-256 of their sorted ids, 64 hex digits (a pair's key has a colon)."""
    return hashlib.sha256(",".join(sorted(set(members))).encode()).hexdigest()


def insert_room(
    conn: Connection,
    room: Room,
    *,
    dm_pair: tuple[str, str] | None = None,
    dm_group: Iterable[str] | None = None,
) -> None:
    """Insert a room. Raises ``IntegrityError`` if the name (or DM pair, or
    group DM's set of members) is taken, or the name looks like one that is
    (its skeleton is taken)."""
    written, folded = (None, None) if room.kind == "dm" else name_skeletons(room.name)
    conn.execute(
        rooms.insert().values(
            room_id=room.room_id,
            kind=room.kind,
            name=room.name,
            name_key=None if room.kind == "dm" else room.name.casefold(),
            name_skeleton=written,
            folded_skeleton=folded,
            dm_key=(
                dm_key(*dm_pair)
                if dm_pair is not None
                else None
                if dm_group is None
                else group_key(dm_group)
            ),
            description=room.description,
            created_by=room.created_by,
            created_at=room.created_at,
            origin_did=room.origin,
        )
    )


def room_id_named(conn: Connection, name: str) -> str | None:
    """The id of the room (not a DM) named *name*, case-insensitively."""
    room_id: str | None = conn.execute(
        sa.select(rooms.c.room_id).where(
            rooms.c.name_key == normalize(name).casefold(), rooms.c.kind == "room"
        )
    ).scalar()
    return room_id


def room_labels(conn: Connection, room_ids: Sequence[str], participant_id: str) -> dict[str, str]:
    """Each room's name as *participant_id* sees it: a DM by its other party's
    name (its own, in a DM with itself); a group DM by its name (its
    members' names)."""
    labels = {
        row.room_id: row.name
        for row in conn.execute(
            sa.select(rooms.c.room_id, rooms.c.name).where(
                rooms.c.room_id.in_(room_ids), (rooms.c.kind == "room") | (rooms.c.name != "dm")
            )
        )
    }
    dms = [room_id for room_id in room_ids if room_id not in labels]
    if dms:
        rows = conn.execute(
            sa.select(room_members.c.room_id, participants.c.participant_id, participants.c.name)
            .join(participants, participants.c.participant_id == room_members.c.participant_id)
            .where(room_members.c.room_id.in_(dms))
        )
        for row in rows:
            if row.participant_id != participant_id or row.room_id not in labels:
                labels[row.room_id] = row.name
    return labels


def room_name_conflict(conn: Connection, name: str) -> tuple[str, str] | None:
    """Why *name* cannot be a new room's: ``("room_name_taken", name)`` (the
    same name, case-insensitively) or ``("name_confusable", other)`` (*other*
    looks the same: a skeleton of it is *name*'s); None if it can."""
    query = sa.select(rooms.c.name).where(rooms.c.name_key == name.casefold())
    same = conn.execute(query).first()
    if same is not None:
        return "room_name_taken", same.name
    written, folded = name_skeletons(name)
    like = conn.execute(
        sa.select(rooms.c.name).where(
            (rooms.c.name_skeleton == written) | (rooms.c.folded_skeleton == folded)
        )
    ).first()
    return None if like is None else ("name_confusable", like.name)


def get_room(conn: Connection, room_id: str) -> Room | None:
    row = conn.execute(sa.select(rooms, _member_count).where(rooms.c.room_id == room_id)).first()
    return None if row is None else room_from_row(row)


def get_dm_by_key(conn: Connection, key: str) -> Room | None:
    row = conn.execute(sa.select(rooms, _member_count).where(rooms.c.dm_key == key)).first()
    return None if row is None else room_from_row(row)


def set_description(conn: Connection, room_id: str, description: str) -> None:
    """Set a room's description, bumping its revision (the snapshot's cache)."""
    conn.execute(
        rooms.update()
        .where(rooms.c.room_id == room_id)
        .values(description=description, revision=rooms.c.revision + 1)
    )


def list_rooms(conn: Connection) -> Sequence[Room]:
    rows = conn.execute(
        sa.select(rooms, _member_count).where(rooms.c.kind == "room").order_by(rooms.c.name_key)
    )
    return [room_from_row(row) for row in rows]


def page_rooms(conn: Connection, after_key: str | None, limit: int) -> list[tuple[str, Room]]:
    """Up to *limit* ordinary rooms ordered by name (case-insensitive), after
    the one whose name key is *after_key*; each with its name key (the cursor
    of the next page). Rooms made or deleted meanwhile do not shift the pages."""
    query = sa.select(rooms, _member_count).where(rooms.c.kind == "room")
    if after_key is not None:
        query = query.where(rooms.c.name_key > after_key)
    rows = conn.execute(query.order_by(rooms.c.name_key).limit(limit))
    return [(row.name_key, room_from_row(row)) for row in rows]


def count_created(conn: Connection, participant_id: str) -> int:
    """Ordinary rooms *participant_id* created that still exist."""
    query = (
        sa.select(sa.func.count())
        .select_from(rooms)
        .where(rooms.c.created_by == participant_id, rooms.c.kind == "room")
    )
    return int(conn.execute(query).scalar_one())


def member_room_ids(conn: Connection, participant_id: str) -> set[str]:
    rows = conn.execute(
        sa.select(room_members.c.room_id).where(room_members.c.participant_id == participant_id)
    )
    return {row.room_id for row in rows}


# what the snapshot reads of its actor on every session that opens (on the
# driver: see dialect.Statement); NULL (memberships before mutes) is unmuted
_MEMBERSHIPS = Statement(
    "SELECT room_id, coalesce(muted, false) FROM room_members WHERE participant_id = :me"
)
_MEMBERSHIP = Statement(
    "SELECT room_id, coalesce(muted, false) FROM room_members"
    " WHERE participant_id = :me AND room_id = :room_id"
)


def memberships(
    conn: Connection, participant_id: str, room_id: str | None = None
) -> dict[str, bool]:
    """The rooms and DMs *participant_id* is in (or only *room_id*, if it is
    in it), each with whether it muted it: the one place the node reads
    ``room_members.muted`` for what it shows a participant of itself."""
    if room_id is None:
        rows = _MEMBERSHIPS.run(conn, {"me": participant_id})
    else:
        rows = _MEMBERSHIP.run(conn, {"me": participant_id, "room_id": room_id})
    return {row[0]: bool(row[1]) for row in rows}


def set_muted(conn: Connection, room_id: str, participant_id: str, muted: bool) -> bool:
    """Mute or unmute *room_id* for its member *participant_id*; False if
    that changed nothing (already so, or not a member)."""
    result = conn.execute(
        room_members.update()
        .where(
            room_members.c.room_id == room_id,
            room_members.c.participant_id == participant_id,
            sa.func.coalesce(room_members.c.muted, sa.false()) != muted,
        )
        .values(muted=muted)
    )
    return result.rowcount > 0


def delete_room(conn: Connection, room_id: str) -> bool:
    """Delete a room; its messages (and all that refers to them) go with it."""
    search.unindex_room(conn, room_id)
    # its members first, then the room: the order a send takes them in (its
    # membership, then the room its message refers to), so that a send in
    # flight and the deletion wait for each other instead of deadlocking
    conn.execute(room_members.delete().where(room_members.c.room_id == room_id))
    return conn.execute(rooms.delete().where(rooms.c.room_id == room_id)).rowcount > 0


def kind_and_membership(
    conn: Connection, room_id: str, participant_id: str
) -> tuple[str, bool] | None:
    """(room kind, whether *participant_id* is a member), or None for no such room:
    the check every message send makes, in one query."""
    params = {"room_id": room_id, "participant_id": participant_id}
    row = conn.execute(_kind_and_membership, params).first()
    if row is None:
        return None
    member = row.participant_id is not None
    if member and conn.dialect.name == "postgresql":
        # kept until the send commits: sends commit concurrently with a
        # removal there (decision 0080); one committed meanwhile wins
        member = conn.execute(_hold_membership, params).first() is not None
    return row.kind, member


# on every send: written once as SQL (see messages.insert_message)
_kind_and_membership = sa.text(
    "SELECT rooms.kind, room_members.participant_id FROM rooms"
    " LEFT OUTER JOIN room_members ON room_members.room_id = rooms.room_id"
    " AND room_members.participant_id = :participant_id WHERE rooms.room_id = :room_id"
)
_hold_membership = sa.text(
    "SELECT 1 FROM room_members WHERE room_id = :room_id AND participant_id = :participant_id"
    " FOR KEY SHARE"
)


def is_member(conn: Connection, room_id: str, participant_id: str) -> bool:
    query = sa.select(room_members.c.room_id).where(
        room_members.c.room_id == room_id, room_members.c.participant_id == participant_id
    )
    return conn.execute(query).first() is not None


def add_member(conn: Connection, room_id: str, participant_id: str, at: int) -> bool:
    """Add a member; False if already one (also when another writer adds it at
    the same time)."""
    query = insert(conn, room_members).values(
        room_id=room_id, participant_id=participant_id, joined_at=at, hidden=False
    )
    return insert_new(conn, query)


def remove_member(conn: Connection, room_id: str, participant_id: str) -> bool:
    result = conn.execute(
        room_members.delete().where(
            room_members.c.room_id == room_id, room_members.c.participant_id == participant_id
        )
    )
    return result.rowcount > 0


def list_members(conn: Connection, room_id: str) -> Sequence[Participant]:
    rows = conn.execute(
        sa.select(participants)
        .join(room_members, room_members.c.participant_id == participants.c.participant_id)
        .where(room_members.c.room_id == room_id)
        .order_by(room_members.c.joined_at, participants.c.participant_id)
    )
    return [participant_from_row(row) for row in rows]


def set_hidden(conn: Connection, room_id: str, participant_id: str, hidden: bool) -> bool:
    result = conn.execute(
        room_members.update()
        .where(room_members.c.room_id == room_id, room_members.c.participant_id == participant_id)
        .values(hidden=hidden)
    )
    return result.rowcount > 0


def unhide_all(conn: Connection, room_id: str) -> None:
    conn.execute(
        room_members.update()
        .where(room_members.c.room_id == room_id, room_members.c.hidden.is_(True))
        .values(hidden=False)
    )


def list_dms(
    conn: Connection, participant_id: str
) -> Sequence[tuple[Room, list[Participant], int | None]]:
    """The caller's visible DMs, most recent first: (room, the other
    members in join order, last message ms); one with no other member left
    is left out."""
    me = room_members.alias("me")
    other = room_members.alias("other")
    last_at = (
        sa.select(sa.func.max(messages.c.created_at))
        .where(messages.c.room_id == rooms.c.room_id)
        .correlate(rooms)
        .scalar_subquery()
        .label("last_message_at")
    )
    query = (
        sa.select(rooms, _member_count, last_at, other.c.participant_id.label("other_id"))
        .select_from(rooms)
        .join(me, sa.and_(me.c.room_id == rooms.c.room_id, me.c.participant_id == participant_id))
        .join(
            other,
            sa.and_(other.c.room_id == rooms.c.room_id, other.c.participant_id != participant_id),
        )
        .where(rooms.c.kind == "dm", me.c.hidden.is_(False))
        .order_by(
            sa.desc(sa.func.coalesce(last_at, rooms.c.created_at)),
            rooms.c.room_id,
            other.c.joined_at,
            other.c.participant_id,
        )
    )
    rows = list(conn.execute(query))
    others = {
        p.participant_id: p
        for p in map(
            participant_from_row,
            conn.execute(
                sa.select(participants).where(
                    participants.c.participant_id.in_([row.other_id for row in rows])
                )
            ),
        )
    }
    found: dict[str, tuple[Room, list[Participant], int | None]] = {}
    for row in rows:
        if row.other_id not in others:
            continue
        if row.room_id not in found:
            found[row.room_id] = (room_from_row(row), [], row.last_message_at)
        found[row.room_id][1].append(others[row.other_id])
    return list(found.values())


def all_memberships(conn: Connection) -> list[tuple[str, str]]:
    """Every (room_id, participant_id) pair: the broker's routing mirror."""
    rows = conn.execute(sa.select(room_members.c.room_id, room_members.c.participant_id))
    return [(row.room_id, row.participant_id) for row in rows]
