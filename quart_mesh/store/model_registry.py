"""Repository: models behind the proxy, and their usage."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .dialect import insert, insert_new
from .schema import llm_models, model_usage

__all__ = [
    "StoredModel",
    "UsageRow",
    "add_usage",
    "delete_model",
    "insert_model",
    "list_models",
    "list_usage",
]


@dataclass(frozen=True, slots=True)
class StoredModel:
    name: str
    base_url: str
    upstream_model: str | None
    #: the encrypted upstream key
    api_key: str | None
    created_by: str | None
    created_at: int


@dataclass(frozen=True, slots=True)
class UsageRow:
    participant_id: str
    model: str
    requests: int
    errors: int
    prompt_tokens: int
    completion_tokens: int
    updated_at: int


def list_models(conn: Connection) -> list[StoredModel]:
    rows = conn.execute(sa.select(llm_models).order_by(llm_models.c.name))
    return [
        StoredModel(r.name, r.base_url, r.upstream_model, r.api_key, r.created_by, r.created_at)
        for r in rows
    ]


def insert_model(conn: Connection, model: StoredModel) -> bool:
    """False if the name is taken."""
    query = insert(conn, llm_models).values(
        name=model.name,
        base_url=model.base_url,
        upstream_model=model.upstream_model,
        api_key=model.api_key,
        created_by=model.created_by,
        created_at=model.created_at,
    )
    return insert_new(conn, query)


def delete_model(conn: Connection, name: str) -> bool:
    return conn.execute(llm_models.delete().where(llm_models.c.name == name)).rowcount > 0


def add_usage(
    conn: Connection,
    participant_id: str,
    model: str,
    *,
    error: bool,
    prompt_tokens: int,
    completion_tokens: int,
    at: int,
) -> None:
    query = insert(conn, model_usage).values(
        participant_id=participant_id,
        model=model,
        requests=1,
        errors=int(error),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        updated_at=at,
    )
    conn.execute(
        query.on_conflict_do_update(
            index_elements=["participant_id", "model"],
            set_={
                "requests": model_usage.c.requests + 1,
                "errors": model_usage.c.errors + int(error),
                "prompt_tokens": model_usage.c.prompt_tokens + prompt_tokens,
                "completion_tokens": model_usage.c.completion_tokens + completion_tokens,
                "updated_at": at,
            },
        )
    )


def list_usage(conn: Connection) -> list[UsageRow]:
    rows = conn.execute(
        sa.select(model_usage).order_by(model_usage.c.participant_id, model_usage.c.model)
    )
    return [
        UsageRow(
            r.participant_id,
            r.model,
            r.requests,
            r.errors,
            r.prompt_tokens,
            r.completion_tokens,
            r.updated_at,
        )
        for r in rows
    ]
