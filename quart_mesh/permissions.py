"""The permission catalog and the role records: what :func:`~quart_mesh.services.authz.authorize`
decides with, kept below the services so that the store can hold them too.

Built-in roles carry numeric priorities and hold every permission whose
lowest priority they reach; custom roles hold exactly what they list.
Tiers are derived from priority (``docs/roles.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

__all__ = [
    "ADMIN",
    "AGENT",
    "BUILTIN_ROLES",
    "MEMBER",
    "MODERATOR",
    "OWNER",
    "PERMISSIONS",
    "SPECTATOR",
    "SUPER_AGENT",
    "Override",
    "Permission",
    "Role",
    "tier_of",
]

OWNER, ADMIN, MODERATOR, SUPER_AGENT, MEMBER, AGENT, SPECTATOR = 999, 900, 700, 600, 400, 300, 50

BUILTIN_ROLES: Final = MappingProxyType(
    {
        "owner": OWNER,
        "admin": ADMIN,
        "moderator": MODERATOR,
        "super_agent": SUPER_AGENT,
        "member": MEMBER,
        "agent": AGENT,
        "spectator": SPECTATOR,
    }
)


@dataclass(frozen=True, slots=True)
class Permission:
    name: str
    description: str
    category: str
    #: the lowest built-in priority that holds it
    lowest: int

    def to_json(self) -> dict[str, object]:
        lowest_role = min(
            (r for r, p in BUILTIN_ROLES.items() if p >= self.lowest),
            key=lambda r: BUILTIN_ROLES[r],
        )
        return {
            "name": self.name,
            "description": self.description,
            "category": self.category,
            "defaultRole": lowest_role,
            "defaultPriority": self.lowest,
        }


def _catalog(*entries: tuple[str, str, str, int]) -> MappingProxyType[str, Permission]:
    return MappingProxyType({name: Permission(name, d, c, p) for name, d, c, p in entries})


#: every permission the node checks
PERMISSIONS: Final = _catalog(
    ("participants.read", "list participants and see their profiles", "participants", SPECTATOR),
    ("participants.delete", "delete participants", "participants", ADMIN),
    ("participants.role", "assign roles below one's own", "participants", ADMIN),
    ("rooms.read", "list rooms and read the rooms one is in", "rooms", SPECTATOR),
    ("rooms.join", "join and leave rooms", "rooms", SPECTATOR),
    ("rooms.create", "create rooms", "rooms", AGENT),
    ("rooms.delete", "delete any room (creators delete their own)", "rooms", ADMIN),
    (
        "rooms.permissions",
        "set a room's permission overrides and presets (creators for their rooms)",
        "rooms",
        ADMIN,
    ),
    ("messages.send", "send messages (guests only if the mesh allows it)", "messages", AGENT),
    ("messages.react", "add and remove reactions", "messages", AGENT),
    ("messages.edit", "edit others' messages (authors edit their own)", "messages", MODERATOR),
    (
        "messages.delete",
        "delete others' messages (authors delete their own)",
        "messages",
        MODERATOR,
    ),
    ("dms.create", "open direct-message rooms", "messages", AGENT),
    ("agents.bootstrap", "register bots when registration is not open", "agents", ADMIN),
    ("agents.spawn", "start managed bots", "agents", ADMIN),
    (
        "agents.private_webhook",
        "register webhook bots on private or loopback addresses",
        "agents",
        ADMIN,
    ),
    ("agents.delete", "remove agents", "agents", ADMIN),
    (
        "agents.command",
        "send commands to any agent (registrants command their own bots)",
        "agents",
        ADMIN,
    ),
    (
        "tasks.create",
        "create tasks for agents in a room and follow them (A2A task management)",
        "agents",
        SUPER_AGENT,
    ),
    ("models.use", "list models and use the model proxy", "models", SPECTATOR),
    ("models.manage", "add and remove models", "models", ADMIN),
    ("models.usage", "see model usage per participant", "models", ADMIN),
    ("identity.link", "link a DID and store its encrypted key", "identity", AGENT),
    ("vault.use", "keep encrypted entries in one's own vault", "identity", AGENT),
    ("roles.read", "list roles, templates and the permission catalog", "roles", SPECTATOR),
    ("roles.manage", "create, change and delete custom roles", "roles", OWNER),
    ("admin.stats", "see the node's statistics and setup checklist", "admin", ADMIN),
    ("mesh.settings", "change the mesh's settings", "admin", ADMIN),
    ("apps.read", "list one's own apps and read deployed ones", "apps", SPECTATOR),
    ("apps.create", "create and AI-generate apps, and change their source", "apps", AGENT),
    ("apps.deploy", "deploy one's apps to the app store and take them down", "apps", AGENT),
    ("apps.manage", "change, deploy and delete others' apps (owners: their own)", "apps", ADMIN),
    ("files.upload", "upload files (served publicly) and attach them to messages", "files", AGENT),
    ("files.unlimited", "keep uploads beyond the per-participant quota", "files", ADMIN),
    (
        "federation.manage",
        "request, accept, decline and end connections with other nodes",
        "federation",
        ADMIN,
    ),
)


@dataclass(frozen=True, slots=True)
class Role:
    name: str
    priority: int
    #: a custom role's permissions; ``None`` for built-in roles (by priority)
    permissions: frozenset[str] | None = None
    role_id: str | None = None
    description: str = ""
    created_at: int | None = None

    @property
    def builtin(self) -> bool:
        return self.permissions is None

    def holds(self, permission: str) -> bool:
        if self.permissions is None:
            return self.priority >= PERMISSIONS[permission].lowest
        return permission in self.permissions

    def held(self) -> list[str]:
        """Every permission this role holds, in catalog order."""
        return [p for p in PERMISSIONS if self.holds(p)]

    def to_json(self) -> dict[str, object]:
        held = self.held()
        return {
            "roleId": self.role_id or self.name,
            "name": self.name,
            "priority": self.priority,
            "tier": tier_of(self.priority),
            "builtin": self.builtin,
            "description": self.description,
            "permissions": held,
        }


@dataclass(frozen=True, slots=True)
class Override:
    """A room's rule for one permission: ``allow`` or ``deny`` to a role or a participant."""

    override_id: str
    room_id: str
    target_type: str  # role | participant
    target: str
    permission: str
    effect: str  # allow | deny

    def to_json(self) -> dict[str, str]:
        return {
            "overrideId": self.override_id,
            "roomId": self.room_id,
            "targetType": self.target_type,
            "target": self.target,
            "permission": self.permission,
            "effect": self.effect,
        }


def tier_of(priority: int) -> int:
    """Permission tier (1 highest) for a role priority."""
    if priority >= OWNER:
        return 1
    if priority >= SUPER_AGENT:
        return 2
    if priority >= MEMBER:
        return 3
    return 4
