"""Roles and permissions (spec §4.11), role assignment, and rooms' permission
rules (spec §4.12)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, request

from ..errors import BadRequest
from ._common import body, caller, node, reply

bp = Blueprint("roles", __name__)


@bp.get("/api/permissions")
async def permissions() -> tuple[Any, int]:
    return reply(node().roles.permissions(await caller()))


@bp.get("/api/roles")
async def list_roles() -> tuple[Any, int]:
    return reply(node().roles.list_roles(await caller()))


@bp.post("/api/roles")
async def create_role() -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    role = await node().roles.create_role(
        actor,
        name=fields.req_str("name"),
        priority=fields.data.get("priority"),
        permissions=fields.data.get("permissions", []),
        description=fields.opt_str("description") or "",
    )
    return reply(role.to_json(), 201)


@bp.get("/api/roles/templates")
async def templates() -> tuple[Any, int]:
    return reply(node().roles.templates(await caller()))


@bp.post("/api/roles/from-template")
async def from_template() -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    role = await node().roles.create_from_template(
        actor,
        fields.req_str("templateId"),
        name=fields.opt_str("name"),
        priority=fields.data.get("priority"),
    )
    return reply(role.to_json(), 201)


@bp.put("/api/roles/<role_id>")
async def update_role(role_id: str) -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    role = await node().roles.update_role(
        actor,
        role_id,
        name=fields.opt_str("name"),
        priority=fields.data.get("priority"),
        permissions=fields.data.get("permissions"),
        description=fields.opt_str("description"),
    )
    return reply(role.to_json())


@bp.delete("/api/roles/<role_id>")
async def delete_role(role_id: str) -> tuple[Any, int]:
    await node().roles.delete_role(await caller(), role_id)
    return reply({"ok": True, "roleId": role_id})


@bp.put("/api/participants/<participant_id>/role")
async def assign_role(participant_id: str) -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    participant = await node().roles.assign(actor, participant_id, fields.req_str("role"))
    return reply(node().accounts.with_presence(participant).to_json())


@bp.get("/api/rooms/<room_id>/permissions")
async def room_rules(room_id: str) -> tuple[Any, int]:
    return reply(await node().roles.room_rules(await caller(), room_id))


@bp.post("/api/rooms/<room_id>/permissions")
async def set_override(room_id: str) -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    override = await node().roles.set_override(
        actor,
        room_id,
        target_type=fields.req_str("targetType"),
        target=fields.req_str("target"),
        permission=fields.req_str("permission"),
        effect=fields.req_str("effect"),
    )
    return reply(override.to_json(), 201)


@bp.delete("/api/rooms/<room_id>/permissions")
async def remove_override(room_id: str) -> tuple[Any, int]:
    """Remove an override: ``overrideId`` in the body (or the query string)."""
    actor = await caller()
    fields = await body()
    override_id = fields.opt_str("overrideId") or request.args.get("overrideId")
    if not override_id:
        raise BadRequest("overrideId is required", "missing_field")
    await node().roles.remove_override(actor, room_id, override_id)
    return reply({"ok": True, "overrideId": override_id})


@bp.post("/api/rooms/<room_id>/permissions/preset")
async def apply_preset(room_id: str) -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    return reply(await node().roles.apply_preset(actor, room_id, fields.req_str("preset")))
