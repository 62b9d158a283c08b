"""Exponential backoff for reconnecting and restarting."""

from __future__ import annotations


class Backoff:
    """Delays of *initial* seconds doubling up to *maximum*; ``reset()``
    after a success starts again from *initial*."""

    def __init__(self, initial: float = 0.5, maximum: float = 30.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self._next = initial

    def next_delay(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self.maximum)
        return delay

    def reset(self) -> None:
        self._next = self.initial
