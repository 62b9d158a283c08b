"""The bus: every process of a mesh delivers every commit, in one order.

With several processes on one PostgreSQL database (``docs/decisions/
0034-cluster.md``, ``0080-concurrent-writers.md``) write transactions of
all processes commit concurrently. Each that publishes something
(``store/outbox.py``) writes its entries to the ``cluster_stream`` table at
its *block* (``store/blocks.py``: every cursor position it took is in that
block) and sends them as notifications, which PostgreSQL delivers at commit
in commit order. Each carries, besides, the block at or below which every
other transaction's block was final when it was sent. Each process runs a
bus that

- *hears* the notifications (``LISTEN`` on a connection whose socket Trio
  waits on, ``store/listen.py``) and keeps what they carry until it may
  apply it: a posted message travels with its row, so following the
  stream costs a decode, not a query;
- *applies* blocks in block order, never past one that may still commit:
  a block it has not heard of is passed only once it is known final — by
  the bound a later notification carries (its notification would have come
  first), or by a read of the table. Events go to its own subscribers (the
  broker), routing changes to its mirror, invalidations to its caches
  (handlers registered with :meth:`Bus.on_invalidate`, awaited in order,
  so an event is never delivered on a cache older than the change before
  it);
- *reads the table* only to fill a gap: after (re)connecting the listener
  (what committed before ``LISTEN`` was not heard), for a commit too large
  for notifications, when a block stays unknown for :data:`_HOLE_WAIT`
  (a transaction rolled back after taking a block: nobody will tell), and
  every :attr:`poll_interval`;
- carries *live* events that are not stored (typing, presence) between
  processes as ``NOTIFY`` payloads: at most once, which is what they are.

The process's own events go the same way as everyone else's, so every
process delivers one order, the blocks'. Rows are pruned after
:attr:`keep_ms`; a process that cannot follow the stream for longer than
half of that ends its sessions (they resume from their cursors, losing
nothing).

While the store cannot be read or listened to, that is one fault
(``faults.STORE_UNAVAILABLE``: logged when it starts and when it ends,
counted meanwhile), not a line per retry. A read of the stream that works
ends only what failed reads started, a new ``LISTEN`` connection what the
listening started (a failed write's fault ends with a commit). How long the process has been
behind the stream is :meth:`Bus.behind_for` (readiness reads it).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from functools import partial

import trio

from ..broker import Broker
from ..ends import EndReason
from ..errors import Overloaded, Unavailable
from ..events import Event
from ..faults import STORE_UNAVAILABLE, KnownFault
from ..records import now_ms
from ..retry import Backoff, describe, retrying
from ..store import Database, outbox
from ..store import cluster as repo
from ..store.blocks import note_final
from ..store.database import READ, STREAM_CHANNEL, WRITE
from ..store.listen import MAX_PAYLOAD, Listener, Notifier

__all__ = ["LIVE_CHANNEL", "Bus"]

log = logging.getLogger(__name__)

#: the channel of live (unstored) events
LIVE_CHANNEL = "mesh_live"
#: stream rows read at once (each up to a write batch's messages)
_BATCH = 64
#: how long a block may stay unheard of, with later ones waiting, before
#: the table is read to learn whether it is final (seconds): a transaction
#: that took a block and rolled back tells nobody
_HOLE_WAIT = 0.05
#: the source of the listening connection's failures (``faults.Faults``)
_LISTEN = "listen"
#: the horizon while not listening: only the table tells what is final
_NOT_LISTENING = 1 << 62
#: blocks heard of and kept in memory, waiting behind one not final, at most
#: (and their notifications' bytes): the rest is read from the table later
_MAX_PENDING = 4096
_MAX_PENDING_BYTES = 64 * 1024 * 1024


class Bus:
    """One per process, running in the node's nursery on PostgreSQL.

    The bus, the store and the broker need each other: the store asks the
    bus to wait until a commit is applied here and tells it what each
    transaction records (:class:`~quart_mesh.store.database.StreamApplier`);
    the broker asks it whether it follows the stream, where its head is, and
    hands it local commits and live events
    (:class:`~quart_mesh.broker.StreamFollower`); and the bus reads the
    store and delivers to the broker. The cycle is broken here, once: the
    bus is made first, knowing only its process; the store and the broker
    take it as a constructor argument; then it is given them with
    :meth:`attach`, before :meth:`prepare` or :meth:`run` (``node.py``
    wires the three in that order). So no component sets another's
    attributes, and whether the bus follows the stream is its own state
    (:attr:`following`), which the others read.

    Args:
        process_id: this process among those serving the mesh.
        poll_interval: seconds between reads of the table when quiet.
        keep_ms: how long the stream's rows are kept (ms).
    """

    def __init__(
        self,
        process_id: str,
        *,
        poll_interval: float = 1.0,
        keep_ms: int = 10 * 60_000,
    ) -> None:
        #: the store it reads and the broker it delivers to (:meth:`attach`)
        self._attached: tuple[Database, Broker] | None = None
        self.process_id = process_id
        self.poll_interval = poll_interval
        self.keep_ms = keep_ms
        #: the block up to which the stream is applied here (every block
        #: at or below it applied, or final and empty)
        self.position = 0
        #: the newest block heard of (notifications or the table)
        self.known = 0
        #: heard of and not applied yet: block -> its row
        self._pending: dict[int, repo.StreamRow] = {}
        #: notifications of a block still to come (block -> chunks so far)
        self._partial: dict[int, list[str]] = {}
        #: the size of what notifications brought to :attr:`_pending`, by
        #: block, and in all (bounded: :data:`_MAX_PENDING_BYTES`)
        self._sizes: dict[int, int] = {}
        self._held_bytes = 0
        #: blocks too large for notifications, to read from the table
        self._fetch: set[int] = set()
        #: what this process's own transactions recorded, by block: their
        #: notifications need not be decoded (written from the writer's
        #: thread; a block whose transaction rolled back is dropped once passed)
        self._own: dict[int, list[outbox.Entry]] = {}
        #: every block at or below it was read from the table or is empty
        self._read_to = 0
        #: the highest bound a notification carried: a block at or below it
        #: not heard of is final and empty, if it is above :attr:`_horizon`
        self._told_to = 0
        #: the newest block taken before the listener listened: one at or
        #: below it may have committed while nobody here listened
        self._horizon = _NOT_LISTENING
        #: the table must be read (the listener (re)connected, a gap stayed)
        self._must_read = True
        #: when the first block was found waiting behind an unknown one
        self._hole_since: float | None = None
        self._wakeup = trio.Event()
        self._live: list[Event] = []
        self._live_ready = trio.Event()
        self._invalidators: dict[str, list[Callable[[str], Awaitable[object]]]] = {}
        self._resyncers: list[Callable[[], Awaitable[object]]] = []
        self._prepared = False
        #: when the stream was last applied to its end (Trio's clock)
        self._caught_up_at = 0.0
        #: part of the stream could not be applied: start over from its head
        self._must_resync = False
        #: set (and replaced) each time the applied position moves
        self._progress = trio.Event()
        self._running = False

    def attach(self, db: Database, broker: Broker) -> None:
        """Give the bus the store it reads and the broker it delivers to,
        each built with this bus (``bus=``): once, before :meth:`prepare`
        or :meth:`run`.

        Raises:
            ValueError: *db* or *broker* was built without this bus.
            RuntimeError: it was attached already.
        """
        if db.bus is not self or broker.bus is not self:
            raise ValueError("the store and the broker must be built with this bus (bus=)")
        if self._attached is not None:
            raise RuntimeError("the bus is attached already")
        self._attached = (db, broker)

    @property
    def _db(self) -> Database:
        if self._attached is None:
            raise RuntimeError("the bus has no store: Bus.attach first")
        return self._attached[0]

    @property
    def _broker(self) -> Broker:
        if self._attached is None:
            raise RuntimeError("the bus has no broker: Bus.attach first")
        return self._attached[1]

    @property
    def following(self) -> bool:
        """Whether the bus follows the stream: from :meth:`prepare` (which
        took its place in it) until :meth:`run` ends. Meanwhile committed
        events reach this process's sessions through the bus only
        (``Broker.committed`` leaves them to it)."""
        return self._prepared

    def local_commit(self) -> None:
        """The broker, after this process committed something: while the bus
        runs, read the stream at once."""
        if self._running:
            self.wake()

    def send_live(self, event: Event) -> None:
        """The broker: carry *event* (not stored) to the other processes,
        while the bus runs (at most once: dropped otherwise)."""
        if self._running:
            self._live.append(event)
            self._live_ready.set()

    def on_invalidate(self, cache: str, handler: Callable[[str], Awaitable[object]]) -> None:
        """Await ``handler(key)`` when a process (this one too) changes *cache*."""
        self._invalidators.setdefault(cache, []).append(handler)

    def wake(self) -> None:
        self._wakeup.set()

    @property
    def listening(self) -> bool:
        """Whether commits are heard of as they happen (the ``LISTEN``
        connection is up); if not, the table is read every poll."""
        return self._horizon != _NOT_LISTENING

    def head(self) -> int:
        """The block up to which the stream is applied here: a subscription
        made now receives the events after it. (Not the newest block heard
        of: one below that may still commit, after the subscription.)"""
        return self.position

    def behind_for(self) -> float:
        """0.0 when this process has applied every block it heard of, else
        the seconds since it last had (readiness: a process whose bus is
        stuck delivers nothing others commit)."""
        if not self._running or self.position >= self.known:
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
        """Take the block at or below which every block is final as the place
        to start from. Call before loading what the process keeps in memory
        (``Node``): what commits after this is applied on top of it, nothing
        in between is missed. From here on, events reach this process's
        sessions through :meth:`run` only.

        Raises:
            Unavailable: the store cannot be read.
        """
        start = await self._db.read(repo.head_position)
        self.position = self.known = self._read_to = self._told_to = start
        self._pending.clear()
        self._partial.clear()
        self._fetch.clear()
        self._sizes.clear()
        self._held_bytes = 0
        self._must_read = True
        self._prepared = True
        self._caught_up_at = trio.current_time()
        self._advanced()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Deliver the stream after the position :meth:`prepare` took (taking
        it now if it was not called), until cancelled."""
        if not self._prepared:
            await retrying("reading the cluster stream's head", self.prepare)
        self._running = True
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
            self._prepared = False

    async def _follow(self) -> None:
        backoff = Backoff(0.2, 5.0)
        while True:
            timeout = self.poll_interval
            if self._hole_since is not None:
                timeout = max(0.0, self._hole_since + _HOLE_WAIT - trio.current_time())
            with trio.move_on_after(timeout) as waited:
                await self._wakeup.wait()
            # a checkpoint: the listener may take notifications already
            # readable first (Trio does not promise the order), so commits
            # that land together tend to be applied together; no wait for
            # more (1 ms here was a fifth of a delivery's median latency:
            # docs/benchmarks.md)
            await trio.lowlevel.checkpoint()
            self._wakeup = trio.Event()
            if waited.cancelled_caught:
                # quiet, or a block stayed unknown: what is final, the table says
                self._must_read = True
            if self._must_resync or trio.current_time() - self._caught_up_at > self.keep_ms / 2000:
                # rows this process has not applied may be pruned by now
                await retrying("starting over from the cluster stream's head", self._resync)
                self._must_resync = False
            try:
                await self._catch_up()
            except Unavailable as exc:
                delay = backoff.next()
                self._store_failed(exc, READ)
                log.debug("reading the cluster stream failed (%s): again in %.1fs", exc, delay)
                await trio.sleep(delay)
                self._wakeup.set()
            else:
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
        self._broker.disconnect_all(EndReason.UNAVAILABLE)

    async def _catch_up(self) -> None:
        """Read what the table must tell (rows too large for notifications,
        a gap), and apply every block that may be applied."""
        if self._fetch:
            wanted = sorted(self._fetch)
            rows = await self._db.read(partial(repo.read_rows, positions=wanted))
            for row in rows:
                self._heard(row)
            self._fetch.difference_update(wanted)
            if len(rows) < len(wanted) and min(wanted) > self.position:
                # told of, and gone from the table (pruned: this process is far
                # behind): what it carried is unknown, start over
                log.error("stream rows told of are not in the table: starting over")
                self._must_resync = True
        if self._must_read:
            self._must_read = False
            # the next read for a block still unknown comes _HOLE_WAIT later
            self._hole_since = trio.current_time()
            while True:
                after = max(self._read_to, self.position)
                rows, read_to = await self._db.read(
                    partial(repo.final_rows, after=after, limit=_BATCH)
                )
                for row in rows:
                    self._heard(row)
                self._read_to = max(self._read_to, read_to)
                await self._apply_ready()
                if len(rows) < _BATCH:
                    break
            # what failed reads started (not a failed write's: a commit ends that)
            self._db.faults.cleared(STORE_UNAVAILABLE, source=READ)
        await self._apply_ready()

    def _heard(self, row: repo.StreamRow) -> None:
        if row.position > self.position:
            self._pending.setdefault(row.position, row)
            self.known = max(self.known, row.position)

    def _take(self, block: int) -> repo.StreamRow:
        """The row of *block*, no longer kept."""
        self._held_bytes -= self._sizes.pop(block, 0)
        return self._pending.pop(block)

    def _passable_to(self) -> int:
        """How far blocks not heard of may be passed: those read from the
        table, and above the horizon those a notification's bound covers."""
        reach = max(self.position, self._read_to)
        if reach >= self._horizon:
            reach = max(reach, self._told_to)
        return reach

    async def _apply_ready(self) -> None:
        """Apply the blocks that may be applied, in order: the next one heard
        of once every block before it is applied or final."""
        moved = False
        while True:
            # notifications of a block already applied (read from the table
            # meanwhile) are of no use any more
            for block in [
                b for b in itertools.chain(self._partial, self._fetch) if b <= self.position
            ]:
                self._partial.pop(block, None)
                self._fetch.discard(block)
            if self._own:
                # (a copy of the keys first: the writer's thread adds to it)
                for block in [b for b in list(self._own) if b <= self.position]:
                    self._own.pop(block, None)
            waiting = min(self._pending, default=None)
            blocked = min(itertools.chain(self._partial, self._fetch), default=None)
            if waiting is not None and waiting <= self.position:
                self._take(waiting)  # heard twice (the table and a notification)
                continue
            if waiting is not None and waiting == self.position + 1:
                row = self._take(waiting)
                if row.unreadable:
                    # written by another version of the node, or damaged: what
                    # it carried is unknown, so everything is read again after it
                    log.error("stream row %d could not be read: starting over", row.position)
                    self._must_resync = True
                else:
                    await self._apply(row)
                self.position = waiting
                moved = True
                continue
            # blocks not heard of up to the next one heard of (or one whose
            # notifications are incomplete, or to be read) pass once final
            bound = self._passable_to()
            for heard in (waiting, blocked):
                if heard is not None:
                    bound = min(bound, heard - 1)
            if bound > self.position:
                self.position = bound
                moved = True
                continue
            break
        now = trio.current_time()
        if moved:
            note_final(self._db.engine, self.position)
            self._advanced()
            self._caught_up_at = now  # behind, perhaps, but moving
        if self.position >= self.known:
            self._caught_up_at = now
            self._hole_since = None
        elif moved or self._hole_since is None:
            # blocks wait behind one not heard of: the table is read if no
            # notification makes it known within _HOLE_WAIT (``_follow``)
            self._hole_since = now

    def _advanced(self) -> None:
        """Wake those waiting for the applied position (:meth:`caught_up`)."""
        self._progress.set()
        self._progress = trio.Event()

    async def _apply(self, row: repo.StreamRow) -> None:
        batch: list[outbox.Entry] = []
        for entry in row.entries:
            if isinstance(entry, outbox.Invalidate):
                self._deliver(row.position, batch)
                batch = []
                # the committing process too: a reload it started before its
                # own commit may have read the store as it was before
                await self._invalidate(entry.cache, entry.key)
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
                    # listening now: a block taken from here on is heard of when
                    # it commits; one taken before may have been told to nobody
                    horizon = await self._db.read(repo.last_block)
                    backoff.reset()
                    self._db.faults.cleared(STORE_UNAVAILABLE, source=_LISTEN)
                    self._horizon = horizon
                    self._must_read = True  # whatever was missed while not listening
                    self.wake()
                    while True:
                        for note in await listener.wait():
                            if note.channel == STREAM_CHANNEL:
                                self._told(note.payload)
                            else:
                                self._received_live(note.payload)
            except Unavailable as exc:
                # chunks of a commit half heard are read from the table instead
                self._partial.clear()
                self._horizon = _NOT_LISTENING
                delay = backoff.next()
                self._store_failed(exc, _LISTEN)
                log.debug(
                    "listening for the cluster's commits failed (%s): again in %.1fs", exc, delay
                )
                await trio.sleep(delay)

    def recorded(self, block: int, entries: list[outbox.Entry]) -> None:
        """The store's writer (in its thread), while the bus runs: this
        process's transaction about to commit at *block* recorded *entries*."""
        if self._running:
            self._own[block] = entries

    def _told(self, payload: str) -> None:
        """A commit's notification: ``<block> <final> <n> <count>`` and a line
        with a run of its entries (``*``: read the row from the table)."""
        head, _, body = payload.partition("\n")
        try:
            block, final, n, count = (int(part) for part in head.split(" "))
        except ValueError:
            log.error("a malformed notification on the stream's channel: reading the table")
            self._must_read = True
            self.wake()
            return
        self.known = max(self.known, block)
        self._told_to = max(self._told_to, final)
        if block > self.position and block not in self._pending:
            if (
                len(self._pending) + len(self._partial) >= _MAX_PENDING
                or self._held_bytes >= _MAX_PENDING_BYTES
            ) and block not in self._partial:
                # a block far behind holds the rest back (a writer stuck in a
                # transaction): keep no more in memory; the table has them, and
                # it alone may say what up to here is final (a bound would pass
                # this one as never told)
                self._horizon = max(self._horizon, block)
                self.wake()
                return
            own = self._own.pop(block, None)
            if own is not None:
                # this process's own commit: what it recorded, not decoded again
                self._partial.pop(block, None)
                self._pending[block] = repo.StreamRow(block, self.process_id, own)
            elif body == "*":
                self._fetch.add(block)
            elif block in self._fetch:
                pass  # a chunk of it was missed: it is read from the table
            else:
                chunks = self._partial.get(block)
                if chunks is None:
                    if n != 1:  # its first chunk was not heard: read the table
                        self._fetch.add(block)
                        self.wake()
                        return
                    chunks = self._partial[block] = []
                if n != len(chunks) + 1:  # not the next chunk: read the table
                    del self._partial[block]
                    self._fetch.add(block)
                elif n == count:
                    del self._partial[block]
                    chunks.append(body)
                    self._pending[block] = _row(block, chunks)
                    self._sizes[block] = sum(len(chunk) for chunk in chunks)
                    self._held_bytes += self._sizes[block]
                else:
                    chunks.append(body)
        self.wake()

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


def _row(block: int, chunks: list[str]) -> repo.StreamRow:
    """The row a commit's notifications carried (*chunks*: JSON arrays of its
    entries, in order)."""
    entries: list[outbox.Entry] = []
    try:
        for chunk in chunks:
            entries.extend(outbox.decode(chunk))
    except (ValueError, KeyError, TypeError, AttributeError):
        log.exception("the notifications of block %d are not readable", block)
        return repo.StreamRow(block, "", [], unreadable=True)
    return repo.StreamRow(block, "", entries)


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
