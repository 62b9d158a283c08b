"""Health and first-run setup (spec §4.1, §4.2).

Three checks (``docs/decisions/0076-health-and-the-disk-floor.md``):

- ``GET /api/health/live``: the process and its event loop answer (no
  store call): restart the node when it fails.
- ``GET /api/health/ready``: the node should get traffic: its store answers
  *and accepts a write*, is migrated to this code's head (not behind it,
  not past it), the bus is caught up (PostgreSQL), free disk (of the data
  folder, and of the uploads folder when elsewhere) is above the floor and
  can be measured, no disk-full, damaged-store
  or descriptors fault is active, and the node is not stopping. 503 with the reasons when not.
- ``GET /api/health``: readiness in its old shape (``ok``, ``storage``) plus
  ``storage.writable`` and ``reasons``.

The store is not asked on every check: its answer (a read of the migrations
it is at, then the probe's write) is reused for up to
``STORE_ANSWER_MAX_AGE`` seconds, and checks that come while it is being
asked wait for that one answer. So a check reports a store that answered
within that time before the check began (or while it waited), and a store
that stops answering is reported within that time plus the failing query's
own (``docs/decisions/0041-cheap-health-checks.md``); waiting for a reader
thread or for the writer's queue is bounded by ``STORE_TIMEOUT``.
The other causes (disk, faults, bus, stopping) cost no I/O and are read on
every check.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import trio
from quart import Blueprint, current_app, request
from sqlalchemy.exc import DBAPIError

from .._version import __version__
from ..errors import MeshError, Overloaded, Unavailable
from ..faults import DESCRIPTORS, STORE_CORRUPT
from ..records import now_ms
from ..services.accounts import DEFAULT_ROOM_NAME
from ..store import health as repo
from ._common import client_address, node, reply
from .contract import Body, Shape, accepts, answers, public
from .objects import Session

if TYPE_CHECKING:
    from ..node import Node

bp = Blueprint("health", __name__)

#: seconds the store's answer to a health check is reused for
STORE_ANSWER_MAX_AGE = 1.0
#: seconds the check waits for the store's read, and then for its probe
#: write, to be taken up (a free reader thread, the writer's queue) and done.
#: A query already running in its thread cannot be abandoned: a store that
#: hangs there holds the check (the checker's own timeout decides)
STORE_TIMEOUT = 2.0
#: seconds the bus (PostgreSQL) may be behind before the node is not ready
BUS_BEHIND_LIMIT: Final = 5.0


@dataclasses.dataclass(frozen=True)
class StoreAnswer:
    """What the store said to one check."""

    #: it answered a read
    reachable: bool
    #: it accepted the probe's write (False when not reachable)
    writable: bool
    #: it is migrated to this code's head (True when not reachable: unknown)
    migrated: bool
    #: why a query failed, for the log-free reason message
    error: str = ""
    #: not migrated because a newer release migrated it past this code's head
    newer: bool = False


async def ask_store(node: Node) -> StoreAnswer:
    """Read the store's migrations, then write the probe's row; each within
    ``STORE_TIMEOUT`` seconds."""
    db = node.db
    heads: frozenset[str] | None = None
    with trio.move_on_after(STORE_TIMEOUT):
        try:
            heads = await db.read(repo.migration_heads)
        except (Unavailable, DBAPIError) as error:
            return StoreAnswer(False, False, True, _why(error))
    if heads is None:
        return StoreAnswer(False, False, True, f"no answer within {STORE_TIMEOUT:.0f} s")
    migrated = heads == repo.code_heads()
    newer = not heads <= repo.code_revisions()  # at a migration this code does not know
    with trio.move_on_after(STORE_TIMEOUT):
        try:
            await db.write(lambda conn: repo.probe_write(conn, node.process_id, now_ms()))
        except Overloaded:  # the writer's queue is full of writes: not the store's refusal
            return StoreAnswer(True, True, migrated, newer=newer)
        except (MeshError, DBAPIError) as error:
            return StoreAnswer(True, False, migrated, _why(error), newer=newer)
        return StoreAnswer(True, True, migrated, newer=newer)
    return StoreAnswer(
        True, False, migrated, f"a write not done within {STORE_TIMEOUT:.0f} s", newer=newer
    )


def _why(error: Exception) -> str:
    return error.message if isinstance(error, MeshError) else type(error).__name__


class StoreCheck:
    """A node's readiness, with the store asked at most once per
    ``STORE_ANSWER_MAX_AGE`` seconds (of ``trio.current_time()``).

    Checks that find the last answer too old share one query: the first asks,
    the others wait for its answer. If the one asking is cancelled (its
    client went away), a waiter asks in its place.

    Args:
        node: the node checked.
        ask: asks its store (default :func:`ask_store`).
    """

    def __init__(self, node: Node, ask: Callable[[], Awaitable[StoreAnswer]] | None = None) -> None:
        self.node = node
        self._ask = ask if ask is not None else lambda: ask_store(node)
        self._answer: StoreAnswer | None = None
        #: when the query that gave ``_answer`` was sent
        self._asked_at = -math.inf
        self._asking: trio.Event | None = None

    async def store(self) -> StoreAnswer:
        """The store's answer, no older than ``STORE_ANSWER_MAX_AGE``."""
        while self._answer is None or trio.current_time() - self._asked_at >= STORE_ANSWER_MAX_AGE:
            if self._asking is not None:
                await self._asking.wait()
                continue
            self._asking = asked = trio.Event()
            try:
                asked_at = trio.current_time()
                self._answer = await self._ask()
                self._asked_at = asked_at
            finally:
                self._asking = None
                asked.set()
        return self._answer

    async def ready(self) -> dict[str, Any]:
        """``GET /api/health/ready``'s body: ready, reasons, version, uptime, storage."""
        answer = await self.store()
        reasons = store_reasons(answer) + node_reasons(self.node)
        return {
            "ready": not reasons,
            "reasons": [{"code": code, "message": message} for code, message in reasons],
            "version": __version__,
            "uptime": round(time.monotonic() - self.node.started_at, 3),
            "storage": {
                "ok": answer.reachable,
                "writable": answer.writable,
                "backend": self.node.db.backend,
            },
        }

    async def health(self) -> dict[str, Any]:
        """``GET /api/health``'s body: ok (ready), version, uptime, storage, reasons."""
        body = await self.ready()
        return {
            "ok": body["ready"],
            "version": body["version"],
            "uptime": body["uptime"],
            "storage": body["storage"],
            "reasons": body["reasons"],
        }


def store_reasons(answer: StoreAnswer) -> list[tuple[str, str]]:
    """Why the store's answer keeps the node from being ready."""
    if not answer.reachable:
        return [("store_unreachable", f"the store does not answer: {answer.error}")]
    reasons = []
    if not answer.writable:
        reasons.append(("store_read_only", f"the store does not accept writes: {answer.error}"))
    if answer.newer:
        reasons.append(
            (
                "store_from_newer_release",
                "the store was migrated by a newer release than this one: upgrade this node",
            )
        )
    elif not answer.migrated:
        reasons.append(
            (
                "migrations_pending",
                "the store is behind this release's schema: its migrations are not applied",
            )
        )
    return reasons


def node_reasons(node: Node) -> list[tuple[str, str]]:
    """Why the node is not ready, from what it knows without I/O (a
    ``statvfs`` at most every half second aside): stopping, the data folder's
    and the uploads folder's disk, its active faults, the bus."""
    reasons = []
    if node.stopping:
        reasons.append(("stopping", "the node is stopping"))
    for disk in (node.disk, node.uploads_disk):
        problem = disk.problem() if disk is not None else None
        if problem is not None:
            reasons.append(problem)
    if node.db.disk_full():
        reasons.append(("disk_full", "the store's writes fail: the disk is full"))
    if node.faults.any_active(STORE_CORRUPT):
        reasons.append(
            (
                "store_corrupt",
                "the store's file is damaged: run quart-mesh check, then quart-mesh restore",
            )
        )
    if node.faults.any_active(DESCRIPTORS):
        reasons.append(
            (
                "descriptors_low",
                "the node is out of file descriptors or past its share of them"
                " (MESH_MAX_FD_SHARE): new connections are refused",
            )
        )
    behind = _bus_behind(node)
    if behind > BUS_BEHIND_LIMIT:
        reasons.append(
            ("bus_behind", f"the cluster's stream is {behind:.0f} s behind on this process")
        )
    return reasons


def _bus_behind(node: Node) -> float:
    """Seconds the bus has been behind (0 without a bus: one process alone)."""
    return node.bus.behind_for() if node.bus is not None else 0.0


def _store_check() -> StoreCheck:
    current = node()
    check: StoreCheck | None = current_app.extensions.get("quart_mesh.health")
    if check is None or check.node is not current:
        check = current_app.extensions["quart_mesh.health"] = StoreCheck(current)
    return check


class Storage(Shape):
    ok: bool
    #: it accepted the readiness probe's write
    writable: bool
    backend: str


class Reason(Shape):
    """Why the node is not ready: ``store_unreachable``, ``store_read_only``,
    ``migrations_pending``, ``store_from_newer_release``, ``bus_behind``,
    ``disk_low``, ``disk_unreadable``, ``disk_full``, ``store_corrupt``,
    ``descriptors_low`` or ``stopping``."""

    code: str
    message: str


class Health(Shape):
    """Whether the node serves (is ready): 200 when it does, 503 when not."""

    ok: bool
    version: str
    #: seconds since the node started
    uptime: float
    storage: Storage
    #: why it is not ready (empty when it is)
    reasons: list[Reason]


class Liveness(Shape):
    """The process and its event loop answer (always ``ok``)."""

    ok: bool
    version: str
    #: seconds since the node started
    uptime: float


class Readiness(Shape):
    """Whether the node should get traffic: 200 when ready, 503 when not."""

    ready: bool
    #: why it is not ready (empty when it is)
    reasons: list[Reason]
    version: str
    #: seconds since the node started
    uptime: float
    storage: Storage


class SetupStatus(Shape):
    """Whether the mesh is set up, and what a newcomer needs to know."""

    initialized: bool
    #: ``POST /api/setup/init`` needs ``setupCode`` (a node reachable from
    #: the network, not set up yet: the code is in its log)
    code_required: bool
    registration_mode: str
    visibility: str
    mesh_name: str | None
    default_room_id: str | None


class SetupInit(Body):
    name: str
    password: str
    mesh_name: str
    description: str | None = None
    #: public (listed, readable) or private; default public
    visibility: str | None = None
    #: open or closed; default open
    registration_mode: str | None = None
    default_room_name: str | None = None
    #: the code the node logged at start; needed when ``GET /api/setup/status``
    #: says ``codeRequired``
    setup_code: str | None = None


class MeshSettings(Shape):
    """The mesh's public settings (``name`` is null before setup)."""

    name: str | None
    description: str
    visibility: str


@bp.get("/api/health")
@public()
@answers(Health)
@answers(Health, 503)
async def health() -> tuple[Any, int]:
    """The node's health: whether it is ready (as ``/api/health/ready``), in
    the older shape."""
    result = await _store_check().health()
    return reply(result, 200 if result["ok"] else 503)


@bp.get("/api/health/live")
@public()
@answers(Liveness)
async def live() -> tuple[Any, int]:
    """Liveness: the process and its event loop answer (asks nothing of the store)."""
    uptime = round(time.monotonic() - node().started_at, 3)
    return reply({"ok": True, "version": __version__, "uptime": uptime})


@bp.get("/api/health/ready")
@public()
@answers(Readiness)
@answers(Readiness, 503)
async def ready() -> tuple[Any, int]:
    """Readiness: whether the node should get traffic, and if not, why."""
    result = await _store_check().ready()
    return reply(result, 200 if result["ready"] else 503)


@bp.get("/api/setup/status")
@public()
@answers(SetupStatus)
async def setup_status() -> tuple[Any, int]:
    """Whether the mesh is set up, and whether its setup needs the setup code."""
    return reply(node().accounts.setup_status(_server_host()))


@bp.post("/api/setup/init")
@public()
@accepts(SetupInit)
@answers(Session, 201)
async def setup_init(data: SetupInit) -> tuple[Any, int]:
    """Set the mesh up (once): its name and settings, and the owner's account.

    A node that listens on a non-loopback address asks for the one-time
    setup code it wrote in its log at start (``setupCode``)."""
    session = await node().accounts.init_setup(
        name=data.name,
        password=data.password,
        mesh_name=data.mesh_name,
        description=_default(data.description, ""),
        visibility=_default(data.visibility, "public"),
        registration_mode=_default(data.registration_mode, "open"),
        default_room_name=data.default_room_name or DEFAULT_ROOM_NAME,
        setup_code=data.setup_code,
        address=client_address(),
        server_host=_server_host(),
    )
    return reply(session.to_json(), 201)


def _server_host() -> str | None:
    """The server's address on this request's connection (ASGI ``server``)."""
    server = request.scope.get("server")
    return str(server[0]) if server else None


@bp.get("/api/mesh/settings")
@public()
@answers(MeshSettings)
async def mesh_settings() -> tuple[Any, int]:
    """The mesh's public settings."""
    mesh = node().accounts.mesh
    if mesh is None:
        return reply({"name": None, "description": "", "visibility": "private"})
    return reply(mesh.public_json())


def _default(value: str | None, default: str) -> str:
    return default if value is None else value
