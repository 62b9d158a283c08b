"""The supervisor of managed bots: one child process per bot, restarted with
exponential backoff, stopped with SIGTERM then SIGKILL.

Each bot gets a fresh token at every start (tokens are not stored) and, if it
was spawned with one, its API key — in the child's environment only, and in
this process's memory for restarts; never on disk (spec §5.9). After a node
restart such a bot has no key and waits in status ``needs_key``.

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

import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio
from sqlalchemy.engine import Connection

from ..address import PublicAddress
from ..config import Settings
from ..retry import Backoff, retrying
from ..security import Tokens
from ..services.agents import BotSpec
from ..store import Database
from ..store import agents as agents_repo

__all__ = ["ManagedBot", "Supervisor"]

log = logging.getLogger(__name__)

EX_CONFIG = 78  # the bot cannot run as configured: do not restart it
EX_TEMPFAIL = 75  # the bot asks to be started again now (the restart command)
_BACKOFF_START, _BACKOFF_MAX, _STABLE_AFTER = 0.5, 30.0, 60.0
_STOP_GRACE = 5.0
#: how often acknowledged cursors are saved (a node restart resumes from them)
_SAVE_INTERVAL = 1.0


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
    scope: trio.CancelScope | None = field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "restarts": self.restarts, "detail": self.detail}


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
        self, settings: Settings, db: Database, tokens: Tokens, address: PublicAddress
    ) -> None:
        self._settings = settings
        self._db = db
        self._tokens = tokens
        self._address = address
        self.bots: dict[str, ManagedBot] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Start every persisted managed bot, then supervise until cancelled
        (which stops them all: SIGTERM, then SIGKILL after a grace period).
        Acknowledged cursors are saved every second, retried while the store
        is unavailable."""
        rows = await retrying(
            "reading managed bots", partial(self._db.read, agents_repo.list_agents)
        )
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            for row in rows:
                if row.managed:
                    p = row.participant
                    cursor = None if row.delivery_cursor is None else str(row.delivery_cursor)
                    self.launch(
                        BotSpec(
                            p.participant_id,
                            p.name,
                            p.type,
                            row.model,
                            row.rooms,
                            row.needs_key,
                            cursor=cursor,
                        )
                    )
            task_status.started()
            try:
                while True:
                    await trio.sleep(_SAVE_INTERVAL)
                    await retrying("saving bot cursors", self.save_cursors)
            finally:
                self._nursery = None

    async def save_cursors(self) -> None:
        """Write the cursors acknowledged since the last save (the node also
        calls this once more as it stops)."""
        changed = {
            bot.agent_id: int(bot.cursor)
            for bot in self.bots.values()
            if bot.cursor is not None and bot.cursor != bot.saved_cursor
        }
        if not changed:
            return

        def write(conn: Connection) -> None:
            for agent_id, cursor in changed.items():
                agents_repo.set_delivery_cursor(conn, agent_id, cursor)

        await self._db.write(write)
        for agent_id, cursor in changed.items():
            if (bot := self.bots.get(agent_id)) is not None:
                bot.saved_cursor = str(cursor)

    def launch(self, spec: BotSpec) -> None:
        """Start running *spec* (as soon as the node's address is known)."""
        if self._nursery is None:
            raise RuntimeError("the supervisor is not running")
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
        bot = self.bots.pop(agent_id, None)
        if bot is not None and bot.scope is not None:
            bot.scope.cancel()

    def state(self, agent_id: str) -> dict[str, Any] | None:
        bot = self.bots.get(agent_id)
        return None if bot is None else bot.to_json()

    async def _supervise(self, bot: ManagedBot) -> None:
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
        token = self._tokens.issue(bot.agent_id, "bot", self._settings.bot_token_ttl_seconds)
        env = {
            **os.environ,
            "MESH_WS_URL": "ws" + base.removeprefix("http") + "/ws",
            "MESH_API_URL": base,
            "MESH_TOKEN": token,
            "MESH_BOT_TYPE": bot.bot_type,
            "MESH_ROOMS": json.dumps(list(bot.rooms)),
            "MESH_MODEL": bot.model or "",
            "MESH_MODEL_URL": base + "/api/models/v1",
        }
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
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        deliver_cancel=_terminate_then_kill,
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
