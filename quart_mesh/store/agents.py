"""Repository: agents (bot participants and how they connect)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..models import Participant
from .accounts import participant_from_row
from .schema import agents, participants

__all__ = ["AgentRow", "insert_agent", "is_agent", "list_agents"]


@dataclass(frozen=True, slots=True)
class AgentRow:
    participant: Participant
    managed: bool
    webhook_url: str | None
    model: str | None = None
    rooms: tuple[str, ...] = ()
    needs_key: bool = False


def insert_agent(
    conn: Connection,
    agent_id: str,
    *,
    managed: bool,
    webhook_url: str | None,
    webhook_secret: str | None,
    created_by: str | None,
    created_at: int,
    model: str | None = None,
    rooms: list[str] | None = None,
    needs_key: bool = False,
) -> None:
    conn.execute(
        agents.insert().values(
            agent_id=agent_id,
            managed=managed,
            webhook_url=webhook_url,
            webhook_secret=webhook_secret,
            created_by=created_by,
            created_at=created_at,
            model=model,
            rooms=None if rooms is None else json.dumps(rooms),
            needs_key=needs_key,
        )
    )


def is_agent(conn: Connection, agent_id: str) -> bool:
    query = sa.select(agents.c.agent_id).where(agents.c.agent_id == agent_id)
    return conn.execute(query).first() is not None


def list_agents(conn: Connection) -> list[AgentRow]:
    rows = conn.execute(
        sa.select(
            participants,
            agents.c.managed,
            agents.c.webhook_url,
            agents.c.model,
            agents.c.rooms,
            agents.c.needs_key,
        )
        .join(agents, agents.c.agent_id == participants.c.participant_id)
        .order_by(participants.c.name_key)
    )
    return [
        AgentRow(
            participant_from_row(row),
            bool(row.managed),
            row.webhook_url,
            row.model,
            tuple(json.loads(row.rooms)) if row.rooms else (),
            bool(row.needs_key),
        )
        for row in rows
    ]
