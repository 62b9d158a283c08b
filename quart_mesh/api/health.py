"""Health and first-run setup (spec §4.1, §4.2).

``GET /api/health`` does not ask the store on every call: the store's answer
is reused for up to ``STORE_ANSWER_MAX_AGE`` seconds, and checks that come
while it is being asked wait for that one answer. So a check reports a store
that answered a trivial query within that time before the check began (or
while it waited), and a store that stops answering is reported unhealthy
within that time plus the failing query's own (``docs/decisions/0041-cheap-health-checks.md``).
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import trio
from quart import Blueprint, current_app, request

from ..services.accounts import DEFAULT_ROOM_NAME
from ._common import client_address, node, reply
from .contract import Body, Shape, accepts, answers, public
from .objects import Session

if TYPE_CHECKING:
    from ..node import Node

bp = Blueprint("health", __name__)

#: seconds the store's answer to a health check is reused for
STORE_ANSWER_MAX_AGE = 1.0


class StoreCheck:
    """A node's health, with the store asked at most once per
    ``STORE_ANSWER_MAX_AGE`` seconds (of ``trio.current_time()``).

    Checks that find the last answer too old share one query: the first asks,
    the others wait for its answer. If the one asking is cancelled (its
    client went away), a waiter asks in its place.
    """

    def __init__(self, node: Node) -> None:
        self.node = node
        self._answer: dict[str, Any] | None = None
        #: when the query that gave ``_answer`` was sent
        self._asked_at = -math.inf
        self._asking: trio.Event | None = None

    async def health(self) -> dict[str, Any]:
        """``GET /api/health``'s body: ok, version, uptime, storage."""
        while self._answer is None or trio.current_time() - self._asked_at >= STORE_ANSWER_MAX_AGE:
            if self._asking is not None:
                await self._asking.wait()
                continue
            self._asking = asked = trio.Event()
            try:
                asked_at = trio.current_time()
                self._answer = await self.node.health()
                self._asked_at = asked_at
            finally:
                self._asking = None
                asked.set()
        answer = self._answer
        return {
            **answer,
            "ok": answer["storage"]["ok"] and self.node.running,
            "uptime": round(time.monotonic() - self.node.started_at, 3),
        }


def _store_check() -> StoreCheck:
    current = node()
    check: StoreCheck | None = current_app.extensions.get("quart_mesh.health")
    if check is None or check.node is not current:
        check = current_app.extensions["quart_mesh.health"] = StoreCheck(current)
    return check


class Storage(Shape):
    ok: bool
    backend: str


class Health(Shape):
    """Whether the node serves: 200 when it does, 503 when not."""

    ok: bool
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
    """The node's health: whether it serves and reaches its store."""
    result = await _store_check().health()
    return reply(result, 200 if result["ok"] else 503)


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
