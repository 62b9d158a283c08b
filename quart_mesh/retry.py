"""Retrying transient faults: the one helper every long-lived loop uses.

A fault is *transient* when trying again later may succeed: the store is busy
or briefly unavailable (:class:`~quart_mesh.errors.Unavailable`), a peer, a
webhook receiver or the registry cannot be reached or answers 5xx
(:class:`~quart_mesh.errors.Transient`, raised by the component at its
boundary). :func:`retrying` waits and tries again, with exponential backoff
and jitter, logging each failure once with its cause and the wait.

A loop whose failures are a known fault (a federation peer down, a webhook
receiver failing: ``faults.py``) passes ``fault=(faults, kind, key)``:
then the first failure starts the fault (one line), later ones are only
counted, and the next success (or :meth:`Backoff.reset`) ends it. A
failure the store reported already (a :class:`~quart_mesh.faults.KnownFault`:
the store unavailable, its disk full) is not logged again by any loop.

Anything else is a bug. It is not caught here: it ends the component, which
ends the node's one nursery, and the process exits non-zero with the
traceback logged (``server.serve``, ``cli``), so that whatever supervises the
process (systemd, Docker, an embedding program) starts it again.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from .errors import Transient, Unavailable
from .faults import Faults, KnownFault

__all__ = ["Backoff", "FaultOf", "retrying"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: the faults :func:`retrying` always treats as transient
TRANSIENT: tuple[type[Exception], ...] = (Unavailable, Transient)

#: where a loop's failures are reported: the registry, the fault's kind and key
FaultOf = tuple[Faults, str, str]


class Backoff:
    """Delays that double from *first* up to *cap*, each scaled by a random
    factor in ``1 ± jitter`` (so that many loops failing together do not
    retry together). :meth:`reset` after a success: a loop that never
    returns (a link, a delivery loop) calls it when it makes progress, and
    the recovery is logged then."""

    def __init__(self, first: float = 0.5, cap: float = 30.0, *, jitter: float = 0.2) -> None:
        if not 0 < first <= cap:
            raise ValueError("need 0 < first <= cap")
        self.first = first
        self.cap = cap
        self.jitter = jitter
        self.failures = 0
        #: failures logged as warnings since the last success (not those of a
        #: known fault, which the fault's own lines tell)
        self._warned = 0
        #: what :func:`retrying` is doing with it, where it logs, and the
        #: fault its failures are (ended by :meth:`reset`)
        self._what: str | None = None
        self._logger = log
        self._fault: FaultOf | None = None

    def next(self) -> float:
        """The delay before the next attempt (and count one more failure)."""
        delay: float = min(self.cap, self.first * 2.0 ** min(self.failures, 60))
        self.failures += 1
        return delay * random.uniform(1 - self.jitter, 1 + self.jitter)

    def reset(self) -> None:
        """A success: the next failure waits *first* again, and the loop's
        fault (if it was given one) has ended."""
        if self._warned and self._what is not None:
            self._logger.info("%s recovered after %d failed attempt(s)", self._what, self.failures)
        if self._fault is not None:
            faults, kind, key = self._fault
            faults.cleared(kind, key=key)
        self.failures = self._warned = 0


def describe(error: BaseException) -> str:
    """The cause of a failure in one line: its message, else its type."""
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


async def retrying(
    what: str,
    attempt: Callable[[], Awaitable[T]],
    *,
    backoff: Backoff | None = None,
    on_failure: Callable[[Exception, float], None] | None = None,
    logger: logging.Logger | None = None,
    fault: FaultOf | None = None,
) -> T:
    """Await ``attempt()`` until it returns, retrying transient faults.

    Args:
        what: what is being done, for the log (``"saving read positions"``).
        attempt: called again for every attempt.
        backoff: the delays to use (shared with the caller, who may
            :meth:`~Backoff.reset` it after progress); a fresh default one
            if not given. A fault's own ``after`` (a receiver's Retry-After)
            lengthens the wait.
        on_failure: called with the fault and the wait before each retry
            (for status pages).
        logger: where failures are logged (default: this module's).
        fault: ``(faults, kind, key)``: the failures are that fault,
            reported there (its start logged once, then counted) instead of
            a warning each; a success ends it.

    Returns:
        What the first successful attempt returned.

    Raises:
        Whatever is not transient, at once (a bug: see the module docstring).

    Cancellation: the waits are ordinary checkpoints; cancelling stops retrying.
    """
    backoff = backoff or Backoff()
    logger = logger or log
    backoff._what, backoff._logger, backoff._fault = what, logger, fault
    while True:
        try:
            result = await attempt()
        except TRANSIENT as error:
            delay = max(backoff.next(), getattr(error, "after", 0.0))
            _failed(what, error, delay, logger, backoff)
            if on_failure is not None:
                on_failure(error, delay)
            await trio.sleep(delay)
            continue
        backoff.reset()
        return result


def _failed(
    what: str, error: Exception, delay: float, logger: logging.Logger, backoff: Backoff
) -> None:
    """Tell of one failed attempt: not at all (beyond debug) if the store
    reported it as a known fault, as the loop's fault if it has one, else
    as a warning."""
    if isinstance(error, KnownFault):
        logger.debug("%s failed (%s); retrying in %.1f s", what, describe(error), delay)
    elif backoff._fault is not None:
        faults, kind, key = backoff._fault
        faults.failed(kind, f"{what}: {describe(error)}", key=key)
        logger.debug("%s failed (%s); retrying in %.1f s", what, describe(error), delay)
    else:
        backoff._warned += 1
        logger.warning("%s failed (%s); retrying in %.1f s", what, describe(error), delay)
