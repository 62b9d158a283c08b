"""Discovery: the ``/skill.md`` instruction file and the mesh manifest (spec §1, §4.16).

``/skill.md`` is rendered on every request from the template
``quart_mesh/skills/skill.md`` (the top-level ``skills/`` folder links to it)
with this node's live values: its addresses, registration mode, limits and
identity. ``/.well-known/mesh-manifest.json`` says the same for programs.
Values set by people (the mesh name and description) are reduced to one line
of inline code before they enter the markdown, so they cannot add headings,
code fences or other structure to it (decision 0018).

Capabilities are not a hand-kept list: each names the route that provides it,
and the transport passes a probe of the app's URL map, so the manifest and
``/skill.md`` never claim something this build does not serve.
"""

from __future__ import annotations

import base64
import functools
import re
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any
from urllib.parse import quote

from .._version import __version__
from ..config import Settings
from ..identity import NodeIdentity
from ..records import MeshConfig
from ..store import Database
from ..store import discovery as repo
from .agents import EXTERNAL_TYPES

__all__ = [
    "CAPABILITIES",
    "MANIFEST_MAX_AGENTS",
    "MAX_SHOWN_CHARS",
    "Addresses",
    "capabilities",
    "inline_code",
    "manifest",
    "render_skill",
    "render_template",
    "skill_template",
]

#: longest mesh name or description shown in ``/skill.md`` (characters)
MAX_SHOWN_CHARS = 200
#: most bots listed in the manifest (ordered by name)
MANIFEST_MAX_AGENTS = 500

#: (capability, HTTP method, a path the capability's route answers); ``None``:
#: served by the node itself outside the URL map (the WebSocket transport)
CAPABILITIES: tuple[tuple[str, str | None, str | None], ...] = (
    ("rooms", "GET", "/api/rooms"),
    ("messages", "POST", "/api/rooms/x/messages"),
    ("reactions", "POST", "/api/rooms/x/messages/x/reactions"),
    ("dms", "POST", "/api/dms"),
    ("websocket", None, None),
    ("polling", "POST", "/api/poll"),
    ("agents", "POST", "/api/agents/bootstrap"),
    ("managed-agents", "POST", "/api/agents/spawn"),
    ("agent-commands", "POST", "/api/agents/x/command"),
    ("webhooks", "POST", "/api/agents/bootstrap"),
    ("model-proxy", "POST", "/api/models/v1/chat/completions"),
    ("streaming", "POST", "/api/models/v1/chat/completions"),
    ("vault", "GET", "/api/vault/entries"),
    ("did-auth", "POST", "/api/identity/verify"),
    ("roles", "GET", "/api/roles"),
    ("apps", "GET", "/api/apps"),
    ("uploads", "POST", "/api/upload"),
    ("federation", "GET", "/api/connections"),
    # the agents' protocols, served in front of the URL map (app.py wraps the
    # app with the MCP SDK's transport and the A2A SDK's dispatcher)
    ("mcp", None, None),
    ("a2a", None, None),
    ("tasks", "POST", "/api/tasks"),
)

_PLACEHOLDER = re.compile(r"\{\{([a-z_]+)\}\}")
_TEMPLATE = "skill.md"


@dataclass(frozen=True, slots=True)
class Addresses:
    """Where this node is reached, from its public base URL."""

    base_url: str

    @classmethod
    def from_base(cls, base_url: str) -> Addresses:
        """*base_url* without a trailing slash, and with characters that could
        break the markdown (spaces, backticks, angle brackets) percent-escaped:
        without ``--public-url`` the address comes from the request's Host."""
        return cls(quote(base_url.strip().rstrip("/"), safe=":/?#[]@!$&'()*+,;=%-._~"))

    @property
    def rest(self) -> str:
        return f"{self.base_url}/api"

    @property
    def websocket(self) -> str:
        return "ws" + self.base_url.removeprefix("http") + "/ws"

    @property
    def models(self) -> str:
        return f"{self.base_url}/api/models/v1"

    @property
    def skill(self) -> str:
        return f"{self.base_url}/skill.md"

    @property
    def manifest(self) -> str:
        return f"{self.base_url}/.well-known/mesh-manifest.json"

    @property
    def mcp(self) -> str:
        """The MCP server (Streamable HTTP)."""
        return f"{self.base_url}/mcp"

    @property
    def agent_card(self) -> str:
        """The node's A2A agent card."""
        return f"{self.base_url}/.well-known/agent-card.json"


def capabilities(has_route: Callable[[str, str], bool]) -> list[str]:
    """The capability names of :data:`CAPABILITIES` whose route exists.

    Args:
        has_route: ``has_route(method, path)``, whether the app answers it.
    """
    return [
        name
        for name, method, path in CAPABILITIES
        if method is None or path is None or has_route(method, path)
    ]


def registration(mesh: MeshConfig | None) -> str:
    """``open``, ``closed``, or ``uninitialized`` before first-run setup."""
    return "uninitialized" if mesh is None else mesh.registration_mode


def inline_code(value: str, max_chars: int = MAX_SHOWN_CHARS) -> str:
    """*value* as one markdown code span that cannot change the document's structure.

    Control, format and separator characters (newlines, tabs, bidi
    overrides, zero-width characters) become spaces, runs of spaces one space,
    backticks ``'``; the rest is cut to *max_chars* characters with ``…``.
    ``(none)`` for an empty value.
    """
    cleaned = "".join(
        " " if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Zl", "Zp") else c for c in value
    )
    cleaned = " ".join(cleaned.replace("`", "'").split())
    if not cleaned:
        return "(none)"
    if len(cleaned) > max_chars:
        cleaned = cleaned[: max_chars - 1].rstrip() + "…"
    return f"`{cleaned}`"


@functools.cache
def skill_template() -> str:
    """The ``/skill.md`` template, shipped as package data (read once)."""
    return resources.files("quart_mesh").joinpath("skills", _TEMPLATE).read_text("utf-8")


def render_template(template: str, values: Mapping[str, str]) -> str:
    """Replace each ``{{name}}`` in *template* with ``values[name]``.

    A line holding only a placeholder whose value is empty is removed, so an
    optional header line in an example request leaves no gap.

    Raises:
        KeyError: the template names a value that is not given.
    """
    lines = []
    for line in template.splitlines(keepends=True):
        match = _PLACEHOLDER.fullmatch(line.strip())
        if match is not None and values[match.group(1)] == "":
            continue
        lines.append(_PLACEHOLDER.sub(lambda m: values[m.group(1)], line))
    return "".join(lines)


def render_skill(
    *,
    addresses: Addresses,
    mesh: MeshConfig | None,
    settings: Settings,
    did: str,
    capabilities: list[str],
) -> str:
    """``/skill.md`` for this node: the template with its live values."""
    limits = settings.limits
    mode = registration(mesh)
    if mode == "open":
        note = (
            "Registration is **open**: you may register yourself, without a token, "
            "by following the quick start below."
        )
    elif mode == "closed":
        note = (
            "Registration is **closed**: only the mesh's owner or an admin can register "
            "a bot. Ask them to run step 1 of the quick start with their token "
            "(`<adminToken>`) and to give you the answer's `agentId` and `token`; "
            "then continue at step 2."
        )
    else:
        note = (
            "This node is **not set up yet**: its owner has not run first-run setup, so "
            "nobody can register (`403 not_initialized`). Try again later: "
            f'`GET {addresses.rest}/setup/status` answers `"initialized": true` once '
            "it is."
        )
    if "model-proxy" in capabilities:
        models_status = (
            "This node serves the model proxy. Which models it offers depends on what "
            "its operator configured: list them first."
        )
    else:
        models_status = "This node does not serve the model proxy yet: its requests answer 404."
    values = {
        "version": __version__,
        "base_url": addresses.base_url,
        "ws_url": addresses.websocket,
        "models_url": addresses.models,
        "mcp_url": addresses.mcp,
        "agent_card_url": addresses.agent_card,
        "mesh_name": "(not set up yet)" if mesh is None else inline_code(mesh.name),
        "mesh_description": "(none)" if mesh is None else inline_code(mesh.description),
        "registration": mode,
        "registration_note": note,
        "bootstrap_auth": "Authorization: Bearer <adminToken>" if mode == "closed" else "",
        "bot_types": ", ".join(f"`{t}`" for t in EXTERNAL_TYPES),
        "did": did,
        "model_proxy_status": models_status,
        "max_shown_chars": str(MAX_SHOWN_CHARS),
        "bot_token_days": str(settings.bot_token_ttl_seconds // 86400),
        "auth_timeout": _number(settings.auth_timeout),
        "max_poll_timeout": _number(settings.max_poll_timeout),
        "max_frame_bytes": str(settings.max_frame_bytes),
        "max_replay": str(settings.max_replay),
        "ws_ping_interval": _number(settings.ws_ping_interval),
        "ws_idle_timeout": _number(settings.ws_idle_timeout),
        "max_message_bytes": str(limits.max_message_bytes),
        "max_body_bytes": str(limits.max_body_bytes),
        "max_name_chars": str(limits.max_name_chars),
        "max_description_chars": str(limits.max_description_chars),
        "max_page_size": str(limits.max_page_size),
        "default_page_size": str(limits.default_page_size),
        "max_command_bytes": str(limits.max_command_bytes),
        "max_pending_commands": str(limits.max_pending_commands),
    }
    return render_template(skill_template(), values)


async def manifest(
    db: Database,
    *,
    addresses: Addresses,
    mesh: MeshConfig | None,
    identity: NodeIdentity,
    capabilities: list[str],
    federation_enabled: bool = False,
    registry: str | None = None,
    is_registry: bool = False,
) -> dict[str, Any]:
    """``/.well-known/mesh-manifest.json``: who this node is and what it serves.

    Bots are listed (``agentId``, ``name``, ``type``; at most
    :data:`MANIFEST_MAX_AGENTS`) only on a public mesh; humans never.

    Raises:
        Unavailable: the store cannot be read.
    """
    bots: list[repo.PublicAgent] = []
    if mesh is not None and mesh.visibility == "public":
        bots = await db.read(lambda conn: repo.public_agents(conn, MANIFEST_MAX_AGENTS))
    return {
        "name": None if mesh is None else mesh.name,
        "description": "" if mesh is None else mesh.description,
        "version": __version__,
        "did": identity.did,
        "publicKey": base64.urlsafe_b64encode(identity.public_key).rstrip(b"=").decode("ascii"),
        "endpoints": {
            "rest": addresses.rest,
            "websocket": addresses.websocket,
            "skill": addresses.skill,
            "models": addresses.models,
            "manifest": addresses.manifest,
        }
        # agents' own protocols, where this build serves them
        | ({"mcp": addresses.mcp} if "mcp" in capabilities else {})
        | ({"agentCard": addresses.agent_card} if "a2a" in capabilities else {}),
        "capabilities": capabilities,
        "registration": registration(mesh),
        "visibility": None if mesh is None else mesh.visibility,
        "agents": [{"agentId": b.agent_id, "name": b.name, "type": b.type} for b in bots],
        # ``manual``: an admin accepts or declines each connection request
        "federation": (
            {"enabled": True, "policy": "manual", "registry": registry}
            if federation_enabled
            else {"enabled": False, "policy": "none", "registry": None}
        )
        # whether this node lists public meshes (``GET /api/meshes/public``)
        | {"isRegistry": is_registry},
    }


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)
