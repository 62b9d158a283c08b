"""Direct messages: one DM room per pair of participants."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.engine import Connection

from ..broker import Broker
from ..errors import BadRequest, NotFound
from ..events import ParticipantJoined
from ..ids import is_ulid, new_id
from ..records import Participant, Room, iso, now_ms
from ..store import Database, outbox
from ..store import accounts as accounts_repo
from ..store import receipts as receipts_repo
from ..store import rooms as repo
from .authz import Actor, authorize
from .presence import Presence
from .validation import check_id

__all__ = ["DirectMessages", "Dm"]


@dataclass(frozen=True, slots=True)
class Dm:
    room: Room
    other: Participant
    last_message_at: int | None = None
    #: the caller muted it
    muted: bool = False
    #: the other members' read positions (participant id, cursor): read
    #: receipts, only of those who share them, and none for a caller who
    #: does not (decision 0071)
    read_by: tuple[tuple[str, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "roomId": self.room.room_id,
            "participant": self.other.to_json(),
            "createdAt": iso(self.room.created_at),
            "lastMessageAt": iso(self.last_message_at),
            "muted": self.muted,
            "readBy": [
                {"participantId": participant_id, "cursor": str(cursor)}
                for participant_id, cursor in self.read_by
            ],
        }


class DirectMessages:
    """Owns direct messages' rooms: one per pair of participants, opened,
    listed and hidden per participant (what is said in them is
    :class:`Messages`'). Used by ``GET``/``POST /api/dms`` and
    ``DELETE /api/dms/:roomId``. Reached as ``node.dms``.
    """

    def __init__(self, db: Database, broker: Broker, presence: Presence) -> None:
        self._db = db
        self._broker = broker
        self._presence = presence

    async def open(self, actor: Actor, participant_id: str) -> tuple[Dm, bool]:
        """Create or find the DM room of the actor and *participant_id*.

        Returns the DM and whether it was created now. Opening a hidden DM
        shows it again.

        Raises:
            BadRequest: a DM with oneself, or a malformed id.
            NotFound: no such participant.
        """
        authorize(actor, "dms.create")
        check_id(participant_id, "participantId")
        if participant_id == actor.participant_id:
            raise BadRequest("you cannot open a DM with yourself", "dm_self")

        def write(conn: Connection) -> tuple[Dm, bool, Participant | None]:
            other = accounts_repo.get_participant(conn, participant_id)
            if other is None:
                raise NotFound("no such participant", "participant_not_found")
            me = accounts_repo.get_participant(conn, actor.participant_id)
            key = repo.dm_key(actor.participant_id, participant_id)
            room = repo.get_dm_by_key(conn, key)
            created = room is None
            if room is None:
                now = now_ms()
                room = Room(new_id(), "dm", "dm", "", actor.participant_id, now)
                repo.insert_room(conn, room, dm_pair=(actor.participant_id, participant_id))
                repo.add_member(conn, room.room_id, actor.participant_id, now)
                repo.add_member(conn, room.room_id, participant_id, now)
                room = repo.get_room(conn, room.room_id)
                assert room is not None
                if me is not None:
                    # both members learn of the new DM room as a join of each
                    for participant in (me, other):
                        outbox.change(conn, "join", room.room_id, participant.participant_id)
                    for participant in (me, other):
                        outbox.emit(
                            conn,
                            ParticipantJoined(
                                room.room_id, participant=self._presence.mark(participant)
                            ),
                        )
            else:
                repo.set_hidden(conn, room.room_id, actor.participant_id, False)
            mine = repo.memberships(conn, actor.participant_id, room.room_id)
            read_by = _read_by(conn, actor.participant_id, [room.room_id])
            dm = Dm(
                room,
                other,
                muted=mine.get(room.room_id, False),
                read_by=tuple(read_by.get(room.room_id, ())),
            )
            return dm, created, me

        dm, created, _ = await self._db.write(write)
        return replace(dm, other=self._presence.mark(dm.other)), created

    async def list_dms(self, actor: Actor) -> list[Dm]:
        """The actor's DMs it has not hidden, latest message first (one
        without messages by when it was opened), each with the other party
        (with its live ``online`` flag), the time of its last message and
        whether the actor muted it. Needs ``rooms.read``.

        Raises:
            Forbidden: the actor may not read rooms.
        """
        authorize(actor, "rooms.read")

        def read(
            conn: Connection,
        ) -> tuple[
            list[tuple[Room, Participant, int | None]],
            dict[str, bool],
            dict[str, list[tuple[str, int]]],
        ]:
            rows = list(repo.list_dms(conn, actor.participant_id))
            read_by = _read_by(conn, actor.participant_id, [room.room_id for room, _, _ in rows])
            return rows, repo.memberships(conn, actor.participant_id), read_by

        rows, mine, read_by = await self._db.read(read)
        return [
            Dm(
                room,
                self._presence.mark(other),
                last,
                mine.get(room.room_id, False),
                tuple(read_by.get(room.room_id, ())),
            )
            for room, other, last in rows
        ]

    async def hide(self, actor: Actor, room_id: str) -> None:
        """Remove a DM from the actor's list until a new message arrives."""

        authorize(actor, "rooms.read")

        def write(conn: Connection) -> None:
            room = repo.get_room(conn, room_id) if is_ulid(room_id) else None
            if (
                room is None
                or room.kind != "dm"
                or not repo.is_member(conn, room_id, actor.participant_id)
            ):
                raise NotFound("no such DM", "dm_not_found")
            repo.set_hidden(conn, room_id, actor.participant_id, True)

        await self._db.write(write)


def _read_by(
    conn: Connection, participant_id: str, room_ids: list[str]
) -> dict[str, list[tuple[str, int]]]:
    """The read receipts *participant_id* may see in *room_ids*: none if it
    does not share its own (decision 0071)."""
    if not room_ids or not receipts_repo.receipts_on(conn, participant_id):
        return {}
    return receipts_repo.read_by(conn, room_ids, participant_id)
