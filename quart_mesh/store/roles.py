"""Repository: custom roles, room overrides and room presets."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from ..permissions import Override, Role
from .dialect import insert, insert_new
from .schema import custom_roles, room_overrides, rooms

__all__ = [
    "delete_override",
    "delete_role",
    "insert_role",
    "list_overrides",
    "list_presets",
    "list_roles",
    "override_setter",
    "put_override",
    "rule_setters",
    "set_preset",
    "update_role",
]


def _role(row: Any) -> Role:
    return Role(
        row.name,
        row.priority,
        frozenset(json.loads(row.permissions)),
        row.role_id,
        row.description,
        row.created_at,
    )


def list_roles(conn: Connection) -> list[Role]:
    return [_role(r) for r in conn.execute(sa.select(custom_roles).order_by(custom_roles.c.name))]


def insert_role(conn: Connection, role: Role, created_by: str | None) -> bool:
    """False if the name is taken."""
    query = insert(conn, custom_roles).values(
        role_id=role.role_id,
        name=role.name,
        priority=role.priority,
        permissions=json.dumps(sorted(role.permissions or ())),
        description=role.description,
        created_by=created_by,
        created_at=role.created_at,
    )
    return insert_new(conn, query)


def update_role(conn: Connection, role: Role) -> bool:
    """Store *role*'s new name, priority, permissions; False if the name is taken."""
    taken = conn.execute(
        sa.select(custom_roles.c.role_id).where(
            custom_roles.c.name == role.name, custom_roles.c.role_id != role.role_id
        )
    ).first()
    if taken is not None:
        return False
    conn.execute(
        custom_roles.update()
        .where(custom_roles.c.role_id == role.role_id)
        .values(
            name=role.name,
            priority=role.priority,
            permissions=json.dumps(sorted(role.permissions or ())),
            description=role.description,
        )
    )
    return True


def delete_role(conn: Connection, role_id: str) -> None:
    conn.execute(custom_roles.delete().where(custom_roles.c.role_id == role_id))


def _override(row: Any) -> Override:
    return Override(
        row.override_id, row.room_id, row.target_type, row.target, row.permission, row.effect
    )


def list_overrides(conn: Connection) -> list[Override]:
    query = sa.select(room_overrides).order_by(
        room_overrides.c.room_id, room_overrides.c.override_id
    )
    return [_override(r) for r in conn.execute(query)]


def put_override(conn: Connection, override: Override, created_by: str, at: int) -> Override:
    """Insert or replace the room's rule for (target, permission); the stored
    rule keeps the id it had."""
    query = insert(conn, room_overrides).values(
        override_id=override.override_id,
        room_id=override.room_id,
        target_type=override.target_type,
        target=override.target,
        permission=override.permission,
        effect=override.effect,
        created_by=created_by,
        created_at=at,
    )
    query = query.on_conflict_do_update(
        index_elements=["room_id", "target_type", "target", "permission"],
        set_={"effect": override.effect, "created_by": created_by},
    )
    override_id = conn.execute(query.returning(room_overrides.c.override_id)).scalar_one()
    return Override(
        override_id,
        override.room_id,
        override.target_type,
        override.target,
        override.permission,
        override.effect,
    )


def delete_override(conn: Connection, room_id: str, override_id: str) -> bool:
    result = conn.execute(
        room_overrides.delete().where(
            room_overrides.c.room_id == room_id, room_overrides.c.override_id == override_id
        )
    )
    return result.rowcount > 0


def list_presets(conn: Connection) -> list[tuple[str, str]]:
    query = sa.select(rooms.c.room_id, rooms.c.preset).where(rooms.c.preset.is_not(None))
    return [(r.room_id, r.preset) for r in conn.execute(query)]


def rule_setters(
    conn: Connection, room_id: str, override_id: str | None = None
) -> tuple[list[str | None], list[str | None]]:
    """Who set the room's rules: (its preset's setter, the room's creator
    where none is recorded, as a list of none or one; each override's
    setter, only *override_id*'s if given)."""
    preset: list[str | None] = []
    if override_id is None:
        row = conn.execute(
            sa.select(rooms.c.preset, rooms.c.preset_set_by, rooms.c.created_by).where(
                rooms.c.room_id == room_id
            )
        ).first()
        if row is not None and row.preset is not None:
            preset.append(row.preset_set_by or row.created_by)
    query = sa.select(room_overrides.c.created_by).where(room_overrides.c.room_id == room_id)
    if override_id is not None:
        query = query.where(room_overrides.c.override_id == override_id)
    return preset, [row.created_by for row in conn.execute(query)]


def override_setter(
    conn: Connection, room_id: str, target_type: str, target: str, permission: str
) -> str | None:
    """Who set the room's rule for (target, permission), if there is one."""
    found: str | None = conn.execute(
        sa.select(room_overrides.c.created_by).where(
            room_overrides.c.room_id == room_id,
            room_overrides.c.target_type == target_type,
            room_overrides.c.target == target,
            room_overrides.c.permission == permission,
        )
    ).scalar()
    return found


def set_preset(
    conn: Connection, room_id: str, preset: str | None, set_by: str | None = None
) -> None:
    """Set the room's preset (by *set_by*); ``None`` also clears every
    override of the room."""
    conn.execute(
        rooms.update()
        .where(rooms.c.room_id == room_id)
        .values(preset=preset, preset_set_by=None if preset is None else set_by)
    )
    if preset is None:
        conn.execute(room_overrides.delete().where(room_overrides.c.room_id == room_id))
