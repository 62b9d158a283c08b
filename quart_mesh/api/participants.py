"""Participants (spec §4.5)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from ._common import caller, node, reply
from .contract import answers
from .objects import ParticipantView

bp = Blueprint("participants", __name__)


@bp.get("/api/participants")
@answers(list[ParticipantView])
async def list_participants() -> tuple[Any, int]:
    """Every participant of the mesh, with its presence."""
    actor = await caller()
    participants = await node().accounts.list_participants(actor)
    return reply([p.to_json() for p in participants])


@bp.get("/api/participants/<participant_id>")
@answers(ParticipantView)
async def get_participant(participant_id: str) -> tuple[Any, int]:
    """One participant, with its presence."""
    actor = await caller()
    participant = await node().accounts.get(actor, participant_id)
    return reply(participant.to_json())
