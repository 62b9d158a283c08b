"""Direct messages: one DM room per pair of participants, one group DM per
set of three to nine (decision 0070)."""

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

__all__ = ["MAX_GROUP", "MIN_GROUP", "DirectMessages", "Dm", "group_name"]


#: how many others a group DM may have besides its opener (decision 0070)
MIN_GROUP, MAX_GROUP = 2, 8
#: the longest name a group DM gets (its members' names, cut with "…")
_MAX_GROUP_NAME = 200


@dataclass(frozen=True, slots=True)
class Dm:
    room: Room
    #: the other members, in join order (one in a 1:1 DM)
    others: tuple[Participant, ...]
    last_message_at: int | None = None
    #: the caller muted it
    muted: bool = False
    #: the other members' read positions (participant id, cursor): read
    #: receipts, only of those who share them, and none for a caller who
    #: does not (decision 0071)
    read_by: tuple[tuple[str, int], ...] = ()
    #: the caller itself, listed first among ``members``
    me: Participant | None = None

    @property
    def other(self) -> Participant:
        """The other party of a 1:1 DM (of a group DM: its first other member)."""
        return self.others[0]

    def to_json(self) -> dict[str, Any]:
        members = ([self.me] if self.me is not None else []) + list(self.others)
        return {
            "roomId": self.room.room_id,
            "name": self.room.name,
            "participant": self.other.to_json(),
            "members": [member.to_json() for member in members],
            "createdAt": iso(self.room.created_at),
            "lastMessageAt": iso(self.last_message_at),
            "muted": self.muted,
            "readBy": [
                {"participantId": participant_id, "cursor": str(cursor)}
                for participant_id, cursor in self.read_by
            ],
        }


def group_name(members: list[Participant]) -> str:
    """A group DM's name: its members' names, sorted, cut at 200 characters."""
    name = ", ".join(sorted((m.name for m in members), key=str.casefold))
    return name if len(name) <= _MAX_GROUP_NAME else name[: _MAX_GROUP_NAME - 1] + "…"


@dataclass(frozen=True, slots=True)
class _Opened:
    dm: Dm
    created: bool


class DirectMessages:
    """Owns direct messages' rooms: one per pair of participants, and one
    per set of three to nine (a group DM, decision 0070), opened, listed and
    hidden per participant (what is said in them is :class:`Messages`').
    Used by ``GET``/``POST /api/dms`` and ``DELETE /api/dms/:roomId``.
    Reached as ``node.dms``.
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
        return await self._open(actor, [participant_id])

    async def open_group(self, actor: Actor, participant_ids: list[str]) -> tuple[Dm, bool]:
        """Create or find the group DM of the actor and *participant_ids*
        (2 to 8 others, distinct, each one the actor could open a 1:1 DM
        with): one room per set of members, whoever opens it and in
        whatever order. Its name is its members' names. Returns the DM and
        whether it was created now; opening a hidden one shows it again.

        Raises:
            BadRequest: too few or too many (``dm_group_size``), one named
                twice (``dm_duplicate``), oneself (``dm_self``), a malformed id.
            NotFound: no such participant.
        """
        authorize(actor, "dms.create")
        if not MIN_GROUP <= len(participant_ids) <= MAX_GROUP:
            raise BadRequest(
                f"a group DM has {MIN_GROUP} to {MAX_GROUP} others besides you",
                "dm_group_size",
            )
        for participant_id in participant_ids:
            check_id(participant_id, "participantIds")
        if len(set(participant_ids)) != len(participant_ids):
            raise BadRequest("a participant is named twice", "dm_duplicate")
        if actor.participant_id in participant_ids:
            raise BadRequest("you are in the group DM already: name the others", "dm_self")
        return await self._open(actor, participant_ids)

    async def _open(self, actor: Actor, participant_ids: list[str]) -> tuple[Dm, bool]:
        group = len(participant_ids) > 1

        def write(conn: Connection) -> _Opened:
            others = []
            for participant_id in participant_ids:
                other = accounts_repo.get_participant(conn, participant_id)
                if other is None:
                    raise NotFound("no such participant", "participant_not_found")
                others.append(other)
            me = accounts_repo.get_participant(conn, actor.participant_id)
            ids = [actor.participant_id, *participant_ids]
            key = repo.group_key(ids) if group else repo.dm_key(*ids)
            room = repo.get_dm_by_key(conn, key)
            created = room is None
            if room is None:
                now = now_ms()
                name = group_name([*([me] if me is not None else []), *others]) if group else "dm"
                room = Room(new_id(), "dm", name, "", actor.participant_id, now)
                if group:
                    repo.insert_room(conn, room, dm_group=ids)
                else:
                    repo.insert_room(conn, room, dm_pair=(ids[0], ids[1]))
                for participant_id in ids:
                    repo.add_member(conn, room.room_id, participant_id, now)
                room = repo.get_room(conn, room.room_id)
                assert room is not None
                if me is not None:
                    # every member learns of the new DM room as a join of each
                    for participant in (me, *others):
                        outbox.change(conn, outbox.Join(room.room_id, participant.participant_id))
                    for participant in (me, *others):
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
            return _Opened(
                Dm(
                    room,
                    tuple(others),
                    muted=mine.get(room.room_id, False),
                    read_by=tuple(read_by.get(room.room_id, ())),
                    me=me,
                ),
                created,
            )

        opened = await self._db.write(write)
        dm = opened.dm
        return replace(
            dm,
            others=tuple(self._presence.mark(o) for o in dm.others),
            me=None if dm.me is None else self._presence.mark(dm.me),
        ), opened.created

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
            list[tuple[Room, list[Participant], int | None]],
            dict[str, bool],
            dict[str, list[tuple[str, int]]],
            Participant | None,
        ]:
            rows = list(repo.list_dms(conn, actor.participant_id))
            read_by = _read_by(conn, actor.participant_id, [room.room_id for room, _, _ in rows])
            me = accounts_repo.get_participant(conn, actor.participant_id)
            return rows, repo.memberships(conn, actor.participant_id), read_by, me

        rows, mine, read_by, me = await self._db.read(read)
        return [
            Dm(
                room,
                tuple(self._presence.mark(other) for other in others),
                last,
                mine.get(room.room_id, False),
                tuple(read_by.get(room.room_id, ())),
                None if me is None else self._presence.mark(me),
            )
            for room, others, last in rows
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
