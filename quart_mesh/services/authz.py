"""Roles, permissions and the one access checkpoint: :func:`authorize`.

Every service calls :func:`authorize` before it acts; nothing else decides
access (DESIGN.md §2). Built-in roles carry numeric priorities; each
permission names the lowest priority that holds it. The permissions issue
adds custom roles and per-room overrides on top of this table.

Tiers are derived from priority (documented in ``docs/roles.md``):
Tier 1 Mesh Architect (owner, 999), Tier 2 Super Agent/User (>= 600),
Tier 3 Elevated (>= 400), Tier 4 Normal (below 400).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from ..errors import Forbidden

__all__ = [
    "BUILTIN_ROLES",
    "PERMISSIONS",
    "Actor",
    "RoomRef",
    "authorize",
    "priority_of",
    "tier_of",
]

BUILTIN_ROLES: Final = MappingProxyType(
    {
        "owner": 999,
        "admin": 900,
        "moderator": 700,
        "super_agent": 600,
        "member": 400,
        "agent": 300,
        "spectator": 50,
    }
)

OWNER, ADMIN, MODERATOR, AGENT, SPECTATOR = 999, 900, 700, 300, 50

#: permission -> (lowest priority that holds it, description)
PERMISSIONS: Final = MappingProxyType(
    {
        "participants.read": (SPECTATOR, "list participants"),
        "rooms.read": (SPECTATOR, "list rooms and read rooms one is a member of"),
        "rooms.join": (SPECTATOR, "join and leave rooms"),
        "rooms.create": (AGENT, "create rooms"),
        "rooms.delete": (ADMIN, "delete any room (creators may delete their own)"),
        "messages.send": (AGENT, "send messages (guests only if the mesh allows it)"),
        "messages.react": (AGENT, "add and remove reactions"),
        "messages.edit": (MODERATOR, "edit others' messages (authors edit their own)"),
        "messages.delete": (MODERATOR, "delete others' messages (authors delete their own)"),
        "dms.create": (AGENT, "open direct-message rooms"),
        "agents.command": (ADMIN, "send commands to any agent (creators command their own)"),
        "models.use": (SPECTATOR, "list models and use the model proxy"),
        "models.manage": (ADMIN, "add and remove models"),
        "mesh.admin": (ADMIN, "administer the mesh"),
    }
)

#: permissions that a room's creator or a message's author holds on their own things
_OWN_ALLOWED: Final = frozenset(
    {"rooms.delete", "messages.edit", "messages.delete", "agents.command"}
)


@dataclass(frozen=True, slots=True)
class Actor:
    """Who is acting: resolved from a token on every request."""

    participant_id: str
    name: str
    kind: str  # human | guest | bot
    type: str
    role: str
    #: the mesh lets guests post (mesh setting); only matters for guests
    guests_can_send: bool = False

    @property
    def priority(self) -> int:
        return priority_of(self.role)


@dataclass(frozen=True, slots=True)
class RoomRef:
    """What :func:`authorize` needs to know about a room (or a thing in it)."""

    room_id: str
    kind: str
    #: the participant who owns the thing being acted on (room creator, message author)
    owner_id: str | None = None


def priority_of(role: str) -> int:
    return BUILTIN_ROLES.get(role, 0)


def tier_of(priority: int) -> int:
    """Permission tier (1 highest) for a role priority."""
    if priority >= OWNER:
        return 1
    if priority >= 600:
        return 2
    if priority >= 400:
        return 3
    return 4


def authorize(
    actor: Actor, permission: str, room: RoomRef | None = None, *, owner_id: str | None = None
) -> None:
    """Allow or refuse *actor* doing *permission* (in *room*, if given; on a
    thing owned by *owner_id*, if given — e.g. the bot a participant registered).

    Raises:
        Forbidden: the actor lacks the permission.
        KeyError: *permission* is not a known permission (a programming error).
    """
    lowest, _ = PERMISSIONS[permission]
    if actor.priority >= lowest:
        return
    if room is not None and owner_id is None:
        owner_id = room.owner_id
    if permission in _OWN_ALLOWED and owner_id is not None and owner_id == actor.participant_id:
        return
    if permission == "messages.send" and actor.kind == "guest" and actor.guests_can_send:
        return
    raise Forbidden(f"your role ({actor.role}) may not do this: {permission}", "forbidden")
