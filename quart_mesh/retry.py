"""Retrying transient faults: the one helper every long-lived loop uses.

A fault is *transient* when trying again later may succeed: the store is busy
or briefly unavailable (:class:`~quart_mesh.errors.Unavailable`), a peer, a
webhook receiver or the registry cannot be reached or answers 5xx
(:class:`~quart_mesh.errors.Transient`, raised by the component at its
boundary). :func:`retrying` waits and tries again, with exponential backoff
and jitter, logging each failure once with its cause and the wait.

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

__all__ = ["Backoff", "retrying"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: the faults :func:`retrying` always treats as transient
TRANSIENT: tuple[type[Exception], ...] = (Unavailable, Transient)


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
        #: what :func:`retrying` is doing with it, and where it logs
        self._what: str | None = None
        self._logger = log

    def next(self) -> float:
        """The delay before the next attempt (and count one more failure)."""
        delay: float = min(self.cap, self.first * 2.0 ** min(self.failures, 60))
        self.failures += 1
        return delay * random.uniform(1 - self.jitter, 1 + self.jitter)

    def reset(self) -> None:
        """A success: the next failure waits *first* again."""
        if self.failures and self._what is not None:
            self._logger.info("%s recovered after %d failed attempt(s)", self._what, self.failures)
        self.failures = 0


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

    Returns:
        What the first successful attempt returned.

    Raises:
        Whatever is not transient, at once (a bug: see the module docstring).

    Cancellation: the waits are ordinary checkpoints; cancelling stops retrying.
    """
    backoff = backoff or Backoff()
    logger = logger or log
    backoff._what, backoff._logger = what, logger
    while True:
        try:
            result = await attempt()
        except TRANSIENT as error:
            delay = max(backoff.next(), getattr(error, "after", 0.0))
            logger.warning("%s failed (%s); retrying in %.1f s", what, describe(error), delay)
            if on_failure is not None:
                on_failure(error, delay)
            await trio.sleep(delay)
            continue
        backoff.reset()
        return result
