"""Presence: who is online, and ``presence`` events when that changes.

A participant is online while it holds at least one open WebSocket session or
waiting long-poll (:meth:`Presence.attached`). When its last one closes and it
does not come back within a short grace period (so a bot polling in a loop, or
a client reconnecting, does not flap), ``lastSeen`` is written and
``presence`` with ``online: false`` is published.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial

import trio

from ..broker import Broker
from ..errors import Unavailable
from ..events import Presence as PresenceEvent
from ..records import Participant, now_ms
from ..retry import retrying
from ..store import Database
from ..store import accounts as accounts_repo

__all__ = ["Presence"]


class Presence:
    def __init__(self, db: Database, broker: Broker, grace: float = 1.0) -> None:
        self._db = db
        self._broker = broker
        self._grace = grace
        self._counts: collections.Counter[str] = collections.Counter()
        self._nursery: trio.Nursery | None = None
        #: participants counted online that have not been announced offline yet
        self._announced: set[str] = set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the grace-period timers; without it, offline is announced at once."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            try:
                await trio.sleep_forever()
            finally:
                self._nursery = None

    def participant_removed(self, participant_id: str) -> None:
        """Close the removed participant's sessions and stop routing to it."""
        self._broker.drop_participant(participant_id)

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

    @asynccontextmanager
    async def attached(self, participant_id: str) -> AsyncIterator[None]:
        """Count the participant online for the duration of the block.

        The offline bookkeeping on exit is shielded: it completes even when
        the block was cancelled.
        """
        self._counts[participant_id] += 1
        if participant_id not in self._announced:
            self._announced.add(participant_id)
            self._broker.publish(
                PresenceEvent(None, participant_id=participant_id, online=True, last_seen=now_ms())
            )
        try:
            yield
        finally:
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
        at = now_ms()

        def publish(_: None) -> None:
            if not self._connected(participant_id):  # not back online meanwhile
                self._announced.discard(participant_id)
                self._broker.publish(
                    PresenceEvent(None, participant_id=participant_id, online=False, last_seen=at)
                )

        await self._db.write(
            lambda conn: accounts_repo.set_last_seen(conn, {participant_id: at}), then=publish
        )
