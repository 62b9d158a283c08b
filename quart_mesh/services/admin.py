"""Admin: the node's statistics, the setup checklist and the mesh settings
(spec §4.14).

The mesh settings are the mesh's name, description, visibility, registration
mode and ``guestsCanSend``, plus the rate limits (``docs/rate-limits.md``). A
change applies at once and is stored, so it survives a restart. Making the
mesh private ends guest access: guest tokens are refused (401
``token_revoked``) and open guest sessions are closed. The size limits
(``Limits``) and the other start-up settings are not here, because changing
them needs a restart.

Rate limits set here are kept as overrides on top of the settings
(``MESH_RATE_*``). A rule set to ``"default"`` goes back to the settings'
value.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

import trio
from sqlalchemy.engine import Connection

from .._version import __version__
from ..broker import Broker
from ..config import RATE_RULES, Rate, RateLimits, Settings, check_role_multipliers, parse_rate
from ..disk import DiskSpace
from ..ends import EndReason
from ..errors import BadRequest, ConfigError, Forbidden
from ..faults import Faults
from ..ids import is_ulid
from ..records import MeshConfig
from ..store import Database, outbox
from ..store import admin as repo
from ..store import rooms as rooms_repo
from .accounts import Accounts, check_mesh_name, check_registration_mode, check_visibility
from .authz import Actor, authorize
from .presence import Presence
from .validation import check_description

__all__ = ["RULE_FIELDS", "Admin", "RateOverrides", "is_registry"]

log = logging.getLogger(__name__)

#: each rule's name in the API (camelCase) and what it counts per
RULE_FIELDS: Final = {
    "messages": ("messages", "participant"),
    "reactions": ("reactions", "participant"),
    "typing": ("typing", "participant and room"),
    "models": ("models", "participant"),
    "search": ("search", "participant"),
    "link_previews": ("linkPreviews", "participant"),
    "profile": ("profile", "participant"),
    "login_name": ("loginName", "login name and client address"),
    "login_slowdown": ("loginSlowdown", "login name (failed logins slow its logins down)"),
    "login_address": ("loginAddress", "client address"),
    "registration_address": ("registrationAddress", "client address"),
    "challenge_address": ("challengeAddress", "client address"),
    "federation_relay": ("federationRelay", "peer node"),
    "federation_stranger_address": ("federationStrangerAddress", "client address"),
    "registry_did": ("registryDid", "node DID"),
    "registry_address": ("registryAddress", "client address"),
}
_RULE_BY_FIELD: Final = {api: rule for rule, (api, _) in RULE_FIELDS.items()}
assert set(RULE_FIELDS) == set(RATE_RULES)


def is_registry(settings: Settings, mesh: MeshConfig | None) -> bool:
    """Whether this node lists public meshes: as the owner switched it
    (``registryEnabled``), else as ``MESH_REGISTRY_ENABLED`` says (decision 0057)."""
    if mesh is not None and mesh.registry_enabled is not None:
        return mesh.registry_enabled
    return settings.registry_enabled


@dataclass(frozen=True, slots=True)
class RateOverrides:
    """The rate limits an admin changed: a rule's new rate (``None``: off),
    and the role multipliers if changed. Everything else is the settings'."""

    rules: Mapping[str, Rate | None] = field(default_factory=dict)
    multipliers: Mapping[str, float] | None = None

    def apply(self, base: RateLimits) -> RateLimits:
        changes: dict[str, Any] = dict(self.rules)
        if self.multipliers is not None:
            changes["role_multipliers"] = self.multipliers
        return replace(base, **changes)

    def to_text(self) -> str | None:
        """As stored (JSON), or ``None`` when nothing is changed."""
        if not self.rules and self.multipliers is None:
            return None
        data: dict[str, Any] = {
            "rules": {
                rule: "off" if rate is None else rate.to_json() for rule, rate in self.rules.items()
            }
        }
        if self.multipliers is not None:
            data["roleMultipliers"] = dict(self.multipliers)
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_text(cls, text: str | None) -> RateOverrides:
        """Read stored overrides; entries that are no longer valid are dropped
        (and logged), so a bad row never stops the node."""
        if not text:
            return cls()
        try:
            data = json.loads(text)
        except ValueError:
            log.warning("ignoring stored rate limits: not JSON")
            return cls()
        rules: dict[str, Rate | None] = {}
        stored_rules = data.get("rules") if isinstance(data, dict) else None
        for rule, value in (stored_rules or {}).items():
            try:
                if rule not in RATE_RULES:
                    raise ConfigError(f"unknown rule {rule!r}")
                rules[rule] = None if value == "off" else _rate_from_json(value)
            except (ConfigError, BadRequest) as error:
                log.warning("ignoring stored rate limit %s: %s", rule, error)
        multipliers = data.get("roleMultipliers") if isinstance(data, dict) else None
        if multipliers is not None:
            try:
                if not isinstance(multipliers, dict):
                    raise ConfigError("not an object")
                check_role_multipliers(multipliers)
            except ConfigError as error:
                log.warning("ignoring stored role multipliers: %s", error)
                multipliers = None
        return cls(rules, multipliers)


class Admin:
    """Statistics, the setup checklist and the mesh settings of *node*."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        accounts: Accounts,
        presence: Presence,
        broker: Broker,
        sessions: Callable[[], int],
        *,
        disk: DiskSpace | None = None,
        uploads_disk: Callable[[], DiskSpace | None] | None = None,
        faults: Faults | None = None,
    ) -> None:
        self._settings = settings
        #: the data folder's free space and floor, and the active faults (stats)
        self._disk = disk
        #: the uploads folder's, when it is on another filesystem
        self._uploads_disk = uploads_disk
        self._faults = faults
        self._db = db
        self._accounts = accounts
        self._presence = presence
        self._broker = broker
        #: how many WebSocket sessions are open (the realtime component knows)
        self._sessions = sessions
        self._started_at = time.monotonic()
        self._rate = accounts.rate_limits
        self._overrides = RateOverrides()
        #: one settings change at a time (each builds on the one before)
        self._lock = trio.Lock()

    async def load(self) -> None:
        """Apply the rate limits an admin stored; called once the store is open."""
        self._overrides = RateOverrides.from_text(await self._db.read(repo.get_rate_limits))
        self._rate.configure(self._overrides.apply(self._settings.rate_limits))

    # statistics -----------------------------------------------------------------

    async def stats(self, actor: Actor) -> dict[str, Any]:
        """``GET /api/admin/stats``.

        Raises:
            Forbidden: the actor lacks ``admin.stats``.
        """
        authorize(actor, "admin.stats")
        counts = await self._db.read(repo.count_everything)
        by_kind = counts.participants
        uploads_disk = self._uploads_disk() if self._uploads_disk is not None else None
        return {
            "participants": {
                "total": sum(by_kind.values()),
                "humans": by_kind.get("human", 0),
                "bots": by_kind.get("bot", 0),
                "guests": by_kind.get("guest", 0),
                "online": len(self._presence.online()),
            },
            "rooms": counts.rooms.get("room", 0),
            "dms": counts.rooms.get("dm", 0),
            "messages": counts.messages,
            "websocketSessions": self._sessions(),
            "broker": self._broker.statistics().to_json(),
            "models": {
                "requests": counts.model_requests,
                "errors": counts.model_errors,
                "promptTokens": counts.prompt_tokens,
                "completionTokens": counts.completion_tokens,
            },
            "rateLimits": self._rate.statistics(),
            "uptime": round(time.monotonic() - self._started_at, 3),
            "version": __version__,
            "disk": self._disk.to_json() if self._disk is not None else None,
            "uploadsDisk": uploads_disk.to_json() if uploads_disk is not None else None,
            "faults": [] if self._faults is None else [f.to_json() for f in self._faults.active()],
        }

    async def setup_status(self, actor: Actor) -> dict[str, Any]:
        """``GET /api/admin/setup-status``: the first-run checklist.

        Raises:
            Forbidden: the actor lacks ``admin.stats``.
        """
        authorize(actor, "admin.stats")
        mesh = self._accounts.mesh
        counts = await self._db.read(repo.count_everything)
        online = self._presence.online()
        steps = [
            ("owner_created", "Create the owner account", mesh is not None),
            ("mesh_named", "Name the mesh", mesh is not None and bool(mesh.name)),
            ("visibility_chosen", "Choose public or private", mesh is not None),
            ("first_room", "Create the first room", counts.rooms.get("room", 0) > 0),
            (
                "model_configured",
                "Configure a model",
                bool(self._settings.models) or counts.stored_models > 0,
            ),
            (
                "bot_connected",
                "Connect a bot",
                any(seen or bot in online for bot, seen in counts.bots.items()),
            ),
        ]
        return {
            "complete": all(done for _, _, done in steps),
            "steps": [{"id": i, "label": label, "done": done} for i, label, done in steps],
        }

    # mesh settings --------------------------------------------------------------

    def settings(self, actor: Actor) -> dict[str, Any]:
        """``GET /api/admin/mesh/settings``.

        Raises:
            Forbidden: the actor lacks ``mesh.settings``, or before setup.
        """
        authorize(actor, "mesh.settings")
        return self._render(self._mesh())

    async def update_settings(
        self,
        actor: Actor,
        *,
        name: str | None = None,
        description: str | None = None,
        visibility: str | None = None,
        registration_mode: str | None = None,
        guests_can_send: bool | None = None,
        default_room_id: str | None = None,
        registry_enabled: bool | None = None,
        rate_limits: Any = None,
        role_multipliers: Any = None,
        link_previews: bool | None = None,
    ) -> dict[str, Any]:
        """``PUT /api/admin/mesh/settings``: change what is given (``None``:
        unchanged), all or nothing, and apply it at once.

        *rate_limits* maps API rule names to ``{"count", "per", "burst"?}``,
        a rate string (``"20/10s:30"``), ``"off"`` or ``"default"``;
        *role_multipliers* is a whole new map of role to number, or ``"default"``.
        *default_room_id* is an ordinary room of this node, or ``""`` for none.
        *registry_enabled* makes this node a registry of public meshes (or
        not), whatever ``MESH_REGISTRY_ENABLED`` says; *link_previews* turns
        link previews on or off, whatever ``MESH_LINK_PREVIEWS`` says.

        Raises:
            Forbidden: the actor lacks ``mesh.settings``, or before setup.
            BadRequest: a bad value (the codes of setup, ``invalid_rate_limits``,
                ``invalid_role_multipliers``).
        """
        authorize(actor, "mesh.settings")
        async with self._lock:
            old = self._mesh()
            mesh = old
            if name is not None:
                mesh = replace(mesh, name=check_mesh_name(name))
            if description is not None:
                check_description(description, self._settings.limits)
                mesh = replace(mesh, description=description)
            if visibility is not None:
                check_visibility(visibility)
                mesh = replace(mesh, visibility=visibility)
            if registration_mode is not None:
                check_registration_mode(registration_mode)
                mesh = replace(mesh, registration_mode=registration_mode)
            if guests_can_send is not None:
                mesh = replace(mesh, guests_can_send=guests_can_send)
            if default_room_id is not None:
                mesh = replace(mesh, default_room_id=default_room_id or None)
            if registry_enabled is not None:
                mesh = replace(mesh, registry_enabled=registry_enabled)
            if link_previews is not None:
                mesh = replace(mesh, link_previews=link_previews)
            overrides = self._changed_overrides(rate_limits, role_multipliers)
            effective = overrides.apply(self._settings.rate_limits)
            text = overrides.to_text()

            def write(conn: Connection) -> int | None:
                """The unit (it may run more than once: ``Database.write``);
                how many guests were signed out, if the mesh went private."""
                new_default = mesh.default_room_id
                if new_default is not None and new_default != old.default_room_id:
                    room = rooms_repo.get_room(conn, new_default) if is_ulid(new_default) else None
                    if room is None or room.kind != "room" or room.origin is not None:
                        raise BadRequest(
                            "defaultRoomId must name an ordinary room of this node, or be ''",
                            "invalid_default_room",
                        )
                repo.update_mesh_settings(conn, mesh, text)
                outbox.change(conn, outbox.Invalidate("mesh", ""))
                if old.visibility == "public" and mesh.visibility != "public":
                    # every guest's sessions close (on every process); their
                    # tokens are refused from now on (``Accounts.authenticate``)
                    guests = repo.guest_ids(conn)
                    for guest in guests:
                        outbox.change(conn, outbox.Disconnect(guest, EndReason.REVOKED))
                    return len(guests)
                return None

            signed_out = await self._db.write(write)
            if signed_out is not None:  # once, after the commit
                log.info("the mesh is private now: %d guest(s) signed out", signed_out)
            self._accounts.mesh_changed(mesh)
            self._overrides = overrides
            self._rate.configure(effective)
        return self._render(mesh)

    async def reload(self) -> None:
        """Read the mesh settings and rate limits again (another process changed them)."""
        await self._accounts.load()
        await self.load()

    def _changed_overrides(self, rate_limits: Any, role_multipliers: Any) -> RateOverrides:
        rules = dict(self._overrides.rules)
        if rate_limits is not None:
            if not isinstance(rate_limits, dict):
                raise BadRequest("rateLimits must be an object of rules", "invalid_rate_limits")
            for api_name, value in rate_limits.items():
                rule = _RULE_BY_FIELD.get(api_name)
                if rule is None:
                    raise BadRequest(
                        f"unknown rate limit {str(api_name)[:40]!r}: one of "
                        + ", ".join(_RULE_BY_FIELD),
                        "invalid_rate_limits",
                    )
                if value is None:
                    continue
                if value == "default":
                    rules.pop(rule, None)
                elif value == "off":
                    rules[rule] = None
                else:
                    try:
                        rules[rule] = _rate_from_json(value)
                    except ConfigError as error:
                        raise BadRequest(f"{api_name}: {error}", "invalid_rate_limits") from None
        multipliers = self._overrides.multipliers
        if role_multipliers == "default":
            multipliers = None
        elif role_multipliers is not None:
            multipliers = self._checked_multipliers(role_multipliers)
        return RateOverrides(rules, multipliers)

    def _checked_multipliers(self, value: Any) -> dict[str, float]:
        if not isinstance(value, dict):
            raise BadRequest(
                'roleMultipliers must be an object such as {"agent": 2}, or "default"',
                "invalid_role_multipliers",
            )
        try:
            check_role_multipliers(value)
        except ConfigError as error:
            raise BadRequest(str(error), "invalid_role_multipliers") from None
        roles = self._accounts.policy.roles
        for role in value:
            if role not in roles:
                raise BadRequest(f"no role named {role[:64]!r}", "invalid_role_multipliers")
        return {role: float(factor) for role, factor in value.items()}

    @property
    def link_previews(self) -> bool:
        """Whether the node fetches link previews: as the owner switched
        them (``linkPreviews``), else as ``MESH_LINK_PREVIEWS`` says."""
        mesh = self._accounts.mesh
        if mesh is not None and mesh.link_previews is not None:
            return mesh.link_previews
        return self._settings.link_previews

    def _mesh(self) -> MeshConfig:
        mesh = self._accounts.mesh
        if mesh is None:
            raise Forbidden("the mesh is not set up yet", "not_initialized")
        return mesh

    def _render(self, mesh: MeshConfig) -> dict[str, Any]:
        config = self._rate.config
        rules: dict[str, Any] = {}
        for rule, (api_name, scope) in RULE_FIELDS.items():
            rate = config.rule(rule)
            rules[api_name] = {
                "count": rate.count if rate else None,
                "per": _seconds(rate.per) if rate else None,
                "burst": rate.burst if rate else None,
                "off": rate is None,
                "scope": scope,
                "source": "admin" if rule in self._overrides.rules else "settings",
            }
        return {
            "name": mesh.name,
            "description": mesh.description,
            "visibility": mesh.visibility,
            "registrationMode": mesh.registration_mode,
            "guestsCanSend": mesh.guests_can_send,
            "defaultRoomId": mesh.default_room_id,
            "registryEnabled": is_registry(self._settings, mesh),
            "registryEnabledSource": "settings" if mesh.registry_enabled is None else "admin",
            "rateLimits": rules,
            "roleMultipliers": dict(config.role_multipliers),
            "roleMultipliersSource": "settings" if self._overrides.multipliers is None else "admin",
            "linkPreviews": self.link_previews,
            "linkPreviewsSource": "settings" if mesh.link_previews is None else "admin",
            "rateLimitsEnabled": config.enabled,
            "rateLimitExemptAddresses": list(config.exempt_addresses),
        }


def _rate_from_json(value: Any) -> Rate:
    """A rate from ``{"count", "per", "burst"?}`` or a string such as ``"20/10s:30"``.

    Raises:
        ConfigError: anything else, or values out of range.
    """
    if isinstance(value, str):
        rate = parse_rate(value, "the rate")
        if rate is None:
            raise ConfigError('use "off" to turn a rule off')
        return rate
    if not isinstance(value, dict):
        raise ConfigError(
            'a rate is {"count", "per", "burst"}, a string such as "20/10s", or "off"'
        )
    burst = value.get("burst")
    return Rate(
        int(_number(value.get("count"), "count", whole=True)),
        _number(value.get("per"), "per", whole=False),
        0 if burst is None else int(_number(burst, "burst", whole=True)),
    )


def _number(value: Any, label: str, *, whole: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{label} must be a number")
    if not math.isfinite(value):
        raise ConfigError(f"{label} must be finite")
    if whole and value != int(value):
        raise ConfigError(f"{label} must be a whole number")
    return float(value)


def _seconds(value: float) -> float | int:
    """Whole seconds as an integer (``10``, not ``10.0``)."""
    return int(value) if float(value).is_integer() else value
