"""Seats: how many WebSocket sessions and waiting long polls one participant,
and one client address, may hold at once.

Each open session (once authenticated) and each waiting long poll takes a
seat for as long as it lasts, counted per participant and per client
address (``max_sessions_per_*``, ``max_polls_per_*`` in
:class:`~quart_mesh.config.Limits`). Addresses the rate limits exempt
(loopback by default: a reverse proxy on the same host) are not counted
per address. Counts are kept in this process: with several processes on
PostgreSQL each process allows the limits on its own
(``docs/decisions/0054-quotas-and-bounded-documents.md``).
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator
from typing import Literal

from ..config import Limits
from ..errors import RateLimited
from .ratelimit import RateLimiter, address_key

__all__ = ["Seats"]

Kind = Literal["session", "poll"]

#: seconds a refused client is told to wait before trying again
RETRY_AFTER = 5.0


class Seats:
    """Counts of open WebSocket sessions and waiting long polls (this process)."""

    def __init__(self, limits: Limits, rate_limits: RateLimiter) -> None:
        self._limits = limits
        #: decides which addresses are exempt, as the per-address rate limits do
        self._rate = rate_limits
        #: (kind, participant id) -> seats held
        self._participants: collections.Counter[tuple[Kind, str]] = collections.Counter()
        #: (kind, address) -> seats held
        self._addresses: collections.Counter[tuple[Kind, str]] = collections.Counter()

    def held(self, kind: Kind, participant_id: str) -> int:
        """Seats of *kind* *participant_id* holds now."""
        return self._participants[kind, participant_id]

    @contextlib.contextmanager
    def hold(self, kind: Kind, participant_id: str, address: str | None) -> Iterator[None]:
        """Take a seat of *kind* for *participant_id* from *address* for the
        life of the ``with`` block (given back however it ends, cancellation
        included).

        Raises:
            RateLimited: the participant (``too_many_sessions`` /
                ``too_many_polls``) or the address holds as many as allowed.
        """
        limits = self._limits
        if kind == "session":
            per_participant = limits.max_sessions_per_participant
            per_address = limits.max_sessions_per_address
            what, code = "WebSocket sessions", "too_many_sessions"
        else:
            per_participant = limits.max_polls_per_participant
            per_address = limits.max_polls_per_address
            what, code = "long polls", "too_many_polls"
        mine = (kind, participant_id)
        if self._participants[mine] >= per_participant:
            raise RateLimited(
                f"you have {per_participant} {what} open, the most allowed: close one first",
                RETRY_AFTER,
                code,
            )
        # exempt and counted as the rate limits do (an IPv6 client by its /64)
        place = (
            None
            if address is None or self._rate.is_exempt(address)
            else (kind, address_key(address))
        )
        if place is not None and self._addresses[place] >= per_address:
            raise RateLimited(
                f"{per_address} {what} are open from your address, the most allowed",
                RETRY_AFTER,
                code,
            )
        self._participants[mine] += 1
        if place is not None:
            self._addresses[place] += 1
        try:
            yield
        finally:
            _give_back(self._participants, mine)
            if place is not None:
                _give_back(self._addresses, place)


def _give_back(counter: collections.Counter[tuple[Kind, str]], key: tuple[Kind, str]) -> None:
    counter[key] -= 1
    if counter[key] <= 0:
        del counter[key]
