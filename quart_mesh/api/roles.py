"""Roles and permissions (spec §4.11), role assignment, and rooms' permission
rules (spec §4.12)."""

from __future__ import annotations

from typing import Any, Literal

from quart import Blueprint

from ..errors import BadRequest
from ._common import caller, node, reply
from .contract import Body, Query, Shape, accepts, answers, query
from .objects import Id, Ok, ParticipantView

bp = Blueprint("roles", __name__)


class PermissionInfo(Shape):
    """A permission of the catalog, and the lowest built-in role holding it."""

    name: str
    description: str
    category: str
    default_role: str
    default_priority: int


class RoleInfo(Shape):
    """A role: built-in (``roleId`` is its name) or custom, with what it holds."""

    role_id: str
    name: str
    priority: int
    #: 1 (owner) to 4 (spectators and guests)
    tier: int
    builtin: bool
    description: str
    permissions: list[str]


class RoleTemplate(Shape):
    """A ready-made custom role: its default name, priority and permissions."""

    template_id: str
    name: str
    priority: int
    description: str
    permissions: list[str]


class CreateRole(Body):
    #: 1-40 characters: a-z first, then a-z 0-9 _ -
    name: str
    #: a whole number from 1 to 998, below the caller's own (needed: without
    #: it the answer is 400 ``invalid_priority``)
    priority: int | None = None
    #: permission names, each held by the caller; default none
    permissions: list[str] | None = None
    description: str | None = None

    codes = {"priority": "invalid_priority"}


class RoleFromTemplate(Body):
    template_id: str
    #: default: the template's name
    name: str | None = None
    #: default: the template's priority
    priority: int | None = None

    codes = {"priority": "invalid_priority"}


class UpdateRole(Body):
    """What is given changes; the rest stays."""

    name: str | None = None
    priority: int | None = None
    #: the role's whole new set of permissions
    permissions: list[str] | None = None
    description: str | None = None

    codes = {"priority": "invalid_priority"}


class RoleDeleted(Ok):
    role_id: str


class AssignRole(Body):
    #: the role's name
    role: str


class RoomOverride(Shape):
    """A room's rule for one permission: allow or deny it to a role or a participant."""

    override_id: Id
    room_id: Id
    target_type: Literal["role", "participant"]
    #: a role's name or a participant's id
    target: str
    permission: str
    effect: Literal["allow", "deny"]


class RoomRules(Shape):
    """A room's preset (null: none) and its overrides."""

    room_id: Id
    preset: str | None
    overrides: list[RoomOverride]


class SetOverride(Body):
    #: role or participant
    target_type: str
    #: a role's name or a participant's id
    target: str
    #: a permission checked in rooms (rooms.read, rooms.join, messages.*)
    permission: str
    #: allow or deny
    effect: str


class OverrideRef(Body):
    override_id: str | None = None


class OverrideRefQuery(Query):
    #: the override to remove, if not in the body
    override_id: str | None = None


class OverrideRemoved(Ok):
    override_id: str


class ApplyPreset(Body):
    #: announcements, humans_only, read_only, or default (no preset, no overrides)
    preset: str


@bp.get("/api/permissions")
@answers(list[PermissionInfo])
async def permissions() -> tuple[Any, int]:
    """The catalog of permissions the node checks."""
    return reply(node().roles.permissions(await caller()))


@bp.get("/api/roles")
@answers(list[RoleInfo])
async def list_roles() -> tuple[Any, int]:
    """Every role, built-in and custom, highest priority first."""
    return reply(node().roles.list_roles(await caller()))


@bp.post("/api/roles")
@accepts(CreateRole)
@answers(RoleInfo, 201)
async def create_role(data: CreateRole) -> tuple[Any, int]:
    """Create a custom role (below the caller's priority, with permissions it holds)."""
    actor = await caller()
    role = await node().roles.create_role(
        actor,
        name=data.name,
        priority=data.priority,
        permissions=[] if data.permissions is None else data.permissions,
        description=data.description or "",
    )
    return reply(role.to_json(), 201)


@bp.get("/api/roles/templates")
@answers(list[RoleTemplate])
async def templates() -> tuple[Any, int]:
    """The role templates a custom role can be made from."""
    return reply(node().roles.templates(await caller()))


@bp.post("/api/roles/from-template")
@accepts(RoleFromTemplate)
@answers(RoleInfo, 201)
async def from_template(data: RoleFromTemplate) -> tuple[Any, int]:
    """Create a custom role from a template (its name and priority may be changed)."""
    actor = await caller()
    role = await node().roles.create_from_template(
        actor, data.template_id, name=data.name, priority=data.priority
    )
    return reply(role.to_json(), 201)


@bp.put("/api/roles/<role_id>")
@accepts(UpdateRole)
@answers(RoleInfo)
async def update_role(role_id: str, data: UpdateRole) -> tuple[Any, int]:
    """Change a custom role; its holders follow a rename."""
    actor = await caller()
    role = await node().roles.update_role(
        actor,
        role_id,
        name=data.name,
        priority=data.priority,
        permissions=data.permissions,
        description=data.description,
    )
    return reply(role.to_json())


@bp.delete("/api/roles/<role_id>")
@answers(RoleDeleted)
async def delete_role(role_id: str) -> tuple[Any, int]:
    """Delete a custom role that nobody holds."""
    await node().roles.delete_role(await caller(), role_id)
    return reply({"ok": True, "roleId": role_id})


@bp.put("/api/participants/<participant_id>/role")
@accepts(AssignRole)
@answers(ParticipantView)
async def assign_role(participant_id: str, data: AssignRole) -> tuple[Any, int]:
    """Give a participant below the caller a role below the caller's."""
    actor = await caller()
    participant = await node().roles.assign(actor, participant_id, data.role)
    return reply(node().accounts.with_presence(participant).to_json())


@bp.get("/api/rooms/<room_id>/permissions")
@answers(RoomRules)
async def room_rules(room_id: str) -> tuple[Any, int]:
    """A room's permission rules: its preset and overrides."""
    return reply(await node().roles.room_rules(await caller(), room_id))


@bp.post("/api/rooms/<room_id>/permissions")
@accepts(SetOverride)
@answers(RoomOverride, 201)
async def set_override(room_id: str, data: SetOverride) -> tuple[Any, int]:
    """Allow or deny a permission in a room to a role or a participant."""
    actor = await caller()
    override = await node().roles.set_override(
        actor,
        room_id,
        target_type=data.target_type,
        target=data.target,
        permission=data.permission,
        effect=data.effect,
    )
    return reply(override.to_json(), 201)


@bp.delete("/api/rooms/<room_id>/permissions")
@query(OverrideRefQuery)
@accepts(OverrideRef)
@answers(OverrideRemoved)
async def remove_override(
    room_id: str, data: OverrideRef, args: OverrideRefQuery
) -> tuple[Any, int]:
    """Remove a room's override: ``overrideId`` in the body (or the query string)."""
    actor = await caller()
    override_id = data.override_id or args.override_id
    if not override_id:
        raise BadRequest("overrideId is required", "missing_field")
    await node().roles.remove_override(actor, room_id, override_id)
    return reply({"ok": True, "overrideId": override_id})


@bp.post("/api/rooms/<room_id>/permissions/preset")
@accepts(ApplyPreset)
@answers(RoomRules)
async def apply_preset(room_id: str, data: ApplyPreset) -> tuple[Any, int]:
    """Apply a preset to a room (``default`` clears it and every override)."""
    actor = await caller()
    return reply(await node().roles.apply_preset(actor, room_id, data.preset))
