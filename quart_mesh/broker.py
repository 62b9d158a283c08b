"""The broker: routes events from domain services to subscribers.

Routing is by room membership, which the broker mirrors in memory (loaded
from the store when it starts, then kept current by the services through
:meth:`Broker.join` / :meth:`Broker.leave` / :meth:`Broker.drop_room`). A
subscription belongs to one participant and receives the events of every
room that participant is in, including rooms joined after it subscribed.

Backpressure: :meth:`Broker.publish` never blocks and never awaits. Each
subscription has a bounded buffer; a subscription whose buffer is full when
an event arrives is *failed* as ``lagging`` (each reason a subscription
ends for, and what its owners do then, is in ``ends.py``: a session sends an
``error`` frame and disconnects; the client resumes from its cursor, losing
nothing, because messages are committed before they are published).

Ordering: services do not publish committed changes themselves; their
units of work record events and routing changes (``store/outbox.py``) and
the store hands them over after the commit (:meth:`Broker.committed`), so
events leave in commit order. With several processes on one database
(:attr:`Broker.clustered`), events are delivered by the bus instead, which
applies every process's commits in the order of their blocks
(``services/bus.py``, ``store/blocks.py``) and calls :meth:`Broker.apply`. Events that are not
stored (typing, a participant coming online) go through
:meth:`Broker.publish_live`.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

import trio

from .ends import ENDINGS, Ending, EndReason
from .events import DmRead, Event, Relayed
from .store.outbox import (
    Disconnect,
    DisconnectToken,
    DropParticipant,
    DropRoom,
    Entry,
    Invalidate,
    Join,
    Leave,
    Publish,
    Routing,
    SendTo,
)

__all__ = ["Broker", "DirectWriter", "Left", "Queued", "StreamFollower", "Subscription"]

log = logging.getLogger(__name__)

#: subscriptions the flusher writes before it lets other tasks run
_FLUSH_SLICE = 128

#: what a subscriber receives: the event (None for a frame of the owner's
#: own, such as ``auth_ok``) and its serialized frame
Queued = tuple[Event | None, str]


class Left(NamedTuple):
    """What a direct write left to the owner (:data:`DirectWriter`)."""

    #: the deliveries it did not write, oldest first (the owner writes them first)
    items: list[Queued]
    #: the socket owes the end of a frame it began: the owner must run to
    #: finish it even if nothing else is left
    owed: bool = False


#: writes a subscriber's deliveries at once, without waking its owner
#: (:meth:`Subscription.write_directly`): None if it wrote nothing, else
#: what it left to the owner
DirectWriter = Callable[[list[Queued]], Left | None]


class Subscription:
    """One subscriber's bounded inbox. Create with :meth:`Broker.subscribe`.

    The owner reads with :meth:`get_batch`; the broker and the owner itself
    (for direct replies such as ``auth_ok``) put with :meth:`push`.
    """

    __slots__ = (
        "__weakref__",
        "_direct",
        "_held",
        "_idle",
        "_items",
        "_marked",
        "_skip",
        "_space",
        "_waker",
        "_wakeup",
        "after",
        "broker",
        "capacity",
        "chat",
        "failed",
        "participant_id",
        "sending",
        "token_id",
    )

    def __init__(
        self, broker: Broker, participant_id: str, capacity: int, *, chat: bool = True
    ) -> None:
        self.broker = broker
        self.participant_id = participant_id
        self.capacity = capacity
        #: whether chat traffic is delivered (not to tool-only ``simple`` bots)
        self.chat = chat
        #: the id of the token the owner authenticated with, if any (a signed-out
        #: token ends its subscriptions: :meth:`Broker.disconnect_token`)
        self.token_id: str | None = None
        # a list, not a deque: an empty deque holds a block of 64 slots
        # (~0.7 KiB), and an idle subscription's inbox is nearly always empty
        self._items: list[Queued] = []
        self._held: collections.deque[Event] | None = None
        #: events already delivered another way (a resume's replay)
        self._skip: Callable[[Event], bool] | None = None
        #: the stream position this subscription began after (``services/bus.py``)
        self.after = broker.stream_head()
        self._wakeup = trio.Event()
        #: made only while the owner waits for room (:meth:`put`)
        self._space: trio.Event | None = None
        #: why the subscription ended, or None while live
        self.failed: EndReason | None = None
        #: see :meth:`write_directly`
        self._direct: DirectWriter | None = None
        #: the owner is waiting in :meth:`get_batch`, or has parked (:meth:`park`):
        #: nothing of its is in flight
        self._idle = False
        #: while parked: called, once, when the owner is wanted again
        self._waker: Callable[[], object] | None = None
        #: queued for the broker's flusher
        self._marked = False
        #: the owner has sends waiting for their commit: the flusher writes
        #: to it first (its echoes are what a pipelining client waits for)
        self.sending = False

    def __len__(self) -> int:
        return len(self._items)

    @property
    def ending(self) -> Ending | None:
        """What the subscription's end means to its owner (``ends.py``), or None while live."""
        return None if self.failed is None else ENDINGS[self.failed]

    def push(self, event: Event | None, frame: str) -> bool:
        """Queue a delivery; False (and the subscription fails) if it is full."""
        if self.failed is not None:
            return False
        if len(self._items) >= self.capacity:
            self.fail(EndReason.LAGGING)
            return False
        self._items.append((event, frame))
        if self._idle and self._direct is not None and self.broker.flushing:
            if not self._marked:  # written by the broker's flusher
                self._marked = True
                self.broker._mark(self)
        else:
            self._wake_owner()
        return True

    def _wake_owner(self) -> None:
        """Wake the owner: its task waiting in :meth:`get_batch`, or, if it
        parked, its waker."""
        self._wakeup.set()
        waker = self._waker
        if waker is not None:
            self._waker = None
            self._idle = False
            waker()

    def park(self, waker: Callable[[], object]) -> None:
        """The owner ends its task while nothing is queued (:meth:`take`
        returned nothing and the subscription is live): the subscription
        counts as idle, so the broker writes to it directly, and *waker* is
        called, once, when the owner is wanted again (what a direct write did
        not take, a delivery it cannot write directly, the subscription's
        end). An idle session keeps no task for writing."""
        self._idle = True
        self._waker = waker

    def unpark(self) -> None:
        """The owner is going: nobody is woken any more, and the broker no
        longer counts the subscription as idle."""
        self._waker = None
        self._idle = False

    def write_directly(self, writer: DirectWriter | None) -> None:
        """Let the broker write this subscription's deliveries itself while
        the owner is idle in :meth:`get_batch`: once per wake-up of its
        flusher (after a commit's events are all queued), *writer* gets all
        that is queued. One call per subscriber instead of waking one task
        per subscriber: what makes fan-out cheap. The owner's own loop
        still writes whatever *writer* does not (a socket that is full, a
        frame written in part)."""
        self._direct = writer

    def _flush(self) -> None:
        """The broker's flusher: write what is queued directly, or wake the owner."""
        self._marked = False
        batch = self._items
        if not batch or self.failed is not None:
            return
        writer = self._direct
        if not self._idle or writer is None:
            self._wake_owner()
            return
        self._items = []
        try:
            left = writer(batch)
        except Exception:
            log.exception("a direct write failed")
            left = None
        if left is None:  # nothing written: the owner writes it all
            left = Left(batch)
        if left.items:  # what the writer did not take goes first
            self._items[:0] = left.items
        if left.items or left.owed:
            self._wake_owner()
        self._room()

    def _room(self) -> None:
        """Wake the owner if it waits for room (:meth:`put`)."""
        if self._space is not None:
            self._space.set()

    async def put(self, event: Event | None, frame: str) -> bool:
        """Queue a delivery of the owner's, waiting for room instead of failing
        (a replay larger than the buffer). False if the subscription ended."""
        while len(self._items) >= self.capacity and self.failed is None:
            space = self._space if self._space is not None else trio.Event()  # one for all waiters
            self._space = space
            try:
                await space.wait()
            finally:
                if self._space is space:
                    self._space = None
        return self.push(event, frame)

    def deliver(self, event: Event) -> bool:
        """Called by the broker: queue (or hold, while held) a published event."""
        if event.chat and not self.chat:
            return False
        if self._skip is not None and self._skip(event):
            return False
        position = self.broker.delivering
        if position is not None and position <= self.after:
            return False  # committed before this subscription began
        if self._held is not None:
            if self.failed is not None:
                return False
            if len(self._held) >= self.capacity:
                self.fail(EndReason.LAGGING)
                return False
            self._held.append(event)
            return True
        return self.push(event, event.frame)

    def hold(self) -> None:
        """Keep published events aside (e.g. during a resume replay)."""
        if self._held is None:
            self._held = collections.deque()

    async def release(self, skip: Callable[[Event], bool] | None = None) -> None:
        """Queue the held events (waiting for room), dropping those for which
        ``skip(event)`` is true; then deliver live again, still dropping
        those (with several processes an event may reach this one after the
        replay that already delivered it, ``services/bus.py``)."""
        self._skip = skip
        held = self._held
        while held:
            event = held.popleft()
            if (skip is None or not skip(event)) and not await self.put(event, event.frame):
                break
        self._held = None

    def fail(self, reason: EndReason) -> None:
        """End the subscription for *reason* (the first reason stands) and
        wake its owner, which says why (``ends.ENDINGS``)."""
        if self.failed is None:
            self.failed = reason
            if reason is EndReason.LAGGING:
                self.broker._drops += 1
            self._wake_owner()
            self._room()

    async def get_batch(self, max_items: int = 256) -> list[Queued]:
        """Wait for deliveries and take up to *max_items* of them, oldest first.

        Returns an empty list once the subscription has failed and is drained
        of nothing more to send (check :attr:`failed`).
        """
        while not self._items and self.failed is None:
            self._idle = True
            try:
                await self._wakeup.wait()
            finally:
                self._idle = False
            self._wakeup = trio.Event()
        return self.take(max_items)

    def take(self, max_items: int = 256) -> list[Queued]:
        """Take up to *max_items* deliveries queued now, oldest first, without
        waiting: empty if nothing is queued, or once the subscription has
        failed (lagging, removed, ...: the owner reports and disconnects;
        what was queued before ``closed`` or ``unavailable`` is still given:
        ``Ending.keeps_queue``)."""
        failed = self.failed
        if failed is not None and not ENDINGS[failed].keeps_queue:
            return []  # lagging or removed: the owner reports and disconnects
        items = self._items
        if len(items) <= max_items:
            batch, self._items = items, []
        else:
            batch = items[:max_items]
            del items[:max_items]
        self._room()
        return batch

    def close(self) -> None:
        self.broker._unsubscribe(self)
        self.fail(EndReason.CLOSED)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class BrokerStatistics:
    subscribers: int
    queued: int
    drops: int
    published: int
    rooms: int
    #: deliveries to subscriptions, all events (``/metrics``)
    delivered: int = 0
    #: messages this process committed (``/metrics``)
    messages_committed: int = 0

    def to_json(self) -> dict[str, int]:
        return {
            "subscribers": self.subscribers,
            "queuedEvents": self.queued,
            "drops": self.drops,
            "published": self.published,
            "rooms": self.rooms,
        }


class StreamFollower(Protocol):
    """What the broker asks of the process's bus (``services/bus.py``) when
    several processes share the store. Declared here, by what the broker
    uses, so that the broker depends on no service."""

    @property
    def following(self) -> bool:
        """Whether the bus follows the cluster's stream now: from when it
        took its place in the stream until it stops, committed events reach
        the broker through it (:meth:`Broker.apply`), in the stream's
        order, not at their local commit (:meth:`Broker.committed`)."""

    def head(self) -> int:
        """The stream position up to which the bus applied the stream here:
        a subscription made now receives the events after it only."""

    def local_commit(self) -> None:
        """This process committed something: read the stream at once (while
        the bus runs). Must not block."""

    def send_live(self, event: Event) -> None:
        """Carry *event*, which is not stored, to the other processes (at
        most once; while the bus runs). Must not block."""


class Broker:
    """Publish/subscribe by room. All methods are synchronous and non-blocking.

    Args:
        default_capacity: deliveries a subscription may hold (unless it
            is given its own).
        bus: with several processes on one database, the process's bus
            (:class:`StreamFollower`): while it follows the stream, committed
            events come from it, and live ones go to the other processes
            through it. ``None``: one process, alone with its store.
    """

    def __init__(self, default_capacity: int = 1024, *, bus: StreamFollower | None = None) -> None:
        self.default_capacity = default_capacity
        self._rooms_of: dict[str, set[str]] = collections.defaultdict(set)
        self._members: dict[str, set[str]] = collections.defaultdict(set)
        self._subs_of: dict[str, set[Subscription]] = collections.defaultdict(set)
        self._room_subs: dict[str, set[Subscription]] = collections.defaultdict(set)
        #: which of its rooms a participant may read (``authz.Readable``), for
        #: those the visibility decision restricts: a room's events reach
        #: only its members who may read it (absent: every room it is in)
        self._readable: dict[str, Callable[[str], bool]] = {}
        self._all: set[Subscription] = set()
        self._drops = 0
        self._published = 0
        self._delivered = 0
        self._messages_committed = 0
        self._observers: list[Callable[[Event], object]] = []
        self._bus = bus
        #: the stream position of the events being delivered, while the bus
        #: applies a row (None otherwise)
        self.delivering: int | None = None
        self._invalidators: dict[str, list[Callable[[str], object]]] = collections.defaultdict(list)
        #: :meth:`run` is running: subscriptions may be written directly
        self.flushing = False
        self._marked: list[Subscription] = []
        #: marked subscriptions whose owners wait for their sends' echoes
        self._first: list[Subscription] = []
        self._flush_wanted = trio.Event()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The flusher: writes the deliveries of idle subscriptions that
        write directly (:meth:`Subscription.write_directly`), once what was
        published together has all been queued. Runs until cancelled."""
        self.flushing = True
        task_status.started()
        flushing: collections.deque[Subscription] = collections.deque()
        try:
            while True:
                await self._flush_wanted.wait()
                # one pass of the scheduler first: readers that have frames
                # and the store's writer go before the flush, and what they
                # commit now joins it (fewer, fuller writes per subscriber
                # under load; one pass more of latency when idle)
                await trio.lowlevel.checkpoint()
                self._flush_wanted = trio.Event()
                flushing.extend(self._first)
                flushing.extend(self._marked)
                self._first, self._marked = [], []
                n = 0
                while flushing:
                    flushing.popleft()._flush()
                    n += 1
                    if n % _FLUSH_SLICE == 0:
                        # a room of thousands: let other tasks (the sender's
                        # answer, its next frames) in between slices
                        await trio.lowlevel.checkpoint()
        finally:
            self.flushing = False
            flushing.extend(self._first)
            flushing.extend(self._marked)
            self._first, self._marked = [], []
            for sub in flushing:  # not written: their owners write them
                sub._marked = False
                sub._wake_owner()

    @property
    def bus(self) -> StreamFollower | None:
        """The process's bus it was built with (several processes), or None."""
        return self._bus

    @property
    def clustered(self) -> bool:
        """Whether committed events come from the bus now, which follows the
        cluster's stream (:attr:`StreamFollower.following`)."""
        return self._bus is not None and self._bus.following

    def stream_head(self) -> int:
        """The stream position a subscription made now begins after (the
        bus's :meth:`~StreamFollower.head`; 0 without a bus)."""
        return 0 if self._bus is None else self._bus.head()

    def _mark(self, sub: Subscription) -> None:
        (self._first if sub.sending else self._marked).append(sub)
        self._flush_wanted.set()

    # membership mirror ------------------------------------------------------

    def load(self, memberships: Iterable[tuple[str, str]]) -> None:
        """Replace the membership mirror with (room_id, participant_id) pairs."""
        self._rooms_of.clear()
        self._members.clear()
        self._room_subs.clear()
        for room_id, participant_id in memberships:
            self._rooms_of[participant_id].add(room_id)
            self._members[room_id].add(participant_id)
        for sub in self._all:
            for room_id in self._rooms_of.get(sub.participant_id, ()):
                if self._sees(sub.participant_id, room_id):
                    self._room_subs[room_id].add(sub)

    def _sees(self, participant_id: str, room_id: str) -> bool:
        readable = self._readable.get(participant_id)
        return readable is None or readable(room_id)

    def join(self, room_id: str, participant_id: str) -> None:
        self._rooms_of[participant_id].add(room_id)
        self._members[room_id].add(participant_id)
        if self._sees(participant_id, room_id):
            for sub in self._subs_of.get(participant_id, ()):
                self._room_subs[room_id].add(sub)

    def set_readable(
        self, participant_id: str, readable: Callable[[str], bool] | None
    ) -> tuple[frozenset[str], frozenset[str]]:
        """Which of its rooms *participant_id*'s subscriptions receive from
        now on: those *readable* allows (``None``: all). The visibility
        decision is the services' (``authz.readable_rooms``); the broker
        only applies it. Returns the rooms it stopped and started seeing."""
        rooms = self._rooms_of.get(participant_id, ())
        before = {r for r in rooms if self._sees(participant_id, r)}
        if readable is None:
            self._readable.pop(participant_id, None)
        else:
            self._readable[participant_id] = readable
        after = {r for r in rooms if self._sees(participant_id, r)}
        subs = self._subs_of.get(participant_id, ())
        for room_id in before - after:
            room_subs = self._room_subs.get(room_id)
            if room_subs is not None:
                room_subs.difference_update(subs)
        for room_id in after - before:
            self._room_subs[room_id].update(subs)
        return frozenset(before - after), frozenset(after - before)

    def readable_of(self, participant_id: str) -> Callable[[str], bool] | None:
        """The rooms *participant_id* may read, as last set (``None``: all)."""
        return self._readable.get(participant_id)

    def subscribed(self) -> frozenset[str]:
        """The participants with a subscription here."""
        return frozenset(self._subs_of)

    def leave(self, room_id: str, participant_id: str) -> None:
        self._rooms_of.get(participant_id, set()).discard(room_id)
        self._members.get(room_id, set()).discard(participant_id)
        subs = self._room_subs.get(room_id)
        if subs:
            subs.difference_update(self._subs_of.get(participant_id, ()))

    def drop_room(self, room_id: str) -> None:
        for participant_id in self._members.pop(room_id, set()):
            self._rooms_of.get(participant_id, set()).discard(room_id)
        self._room_subs.pop(room_id, None)

    def drop_participant(self, participant_id: str) -> None:
        # unsubscribe first: it finds the rooms to clean through _rooms_of
        for sub in list(self._subs_of.get(participant_id, ())):
            sub.fail(EndReason.REMOVED)
            self._unsubscribe(sub)
        for room_id in self._rooms_of.pop(participant_id, set()):
            self._members.get(room_id, set()).discard(participant_id)
        self._readable.pop(participant_id, None)

    def disconnect(self, participant_id: str, reason: EndReason) -> int:
        """End *participant_id*'s subscriptions as *reason* (their owners tell
        the client and close), keeping its memberships; how many ended."""
        subs = list(self._subs_of.get(participant_id, ()))
        for sub in subs:
            sub.fail(reason)
            self._unsubscribe(sub)
        return len(subs)

    def disconnect_all(self, reason: EndReason) -> int:
        """End every subscription as *reason*; how many ended."""
        subs = list(self._all)
        for sub in subs:
            sub.fail(reason)
            self._unsubscribe(sub)
        return len(subs)

    def disconnect_token(self, participant_id: str, token_id: str, reason: EndReason) -> int:
        """End the subscriptions of *participant_id* opened with the token
        *token_id* as *reason*; how many ended."""
        subs = [s for s in self._subs_of.get(participant_id, ()) if s.token_id == token_id]
        for sub in subs:
            sub.fail(reason)
            self._unsubscribe(sub)
        return len(subs)

    def rooms_of(self, participant_id: str) -> frozenset[str]:
        return frozenset(self._rooms_of.get(participant_id, ()))

    def members(self, room_id: str) -> frozenset[str]:
        return frozenset(self._members.get(room_id, ()))

    # subscriptions ----------------------------------------------------------

    def subscribe(
        self,
        participant_id: str,
        capacity: int | None = None,
        *,
        chat: bool = True,
        readable: Callable[[str], bool] | None = None,
    ) -> Subscription:
        """A subscription to the events of every room *participant_id* is in
        (now or later) that *readable* allows (see :meth:`set_readable`; it
        applies to all of the participant's subscriptions), to mesh-wide
        events and to events sent to it alone. ``chat=False`` leaves out
        chat traffic. Close it (or use ``with``)."""
        self.set_readable(participant_id, readable)
        sub = Subscription(self, participant_id, capacity or self.default_capacity, chat=chat)
        self._all.add(sub)
        self._subs_of[participant_id].add(sub)
        for room_id in self._rooms_of.get(participant_id, ()):
            if self._sees(participant_id, room_id):
                self._room_subs[room_id].add(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        if sub not in self._all:
            return
        self._all.discard(sub)
        subs = self._subs_of.get(sub.participant_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs_of[sub.participant_id]
                # decided again when it next subscribes
                self._readable.pop(sub.participant_id, None)
        for room_id in self._rooms_of.get(sub.participant_id, ()):
            room_subs = self._room_subs.get(room_id)
            if room_subs is not None:
                room_subs.discard(sub)

    def observe(self, observer: Callable[[Event], object]) -> None:
        """Call *observer* with every published event (synchronously: it must
        not block, e.g. it sets a ``trio.Event``). The federation's link
        tasks wake this way."""
        self._observers.append(observer)

    # committed changes -------------------------------------------------------

    def committed(self, entries: list[Entry]) -> None:
        """The store, after a local commit: what the unit recorded. Alone,
        apply it all now; clustered, add the new memberships now (so that
        this process's next check of them sees them) and leave the rest to
        the bus, which applies it in the stream's order (a member who leaves
        still gets the ``participant_left`` that comes before the leave)."""
        for entry in entries:
            if isinstance(entry, Publish) and entry.event.type == "message":
                self._messages_committed += 1
        bus = self._bus
        if bus is None or not bus.following:
            self.apply(entries)
            return
        for entry in entries:
            if isinstance(entry, Join):
                self._change(entry)
        bus.local_commit()

    def apply(self, entries: list[Entry]) -> None:
        """Deliver events and apply routing changes, in order (the bus, for
        every process's commits; :meth:`committed` alone). Other changes
        (cache invalidations) are the bus's."""
        for entry in entries:
            if isinstance(entry, Publish):
                self.publish(entry.event)
            elif isinstance(entry, SendTo):
                event = entry.event
                # a read receipt is the DM's: only for those who may read it
                # (as this process wrote it, or another: a relayed frame)
                receipt = isinstance(event, DmRead) or (
                    isinstance(event, Relayed) and event.kind == DmRead.type
                )
                room_id = event.room_id if receipt else None
                if room_id is not None and not self._sees(entry.participant_id, room_id):
                    continue
                self.send_to(entry.participant_id, event)
            elif not isinstance(entry, Invalidate):
                self._change(entry)

    def _change(self, change: Routing) -> None:
        match change:
            case Join(room_id, participant_id):
                self.join(room_id, participant_id)
            case Leave(room_id, participant_id):
                self.leave(room_id, participant_id)
            case DropRoom(room_id):
                self.drop_room(room_id)
            case DropParticipant(participant_id):
                self.drop_participant(participant_id)
            case Disconnect(participant_id, reason):
                self.disconnect(participant_id, reason)
            case DisconnectToken(participant_id, token_id, reason):
                self.disconnect_token(participant_id, token_id, reason)

    def publish_live(self, event: Event) -> int:
        """Publish an event that is not stored (typing, presence coming
        online): here at once, and to the other processes through the bus."""
        if self._bus is not None:
            self._bus.send_live(event)
        return self.publish(event)

    # publishing -------------------------------------------------------------

    def publish(self, event: Event) -> int:
        """Deliver *event* to its room's subscribers (or to all, for mesh-wide
        events). Never blocks; returns how many subscriptions got it."""
        self._published += 1
        for observer in self._observers:
            observer(event)
        targets = self._all if event.room_id is None else self._room_subs.get(event.room_id, ())
        exclude = event.exclude
        delivered = 0
        for sub in list(targets):
            if sub.participant_id != exclude and sub.deliver(event):
                delivered += 1
        self._delivered += delivered
        return delivered

    def send_to(self, participant_id: str, event: Event) -> int:
        """Deliver *event* to *participant_id*'s subscriptions only (a command
        for an agent). Never blocks; returns how many subscriptions got it."""
        self._published += 1
        delivered = sum(
            1 for sub in list(self._subs_of.get(participant_id, ())) if sub.deliver(event)
        )
        self._delivered += delivered
        return delivered

    def statistics(self) -> BrokerStatistics:
        return BrokerStatistics(
            subscribers=len(self._all),
            queued=sum(len(sub) for sub in self._all),
            drops=self._drops,
            published=self._published,
            rooms=len(self._members),
            delivered=self._delivered,
            messages_committed=self._messages_committed,
        )
