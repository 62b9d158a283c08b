"""Repository: agents (bot participants and how they connect)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..records import Participant
from .accounts import participant_from_row
from .schema import agent_commands, agents, managed_bots, participants

__all__ = [
    "A2AAgent",
    "AgentRow",
    "BotState",
    "CommandRow",
    "WebhookTarget",
    "a2a_agent",
    "a2a_agents",
    "agent_creator",
    "complete_command",
    "count_pending",
    "get_command",
    "insert_agent",
    "insert_command",
    "is_agent",
    "list_agents",
    "mark_delivered",
    "pending_commands",
    "record_managed_bot",
    "save_bot_states",
    "set_a2a",
    "set_delivery_cursor",
    "set_rooms",
    "webhook_targets",
]


@dataclass(frozen=True, slots=True)
class AgentRow:
    participant: Participant
    managed: bool
    webhook_url: str | None
    model: str | None = None
    rooms: tuple[str, ...] = ()
    needs_key: bool = False
    delivery_cursor: int | None = None
    #: a managed bot as the supervisor last reported it (``managed_bots``)
    state: BotState | None = None
    #: a managed bot's API key, sealed with the node secret (PostgreSQL only)
    sealed_key: str | None = None
    #: reachable over A2A (decision 0062)
    a2a: bool = False


@dataclass(frozen=True, slots=True)
class BotState:
    """What ``GET /api/agents`` shows of a managed bot's process."""

    status: str
    restarts: int = 0
    detail: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "restarts": self.restarts, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class CommandRow:
    command_id: str
    agent_id: str
    command: str
    args: dict[str, Any]
    sent_by: str | None
    created_at: int
    delivered_at: int | None = None
    completed_at: int | None = None
    ok: bool | None = None
    result: Any = None


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
    delivery_cursor: int | None = None,
    webhook_private_ok: bool = False,
    a2a: bool = False,
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
            delivery_cursor=delivery_cursor,
            webhook_private_ok=webhook_private_ok,
            a2a=a2a,
        )
    )


def is_agent(conn: Connection, agent_id: str) -> bool:
    query = sa.select(agents.c.agent_id).where(agents.c.agent_id == agent_id)
    return conn.execute(query).first() is not None


def agent_creator(conn: Connection, agent_id: str) -> tuple[bool, str | None]:
    """(whether *agent_id* is an agent, who registered it)."""
    query = sa.select(agents.c.created_by).where(agents.c.agent_id == agent_id)
    row = conn.execute(query).first()
    return (False, None) if row is None else (True, row.created_by)


def list_agents(conn: Connection) -> list[AgentRow]:
    rows = conn.execute(
        sa.select(
            participants,
            agents.c.managed,
            agents.c.webhook_url,
            agents.c.model,
            agents.c.rooms,
            agents.c.needs_key,
            agents.c.delivery_cursor,
            managed_bots.c.status,
            managed_bots.c.restarts,
            managed_bots.c.detail,
            managed_bots.c.sealed_key,
            agents.c.a2a,
        )
        .join(agents, agents.c.agent_id == participants.c.participant_id)
        .outerjoin(managed_bots, managed_bots.c.agent_id == agents.c.agent_id)
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
            row.delivery_cursor,
            None if row.status is None else BotState(row.status, row.restarts, row.detail),
            row.sealed_key,
            bool(row.a2a),
        )
        for row in rows
    ]


@dataclass(frozen=True, slots=True)
class A2AAgent:
    """A bot that is an A2A agent: what its card says of it."""

    agent_id: str
    name: str
    type: str
    description: str
    managed: bool


def _a2a_query() -> sa.Select[Any]:
    return (
        sa.select(
            participants.c.participant_id,
            participants.c.name,
            participants.c.type,
            participants.c.description,
            agents.c.managed,
        )
        .join(agents, agents.c.agent_id == participants.c.participant_id)
        .where(agents.c.a2a == sa.true())
    )


def a2a_agents(conn: Connection) -> list[A2AAgent]:
    """Every bot that is an A2A agent, by name."""
    rows = conn.execute(_a2a_query().order_by(participants.c.name_key))
    return [
        A2AAgent(r.participant_id, r.name, r.type, r.description, bool(r.managed)) for r in rows
    ]


def a2a_agent(conn: Connection, agent_id: str) -> A2AAgent | None:
    """*agent_id* if it is a bot that is an A2A agent."""
    row = conn.execute(_a2a_query().where(agents.c.agent_id == agent_id)).first()
    if row is None:
        return None
    return A2AAgent(row.participant_id, row.name, row.type, row.description, bool(row.managed))


def set_a2a(conn: Connection, agent_id: str, enabled: bool) -> None:
    conn.execute(agents.update().where(agents.c.agent_id == agent_id).values(a2a=enabled))


def record_managed_bot(conn: Connection, agent_id: str, *, sealed_key: str | None, at: int) -> None:
    """A managed bot was spawned: its state row (``starting``), with its
    sealed API key if it is to travel to another process."""
    conn.execute(
        managed_bots.insert().values(
            agent_id=agent_id,
            status="starting",
            restarts=0,
            detail=None,
            sealed_key=sealed_key,
            updated_at=at,
        )
    )


def save_bot_states(conn: Connection, states: dict[str, BotState], at: int) -> None:
    """Record what the supervisor reports of its bots (a bot deleted
    meanwhile has no row left to update: nothing happens)."""
    for agent_id, state in states.items():
        conn.execute(
            managed_bots.update()
            .where(managed_bots.c.agent_id == agent_id)
            .values(
                status=state.status,
                restarts=state.restarts,
                detail=state.detail,
                updated_at=at,
            )
        )


@dataclass(frozen=True, slots=True)
class WebhookTarget:
    agent_id: str
    url: str
    secret: str
    cursor: int
    private_ok: bool


def webhook_targets(conn: Connection, agent_id: str | None = None) -> list[WebhookTarget]:
    """Every webhook bot (or just *agent_id*) with where its deliveries are."""
    query = sa.select(
        agents.c.agent_id,
        agents.c.webhook_url,
        agents.c.webhook_secret,
        agents.c.delivery_cursor,
        agents.c.webhook_private_ok,
    ).where(agents.c.webhook_url.is_not(None))
    if agent_id is not None:
        query = query.where(agents.c.agent_id == agent_id)
    return [
        WebhookTarget(
            r.agent_id,
            r.webhook_url,
            r.webhook_secret,
            r.delivery_cursor or 0,
            r.webhook_private_ok,
        )
        for r in conn.execute(query)
    ]


def set_rooms(conn: Connection, agent_id: str, rooms: list[str]) -> None:
    """The rooms a managed bot still has to join when it starts."""
    conn.execute(
        agents.update().where(agents.c.agent_id == agent_id).values(rooms=json.dumps(rooms))
    )


def set_delivery_cursor(conn: Connection, agent_id: str, cursor: int) -> None:
    """How far a webhook bot was delivered, or a managed bot acknowledged;
    only ever forward (a process that ran the bot before may save late)."""
    current = agents.c.delivery_cursor
    conn.execute(
        agents.update()
        .where(agents.c.agent_id == agent_id, sa.or_(current.is_(None), current < cursor))
        .values(delivery_cursor=cursor)
    )


# commands -------------------------------------------------------------------


def _command(row: Any) -> CommandRow:
    return CommandRow(
        row.command_id,
        row.agent_id,
        row.command,
        json.loads(row.args),
        row.sent_by,
        row.created_at,
        row.delivered_at,
        row.completed_at,
        None if row.ok is None else bool(row.ok),
        None if row.result is None else json.loads(row.result),
    )


def insert_command(conn: Connection, command: CommandRow) -> None:
    conn.execute(
        agent_commands.insert().values(
            command_id=command.command_id,
            agent_id=command.agent_id,
            command=command.command,
            args=json.dumps(command.args),
            sent_by=command.sent_by,
            created_at=command.created_at,
        )
    )


def count_pending(conn: Connection, agent_id: str) -> int:
    query = (
        sa.select(sa.func.count())
        .select_from(agent_commands)
        .where(agent_commands.c.agent_id == agent_id, agent_commands.c.delivered_at.is_(None))
    )
    return int(conn.execute(query).scalar_one())


def pending_commands(
    conn: Connection, agent_id: str, limit: int, *, after: str | None = None
) -> list[CommandRow]:
    """Commands not delivered yet, oldest first; only those after the
    command *after* if given (ids are ULIDs: in the order they were sent)."""
    query = (
        sa.select(agent_commands)
        .where(agent_commands.c.agent_id == agent_id, agent_commands.c.delivered_at.is_(None))
        .order_by(agent_commands.c.command_id)
        .limit(limit)
    )
    if after is not None:
        query = query.where(agent_commands.c.command_id > after)
    return [_command(row) for row in conn.execute(query)]


def mark_delivered(conn: Connection, command_ids: list[str], at: int) -> None:
    conn.execute(
        agent_commands.update()
        .where(
            agent_commands.c.command_id.in_(command_ids), agent_commands.c.delivered_at.is_(None)
        )
        .values(delivered_at=at)
    )


def get_command(conn: Connection, command_id: str) -> CommandRow | None:
    query = sa.select(agent_commands).where(agent_commands.c.command_id == command_id)
    row = conn.execute(query).first()
    return None if row is None else _command(row)


def complete_command(conn: Connection, command_id: str, *, ok: bool, result: Any, at: int) -> None:
    """Record the agent's answer (a command can be answered once)."""
    conn.execute(
        agent_commands.update()
        .where(agent_commands.c.command_id == command_id)
        .values(
            completed_at=at,
            ok=ok,
            result=json.dumps(result),
            delivered_at=sa.func.coalesce(agent_commands.c.delivered_at, at),
        )
    )
