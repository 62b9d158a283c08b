"""Repository: federation relay — shared rooms, remote participants, the outbox.

The outbox is written by the message services inside the same transaction as
the change it carries (:func:`record`), so a committed change is never lost
to a peer; each connection's link task reads it after the connection's
``relay_cursor`` (``docs/federation.md``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..records import now_ms
from . import connections as connections_repo
from .blocks import final_seq
from .schema import (
    connections,
    participants,
    relay_outbox,
    remote_participants,
    rooms,
    shared_rooms,
)

__all__ = [
    "OutboxItem",
    "RemoteParticipant",
    "Share",
    "add_share",
    "advance_cursor",
    "applied_of",
    "backlog_of",
    "count_remotes",
    "count_shares",
    "cursor_of",
    "drop_shares",
    "find_remote",
    "get_share",
    "insert_remote",
    "is_shared",
    "list_shared_room_ids",
    "mark_applied",
    "outbox_after",
    "outbox_head",
    "participant_ref",
    "prune_outbox",
    "prune_passed",
    "record",
    "remote_of",
    "remove_share",
    "resolve_remote",
    "set_connection_status",
    "share_by_home",
    "shares_of",
    "waiting_for",
]


@dataclass(frozen=True, slots=True)
class Share:
    room_id: str
    connection_id: str
    home_room_id: str
    #: ``out``: this node's room, shared with the peer; ``in``: the peer's room
    direction: str
    created_at: int
    room_name: str = ""


@dataclass(frozen=True, slots=True)
class RemoteParticipant:
    participant_id: str
    #: the connection it was first relayed over
    connection_id: str
    node_did: str
    node_name: str
    remote_id: str
    remote_name: str
    #: the DID of the node that relayed it here, never changed: only that
    #: node speaks as it (each node's introductions are its own)
    introduced_by: str


@dataclass(frozen=True, slots=True)
class OutboxItem:
    seq: int
    room_id: str
    home_room_id: str
    kind: str
    body: dict[str, Any]


# shared rooms ---------------------------------------------------------------


def _share(row: Any) -> Share:
    return Share(
        row.room_id,
        row.connection_id,
        row.home_room_id,
        row.direction,
        row.created_at,
        getattr(row, "name", ""),
    )


def add_share(
    conn: Connection, room_id: str, connection_id: str, home_room_id: str, direction: str
) -> Share:
    """Share a room over a connection: the peer gets the room's changes from now on."""
    created = now_ms()
    # from the final head (blocks.py): a change committed later is above it
    conn.execute(
        shared_rooms.insert().values(
            room_id=room_id,
            connection_id=connection_id,
            home_room_id=home_room_id,
            direction=direction,
            from_seq=outbox_head(conn),
            created_at=created,
        )
    )
    return Share(room_id, connection_id, home_room_id, direction, created)


def remove_share(conn: Connection, room_id: str, connection_id: str) -> bool:
    c = shared_rooms.c
    query = shared_rooms.delete().where(c.room_id == room_id, c.connection_id == connection_id)
    return conn.execute(query).rowcount > 0


def drop_shares(conn: Connection, connection_id: str) -> None:
    """End every share of a connection."""
    conn.execute(shared_rooms.delete().where(shared_rooms.c.connection_id == connection_id))


def set_connection_status(conn: Connection, connection_id: str, status: str, now: int) -> None:
    """Store a connection's new status; only an accepted one shares rooms, so
    any other ends its shares (and its outbox rows are no longer needed)."""
    connections_repo.set_status(conn, connection_id, status, now)
    if status != "accepted":
        drop_shares(conn, connection_id)


def get_share(conn: Connection, room_id: str, connection_id: str) -> Share | None:
    c = shared_rooms.c
    row = conn.execute(
        sa.select(shared_rooms).where(c.room_id == room_id, c.connection_id == connection_id)
    ).first()
    return None if row is None else _share(row)


def share_by_home(conn: Connection, connection_id: str, home_room_id: str) -> Share | None:
    """The share of the room known on its home node as *home_room_id*."""
    c = shared_rooms.c
    row = conn.execute(
        sa.select(shared_rooms).where(
            c.connection_id == connection_id, c.home_room_id == home_room_id
        )
    ).first()
    return None if row is None else _share(row)


def shares_of(conn: Connection) -> list[Share]:
    """Every share, with its local room's name."""
    c = shared_rooms.c
    query = sa.select(shared_rooms, rooms.c.name).join(rooms, rooms.c.room_id == c.room_id)
    return [_share(r) for r in conn.execute(query.order_by(c.created_at, c.room_id))]


def count_shares(conn: Connection, connection_id: str) -> int:
    c = shared_rooms.c
    query = sa.select(sa.func.count()).where(c.connection_id == connection_id)
    return int(conn.execute(query).scalar_one())


def is_shared(conn: Connection, room_id: str) -> bool:
    c = shared_rooms.c
    return (
        conn.execute(sa.select(c.room_id).where(c.room_id == room_id).limit(1)).first() is not None
    )


def list_shared_room_ids(conn: Connection) -> set[str]:
    return {r.room_id for r in conn.execute(sa.select(shared_rooms.c.room_id))}


# remote participants ----------------------------------------------------------


def _remote(row: Any) -> RemoteParticipant:
    return RemoteParticipant(
        row.participant_id,
        row.connection_id,
        row.node_did,
        row.node_name,
        row.remote_id,
        row.remote_name,
        # migration 0026 filled it for every row; its home node otherwise
        row.introduced_by,
    )


def find_remote(
    conn: Connection, introduced_by: str, node_did: str, remote_id: str
) -> RemoteParticipant | None:
    """The participant *remote_id* of the node *node_did* as the node
    *introduced_by* brought it here (each introducer's are its own)."""
    c = remote_participants.c
    row = conn.execute(
        sa.select(remote_participants).where(
            c.introduced_by == introduced_by, c.node_did == node_did, c.remote_id == remote_id
        )
    ).first()
    return None if row is None else _remote(row)


def resolve_remote(
    conn: Connection, node_did: str, remote_id: str, introducers: tuple[str, ...]
) -> RemoteParticipant | None:
    """The participant *remote_id* of the node *node_did* as the first of
    *introducers* (DIDs, in order of preference) that brought it here."""
    c = remote_participants.c
    rows = conn.execute(
        sa.select(remote_participants).where(
            c.node_did == node_did,
            c.remote_id == remote_id,
            c.introduced_by.in_(introducers),
        )
    ).all()
    found = {row.introduced_by: row for row in rows}
    for introducer in introducers:
        if introducer in found:
            return _remote(found[introducer])
    return None


def remote_of(conn: Connection, participant_id: str) -> RemoteParticipant | None:
    c = remote_participants.c
    row = conn.execute(
        sa.select(remote_participants).where(c.participant_id == participant_id)
    ).first()
    return None if row is None else _remote(row)


def count_remotes(conn: Connection, introduced_by: str) -> int:
    """How many remote participants the node *introduced_by* (a DID) brought."""
    c = remote_participants.c
    query = sa.select(sa.func.count()).where(c.introduced_by == introduced_by)
    return int(conn.execute(query).scalar_one())


def insert_remote(conn: Connection, remote: RemoteParticipant) -> None:
    conn.execute(
        remote_participants.insert().values(
            participant_id=remote.participant_id,
            connection_id=remote.connection_id,
            node_did=remote.node_did,
            node_name=remote.node_name,
            remote_id=remote.remote_id,
            remote_name=remote.remote_name,
            introduced_by=remote.introduced_by,
        )
    )


def participant_ref(conn: Connection, participant_id: str) -> dict[str, Any]:
    """How a participant is named to peers.

    A local participant is ``{"id", "name", "kind", "type", "node": None}``
    (the link task fills in this node); a remote one keeps its home node's
    id, name and node.
    """
    c = participants.c
    row = conn.execute(
        sa.select(c.name, c.kind, c.type).where(c.participant_id == participant_id)
    ).first()
    remote = remote_of(conn, participant_id)
    kind, type_ = (row.kind, row.type) if row is not None else ("human", "human")
    if remote is None:
        name = row.name if row is not None else participant_id
        return {"id": participant_id, "name": name, "kind": kind, "type": type_, "node": None}
    node = {"did": remote.node_did, "name": remote.node_name}
    ref = {"id": remote.remote_id, "name": remote.remote_name, "kind": kind, "type": type_}
    return {**ref, "node": node}


# the outbox -------------------------------------------------------------------


def record(
    conn: Connection,
    room_id: str,
    kind: str,
    body: dict[str, Any],
    by: str,
    *,
    via: str | None = None,
    shared: bool | None = None,
) -> None:
    """Queue a change of *room_id* by participant *by* for the peers the room
    is shared with (nothing if it is not shared). *via*: the connection the
    change arrived over (it is not sent back there); *shared*: whether the
    room is shared, if this transaction read it already (``None``: read it).
    Call inside the change's own transaction."""
    if not (is_shared(conn, room_id) if shared is None else shared):
        return
    payload = {**body, "by": participant_ref(conn, by)}
    to = payload.get("to")
    if isinstance(to, str):
        payload["to"] = participant_ref(conn, to)
    # its position is one of the transaction's block, like a message's (blocks.py)
    conn.execute(
        relay_outbox.insert().values(
            room_id=room_id,
            kind=kind,
            body=json.dumps(payload, separators=(",", ":")),
            via_connection=via,
            created_at=now_ms(),
        )
    )


def applied_of(conn: Connection, connection_id: str) -> int:
    """The last of the peer's outbox positions applied here."""
    return _position(conn, connections.c.relay_applied, connection_id)


def mark_applied(conn: Connection, connection_id: str, seq: int) -> None:
    """The peer's event *seq* (and every one before it) is applied here."""
    _advance(conn, connections.c.relay_applied, connection_id, seq)


def _position(conn: Connection, column: sa.Column[Any], connection_id: str) -> int:
    query = sa.select(column).where(connections.c.connection_id == connection_id)
    return int(conn.execute(query).scalar_one_or_none() or 0)


def _advance(conn: Connection, column: sa.Column[Any], connection_id: str, value: int) -> None:
    """Move a connection's position forward to *value* (never back)."""
    conn.execute(
        sa.update(connections)
        .where(connections.c.connection_id == connection_id, column < value)
        .values({column.name: value})
    )


def outbox_head(conn: Connection) -> int:
    """The newest outbox position below which none can still commit
    (``blocks.py``): rows read after this call up to it are all there are."""
    final = final_seq(conn)  # first: what is final is then visible to the next statement
    query = sa.select(sa.func.coalesce(sa.func.max(relay_outbox.c.seq), 0))
    if final is not None:
        query = query.where(relay_outbox.c.seq <= final)
    return int(conn.execute(query).scalar_one())


def _for_peer(query: Any, connection_id: str, cursor: int) -> Any:
    """*query* over the outbox narrowed to what the peer of *connection_id*
    still needs after *cursor*: events of rooms shared over it, recorded
    since they were shared, that did not arrive over it."""
    o, s = relay_outbox.c, shared_rooms.c
    return query.join(
        shared_rooms, sa.and_(s.room_id == o.room_id, s.connection_id == connection_id)
    ).where(
        o.seq > cursor,
        o.seq > s.from_seq,
        sa.or_(o.via_connection.is_(None), o.via_connection != connection_id),
    )


def outbox_after(
    conn: Connection, connection_id: str, cursor: int, limit: int
) -> tuple[list[OutboxItem], int]:
    """Up to *limit* events for the peer of *connection_id* after *cursor*,
    oldest first, and the outbox head.

    The head is read first, and no event past it: no outbox row at or
    below it can commit later (``blocks.py``), so every row up to it is
    visible to the read of the events that follows, even where each
    statement sees what is committed when it starts. A row past it may
    have one below it still to commit, and a link moving its cursor past
    that row would skip the other."""
    head = outbox_head(conn)
    o, s = relay_outbox.c, shared_rooms.c
    query = sa.select(o.seq, o.room_id, o.kind, o.body, s.home_room_id).select_from(relay_outbox)
    query = (
        _for_peer(query, connection_id, cursor).where(o.seq <= head).order_by(o.seq).limit(limit)
    )
    items = [
        OutboxItem(r.seq, r.room_id, r.home_room_id, r.kind, json.loads(r.body))
        for r in conn.execute(query)
    ]
    return items, head


def waiting_for(conn: Connection, connection_id: str) -> int:
    """How many events wait for the peer of *connection_id*."""
    query = sa.select(sa.func.count()).select_from(relay_outbox)
    cursor = cursor_of(conn, connection_id)
    return int(conn.execute(_for_peer(query, connection_id, cursor)).scalar_one())


def cursor_of(conn: Connection, connection_id: str) -> int:
    """The last of this node's outbox positions the peer acknowledged."""
    return _position(conn, connections.c.relay_cursor, connection_id)


def advance_cursor(conn: Connection, connection_id: str, cursor: int) -> None:
    _advance(conn, connections.c.relay_cursor, connection_id, cursor)


def _needed() -> Any:
    """Whether an outbox row still waits for some peer: a share of its room
    over an accepted connection, made before the row was written, whose peer
    has not acknowledged it, and that it did not arrive over (a correlated
    EXISTS, for a WHERE over ``relay_outbox``)."""
    o, s, c = relay_outbox.c, shared_rooms.c, connections.c
    return (
        sa.select(sa.literal(1))
        .select_from(shared_rooms.join(connections, c.connection_id == s.connection_id))
        .where(
            s.room_id == o.room_id,
            c.status == "accepted",
            o.seq > s.from_seq,
            o.seq > c.relay_cursor,
            sa.or_(o.via_connection.is_(None), o.via_connection != s.connection_id),
        )
        .exists()
    )


def prune_passed(conn: Connection, after: int, upto: int) -> int:
    """Delete the outbox rows in (*after*, *upto*] that no peer waits for
    any more; how many. Called when a peer's cursor moves from *after* to
    *upto*: each row is looked at when each of its peers passes it, and the
    last of them deletes it, so a peer that stops acknowledging keeps only
    the rows it still needs, never other peers' (decision 0058)."""
    o = relay_outbox.c
    query = relay_outbox.delete().where(o.seq > after, o.seq <= upto, ~_needed())
    return int(conn.execute(query).rowcount or 0)


def prune_outbox(conn: Connection) -> int:
    """Delete every outbox row no peer waits for; how many. What
    :func:`prune_passed` leaves: rows of shares or connections that ended,
    and rows two peers passed at the same moment (each transaction saw the
    other's cursor before it moved)."""
    return int(conn.execute(relay_outbox.delete().where(~_needed())).rowcount or 0)


def backlog_of(conn: Connection, connection_id: str, limit: int) -> int:
    """How many outbox rows wait for the peer of *connection_id*, counted up
    to *limit* + 1 (enough to tell that a bound is passed, without counting
    a long backlog through)."""
    cursor = cursor_of(conn, connection_id)
    query = _for_peer(
        sa.select(relay_outbox.c.seq).select_from(relay_outbox), connection_id, cursor
    )
    inner = query.limit(limit + 1).subquery()
    return int(conn.execute(sa.select(sa.func.count()).select_from(inner)).scalar_one())
