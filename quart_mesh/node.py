"""The Node: one per process, owning the store and every domain service.

:func:`open_node` builds it whole: it loads the node's secrets, opens the
store (applying migrations), builds each component with the few things it
uses, loads what must be in memory before the first request, and yields a
node whose attributes are all set. :meth:`Node.run` then runs its long-lived
components (the store's writer, read positions, presence, managed bots,
webhook delivery, the model proxy's client, federation links, the registry
heartbeat) in one nursery until cancelled. Leaving ``open_node`` saves what
is still in memory and closes the store.

Handlers reach services through the node (``current_node()`` in ``api/``),
never through module globals. A developer embedding quart-mesh in a Trio
program may call the services directly (see ``docs/embedding.md``).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import AsyncIterator

import trio

from .address import PublicAddress
from .bots.supervisor import Supervisor
from .broker import Broker
from .client_address import ClientAddresses
from .config import Settings
from .control import CONTROL_SOCKET, ControlSocket
from .data_folder import lock_data_folder
from .disk import DiskSpace
from .ends import EndReason
from .errors import Unavailable
from .federation import Federation, Heartbeat, Registry
from .federation.relay import Relay
from .identity import NodeIdentity, load_or_create_node_identity
from .ids import new_id
from .integrity import check_store_at_open
from .realtime import Realtime
from .realtime.session import SessionServices
from .security import Passwords, Tokens, load_or_create_secret
from .services.accounts import Accounts
from .services.admin import Admin
from .services.agents import Agents
from .services.apps import Apps
from .services.authz import Actor, Policy
from .services.bus import Bus
from .services.commands import Commands
from .services.delivery import Delivery
from .services.did_auth import DidAuth
from .services.dms import DirectMessages
from .services.link_previews import LinkPreviews
from .services.messages import Messages, SharedRooms
from .services.model_proxy import ModelProxy
from .services.operator import Operator
from .services.polling import Polling
from .services.presence import Presence
from .services.ratelimit import RateLimiter
from .services.roles import Roles
from .services.rooms import Rooms
from .services.search import Search
from .services.seats import Seats
from .services.stream import EventStream, open_event_stream
from .services.tasks import TaskReconciler, Tasks
from .services.uploads import Uploads
from .services.vault import Vault
from .services.webhooks import Webhooks
from .services.world import World
from .store import Database
from .store import rooms as rooms_repo
from .store.leases import (
    BOT_SUPERVISOR,
    FEDERATION_LINKS,
    REGISTRY_HEARTBEAT,
    SEARCH_INDEXER,
    TASK_RECONCILER,
    WEBHOOK_DELIVERY,
    run_elected,
)

__all__ = ["Node", "open_node"]

log = logging.getLogger(__name__)


class Node:
    """Owns the store and the services; lives for the life of the server.

    Built by :func:`open_node` (not directly): every attribute is set when
    you get one. Services may be used as soon as it is open; live delivery,
    managed bots, webhooks and federation need :meth:`run` running too.
    """

    def __init__(
        self,
        settings: Settings,
        db: Database,
        secret: bytes,
        identity: NodeIdentity,
        *,
        broker: Broker,
        bus: Bus | None,
        process_id: str,
    ) -> None:
        """Wire the components (no I/O). Use :func:`open_node`, which makes
        the store, the broker and the bus, wired to each other
        (:func:`_wire_core`)."""
        self.settings = settings
        self.db = db
        #: the faults it rides out, each logged once (``faults.py``)
        self.faults = db.faults
        #: free space in the data folder against the floor (``disk.py``)
        self.disk = DiskSpace(settings.data_dir, settings.disk_floor)
        #: the uploads folder's free space against the floor, when
        #: MESH_UPLOADS_DIR puts it on another filesystem (None: the data folder's)
        self.uploads_disk: DiskSpace | None = (
            DiskSpace(settings.uploads_dir, settings.disk_floor, label="uploads folder")
            if settings.uploads_dir is not None
            else None
        )
        self.identity = identity
        self.tokens = Tokens(secret)
        self.passwords = Passwords(settings.password_hash_threads)
        #: the address clients use: configured, or the bound one once serving
        self.address = PublicAddress(settings.public_url)
        limits = settings.limits
        #: routes events to subscribers; what each commit published reaches
        #: it (``store/outbox.py``), alone or through the bus
        self.broker = broker
        #: this process, among those serving the mesh
        self.process_id = process_id
        #: with several processes on one PostgreSQL database, every commit
        #: reaches every process through the bus (``services/bus.py``)
        self.bus = bus
        #: roles and room rules (a mirror of the store)
        self.policy = Policy()
        self.presence = Presence(db, self.broker)
        #: who the client of a request is (behind trusted proxies too)
        self.client_addresses = ClientAddresses(settings.trusted_proxies, settings.forwarded_header)
        #: rate limits, shared by the services (changed at run time by admins)
        self.rate_limits = RateLimiter(settings.rate_limits, db=db)
        shared_rooms = SharedRooms(everywhere=db.backend == "postgresql")
        self.rooms = Rooms(
            db, limits, self.broker, self.presence, settings.room_quotas, self.rate_limits
        )
        self.messages = Messages(db, limits, self.broker, self.rate_limits, shared_rooms)
        self.dms = DirectMessages(db, self.broker, self.presence)
        self.search = Search(db, limits, self.rate_limits, language=settings.search_language)
        #: tasks for agents (``services/tasks.py``); their replies complete them
        self.tasks = Tasks(db, limits, self.messages, self.dms, rate_limits=self.rate_limits)
        self.task_reconciler = TaskReconciler(db, self.broker)
        self.accounts = Accounts(
            settings,
            db,
            self.passwords,
            self.tokens,
            self.presence,
            self.policy,
            self.rate_limits,
            self.broker,
        )
        self.world = World(
            db, self.broker, self.accounts, self.presence, max_rooms=limits.max_snapshot_rooms
        )
        #: catch up from a cursor, then follow live (WebSocket, polling, webhooks)
        self.delivery = Delivery(
            db, self.broker, self.accounts, max_commands=settings.limits.max_pending_commands
        )
        self.roles = Roles(db, self.broker, self.accounts, self.policy, self.delivery)
        self.commands = Commands(settings, db, self.broker)
        self.webhooks = Webhooks(
            settings, db, self.accounts, self.messages, self.commands, self.delivery
        )
        self.supervisor = Supervisor(settings, db, self.tokens, self.address, secret)
        self.agents = Agents(settings, db, self.accounts, self.supervisor, self.webhooks)
        # A2A asks go only to bots that are A2A agents (decision 0062)
        self.tasks.a2a_enabled = self.agents.a2a_enabled
        self.did_auth = DidAuth(settings, db, self.accounts, self.tokens, identity.did)
        #: WebSocket sessions and long polls held per participant and address
        self.seats = Seats(limits, self.rate_limits)
        self.polling = Polling(
            settings, self.delivery, self.presence, self.world, self.commands, self.seats
        )
        self.model_proxy = ModelProxy(settings, db, secret, self.rate_limits)
        self.apps = Apps(settings, db, self.model_proxy, disk=self.disk)
        self.relay = Relay(
            settings,
            db,
            identity,
            broker=self.broker,
            rooms=self.rooms,
            messages=self.messages,
            accounts=self.accounts,
            rate_limits=self.rate_limits,
            shared_rooms=shared_rooms,
        )
        self.federation = Federation(
            settings, db, identity, self.relay, rate_limits=self.rate_limits
        )
        #: this node as a registry of public meshes (``GET /api/meshes/public``)
        self.registry = Registry(settings, db, self.accounts, self.rate_limits)
        self.heartbeat = (
            Heartbeat(settings, db, identity, self.accounts, self.address)
            if settings.registry_url and settings.federation_enabled
            else None
        )
        self.vault = Vault(limits, db)
        #: uploaded files (``MESH_UPLOADS_DIR``, by default ``<data_dir>/uploads/``)
        self.uploads = Uploads(settings, db, disk=self.disk, uploads_disk=self.uploads_disk)
        self.realtime = Realtime(
            SessionServices(
                settings=settings,
                delivery=self.delivery,
                tokens=self.tokens,
                accounts=self.accounts,
                presence=self.presence,
                world=self.world,
                rooms=self.rooms,
                messages=self.messages,
                commands=self.commands,
                seats=self.seats,
                search=self.search,
                tasks=self.tasks,
            ),
            self.client_addresses,
        )
        self.admin = Admin(
            settings,
            db,
            self.accounts,
            self.presence,
            self.broker,
            sessions=lambda: self.realtime.sessions,
            disk=self.disk,
            uploads_disk=lambda: self.uploads_disk,
            faults=self.faults,
        )
        #: previews of links in messages (decision 0072)
        self.link_previews = LinkPreviews(
            settings, self.messages, self.rate_limits, secret, lambda: self.admin.link_previews
        )
        #: the operator's chores (``quart-mesh user|tokens|status``)
        self.operator = Operator(settings, db, self.accounts, self.passwords)
        #: on SQLite, where the node is its data folder's one process, the
        #: chores reach a running node through this (``control.py``)
        self.control = (
            ControlSocket(settings.data_dir / CONTROL_SOCKET, self.operator.perform)
            if db.backend == "sqlite"
            else None
        )
        self.started_at = time.monotonic()
        self._running = False
        #: each serve() running this node: its stop event and its stopped event
        self._served: list[tuple[trio.Event, trio.Event]] = []
        if self.bus is not None:
            self._reload_on_change(self.bus)

    def _reload_on_change(self, bus: Bus) -> None:
        """What each process reloads when what it caches changes (through any
        process), and everything when it may have missed changes."""

        async def participant(participant_id: str) -> None:
            self.accounts.forget(participant_id)
            await self.delivery.refresh(participant_id)

        async def revoked(key: str) -> None:
            token_id, _, expires_at = key.partition(" ")
            self.accounts.revoked(token_id, int(expires_at))

        async def policy(_: str) -> None:
            await self.roles.load()
            await self.delivery.refresh()

        async def room_rules(room_id: str) -> None:
            self.policy.forget_room(room_id)
            await self.delivery.refresh()

        async def mesh(_: str) -> None:
            await self.admin.reload()

        async def models(_: str) -> None:
            await self.model_proxy.reload()

        bus.on_invalidate("participant", participant)
        bus.on_invalidate("revoked", revoked)
        bus.on_invalidate("policy", policy)
        bus.on_invalidate("room_rules", room_rules)
        bus.on_invalidate("mesh", mesh)
        bus.on_invalidate("models", models)

        async def everything() -> None:
            self.broker.load(await self.db.read(rooms_repo.all_memberships))
            self.accounts.forget_all()
            await self.admin.reload()
            await self.roles.load()
            await self.model_proxy.reload()
            await self.delivery.refresh()

        bus.on_resync(everything)

    async def _load(self) -> None:
        """What must be in memory before the first request."""
        if self.bus is not None:
            # first: what other processes commit while this loads is applied after
            await self.bus.prepare()
        await self.uploads.prepare()
        if self.uploads.files_disk is self.disk:  # MESH_UPLOADS_DIR on the data folder's filesystem
            self.uploads_disk = None
        await self.accounts.load()
        await self.admin.load()
        await self.roles.load()
        # before any write: a write in a shared room must reach the outbox
        await self.relay.load()
        self.broker.load(await self.db.read(rooms_repo.all_memberships))

    @property
    def running(self) -> bool:
        """Whether :meth:`run` is running (live delivery and background work)."""
        return self._running

    @property
    def ready(self) -> bool:
        return self._running

    @property
    def stopping(self) -> bool:
        """Whether it is not running, or a stop of the serve serving it has
        begun (readiness: ``stopping``, ``api/health.py``)."""
        return not self._running or any(
            stop.is_set() and not stopped.is_set() for stop, stopped in self._served
        )

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the node's components until cancelled; report started once all
        are. A component that fails with a bug (anything but the transient
        faults they retry, ``retry``) cancels the others and propagates.

        The bot supervisor, webhook delivery, the federation link tasks and
        the registry heartbeat are singletons of the mesh: on PostgreSQL,
        where several processes may serve it, each runs on the process that
        holds its lease (``store/leases.py``), and moves to another within
        seconds when that one dies.

        Raises:
            RuntimeError: it is already running.
        """
        if self._running:
            raise RuntimeError("the node is already running")
        self._running = True
        try:
            async with trio.open_nursery() as nursery:
                await self._start_core(nursery)
                await nursery.start(self.world.run)
                await nursery.start(self.presence.run)
                # singletons: on one process of the mesh at a time (elected
                # through the store on PostgreSQL; here on SQLite)
                await nursery.start(run_elected, self.db, BOT_SUPERVISOR, self.supervisor.run)
                await nursery.start(run_elected, self.db, WEBHOOK_DELIVERY, self.webhooks.run)
                await nursery.start(run_elected, self.db, SEARCH_INDEXER, self.search.run_indexer)
                await nursery.start(run_elected, self.db, TASK_RECONCILER, self.task_reconciler.run)
                await nursery.start(self.model_proxy.run)
                await nursery.start(self.federation.run)
                await nursery.start(
                    run_elected, self.db, FEDERATION_LINKS, self.federation.run_links
                )
                if self.heartbeat is not None:
                    await nursery.start(
                        run_elected, self.db, REGISTRY_HEARTBEAT, self.heartbeat.run
                    )
                if self.control is not None:
                    await nursery.start(self.control.run)
                self.realtime.accepting = True
                log.debug("node running (store %s)", self.db.backend)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self.realtime.accepting = False
            self._running = False
            # nothing is delivered any more: in-process streams (node.events)
            # and other waits end after what was queued (served, the sessions
            # were closed with 1001 before this)
            self.broker.disconnect_all(EndReason.CLOSED)

    def served_by(self, stop: trio.Event, stopped: trio.Event) -> None:
        """For :func:`~quart_mesh.server.serve` (internal): until *stopped*
        is set (once serve has stopped, its store closed), :meth:`aclose`
        sets *stop* and waits for *stopped*."""
        self._served = [served for served in self._served if not served[1].is_set()]
        self._served.append((stop, stopped))

    async def aclose(self) -> None:
        """Stop the :func:`~quart_mesh.serve` serving this node, gracefully,
        and return once it has stopped.

        It is the stop a shutdown trigger or a cancel would start: the
        listeners close, WebSocket clients get close code 1001, requests and
        sends in flight finish (within ``graceful_timeout``), managed bots
        are stopped and the store is closed (unless the node was opened by
        the caller and given to ``create_app(node=...)``: then it stays open).
        ``serve`` then returns normally. Harmless when nothing serves the
        node (it returns at once) and when called again. It stops a
        ``serve`` that has begun serving this node: start it with
        ``await nursery.start(serve, app)`` (which returns once it listens),
        not ``start_soon``, before you may need to stop it, or the stop
        finds nothing to stop.

        Cancellation: safe; the stop, once asked for, goes on without the
        caller. Do not call it from a task that ``serve`` itself runs (a
        request handler): the stop cancels that task.
        """
        await trio.lowlevel.checkpoint()
        served = [served for served in self._served if not served[1].is_set()]
        for stop, _ in served:
            stop.set()
        for _, stopped in served:
            await stopped.wait()

    async def run_core(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run only what a service's write needs, until cancelled: the store's
        writer, the broker and, on PostgreSQL, the bus (a write there waits
        for its own row of the cluster's stream, and through it reaches the
        other processes). For an operator's chore in a process of its own
        (``quart-mesh user|tokens|status``): no sessions, managed bots,
        webhooks or federation.

        Raises:
            RuntimeError: the node is already running.
        """
        if self._running:
            raise RuntimeError("the node is already running")
        self._running = True
        try:
            async with trio.open_nursery() as nursery:
                await self._start_core(nursery)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._running = False

    async def _start_core(self, nursery: trio.Nursery) -> None:
        await nursery.start(self.db.run)
        await nursery.start(self.broker.run)
        if self.bus is not None:  # before anything else writes
            await nursery.start(self.bus.run)

    async def _save(self) -> None:
        """Write what is still only in memory (the writer has stopped: these
        go straight to the store)."""
        # each on its own: one that fails does not keep the other from saving
        with contextlib.suppress(Unavailable):
            await self.world.flush_reads()
        with contextlib.suppress(Unavailable):
            await self.supervisor.save_cursors()

    def events(
        self, actor: Actor, *, since: int | None = None, capacity: int | None = None
    ) -> contextlib.AbstractAsyncContextManager[EventStream]:
        """*actor*'s events, in-process: every message after the message
        *since* (a cursor: a message's ``seq``, or :attr:`EventStream.cursor`)
        then live events as they are committed, in order, with the same
        visibility as every other path (rooms and DMs it is in and may read).
        ``since=None``: from now on. The WebSocket resume, without a socket::

            async with node.events(actor, since=cursor) as stream:
                async for event in stream:
                    ...

        Live events need the node running (:meth:`run`, or ``serve``).

        *capacity*: events that may wait for the consumer (default
        ``settings.subscriber_buffer``); past it the stream raises
        :class:`~quart_mesh.StreamLagged`, whose ``cursor`` a new stream
        resumes from, losing no message. The backlog is read in pages of
        ``settings.max_replay`` messages, all of it: the first on entering
        the block (from then on live events queue for the consumer), the
        others as the consumer reaches them.

        Cancellation: safe, in the block and while iterating; leaving the
        block ends the subscription.

        Raises:
            AccessEnded: the participant no longer exists, or is a guest of
                a mesh that is not public (on entering the block); while
                iterating, it was deleted or signed out, or, a guest, the
                mesh went private.
            StreamLagged: while iterating, the consumer fell behind (or the
                node's delivery started over): resume from its ``cursor``.
            Unavailable: the store could not be read.
            ValueError: *since* is negative, or *capacity* is not positive.
        """
        return open_event_stream(
            self.delivery,
            self.accounts,
            actor,
            since=since,
            capacity=capacity,
            page=self.settings.max_replay,
            mark_delivered=self.commands.mark_delivered,
        )


@contextlib.asynccontextmanager
async def open_node(settings: Settings) -> AsyncIterator[Node]:
    """Open a node: its secrets, its store (migrated), its services, loaded.

    Yields a node whose attributes are all set; run its components with
    ``await nursery.start(node.run)`` (``serve`` does). On the way out,
    shielded from cancellation, read positions and bot cursors still in
    memory are saved and the store is closed.

    On SQLite the data folder is this process's alone while the node is
    open (``data_folder.py``).

    Raises:
        Unavailable: the store cannot be opened.
        StoreFromNewerRelease: a newer quart-mesh migrated the store (a
            ``ConfigError``; nothing was written).
        OSError: the data folder cannot be used, or another process serves
            this SQLite data folder (its message says so).
    """
    with await trio.to_thread.run_sync(lock_data_folder, settings):
        async with _open_node(settings) as node:
            yield node


@contextlib.asynccontextmanager
async def _open_node(settings: Settings) -> AsyncIterator[Node]:
    data_dir = settings.data_dir
    secret = await trio.to_thread.run_sync(load_or_create_secret, data_dir)
    identity = await trio.to_thread.run_sync(load_or_create_node_identity, data_dir)
    process_id = new_id()
    db, broker, bus = _wire_core(settings, process_id)
    await trio.to_thread.run_sync(check_store_at_open, settings)  # StoreCorrupt (0078)
    await db.open()
    node: Node | None = None
    try:
        node = Node(settings, db, secret, identity, broker=broker, bus=bus, process_id=process_id)
        await node._load()
        log.debug("node open (data in %s, store %s)", data_dir, db.backend)
        yield node
    finally:
        with trio.CancelScope(shield=True):
            try:
                if node is not None:
                    await node._save()
            finally:  # even if saving failed (the part that saves may be the bug)
                await db.close()


def _wire_core(settings: Settings, process_id: str) -> tuple[Database, Broker, Bus | None]:
    """The store, the broker and, on PostgreSQL, the bus of process
    *process_id*, wired to each other (no I/O).

    They need each other: the store hands each commit's entries to the
    broker, and asks the bus to wait until a commit is applied here; the
    broker asks the bus whether it follows the stream; the bus reads the
    store and delivers to the broker. The cycle is broken here, in one
    place: the bus is made first, knowing only its process; the broker and
    the store take it as a constructor argument (and the store the
    broker's ``committed``); then the bus is given the two
    (:meth:`Bus.attach`), before anything runs. Nothing sets hooks on
    another afterwards, nor unsets them when the bus stops: whether it
    follows the stream is the bus's own state, which the others read. On
    SQLite there is no bus: the broker delivers each commit itself.
    """
    url = settings.resolved_database_url
    bus = Bus(process_id) if Database.backend_of(url) == "postgresql" else None
    broker = Broker(settings.subscriber_buffer, bus=bus)
    db = Database(
        url,
        reader_threads=settings.db_reader_threads,
        max_queued=settings.max_queued_writes,
        bus=bus,
        on_commit=broker.committed,
    )
    if bus is not None:
        bus.attach(db, broker)
    return db, broker, bus
