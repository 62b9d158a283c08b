"""Inbound relay: a peer's batch of events (``POST /api/federation/relay``)
checked and applied in order, through the ordinary domain services
(:class:`Messages`), by the remote participant standing for each event's
author (decision 0029). This node's permissions, room rules and limits hold.

Who may speak (decision 0058): a peer never as this node's participants
(``own_participant``); in a room this node hosts, only as its own; and never
as the participants of a node this node is itself connected with — that
node speaks for its own (``not_peer_participant``). A remote participant is
then bound to the node that introduced it (``remote.py``).

A relayed message keeps its time unless that is outside a sane window:
older than ``federation_max_relay_age`` or later than now plus
``federation_max_skew_seconds``, it is dated when it arrived and marked
(``timestampReplaced``); a little in the future, it is taken as now.

Idempotent twice over: per connection, the highest outbox position applied
(``relay_applied``) is kept, and events at or below it are answered
``duplicate``; a message is also recognized by its id, so one that a store
failure left out is applied when it comes again.
"""

from __future__ import annotations

import collections
import logging
from typing import TYPE_CHECKING, Any, TypeGuard

import trio

from ..errors import BadRequest, Forbidden, MeshError, NotFound, RateLimited, Unavailable
from ..ids import is_ulid
from ..records import Message, now_ms
from ..services.messages import Relayed, RelaySource
from ..store import Database
from ..store import connections as connections_repo
from ..store import messages as messages_repo
from ..store import relay as repo
from .peers import peer_connection
from .remote import RemoteParticipants, parse_ref

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from ..config import Settings
    from ..services.messages import Messages
    from ..services.ratelimit import RateLimiter

__all__ = ["MAX_EVENTS", "MAX_RELAY_BYTES", "RELAY_PATH", "Receiver"]

log = logging.getLogger(__name__)

#: where a node takes relayed events (a sender posts its batches there)
RELAY_PATH = "/api/federation/relay"
#: most events accepted in one relay request
MAX_EVENTS = 500
#: largest relay request body accepted (a link sends at most a quarter of it)
MAX_RELAY_BYTES = 4 * 1024 * 1024
_KINDS = frozenset({"message", "edit", "delete", "reaction"})


class Receiver:
    """Applies what peers relay: one batch per connection at a time."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        node_did: str,
        messages: Messages,
        rate_limits: RateLimiter,
        remote: RemoteParticipants,
    ) -> None:
        #: oldest relayed time kept, and latest, in milliseconds from now
        self._max_age = int(settings.federation_max_relay_age * 1000)
        self._pending_ttl = int(settings.federation_pending_ttl * 1000)
        self._max_ahead = settings.federation_max_skew_seconds * 1000
        self._db = db
        self._node_did = node_did
        self._messages = messages
        self._rate = rate_limits
        self._remote = remote
        self._locks: collections.defaultdict[str, trio.Lock] = collections.defaultdict(trio.Lock)

    async def receive_relay(self, did: str, fields: dict[str, Any]) -> dict[str, Any]:
        """Apply a batch of relayed events, in order (one batch per peer at a time).

        Per event: ``ok``, ``duplicate`` (applied before: its ``seq`` is at or
        below the connection's ``relay_applied`` mark, or its message is here
        already) or ``refused`` with the code this node's checks gave. Each
        applied change moves the mark in its own transaction, so an event is
        applied once even when the peer sends its batch again.

        Raises:
            BadRequest, NotFound, Forbidden: the batch itself is not acceptable
                (``peers.peer_connection``, ``too_many_events``).
            RateLimited: the peer's or a participant's rate limit; the events
                before it are applied and marked, the peer sends the rest again.
            Unavailable: the store failed; likewise.
        """
        row = await peer_connection(self._db, did, fields)
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
        connected: dict[str, bool] = {}
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
                        await self._rate.key("federation_relay", did)
                        outcome = await self._apply(
                            row, event, shares, connected, RelaySource(connection_id, seq)
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

    async def _connected_with(self, did: str, connected: dict[str, bool]) -> bool:
        """Whether this node has an accepted connection with the node *did*,
        or a pending one (an inbound request only until it expires) — asked
        once per batch: *connected* keeps the answers."""
        if did not in connected:
            found = await self._db.read(lambda c: connections_repo.get_by_did(c, did))
            connected[did] = found is not None and (
                found.status == "accepted"
                or (found.status, found.direction) == ("pending", "outbound")
                or (
                    (found.status, found.direction) == ("pending", "inbound")
                    and found.created_at > now_ms() - self._pending_ttl
                )
            )
        return connected[did]

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
        connected: dict[str, bool],
        source: RelaySource,
    ) -> str | Awaitable[Message | None]:
        """Apply one event: its outcome, or for a message the awaitable of its
        queued write (see :meth:`receive_relay`). *shares* and *connected*:
        what the batch has looked up so far (shares by home room id, whether
        this node is connected with a DID)."""
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
        by = parse_ref(event.get("by"), "by")
        node_did = by["node"]["did"]
        if node_did == self._node_did:
            raise Forbidden("a peer cannot act as this node's participants", "own_participant")
        if share.direction == "out" and node_did != row.peer_did:
            raise Forbidden(
                "in a room of this node, a peer relays only its own participants",
                "not_peer_participant",
            )
        if node_did != row.peer_did and await self._connected_with(node_did, connected):
            raise Forbidden(
                "this node is connected with the participant's node: only that node"
                " speaks for its participants",
                "not_peer_participant",
            )
        message_id = event.get("messageId")
        if not isinstance(message_id, str) or not is_ulid(message_id):
            raise BadRequest("messageId must be a ULID", "invalid_event")
        actor = await self._remote.actor(row, by, share.room_id)
        room_id = share.room_id
        if kind == "message":
            content, created = event.get("content"), event.get("createdAt")
            if not isinstance(content, str):
                raise BadRequest("content must be a string", "invalid_event")
            if not isinstance(created, int) or isinstance(created, bool) or created < 0:
                raise BadRequest("createdAt must be epoch milliseconds", "invalid_event")
            thread = event.get("threadId")
            now = now_ms()
            replaced = not now - self._max_age <= created <= now + self._max_ahead
            relayed = Relayed(
                message_id,
                now if replaced else min(created, now),
                node_did,
                source,
                to=await self._remote.local_id(event.get("to"), row.peer_did),
                thread_id=thread if isinstance(thread, str) and is_ulid(thread) else None,
                time_replaced=replaced,
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


def _is_seq(value: object) -> TypeGuard[int]:
    """A peer's outbox position: a whole number the store can hold."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**63
