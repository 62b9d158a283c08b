"""A session's send pipeline: ``send_message`` frames queued in the store
and awaited in order, past the session's end if need be.

A client may pipeline its sends: the session queues each in the store at
once (:meth:`Sends.queue`, so that the frames of one read are all queued
before the store's writer runs and commit together) and one task, the
*settler*, awaits them in the order queued — the order the store commits
them — reporting each failure to the client as an ``error`` frame with the
send's ``clientId``. At most :data:`MAX_IN_FLIGHT` sends wait at once; the
reader waits for a slot beyond that.

Each wait is shielded: cancelling the session would withdraw the unit from
the store's queue, and what was read off the socket must be stored. So
when the session ends, the sends it queued are still awaited, for at most
``SETTLE_TIMEOUT`` seconds from :meth:`Sends.settle_by`'s call; what is not
stored by then is dropped with a warning.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Awaitable, Callable

import trio

from ..broker import Subscription
from ..errors import MeshError
from .replies import error_reply, retry_after

__all__ = ["MAX_IN_FLIGHT", "Sends"]

log = logging.getLogger(__name__)

#: sends of one session queued but not yet stored
MAX_IN_FLIGHT = 64


class Sends:
    """One session's sends queued in the store, oldest first. Made on the
    session's first send (most sessions never send); its settler runs in
    the session's *nursery*, started by the first send, and writes errors
    to the session's subscription *sub*."""

    __slots__ = ("_more", "_nursery", "_queued", "_settle_by", "_settling", "_slots", "_sub")

    def __init__(
        self, nursery: trio.Nursery, sub: Subscription, *, max_in_flight: int = MAX_IN_FLIGHT
    ) -> None:
        self._nursery = nursery
        self._sub = sub
        #: bounds the sends queued and not yet stored
        self._slots = trio.Semaphore(max_in_flight)
        self._queued: collections.deque[tuple[Awaitable[object], str | None]] = collections.deque()
        #: set when a send is queued while the settler waits (None: no settler runs)
        self._more: trio.Event | None = None
        #: the shielded wait of the send being awaited, and when such waits
        #: must end (:meth:`settle_by`)
        self._settling: trio.CancelScope | None = None
        self._settle_by = math.inf

    async def queue(self, submit: Callable[[], Awaitable[object]], client_id: str | None) -> None:
        """Queue a send: *submit* queues it in the store (and raises at once
        for a send refused before it is queued); the settler awaits what it
        returns. Waits only for a slot, when :data:`MAX_IN_FLIGHT` sends wait."""
        # a slot first: a send queued here is always awaited by the settler,
        # even if the session ends while this one waits for room. Taken
        # without a pass through the scheduler while there is room, so the
        # frames of one read are all queued before the store's writer runs
        # (one batch for them, not one each); a full window waits
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            await self._slots.acquire()
        try:
            stored = submit()
        except BaseException:
            self._slots.release()
            raise
        self._queued.append((stored, client_id))
        if self._more is None:  # no settler runs: the first send, or after one ended
            self._more = trio.Event()
            self._nursery.start_soon(self._settler)
        self._more.set()
        # the broker's flusher writes to a sender first (its echoes are
        # what a pipelining client waits for)
        self._sub.sending = True

    def settle_by(self, deadline: float) -> None:
        """The session is ending: what is queued is awaited until *deadline*
        (trio's clock), no longer."""
        self._settle_by = deadline
        if self._settling is not None:
            self._settling.deadline = deadline

    async def _settler(self) -> None:
        """Await the queued sends in the order queued and report failures.
        One task for all of a session's sends, not one each. It ends
        (cancelled with the session) once nothing is queued; what is queued
        after that (the reader hands over frames it had read already,
        passing no checkpoint) is awaited on the way out, or by a new one."""
        queued = self._queued
        try:
            while True:
                while not queued:
                    self._sub.sending = False
                    more = self._more
                    assert more is not None
                    await more.wait()
                    self._more = trio.Event()
                await self._settle_first()
        finally:
            while queued:  # shielded waits: they run though this task is cancelled
                await self._settle_first()
            self._more = None

    async def _settle_first(self) -> None:
        stored, client_id = self._queued[0]
        with trio.CancelScope(shield=True, deadline=self._settle_by) as settling:
            self._settling = settling
            try:
                await self._stored_or_error(stored, client_id)
            finally:
                self._settling = None
                self._queued.popleft()
                self._slots.release()
        if settling.cancelled_caught:
            log.warning("a send queued by a session that ended was not stored in time")

    async def _stored_or_error(self, stored: Awaitable[object], client_id: str | None) -> None:
        try:
            await stored
        except MeshError as error:
            self._sub.push(
                None,
                error_reply(
                    error.message, error.code, "send_message", retry_after(error), client_id
                ),
            )
        except Exception:
            log.exception("send_message failed")
            self._sub.push(
                None,
                error_reply("internal error", "internal_error", "send_message", None, client_id),
            )
