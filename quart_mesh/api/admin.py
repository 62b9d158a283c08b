"""Admin and mesh settings (spec §4.14); the public ``GET /api/mesh/settings``
is in ``health.py``."""

from __future__ import annotations

from typing import Any, Literal

from quart import Blueprint

from ._common import caller, node, reply
from .contract import Body, Shape, accepts, answers
from .objects import Id

bp = Blueprint("admin", __name__)


class ParticipantCounts(Shape):
    total: int
    humans: int
    bots: int
    guests: int
    #: online now (on this node)
    online: int


class BrokerCounts(Shape):
    """This process's event broker."""

    subscribers: int
    queued_events: int
    drops: int
    published: int
    rooms: int


class ModelCounts(Shape):
    """The model proxy's use, over every participant and model."""

    requests: int
    errors: int
    prompt_tokens: int
    completion_tokens: int


class RateLimitCounts(Shape):
    enabled: bool
    #: keys this process tracks (shared rules on PostgreSQL are not counted)
    tracked_keys: int
    #: refusals by rule, since start
    refused: dict[str, int]


class DiskStats(Shape):
    """A folder's filesystem, in bytes: below ``floor`` free, uploads and app
    sources are refused (``MESH_DISK_FLOOR``; 0: no floor). When it cannot be
    measured (the folder or its mount gone), the numbers are null and
    ``error`` says why."""

    free: int | None
    total: int | None
    floor: int | None
    #: why free space cannot be measured (null when it was)
    error: str | None


class ActiveFault(Shape):
    """A fault the node is riding out now (``docs/operations.md``)."""

    #: disk_full, store_unavailable, store_corrupt, descriptors, peer_down, receiver_failing
    kind: str
    #: which peer or receiver (null for the node's own)
    key: str | None
    #: the cause of its latest failure
    cause: str
    #: when it started (milliseconds since the epoch)
    since: int
    #: failures since it started
    failures: int


class AdminStats(Shape):
    """The node's statistics."""

    participants: ParticipantCounts
    rooms: int
    dms: int
    messages: int
    websocket_sessions: int
    broker: BrokerCounts
    models: ModelCounts
    rate_limits: RateLimitCounts
    #: seconds since the node started
    uptime: float
    version: str
    #: the data folder's free space against the floor
    disk: DiskStats | None
    #: the uploads folder's filesystem, when ``MESH_UPLOADS_DIR`` puts it on
    #: another one (null otherwise)
    uploads_disk: DiskStats | None
    #: the faults active now (empty when all is well)
    faults: list[ActiveFault]


class SetupStep(Shape):
    id: str
    label: str
    done: bool


class SetupChecklist(Shape):
    """The first-run checklist."""

    complete: bool
    steps: list[SetupStep]


class RateRule(Shape):
    """A rate limit rule in force (``count``, ``per``, ``burst``: null when off)."""

    count: int | None
    #: seconds
    per: float | None
    burst: int | None
    off: bool
    #: what it counts per (participant, client address, ...)
    scope: str
    source: Literal["admin", "settings"]


class AdminMeshSettings(Shape):
    """The mesh's settings and the rate limits in force."""

    name: str
    description: str
    visibility: Literal["public", "private"]
    registration_mode: Literal["open", "closed"]
    guests_can_send: bool
    default_room_id: Id | None
    #: whether this node is a registry of public meshes (decision 0057)
    registry_enabled: bool
    #: admin: switched in these settings; settings: as MESH_REGISTRY_ENABLED says
    registry_enabled_source: Literal["admin", "settings"]
    #: by rule: messages, reactions, typing, models, search, linkPreviews,
    #: profile, loginName, loginSlowdown, loginAddress, registrationAddress,
    #: challengeAddress, federationRelay, federationStrangerAddress,
    #: registryDid, registryAddress
    rate_limits: dict[str, RateRule]
    #: role name -> factor on its rate limits
    role_multipliers: dict[str, float]
    role_multipliers_source: Literal["admin", "settings"]
    #: whether the node fetches previews of links in messages (decision 0072)
    link_previews: bool
    #: admin: switched in these settings; settings: as MESH_LINK_PREVIEWS says
    link_previews_source: Literal["admin", "settings"]
    rate_limits_enabled: bool
    rate_limit_exempt_addresses: list[str]


class MeshSettingsChange(Body):
    """What is given changes (null: unchanged); all or nothing."""

    name: str | None = None
    description: str | None = None
    #: public or private
    visibility: str | None = None
    #: open or closed
    registration_mode: str | None = None
    guests_can_send: bool | None = None
    #: an ordinary room of this node, or "" for none
    default_room_id: str | None = None
    #: make this node a registry of public meshes (or not), whatever
    #: MESH_REGISTRY_ENABLED says
    registry_enabled: bool | None = None
    #: rule name -> {"count", "per", "burst"?}, a rate such as "20/10s:30",
    #: "off" or "default" (the settings' value); rules not named are unchanged
    rate_limits: dict[str, Any] | None = None
    #: a whole new map of role name -> number (0.01 to 1000), or "default"
    role_multipliers: dict[str, Any] | str | None = None
    #: fetch previews of links in messages (or not), whatever
    #: MESH_LINK_PREVIEWS says
    link_previews: bool | None = None


@bp.get("/api/admin/stats")
@answers(AdminStats)
async def stats() -> tuple[Any, int]:
    """The node's statistics: participants, rooms, messages, broker, models, rate limits."""
    actor = await caller()
    return reply(await node().admin.stats(actor))


@bp.get("/api/admin/setup-status")
@answers(SetupChecklist)
async def setup_status() -> tuple[Any, int]:
    """The first-run checklist: which setup steps are done."""
    actor = await caller()
    return reply(await node().admin.setup_status(actor))


@bp.get("/api/admin/mesh/settings")
@answers(AdminMeshSettings)
async def mesh_settings() -> tuple[Any, int]:
    """The mesh's settings, with the rate limits in force."""
    actor = await caller()
    return reply(node().admin.settings(actor))


@bp.put("/api/admin/mesh/settings")
@accepts(MeshSettingsChange)
@answers(AdminMeshSettings)
async def update_mesh_settings(data: MeshSettingsChange) -> tuple[Any, int]:
    """Change the mesh's settings and rate limits (applied at once, and stored)."""
    actor = await caller()
    result = await node().admin.update_settings(
        actor,
        name=data.name,
        description=data.description,
        visibility=data.visibility,
        registration_mode=data.registration_mode,
        guests_can_send=data.guests_can_send,
        default_room_id=data.default_room_id,
        registry_enabled=data.registry_enabled,
        rate_limits=data.rate_limits,
        role_multipliers=data.role_multipliers,
        link_previews=data.link_previews,
    )
    return reply(result)
