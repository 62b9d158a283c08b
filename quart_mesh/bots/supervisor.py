"""The supervisor of managed bots: one child process per bot, restarted with
exponential backoff, stopped with SIGTERM then SIGKILL.

The supervisor is an elected singleton (``store/leases.py``, decision
0035): on PostgreSQL, where several processes serve one mesh, it runs on one
of them, and each bot runs once in the whole mesh. A spawn may reach any
process: it is recorded in the store, and the running supervisor starts
what the store lists and stops what it no longer lists — at once when the
spawn or the removal reached its own process, else within
:data:`_RECONCILE_INTERVAL`. It writes each bot's status to
``managed_bots``, which every process's ``GET /api/agents`` shows.

Each bot gets a fresh token at every start (tokens are not stored) and, if it
was spawned with one, its API key — in the child's environment, and in this
process's memory for restarts (spec §5.9). On SQLite the key is never
written anywhere: after a node restart such a bot has no key and waits in
status ``needs_key``. On PostgreSQL the process that runs the bot may not be
the one that took the spawn, and may change when one dies, so the key is
stored sealed (AES-GCM, a key derived from the node secret, which lives in
the data folder, not the database) and removed with the bot.

A bot's process ends with the process that started it, even after
``kill -9``: it watches its stdin, a pipe only the node holds, and exits
when that pipe closes (``runner.py``). Otherwise a bot orphaned by a
killed node would keep running beside the copy the next supervisor starts.

A bot acknowledges each message it handled (``cursor N`` on its stdout); the
next start resumes after the last one (``MESH_SINCE``). Acknowledged cursors
are saved about once a second and when the node stops, so a node restart
resumes from them too (at least once: a crash may repeat up to a second's
worth of messages).

A bot that cannot even be started (the node is out of file descriptors or
processes: ``OSError`` from the spawn) counts as a run that failed: logged,
and tried again after the same backoff as a crash.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..address import PublicAddress
from ..config import Settings
from ..descriptors import restore_open_file_limit
from ..metrics_folder import ENV as METRICS_FOLDER_ENV
from ..records import now_ms
from ..retry import Backoff, retrying
from ..security import Tokens
from ..services.agents import BotSpec
from ..store import Database
from ..store import agents as agents_repo
from ..store import messages as messages_repo
from ..store import tokens as tokens_repo
from ..store.tokens import IssuedToken

__all__ = ["ManagedBot", "Supervisor"]

log = logging.getLogger(__name__)

EX_CONFIG = 78  # the bot cannot run as configured: do not restart it
EX_TEMPFAIL = 75  # the bot asks to be started again now (the restart command)
_BACKOFF_START, _BACKOFF_MAX, _STABLE_AFTER = 0.5, 30.0, 60.0
_STOP_GRACE = 5.0
#: how often acknowledged cursors and statuses are saved (a node restart
#: resumes from the cursors; every process shows the statuses)
_SAVE_INTERVAL = 1.0
#: how often the running supervisor reads which bots the store lists
_RECONCILE_INTERVAL = 1.0
_KEY_ASSOCIATED_DATA = b"managed-bot-key"


@dataclass
class ManagedBot:
    agent_id: str
    name: str
    bot_type: str
    model: str | None
    rooms: tuple[str, ...]
    needs_key: bool
    api_key: str | None = field(default=None, repr=False)
    status: str = "starting"
    detail: str | None = None
    restarts: int = 0
    pid: int | None = None
    #: the last message cursor the bot acknowledged (restarts resume after it)
    cursor: str | None = None
    #: the last line the bot wrote to its stderr (why it stopped, usually)
    last_error: str | None = None
    #: the cursor last written to the store (it is saved every second or so)
    saved_cursor: str | None = None
    #: the status last written to the store
    saved_state: agents_repo.BotState | None = None
    scope: trio.CancelScope | None = field(default=None, repr=False)
    #: whether its supervising task has ended (failed, needs_key, stopped)
    ended: bool = False

    def state(self) -> agents_repo.BotState:
        return agents_repo.BotState(self.status, self.restarts, self.detail)

    def to_json(self) -> dict[str, Any]:
        return self.state().to_json()


async def _read_errors(bot: ManagedBot, stderr: trio.abc.ReceiveStream) -> None:
    """Log what the bot writes to stderr; keep its last line (bounded)."""
    buffer = b""
    async for chunk in stderr:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        buffer = buffer[-4096:]
        for raw in lines:
            line = raw.decode("utf-8", errors="replace").strip()[:500]
            if line:
                log.warning("bot %s: %s", bot.name, line)
                bot.last_error = line


async def _terminate_then_kill(process: trio.Process) -> None:
    process.terminate()
    with trio.move_on_after(_STOP_GRACE):
        await process.wait()
        return
    process.kill()


class Supervisor:
    """Runs in the node's nursery (:meth:`run`); owns every bot's process.

    Bots connect back to the node over its public address, so none is
    started before the address is known (:class:`PublicAddress`): after a
    restart, persisted bots wait for the server to listen.
    """

    def __init__(
        self,
        settings: Settings,
        db: Database,
        tokens: Tokens,
        address: PublicAddress,
        secret: bytes | None = None,
    ) -> None:
        self._settings = settings
        self._db = db
        self._tokens = tokens
        self._address = address
        self.bots: dict[str, ManagedBot] = {}
        #: the bots of the last time this process ran them, until their cursors are saved
        self._last_term: dict[str, ManagedBot] = {}
        #: bots removed while this ran (a read begun before the removal
        #: committed must not start them again)
        self._removed: set[str] = set()
        self._nursery: trio.Nursery | None = None
        self._cipher = (
            None
            if secret is None
            else AESGCM(hashlib.sha256(b"quart-mesh bot keys\0" + secret).digest())
        )

    @property
    def running(self) -> bool:
        """Whether this process runs the supervisor (it is elected to)."""
        return self._nursery is not None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start every managed bot the store lists, then supervise until
        cancelled (which stops them all: SIGTERM, then SIGKILL after a grace
        period). Every second: the store is read again (bots spawned or
        removed through another process), and acknowledged cursors and
        changed statuses are saved; both are retried while the store is
        unavailable."""
        rows = await retrying(
            "reading managed bots", partial(self._db.read, agents_repo.list_agents)
        )
        self.bots = {}
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._reconcile(rows)
                task_status.started()
                try:
                    while True:
                        await trio.sleep(min(_SAVE_INTERVAL, _RECONCILE_INTERVAL))
                        await retrying("saving bot cursors", self.save_cursors)
                        rows = await retrying(
                            "reading managed bots",
                            partial(self._db.read, agents_repo.list_agents),
                        )
                        self._reconcile(rows)
                finally:
                    self._nursery = None
        finally:
            # stopped (the node stops, or another process runs the bots now):
            # what they acknowledged is still saved (cursors only go forward),
            # their statuses are the running supervisor's to write
            self._last_term, self.bots = {**self._last_term, **self.bots}, {}

    def _reconcile(self, rows: list[agents_repo.AgentRow]) -> None:
        """Run what the store lists, stop what it no longer lists."""
        listed: set[str] = set()
        for row in rows:
            if not row.managed:
                continue
            agent_id = row.participant.participant_id
            listed.add(agent_id)
            if agent_id in self.bots or agent_id in self._removed:
                continue
            p = row.participant
            cursor = None if row.delivery_cursor is None else str(row.delivery_cursor)
            self.launch(
                BotSpec(
                    agent_id,
                    p.name,
                    p.type,
                    row.model,
                    row.rooms,
                    row.needs_key,
                    api_key=self._unseal(row.sealed_key),
                    cursor=cursor,
                )
            )
        for agent_id in [a for a in self.bots if a not in listed]:
            self.stop(agent_id)

    def sealed_key(self, api_key: str | None) -> str | None:
        """What the store keeps of a spawn's API key: sealed with the node
        secret on PostgreSQL (another process may run the bot), nothing on
        SQLite (the key stays in this process's memory)."""
        if api_key is None or self._cipher is None or self._db.backend != "postgresql":
            return None
        nonce = os.urandom(12)
        sealed = self._cipher.encrypt(nonce, api_key.encode(), _KEY_ASSOCIATED_DATA)
        return "v1:" + base64.b64encode(nonce + sealed).decode()

    def _unseal(self, stored: str | None) -> str | None:
        if stored is None or self._cipher is None:
            return None
        try:
            raw = base64.b64decode(stored.removeprefix("v1:"))
            return self._cipher.decrypt(raw[:12], raw[12:], _KEY_ASSOCIATED_DATA).decode()
        except Exception:  # sealed under another secret: unusable (needs_key), not fatal
            log.warning("a managed bot's stored key cannot be decrypted (secret.key replaced?)")
            return None

    async def save_cursors(self) -> None:
        """Write the cursors acknowledged and the statuses changed since the
        last save (the node also calls this once more as it stops)."""
        bots = list(self.bots.values())
        changed = {
            bot.agent_id: int(bot.cursor)
            for bot in [*self._last_term.values(), *bots]
            if bot.cursor is not None and bot.cursor != bot.saved_cursor
        }
        states = {bot.agent_id: bot.state() for bot in bots if bot.state() != bot.saved_state}
        if not changed and not states:
            return

        def write(conn: Connection) -> None:
            for agent_id, cursor in changed.items():
                agents_repo.set_delivery_cursor(conn, agent_id, cursor)
            agents_repo.save_bot_states(conn, states, now_ms())

        await self._db.write(write)
        for agent_id, cursor in changed.items():
            for known in (self.bots, self._last_term):
                if (bot := known.get(agent_id)) is not None:
                    bot.saved_cursor = str(cursor)
        for agent_id, state in states.items():
            if (bot := self.bots.get(agent_id)) is not None:
                bot.saved_state = state

    def launch(self, spec: BotSpec) -> None:
        """Start running *spec* (as soon as the node's address is known), if
        this process runs the supervisor; else the one that does starts it
        from the store. Launching a bot that runs already only hands it the
        spec's API key (and starts it again if it was waiting for one)."""
        if self._nursery is None:
            return
        running = self.bots.get(spec.agent_id)
        if running is not None:
            if spec.api_key is not None and running.api_key is None:
                running.api_key = spec.api_key
                if running.ended:
                    running.ended = False
                    self._nursery.start_soon(self._supervise, running)
            return
        bot = ManagedBot(
            spec.agent_id,
            spec.name,
            spec.bot_type,
            spec.model,
            spec.rooms,
            spec.needs_key,
            api_key=spec.api_key,
            cursor=spec.cursor,
            saved_cursor=spec.cursor,
        )
        self.bots[bot.agent_id] = bot
        self._nursery.start_soon(self._supervise, bot)

    def stop(self, agent_id: str) -> None:
        """Stop a removed bot (here at once if this process runs it; the one
        that does otherwise, when it finds it gone from the store)."""
        self._removed.add(agent_id)
        bot = self.bots.pop(agent_id, None)
        if bot is not None and bot.scope is not None:
            bot.scope.cancel()

    def state(self, agent_id: str) -> dict[str, Any] | None:
        """The bot's state, if this process runs it (else see the store)."""
        bot = self.bots.get(agent_id) if self._nursery is not None else None
        return None if bot is None else bot.to_json()

    async def _supervise(self, bot: ManagedBot) -> None:
        try:
            await self._supervise_runs(bot)
        finally:
            bot.ended = True

    async def _supervise_runs(self, bot: ManagedBot) -> None:
        backoff = Backoff(_BACKOFF_START, _BACKOFF_MAX)
        with trio.CancelScope() as scope:
            bot.scope = scope
            if self._address.url is None:
                bot.status, bot.detail = "starting", "waiting for the node to listen"
            base = await self._address.wait()
            while True:
                if bot.needs_key and bot.api_key is None:
                    bot.status, bot.detail = "needs_key", "spawn it again with its apiKey"
                    return
                bot.status = "starting"
                started = trio.current_time()
                code = await self._run_once(bot, base)
                bot.pid = None
                if isinstance(code, OSError):
                    outcome = f"could not be started ({code.strerror or code})"
                else:
                    outcome = f"exited with status {code}"
                if code == EX_CONFIG:
                    bot.status = "failed"
                    bot.detail = bot.last_error or "cannot run as configured"
                    return
                bot.restarts += 1
                if code == EX_TEMPFAIL:
                    bot.status, bot.detail = "restarting", "restart requested"
                    log.info("bot %s restarting on request", bot.name)
                    continue
                if trio.current_time() - started > _STABLE_AFTER:
                    backoff.reset()
                delay = backoff.next()
                bot.status, bot.detail = "restarting", outcome
                log.warning("bot %s %s; restarting in %.1f s", bot.name, outcome, delay)
                await trio.sleep(delay)
        bot.status = "stopped"

    async def _read_acks(self, bot: ManagedBot, stdout: trio.abc.ReceiveStream) -> None:
        """Follow the bot's ``cursor N`` and ``joined`` lines (bounded line length)."""
        buffer = b""
        async for chunk in stdout:
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            buffer = buffer[-4096:]
            for line in lines:
                word, _, value = line.strip().partition(b" ")
                if word == b"cursor" and value.isdigit() and len(value) < 19:
                    bot.cursor = value.decode()
                elif word == b"joined" and bot.rooms:
                    # its spawn rooms are joined (memberships are stored): from
                    # now on its rooms are whatever it joins and leaves
                    bot.rooms = ()
                    await retrying(
                        f"recording bot {bot.name}'s rooms",
                        partial(
                            self._db.write,
                            lambda conn: agents_repo.set_rooms(conn, bot.agent_id, []),
                        ),
                    )

    async def _run_once(self, bot: ManagedBot, base: str) -> int | OSError:
        """Run the bot's process once; its exit status, or the error that
        kept it from starting."""
        if bot.cursor is None:
            # a first run starts from now; say where "now" is in the store,
            # so that a run after a takeover resumes from here, missing nothing
            # sent while the bot moved (it has not acknowledged anything yet)
            def first(conn: Connection) -> int:
                head = messages_repo.head_seq(conn)
                agents_repo.set_delivery_cursor(conn, bot.agent_id, head)
                return head

            head = await retrying("recording where a bot starts", partial(self._db.write, first))
            bot.cursor = bot.saved_cursor = str(head)
        token, claims = self._tokens.mint(bot.agent_id, "bot", self._settings.bot_token_ttl_seconds)
        issued = IssuedToken(
            claims.token_id, bot.agent_id, "managed", claims.issued_at, claims.expires_at
        )

        def record(conn: Connection) -> None:
            try:
                with conn.begin_nested():
                    tokens_repo.record_token(conn, issued)
            except IntegrityError:  # the bot was deleted meanwhile: its run fails anyway
                pass

        await retrying("recording a managed bot's token", partial(self._db.write, record))
        env = {
            **os.environ,
            "MESH_WS_URL": "ws" + base.removeprefix("http") + "/ws",
            "MESH_API_URL": base,
            "MESH_TOKEN": token,
            "MESH_BOT_TYPE": bot.bot_type,
            "MESH_ROOMS": json.dumps(list(bot.rooms)),
            "MESH_MODEL": bot.model or "",
            "MESH_MODEL_URL": base + "/api/models/v1",
            # exit when this process does, even after kill -9 (runner.py)
            "MESH_EXIT_WITH_PARENT": "1",
        }
        # a worker's metric files are the worker's own (metrics_folder.py)
        env.pop(METRICS_FOLDER_ENV, None)
        if bot.api_key is not None:
            env["MESH_API_KEY"] = bot.api_key
        if bot.cursor is not None:
            env["MESH_SINCE"] = bot.cursor
        command = [sys.executable, "-m", "quart_mesh.bots.runner"]
        async with trio.open_nursery() as nursery:
            try:
                process: trio.Process = await nursery.start(
                    partial(
                        trio.run_process,
                        command,
                        env=env,
                        check=False,
                        # held open by this process alone: closed when it dies
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        deliver_cancel=_terminate_then_kill,
                        # the soft open-file limit the node raised, given back
                        preexec_fn=restore_open_file_limit,
                    )
                )
            except OSError as error:  # EMFILE, EAGAIN, ENOMEM...: a run that failed
                return error
            bot.pid = process.pid
            bot.status, bot.detail = "running", None
            assert process.stdout is not None
            assert process.stderr is not None
            nursery.start_soon(self._read_acks, bot, process.stdout)
            nursery.start_soon(_read_errors, bot, process.stderr)
        return process.returncode if process.returncode is not None else -1
