"""Agent cards (A2A 1.0): the node's, whose skills are its A2A bots, and each
bot's own.

Layout (decision 0062; ``docs/agents-mcp-a2a.md`` § A2A):

- ``/.well-known/agent-card.json``: the node as an agent. One skill per bot
  that is an A2A agent (the skill's id is the bot's ``agentId``); its
  interface ``/a2a`` takes a message for any of them, named in
  ``message.metadata.agentId``.
- ``/a2a/agents/<agentId>/.well-known/agent-card.json``: one bot as an
  agent, its interface ``/a2a/agents/<agentId>``, so that an A2A client
  given ``<node>/a2a/agents/<agentId>`` as the agent's URL finds its card
  where it looks for one.

Every interface is JSON-RPC (A2A 1.0) and asks for the mesh's bearer token,
which both cards declare as their security scheme (``meshToken``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, PROTOCOL_VERSION_1_0

from .._version import __version__

if TYPE_CHECKING:
    from ..store.agents import A2AAgent

__all__ = [
    "AGENTS_PREFIX",
    "CARD_PATH",
    "NODE_RPC_PATH",
    "SCHEME",
    "agent_card",
    "agent_card_path",
    "agent_rpc_path",
    "node_card",
]

#: the node's card
CARD_PATH = AGENT_CARD_WELL_KNOWN_PATH
#: the node's JSON-RPC interface (a message names its bot)
NODE_RPC_PATH = "/a2a"
#: under it, each bot's interface and card
AGENTS_PREFIX = "/a2a/agents/"
#: the name of the security scheme in every card
SCHEME = "meshToken"

_MODES = ["text/plain"]


def agent_rpc_path(agent_id: str) -> str:
    return f"{AGENTS_PREFIX}{agent_id}"


def agent_card_path(agent_id: str) -> str:
    return f"{AGENTS_PREFIX}{agent_id}{AGENT_CARD_WELL_KNOWN_PATH}"


def _security(card: AgentCard, base_url: str) -> None:
    card.security_schemes[SCHEME].CopyFrom(
        SecurityScheme(
            http_auth_security_scheme=HTTPAuthSecurityScheme(
                scheme="Bearer",
                bearer_format="JWT",
                description=(
                    "a mesh token (Authorization: Bearer <token>) from POST /api/auth/login, "
                    f"/api/auth/register or /api/agents/bootstrap; see {base_url}/skill.md"
                ),
            )
        )
    )
    card.security_requirements.append(SecurityRequirement(schemes={SCHEME: StringList()}))


def _skill(agent: A2AAgent, *, skill_id: str, base_url: str | None = None) -> AgentSkill:
    kind = "managed" if agent.managed else "external"
    description = agent.description or f"{agent.name}, a {kind} {agent.type} bot of the mesh"
    if base_url is not None:  # on the node's card: where the bot is an agent of its own
        description += (
            f" (its own agent: {base_url}{agent_rpc_path(agent.agent_id)}, card "
            f"{base_url}{agent_card_path(agent.agent_id)})"
        )
    return AgentSkill(
        id=skill_id,
        name=agent.name,
        description=description,
        tags=["mesh-bot", agent.type, kind],
        input_modes=_MODES,
        output_modes=_MODES,
    )


def _card(name: str, description: str, url: str, base_url: str) -> AgentCard:
    card = AgentCard(
        name=name,
        description=description,
        version=__version__,
        provider=AgentProvider(organization=name, url=base_url),
        documentation_url=f"{base_url}/skill.md",
        supported_interfaces=[
            AgentInterface(
                url=url, protocol_binding="JSONRPC", protocol_version=PROTOCOL_VERSION_1_0
            )
        ],
        capabilities=AgentCapabilities(streaming=True, push_notifications=False),
        default_input_modes=_MODES,
        default_output_modes=_MODES,
    )
    _security(card, base_url)
    return card


def node_card(mesh_name: str, base_url: str, agents: list[A2AAgent]) -> AgentCard:
    """The node as an agent: one skill per A2A bot (its id is the bot's
    ``agentId``, which a message to ``/a2a`` names in ``metadata.agentId``)."""
    card = _card(
        mesh_name,
        "A mesh node where humans and AI agents talk as equal participants. Each skill "
        "is a bot: name it in message.metadata.agentId (the skill's id; a node with one "
        "bot needs no name), or talk to it at its own interface, "
        f"{base_url}{AGENTS_PREFIX}<agentId>. A message becomes a direct conversation "
        "with the bot in the mesh; its replies are the task's.",
        base_url + NODE_RPC_PATH,
        base_url,
    )
    card.skills.extend(
        _skill(agent, skill_id=agent.agent_id, base_url=base_url) for agent in agents
    )
    return card


def agent_card(mesh_name: str, base_url: str, agent: A2AAgent) -> AgentCard:
    """One bot as an agent, at its own interface."""
    card = _card(
        agent.name,
        agent.description
        or f"{agent.name}, a bot of the mesh {mesh_name!r}: your message becomes a direct "
        "conversation with it; its reply is the task's result.",
        base_url + agent_rpc_path(agent.agent_id),
        base_url,
    )
    card.provider.organization = mesh_name
    card.skills.append(_skill(agent, skill_id=agent.agent_id))
    return card
