"""Remote participants: the local participant that stands for a participant
of another node in shared rooms (decision 0029), and the relayed references
that name them.

A remote participant is created here the first time one of its events
arrives: named ``name@<handle>``, with its home kind and type, role
``agent``, ``origin`` its home node's DID, no password and no token. Its
relayed actions are taken at most as Tier 4, whatever role an admin gives it
here; what it may do is then decided by ``services.authz.authorize`` in the
services that apply them, as for any local participant.

It is bound to the node that introduced it (the peer whose relay brought it
first, ``introduced_by``), for good: only that node, or its home node, may
speak as it afterwards, in any room — so a third node cannot take over
another node's people here (decision 0058). The receiver's own checks come
first (``inbound.py``): a peer speaks only for its own people in rooms this
node hosts, and never for those of a node this node is connected with.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from ..errors import BadRequest, Conflict, Forbidden
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
        #: (home node DID, id there) -> (participant id here, introducing
        #: node's DID): safe to keep, even with several processes on one
        #: store, because the binding never changes
        self._ids: dict[tuple[str, str], tuple[str, str]] = {}

    async def actor(
        self, row: connections_repo.ConnectionRow, by: dict[str, Any], room_id: str
    ) -> Actor:
        """The local participant standing for *by* (a reference checked by
        :func:`parse_ref`, relayed over the connection *row*), created on
        first sight (introduced by the peer of *row*), as an actor of at
        most Tier 4, and a member of *room_id* (joined through the ordinary
        room checks).

        Only the node that introduced a participant, or its home node, speaks
        as it: the peer of *row* may be either (its home node may always
        speak for its own, even after a hub introduced them; the binding
        stays as it was).

        Raises:
            Forbidden: ``not_peer_participant``, the participant was
                introduced by another node, not the peer's own.
            Conflict: ``too_many_participants``, ``name_taken``.
            MeshError: the room refuses the join (``Rooms.join``).
        """
        node = by["node"]
        home, speaker = node["did"], row.peer_did

        def known(conn: Connection) -> tuple[Participant, str] | None:
            remote = repo.find_remote(conn, home, by["id"])
            if remote is None:
                return None
            if speaker not in (remote.introduced_by, home):
                raise Forbidden(
                    "another node introduced this participant: only it, or the"
                    " participant's home node, speaks as it",
                    "not_peer_participant",
                )
            found = accounts_repo.get_participant(conn, remote.participant_id)
            return None if found is None else (found, remote.introduced_by)

        def write(conn: Connection) -> tuple[Participant, str]:
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
            suffix = "@" + handle_of(_node_name(conn, row, node))
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
                _node_name(conn, row, node),
                by["id"],
                by["name"],
                speaker,
            )
            repo.insert_remote(conn, remote)
            return participant, speaker

        key = (home, by["id"])
        remembered = self._ids.get(key)
        actor = None
        # a refusal is never taken from memory: the store has the last word
        if remembered is not None and speaker in (remembered[1], home):
            actor = await self._accounts.actor_of(remembered[0])  # None if deleted since
        if actor is None:
            found = await self._db.read(known)
            if found is None:
                found = await self._db.write(write)
            participant, introducer = found
            if len(self._ids) >= _MAX_REMEMBERED:
                self._ids.clear()
            self._ids[key] = (participant.participant_id, introducer)
            actor = self._accounts.actor_for(participant)
        actor = capped_at_tier_4(actor)
        if room_id not in self._broker.rooms_of(actor.participant_id):
            await self._rooms.join(actor, room_id)
        return actor

    async def local_id(self, value: object) -> str | None:
        """A relayed participant reference (``to``) as a participant id here:
        this node's own participant, or a remote participant already known
        (``None`` if it is neither, or not a reference)."""
        if value is None:
            return None
        try:
            ref = parse_ref(value, "to")
        except BadRequest:
            return None
        if ref["node"]["did"] == self._node_did:
            return str(ref["id"])
        known = await self._db.read(lambda c: repo.find_remote(c, ref["node"]["did"], ref["id"]))
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


def _node_name(conn: Connection, row: connections_repo.ConnectionRow, node: dict[str, str]) -> str:
    """The name a node's participants are shown with (``name@<handle>``): the
    peer's name as recorded for its connection, not what an event claims; for
    a third node, the name of this node's own connection with it if there is
    one, else the name the relaying home node gives."""
    if node["did"] == row.peer_did:
        return row.peer_name
    known = connections_repo.get_by_did(conn, node["did"])
    return known.peer_name if known is not None else node["name"]
