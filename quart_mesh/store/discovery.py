"""Repository: what the node publishes about itself (the mesh manifest)."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .schema import agents, participants

__all__ = ["PublicAgent", "public_agents"]


@dataclass(frozen=True, slots=True)
class PublicAgent:
    agent_id: str
    name: str
    type: str


def public_agents(conn: Connection, limit: int) -> list[PublicAgent]:
    """Bots (never humans or guests), ordered by name, at most *limit*."""
    rows = conn.execute(
        sa.select(participants.c.participant_id, participants.c.name, participants.c.type)
        .join(agents, agents.c.agent_id == participants.c.participant_id)
        .order_by(participants.c.name_key)
        .limit(limit)
    )
    return [PublicAgent(row.participant_id, row.name, row.type) for row in rows]
