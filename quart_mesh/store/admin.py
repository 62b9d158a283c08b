"""Repository: mesh settings an admin changes, and the node's statistics."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..records import MeshConfig
from .schema import llm_models, mesh_config, messages, model_usage, participants, rooms

__all__ = [
    "Counts",
    "count_everything",
    "get_rate_limits",
    "guest_ids",
    "update_mesh_settings",
]


@dataclass(frozen=True, slots=True)
class Counts:
    """What ``GET /api/admin/stats`` and the setup checklist count in the store."""

    #: participants by kind (human, guest, bot)
    participants: dict[str, int]
    #: rooms by kind (room, dm)
    rooms: dict[str, int]
    messages: int
    stored_models: int
    #: bot participants, and whether each has ever authenticated (``lastSeen`` set)
    bots: dict[str, bool]
    #: totals over every participant and model
    model_requests: int
    model_errors: int
    prompt_tokens: int
    completion_tokens: int


def update_mesh_settings(conn: Connection, config: MeshConfig, rate_limits: str | None) -> None:
    """Store the changeable mesh settings and the admin's rate limits (JSON or ``None``)."""
    conn.execute(
        mesh_config.update()
        .where(mesh_config.c.id == 1)
        .values(
            name=config.name,
            description=config.description,
            visibility=config.visibility,
            registration_mode=config.registration_mode,
            guests_can_send=config.guests_can_send,
            default_room_id=config.default_room_id,
            registry_enabled=config.registry_enabled,
            link_previews=config.link_previews,
            rate_limits=rate_limits,
        )
    )


def get_rate_limits(conn: Connection) -> str | None:
    """The admin's rate limits as stored (JSON), or ``None``."""
    value = conn.execute(
        sa.select(mesh_config.c.rate_limits).where(mesh_config.c.id == 1)
    ).scalar_one_or_none()
    return None if value is None else str(value)


def guest_ids(conn: Connection) -> list[str]:
    query = sa.select(participants.c.participant_id).where(participants.c.kind == "guest")
    return [row.participant_id for row in conn.execute(query)]


def count_everything(conn: Connection) -> Counts:
    by_kind = {
        row.kind: int(row.n)
        for row in conn.execute(
            sa.select(participants.c.kind, sa.func.count().label("n")).group_by(participants.c.kind)
        )
    }
    room_kinds = {
        row.kind: int(row.n)
        for row in conn.execute(
            sa.select(rooms.c.kind, sa.func.count().label("n")).group_by(rooms.c.kind)
        )
    }
    message_count = conn.execute(sa.select(sa.func.count()).select_from(messages)).scalar_one()
    stored_models = conn.execute(sa.select(sa.func.count()).select_from(llm_models)).scalar_one()
    bots = {
        row.participant_id: row.last_seen_at is not None
        for row in conn.execute(
            sa.select(participants.c.participant_id, participants.c.last_seen_at).where(
                participants.c.kind == "bot"
            )
        )
    }
    usage = conn.execute(
        sa.select(
            sa.func.coalesce(sa.func.sum(model_usage.c.requests), 0),
            sa.func.coalesce(sa.func.sum(model_usage.c.errors), 0),
            sa.func.coalesce(sa.func.sum(model_usage.c.prompt_tokens), 0),
            sa.func.coalesce(sa.func.sum(model_usage.c.completion_tokens), 0),
        )
    ).one()
    return Counts(
        participants=by_kind,
        rooms=room_kinds,
        messages=int(message_count),
        stored_models=int(stored_models),
        bots=bots,
        model_requests=int(usage[0]),
        model_errors=int(usage[1]),
        prompt_tokens=int(usage[2]),
        completion_tokens=int(usage[3]),
    )
