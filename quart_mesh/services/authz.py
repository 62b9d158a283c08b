"""Roles, permissions and the one access checkpoint: :func:`authorize`.

Every service calls :func:`authorize` before it acts; nothing else decides
access (DESIGN.md §2). :data:`PERMISSIONS` is the catalog of every permission
the node checks (``GET /api/permissions``): asking for one that is not in it
is a programming error (``KeyError``), so nothing can be checked that is not
listed.

Roles: the built-in roles carry numeric priorities and hold every permission
whose lowest priority they reach. Custom roles (``POST /api/roles``) have a
priority (which ranks them) and hold exactly the permissions they list.

Resolution of *permission* for an actor in a room (``docs/roles.md``):

1. the owner, and admins and above, are never restricted by room rules;
2. a room override for the participant (allow or deny), else
3. a room override for its role, else
4. the room's preset (``announcements``, ``humans_only``, ``read_only``), else
5. the role's own permissions.

Then a refusal is still lifted for the actor's own things (a room it created,
its message, a bot it registered) and for guests' sends when the mesh allows
them — unless a room override or preset denied it explicitly.

An actor capped at Tier 4 (:func:`capped_at_tier_4`: a federated
participant's relayed actions) gets nothing from an allow of steps 2 and 3
that the ``agent`` role does not hold: the next step decides instead.

Tiers are derived from priority: Tier 1 Mesh Architect (owner, 999), Tier 2
Super Agent/User (>= 600), Tier 3 Elevated (>= 400), Tier 4 Normal (below 400).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Final

from ..errors import Forbidden
from ..permissions import (
    ADMIN,
    BUILTIN_ROLES,
    MODERATOR,
    PERMISSIONS,
    Override,
    Permission,
    Role,
    tier_of,
)

__all__ = [
    "BUILTIN_ROLES",
    "PERMISSIONS",
    "PRESETS",
    "Actor",
    "Override",
    "Permission",
    "Policy",
    "Readable",
    "Role",
    "RoomRef",
    "authorize",
    "authorize_above",
    "authorize_grant",
    "capped_at_tier_4",
    "held_permissions",
    "may_read",
    "permitted",
    "priority_of",
    "readable_rooms",
    "tier_of",
]

#: permissions a participant holds on its own things (room, message, bot)
_OWN_ALLOWED: Final = frozenset(
    {
        "rooms.delete",
        "rooms.permissions",
        "messages.edit",
        "messages.delete",
        "agents.command",
        "apps.manage",
    }
)

#: room presets: name -> description (rules in :meth:`Policy._preset_rule`)
PRESETS: Final = MappingProxyType(
    {
        "announcements": (
            "only moderators and above post; others read and react,"
            " and do not edit or delete what they posted"
        ),
        "humans_only": "bots may not join, post or react (bots in the room are removed)",
        "read_only": (
            "nobody below admin posts or reacts, nor edits or deletes what they posted"
            " (moderators still remove others' messages)"
        ),
        "default": "no preset, and every override of the room cleared",
    }
)
_NOT_BY_BOTS_IN_HUMANS_ONLY: Final = frozenset({"rooms.join", "messages.send", "messages.react"})
#: what an author does to its own messages: a rule or preset that stops a
#: participant's posts stops these too (a muted member cannot post by
#: editing an old message); reactions have their own permission and rules
_AUTHORING: Final = frozenset({"messages.edit", "messages.delete"})


_BUILTIN_ROLE_OBJECTS: Final = {name: Role(name, p) for name, p in BUILTIN_ROLES.items()}


class Policy:
    """The node's roles and room rules (a mirror of the store, kept current by
    the services that change them); :func:`authorize` consults it.

    Copy-on-write: a change builds new mappings and swaps them in, never
    mutating one in place, so that :func:`authorize` may also run in the
    store's worker threads (inside a unit of work) while the event loop
    changes the policy."""

    def __init__(self) -> None:
        self.roles: dict[str, Role] = dict(_BUILTIN_ROLE_OBJECTS)
        self._overrides: dict[str, tuple[Override, ...]] = {}
        self.presets: dict[str, str] = {}

    def load(
        self,
        custom_roles: Iterable[Role],
        overrides: Iterable[Override],
        presets: Iterable[tuple[str, str]],
    ) -> None:
        roles = dict(_BUILTIN_ROLE_OBJECTS)
        for role in custom_roles:
            roles[role.name] = role
        by_room: dict[str, tuple[Override, ...]] = {}
        for override in overrides:
            by_room[override.room_id] = (*by_room.get(override.room_id, ()), override)
        self.roles, self._overrides, self.presets = roles, by_room, dict(presets)

    # changes (after they are stored) ------------------------------------------

    def put_role(self, role: Role, *, replacing: str | None = None) -> None:
        roles = dict(self.roles)
        if replacing is not None:
            roles.pop(replacing, None)
        roles[role.name] = role
        self.roles = roles

    def drop_role(self, name: str) -> None:
        if name not in BUILTIN_ROLES and name in self.roles:
            self.roles = {k: v for k, v in self.roles.items() if k != name}

    def add_override(self, override: Override) -> None:
        key = (override.target_type, override.target, override.permission)
        rules = tuple(
            o
            for o in self._overrides.get(override.room_id, ())
            if (o.target_type, o.target, o.permission) != key
        )
        self._overrides = {**self._overrides, override.room_id: (*rules, override)}

    def remove_override(self, room_id: str, override_id: str) -> None:
        rules = tuple(o for o in self._overrides.get(room_id, ()) if o.override_id != override_id)
        self._overrides = {**self._overrides, room_id: rules}

    def set_preset(self, room_id: str, preset: str | None) -> None:
        if preset is None:
            self.forget_room(room_id)
        else:
            self.presets = {**self.presets, room_id: preset}

    def forget_room(self, room_id: str) -> None:
        self.presets = {k: v for k, v in self.presets.items() if k != room_id}
        self._overrides = {k: v for k, v in self._overrides.items() if k != room_id}

    # questions ----------------------------------------------------------------

    def overrides(self, room_id: str) -> list[Override]:
        return list(self._overrides.get(room_id, ()))

    def role(self, name: str) -> Role | None:
        return self.roles.get(name)

    def priority(self, role: str) -> int:
        found = self.roles.get(role)
        return found.priority if found else 0

    def decide(
        self, actor: Actor, permission: str, room_id: str | None, owner_id: str | None = None
    ) -> tuple[bool, bool]:
        """(allowed, explicit): whether the room's rules or the role allow it,
        and whether a room rule decided (so ownership cannot lift a denial).
        *owner_id*: whose thing it is (a message's author)."""
        role = self.roles.get(actor.role)
        priority = role.priority if role else 0
        holds = role is not None and role.holds(permission)
        if room_id is not None and priority < ADMIN:
            # an author's edit or delete of its own message is posting: what
            # stops its posts (a rule, else a preset) stops those too, whatever
            # its role holds; editing and deleting others' (moderation) is not
            authoring = permission in _AUTHORING and owner_id == actor.participant_id
            send_rule = self._rule(actor, "messages.send", room_id) if authoring else None
            if send_rule is False:
                return False, True
            ruled = self._rule(actor, permission, room_id)
            if ruled is not None:
                return ruled, True
            preset = self.presets.get(room_id)
            if (
                authoring
                and send_rule is None
                and _preset_denies(preset, actor, priority, "messages.send")
            ):
                return False, True
            if _preset_denies(preset, actor, priority, permission):
                return False, True
        return holds, False

    def _rule(self, actor: Actor, permission: str, room_id: str) -> bool | None:
        """What the room's overrides say of *permission* for *actor*: the
        participant's own rule first, then its role's; None if neither.

        An actor capped at Tier 4 (:func:`capped_at_tier_4`) gets nothing
        from an allow beyond what ``agent`` holds: such an allow counts as
        absent (the next rule, the preset or the role decides), while a
        deny still holds."""
        rules = self._overrides.get(room_id, ())
        capped = actor.tier_4 and not self.roles["agent"].holds(permission)
        for target_type, target in (("participant", actor.participant_id), ("role", actor.role)):
            for override in rules:
                if (
                    override.permission == permission
                    and override.target_type == target_type
                    and override.target == target
                ):
                    if capped and override.effect == "allow":
                        break  # beyond Tier 4: as if there were no such rule
                    return override.effect == "allow"
        return None

    def ruled_rooms(self) -> frozenset[str]:
        """The rooms with overrides or a preset: the only rooms where a
        decision can differ from the role's own."""
        return frozenset(self._overrides) | frozenset(self.presets)


def _preset_denies(preset: str | None, actor: Actor, priority: int, permission: str) -> bool:
    if preset == "announcements":
        return permission == "messages.send" and priority < MODERATOR
    if preset == "humans_only":
        return actor.kind == "bot" and permission in _NOT_BY_BOTS_IN_HUMANS_ONLY
    if preset == "read_only":
        return permission in ("messages.send", "messages.react")
    return False


_DEFAULT_POLICY: Final = Policy()


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
    #: acting at most as Tier 4 (:func:`capped_at_tier_4`): a federated
    #: participant's relayed actions; room overrides allow it nothing that
    #: ``agent`` does not hold
    tier_4: bool = False
    #: the node's roles and room rules (built-in roles only, if not given)
    policy: Policy = field(default=_DEFAULT_POLICY, compare=False, repr=False)

    @property
    def priority(self) -> int:
        return self.policy.priority(self.role)


@dataclass(frozen=True, slots=True)
class RoomRef:
    """What :func:`authorize` needs to know about a room (or a thing in it)."""

    room_id: str
    kind: str = "room"
    #: the participant who owns the thing being acted on (room creator, message author)
    owner_id: str | None = None


def priority_of(role: str) -> int:
    """The priority of a built-in role (0 for others)."""
    return BUILTIN_ROLES.get(role, 0)


def authorize(
    actor: Actor, permission: str, room: RoomRef | None = None, *, owner_id: str | None = None
) -> None:
    """Allow or refuse *actor* doing *permission* (in *room*, if given; on a
    thing owned by *owner_id*, if given — e.g. the bot a participant registered).

    Raises:
        Forbidden: the actor may not.
        KeyError: *permission* is not in the catalog (a programming error).
    """
    if permission not in PERMISSIONS:
        raise KeyError(permission)
    if room is not None and owner_id is None:
        owner_id = room.owner_id
    allowed, explicit = actor.policy.decide(
        actor, permission, room.room_id if room is not None else None, owner_id
    )
    if allowed:
        return
    if not explicit:
        if permission in _OWN_ALLOWED and owner_id is not None and owner_id == actor.participant_id:
            return
        if permission == "messages.send" and actor.kind == "guest" and actor.guests_can_send:
            return
    where = " in this room" if explicit else ""
    raise Forbidden(f"your role ({actor.role}) may not do this{where}: {permission}", "forbidden")


def permitted(
    actor: Actor, permission: str, room: RoomRef | None = None, *, owner_id: str | None = None
) -> bool:
    """Whether :func:`authorize` allows it: for choices that are not refusals
    (what to show, which limit applies)."""
    try:
        authorize(actor, permission, room, owner_id=owner_id)
    except Forbidden:
        return False
    return True


def authorize_above(actor: Actor, priority: int, message: str, code: str) -> None:
    """Allow *actor* to act on a role, a participant or a rule target at
    *priority* only if it ranks strictly above it: nobody grants, changes or
    restricts what is at or above their own rank (``docs/roles.md``).

    Raises:
        Forbidden: with *message* and *code*.
    """
    if priority >= actor.priority:
        raise Forbidden(message, code)


def authorize_grant(actor: Actor, permissions: Iterable[str]) -> None:
    """Allow *actor* to hand out *permissions* (in a role it assigns, a
    custom role it makes or changes, a room rule that allows) only if its
    own role holds every one of them: nobody grants more than they hold
    (``docs/roles.md``). The owner holds everything.

    Raises:
        Forbidden: ``permission_too_high``, naming what the actor lacks.
    """
    own = actor.policy.role(actor.role)
    lacking = sorted({p for p in permissions if own is None or not own.holds(p)})
    if lacking:
        raise Forbidden(
            f"you cannot grant what you do not hold: {', '.join(lacking)}",
            "permission_too_high",
        )


def capped_at_tier_4(actor: Actor) -> Actor:
    """*actor* with at most the rights of Tier 4: a role above it counts as
    ``agent`` (the highest role of Tier 4), and so does a custom role that
    holds anything ``agent`` does not, whatever its priority; and a room
    override allows it nothing ``agent`` does not hold (:attr:`Actor.tier_4`;
    its denials still hold, and its rights on its own messages are as any
    author's). How a federated participant acts, whatever role or rules it
    was given here (spec §5.10)."""
    capped = replace(actor, tier_4=True)
    role = actor.policy.roles.get(actor.role)
    if role is None:  # a role that no longer exists holds nothing
        return capped
    if tier_of(role.priority) < 4:
        return replace(capped, role="agent")
    if role.permissions is not None:
        agent = actor.policy.roles["agent"]
        if any(not agent.holds(permission) for permission in role.permissions):
            return replace(capped, role="agent")
    return capped


def held_permissions(actor: Actor, room: RoomRef | None = None) -> list[str]:
    """The permissions :func:`authorize` grants *actor* (in *room*, if given),
    in catalog order: what a client may offer its user. Leaves out what the
    actor may do only on its own things (its messages, rooms and bots)."""
    held = []
    for permission in PERMISSIONS:
        try:
            authorize(actor, permission, room)
        except Forbidden:
            continue
        held.append(permission)
    return held


class Readable:
    """The rooms an actor may read, of those it is a member of: the one
    visibility decision (``DESIGN.md`` §2), as every path that hands out
    room content applies it: REST history and messages by id, polling,
    ``/api/status``, the snapshot, live delivery and resume, webhooks.

    Membership (or being a DM's party) is the store's and the broker's
    fact; this says which of those rooms :func:`authorize` lets the actor
    read (``rooms.read`` in the room: its role, the room's rules). Made by
    :func:`readable_rooms`; a snapshot of the policy when it was made (the
    broker is given a new one when roles or rules change).

    Calling it with a room id answers for that room. ``everywhere`` and
    ``exceptions`` are the same answer as data, for a query: every room but
    the exceptions, or none but them."""

    __slots__ = ("everywhere", "exceptions")

    def __init__(self, everywhere: bool, exceptions: frozenset[str]) -> None:
        self.everywhere = everywhere
        self.exceptions = exceptions

    def __call__(self, room_id: str) -> bool:
        return (room_id in self.exceptions) != self.everywhere

    @property
    def unrestricted(self) -> bool:
        """Every room the actor is in: nothing to filter."""
        return self.everywhere and not self.exceptions

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Readable)
            and self.everywhere == other.everywhere
            and self.exceptions == other.exceptions
        )

    def __hash__(self) -> int:
        return hash((self.everywhere, self.exceptions))

    def __repr__(self) -> str:
        return f"Readable(everywhere={self.everywhere}, exceptions={sorted(self.exceptions)})"


def may_read(actor: Actor, room_id: str) -> bool:
    """Whether *actor* may read room *room_id* if it is a member (or a DM's
    party): ``rooms.read`` in that room (see :class:`Readable`)."""
    return permitted(actor, "rooms.read", RoomRef(room_id))


def readable_rooms(actor: Actor) -> Readable:
    """The rooms *actor* may read (of those it is in), as the policy stands
    now: what its role says everywhere, except in the rooms whose rules say
    otherwise."""
    everywhere = permitted(actor, "rooms.read")
    exceptions = frozenset(
        room_id for room_id in actor.policy.ruled_rooms() if may_read(actor, room_id) != everywhere
    )
    return Readable(everywhere, exceptions)
