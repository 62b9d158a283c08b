"""World state, what is new, and polling (spec §4.1, §4.7)."""

from __future__ import annotations

import math
from typing import Any, Literal

import msgspec
from quart import Blueprint

from ..errors import BadRequest
from ._common import bearer_token, caller, client_address, node, reply
from .contract import Body, Shape, accepts, answers
from .objects import Id, Message, ParticipantView, RoomView, Timestamp

bp = Blueprint("state", __name__)


class SnapshotRoom(RoomView):
    """A room the caller is in (an ordinary room or a DM), or the mesh's default room."""

    #: the caller muted it (false where it is not a member)
    muted: bool

    #: only on DMs: the other participant's id
    with_: str | msgspec.UnsetType = msgspec.field(default=msgspec.UNSET, name="with")


class Position(Shape):
    """Where a participant is, in one of its rooms."""

    room_id: Id
    x: float
    y: float
    z: float


class SnapshotParticipant(ParticipantView):
    """A participant with its position (null: never moved)."""

    position: Position | None


class Snapshot(Shape):
    """The world as the caller sees it."""

    rooms: list[SnapshotRoom]
    participants: list[SnapshotParticipant]
    #: the node's newest message cursor when the snapshot was taken
    cursor: str


class RoomStatus(Shape):
    """One of the caller's rooms or DMs, with what is unread in it."""

    room_id: Id
    kind: Literal["room", "dm"]
    name: str
    description: str
    created_at: Timestamp | None
    created_by: str | None
    member_count: int
    origin: str | None
    unread: int
    #: unread messages that mention the caller
    mentions: int
    #: null: nothing read yet
    last_read_cursor: str | None
    #: the caller muted it: unread still counts, only mentions should notify
    muted: bool


class Status(Shape):
    """What is new for the caller: its rooms with unread and mention counts
    (most mentions, then most unread, first)."""

    rooms: list[RoomStatus]
    unread: int
    mentions: int
    #: the node's newest message cursor
    cursor: str


class PollRequest(Body):
    #: the cursor of the last poll's answer; without one, each room's read position
    cursor: str | int | None = None
    #: only messages that mention the caller, and DMs
    mentions_only: bool | None = None
    #: seconds to wait for something new (long poll); default 0
    timeout: float | None = None
    #: at most this many messages (a whole number; the node caps it)
    limit: float | None = None


class PolledCommand(Shape):
    """A command sent to the caller (an agent), now marked delivered."""

    type: Literal["command"]
    command_id: Id
    command: str
    args: dict[str, Any]
    sent_by: str | None
    created_at: Timestamp | None


class PollAnswer(Shape):
    """Messages after the cursor (oldest first), commands, and the cursor to pass next."""

    messages: list[Message]
    cursor: str
    commands: list[PolledCommand]


@bp.get("/api/state")
@bp.get("/api/snapshot")
@answers(Snapshot)
async def state() -> tuple[Any, int]:
    """The world as the caller sees it: the rooms it is in (at most
    ``max_snapshot_rooms``, and the mesh's default room), participants,
    positions, the cursor. Other rooms: ``GET /api/rooms``, by pages."""
    actor = await caller()
    return reply(await node().world.snapshot(actor))


@bp.get("/api/status")
@answers(Status)
async def status() -> tuple[Any, int]:
    """What is new: the caller's rooms with unread and mention counts."""
    actor = await caller()
    return reply(await node().world.status(actor))


@bp.post("/api/poll")
@accepts(PollRequest)
@answers(PollAnswer)
async def poll(data: PollRequest) -> tuple[Any, int]:
    """Messages and commands since a cursor, waiting up to ``timeout`` seconds for one.

    A poll that waits (``timeout`` above 0) holds one of the caller's
    ``max_polls_per_participant`` (32) seats, and of its address's
    ``max_polls_per_address``, while it waits: beyond, 429 ``too_many_polls``.
    """
    actor = await caller()
    timeout = data.timeout
    if timeout is not None and not math.isfinite(timeout):
        raise BadRequest("timeout must be a finite number", "invalid_field")
    limit = data.limit
    if limit is not None and not (math.isfinite(limit) and limit.is_integer()):
        raise BadRequest("limit must be a whole number", "invalid_field")
    result = await node().polling.poll(
        actor,
        cursor=data.cursor,
        mentions_only=bool(data.mentions_only),
        wait_seconds=timeout or 0.0,
        limit=None if limit is None else int(limit),
        token_id=node().tokens.check(bearer_token()).token_id,
        address=client_address(),
    )
    return reply(result.to_json())
