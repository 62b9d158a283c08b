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

The registry (decisions 0028, 0057), on a node whose owner turned it on:
``POST /api/meshes/heartbeat`` takes another node's signed heartbeat;
``GET /api/meshes/public`` lists the meshes heard from recently, without a
token.

A signed request's body is read by the handler itself (the signature covers
its bytes, and is checked before the body is looked at): its type is declared
for the document only (``reads_body``), and the services check its fields.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, cast

import msgspec
from quart import Blueprint, request

from ..errors import BadRequest, Unavailable
from ..federation.relay import Relay
from ..federation.service import SignedRequest
from ..wire import parse_json_object
from ._common import caller, client_address, node, reply, token_sent
from .contract import Body, OneOf, Query, Shape, accepts, answers, public, query, reads_body
from .objects import Id, Ok, Timestamp

bp = Blueprint("federation", __name__)


#: the ways in of node-to-node requests
SIGNATURE = "signature"

ConnectionStatus = Literal["pending", "accepted", "declined", "disconnected"]
Direction = Literal["inbound", "outbound"]


# -- what the node answers ----------------------------------------------------


class SharedRoom(Shape):
    """A room shared over a connection."""

    #: the room on this node (the mirror, for a peer's room)
    room_id: Id
    name: str
    #: the room's id on the node it belongs to
    home_room_id: Id
    #: outbound: this node's room, shared with the peer; inbound: the peer's
    direction: Direction
    shared_at: Timestamp


class RequestReceived(Shape):
    """Another node's signed request, received: it waits for an admin here."""

    ok: bool
    connection_id: Id
    status: Literal["pending"]


class Connection(Shape):
    """A connection with another node."""

    id: Id
    status: ConnectionStatus
    #: outbound: this node asked; inbound: the peer did
    direction: Direction
    name: str
    url: str
    did: str
    message: str
    shared_rooms: list[SharedRoom]
    created_at: Timestamp
    updated_at: Timestamp


class LinkState(Shape):
    """The relay's link task of an accepted connection (in this process)."""

    running: bool
    failures: int
    last_error: str | None
    last_relayed_at: Timestamp | None
    relayed: int
    #: events in the outbox not yet acknowledged by the peer
    waiting: int


class ListedConnection(Connection):
    """A connection, its shared rooms and its relay link (null when no link runs)."""

    relay: LinkState | None


class EndedConnection(Connection):
    """The ended (or declined) connection, and whether the peer was told."""

    peer_notified: bool


class Unshared(Ok):
    room_id: Id
    connection_id: Id


class Notice(Ok):
    """A peer's request or notice, recorded."""

    connection_id: Id
    status: ConnectionStatus


class MirrorRoom(Ok):
    """The peer's room is shared here as this room."""

    room_id: Id


class RelayResult(Shape):
    """What became of one relayed event."""

    #: the event's ``seq`` as sent (any JSON value when malformed)
    seq: Any
    status: Literal["ok", "duplicate", "refused", "failed"]
    #: why it was refused or failed
    code: str | msgspec.UnsetType = msgspec.UNSET


class RelayAnswer(Ok):
    """One result per event, in order."""

    results: list[RelayResult]


class HeartbeatAnswer(Ok):
    status: Literal["ok", "withdrawn"]


class PublicMesh(Shape):
    """A mesh whose node sent the registry a heartbeat recently."""

    name: str
    description: str
    url: str
    did: str
    members: int
    bots: int
    version: str
    last_seen: Timestamp


# -- what the node takes ------------------------------------------------------


class ConnectTo(Body):
    """An admin asks this node to connect to another."""

    #: the other node's base URL
    url: str
    #: a note for the other node's admins
    message: str | None = None


class ConnectionRequest(Body):
    """From an admin (with a token): ``url`` and ``message``; from another
    node (signed): also its ``did``, ``name`` and the ``connectionId`` it chose."""

    url: str
    message: str | None = None
    #: node-to-node: the requesting node's DID (the signer's)
    did: str | None = None
    #: node-to-node: the requesting mesh's name
    name: str | None = None
    #: node-to-node: the connection's id (a ULID)
    connection_id: str | None = None


class ConnectionNotice(Body):
    """A peer accepted, declined or ended a connection."""

    connection_id: str
    #: the sending node's DID
    did: str | None = None


class ShareRoom(Body):
    #: a room of this node
    room_id: str


class RoomInfo(Body):
    id: str
    name: str
    description: str = ""


class PeerShare(Body):
    """A peer shares one of its rooms."""

    connection_id: str
    room: RoomInfo


class PeerUnshare(Body):
    """A peer stops sharing a room (its own, or one of this node's)."""

    connection_id: str
    #: the room's id on the node it belongs to
    room_id: str


class RelayEvent(Body):
    """A change in a shared room (``kind`` says which; fields by kind)."""

    #: the peer's outbox position (a whole number above 0)
    seq: int
    kind: Literal["message", "edit", "delete", "reaction"]
    #: the room's id on the node it belongs to
    room: str
    message_id: str
    #: the participant acting: ``{id, name, kind, type, node: {did, name}}``
    by: dict[str, Any]
    #: message, edit
    content: str | None = None
    #: message: epoch milliseconds
    created_at: int | None = None
    #: message
    thread_id: str | None = None
    #: message: the participant it is addressed to (as ``by``)
    to: dict[str, Any] | None = None
    #: reaction
    emoji: str | None = None
    #: reaction: added or taken back
    added: bool | None = None


class RelayBatch(Body):
    """A batch of changes in the rooms shared over a connection."""

    connection_id: str
    events: list[RelayEvent]


class Heartbeat(Body):
    """A node's mesh, for the registry (``withdrawn``: remove it)."""

    #: the signer's DID
    did: str
    status: Literal["ok", "withdrawn"]
    #: the mesh's public base URL; it must serve a manifest with ``did``
    url: str | None = None
    name: str | None = None
    description: str | None = None
    members: int | None = None
    bots: int | None = None
    version: str | None = None


_FLAG = ["true", "false", "1", "0"]

#: a yes-or-no query parameter (any case; checked by the handler, :func:`_flag`,
#: so that another value stays ``invalid_field`` as it always was for ``force``)
Flag = Annotated[
    str,
    msgspec.Meta(
        # documented, not enforced here: the handler answers invalid_field
        extra_json_schema={"pattern": "^([Tt][Rr][Uu][Ee]|[Ff][Aa][Ll][Ss][Ee]|1|0)$"},
        description="true or false (any case), 1 or 0",
    ),
]


class DisconnectQuery(Query):
    #: end it here even when the peer cannot be told
    force: Flag | None = None


class DeclineQuery(Query):
    #: false: decline it here without contacting the requester at all
    notify: Flag | None = None


# -- helpers ------------------------------------------------------------------


def _relay() -> Relay:
    relay = node().federation.relay
    if relay is None:
        raise Unavailable("the relay is not running", "unavailable")
    return relay


def _flag(value: str | None, name: str, default: bool) -> bool:
    """A :data:`Flag` query parameter's value (*default* when absent).

    Raises:
        BadRequest: ``invalid_field``, not one of true, false, 1, 0 (any case).
    """
    if value is None:
        return default
    if value.lower() not in _FLAG:
        raise BadRequest(f"{name} must be true or false", "invalid_field")
    return value.lower() in ("true", "1")


def _own_url() -> str:
    return (node().address.url or request.host_url).rstrip("/")


async def _signed() -> tuple[str, dict[str, Any]]:
    """The verified sender DID and JSON body of a node-to-node request
    (``Federation.authenticate`` decides by its path who may send it)."""
    data = await request.get_data(cache=False)
    raw = data.encode() if isinstance(data, str) else data
    signed = SignedRequest(
        dict(request.headers), request.method, request.path, raw, client_address()
    )
    did = await node().federation.authenticate(signed)
    return did, (parse_json_object(raw) if raw.strip() else {})


# -- admin --------------------------------------------------------------------


@bp.get("/api/connections")
@answers(list[ListedConnection])
async def list_connections() -> tuple[Any, int]:
    """This node's connections, with their shared rooms and relay links."""
    actor = await caller()
    return reply(await node().federation.list_connections(actor))


@bp.post("/api/connections/request")
@public("signature", token_if_sent=True)
@reads_body(ConnectionRequest)
@answers(OneOf(Connection, RequestReceived), 201)
async def request_connection() -> tuple[Any, int]:
    """Ask another node to connect (an admin), or, signed, another node asks this one.

    With a bearer token: ``{url, message}``, the answer is the new outbound
    connection (``Connection``). Without one, the request must carry another
    node's signature (``X-Mesh-*`` headers) and the answer is
    ``{ok, connectionId, status: "pending"}``.
    """
    if not token_sent():
        did, fields = await _signed()
        federation = node().federation
        return reply(await federation.receive_request(did, fields, address=client_address()), 201)
    return await _connect_to()


async def _connect(data: ConnectTo) -> tuple[Any, int]:
    """An admin's request to connect to the node at ``url``."""
    actor = await caller()
    mesh = node().accounts.mesh
    connection = await node().federation.request(
        actor,
        url=data.url,
        message=data.message or "",
        own_url=_own_url(),
        own_name=_own_url() if mesh is None else mesh.name,
    )
    return reply(connection, 201)


#: :func:`_connect` with the token checked, then the body decoded (``accepts``)
_connect_to = cast("Callable[[], Awaitable[tuple[Any, int]]]", accepts(ConnectTo)(_connect))


@bp.post("/api/connections/<connection_id>/accept")
@answers(Connection)
async def accept(connection_id: str) -> tuple[Any, int]:
    """Accept another node's pending request (the peer is told first, once
    the URL it gave serves its manifest: else 502 and nothing changes)."""
    actor = await caller()
    return reply(await node().federation.accept(actor, connection_id))


@bp.post("/api/connections/<connection_id>/decline")
@query(DeclineQuery)
@answers(EndedConnection)
async def decline(connection_id: str, args: DeclineQuery) -> tuple[Any, int]:
    """Decline another node's pending request: declined here whatever the
    peer does (``peerNotified``: whether it was told; ``notify=false``, or
    federation off here: it is not contacted at all)."""
    actor = await caller()
    notify = _flag(args.notify, "notify", True)
    return reply(await node().federation.decline(actor, connection_id, notify=notify))


@bp.delete("/api/connections/<connection_id>")
@query(DisconnectQuery)
@answers(EndedConnection)
async def disconnect(connection_id: str, args: DisconnectQuery) -> tuple[Any, int]:
    """End a pending or accepted connection (``force``: even if the peer cannot be told).

    The peer is told first; for another node's pending request, only once the
    URL it gave serves its manifest (``502 peer_mismatch`` otherwise, unless
    ``force``). An expired request is gone: ``404 connection_not_found``.
    """
    actor = await caller()
    force = _flag(args.force, "force", False)
    return reply(await node().federation.disconnect(actor, connection_id, force=force))


@bp.post("/api/connections/<connection_id>/rooms")
@accepts(ShareRoom)
@answers(SharedRoom, 201)
async def share_room(connection_id: str, data: ShareRoom) -> tuple[Any, int]:
    """Share one of this node's rooms with the peer of an accepted connection."""
    actor = await caller()
    return reply(await _relay().shares.share(actor, connection_id, data.room_id), 201)


@bp.delete("/api/connections/<connection_id>/rooms/<room_id>")
@answers(Unshared)
async def unshare_room(connection_id: str, room_id: str) -> tuple[Any, int]:
    """Stop sharing a room over a connection (the peer is told first)."""
    actor = await caller()
    return reply(await _relay().shares.unshare(actor, connection_id, room_id))


# -- node to node (signed) ----------------------------------------------------


@bp.post("/api/federation/rooms")
@public(SIGNATURE)
@reads_body(PeerShare)
@answers(MirrorRoom, 201)
async def peer_shared_room() -> tuple[Any, int]:
    """A peer shares one of its rooms: it is mirrored here (node-to-node)."""
    did, fields = await _signed()
    return reply(await _relay().shares.receive_share(did, fields), 201)


@bp.post("/api/federation/rooms/unshared")
@public(SIGNATURE)
@reads_body(PeerUnshare)
@answers(Ok)
async def peer_unshared_room() -> tuple[Any, int]:
    """A peer stops sharing a room (node-to-node)."""
    did, fields = await _signed()
    return reply(await _relay().shares.receive_unshare(did, fields))


@bp.post("/api/federation/relay")
@public(SIGNATURE)
@reads_body(RelayBatch)
@answers(RelayAnswer)
async def peer_relay() -> tuple[Any, int]:
    """A batch of changes in shared rooms, applied in order (node-to-node)."""
    did, fields = await _signed()
    return reply(await _relay().receiver.receive_relay(did, fields))


@bp.post("/api/connections/accepted")
@public(SIGNATURE)
@reads_body(ConnectionNotice)
@answers(Notice)
async def peer_accepted() -> tuple[Any, int]:
    """The peer accepted this node's request (node-to-node)."""
    did, fields = await _signed()
    return reply(await node().federation.receive_notice(did, fields, "accepted"))


@bp.post("/api/connections/declined")
@public(SIGNATURE)
@reads_body(ConnectionNotice)
@answers(Notice)
async def peer_declined() -> tuple[Any, int]:
    """The peer declined this node's request (node-to-node)."""
    did, fields = await _signed()
    return reply(await node().federation.receive_notice(did, fields, "declined"))


@bp.post("/api/connections/disconnected")
@public(SIGNATURE)
@reads_body(ConnectionNotice)
@answers(Notice)
async def peer_disconnected() -> tuple[Any, int]:
    """The peer ended the connection (node-to-node)."""
    did, fields = await _signed()
    return reply(await node().federation.receive_notice(did, fields, "disconnected"))


# -- the registry ---------------------------------------------------------------


@bp.post("/api/meshes/heartbeat")
@public(SIGNATURE)
@reads_body(Heartbeat)
@answers(HeartbeatAnswer)
async def heartbeat() -> tuple[Any, int]:
    """Another node's heartbeat: its mesh is listed (or, withdrawn, no longer).

    Only on a node that is a registry (``registryEnabled`` in the mesh settings,
    by default ``MESH_REGISTRY_ENABLED``; else 404
    ``registry_disabled``, before the signature is looked at). The mesh is
    listed only when its ``url`` serves ``/.well-known/mesh-manifest.json``
    with the signer's DID (fetched through the outbound SSRF guard; a
    successful check is trusted for ``MESH_REGISTRY_VERIFY_TTL`` seconds):
    else 400 ``manifest_unreachable`` (no manifest could be fetched: no
    answer, not 200, a private address) or ``manifest_mismatch`` (not a
    manifest with that DID). 429 ``rate_limited``: too many heartbeats from
    this DID, or manifest checks from this address; 429 ``registry_full``.
    """
    registry = node().registry
    registry.check_enabled()
    did, fields = await _signed()
    return reply(await registry.receive_heartbeat(did, fields, address=client_address()))


@bp.get("/api/meshes/public")
@public()
@answers(list[PublicMesh])
async def public_meshes() -> tuple[Any, int]:
    """The meshes heard from recently, newest first (404 ``registry_disabled``
    on a node that is not a registry)."""
    return reply(await node().registry.list_public())
