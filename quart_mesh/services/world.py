"""The world as one participant sees it: snapshots, positions, unread state.

One implementation serves the WebSocket ``snapshot``, ``GET /api/state`` and
``GET /api/snapshot`` (the same body), ``move`` and ``GET /api/status``.
"""

from __future__ import annotations

from typing import Any

import trio
from sqlalchemy.engine import Connection

from ..broker import Broker
from ..errors import BadRequest
from ..events import ParticipantMoved, RoomRead
from ..records import now_ms
from ..retry import retrying
from ..store import Database, outbox
from ..store import accounts as accounts_repo
from ..store import messages as messages_repo
from ..store import rooms as rooms_repo
from ..store import state as repo
from .accounts import Accounts
from .authz import Actor, RoomRef, authorize
from .rooms import require_member
from .validation import cursor_number

__all__ = ["World"]


class World:
    def __init__(self, db: Database, broker: Broker, accounts: Accounts) -> None:
        self._db = db
        self._broker = broker
        self._accounts = accounts
        self._unflushed: dict[str, dict[str, int]] = {}

    def note_read(self, participant_id: str, room_id: str, seq: int) -> None:
        """Remember that a live session delivered message *seq*; written in batches
        by :meth:`run` (one transaction for every session, every interval)."""
        rooms = self._unflushed.setdefault(participant_id, {})
        if seq > rooms.get(room_id, 0):
            rooms[room_id] = seq

    async def flush_reads(self) -> None:
        """Write the noted read positions. If the store fails, they are kept
        (merged with those noted meanwhile) for the next flush.

        Raises:
            Unavailable: the store could not take them.
        """
        pending, self._unflushed = self._unflushed, {}
        if not pending:
            return

        def write(conn: Connection) -> None:
            for participant_id, reads in pending.items():
                repo.advance_reads(conn, participant_id, reads)

        try:
            await self._db.write(write)
        except BaseException:
            for participant_id, reads in pending.items():
                for room_id, seq in reads.items():
                    self.note_read(participant_id, room_id, seq)
            raise

    async def run(
        self,
        interval: float = 1.0,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Write noted read positions every *interval* seconds (retrying while
        the store is unavailable). The node flushes once more after its writer
        stops, so a clean shutdown loses none."""
        task_status.started()
        while True:
            await trio.sleep(interval)
            await retrying("saving read positions", self.flush_reads)

    async def snapshot(self, actor: Actor) -> dict[str, Any]:
        """Rooms the actor can see (ordinary rooms and its DMs) and every
        participant with its online flag and position; plus ``cursor``, the
        newest message cursor when the snapshot was taken."""
        authorize(actor, "rooms.read")
        authorize(actor, "participants.read")

        def read(conn: Connection) -> dict[str, Any]:
            mine = rooms_repo.member_room_ids(conn, actor.participant_id)
            rooms = []
            for room in rooms_repo.list_rooms(conn):
                rooms.append({**room.to_json(), "joined": room.room_id in mine})
            for dm in rooms_repo.list_dms(conn, actor.participant_id):
                rooms.append({**dm[0].to_json(), "joined": True, "with": dm[1].participant_id})
            positions = repo.list_positions(conn)
            participants = []
            for participant in accounts_repo.list_participants(conn):
                item = self._accounts.with_presence(participant).to_json()
                position = positions.get(participant.participant_id)
                item["position"] = None if position is None else position.to_json()
                participants.append(item)
            return {
                "rooms": rooms,
                "participants": participants,
                "cursor": str(messages_repo.head_seq(conn)),
            }

        return await self._db.read(read)

    async def move(self, actor: Actor, room_id: str, x: float, y: float, z: float) -> None:
        """Set the actor's position in a room it is a member of; broadcast it."""
        authorize(actor, "rooms.join")
        position = repo.Position(actor.participant_id, room_id, x, y, z)

        def write(conn: Connection) -> None:
            require_member(conn, actor, room_id)
            repo.set_position(conn, position, now_ms())
            outbox.emit(
                conn, ParticipantMoved(room_id, participant_id=actor.participant_id, x=x, y=y, z=z)
            )

        await self._db.write(write)

    async def status(self, actor: Actor) -> dict[str, Any]:
        """What is new for the actor: its rooms with unread and mention counts."""
        authorize(actor, "rooms.read")

        def read(conn: Connection) -> dict[str, Any]:
            summary = repo.unread_summary(conn, actor.participant_id, actor.name)
            rooms = []
            for room_id, (unread, mentions, last_read) in summary.items():
                room = rooms_repo.get_room(conn, room_id)
                if room is None:
                    continue
                rooms.append(
                    {
                        **room.to_json(),
                        "unread": unread,
                        "mentions": mentions,
                        "lastReadCursor": None if last_read is None else str(last_read),
                    }
                )
            rooms.sort(key=lambda r: (-r["mentions"], -r["unread"], r["name"].casefold()))
            return {
                "rooms": rooms,
                "unread": sum(r["unread"] for r in rooms),
                "mentions": sum(r["mentions"] for r in rooms),
                "cursor": str(messages_repo.head_seq(conn)),
            }

        return await self._db.read(read)

    async def mark_read(self, actor: Actor, reads: dict[str, int]) -> None:
        """Advance the actor's read positions (never backwards)."""
        if reads:
            await self._db.write(lambda conn: repo.advance_reads(conn, actor.participant_id, reads))

    async def mark_room_read(self, actor: Actor, room_id: str, cursor: object) -> RoomRead:
        """Move the actor's read position in *room_id* up to *cursor* (never
        back, never past the room's newest message) and tell the actor's own
        sessions (``room_read``, with the room's unread and mention counts
        after the move). Clients that mark what a person has seen use this
        (``autoRead: false``, ``docs/websocket.md``).

        Raises:
            BadRequest: *cursor* is not a cursor (``invalid_cursor``).
            NotFound, Forbidden: no such room, or not a member.
        """
        authorize(actor, "rooms.read", RoomRef(room_id))
        seq = cursor_number(cursor)
        if seq is None:
            raise BadRequest("cursor must be a message cursor", "invalid_cursor")

        def write(conn: Connection) -> RoomRead:
            require_member(conn, actor, room_id)
            upto = min(seq, messages_repo.room_head_seq(conn, room_id))
            if upto > 0:
                repo.advance_reads(conn, actor.participant_id, {room_id: upto})
            summary = repo.unread_summary(conn, actor.participant_id, actor.name, room_id=room_id)
            unread, mentions, last_read = summary.get(room_id, (0, 0, None))
            event = RoomRead(room_id, cursor=last_read or 0, unread=unread, mentions=mentions)
            outbox.emit_to(conn, actor.participant_id, event)
            return event

        return await self._db.write(write)
