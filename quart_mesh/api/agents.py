"""Agents and bots (spec §4.6): bootstrap, spawn, list, change, remove, commands."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from quart import Blueprint, request

from ..services.commands import command_json
from ._common import caller, client_address, node, reply, token_sent
from .contract import Body, Shape, accepts, answers, public
from .objects import Id, Ok, Timestamp, TrustLevel

bp = Blueprint("agents", __name__)


class Bootstrap(Body):
    name: str
    #: an external bot's type: nanoclaw, simple or webhook
    type: str
    #: null counts as ""
    description: str | None = None
    #: where a webhook bot's events are POSTed (webhook bots only, and required for them)
    webhook_url: str | None = None
    #: make the bot an A2A agent (decision 0062); null counts as false
    a2a: bool | None = None


class BotSession(Shape):
    """The new bot, its token and where it connects."""

    agent_id: Id
    token: str
    ws_url: str
    model_url: str
    name: str
    type: str
    role: str
    #: only for webhook bots: the key of their deliveries' signatures
    webhook_secret: str | msgspec.UnsetType = msgspec.UNSET


class Spawn(Body):
    name: str
    #: a managed bot's type: llm, coder or echo
    type: str
    model: str | None = None
    #: the rooms it joins (ids); none when absent
    rooms: list[str] | None = None
    #: an API key for its model (the node keeps it only in memory)
    api_key: str | None = None


class Spawned(Shape):
    """The managed bot just started."""

    agent_id: Id
    name: str
    type: str
    role: str
    status: Literal["starting"]


class WebhookStatus(Shape):
    """A webhook bot's deliveries."""

    status: str
    delivered: int
    failed_attempts: int
    rejected: int
    skipped: int
    last_error: str | None


class Agent(Shape):
    """An agent (a bot participant) with its presence and, for managed bots,
    its process's state (for webhook bots, its deliveries')."""

    agent_id: Id
    name: str
    type: str
    role: str
    online: bool
    last_seen: Timestamp | None
    created_at: Timestamp | None
    origin: str | None
    trust_level: TrustLevel
    description: str
    managed: bool
    #: an A2A agent: a skill of /.well-known/agent-card.json, at /a2a/agents/<agentId>
    a2a: bool
    #: managed bots only: starting, running, needs_key, failed, stopped...
    status: str | msgspec.UnsetType = msgspec.UNSET
    #: managed bots only
    restarts: int | msgspec.UnsetType = msgspec.UNSET
    #: managed bots only
    detail: str | msgspec.UnsetType | None = msgspec.UNSET
    #: webhook bots only, once their deliveries have run on this node
    webhook: WebhookStatus | msgspec.UnsetType = msgspec.UNSET


class AgentChange(Body):
    #: make the bot an A2A agent (true) or no longer one (false)
    a2a: bool


class AgentChanged(Shape):
    """What the bot is now."""

    agent_id: Id
    a2a: bool


class AgentDeleted(Ok):
    agent_id: Id


class SendCommand(Body):
    #: 1 to 64 characters: a-z first, then a-z 0-9 _ . -
    command: str
    #: the command's arguments ({} when absent)
    args: dict[str, Any] | None = None


class CommandResult(Body):
    #: false: the command failed (absent or null: it succeeded)
    ok: bool | None = None
    #: any JSON value
    result: Any = None


class Command(Shape):
    """A command to an agent: its state and, once answered, its result."""

    command_id: Id
    agent_id: Id
    command: str
    args: dict[str, Any]
    sent_by: str | None
    status: Literal["pending", "delivered", "completed", "failed"]
    created_at: Timestamp
    delivered_at: Timestamp | None
    completed_at: Timestamp | None
    ok: bool | None
    #: any JSON value (null until answered)
    result: Any


@bp.post("/api/agents/bootstrap")
@public("bearer token (an admin's, when registration is closed)", token_if_sent=True)
@accepts(Bootstrap)
@answers(BotSession, 201)
async def bootstrap(data: Bootstrap) -> tuple[Any, int]:
    """Register an external bot: its token (open meshes need no token; closed ones an admin's)."""
    actor = await caller() if token_sent() else None
    mesh_node = node()
    result = await mesh_node.agents.bootstrap(
        actor,
        name=data.name,
        bot_type=data.type,
        description=data.description or "",
        webhook_url=data.webhook_url,
        base_url=mesh_node.address.url or request.host_url,
        address=client_address(),
        a2a=bool(data.a2a),
    )
    return reply(result.to_json(), 201)


@bp.post("/api/agents/spawn")
@accepts(Spawn)
@answers(Spawned, 201)
async def spawn(data: Spawn) -> tuple[Any, int]:
    """Start a managed bot that the node runs itself (admins)."""
    actor = await caller()
    participant = await node().agents.spawn(
        actor,
        name=data.name,
        bot_type=data.type,
        model=data.model,
        rooms=data.rooms or [],
        api_key=data.api_key,
    )
    return reply(
        {
            "agentId": participant.participant_id,
            "name": participant.name,
            "type": participant.type,
            "role": participant.role,
            "status": "starting",
        },
        201,
    )


@bp.get("/api/agents")
@answers(list[Agent])
async def list_agents() -> tuple[Any, int]:
    """Every agent, with its presence and state."""
    actor = await caller()
    return reply(await node().agents.list_agents(actor))


@bp.patch("/api/agents/<agent_id>")
@accepts(AgentChange)
@answers(AgentChanged)
async def change_agent(agent_id: str, data: AgentChange) -> tuple[Any, int]:
    """Make a bot an A2A agent or no longer one (the bot, its registrant, or admins)."""
    actor = await caller()
    return reply(await node().agents.set_a2a(actor, agent_id, data.a2a))


@bp.delete("/api/agents/<agent_id>")
@answers(AgentDeleted)
async def delete_agent(agent_id: str) -> tuple[Any, int]:
    """Remove an agent (admins): its token stops working at once."""
    actor = await caller()
    await node().agents.delete(actor, agent_id)
    return reply({"ok": True, "agentId": agent_id})


@bp.post("/api/agents/<agent_id>/command")
@accepts(SendCommand)
@answers(Command, 202)
async def send_command(agent_id: str, data: SendCommand) -> tuple[Any, int]:
    """Queue a command for an agent (admins, or the bot's registrant)."""
    actor = await caller()
    command = await node().commands.send_command(actor, agent_id, data.command, data.args)
    return reply(command_json(command), 202)


@bp.get("/api/agents/<agent_id>/commands/<command_id>")
@answers(Command)
async def get_command(agent_id: str, command_id: str) -> tuple[Any, int]:
    """A command's state and result."""
    actor = await caller()
    return reply(command_json(await node().commands.get_command(actor, agent_id, command_id)))


@bp.post("/api/commands/<command_id>/result")
@accepts(CommandResult)
@answers(Command)
async def command_result(command_id: str, data: CommandResult) -> tuple[Any, int]:
    """An agent answers one of its commands (the WebSocket ``command_result`` frame's twin)."""
    actor = await caller()
    command = await node().commands.complete_command(
        actor, command_id, ok=data.ok is not False, result=data.result
    )
    return reply(command_json(command))
