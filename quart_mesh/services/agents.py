"""Agents: bot participants and how they connect (spec §2.2, §3.2, §4.6).

This module holds bootstrap (external bots registering themselves), the agent
list, agent removal and which bots are A2A agents (decision 0062: managed
bots by default, external ones when they or their registrant opt in). Bots
are participants like any other: they get a token and use the same REST,
WebSocket and polling paths, through the same permission checks.

Managed bots and webhook deliveries run on one process of the mesh (elected
singletons, decision 0035), which may not be the one a request reaches: what
a request changes is written to the store first, then handed to this
process's runner, which acts at once if it is the one running, and is
otherwise picked up from the store by the process that is. A managed bot's
status comes from that runner here, else from the store (``managed_bots``).
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

from sqlalchemy.engine import Connection

from ..config import Settings
from ..errors import BadRequest, Forbidden, NotFound
from ..ids import is_ulid
from ..records import Participant, now_ms
from ..store import Database
from ..store import agents as repo
from ..store import messages as messages_repo
from ..store import rooms as rooms_repo
from .accounts import Accounts
from .authz import Actor, authorize, permitted
from .validation import is_resolvable_url
from .webhooks import Webhooks, is_private_address

__all__ = ["EXTERNAL_TYPES", "MANAGED_TYPES", "Agents", "Bootstrapped", "BotRunner", "BotSpec"]

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


@dataclass(frozen=True, slots=True)
class BotSpec:
    """A managed bot to run: what its process is started with."""

    agent_id: str
    name: str
    bot_type: str
    model: str | None
    rooms: tuple[str, ...]
    #: spawned with an API key, which the node keeps only in memory
    needs_key: bool
    api_key: str | None = field(default=None, repr=False)
    #: the last message cursor it acknowledged (its next start resumes after it)
    cursor: str | None = None


class BotRunner(Protocol):
    """What runs managed bots (``bots.supervisor.Supervisor``)."""

    def launch(self, spec: BotSpec) -> None:
        """Run a spawned bot (recorded already), if this process runs bots."""
        ...

    def stop(self, agent_id: str) -> None:
        """Stop a removed bot (removed already), if this process runs it."""
        ...

    def state(self, agent_id: str) -> dict[str, Any] | None:
        """``status``, ``restarts`` and ``detail`` of a bot it runs here, or None."""
        ...

    def sealed_key(self, api_key: str | None) -> str | None:
        """What to store of a spawn's API key for the process that will run
        the bot (None: nothing, the key stays in this process's memory)."""
        ...


class Agents:
    """Owns the agents (module docstring): external bots' bootstrap, managed
    bots' spawn, the agent list, which bots are A2A agents, and removal.
    Used by ``POST /api/agents/bootstrap``, ``POST /api/agents/spawn``,
    ``GET /api/agents`` and ``PATCH``/``DELETE /api/agents/:agentId``
    (commands to agents are ``node.commands``'). Reached as ``node.agents``.
    """

    def __init__(
        self,
        settings: Settings,
        db: Database,
        accounts: Accounts,
        bots: BotRunner,
        webhooks: Webhooks,
    ) -> None:
        self._settings = settings
        self._webhooks = webhooks
        self._db = db
        self._accounts = accounts
        self._bots = bots

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

        The bot is persisted (started again when the node restarts) and run
        by the process that runs managed bots (this one, or another on
        PostgreSQL). Its ``api_key`` is kept in memory and the child's
        environment; on PostgreSQL it is also stored sealed with the node
        secret, for the process that runs the bot (``bots/supervisor.py``).

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
        sealed_key = self._bots.sealed_key(api_key)

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
                a2a=True,
            )
            repo.record_managed_bot(
                conn, participant.participant_id, sealed_key=sealed_key, at=now_ms()
            )

        session = await self._accounts.create_bot(name, bot_type, role, "", record)
        participant = session.participant
        self._bots.launch(
            BotSpec(
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
        a2a: bool = False,
    ) -> Bootstrapped:
        """Register an external bot (role ``agent``) and issue its token.

        Open registration lets anyone bootstrap; otherwise an admin or the
        owner must (``actor``). With *a2a* the bot is an A2A agent from the
        start (:meth:`set_a2a`). Bootstraps from *address* (the client's) are
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
        if actor is None or not permitted(actor, "agents.bootstrap"):
            await self._accounts.rate_limits.address("registration_address", address)
        if bot_type in MANAGED_TYPES:
            raise BadRequest(
                f"{bot_type} bots are run by the node: use POST /api/agents/spawn",
                "managed_type",
            )
        if bot_type not in EXTERNAL_TYPES:
            raise BadRequest(f"type must be one of {', '.join(EXTERNAL_TYPES)}", "invalid_type")
        # bots an admin registers may call back into private networks; others may not
        private_ok = self._settings.webhook_allow_private or (
            actor is not None and permitted(actor, "agents.private_webhook")
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
                a2a=a2a,
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
                "a2a": row.a2a,
                **self._managed_state(row),
            }
            for row in rows
        ]

    def _managed_state(self, row: repo.AgentRow) -> dict[str, Any]:
        agent_id = row.participant.participant_id
        if not row.managed:
            webhook = self._webhooks.states.get(agent_id)
            return {"webhook": webhook.to_json()} if webhook else {}
        # this process's runner if it runs the bot (live), else the store
        state = self._bots.state(agent_id)
        if state is not None:
            return state
        return (row.state or repo.BotState("stopped")).to_json()

    async def set_a2a(self, actor: Actor, agent_id: str, enabled: bool) -> dict[str, Any]:
        """Make a bot an A2A agent, or no longer one (decision 0062). The bot
        itself may, its registrant may, and so may whoever may command any
        agent (``agents.command``: admins and the owner).

        Returns:
            ``{"agentId", "a2a"}``.

        Raises:
            NotFound: no such agent.
            Forbidden: someone else's bot, without ``agents.command``.
        """
        if not is_ulid(agent_id):
            raise NotFound("no such agent", "agent_not_found")
        found, creator = await self._db.read(lambda conn: repo.agent_creator(conn, agent_id))
        if not found:
            raise NotFound("no such agent", "agent_not_found")
        if actor.participant_id != agent_id:
            authorize(actor, "agents.command", owner_id=creator)
        await self._db.write(lambda conn: repo.set_a2a(conn, agent_id, enabled))
        return {"agentId": agent_id, "a2a": enabled}

    async def a2a_enabled(self, agent_id: str) -> bool:
        """Whether *agent_id* is a bot that is an A2A agent (for ``Tasks.ask``)."""
        return await self.a2a_agent(agent_id) is not None

    async def a2a_agent(self, agent_id: str) -> repo.A2AAgent | None:
        """*agent_id* if it is a bot that is an A2A agent, else None. Public:
        what its agent card shows (name, type, description)."""
        if not is_ulid(agent_id):
            return None
        return await self._db.read(lambda conn: repo.a2a_agent(conn, agent_id))

    async def a2a_agents(self) -> list[repo.A2AAgent]:
        """Every bot that is an A2A agent, by name: the node card's skills
        (public, like the mesh manifest's agents)."""
        return await self._db.read(repo.a2a_agents)

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
        self._bots.stop(agent_id)
        self._webhooks.stop(agent_id)


def _check_url(url: str, private_ok: bool) -> None:
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError:
        raise BadRequest("webhookUrl must be an http(s) URL", "invalid_url") from None
    if parts.scheme not in ("http", "https") or not host or len(url) > 2000:
        raise BadRequest("webhookUrl must be an http(s) URL", "invalid_url")
    if not is_resolvable_url(url):  # every delivery would fail: say so now
        raise BadRequest("webhookUrl has a host name that cannot be looked up", "invalid_url")
    if parts.username or parts.password:
        raise BadRequest("webhookUrl must not carry credentials", "invalid_url")
    if not private_ok and (host == "localhost" or is_private_address(host)):
        raise Forbidden(
            "only an admin may register a webhook on a private or loopback address",
            "private_webhook_url",
        )
