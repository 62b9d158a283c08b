"""Direct messages (spec §4.4)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from ._common import caller, node, reply
from .contract import Body, Shape, accepts, answers
from .objects import Id, Ok, ParticipantView, Timestamp

bp = Blueprint("dms", __name__)


class OpenDm(Body):
    #: the other participant
    participant_id: str


class ReadReceipt(Shape):
    """Another member's read position in a DM."""

    participant_id: Id
    #: the newest message it has read
    cursor: str


class DmView(Shape):
    """A DM: its room and the other participant."""

    room_id: Id
    participant: ParticipantView
    created_at: Timestamp
    #: null while it has no message
    last_message_at: Timestamp | None
    #: the caller muted it
    muted: bool
    #: the other members' read positions, of those who share their read
    #: receipts; empty when the caller does not share its own (decision 0071)
    read_by: list[ReadReceipt]


@bp.get("/api/dms")
@answers(list[DmView])
async def list_dms() -> tuple[Any, int]:
    """The caller's DMs (hidden ones left out)."""
    actor = await caller()
    return reply([dm.to_json() for dm in await node().dms.list_dms(actor)])


@bp.post("/api/dms")
@accepts(OpenDm)
@answers(DmView, 201)
@answers(DmView)
async def open_dm(data: OpenDm) -> tuple[Any, int]:
    """Open a DM with a participant: 201 when it is new, 200 when it existed."""
    actor = await caller()
    dm, created = await node().dms.open(actor, data.participant_id)
    return reply(dm.to_json(), 201 if created else 200)


@bp.delete("/api/dms/<room_id>")
@answers(Ok)
async def hide_dm(room_id: str) -> tuple[Any, int]:
    """Hide a DM from the caller's list until a new message arrives."""
    actor = await caller()
    await node().dms.hide(actor, room_id)
    return reply({"ok": True})
