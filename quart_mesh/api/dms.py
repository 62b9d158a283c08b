"""Direct messages (spec §4.4)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from ..errors import BadRequest
from ._common import caller, node, reply
from .contract import Body, Shape, accepts, answers
from .objects import Id, Ok, ParticipantView, Timestamp

bp = Blueprint("dms", __name__)


class OpenDm(Body):
    #: the other participant of a 1:1 DM (give this or ``participantIds``)
    participant_id: str | None = None
    #: a group DM's other members: 2 to 8 distinct participants, oneself
    #: not among them (decision 0070)
    participant_ids: list[str] | None = None


class ReadReceipt(Shape):
    """Another member's read position in a DM."""

    participant_id: Id
    #: the newest message it has read
    cursor: str


class DmView(Shape):
    """A DM: its room, the other participant, its members."""

    room_id: Id
    #: ``dm`` for a 1:1 DM; a group DM's: its members' names
    name: str
    #: the other participant (in a group DM: the first other member)
    participant: ParticipantView
    #: every member, the caller first, then the others in join order
    members: list[ParticipantView]
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
    """Open a DM with a participant (``participantId``), or a group DM with
    2 to 8 others (``participantIds``): 201 when it is new, 200 when it
    existed (the same participant, the same set)."""
    actor = await caller()
    dms = node().dms
    if (data.participant_id is None) == (data.participant_ids is None):
        raise BadRequest("give participantId or participantIds (not both)", "missing_field")
    if data.participant_ids is not None:
        dm, created = await dms.open_group(actor, data.participant_ids)
    else:
        assert data.participant_id is not None
        dm, created = await dms.open(actor, data.participant_id)
    return reply(dm.to_json(), 201 if created else 200)


@bp.delete("/api/dms/<room_id>")
@answers(Ok)
async def hide_dm(room_id: str) -> tuple[Any, int]:
    """Hide a DM from the caller's list until a new message arrives."""
    actor = await caller()
    await node().dms.hide(actor, room_id)
    return reply({"ok": True})
