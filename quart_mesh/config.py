"""Settings for one mesh node.

Every value has a documented default (``docs/configuration.md``) and can be set
by environment variable (``MESH_*``) or by the CLI, which wins over the
environment. Every bound the node enforces has a name here: nothing is
unbounded by accident.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from .client_address import FORWARDED_HEADERS, parse_networks
from .errors import ConfigError

__all__ = [
    "DEFAULT_ROOM_QUOTAS",
    "RATE_RULES",
    "Limits",
    "ModelBudget",
    "ModelConfig",
    "Rate",
    "RateLimits",
    "Settings",
    "parse_disk_floor",
    "parse_log_format",
    "parse_models",
    "parse_rate",
    "parse_role_budgets",
]


@dataclasses.dataclass(frozen=True, slots=True)
class ModelConfig:
    """A model configured at start-up (``MESH_MODELS`` or ``MESH_MODELS_FILE``)."""

    name: str
    base_url: str
    upstream_model: str | None = None
    api_key: str | None = dataclasses.field(default=None, repr=False)
    #: the lowest role that may use it (``minRole``; default: ``model_min_role``)
    min_role: str | None = None
    #: whether guests may use it (``guests``; default: no)
    guests: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class ModelBudget:
    """A role's model budget from the settings (``MESH_MODEL_ROLE_BUDGETS``):
    ``None`` takes the default, 0 is no limit."""

    requests_per_minute: int | None = None
    tokens_per_day: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Limits:
    """Size and count limits; all configurable, all enforced by the node."""

    #: Largest request body accepted on JSON endpoints (bytes).
    max_body_bytes: int = 64 * 1024
    #: Largest message ``content`` (UTF-8 bytes). Larger is answered with 413.
    max_message_bytes: int = 16 * 1024
    #: Longest participant name (characters).
    max_name_chars: int = 64
    #: Longest room name (characters).
    max_room_name_chars: int = 100
    #: Longest room or mesh description (characters).
    max_description_chars: int = 2000
    #: Shortest acceptable password (characters).
    min_password_chars: int = 8
    #: Longest acceptable password (characters); argon2 on megabytes is a DoS.
    max_password_chars: int = 256
    #: Default and largest page size of ``GET /api/rooms/:id/messages``.
    default_page_size: int = 50
    max_page_size: int = 200
    #: Longest emoji name accepted for a reaction (characters).
    max_emoji_chars: int = 64
    #: Distinct emoji per message.
    max_reactions_per_message: int = 64
    #: Largest ``args`` of an agent command, and of its ``result`` (JSON bytes).
    max_command_bytes: int = 8 * 1024
    #: Commands waiting for one agent to take them; beyond, sending one is refused (429).
    max_pending_commands: int = 100
    #: Largest vault entry ``blob`` (UTF-8 bytes). Larger is answered with 413.
    max_vault_blob_bytes: int = 16 * 1024
    #: Vault entries one participant may keep; beyond, storing one is refused (409).
    max_vault_entries: int = 100
    #: Largest encrypted DID private key (``encryptedKey``, UTF-8 bytes); 413 beyond.
    max_encrypted_key_bytes: int = 8 * 1024
    #: DID challenges outstanding at once (kept in memory); beyond, the oldest is dropped.
    max_did_challenges: int = 10_000
    #: Seconds a DID challenge may be answered after it was issued.
    did_challenge_ttl_seconds: int = 300
    #: Largest source of one app version (UTF-8 bytes of html + css + js); 413 beyond.
    max_app_source_bytes: int = 256 * 1024
    #: Largest request body of ``POST /api/apps`` and ``PUT /api/apps/:id/source``
    #: (JSON escaping makes a body larger than the source it carries).
    max_app_body_bytes: int = 1024 * 1024
    #: Apps one participant may own; beyond, creating one is refused (409).
    max_apps_per_participant: int = 200
    #: Source versions kept per app; older ones are dropped as new ones arrive.
    max_app_versions: int = 50
    #: Longest ``prompt`` of ``POST /api/apps/generate`` (characters).
    max_app_prompt_chars: int = 8000
    #: Largest uploaded file (``POST /api/upload``, bytes); 413 beyond, refused while
    #: the body streams in (and at once if ``Content-Length`` says so).
    max_upload_bytes: int = 10 * 1024 * 1024
    #: Most attachments (uploads) one message may carry.
    max_attachments: int = 10
    #: Seconds one upload may take to arrive, and one served file to be sent.
    upload_timeout_seconds: int = 300
    #: Uploads one participant below admin may keep (``files.unlimited`` is not
    #: limited); beyond, uploading another is refused (409 ``too_many_uploads``).
    max_uploads_per_participant: int = 10_000
    #: Rooms (of the snapshot and ``GET /api/state``) one snapshot carries at
    #: most: the rooms and DMs the participant is in, and the mesh's default room.
    max_snapshot_rooms: int = 500
    #: Default and largest page of ``GET /api/rooms`` (``?limit=``).
    default_room_page_size: int = 100
    max_room_page_size: int = 500
    #: WebSocket sessions one participant may hold open at once (tabs, devices,
    #: a bot's workers); beyond, ``authenticate`` is answered with an ``error``
    #: frame ``too_many_sessions`` and close code 1008.
    max_sessions_per_participant: int = 32
    #: WebSocket sessions from one client address (not for the rate limits'
    #: exempt addresses, loopback by default).
    max_sessions_per_address: int = 256
    #: MCP sessions (``/mcp``) one participant may hold open at once, counting
    #: requests of the session-less 2026 protocol while they run; beyond, 429
    #: ``too_many_sessions`` until one ends (``DELETE``, or idle).
    max_mcp_sessions_per_participant: int = 16
    #: seconds an MCP session lives with no request in flight (no call
    #: running, no open stream); then it ends and frees its seat.
    mcp_session_idle_seconds: int = 600
    #: Long polls (``POST /api/poll`` with a ``timeout``) one participant may
    #: have waiting at once; beyond, 429 ``too_many_polls``.
    max_polls_per_participant: int = 32
    #: Long polls waiting at once from one client address (not for exempt addresses).
    max_polls_per_address: int = 256

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            if getattr(self, field.name) < 1:
                raise ConfigError(f"limit {field.name} must be at least 1")
        if self.default_page_size > self.max_page_size:
            raise ConfigError("default_page_size must not exceed max_page_size")
        if self.default_room_page_size > self.max_room_page_size:
            raise ConfigError("default_room_page_size must not exceed max_room_page_size")
        if self.max_message_bytes > self.max_body_bytes:
            raise ConfigError("max_message_bytes must not exceed max_body_bytes")
        # the store's columns hold at most this much
        for name in ("max_name_chars", "max_room_name_chars"):
            if getattr(self, name) > 200:
                raise ConfigError(f"{name} must be at most 200")
        if self.max_emoji_chars > 64:
            raise ConfigError("max_emoji_chars must be at most 64")


@dataclasses.dataclass(frozen=True, slots=True)
class Rate:
    """A rate limit: ``count`` actions per ``per`` seconds, in bursts of at most
    ``burst`` (a token bucket of ``burst`` tokens refilled at ``count/per`` a
    second). ``burst`` 0 means ``count``. Written ``20/10s`` or ``20/10s:30``."""

    count: int
    per: float
    burst: int = 0

    def __post_init__(self) -> None:
        if self.burst == 0:
            object.__setattr__(self, "burst", self.count)
        if not 1 <= self.count <= _MAX_RATE_COUNT or not 1 <= self.burst <= _MAX_RATE_COUNT:
            raise ConfigError(f"a rate's count and burst must be 1 to {_MAX_RATE_COUNT}")
        if not 0.001 <= self.per <= 86400:
            raise ConfigError("a rate's period must be 0.001 to 86400 seconds")

    def __str__(self) -> str:
        burst = f":{self.burst}" if self.burst != self.count else ""
        return f"{self.count}/{self.per:g}s{burst}"

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "per": self.per, "burst": self.burst}


#: most actions a rate may allow per period (and most in a burst)
_MAX_RATE_COUNT = 1_000_000
#: the rate-limit rules, each a field of :class:`RateLimits` (``MESH_RATE_<RULE>``)
#: ``MESH_SETUP_CODE``: when the first setup needs the code the node logs
SETUP_CODE_MODES = ("auto", "always")
RATE_RULES = (
    "messages",
    "reactions",
    "typing",
    "models",
    "search",
    "link_previews",
    "profile",
    "login_name",
    "login_slowdown",
    "login_address",
    "registration_address",
    "challenge_address",
    "federation_relay",
    "federation_stranger_address",
    "registry_did",
    "registry_address",
)
#: how many times the base limits each role gets (the owner is never limited)
DEFAULT_ROLE_MULTIPLIERS: Mapping[str, float] = MappingProxyType(
    {"admin": 10.0, "moderator": 5.0, "super_agent": 5.0, "agent": 2.0}
)


#: rooms each built-in role may have created (admin and owner: no quota)
DEFAULT_ROOM_QUOTAS: Mapping[str, int] = MappingProxyType(
    {"moderator": 200, "super_agent": 100, "member": 50, "agent": 10, "spectator": 0}
)


def check_room_quotas(quotas: Mapping[str, Any]) -> None:
    """Role name -> a whole number from 0 to 1,000,000.

    Raises:
        ConfigError: a bad entry.
    """
    if len(quotas) > 100:
        raise ConfigError("at most 100 room quotas")
    for role, quota in quotas.items():
        if not isinstance(role, str) or not 1 <= len(role) <= 64:
            raise ConfigError("room quotas must be keyed by role names")
        if isinstance(quota, bool) or not isinstance(quota, int) or not 0 <= quota <= 1_000_000:
            raise ConfigError(f"the room quota of {role} must be a whole number from 0 to 1000000")


@dataclasses.dataclass(frozen=True, slots=True)
class RateLimits:
    """Rate limits (``docs/rate-limits.md``); ``None`` turns a rule off.

    Per participant (times its role's multiplier; the owner is not limited):
    ``messages`` (sends and edits), ``reactions``, ``models`` (proxy
    requests), ``search``, ``profile`` (changes of one's own settings and
    of a room's description), and ``typing`` (per room, the same for everyone; extra typing
    is dropped silently). Per login name and client address: ``login_name``;
    per login name, failed logins slow its logins down: ``login_slowdown``
    (never refused, so nobody can lock the owner out). Per client address
    (not for ``exempt_addresses``): ``login_address`` (logins, DID
    verifications) and ``registration_address`` (registrations, guest
    sessions, bot bootstraps) and ``challenge_address`` (DID challenges).
    Per peer node: ``federation_relay`` (events
    relayed in from a connected node); per client address (not for
    ``exempt_addresses``): ``federation_stranger_address`` (signed requests
    from nodes that are not peers here: connection requests, heartbeats to a
    registry, notices of ended connections). As a registry: ``registry_did``
    (heartbeats per node DID) and ``registry_address`` (manifest checks, that
    is new or re-checked listings, per client address). An admin can change
    the rules and multipliers at run time (``PUT /api/admin/mesh/settings``);
    those changes are stored and win over these values.
    """

    #: ``False`` turns every rule off (``MESH_RATE_LIMITS=off``), admin changes included.
    enabled: bool = True
    messages: Rate | None = Rate(20, 10, 150)
    reactions: Rate | None = Rate(30, 10)
    typing: Rate | None = Rate(1, 1)
    models: Rate | None = Rate(60, 60)
    #: searches (``GET /api/search`` and every other way in)
    search: Rate | None = Rate(30, 10)
    #: link previews the node fetches for a participant (cache misses only:
    #: a preview it has is never counted)
    link_previews: Rate | None = Rate(30, 60, 60)
    #: changes of one's own settings (``PATCH /api/auth/me``: display name,
    #: read receipts) and of a room's description (``PATCH
    #: /api/rooms/:roomId``); each is an event to many
    profile: Rate | None = Rate(10, 60)
    #: login attempts for one name from one client address (refused beyond)
    login_name: Rate | None = Rate(10, 60)
    #: failed logins for one name from anywhere; beyond, every login for the
    #: name waits (at most ``login_max_delay``) rather than being refused
    login_slowdown: Rate | None = Rate(10, 60)
    #: the longest a login for a name under ``login_slowdown`` waits, seconds
    login_max_delay: float = 3.0
    login_address: Rate | None = Rate(30, 60)
    registration_address: Rate | None = Rate(20, 3600)
    #: DID challenges issued per client address (counted in memory: a flood
    #: is turned away before it costs a store write)
    challenge_address: Rate | None = Rate(30, 60)
    federation_relay: Rate | None = Rate(600, 60, 300)
    #: signed requests from nodes that are not peers here (connection
    #: requests, heartbeats to a registry, notices of ended connections) one
    #: client address may send; counted before the request's nonce is stored,
    #: so strangers cannot fill the nonce store
    federation_stranger_address: Rate | None = Rate(60, 3600)
    #: heartbeats one node (DID) may send a registry: a node beats every 300 s
    registry_did: Rate | None = Rate(10, 60)
    #: manifest checks (a mesh listed anew, at a new URL, or whose check
    #: expired) one client address may cause a registry
    registry_address: Rate | None = Rate(20, 3600)
    role_multipliers: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: DEFAULT_ROLE_MULTIPLIERS
    )
    #: addresses and networks never limited per address: loopback, so that a
    #: reverse proxy on the same host (every client then has its address) does
    #: not put all clients in one bucket
    exempt_addresses: tuple[str, ...] = ("127.0.0.0/8", "::1/128")
    #: most keys (participant, name or address, per rule) remembered at once;
    #: idle ones are forgotten first
    max_keys: int = 100_000

    def __post_init__(self) -> None:
        check_role_multipliers(self.role_multipliers)
        object.__setattr__(self, "role_multipliers", MappingProxyType(dict(self.role_multipliers)))
        for address in self.exempt_addresses:
            try:
                ipaddress.ip_network(address, strict=False)
            except ValueError:
                raise ConfigError(f"not an address or network: {address!r}") from None
        if self.max_keys < 1000:
            raise ConfigError("rate-limit max_keys must be at least 1000")
        if not 0 <= self.login_max_delay <= 60:
            raise ConfigError("login_max_delay must be from 0 to 60 seconds")

    def rule(self, name: str) -> Rate | None:
        if name not in RATE_RULES:
            raise KeyError(name)
        rate: Rate | None = getattr(self, name)
        return rate


def check_role_multipliers(multipliers: Mapping[str, Any]) -> None:
    """Role name -> a number from 0.01 to 1000; not ``owner``, who is never limited.

    Raises:
        ConfigError: a bad entry.
    """
    if len(multipliers) > 100:
        raise ConfigError("at most 100 role multipliers")
    for role, factor in multipliers.items():
        if not isinstance(role, str) or not 1 <= len(role) <= 64:
            raise ConfigError("role multipliers must be keyed by role names")
        if role == "owner":
            raise ConfigError("the owner is never rate-limited: no multiplier for owner")
        if (
            isinstance(factor, bool)
            or not isinstance(factor, int | float)
            or not 0.01 <= factor <= 1000
        ):
            raise ConfigError(f"the multiplier of {role} must be a number from 0.01 to 1000")


@dataclasses.dataclass(frozen=True, slots=True)
class Settings:
    """Configuration of a node. Build with :meth:`from_env` or directly.

    ``database_url`` defaults to SQLite in ``data_dir``; ``public_url``
    defaults to the address the server actually binds.
    """

    data_dir: Path = Path("mesh-data")
    host: str = "127.0.0.1"
    port: int = 8000
    public_url: str | None = None
    database_url: str | None = None
    #: Processes ``quart-mesh serve`` runs, each a whole node accepting on one
    #: listening socket (``docs/operations.md``); more than 1 needs PostgreSQL.
    workers: int = 1
    #: Folder of uploaded files (default ``<data_dir>/uploads``); with several
    #: hosts, one folder they all mount.
    uploads_dir: Path | None = None
    limits: Limits = dataclasses.field(default_factory=Limits)
    #: Lifetime of tokens issued to humans (login, register, setup), seconds.
    token_ttl_seconds: int = 30 * 24 * 3600
    #: Lifetime of guest tokens, seconds.
    guest_token_ttl_seconds: int = 24 * 3600
    #: Lifetime of bot tokens (bootstrap, spawn), seconds.
    bot_token_ttl_seconds: int = 365 * 24 * 3600
    #: Threads that may read the store at once (SQLite WAL allows concurrent readers).
    db_reader_threads: int = 4
    #: Units of work that may wait for the store's writer; beyond, writes are
    #: refused at once (REST 503 ``overloaded`` with Retry-After, WebSocket an
    #: ``overloaded`` error frame) rather than queued without bound.
    max_queued_writes: int = 2000
    #: Free space the data folder keeps (``MESH_DISK_FLOOR``): bytes (an
    #: int), a share of its filesystem (a float below 1), or ``None`` for
    #: the default, 2% of the filesystem but at least 64 MiB and at most
    #: 1 GiB; 0 turns it off. Below it, uploads and app sources are refused
    #: (507) and the node reports itself not ready (``/api/health/ready``).
    disk_floor: int | float | None = None
    #: Share of the process's open-file limit (``RLIMIT_NOFILE``) past which
    #: new connections are refused (HTTP 503, WebSocket close 1013) rather
    #: than left for the kernel to refuse (``MESH_MAX_FD_SHARE``, 0 < x <= 1).
    max_fd_share: float = 0.9
    #: Concurrent argon2 computations (each uses ~64 MiB and a core for ~50 ms).
    password_hash_threads: int = 2
    #: How long a graceful shutdown waits for open requests, seconds.
    graceful_timeout: float = 5.0
    #: How often ``lastSeen`` may be written for one participant, seconds.
    last_seen_interval: float = 60.0
    #: Events buffered per subscriber (WebSocket session, long-poll) before it
    #: is disconnected as lagging.
    subscriber_buffer: int = 1024
    #: Seconds a WebSocket client has to send ``authenticate``.
    auth_timeout: float = 10.0
    #: Seconds a WebSocket client may take to accept one batch of frames before
    #: it is disconnected (a client that stopped reading).
    ws_send_timeout: float = 30.0
    #: Seconds an authenticated WebSocket client may stay silent before the node
    #: pings it (and again every this many seconds while it stays silent).
    ws_ping_interval: float = 20.0
    #: Seconds an authenticated WebSocket client may send nothing at all (no
    #: pong, no frame), while not busy taking a long write from the node,
    #: before the node closes the connection (1011 ``idle_timeout``); its
    #: participant then goes offline.
    ws_idle_timeout: float = 60.0
    #: Seconds a connection's request head may take to arrive (the first one
    #: read by the node, the WebSocket handshake included; later ones on a
    #: kept-alive connection within hypercorn's keep-alive timeout, 5 s or this
    #: if shorter); else the connection is dropped.
    request_head_timeout: float = 10.0
    #: Largest WebSocket message accepted from a client (bytes).
    max_frame_bytes: int = 64 * 1024
    #: Most missed messages replayed on resume (``since``); beyond, the client pages by REST.
    max_replay: int = 1000
    #: Longest long-poll wait, seconds.
    max_poll_timeout: float = 30.0
    #: Log level name for the ``quart_mesh`` loggers.
    log_level: str = "INFO"
    #: ``text`` (a line a record) or ``json`` (an object a line): :mod:`quart_mesh.logs`.
    log_format: str = "text"
    #: the bearer token a ``GET /metrics`` scrape must carry; unset: no ``/metrics``
    metrics_token: str | None = dataclasses.field(default=None, repr=False)
    #: Seconds a webhook receiver has to answer one delivery.
    webhook_timeout: float = 10.0
    #: Longest wait between two attempts at a failing webhook delivery, seconds.
    webhook_max_backoff: float = 60.0
    #: Most undelivered events kept for one webhook bot; beyond, the oldest are
    #: skipped (and counted) so a dead receiver cannot hold the node back forever.
    webhook_max_backlog: int = 1000
    #: Webhook bots registered without an admin (open registration) may still
    #: target loopback, private and link-local addresses.
    webhook_allow_private: bool = False
    #: Models configured at start-up (besides those added with ``POST /api/models``).
    models: tuple[ModelConfig, ...] = ()
    #: Seconds an upstream model may take to start answering (and between two
    #: chunks of a stream) before the proxy gives up with 504.
    model_timeout: float = 120.0
    #: Requests the proxy sends to one upstream at once; more wait their turn.
    model_concurrency: int = 8
    #: Largest chat-completions request body accepted by the proxy (bytes).
    max_completion_body_bytes: int = 1024 * 1024
    #: The lowest role that may use a model whose owner set none (decision 0053):
    #: ``agent`` lets members, bots and above in, never spectators or guests.
    model_min_role: str = "agent"
    #: Largest ``n`` (choices per request) the proxy forwards; more is refused.
    model_max_n: int = 4
    #: Largest ``max_tokens``/``max_completion_tokens`` the proxy forwards.
    model_max_tokens: int = 4096
    #: Model requests one participant (below the owner) may have running at
    #: once, streams included; more answer 429 ``rate_limit_exceeded``, so
    #: that nobody holds every upstream slot (``model_concurrency``) alone.
    model_max_concurrent: int = 4
    #: Default model budget: requests per minute per participant (below the
    #: owner), unless its role's or its own budget says otherwise; 0: none.
    model_requests_per_minute: int = 60
    #: Default model budget: tokens per UTC day per participant (from the
    #: upstreams' ``usage``), unless a role's or its own budget says otherwise; 0: none.
    model_tokens_per_day: int = 200_000
    #: Model budgets per role from the settings (``MESH_MODEL_ROLE_BUDGETS``, JSON
    #: ``{"spectator": {"tokensPerDay": 20000}}``); a budget stored by an admin wins.
    model_role_budgets: Mapping[str, ModelBudget] = dataclasses.field(
        default_factory=lambda: MappingProxyType({})
    )
    #: Rate limits per participant, login name and client address (``docs/rate-limits.md``).
    rate_limits: RateLimits = dataclasses.field(default_factory=RateLimits)
    #: Reverse proxies (addresses or CIDR networks) whose forwarding header
    #: names the client (``MESH_TRUSTED_PROXIES``, comma-separated; e.g.
    #: ``127.0.0.1`` behind nginx or Caddy on the same host). Empty: the
    #: connection's peer is the client and forwarding headers are ignored.
    trusted_proxies: tuple[str, ...] = ()
    #: The header a trusted proxy names the client in: ``x-forwarded-for``
    #: or ``forwarded`` (RFC 7239) (``MESH_FORWARDED_HEADER``).
    forwarded_header: str = "x-forwarded-for"
    #: Whether ``POST /api/setup/init`` needs the setup code the node logs at
    #: start (``MESH_SETUP_CODE``): ``auto`` when it listens on a non-loopback
    #: address (or, under a stock ASGI server, when the request came in on
    #: one), ``always`` (e.g. behind a reverse proxy on the same host).
    setup_code: str = "auto"
    #: Rooms a participant may have created and not deleted, per role
    #: (``MESH_ROOM_QUOTAS``, a JSON object of role -> number, merged over
    #: these); a role not listed takes the quota of the highest built-in role
    #: at or below its priority, and admin and owner have none. Beyond, creating
    #: a room is refused (409 ``too_many_rooms``).
    room_quotas: Mapping[str, int] = dataclasses.field(default_factory=lambda: DEFAULT_ROOM_QUOTAS)
    #: Total bytes of uploads one participant below admin may keep (admins and the
    #: owner are not limited); 0 turns the quota off.
    upload_quota_bytes: int = 1024 * 1024 * 1024
    #: Whether this node takes part in federation (``docs/federation.md``): when
    #: off it neither sends nor accepts connection requests.
    federation_enabled: bool = True
    #: Largest difference, in seconds, between a signed request's timestamp and
    #: this node's clock; seen nonces are kept this long.
    federation_max_skew_seconds: int = 300
    #: Most nonces remembered at once (signed requests beyond it get 503 ``busy``).
    federation_max_nonces: int = 100_000
    #: Most inbound connection requests pending at once (beyond: 429).
    federation_max_pending: int = 100
    #: Most inbound connection requests pending at once from one client address.
    federation_max_pending_per_address: int = 3
    #: Seconds an inbound connection request waits for an admin before it expires.
    federation_pending_ttl: float = 7 * 24 * 3600.0
    #: Most outbox events waiting for one peer; beyond, the connection is ended
    #: (the peer stopped taking the relay) and the admin alerted in the log.
    federation_max_backlog: int = 100_000
    #: Oldest a relayed event's ``createdAt`` may be, in seconds before it
    #: arrives; an older one (or one in the future beyond the skew) is dated
    #: when it arrived and marked ``timestampReplaced``.
    federation_max_relay_age: float = 30 * 24 * 3600.0
    #: Seconds to wait for a peer node's answer.
    federation_timeout: float = 10.0
    #: Longest wait, in seconds, between two attempts of a link task to relay
    #: to a peer that is down (waits double from 0.5 s up to this).
    federation_retry_max: float = 30.0
    #: Most events relayed to a peer in one request.
    federation_batch: int = 100
    #: Registry this node announces itself to while its mesh is public
    #: (``POST {registry_url}/api/meshes/heartbeat``); ``None``: no heartbeat.
    registry_url: str | None = None
    #: Seconds between two heartbeats to the registry (the first is sent at start).
    heartbeat_interval: float = 300.0
    #: As a registry: seconds after its last heartbeat that a mesh stops being listed.
    registry_ttl: float = 900.0
    #: As a registry: most meshes kept at once (beyond, heartbeats of new ones get 429).
    registry_max_entries: int = 10_000
    #: Whether this node is a registry (``POST /api/meshes/heartbeat``, ``GET
    #: /api/meshes/public``) until the owner sets ``registryEnabled`` in the
    #: mesh settings, which then wins; off, both answer 404 ``registry_disabled``.
    registry_enabled: bool = False
    #: PostgreSQL only: the text search configuration the search index uses
    #: (``simple``: any language, no stemming; or e.g. ``english``, ``german``).
    #: A change indexes every message again, in the background.
    search_language: str = "simple"
    #: As a registry: seconds a successful manifest check of a (DID, URL) is
    #: trusted before the URL's manifest is fetched again.
    registry_verify_ttl: float = 3600.0
    #: As a registry: seconds a manifest fetch may take in all (resolving,
    #: connecting, the answer).
    registry_fetch_timeout: float = 10.0
    #: As a registry: largest manifest read (bytes); a longer one fails the check.
    registry_manifest_max_bytes: int = 256 * 1024
    #: As a registry: manifest fetches running at once; more wait their turn.
    registry_fetch_concurrency: int = 8
    #: Outbound calls to URLs that others name (a heartbeat's manifest, every
    #: call to a peer node) may reach loopback, private and link-local addresses.
    #: Off, such a URL fails as unreachable (an SSRF guard): turn it on only
    #: for a lab or a private network.
    outbound_allow_private: bool = False
    #: Link previews (decision 0072): whether the node fetches previews of
    #: links in messages, until the owner sets ``linkPreviews`` in the mesh
    #: settings, which then wins.
    link_previews: bool = True
    #: Networks (``10.0.0.0/8``, ``127.0.0.1/32``) link previews may reach
    #: even though they are not public, on any port: an intranet's wiki. Every
    #: other private address is refused (as with ``outbound_allow_private``,
    #: which lets all of them through).
    link_preview_allow_networks: tuple[str, ...] = ()
    #: Seconds one preview (the page, or its image) may take in all: name
    #: resolution, redirects, connection and reading.
    link_preview_timeout: float = 5.0
    #: Most bytes of a page read for its preview (the head is near the top).
    link_preview_max_bytes: int = 512 * 1024
    #: Largest preview image proxied (bytes); a larger one is not shown.
    link_preview_image_max_bytes: int = 1024 * 1024
    #: Previews (pages and images) kept in memory at once; the least recently
    #: used go first.
    link_preview_cache_entries: int = 1000
    #: Bytes of preview images kept in memory at once.
    link_preview_cache_bytes: int = 32 * 1024 * 1024
    #: Seconds a preview (or a failure to get one) is kept before it is fetched again.
    link_preview_ttl: float = 3600.0

    def __post_init__(self) -> None:
        check_room_quotas(self.room_quotas)
        object.__setattr__(self, "room_quotas", MappingProxyType(dict(self.room_quotas)))
        if not self.ws_ping_interval < self.ws_idle_timeout:
            raise ConfigError("ws_ping_interval must be shorter than ws_idle_timeout")
        check_workers(self.workers, "workers")
        try:
            parse_networks(self.trusted_proxies)
        except ValueError:
            raise ConfigError(
                f"trusted proxies must be addresses or networks: {', '.join(self.trusted_proxies)}"
            ) from None
        try:
            parse_networks(self.link_preview_allow_networks)
        except ValueError:
            raise ConfigError(
                "link preview networks must be addresses or networks: "
                + ", ".join(self.link_preview_allow_networks)
            ) from None
        if self.forwarded_header not in FORWARDED_HEADERS:
            raise ConfigError(
                f"the forwarded header must be one of {', '.join(FORWARDED_HEADERS)}, "
                f"not {self.forwarded_header!r}"
            )
        if self.setup_code not in SETUP_CODE_MODES:
            raise ConfigError(f"setup_code must be 'auto' or 'always', not {self.setup_code!r}")
        floor = self.disk_floor
        if floor is not None and (floor < 0 or (isinstance(floor, float) and floor >= 1)):
            raise ConfigError(f"disk_floor must be bytes or a share below 1, not {floor!r}")
        if not 0 < self.max_fd_share <= 1:
            raise ConfigError(
                f"max_fd_share must be above 0 and at most 1, not {self.max_fd_share}"
            )

    def check_workers_store(self) -> None:
        """Several workers need a store several processes can share.

        Raises:
            ConfigError: more than one worker on SQLite.
        """
        if self.workers > 1 and self.resolved_database_url.startswith("sqlite"):
            raise ConfigError(
                f"--workers {self.workers} needs PostgreSQL (MESH_DATABASE_URL): a node on "
                "SQLite runs in one process only"
            )

    @property
    def resolved_uploads_dir(self) -> Path:
        """Where uploaded files are kept."""
        return self.uploads_dir if self.uploads_dir is not None else self.data_dir / "uploads"

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'mesh.db').resolve()}"

    def with_overrides(self, **changes: Any) -> Settings:
        """Return a copy with the given non-``None`` fields replaced."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read ``MESH_*`` variables; unset ones keep their defaults.

        Raises:
            ConfigError: a variable is set to a value that cannot be used.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        if v := env.get("MESH_DATA_DIR"):
            values["data_dir"] = Path(v)
        if v := env.get("MESH_HOST"):
            values["host"] = v
        if v := env.get("MESH_PORT"):
            values["port"] = _port(v, "MESH_PORT")
        if v := env.get("MESH_PUBLIC_URL"):
            values["public_url"] = _url(v, "MESH_PUBLIC_URL")
        if v := env.get("MESH_DATABASE_URL"):
            values["database_url"] = v
        if v := env.get("MESH_LOG_LEVEL"):
            values["log_level"] = v.upper()
        if v := env.get("MESH_LOG_FORMAT"):
            values["log_format"] = parse_log_format(v, "MESH_LOG_FORMAT")
        if v := env.get("MESH_METRICS_TOKEN"):
            if len(v) < 16 or not v.isprintable() or v.strip() != v or " " in v:
                raise ConfigError(
                    "MESH_METRICS_TOKEN must be at least 16 printable characters, no spaces"
                )
            values["metrics_token"] = v
        if (v := env.get("MESH_DISK_FLOOR")) is not None and v.strip():
            values["disk_floor"] = parse_disk_floor(v, "MESH_DISK_FLOOR")
        if v := env.get("MESH_MAX_FD_SHARE"):
            share = _positive_float(v, "MESH_MAX_FD_SHARE")
            if share > 1:
                raise ConfigError(f"MESH_MAX_FD_SHARE must be at most 1, not {v!r}")
            values["max_fd_share"] = share
        if v := env.get("MESH_WORKERS"):
            values["workers"] = _workers(v, "MESH_WORKERS")
        if v := env.get("MESH_UPLOADS_DIR"):
            values["uploads_dir"] = Path(v)
        for name in (
            "token_ttl_seconds",
            "guest_token_ttl_seconds",
            "bot_token_ttl_seconds",
            "subscriber_buffer",
            "max_queued_writes",
            "max_frame_bytes",
            "max_replay",
            "webhook_max_backlog",
            "model_concurrency",
            "max_completion_body_bytes",
            "model_max_n",
            "model_max_tokens",
            "model_max_concurrent",
        ):
            if v := env.get("MESH_" + name.upper()):
                values[name] = _positive_int(v, "MESH_" + name.upper())
        if v := env.get("MESH_WEBHOOK_ALLOW_PRIVATE"):
            values["webhook_allow_private"] = _bool(v, "MESH_WEBHOOK_ALLOW_PRIVATE")
        for name in (
            "auth_timeout",
            "ws_send_timeout",
            "ws_ping_interval",
            "ws_idle_timeout",
            "request_head_timeout",
            "max_poll_timeout",
            "graceful_timeout",
            "webhook_timeout",
            "webhook_max_backoff",
            "model_timeout",
        ):
            if v := env.get("MESH_" + name.upper()):
                values[name] = _positive_float(v, "MESH_" + name.upper())
        for name in ("model_requests_per_minute", "model_tokens_per_day"):
            if (v := env.get("MESH_" + name.upper())) is not None:
                values[name] = 0 if v.strip() == "0" else _positive_int(v, "MESH_" + name.upper())
        if v := env.get("MESH_MODEL_MIN_ROLE"):
            values["model_min_role"] = v.strip()
        if v := env.get("MESH_MODEL_ROLE_BUDGETS"):
            values["model_role_budgets"] = parse_role_budgets(v, "MESH_MODEL_ROLE_BUDGETS")
        models: list[ModelConfig] = []
        if v := env.get("MESH_MODELS_FILE"):
            try:
                text = Path(v).read_text(encoding="utf-8")
            except OSError as error:
                raise ConfigError(f"MESH_MODELS_FILE: cannot read {v}: {error}") from None
            models += parse_models(text, "MESH_MODELS_FILE", env)
        if v := env.get("MESH_MODELS"):
            models += parse_models(v, "MESH_MODELS", env)
        if models:
            values["models"] = tuple(models)
        limits: dict[str, Any] = {}
        for field in dataclasses.fields(Limits):
            key = "MESH_" + field.name.upper()
            if key in env:
                limits[field.name] = _positive_int(env[key], key)
        if limits:
            values["limits"] = Limits(**limits)
        if rate_limits := _rate_limits_from_env(env):
            values["rate_limits"] = rate_limits
        if v := env.get("MESH_FEDERATION_ENABLED"):
            values["federation_enabled"] = _bool(v, "MESH_FEDERATION_ENABLED")
        for name in (
            "federation_max_skew_seconds",
            "federation_max_nonces",
            "federation_max_pending",
            "federation_max_pending_per_address",
            "federation_max_backlog",
        ):
            if v := env.get("MESH_" + name.upper()):
                values[name] = _positive_int(v, "MESH_" + name.upper())
        if v := env.get("MESH_FEDERATION_TIMEOUT"):
            values["federation_timeout"] = _positive_float(v, "MESH_FEDERATION_TIMEOUT")
        if v := env.get("MESH_FEDERATION_RETRY_MAX"):
            values["federation_retry_max"] = _positive_float(v, "MESH_FEDERATION_RETRY_MAX")
        for name in ("federation_pending_ttl", "federation_max_relay_age"):
            if v := env.get("MESH_" + name.upper()):
                values[name] = _positive_float(v, "MESH_" + name.upper())
        if v := env.get("MESH_FEDERATION_BATCH"):
            values["federation_batch"] = _positive_int(v, "MESH_FEDERATION_BATCH")
        if v := env.get("MESH_ROOM_QUOTAS"):
            values["room_quotas"] = _room_quotas(v)
        if (v := env.get("MESH_UPLOAD_QUOTA_BYTES")) is not None:
            values["upload_quota_bytes"] = (
                0 if v.strip() == "0" else _positive_int(v, "MESH_UPLOAD_QUOTA_BYTES")
            )
        if v := env.get("MESH_REGISTRY_URL"):
            values["registry_url"] = _url(v.strip(), "MESH_REGISTRY_URL")
            if not urlsplit(values["registry_url"]).hostname:
                raise ConfigError(f"MESH_REGISTRY_URL must name a host, not {v!r}")
        for name in ("heartbeat_interval", "registry_ttl"):
            if v := env.get("MESH_" + name.upper()):
                values[name] = _positive_float(v, "MESH_" + name.upper())
        for name in ("registry_max_entries", "registry_manifest_max_bytes"):
            if v := env.get("MESH_" + name.upper()):
                values[name] = _positive_int(v, "MESH_" + name.upper())
        if v := env.get("MESH_REGISTRY_FETCH_CONCURRENCY"):
            values["registry_fetch_concurrency"] = _positive_int(
                v, "MESH_REGISTRY_FETCH_CONCURRENCY"
            )
        for name in ("registry_verify_ttl", "registry_fetch_timeout"):
            if v := env.get("MESH_" + name.upper()):
                values[name] = _positive_float(v, "MESH_" + name.upper())
        if v := env.get("MESH_LINK_PREVIEW_ALLOW_NETWORKS"):
            values["link_preview_allow_networks"] = tuple(
                p.strip() for p in v.split(",") if p.strip()
            )
        if v := env.get("MESH_LINK_PREVIEW_TIMEOUT"):
            values["link_preview_timeout"] = _positive_float(v, "MESH_LINK_PREVIEW_TIMEOUT")
        for name in ("registry_enabled", "outbound_allow_private", "link_previews"):
            if v := env.get("MESH_" + name.upper()):
                values[name] = _bool(v, "MESH_" + name.upper())
        if (v := env.get("MESH_TRUSTED_PROXIES")) is not None:
            values["trusted_proxies"] = tuple(p.strip() for p in v.split(",") if p.strip())
        if v := env.get("MESH_FORWARDED_HEADER"):
            values["forwarded_header"] = v.strip().lower()
        if v := env.get("MESH_SEARCH_LANGUAGE"):
            if not re.fullmatch(r"[a-z][a-z0-9_]{0,62}", v.strip()):
                raise ConfigError(
                    f"MESH_SEARCH_LANGUAGE must name a text search configuration, not {v!r}"
                )
            values["search_language"] = v.strip()
        if v := env.get("MESH_SETUP_CODE"):
            values["setup_code"] = v.strip().lower()
        return cls(**values)


_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(%|b|kb|kib|mb|mib|gb|gib|tb|tib)?", re.IGNORECASE)
_UNITS = {
    "b": 1,
    "kb": 1000,
    "kib": 1024,
    "mb": 1000**2,
    "mib": 1024**2,
    "gb": 1000**3,
    "gib": 1024**3,
    "tb": 1000**4,
    "tib": 1024**4,
}


def parse_disk_floor(value: str, name: str) -> int | float:
    """A disk floor: bytes (``"500MB"``, ``"1GiB"``, ``"1048576"``; 0 turns
    it off) or a share of the filesystem (``"5%"``, less than 100%).

    A size comes to a whole number of bytes (``"1.5KiB"`` is 1536; ``"0.05"``
    and ``"100.5"`` are refused: a bare number is bytes, and ``0.05`` was
    surely meant as a share, written ``5%``)."""
    match = _SIZE.fullmatch(value.strip())
    if match is None:
        raise ConfigError(f"{name} must be a size (500MB, 1GiB) or a share (5%), not {value!r}")
    number, unit = float(match[1]), (match[2] or "b").lower()
    if unit == "%":
        if not number < 100:
            raise ConfigError(f"{name} must be less than 100%, not {value!r}")
        return number / 100
    size = number * _UNITS[unit]
    if size != int(size):
        if match[2] is None and number < 1:
            raise ConfigError(
                f"{name} must be a size in bytes or a share written with %: {value!r}"
                f" would be a fraction of a byte (for a share, write {number * 100:g}%)"
            )
        raise ConfigError(f"{name} must come to a whole number of bytes, not {value!r}")
    return int(size)


def _positive_int(value: str, name: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{name} must be a whole number, not {value!r}") from None
    if number < 1:
        raise ConfigError(f"{name} must be at least 1, not {number}")
    return number


def parse_models(text: str, name: str, env: Mapping[str, str]) -> list[ModelConfig]:
    """Models from JSON: a list of ``{"name", "baseUrl", "upstreamModel"?,
    "apiKey"? | "apiKeyEnv"?}`` (``apiKeyEnv`` names an environment variable
    holding the key, so the key need not be written into the file).

    Raises:
        ConfigError: not such a list, or a bad entry.
    """
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ConfigError(f"{name} must be a JSON list of models: {error}") from None
    if not isinstance(data, list):
        raise ConfigError(f"{name} must be a JSON list of models")
    models = []
    for entry in data:
        if not isinstance(entry, dict):
            raise ConfigError(f"{name}: each model must be a JSON object")
        model_name, base_url = entry.get("name"), entry.get("baseUrl")
        if not isinstance(model_name, str) or not isinstance(base_url, str):
            raise ConfigError(f"{name}: each model needs a string name and baseUrl")
        upstream = entry.get("upstreamModel")
        key = entry.get("apiKey")
        if (key_env := entry.get("apiKeyEnv")) is not None:
            key = env.get(str(key_env))
            if not key:
                raise ConfigError(f"{name}: {key_env} (apiKeyEnv of {model_name}) is not set")
        if not (upstream is None or isinstance(upstream, str)) or not (
            key is None or isinstance(key, str)
        ):
            raise ConfigError(f"{name}: upstreamModel and apiKey must be strings")
        min_role, guests = entry.get("minRole"), entry.get("guests", False)
        if not (min_role is None or isinstance(min_role, str)) or not isinstance(guests, bool):
            raise ConfigError(f"{name}: minRole must be a role name and guests true or false")
        models.append(
            ModelConfig(model_name, base_url.rstrip("/"), upstream, key, min_role, guests)
        )
    return models


def parse_role_budgets(text: str, name: str) -> Mapping[str, ModelBudget]:
    """Role budgets from JSON: ``{"<role>": {"requestsPerMinute"?: n,
    "tokensPerDay"?: n}}``, each figure a whole number from 0 (no limit).

    Raises:
        ConfigError: not such an object.
    """
    try:
        data = json.loads(text)
    except ValueError as error:
        raise ConfigError(f"{name} must be a JSON object: {error}") from None
    if not isinstance(data, dict):
        raise ConfigError(f'{name} must be a JSON object such as {{"spectator": {{...}}}}')
    budgets: dict[str, ModelBudget] = {}
    for role, entry in data.items():
        if not isinstance(entry, dict) or set(entry) - {"requestsPerMinute", "tokensPerDay"}:
            raise ConfigError(f"{name}: {role} needs an object of requestsPerMinute, tokensPerDay")
        figures = [entry.get("requestsPerMinute"), entry.get("tokensPerDay")]
        for figure in figures:
            if figure is not None and (
                not isinstance(figure, int) or isinstance(figure, bool) or figure < 0
            ):
                raise ConfigError(f"{name}: {role}'s figures must be whole numbers from 0")
        budgets[role] = ModelBudget(figures[0], figures[1])
    return MappingProxyType(budgets)


def _room_quotas(value: str) -> dict[str, int]:
    """``MESH_ROOM_QUOTAS``: a JSON object merged over the default quotas."""
    try:
        quotas = json.loads(value)
    except ValueError:
        quotas = None
    if not isinstance(quotas, dict):
        raise ConfigError('MESH_ROOM_QUOTAS must be a JSON object such as {"member": 20}')
    try:
        check_room_quotas(quotas)
    except ConfigError as error:
        raise ConfigError(f"MESH_ROOM_QUOTAS: {error}") from None
    return {**DEFAULT_ROOM_QUOTAS, **quotas}


def _bool(value: str, name: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name} must be true or false, not {value!r}")


def _positive_float(value: str, name: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, not {value!r}") from None
    if not 0 < number < 86400:
        raise ConfigError(f"{name} must be between 0 and 86400 seconds, not {number}")
    return number


def _port(value: str | int, name: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{name} must be a port number, not {value!r}") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"{name} must be between 0 and 65535, not {number}")
    return number


#: most worker processes ``quart-mesh serve --workers`` runs
MAX_WORKERS = 256


def check_workers(number: int, name: str) -> None:
    """Raises ConfigError unless 1 <= *number* <= :data:`MAX_WORKERS`."""
    if isinstance(number, bool) or not 1 <= number <= MAX_WORKERS:
        raise ConfigError(f"{name} must be between 1 and {MAX_WORKERS}, not {number}")


def _workers(value: str, name: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{name} must be a number of processes, not {value!r}") from None
    check_workers(number, name)
    return number


def _url(value: str, name: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ConfigError(f"{name} must start with http:// or https://, not {value!r}")
    return value.rstrip("/")


def parse_log_format(value: str, name: str = "--log-format") -> str:
    """``text`` or ``json`` (any case).

    Raises:
        ConfigError: anything else.
    """
    fmt = value.strip().lower()
    if fmt not in ("text", "json"):
        raise ConfigError(f"{name} must be text or json, not {value!r}")
    return fmt


def parse_port(value: str) -> int:
    """Validate a port given on the command line."""
    return _port(value, "--port")


def parse_workers(value: str) -> int:
    """Validate a number of workers given on the command line."""
    return _workers(value, "--workers")


def parse_public_url(value: str) -> str:
    """Validate a public URL given on the command line."""
    return _url(value, "--public-url")


def parse_rate(value: str, name: str) -> Rate | None:
    """A rate written ``COUNT/PERIOD[:BURST]`` (``20/10s``, ``10/1m``,
    ``20/1h:5``, ``3/s``; the period in s, m or h, seconds if no unit), or
    ``off`` (``None``).

    Raises:
        ConfigError: anything else.
    """
    text = value.strip().lower()
    if text in ("off", "none", "0"):
        return None
    match = _RATE.fullmatch(text)
    if match is None:
        raise ConfigError(f"{name} must be COUNT/PERIOD[:BURST] (e.g. 20/10s:30) or off")
    count, period, unit, burst = match.groups()
    seconds = float(period or 1) * {"": 1, "s": 1, "m": 60, "min": 60, "h": 3600}[unit or ""]
    try:
        return Rate(int(count), seconds, int(burst or 0))
    except ConfigError as error:
        raise ConfigError(f"{name}: {error}") from None


_RATE = re.compile(r"(\d{1,7})\s*/\s*(\d{1,6}(?:\.\d{1,3})?)?\s*(s|min|m|h)?(?:\s*:\s*(\d{1,7}))?")


def _rate_limits_from_env(env: Mapping[str, str]) -> RateLimits | None:
    """``MESH_RATE_*``: ``None`` if none is set."""
    values: dict[str, Any] = {}
    if v := env.get("MESH_RATE_LIMITS"):
        values["enabled"] = _bool(v, "MESH_RATE_LIMITS")
    for rule in RATE_RULES:
        key = "MESH_RATE_" + rule.upper()
        if v := env.get(key):
            values[rule] = parse_rate(v, key)
    if v := env.get("MESH_RATE_ROLE_MULTIPLIERS"):
        try:
            multipliers = json.loads(v)
        except ValueError:
            multipliers = None
        if not isinstance(multipliers, dict):
            raise ConfigError(
                'MESH_RATE_ROLE_MULTIPLIERS must be a JSON object such as {"agent": 2}'
            )
        try:
            check_role_multipliers(multipliers)
        except ConfigError as error:
            raise ConfigError(f"MESH_RATE_ROLE_MULTIPLIERS: {error}") from None
        values["role_multipliers"] = {k: float(f) for k, f in multipliers.items()}
    if (v := env.get("MESH_RATE_EXEMPT")) is not None:
        parts = [p.strip() for p in v.split(",") if p.strip()]
        values["exempt_addresses"] = () if parts in ([], ["none"]) else tuple(parts)
    if v := env.get("MESH_RATE_LOGIN_MAX_DELAY"):
        try:
            values["login_max_delay"] = float(v)
        except ValueError:
            raise ConfigError(f"MESH_RATE_LOGIN_MAX_DELAY must be seconds, not {v!r}") from None
    if v := env.get("MESH_RATE_MAX_KEYS"):
        values["max_keys"] = _positive_int(v, "MESH_RATE_MAX_KEYS")
    if not values:
        return None
    try:
        return RateLimits(**values)
    except ConfigError as error:
        raise ConfigError(f"MESH_RATE_*: {error}") from None
