"""Health and first-run setup (spec §4.1, §4.2)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from ..services.accounts import DEFAULT_ROOM_NAME
from ._common import body, node, reply

bp = Blueprint("health", __name__)


@bp.get("/api/health")
async def health() -> tuple[Any, int]:
    result = await node().health()
    return reply(result, 200 if result["ok"] else 503)


@bp.get("/api/setup/status")
async def setup_status() -> tuple[Any, int]:
    return reply(node().accounts.setup_status())


@bp.post("/api/setup/init")
async def setup_init() -> tuple[Any, int]:
    fields = await body()
    session = await node().accounts.init_setup(
        name=fields.req_str("name"),
        password=fields.req_str("password"),
        mesh_name=fields.req_str("meshName"),
        description=_default(fields.opt_str("description"), ""),
        visibility=_default(fields.opt_str("visibility"), "public"),
        registration_mode=_default(fields.opt_str("registrationMode"), "open"),
        default_room_name=fields.opt_str("defaultRoomName") or DEFAULT_ROOM_NAME,
    )
    return reply(session.to_json(), 201)


@bp.get("/api/mesh/settings")
async def mesh_settings() -> tuple[Any, int]:
    mesh = node().accounts.mesh
    if mesh is None:
        return reply({"name": None, "description": "", "visibility": "private"})
    return reply(mesh.public_json())


def _default(value: str | None, default: str) -> str:
    return default if value is None else value
