"""The bus: every process of a mesh delivers every commit, in commit order.

With several processes on one PostgreSQL database (``docs/decisions/
0034-cluster.md``) each commit's outbox entries (``store/outbox.py``) are
written to the ``cluster_stream`` table in the committing transaction, at a
position taken under the sequence lock, so positions become visible in
order and a reader at position *n* never passes a position a slower
transaction will fill later (Synapse's "persisted up to" problem, solved by
committing in order instead of tracking holes). Each process runs a bus:

- it *reads* the stream after the last position it applied and applies each
  row in order: events to its own subscribers (the broker), routing changes
  to its mirror, invalidations to its caches (handlers registered with
  :meth:`Bus.on_invalidate`, awaited in order, so an event is never
  delivered on a cache older than the change before it). A posted message
  travels in the row as the unit stored it (reading it again by id cost
  three more queries per read and process, ``bench/README.md``);
- it *wakes* on a ``NOTIFY`` sent by each such commit (``LISTEN`` on a
  connection whose socket Trio waits on, ``store/listen.py``), on its own
  commits at once, and every :attr:`poll_interval` in case a notification
  was lost with a connection;
- it carries *live* events that are not stored (typing, presence) between
  processes as ``NOTIFY`` payloads: at most once, which is what they are.

The process's own events go the same way as everyone else's, so every
process delivers one order, the stream's. Rows are pruned after
:attr:`keep_ms`; a process that cannot read the stream for longer than half
of that ends its sessions (they resume from their cursors, losing nothing).

While the store cannot be read or listened to, that is one fault
(``faults.STORE_UNAVAILABLE``: logged when it starts and when it ends,
counted meanwhile), not a line per retry. A read of the stream that works
ends only what failed reads started, a new ``LISTEN`` connection what the
listening started (a failed write's fault ends with a commit). How long the process has been
behind the stream is :meth:`Bus.behind_for` (readiness reads it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial

import trio

from ..broker import Broker
from ..errors import Overloaded, Unavailable
from ..events import Event
from ..faults import STORE_UNAVAILABLE, KnownFault
from ..records import now_ms
from ..retry import Backoff, describe, retrying
from ..store import Database, outbox
from ..store import cluster as repo
from ..store.database import READ, STREAM_CHANNEL, WRITE
from ..store.listen import MAX_PAYLOAD, Listener, Notifier

__all__ = ["LIVE_CHANNEL", "Bus"]

log = logging.getLogger(__name__)

#: the channel of live (unstored) events
LIVE_CHANNEL = "mesh_live"
#: stream rows read at once (each up to a write batch's messages)
_BATCH = 64
#: how long a wake-up waits for more commits to read with it (seconds)
_GATHER = 0.001
#: the source of the listening connection's failures (``faults.Faults``)
_LISTEN = "listen"


class Bus:
    """One per process, running in the node's nursery on PostgreSQL."""

    def __init__(
        self,
        db: Database,
        broker: Broker,
        process_id: str,
        *,
        poll_interval: float = 1.0,
        keep_ms: int = 10 * 60_000,
    ) -> None:
        self._db = db
        self._broker = broker
        self.process_id = process_id
        self.poll_interval = poll_interval
        self.keep_ms = keep_ms
        #: the last stream position applied here
        self.position = 0
        #: the newest position another process told of (``NOTIFY``)
        self.known = 0
        self._wakeup = trio.Event()
        self._live: list[Event] = []
        self._live_ready = trio.Event()
        self._invalidators: dict[str, list[Callable[[str], Awaitable[object]]]] = {}
        self._resyncers: list[Callable[[], Awaitable[object]]] = []
        self._prepared = False
        #: when the stream was last read to its end (Trio's clock)
        self._caught_up_at = 0.0
        #: part of the stream could not be applied: start over from its head
        self._must_resync = False
        #: set (and replaced) each time the applied position moves
        self._progress = trio.Event()
        self._running = False

    def on_invalidate(self, cache: str, handler: Callable[[str], Awaitable[object]]) -> None:
        """Await ``handler(key)`` when a process (this one too) changes *cache*."""
        self._invalidators.setdefault(cache, []).append(handler)

    def wake(self) -> None:
        self._wakeup.set()

    def head(self) -> int:
        """The newest stream position known committed: a subscription made
        now receives the events after it (those before predate it, even if
        this process has not applied them yet)."""
        return max(self.position, self.known, self._db.stream_head)

    def behind_for(self) -> float:
        """0.0 when this process has applied every stream position it knows
        of, else the seconds since it last had (readiness: a process whose
        bus is stuck delivers nothing others commit)."""
        if not self._running or self.position >= self.head():
            return 0.0
        return max(0.0, trio.current_time() - self._caught_up_at)

    def _store_failed(self, error: Unavailable, source: str) -> None:
        """Report that the store could not be read, written or listened to
        (*source*, which alone ends it; ``""``: any success of the store),
        unless the store reported it already
        (:class:`~quart_mesh.faults.KnownFault`)."""
        if isinstance(error, Overloaded):  # busy, not away
            log.warning("%s", error)
        elif not isinstance(error, KnownFault):
            self._db.faults.failed(STORE_UNAVAILABLE, describe(error), source=source)

    def on_resync(self, handler: Callable[[], Awaitable[object]]) -> None:
        """Await ``handler()`` when this process may have missed part of the
        stream (it could not read it for long): reload whatever it keeps."""
        self._resyncers.append(handler)

    async def prepare(self) -> None:
        """Take the stream's head as the place to start from. Call before
        loading what the process keeps in memory (``Node``): what others
        commit after this is applied on top of it, nothing in between is
        missed. From here on, events reach this process's sessions through
        :meth:`run` only.

        Raises:
            Unavailable: the store cannot be read.
        """
        self.position = self.known = await self._db.read(repo.head_position)
        self._prepared = True
        self._caught_up_at = trio.current_time()
        self._advanced()
        self._broker.clustered = True
        self._broker.stream_head = self.head

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver the stream after the position :meth:`prepare` took (taking
        it now if it was not called), until cancelled."""
        if not self._prepared:
            await retrying("reading the cluster stream's head", self.prepare)
        self._broker.on_local_commit = self.wake
        self._broker.live_sink = self._queue_live
        self._running = True
        self._db.delivered = self.caught_up
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._listen)
                nursery.start_soon(self._send_live)
                nursery.start_soon(self._prune)
                task_status.started()
                await self._follow()
        finally:
            # an embedding program may go on writing: deliver here again
            self._running = False
            self._advanced()
            self._db.delivered = None
            self._broker.on_local_commit = None
            self._broker.live_sink = None
            self._broker.clustered = False
            self._prepared = False

    async def _follow(self) -> None:
        backoff = Backoff(0.2, 5.0)
        while True:
            with trio.move_on_after(self.poll_interval):
                await self._wakeup.wait()
            # commits that land together are read together (one query per
            # process for all of them, not one each)
            await trio.sleep(_GATHER)
            self._wakeup = trio.Event()
            if self._must_resync or trio.current_time() - self._caught_up_at > self.keep_ms / 2000:
                # rows this process has not applied may be pruned by now
                await retrying("starting over from the cluster stream's head", self._resync)
                self._must_resync = False
            try:
                while await self._apply_next():
                    pass
            except Unavailable as exc:
                delay = backoff.next()
                self._store_failed(exc, READ)
                log.debug("reading the cluster stream failed (%s): again in %.1fs", exc, delay)
                await trio.sleep(delay)
                self._wakeup.set()
            else:
                self._caught_up_at = trio.current_time()
                # what failed reads started (not a failed write's: a commit ends that)
                self._db.faults.cleared(STORE_UNAVAILABLE, source=READ)
                backoff.reset()

    async def _resync(self) -> None:
        """Start over from the head: sessions end (they resume from their
        cursors, losing nothing) and what the process keeps is read again."""
        log.error("the cluster stream was not applied for too long: starting over from its head")
        await self.prepare()
        for handler in self._resyncers:
            await handler()
        # last: a session that reconnects now starts after the new head, on
        # reloaded caches
        self._broker.disconnect_all("unavailable")

    async def _apply_next(self) -> bool:
        """Apply the next rows of the stream; True if there may be more."""
        rows = await self._db.read(partial(repo.read_stream, after=self.position, limit=_BATCH))
        if rows:  # known now, applied below (``behind_for`` counts while it is not)
            self.known = max(self.known, rows[-1].position)
        for row in rows:
            if row.unreadable:
                # written by another version of the node, or damaged: what it
                # carried is unknown, so everything is read again after it
                log.error("stream row %d could not be read: starting over", row.position)
                self._must_resync = True
            else:
                await self._apply(row)
            self.position = row.position
            self.known = max(self.known, row.position)
        if rows:
            self._advanced()
            if self.position >= self.head():
                self._caught_up_at = trio.current_time()
        return len(rows) == _BATCH

    def _advanced(self) -> None:
        """Wake those waiting for the applied position (:meth:`caught_up`)."""
        self._progress.set()
        self._progress = trio.Event()

    async def _apply(self, row: repo.StreamRow) -> None:
        batch: list[outbox.Entry] = []
        for entry in row.entries:
            if isinstance(entry, outbox.Change) and entry.kind == "invalidate":
                self._deliver(row.position, batch)
                batch = []
                # the committing process too: a reload it started before its
                # own commit may have read the store as it was before
                await self._invalidate(*entry.args)
            else:
                batch.append(entry)
        self._deliver(row.position, batch)

    def _deliver(self, position: int, entries: list[outbox.Entry]) -> None:
        self._broker.delivering = position
        try:
            self._broker.apply(entries)
        finally:
            self._broker.delivering = None

    async def _invalidate(self, cache: str, key: str) -> None:
        for handler in self._invalidators.get(cache, ()):
            with trio.move_on_after(self.keep_ms / 2000):
                await retrying(f"reloading {cache} after it changed", partial(handler, key))
                continue
            # the store was away for long: rows may be pruned meanwhile too
            self._must_resync = True

    async def caught_up(self, position: int) -> None:
        """Wait until the stream has been applied up to *position* here (or
        the bus stopped)."""
        while self.position < position and self._running:
            await self._progress.wait()

    # notifications ------------------------------------------------------------

    async def _listen(self) -> None:
        backoff = Backoff(0.2, 5.0)
        while True:
            try:
                async with Listener(self._db.url, (STREAM_CHANNEL, LIVE_CHANNEL)) as listener:
                    backoff.reset()
                    self._db.faults.cleared(STORE_UNAVAILABLE, source=_LISTEN)
                    self.wake()  # whatever was missed while not listening
                    while True:
                        for note in await listener.wait():
                            if note.channel == STREAM_CHANNEL:
                                if note.payload.isdigit():
                                    self.known = max(self.known, int(note.payload))
                                self.wake()
                            else:
                                self._received_live(note.payload)
            except Unavailable as exc:
                delay = backoff.next()
                self._store_failed(exc, _LISTEN)
                log.debug(
                    "listening for the cluster's commits failed (%s): again in %.1fs", exc, delay
                )
                await trio.sleep(delay)

    def _queue_live(self, event: Event) -> None:
        self._live.append(event)
        self._live_ready.set()

    async def _send_live(self) -> None:
        notifier = Notifier(self._db.url)
        try:
            while True:
                await self._live_ready.wait()
                self._live_ready = trio.Event()
                events, self._live = self._live, []
                payloads = _payloads(self.process_id, events)
                try:
                    await notifier.notify(LIVE_CHANNEL, payloads)
                except Unavailable as exc:
                    # live events are at most once: dropped, not retried; the
                    # server is away (a new connection each time): any success ends it
                    self._store_failed(exc, "")
                    log.debug("%d live event(s) not sent to other processes: %s", len(events), exc)
        finally:
            await notifier.aclose()

    def _received_live(self, payload: str) -> None:
        origin, _, body = payload.partition("\n")
        if origin == self.process_id:
            return
        try:
            entries = outbox.decode(body)
        except (ValueError, KeyError, TypeError):
            log.exception("a malformed live event from process %s", origin)
            return
        for entry in entries:
            if isinstance(entry, outbox.Publish):
                self._broker.publish(entry.event)

    async def _prune(self) -> None:
        while True:
            await trio.sleep(self.keep_ms / 10_000)
            before = now_ms() - self.keep_ms
            try:
                await self._db.write(partial(repo.prune_stream, before=before))
            except Unavailable as exc:
                self._store_failed(exc, WRITE)
                log.debug("pruning the cluster stream failed: %s", exc)


def _payloads(origin: str, events: list[Event]) -> list[str]:
    """*events* as notification payloads of at most :data:`MAX_PAYLOAD` bytes
    each (an event too large alone is dropped: live events are small)."""
    payloads: list[str] = []
    head = f"{origin}\n["
    parts: list[str] = []
    size = len(head.encode()) + 1
    for event in events:
        part = outbox.encode([outbox.Publish(event)])[1:-1]
        cost = len(part.encode()) + 1
        if len(head.encode()) + cost + 1 > MAX_PAYLOAD:
            log.warning("a live event too large to send to other processes was dropped")
            continue
        if size + cost > MAX_PAYLOAD:
            payloads.append(head + ",".join(parts) + "]")
            parts, size = [], len(head.encode()) + 1
        parts.append(part)
        size += cost
    if parts:
        payloads.append(head + ",".join(parts) + "]")
    return payloads
