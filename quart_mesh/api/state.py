"""World state, what is new, and polling (spec §4.1, §4.7)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from ..errors import BadRequest
from ._common import body, caller, node, reply

bp = Blueprint("state", __name__)


@bp.get("/api/state")
@bp.get("/api/snapshot")
async def state() -> tuple[Any, int]:
    actor = await caller()
    return reply(await node().world.snapshot(actor))


@bp.get("/api/status")
async def status() -> tuple[Any, int]:
    actor = await caller()
    return reply(await node().world.status(actor))


@bp.post("/api/poll")
async def poll() -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    cursor = fields.data.get("cursor")
    if cursor is not None and (isinstance(cursor, bool) or not isinstance(cursor, str | int)):
        raise BadRequest("cursor must be a string", "invalid_field")
    limit = fields.opt_number("limit")
    if limit is not None and not limit.is_integer():
        raise BadRequest("limit must be a whole number", "invalid_field")
    result = await node().polling.poll(
        actor,
        cursor=cursor,
        mentions_only=bool(fields.opt_bool("mentionsOnly")),
        wait_seconds=fields.opt_number("timeout") or 0.0,
        limit=None if limit is None else int(limit),
    )
    return reply(result.to_json())
