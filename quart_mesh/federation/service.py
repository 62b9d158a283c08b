"""Mesh connections between nodes (spec §3.1, §4.13; ``docs/federation.md``).

Every change that involves the peer is made there first and here second: the
remote call is the step that can fail, so when the peer cannot be reached or
refuses, nothing is written locally and the caller gets ``502`` (decision
0027); only a decline ends a request here whatever the peer does. Both
nodes keep the same connection id (a ULID chosen by the requester), one row
per peer DID.

What another node says of itself in a signed request is taken only as far as
it can be checked. The URL it gives is a plain base URL (:func:`_base_url`),
and nothing is sent to it until it serves a manifest with the DID that
signed the request (:meth:`Federation._check_peer_url`): a stranger cannot
make this node call someone else's URL, or its own network (the client
reaches only public addresses unless the operator allows private ones). Its
pending requests wait ``federation_pending_ttl`` at most (then they are
deleted), at most ``federation_max_pending_per_address`` from one client
address (an IPv6 /64), and an admin can decline one without the requester's
help, even with federation off.

Who is heard at all is decided before a signed request's nonce is stored
(:meth:`Federation._admit`): a peer (an accepted connection, or a pending one
this node asked for) on every path; anyone else only where a stranger has
business — a connection request, a heartbeat, a notice about its own ended
or pending connection — within a per-address budget. So nothing a stranger
sends can fill the nonce store that the peers' requests need.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, replace
from functools import partial
from typing import Any
from urllib.parse import SplitResult, urlsplit

import httpx
import trio

from ..client_address import ip_of
from ..config import Settings
from ..errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    RateLimited,
    Unauthorized,
)
from ..identity import NodeIdentity, public_key_from_did
from ..ids import is_ulid, new_id
from ..records import iso, now_ms
from ..services.authz import Actor, authorize
from ..services.ratelimit import RateLimiter, address_key
from ..services.validation import is_resolvable_url
from ..store import Database
from ..store import connections as repo
from ..store import relay as relay_repo
from .http import PeerError, exchange, json_object, peer_client, post_signed, unreachable
from .peers import DISCONNECTED_PATH, get_connection
from .relay import Relay
from .signing import Nonces, verify_request

__all__ = ["Federation", "PeerError", "SignedRequest"]

log = logging.getLogger(__name__)

#: longest peer URL, peer name and request message accepted
MAX_URL_CHARS = 2048
MAX_PEER_NAME_CHARS = 200
MAX_MESSAGE_CHARS = 1000
#: a segment of a peer URL's path prefix: plain characters only (no escapes)
_PATH_SEGMENT = re.compile(r"[A-Za-z0-9._~-]+")
MANIFEST_PATH = "/.well-known/mesh-manifest.json"
REQUEST_PATH = "/api/connections/request"
ACCEPTED_PATH = "/api/connections/accepted"
DECLINED_PATH = "/api/connections/declined"
#: a node's heartbeat to a registry (``registry.py``), signed like the paths above
HEARTBEAT_PATH = "/api/meshes/heartbeat"
#: what pending requests from a client whose address is not known (a unix
#: socket) count as: one address, shared by all of them
UNKNOWN_ADDRESS = "unknown"
#: the longest ``connections.request_address``
_REQUEST_ADDRESS_CHARS = 64


@dataclass(frozen=True, slots=True)
class SignedRequest:
    """What the transport hands over of a node-to-node request."""

    headers: dict[str, str]
    method: str
    path: str
    body: bytes
    #: the client's address (``None``: not known, not rate-limited per
    #: address); pending requests from an address not known or not an IP
    #: address (a unix socket) all count as one, :data:`UNKNOWN_ADDRESS`
    address: str | None = None


class Federation:
    """Connections with other nodes; runs in the node's nursery (:meth:`run`
    owns the outbound HTTP client)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        identity: NodeIdentity,
        relay: Relay,
        *,
        rate_limits: RateLimiter,
    ) -> None:
        self._settings = settings
        self._db = db
        self._identity = identity
        self._rate = rate_limits
        self.nonces = Nonces(
            db, settings.federation_max_skew_seconds, settings.federation_max_nonces
        )
        self._client: httpx.AsyncClient | None = None
        #: shared rooms, link tasks and inbound relay (its links run in :meth:`run`)
        self.relay = relay

    @property
    def enabled(self) -> bool:
        return self._settings.federation_enabled

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the HTTP client to peers (connections, shares, relay) until
        cancelled; every process runs this. The link tasks run in
        :meth:`run_links`."""
        async with peer_client(
            self._settings.federation_timeout,
            "quart-mesh-federation",
            allow_private=self._settings.outbound_allow_private,
        ) as client:
            self._client = client
            try:
                async with trio.open_nursery() as nursery:
                    await nursery.start(self.relay.run, client)
                    task_status.started()
                    await trio.sleep_forever()
            finally:
                self._client = None

    async def run_links(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Run the relay's link tasks, one per accepted connection, until
        cancelled (``outbound.Links.lead``); needs :meth:`run` running. An
        elected singleton: one process of the mesh runs it (decision 0035)."""
        await self.relay.links.lead(task_status=task_status)

    # -- admin operations -------------------------------------------------

    async def list_connections(self, actor: Actor) -> list[dict[str, Any]]:
        authorize(actor, "federation.manage")
        rows = await self._db.read(repo.list_connections)
        rows = [row for row in rows if not self._expired(row)]  # as good as gone
        shared = await self.relay.shares.by_connection()
        links = await self.relay.links.link_states([row.connection_id for row in rows])
        listed = []
        for row in rows:
            item = to_json(row)
            item["sharedRooms"] = shared.get(row.connection_id, [])
            item["relay"] = links.get(row.connection_id)
            listed.append(item)
        return listed

    async def request(
        self, actor: Actor, *, url: str, message: str, own_url: str, own_name: str
    ) -> dict[str, Any]:
        """Ask the node at *url* to connect; recorded here only once it has the request.

        Raises:
            Forbidden, BadRequest, Conflict, PeerError.
        """
        authorize(actor, "federation.manage")
        self._require_enabled()
        base = _base_url(url)
        if len(message) > MAX_MESSAGE_CHARS:
            raise BadRequest(f"message: at most {MAX_MESSAGE_CHARS} characters", "invalid_field")
        manifest = await self._get_json(f"{base}{MANIFEST_PATH}")
        did, name = manifest.get("did"), manifest.get("name")
        if not isinstance(did, str) or not _is_did(did):
            raise PeerError(f"{base} does not serve a mesh manifest with a did", "peer_invalid")
        if did == self._identity.did:
            raise BadRequest("this is this node's own address", "self_connection")
        peer_name = (name if isinstance(name, str) and name else base)[:MAX_PEER_NAME_CHARS]
        existing = await self._db.read(lambda c: repo.get_by_did(c, did))
        if (
            existing is not None
            and existing.status in ("pending", "accepted")
            and not self._expired(existing)
        ):
            raise Conflict(
                f"there is already a {existing.status} connection with this node",
                "connection_exists",
            )
        connection_id = new_id()
        body = {
            "did": self._identity.did,
            "name": own_name,
            "url": own_url,
            "message": message,
            "connectionId": connection_id,
        }
        await self.post_signed(base, REQUEST_PATH, body, audience=did)
        now = now_ms()
        row = repo.ConnectionRow(
            connection_id, did, peer_name, base, "outbound", "pending", message, now, now
        )
        await self._db.write(lambda c: repo.replace_connection(c, row))
        return to_json(row)

    async def accept(self, actor: Actor, connection_id: str) -> dict[str, Any]:
        """Accept another node's pending request: once the URL it gave serves
        its manifest, the peer is told first, then the connection is accepted here.

        Raises:
            Forbidden, NotFound (also an expired request), Conflict
            (``invalid_state``), PeerError (``peer_unreachable``,
            ``peer_invalid``, ``peer_mismatch``, ``peer_refused``: nothing changed).
        """
        authorize(actor, "federation.manage")
        self._require_enabled()
        row = await self._pending_request(connection_id)
        await self._check_peer_url(row)
        await self.post_signed(
            row.peer_url, ACCEPTED_PATH, self._notice(connection_id), audience=row.peer_did
        )
        return await self._set(row, "accepted")

    async def decline(
        self, actor: Actor, connection_id: str, *, notify: bool = True
    ) -> dict[str, Any]:
        """Decline another node's pending request. It ends here whatever the
        peer does; the peer is told when it can be (the URL it gave serves
        its manifest, and it answered), unless not *notify*, or federation is
        off here: then nothing is sent at all (an admin can clear requests
        left from before federation was turned off). ``peerNotified`` says
        whether it was told.

        Raises:
            Forbidden, NotFound (also an expired request), Conflict (``invalid_state``).
        """
        authorize(actor, "federation.manage")
        row = await self._pending_request(connection_id)
        notified = False
        if notify and self.enabled:
            try:
                await self._check_peer_url(row)
                await self.post_signed(
                    row.peer_url, DECLINED_PATH, self._notice(connection_id), audience=row.peer_did
                )
                notified = True
            except PeerError as error:
                log.info("request %s declined without telling the peer: %s", connection_id, error)
        return {**await self._set(row, "declined"), "peerNotified": notified}

    async def disconnect(
        self, actor: Actor, connection_id: str, *, force: bool = False
    ) -> dict[str, Any]:
        """End a pending or accepted connection, on the peer first, then here.
        With *force*, end it here even if the peer cannot be told
        (``peerNotified`` says whether it was).

        Raises:
            Forbidden, NotFound, Conflict (``invalid_state``), PeerError (without *force*).
        """
        authorize(actor, "federation.manage")
        row = await get_connection(self._db, connection_id)
        if row.status not in ("pending", "accepted"):
            raise Conflict(f"this connection is already {row.status}", "invalid_state")
        request = row.status == "pending" and row.direction == "inbound"
        if request:
            row = await self._pending_request(connection_id)  # not expired
        notified = True
        try:
            if request:  # the URL it gave is only its word until checked
                await self._check_peer_url(row)
            await self.post_signed(
                row.peer_url, DISCONNECTED_PATH, self._notice(connection_id), audience=row.peer_did
            )
        except PeerError as error:
            if not force:
                raise
            log.warning("connection %s ended without telling the peer: %s", connection_id, error)
            notified = False
        return {**await self._set(row, "disconnected"), "peerNotified": notified}

    async def _pending_request(self, connection_id: str) -> repo.ConnectionRow:
        """The pending inbound request *connection_id*, not expired (an
        expired one is deleted now: it is gone).

        Raises:
            NotFound: ``connection_not_found``.
            Conflict: ``invalid_state``, not a pending request from another node.
        """
        row = await get_connection(self._db, connection_id)
        if not (row.status == "pending" and row.direction == "inbound"):
            raise Conflict(
                "only a pending request from another node can be accepted or declined",
                "invalid_state",
            )
        if self._expired(row):
            before = self._pending_since()
            await self._db.write(lambda c: repo.drop_expired_requests(c, before=before))
            raise NotFound("this connection request expired unanswered", "connection_not_found")
        return row

    async def _check_peer_url(self, row: repo.ConnectionRow) -> None:
        """Make sure the URL a request gave is the requester's own before
        anything is sent to it: it must serve a manifest with the DID that
        signed the request (fetched through the same guarded client).

        Raises:
            PeerError: ``peer_unreachable`` (no answer, or a private address
                the operator does not allow), ``peer_invalid`` (no manifest),
                ``peer_mismatch`` (another node's manifest).
        """
        manifest = await self._get_json(f"{row.peer_url}{MANIFEST_PATH}")
        if manifest.get("did") != row.peer_did:
            raise PeerError(
                f"{row.peer_url} is not the node that asked: its manifest does not name "
                f"{row.peer_did} (nothing was sent to it)",
                "peer_mismatch",
            )

    # -- node-to-node (inbound) -------------------------------------------

    async def authenticate(self, request: SignedRequest) -> str:
        """The DID that signed *request* for this node (the signature's
        audience is this node's DID).

        Once the signature holds, and before its nonce is stored, the signer
        must be let in (:meth:`_admit`): so a signer that is refused there
        leaves nothing in the nonce store, and one that floods it is refused
        itself (``busy``), not the peers this node chose.

        Raises:
            Forbidden: ``federation_disabled``, federation is off here;
                ``not_connected``, a signer known here but not a peer, on a
                path only peers may call.
            Unauthorized: ``unsigned``, ``stale``, ``bad_signature``,
                ``unknown_node``, ``replayed``.
            RateLimited: ``rate_limited`` (``federation_stranger_address``,
                ``registry_did``).
            Unavailable: ``busy`` (:class:`~.signing.Nonces`), or the store is down.
        """
        self._require_enabled()
        return await verify_request(
            request.headers,
            request.method,
            request.path,
            request.body,
            audience=self._identity.did,
            nonces=self.nonces,
            max_skew=self._settings.federation_max_skew_seconds,
            admit=partial(self._admit, request),
        )

    async def _admit(self, request: SignedRequest, did: str) -> bool:
        """Whether the node *did* (its signature holds) is heard on *request*'s
        path, decided before its nonce is stored; whether it is a *peer* (an
        accepted connection, or a pending one this node asked for), which the
        nonce store lets through while it is full.

        A peer is heard on every path. Any other signer is a *stranger*,
        whatever connection row it has here (its pending request, one
        declined, ended or expired): it is heard only on the paths a stranger
        has a reason to call — a connection request, a heartbeat (to a
        registry), and, with a row here, the notice ``disconnected`` (a
        requester withdrawing its request, or ending what already ended) —
        each counted against ``federation_stranger_address`` for the
        client's address. A heartbeat also counts against ``registry_did``
        for the signer, peer or not.

        Raises:
            RateLimited: ``rate_limited``.
            Unauthorized: ``unknown_node``, a stranger with no row here on
                any other path.
            Forbidden: ``not_connected``, a stranger with a row here on any
                other path.
        """
        row = await self._db.read(lambda c: repo.get_by_did(c, did))
        peer = row is not None and (
            row.status == "accepted" or (row.status, row.direction) == ("pending", "outbound")
        )
        heartbeat = request.path == HEARTBEAT_PATH
        if not peer:
            if not (
                request.path == REQUEST_PATH
                or heartbeat
                or (request.path == DISCONNECTED_PATH and row is not None)
            ):
                if row is None:
                    raise Unauthorized(
                        "this node has no connection with the signing node", "unknown_node"
                    )
                raise Forbidden(f"this connection is {row.status}, not accepted", "not_connected")
            await self._rate.address("federation_stranger_address", request.address)
        if heartbeat:
            await self._rate.key("registry_did", did)
        return peer

    async def receive_request(
        self, did: str, fields: dict[str, Any], *, address: str | None = None
    ) -> dict[str, Any]:
        """A peer asks to connect: record it as an inbound ``pending`` request
        from the client *address* (``api._common.client_address``), kept as
        per-address limits count it (:func:`request_address`: an IPv6
        address by its /64). Expired requests are deleted first.

        Raises:
            BadRequest: ``invalid_field``, ``invalid_url``.
            Conflict: ``connection_exists``.
            RateLimited: ``federation_max_pending_per_address`` pending from
                *address* (or its /64) already (``Retry-After``: until the
                oldest of them expires), or ``federation_max_pending`` in all.
        """
        if fields.get("did") != did:
            raise BadRequest("did must be the signing node's DID", "invalid_field")
        connection_id = fields.get("connectionId")
        if not isinstance(connection_id, str) or not is_ulid(connection_id):
            raise BadRequest("connectionId must be a ULID", "invalid_field")
        url = fields.get("url")
        if not isinstance(url, str):
            raise BadRequest("url is required", "invalid_field")
        base = _base_url(url)
        name = fields.get("name")
        message = fields.get("message", "")
        if not isinstance(name, str) or not isinstance(message, str):
            raise BadRequest("name and message must be strings", "invalid_field")
        if len(message) > MAX_MESSAGE_CHARS:
            raise BadRequest(f"message: at most {MAX_MESSAGE_CHARS} characters", "invalid_field")
        now = now_ms()
        where = request_address(address)
        row = repo.ConnectionRow(
            connection_id,
            did,
            (name or base)[:MAX_PEER_NAME_CHARS],
            base,
            "inbound",
            "pending",
            message,
            now,
            now,
            where,
        )
        limit = self._settings.federation_max_pending
        per_address = self._settings.federation_max_pending_per_address
        ttl = self._ttl_ms()
        since = now - ttl

        def store(conn: Any) -> None:
            repo.drop_expired_requests(conn, before=since)
            existing = repo.get_by_did(conn, did)
            if existing is not None and existing.status in ("pending", "accepted"):
                raise Conflict(
                    f"there is already a {existing.status} connection with this node",
                    "connection_exists",
                )
            taken = repo.get_connection(conn, connection_id)
            if taken is not None and taken.peer_did != did:
                raise Conflict("connectionId is taken", "connection_exists")
            pending = repo.pending_from(conn, where, since=since)
            if pending.count >= per_address and pending.oldest is not None:
                raise RateLimited(
                    "too many pending connection requests from your address",
                    max(1, math.ceil((pending.oldest + ttl - now) / 1000)),
                )
            if repo.count_pending_inbound(conn, since=since) >= limit:
                raise RateLimited("too many pending connection requests", 60)
            repo.replace_connection(conn, row)

        await self._db.write(store)
        log.info("connection request %s from %s (%s)", connection_id, row.peer_name, did)
        return {"ok": True, "connectionId": connection_id, "status": "pending"}

    async def receive_notice(self, did: str, fields: dict[str, Any], status: str) -> dict[str, Any]:
        """The peer accepted, declined or ended the connection *connectionId*.

        Raises:
            NotFound, Unauthorized (``wrong_peer``), Conflict (``invalid_state``).
        """
        connection_id = fields.get("connectionId")
        if not isinstance(connection_id, str) or not is_ulid(connection_id):
            raise BadRequest("connectionId must be a ULID", "invalid_field")
        row = await self._db.read(lambda c: repo.get_connection(c, connection_id))
        if row is None:
            raise NotFound("no such connection", "connection_not_found")
        if row.peer_did != did:
            raise Unauthorized("this connection is with another node", "wrong_peer")
        if status == "disconnected":
            if row.status != "disconnected":
                await self._set(row, status)
        elif not (row.status == "pending" and row.direction == "outbound"):
            raise Conflict(f"this connection is {row.status}", "invalid_state")
        else:
            await self._set(row, status)
        return {"ok": True, "connectionId": connection_id, "status": status}

    # -- helpers ----------------------------------------------------------

    def _require_enabled(self) -> None:
        if not self.enabled:
            raise Forbidden("federation is turned off on this node", "federation_disabled")

    def _ttl_ms(self) -> int:
        return int(self._settings.federation_pending_ttl * 1000)

    def _pending_since(self) -> int:
        """Inbound requests received before this time (epoch ms) have expired."""
        return now_ms() - self._ttl_ms()

    def _expired(self, row: repo.ConnectionRow) -> bool:
        """Whether *row* is an inbound request that waited too long for an admin
        (an expired request is as good as gone: not listed, not answered)."""
        return (
            row.status == "pending"
            and row.direction == "inbound"
            and row.created_at < self._pending_since()
        )

    def _notice(self, connection_id: str) -> dict[str, Any]:
        return {"connectionId": connection_id, "did": self._identity.did}

    async def _set(self, row: repo.ConnectionRow, status: str) -> dict[str, Any]:
        """Store the connection's new status; only an accepted one shares rooms
        (ending it ends its shares and its link task at once)."""
        now = now_ms()
        connection_id = row.connection_id

        await self._db.write(
            lambda c: relay_repo.set_connection_status(c, connection_id, status, now)
        )
        if status == "accepted":
            self.relay.links.start_link(connection_id)
        else:
            self.relay.links.connection_ended(connection_id)
        return to_json(replace(row, status=status, updated_at=now))

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            raise RuntimeError("federation is not running")
        return self._client

    async def _get_json(self, url: str) -> dict[str, Any]:
        try:
            answer = await exchange(self._http(), "GET", url)
        except httpx.HTTPError as error:
            raise PeerError(f"cannot reach {url}: {unreachable(error)}") from None
        if answer.status != 200:
            raise PeerError(f"{url} answered {answer.status}", "peer_invalid")
        return json_object(answer, url)

    async def post_signed(
        self, base: str, path: str, body: dict[str, Any], *, audience: str
    ) -> dict[str, Any]:
        """POST *body* to the peer at *base*, signed for its DID *audience*; its JSON answer.

        Raises:
            PeerError: unreachable, refused (non-2xx) or an invalid answer.
        """
        return await post_signed(self._http(), self._identity, base, path, body, audience=audience)


def request_address(address: str | None) -> str:
    """What a pending request from the client *address* is counted as, per
    address: :func:`~quart_mesh.services.ratelimit.address_key` (an IPv6
    address by its /64, whose holder has 2^64 addresses to rotate through),
    :data:`UNKNOWN_ADDRESS` when it is not known or not an IP address (a
    unix socket: Quart says ``<local>``), at most as long as the column."""
    if not address or ip_of(address) is None:
        return UNKNOWN_ADDRESS
    return address_key(address)[:_REQUEST_ADDRESS_CHARS]


def to_json(row: repo.ConnectionRow) -> dict[str, Any]:
    """A connection as ``GET /api/connections`` lists it."""
    return {
        "id": row.connection_id,
        "status": row.status,
        "direction": row.direction,
        "name": row.peer_name,
        "url": row.peer_url,
        "did": row.peer_did,
        "message": row.message,
        "sharedRooms": [],
        "createdAt": iso(row.created_at),
        "updatedAt": iso(row.updated_at),
    }


def _base_url(url: str) -> str:
    """*url* checked as a node's base URL, without trailing slash:
    ``http(s)://host[:port]``, with at most a plain path prefix (``/mesh``: a
    node its proxy serves under a path says so in its own URL). Nothing that
    would be sent somewhere other than where the URL seems to point, or sent
    along: no user or password, no query or fragment, and in the path no dot
    segments, percent-escapes, empty segments or backslashes (which servers
    and proxies normalise each their own way).

    Raises:
        BadRequest: ``invalid_url``.
    """
    text = url.strip().rstrip("/")
    parts = urlsplit(text)
    segments = parts.path.split("/")[1:] if parts.path else []
    if (
        len(text) > MAX_URL_CHARS
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or not _has_valid_port(parts)
        or any(ch in text for ch in "@?#%\\")  # userinfo, query, fragment, escapes
        or any(ch.isspace() or not ch.isprintable() for ch in text)
        or not all(_PATH_SEGMENT.fullmatch(seg) and seg.strip(".") for seg in segments)
        or not is_resolvable_url(text)  # a name no resolver takes (labels 1-63)
    ):
        raise BadRequest(
            "url must be the node's plain http(s) base URL (no user, query, fragment, "
            "escapes or dot segments)",
            "invalid_url",
        )
    return text


def _has_valid_port(parts: SplitResult) -> bool:
    """Whether the URL's port, if it has one, is a number from 1 to 65535."""
    try:
        return parts.port != 0
    except ValueError:  # not a number, or out of range
        return False


def _is_did(did: str) -> bool:
    try:
        public_key_from_did(did)
    except ValueError:
        return False
    return True
