"""Presence across processes: which process holds sessions for whom, and
which processes are alive (``docs/decisions/0038-presence-across-processes.md``).

Only used on PostgreSQL, where several processes may serve one mesh. A
participant is online while any process has a row for it in
``presence_sessions``; every change of that "any" is decided in the unit
that makes it, under the mesh's write lock (:func:`.dialect.hold_write_lock`,
which its batch takes first anyway: it is not a quick unit), and recorded
with the ``presence`` event (:func:`.outbox.emit`). So two processes
claiming or releasing one participant at once are serialized, exactly one
event is written per transition, and every process receives it in stream
order.

A process's rows live as long as its heartbeat (``cluster_processes``): the
first live process (smallest id) deletes the rows of processes whose beat is
older than the timeout and announces offline whoever has none left.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..events import Presence as PresenceEvent
from . import outbox
from .accounts import set_last_seen
from .dialect import hold_write_lock, in_statements, insert, insert_new
from .schema import cluster_processes, presence_sessions

__all__ = ["beat", "claim", "leave", "online_participants", "reap", "release"]


def _with_rows(conn: Connection, participant_ids: Collection[str]) -> set[str]:
    """Those of *participant_ids* some process has a row for."""
    found: set[str] = set()
    for run in in_statements(sorted(participant_ids)):
        found.update(
            conn.execute(
                sa.select(presence_sessions.c.participant_id)
                .where(presence_sessions.c.participant_id.in_(run))
                .distinct()
            ).scalars()
        )
    return found


def _went_online(conn: Connection, participant_id: str, at: int) -> None:
    outbox.emit(conn, PresenceEvent(None, participant_id=participant_id, online=True, last_seen=at))


def _went_offline(conn: Connection, participant_ids: Collection[str], at: int) -> None:
    set_last_seen(conn, dict.fromkeys(participant_ids, at))
    for participant_id in sorted(participant_ids):
        outbox.emit(
            conn, PresenceEvent(None, participant_id=participant_id, online=False, last_seen=at)
        )


def claim(conn: Connection, process_id: str, sessions: Mapping[str, int], at: int) -> list[str]:
    """Record that *process_id* holds ``sessions[p]`` sessions for each
    participant *p*; returns those no process held any for (a ``presence``
    online event recorded for each)."""
    if not sessions:
        return []
    hold_write_lock(conn)
    rows = sorted(sessions.items())
    before: set[str] = set()
    for chunk in in_statements(rows):  # (a process may hold many)
        before |= _with_rows(conn, [p for p, _ in chunk])
        query = insert(conn, presence_sessions).values(
            [{"process_id": process_id, "participant_id": p, "sessions": n} for p, n in chunk]
        )
        conn.execute(
            query.on_conflict_do_update(
                index_elements=["process_id", "participant_id"],
                set_={"sessions": query.excluded.sessions},
            )
        )
    online = [p for p, _ in rows if p not in before]
    for participant_id in online:
        _went_online(conn, participant_id, at)
    return online


def release(
    conn: Connection, process_id: str, participant_ids: Collection[str], at: int
) -> list[str]:
    """*process_id* holds no session for *participant_ids* any more; returns
    those no process holds one for now (``lastSeen`` written and a
    ``presence`` offline event recorded for each). Participants it had no
    row for are passed over."""
    if not participant_ids:
        return []
    hold_write_lock(conn)
    deleted = {
        row.participant_id
        for row in conn.execute(
            presence_sessions.delete()
            .where(
                presence_sessions.c.process_id == process_id,
                presence_sessions.c.participant_id.in_(sorted(participant_ids)),
            )
            .returning(presence_sessions.c.participant_id)
        )
    }
    if not deleted:
        return []
    offline = sorted(deleted - _with_rows(conn, deleted))
    if offline:
        _went_offline(conn, offline, at)
    return offline


def beat(
    conn: Connection,
    process_id: str,
    *,
    host: str,
    pid: int,
    started_at: int,
    at: int,
    held: Collection[str],
) -> list[str]:
    """This process is alive at *at*. If its row was not there (its first beat,
    or it was taken for dead and reaped), *held* — the participants it holds
    sessions for — are claimed again; returns those that came online."""
    added = insert_new(
        conn,
        insert(conn, cluster_processes).values(
            process_id=process_id, host=host, pid=pid, started_at=started_at, beat_at=at
        ),
    )
    if not added:
        conn.execute(
            cluster_processes.update()
            .where(cluster_processes.c.process_id == process_id)
            .values(beat_at=at)
        )
        return []
    return claim(conn, process_id, dict.fromkeys(held, 1), at)


def _drop(conn: Connection, process_ids: Collection[str], at: int, orphans: bool) -> list[str]:
    """Delete *process_ids* (and, with *orphans*, rows of no known process)
    with their rows; announce offline whoever has no row left."""
    hold_write_lock(conn)
    gone_rows: sa.ColumnElement[bool] = presence_sessions.c.process_id.in_(list(process_ids))
    if orphans:
        gone_rows = sa.or_(
            gone_rows,
            presence_sessions.c.process_id.not_in(sa.select(cluster_processes.c.process_id)),
        )
    gone = {
        row.participant_id
        for row in conn.execute(
            presence_sessions.delete()
            .where(gone_rows)
            .returning(presence_sessions.c.participant_id)
        )
    }
    conn.execute(cluster_processes.delete().where(cluster_processes.c.process_id.in_(process_ids)))
    if not gone:
        return []
    offline = sorted(gone - _with_rows(conn, gone))
    if offline:
        _went_offline(conn, offline, at)
    return offline


def reap(conn: Connection, process_id: str, *, at: int, timeout_ms: int) -> list[str]:
    """If *process_id* is the first live process (smallest id among those that
    beat within *timeout_ms*), delete the processes that did not, with their
    rows, and announce offline whoever has no row left; returns those."""
    live_since = at - timeout_ms
    first = conn.execute(
        sa.select(sa.func.min(cluster_processes.c.process_id)).where(
            cluster_processes.c.beat_at >= live_since
        )
    ).scalar_one()
    if first != process_id:
        return []
    dead = conn.execute(
        sa.select(cluster_processes.c.process_id).where(cluster_processes.c.beat_at < live_since)
    ).scalars()
    dead_ids = list(dead)
    orphaned = conn.execute(
        sa.select(presence_sessions.c.process_id)
        .where(presence_sessions.c.process_id.not_in(sa.select(cluster_processes.c.process_id)))
        .limit(1)
    ).first()
    if not dead_ids and orphaned is None:
        return []  # the common case: no lock, nothing written
    return _drop(conn, dead_ids, at, orphans=True)


def leave(conn: Connection, process_id: str, at: int) -> list[str]:
    """This process stops: delete its row and its sessions' rows; returns the
    participants announced offline (held by no other process)."""
    return _drop(conn, [process_id], at, orphans=False)


def online_participants(conn: Connection) -> set[str]:
    """Everyone some process holds a session for."""
    return set(conn.execute(sa.select(presence_sessions.c.participant_id).distinct()).scalars())
