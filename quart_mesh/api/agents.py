"""Agents and bots (spec §4.6): bootstrap, spawn, list, remove, commands."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, request

from ..errors import BadRequest
from ..services.commands import command_json
from ._common import body, caller, node, reply

bp = Blueprint("agents", __name__)


@bp.post("/api/agents/bootstrap")
async def bootstrap() -> tuple[Any, int]:
    # open registration needs no token; a closed mesh needs an admin's
    actor = await caller() if request.headers.get("Authorization") else None
    fields = await body()
    mesh_node = node()
    result = await mesh_node.agents.bootstrap(
        actor,
        name=fields.req_str("name"),
        bot_type=fields.req_str("type"),
        description=fields.opt_str("description") or "",
        webhook_url=fields.opt_str("webhookUrl"),
        base_url=mesh_node.address.url or request.host_url,
        address=request.remote_addr,
    )
    return reply(result.to_json(), 201)


@bp.post("/api/agents/spawn")
async def spawn() -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    rooms = fields.data.get("rooms", [])
    if not isinstance(rooms, list) or not all(isinstance(r, str) for r in rooms):
        raise BadRequest("rooms must be a list of room ids", "invalid_field")
    participant = await node().agents.spawn(
        actor,
        name=fields.req_str("name"),
        bot_type=fields.req_str("type"),
        model=fields.opt_str("model"),
        rooms=rooms,
        api_key=fields.opt_str("apiKey"),
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
async def list_agents() -> tuple[Any, int]:
    actor = await caller()
    return reply(await node().agents.list_agents(actor))


@bp.delete("/api/agents/<agent_id>")
async def delete_agent(agent_id: str) -> tuple[Any, int]:
    actor = await caller()
    await node().agents.delete(actor, agent_id)
    return reply({"ok": True, "agentId": agent_id})


@bp.post("/api/agents/<agent_id>/command")
async def send_command(agent_id: str) -> tuple[Any, int]:
    actor = await caller()
    fields = await body()
    command = await node().commands.send_command(
        actor, agent_id, fields.req_str("command"), fields.data.get("args")
    )
    return reply(command_json(command), 202)


@bp.get("/api/agents/<agent_id>/commands/<command_id>")
async def get_command(agent_id: str, command_id: str) -> tuple[Any, int]:
    actor = await caller()
    return reply(command_json(await node().commands.get_command(actor, agent_id, command_id)))


@bp.post("/api/commands/<command_id>/result")
async def command_result(command_id: str) -> tuple[Any, int]:
    """An agent answers one of its commands (the WebSocket ``command_result`` frame's twin)."""
    actor = await caller()
    fields = await body()
    command = await node().commands.complete_command(
        actor, command_id, ok=fields.opt_bool("ok") is not False, result=fields.data.get("result")
    )
    return reply(command_json(command))
