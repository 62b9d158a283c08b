"""Webhook bots: the node POSTs each event addressed to the bot to its URL.

One supervised task per webhook bot (in :meth:`Webhooks.run`'s nursery)
drains that bot's queue. Delivery is an elected singleton (decision 0035):
on PostgreSQL, where several processes serve one mesh, :meth:`Webhooks.run`
runs on one of them, which reads the webhook bots again every
:data:`_RECONCILE_INTERVAL` seconds to pick up those registered through
another process. The queue is durable without a table of its own:
messages are read from the message log after the bot's persisted cursor
(``agents.delivery_cursor``, advanced after each delivery) and commands from
``agent_commands`` (marked delivered after each delivery), so a node restart
or a receiver that is down loses nothing. It is bounded by
``webhook_max_backlog``: a receiver that stays down while more messages than
that arrive has the oldest skipped (and counted), so it cannot pin the node.

Each delivery is one JSON event (the WebSocket event of the same kind),
signed ``X-Mesh-Signature: sha256=<hex HMAC-SHA256 of the body>`` with the
bot's secret, identified by ``X-Mesh-Delivery`` (the message or command id,
stable across retries: receivers deduplicate by it). Failures are retried with
exponential backoff; a receiver that keeps failing is one fault
(``faults.RECEIVER_FAILING``, keyed by the bot's id), logged when it starts
and when the receiver takes an event again, not a line per attempt. A 2xx
answer ``{"content": "..."}`` to a message is posted as the bot's reply in
that room; ``{"ok": ..., "result": ...}`` to a command answers the command.
See ``docs/agents.md``.

What a receiver answers cannot hurt the node: an answer that does not parse
(even one nested too deep to parse) is no answer, and a URL whose name cannot
be looked up fails each attempt like a receiver that is down. After a POST
was taken, the writes that record it (the cursor, a command marked delivered)
and the bot's reply are retried on their own while the store is unavailable
or overloaded: retrying the whole round would POST the event again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import httpx
import trio
from sqlalchemy.engine import Connection

from ..config import Settings
from ..ends import EndReason
from ..errors import MeshError, Transient
from ..events import MessagePosted
from ..faults import RECEIVER_FAILING
from ..records import Message, now_ms
from ..retry import Backoff, retrying
from ..store import Database
from ..store import agents as repo
from ..store import messages as messages_repo
from .commands import Commands, command_event
from .delivery import Delivery, Feed
from .outbound import is_private_address, pin_public, tls_context

if TYPE_CHECKING:
    from .accounts import Accounts
    from .authz import Actor
    from .messages import Messages

__all__ = ["Webhooks", "is_private_address", "sign"]

log = logging.getLogger(__name__)

_BACKOFF_START = 1.0
#: how often the running delivery reads which webhook bots the store lists
_RECONCILE_INTERVAL = 1.0
#: messages read from the store per round of delivery
_PAGE = 50
#: most bytes of a receiver's answer read
_MAX_ANSWER_BYTES = 64 * 1024
#: retried statuses; other 3xx/4xx answers are the receiver refusing the event
_RETRY_STATUSES = frozenset({408, 425, 429})


def sign(secret: str, body: bytes) -> str:
    """The ``X-Mesh-Signature`` header value for *body*."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@dataclass
class WebhookState:
    """What ``GET /api/agents`` shows of a webhook bot's deliveries."""

    status: str = "idle"  # idle | delivering | retrying | stopped
    delivered: int = 0
    failed_attempts: int = 0
    #: events the receiver refused (a 4xx answer) and that were dropped
    rejected: int = 0
    #: events skipped because the backlog grew beyond webhook_max_backlog
    skipped: int = 0
    last_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "delivered": self.delivered,
            "failedAttempts": self.failed_attempts,
            "rejected": self.rejected,
            "skipped": self.skipped,
            "lastError": self.last_error,
        }


class Webhooks:
    """Runs in the node's nursery (:meth:`run`): one delivery task per webhook bot."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        accounts: Accounts,
        messages: Messages,
        commands: Commands,
        delivery: Delivery,
    ) -> None:
        self._settings = settings
        self._db = db
        self._delivery = delivery
        self._accounts = accounts
        self._messages = messages
        self._commands = commands
        self.states: dict[str, WebhookState] = {}
        #: deliveries that failed since the node started (``/metrics``): an
        #: attempt that will be retried, or an event the receiver refused (4xx)
        self.failures = {"attempt": 0, "rejected": 0}
        self._scopes: dict[str, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start one delivery task per webhook bot, then those :meth:`start`
        asks for and those the store lists later (registered through another
        process); run until cancelled. Reads of the bots are retried while
        the store is unavailable."""
        read = partial(self._db.read, repo.webhook_targets)
        targets = await retrying("reading webhook bots", read, logger=log)
        self.states, self._scopes = {}, {}
        async with (
            httpx.AsyncClient(
                timeout=self._settings.webhook_timeout,
                follow_redirects=False,
                trust_env=False,
                verify=tls_context(),
                headers={"User-Agent": "quart-mesh-webhooks"},
            ) as client,
            trio.open_nursery() as nursery,
        ):
            self._client = client
            self._nursery = nursery
            for target in targets:
                self.start(target.agent_id)
            task_status.started()
            try:
                while True:
                    await trio.sleep(_RECONCILE_INTERVAL)
                    for target in await retrying("reading webhook bots", read, logger=log):
                        self.start(target.agent_id)
            finally:
                # no task starts once this one ends; those running keep their state
                self._nursery = None
                self.states, self._scopes = {}, {}

    def start(self, agent_id: str) -> None:
        """Start delivering to a (new) webhook bot, if this process runs
        webhook delivery (else the one that does finds it in the store)."""
        if self._nursery is None:
            return
        if agent_id not in self._scopes:
            state = self.states[agent_id] = WebhookState()
            scope = self._scopes[agent_id] = trio.CancelScope()
            self._nursery.start_soon(self._deliver_forever, agent_id, state, scope)

    def stop(self, agent_id: str) -> None:
        scope = self._scopes.pop(agent_id, None)
        self.states.pop(agent_id, None)
        if scope is not None:
            scope.cancel()

    async def _deliver_forever(
        self, agent_id: str, state: WebhookState, scope: trio.CancelScope
    ) -> None:
        # the task is handed its state: stop() or the end of run() may have
        # dropped the bot from the maps before this task first runs
        with scope:
            backoff = Backoff()
            try:
                await retrying(
                    f"webhook delivery to bot {agent_id}",
                    partial(self._follow, agent_id, state, backoff),
                    backoff=backoff,
                    logger=log,
                )
            finally:
                state.status = "stopped"
                self._db.faults.forget(RECEIVER_FAILING, key=agent_id, why="its delivery stopped")
                if self._scopes.get(agent_id) is scope:  # not a newer task's
                    del self._scopes[agent_id]

    async def _follow(self, agent_id: str, state: WebhookState, backoff: Backoff) -> None:
        """Deliver what is waiting, then wait for more, until the bot is gone."""
        while True:
            actor = await self._accounts.actor_of(agent_id)
            if actor is None:  # deleted
                self._scopes.pop(agent_id, None)
                return
            with await self._delivery.follow(actor, capacity=256) as feed:
                while True:
                    delivered = await self._drain(agent_id, state, feed)
                    backoff.reset()
                    if delivered:
                        continue
                    if agent_id not in self._scopes:
                        return
                    state.status = "idle"
                    if not await feed.wait_for_more():
                        break
            if feed.sub.failed is EndReason.REMOVED:
                return
            # fell behind (lagging): the store has it all; follow again

    async def _drain(self, agent_id: str, state: WebhookState, feed: Feed) -> bool:
        """Deliver everything waiting; False if there was nothing (or the bot is gone)."""
        found = await self._db.read(lambda conn: repo.webhook_targets(conn, agent_id))
        if not found:
            self._scopes.pop(agent_id, None)
            return False
        target = found[0]
        keep = self._settings.webhook_max_backlog
        cursor = target.cursor
        cutoff = await self._db.read(
            lambda conn: messages_repo.backlog_cutoff(conn, agent_id, cursor, keep)
        )
        if cutoff is not None:
            cursor, skipped = cutoff
            state.skipped += skipped
            log.warning("webhook bot %s is behind: skipped %d messages", agent_id, skipped)
            await self._record(
                agent_id, partial(repo.set_delivery_cursor, agent_id=agent_id, cursor=cursor)
            )
        backlog = await feed.backlog(cursor, _PAGE, commands=True)
        if not backlog.commands and not backlog.messages:
            return False
        state.status = "delivering"
        for command in backlog.commands:
            await self._deliver_command(target, command, state)
        for message in backlog.messages:
            if message.sender_id != agent_id:  # bots never get their own messages
                await self._deliver_message(target, message, state)
            await self._record(
                agent_id, partial(repo.set_delivery_cursor, agent_id=agent_id, cursor=message.seq)
            )
        return True

    async def _record(self, agent_id: str, write: Callable[[Connection], None]) -> None:
        """Write how far delivery went, retried on its own while the store is
        unavailable or overloaded (the events it records were taken already)."""
        await retrying(
            f"recording webhook delivery to bot {agent_id}",
            partial(self._db.write, write),
            logger=log,
        )

    async def _deliver_command(
        self, target: repo.WebhookTarget, command: repo.CommandRow, state: WebhookState
    ) -> None:
        answer = await self._post_until_done(
            target, command_event(command).to_json(), "command", command.command_id, state
        )
        await self._record(
            target.agent_id,
            lambda conn: repo.mark_delivered(conn, [command.command_id], now_ms()),
        )
        if not (isinstance(answer, dict) and ("ok" in answer or "result" in answer)):
            return

        async def complete() -> None:
            actor = await self._accounts.actor_of(target.agent_id)
            if actor is not None:
                await self._commands.complete_command(
                    actor,
                    command.command_id,
                    ok=answer.get("ok") is not False,
                    result=answer.get("result"),
                )

        try:
            await retrying(f"completing command {command.command_id}", complete, logger=log)
        except MeshError as error:  # not transient: the command cannot be completed
            log.info("webhook answer to command %s: %s", command.command_id, error)

    async def _deliver_message(
        self, target: repo.WebhookTarget, message: Message, state: WebhookState
    ) -> None:
        event = MessagePosted(message.room_id, message=message).to_json()
        answer = await self._post_until_done(target, event, "message", message.message_id, state)
        content = answer.get("content") if isinstance(answer, dict) else answer
        if not isinstance(content, str) or not content.strip():
            return
        try:
            await retrying(
                f"posting the reply of bot {target.agent_id}",
                partial(self._reply, target.agent_id, message, content),
                logger=log,
            )
        except MeshError as error:  # not transient (not a member, too long...): dropped
            log.info("webhook bot %s could not reply: %s", target.agent_id, error)

    async def _reply(self, agent_id: str, message: Message, content: str) -> None:
        actor = await self._accounts.actor_of(agent_id)
        sender = await self._accounts.actor_of(message.sender_id)
        if actor is None:
            return
        if sender is not None and sender.kind == "bot" and not _addressed(message, actor):
            return  # loop guard: bots answer other bots only when addressed
        # the reply's clientId is the message it answers: a retry after a commit
        # whose answer was lost returns the stored reply instead of a second one
        client_id = f"webhook-reply:{message.message_id}"
        await self._messages.send(actor, message.room_id, content, client_id=client_id)

    async def _post_until_done(
        self,
        target: repo.WebhookTarget,
        event: dict[str, Any],
        kind: str,
        delivery_id: str,
        state: WebhookState,
    ) -> Any:
        """POST one event until the receiver takes it (2xx: its parsed answer)
        or refuses it (4xx: ``None``), retrying everything else with backoff."""
        body = json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()
        headers = {
            "Content-Type": "application/json",
            "X-Mesh-Signature": sign(target.secret, body),
            "X-Mesh-Event": kind,
            "X-Mesh-Delivery": delivery_id,
            "X-Mesh-Agent": target.agent_id,
        }
        cap = self._settings.webhook_max_backoff

        def failed(error: Exception, _delay: float) -> None:
            state.failed_attempts += 1
            self.failures["attempt"] += 1
            state.status, state.last_error = "retrying", str(error)

        answer = await retrying(
            f"webhook to bot {target.agent_id}",
            partial(self._attempt, target, body, headers, state),
            backoff=Backoff(min(_BACKOFF_START, cap), cap),
            on_failure=failed,
            logger=log,
            fault=(self._db.faults, RECEIVER_FAILING, target.agent_id),
        )
        state.status = "delivering"
        return answer

    async def _attempt(
        self,
        target: repo.WebhookTarget,
        body: bytes,
        headers: dict[str, str],
        state: WebhookState,
    ) -> Any:
        deadline = self._settings.webhook_timeout
        try:
            # one deadline for the whole attempt: resolving, connecting, sending, the answer
            with trio.fail_after(deadline):
                url, extensions = target.url, dict[str, Any]()
                if not target.private_ok and not self._settings.webhook_allow_private:
                    url, host, extensions = await pin_public(
                        target.url,
                        allowed_by="only bots an admin registers may use one "
                        "(or set MESH_WEBHOOK_ALLOW_PRIVATE)",
                    )
                    headers = {**headers, "Host": host}
                async with self._client.stream(
                    "POST", url, content=body, headers=headers, extensions=extensions
                ) as response:
                    raw = b""
                    async for chunk in response.aiter_bytes():
                        raw += chunk
                        if len(raw) > _MAX_ANSWER_BYTES:
                            break
        except trio.TooSlowError:
            raise Transient(f"no answer within {deadline:g} s") from None
        except httpx.HTTPError as error:
            raise Transient(f"{type(error).__name__}: {error}"[:300]) from None
        except (UnicodeError, httpx.InvalidURL) as error:  # a name IDNA cannot encode
            raise Transient(f"invalid webhook URL: {error}"[:300]) from None
        status = response.status_code
        if status >= 500 or status in _RETRY_STATUSES:
            raise Transient(f"the receiver answered {status}")
        if not 200 <= status < 300:
            state.rejected += 1
            self.failures["rejected"] += 1
            state.last_error = f"the receiver refused an event ({status})"
            log.warning("webhook %s refused an event with %d", target.agent_id, status)
            return None
        state.delivered += 1
        if len(raw) > _MAX_ANSWER_BYTES or not raw.strip():
            return None
        try:
            return json.loads(raw)
        except RecursionError:  # nested too deep to parse: no usable answer
            log.warning("webhook %s answered JSON nested too deep; ignored", target.agent_id)
            return None
        except ValueError:  # plain text (a reply, docs/agents.md)
            return raw.decode("utf-8", errors="replace")


def _addressed(message: Message, actor: Actor) -> bool:
    return message.to_id == actor.participant_id or (
        f"@{actor.name.lower()}" in message.content.lower()
    )
