"""Read receipts in DMs (decision 0071): when a member's read position in a
DM moves, the DM's other members hear of it (``dm_read``), if both share
their receipts.

Every path that moves read positions (a live session's deliveries, reading
a page of history, ``mark_read``, ``POST /api/read-all``) goes through
:func:`advance_reads`, inside its own unit of work, so the event is
recorded with the move and leaves only if it commits.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy.engine import Connection

from ..events import DmRead
from ..store import outbox
from ..store import receipts as repo
from ..store import state as state_repo

__all__ = ["advance_reads"]


def advance_reads(
    conn: Connection,
    participant_id: str,
    reads: dict[str, int],
    *,
    dms: Collection[str] | None = None,
) -> None:
    """Move *participant_id*'s read positions forward (never back: as
    ``state.advance_reads``) and record a ``dm_read`` for each DM whose
    position moved, to its other members who share their receipts, if the
    reader shares its own. *dms*: which of the rooms are DMs, if the caller
    knows (a batch of many participants' reads looks them up once).

    Safe to run more than once (a unit the store retries): it reads the
    positions before and after each time.
    """
    if not reads:
        return
    among = repo.dm_room_ids(conn, reads) if dms is None else [r for r in reads if r in dms]
    before = repo.dm_positions(conn, participant_id, among) if among else {}
    state_repo.advance_reads(conn, participant_id, reads)
    if not before or not repo.receipts_on(conn, participant_id):
        return
    after = repo.dm_positions(conn, participant_id, before)
    for room_id, seq in after.items():
        if seq <= before.get(room_id, 0):
            continue
        event = DmRead(room_id, participant_id=participant_id, cursor=seq)
        for other in repo.sharing_members(conn, room_id, participant_id):
            outbox.emit_to(conn, other, event)
