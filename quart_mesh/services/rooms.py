"""Rooms: list, create, details, delete, join, leave."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..broker import Broker
from ..config import DEFAULT_ROOM_QUOTAS, Limits
from ..errors import BadRequest, Conflict, Forbidden, NotFound
from ..events import ParticipantJoined, ParticipantLeft, RoomDeleted, RoomMuted, RoomUpdated
from ..ids import is_ulid, new_id
from ..permissions import BUILTIN_ROLES
from ..records import Participant, Room, now_ms
from ..store import Database, outbox
from ..store import accounts as accounts_repo
from ..store import rooms as repo
from .authz import Actor, RoomRef, authorize, held_permissions, readable_rooms
from .presence import Presence
from .ratelimit import RateLimiter
from .validation import check_description, check_room_name, name_refused

__all__ = ["RoomDetails", "RoomPage", "Rooms", "require_member", "require_room", "room_quota"]


def room_quota(quotas: Mapping[str, int], role: str, priority: int) -> int | None:
    """How many rooms a participant of *role* (at *priority*) may have created;
    None: no quota. A role not in *quotas* takes the quota of the highest
    built-in role at or below its priority that has one; admin and owner,
    and roles at or above admin's priority, have none unless listed."""
    if role in quotas:
        return quotas[role]
    if priority >= BUILTIN_ROLES["admin"]:
        return None
    for name, level in sorted(BUILTIN_ROLES.items(), key=lambda item: -item[1]):
        if level <= priority and name in quotas:
            return quotas[name]
    return None


@dataclass(frozen=True, slots=True)
class RoomPage:
    """A page of ``GET /api/rooms``: rooms with whether the caller is in each,
    and the cursor of the next page (None: this is the last)."""

    rooms: list[tuple[Room, bool]]
    next_cursor: str | None


_CURSOR = re.compile(r"[A-Za-z0-9_-]+")


def _encode_cursor(name_key: str) -> str:
    return base64.urlsafe_b64encode(name_key.encode()).decode().rstrip("=")


def _decode_cursor(cursor: str) -> str:
    """The name key a room-page cursor stands for.

    Raises:
        BadRequest: not a cursor this node gave (``invalid_cursor``).
    """
    try:
        if len(cursor) > 400 or _CURSOR.fullmatch(cursor) is None:
            raise ValueError
        key = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        # a name key never holds control characters (and PostgreSQL takes no NUL)
        if not key or any(ord(c) < 32 or ord(c) == 127 for c in key):
            raise ValueError
        return key
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise BadRequest(
            "cursor must be a nextCursor of GET /api/rooms", "invalid_cursor"
        ) from None


def require_room(conn: Connection, actor: Actor, room_id: str) -> Room:
    """The room *room_id*, as far as *actor* may know it exists.

    DM rooms of other participants are reported as unknown, not forbidden,
    so their existence does not leak.

    Raises:
        NotFound: no such room (or a DM the actor is not in).
    """
    room = repo.get_room(conn, room_id) if is_ulid(room_id) else None
    if room is None or (
        room.kind == "dm" and not repo.is_member(conn, room_id, actor.participant_id)
    ):
        raise NotFound("no such room", "room_not_found")
    return room


def require_member(conn: Connection, actor: Actor, room_id: str) -> Room:
    """The room, if *actor* is a member who may read it: the visibility
    decision (``authz.may_read``) for every path that reads one room.

    Raises:
        NotFound: no such room.
        Forbidden: the actor is not a member (``not_member``), or a room
            rule or its role keeps it from reading the room (``forbidden``).
    """
    room = require_room(conn, actor, room_id)
    if not repo.is_member(conn, room_id, actor.participant_id):
        raise Forbidden("you are not a member of this room", "not_member")
    authorize(actor, "rooms.read", RoomRef(room_id))
    return room


@dataclass(frozen=True, slots=True)
class RoomDetails:
    room: Room
    members: list[Participant]
    joined: bool
    #: what the actor may do in this room (:func:`held_permissions`)
    permissions: list[str]
    #: the actor muted it (False where it is not a member)
    muted: bool = False


def _me(conn: Connection, actor: Actor) -> Participant:
    participant = accounts_repo.get_participant(conn, actor.participant_id)
    if participant is None:  # deleted while acting
        raise NotFound("no such participant", "participant_not_found")
    return participant


class Rooms:
    """Owns the ordinary rooms and their membership: listing, creating,
    details, muting, deleting, joining and leaving (DMs are opened by
    :class:`DirectMessages`). Used by ``GET``/``POST /api/rooms``,
    ``GET``/``DELETE /api/rooms/:roomId``, ``POST /api/rooms/:roomId/join``
    and ``/leave`` and ``PUT /api/rooms/:roomId/mute``.
    Reached as ``node.rooms``.
    """

    def __init__(
        self,
        db: Database,
        limits: Limits,
        broker: Broker,
        presence: Presence,
        room_quotas: Mapping[str, int] = DEFAULT_ROOM_QUOTAS,
        rate_limits: RateLimiter | None = None,
    ) -> None:
        self._db = db
        self._rate = rate_limits or RateLimiter()
        self._limits = limits
        self._room_quotas = room_quotas
        self._broker = broker
        self._presence = presence

    def _joined(self, conn: Connection, room_id: str, participant: Participant) -> None:
        """Record *participant* joining *room_id*: routed and announced on commit."""
        outbox.change(conn, outbox.Join(room_id, participant.participant_id))
        participant = self._presence.mark(participant)
        outbox.emit(conn, ParticipantJoined(room_id, participant=participant))

    def _left(self, conn: Connection, room_id: str, participant: Participant) -> None:
        participant = self._presence.mark(participant)
        outbox.emit(conn, ParticipantLeft(room_id, participant=participant))
        outbox.change(conn, outbox.Leave(room_id, participant.participant_id))

    async def list_rooms(self, actor: Actor) -> list[tuple[Room, bool]]:
        """All ordinary rooms the actor may read (never DMs), each with
        whether the actor is in it: for a program embedding the node
        (``docs/embedding.md``); clients page with :meth:`page_rooms`."""
        authorize(actor, "rooms.read")
        readable = readable_rooms(actor)

        def read(conn: Connection) -> list[tuple[Room, bool]]:
            mine = repo.member_room_ids(conn, actor.participant_id)
            return [
                (room, room.room_id in mine)
                for room in repo.list_rooms(conn)
                if readable(room.room_id)
            ]

        return await self._db.read(read)

    async def page_rooms(
        self, actor: Actor, cursor: str | None = None, limit: int | None = None
    ) -> RoomPage:
        """A page of the ordinary rooms (never DMs) by name, after *cursor*
        (the ``next_cursor`` of the page before), each with whether the actor
        is in it.

        Raises:
            BadRequest: a bad *cursor* (``invalid_cursor``) or *limit*
                (``invalid_limit``).
        """
        authorize(actor, "rooms.read")
        limits = self._limits
        if limit is None:
            limit = limits.default_room_page_size
        if not 1 <= limit <= limits.max_room_page_size:
            raise BadRequest(
                f"limit must be between 1 and {limits.max_room_page_size}", "invalid_limit"
            )
        after = None if cursor is None else _decode_cursor(cursor)
        # rooms a rule keeps the actor from reading are left out (the page
        # may then be shorter; the cursor still follows every room read)
        readable = readable_rooms(actor)

        def read(conn: Connection) -> RoomPage:
            rows = repo.page_rooms(conn, after, limit + 1)
            mine = repo.member_room_ids(conn, actor.participant_id)
            more = len(rows) > limit
            rows = rows[:limit]
            rooms = [(room, room.room_id in mine) for _, room in rows if readable(room.room_id)]
            return RoomPage(rooms, _encode_cursor(rows[-1][0]) if more else None)

        return await self._db.read(read)

    async def create(self, actor: Actor, name: str, description: str = "") -> Room:
        """Create a room; the creator joins it.

        Raises:
            Conflict: a room with that name exists (``room_name_taken``), or
                one whose name looks like it (``name_confusable``); or the
                actor has created as many rooms as its role may
                (``too_many_rooms``, :func:`room_quota`).
        """
        authorize(actor, "rooms.create")
        name = check_room_name(name, self._limits)
        check_description(description, self._limits)
        now = now_ms()
        room = Room(new_id(), "room", name, description, actor.participant_id, now)
        quota = room_quota(self._room_quotas, actor.role, actor.priority)

        def write(conn: Connection) -> Room:
            me = _me(conn, actor)
            found = repo.room_name_conflict(conn, name)
            if found is not None:
                raise name_refused(found)
            if quota is not None and repo.count_created(conn, actor.participant_id) >= quota:
                raise Conflict(
                    f"you have created {quota} rooms, the most your role ({actor.role}) may: "
                    "delete one first"
                    if quota
                    else f"your role ({actor.role}) may not create rooms",
                    "too_many_rooms",
                )
            try:
                with conn.begin_nested():
                    repo.insert_room(conn, room)
            except IntegrityError:  # one committed meanwhile: the unique keys decide
                found = repo.room_name_conflict(conn, name)
                raise name_refused(found or ("room_name_taken", name)) from None
            repo.add_member(conn, room.room_id, actor.participant_id, now)
            created = repo.get_room(conn, room.room_id)
            assert created is not None
            self._joined(conn, room.room_id, me)
            return created

        return await self._db.write(write)

    async def get(self, actor: Actor, room_id: str) -> RoomDetails:
        """A room (or a DM the actor is in) with its members, in the order
        they joined and each with its live ``online`` flag; whether the actor
        is in it, what it may do there (:func:`held_permissions`) and whether
        it muted it. For anyone who may read the room (``rooms.read``, its
        rules included): a room's details need no membership.

        Raises:
            Forbidden: the actor may not read rooms, or a rule of this room
                keeps it from reading it (``forbidden``).
            NotFound: no such room, or a DM the actor is not in
                (``room_not_found``).
        """
        authorize(actor, "rooms.read")

        def read(conn: Connection) -> RoomDetails:
            room = require_room(conn, actor, room_id)
            authorize(actor, "rooms.read", RoomRef(room.room_id, room.kind))
            members = list(repo.list_members(conn, room_id))
            joined = any(m.participant_id == actor.participant_id for m in members)
            held = held_permissions(actor, RoomRef(room.room_id, room.kind))
            muted = repo.memberships(conn, actor.participant_id, room_id).get(room_id, False)
            return RoomDetails(room, members, joined, held, muted)

        details = await self._db.read(read)
        members = [self._presence.mark(m) for m in details.members]
        return replace(details, members=members)

    async def mute(self, actor: Actor, room_id: str, muted: bool) -> RoomMuted:
        """Mute or unmute a room or DM for the actor, a member (or the DM's
        party); when that changes anything, tell the actor's own sessions
        (``room_muted``), so its other tabs and devices follow. Muting
        changes no count: unread still counts (``docs/decisions/0060``).
        Leaving the room forgets it (the membership row goes).

        Cancellation: as :meth:`Database.write` (a unit still queued is
        withdrawn; one handed to the store commits or rolls back whole). The
        unit may run again (a batch the store retries): it only sets a flag.

        Raises:
            NotFound: no such room, or a DM the actor is not in.
            Forbidden: not a member (``not_member``), or the actor may not
                read the room (``forbidden``).
        """
        authorize(actor, "rooms.read", RoomRef(room_id))

        def write(conn: Connection) -> RoomMuted:
            require_member(conn, actor, room_id)
            event = RoomMuted(room_id, muted=muted)
            if repo.set_muted(conn, room_id, actor.participant_id, muted):
                outbox.emit_to(conn, actor.participant_id, event)
            return event

        return await self._db.write(write)

    async def delete(self, actor: Actor, room_id: str) -> None:
        """Delete a room and its messages: its creator, or admin and above.

        DMs are not deleted this way (each side hides its DM instead).
        """

        def write(conn: Connection) -> None:
            room = require_room(conn, actor, room_id)
            if room.kind == "dm":
                raise BadRequest(
                    "direct-message rooms are removed with DELETE /api/dms/:roomId", "is_dm"
                )
            authorize(actor, "rooms.delete", RoomRef(room.room_id, room.kind, room.created_by))
            mesh = accounts_repo.get_mesh_config(conn)
            if mesh is not None and mesh.default_room_id == room_id:
                raise Conflict(
                    "this is the mesh's default room: choose another default room "
                    "(PUT /api/admin/mesh/settings, defaultRoomId) before deleting it",
                    "default_room",
                )
            repo.delete_room(conn, room_id)
            outbox.emit(conn, RoomDeleted(room_id))
            outbox.change(conn, outbox.DropRoom(room_id))
            outbox.change(conn, outbox.Invalidate("room_rules", room_id))

        await self._db.write(write, then=lambda _: actor.policy.forget_room(room_id))

    async def update(
        self, actor: Actor, room_id: str, description: str | None
    ) -> tuple[Room, bool]:
        """Change a room's description (None: no change): its creator, or
        whoever holds ``rooms.permissions`` (admins; decision 0069). Its
        members are told (``room_updated``). The name stays: it is how the
        room is addressed. Returns the room and whether the actor is in it.

        Raises:
            NotFound: no such room (or a DM the actor is not in).
            BadRequest: a DM (``is_dm``), or an invalid description.
            Conflict: a room another node shares here (``not_home_room``).
            Forbidden: neither its creator nor ``rooms.permissions``.
            RateLimited: over the ``profile`` rule (each change is an event
                to every member).
        """
        self._rate.participant("profile", actor)
        if description is not None:
            description = check_description(description, self._limits)

        def write(conn: Connection) -> tuple[Room, bool]:
            room = require_room(conn, actor, room_id)
            if room.kind == "dm":
                raise BadRequest("a direct-message room has no description", "is_dm")
            # one who may not read the room learns nothing of it (decision 0069)
            authorize(actor, "rooms.read", RoomRef(room.room_id, room.kind))
            authorize(actor, "rooms.permissions", RoomRef(room.room_id, room.kind, room.created_by))
            if room.origin is not None:
                raise Conflict("only a room of this node can be changed here", "not_home_room")
            joined = repo.is_member(conn, room_id, actor.participant_id)
            if description is None or description == room.description:
                return room, joined
            repo.set_description(conn, room_id, description)
            outbox.emit(
                conn,
                RoomUpdated(
                    room_id,
                    name=room.name,
                    description=description,
                    updated_by=actor.participant_id,
                ),
            )
            return replace(room, description=description), joined

        return await self._db.write(write)

    async def join(self, actor: Actor, room_id: str) -> Room:
        """Join a room (idempotent). DMs cannot be joined."""
        authorize(actor, "rooms.join", RoomRef(room_id))

        def write(conn: Connection) -> Room:
            room = require_room(conn, actor, room_id)
            if room.kind == "dm":
                raise BadRequest("direct-message rooms cannot be joined", "is_dm")
            if not repo.add_member(conn, room_id, actor.participant_id, now_ms()):
                return room
            self._joined(conn, room_id, _me(conn, actor))
            return repo.get_room(conn, room_id) or room

        return await self._db.write(write)

    async def leave(self, actor: Actor, room_id: str) -> Room:
        """Leave a room (idempotent). DMs are hidden, not left."""
        authorize(actor, "rooms.join")

        def write(conn: Connection) -> Room:
            room = require_room(conn, actor, room_id)
            if room.kind == "dm":
                raise BadRequest(
                    "direct-message rooms are removed with DELETE /api/dms/:roomId", "is_dm"
                )
            me = _me(conn, actor)
            if not repo.remove_member(conn, room_id, actor.participant_id):
                return room
            self._left(conn, room_id, me)
            return repo.get_room(conn, room_id) or room

        return await self._db.write(write)
