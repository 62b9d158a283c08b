"""The world as one participant sees it: snapshots, positions, unread state.

One implementation serves the WebSocket ``snapshot``, ``GET /api/state`` and
``GET /api/snapshot`` (the same body), ``move`` and ``GET /api/status``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import trio
from sqlalchemy.engine import Connection

from ..broker import Broker
from ..config import Limits
from ..errors import BadRequest
from ..events import Event, ParticipantMoved, Relayed, RoomRead
from ..records import Participant, Room, now_ms
from ..retry import retrying
from ..store import Database, outbox
from ..store import messages as messages_repo
from ..store import receipts as receipts_repo
from ..store import rooms as rooms_repo
from ..store import snapshot as snapshot_repo
from ..store import state as repo
from ..store.snapshot import ParticipantRow
from .accounts import Accounts
from .authz import Actor, RoomRef, authorize, readable_rooms
from .presence import Presence
from .receipts import advance_reads
from .rooms import require_member
from .validation import cursor_number

__all__ = ["World"]

#: events that change nothing the snapshot's mesh-wide parts show (besides chat
#: traffic); presence is applied when the participants are joined (its version)
_UNCHANGING = frozenset({"presence", "room_read", "room_muted", "command", "typing"})


def _dumps(value: Any) -> str:
    """As :func:`~quart_mesh.events.frame_of` serializes."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


#: the end of a snapshot room's JSON after ``"joined":``, by (joined, muted)
_OWN_TAIL = {
    (joined, muted): _dumps({"joined": joined, "muted": muted})[len('{"joined":') :]
    for joined in (True, False)
    for muted in (True, False)
}


#: what a participant's fragment is rendered from
_Key = tuple[ParticipantRow, "repo.Position | None"]


@dataclass(frozen=True, slots=True)
class _Fresh:
    """The mesh-wide parts as read from the store."""

    fingerprint: tuple[Any, ...]
    participants: list[ParticipantRow]
    positions: dict[str, repo.Position]
    rooms: list[Room]


@dataclass(frozen=True, slots=True)
class _Shared:
    """The snapshot's mesh-wide parts, rendered as JSON fragments."""

    fingerprint: tuple[Any, ...]
    #: World._generation when read: stale once it differs
    generation: int
    #: the number of the read they come from
    tick: int
    #: counts renderings (the joined participants text is kept per version)
    version: int
    #: (room id, the room's JSON up to ``"joined":``)
    rooms: list[tuple[str, str]]
    #: (participant id, its JSON up to ``"online":``, the rest after the flag)
    participants: list[tuple[str, str, str]]
    #: the ids of the ordinary rooms
    room_ids: frozenset[str]


def _read_fresh(conn: Connection, shared: _Shared | None) -> tuple[_Fresh | None, int]:
    """The mesh-wide parts, or None if *shared* still matches the store; and
    the node's newest message cursor."""
    fingerprint, head = snapshot_repo.fingerprint(conn)
    if shared is not None and shared.fingerprint == fingerprint:
        return None, head
    fresh = _Fresh(
        fingerprint,
        snapshot_repo.participant_rows(conn),
        repo.list_positions(conn),
        list(rooms_repo.list_rooms(conn)),
    )
    return fresh, head


def _participant_fragment(row: ParticipantRow, position: repo.Position | None) -> tuple[str, str]:
    """A participant's JSON, as ``{**participant.to_json(), "position": ...}``
    serializes, split around the value of ``online``."""
    participant_id, name, type_, role, last_seen_at, created_at, origin, display_name = row
    item = Participant(
        participant_id,
        name,
        "",
        type_,
        role,
        created_at,
        last_seen_at,
        origin=origin,
        display_name=display_name,
    ).to_json()
    item["position"] = None if position is None else position.to_json()
    keys = list(item)
    at = keys.index("online")
    head = _dumps({k: item[k] for k in keys[:at]})[:-1] + ',"online":'
    rest = _dumps({k: item[k] for k in keys[at + 1 :]})
    return head, "," + rest[1:]


#: the defaults, for a World built without settings (tests, embedding)
_DEFAULT_LIMITS = Limits()

#: read positions a flush writes as a quick unit at most
_QUICK_READS = 256


class World:
    def __init__(
        self,
        db: Database,
        broker: Broker,
        accounts: Accounts,
        presence: Presence | None = None,
        *,
        max_rooms: int = _DEFAULT_LIMITS.max_snapshot_rooms,
    ) -> None:
        self._db = db
        #: rooms one snapshot carries at most (``max_snapshot_rooms``)
        self._max_rooms = max_rooms
        #: who is online (the accounts' own, unless given)
        self._presence: Presence = presence or accounts._presence
        self._broker = broker
        self._accounts = accounts
        self._unflushed: dict[str, dict[str, int]] = {}
        #: the snapshot's mesh-wide parts, rendered (see snapshot_frame)
        self._shared: _Shared | None = None
        #: counts events that may change them (see _observed)
        self._generation = 0
        #: counts reads of them begun
        self._reads = 0
        self._version = 0
        self._refresh_lock = trio.Lock()
        #: participant id -> ((row, position), head, tail) of its rendered fragment
        self._fragments: dict[str, tuple[_Key, str, str]] = {}
        self._text_key: tuple[int, int] | None = None
        self._text = ""
        broker.observe(self._observed)

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
            # which rooms are DMs (their moves are read receipts), looked up once
            dms = receipts_repo.dm_room_ids(
                conn, {room_id for reads in pending.values() for room_id in reads}
            )
            for participant_id, reads in pending.items():
                advance_reads(conn, participant_id, reads, dms=dms)

        # a few hundred rows are a quick unit (one short statement each):
        # on SQLite it then commits on the loop's thread (Database.submit)
        quick = sum(len(reads) for reads in pending.values()) <= _QUICK_READS
        try:
            await self._db.write(write, quick=quick)
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
        """The rooms the actor is in (its ordinary rooms, then its DMs, at
        most ``max_snapshot_rooms``; plus the mesh's default room) and every
        participant with its online flag and position; plus ``cursor``, the
        newest message cursor when the snapshot was taken (the body of
        ``GET /api/state``; :meth:`snapshot_frame` is the same as a frame)."""
        data: dict[str, Any] = json.loads(await self.snapshot_frame(actor))
        del data["type"]
        return data

    async def snapshot_frame(self, actor: Actor) -> str:
        """The WebSocket ``snapshot`` frame for *actor*, as JSON text.

        The mesh-wide parts (every participant, every room) are kept
        rendered (``_Shared``) and checked against the store in the same
        read as the actor's own parts (its rooms, its DMs, the cursor);
        only what changed is read and rendered again."""
        authorize(actor, "rooms.read")
        authorize(actor, "participants.read")
        participant_id = actor.participant_id
        shared = self._shared
        self._reads += 1
        tick = self._reads

        ordinary = None if shared is None else shared.room_ids

        def read(conn: Connection) -> tuple[_Fresh | None, int, snapshot_repo.ActorParts]:
            fresh, head = _read_fresh(conn, shared)
            return fresh, head, snapshot_repo.actor_parts(conn, participant_id, ordinary)

        generation = self._generation
        fresh, head, own = await self._db.read(read)
        if fresh is not None or shared is None or shared.generation != self._generation:
            shared = await self._refreshed(fresh, generation, tick)
        mine = own.member_of
        # the rooms one is in, bounded (other rooms are paged by GET /api/rooms);
        # the default room too, so that a newcomer is shown where to start;
        # and of those only the ones the visibility decision lets it read
        mesh = self._accounts.mesh
        default_room = mesh.default_room_id if mesh is not None else None
        most = self._max_rooms
        readable = readable_rooms(actor)
        chosen = [
            (room_id, head)
            for room_id, head in shared.rooms
            if (room_id in mine or room_id == default_room) and readable(room_id)
        ]
        if len(chosen) > most:  # cut: the rooms one is in first, the default room first of them
            chosen.sort(key=lambda pair: (pair[0] not in mine, pair[0] != default_room))
            chosen = chosen[:most]
        muted = own.muted
        rooms = [head + _OWN_TAIL[room_id in mine, room_id in muted] for room_id, head in chosen]
        dms = [(room, other) for room, other in own.dms if readable(room.room_id)]
        for room, other_id in dms[: max(0, most - len(rooms))]:
            dm = {**room.to_json(), "joined": True, "muted": room.room_id in muted}
            if other_id is not None:  # a group DM has none: its name names it
                dm["with"] = other_id
            rooms.append(_dumps(dm))
        return "".join(
            (
                '{"type":"snapshot","rooms":[',
                ",".join(rooms),
                '],"participants":[',
                self._participants_text(shared),
                '],"cursor":"',
                str(head),
                '"}',
            )
        )

    async def _refreshed(self, fresh: _Fresh | None, generation: int, tick: int) -> _Shared:
        """The mesh-wide parts as read at or after read number *tick*: one
        caller at a time reads them again; the others take its result."""
        async with self._refresh_lock:
            shared = self._shared
            if shared is not None and shared.tick > tick and shared.generation == self._generation:
                return shared  # read again since this caller's read began
            if fresh is None or generation != self._generation:
                generation = self._generation
                self._reads += 1
                tick = self._reads
                fresh, _ = await self._db.read(lambda conn: _read_fresh(conn, None))
                assert fresh is not None
            shared = self._render(fresh, generation, tick)
            if generation == self._generation:  # no change seen while reading
                self._shared = shared
            return shared

    def _render(self, fresh: _Fresh, generation: int, tick: int) -> _Shared:
        """Render what *fresh* holds, reusing the fragments of rows unchanged."""
        old = self._fragments
        fragments: dict[str, tuple[_Key, str, str]] = {}
        participants: list[tuple[str, str, str]] = []
        positions = fresh.positions
        for row in fresh.participants:
            participant_id = row[0]
            position = positions.get(participant_id)
            key = (row, position)
            known = old.get(participant_id)
            if known is not None and known[0] == key:
                head, tail = known[1], known[2]
            else:
                head, tail = _participant_fragment(row, position)
            fragments[participant_id] = (key, head, tail)
            participants.append((participant_id, head, tail))
        self._fragments = fragments
        self._version += 1
        rooms = [(room.room_id, _dumps(room.to_json())[:-1] + ',"joined":') for room in fresh.rooms]
        room_ids = frozenset(room_id for room_id, _ in rooms)
        return _Shared(
            fresh.fingerprint, generation, tick, self._version, rooms, participants, room_ids
        )

    def _participants_text(self, shared: _Shared) -> str:
        """The participants of *shared* with their online flags, joined once
        per change of either."""
        presence = self._presence
        key = (shared.version, presence.version)
        if self._text_key != key:
            online = presence.online()
            self._text = ",".join(
                head + ("true" if participant_id in online else "false") + tail
                for participant_id, head, tail in shared.participants
            )
            self._text_key = key
        return self._text

    def _observed(self, event: Event) -> None:
        """Every event the broker publishes: those that change member counts
        or positions make the mesh-wide parts stale (the store's fingerprint
        does not see those)."""
        kind = event.kind if isinstance(event, Relayed) else event.type
        if not event.chat and kind not in _UNCHANGING:
            self._generation += 1

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
        readable = readable_rooms(actor)

        def read(conn: Connection) -> dict[str, Any]:
            summary = repo.unread_summary(conn, actor.participant_id, actor.name)
            muted = rooms_repo.memberships(conn, actor.participant_id)
            rooms = []
            for room_id, (unread, mentions, last_read) in summary.items():
                if not readable(room_id):
                    continue
                room = rooms_repo.get_room(conn, room_id)
                if room is None:
                    continue
                rooms.append(
                    {
                        **room.to_json(),
                        "unread": unread,
                        "mentions": mentions,
                        "lastReadCursor": None if last_read is None else str(last_read),
                        "muted": muted.get(room_id, False),
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
            await self._db.write(lambda conn: advance_reads(conn, actor.participant_id, reads))

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
                advance_reads(conn, actor.participant_id, {room_id: upto})
            summary = repo.unread_summary(conn, actor.participant_id, actor.name, room_id=room_id)
            unread, mentions, last_read = summary.get(room_id, (0, 0, None))
            event = RoomRead(room_id, cursor=last_read or 0, unread=unread, mentions=mentions)
            outbox.emit_to(conn, actor.participant_id, event)
            return event

        return await self._db.write(write)

    async def mark_all_read(self, actor: Actor) -> list[RoomRead]:
        """Move the actor's read position in every room and DM it is in and
        may read to the room's newest message, in one unit of work; tell the
        actor's own sessions (``room_read``) of each room whose position
        moved. Returns the position and counts of each of those rooms after
        the move, ordered by room id (unread 0 unless a message came in
        meanwhile).

        Cancellation: as :meth:`Database.write` (a unit still queued is
        withdrawn; one handed to the store commits or rolls back whole). The
        unit may run again (a batch the store retries): it reads what to move
        each time it runs.
        """
        authorize(actor, "rooms.read")
        readable = readable_rooms(actor)
        participant_id = actor.participant_id

        def write(conn: Connection) -> list[RoomRead]:
            heads = {
                room_id: positions
                for room_id, positions in repo.read_heads(conn, participant_id).items()
                if readable(room_id)
            }
            moved = {room_id: head for room_id, (head, read) in heads.items() if head > read}
            advance_reads(conn, participant_id, moved)
            summary = repo.unread_summary(conn, participant_id, actor.name)
            reads = []
            for room_id in sorted(heads):
                if room_id not in summary:  # left meanwhile (another process)
                    continue
                unread, mentions, last_read = summary[room_id]
                event = RoomRead(room_id, cursor=last_read or 0, unread=unread, mentions=mentions)
                if room_id in moved:
                    outbox.emit_to(conn, participant_id, event)
                reads.append(event)
            return reads

        return await self._db.write(write)
