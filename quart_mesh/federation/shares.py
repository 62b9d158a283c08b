"""Shared rooms (decision 0029): which of this node's rooms are shared over
which accepted connection, and the mirrors of peers' rooms kept here.

A room is *shared* by its home node over an accepted connection; the peer
keeps a local *mirror* room (``origin`` = the home node's DID) that its
members join like any other room. As with connections, the peer is told
first (:data:`SHARE_PATH`, :data:`UNSHARE_PATH`) and the change is written
here only once it has answered. Every room shared here is added to
:class:`SharedRooms` before its share exists, so that no change in it can
miss the relay outbox.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Protocol

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..config import Settings
from ..errors import BadRequest, Conflict, Forbidden, NotFound
from ..ids import is_ulid, new_id
from ..records import Room, iso, now_ms
from ..services.authz import Actor, authorize
from ..services.messages import SharedRooms
from ..services.validation import check_room_name
from ..store import Database
from ..store import relay as repo
from ..store import rooms as rooms_repo
from .peers import accepted_connection, get_connection, handle_of, peer_connection, require_accepted

__all__ = ["MAX_SHARES", "SHARE_PATH", "UNSHARE_PATH", "PostSigned", "Shares", "share_json"]

log = logging.getLogger(__name__)

SHARE_PATH = "/api/federation/rooms"
UNSHARE_PATH = "/api/federation/rooms/unshared"
#: most rooms shared over one connection (both directions together)
MAX_SHARES = 200


class PostSigned(Protocol):
    """A signed POST to a peer (base URL, path, body), signed for the peer's
    DID *audience*, returning its JSON answer."""

    async def __call__(
        self, base: str, path: str, body: dict[str, Any], *, audience: str
    ) -> dict[str, Any]: ...


class Shares:
    """Share and unshare rooms (admins), take peers' shares (node-to-node),
    and keep :class:`SharedRooms` current."""

    def __init__(
        self, settings: Settings, db: Database, shared_rooms: SharedRooms, post: PostSigned
    ) -> None:
        """*post* makes the signed calls to peers (``Links.post_signed``:
        ``Unavailable`` while federation is not running, else ``PeerError``
        when the peer cannot be reached or refuses)."""
        self._settings = settings
        self._db = db
        #: rooms that are (or were, since the node started) shared: a superset,
        #: so that writes in other rooms skip the outbox without a lookup
        self._shared = shared_rooms
        self._post = post

    async def load(self) -> None:
        """Learn which rooms are shared; call before the node takes any write
        (a write in a shared room must reach the outbox)."""
        self._shared.add(*await self._db.read(repo.list_shared_room_ids))

    # -- admins -----------------------------------------------------------

    async def share(self, actor: Actor, connection_id: str, room_id: str) -> dict[str, Any]:
        """Share one of this node's rooms with the peer of an accepted connection.

        Raises:
            Forbidden, NotFound (``connection_not_found``, ``room_not_found``),
            Conflict (``not_accepted``, ``not_home_room``, ``already_shared``), PeerError.
        """
        authorize(actor, "federation.manage")
        if not self._settings.federation_enabled:
            raise Forbidden("federation is turned off on this node", "federation_disabled")
        row = await accepted_connection(self._db, connection_id)

        def check(conn: Connection) -> Room:
            room = rooms_repo.get_room(conn, room_id) if is_ulid(room_id) else None
            if room is None or room.kind != "room":
                raise NotFound("no such room", "room_not_found")
            if room.origin is not None:
                raise Conflict("only a room of this node can be shared", "not_home_room")
            if repo.get_share(conn, room_id, connection_id) is not None:
                raise Conflict("this room is already shared with this node", "already_shared")
            return room

        room = await self._db.read(check)
        self._shared.add(room_id)  # before the share exists: no change can slip past
        await self._post(
            row.peer_url,
            SHARE_PATH,
            {
                "connectionId": connection_id,
                "room": {"id": room.room_id, "name": room.name, "description": room.description},
            },
            audience=row.peer_did,
        )

        def write(conn: Connection) -> repo.Share:
            require_accepted(conn, connection_id)
            if repo.count_shares(conn, connection_id) >= MAX_SHARES:
                raise Conflict(
                    f"at most {MAX_SHARES} rooms are shared over one connection", "too_many_shares"
                )
            try:
                with conn.begin_nested():
                    return repo.add_share(conn, room_id, connection_id, room_id, "out")
            except IntegrityError:
                raise Conflict(
                    "this room is already shared with this node", "already_shared"
                ) from None

        share = await self._db.write(write)
        return share_json(replace(share, room_name=room.name))

    async def unshare(self, actor: Actor, connection_id: str, room_id: str) -> dict[str, Any]:
        """Stop sharing a room (either side may): on the peer first, then here.

        Raises:
            Forbidden, NotFound (``connection_not_found``, ``share_not_found``), PeerError.
        """
        authorize(actor, "federation.manage")
        row = await get_connection(self._db, connection_id)
        share = await self._db.read(
            lambda c: repo.get_share(c, room_id, connection_id) if is_ulid(room_id) else None
        )
        if share is None:
            raise NotFound("this room is not shared over this connection", "share_not_found")
        if row.status == "accepted":
            body = {"connectionId": connection_id, "roomId": share.home_room_id}
            await self._post(row.peer_url, UNSHARE_PATH, body, audience=row.peer_did)
        await self._db.write(lambda c: repo.remove_share(c, room_id, connection_id))
        return {"ok": True, "roomId": room_id, "connectionId": connection_id}

    async def by_connection(self) -> dict[str, list[dict[str, Any]]]:
        """Each connection's shares, for ``GET /api/connections``."""
        listed: dict[str, list[dict[str, Any]]] = {}
        for share in await self._db.read(repo.shares_of):
            listed.setdefault(share.connection_id, []).append(share_json(share))
        return listed

    # -- node-to-node (inbound) -------------------------------------------

    async def receive_share(self, did: str, fields: dict[str, Any]) -> dict[str, Any]:
        """The peer shares one of its rooms: keep a mirror room of it here
        (named ``<name>@<handle>``; the same mirror if it shares it again).

        Raises:
            BadRequest, NotFound, Forbidden (``peers.peer_connection``),
            Conflict (``not_accepted``, ``too_many_shares``, ``room_name_taken``).
        """
        row = await peer_connection(self._db, did, fields)
        room = fields.get("room")
        if not isinstance(room, dict):
            raise BadRequest("room must be an object", "invalid_field")
        home_id, name, description = room.get("id"), room.get("name"), room.get("description", "")
        if not isinstance(home_id, str) or not is_ulid(home_id):
            raise BadRequest("room.id must be a ULID", "invalid_field")
        if not isinstance(name, str) or not isinstance(description, str):
            raise BadRequest("room.name and room.description must be strings", "invalid_field")
        limits = self._settings.limits
        suffix = "@" + handle_of(row.peer_name)
        base = check_room_name(name[: limits.max_room_name_chars - len(suffix) - 3], limits)
        description = description[: limits.max_description_chars]

        def write(conn: Connection) -> repo.Share:
            require_accepted(conn, row.connection_id)
            existing = repo.share_by_home(conn, row.connection_id, home_id)
            if existing is not None:
                return existing
            if repo.count_shares(conn, row.connection_id) >= MAX_SHARES:
                raise Conflict(
                    f"at most {MAX_SHARES} rooms are shared over one connection", "too_many_shares"
                )
            for n in range(1, 100):
                candidate = base + suffix if n == 1 else f"{base}-{n}{suffix}"
                mirror = Room(room_id, "room", candidate, description, None, now_ms(), origin=did)
                try:
                    with conn.begin_nested():
                        rooms_repo.insert_room(conn, mirror)
                    break
                except IntegrityError:
                    continue
            else:
                raise Conflict("no free name for the shared room", "room_name_taken")
            return repo.add_share(conn, room_id, row.connection_id, home_id, "in")

        room_id = new_id()
        self._shared.add(room_id)
        share = await self._db.write(write)
        log.info("room %s shared by %s as %s", home_id, row.peer_name, share.room_id)
        return {"ok": True, "roomId": share.room_id}

    async def receive_unshare(self, did: str, fields: dict[str, Any]) -> dict[str, Any]:
        """The peer stops sharing a room (its own, or one of this node's):
        the share ends here; a mirror stays, as an ordinary room."""
        row = await peer_connection(self._db, did, fields, accepted=False)
        home_id = fields.get("roomId")
        if not isinstance(home_id, str) or not is_ulid(home_id):
            raise BadRequest("roomId must be a ULID", "invalid_field")

        def write(conn: Connection) -> bool:
            share = repo.share_by_home(conn, row.connection_id, home_id)
            return share is not None and repo.remove_share(conn, share.room_id, row.connection_id)

        await self._db.write(write)
        return {"ok": True}


def share_json(share: repo.Share) -> dict[str, Any]:
    """A share as ``sharedRooms`` lists it (``GET /api/connections``)."""
    return {
        "roomId": share.room_id,
        "name": share.room_name,
        "homeRoomId": share.home_room_id,
        "direction": "outbound" if share.direction == "out" else "inbound",
        "sharedAt": iso(share.created_at),
    }
