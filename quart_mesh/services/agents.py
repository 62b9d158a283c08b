"""Agents: bot participants and how they connect (spec §2.2, §3.2, §4.6).

This module holds bootstrap (external bots registering themselves), the agent
list and agent removal. Bots are participants like any other: they get a
token and use the same REST, WebSocket and polling paths, through the same
permission checks.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy.engine import Connection

from ..bots.supervisor import ManagedBot, Supervisor
from ..broker import Broker
from ..config import Settings
from ..errors import BadRequest, Conflict, Forbidden, NotFound, PayloadTooLarge, RateLimited
from ..events import CommandIssued
from ..ids import is_ulid, new_id
from ..models import Participant, iso, now_ms
from ..store import Database
from ..store import agents as repo
from ..store import messages as messages_repo
from ..store import rooms as rooms_repo
from .accounts import Accounts
from .authz import Actor, authorize, priority_of
from .webhooks import Webhooks, is_private_address

__all__ = ["EXTERNAL_TYPES", "MANAGED_TYPES", "Agents", "Bootstrapped", "command_json"]

_COMMAND_NAME = re.compile(r"[a-z][a-z0-9_.-]{0,63}")

#: bots that run elsewhere and connect in (bootstrap)
EXTERNAL_TYPES = ("nanoclaw", "simple", "webhook")
#: bots the node runs itself (spawn)
MANAGED_TYPES = ("llm", "coder", "echo")


@dataclass(frozen=True, slots=True)
class Bootstrapped:
    participant: Participant
    token: str
    base_url: str
    webhook_secret: str | None

    def to_json(self) -> dict[str, Any]:
        ws_base = "ws" + self.base_url.removeprefix("http")
        body: dict[str, Any] = {
            "agentId": self.participant.participant_id,
            "token": self.token,
            "wsUrl": f"{ws_base}/ws",
            "modelUrl": f"{self.base_url}/api/models/v1",
            "name": self.participant.name,
            "type": self.participant.type,
            "role": self.participant.role,
        }
        if self.webhook_secret is not None:
            body["webhookSecret"] = self.webhook_secret
        return body


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


class Agents:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        broker: Broker,
        accounts: Accounts,
        supervisor: Supervisor,
        webhooks: Webhooks,
    ) -> None:
        self._settings = settings
        self._webhooks = webhooks
        self._db = db
        self._broker = broker
        self._accounts = accounts
        self._supervisor = supervisor

    async def spawn(
        self,
        actor: Actor,
        *,
        name: str,
        bot_type: str,
        model: str | None,
        rooms: list[str],
        api_key: str | None,
    ) -> Participant:
        """Register a managed bot and start it (owner and admins only).

        The bot is persisted (started again when the node restarts); its
        ``api_key`` is kept only in memory and in the child's environment.

        Raises:
            Forbidden: not an admin.
            BadRequest: a type the node does not run, unknown rooms, bad values.
            Conflict: the name is taken.
        """
        authorize(actor, "agents.spawn")
        if bot_type not in MANAGED_TYPES:
            raise BadRequest(f"type must be one of {', '.join(MANAGED_TYPES)}", "invalid_type")
        if len(rooms) > 100 or not all(is_ulid(r) for r in rooms):
            raise BadRequest("rooms must be a list of room ids", "invalid_rooms")
        if api_key is not None and not 1 <= len(api_key) <= 4096:
            raise BadRequest("apiKey must be 1 to 4096 characters", "invalid_field")
        if model is not None and not 1 <= len(model) <= 200:
            raise BadRequest("model must be 1 to 200 characters", "invalid_field")
        role = "super_agent" if bot_type == "coder" else "agent"

        def record(conn: Connection, participant: Participant) -> None:
            for room_id in rooms:
                room = rooms_repo.get_room(conn, room_id)
                if room is None or room.kind != "room":
                    raise BadRequest(f"no such room: {room_id}", "unknown_room")
            repo.insert_agent(
                conn,
                participant.participant_id,
                managed=True,
                webhook_url=None,
                webhook_secret=None,
                created_by=actor.participant_id,
                created_at=now_ms(),
                model=model,
                rooms=rooms,
                needs_key=api_key is not None,
            )

        session = await self._accounts.create_bot(name, bot_type, role, "", record)
        participant = session.participant
        self._supervisor.launch(
            ManagedBot(
                participant.participant_id,
                participant.name,
                bot_type,
                model,
                tuple(rooms),
                api_key is not None,
                api_key=api_key,
            )
        )
        return participant

    async def bootstrap(
        self,
        actor: Actor | None,
        *,
        name: str,
        bot_type: str,
        base_url: str,
        description: str = "",
        webhook_url: str | None = None,
        address: str | None = None,
    ) -> Bootstrapped:
        """Register an external bot (role ``agent``) and issue its token.

        Open registration lets anyone bootstrap; otherwise an admin or the
        owner must (``actor``). Bootstraps from *address* (the client's) are
        rate-limited like registrations, except an admin's.

        Raises:
            Unauthorized/Forbidden: a closed mesh without an admin caller.
            RateLimited: too many registrations from *address*.
            BadRequest: unknown type, a managed type, a missing or bad webhook URL.
            Conflict: the name is taken.
        """
        mesh = self._accounts.mesh
        if mesh is None:
            raise Forbidden("the mesh is not set up yet", "not_initialized")
        if mesh.registration_mode != "open":
            if actor is None:
                raise Forbidden(
                    "registration is closed: an admin must bootstrap bots", "registration_closed"
                )
            authorize(actor, "agents.bootstrap")
        if actor is None or actor.priority < priority_of("admin"):
            self._accounts.rate_limits.address("registration_address", address)
        if bot_type in MANAGED_TYPES:
            raise BadRequest(
                f"{bot_type} bots are run by the node: use POST /api/agents/spawn",
                "managed_type",
            )
        if bot_type not in EXTERNAL_TYPES:
            raise BadRequest(f"type must be one of {', '.join(EXTERNAL_TYPES)}", "invalid_type")
        # bots an admin registers may call back into private networks; others may not
        private_ok = self._settings.webhook_allow_private or (
            actor is not None and actor.priority >= priority_of("admin")
        )
        if bot_type == "webhook":
            if webhook_url is None:
                raise BadRequest("webhook bots need a webhookUrl", "missing_field")
            _check_url(webhook_url, private_ok)
        elif webhook_url is not None:
            raise BadRequest("only webhook bots take a webhookUrl", "invalid_field")
        secret = secrets.token_hex(32) if bot_type == "webhook" else None
        created_by = actor.participant_id if actor else None

        def record(conn: Connection, participant: Participant) -> None:
            repo.insert_agent(
                conn,
                participant.participant_id,
                managed=False,
                webhook_url=webhook_url,
                webhook_secret=secret,
                created_by=created_by,
                created_at=now_ms(),
                # its deliveries start with the messages after its registration
                delivery_cursor=messages_repo.head_seq(conn) if webhook_url else None,
                webhook_private_ok=private_ok,
            )

        session = await self._accounts.create_bot(name, bot_type, "agent", description, record)
        if webhook_url is not None:
            self._webhooks.start(session.participant.participant_id)
        return Bootstrapped(session.participant, session.token, base_url.rstrip("/"), secret)

    async def list_agents(self, actor: Actor) -> list[dict[str, Any]]:
        """Every agent with its live ``online`` flag."""
        authorize(actor, "participants.read")
        rows = await self._db.read(repo.list_agents)
        return [
            {
                "agentId": row.participant.participant_id,
                **{
                    k: v
                    for k, v in self._accounts.with_presence(row.participant).to_json().items()
                    if k != "participantId"
                },
                "description": row.participant.description,
                "managed": row.managed,
                **self._managed_state(row.participant.participant_id, row.managed),
            }
            for row in rows
        ]

    def _managed_state(self, agent_id: str, managed: bool) -> dict[str, Any]:
        if not managed:
            webhook = self._webhooks.states.get(agent_id)
            return {"webhook": webhook.to_json()} if webhook else {}
        bot = self._supervisor.bots.get(agent_id)
        return bot.to_json() if bot else {"status": "stopped", "restarts": 0, "detail": None}

    async def delete(self, actor: Actor, agent_id: str) -> None:
        """Remove an agent (admin and above): its token stops working at once and
        its sessions are closed.

        Raises:
            Forbidden: not an admin.
            NotFound: no such agent.
        """
        authorize(actor, "agents.delete")
        if not await self._db.read(lambda conn: repo.is_agent(conn, agent_id)):
            raise NotFound("no such agent", "agent_not_found")
        await self._accounts.delete_participant(actor, agent_id)
        self._supervisor.stop(agent_id)
        self._webhooks.stop(agent_id)

    # commands ---------------------------------------------------------------

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

        await self._db.write(
            store, then=lambda _: self._broker.send_to(agent_id, command_event(row))
        )
        return row

    async def take_commands(self, actor: Actor) -> list[repo.CommandRow]:
        """The caller's undelivered commands, now marked delivered (a poll)."""
        pending = await self._db.read(
            lambda conn: repo.pending_commands(conn, actor.participant_id, 100)
        )
        if pending:
            await self.mark_delivered([c.command_id for c in pending])
        return pending

    async def pending_commands(self, agent_id: str) -> list[repo.CommandRow]:
        """Undelivered commands of *agent_id*, oldest first (not marked)."""
        return await self._db.read(lambda conn: repo.pending_commands(conn, agent_id, 100))

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


def _check_url(url: str, private_ok: bool) -> None:
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise BadRequest("webhookUrl must be an http(s) URL", "invalid_url") from None
    if parts.scheme not in ("http", "https") or not host or len(url) > 2000:
        raise BadRequest("webhookUrl must be an http(s) URL", "invalid_url")
    if parts.username or parts.password:
        raise BadRequest("webhookUrl must not carry credentials", "invalid_url")
    if not private_ok and (host == "localhost" or is_private_address(host)):
        raise Forbidden(
            "only an admin may register a webhook on a private or loopback address",
            "private_webhook_url",
        )
