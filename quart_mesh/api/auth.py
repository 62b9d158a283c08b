"""Authentication (spec §4.2, §5)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, request

from ..services.authz import held_permissions, tier_of
from ._common import bearer_token, body, caller, node, reply

bp = Blueprint("auth", __name__)


@bp.post("/api/auth/register")
async def register() -> tuple[Any, int]:
    fields = await body()
    session = await node().accounts.register(
        fields.req_str("name"), fields.req_str("password"), address=request.remote_addr
    )
    return reply(session.to_json(), 201)


@bp.post("/api/auth/login")
async def login() -> tuple[Any, int]:
    fields = await body()
    session = await node().accounts.login(
        fields.req_str("name"), fields.req_str("password"), address=request.remote_addr
    )
    return reply(session.to_json())


@bp.post("/api/auth/guest")
async def guest() -> tuple[Any, int]:
    fields = await body()
    session = await node().accounts.guest(fields.opt_str("name"), address=request.remote_addr)
    return reply(session.to_json(), 201)


@bp.get("/api/auth/me")
async def me() -> tuple[Any, int]:
    actor = await caller()
    participant = await node().accounts.get(actor, actor.participant_id)
    return reply(
        {
            **participant.to_json(),
            "kind": participant.kind,
            "priority": actor.priority,
            "tier": tier_of(actor.priority),
            "permissions": held_permissions(actor),
        }
    )


@bp.post("/api/auth/logout")
async def logout() -> tuple[Any, int]:
    actor = await caller()
    await node().accounts.logout(actor, bearer_token())
    return reply({"ok": True})
