"""Custom roles, templates, role assignment, and rooms' permission rules
(spec §2.3, §4.11, §4.12). Decisions are :func:`authorize`'s; this module
changes what it decides by (the :class:`Policy` mirror, after each commit).

No escalation: nobody creates, edits, deletes or assigns a role at or above
their own priority, grants a permission they do not hold, or changes the role
of a participant at or above their own priority. The owner (999) is the only
role above admin, so nobody can make another owner.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any

from sqlalchemy.engine import Connection

from ..broker import Broker
from ..errors import BadRequest, Conflict, Forbidden, NotFound
from ..events import ParticipantLeft
from ..ids import is_ulid, new_id
from ..records import Participant, now_ms
from ..store import Database, outbox
from ..store import accounts as accounts_repo
from ..store import roles as repo
from ..store import rooms as rooms_repo
from .accounts import Accounts
from .authz import (
    BUILTIN_ROLES,
    PERMISSIONS,
    PRESETS,
    Actor,
    Override,
    Policy,
    Role,
    RoomRef,
    authorize,
    authorize_above,
    authorize_grant,
)
from .delivery import Delivery

__all__ = ["ROOM_PERMISSIONS", "TEMPLATES", "Roles"]

_ROLE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,39}")
#: permissions a room's rules may allow or deny (those checked with a room)
ROOM_PERMISSIONS = (
    "rooms.read",
    "rooms.join",
    "messages.send",
    "messages.react",
    "messages.edit",
    "messages.delete",
)

#: role templates: id -> (default name, default priority, description, permissions)
TEMPLATES: dict[str, tuple[str, int, str, tuple[str, ...]]] = {
    "observer": (
        "observer",
        100,
        "reads rooms and participants; never posts",
        ("participants.read", "rooms.read", "rooms.join", "roles.read"),
    ),
    "announcer": (
        "announcer",
        350,
        "posts announcements; no reactions, DMs or rooms of its own",
        ("participants.read", "rooms.read", "rooms.join", "messages.send"),
    ),
    "support_agent": (
        "support-agent",
        380,
        "answers people in rooms and DMs, uses models",
        (
            "participants.read",
            "rooms.read",
            "rooms.join",
            "messages.send",
            "messages.react",
            "dms.create",
            "models.use",
        ),
    ),
    "moderator_bot": (
        "moderator-bot",
        650,
        "keeps rooms tidy: edits and deletes others' messages",
        (
            "participants.read",
            "rooms.read",
            "rooms.join",
            "messages.send",
            "messages.react",
            "messages.edit",
            "messages.delete",
        ),
    ),
    "tool_runner": (
        "tool-runner",
        320,
        "a tool-only bot: takes commands, posts results, uses models",
        ("participants.read", "rooms.read", "rooms.join", "messages.send", "models.use"),
    ),
}


class Roles:
    """Owns custom roles, role templates, role assignment and rooms'
    permission rules (overrides and presets), and keeps the node's
    :class:`Policy` in step after each commit (module docstring). Used by
    ``GET /api/permissions``, ``/api/roles`` and its routes,
    ``PUT /api/participants/:participantId/role`` and
    ``/api/rooms/:roomId/permissions`` and its ``/preset``.
    Reached as ``node.roles``.
    """

    def __init__(
        self,
        db: Database,
        broker: Broker,
        accounts: Accounts,
        policy: Policy,
        delivery: Delivery,
    ) -> None:
        self._db = db
        self._broker = broker
        self._accounts = accounts
        self._policy = policy
        self._delivery = delivery

    async def load(self) -> None:
        """Fill the policy from the store (at start-up)."""

        def read(
            conn: Connection,
        ) -> tuple[list[Role], list[Override], list[tuple[str, str]]]:
            return repo.list_roles(conn), repo.list_overrides(conn), repo.list_presets(conn)

        self._policy.load(*await self._db.read(read))

    # the catalog and roles ----------------------------------------------------

    def permissions(self, actor: Actor) -> list[dict[str, object]]:
        """The catalog of permissions the node checks, each with its
        description, category and the lowest built-in role holding it by
        default: for anyone who may read roles (``roles.read``).

        Raises:
            Forbidden: the actor may not read roles.
        """
        authorize(actor, "roles.read")
        return [p.to_json() for p in PERMISSIONS.values()]

    def list_roles(self, actor: Actor) -> list[dict[str, object]]:
        """Every role, built-in and custom, highest priority first (then by
        name), with the permissions each holds: for anyone who may read roles
        (``roles.read``).

        Raises:
            Forbidden: the actor may not read roles.
        """
        authorize(actor, "roles.read")
        roles = sorted(self._policy.roles.values(), key=lambda r: (-r.priority, r.name))
        return [r.to_json() for r in roles]

    def templates(self, actor: Actor) -> list[dict[str, object]]:
        """The templates a custom role can be made from
        (:meth:`create_from_template`), each with its default name and
        priority, description and permissions: for anyone who may read roles
        (``roles.read``).

        Raises:
            Forbidden: the actor may not read roles.
        """
        authorize(actor, "roles.read")
        return [
            {
                "templateId": template_id,
                "name": name,
                "priority": priority,
                "description": description,
                "permissions": list(permissions),
            }
            for template_id, (name, priority, description, permissions) in TEMPLATES.items()
        ]

    async def create_role(
        self,
        actor: Actor,
        *,
        name: str,
        priority: Any,
        permissions: Any,
        description: str = "",
    ) -> Role:
        """A custom role (by default only the owner may: ``roles.manage``).

        Raises:
            Forbidden: may not manage roles, or would escalate.
            BadRequest: a bad name, priority or permission.
            Conflict: the name is taken.
        """
        authorize(actor, "roles.manage")
        role = Role(
            self._check_name(name),
            self._check_priority(actor, priority),
            self._check_permissions(actor, permissions),
            new_id(),
            _description(description),
            now_ms(),
        )

        def insert(conn: Connection) -> None:
            if not repo.insert_role(conn, role, actor.participant_id):
                raise Conflict(f"a role named {role.name} exists", "role_exists")
            _policy_changed(conn)

        await self._db.write(insert, then=lambda _: self._policy.put_role(role))
        return role

    async def create_from_template(
        self, actor: Actor, template_id: str, *, name: str | None, priority: Any
    ) -> Role:
        """A custom role made from the template *template_id*: its
        description and permissions, and its name and priority unless
        *name* or *priority* say otherwise. Checked as :meth:`create_role`
        (``roles.manage``, no escalation).

        Raises:
            NotFound: no such template (``template_not_found``), before any
                permission is checked.
            Forbidden: may not manage roles, a priority at or above the
                actor's (``role_too_high``), or a permission of the template
                the actor does not hold (``permission_too_high``).
            BadRequest: a bad name or priority.
            Conflict: the name is taken, or a built-in role's (``role_exists``).
        """
        template = TEMPLATES.get(template_id)
        if template is None:
            raise NotFound("no such template", "template_not_found")
        default_name, default_priority, description, permissions = template
        return await self.create_role(
            actor,
            name=name or default_name,
            priority=default_priority if priority is None else priority,
            permissions=list(permissions),
            description=description,
        )

    async def update_role(
        self,
        actor: Actor,
        role_id: str,
        *,
        name: str | None,
        priority: Any,
        permissions: Any,
        description: str | None,
    ) -> Role:
        """Change a custom role; its holders follow a rename.

        Raises:
            Forbidden: a built-in role, or one at or above the caller's priority.
            NotFound: no such role.
        """
        authorize(actor, "roles.manage")
        current = self._custom(actor, role_id)
        role = Role(
            current.name if name is None else self._check_name(name),
            current.priority if priority is None else self._check_priority(actor, priority),
            current.permissions
            if permissions is None
            else self._check_permissions(actor, permissions),
            current.role_id,
            current.description if description is None else _description(description),
            current.created_at,
        )

        def write(conn: Connection) -> list[str]:
            if not repo.update_role(conn, role):
                raise Conflict(f"a role named {role.name} exists", "role_exists")
            _policy_changed(conn)
            if role.name != current.name:
                moved = accounts_repo.move_role(conn, current.name, role.name)
                for participant_id in moved:
                    outbox.change(conn, outbox.Invalidate("participant", participant_id))
                return moved
            return []

        def changed(moved: list[str]) -> None:
            self._policy.put_role(role, replacing=current.name)
            for participant_id in moved:
                self._accounts.forget(participant_id)

        await self._db.write(write, then=changed)
        await self._delivery.refresh()
        return role

    async def delete_role(self, actor: Actor, role_id: str) -> None:
        """Delete a custom role no one holds (409 ``role_in_use`` otherwise:
        reassign its holders first, so nobody's access changes silently)."""
        authorize(actor, "roles.manage")
        role = self._custom(actor, role_id)

        def write(conn: Connection) -> None:
            holders = accounts_repo.count_with_role(conn, role.name)
            if holders:
                raise Conflict(
                    f"{holders} participant(s) hold this role: assign them another first",
                    "role_in_use",
                )
            repo.delete_role(conn, role_id)
            _policy_changed(conn)

        await self._db.write(write, then=lambda _: self._policy.drop_role(role.name))

    def _custom(self, actor: Actor, role_id: str) -> Role:
        if role_id in BUILTIN_ROLES:
            raise Forbidden("built-in roles cannot be changed or deleted", "builtin_role")
        role = next((r for r in self._policy.roles.values() if r.role_id == role_id), None)
        if role is None:
            raise NotFound("no such role", "role_not_found")
        authorize_above(actor, role.priority, "that role is at or above your own", "role_too_high")
        return role

    def _check_name(self, name: Any) -> str:
        if not isinstance(name, str) or not _ROLE_NAME.fullmatch(name):
            raise BadRequest(
                "a role name is 1-40 characters: a-z first, then a-z 0-9 _ -", "invalid_name"
            )
        if name in BUILTIN_ROLES:
            raise Conflict(f"{name} is a built-in role", "role_exists")
        return name

    def _check_priority(self, actor: Actor, priority: Any) -> int:
        if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 998:
            raise BadRequest("priority must be a whole number from 1 to 998", "invalid_priority")
        authorize_above(
            actor,
            priority,
            f"a role's priority must be below your own ({actor.priority})",
            "role_too_high",
        )
        return priority

    def _check_permissions(self, actor: Actor, permissions: Any) -> frozenset[str]:
        if not isinstance(permissions, list) or not all(isinstance(p, str) for p in permissions):
            raise BadRequest("permissions must be a list of permission names", "invalid_field")
        unknown = sorted(set(permissions) - set(PERMISSIONS))
        if unknown:
            raise BadRequest(
                f"unknown permissions: {', '.join(unknown)[:200]}", "unknown_permission"
            )
        authorize_grant(actor, permissions)
        return frozenset(permissions)

    # assigning roles ----------------------------------------------------------

    async def _participant(self, participant_id: object) -> Participant:
        """The participant *participant_id*.

        Raises:
            NotFound: ``participant_not_found`` (also for a malformed id).
        """
        found = None
        if isinstance(participant_id, str) and is_ulid(participant_id):
            found = await self._db.read(
                lambda conn: accounts_repo.get_participant(conn, participant_id)
            )
        if found is None:
            raise NotFound("no such participant", "participant_not_found")
        return found

    async def assign(self, actor: Actor, participant_id: str, role_name: Any) -> Participant:
        """Give a participant a role: only a participant below the caller's
        priority, and only a role below it.

        Raises:
            Forbidden: may not assign roles, or would escalate.
            NotFound: no such participant or role.
        """
        authorize(actor, "participants.role")
        role = self._policy.role(role_name) if isinstance(role_name, str) else None
        if role is None:
            raise NotFound("no such role", "role_not_found")
        authorize_above(
            actor, role.priority, "you may assign only roles below your own", "role_too_high"
        )
        authorize_grant(actor, role.held())
        target = await self._participant(participant_id)
        authorize_above(
            actor,
            self._policy.priority(target.role),
            "you may change the role only of participants below you",
            "participant_too_high",
        )
        updated = await self._accounts.set_role(participant_id, role.name)
        if updated is None:
            raise NotFound("no such participant", "participant_not_found")
        await self._delivery.refresh(participant_id)
        return updated

    # room rules ---------------------------------------------------------------

    async def room_rules(self, actor: Actor, room_id: str) -> dict[str, Any]:
        """The room's preset and overrides (anyone who may read rooms)."""
        authorize(actor, "rooms.read")
        await self._room(actor, room_id)
        return {
            "roomId": room_id,
            "preset": self._policy.presets.get(room_id),
            "overrides": [o.to_json() for o in self._policy.overrides(room_id)],
        }

    async def set_override(
        self,
        actor: Actor,
        room_id: str,
        *,
        target_type: Any,
        target: Any,
        permission: Any,
        effect: Any,
    ) -> Override:
        """Allow or deny *permission* in a room to a role or a participant
        (room creators, and admins and above). Members who may no longer be
        in the room (a ``rooms.join`` denial) are removed from it.

        Raises:
            Forbidden: may not set the room's rules, or would escalate.
            BadRequest: bad values; a DM.
            NotFound: no such room, role or participant.
        """
        room = await self._room(actor, room_id)
        authorize(actor, "rooms.permissions", RoomRef(room_id, room.kind, room.created_by))
        if permission not in ROOM_PERMISSIONS:
            raise BadRequest(
                f"permission must be one of {', '.join(ROOM_PERMISSIONS)}", "invalid_permission"
            )
        if effect not in ("allow", "deny"):
            raise BadRequest("effect must be allow or deny", "invalid_effect")
        if target_type == "role":
            role = self._policy.role(target) if isinstance(target, str) else None
            if role is None:
                raise NotFound("no such role", "role_not_found")
            target_priority = role.priority
        elif target_type == "participant":
            found = await self._participant(target)
            target_priority = self._policy.priority(found.role)
        else:
            raise BadRequest("targetType must be role or participant", "invalid_target")
        # a room's creator keeps order in it: it may deny its members,
        # even those of its own rank (never itself); other rules only for
        # those below one (docs/roles.md)
        creator_denies = (
            effect == "deny"
            and target_type == "participant"
            and room.created_by == actor.participant_id
            and target != actor.participant_id
            and target_priority <= actor.priority
        )
        if not creator_denies:
            authorize_above(
                actor,
                target_priority,
                "you may set rules only for those below you",
                "target_too_high",
            )
        if effect == "allow":
            authorize_grant(actor, [permission])
        override = Override(new_id(), room_id, target_type, str(target), permission, effect)

        def put(conn: Connection) -> Override:
            # replacing a rule is undoing it: not one set by someone at or above
            setter = repo.override_setter(conn, room_id, target_type, str(target), permission)
            self._check_setters(conn, actor, [setter])
            _policy_changed(conn)
            return repo.put_override(conn, override, actor.participant_id, now_ms())

        stored = await self._db.write(put, then=self._policy.add_override)
        await self._evict(room_id)
        await self._delivery.refresh()
        return stored

    async def remove_override(self, actor: Actor, room_id: str, override_id: str) -> None:
        """Remove the rule *override_id* from a room (room creators, and
        admins and above: ``rooms.permissions``); nobody removes a rule set
        by someone at or above them. Open subscriptions see the change at
        once.

        Raises:
            NotFound: no such room (``room_not_found``), or no such rule in
                it (``override_not_found``).
            BadRequest: the room is a DM (``is_dm``).
            Forbidden: may not set the room's rules, or the rule was set by
                someone at or above the actor (``rule_set_above``).
        """
        room = await self._room(actor, room_id)
        authorize(actor, "rooms.permissions", RoomRef(room_id, room.kind, room.created_by))
        if not any(o.override_id == override_id for o in self._policy.overrides(room_id)):
            raise NotFound("no such override in this room", "override_not_found")

        def remove(conn: Connection) -> None:
            self._check_setters(conn, actor, repo.rule_setters(conn, room_id, override_id)[1])
            repo.delete_override(conn, room_id, override_id)
            _policy_changed(conn)

        await self._db.write(
            remove, then=lambda _: self._policy.remove_override(room_id, override_id)
        )
        await self._delivery.refresh()

    async def apply_preset(self, actor: Actor, room_id: str, preset: Any) -> dict[str, Any]:
        """Apply a preset; ``default`` clears the preset and every override."""
        room = await self._room(actor, room_id)
        authorize(actor, "rooms.permissions", RoomRef(room_id, room.kind, room.created_by))
        if preset not in PRESETS:
            raise BadRequest(f"preset must be one of {', '.join(PRESETS)}", "invalid_preset")
        value = None if preset == "default" else str(preset)

        def preset_set(conn: Connection) -> None:
            # a new preset replaces the one there; default also clears every override
            preset, overrides = repo.rule_setters(conn, room_id)
            self._check_setters(conn, actor, preset + overrides if value is None else preset)
            repo.set_preset(conn, room_id, value, actor.participant_id)
            _policy_changed(conn)

        await self._db.write(preset_set, then=lambda _: self._policy.set_preset(room_id, value))
        await self._evict(room_id)
        await self._delivery.refresh()
        return await self.room_rules(actor, room_id)

    def _check_setters(self, conn: Connection, actor: Actor, setters: list[str | None]) -> None:
        """Refuse to undo a rule someone at or above *actor* set: a room's
        creator cannot lift the mute an admin put on it (``docs/roles.md``).
        Its own rules, and rules of participants who are gone, it may.

        Raises:
            Forbidden: ``rule_set_above``.
        """
        for setter in set(setters):
            if setter is None or setter == actor.participant_id:
                continue
            found = accounts_repo.get_participant(conn, setter)
            if found is None:
                continue
            authorize_above(
                actor,
                self._policy.priority(found.role),
                "a rule here was set by someone at or above you: only they or those"
                " above them change it",
                "rule_set_above",
            )

    async def _room(self, actor: Actor, room_id: str) -> Any:
        room = (
            await self._db.read(lambda conn: rooms_repo.get_room(conn, room_id))
            if is_ulid(room_id)
            else None
        )
        if room is None:
            raise NotFound("no such room", "room_not_found")
        if room.kind == "dm":
            raise BadRequest("direct-message rooms have no permission rules", "is_dm")
        return room

    async def _evict(self, room_id: str) -> None:
        """Remove the members who may no longer join the room (e.g. bots from a
        ``humans_only`` room): they leave it like anyone leaving, so no
        transport sends them its events any more."""
        ref = RoomRef(room_id)
        gone: list[Participant] = []
        for participant_id in self._broker.members(room_id):
            member = await self._accounts.actor_of(participant_id)
            if member is None:
                continue
            try:
                authorize(member, "rooms.join", ref)
            except Forbidden:
                found = await self._db.read(
                    partial(accounts_repo.get_participant, participant_id=participant_id)
                )
                if found is not None:
                    gone.append(found)
        for participant in gone:

            def write(conn: Connection, participant: Participant = participant) -> None:
                if rooms_repo.remove_member(conn, room_id, participant.participant_id):
                    outbox.emit(conn, ParticipantLeft(room_id, participant=participant))
                    outbox.change(conn, outbox.Leave(room_id, participant.participant_id))

            await self._db.write(write)


def _policy_changed(conn: Connection) -> None:
    """Record that roles or room rules changed: other processes reload theirs."""
    outbox.change(conn, outbox.Invalidate("policy", ""))


def _description(value: Any) -> str:
    if not isinstance(value, str) or len(value) > 500:
        raise BadRequest("description must be a string of at most 500 characters", "invalid_field")
    return value
