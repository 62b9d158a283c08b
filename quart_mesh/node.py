"""The Node: one per process, owning the store and every domain service.

Handlers reach services through the node (``current_node()`` in ``api/``),
never through module globals. A developer embedding quart-mesh in a Trio
program may also call the services directly once :meth:`Node.run` has
started (see ``docs/embedding.md``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import trio

from ._version import __version__
from .bots.supervisor import Supervisor
from .broker import Broker
from .config import Settings
from .errors import Unavailable
from .federation import Federation, Heartbeat, Registry
from .federation.relay import Relay
from .identity import NodeIdentity, load_or_create_node_identity
from .realtime import Realtime
from .security import Passwords, Tokens, load_or_create_secret
from .services.accounts import Accounts
from .services.admin import Admin
from .services.agents import Agents
from .services.apps import Apps
from .services.authz import Policy
from .services.did_auth import DidAuth
from .services.dms import DirectMessages
from .services.messages import Messages
from .services.model_proxy import ModelProxy
from .services.polling import Polling
from .services.presence import Presence
from .services.ratelimit import RateLimiter
from .services.roles import Roles
from .services.rooms import Rooms
from .services.uploads import Uploads
from .services.vault import Vault
from .services.webhooks import Webhooks
from .services.world import World
from .store import Database
from .store import rooms as rooms_repo

__all__ = ["Node"]

log = logging.getLogger(__name__)


class Node:
    """Owns the store and the services; lives for the life of the server.

    Lifecycle: construct (cheap, no I/O), then ``await nursery.start(node.run)``.
    ``run`` opens the store and applies migrations, reports started, then
    keeps running until cancelled; on cancellation it closes the store.
    Services may be used only while ``run`` is running (``node.ready``).
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.db = Database(
            settings.resolved_database_url, reader_threads=settings.db_reader_threads
        )
        self.passwords = Passwords(settings.password_hash_threads)
        self._tokens: Tokens | None = None
        self._identity: NodeIdentity | None = None
        self.started_at: float | None = None
        self._accounts: Accounts | None = None
        self.broker = Broker(settings.subscriber_buffer)
        #: roles and room rules (loaded from the store in run)
        self.policy = Policy()
        self.presence = Presence(self.db, self.broker)
        self.rooms = Rooms(self.db, settings.limits, self.broker, self.presence)
        #: rate limits, shared by the services (changed at run time by admins)
        self.rate_limits = RateLimiter(settings.rate_limits)
        self.messages = Messages(self.db, settings.limits, self.broker, self.rate_limits)
        self.dms = DirectMessages(self.db, self.broker, self.presence)
        self.realtime = Realtime(self)
        self.supervisor = Supervisor(self)
        self.world: World
        self.agents: Agents
        self.roles: Roles
        self.model_proxy: ModelProxy
        self.webhooks: Webhooks
        self.polling: Polling
        self.admin: Admin
        self.did_auth: DidAuth
        self.apps: Apps
        self.federation: Federation
        #: this node as a registry of public meshes (``GET /api/meshes/public``)
        self.registry = Registry(settings, self.db)
        self.vault = Vault(settings.limits, self.db)
        #: uploaded files (``<data_dir>/uploads/``)
        self.uploads = Uploads(settings, self.db)
        #: the address clients use; set from settings or, when serving, the bound address
        self.public_url: str | None = settings.public_url

    @property
    def ready(self) -> bool:
        return self.started_at is not None

    @property
    def accounts(self) -> Accounts:
        if self._accounts is None:
            raise RuntimeError("the node is not running: start Node.run first")
        return self._accounts

    @property
    def identity(self) -> NodeIdentity:
        """The node's Ed25519 key and ``did:key``."""
        if self._identity is None:
            raise RuntimeError("the node is not running: start Node.run first")
        return self._identity

    @property
    def tokens(self) -> Tokens:
        if self._tokens is None:
            raise RuntimeError("the node is not running: start Node.run first")
        return self._tokens

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the store, start the node's components, and run until cancelled."""
        data_dir = self.settings.data_dir
        secret = await trio.to_thread.run_sync(load_or_create_secret, data_dir)
        self._tokens = Tokens(secret)
        self.model_proxy = ModelProxy(self.settings, self.db, secret, self.rate_limits)
        self.apps = Apps(self.settings, self.db, self.model_proxy)
        self._identity = await trio.to_thread.run_sync(load_or_create_node_identity, data_dir)
        await self.db.open()
        try:
            await self.uploads.prepare()
            accounts = Accounts(
                self.settings,
                self.db,
                self.passwords,
                self._tokens,
                self.presence,
                self.policy,
                self.rate_limits,
                self.broker,
            )
            await accounts.load()
            self.admin = Admin(self, accounts)
            await self.admin.load()
            self.world = World(self.db, self.broker, accounts)
            self.roles = Roles(self.db, self.broker, accounts, self.policy)
            await self.roles.load()
            self.webhooks = Webhooks(self.settings, self.db, self.broker, accounts, self.messages)
            self.agents = Agents(
                self.settings, self.db, self.broker, accounts, self.supervisor, self.webhooks
            )
            self.webhooks.agents = self.agents
            self.did_auth = DidAuth(
                self.settings, self.db, accounts, self._tokens, self._identity.did
            )
            self.polling = Polling(
                self.settings, self.db, self.broker, self.presence, self.world, self.agents
            )
            self.federation = Federation(self.settings, self.db, self._identity)
            self.federation.relay = Relay(
                self.settings,
                self.db,
                self._identity,
                broker=self.broker,
                rooms=self.rooms,
                messages=self.messages,
                accounts=accounts,
                rate_limits=self.rate_limits,
                post=self.federation.post_signed,
            )
            await self.federation.relay.load()
            self.broker.load(await self.db.read(rooms_repo.all_memberships))
            self._accounts = accounts
            self.started_at = time.monotonic()
            log.debug("node started (data in %s, store %s)", data_dir, self.db.backend)
            async with trio.open_nursery() as nursery:
                await nursery.start(self.db.run)
                await nursery.start(self.world.run)
                await nursery.start(self.presence.run)
                await nursery.start(self.supervisor.run)
                await nursery.start(self.webhooks.run)
                await nursery.start(self.model_proxy.run)
                await nursery.start(self.federation.run)
                if self.settings.registry_url and self.settings.federation_enabled:
                    heartbeat = Heartbeat(
                        self.settings, self.db, self._identity, accounts, lambda: self.public_url
                    )
                    await nursery.start(heartbeat.run)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self.started_at = None
            with trio.CancelScope(shield=True):
                if self._accounts is not None:
                    # the writer has stopped: these go straight to the store
                    with contextlib.suppress(Unavailable):
                        await self.world.flush_reads()
                        await self.supervisor.save_cursors()
                await self.db.close()

    async def health(self) -> dict[str, Any]:
        """``GET /api/health``: ok, version, uptime, storage."""
        reachable = await self.db.ping()
        uptime = 0.0 if self.started_at is None else time.monotonic() - self.started_at
        return {
            "ok": reachable and self.ready,
            "version": __version__,
            "uptime": round(uptime, 3),
            "storage": {"ok": reachable, "backend": self.db.backend},
        }
