"""Repository: models behind the proxy, and their usage."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from .dialect import insert, insert_new
from .schema import llm_models, model_access, model_budgets, model_usage, model_usage_daily

__all__ = [
    "Access",
    "Budget",
    "StoredModel",
    "UsageRow",
    "add_daily",
    "add_usage",
    "daily_tokens",
    "delete_access",
    "delete_model",
    "insert_model",
    "list_access",
    "list_budgets",
    "list_daily",
    "list_models",
    "list_usage",
    "put_access",
    "put_budget",
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


# who may use a model, budgets, tokens per day (decision 0053) ---------------


@dataclass(frozen=True, slots=True)
class Access:
    name: str
    min_role: str | None
    guests: bool | None


@dataclass(frozen=True, slots=True)
class Budget:
    #: ``role`` or ``participant``
    scope: str
    subject: str
    requests_per_minute: int | None
    tokens_per_day: int | None


def list_access(conn: Connection) -> list[Access]:
    rows = conn.execute(sa.select(model_access))
    return [Access(r.name, r.min_role, r.guests) for r in rows]


def put_access(conn: Connection, access: Access, *, at: int) -> None:
    values = {"min_role": access.min_role, "guests": access.guests, "updated_at": at}
    query = insert(conn, model_access).values(name=access.name, **values)
    conn.execute(query.on_conflict_do_update(index_elements=["name"], set_=values))


def delete_access(conn: Connection, name: str) -> None:
    conn.execute(model_access.delete().where(model_access.c.name == name))


def list_budgets(conn: Connection) -> list[Budget]:
    rows = conn.execute(
        sa.select(model_budgets).order_by(model_budgets.c.scope, model_budgets.c.subject)
    )
    return [Budget(r.scope, r.subject, r.requests_per_minute, r.tokens_per_day) for r in rows]


def put_budget(conn: Connection, budget: Budget, *, at: int) -> None:
    """Store *budget*; one with neither field set is removed (all inherited)."""
    where = sa.and_(
        model_budgets.c.scope == budget.scope, model_budgets.c.subject == budget.subject
    )
    if budget.requests_per_minute is None and budget.tokens_per_day is None:
        conn.execute(model_budgets.delete().where(where))
        return
    values = {
        "requests_per_minute": budget.requests_per_minute,
        "tokens_per_day": budget.tokens_per_day,
        "updated_at": at,
    }
    query = insert(conn, model_budgets).values(scope=budget.scope, subject=budget.subject, **values)
    conn.execute(query.on_conflict_do_update(index_elements=["scope", "subject"], set_=values))


def add_daily(conn: Connection, participant_id: str, day: int, *, tokens: int) -> None:
    """Count one request and *tokens* for *day* (the participant's older days go)."""
    table = model_usage_daily
    conn.execute(
        table.delete().where(table.c.participant_id == participant_id, table.c.day < day - 1)
    )
    query = insert(conn, model_usage_daily).values(
        participant_id=participant_id, day=day, requests=1, tokens=tokens
    )
    conn.execute(
        query.on_conflict_do_update(
            index_elements=["participant_id", "day"],
            set_={
                "requests": model_usage_daily.c.requests + 1,
                "tokens": model_usage_daily.c.tokens + tokens,
            },
        )
    )


def daily_tokens(conn: Connection, participant_id: str, day: int) -> int:
    found = conn.execute(
        sa.select(model_usage_daily.c.tokens).where(
            model_usage_daily.c.participant_id == participant_id,
            model_usage_daily.c.day == day,
        )
    ).scalar()
    return int(found or 0)


def list_daily(
    conn: Connection, day: int, participant_id: str | None = None
) -> dict[str, tuple[int, int]]:
    """participant id -> (requests, tokens) on *day* (of one participant, if given)."""
    query = sa.select(model_usage_daily).where(model_usage_daily.c.day == day)
    if participant_id is not None:
        query = query.where(model_usage_daily.c.participant_id == participant_id)
    rows = conn.execute(query)
    return {r.participant_id: (int(r.requests), int(r.tokens)) for r in rows}
