"""Presence: who is online, and ``presence`` events when that changes.

A participant is online while it holds at least one open WebSocket session or
waiting long-poll (:meth:`Presence.attached`). When its last one closes and it
does not come back within a short grace period (so a bot polling in a loop, or
a client reconnecting, does not flap), ``lastSeen`` is written and
``presence`` with ``online: false`` is published.

Alone (SQLite, one process), sessions are counted in memory and the events
published at once. With several processes on one PostgreSQL database
(``docs/decisions/0038-presence-across-processes.md``) presence is the union
over processes:

- each process has a row in ``presence_sessions`` per participant it holds
  sessions for (written when its first session opens, deleted when the
  grace period after its last one ends), and the transition of the mesh-wide
  "any row" is decided in the same transaction, which records the
  ``presence`` event in the outbox: it reaches every process once, in stream
  order (``store/presence.py``);
- who is online (:meth:`Presence.is_online`, :meth:`Presence.online`,
  :meth:`Presence.mark`) is, on every process, the set those events build,
  loaded from the table at start and checked against it periodically;
- each process beats its ``cluster_processes`` row every
  :attr:`Presence.beat_interval` seconds; the first live process deletes the
  rows of one whose beat is older than :attr:`Presence.process_timeout` (a
  ``kill -9``) and announces offline whoever has none left.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from functools import partial

import trio
from sqlalchemy.engine import Connection

from ..broker import Broker
from ..errors import Unavailable
from ..events import Event, Relayed
from ..events import Presence as PresenceEvent
from ..faults import KnownFault
from ..records import Participant, now_ms
from ..retry import retrying
from ..store import Database
from ..store import accounts as accounts_repo
from ..store import presence as repo
from ..store.database import StoreFault

__all__ = ["Presence"]

log = logging.getLogger(__name__)

#: how long a stopping process tries to remove its rows (others reap them anyway)
_LEAVE_TIMEOUT = 5.0
#: participants claimed or released in one write at most
_TOGETHER = 500
#: seconds a release waits for others, so that a burst is written together
_RELEASE_GATHER = 0.1


class _Attached:
    """:meth:`Presence.attached`: small, as every session holds one."""

    __slots__ = ("_participant_id", "_presence")

    def __init__(self, presence: Presence, participant_id: str) -> None:
        self._presence = presence
        self._participant_id = participant_id

    async def __aenter__(self) -> None:
        await self._presence._attach(self._participant_id)

    async def __aexit__(self, *exc: object) -> None:
        await self._presence._detach(self._participant_id)


@dataclass(eq=False, slots=True)
class _Batch:
    keys: list[str] = field(default_factory=list)
    done: trio.Event = field(default_factory=trio.Event)
    error: Exception | None = None
    #: its writer's task was cancelled: the others join again
    abandoned: bool = False


def _afresh(error: Exception) -> Exception:
    """*error* for one caller of a batch, as an object of its own (one
    raised in several tasks would have their tracebacks written over); not
    an :class:`Unavailable` if it was none (a bug is not tried again)."""
    if isinstance(error, StoreFault):
        return StoreFault(error.fault_kind)
    if isinstance(error, Unavailable):
        return Unavailable(error.message, error.code)
    return RuntimeError("writing a batch of presence rows failed")


class _Together:
    """Keys joined while a write is under way go together in the next one.

    The first key of a batch makes its caller the batch's writer: it waits
    for the write before (one at a time, in order), closes the batch to new
    keys and writes it; the batch's other callers wait for it, and its
    failure is theirs. A caller writes at most its own batch. If the
    writer's task is cancelled, the others join again (the first of them
    writes); a write repeated after it committed changes nothing.

    Args:
        write: writes one batch of keys (at most :data:`_TOGETHER`).
        gather: seconds a writer waits, once its turn came, for more keys.
    """

    def __init__(self, write: Callable[[list[str]], Awaitable[None]], gather: float = 0.0) -> None:
        self._write = write
        self._gather = gather
        self._open: _Batch | None = None  # the batch taking keys
        self._turn = trio.Lock()  # (fair: batches are written in order)

    async def join(self, key: str) -> None:
        """Return once a write with *key* committed.

        Raises:
            Unavailable: that write failed (each caller gets its own error).
        """
        while True:
            batch = self._open
            if batch is None or len(batch.keys) >= _TOGETHER:
                batch = self._open = _Batch()
                batch.keys.append(key)
                await self._write_batch(batch)
                break
            batch.keys.append(key)
            try:
                await batch.done.wait()
            except trio.Cancelled:
                # the caller's lock goes with it: its key must not be written
                # after it (a release could come first), so it leaves a batch
                # not begun, and waits for one under way
                if self._open is batch:
                    batch.keys.remove(key)
                else:
                    with trio.CancelScope(shield=True):
                        await batch.done.wait()
                raise
            if not batch.abandoned:
                break
        if batch.error is not None:
            raise _afresh(batch.error) from batch.error

    async def _write_batch(self, batch: _Batch) -> None:
        written = False
        try:
            async with self._turn:
                if self._gather:
                    await trio.sleep(self._gather)
                if self._open is batch:
                    self._open = None  # keys joining from now on: the next batch
                try:
                    await self._write(batch.keys)
                except Exception as exc:
                    batch.error = exc
                written = True
        finally:
            if self._open is batch:
                self._open = None
            batch.abandoned = not written  # (cancelled)
            batch.done.set()


class Presence:
    """Who is online; one per process.

    Args:
        db: the store.
        broker: where ``presence`` events go (and, clustered, come from).
        grace: seconds after the last session closes before offline.
        process_id: this process among those serving the mesh; given (or
            the store's ``stream_origin`` set, as on PostgreSQL), presence
            is kept across processes in the store.
        beat_interval: seconds between heartbeats (clustered).
        process_timeout: a process that has not beaten for this long is
            dead: its sessions go offline (clustered).
        resync_interval: seconds between checks of the online set against
            the store (clustered).
    """

    def __init__(
        self,
        db: Database,
        broker: Broker,
        grace: float = 1.0,
        *,
        process_id: str | None = None,
        beat_interval: float = 2.0,
        process_timeout: float = 8.0,
        resync_interval: float = 60.0,
    ) -> None:
        self._db = db
        self._broker = broker
        self._grace = grace
        self._counts: collections.Counter[str] = collections.Counter()
        self._nursery: trio.Nursery | None = None
        #: participants counted online that have not been announced offline yet
        #: (clustered: anywhere in the mesh, as the presence events tell)
        self._announced: set[str] = set()
        #: counts changes to who is online (caches of it compare this)
        self.version = 0
        self.process_id = process_id or getattr(db, "stream_origin", None)
        self.beat_interval = beat_interval
        self.process_timeout = process_timeout
        self.resync_interval = resync_interval
        #: clustered: participants this process has a row for
        self._held: set[str] = set()
        self._locks: dict[str, trio.Lock] = {}
        #: clustered: presence events seen, and when each participant's last was
        self._epoch = 0
        self._touched: dict[str, int] = {}
        self._started_at = now_ms()
        self._claims = _Together(self._claim_all)
        # (grace periods end one by one as the sessions closed: gathered for
        # a moment, a burst is one write; offline is not in a hurry)
        self._releases = _Together(self._release_all, gather=_RELEASE_GATHER)
        if self.process_id is not None:
            broker.observe(self._observed)

    @property
    def clustered(self) -> bool:
        return self.process_id is not None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the grace-period timers; without it, offline is announced at once.

        Clustered, also: beat first and load who is online (retrying while
        the store is unavailable) before reporting started; then beat, reap
        dead processes and check the online set periodically. On the way
        out, shielded and bounded, this process's rows are removed and its
        participants announced offline (others would after the timeout).
        """
        async with trio.open_nursery() as nursery:
            if self.process_id is not None:
                await retrying("joining the mesh's presence", self._beat)
                await retrying("loading who is online", self._resync)
                nursery.start_soon(self._beat_loop)
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None
                if self.process_id is not None:
                    with trio.CancelScope(shield=True), trio.move_on_after(_LEAVE_TIMEOUT):
                        await self._leave()

    def is_online(self, participant_id: str) -> bool:
        """Online as announced: true from the ``online`` event until the
        ``online: false`` one (so lists agree with the event stream)."""
        return participant_id in self._announced

    def online(self) -> frozenset[str]:
        """Everyone online now, as announced (see :meth:`is_online`)."""
        return frozenset(self._announced)

    def mark(self, participant: Participant) -> Participant:
        """The participant with its live ``online`` flag."""
        online = participant.participant_id in self._announced
        return participant if participant.online == online else replace(participant, online=online)

    def _connected(self, participant_id: str) -> bool:
        return self._counts.get(participant_id, 0) > 0

    def attached(self, participant_id: str) -> _Attached:
        """Count the participant online for the duration of the block
        (``async with presence.attached(participant_id):``).

        Clustered, the first session of a participant on this process waits
        for its row to be written (so this process sees it online once in);
        if the store is unavailable, the block runs anyway and the row is
        written in the background as soon as it can be.

        The offline bookkeeping on exit is shielded: it completes even when
        the block was cancelled.
        """
        return _Attached(self, participant_id)

    async def _attach(self, participant_id: str) -> None:
        self._counts[participant_id] += 1
        try:
            if self.process_id is None:
                if participant_id not in self._announced:
                    self._announced.add(participant_id)
                    self.version += 1
                    self._broker.publish_live(
                        PresenceEvent(
                            None, participant_id=participant_id, online=True, last_seen=now_ms()
                        )
                    )
            elif self._counts[participant_id] == 1 or participant_id not in self._held:
                # (its first session here: a release of its row may be under
                # way, and _claim waits for it)
                try:
                    await self._claim(participant_id)
                except Unavailable as exc:
                    log.warning("recording %s online failed: %s", participant_id, exc)
                    if self._nursery is not None:
                        self._nursery.start_soon(self._claim_retrying, participant_id)
        except BaseException:
            await self._detach(participant_id)
            raise

    async def _detach(self, participant_id: str) -> None:
        self._counts[participant_id] -= 1
        if self._counts[participant_id] <= 0:
            del self._counts[participant_id]
            if self._nursery is not None:
                self._nursery.start_soon(self._offline_after_grace, participant_id)
            else:
                # the node is stopping: nobody is left to tell if the store is gone
                with trio.CancelScope(shield=True), contextlib.suppress(Unavailable):
                    await self._went_offline(participant_id)

    async def _offline_after_grace(self, participant_id: str) -> None:
        await trio.sleep(self._grace)
        if not self._connected(participant_id):
            await retrying(
                f"recording {participant_id} offline", partial(self._went_offline, participant_id)
            )

    async def _went_offline(self, participant_id: str) -> None:
        if self.process_id is not None:
            await self._release(participant_id)
            return
        at = now_ms()

        def publish(_: None) -> None:
            if not self._connected(participant_id):  # not back online meanwhile
                self._announced.discard(participant_id)
                self.version += 1
                self._broker.publish_live(
                    PresenceEvent(None, participant_id=participant_id, online=False, last_seen=at)
                )

        await self._db.write(
            lambda conn: accounts_repo.set_last_seen(conn, {participant_id: at}), then=publish
        )

    # clustered ---------------------------------------------------------------

    def _lock(self, participant_id: str) -> trio.Lock:
        lock = self._locks.get(participant_id)
        if lock is None:
            lock = self._locks[participant_id] = trio.Lock()
        return lock

    def _forget_lock(self, participant_id: str, lock: trio.Lock) -> None:
        idle = not self._connected(participant_id) and participant_id not in self._held
        if idle and lock.statistics().tasks_waiting == 0:
            self._locks.pop(participant_id, None)

    def _seen(self, participant_id: str, online: bool) -> None:
        self._epoch += 1
        self._touched[participant_id] = self._epoch
        self.version += 1
        if online:
            self._announced.add(participant_id)
        else:
            self._announced.discard(participant_id)

    def _observed(self, event: Event) -> None:
        """Every event the broker publishes: the presence ones keep the set."""
        if isinstance(event, PresenceEvent):
            self._seen(event.participant_id, event.online)
        elif isinstance(event, Relayed) and event.kind == "presence":
            data = event.to_json()
            self._seen(str(data["participantId"]), bool(data["online"]))

    async def _claim(self, participant_id: str) -> None:
        """Write this process's row for *participant_id* if it has sessions
        and no row (its first session here, or a claim that failed)."""
        lock = self._lock(participant_id)
        async with lock:
            if not self._connected(participant_id) or participant_id in self._held:
                return
            await self._claims.join(participant_id)

    async def _claim_all(self, participant_ids: list[str]) -> None:
        """One write claiming the rows of *participant_ids* (each caller holds
        its participant's lock): a burst of sessions opening is one unit."""
        assert self.process_id is not None
        process_id = self.process_id
        sessions = {p: max(1, self._counts.get(p, 0)) for p in participant_ids}

        def claimed(_: list[str]) -> None:
            for participant_id in participant_ids:
                self._held.add(participant_id)
                self._seen(participant_id, True)  # some process holds it now

        await self._db.write(
            lambda conn: repo.claim(conn, process_id, sessions, now_ms()), then=claimed
        )

    async def _claim_retrying(self, participant_id: str) -> None:
        await retrying(f"recording {participant_id} online", partial(self._claim, participant_id))

    async def _release(self, participant_id: str) -> None:
        """Delete this process's row for *participant_id* if it has no
        session here (also if it has no row on record: a claim that was
        cancelled may have committed)."""
        lock = self._lock(participant_id)
        async with lock:
            if self._connected(participant_id):  # back meanwhile
                return
            await self._releases.join(participant_id)
            self._forget_lock(participant_id, lock)

    async def _release_all(self, participant_ids: list[str]) -> None:
        """One write deleting the rows of *participant_ids* (each caller holds
        its participant's lock): a burst of sessions ending (a proxy
        restarted, a class left) is one unit, not one each, so the sends
        queued behind it wait for one."""
        assert self.process_id is not None
        process_id = self.process_id
        # (back meanwhile: its claim waits for its caller's lock, and the row stays)
        participant_ids = [p for p in participant_ids if not self._connected(p)]
        if not participant_ids:
            return

        def released(offline: list[str]) -> None:
            for participant_id in participant_ids:
                self._held.discard(participant_id)
            for participant_id in offline:
                self._seen(participant_id, False)

        await self._db.write(
            lambda conn: repo.release(conn, process_id, participant_ids, now_ms()),
            then=released,
        )

    async def _beat(self) -> None:
        """One heartbeat: this process's row, its sessions' rows again if it
        was taken for dead, and the dead processes reaped."""
        assert self.process_id is not None
        process_id, held = self.process_id, sorted(self._held)
        host, pid, started_at = socket.gethostname(), os.getpid(), self._started_at
        timeout_ms = int(self.process_timeout * 1000)

        def unit(conn: Connection) -> None:
            at = now_ms()
            repo.beat(
                conn,
                process_id,
                host=host,
                pid=pid,
                started_at=started_at,
                at=at,
                held=held,
            )
            repo.reap(conn, process_id, at=at, timeout_ms=timeout_ms)

        await self._db.write(unit)

    async def _beat_loop(self) -> None:
        next_resync = trio.current_time() + self.resync_interval
        while True:
            await trio.sleep(self.beat_interval)
            try:
                await self._beat()
                if trio.current_time() >= next_resync:
                    next_resync = trio.current_time() + self.resync_interval
                    await self._resync()
            except Unavailable as exc:  # the store's failures are logged once, as a fault
                level = logging.DEBUG if isinstance(exc, KnownFault) else logging.WARNING
                log.log(level, "the presence heartbeat failed: %s", exc)

    async def _resync(self) -> None:
        """Correct the online set from the table, except for participants a
        presence event was seen for since the read began (those are newer)."""
        began = self._epoch
        rows = await self._db.read(repo.online_participants)
        for participant_id in rows ^ self._announced:
            if self._touched.get(participant_id, 0) <= began:
                self.version += 1
                if participant_id in rows:
                    self._announced.add(participant_id)
                else:
                    self._announced.discard(participant_id)
        self._touched = {p: e for p, e in self._touched.items() if e > began}

    async def _leave(self) -> None:
        assert self.process_id is not None
        process_id = self.process_id
        try:
            await self._db.write(lambda conn: repo.leave(conn, process_id, now_ms()))
        except Unavailable as exc:
            log.warning("removing this process's presence failed (others will): %s", exc)
        self._held.clear()
