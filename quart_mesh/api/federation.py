"""Mesh connections (spec §3.1, §4.13) and the node-to-node paths of federation.

``POST /api/connections/request`` serves two callers: with an
``Authorization`` header it is the admin asking this node to connect to
another; without one it is another node's signed request (``X-Mesh-*``
headers, ``docs/federation.md``). ``/api/connections/accepted``,
``/declined`` and ``/disconnected`` are node-to-node only.

Shared rooms (decision 0029): ``POST /api/connections/:id/rooms`` shares a
room of this node with the peer, ``DELETE /api/connections/:id/rooms/:roomId``
stops; the peer learns of it through ``POST /api/federation/rooms`` and
``/api/federation/rooms/unshared``, and changes in shared rooms travel as
batches of events to ``POST /api/federation/relay`` (all node-to-node, signed).

The registry (decision 0028): ``POST /api/meshes/heartbeat`` takes another
node's signed heartbeat; ``GET /api/meshes/public`` lists the meshes heard
from recently, without a token.
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint, request

from ..errors import BadRequest, Unavailable
from ..federation.relay import Relay
from ..federation.service import SignedRequest
from ..wire import parse_json_object
from ._common import body, caller, node, reply

bp = Blueprint("federation", __name__)


def _relay() -> Relay:
    relay = node().federation.relay
    if relay is None:
        raise Unavailable("the relay is not running", "unavailable")
    return relay


def _own_url() -> str:
    return (node().address.url or request.host_url).rstrip("/")


async def _signed() -> tuple[str, dict[str, Any]]:
    """The verified sender DID and JSON body of a node-to-node request."""
    data = await request.get_data(cache=False)
    raw = data.encode() if isinstance(data, str) else data
    signed = SignedRequest(dict(request.headers), request.method, request.path, raw)
    did = await node().federation.authenticate(signed)
    return did, (parse_json_object(raw) if raw.strip() else {})


@bp.get("/api/connections")
async def list_connections() -> tuple[Any, int]:
    actor = await caller()
    return reply(await node().federation.list_connections(actor))


@bp.post("/api/connections/request")
async def request_connection() -> tuple[Any, int]:
    federation = node().federation
    if "Authorization" not in request.headers:
        did, fields = await _signed()
        return reply(await federation.receive_request(did, fields), 201)
    actor = await caller()
    given = await body()
    mesh = node().accounts.mesh
    connection = await federation.request(
        actor,
        url=given.req_str("url"),
        message=given.opt_str("message") or "",
        own_url=_own_url(),
        own_name=_own_url() if mesh is None else mesh.name,
    )
    return reply(connection, 201)


@bp.post("/api/connections/<connection_id>/accept")
async def accept(connection_id: str) -> tuple[Any, int]:
    actor = await caller()
    return reply(await node().federation.accept(actor, connection_id))


@bp.post("/api/connections/<connection_id>/decline")
async def decline(connection_id: str) -> tuple[Any, int]:
    actor = await caller()
    return reply(await node().federation.decline(actor, connection_id))


@bp.delete("/api/connections/<connection_id>")
async def disconnect(connection_id: str) -> tuple[Any, int]:
    actor = await caller()
    force = request.args.get("force", "false").lower()
    if force not in ("true", "false", "1", "0"):
        raise BadRequest("force must be true or false", "invalid_field")
    result = await node().federation.disconnect(actor, connection_id, force=force in ("true", "1"))
    return reply(result)


@bp.post("/api/connections/<connection_id>/rooms")
async def share_room(connection_id: str) -> tuple[Any, int]:
    actor = await caller()
    given = await body()
    return reply(await _relay().shares.share(actor, connection_id, given.req_str("roomId")), 201)


@bp.delete("/api/connections/<connection_id>/rooms/<room_id>")
async def unshare_room(connection_id: str, room_id: str) -> tuple[Any, int]:
    actor = await caller()
    return reply(await _relay().shares.unshare(actor, connection_id, room_id))


@bp.post("/api/federation/rooms")
async def peer_shared_room() -> tuple[Any, int]:
    did, fields = await _signed()
    return reply(await _relay().shares.receive_share(did, fields), 201)


@bp.post("/api/federation/rooms/unshared")
async def peer_unshared_room() -> tuple[Any, int]:
    did, fields = await _signed()
    return reply(await _relay().shares.receive_unshare(did, fields))


@bp.post("/api/federation/relay")
async def peer_relay() -> tuple[Any, int]:
    did, fields = await _signed()
    return reply(await _relay().receiver.receive_relay(did, fields))


@bp.post("/api/connections/accepted")
async def peer_accepted() -> tuple[Any, int]:
    did, fields = await _signed()
    return reply(await node().federation.receive_notice(did, fields, "accepted"))


@bp.post("/api/connections/declined")
async def peer_declined() -> tuple[Any, int]:
    did, fields = await _signed()
    return reply(await node().federation.receive_notice(did, fields, "declined"))


@bp.post("/api/connections/disconnected")
async def peer_disconnected() -> tuple[Any, int]:
    did, fields = await _signed()
    return reply(await node().federation.receive_notice(did, fields, "disconnected"))


@bp.post("/api/meshes/heartbeat")
async def heartbeat() -> tuple[Any, int]:
    did, fields = await _signed()
    return reply(await node().registry.receive_heartbeat(did, fields))


@bp.get("/api/meshes/public")
async def public_meshes() -> tuple[Any, int]:
    return reply(await node().registry.list_public())
