"""Known faults, each logged once: when it starts, now and then while it
lasts, and when it ends.

A *fault* is a class of failure the node expects and rides out: the disk is
full, the store cannot be reached, descriptors ran out, a federation peer is
down, a webhook receiver keeps failing. Without this, each failed request or
retry logged its own line (a full disk wrote thousands of identical errors a
second, and tracebacks). Instead every place that meets one reports it here:

- :meth:`Faults.failed` on each failure: the first since the fault last
  ended logs one line with its cause (``fault started``); later ones are
  only counted, and at most once every ``summary_every`` seconds (a
  minute) a failure logs one summary line with the count (``fault goes
  on``);
- :meth:`Faults.cleared` on a success: if the fault was active, one line
  says it ended, after how long and how many failures; otherwise it costs a
  dictionary lookup.

A failure may name its *source* (what failed: the store's writes, its
reads), and a success the sources it proves working: a fault ends once
every source that failed since it started has succeeded, so a read that
works does not end what a failed write started (SQLite's write lock held
by another process: writes fail, reads work). Failures without a source
(``""``) are ended by any success.

Faults are keyed by *kind* (the constants below) and an optional *key* (which
peer, which receiver). The registry is thread-safe: the store reports from
its worker threads. ``/metrics`` shows the active faults and the failures per
kind; ``/api/health/ready`` and the console read :meth:`Faults.active`
(``docs/decisions/0077-each-fault-logged-once.md``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Final

__all__ = [
    "DESCRIPTORS",
    "DISK_FULL",
    "KINDS",
    "PEER_DOWN",
    "RECEIVER_FAILING",
    "STORE_CORRUPT",
    "STORE_UNAVAILABLE",
    "Fault",
    "Faults",
    "KnownFault",
]

#: the data folder's filesystem is full: writes fail
DISK_FULL: Final = "disk_full"
#: the store cannot be reached or refuses work (PostgreSQL down, I/O errors)
STORE_UNAVAILABLE: Final = "store_unavailable"
#: SQLite reports its file damaged (``database disk image is malformed``)
STORE_CORRUPT: Final = "store_corrupt"
#: the process ran out of file descriptors (``accept`` returned EMFILE)
DESCRIPTORS: Final = "descriptors"
#: a federation peer cannot be reached or keeps failing (key: the connection)
PEER_DOWN: Final = "peer_down"
#: a webhook bot's receiver keeps failing (key: the bot's id)
RECEIVER_FAILING: Final = "receiver_failing"

KINDS: Final = (
    DISK_FULL,
    STORE_UNAVAILABLE,
    STORE_CORRUPT,
    DESCRIPTORS,
    PEER_DOWN,
    RECEIVER_FAILING,
)

#: a fault's kind as its log lines name it
_NAMES: Final = {
    DISK_FULL: "the disk is full",
    STORE_UNAVAILABLE: "the store is unavailable",
    STORE_CORRUPT: "the store's file is damaged",
    DESCRIPTORS: "file descriptors ran out",
    PEER_DOWN: "a federation peer is down",
    RECEIVER_FAILING: "a webhook receiver is failing",
}

log = logging.getLogger(__name__)


class KnownFault:
    """Mixed into an error that was reported to a :class:`Faults` registry
    where it was raised (the store's :class:`~quart_mesh.errors.Unavailable`
    for a failed query): whoever catches it need not log it again."""

    #: the kind it was reported as
    fault_kind: str = ""


@dataclasses.dataclass(slots=True)
class Fault:
    """One fault while it lasts."""

    kind: str
    key: str
    #: the cause of its first failure, then of the latest
    cause: str
    #: what an operator can do (named in its first line)
    hint: str
    #: when it started: wall-clock milliseconds (for people) and the clock's time
    since_ms: int
    started: float
    #: failures since it started
    count: int = 1
    #: failures since its last line
    unlogged: int = 0
    #: the clock's time of its last line
    logged_at: float = 0.0
    #: what failed (:meth:`Faults.failed`'s *source*) and has not succeeded since
    sources: set[str] = dataclasses.field(default_factory=set)

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "key": self.key or None,
            "cause": self.cause,
            "since": self.since_ms,
            "failures": self.count,
        }


class Faults:
    """The node's known faults (one per node; thread-safe).

    Args:
        clock: seconds, for durations and the summary interval (monotonic).
        summary_every: at most one summary line per fault this often.
        logger: where its lines go.
    """

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        summary_every: float = 60.0,
        logger: logging.Logger = log,
    ) -> None:
        self._clock = clock
        self.summary_every = summary_every
        self._log = logger
        self._lock = threading.Lock()
        self._active: dict[tuple[str, str], Fault] = {}
        #: failures per kind since the node started (``mesh_fault_failures_total``)
        self.totals: dict[str, int] = dict.fromkeys(KINDS, 0)

    def failed(
        self, kind: str, cause: str, *, key: str = "", hint: str = "", source: str = ""
    ) -> None:
        """One failure of *kind* (for *key*): logs the fault's start, or a
        summary if its last line is ``summary_every`` old, else only counts.
        *source* says what failed (``"write"``, ``"read"``): only a success
        of that source ends the fault (:meth:`cleared`); ``""``, any."""
        now = self._clock()
        with self._lock:
            self.totals[kind] = self.totals.get(kind, 0) + 1
            fault = self._active.get((kind, key))
            if fault is None:
                fault = Fault(kind, key, cause, hint, int(time.time() * 1000), now, logged_at=now)
                self._active[(kind, key)] = fault
                fault.sources.add(source)
                line: tuple[object, ...] | None = (
                    "fault started: %s%s: %s%s",
                    _NAMES.get(kind, kind),
                    _for(key),
                    cause,
                    f" ({hint})" if hint else "",
                )
            else:
                fault.sources.add(source)
                fault.count += 1
                fault.unlogged += 1
                fault.cause = cause
                line = None
                if now - fault.logged_at >= self.summary_every:
                    line = (
                        "fault goes on: %s%s: %d failure(s) in the last %.0f s, %d since it"
                        " started %.0f s ago; the latest: %s",
                        _NAMES.get(kind, kind),
                        _for(key),
                        fault.unlogged,
                        now - fault.logged_at,
                        fault.count,
                        now - fault.started,
                        cause,
                    )
                    fault.unlogged, fault.logged_at = 0, now
        if line is not None:
            self._log.error(*line)

    def cleared(self, kind: str, *, key: str = "", source: str | tuple[str, ...] = "") -> None:
        """A success where *kind* (for *key*) would fail: of *source* (one,
        or several a success proves working; failures without a source are
        ended by any). Logs the fault's end if it was active and nothing
        else that failed is still to succeed."""
        if (kind, key) not in self._active:  # the common case, without the lock
            return
        now = self._clock()
        worked = {"", source} if isinstance(source, str) else {"", *source}
        with self._lock:
            fault = self._active.get((kind, key))
            if fault is None:
                return
            fault.sources -= worked
            if fault.sources:  # another source still fails
                return
            del self._active[(kind, key)]
        self._log.warning(
            "fault ended: %s%s, after %.1f s and %d failure(s)",
            _NAMES.get(kind, kind),
            _for(key),
            now - fault.started,
            fault.count,
        )

    def forget(self, kind: str, *, key: str = "", why: str) -> None:
        """Stop following *kind* (for *key*) without a success: what failed
        is gone (a link or a webhook bot stopped). Logs one line saying so
        if the fault was active, so that its start is not left open."""
        if (kind, key) not in self._active:
            return
        now = self._clock()
        with self._lock:
            fault = self._active.pop((kind, key), None)
        if fault is not None:
            self._log.info(
                "fault no longer followed: %s%s (%s), after %.1f s and %d failure(s)",
                _NAMES.get(kind, kind),
                _for(key),
                why,
                now - fault.started,
                fault.count,
            )

    def failures(self) -> dict[str, int]:
        """Failures per kind since the node started (a copy of :attr:`totals`)."""
        with self._lock:
            return dict(self.totals)

    def is_active(self, kind: str, key: str = "") -> bool:
        """Whether *kind* (for *key*) is failing now."""
        return (kind, key) in self._active

    def any_active(self, kind: str) -> bool:
        """Whether *kind* is failing now, for any key."""
        with self._lock:
            return any(k == kind for k, _ in self._active)

    def active(self) -> list[Fault]:
        """The faults now, oldest first (copies)."""
        with self._lock:
            faults = [dataclasses.replace(f, sources=set(f.sources)) for f in self._active.values()]
        return sorted(faults, key=lambda f: f.started)


def _for(key: str) -> str:
    return f" ({key})" if key else ""
