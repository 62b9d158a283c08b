"""Remote participants: the local participant that stands for a participant
of another node in shared rooms (decision 0029), and the relayed references
that name them.

A remote participant is created here the first time one of its events
arrives: named ``name@<handle>``, with its home kind and type, role
``agent``, ``origin`` its home node's DID, no password and no token. Its
relayed actions are taken at most as Tier 4, whatever role an admin gives it
here; what it may do is then decided by ``services.authz.authorize`` in the
services that apply them, as for any local participant.

It belongs to the node that introduced it (the peer whose relay brought it,
``introduced_by``): only that node speaks as it, in any room, and each
node's participants are its own — the same person relayed by its home node
and by a hub, or by two hubs, is as many participants here, so no node can
speak as, merge with or silence another node's (decision 0058). The
receiver's own checks come first (``inbound.py``): a peer speaks only for
its own people in rooms this node hosts, and never for those of a node
this node is connected with.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from ..errors import BadRequest, Conflict
from ..identity import public_key_from_did
from ..ids import is_ulid, new_id
from ..names import normalize
from ..records import Participant, now_ms
from ..services.authz import Actor, capped_at_tier_4
from ..store import Database
from ..store import accounts as accounts_repo
from ..store import connections as connections_repo
from ..store import relay as repo
from .peers import handle_of

if TYPE_CHECKING:
    from ..broker import Broker
    from ..services.accounts import Accounts
    from ..services.rooms import Rooms

__all__ = ["MAX_REMOTES", "RemoteParticipants", "parse_ref"]

#: most remote participants one node may introduce
MAX_REMOTES = 10_000
#: longest part of a remote participant's name before ``@node``
_MAX_BASE_NAME = 24
#: remote participants whose local id is remembered in memory at most
_MAX_REMEMBERED = 10_000
_NAME_CHARS = re.compile(r"[^\w.-]")


class RemoteParticipants:
    """The participants of other nodes, as participants of this one."""

    def __init__(
        self, db: Database, node_did: str, accounts: Accounts, broker: Broker, rooms: Rooms
    ) -> None:
        self._db = db
        self._node_did = node_did
        self._accounts = accounts
        self._broker = broker
        self._rooms = rooms
        #: (introducing node's DID, home node DID, id there) -> participant id
        #: here: safe to keep, even with several processes on one store,
        #: because what a key names never changes
        self._ids: dict[tuple[str, str, str], str] = {}

    async def actor(
        self, row: connections_repo.ConnectionRow, by: dict[str, Any], room_id: str
    ) -> Actor:
        """The local participant standing for *by* (a reference checked by
        :func:`parse_ref`) as the peer of the connection *row* relays it:
        the peer's own, created on first sight (introduced by the peer), as
        an actor of at most Tier 4, and a member of *room_id* (joined
        through the ordinary room checks). Another node's relays of the same
        person stand for another participant.

        Raises:
            Conflict: ``too_many_participants``, ``name_taken``.
            MeshError: the room refuses the join (``Rooms.join``).
        """
        node = by["node"]
        home, speaker = node["did"], row.peer_did

        def known(conn: Connection) -> Participant | None:
            remote = repo.find_remote(conn, speaker, home, by["id"])
            if remote is None:
                return None
            return accounts_repo.get_participant(conn, remote.participant_id)

        mesh = self._accounts.mesh
        own_name = None if mesh is None else mesh.name

        def write(conn: Connection) -> Participant:
            found = known(conn)  # again, in the unit: another may have made it
            if found is not None:
                return found
            if repo.count_remotes(conn, speaker) >= MAX_REMOTES:
                raise Conflict(
                    "this node has brought as many participants as allowed",
                    "too_many_participants",
                )
            # NFKC as local names; one that looks like a name here (another
            # of its node's, say) gets the next free number (decision 0056)
            base = _NAME_CHARS.sub("_", normalize(by["name"]))[:_MAX_BASE_NAME] or "someone"
            node_name = _node_name(row, node)
            suffix = "@" + _handle(conn, row, home, node_name, own_name)
            kind = by["kind"] if by["kind"] in ("human", "bot", "guest") else "bot"
            for n in range(1, 100):
                name = base + suffix if n == 1 else f"{base}-{n}{suffix}"
                if not accounts_repo.name_taken(conn, name):
                    break
            else:
                raise Conflict("no free name for the remote participant", "name_taken")
            participant = Participant(
                new_id(), name, kind, by["type"], "agent", now_ms(), origin=home
            )
            accounts_repo.insert_participant(conn, participant, None)
            remote = repo.RemoteParticipant(
                participant.participant_id,
                row.connection_id,
                home,
                node_name,
                by["id"],
                by["name"],
                speaker,
            )
            repo.insert_remote(conn, remote)
            return participant

        key = (speaker, home, by["id"])
        remembered = self._ids.get(key)
        actor = None if remembered is None else await self._accounts.actor_of(remembered)
        if actor is None:  # not remembered, or deleted since
            participant = await self._db.read(known)
            if participant is None:
                try:
                    participant = await self._db.write(write)
                except Conflict as error:
                    # another process made it, or took the name, at the same
                    # moment (several processes on PostgreSQL): once more
                    if error.code != "conflict":
                        raise
                    participant = await self._db.write(write)
            if len(self._ids) >= _MAX_REMEMBERED:
                self._ids.clear()
            self._ids[key] = participant.participant_id
            actor = self._accounts.actor_for(participant)
        actor = capped_at_tier_4(actor)
        if room_id not in self._broker.rooms_of(actor.participant_id):
            await self._rooms.join(actor, room_id)
        return actor

    async def local_id(self, value: object, speaker: str) -> str | None:
        """A relayed participant reference (``to``), in a relay from the node
        *speaker*, as a participant id here: this node's own participant, or
        a remote participant already known — as its home node introduced
        it, else as *speaker* did (``None`` if it is neither, or not a
        reference)."""
        if value is None:
            return None
        try:
            ref = parse_ref(value, "to")
        except BadRequest:
            return None
        if ref["node"]["did"] == self._node_did:
            return str(ref["id"])
        home = ref["node"]["did"]
        introducers = (home,) if home == speaker else (home, speaker)
        known = await self._db.read(lambda c: repo.resolve_remote(c, home, ref["id"], introducers))
        return None if known is None else known.participant_id


def parse_ref(value: object, field: str) -> dict[str, Any]:
    """A relayed participant: ``{"id", "name", "kind", "type", "node": {"did", "name"}}``.

    Raises:
        BadRequest: ``invalid_event``.
    """
    bad = BadRequest(f"{field} must name a participant and its node", "invalid_event")
    if not isinstance(value, dict):
        raise bad
    pid, name, node = value.get("id"), value.get("name"), value.get("node")
    kind, type_ = value.get("kind", "human"), value.get("type", "human")
    if not (isinstance(pid, str) and is_ulid(pid)):
        raise bad
    if not (isinstance(name, str) and 0 < len(name) <= 200):
        raise bad
    if not (isinstance(kind, str) and isinstance(type_, str) and 0 < len(type_) <= 32):
        raise bad
    if not isinstance(node, dict):
        raise bad
    did, node_name = node.get("did"), node.get("name")
    if not (isinstance(did, str) and isinstance(node_name, str) and 0 < len(node_name) <= 200):
        raise bad
    try:
        public_key_from_did(did)
    except ValueError:
        raise bad from None
    return {
        "id": pid,
        "name": name,
        "kind": kind,
        "type": type_,
        "node": {"did": did, "name": node_name},
    }


def _handle(
    conn: Connection,
    row: connections_repo.ConnectionRow,
    home: str,
    node_name: str,
    own_name: str | None,
) -> str:
    """The ``@handle`` of a participant of the node *home* named *node_name*
    relayed over *row*: the name slugged — but a third node's name that is
    the handle of a node with a connection here (another DID), or of this
    node itself, is shown as relayed by the peer (``<handle>-via-<peer's
    handle>``), so a hub cannot make up people who look like a known
    node's, nor like this node's own."""
    handle = handle_of(node_name)
    if home == row.peer_did:
        return handle
    taken = {
        handle_of(other.peer_name)
        for other in connections_repo.list_connections(conn)
        if other.peer_did != home
    }
    if own_name:
        taken.add(handle_of(own_name))
    return f"{handle}-via-{handle_of(row.peer_name)}" if handle in taken else handle


def _node_name(row: connections_repo.ConnectionRow, node: dict[str, str]) -> str:
    """The name a node's participants are shown with (``name@<handle>``): the
    peer's name as this node recorded it for the connection (when an admin
    here accepted or asked for it), not what an event claims; for a third
    node, which this node has no connection with (else the hub may not
    speak for its people), the name the hub gives, checked by
    :func:`_handle`."""
    return row.peer_name if node["did"] == row.peer_did else node["name"]
