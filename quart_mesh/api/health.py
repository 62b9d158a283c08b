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
from quart import Blueprint, current_app

from ..services.accounts import DEFAULT_ROOM_NAME
from ._common import body, node, reply

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


@bp.get("/api/health")
async def health() -> tuple[Any, int]:
    result = await _store_check().health()
    return reply(result, 200 if result["ok"] else 503)


@bp.get("/api/setup/status")
async def setup_status() -> tuple[Any, int]:
    return reply(node().accounts.setup_status())


@bp.post("/api/setup/init")
async def setup_init() -> tuple[Any, int]:
    fields = await body()
    session = await node().accounts.init_setup(
        name=fields.req_str("name"),
        password=fields.req_str("password"),
        mesh_name=fields.req_str("meshName"),
        description=_default(fields.opt_str("description"), ""),
        visibility=_default(fields.opt_str("visibility"), "public"),
        registration_mode=_default(fields.opt_str("registrationMode"), "open"),
        default_room_name=fields.opt_str("defaultRoomName") or DEFAULT_ROOM_NAME,
    )
    return reply(session.to_json(), 201)


@bp.get("/api/mesh/settings")
async def mesh_settings() -> tuple[Any, int]:
    mesh = node().accounts.mesh
    if mesh is None:
        return reply({"name": None, "description": "", "visibility": "private"})
    return reply(mesh.public_json())


def _default(value: str | None, default: str) -> str:
    return default if value is None else value
