"""Shared rooms and the durable relay between connected nodes (decision 0029).

A room is *shared* by its home node over an accepted connection; the peer
keeps a local *mirror* room (``origin`` = the home node's DID) that its
members join like any other room. Changes in a shared room — messages,
edits, deletes, reactions — are written to the ``relay_outbox`` in the same
transaction as the change itself (``store/relay.py``), and one supervised
link task per accepted connection drains it to the peer in order, retrying
with exponential backoff until the peer acknowledges. The peer applies each
event through the ordinary domain services (:class:`Messages`), as a
Tier 4 *remote participant* (``name@node``), so its own permissions, room
rules and limits hold; relays are idempotent by message id. The home node
passes what arrives from one peer on to the room's other peers (hub and
spoke), never back where it came from.
"""

from __future__ import annotations

import collections
import json
import logging
import re
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING, Any, TypeGuard

import httpx
import trio
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from ..config import Settings
from ..errors import (
    BadRequest,
    Conflict,
    Forbidden,
    MeshError,
    NotFound,
    RateLimited,
    Transient,
    Unavailable,
)
from ..identity import NodeIdentity, public_key_from_did
from ..ids import is_ulid, new_id
from ..permissions import tier_of
from ..records import Message, Participant, Room, iso, now_ms
from ..retry import Backoff, retrying
from ..services.authz import Actor, authorize
from ..services.messages import Relayed, RelaySource, SharedRooms
from ..services.validation import check_room_name
from ..store import Database
from ..store import accounts as accounts_repo
from ..store import connections as connections_repo
from ..store import messages as messages_repo
from ..store import relay as repo
from ..store import rooms as rooms_repo
from .http import exchange, post_signed
from .signing import sign_request

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from ..broker import Broker
    from ..events import Event
    from ..services.accounts import Accounts
    from ..services.messages import Messages
    from ..services.ratelimit import RateLimiter
    from ..services.rooms import Rooms

__all__ = ["MAX_EVENTS", "MAX_RELAY_BYTES", "RELAY_PATH", "SHARE_PATH", "UNSHARE_PATH", "Relay"]

log = logging.getLogger(__name__)

SHARE_PATH = "/api/federation/rooms"
UNSHARE_PATH = "/api/federation/rooms/unshared"
RELAY_PATH = "/api/federation/relay"
#: most events accepted in one relay request
MAX_EVENTS = 500
#: largest relay request body accepted (a link sends at most a quarter of it)
MAX_RELAY_BYTES = 4 * 1024 * 1024
_BATCH_BYTES = MAX_RELAY_BYTES // 4
#: most bytes of a peer's answer to a batch read (per-event results)
_MAX_ANSWER_BYTES = 256 * 1024
_KINDS = frozenset({"message", "edit", "delete", "reaction"})
#: first wait after a failed relay attempt (doubling up to ``federation_retry_max``)
_FIRST_RETRY = 0.5
#: a link looks at its outbox at least this often, woken or not
_IDLE_POLL = 10.0
#: most rooms shared over one connection (both directions together)
MAX_SHARES = 200
#: most remote participants one connection may bring
MAX_REMOTES = 10_000
#: longest part of a remote participant's name before ``@node``
_MAX_BASE_NAME = 24
#: remote participants whose local id is remembered in memory at most
_MAX_REMEMBERED = 10_000
_SLUG = re.compile(r"[^a-z0-9]+")
_NAME_CHARS = re.compile(r"[^\w.-]")


def handle_of(node_name: str) -> str:
    """The ``@handle`` a node's participants and rooms get here: its name, slugged."""
    slug = _SLUG.sub("-", node_name.casefold()).strip("-")[:32].strip("-")
    return slug or "peer"


@dataclass(slots=True)
class LinkStatus:
    """What ``GET /api/connections`` shows of a link task (in memory)."""

    running: bool = False
    failures: int = 0
    last_error: str | None = None
    last_relayed_at: int | None = None
    relayed: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "failures": self.failures,
            "lastError": self.last_error,
            "lastRelayedAt": iso(self.last_relayed_at),
            "relayed": self.relayed,
        }


class Relay:
    """Shared rooms, link tasks and inbound relay. Runs inside
    :meth:`Federation.run` (which owns the HTTP client)."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        identity: NodeIdentity,
        *,
        broker: Broker,
        rooms: Rooms,
        messages: Messages,
        accounts: Accounts,
        rate_limits: RateLimiter,
        shared_rooms: SharedRooms,
    ) -> None:
        self._settings = settings
        self._db = db
        self._identity = identity
        self._broker = broker
        self._rooms = rooms
        self._messages = messages
        self._accounts = accounts
        self._rate = rate_limits
        self._client: httpx.AsyncClient | None = None
        self._nursery: trio.Nursery | None = None
        self._links: dict[str, trio.CancelScope] = {}
        self._wakeups: dict[str, trio.Event] = {}
        self._locks: collections.defaultdict[str, trio.Lock] = collections.defaultdict(trio.Lock)
        #: rooms that are (or were, since the node started) shared: a superset,
        #: so that writes in other rooms skip the outbox without a lookup
        self._shared = shared_rooms
        #: (home node DID, id there) -> (participant id here, connection)
        self._remote_ids: dict[tuple[str, str], tuple[str, str]] = {}
        self.status: dict[str, LinkStatus] = {}

    # -- life -------------------------------------------------------------

    async def run(
        self,
        client: httpx.AsyncClient,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Start one link task per accepted connection; run until cancelled."""
        self._client = client
        self._broker.observe(self._observe)
        accepted = [
            row.connection_id
            for row in await self._db.read(connections_repo.list_connections)
            if row.status == "accepted" and self._settings.federation_enabled
        ]
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                for connection_id in accepted:
                    self.start_link(connection_id)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            self._client = None

    async def load(self) -> None:
        """Learn which rooms are shared; call before the node takes any write
        (a write in a shared room must reach the outbox)."""
        self._shared.add(*await self._db.read(repo.list_shared_room_ids))

    def start_link(self, connection_id: str) -> None:
        """Supervise a link task for an accepted connection (idempotent)."""
        if self._nursery is None or connection_id in self._links:
            return
        scope = trio.CancelScope()
        self._links[connection_id] = scope
        self._nursery.start_soon(self._supervise, connection_id, scope)

    def connection_ended(self, connection_id: str) -> None:
        """The connection is no longer accepted (its shares are gone): stop its link."""
        scope = self._links.pop(connection_id, None)
        if scope is not None:
            scope.cancel()
        self.status.pop(connection_id, None)

    def _observe(self, event: Event) -> None:
        if event.room_id is not None and event.room_id in self._shared:
            self._wake()

    def _wake(self) -> None:
        for wakeup in self._wakeups.values():
            wakeup.set()

    # -- link tasks -------------------------------------------------------

    async def _supervise(self, connection_id: str, scope: trio.CancelScope) -> None:
        """Run the link, retrying what is transient (the peer or the store
        unavailable) with backoff; a bug ends the node (``retry``)."""
        status = self.status.setdefault(connection_id, LinkStatus())
        status.running = True
        backoff = Backoff(_FIRST_RETRY, self._settings.federation_retry_max)

        def failed(error: Exception, _delay: float) -> None:
            status.failures += 1
            status.last_error = error.reason if isinstance(error, Transient) else str(error)

        try:
            with scope:
                await retrying(
                    f"relay link {connection_id}",
                    partial(self._link, connection_id, status, backoff),
                    backoff=backoff,
                    on_failure=failed,
                    logger=log,
                )
        finally:
            status.running = False
            if self._links.get(connection_id) is scope:
                del self._links[connection_id]
            self._wakeups.pop(connection_id, None)

    async def _link(self, connection_id: str, status: LinkStatus, backoff: Backoff) -> None:
        """Drain the outbox to the peer, in order, until the connection ends.

        Raises:
            Transient: the peer did not take the next batch.
            Unavailable: the store could not be read or written.
        """
        batch = min(self._settings.federation_batch, MAX_EVENTS)
        while True:
            wakeup = self._wakeups[connection_id] = trio.Event()
            row, cursor, items, head = await self._db.read(partial(_pending, connection_id, batch))
            if row is None or row.status != "accepted":
                return
            if not items:
                if head > cursor:
                    await self._db.write(partial(_advance, connection_id, head))
                with trio.move_on_after(_IDLE_POLL):
                    await wakeup.wait()
                continue
            sent = await self._send(row, items)
            backoff.reset()
            status.failures = 0
            status.last_error = None
            status.last_relayed_at = now_ms()
            status.relayed += sent
            done = items[sent - 1].seq
            if sent == len(items) < batch:
                done = max(done, head)  # nothing else was waiting for this peer
            await self._db.write(partial(_advance, connection_id, done))

    async def _send(self, row: connections_repo.ConnectionRow, items: list[repo.OutboxItem]) -> int:
        """POST the first of *items* (at least one, at most ``_BATCH_BYTES``
        of them) to the peer; how many it took.

        Raises:
            Transient: the peer is unreachable or did not answer 200.
        """
        own = {"did": self._identity.did, "name": self._own_name()}
        encoded: list[bytes] = []
        size = 0
        for item in items:
            event = {"seq": item.seq, "kind": item.kind, "room": item.home_room_id}
            one = json.dumps({**event, **_fill(item.body, own)}, separators=(",", ":")).encode()
            if encoded and size + len(one) > _BATCH_BYTES:
                break
            encoded.append(one)
            size += len(one) + 1
        head = json.dumps({"connectionId": row.connection_id}, separators=(",", ":")).encode()
        raw = head[:-1] + b',"events":[' + b",".join(encoded) + b"]}"
        headers = sign_request(self._identity, "POST", RELAY_PATH, raw)
        headers["Content-Type"] = "application/json"
        client = self._client
        if client is None:
            raise Transient("not running")
        try:
            answer = await exchange(
                client,
                "POST",
                f"{row.peer_url}{RELAY_PATH}",
                content=raw,
                headers=headers,
                limit=_MAX_ANSWER_BYTES,
            )
        except httpx.HTTPError as error:
            raise Transient(f"cannot reach the peer: {type(error).__name__}") from None
        if answer.status == 200:
            for result in _results(answer.body):
                if result.get("status") == "refused":
                    log.warning(
                        "peer %s refused relayed event %s: %s",
                        row.peer_url,
                        result.get("seq"),
                        result.get("code"),
                    )
            return len(encoded)
        after = 0.0
        if answer.status in (429, 503):
            try:
                after = min(float(answer.headers.get("Retry-After", "0")), 3600.0)
            except ValueError:
                after = 0.0
        raise Transient(f"the peer answered {answer.status}", after)

    async def _post_signed(self, base: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if self._client is None:
            raise Unavailable("federation is not running", "federation_unavailable")
        return await post_signed(self._client, self._identity, base, path, body)

    def _own_name(self) -> str:
        mesh = self._accounts.mesh
        return mesh.name if mesh is not None else self._identity.did

    # -- sharing (admins) -------------------------------------------------

    async def share(self, actor: Actor, connection_id: str, room_id: str) -> dict[str, Any]:
        """Share one of this node's rooms with the peer of an accepted connection.

        Raises:
            Forbidden, NotFound (``connection_not_found``, ``room_not_found``),
            Conflict (``not_accepted``, ``not_home_room``, ``already_shared``), PeerError.
        """
        authorize(actor, "federation.manage")
        if not self._settings.federation_enabled:
            raise Forbidden("federation is turned off on this node", "federation_disabled")
        row = await self._accepted(connection_id)

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
        await self._post_signed(
            row.peer_url,
            SHARE_PATH,
            {
                "connectionId": connection_id,
                "room": {"id": room.room_id, "name": room.name, "description": room.description},
            },
        )

        def write(conn: Connection) -> repo.Share:
            _require_accepted(conn, connection_id)
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
        """Stop sharing a room (either side may): on the peer first, then here."""
        authorize(actor, "federation.manage")
        row = await get_connection(self._db, connection_id)
        share = await self._db.read(
            lambda c: repo.get_share(c, room_id, connection_id) if is_ulid(room_id) else None
        )
        if share is None:
            raise NotFound("this room is not shared over this connection", "share_not_found")
        if row.status == "accepted":
            body = {"connectionId": connection_id, "roomId": share.home_room_id}
            await self._post_signed(row.peer_url, UNSHARE_PATH, body)
        await self._db.write(lambda c: repo.remove_share(c, room_id, connection_id))
        return {"ok": True, "roomId": room_id, "connectionId": connection_id}

    async def link_states(self, connection_ids: list[str]) -> dict[str, dict[str, Any]]:
        """The link state of each running link among *connection_ids*, with
        ``waiting``: events in the outbox not yet acknowledged by the peer."""
        running = [cid for cid in connection_ids if cid in self.status]

        def read(conn: Connection) -> dict[str, int]:
            return {cid: repo.waiting_for(conn, cid) for cid in running}

        waiting = await self._db.read(read) if running else {}
        return {
            cid: {**self.status[cid].to_json(), "waiting": waiting[cid]}
            for cid in running
            if cid in self.status
        }

    async def shared_rooms(self) -> dict[str, list[dict[str, Any]]]:
        """Each connection's shares, for ``GET /api/connections``."""
        by_connection: dict[str, list[dict[str, Any]]] = {}
        for share in await self._db.read(repo.shares_of):
            by_connection.setdefault(share.connection_id, []).append(share_json(share))
        return by_connection

    # -- node-to-node (inbound) -------------------------------------------

    async def receive_share(self, did: str, fields: dict[str, Any]) -> dict[str, Any]:
        """The peer shares one of its rooms: keep a mirror room of it here."""
        row = await self._peer_connection(did, fields)
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
            _require_accepted(conn, row.connection_id)
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
        row = await self._peer_connection(did, fields, accepted=False)
        home_id = fields.get("roomId")
        if not isinstance(home_id, str) or not is_ulid(home_id):
            raise BadRequest("roomId must be a ULID", "invalid_field")

        def write(conn: Connection) -> bool:
            share = repo.share_by_home(conn, row.connection_id, home_id)
            return share is not None and repo.remove_share(conn, share.room_id, row.connection_id)

        await self._db.write(write)
        return {"ok": True}

    async def receive_relay(self, did: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Apply a batch of relayed events, in order (one batch per peer at a time).

        Per event: ``ok``, ``duplicate`` (applied before: its ``seq`` is at or
        below the connection's ``relay_applied`` mark, or its message is here
        already) or ``refused`` with the code this node's checks gave. Each
        applied change moves the mark in its own transaction, so an event is
        applied once even when the peer sends its batch again.

        Raises:
            RateLimited: the peer's or a participant's rate limit; the events
                before it are applied and marked, the peer sends the rest again.
            Unavailable: the store failed; likewise.
        """
        row = await self._peer_connection(did, fields)
        events = fields.get("events")
        if not isinstance(events, list):
            raise BadRequest("events must be a list", "invalid_field")
        if len(events) > MAX_EVENTS:
            raise BadRequest(f"at most {MAX_EVENTS} events per request", "too_many_events")
        connection_id = row.connection_id
        results: list[dict[str, Any]] = []
        # a run of messages is queued without waiting for each commit (the
        # store's writer keeps them in order) and awaited before the next
        # event of another kind, so a batch commits in few transactions
        pending: list[tuple[dict[str, Any], Awaitable[Message | None]]] = []
        shares: dict[str, repo.Share | None] = {}
        stop: MeshError | None = None

        async def settle() -> None:
            """Await the queued messages; a store failure stops the batch."""
            nonlocal stop
            for slot, stored in pending:
                try:
                    slot["status"] = "ok" if await stored is not None else "duplicate"
                except MeshError as error:
                    slot.update(status="refused", code=error.code)
                    if error.status >= 500:
                        slot["status"] = "failed"
                        stop = stop or error
                except Exception:  # a bug: logged, answered as failed, retried
                    log.exception("relayed message from %s failed", row.peer_name)
                    slot.update(status="failed", code="internal_error")
                    stop = stop or Unavailable("relay failed", "unavailable")
            pending.clear()

        async with self._locks[connection_id]:
            applied = await self._db.read(lambda c: repo.applied_of(c, connection_id))
            last = applied
            try:
                for event in events:
                    raw = event.get("seq") if isinstance(event, dict) else None
                    slot: dict[str, Any] = {"seq": raw}
                    seq = raw if _is_seq(raw) else None
                    if seq is None or applied < seq <= last:
                        slot.update(status="refused", code="invalid_event")
                        results.append(slot)
                        continue
                    if seq <= applied and not await self._missing_message(event):
                        slot["status"] = "duplicate"  # applied before: not again
                        results.append(slot)
                        continue
                    if event.get("kind") != "message":
                        await settle()  # what follows may depend on them
                        if stop is not None:
                            break
                    try:
                        self._rate.key("federation_relay", did)
                        outcome = await self._apply(
                            row, event, shares, RelaySource(connection_id, seq)
                        )
                    except MeshError as error:
                        if isinstance(error, RateLimited) or error.status >= 500:
                            stop = stop or error
                            break
                        log.info("refused relayed event from %s: %s", row.peer_name, error.code)
                        slot.update(status="refused", code=error.code)
                    else:
                        if isinstance(outcome, str):
                            slot["status"] = outcome
                        else:
                            pending.append((slot, outcome))
                    last = max(last, seq)
                    results.append(slot)
            finally:
                with trio.CancelScope(shield=True):
                    await settle()
            # everything before the first failure is applied (or refused for good)
            done = applied
            for slot in results:
                if slot.get("status") == "failed":
                    break
                position = slot["seq"]
                if _is_seq(position):
                    done = max(done, position)
            if done > applied:
                await self._db.write(lambda c: repo.mark_applied(c, connection_id, done))
        if stop is not None:
            raise stop
        return {"ok": True, "results": results}

    async def _missing_message(self, event: dict[str, Any]) -> bool:
        """Whether *event* is a message this node does not have: messages are
        recognized by their id, so one whose position was marked after a
        store failure is applied when it comes again."""
        message_id = event.get("messageId")
        if event.get("kind") != "message" or not isinstance(message_id, str):
            return False
        if not is_ulid(message_id):
            return False
        found = await self._db.read(lambda c: messages_repo.get_message(c, message_id))
        return found is None

    async def _apply(
        self,
        row: connections_repo.ConnectionRow,
        event: object,
        shares: dict[str, repo.Share | None],
        source: RelaySource,
    ) -> str | Awaitable[Message | None]:
        """Apply one event: its outcome, or for a message the awaitable of its
        queued write (see :meth:`receive_relay`)."""
        if not isinstance(event, dict):
            raise BadRequest("each event must be an object", "invalid_event")
        kind = event.get("kind")
        if kind not in _KINDS:
            raise BadRequest("unknown event kind", "invalid_event")
        home_id = event.get("room")
        if not isinstance(home_id, str) or not is_ulid(home_id):
            raise BadRequest("room must be a ULID", "invalid_event")
        if home_id not in shares:
            shares[home_id] = await self._db.read(
                lambda c: repo.share_by_home(c, row.connection_id, home_id)
            )
        share = shares[home_id]
        if share is None:
            raise NotFound("this room is not shared with this node", "room_not_shared")
        by = _participant_ref(event.get("by"), "by")
        node_did = by["node"]["did"]
        if node_did == self._identity.did:
            raise Forbidden("a peer cannot act as this node's participants", "own_participant")
        if share.direction == "out" and node_did != row.peer_did:
            raise Forbidden(
                "in a room of this node, a peer relays only its own participants",
                "not_peer_participant",
            )
        message_id = event.get("messageId")
        if not isinstance(message_id, str) or not is_ulid(message_id):
            raise BadRequest("messageId must be a ULID", "invalid_event")
        actor = await self._remote_actor(row, by, share.room_id)
        room_id = share.room_id
        if kind == "message":
            content, created = event.get("content"), event.get("createdAt")
            if not isinstance(content, str):
                raise BadRequest("content must be a string", "invalid_event")
            if not isinstance(created, int) or isinstance(created, bool) or created < 0:
                raise BadRequest("createdAt must be epoch milliseconds", "invalid_event")
            thread = event.get("threadId")
            relayed = Relayed(
                message_id,
                min(created, now_ms()),
                node_did,
                source,
                to=await self._local_participant(event.get("to")),
                thread_id=thread if isinstance(thread, str) and is_ulid(thread) else None,
            )
            return self._messages.submit_relayed(actor, room_id, content, relayed)
        if kind == "edit":
            content = event.get("content")
            if not isinstance(content, str):
                raise BadRequest("content must be a string", "invalid_event")
            await self._messages.edit(actor, message_id, content, room_id=room_id, source=source)
            return "ok"
        if kind == "delete":
            try:
                await self._messages.delete(actor, message_id, room_id=room_id, source=source)
            except NotFound:
                return "duplicate"
            return "ok"
        emoji, added = event.get("emoji"), event.get("added")
        if not isinstance(emoji, str) or not isinstance(added, bool):
            raise BadRequest("emoji must be a string and added a boolean", "invalid_event")
        if added:
            await self._messages.add_reaction(
                actor, message_id, emoji, room_id=room_id, source=source
            )
        else:
            await self._messages.remove_reaction(
                actor, message_id, emoji, room_id=room_id, source=source
            )
        return "ok"

    async def _remote_actor(
        self, row: connections_repo.ConnectionRow, by: dict[str, Any], room_id: str
    ) -> Actor:
        """The local participant standing for *by* (created on first sight,
        ``name@node``, role ``agent``), as an actor of at most Tier 4, and a
        member of *room_id* (joined through the ordinary room checks)."""
        node = by["node"]
        connection_id = row.connection_id

        def write(conn: Connection) -> Participant:
            known = repo.find_remote(conn, node["did"], by["id"])
            if known is not None:
                found = accounts_repo.get_participant(conn, known.participant_id)
                if found is not None:
                    if known.connection_id != connection_id:
                        repo.set_remote_connection(conn, known.participant_id, connection_id)
                    return found
            if repo.count_remotes(conn, connection_id) >= MAX_REMOTES:
                raise Conflict(
                    "this connection has brought as many participants as allowed",
                    "too_many_participants",
                )
            base = _NAME_CHARS.sub("_", by["name"])[:_MAX_BASE_NAME] or "someone"
            suffix = "@" + handle_of(_node_name(conn, row, node))
            kind = by["kind"] if by["kind"] in ("human", "bot", "guest") else "bot"
            for n in range(1, 100):
                name = base + suffix if n == 1 else f"{base}-{n}{suffix}"
                if not accounts_repo.name_taken(conn, name):
                    break
            else:
                raise Conflict("no free name for the remote participant", "name_taken")
            participant = Participant(
                new_id(), name, kind, by["type"], "agent", now_ms(), origin=node["did"]
            )
            accounts_repo.insert_participant(conn, participant, None)
            remote = repo.RemoteParticipant(
                participant.participant_id,
                connection_id,
                node["did"],
                _node_name(conn, row, node),
                by["id"],
                by["name"],
            )
            repo.insert_remote(conn, remote)
            return participant

        key = (node["did"], by["id"])
        known = self._remote_ids.get(key)
        actor = None
        if known is not None and known[1] == connection_id:
            actor = await self._accounts.actor_of(known[0])  # None if deleted since
        if actor is None:
            participant = await self._db.write(write)
            if len(self._remote_ids) >= _MAX_REMEMBERED:
                self._remote_ids.clear()
            self._remote_ids[key] = (participant.participant_id, connection_id)
            actor = self._accounts.actor_for(participant)
        if tier_of(actor.priority) < 4:  # Tier 4 at most, whatever role it was given here
            actor = replace(actor, role="agent")
        if room_id not in self._broker.rooms_of(actor.participant_id):
            await self._rooms.join(actor, room_id)
        return actor

    async def _local_participant(self, value: object) -> str | None:
        """A relayed ``to`` as a participant id here (``None`` if unknown)."""
        if value is None:
            return None
        try:
            ref = _participant_ref(value, "to")
        except BadRequest:
            return None
        if ref["node"]["did"] == self._identity.did:
            return str(ref["id"])
        known = await self._db.read(lambda c: repo.find_remote(c, ref["node"]["did"], ref["id"]))
        return None if known is None else known.participant_id

    # -- helpers ----------------------------------------------------------

    async def _accepted(self, connection_id: str) -> connections_repo.ConnectionRow:
        row = await get_connection(self._db, connection_id)
        if row.status != "accepted":
            raise Conflict(f"this connection is {row.status}, not accepted", "not_accepted")
        return row

    async def _peer_connection(
        self, did: str, fields: dict[str, Any], *, accepted: bool = True
    ) -> connections_repo.ConnectionRow:
        connection_id = fields.get("connectionId")
        if not isinstance(connection_id, str) or not is_ulid(connection_id):
            raise BadRequest("connectionId must be a ULID", "invalid_field")
        row = await self._db.read(lambda c: connections_repo.get_connection(c, connection_id))
        if row is None or row.peer_did != did:
            raise NotFound("no such connection with this node", "connection_not_found")
        if accepted and row.status != "accepted":
            raise Forbidden(f"this connection is {row.status}, not accepted", "not_connected")
        return row


def share_json(share: repo.Share) -> dict[str, Any]:
    return {
        "roomId": share.room_id,
        "name": share.room_name,
        "homeRoomId": share.home_room_id,
        "direction": "outbound" if share.direction == "out" else "inbound",
        "sharedAt": iso(share.created_at),
    }


async def get_connection(db: Database, connection_id: str) -> connections_repo.ConnectionRow:
    """The connection *connection_id*.

    Raises:
        NotFound: ``connection_not_found`` (also for a malformed id).
    """
    row = None
    if is_ulid(connection_id):
        row = await db.read(lambda c: connections_repo.get_connection(c, connection_id))
    if row is None:
        raise NotFound("no such connection", "connection_not_found")
    return row


def _is_seq(value: object) -> TypeGuard[int]:
    """A peer's outbox position: a whole number the store can hold."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63


def _require_accepted(conn: Connection, connection_id: str) -> None:
    """Raises Conflict (``not_accepted``) unless the connection is accepted now."""
    row = connections_repo.get_connection(conn, connection_id)
    if row is None or row.status != "accepted":
        raise Conflict("this connection is not accepted", "not_accepted")


def _node_name(conn: Connection, row: connections_repo.ConnectionRow, node: dict[str, str]) -> str:
    """The name a node's participants are shown with (``name@<handle>``): the
    peer's name as recorded for its connection, not what an event claims; for
    a third node, the name of this node's own connection with it if there is
    one, else the name the relaying home node gives."""
    if node["did"] == row.peer_did:
        return row.peer_name
    known = connections_repo.get_by_did(conn, node["did"])
    return known.peer_name if known is not None else node["name"]


def _pending(
    connection_id: str, batch: int, conn: Connection
) -> tuple[connections_repo.ConnectionRow | None, int, list[repo.OutboxItem], int]:
    """The connection, its cursor, the next events for its peer, and the outbox head."""
    row = connections_repo.get_connection(conn, connection_id)
    cursor = repo.cursor_of(conn, connection_id)
    items, head = repo.outbox_after(conn, connection_id, cursor, batch)
    return row, cursor, items, head


def _advance(connection_id: str, cursor: int, conn: Connection) -> None:
    """The peer has every event up to *cursor*: move on, drop what all peers have."""
    repo.advance_cursor(conn, connection_id, cursor)
    repo.prune_outbox(conn)


def _fill(body: dict[str, Any], own: dict[str, str]) -> dict[str, Any]:
    """*body* with this node named in the participant refs that leave it ``None``."""
    out = dict(body)
    for field in ("by", "to"):
        ref = out.get(field)
        if isinstance(ref, dict) and ref.get("node") is None:
            out[field] = {**ref, "node": own}
    return out


def _participant_ref(value: object, field: str) -> dict[str, Any]:
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


def _results(raw: bytes) -> list[dict[str, Any]]:
    try:
        data = json.loads(raw)
    except ValueError:
        return []
    results = data.get("results") if isinstance(data, dict) else None
    return [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []
