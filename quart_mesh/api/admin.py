"""Admin and mesh settings (spec §4.14); the public ``GET /api/mesh/settings``
is in ``health.py``."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from ..errors import BadRequest
from ._common import body, caller, node, reply

bp = Blueprint("admin", __name__)


@bp.get("/api/admin/stats")
async def stats() -> tuple[Any, int]:
    actor = await caller()
    return reply(await node().admin.stats(actor))


@bp.get("/api/admin/setup-status")
async def setup_status() -> tuple[Any, int]:
    actor = await caller()
    return reply(await node().admin.setup_status(actor))


@bp.get("/api/admin/mesh/settings")
async def mesh_settings() -> tuple[Any, int]:
    actor = await caller()
    return reply(node().admin.settings(actor))


@bp.put("/api/admin/mesh/settings")
async def update_mesh_settings() -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    rate_limits = fields.data.get("rateLimits")
    if rate_limits is not None and not isinstance(rate_limits, dict):
        raise BadRequest("rateLimits must be an object", "invalid_field")
    multipliers = fields.data.get("roleMultipliers")
    if multipliers is not None and not isinstance(multipliers, dict | str):
        raise BadRequest('roleMultipliers must be an object or "default"', "invalid_field")
    result = await node().admin.update_settings(
        actor,
        name=fields.opt_str("name"),
        description=fields.opt_str("description"),
        visibility=fields.opt_str("visibility"),
        registration_mode=fields.opt_str("registrationMode"),
        guests_can_send=fields.opt_bool("guestsCanSend"),
        default_room_id=fields.opt_str("defaultRoomId"),
        rate_limits=rate_limits,
        role_multipliers=multipliers,
    )
    return reply(result)
