"""Participants (spec §4.5)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from ._common import caller, node, reply

bp = Blueprint("participants", __name__)


@bp.get("/api/participants")
async def list_participants() -> tuple[Any, int]:
    actor = await caller()
    participants = await node().accounts.list_participants(actor)
    return reply([p.to_json() for p in participants])


@bp.get("/api/participants/<participant_id>")
async def get_participant(participant_id: str) -> tuple[Any, int]:
    actor = await caller()
    participant = await node().accounts.get(actor, participant_id)
    return reply(participant.to_json())
