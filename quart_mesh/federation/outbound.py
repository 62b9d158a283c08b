"""Outbound relay: one supervised link task per accepted connection, draining
the durable ``relay_outbox`` to the peer (decision 0029).

Changes in shared rooms are written to the outbox in the same transaction as
the change itself (``services/messages.py``, ``store/relay.py``). A link
sends the events for its peer in order, in batches, to the peer's
:data:`~.inbound.RELAY_PATH`, and moves the connection's cursor past them
only once the peer answered ``200``. What is transient (the peer down or
refusing, the store unavailable) is retried with backoff by
:func:`quart_mesh.retry.retrying`; a bug ends the node. A peer that keeps
failing is one fault (``faults.PEER_DOWN``, keyed by the connection id):
logged when it starts and when the peer takes a batch again, counted
meanwhile, instead of a line per attempt. A link wakes when an
event is published in a shared room, and looks at least every
:data:`_IDLE_POLL` seconds.

The link tasks are an elected singleton (decision 0035): on PostgreSQL,
where several processes serve one mesh, they run on one of them
(:meth:`Links.lead`), so each peer has one link in the whole mesh; the HTTP
client for share administration is on every process (:meth:`Links.run`).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import httpx
import trio
from sqlalchemy.engine import Connection

from ..config import Settings
from ..errors import Transient, Unavailable
from ..faults import PEER_DOWN
from ..identity import NodeIdentity
from ..records import iso, now_ms
from ..retry import Backoff, retrying
from ..services.messages import SharedRooms
from ..store import Database
from ..store import connections as connections_repo
from ..store import relay as repo
from .http import PeerError, exchange, post_signed, unreachable
from .inbound import MAX_EVENTS, MAX_RELAY_BYTES, RELAY_PATH
from .peers import DISCONNECTED_PATH
from .signing import sign_request

if TYPE_CHECKING:
    from ..broker import Broker
    from ..events import Event
    from ..services.accounts import Accounts

__all__ = ["LinkStatus", "Links"]

log = logging.getLogger(__name__)

_BATCH_BYTES = MAX_RELAY_BYTES // 4
#: most bytes of a peer's answer to a batch read (per-event results)
_MAX_ANSWER_BYTES = 256 * 1024
#: first wait after a failed relay attempt (doubling up to ``federation_retry_max``)
_FIRST_RETRY = 0.5
#: a link looks at its outbox at least this often, woken or not
_IDLE_POLL = 10.0
#: how often the process running the links reads which connections are accepted
_RECONCILE_INTERVAL = 2.0
#: how often it deletes every outbox row no peer waits for (what the pruning
#: as each peer moves on leaves behind: ended shares and connections), seconds
_FULL_PRUNE_INTERVAL = 60.0
#: a peer with more than ``federation_max_backlog`` events waiting is ended
#: once it has taken nothing for this many of the longest retry waits (or
#: its backlog doubled, whatever it takes)
_STALL_WAITS = 10
#: seconds between two counts of a backlog over the bound (each may count
#: up to twice the bound), at most half the stall
_BACKLOG_CHECK_INTERVAL = 10.0


@dataclass(slots=True)
class LinkStatus:
    """What ``GET /api/connections`` shows of a link task (in memory)."""

    running: bool = False
    failures: int = 0
    last_error: str | None = None
    last_relayed_at: int | None = None
    relayed: int = 0
    #: outbox positions between the peer's cursor and the outbox's head when
    #: last read: at most this many events wait for the peer (``/metrics``)
    behind: int = 0
    #: when the link started or the peer last took a batch (``trio.current_time``)
    progress_at: float = 0.0
    #: more than ``federation_max_backlog`` events wait for the peer (the
    #: admin was told in the log), and when that was last counted
    over_bound: bool = False
    backlog_checked_at: float = float("-inf")

    def to_json(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "failures": self.failures,
            "lastError": self.last_error,
            "lastRelayedAt": iso(self.last_relayed_at),
            "relayed": self.relayed,
        }


class Links:
    """The link tasks, one per accepted connection, in the nursery of
    :meth:`lead` (on one process of the mesh: an elected singleton, decision
    0035); while :meth:`run` runs (on every process), the signed calls to
    peers that share administration makes (:meth:`post_signed`), with the
    same HTTP client."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        identity: NodeIdentity,
        *,
        broker: Broker,
        accounts: Accounts,
        shared_rooms: SharedRooms,
    ) -> None:
        self._settings = settings
        self._db = db
        self._identity = identity
        self._broker = broker
        self._accounts = accounts
        #: rooms that are (or were, since the node started) shared: a
        #: superset, so that events in other rooms wake no link
        self._shared = shared_rooms
        self._client: httpx.AsyncClient | None = None
        self._nursery: trio.Nursery | None = None
        self._links: dict[str, trio.CancelScope] = {}
        self._wakeups: dict[str, trio.Event] = {}
        self.status: dict[str, LinkStatus] = {}

    async def run(
        self,
        client: httpx.AsyncClient,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Make *client* (the caller's: ``Federation.run`` owns it) the one
        for :meth:`post_signed` and the link tasks, and follow the events
        that wake links; run until cancelled. Every process runs this; the
        link tasks themselves run in :meth:`lead`, on one process."""
        self._client = client
        self._broker.observe(self._observe)
        try:
            task_status.started()
            await trio.sleep_forever()
        finally:
            self._client = None

    async def lead(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run one link task per accepted connection until cancelled: those
        the store lists now, those :meth:`start_link` asks for, and those
        accepted through another process (the store is read again every
        :data:`_RECONCILE_INTERVAL` seconds). An elected singleton
        (``store/leases.py``): one process of the mesh runs it. Reads of
        the connections are retried while the store is unavailable."""
        read = partial(self._db.read, connections_repo.list_connections)
        prune = partial(self._db.write, repo.prune_outbox)
        rows = await retrying("reading connections", read, logger=log)
        next_prune = trio.current_time()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._start_accepted(rows)
                task_status.started()
                while True:
                    if trio.current_time() >= next_prune:
                        await retrying("pruning the relay outbox", prune, logger=log)
                        next_prune = trio.current_time() + _FULL_PRUNE_INTERVAL
                    await trio.sleep(_RECONCILE_INTERVAL)
                    self._start_accepted(await retrying("reading connections", read, logger=log))
        finally:
            self._nursery = None
            self._links.clear()
            self.status.clear()

    def _start_accepted(self, rows: list[connections_repo.ConnectionRow]) -> None:
        if self._settings.federation_enabled:
            for row in rows:
                if row.status == "accepted":
                    self.start_link(row.connection_id)

    def start_link(self, connection_id: str) -> None:
        """Supervise a link task for an accepted connection (idempotent; does
        nothing unless :meth:`run` is running)."""
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

    async def post_signed(
        self, base: str, path: str, body: dict[str, Any], *, audience: str
    ) -> dict[str, Any]:
        """POST *body* to the peer at *base*, signed for its DID *audience*; its JSON answer.

        Raises:
            Unavailable: ``federation_unavailable``, :meth:`run` is not running.
            PeerError: unreachable, refused (non-2xx) or an invalid answer.
        """
        if self._client is None:
            raise Unavailable("federation is not running", "federation_unavailable")
        return await post_signed(self._client, self._identity, base, path, body, audience=audience)

    def _observe(self, event: Event) -> None:
        if event.room_id is not None and event.room_id in self._shared:
            for wakeup in self._wakeups.values():
                wakeup.set()

    async def _supervise(self, connection_id: str, scope: trio.CancelScope) -> None:
        """Run the link, retrying what is transient (the peer or the store
        unavailable) with backoff; a bug ends the node (``retry``)."""
        status = self.status.setdefault(connection_id, LinkStatus())
        status.running = True
        status.progress_at = trio.current_time()
        cap = self._settings.federation_retry_max
        backoff = Backoff(min(_FIRST_RETRY, cap), cap)  # a cap below the first wait is every wait

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
                    fault=(self._db.faults, PEER_DOWN, connection_id),
                )
        finally:
            status.running = False
            self._db.faults.forget(PEER_DOWN, key=connection_id, why="its link stopped")
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
            status.behind = max(0, head - cursor)
            if status.behind <= self._settings.federation_max_backlog:
                status.over_bound = False  # caught up: a next crossing is told again
            elif await self._overflowed(row, status):
                return
            if not items:
                if head > cursor:
                    await self._db.write(partial(_advance, connection_id, cursor, head))
                with trio.move_on_after(_IDLE_POLL):
                    await wakeup.wait()
                continue
            sent = await self._send(row, items)
            backoff.reset()
            status.failures = 0
            status.last_error = None
            status.last_relayed_at = now_ms()
            status.progress_at = trio.current_time()
            status.relayed += sent
            done = items[sent - 1].seq
            if sent == len(items) < batch:
                done = max(done, head)  # nothing else was waiting for this peer
            await self._db.write(partial(_advance, connection_id, cursor, done))
            status.behind = max(0, head - done)

    async def _overflowed(self, row: connections_repo.ConnectionRow, status: LinkStatus) -> bool:
        """With more than ``federation_max_backlog`` events waiting for the
        peer, tell the admin (an error in the log, once per crossing); end
        the connection when the peer has also taken nothing for
        :data:`_STALL_WAITS` of the longest retry waits, or twice the bound
        wait — a peer that stopped taking the relay, or takes it slower than
        this node makes it, must not make the outbox grow without end, while
        one merely behind for a while goes on. Ended: disconnected here, its
        shares end and the rows no other peer waits for are deleted, the
        peer is told if it can be. Whether it was ended.

        Raises:
            Unavailable: the store could not be read or written.
        """
        stall = _STALL_WAITS * self._settings.federation_retry_max
        now_t = trio.current_time()
        if now_t - status.backlog_checked_at < min(_BACKLOG_CHECK_INTERVAL, stall / 2):
            return False
        status.backlog_checked_at = now_t
        bound = self._settings.federation_max_backlog
        connection_id = row.connection_id
        waiting = await self._db.read(lambda c: repo.backlog_of(c, connection_id, 2 * bound))
        if waiting <= bound:
            status.over_bound = False
            return False
        if not status.over_bound:
            status.over_bound = True
            log.error(
                "connection %s with %s (%s): more than %d relayed events wait for the peer"
                " (MESH_FEDERATION_MAX_BACKLOG); it is ended if the peer takes nothing for"
                " %g s or twice as many wait",
                connection_id,
                row.peer_name,
                row.peer_did,
                bound,
                stall,
            )
        if waiting <= 2 * bound and now_t - status.progress_at < stall:
            return False
        now = now_ms()

        def end(conn: Connection) -> None:
            repo.set_connection_status(conn, connection_id, "disconnected", now)
            repo.prune_outbox(conn)

        await self._db.write(end)
        log.error(
            "connection %s with %s (%s) ended: %d relayed events waited for the peer"
            " (MESH_FEDERATION_MAX_BACKLOG is %d); connect again once it is back",
            connection_id,
            row.peer_name,
            row.peer_did,
            waiting,
            bound,
        )
        notice = {"connectionId": connection_id, "did": self._identity.did}
        try:
            await self.post_signed(row.peer_url, DISCONNECTED_PATH, notice, audience=row.peer_did)
        except (PeerError, Unavailable) as error:
            log.info("the peer of connection %s was not told: %s", connection_id, error)
        self.connection_ended(connection_id)  # this link task ends with it
        return True

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
        headers = sign_request(self._identity, "POST", RELAY_PATH, raw, audience=row.peer_did)
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
        except httpx.HTTPError as error:  # a name that cannot be looked up too (``exchange``)
            raise Transient(f"cannot reach the peer: {unreachable(error)}") from None
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

    def _own_name(self) -> str:
        mesh = self._accounts.mesh
        return mesh.name if mesh is not None else self._identity.did


def _pending(
    connection_id: str, batch: int, conn: Connection
) -> tuple[connections_repo.ConnectionRow | None, int, list[repo.OutboxItem], int]:
    """The connection, its cursor, the next events for its peer, and the outbox head."""
    row = connections_repo.get_connection(conn, connection_id)
    cursor = repo.cursor_of(conn, connection_id)
    items, head = repo.outbox_after(conn, connection_id, cursor, batch)
    return row, cursor, items, head


def _advance(connection_id: str, before: int, cursor: int, conn: Connection) -> None:
    """The peer has every event up to *cursor* (it had those up to *before*):
    move on, and delete what it passed that no other peer waits for."""
    repo.advance_cursor(conn, connection_id, cursor)
    repo.prune_passed(conn, before, cursor)


def _fill(body: dict[str, Any], own: dict[str, str]) -> dict[str, Any]:
    """*body* with this node named in the participant refs that leave it ``None``."""
    out = dict(body)
    for field in ("by", "to"):
        ref = out.get(field)
        if isinstance(ref, dict) and ref.get("node") is None:
            out[field] = {**ref, "node": own}
    return out


def _results(raw: bytes) -> list[dict[str, Any]]:
    """The per-event results of a peer's answer to a batch (none if unreadable)."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested too deep to parse
        return []
    results = data.get("results") if isinstance(data, dict) else None
    return [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []
