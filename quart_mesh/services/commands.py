"""Structured commands to agents (spec §4.6): queued durably, delivered by
whatever transport the agent uses (a WebSocket ``command`` event, a poll, a
webhook POST), answered once by the agent (``command_result``)."""

from __future__ import annotations

import json
import re
from typing import Any

from sqlalchemy.engine import Connection

from ..broker import Broker
from ..config import Settings
from ..errors import BadRequest, Conflict, NotFound, PayloadTooLarge, RateLimited
from ..events import CommandIssued
from ..ids import is_ulid, new_id
from ..records import iso, now_ms
from ..store import Database, outbox
from ..store import agents as repo
from .authz import Actor, authorize

__all__ = ["Commands", "command_event", "command_json"]

_COMMAND_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")


def command_json(command: repo.CommandRow) -> dict[str, Any]:
    """A command as ``GET /api/agents/:id/commands/:commandId`` shows it."""
    if command.completed_at is not None:
        status = "completed" if command.ok else "failed"
    else:
        status = "delivered" if command.delivered_at is not None else "pending"
    return {
        "commandId": command.command_id,
        "agentId": command.agent_id,
        "command": command.command,
        "args": command.args,
        "sentBy": command.sent_by,
        "status": status,
        "createdAt": iso(command.created_at),
        "deliveredAt": iso(command.delivered_at),
        "completedAt": iso(command.completed_at),
        "ok": command.ok,
        "result": command.result,
    }


def command_event(command: repo.CommandRow) -> CommandIssued:
    return CommandIssued(
        None,
        command_id=command.command_id,
        agent_id=command.agent_id,
        command=command.command,
        args=command.args,
        sent_by=command.sent_by,
        created_at=command.created_at,
    )


class Commands:
    def __init__(self, settings: Settings, db: Database, broker: Broker) -> None:
        self._settings = settings
        self._db = db
        self._broker = broker

    async def send_command(
        self, actor: Actor, agent_id: str, command: str, args: Any = None
    ) -> repo.CommandRow:
        """Queue a structured command for an agent and deliver it if it is
        connected (WebSocket ``command`` event); otherwise its next poll,
        WebSocket connection or webhook delivery takes it.

        Admins may command any agent; whoever registered a bot may command it.

        Raises:
            NotFound: no such agent.
            Forbidden: neither an admin nor the bot's creator.
            BadRequest: a malformed command name or args.
            RateLimited: too many commands are waiting for this agent.
        """
        if not is_ulid(agent_id):
            raise NotFound("no such agent", "agent_not_found")
        found, creator = await self._db.read(lambda conn: repo.agent_creator(conn, agent_id))
        if not found:
            raise NotFound("no such agent", "agent_not_found")
        authorize(actor, "agents.command", owner_id=creator)
        if not isinstance(command, str) or not _COMMAND_NAME.fullmatch(command):
            raise BadRequest(
                "command must be 1 to 64 characters: a-z first, then a-z 0-9 _ . -",
                "invalid_command",
            )
        args = {} if args is None else args
        if not isinstance(args, dict):
            raise BadRequest("args must be a JSON object", "invalid_field")
        self._check_size(args, "args")
        limits = self._settings.limits
        row = repo.CommandRow(new_id(), agent_id, command, args, actor.participant_id, now_ms())

        def store(conn: Connection) -> None:
            if repo.count_pending(conn, agent_id) >= limits.max_pending_commands:
                raise RateLimited(
                    f"{limits.max_pending_commands} commands are already waiting for this agent",
                    retry_after=10,
                    code="too_many_commands",
                )
            repo.insert_command(conn, row)
            outbox.emit_to(conn, agent_id, command_event(row))

        await self._db.write(store)
        return row

    async def pending_commands(self, agent_id: str) -> list[repo.CommandRow]:
        """Undelivered commands of *agent_id*, oldest first (not marked; at
        most the configured maximum waiting, ``max_pending_commands``)."""
        limit = self._settings.limits.max_pending_commands
        return await self._db.read(lambda conn: repo.pending_commands(conn, agent_id, limit))

    async def mark_delivered(self, command_ids: list[str]) -> None:
        at = now_ms()
        await self._db.write(lambda conn: repo.mark_delivered(conn, command_ids, at))

    async def complete_command(
        self, actor: Actor, command_id: str, *, ok: bool, result: Any = None
    ) -> repo.CommandRow:
        """The agent answers one of its commands (once).

        Raises:
            NotFound: no such command for this agent.
            Conflict: already answered.
            BadRequest: the result is too large.
        """
        self._check_size(result, "result")

        def store(conn: Connection) -> repo.CommandRow:
            command = repo.get_command(conn, command_id) if is_ulid(command_id) else None
            if command is None or command.agent_id != actor.participant_id:
                raise NotFound("no such command for you", "command_not_found")
            if command.completed_at is not None:
                raise Conflict("this command was already answered", "already_answered")
            repo.complete_command(conn, command_id, ok=ok, result=result, at=now_ms())
            answered = repo.get_command(conn, command_id)
            assert answered is not None
            return answered

        return await self._db.write(store)

    async def get_command(self, actor: Actor, agent_id: str, command_id: str) -> repo.CommandRow:
        """A command's state and answer, for whoever may command that agent.

        Raises:
            NotFound: no such command for that agent.
            Forbidden: may not command that agent.
        """

        def read(conn: Connection) -> tuple[repo.CommandRow | None, str | None]:
            command = repo.get_command(conn, command_id) if is_ulid(command_id) else None
            return command, repo.agent_creator(conn, agent_id)[1]

        command, creator = await self._db.read(read)
        if command is None or command.agent_id != agent_id:
            raise NotFound("no such command", "command_not_found")
        if actor.participant_id != agent_id:
            authorize(actor, "agents.command", owner_id=creator)
        return command

    def _check_size(self, value: Any, name: str) -> None:
        limit = self._settings.limits.max_command_bytes
        if len(json.dumps(value).encode()) > limit:
            raise PayloadTooLarge(f"{name} must be at most {limit} bytes of JSON", "too_large")
